// Arrays: the path of a read and a write (see shared DESIGN.md):
// plan chunks -> fetch on the io_context (bounded) -> batches of codec work on
// the pool -> (writes) store on the io_context. Regions: region.cpp.
#include <zarrcoro/array.hpp>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <future>
#include <string_view>
#include <random>

#include <list>
#include <span>

#include <boost/asio/append.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/system_executor.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/this_coro.hpp>
#include <spdlog/spdlog.h>

#include <zarrcoro/error.hpp>
#include <zarrcoro/runtime.hpp>
#include <zarrcoro/spawn.hpp>

#include "codecs/pipeline.hpp"
#include "codecs/sharding.hpp"
#include "codecs/vlen.hpp"
#include "engine/array_state.hpp"
#include "engine/blocking.hpp"
#include "engine/checked.hpp"
#include "engine/engine_state.hpp"
#include "engine/indexing.hpp"
#include "engine/consolidated.hpp"
#include "engine/node.hpp"

namespace zarrcoro {

namespace asio = boost::asio;
using asio::use_awaitable;
using detail::ChunkPart;
using detail::ChunkParts;

// ---- chunk operations ------------------------------------------------------
namespace {

// Rethrows a codec error with the chunk key filled in.
[[noreturn]] void rethrow_with_key(std::exception_ptr e, const std::string& key) {
  try {
    std::rethrow_exception(e);
  } catch (const Error& err) {
    if (!err.key().empty()) throw;
    throw_error(err.code(), key, err.field(), err.detail());
  }
}

// Common driver of a read or write over many chunks, running on one strand.
// Chunk flows are spawned while the in-flight byte budget allows; each flow
// fetches its chunk and "arrives"; arrived chunks are handed to the scheduler
// in batches that close once they hold batch_chunks inner chunks (a chunk
// counts as one, a shard as the inner chunks it decodes), and a partial batch only when
// no other flow of this call can arrive without waiting (so a call touching
// N chunks makes at most ceil(N / batch_chunks) submissions when nothing
// waits). Small chunks are fetched in windows (fetch_at_once) without a
// coroutine each, where the store can answer at once.
//
// Cancellation (start() with a handler whose cancellation slot is
// connected): no further chunk is started, the store requests in flight
// and the waits for budget, request slots and key locks are cancelled, and
// codec work not yet begun is skipped; the operation completes with
// Cancelled once the codec work already running (at most a chunk per pool
// thread) has ended, so the caller's buffer is never touched afterwards.
// A write's store requests in flight are cancelled too: each chunk keeps
// its old value or gets its new one (stores replace values atomically).
//
// Completion: the handler is dispatched through its associated executor by
// whichever thread ends the operation (that executor counts the op as
// outstanding work until then). A read whose last batch goes to the pool is
// handed off to it (see submit): the pool thread that runs the batch's last
// task completes the operation, so a read costs no hop back to the I/O
// thread; from then on the strand touches nothing that the pool thread does
// (cancel() only sets cancel_flag_). (If the scheduler cannot hand the batch
// to the pool, it completes the op on the I/O thread, within submit.)
class ChunkOp : public std::enable_shared_from_this<ChunkOp> {
 public:
  // The op's state is touched only from this executor: the io_context's own
  // executor when one thread runs it (handlers are serialized already, and it
  // is much cheaper to copy), a strand otherwise.
  using Strand = asio::any_io_executor;

  ChunkOp(std::shared_ptr<const Array::State> st, ChunkParts parts)
      : st_(std::move(st)),
        engine_(st_->rt->engine()),
        strand_(st_->rt->serialized_io() ? Strand(st_->rt->io_executor())
                                         : Strand(asio::make_strand(st_->rt->io_context()))),
        parts_(std::move(parts)),
        batch_chunks_(std::max<std::size_t>(1, st_->rt->options().batch_chunks)) {}
  virtual ~ChunkOp() = default;

  // Runs the operation on the strand and completes `handler` (signature
  // void(std::exception_ptr)) through its associated executor; honours the
  // handler's cancellation slot (see above).
  template <class Handler>
  void start(Handler handler) {
    auto slot = asio::get_associated_cancellation_slot(handler);
    auto ex = asio::prefer(asio::get_associated_executor(handler, strand_), asio::execution::outstanding_work.tracked);
    completion_.emplace([h = std::move(handler), ex](std::exception_ptr e) mutable {
      asio::dispatch(ex, [h = std::move(h), e]() mutable { std::move(h)(e); });
    });
    // run()'s own end completes the op, unless its last batch was handed off.
    auto done = [self = shared_from_this()](std::exception_ptr e) {
      if (self->handed_off_) return;
      const bool idle = self->remaining_ == 0 && self->active_ == 0;  // no chunk stage runs
      if (idle) self->release_tables();
      self->complete(e, idle);
    };
    if (!slot.is_connected()) {
      asio::co_spawn(strand_, run(), std::move(done));
      return;
    }
    cancellable_ = true;
    // Total cancellation (no side effects at all) cannot be honoured once a
    // chunk is written or decoded: only terminal and partial stop the op.
    slot.assign([op = weak_from_this()](asio::cancellation_type type) {
      if ((type & (asio::cancellation_type::terminal | asio::cancellation_type::partial)) == asio::cancellation_type::none)
        return;
      auto self = op.lock();
      if (!self) return;
      self->cancel_flag_.store(true, std::memory_order_relaxed);  // at once: the loop may be busy
      asio::dispatch(self->strand_, [self] { self->cancel(); });
    });
    // Spawned from the strand, so that run_signal_ is touched there only.
    asio::dispatch(strand_, [self = shared_from_this(), done = std::move(done)]() mutable {
      co_spawn_safe(self->strand_, self->run(), asio::bind_cancellation_slot(self->run_signal_.slot(), std::move(done)));
    });
  }

