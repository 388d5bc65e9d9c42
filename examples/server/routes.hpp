// The example server's routes: a request's target and method to the handler
// that answers it (endpoints.hpp), and the answers too small for a handler
// of their own (/healthz, /metrics, the CORS preflight, /view's redirect).
// The table is in server.hpp's opening comment.
//
// Thread-safety: handle runs on the requesting connection's strand; the
// handlers share only ServerState (see server_state.hpp).
#pragma once

#include <memory>
#include <string>

#include <boost/asio/awaitable.hpp>

#include "response.hpp"

namespace zarrcoro::server {

struct ServerState;

// The Reply to a request (its body not read: none is used). Throws only
// what a handler did not expect (the session answers 500).
boost::asio::awaitable<Reply> handle(std::shared_ptr<ServerState> self, http::verb method, std::string target_text,
                                     Preconditions pre, std::string cors_request_headers);

}  // namespace zarrcoro::server
