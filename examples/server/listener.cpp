// See listener.hpp.
#include "listener.hpp"

#include <charconv>
#include <stdexcept>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <spdlog/spdlog.h>

#include "server_state.hpp"
#include "session.hpp"

namespace zarrcoro::server {
namespace {

// Over the connection cap: a 503 written without reading the request.
awaitable<void> reject(std::shared_ptr<ServerState> self, std::shared_ptr<Conn> conn) {
  static constexpr std::string_view kBusy =
      "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nContent-Length: 21\r\n"
      "Retry-After: 1\r\nConnection: close\r\n\r\ntoo many connections\n";
  conn->stream.expires_after(std::chrono::seconds(1));
  auto [ec, n] = co_await asio::async_write(conn->stream, asio::buffer(kBusy), kTuple);
  self->metrics.response_without_request("rejected", 503, n);
  boost::system::error_code ignored;
  conn->stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
  conn->stream.close();
}

}  // namespace

void log_exception(std::exception_ptr e) {
  if (!e) return;
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    spdlog::error("server: connection failed: {}", x.what());
  }
}

tcp::endpoint parse_listen(const std::string& text) {
  const auto colon = text.rfind(':');
  if (colon == std::string::npos) throw std::invalid_argument("--listen: expected HOST:PORT, got '" + text + "'");
  std::string host = text.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  unsigned port = 0;
  const std::string p = text.substr(colon + 1);
  auto [end, ec] = std::from_chars(p.data(), p.data() + p.size(), port);
  if (ec != std::errc() || end != p.data() + p.size() || port > 65535)
    throw std::invalid_argument("--listen: bad port '" + p + "'");
  boost::system::error_code aec;
  const auto address = asio::ip::make_address(host, aec);
  if (!aec) return {address, static_cast<unsigned short>(port)};
  asio::io_context io;  // a host name: its first IPv4 address, else its first
  const auto found = tcp::resolver(io).resolve(host, p, aec);
  if (aec || found.empty())
    throw std::invalid_argument("--listen: cannot resolve '" + host + "'" + (aec ? ": " + aec.message() : ""));
  for (const auto& entry : found)
    if (entry.endpoint().address().is_v4()) return entry.endpoint();
  return found.begin()->endpoint();
}

awaitable<void> accept_loop(std::shared_ptr<ServerState> self) {
  for (;;) {
    auto [ec, socket] = co_await self->acceptor.async_accept(asio::make_strand(self->rt.io_context()), kTuple);
    if (self->stopping || ec == asio::error::operation_aborted) co_return;
    if (ec) {  // e.g. out of file descriptors: wait a little instead of spinning
      spdlog::warn("server: accept failed: {}", ec.message());
      asio::steady_timer pause(self->strand, std::chrono::milliseconds(50));
      co_await pause.async_wait(kTuple);
      continue;
    }
    boost::system::error_code ignored;
    socket.set_option(tcp::no_delay(true), ignored);
    auto conn = std::make_shared<Conn>(tcp::socket(std::move(socket)));
    bool admitted = false;
    {
      std::lock_guard lk(self->mu);
      if (self->conns.size() < self->opt.max_connections) {
        self->conns.emplace(conn.get(), conn);
        admitted = true;
      }
    }
    const auto ex = conn->stream.get_executor();
    if (admitted) {
      self->metrics.connection_opened();
      asio::co_spawn(ex, session(self, conn), log_exception);
    } else {
      self->metrics.connection_rejected();
      asio::co_spawn(ex, reject(self, conn), log_exception);
    }
  }
}

void ServerState::finished(Conn* conn) {
  {
    std::lock_guard lk(mu);
    conns.erase(conn);
  }
  metrics.connection_closed();
  if (stopping) check_drained();
}

void ServerState::check_drained() {
  std::vector<std::function<void()>> callbacks;
  {
    std::lock_guard lk(mu);
    if (!conns.empty()) return;
    callbacks.swap(on_stopped);
  }
  if (callbacks.empty()) return;
  asio::post(strand, [self = shared_from_this(), callbacks = std::move(callbacks)] {
    self->deadline.cancel();
    for (const auto& f : callbacks) f();
  });
}

void ServerState::shutdown(std::function<void()> done) {
  {
    std::lock_guard lk(mu);
    on_stopped.push_back(std::move(done));
  }
  if (stopping.exchange(true)) return check_drained();  // a second call: just wait too
  if (priority) priority->stop();  // queued on the loop before `done` can be
  std::vector<std::shared_ptr<Conn>> open;
  {
    std::lock_guard lk(mu);
    for (const auto& [p, c] : conns) open.push_back(c);
  }
  asio::post(strand, [self = shared_from_this()] {
    boost::system::error_code ignored;
    self->acceptor.close(ignored);
    self->deadline.expires_after(self->opt.shutdown_deadline);
    self->deadline.async_wait([self](boost::system::error_code ec) {
      if (!ec) self->force_close();
    });
  });
  for (auto& c : open)  // idle connections close now; busy ones after their response
    asio::post(c->stream.get_executor(), [c] {
      if (c->idle) c->stream.cancel();
    });
  check_drained();
}

void ServerState::force_close() {
  std::vector<std::shared_ptr<Conn>> open;
  {
    std::lock_guard lk(mu);
    for (const auto& [p, c] : conns) open.push_back(c);
  }
  if (!open.empty()) spdlog::warn("server: shutdown deadline passed; closing {} connection(s)", open.size());
  for (auto& c : open)
    asio::post(c->stream.get_executor(), [c] {
      boost::system::error_code ignored;
      c->stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
      c->stream.cancel();
      c->cancel_work.emit(asio::cancellation_type::terminal);
    });
}

}  // namespace zarrcoro::server
