// The many-chunk operation (chunk_op.hpp): fetch on the strand within the
// runtime's limits, batches of codec work, one completion.
#include "engine/chunk_op.hpp"

#include <boost/asio/async_result.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/this_coro.hpp>
#include <spdlog/spdlog.h>

#include <zarrcoro/error.hpp>

#include "engine/runtime_access.hpp"

namespace zarrcoro::detail {

namespace asio = boost::asio;
using asio::use_awaitable;

[[noreturn]] void rethrow_with_key(std::exception_ptr e, const std::string& key) {
  try {
    std::rethrow_exception(e);
  } catch (const Error& err) {
    if (!err.key().empty()) throw;
    throw_error(err.code(), key, err.field(), err.detail());
  }
}

ChunkOp::ChunkOp(std::shared_ptr<const Array::State> st, ChunkParts parts)
    : st_(std::move(st)),
      engine_(RuntimeAccess::engine(*st_->rt)),
      strand_(st_->rt->serialized_io() ? Strand(st_->rt->io_executor())
                                       : Strand(asio::make_strand(st_->rt->io_context()))),
      parts_(std::move(parts)),
      batch_chunks_(std::max<std::size_t>(1, st_->rt->options().batch_chunks)) {}

asio::awaitable<void> ChunkOp::run() {
  auto self = shared_from_this();
  co_await asio::this_coro::throw_if_cancelled(false);  // cancel() decides what stops
  const std::size_t n = parts_.size();  // parts_ may be freed once the op is handed off
  remaining_ = n;
  const std::size_t budget = st_->chunk_bytes() * budget_factor();
  auto slice_start = std::chrono::steady_clock::now();
  std::vector<std::size_t> window;  // parts holding their budget, to fetch at once
  window.reserve(kWindow);
  for (std::size_t i = 0; i < n; ++i) {
    bool budget_taken = !cancelled_ && engine_.bytes.try_acquire(budget);
    if (!budget_taken && !cancelled_) {
      fetch_at_once(window);  // first: their budget is taken
      spawner_idle_ = true;
      maybe_flush();
      budget_taken = co_await engine_.bytes.acquire(budget);
      spawner_idle_ = false;
    }
    if (budget_taken && cancelled_) {  // cancelled while the budget was granted
      engine_.bytes.release(budget);
      budget_taken = false;
    }
    if (!budget_taken) {  // cancelled: the parts not started are done
      remaining_ -= n - i;
      break;
    }
    if (!can_fetch_now(i)) {
      ++active_;
      spawn(flow(self, i));
      continue;
    }
    window.push_back(i);
    if (window.size() < kWindow) continue;
    fetch_at_once(window);
    // Let other handlers run after each slice of synchronous fetches.
    if (std::chrono::steady_clock::now() - slice_start > kSyncSlice) {
      co_await asio::post(strand_, use_awaitable);
      slice_start = std::chrono::steady_clock::now();
    }
  }
  fetch_at_once(window);
  spawner_idle_ = true;
  maybe_flush();
  if (remaining_ > 0 && !handed_off_) co_await done_.wait();
  if (handed_off_) co_return;  // the pool completes the op
  if (!error_ && !cancelled_) {
    try {
      co_await after_all();
    } catch (...) {
      fail(std::current_exception());
    }
  }
  finished_ = true;
  if (error_) std::rethrow_exception(error_);
}

void ChunkOp::spawn(asio::awaitable<void> stage) {
  auto self = shared_from_this();
  if (!cancellable_) {
    asio::co_spawn(strand_, std::move(stage), [](std::exception_ptr e) {
      if (e) spdlog::error("zarrcoro: chunk stage failed unexpectedly");
    });
    return;
  }
  // A signal per stage in flight, so that cancel() reaches its store request.
  auto signal = stage_signals_.emplace(stage_signals_.end());
  co_spawn_safe(strand_, std::move(stage),
                asio::bind_cancellation_slot(signal->slot(), [self, signal](std::exception_ptr) {
                  // Dropped once the stage's coroutine has unwound.
                  asio::post(self->strand_, [self, signal] { self->stage_signals_.erase(signal); });
                }));
}

void ChunkOp::cancel() {
  if (handed_off_) {  // codec work not yet begun is skipped; the pool thread completes with Cancelled
    cancel_flag_.store(true, std::memory_order_relaxed);
    return;
  }
  if (cancelled_ || finished_ || (spawner_idle_ && remaining_ == 0)) return;  // done already
  cancelled_ = true;
  cancel_flag_.store(true, std::memory_order_relaxed);
  fail(cancelled_error());
  run_signal_.emit(asio::cancellation_type::terminal);
  for (auto& s : stage_signals_) s.emit(asio::cancellation_type::terminal);
}

asio::awaitable<void> ChunkOp::finish(std::size_t i) { co_return; }

asio::awaitable<void> ChunkOp::after_all() { co_return; }

asio::awaitable<ReadResult> ChunkOp::read(std::string key, ByteRange range, Generation if_equal,
                                          MutableByteSpan into) {
  co_await acquire_request();
  ReadOptions options;
  options.range = range;
  options.if_equal = std::move(if_equal);
  options.into = into;
  ReadResult r;
  try {
    r = co_await st_->store->read(std::move(key), std::move(options));
  } catch (...) {
    engine_.requests.release(1);
    throw;
  }
  engine_.requests.release(1);
  co_return r;
}

// Every store operation the engine issues is bounded: besides sparing the
// store, Boost 1.81's io_uring service stalls when too many file operations
// complete at once (see the regression test "thousands of chunks").
asio::awaitable<std::optional<Generation>> ChunkOp::put(std::string key, std::optional<Bytes> value,
                                                      Generation if_equal) {
  co_await acquire_request();
  WriteOptions options;
  options.if_equal = std::move(if_equal);
  options.among_many = parts_.size() > 1;
  std::optional<Generation> g;
  engine_.writes.begin(key);
  try {
    g = co_await st_->store->write(key, std::move(value), std::move(options));
  } catch (...) {
    engine_.writes.end(key);
    engine_.requests.release(1);
    throw;
  }
  engine_.writes.end(key);
  engine_.requests.release(1);
  co_return g;
}

asio::awaitable<void> ChunkOp::acquire_request() {
  if (engine_.requests.try_acquire(1)) co_return;
  const bool taken = co_await engine_.requests.acquire(1);  // (not inside a condition: g++ 12)
  if (!taken) throw_cancelled();
}

void ChunkOp::throw_cancelled() const { throw Cancelled("", "", "cancelled while waiting"); }

std::exception_ptr ChunkOp::cancelled_error() const {
  return std::make_exception_ptr(Cancelled("", "", "the operation on array '" + st_->path + "' was cancelled"));
}

asio::awaitable<void> ChunkOp::run_task(ChunkTask& task) {
  auto batch = std::make_shared<TaskBatch>();
  batch->tasks = {&task};
  auto& scheduler = engine_.scheduler;
  co_await asio::async_initiate<decltype(use_awaitable), void()>(
      [&](auto handler) {
        auto waiter = std::make_shared<Waiter>(std::move(handler));
        batch->on_done = [waiter] { wake(std::move(*waiter)); };
        scheduler.submit(batch);
      },
      use_awaitable);
}

void ChunkOp::fetch_at_once(std::vector<std::size_t>& window) {
  if (window.empty()) return;
  try {
    fetch_now(window, answered_);
  } catch (...) {  // the store failed as a whole (out of memory): the window's chunks fail with it
    for (const std::size_t i : window) task(i).error = std::current_exception();
    answered_.assign(window.size(), 1);
  }
  for (std::size_t k = 0; k < window.size(); ++k) {
    if (answered_[k]) {
      arrive(window[k]);
    } else {
      ++active_;
      spawn(flow(shared_from_this(), window[k]));
    }
  }
  window.clear();
}

asio::awaitable<void> ChunkOp::flow(std::shared_ptr<ChunkOp> self, std::size_t i) {
  try {
    co_await self->fetch(i);
  } catch (...) {
    self->task(i).error = std::current_exception();  // skipped by the scheduler
  }
  --self->active_;
  self->arrive(i);
}

void ChunkOp::arrive(std::size_t i) {
  pending_.push_back(i);
  pending_weight_ += weight(i);
  maybe_flush();
}

void ChunkOp::maybe_flush() {
  while (pending_weight_ >= batch_chunks_) submit(next_batch_size());
  if (!pending_.empty() && active_ == 0 && spawner_idle_)
    while (!pending_.empty()) submit(next_batch_size());
}

std::size_t ChunkOp::next_batch_size() {
  std::size_t n = 0, w = 0;
  while (n < pending_.size() && w < batch_chunks_) w += weight(pending_[n++]);
  return n;
}

void ChunkOp::submit(std::size_t n) {
  // Everything that allocates comes first: a throw (out of memory) leaves
  // the chunks in pending_, and run() fails the op.
  const auto first = pending_.begin(), last = pending_.begin() + static_cast<std::ptrdiff_t>(n);
  auto batch = std::make_shared<TaskBatch>();
  std::vector<std::size_t> ids(first, last);
  batch->tasks.reserve(n);
  for (auto i : ids)
    if (!task(i).error) batch->tasks.push_back(&task(i));
  auto self = shared_from_this();
  const bool hand_off = is_last_batch(n) && !engine_.scheduler.runs_inline(*batch);
  if (hand_off) {
    batch->on_done = [self, ids = std::move(ids)] { self->complete_on_pool(ids); };
  } else {
    batch->on_done = [self, ids = std::move(ids)]() mutable {
      asio::co_spawn(self->strand_, after_batch(self, std::move(ids)), asio::detached);
    };
  }
  for (auto it = first; it != last; ++it) pending_weight_ -= weight(*it);
  pending_.erase(first, last);
  // submit() does not throw; a batch it cannot hand to the pool completes
  // with the error in its tasks, possibly before it returns.
  engine_.scheduler.submit(std::move(batch));
  if (hand_off) {
    handed_off_ = true;
    done_.notify();  // run() returns without completing
  }
}

void ChunkOp::complete_on_pool(const std::vector<std::size_t>& ids) {
  if (cancel_flag_.load(std::memory_order_relaxed)) fail(cancelled_error());
  for (auto i : ids) {
    if (auto& t = task(i); t.error) fail(t.error);
    engine_.bytes.release(st_->chunk_bytes() * budget_factor());
  }
  release_tables();
  complete(error_);
}

void ChunkOp::complete(std::exception_ptr e, bool idle) {
  auto c = std::move(*completion_);
  completion_.reset();
  if (idle) st_.reset();
  std::move(c)(e);
}

asio::awaitable<void> ChunkOp::after_batch(std::shared_ptr<ChunkOp> self, std::vector<std::size_t> ids) {
  for (auto i : ids) {
    if (auto& t = self->task(i); t.error) self->fail(t.error);
    if (self->has_finish()) self->spawn(finish_one(self, i));
    else self->chunk_done();
  }
  co_return;
}

asio::awaitable<void> ChunkOp::finish_one(std::shared_ptr<ChunkOp> self, std::size_t i) {
  try {
    co_await self->finish(i);
  } catch (...) {
    self->fail(std::current_exception());
  }
  self->chunk_done();
}

void ChunkOp::chunk_done() {
  engine_.bytes.release(st_->chunk_bytes() * budget_factor());
  if (--remaining_ == 0) done_.notify();
}

asio::awaitable<void> ChunkOp::Done::wait() {
  if (fired) co_return;
  co_await asio::async_initiate<decltype(use_awaitable), void()>(
      [this](auto h) { waiter.emplace(std::move(h)); }, use_awaitable);
}

void ChunkOp::Done::notify() {
  fired = true;
  if (waiter) {
    auto w = std::move(*waiter);
    waiter.reset();
    wake(std::move(w));
  }
}

}  // namespace zarrcoro::detail