 private:
  // Runs the whole operation; on strand_.
  asio::awaitable<void> run() {
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

  // Spawns a chunk's fetch or store stage (which handles its own errors)
  // on the strand, reachable by cancel() when the op is cancellable.
  void spawn(asio::awaitable<void> stage) {
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

  // On strand_.
  void cancel() {
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

 protected:
  // Per-chunk stages, implemented by reads and writes.
  virtual asio::awaitable<void> fetch(std::size_t i) = 0;  // on strand
  virtual detail::ChunkTask& task(std::size_t i) = 0;
  // Whether chunk i may be fetched by fetch_now rather than fetch(i).
  virtual bool can_fetch_now(std::size_t) const { return false; }
  // Fetches the chunks `parts` at once, without a coroutine per chunk, where
  // the store can answer without waiting (Store::try_read_now_many);
  // answered[k] false: run fetch(parts[k]) instead. A failure is recorded on
  // its task (answered).
  virtual void fetch_now(std::span<const std::size_t> parts, std::vector<char>& answered) {
    answered.assign(parts.size(), 0);
  }
  virtual bool has_finish() const { return false; }
  virtual asio::awaitable<void> finish(std::size_t i) { co_return; }  // on strand, after codec work
  virtual std::size_t budget_factor() const { return 1; }
  // On strand, once every chunk is done without error (read_strings: turn the views into strings).
  virtual asio::awaitable<void> after_all() { co_return; }
  virtual bool has_after_all() const { return false; }
  // Frees the tables per chunk, once no chunk stage can use them.
  virtual void release_tables() { ChunkParts().swap(parts_); }

  void fail(std::exception_ptr e) {
    if (!error_) error_ = e;
  }

  // A versioned store read within the runtime's in-flight request limit,
  // conditional on `if_equal` when it is known, into `into` if the store
  // can (ReadOptions::into).
  asio::awaitable<ReadResult> read(std::string key, ByteRange range, Generation if_equal,
                                   MutableByteSpan into = MutableByteSpan()) {
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

  // A store write (or erase, for nullopt) within the same request limit,
  // conditional on `if_equal` when it is known; nullopt when the condition
  // failed. Every store operation the engine issues is bounded: besides
  // sparing the store, Boost 1.81's io_uring service stalls when too many
  // file operations complete at once (see the regression test "thousands of
  // chunks").
  // Counted in engine_.writes (for partial shard reads on stores that
  // cannot version values).
  asio::awaitable<std::optional<Generation>> put(std::string key, std::optional<Bytes> value, Generation if_equal) {
    co_await acquire_request();
    WriteOptions options;
    options.if_equal = std::move(if_equal);
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

  // A request slot; raises Cancelled if the wait for one was cancelled.
  asio::awaitable<void> acquire_request() {
    if (engine_.requests.try_acquire(1)) co_return;
    const bool taken = co_await engine_.requests.acquire(1);  // (not inside a condition: g++ 12)
    if (!taken) throw_cancelled();
  }

  [[noreturn]] void throw_cancelled() const { throw Cancelled("", "", "cancelled while waiting"); }
  std::exception_ptr cancelled_error() const {
    return std::make_exception_ptr(Cancelled("", "", "the operation on array '" + st_->path + "' was cancelled"));
  }

  // Runs one task through the scheduler (batched with whatever else is
  // submitted in this turn) and resumes when it is done.
  asio::awaitable<void> run_task(detail::ChunkTask& task) {
    auto batch = std::make_shared<detail::TaskBatch>();
    batch->tasks = {&task};
    auto& scheduler = engine_.scheduler;
    co_await asio::async_initiate<decltype(use_awaitable), void()>(
        [&](auto handler) {
          auto waiter = std::make_shared<detail::Waiter>(std::move(handler));
          batch->on_done = [waiter] { detail::wake(std::move(*waiter)); };
          scheduler.submit(batch);
        },
        use_awaitable);
  }

  // A flow that cannot proceed without waiting on another call (a key lock)
  // must step out of `active_` so that this call's ready chunks still flush.
  void suspend_active() {
    --active_;
    maybe_flush();
  }
  void resume_active() { ++active_; }

  std::shared_ptr<const Array::State> st_;
  detail::EngineState& engine_;
  Strand strand_;
  ChunkParts parts_;
  bool cancelled_ = false;                // on strand_
  std::atomic<bool> cancel_flag_{false};  // the same, for codec tasks on the pool

 private:
  // How long run() fetches synchronously before letting the io_context run
  // other handlers.
  static constexpr std::chrono::microseconds kSyncSlice{200};

  // Chunks fetched together by fetch_now: enough to share a store's work
  // over threads, few enough to keep the loop responsive.
  static constexpr std::size_t kWindow = 32;

  // fetch_now for `window`; the parts it answered arrive, the others start
  // their flow. Empties `window`.
  void fetch_at_once(std::vector<std::size_t>& window) {
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

  // One chunk: fetch, then wait for the batch, then finish.
  static asio::awaitable<void> flow(std::shared_ptr<ChunkOp> self, std::size_t i) {
    try {
      co_await self->fetch(i);
    } catch (...) {
      self->task(i).error = std::current_exception();  // skipped by the scheduler
    }
    --self->active_;
    self->arrive(i);
  }

  // Chunk i is fetched (or failed): it waits for its batch.
  void arrive(std::size_t i) {
    pending_.push_back(i);
    pending_weight_ += weight(i);
    maybe_flush();
  }

  // A chunk's share of a batch: the inner chunks it decodes, so that a
  // large shard closes a batch by itself and starts decoding as soon as it is in.
  std::size_t weight(std::size_t i) { return std::max<std::size_t>(1, task(i).max_parts); }

  void maybe_flush() {
    while (pending_weight_ >= batch_chunks_) submit(next_batch_size());
    if (!pending_.empty() && active_ == 0 && spawner_idle_)
      while (!pending_.empty()) submit(next_batch_size());
  }

  // How many pending chunks the next batch takes: until their weight reaches batch_chunks, at least one.
  std::size_t next_batch_size() {
    std::size_t n = 0, w = 0;
    while (n < pending_.size() && w < batch_chunks_) w += weight(pending_[n++]);
    return n;
  }

  void submit(std::size_t n) {
    // Everything that allocates comes first: a throw (out of memory) leaves
    // the chunks in pending_, and run() fails the op.
    const auto first = pending_.begin(), last = pending_.begin() + static_cast<std::ptrdiff_t>(n);
    auto batch = std::make_shared<detail::TaskBatch>();
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

  // Whether a batch of n chunks would end the op with its codec work:
  // every other chunk is done (remaining_ counts those not yet started,
  // fetching and pending too), and nothing is left to finish after it.
  bool is_last_batch(std::size_t n) const {
    return remaining_ == n && !cancelled_ && !has_finish() && !has_after_all();
  }

  // The op's end on the pool thread that ran its last batch (handed_off_),
  // or on the I/O thread if the scheduler could not hand that batch over.
  void complete_on_pool(const std::vector<std::size_t>& ids) {
    if (cancel_flag_.load(std::memory_order_relaxed)) fail(cancelled_error());
    for (auto i : ids) {
      if (auto& t = task(i); t.error) fail(t.error);
      engine_.bytes.release(st_->chunk_bytes() * budget_factor());
    }
    release_tables();
    complete(error_);
  }

  // Dispatches the handler; exactly once, from the strand or (handed off)
  // complete_on_pool. Callers free the tables per chunk first where no
  // chunk stage can still use them: the thread that completes the op may
  // still hold it when the caller's next call makes its own, which then
  // takes their blocks from the cache instead of faulting in new ones.
  // The op lets go of the array's state (and so of the store) first, unless
  // a chunk stage still runs (a run() that failed early): the caller may
  // free what it lent the array as soon as it learns of the end, while this
  // thread, still unwinding the op, may wait long for its core (a codec
  // thread under SCHED_IDLE). Nothing uses st_ after this.
  void complete(std::exception_ptr e, bool idle = true) {
    auto c = std::move(*completion_);
    completion_.reset();
    if (idle) st_.reset();
    std::move(c)(e);
  }

  // On the strand, after a batch's codec work: record errors, then finish
  // (store) its chunks concurrently; each finished chunk returns its budget.
  static asio::awaitable<void> after_batch(std::shared_ptr<ChunkOp> self, std::vector<std::size_t> ids) {
    for (auto i : ids) {
      if (auto& t = self->task(i); t.error) self->fail(t.error);
      if (self->has_finish()) self->spawn(finish_one(self, i));
      else self->chunk_done();
    }
    co_return;
  }

  static asio::awaitable<void> finish_one(std::shared_ptr<ChunkOp> self, std::size_t i) {
    try {
      co_await self->finish(i);
    } catch (...) {
      self->fail(std::current_exception());
    }
    self->chunk_done();
  }

  void chunk_done() {
    engine_.bytes.release(st_->chunk_bytes() * budget_factor());
    if (--remaining_ == 0) done_.notify();
  }

  // A one-shot completion for the awaiting run().
  struct Done {
    std::optional<detail::Waiter> waiter;
    bool fired = false;
    asio::awaitable<void> wait() {
      if (fired) co_return;
      co_await asio::async_initiate<decltype(use_awaitable), void()>(
          [this](auto h) { waiter.emplace(std::move(h)); }, use_awaitable);
    }
    void notify() {
      fired = true;
      if (waiter) {
        auto w = std::move(*waiter);
        waiter.reset();
        detail::wake(std::move(w));
      }
    }
  };

  std::size_t batch_chunks_;
  std::size_t active_ = 0, remaining_ = 0;
  bool spawner_idle_ = false;
  bool cancellable_ = false, finished_ = false;
  bool handed_off_ = false;  // set on strand_ by submit(), never unset
  // The handler, dispatched through its executor; emplaced once (Boost 1.81's
  // any_completion_handler move-assignment recurses).
  std::optional<asio::any_completion_handler<void(std::exception_ptr)>> completion_;
  asio::cancellation_signal run_signal_;                // cancels run()'s budget wait
  std::list<asio::cancellation_signal> stage_signals_;  // one per stage in flight
  std::vector<std::size_t> pending_;
  std::size_t pending_weight_ = 0;  // of pending_
  std::vector<char> answered_;  // fetch_at_once's scratch
  std::exception_ptr error_;
  Done done_;
};

// ---- reads -------------------------------------------------------------------

class ReadOp final : public ChunkOp {
 public:
  // `strings`: read_strings' result (sized to the region), filled from the
  // views in `out` once every chunk is in.
  ReadOp(std::shared_ptr<const Array::State> st, ChunkParts parts, Region region,
         MutableByteSpan out, std::vector<std::string>* strings = nullptr)
      : ChunkOp(std::move(st), std::move(parts)), region_shape_(region.shape()), out_(out), strings_(strings) {
    if (st_->meta.data_type.is_variable_length()) heap_ = std::make_unique<codecs::VlenHeap>();
    tasks_.reserve(parts_.size());
    for (std::size_t i = 0; i < parts_.size(); ++i) tasks_.emplace_back(this, i).cancelled = &cancel_flag_;
  }

 private:
  // The inner chunks of one shard that a partial read needs.
  struct InnerPiece {
    ChunkPart part;         // within the shard; out_start relative to the shard part
    std::size_t buffer;     // index into `buffers`; npos when the inner chunk is absent; kInPlace
    std::uint64_t offset, size;
  };
  // InnerPiece::buffer of an inner chunk the store read straight into out_.
  static constexpr std::size_t kInPlace = std::string::npos - 1;
  // A shard's task may run in parts (max_parts: its inner chunks), which the
  // pool's threads share: part k of n decodes the k-th n-th of `pieces`.
  struct Task final : detail::ChunkTask {
    Task(ReadOp* op, std::size_t i) : op(op), i(i) {}
    void run() override {
      prepare();
      run_part(0, 1);
      finish();
    }
    void prepare() override {
      if (encoded && op->st_->shard) op->split_shard(i);  // a whole shard was fetched
    }
    void run_part(std::size_t k, std::size_t n) override {
      if (!pieces.empty()) op->decode_pieces(i, pieces.size() * k / n, pieces.size() * (k + 1) / n);
      else if (k == 0 && !in_place) op->decode(i, encoded);
    }
    void finish() override { buffers.clear(); }  // free the encoded bytes early
    ReadOp* op;
    std::size_t i;
    bool in_place = false;  // the store read the chunk straight into out_: nothing left to do
    std::optional<Bytes> encoded;
    std::vector<InnerPiece> pieces;  // partial shard reads
    std::vector<Bytes> buffers;      // coalesced byte ranges of the shard
  };

  asio::awaitable<void> fetch(std::size_t i) override {
    const auto& p = parts_[i];
    if (by_inner_chunks(i)) {
      const bool fetched_inner = co_await fetch_inner_chunks(i);  // no co_await beside && (g++ 12)
      if (fetched_inner) co_return;
    }
    Generation unconditional;  // named: g++ 12 and temporaries beside co_await
    const MutableByteSpan into = st_->shard ? MutableByteSpan() : read_target(*st_->pipeline, p, p.out_start);
    auto got = co_await read(st_->chunk_key(p.coords), ByteRange::all(), std::move(unconditional), into);
    fetched(i, std::move(got));
  }

  bool can_fetch_now(std::size_t i) const override { return !by_inner_chunks(i); }

  // Whether part i of a shard is read by its inner chunks (index, then
  // ranges): a partial shard always; a whole one when the store can read
  // its inner chunks straight into out_ and the shard is large enough for
  // that to beat one read of it (small ones are fetched many at once).
  bool by_inner_chunks(std::size_t i) const {
    if (!st_->shard) return false;
    if (!parts_[i].whole_chunk) return true;
    return st_->chunk_bytes() > kInPlaceShardBytes && inner_chunks_land_in_place();
  }
  // Whether the store can read whole inner chunks straight into out_: a
  // plain-copy inner pipeline, each inner chunk one contiguous run there.
  bool inner_chunks_land_in_place() const {
    const auto& inner = st_->shard->inner();
    return inner.is_trivial() && !heap_ && st_->store->reads_into() && lands_contiguously(inner.chunk_spec().shape);
  }
  static constexpr std::uint64_t kInPlaceShardBytes = std::uint64_t{256} << 10;

  void fetch_now(std::span<const std::size_t> parts, std::vector<char>& answered) override {
    keys_now_.clear();
    options_now_.assign(parts.size(), ReadOptions{});
    for (std::size_t k = 0; k < parts.size(); ++k) {
      const ChunkPart& p = parts_[parts[k]];
      keys_now_.push_back(st_->chunk_key(p.coords));
      if (!st_->shard) options_now_[k].into = read_target(*st_->pipeline, p, p.out_start);
      options_now_[k].need_generation = false;  // a whole chunk, read unconditionally
      options_now_[k].size_hint = size_hint();
    }
    read_now_.assign(parts.size(), ReadNow{});
    st_->store->try_read_now_many(keys_now_, options_now_, read_now_);
    answered.assign(parts.size(), 1);
    for (std::size_t k = 0; k < parts.size(); ++k) {
      if (read_now_[k].error) tasks_[parts[k]].error = std::move(read_now_[k].error);  // skipped by the scheduler
      else if (read_now_[k].result) fetched(parts[k], std::move(*read_now_[k].result));
      else answered[k] = 0;
    }
  }

  // Chunk i's stored value (none: absent, reads as fill_value) is in, or
  // already in out_ (got.in_place).
  void fetched(std::size_t i, ReadResult got) {
    auto& t = tasks_[i];
    if (got.in_place) {
      t.in_place = true;
      t.bytes = 0;
      t.computes = false;
      return;
    }
    std::optional<Bytes>& v = got.value;
    const ChunkPart& p = parts_[i];
    std::uint64_t n = st_->meta.data_type.size();
    for (auto s : p.shape) n *= s;
    t.bytes = v ? std::max<std::uint64_t>(n, st_->chunk_bytes()) : n;
    t.computes = v && !st_->pipeline->is_trivial();
    // A whole shard splits into the inner chunks the part touches.
    t.max_parts = 1;
    if (v && st_->shard)
      for (std::size_t d = 0; d < p.shape.size(); ++d) {
        const std::uint64_t c = st_->shard->chunk_shape()[d];
        t.max_parts *= (p.chunk_start[d] + p.shape[d] + c - 1) / c - p.chunk_start[d] / c;
      }
    t.encoded = std::move(v);
  }

  // A part of a shard: fetch the shard index (cached), then only the inner
  // chunks the part touches, by byte ranges coalesced across small gaps.
  // Every range is read conditionally on the generation the index came
  // from, so index and inner chunks are of one version of the shard; when
  // the shard changed (a rewrite by anyone, or a stale cached index) the
  // part is planned again from a fresh index. False when the shard kept
  // changing: the caller then reads it whole, in one request (one version
  // by construction), so a reader makes progress under any write load.
  asio::awaitable<bool> fetch_inner_chunks(std::size_t i) {
    const std::string key = st_->chunk_key(parts_[i].coords);
    for (unsigned attempt = 0; attempt < kShardReadAttempts; ++attempt)
      if (co_await try_fetch_inner_chunks(i, key, attempt > 0)) co_return true;
    tasks_[i].pieces.clear();
    tasks_[i].buffers.clear();
    co_return false;
  }

  static constexpr unsigned kShardReadAttempts = 4;

  // One attempt; false when the shard changed under it.
  asio::awaitable<bool> try_fetch_inner_chunks(std::size_t i, std::string key, bool refetch_index) {
    const auto& sc = *st_->shard;
    const ChunkPart& p = parts_[i];
    auto& t = tasks_[i];
    t.pieces.clear();
    t.buffers.clear();
    const std::uint64_t writes_before = engine_.writes.now(key);
    const ShardIndex found = co_await shard_index(key, refetch_index);
    const auto& shard = found.entry;
    t.computes = false;
    t.bytes = 0;
    t.max_parts = 1;
    if (!shard.index) {  // no shard: fill
      t.bytes = st_->meta.data_type.size();
      for (auto s : p.shape) t.bytes *= s;
      co_return true;
    }
    const MutableByteSpan whole = whole_shard_target(i, *shard.index);
    bool current;  // (named: no co_await beside ?: in g++ 12)
    if (!whole.empty()) current = co_await read_back_to_back(i, key, shard, whole);
    else current = co_await read_planned(i, key, shard, found.cached);
    // Without generations, only this runtime's writes can be seen to have
    // replaced the shard meanwhile.
    if (current && shard.generation.unknown()) current = engine_.writes.unchanged(key, writes_before);
    if (!current) {
      engine_.shard_indexes.invalidate(st_->store, key, *st_->shard);
      co_return false;
    }
    t.in_place = t.pieces.empty();
    // What is left for the pool: decoding the buffered inner chunks, filling the absent ones.
    const std::size_t left = static_cast<std::size_t>(
        std::count_if(t.pieces.begin(), t.pieces.end(), [](const InnerPiece& x) { return x.buffer != kInPlace; }));
    t.bytes = left * sc.inner().chunk_spec().num_bytes();
    t.computes = !t.buffers.empty();
    t.max_parts = left > 0 ? t.pieces.size() : 1;
    co_return true;
  }

  // The reads of try_fetch_inner_chunks for part i of shard `key` (index
  // and generation in `shard`): they leave in tasks_[i] the pieces and
  // buffers the pool has left to place; false when the shard changed.
  //
  // This one when whole_shard_target gave `whole`: requests of whole inner
  // chunks of at most coalesce_max bytes, read in place, with no plan per
  // inner chunk (pieces stay empty unless the store answers with a value
  // of its own).
  asio::awaitable<bool> read_back_to_back(std::size_t i, std::string key, detail::ShardIndexCache::Entry shard,
                                          MutableByteSpan whole) {
    auto& t = tasks_[i];
    const std::uint64_t n = st_->shard->inner().chunk_spec().num_bytes(), begin = shard.index->offset(0);
    const std::uint64_t step = std::max<std::uint64_t>(1, st_->rt->options().coalesce_max / n) * n;
    for (std::uint64_t at = 0; at < whole.size(); at += step) {
      const std::uint64_t len = std::min<std::uint64_t>(step, whole.size() - at);
      auto got = co_await read(key, ByteRange::from(begin + at, len), shard.generation, whole.subspan(at, len));
      if (got.changed || !got.value) co_return false;  // replaced or erased since the index
      check_range(key, got, begin + at, begin + at + len);
      if (got.in_place) continue;
      if (t.pieces.empty()) {  // then place what came as values of their own on the pool
        plan_pieces(i, *shard.index);
        for (auto& piece : t.pieces) piece.buffer = kInPlace;
      }
      for (std::uint64_t k = at / n; k < (at + len) / n; ++k) {
        t.pieces[k].buffer = t.buffers.size();
        t.pieces[k].offset = k * n - at;
      }
      t.buffers.push_back(std::move(*got.value));
    }
    co_return true;
  }

  // This one otherwise: the inner chunks part i touches, planned one by
  // one, read by their byte ranges sorted by offset and coalesced across
  // small gaps, in place where a run lands so in out_ (in_place_run).
  asio::awaitable<bool> read_planned(std::size_t i, std::string key, detail::ShardIndexCache::Entry shard,
                                     bool cached) {
    auto& t = tasks_[i];
    plan_pieces(i, *shard.index);
    std::vector<std::size_t> order;
    for (std::size_t k = 0; k < t.pieces.size(); ++k)
      if (t.pieces[k].buffer != std::string::npos) order.push_back(k);
    std::sort(order.begin(), order.end(),
              [&](auto a, auto b) { return t.pieces[a].offset < t.pieces[b].offset; });
    // Only the range reads below check a cached index against the shard:
    // without one (every inner chunk needed is absent from the index), a
    // read of one byte must, or inner chunks written since (by another
    // process, or by a write whose index a slower reader's replaced in the
    // cache) would read as fill_value.
    if (order.empty() && cached) {
      const auto got = co_await read(key, ByteRange::from(0, 1), shard.generation);
      if (got.changed || !got.value) co_return false;
    }
    const auto& opt = st_->rt->options();
    for (std::size_t k = 0; k < order.size();) {
      const std::uint64_t begin = t.pieces[order[k]].offset;
      std::uint64_t end = begin + t.pieces[order[k]].size;
      std::size_t last = k + 1;
      for (; last < order.size(); ++last) {
        const auto& next = t.pieces[order[last]];
        const std::uint64_t new_end = std::max(end, next.offset + next.size);
        if (next.offset > saturating_add(end, opt.coalesce_gap) || new_end - begin > opt.coalesce_max) break;
        end = new_end;
      }
      const MutableByteSpan into = in_place_run(i, order, k, last);
      auto got = co_await read(key, ByteRange::from(begin, end - begin), shard.generation, into);
      if (got.changed || !got.value) co_return false;  // replaced or erased since the index
      check_range(key, got, begin, end);
      for (std::size_t j = k; j < last; ++j) {
        t.pieces[order[j]].buffer = got.in_place ? kInPlace : t.buffers.size();
        t.pieces[order[j]].offset -= begin;
      }
      if (!got.in_place) t.buffers.push_back(std::move(*got.value));
      k = last;
    }
    co_return true;
  }

  // Raises CorruptChunk unless `got`, the read of bytes [begin, end) of
  // shard `key` (a value), holds all of them.
  static void check_range(const std::string& key, const ReadResult& got, std::uint64_t begin, std::uint64_t end) {
    if (!got.in_place && got.value->size() != end - begin)
      throw CorruptChunk(key, "sharding_indexed",
                         "the shard is shorter than its index says (bytes " + std::to_string(begin) + "-" +
                             std::to_string(end) + ")");
  }

  // The place in out_ of whole shard part i when one read can fill it: the
  // shard is one contiguous run of out_, and so is each of its plain-copy
  // inner chunks, so (both landing contiguously) the inner chunks follow
  // one another there in C order; and `index` has every inner chunk at its
  // decoded size, back to back in that order from offset(0). Empty
  // otherwise (then the inner chunks are planned one by one).
  MutableByteSpan whole_shard_target(std::size_t i, const codecs::ShardingCodec::Index& index) const {
    if (!inner_chunks_land_in_place()) return {};
    const ChunkPart& p = parts_[i];
    const MutableByteSpan target = contiguous_target(st_->pipeline->chunk_spec(), p, p.out_start);
    const std::uint64_t n = st_->shard->inner().chunk_spec().num_bytes();
    if (target.empty() || n == 0 || index.entries.size() != 2 * (target.size() / n)) return {};
    const std::uint64_t begin = index.offset(0);
    if (begin > codecs::ShardingCodec::kMissing - target.size()) return {};
    for (std::size_t k = 0, count = target.size() / n; k < count; ++k)
      if (index.offset(k) != begin + k * n || index.nbytes(k) != n) return {};
    return target;
  }

  // The place in out_ of the inner chunks order[k, last) of part i, when
  // the store can read them there as they are: a plain-copy inner pipeline,
  // each stored at its decoded size, back to back in the shard and in out_.
  // Empty otherwise.
  MutableByteSpan in_place_run(std::size_t i, const std::vector<std::size_t>& order, std::size_t k,
                               std::size_t last) const {
    const auto& pieces = tasks_[i].pieces;
    const ChunkPart& p = parts_[i];
    std::byte* start = nullptr;
    std::uint64_t size = 0;
    detail::Dims out_start(p.out_start.size());
    for (std::size_t j = k; j < last; ++j) {
      const InnerPiece& piece = pieces[order[j]];
      for (std::size_t d = 0; d < out_start.size(); ++d) out_start[d] = p.out_start[d] + piece.part.out_start[d];
      const MutableByteSpan target = read_target(st_->shard->inner(), piece.part, out_start);
      if (target.empty() || target.size() != piece.size) return {};
      if (j == k) start = target.data();
      else if (piece.offset != pieces[order[k]].offset + size || target.data() != start + size) return {};
      size += piece.size;
    }
    return {start, size};
  }

  // The inner chunks part i needs, located by `index` (buffer 0 at the
  // index's offsets; npos for absent inner chunks).
  void plan_pieces(std::size_t i, const codecs::ShardingCodec::Index& index) {
    const auto& sc = *st_->shard;
    const ChunkPart& p = parts_[i];
    Region sub{{p.chunk_start.begin(), p.chunk_start.end()}, {}};
    for (std::size_t d = 0; d < p.shape.size(); ++d) sub.stop.push_back(p.chunk_start[d] + p.shape[d]);
    auto inner = detail::plan_chunks(st_->meta.chunk_shape, sc.chunk_shape(), sub);
    auto& pieces = tasks_[i].pieces;
    pieces.reserve(inner.size());
    for (auto& ip : inner) {
      const std::size_t n = sc.inner_number(ip.coords);
      const bool missing = index.missing(n);
      InnerPiece& piece = pieces.emplace_back();
      piece.part = std::move(ip);
      piece.buffer = missing ? std::string::npos : 0;
      piece.offset = missing ? 0 : index.offset(n);
      piece.size = missing ? 0 : index.nbytes(n);
    }
  }

  // On a pool thread: a whole shard was fetched; read its index and address
  // its inner chunks in place, so each is decoded straight to the output.
  void split_shard(std::size_t i) {
    auto& t = tasks_[i];
    const auto& sc = *st_->shard;
    const ByteSpan in = *t.encoded;
    try {
      if (in.size() < sc.index_bytes())
        throw CorruptChunk("", "sharding_indexed", "the shard is shorter than its index");
      plan_pieces(i, sc.decode_index(sc.index_at_start() ? in.first(sc.index_bytes()) : in.last(sc.index_bytes()),
                                     in.size()));
    } catch (...) {
      rethrow_with_key(std::current_exception(), st_->chunk_key(parts_[i].coords));
    }
    t.buffers.push_back(std::move(*t.encoded));
    t.encoded.reset();
  }

  // The decoded index of shard `key` with the shard's generation (a null
  // index if the shard does not exist), from the cache unless `refetch`;
  // `cached` if it came from the cache (unchecked against the store).
  struct ShardIndex {
    detail::ShardIndexCache::Entry entry;
    bool cached = false;
  };
  asio::awaitable<ShardIndex> shard_index(std::string key, bool refetch) {
    auto& cache = engine_.shard_indexes;
    if (!refetch)
      if (auto hit = cache.find(st_->store, key, *st_->shard)) co_return ShardIndex{std::move(*hit), true};
    const auto& sc = *st_->shard;
    const auto range = sc.index_at_start() ? ByteRange::from(0, sc.index_bytes()) : ByteRange::last(sc.index_bytes());
    Generation unconditional;
    auto got = co_await read(key, range, std::move(unconditional));
    if (!got.value) co_return ShardIndex{{nullptr, std::move(got.generation)}};
    // Decoding (and checking) the index is codec work: it goes to the pool.
    struct IndexTask final : detail::ChunkTask {
      void run() override { index = std::make_shared<codecs::ShardingCodec::Index>(codec->decode_index(encoded)); }
      const codecs::ShardingCodec* codec;
      Bytes encoded;
      detail::ShardIndexCache::Index index;
    } task;
    task.codec = &sc;
    task.encoded = std::move(*got.value);
    task.bytes = task.encoded.size();
    task.computes = !sc.index_trivial();
    co_await run_task(task);
    if (task.error) rethrow_with_key(task.error, key);
    detail::ShardIndexCache::Entry entry{task.index, std::move(got.generation)};
    cache.put(st_->store, key, sc, entry);
    co_return ShardIndex{std::move(entry)};
  }

  detail::ChunkTask& task(std::size_t i) override { return tasks_[i]; }

  // On a pool thread (or inline when there is nothing to compute).
  void decode(std::size_t i, std::optional<Bytes>& encoded) {
    const codecs::VlenHeapScope heap_scope(heap_.get());
    const ChunkPart& p = parts_[i];
    if (!encoded) {
      detail::fill_box(out_.data(), region_shape_, p.out_start, p.shape, st_->fill.data(), st_->meta.data_type.size());
      return;
    }
    try {
      decode_to_out(*st_->pipeline, *encoded, p, p.out_start);
    } catch (...) {
      rethrow_with_key(std::current_exception(), st_->chunk_key(p.coords));
    }
    encoded.reset();  // free the encoded bytes early
  }

  // On a pool thread: decode the fetched inner chunks [from, to) of a shard part.
  void decode_pieces(std::size_t i, std::size_t from, std::size_t to) {
    const codecs::VlenHeapScope heap_scope(heap_.get());
    const ChunkPart& p = parts_[i];
    auto& t = tasks_[i];
    const auto& inner = st_->shard->inner();
    const std::size_t es = st_->meta.data_type.size();
    detail::Dims out_start(p.out_start.size());
    for (std::size_t j = from; j < to; ++j) {
      const auto& piece = t.pieces[j];
      for (std::size_t d = 0; d < out_start.size(); ++d) out_start[d] = p.out_start[d] + piece.part.out_start[d];
      if (piece.buffer == kInPlace) continue;
      if (piece.buffer == std::string::npos) {
        detail::fill_box(out_.data(), region_shape_, out_start, piece.part.shape, st_->fill.data(), es);
        continue;
      }
      try {
        decode_to_out(inner, ByteSpan(t.buffers[piece.buffer]).subspan(piece.offset, piece.size), piece.part,
                      out_start);
      } catch (...) {
        rethrow_with_key(std::current_exception(), st_->chunk_key(p.coords));
      }
    }
  }

  // Decodes one chunk of `pipeline` into `part` of out_, placed at
  // `out_start`: straight into out_ when the part is the whole chunk and
  // lands contiguously there; a trivial pipeline's bytes (a plain copy) are
  // copied from `encoded` directly; otherwise through a per-thread scratch
  // chunk. Raises what the pipeline raises.
  void decode_to_out(const codecs::CodecPipeline& pipeline, ByteSpan encoded, const ChunkPart& part,
                     const detail::Dims& out_start) {
    const auto& spec = pipeline.chunk_spec();
    const std::size_t es = spec.dtype.size();
    const std::uint64_t n = spec.num_bytes();
    if (const MutableByteSpan target = contiguous_target(spec, part, out_start); !target.empty()) {
      pipeline.decode(encoded, target);
      return;
    }
    ByteSpan decoded = encoded;
    if (!pipeline.is_trivial() || encoded.size() != n) {
      thread_local Bytes scratch;
      scratch.resize(n);
      pipeline.decode(encoded, scratch);
      decoded = scratch;
    }
    detail::copy_box(decoded.data(), spec.shape, part.chunk_start, out_.data(), region_shape_, out_start, part.shape,
                     es);
  }

  // A chunk's place in out_ (`part` of a chunk of `spec`, at `out_start`),
  // when the part is the whole chunk and lands contiguously there; empty
  // otherwise.
  MutableByteSpan contiguous_target(const codecs::ArraySpec& spec, const ChunkPart& part,
                                    const detail::Dims& out_start) const {
    if (!std::equal(spec.shape.begin(), spec.shape.end(), part.shape.begin(), part.shape.end()) ||
        !lands_contiguously(spec.shape))
      return {};
    std::uint64_t off = 0, stride = spec.dtype.size();
    for (std::size_t d = region_shape_.size(); d-- > 0;) {
      off += out_start[d] * stride;
      stride *= region_shape_[d];
    }
    return out_.subspan(off, spec.num_bytes());
  }

  // ReadOptions::size_hint for a whole chunk (or shard) as stored: its
  // decoded size and a margin for what codecs add (headers, checksums, a
  // shard's index, data that does not compress); 0 for variable-length
  // data, whose decoded size says nothing of its stored one.
  std::size_t size_hint() const {
    if (heap_) return 0;
    const std::uint64_t n = st_->chunk_bytes();
    return n + n / 64 + 256;
  }

  // Where the store may read a chunk of `pipeline` as it is stored
  // (ReadOptions::into): its contiguous_target when the pipeline is a plain
  // copy of fixed-size elements and the store reads in place; else empty.
  MutableByteSpan read_target(const codecs::CodecPipeline& pipeline, const ChunkPart& part,
                              const detail::Dims& out_start) const {
    if (heap_ || !pipeline.is_trivial() || !st_->store->reads_into()) return {};
    return contiguous_target(pipeline.chunk_spec(), part, out_start);
  }

  // True if a whole chunk of shape `chunk` is one contiguous run of out_:
  // every dimension after its first non-singleton one spans the region.
  bool lands_contiguously(const std::vector<std::uint64_t>& chunk) const {
    std::size_t d = 0;
    while (d < chunk.size() && chunk[d] == 1) ++d;
    for (++d; d < chunk.size(); ++d)
      if (chunk[d] != region_shape_[d]) return false;
    return true;
  }

  bool has_after_all() const override { return strings_ != nullptr; }
  void release_tables() override {
    decltype(tasks_)().swap(tasks_);
    ChunkOp::release_tables();
  }

  // The views in out_ -> *strings_, on the pool in parts (the pool's
  // threads share a large region).
  asio::awaitable<void> after_all() override {
    if (!strings_) co_return;
    struct Convert final : detail::ChunkTask {
      void run() override { run_part(0, 1); }
      void run_part(std::size_t k, std::size_t n) override {
        const std::size_t count = out->size();
        for (std::size_t e = count * k / n, end = count * (k + 1) / n; e < end; ++e) {
          codecs::VlenView v;
          std::memcpy(&v, views.data() + e * sizeof v, sizeof v);
          (*out)[e].assign(v.data ? v.data : "", v.size);
        }
      }
      ByteSpan views;
      std::vector<std::string>* out;
    } convert;
    convert.views = out_;
    convert.out = strings_;
    convert.bytes = out_.size();
    convert.computes = strings_->size() > 4096;  // small ones run inline
    convert.max_parts = std::max<std::size_t>(1, std::min<std::size_t>(64, strings_->size() / 4096));
    convert.cancelled = &cancel_flag_;
    co_await run_task(convert);
    if (convert.error) std::rethrow_exception(convert.error);
  }

  std::vector<std::uint64_t> region_shape_;
  MutableByteSpan out_;
  std::vector<std::string>* strings_ = nullptr;
  std::unique_ptr<codecs::VlenHeap> heap_;  // variable-length types: owns the decoded bytes out_'s views point into
  std::vector<Task, detail::CachedAllocator<Task>> tasks_;
  std::vector<std::string> keys_now_;  // fetch_now's scratch
  std::vector<ReadOptions> options_now_;
  std::vector<ReadNow> read_now_;
};

// ---- writes ------------------------------------------------------------------

class WriteOp final : public ChunkOp {
 public:
  WriteOp(std::shared_ptr<const Array::State> st, ChunkParts parts, Region region,
          ByteSpan in)
      : ChunkOp(std::move(st), std::move(parts)), region_shape_(region.shape()), in_(in) {
    if (st_->meta.data_type.is_variable_length()) heap_ = std::make_unique<codecs::VlenHeap>();
    tasks_.reserve(parts_.size());
    for (std::size_t i = 0; i < parts_.size(); ++i) tasks_.emplace_back(this, i).cancelled = &cancel_flag_;
  }

 private:
  struct Task final : detail::ChunkTask {
    Task(WriteOp* op, std::size_t i) : op(op), i(i) {}
    void run() override { op->encode(i); }
    WriteOp* op;
    std::size_t i;
    std::string key;
    bool locked = false;
    bool read_existing = false;  // a partial write: read-modify-write
    std::optional<Bytes> existing;
    Generation generation;       // of `existing` (absent() when there was none)
    Bytes encoded;
    detail::ShardIndexCache::Index index;  // of the shard in `encoded`, for the index cache
    bool erase = false;
  };

  bool has_finish() const override { return true; }

  // Encoded existing chunk + decoded chunk + encoded output.
  std::size_t budget_factor() const override { return 2; }

  asio::awaitable<void> fetch(std::size_t i) override {
    auto& t = tasks_[i];
    t.key = st_->chunk_key(parts_[i].coords);
    if (!engine_.key_locks.try_lock(t.key)) {
      suspend_active();
      const bool locked = co_await engine_.key_locks.lock(t.key);
      resume_active();
      if (!locked) throw_cancelled();
    }
    t.locked = true;
    t.bytes = st_->chunk_bytes();
    t.computes = !st_->pipeline->is_trivial();
    if (!parts_[i].whole_chunk) {
      t.read_existing = true;
      try {
        co_await read_existing(t);
      } catch (...) {
        unlock(t);
        throw;
      }
    }
  }

  // An all-fill chunk is erased, unless the store cannot erase it
  // conditionally (S3): an existing one is then overwritten with fill.
  bool erase_allowed(const Task& t) const {
    return !t.read_existing || t.generation.unknown() || t.generation.is_absent() ||
           st_->store->erases_atomically();
  }

  asio::awaitable<void> read_existing(Task& t) {
    Generation unconditional;
    auto got = co_await read(t.key, ByteRange::all(), std::move(unconditional));
    t.existing = std::move(got.value);
    t.generation = std::move(got.generation);
  }

  detail::ChunkTask& task(std::size_t i) override { return tasks_[i]; }

  // True if every element of `chunk` is the fill value (variable length: by content).
  bool all_fill(ByteSpan chunk, std::size_t es) const {
    if (!heap_) return detail::all_equal(chunk, st_->fill.data(), es);
    return codecs::all_views_equal(chunk, st_->fill_text);
  }

  void encode(std::size_t i) {
    const codecs::VlenHeapScope heap_scope(heap_.get());  // existing chunks decoded for a merge
    auto& t = tasks_[i];
    t.erase = false;
    const ChunkPart& p = parts_[i];
    const auto& spec = st_->pipeline->chunk_spec();
    const std::size_t es = spec.dtype.size();
    try {
      if (st_->shard) {
        // Rewrite the shard keeping the encoded inner chunks the write misses.
        std::optional<ByteSpan> existing;
        if (t.existing) existing = ByteSpan(*t.existing);
        t.erase = !st_->shard->update(spec, existing, in_.data(), region_shape_, p.out_start, p.chunk_start,
                                      p.shape, t.encoded);
        t.existing.reset();
        if (t.erase && !erase_allowed(t)) {
          st_->shard->encode_empty(t.encoded);
          t.erase = false;
        }
        // The new shard's index, so that a read after this write finds it cached.
        t.index.reset();
        if (!t.erase) {
          const auto& sc = *st_->shard;
          const ByteSpan shard = t.encoded;
          t.index = std::make_shared<codecs::ShardingCodec::Index>(sc.decode_index(
              sc.index_at_start() ? shard.first(sc.index_bytes()) : shard.last(sc.index_bytes()), shard.size()));
        }
        return;
      }
      thread_local Bytes chunk;
      chunk.resize(st_->chunk_bytes());
      if (t.existing) {
        st_->pipeline->decode(*t.existing, chunk);
        t.existing.reset();
      } else if (!std::equal(p.shape.begin(), p.shape.end(), spec.shape.begin())) {
        // New chunk (or an edge chunk): out-of-bounds and untouched parts hold the fill value.
        detail::fill_elements(chunk.data(), spec.num_elements(), st_->fill.data(), es);
      }
      detail::copy_box(in_.data(), region_shape_, p.out_start, chunk.data(), spec.shape, p.chunk_start,
                       p.shape, es);
      if (!st_->store_fill_chunks && all_fill(chunk, es) && erase_allowed(t)) {
        t.erase = true;
        return;
      }
      st_->pipeline->encode(chunk, t.encoded);
    } catch (...) {
      rethrow_with_key(std::current_exception(), t.key);
    }
  }

  // Stores the encoded chunk. A partial write is an optimistic
  // read-modify-write: it stores only if the chunk still has the generation
  // it was read at; when another writer (another runtime or process; this
  // runtime's writers wait on the key lock) replaced it in between, it reads
  // the chunk again, merges again on the pool and retries. Every failed
  // attempt means another writer made progress, so the retries go on while
  // that lasts, bounded by RuntimeOptions::write_conflict_timeout: a writer
  // that keeps losing to a faster one completes once that one pauses.
  asio::awaitable<void> finish(std::size_t i) override {
    auto& t = tasks_[i];
    if (!t.locked) co_return;  // its fetch failed
    if (cancelled_ && !t.error) t.error = std::make_exception_ptr(Cancelled("", "", "cancelled before it was stored"));
    try {
      const auto give_up = std::chrono::steady_clock::now() + st_->rt->options().write_conflict_timeout;
      for (unsigned attempt = 1; !t.error; ++attempt) {
        std::optional<Bytes> value;
        if (!t.erase) value = std::move(t.encoded);
        const Generation if_equal = t.read_existing ? t.generation : Generation();
        const auto stored = co_await put(t.key, std::move(value), if_equal);
        if (st_->shard) {  // the new shard's index, or none when its generation is unknown
          if (stored && t.index && !stored->unknown())
            engine_.shard_indexes.put(st_->store, t.key, *st_->shard, {t.index, *stored});
          else
            engine_.shard_indexes.invalidate(st_->store, t.key, *st_->shard);
        }
        if (stored) break;
        if (cancelled_) throw_cancelled();  // the chunk keeps what the other writer stored
        if (std::chrono::steady_clock::now() >= give_up)
          throw StoreError(t.key, "generation",
                           "other writers replaced the chunk during each of " + std::to_string(attempt) +
                               " attempts to update it (write_conflict_timeout)");
        co_await backoff(attempt);
        co_await read_existing(t);
        co_await run_task(t);  // merge again
      }
      if (t.error) std::rethrow_exception(t.error);
    } catch (...) {
      unlock(t);
      throw;
    }
    unlock(t);
  }

  // A random wait before retrying a conflicting write, growing with the
  // attempt (up to ~50 ms), so that contending writers spread out instead
  // of colliding again in lockstep.
  asio::awaitable<void> backoff(unsigned attempt) {
    thread_local std::minstd_rand rng{std::random_device{}()};
    const std::uint64_t cap_us = std::uint64_t{50} << std::min(attempt, 10u);
    asio::steady_timer timer(strand_, std::chrono::microseconds(rng() % (cap_us + 1)));
    co_await timer.async_wait(use_awaitable);
  }

  void unlock(Task& t) {
    if (t.locked) engine_.key_locks.unlock(t.key);
    t.locked = false;
  }

  std::vector<std::uint64_t> region_shape_;
  ByteSpan in_;
  std::unique_ptr<codecs::VlenHeap> heap_;  // variable-length types: existing chunks' decoded bytes
  std::vector<Task, detail::CachedAllocator<Task>> tasks_;
};

// Raises InvalidArgument naming the array's metadata key unless `r` lies
// within the array and (when given) `buffer_bytes` is its exact size.
void check_region(const Array::State& st, const Region& r, std::optional<std::size_t> buffer_bytes) {
  const ArrayMetadata& m = st.meta;
  auto bad = [&](const char* field, const std::string& why) {
    throw InvalidArgument(detail::array_metadata_key(st.path, m.zarr_format), field, why);
  };
  if (r.start.size() != m.rank() || r.stop.size() != m.rank())
    bad("region", "rank " + std::to_string(r.start.size()) + " does not match the array's rank " +
                      std::to_string(m.rank()));
  for (std::size_t d = 0; d < m.rank(); ++d) {
    const std::string box = "[" + std::to_string(r.start[d]) + ", " + std::to_string(r.stop[d]) + ")";
    if (r.start[d] > r.stop[d]) bad("region", box + " stops before it starts in dimension " + std::to_string(d));
    if (r.stop[d] > m.shape[d])
      bad("region", box + " is outside [0, " + std::to_string(m.shape[d]) + ") in dimension " + std::to_string(d));
  }
  const auto bytes = checked_mul(r.num_elements(), m.data_type.size());
  if (!bytes) bad("region", "needs more bytes than fit in 64 bits");
  const std::uint64_t need = *bytes;
  if (buffer_bytes && *buffer_bytes != need)
    bad("buffer", "is " + std::to_string(*buffer_bytes) + " bytes, the region needs " + std::to_string(need));
}

// The op reading or writing `region` of `buf`; null when the region is empty.
template <class Op, class Buffer, class... Extra>
std::shared_ptr<Op> make_op(const std::shared_ptr<const Array::State>& st, const Region& region, Buffer buf,
                            Extra... extra) {
  check_region(*st, region, buf.size());
  auto parts = detail::plan_chunks(st->meta.shape, st->meta.chunk_shape, region);
  if (parts.empty()) return nullptr;
  return std::make_shared<Op>(st, std::move(parts), region, buf, extra...);
}

// Starts `op` with the completion `token` (signature void(std::exception_ptr));
// the token's cancellation slot reaches the op through its handler. The op
// owns the handler; the initiation keeps no reference to the op, so that a
// coroutine awaiting it does not either (the two would keep each other
// alive should the io_context be destroyed with the op in flight).
template <class Op, class Token>
auto initiate_op(std::shared_ptr<Op> op, Token&& token) {
  auto initiation = [op = std::move(op)](auto handler) mutable { std::exchange(op, nullptr)->start(std::move(handler)); };
  return asio::async_initiate<Token, void(std::exception_ptr)>(std::move(initiation), token);
}

template <class Op, class Buffer, class... Extra>
asio::awaitable<void> run_op(std::shared_ptr<const Array::State> st, Region region, Buffer buf, Extra... extra) {
  auto op = make_op<Op>(st, region, buf, extra...);
  if (op) co_await initiate_op(std::move(op), use_awaitable);
}

void check_fixed_size(const Array::State& st, const char* use);

// make_op for read / write of a fixed-size data type (not read_strings / write_strings).
template <class Op, class Buffer>
std::shared_ptr<Op> make_fixed_size_op(const std::shared_ptr<const Array::State>& st, const Region& region,
                                       Buffer buf) {
  check_fixed_size(*st, std::is_same_v<Op, ReadOp> ? "read_strings" : "write_strings");
  return make_op<Op>(st, region, buf);
}

// run_op for the token forms: errors, and an empty region, complete the
// handler through its executor (the runtime's io_context by default), never
// inside the initiating call.
template <class Op, class Buffer>
void start_op(const std::shared_ptr<const Array::State>& st, const Region& region, Buffer buf,
              detail::AnyCompletion<void> handler) {
  std::shared_ptr<Op> op;
  std::exception_ptr error;
  try {
    op = make_fixed_size_op<Op>(st, region, buf);
  } catch (...) {
    error = std::current_exception();
  }
  if (op) return op->start(std::move(handler));
  asio::post(st->rt->io_executor(), asio::append(std::move(handler), error));
}

// run_op for the blocking API: `op` (nullptr: nothing to do), planned on
// the calling thread, is completed from whichever thread ends it (a pool
// thread, for a read), with no coroutine on the io_context around it. The
// caller has called detail::refuse_runtime_thread first.
template <class Op>
void wait_op(std::shared_ptr<Op> op) {
  if (!op) return;
  std::promise<void> promise;
  auto done = promise.get_future();
  op->start(asio::bind_executor(asio::system_executor(), [p = std::move(promise)](std::exception_ptr e) mutable {
    if (e) p.set_exception(e);
    else p.set_value();
  }));
  done.get();
}

// Chunks per dimension d of a grid over n elements (no overflow near 2^64).
std::uint64_t grid_extent(const ArrayMetadata& m, std::uint64_t n, std::size_t d) {
  return n / m.chunk_shape[d] + (n % m.chunk_shape[d] != 0);
}

// The chunks of the old grid wholly outside `next` (another shape), in
// disjoint slabs: per dimension d the old grid's chunk indices past next's
// grid, with the dimensions before d inside both grids. Erased in batches.
asio::awaitable<void> erase_chunks_outside(std::shared_ptr<const Array::State> st, std::vector<std::uint64_t> next) {
  const auto& m = st->meta;
  const std::size_t rank = m.rank();
  std::vector<std::string> batch;
  for (std::size_t d = 0; d < rank; ++d) {
    std::vector<std::uint64_t> lo(rank, 0), hi(rank);
    for (std::size_t e = 0; e < rank; ++e) hi[e] = grid_extent(m, e < d ? std::min(next[e], m.shape[e]) : m.shape[e], e);
    lo[d] = grid_extent(m, next[d], d);
    if (lo[d] >= hi[d] || std::any_of(hi.begin(), hi.end(), [](auto h) { return h == 0; })) continue;
    std::vector<std::uint64_t> c = lo;
    for (bool more = true; more;) {
      batch.push_back(st->chunk_key(c));
      if (batch.size() == 4096) {
        auto full = std::exchange(batch, std::vector<std::string>());  // named: g++ 12
        co_await st->store->erase_many(std::move(full));
      }
      more = false;
      for (std::size_t e = rank; e-- > 0;) {
        if (++c[e] < hi[e]) {
          more = true;
          break;
        }
        c[e] = lo[e];
      }
    }
  }
  if (!batch.empty()) co_await st->store->erase_many(std::move(batch));
}

// Raw element access is for fixed-size types; variable-length ones go
// through read_strings / write_strings (their elements are views).
void check_fixed_size(const Array::State& st, const char* use) {
  if (st.meta.data_type.is_variable_length())
    throw InvalidArgument(detail::array_metadata_key(st.path, st.meta.zarr_format), "data_type",
                          "the array holds variable-length " + st.meta.data_type.describe() + " elements: use " + use);
}

void check_variable_length(const Array::State& st) {
  if (!st.meta.data_type.is_variable_length())
    throw InvalidArgument(detail::array_metadata_key(st.path, st.meta.zarr_format), "data_type",
                          "read_strings / write_strings need a string or bytes array, not " +
                              st.meta.data_type.describe());
}

asio::awaitable<void> read_raw(std::shared_ptr<const Array::State> st, Region region, MutableByteSpan out) {
  check_fixed_size(*st, "read_strings");
  co_await run_op<ReadOp>(std::move(st), std::move(region), out);
}

asio::awaitable<void> write_raw(std::shared_ptr<const Array::State> st, Region region, ByteSpan in) {
  check_fixed_size(*st, "write_strings");
  co_await run_op<WriteOp>(std::move(st), std::move(region), in);
}

// read_strings' buffers: the views the chunks decode to, and the strings
// they become (checked before anything is sized).
struct StringsRead {
  Bytes views;
  std::vector<std::string> out;
};
StringsRead strings_read(const Array::State& st, const Region& region) {
  check_variable_length(st);
  check_region(st, region, std::nullopt);
  const std::uint64_t n = region.num_elements();
  return {Bytes(n * sizeof(codecs::VlenView)), std::vector<std::string>(n)};
}

// write_strings' input: views of the caller's strings (empty ones all zero,
// like the empty fill value); UTF-8 is checked by the vlen-utf8 encoder on
// the pool.
Bytes string_views(const Array::State& st, const Region& region, std::span<const std::string> in) {
  check_variable_length(st);
  check_region(st, region, std::nullopt);
  if (in.size() != region.num_elements())
    throw InvalidArgument("", "buffer",
                          "holds " + std::to_string(in.size()) + " strings, the region " +
                              std::to_string(region.num_elements()) + " elements");
  Bytes views(in.size() * sizeof(codecs::VlenView));
  for (std::size_t i = 0; i < in.size(); ++i) {
    const codecs::VlenView v{in[i].empty() ? nullptr : in[i].data(), in[i].size()};
    std::memcpy(views.data() + i * sizeof v, &v, sizeof v);
  }
  return views;
}

asio::awaitable<std::vector<std::string>> read_strings_op(std::shared_ptr<const Array::State> st, Region region) {
  auto r = strings_read(*st, region);
  co_await run_op<ReadOp>(st, std::move(region), MutableByteSpan(r.views), &r.out);
  co_return std::move(r.out);
}

asio::awaitable<void> write_strings_op(std::shared_ptr<const Array::State> st, Region region,
                                       std::span<const std::string> in) {
  const Bytes views = string_views(*st, region, in);
  co_await run_op<WriteOp>(std::move(st), std::move(region), ByteSpan(views));
}

// read(region)'s result: the data type, the region's shape, and room for
// its elements (checked before anything is sized).
NdArray sized_result(const Array::State& st, const Region& region) {
  check_fixed_size(st, "read_strings");
  check_region(st, region, std::nullopt);
  NdArray a{st.meta.data_type, region.shape(), {}};
  a.data.resize(region.num_elements() * st.meta.data_type.size());
  return a;
}

asio::awaitable<NdArray> read_owned(std::shared_ptr<const Array::State> st, Region region) {
  NdArray a = sized_result(*st, region);
  co_await run_op<ReadOp>(st, std::move(region), MutableByteSpan(a.data));
  co_return a;
}

}  // namespace

// ---- Array ---------------------------------------------------------------------

namespace {
std::shared_ptr<Array::State> make_state(Runtime& rt, std::shared_ptr<Store> store, std::string path,
                                         ArrayMetadata meta) {
  auto st = std::make_shared<Array::State>();
  st->rt = &rt;
  st->store = std::move(store);
  st->prefix = detail::node_prefix(path);
  st->path = std::move(path);
  const std::string key = detail::array_metadata_key(st->path, meta.zarr_format);
  meta.validate(key);
  if (meta.data_type.is_variable_length()) {
    st->fill_text.assign(reinterpret_cast<const char*>(meta.fill_value.data()), meta.fill_value.size());
    const codecs::VlenView v{st->fill_text.empty() ? nullptr : st->fill_text.data(), st->fill_text.size()};
    st->fill.resize(sizeof v);
    std::memcpy(st->fill.data(), &v, sizeof v);
  } else {
    if (meta.fill_value.empty()) meta.fill_value.assign(meta.data_type.size(), std::byte{0});
    st->fill = meta.fill_value;
  }
  st->store_fill_chunks = meta.zarr_format == 2 && meta.v2 && meta.v2->fill_value_null;
  // Every size the engine derives from a chunk follows from this one: check
  // it before any codec is prepared or buffer sized (shared/cases B34).
  const char* grid_field = meta.zarr_format == 2 ? "chunks" : "chunk_grid.configuration.chunk_shape";
  const auto chunk_bytes = checked_product(meta.chunk_shape, meta.data_type.size());
  if (!chunk_bytes)
    throw InvalidMetadata(key, grid_field, "a chunk of this shape holds more bytes than fit in 64 bits");
  const std::uint64_t limit = rt.options().max_chunk_bytes;
  if (*chunk_bytes > limit)
    throw UnsupportedError(key, grid_field,
                           "a chunk of " + std::to_string(*chunk_bytes) + " bytes is larger than the limit of " +
                               std::to_string(limit) + " (RuntimeOptions::max_chunk_bytes)");
  codecs::ArraySpec spec{meta.data_type, meta.chunk_shape, st->fill};
  try {
    st->pipeline = codecs::CodecPipeline::from_json(detail::pipeline_codecs(meta), spec);
  } catch (const Error& e) {
    throw_error(e.code(), key, e.field(), e.detail());
  }
  if (st->pipeline->array_to_bytes_only())
    st->shard = dynamic_cast<const codecs::ShardingCodec*>(&st->pipeline->array_to_bytes());
  if (st->shard && st->shard->index_bytes() > limit)
    throw UnsupportedError(key, "codecs[0].configuration.chunk_shape",
                           "a shard index of " + std::to_string(st->shard->index_bytes()) +
                               " bytes is larger than the limit of " + std::to_string(limit) +
                               " (RuntimeOptions::max_chunk_bytes)");
  if (meta.zarr_format == 3) meta.codecs = st->pipeline->to_json();
  st->meta = std::move(meta);
  return st;
}
}  // namespace

asio::awaitable<Array> Array::open(Runtime& rt, std::shared_ptr<Store> store, std::string path) {
  auto meta = co_await detail::load_array_metadata(*store, path);
  co_return Array(make_state(rt, std::move(store), std::move(path), std::move(meta)));
}

Array Array::from_metadata(Runtime& rt, std::shared_ptr<Store> store, std::string path, ArrayMetadata metadata) {
  return Array(make_state(rt, std::move(store), std::move(path), std::move(metadata)));
}

asio::awaitable<Array> Array::create(Runtime& rt, std::shared_ptr<Store> store, std::string path,
                                     ArrayMetadata metadata, CreateMode mode) {
  auto st = make_state(rt, store, std::move(path), std::move(metadata));
  auto copies = co_await detail::check_consolidated(*store, st->path);
  co_await detail::prepare_create(*store, st->path, mode);
  co_await detail::create_parents(*store, st->path, st->meta.zarr_format);
  co_await detail::store_array_metadata(*store, st->path, st->meta, mode == CreateMode::overwrite, std::move(copies));
  co_return Array(std::move(st));
}

Array Array::open_blocking(Runtime& rt, std::shared_ptr<Store> store, std::string path) {
  return detail::wait(rt, open(rt, std::move(store), std::move(path)));
}

Array Array::create_blocking(Runtime& rt, std::shared_ptr<Store> store, std::string path,
                             ArrayMetadata metadata, CreateMode mode) {
  return detail::wait(rt, create(rt, std::move(store), std::move(path), std::move(metadata), mode));
}

const std::shared_ptr<const Array::State>& Array::state() const {
  if (!state_)
    throw InvalidArgument("", "", "an empty Array handle (default-constructed): assign it from open() or create()");
  return state_;
}

const ArrayMetadata& Array::metadata() const { return state()->meta; }
const std::string& Array::path() const { return state()->path; }
const std::shared_ptr<Store>& Array::store() const { return state()->store; }
std::string Array::chunk_key(std::span<const std::uint64_t> coords) const { return state()->chunk_key(coords); }
std::string Array::describe_codecs() const { return state()->pipeline->describe(); }

asio::any_io_executor Array::get_executor() const { return state()->rt->io_executor(); }
asio::any_io_executor Array::executor_of(Runtime& rt) { return rt.io_executor(); }

namespace {
// A metadata document to compare: the v3 document, or v2 `.zarray` and `.zattrs`.
nlohmann::json metadata_json(const ArrayMetadata& m, const std::string& key) {
  if (m.zarr_format == 2) return nlohmann::json::array({m.to_v2_json(key), m.attributes});
  return m.to_json();
}

// Shrinking: first the parts of the chunks across the new boundary that
// fall outside it are written with fill_value (through the old shape), so
// that growing again shows fill, not old data (B28), and the chunks wholly
// outside are erased; then the metadata is replaced (one atomic set).
// After it only the update of consolidated copies can fail (checked
// beforehand), and its error says that the array was resized.
// Raises InvalidArgument unless the stored metadata is still `st`'s: a
// change made from an old copy (e.g. consolidated metadata) would write
// its stale parts back.
asio::awaitable<void> require_current(std::shared_ptr<const Array::State> st) {
  const auto& m = st->meta;
  const std::string key = detail::array_metadata_key(st->path, m.zarr_format);
  ArrayMetadata stored_meta = co_await detail::load_array_metadata(*st->store, st->path);
  auto stored = make_state(*st->rt, st->store, st->path, std::move(stored_meta));
  if (stored->meta.zarr_format != m.zarr_format || metadata_json(stored->meta, key) != metadata_json(m, key))
    throw InvalidArgument(key, "", "the array's stored metadata changed since this handle was opened; open it again");
}

asio::awaitable<std::shared_ptr<const Array::State>> set_array_attributes(std::shared_ptr<const Array::State> st,
                                                                           nlohmann::json attributes) {
  const std::string key = detail::array_metadata_key(st->path, st->meta.zarr_format);
  detail::check_attributes(attributes, key);
  ArrayMetadata meta = st->meta;
  meta.attributes = std::move(attributes);
  auto next = make_state(*st->rt, st->store, st->path, std::move(meta));
  co_await require_current(st);
  auto copies = co_await detail::check_consolidated(*st->store, st->path);
  co_await detail::store_array_metadata(*st->store, st->path, next->meta, false, std::move(copies));
  co_return next;
}

asio::awaitable<std::shared_ptr<const Array::State>> resize_array(std::shared_ptr<const Array::State> st,
                                                                   std::vector<std::uint64_t> shape) {
  const auto& m = st->meta;
  const std::string key = detail::array_metadata_key(st->path, m.zarr_format);
  if (shape.size() != m.rank())
    throw InvalidArgument(key, "shape",
                          "the new shape has " + std::to_string(shape.size()) + " dimensions, the array has " +
                              std::to_string(m.rank()));
  ArrayMetadata meta = m;
  meta.shape = shape;
  auto next = make_state(*st->rt, st->store, st->path, std::move(meta));  // validated like create
  // This handle's metadata must be what is stored: resizing from an old
  // copy (e.g. consolidated metadata) would write its stale attributes back
  // and cut along a grid that is no longer the array's.
  co_await require_current(st);
  auto copies = co_await detail::check_consolidated(*st->store, st->path);
  const std::size_t es = m.data_type.size();
  // n rounded up to whole chunks, within the old shape.
  auto cut_end = [&](std::uint64_t n, std::size_t d) {
    const std::uint64_t c = m.chunk_shape[d], up = saturating_add(n, (c - n % c) % c);
    return std::min(m.shape[d], up);
  };
  for (std::size_t d = 0; d < m.rank(); ++d) {
    if (shape[d] >= m.shape[d] || shape[d] % m.chunk_shape[d] == 0) continue;
    Region cut = Region::all(m.shape);
    for (std::size_t e = 0; e < m.rank(); ++e) cut.stop[e] = cut_end(shape[e], e);
    cut.start[d] = shape[d];
    const auto n = cut.num_elements();
    if (n == 0) continue;
    Bytes fill(n * es);
    detail::fill_elements(fill.data(), n, st->fill.data(), es);
    co_await run_op<WriteOp>(st, std::move(cut), ByteSpan(fill));
  }
  co_await erase_chunks_outside(st, std::move(shape));
  co_await detail::store_array_metadata(*st->store, st->path, next->meta, false, std::move(copies));
  co_return next;
}

asio::awaitable<std::shared_ptr<const Array::State>> append_array(std::shared_ptr<const Array::State> st, ByteSpan data,
                                                                   std::vector<std::uint64_t> data_shape,
                                                                   std::size_t axis) {
  check_fixed_size(*st, "resize and write_strings");
  const auto& m = st->meta;
  const std::string key = detail::array_metadata_key(st->path, m.zarr_format);
  if (axis >= m.rank()) throw InvalidArgument(key, "axis", "the array has " + std::to_string(m.rank()) + " dimensions");
  if (data_shape.size() != m.rank())
    throw InvalidArgument(key, "shape", "the data has " + std::to_string(data_shape.size()) + " dimensions, the array " +
                                            std::to_string(m.rank()));
  for (std::size_t d = 0; d < m.rank(); ++d)
    if (d != axis && data_shape[d] != m.shape[d])
      throw InvalidArgument(key, "shape",
                            "the data has " + std::to_string(data_shape[d]) + " elements in dimension " +
                                std::to_string(d) + ", the array " + std::to_string(m.shape[d]));
  const auto bytes = checked_product(data_shape, m.data_type.size());
  if (!bytes || *bytes != data.size())
    throw InvalidArgument(key, "buffer", "is " + std::to_string(data.size()) + " bytes, not the data shape's size");
  auto shape = m.shape;
  const auto grown = checked_add(shape[axis], data_shape[axis]);
  if (!grown) throw InvalidArgument(key, "shape", "appending overflows 64 bits");
  shape[axis] = *grown;
  auto grown_state = co_await resize_array(st, shape);
  Region where = Region::all(shape);
  where.start[axis] = m.shape[axis];
  co_await run_op<WriteOp>(grown_state, std::move(where), data);
  co_return grown_state;
}
}  // namespace

// Not coroutines: the operations hold the array's state, not the handle.
asio::awaitable<Array> Array::adopt(asio::awaitable<std::shared_ptr<const State>> op) {
  co_return Array(co_await std::move(op));
}

asio::awaitable<Array> Array::resize(std::vector<std::uint64_t> shape) const {
  return adopt(resize_array(state(), std::move(shape)));
}

asio::awaitable<Array> Array::append(ByteSpan data, std::vector<std::uint64_t> data_shape, std::size_t axis) const {
  return adopt(append_array(state(), data, std::move(data_shape), axis));
}

asio::awaitable<Array> Array::set_attributes(nlohmann::json attributes) const {
  return adopt(set_array_attributes(state(), std::move(attributes)));
}

Array Array::set_attributes_blocking(nlohmann::json attributes) const {
  return detail::wait(*state()->rt, set_attributes(std::move(attributes)));
}

Array Array::resize_blocking(std::vector<std::uint64_t> shape) const {
  return detail::wait(*state()->rt, resize(std::move(shape)));
}

Array Array::append_blocking(ByteSpan data, std::vector<std::uint64_t> data_shape, std::size_t axis) const {
  return detail::wait(*state()->rt, append(data, std::move(data_shape), axis));
}

asio::awaitable<void> Array::read(Region region, MutableByteSpan out) const {
  return read_raw(state(), std::move(region), out);
}

asio::awaitable<NdArray> Array::read(Region region) const { return read_owned(state(), std::move(region)); }

asio::awaitable<void> Array::write(Region region, ByteSpan in) const {
  return write_raw(state(), std::move(region), in);
}

asio::awaitable<std::vector<std::string>> Array::read_strings(Region region) const {
  return read_strings_op(state(), std::move(region));
}

asio::awaitable<void> Array::write_strings(Region region, std::span<const std::string> in) const {
  return write_strings_op(state(), std::move(region), in);
}

std::vector<std::string> Array::read_strings_blocking(const Region& region) const {
  detail::refuse_runtime_thread(*state()->rt);
  auto r = strings_read(*state(), region);
  wait_op(make_op<ReadOp>(state(), region, MutableByteSpan(r.views), &r.out));
  return std::move(r.out);
}

void Array::write_strings_blocking(const Region& region, std::span<const std::string> in) const {
  detail::refuse_runtime_thread(*state()->rt);
  const Bytes views = string_views(*state(), region, in);
  wait_op(make_op<WriteOp>(state(), region, ByteSpan(views)));
}

void Array::start_read(std::shared_ptr<const State> st, Region region, MutableByteSpan out,
                       detail::AnyCompletion<void> handler) {
  start_op<ReadOp>(st, region, out, std::move(handler));
}

void Array::start_write(std::shared_ptr<const State> st, Region region, ByteSpan in,
                        detail::AnyCompletion<void> handler) {
  start_op<WriteOp>(st, region, in, std::move(handler));
}

void Array::start_read_owned(std::shared_ptr<const State> st, Region region, detail::AnyCompletion<NdArray> handler) {
  std::shared_ptr<ReadOp> op;
  NdArray a;
  std::exception_ptr error;
  try {
    a = sized_result(*st, region);
    op = make_op<ReadOp>(st, region, MutableByteSpan(a.data));
  } catch (...) {
    error = std::current_exception();
  }
  // Moved along with the handler, `a` keeps its elements where the op writes them.
  auto done = asio::append(std::move(handler), std::move(a));
  if (op) return initiate_op(std::move(op), std::move(done));
  asio::post(st->rt->io_executor(), asio::append(std::move(done), error));
}

void Array::read_blocking(const Region& region, MutableByteSpan out) const {
  detail::refuse_runtime_thread(*state()->rt);
  wait_op(make_fixed_size_op<ReadOp>(state(), region, out));
}

NdArray Array::read_blocking(const Region& region) const {
  detail::refuse_runtime_thread(*state()->rt);
  NdArray a = sized_result(*state(), region);
  wait_op(make_op<ReadOp>(state(), region, MutableByteSpan(a.data)));
  return a;
}

void Array::write_blocking(const Region& region, ByteSpan in) const {
  detail::refuse_runtime_thread(*state()->rt);
  wait_op(make_fixed_size_op<WriteOp>(state(), region, in));
}

}  // namespace zarrcoro
