// The Server (server.hpp) and the construction of its state. The roles:
//   listener.cpp     the accept loop, the connection cap, shutdown's drain
//   session.cpp      one connection: requests read, keep-alive, timeouts
//   routes.cpp       a request to its handler
//   endpoints_*.cpp  the handlers (endpoints.hpp)
//   send.cpp         a handler's Reply onto the socket (transmit.cpp: one step)
#include "server.hpp"

#include <pthread.h>

#include <algorithm>
#include <csignal>
#include <stdexcept>
#include <thread>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/post.hpp>

#include "listener.hpp"
#include "server_state.hpp"

namespace zarrcoro::server {

ServerState::ServerState(Runtime& r, ServerOptions o)
    : rt(r),
      opt(std::move(o)),
      store(std::make_shared<FilesystemStore>(rt.io_executor(), opt.root)),
      strand(asio::make_strand(rt.io_context())),
      acceptor(strand),
      deadline(strand),
      transmit_threads(opt.transmit_threads ? opt.transmit_threads : std::max(1u, std::thread::hardware_concurrency() / 2)),
      transmit_pool(transmit_threads),
      inbox(std::make_shared<LoopInbox>(rt.io_context())),
      round(opt.loop_round_budget.count() > 0 ? std::make_shared<LoopRound>(rt.io_context(), opt.loop_round_budget)
                                              : nullptr),
      priority(opt.loop_realtime == LoopRealtime::off
                   ? nullptr
                   : std::make_shared<LoopPriority>(rt.io_context(), opt.loop_realtime == LoopRealtime::on)) {
  // sendfile(2) has no MSG_NOSIGNAL: a client gone mid-body must not kill us.
  std::signal(SIGPIPE, SIG_IGN);
  for (unsigned i = 0; i < transmit_threads; ++i)  // named for top -H and perf (best effort)
    asio::post(transmit_pool, [] { ::pthread_setname_np(::pthread_self(), "zarrcoro-tx"); });
  const tcp::endpoint ep = parse_listen(opt.listen);
  boost::system::error_code ec;
  acceptor.open(ep.protocol(), ec);
  if (!ec) acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acceptor.bind(ep, ec);
  if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) throw std::runtime_error("--listen " + opt.listen + ": cannot listen there: " + ec.message());
  endpoint = acceptor.local_endpoint();
}

Server::Server(Runtime& rt, ServerOptions options) : impl_(std::make_shared<ServerState>(rt, std::move(options))) {}

Server::~Server() {
  boost::system::error_code ignored;
  impl_->stopping = true;
  if (impl_->priority) impl_->priority->stop();  // when shutdown() was not called
  asio::post(impl_->strand, [impl = impl_] {
    boost::system::error_code ec;
    impl->acceptor.close(ec);
  });
}

tcp::endpoint Server::endpoint() const { return impl_->endpoint; }
const ServerOptions& Server::options() const { return impl_->opt; }
const Metrics& Server::metrics() const { return impl_->metrics; }

void Server::start() {
  if (impl_->priority) impl_->priority->start();
  asio::co_spawn(impl_->strand, accept_loop(impl_), log_exception);
}

void Server::shutdown(std::function<void()> done) { impl_->shutdown(std::move(done)); }

}  // namespace zarrcoro::server
