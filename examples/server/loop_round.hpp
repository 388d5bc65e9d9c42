// LoopRound: the I/O loop's round budget (ServerOptions::loop_round_budget).
//
// A round opens with the first request that finds none open and closes at
// the loop's next poll for events. A request that finds the round older
// than the budget waits, and is let through at a later poll, in the order
// the requests began to wait, while that poll's round has room. So timers
// and new clients wait for about one budget of requests (and the rest of
// that poll's ready sockets), not for a whole round of them.
//
// The loop's poll is seen through an eventfd that is always readable: each
// wait on it re-arms it in epoll (one epoll_ctl) and completes at the next
// epoll_wait. A due timer did the same job before, but every round then
// reprogrammed the loop's timerfd twice, and timerfd_settime took 9% of the
// loop's CPU under 4 KB key GETs on this VM.
//
// Thread-safety: only for an io_context that one thread runs; every member
// is called on that thread. Linux only (eventfd(2)).
//
// Lifetime: a waiting request is released only by a poll. Requests still
// waiting when the io_context is destroyed without running again are never
// resumed, and what their frames hold (the server, through them this
// object) is not freed: stop a server with Server::shutdown, which drains
// every connection before its callback, waiting ones included.
#pragma once

#include <chrono>
#include <deque>
#include <memory>
#include <utility>

#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>

#include "eventfd.hpp"

namespace zarrcoro::server {

class LoopRound : public std::enable_shared_from_this<LoopRound> {
 public:
  // Raises std::system_error when no eventfd can be made or registered.
  LoopRound(boost::asio::io_context& io, std::chrono::microseconds budget) : efd_(io), budget_(budget) {
    assign_eventfd(efd_, 1);  // readable for good: never read
  }

  // True when a request starting now has to wait (async_wait): the round
  // has run longer than the budget. Opens a round when none is open.
  bool spent() {
    const auto now = std::chrono::steady_clock::now();
    if (open_) return now - start_ > budget_;
    open_ = true;
    start_ = now;
    watch();
    return false;
  }

  // Completes `token` (signature void()) at a later poll, once the requests
  // that began to wait before this one have gone and the round has room;
  // the request then counts in that round. With use_awaitable, a co_await.
  template <class Token>
  auto async_wait(Token&& token) {
    auto init = [self = shared_from_this()](auto handler) {
      self->waiting_.emplace_back(std::move(handler));
      self->watch();
    };
    return boost::asio::async_initiate<Token, void()>(std::move(init), token);
  }

 private:
  // Completes on_poll at the next poll, unless that is already arranged.
  void watch() {
    if (watching_) return;
    watching_ = true;
    efd_.async_wait(boost::asio::posix::descriptor_base::wait_read,
                    [w = weak_from_this()](const boost::system::error_code& ec) {
                      if (auto self = w.lock()) self->on_poll(ec);
                    });
  }

  // The round is over: waiting requests go, in order, each run here when
  // its executor allows (a connection's strand, idle on this thread), until
  // the new round is spent; the rest wait for the next poll. If the eventfd
  // failed, everyone goes.
  void on_poll(const boost::system::error_code& ec) {
    watching_ = false;
    open_ = false;
    while (!waiting_.empty()) {
      if (!ec && spent()) return;  // the round this poll opened is spent; it watches for its end
      auto handler = std::move(waiting_.front());
      waiting_.pop_front();
      boost::asio::dispatch(std::move(handler));
    }
  }

  boost::asio::posix::stream_descriptor efd_;
  const std::chrono::microseconds budget_;
  std::chrono::steady_clock::time_point start_;
  bool open_ = false, watching_ = false;
  std::deque<boost::asio::any_completion_handler<void()>> waiting_;
};

}  // namespace zarrcoro::server
