// Reads answered on the calling thread (caller_read.hpp).
#include "engine/caller_read.hpp"

#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <string>

#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/append.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/execution.hpp>
#include <boost/asio/execution_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <zarrcoro/runtime.hpp>
#include <zarrcoro/store.hpp>

#include "core/caught.hpp"
#include "engine/chunk_op.hpp"
#include "engine/engine_state.hpp"
#include "engine/placement.hpp"
#include "engine/runtime_access.hpp"

namespace zarrcoro::detail {
namespace asio = boost::asio;

bool for_caller(const Array::State& st, const ChunkParts& parts) {
  const RuntimeOptions& o = st.rt->options();
  return o.caller_reads && !st.shard && !st.meta.data_type.is_variable_length() && st.pipeline->is_trivial() &&
         parts.size() <= kCallerReadChunks && parts.size() * st.chunk_bytes() <= o.inline_bytes;
}

namespace {

// read_on_caller of a read that is for_caller, placed by `place`.
bool read_now(const Array::State& st, const ChunkParts& parts, const Placement& place) {
  const codecs::ArraySpec& spec = st.pipeline->chunk_spec();
  ReadOptions options;
  options.need_generation = false;  // whole chunks, read unconditionally
  options.caches_only = true;       // the caller's thread never waits for a device
  options.size_hint = st.chunk_size_hint();
  for (const ChunkPart& p : parts) {
    const std::string key = st.chunk_key(p.coords);
    options.into = st.store->reads_into() ? place.contiguous_target(spec, p, p.out_start) : MutableByteSpan();
    std::optional<ReadResult> got = st.store->try_read_now(key, options);
    if (!got) return false;
    if (got->in_place) continue;
    if (!got->value) {
      place.fill(p.out_start, p.shape, st.fill.data(), st.meta.data_type.size());
      continue;
    }
    try {
      place.decode_to_out(*st.pipeline, *got->value, p, p.out_start);
    } catch (...) {
      rethrow_with_key(std::current_exception(), key);
    }
  }
  RuntimeAccess::engine(*st.rt).scheduler.counters().caller_reads.fetch_add(1, std::memory_order_relaxed);
  return true;
}

// The reads that coroutines on one execution context (the readers') have
// started and no thread has taken yet. Two threads take them: one of that
// context's, in a handler posted once per turn (it runs after the other
// handlers ready then, whose reads join), and the runtime's I/O thread,
// called in while kCallHelperFrom or more wait. While the helper is called
// in, a turn answers about half of the reads waiting, then posts itself
// again, behind the coroutines it resumed: the readers' thread also runs
// the coroutines, and a turn that answered everything left the helper a
// third of its time idle (perf/README); a turn that left the rest to the
// helper alone would wait for the I/O thread, which may be slow to come.
// Each completes the reads it answered through the reader's executor. The
// context's shutdown destroys the reads still waiting, with their handlers,
// unanswered.
class WaitingReads : public asio::execution_context::service {
 public:
  struct Request {
    const Array::State* st;
    const ChunkParts* parts;
    Placement place;
    asio::any_io_executor ex;  // the reader's, its work counted until the read completes
    asio::any_completion_handler<void(std::exception_ptr, bool)> handler;
  };

  inline static asio::execution_context::id id;
  explicit WaitingReads(asio::execution_context& ctx) : asio::execution_context::service(ctx) {}
  static WaitingReads& of(const asio::any_io_executor& ex) {
    return asio::use_service<WaitingReads>(asio::query(ex, asio::execution::context));
  }

  // Whether a coroutine's read goes with others now (caller_reads_together).
  bool together() {
    std::lock_guard lock(q_->mu);
    return q_->turn_posted || q_->turn_reads > 1 || ++q_->at_once % kProbeEvery == 0;
  }

