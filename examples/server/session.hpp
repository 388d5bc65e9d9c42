// One HTTP connection of the example server: reads its requests (HTTP/1.1
// keep-alive), each within its timeouts and size limits, waits for the
// loop's round budget, has the router answer it and sends the answer.
//
// Thread-safety: a session runs on its connection's strand and is the only
// user of the connection's socket, except shutdown (listener.cpp), which
// posts its cancellations to that strand. An API request (/api/) is
// cancelled when its client goes away meanwhile.
#pragma once

#include <memory>

#include <boost/asio/awaitable.hpp>

namespace zarrcoro::server {

struct Conn;
struct ServerState;

// Serves `conn` until the client closes, a timeout, an error, a response
// that cannot keep the connection (Connection: close, a refused method) or
// shutdown; then shuts the socket down and removes the connection
// (ServerState::finished) however it ended.
boost::asio::awaitable<void> session(std::shared_ptr<ServerState> self, std::shared_ptr<Conn> conn);

}  // namespace zarrcoro::server
