// LoopInbox: work done on another thread pool, handed back to the I/O loop
// without taking the io_context's lock.
//
// Why: Boost 1.81's io_context wakes a loop asleep in epoll_wait with an
// epoll_ctl call made while it holds the scheduler's mutex. A transmit
// thread preempted inside that call (a busy 2-core machine preempts it for
// milliseconds) keeps the loop waiting for the mutex. Under 1 MiB key GETs
// that was the loop lag's p99: perf trace showed the loop in a futex wait
// on the scheduler's mutex for 1-4 ms, woken by zarrcoro-tx, and gdb named
// the waiter scheduler::run. Through the inbox, another thread only
// appends to a queue under the inbox's own mutex (no system call inside)
// and then writes an eventfd; the loop reads the eventfd (an ordinary read
// on its reactor) and runs what was queued.
//
// Thread-safety: run() on the loop's threads; the jobs run on the pool and
// their completions come back on the loop's threads. The eventfd is read only while a completion is due, so an
// idle inbox keeps no work on the io_context. Linux only (eventfd(2)).
#pragma once

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <system_error>
#include <type_traits>
#include <utility>
#include <vector>

#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/buffer.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>

#include "eventfd.hpp"

namespace zarrcoro::server {

class LoopInbox : public std::enable_shared_from_this<LoopInbox> {
 public:
  // Raises std::system_error when no eventfd can be made or registered.
  explicit LoopInbox(boost::asio::io_context& io) : efd_(io) { assign_eventfd(efd_, 0); }

  // Runs `job()` (returning a default-constructible R) on `pool` and
  // completes `token` with (exception_ptr, R) on the token's executor,
  // reached through the inbox: with use_awaitable, a co_await that returns
  // the job's result or rethrows its exception. Called on the loop.
  template <class Pool, class Job, class Token>
  auto run(Pool& pool, Job job, Token&& token) {
    using R = std::invoke_result_t<Job&>;
    auto init = [self = shared_from_this(), &pool](auto handler, Job job) {
      using Handler = decltype(handler);
      auto h = std::make_shared<Handler>(std::move(handler));
      self->expect();
      auto work = [self, h, job = std::move(job), loop = self->efd_.get_executor()]() mutable {
        auto out = std::make_shared<std::pair<std::exception_ptr, R>>();
        try {
          out->second = job();
        } catch (...) {
          out->first = std::current_exception();
        }
        self->post([h, out, loop] {
          auto ex = boost::asio::get_associated_executor(*h, loop);
          boost::asio::dispatch(ex, [h, out] { std::move(*h)(out->first, std::move(out->second)); });
        });
      };
      try {
        boost::asio::post(pool, std::move(work));
      } catch (...) {  // out of memory: the post will never come
        self->unexpect();
        throw;
      }
    };
    return boost::asio::async_initiate<Token, void(std::exception_ptr, R)>(std::move(init), token, std::move(job));
  }

 private:
  // On the loop: one more post() is due; the eventfd is read until it came.
  void expect() {
    std::lock_guard lk(mu_);
    ++due_;
    if (!reading_) {
      reading_ = true;
      read();
    }
  }

  // The post() that an expect() announced will not come.
  void unexpect() {
    std::lock_guard lk(mu_);
    if (--due_ == 0 && reading_) {
      boost::system::error_code ignored;
      efd_.cancel(ignored);  // the pending read ends with operation_aborted
    }
  }

  // Any thread: queues f for the loop, and signals the eventfd unless a
  // signal is already on its way.
  void post(std::function<void()> f) {
    bool signal = false;
    {
      std::lock_guard lk(mu_);
      queue_.push_back(std::move(f));
      signal = !signalled_;
      signalled_ = true;
    }
    if (signal) {
      const std::uint64_t one = 1;
      [[maybe_unused]] const auto n = ::write(efd_.native_handle(), &one, sizeof one);  // cannot overflow: read back each time
    }
  }

  // Under mu_. A read of the eventfd is tried at once (asio's reads are
  // speculative), so a signal written before it was started is not missed.
  void read() {
    efd_.async_read_some(boost::asio::buffer(&counter_, sizeof counter_),
                         [self = shared_from_this()](const boost::system::error_code& ec, std::size_t) {
                           self->on_signal(ec);
                         });
  }

  void on_signal(const boost::system::error_code& ec) {
    std::vector<std::function<void()>> ready;
    {
      std::lock_guard lk(mu_);
      ready.swap(queue_);
      signalled_ = false;
      due_ -= ready.size();
      reading_ = due_ > 0 && ec != boost::asio::error::bad_descriptor;
      if (reading_) read();
    }
    // Every queued completion runs; the first exception (none is expected:
    // each only dispatches a handler) leaves io_context::run afterwards.
    std::exception_ptr first;
    for (auto& f : ready) try {
        f();
      } catch (...) {
        if (!first) first = std::current_exception();
      }
    if (first) std::rethrow_exception(first);
  }

  boost::asio::posix::stream_descriptor efd_;
  std::uint64_t counter_ = 0;  // the eventfd's value, read by the loop
  std::mutex mu_;              // guards what follows
  std::vector<std::function<void()>> queue_;
  bool signalled_ = false;  // an eventfd write is on its way to the loop
  std::size_t due_ = 0;     // posts expected
  bool reading_ = false;    // a read of the eventfd is pending
};

}  // namespace zarrcoro::server
