// See session.hpp.
#include "session.hpp"

#include <sys/socket.h>

#include <cerrno>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/experimental/parallel_group.hpp>
#include <boost/beast/core.hpp>
#include <spdlog/spdlog.h>

#include <zarrcoro/spawn.hpp>

#include "routes.hpp"
#include "send.hpp"
#include "server_state.hpp"

namespace zarrcoro::server {
namespace {

// Completes true when the client has closed its end or the connection
// failed, false when it sent more (a pipelined request) or was cancelled.
// A client that only shut down its sending side looks the same as one
// that left: like nginx for proxied requests, the request is abandoned.
awaitable<bool> client_gone(std::shared_ptr<Conn> conn) {
  auto& sock = conn->stream.socket();
  auto [ec] = co_await sock.async_wait(tcp::socket::wait_read, kTuple);
  if (ec == asio::error::operation_aborted) co_return false;
  if (ec) co_return true;
  char byte;
  const auto n = ::recv(sock.native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  co_return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
}

// The wait of a request beside client_gone: done when the reply is ready
// (the watch is cancelled) or the client is gone (the request's work is).
struct UntilReplyOrGone {
  asio::cancellation_type operator()(const std::exception_ptr&, const Reply&) const {
    return asio::cancellation_type::terminal;
  }
  asio::cancellation_type operator()(const std::exception_ptr& e, bool gone) const {
    return !e && gone ? asio::cancellation_type::terminal : asio::cancellation_type::none;
  }
};

// Writes a response to a request that could not be parsed.
awaitable<void> send_raw(std::shared_ptr<ServerState> self, std::shared_ptr<Conn> conn, http::status status,
                         std::string reason) {
  Response res = text(status, reason);
  res.keep_alive(false);
  add_common(res);
  res.content_length(res.body().size());
  conn->stream.expires_after(std::chrono::seconds(5));
  auto [ec, n] = co_await http::async_write(conn->stream, res, kTuple);
  self->metrics.response_without_request("invalid", static_cast<unsigned>(status), n);
}

}  // namespace

awaitable<void> session(std::shared_ptr<ServerState> self, std::shared_ptr<Conn> conn) {
  struct Finish {  // runs however the coroutine ends
    ServerState* impl;
    Conn* conn;
    ~Finish() { impl->finished(conn); }
  } finish{self.get(), conn.get()};
  const ServerOptions& opt = self->opt;
  auto& stream = conn->stream;
  boost::system::error_code ec;
  const auto peer = stream.socket().remote_endpoint(ec);
  beast::flat_buffer buffer;

  for (;;) {
    // 1. Idle: wait (idle_timeout) for the first byte of the next request.
    if (buffer.size() == 0) {
      if (self->stopping) break;
      conn->idle = true;
      stream.expires_after(opt.idle_timeout);
      auto [rec, n] = co_await stream.async_read_some(buffer.prepare(4096), kTuple);
      conn->idle = false;
      if (rec == beast::error::timeout) self->metrics.timed_out();
      if (rec) break;  // closed by the client, idle timeout, or shutdown
      buffer.commit(n);
    }

    // 2. The header, within header_timeout of its first byte (slowloris).
    http::request_parser<http::string_body> parser;
    parser.header_limit(opt.max_header_bytes);
    parser.body_limit(opt.max_body_bytes);
    // Beast's header_limit bounds each parse step, not the whole header, so
    // the header is read step by step and its bytes are counted here.
    stream.expires_after(opt.header_timeout);
    boost::system::error_code hec;
    for (std::size_t header_bytes = 0; !hec && !parser.is_header_done();) {
      auto [rec, n] = co_await http::async_read_some(stream, buffer, parser, kTuple);
      hec = rec;
      header_bytes += n;
      if (!hec && header_bytes > opt.max_header_bytes) hec = http::error::header_limit;
    }
    if (hec == beast::error::timeout) {  // tcp_stream has closed the socket
      self->metrics.timed_out();
      break;
    }
    if (hec == http::error::end_of_stream) break;
    if (hec) {
      // (Arguments are named before co_await: gcc 12 mishandles temporaries there.)
      // A declared Content-Length over the body limit fails here already.
      const auto status = hec == http::error::header_limit ? http::status::request_header_fields_too_large
                          : hec == http::error::body_limit ? http::status::payload_too_large
                                                           : http::status::bad_request;
      std::string reason = hec == http::error::header_limit ? "request header too large"
                           : hec == http::error::body_limit ? "request body too large"
                                                            : "malformed request: " + hec.message();
      co_await send_raw(self, conn, status, std::move(reason));
      break;
    }
    Request& head = parser.get();
    const http::verb method = head.method();
    if (method != http::verb::get && method != http::verb::head && method != http::verb::options) {
      Response res = text(http::status::method_not_allowed, "method not allowed (GET, HEAD, OPTIONS)");
      res.set(http::field::allow, "GET, HEAD, OPTIONS");
      Reply r = reply("invalid", std::move(res));
      RequestLine line = RequestLine::of(head);
      co_await send(self, conn, std::move(r), std::move(line), false, false, peer);
      break;  // the body, if any, was not read: the connection cannot be reused
    }

    // 3. A body (unusual for GET) is read within body_timeout and ignored.
    if (!parser.is_done()) {
      stream.expires_after(opt.body_timeout);
      auto [bec, bn] = co_await http::async_read(stream, buffer, parser, kTuple);
      if (bec == beast::error::timeout) {
        self->metrics.timed_out();
        break;
      }
      if (bec) {
        const bool too_big = bec == http::error::body_limit;
        const auto status = too_big ? http::status::payload_too_large : http::status::bad_request;
        std::string reason = too_big ? "request body too large" : "malformed request body: " + bec.message();
        co_await send_raw(self, conn, status, std::move(reason));
        break;
      }
    }
    const Request& req = parser.get();

    // 4. Answer, once the loop's round has room for it (LoopRound). A
    // health check skips the line: answering it costs less than waiting,
    // and a load balancer must not take a busy server for a dead one.
    if (self->round && req.target() != "/healthz" && self->round->spent()) {
      self->metrics.request_deferred();
      co_await self->round->async_wait(use_awaitable);
    }
    self->metrics.request_started();
    Reply r;
    std::string target(req.target());
    Preconditions pre = Preconditions::of(req);
    std::string cors(req[http::field::access_control_request_headers]);
    // An API request (one that decodes) is cancelled when its client
    // goes away meanwhile, or at shutdown's deadline.
    const bool decodes = target.starts_with("/api/");
    std::exception_ptr failed;
    bool gone = false;
    if (decodes) {
      const auto ex = stream.get_executor();
      auto work = co_spawn_safe(ex, handle(self, req.method(), std::move(target), std::move(pre), std::move(cors)),
                                asio::deferred);
      auto watch = co_spawn_safe(ex, client_gone(conn), asio::deferred);
      auto group = asio::experimental::make_parallel_group(std::move(work), std::move(watch));
      auto token = asio::bind_cancellation_slot(conn->cancel_work.slot(), use_awaitable);
      const UntilReplyOrGone until;
      auto [order, e, answer, watch_error, client_left] = co_await group.async_wait(until, token);
      failed = e;
      gone = client_left;
      r = std::move(answer);
    } else {
      try {
        r = co_await handle(self, req.method(), std::move(target), std::move(pre), std::move(cors));
      } catch (...) {
        failed = std::current_exception();
      }
    }
    if (gone) {  // nobody to answer
      self->metrics.request_cancelled();
      self->metrics.request_finished("cancelled", 499, 0);
      break;
    }
    if (failed) {
      try {
        std::rethrow_exception(failed);
      } catch (const std::exception& e) {
        spdlog::error("server: {} {}: {}", std::string(req.method_string()), std::string(req.target()), e.what());
      }
      r = reply("error", text(http::status::internal_server_error, "internal error"));
    }
    const bool keep_alive = req.keep_alive() && !self->stopping;
    RequestLine line = RequestLine::of(req);
    const bool ok = co_await send(self, conn, std::move(r), std::move(line), keep_alive, true, peer);
    if (!ok || !keep_alive) break;
  }
  stream.socket().shutdown(tcp::socket::shutdown_send, ec);
  stream.close();
}

}  // namespace zarrcoro::server