  void add(Request r) {
    const asio::any_io_executor ex = r.ex;
    const asio::any_io_executor io = r.st->rt->io_executor();
    bool take_here, call_helper;
    {
      std::lock_guard lock(q_->mu);
      q_->requests.push_back(std::move(r));
      take_here = !q_->turn_posted;
      q_->turn_reads = take_here ? 1 : q_->turn_reads + 1;
      q_->turn_posted = true;
      call_helper = q_->requests.size() >= kCallHelperFrom && !q_->helper_busy;
      q_->helper_busy |= call_helper;
    }
    if (take_here) {
      const asio::any_io_executor readers = asio::prefer(ex, asio::execution::outstanding_work.untracked);
      asio::post(ex, [q = q_, readers] { take(q, readers, false); });
    }
    if (call_helper) asio::post(io, [q = q_, io] { take(q, io, true); });
  }

 private:
  // Of the reads answered at once, every kProbeEvery-th goes through a turn
  // (its coroutine yields), to find whether other coroutines read too.
  static constexpr unsigned kProbeEvery = 16;
  // The I/O thread is called in when this many reads wait, and then answers
  // at most kHelperRun of them before it lets its other handlers run.
  static constexpr std::size_t kCallHelperFrom = 4;
  static constexpr std::size_t kHelperRun = 16;

  struct Queue {
    std::mutex mu;
    std::deque<Request> requests;
    bool turn_posted = false;  // the readers' take is posted to their context
    bool helper_busy = false;  // the helper's take is posted to or runs on the I/O thread
    unsigned helping = 0;  // reads the helper has taken and not yet completed
    std::condition_variable helped;  // helping fell to 0
    std::size_t turn_reads = 0;  // reads added in the latest turn
    unsigned at_once = 0;        // reads answered at once (mod kProbeEvery)
  };

  // Answers waiting reads on `ex`, until none is left or it has answered
  // its share, then posts itself again: as the helper (on the I/O thread),
  // kHelperRun; as the readers' turn, with the helper called in, as many as
  // it leaves waiting (at least one).
  static void take(const std::shared_ptr<Queue>& q, const asio::any_io_executor& ex, bool helper) {
    for (std::size_t n = 0;; ++n) {
      std::optional<Request> r;
      {
        std::lock_guard lock(q->mu);
        if (q->requests.empty()) {
          (helper ? q->helper_busy : q->turn_posted) = false;
          return;
        }
        if (helper ? n == kHelperRun : q->helper_busy && n >= q->requests.size()) break;
        r.emplace(std::move(q->requests.front()));
        q->requests.pop_front();
        if (helper) ++q->helping;
      }
      bool answered = false;
      std::exception_ptr error = caught([&] { answered = read_now(*r->st, *r->parts, r->place); });
      const asio::any_io_executor reader = std::move(r->ex);
      asio::post(reader, asio::append(std::move(r->handler), error, answered));
      if (helper) {
        std::lock_guard lock(q->mu);
        if (--q->helping == 0) q->helped.notify_all();
      }
    }
    asio::post(ex, [q, ex, helper] { take(q, ex, helper); });
  }

  // Drops the reads still waiting, and waits for the one the helper may be
  // answering: its completion is posted before the context's scheduler
  // shuts down (this service was made after it, so it shuts down first).
  void shutdown() override {
    std::deque<Request> dropped;
    std::unique_lock lock(q_->mu);
    dropped.swap(q_->requests);
    q_->helped.wait(lock, [this] { return q_->helping == 0; });
  }

  std::shared_ptr<Queue> q_ = std::make_shared<Queue>();
};

}  // namespace

bool read_on_caller(const Array::State& st, const ChunkParts& parts, const Region& region, MutableByteSpan out) {
  return for_caller(st, parts) && read_now(st, parts, Placement(region.shape(), out));
}

bool caller_reads_together(const asio::any_io_executor& ex) { return WaitingReads::of(ex).together(); }

asio::awaitable<bool> read_on_caller_together(const Array::State& st, const ChunkParts& parts, const Region& region,
                                              MutableByteSpan out) {
  auto initiation = [&st, &parts, &region, out](auto handler) {
    const asio::any_io_executor ex =
        asio::prefer(asio::get_associated_executor(handler), asio::execution::outstanding_work.tracked);
    WaitingReads::of(ex).add({&st, &parts, Placement(region.shape(), out), ex, std::move(handler)});
  };
  return asio::async_initiate<const asio::use_awaitable_t<>&, void(std::exception_ptr, bool)>(std::move(initiation),
                                                                                             asio::use_awaitable);
}

}  // namespace zarrcoro::detail
