// Asynchronous synchronization primitives for coroutines on the io_context:
// a counting semaphore (in-flight request and byte budgets) and per-key locks
// (read-modify-write of one chunk key is serialized). Waiting never blocks a
// thread: a waiter's coroutine is suspended and resumed through its own
// executor. Thread-safe; waiters are served first come, first served.
#pragma once

#include <cstddef>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>

namespace zarrcoro::detail {

// A suspended coroutine (or any completion handler) and the executor it
// resumes on.
struct Waiter {
  Waiter() = default;
  template <class Handler>
  explicit Waiter(Handler h)
      : executor(boost::asio::get_associated_executor(h)), handler(std::move(h)) {}
  boost::asio::any_io_executor executor;
  boost::asio::any_completion_handler<void()> handler;
};

// Resumes the waiter through its executor. (The handler is wrapped: Boost
// 1.81 recurses when posting an any_completion_handler directly.)
inline void wake(Waiter w) {
  boost::asio::post(w.executor, [h = std::move(w.handler)]() mutable { std::move(h)(); });
}

// A counting semaphore over `capacity` units. A request larger than the
// capacity is clamped to it, so a single huge request cannot wait forever.
class AsyncSemaphore {
 public:
  explicit AsyncSemaphore(std::size_t capacity) : capacity_(capacity), available_(capacity) {}

  std::size_t clamp(std::size_t n) const { return n < capacity_ ? n : capacity_; }

  // Takes `n` (clamped) units if available now and nobody is queued.
  bool try_acquire(std::size_t n) {
    n = clamp(n);
    std::lock_guard lk(mu_);
    if (!queue_.empty() || available_ < n) return false;
    available_ -= n;
    return true;
  }

  // Waits for `n` (clamped) units.
  boost::asio::awaitable<void> acquire(std::size_t n) {
    if (try_acquire(n)) co_return;
    n = clamp(n);
    co_await boost::asio::async_initiate<decltype(boost::asio::use_awaitable), void()>(
        [this, n](auto handler) {
          std::unique_lock lk(mu_);
          if (queue_.empty() && available_ >= n) {
            available_ -= n;
            lk.unlock();
            wake(Waiter(std::move(handler)));
            return;
          }
          queue_.push_back({n, Waiter(std::move(handler))});
        },
        boost::asio::use_awaitable);
  }

  void release(std::size_t n) {
    n = clamp(n);
    std::deque<Waiter> ready;
    {
      std::lock_guard lk(mu_);
      available_ += n;
      while (!queue_.empty() && queue_.front().n <= available_) {
        available_ -= queue_.front().n;
        ready.push_back(std::move(queue_.front().waiter));
        queue_.pop_front();
      }
    }
    for (auto& w : ready) wake(std::move(w));
  }

  std::size_t available() const {
    std::lock_guard lk(mu_);
    return available_;
  }

 private:
  struct Entry {
    std::size_t n;
    Waiter waiter;
  };
  const std::size_t capacity_;
  mutable std::mutex mu_;
  std::size_t available_;
  std::deque<Entry> queue_;
};

// Exclusive locks by key, created on demand and dropped when free.
class KeyLocks {
 public:
  bool try_lock(const std::string& key) {
    std::lock_guard lk(mu_);
    auto [it, inserted] = locks_.try_emplace(key);
    return inserted;
  }

  boost::asio::awaitable<void> lock(std::string key) {
    if (try_lock(key)) co_return;
    co_await boost::asio::async_initiate<decltype(boost::asio::use_awaitable), void()>(
        [this, &key](auto handler) {
          std::unique_lock lk(mu_);
          auto [it, inserted] = locks_.try_emplace(key);
          if (inserted) {
            lk.unlock();
            wake(Waiter(std::move(handler)));
            return;
          }
          it->second.push_back(Waiter(std::move(handler)));
        },
        boost::asio::use_awaitable);
  }

  // Hands the lock to the next waiter, or frees it.
  void unlock(const std::string& key) {
    std::optional<Waiter> next;  // emplaced, never assigned: Boost 1.81's
                                 // any_completion_handler move-assignment recurses
    {
      std::lock_guard lk(mu_);
      auto it = locks_.find(key);
      if (it == locks_.end()) return;
      if (it->second.empty()) {
        locks_.erase(it);
        return;
      }
      next.emplace(std::move(it->second.front()));
      it->second.pop_front();
    }
    wake(std::move(*next));
  }

 private:
  std::mutex mu_;
  std::unordered_map<std::string, std::deque<Waiter>> locks_;  // key -> waiters while held
};

}  // namespace zarrcoro::detail
