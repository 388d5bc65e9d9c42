// The many-chunk operation: the driver that reads (read_op.cpp) and writes
// (write_op.cpp) share. It fetches chunks on the io_context within the
// runtime's limits, hands arrived chunks to the scheduler in batches, and
// completes the caller's handler once.
//
// Thread-safety: an op's state is touched only from its strand (see Strand),
// except cancel_flag_ (atomic, read by codec tasks on the pool) and, once the
// op is handed off to the pool, complete_on_pool on the pool thread that
// runs its last batch. start() is called once, from any thread.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <exception>
#include <list>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <zarrcoro/spawn.hpp>
#include <zarrcoro/store.hpp>

#include "engine/array_state.hpp"
#include "engine/async_sync.hpp"
#include "engine/engine_state.hpp"
#include "engine/indexing.hpp"
#include "engine/scheduler.hpp"

namespace zarrcoro::detail {

// Rethrows a codec error with the chunk key filled in.
[[noreturn]] void rethrow_with_key(std::exception_ptr e, const std::string& key);

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
  using Strand = boost::asio::any_io_executor;

  ChunkOp(std::shared_ptr<const Array::State> st, ChunkParts parts);
  virtual ~ChunkOp() = default;

  // Runs the operation on the strand and completes `handler` (signature
  // void(std::exception_ptr)) through its associated executor; honours the
  // handler's cancellation slot (see above).
  template <class Handler>
  void start(Handler handler) {
    namespace asio = boost::asio;
    auto slot = asio::get_associated_cancellation_slot(handler);
    auto ex = asio::prefer(asio::get_associated_executor(handler, strand_), asio::execution::outstanding_work.tracked);
    completion_.emplace([h = std::move(handler), ex](std::exception_ptr e) mutable {
      asio::dispatch(ex, [h = std::move(h), e = std::move(e)]() mutable { std::move(h)(std::move(e)); });
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
  boost::asio::awaitable<void> run();

  // Spawns a chunk's fetch or store stage (which handles its own errors)
  // on the strand, reachable by cancel() when the op is cancellable.
  void spawn(boost::asio::awaitable<void> stage);

  // On strand_.
  void cancel();

 protected:
  // Per-chunk stages, implemented by reads and writes.
  virtual boost::asio::awaitable<void> fetch(std::size_t i) = 0;  // on strand
  virtual ChunkTask& task(std::size_t i) = 0;
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
  virtual boost::asio::awaitable<void> finish(std::size_t i);  // on strand, after codec work
  virtual std::size_t budget_factor() const { return 1; }
  // On strand, once every chunk is done without error (read_strings: turn the views into strings).
  virtual boost::asio::awaitable<void> after_all();
  virtual bool has_after_all() const { return false; }
  // Frees the tables per chunk, once no chunk stage can use them.
  virtual void release_tables() { ChunkParts().swap(parts_); }

  void fail(std::exception_ptr e) {
    if (!error_) error_ = e;
  }

  // A versioned store read within the runtime's in-flight request limit,
  // conditional on `if_equal` when it is known, into `into` if the store
  // can (ReadOptions::into).
  boost::asio::awaitable<ReadResult> read(std::string key, ByteRange range, Generation if_equal,
                                          MutableByteSpan into = MutableByteSpan());

  // A store write (or erase, for nullopt) within the same request limit,
  // conditional on `if_equal` when it is known; nullopt when the condition
  // failed. Counted in engine_.writes (for partial shard reads on stores
  // that cannot version values).
  boost::asio::awaitable<std::optional<Generation>> put(std::string key, std::optional<Bytes> value,
                                                        Generation if_equal);

  // A request slot; raises Cancelled if the wait for one was cancelled.
  boost::asio::awaitable<void> acquire_request();

  [[noreturn]] void throw_cancelled() const;
  std::exception_ptr cancelled_error() const;

  // Runs one task through the scheduler (batched with whatever else is
  // submitted in this turn) and resumes when it is done.
  boost::asio::awaitable<void> run_task(ChunkTask& task);

  // A flow that cannot proceed without waiting on another call (a key lock)
  // must step out of `active_` so that this call's ready chunks still flush.
  void suspend_active() {
    --active_;
    maybe_flush();
  }
  void resume_active() { ++active_; }

  std::shared_ptr<const Array::State> st_;
  EngineState& engine_;
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
  void fetch_at_once(std::vector<std::size_t>& window);

  // One chunk: fetch, then wait for the batch, then finish.
  static boost::asio::awaitable<void> flow(std::shared_ptr<ChunkOp> self, std::size_t i);

  // Chunk i is fetched (or failed): it waits for its batch.
  void arrive(std::size_t i);

  // A chunk's share of a batch: the inner chunks it decodes, so that a
  // large shard closes a batch by itself and starts decoding as soon as it is in.
  std::size_t weight(std::size_t i) { return std::max<std::size_t>(1, task(i).max_parts); }

  void maybe_flush();

  // How many pending chunks the next batch takes: until their weight reaches batch_chunks, at least one.
  std::size_t next_batch_size();

  void submit(std::size_t n);

  // Whether a batch of n chunks would end the op with its codec work:
  // every other chunk is done (remaining_ counts those not yet started,
  // fetching and pending too), and nothing is left to finish after it.
  bool is_last_batch(std::size_t n) const {
    return remaining_ == n && !cancelled_ && !has_finish() && !has_after_all();
  }

  // The op's end on the pool thread that ran its last batch (handed_off_),
  // or on the I/O thread if the scheduler could not hand that batch over.
  void complete_on_pool(const std::vector<std::size_t>& ids);

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
  void complete(std::exception_ptr e, bool idle = true);

  // On the strand, after a batch's codec work: record errors, then finish
  // (store) its chunks concurrently; each finished chunk returns its budget.
  static boost::asio::awaitable<void> after_batch(std::shared_ptr<ChunkOp> self, std::vector<std::size_t> ids);

  static boost::asio::awaitable<void> finish_one(std::shared_ptr<ChunkOp> self, std::size_t i);

  void chunk_done();

  // A one-shot completion for the awaiting run().
  struct Done {
    std::optional<Waiter> waiter;
    bool fired = false;
    boost::asio::awaitable<void> wait();
    void notify();
  };

  std::size_t batch_chunks_;
  std::size_t active_ = 0, remaining_ = 0;
  bool spawner_idle_ = false;
  bool cancellable_ = false, finished_ = false;
  bool handed_off_ = false;  // set on strand_ by submit(), never unset
  // The handler, dispatched through its executor; emplaced once (Boost 1.81's
  // any_completion_handler move-assignment recurses).
  std::optional<boost::asio::any_completion_handler<void(std::exception_ptr)>> completion_;
  boost::asio::cancellation_signal run_signal_;                // cancels run()'s budget wait
  std::list<boost::asio::cancellation_signal> stage_signals_;  // one per stage in flight
  std::vector<std::size_t> pending_;
  std::size_t pending_weight_ = 0;  // of pending_
  std::vector<char> answered_;  // fetch_at_once's scratch
  std::exception_ptr error_;
  Done done_;
};

}  // namespace zarrcoro::detail
