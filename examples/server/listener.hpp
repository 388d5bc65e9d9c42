// The accept loop of the example server, and its set of open connections
// (the cap on them, and graceful shutdown's drain: ServerState::finished,
// check_drained, shutdown and force_close are defined in listener.cpp).
//
// Thread-safety: accept_loop runs on the state's strand (it owns the
// acceptor); each accepted connection gets a strand of its own, on which
// its session (or its 503) runs. parse_listen and log_exception are
// free of shared state.
#pragma once

#include <exception>
#include <memory>
#include <string>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>

namespace zarrcoro::server {

struct ServerState;

// ServerOptions::listen as an endpoint: "host:port" or "[v6]:port", the host
// numeric or a name (its first IPv4 address, else its first; resolved
// blocking). Throws std::invalid_argument, worded for --listen.
boost::asio::ip::tcp::endpoint parse_listen(const std::string& text);

// Logs an exception that ended a detached coroutine (co_spawn would drop it).
void log_exception(std::exception_ptr e);

// Accepts connections until the acceptor closes or the server stops: each
// one under the connection cap gets a session, the others a 503 and close.
boost::asio::awaitable<void> accept_loop(std::shared_ptr<ServerState> self);

}  // namespace zarrcoro::server
