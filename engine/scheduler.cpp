// Batching of chunk codec work onto the codec pool (see scheduler.hpp).
#include "engine/scheduler.hpp"

#include <algorithm>

#include <boost/asio/post.hpp>
#include <spdlog/spdlog.h>

#include <zarrcoro/error.hpp>

#include "core/caught.hpp"

namespace zarrcoro::detail {

std::size_t TaskBatch::bytes() const {
  std::size_t n = 0;
  for (auto* t : tasks) n += t->bytes;
  return n;
}

bool TaskBatch::computes() const {
  return std::any_of(tasks.begin(), tasks.end(), [](auto* t) { return t->computes; });
}

// One pool submission: the tasks of one or more batches, taken by the pool's
// threads through a shared index. A task planned in parts (parts > 1) is
// prepared by the thread that takes it, which then claims its parts one by
// one; a thread that finds no task left claims the parts still unclaimed.
struct Scheduler::PoolJob {
  struct Item {
    ChunkTask* task;
    std::size_t batch;  // index into batches
    std::size_t parts;  // 1: run whole
  };
  // A task run in parts: ready once prepared; parts claimed, parts not done.
  struct Split {
    std::atomic<bool> ready{false}, failed{false};
    std::atomic<std::size_t> next{0}, left{0};
  };
  std::vector<std::shared_ptr<TaskBatch>> batches;
  std::vector<Item> items;
  std::vector<Split> splits;                   // per item, when any item has parts
  std::vector<std::atomic<std::size_t>> left;  // per batch: tasks not yet run
  std::atomic<std::size_t> next{0}, done{0};
  std::size_t bytes = 0;  // decoded bytes of all its tasks
  std::size_t units = 0;  // tasks run whole plus parts: what threads can share
};

namespace {
// A job fans out to one pool thread per this many decoded bytes: waking a
// thread costs microseconds, more than a few KiB of trivial work. A task
// splits into parts of at least about this many bytes, too.
constexpr std::size_t kFanoutBytes = std::size_t{64} << 10;

// Runs a batch's on_done, which should not throw (see TaskBatch): a throw is
// logged rather than left to end the thread.
void complete(TaskBatch& batch) noexcept {
  try {
    batch.on_done();
  } catch (const std::exception& x) {
    spdlog::error("zarrcoro: a batch's completion threw: {}", x.what());
  } catch (...) {
    spdlog::error("zarrcoro: a batch's completion threw");
  }
}

// Marks a task that was cancelled before it ran; true if it was.
bool skip_cancelled(ChunkTask& task) {
  if (!task.is_cancelled()) return false;
  task.error = std::make_exception_ptr(Cancelled("", "", "cancelled before its codec work ran"));
  return true;
}
}  // namespace

Scheduler::Scheduler(boost::asio::any_io_executor io, boost::asio::thread_pool& pool,
                     unsigned pool_threads, const RuntimeOptions& options,
                     std::function<bool()> on_io_thread)
    : io_(std::move(io)),
      pool_(pool),
      pool_threads_(std::max(1u, pool_threads)),
      options_(options),
      on_io_thread_(std::move(on_io_thread)) {}

void Scheduler::count_chunk(bool computes) {
  counters_.chunks.fetch_add(1, std::memory_order_relaxed);
  if (computes) {
    counters_.codec_calls.fetch_add(1, std::memory_order_relaxed);
    if (on_io_thread_()) counters_.codec_calls_on_io_thread.fetch_add(1, std::memory_order_relaxed);
    if (!pool_.get_executor().running_in_this_thread())
      counters_.codec_calls_off_pool.fetch_add(1, std::memory_order_relaxed);
  }
}

void Scheduler::run_task(ChunkTask& task) {
  if (skip_cancelled(task)) return;
  count_chunk(task.computes);
  try {
    task.run();
  } catch (...) {
    task.error = std::current_exception();
  }
}

void Scheduler::run_inline(TaskBatch& batch) {
  counters_.inline_batches.fetch_add(1, std::memory_order_relaxed);
  for (auto* t : batch.tasks) run_task(*t);
  complete(batch);
}

bool Scheduler::runs_inline(const TaskBatch& batch) const {
  const bool trivial = !batch.computes() && batch.bytes() <= options_.inline_bytes;
  return batch.tasks.empty() || options_.dispatch == Dispatch::inline_io || trivial;
}

void Scheduler::submit(std::shared_ptr<TaskBatch> batch) {
  if (batch->tasks.empty()) {
    complete(*batch);
    return;
  }
  if (runs_inline(*batch)) {
    run_inline(*batch);
    return;
  }
  if (options_.dispatch == Dispatch::per_chunk) return submit_per_chunk(std::move(batch));
  {
    std::unique_lock lk(mu_);
    std::exception_ptr error = caught([&] {
      if (fault_hook) fault_hook("queue");
      queue_.push_back(batch);
    });
    if (error) {  // out of memory: the batch fails rather than being lost
      lk.unlock();
      return fail(*batch, error);
    }
    if (flush_posted_) return;
    flush_posted_ = true;
  }
  // Deferred to the end of this io_context turn, so that batches submitted by
  // concurrent calls in the same turn share pool submissions. If it cannot
  // be posted, nothing else would flush the queue: flush it now.
  const std::exception_ptr unposted = caught([&] {
    if (fault_hook) fault_hook("post");
    boost::asio::post(io_, [this] { flush(); });
  });
  if (unposted) flush();
}

// One pool submission per chunk (what the design avoids, for comparison);
// the last task to finish completes the batch. Tasks that cannot be posted
// fail.
void Scheduler::submit_per_chunk(std::shared_ptr<TaskBatch> batch) {
  std::shared_ptr<std::atomic<std::size_t>> left;
  std::exception_ptr error = caught([&] { left = std::make_shared<std::atomic<std::size_t>>(batch->tasks.size()); });
  if (error) return fail(*batch, error);
  auto one_done = [batch, left] {
    if (left->fetch_sub(1, std::memory_order_acq_rel) == 1) complete(*batch);
  };
  for (std::size_t i = 0; i < batch->tasks.size(); ++i) {
    ChunkTask* t = batch->tasks[i];
    counters_.queue_depth.fetch_add(1, std::memory_order_relaxed);
    error = caught([&] {
      if (fault_hook) fault_hook("post_chunk");
      boost::asio::post(pool_, [this, t, one_done] {
        run_task(*t);
        counters_.queue_depth.fetch_sub(1, std::memory_order_relaxed);
        one_done();
      });
    });
    if (error) {
      counters_.queue_depth.fetch_sub(1, std::memory_order_relaxed);
      for (std::size_t j = i; j < batch->tasks.size(); ++j) {
        if (!batch->tasks[j]->error) batch->tasks[j]->error = error;
        one_done();
      }
      return;
    }
    counters_.pool_submissions.fetch_add(1, std::memory_order_relaxed);
  }
}

// Completes a batch that never reached the pool: its tasks fail with `e`.
void Scheduler::fail(TaskBatch& batch, const std::exception_ptr& e) {
  for (auto* t : batch.tasks)
    if (!t->error) t->error = e;
  complete(batch);
}

void Scheduler::flush() {
  std::vector<std::shared_ptr<TaskBatch>> queue;
  {
    std::lock_guard lk(mu_);
    queue.swap(queue_);
    flush_posted_ = false;
  }
  // Every batch of this turn goes into one job (each job is a post, and on a
  // virtual machine the wake-up it causes costs microseconds); only
  // batch_bytes splits them. The batches of queue[posted..) are in no job.
  std::size_t posted = 0;
  std::vector<std::shared_ptr<TaskBatch>> group;
  std::size_t bytes = 0;
  auto emit = [&] {
    if (group.empty()) return;
    if (fault_hook) fault_hook("flush");
    auto job = std::make_shared<PoolJob>();
    job->batches = std::move(group);
    job->left = std::vector<std::atomic<std::size_t>>(job->batches.size());
    for (std::size_t b = 0; b < job->batches.size(); ++b) {
      auto& batch = *job->batches[b];
      job->left[b].store(batch.tasks.size(), std::memory_order_relaxed);
      job->bytes += batch.bytes();
      for (auto* t : batch.tasks) {
        const std::size_t parts = t->max_parts > 1 ? std::min(t->max_parts, t->bytes / kFanoutBytes + 1) : 1;
        job->items.push_back({t, b, parts});
        job->units += parts;
      }
    }
    if (job->units > job->items.size()) job->splits = std::vector<PoolJob::Split>(job->items.size());
    const std::size_t n = job->batches.size();
    post_job(std::move(job));
    posted += n;
    group.clear();
    bytes = 0;
  };
  const std::exception_ptr error = caught([&] {
    for (const auto& b : queue) {
      const std::size_t nb = b->bytes();
      if (!group.empty() && bytes + nb > options_.batch_bytes) emit();
      group.push_back(b);
      bytes += nb;
    }
    emit();
  });
  // Out of memory: what is in no job fails, rather than never completing.
  for (std::size_t i = posted; error && i < queue.size(); ++i) fail(*queue[i], error);
}

void Scheduler::post_job(std::shared_ptr<PoolJob> job) {
  counters_.pool_submissions.fetch_add(1, std::memory_order_relaxed);
  counters_.queue_depth.fetch_add(1, std::memory_order_relaxed);
  try {
    if (fault_hook) fault_hook("post_job");
    boost::asio::post(pool_, [this, job = std::move(job)] {
      // Fan out: let idle pool threads help with the rest of this job (if a
      // helper cannot be posted, those already posted and this thread do it).
      const std::size_t helpers =
          std::min<std::size_t>({job->units, pool_threads_, job->bytes / kFanoutBytes + 1}) - 1;
      try {
        for (std::size_t i = 0; i < helpers; ++i) {
          boost::asio::post(pool_, [this, job] { run_job(job); });
          counters_.fanout_posts.fetch_add(1, std::memory_order_relaxed);
        }
      } catch (...) {
      }
      run_job(job);
    });
  } catch (...) {
    counters_.pool_submissions.fetch_sub(1, std::memory_order_relaxed);
    counters_.queue_depth.fetch_sub(1, std::memory_order_relaxed);
    throw;
  }
}

void Scheduler::run_job(const std::shared_ptr<PoolJob>& job) {
  const std::size_t n = job->items.size();
  for (std::size_t i; (i = job->next.fetch_add(1, std::memory_order_relaxed)) < n;) {
    if (job->items[i].parts == 1) {
      run_task(*job->items[i].task);
      task_done(*job, i);
    } else if (start_split(*job, i)) {
      run_parts(*job, i);
    }
  }
  // No task left to take: help with the parts of those other threads took.
  if (!job->splits.empty())
    for (std::size_t i = 0; i < n; ++i)
      if (job->items[i].parts > 1) run_parts(*job, i);
}

// Prepares task i for its parts; false if that failed (the task is done).
bool Scheduler::start_split(PoolJob& job, std::size_t i) {
  ChunkTask* task = job.items[i].task;
  const std::size_t parts = job.items[i].parts;
  auto& s = job.splits[i];
  s.left.store(parts, std::memory_order_relaxed);
  if (!skip_cancelled(*task)) {
    count_chunk(task->computes);
    try {
      task->prepare();
    } catch (...) {
      task->error = std::current_exception();
    }
  }
  if (task->error) s.next.store(parts, std::memory_order_relaxed);  // nothing to claim
  const bool ok = !task->error;
  s.ready.store(true, std::memory_order_release);
  s.ready.notify_all();
  if (!ok) {
    task->finish();
    task_done(job, i);
  }
  return ok;
}

// Claims and runs parts of task i until none is left; the thread that ends
// the last part finishes the task. Waits (briefly) for its preparation.
void Scheduler::run_parts(PoolJob& job, std::size_t i) {
  ChunkTask* task = job.items[i].task;
  const std::size_t parts = job.items[i].parts;
  auto& s = job.splits[i];
  if (s.next.load(std::memory_order_relaxed) >= parts) return;  // all claimed (the task may be gone)
  s.ready.wait(false, std::memory_order_acquire);
  for (std::size_t k; (k = s.next.fetch_add(1, std::memory_order_relaxed)) < parts;) {
    if (!s.failed.load(std::memory_order_relaxed) && task->is_cancelled() &&
        !s.failed.exchange(true, std::memory_order_relaxed))
      skip_cancelled(*task);
    if (!s.failed.load(std::memory_order_relaxed)) {
      if (part_hook) part_hook(*task, k);
      try {
        task->run_part(k, parts);
      } catch (...) {
        if (!s.failed.exchange(true, std::memory_order_relaxed)) task->error = std::current_exception();
      }
    }
    if (s.left.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      task->finish();
      task_done(job, i);
      return;
    }
  }
}

// Task i has run (whole or every part): complete its batch, then the job.
void Scheduler::task_done(PoolJob& job, std::size_t i) {
  const std::size_t b = job.items[i].batch;
  if (job.left[b].fetch_sub(1, std::memory_order_acq_rel) == 1) complete(*job.batches[b]);
  if (job.done.fetch_add(1, std::memory_order_acq_rel) + 1 == job.items.size())
    counters_.queue_depth.fetch_sub(1, std::memory_order_relaxed);
}

}  // namespace zarrcoro::detail
