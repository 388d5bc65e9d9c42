// Sending a handler's Reply on a connection: the status line and fields as
// Beast writes them, then the body from memory, from a file (its ranges by
// sendfile(2)) or slab by slab as a slice decodes. Copies into the socket
// run on the server's transmit pool in steps (transmit.hpp), except the
// last kSendOnLoop bytes of a body, which go from the loop; the loop only
// waits for the socket to take more, within the write deadline.
//
// Thread-safety: send runs on the connection's strand and must be the only
// operation on its socket meanwhile; it may be cancelled through
// conn->cancel_work (a slice's decode and its writes). add_common may be
// called from any thread.
#pragma once

#include <memory>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>

#include "response.hpp"

namespace zarrcoro::server {

struct Conn;
struct ServerState;

// The headers every response carries: Date (RFC 9110 6.6.1) and CORS.
void add_common(Response& res);

// Finishes and writes `r` (a HEAD response keeps its Content-Length, drops
// the body). Returns false if the connection failed.
awaitable<bool> send(std::shared_ptr<ServerState> self, std::shared_ptr<Conn> conn, Reply r, RequestLine req,
                     bool keep_alive, bool counted, tcp::endpoint peer);

}  // namespace zarrcoro::server
