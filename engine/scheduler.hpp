// The codec scheduler: turns chunk work into batches for the codec pool.
//
// Calls on the I/O side hand over TaskBatches (the chunks of one call that
// are ready). Batches submitted during one turn of the io_context are merged
// into pool jobs of at most `batch_chunks` chunks and `batch_bytes` bytes;
// each pool job is one post to the pool and fans out over its threads. A
// batch with nothing to compute and at most `inline_bytes` runs at once on
// the I/O thread. See runtime.hpp for the contract.
#pragma once

#include <atomic>
#include <cstddef>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/thread_pool.hpp>

#include <zarrcoro/runtime.hpp>

namespace zarrcoro::detail {

// The codec work of one chunk. run() is called exactly once, on a pool
// thread (or inline for work with nothing to compute); exceptions it throws
// are stored in `error`.
class ChunkTask {
 public:
  virtual ~ChunkTask() = default;
  virtual void run() = 0;

  std::size_t bytes = 0;   // decoded bytes the task touches
  bool computes = true;    // false: only copies/fills bytes
  std::exception_ptr error;
};

// Tasks of one call, completed together: `on_done` runs once after every
// task has run, on the thread that ran the last one; it must only post.
struct TaskBatch {
  std::vector<ChunkTask*> tasks;
  std::function<void()> on_done;

  std::size_t bytes() const;
  bool computes() const;
};

struct SchedulerCounters {
  std::atomic<std::uint64_t> pool_submissions{0}, fanout_posts{0}, inline_batches{0}, chunks{0},
      codec_calls{0}, codec_calls_on_io_thread{0}, queue_depth{0};
};

class Scheduler {
 public:
  Scheduler(boost::asio::any_io_executor io, boost::asio::thread_pool& pool, unsigned pool_threads,
            const RuntimeOptions& options, std::function<bool()> on_io_thread);

  // Call from an I/O thread. May run the batch before returning (inline).
  void submit(std::shared_ptr<TaskBatch> batch);

  SchedulerCounters& counters() { return counters_; }

 private:
  struct PoolJob;
  void flush();
  void post_job(std::shared_ptr<PoolJob> job);
  void run_job(const std::shared_ptr<PoolJob>& job);
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
