// The codec scheduler: turns chunk work into batches for the codec pool.
//
// Calls on the I/O side hand over TaskBatches (the chunks of one call that
// are ready; a call closes a batch at `batch_chunks` chunks). Batches
// submitted during one turn of the io_context are merged into one pool job,
// split only where it would exceed `batch_bytes` decoded bytes;
// each pool job is one post to the pool and fans out over its threads, which
// also share the parts of a task that splits (a shard's inner chunks). A
// batch with nothing to compute and at most `inline_bytes` runs at once on
// the I/O thread. See runtime.hpp for the contract.
#pragma once

#include <atomic>
#include <cstddef>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string_view>
#include <vector>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/thread_pool.hpp>

#include <zarrcoro/runtime.hpp>

namespace zarrcoro::detail {

// The codec work of one chunk. run() is called exactly once, on a pool
// thread (or inline for work with nothing to compute); exceptions it throws
// are stored in `error`.
//
// A task whose work divides into independent parts (the inner chunks of a
// shard) sets `max_parts` > 1 and implements prepare, run_part and finish,
// with run() doing prepare(), run_part(0, 1), finish(). A pool job may run
// it split instead, so that all its threads share one shard: prepare() once,
// then run_part(k, n) for each k < n (n <= max_parts, each part about 1/n of
// the work) on any of the job's threads after prepare() returned, then
// finish() (which must not throw) once on the thread that ran the last
// part. An exception from prepare() skips the parts; the first one from a
// part is kept and the parts not yet started are skipped.
//
// A task whose `cancelled` flag is set when its turn comes is not run (nor
// its parts not yet started) and gets a Cancelled error instead.
class ChunkTask {
 public:
  virtual ~ChunkTask() = default;
  virtual void run() = 0;
  virtual void prepare() {}
  virtual void run_part(std::size_t /*k*/, std::size_t /*n*/) {}
  virtual void finish() {}

  std::size_t bytes = 0;   // decoded bytes the task touches
  bool computes = true;    // false: only copies/fills bytes
  std::size_t max_parts = 1;
  const std::atomic<bool>* cancelled = nullptr;  // the operation's, if it can be cancelled
  std::exception_ptr error;

  bool is_cancelled() const { return cancelled && cancelled->load(std::memory_order_relaxed); }
};

// Tasks of one call, completed together: `on_done` runs once after every
// task has run, on the thread that ran the last one (a pool thread unless
// the batch runs inline). Should the scheduler fail to hand the batch to
// the pool (out of memory), the tasks not run get that error and on_done
// runs on the I/O thread, possibly inside submit(). It must be short and
// should not throw (a throw is logged and the batch is lost): post, or
// complete the call whose last batch this is (which may run a caller's
// handler there).
struct TaskBatch {
  std::vector<ChunkTask*> tasks;
  std::function<void()> on_done;

  std::size_t bytes() const;
  bool computes() const;
};

struct SchedulerCounters {
  std::atomic<std::uint64_t> pool_submissions{0}, fanout_posts{0}, inline_batches{0}, chunks{0},
      codec_calls{0}, codec_calls_on_io_thread{0}, codec_calls_off_pool{0}, queue_depth{0},
      caller_reads{0};
};

class Scheduler {
 public:
  Scheduler(boost::asio::any_io_executor io, boost::asio::thread_pool& pool, unsigned pool_threads,
            const RuntimeOptions& options, std::function<bool()> on_io_thread);

  // Call from an I/O thread. May run the batch before returning (inline).
  // Does not throw: the batch's on_done runs exactly once, with the error
  // in the tasks that could not be handed to the pool (out of memory).
  void submit(std::shared_ptr<TaskBatch> batch);
  // Whether submit() would run `batch` before returning, on the calling
  // thread (nothing to compute and small, an empty batch, Dispatch::inline_io).
  bool runs_inline(const TaskBatch& batch) const;

  SchedulerCounters& counters() { return counters_; }
  // Counts one chunk run by the calling thread, and its codec call where it
  // `computes` (with where it ran: an I/O thread, or no pool thread).
  void count_chunk(bool computes);

  // Tests only: called on the pool thread before each part of a split task
  // runs. Set it while no job runs.
  std::function<void(const ChunkTask&, std::size_t part)> part_hook;
  // Tests only: called at `point` "queue" (before submit() queues a batch
  // for the pool), "post" (before submit() posts the deferred flush), "flush" (before flush()
  // builds each pool job), "post_job" (before a job is posted to the pool)
  // and "post_chunk" (before each post of per-chunk dispatch); it may throw
  // there, as an allocation there may.
  // Set it while no call runs.
  std::function<void(std::string_view point)> fault_hook;

 private:
  struct PoolJob;
  void submit_per_chunk(std::shared_ptr<TaskBatch> batch);
  void flush();
  void fail(TaskBatch& batch, const std::exception_ptr& e);
  void post_job(std::shared_ptr<PoolJob> job);
  void run_job(const std::shared_ptr<PoolJob>& job);
  bool start_split(PoolJob& job, std::size_t i);
  void run_parts(PoolJob& job, std::size_t i);
  void task_done(PoolJob& job, std::size_t i);
  void run_task(ChunkTask& task);
  void run_inline(TaskBatch& batch);

  boost::asio::any_io_executor io_;
  boost::asio::thread_pool& pool_;
  unsigned pool_threads_;
  RuntimeOptions options_;
  std::function<bool()> on_io_thread_;
  SchedulerCounters counters_;

  std::mutex mu_;
  std::vector<std::shared_ptr<TaskBatch>> queue_;
  bool flush_posted_ = false;
};

}  // namespace zarrcoro::detail
