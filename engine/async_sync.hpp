// Asynchronous synchronization primitives for coroutines on the io_context:
// a counting semaphore (in-flight request and byte budgets) and per-key locks
// (read-modify-write of one chunk key is serialized). Waiting never blocks a
// thread: a waiter's coroutine is suspended and resumed through its own
// executor. Thread-safe; waiters are served first come, first served.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/associated_cancellation_slot.hpp>
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
//
// A wait honours the cancellation slot of its awaiting coroutine (Asio
// per-operation cancellation, any type): a cancelled waiter leaves the queue
// at once and its acquire() returns false, holding nothing.
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

  // Waits for `n` (clamped) units: true when taken, false when the wait was
  // cancelled.
  boost::asio::awaitable<bool> acquire(std::size_t n) {
    if (try_acquire(n)) co_return true;
    n = clamp(n);
    bool cancelled = false;  // set under mu_ by the cancellation handler, read after the wake
    co_await boost::asio::async_initiate<decltype(boost::asio::use_awaitable), void()>(
        [this, n, &cancelled](auto handler) {
          auto slot = boost::asio::get_associated_cancellation_slot(handler);
          std::unique_lock lk(mu_);
          if (queue_.empty() && available_ >= n) {
            available_ -= n;
            lk.unlock();
            wake(Waiter(std::move(handler)));
            return;
          }
          const std::uint64_t id = next_id_++;
          queue_.push_back({n, id, &cancelled, Waiter(std::move(handler))});
          if (slot.is_connected()) slot.assign([this, id](boost::asio::cancellation_type) { cancel(id); });
        },
        boost::asio::use_awaitable);
    co_return !cancelled;
  }

  void release(std::size_t n) {
    n = clamp(n);
    std::deque<Waiter> ready;
    {
      std::lock_guard lk(mu_);
      available_ += n;
      grant(ready);
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
    std::uint64_t id;
    bool* cancelled;  // in the waiting coroutine's frame
    Waiter waiter;
  };

  // Serves the queue's head while units allow; call with mu_ held.
  void grant(std::deque<Waiter>& ready) {
    while (!queue_.empty() && queue_.front().n <= available_) {
      available_ -= queue_.front().n;
      ready.push_back(std::move(queue_.front().waiter));
      queue_.pop_front();
    }
  }

  // Wakes waiter `id` empty-handed if it still waits; those behind it may
  // now be served.
  void cancel(std::uint64_t id) {
    std::deque<Waiter> ready;
    {
      std::lock_guard lk(mu_);
      auto it = std::find_if(queue_.begin(), queue_.end(), [id](const Entry& e) { return e.id == id; });
      if (it == queue_.end()) return;  // served already
      *it->cancelled = true;
      ready.push_back(std::move(it->waiter));
      queue_.erase(it);
      grant(ready);
    }
    for (auto& w : ready) wake(std::move(w));
  }

  const std::size_t capacity_;
  mutable std::mutex mu_;
  std::size_t available_;
  std::uint64_t next_id_ = 0;
  std::deque<Entry> queue_;
};

// Exclusive locks by key, created on demand and dropped when free. A wait
// honours cancellation like AsyncSemaphore::acquire.
class KeyLocks {
 public:
  bool try_lock(const std::string& key) {
    std::lock_guard lk(mu_);
    auto [it, inserted] = locks_.try_emplace(key);
    return inserted;
  }

  // True when locked, false when the wait was cancelled (nothing held).
  boost::asio::awaitable<bool> lock(std::string key) {
    if (try_lock(key)) co_return true;
    bool cancelled = false;
    co_await boost::asio::async_initiate<decltype(boost::asio::use_awaitable), void()>(
        [this, &key, &cancelled](auto handler) {
          auto slot = boost::asio::get_associated_cancellation_slot(handler);
          std::unique_lock lk(mu_);
          auto [it, inserted] = locks_.try_emplace(key);
          if (inserted) {
            lk.unlock();
            wake(Waiter(std::move(handler)));
            return;
          }
          const std::uint64_t id = next_id_++;
          it->second.push_back({id, &cancelled, Waiter(std::move(handler))});
          if (slot.is_connected())
            slot.assign([this, key, id](boost::asio::cancellation_type) { cancel(key, id); });
        },
        boost::asio::use_awaitable);
    co_return !cancelled;
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
      next.emplace(std::move(it->second.front().waiter));
      it->second.pop_front();
    }
    wake(std::move(*next));
  }

 private:
  struct Entry {
    std::uint64_t id;
    bool* cancelled;  // in the waiting coroutine's frame
    Waiter waiter;
  };

  void cancel(const std::string& key, std::uint64_t id) {
    std::optional<Waiter> w;
    {
      std::lock_guard lk(mu_);
      auto it = locks_.find(key);
      if (it == locks_.end()) return;
      auto& q = it->second;
      auto e = std::find_if(q.begin(), q.end(), [id](const Entry& x) { return x.id == id; });
      if (e == q.end()) return;  // it holds the lock already
      *e->cancelled = true;
      w.emplace(std::move(e->waiter));
      q.erase(e);
    }
    wake(std::move(*w));
  }

  std::mutex mu_;
  std::uint64_t next_id_ = 0;
  std::unordered_map<std::string, std::deque<Entry>> locks_;  // key -> waiters while held
};

}  // namespace zarrcoro::detail
