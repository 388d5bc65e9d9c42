// The runtime: an io_context for all store I/O and a separate thread pool for
// codec work, with the limits that bound them.
//
// Thread-safety: all methods are thread-safe. A Runtime must outlive every
// Array, Group and Store that uses its executors. Destroying it waits for
// the operations still in flight on an owned io_context to complete (their
// results are delivered as usual), then stops its threads and the pool. Two
// things are the caller's to avoid: work of the caller's own on
// codec_executor() starting an operation while the Runtime is destroyed
// (the I/O threads may have ended: it would never run), and an adopted
// io_context that is running or still holds an operation of this Runtime.
//
// Scheduling contract (the heart of the engine):
//  - Codec compute (gzip, zstd, crc32c, transpose, byte-swapping `bytes`)
//    never runs on an I/O thread.
//  - Chunk work reaches the pool in batches: a call touching N chunks makes at
//    most ceil(N / batch_chunks) pool submissions, where a shard counts as
//    the inner chunks it decodes (so a shard of batch_chunks inner chunks or
//    more closes a batch by itself, which starts as soon as that shard is
//    in). With one I/O thread, the batches of all calls ready in one turn of
//    the io_context share a submission: they are grouped up to batch_bytes
//    decoded bytes, and a larger batch goes out alone. A submission may fan out
//    over the pool's threads internally, down to the inner chunks of one
//    shard read: its threads share a shard's inner chunks
//    (RuntimeStats::chunks counts the shard once).
//  - A batch with nothing to compute (native-order `bytes` only, missing
//    chunks) of at most `inline_bytes` runs on the I/O thread without a hop.
//  - A read whose last batch goes to the pool is completed by the pool
//    thread that ends that batch, through the caller's executor (for
//    read_blocking: on that thread), with no hop back to the I/O thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>

#include <boost/asio/any_io_executor.hpp>

namespace boost::asio {
class io_context;
}

namespace zarrcoro {

namespace detail {
struct EngineState;
struct RuntimeAccess;  // engine/runtime_access.hpp: the engine's (and tests') way in
}

// Where chunk codec work runs. `batched` is the design; the others exist so
// perf/concurrent_reads can show the alternatives side by side.
enum class Dispatch : std::uint8_t {
  batched,    // one pool submission per batch, shared by concurrent calls
  per_chunk,  // one pool submission per chunk
  inline_io,  // decode on the I/O thread (what the design avoids)
};

struct RuntimeOptions {
  unsigned io_threads = 1;     // threads running the owned io_context
  unsigned codec_threads = 0;  // codec pool size; 0 = std::thread::hardware_concurrency()
  // Niceness added to every codec pool thread (Linux setpriority per
  // thread), so that when decoding saturates the cores the kernel favours
  // the I/O threads. Under SCHED_IDLE (below) the nice value has no effect;
  // it matters when that is off or refused. 0 leaves them alone.
  int codec_nice = 10;
  // Runs every codec pool thread under Linux's SCHED_IDLE policy, so that a
  // waking I/O thread preempts codec work at once (docs/design.md, "Keeping
  // the loop responsive"). The cost: while normal threads in the same
  // cgroup keep every core busy, codec work (and the reads waiting on it)
  // all but stops; work the caller posts to codec_executor() runs under it
  // too. Best effort: a refusal is logged once, and codec_nice still
  // applies. false leaves the policy alone.
  bool codec_sched_idle = true;
  // Time slice asked of the kernel for each owned I/O thread (see
  // set_thread_time_slice below), so that an I/O thread waking on a core busy
  // with codec work preempts it at once instead of waiting out the codec
  // thread's slice (a few ms). 0 leaves the kernel's default. An adopted
  // io_context's threads are the caller's: call set_thread_time_slice on them.
  std::chrono::microseconds io_time_slice{100};
  // Concurrent store requests (gets, sets, erases). Keep it at most 128 with
  // the filesystem store on io_uring: Boost 1.81 stalls when more file
  // operations than that complete at once.
  std::size_t max_inflight_requests = 64;
  std::size_t max_inflight_bytes = std::size_t{256} << 20;  // decoded-chunk memory budget
  // A call hands its fetched chunks to the codec pool in batches of this
  // many (a shard counts as its inner chunks), so that decoding starts while
  // later chunks are still being fetched. The batches ready in one turn of
  // the io_context share pool submissions, grouped up to batch_bytes decoded
  // bytes (a batch is never split: a larger one is a submission alone).
  std::size_t batch_chunks = 64;
  std::size_t batch_bytes = std::size_t{64} << 20;
  std::size_t inline_bytes = std::size_t{256} << 10;   // trivial batches up to this run inline
  // A read of at most 4 chunks with nothing to compute (unsharded, native-
  // order `bytes` only, fixed-size elements), of at most inline_bytes of
  // whole chunks, is answered on the calling thread when the store can do
  // so without waiting (Store::try_read_now: a value in memory, a file in
  // the page cache): no hop to the io_context and back. Any chunk it cannot
  // answer at once sends the whole call the usual way. An awaited read
  // (Array::read) goes with the others that coroutines on its executor's
  // execution context start before its next turn, and yields: that
  // context's thread answers them, with the I/O thread's help from four
  // waiting reads on (a coroutine reading alone is answered at once). false:
  // every read goes through the io_context.
  bool caller_reads = true;
  std::size_t coalesce_gap = std::size_t{1} << 20;     // shard reads: merge byte ranges closer than this
  std::size_t coalesce_max = std::size_t{16} << 20;    // ...into requests of at most this many bytes
  // The largest decoded chunk (or shard, or shard index) an array may
  // declare: Array::open and Array::create refuse larger ones with
  // UnsupportedError naming chunk_grid, so that a few bytes of metadata
  // cannot make a read allocate without bound.
  std::uint64_t max_chunk_bytes = std::uint64_t{1} << 30;
  // A partial chunk or shard write is a conditional read-modify-write that
  // retries while other writers (other runtimes, processes or machines)
  // keep replacing the chunk; after this long it raises StoreError naming
  // the key and field "generation". The value the write would have stored
  // is then not stored; what the other writers stored stays.
  std::chrono::milliseconds write_conflict_timeout{60000};
  Dispatch dispatch = Dispatch::batched;
  std::chrono::microseconds lag_probe_interval{5000};  // 0 disables the loop-lag probe
};

// Monotonic counters since construction or reset_stats().
struct RuntimeStats {
  std::uint64_t pool_submissions = 0;   // pool jobs (one or more batches) posted to the codec pool
  std::uint64_t fanout_posts = 0;       // extra posts that spread one job (or shard) over threads
  std::uint64_t inline_batches = 0;     // batches run on the I/O thread without a hop
  std::uint64_t chunks = 0;             // chunk tasks executed (pool or inline)
  std::uint64_t codec_calls = 0;        // chunk encodes/decodes that computed something
  std::uint64_t codec_calls_on_io_thread = 0;  // of those, run on an I/O thread (must stay 0)
  std::uint64_t codec_calls_off_pool = 0;  // of those, run on no codec pool thread (0 but in Dispatch::inline_io)
  std::uint64_t pool_queue_depth = 0;   // pool jobs submitted but not finished (a gauge)
  std::uint64_t caller_reads = 0;       // reads answered on the calling thread (caller_reads)
};

// Lateness of a periodic timer on the io_context: how long a ready handler
// waits behind others. Microseconds.
//
// own_*: each sample less the time the I/O thread spent runnable but
// waiting for a CPU since the probe's previous sample (Linux
// /proc/thread-self/schedstat, run_delay), floored at 0: the lateness the
// loop's own work (and the host's pauses, which the guest cannot see) left.
// A wait that came before the timer was due counts too, so this can
// understate; it equals the plain figure where the kernel reports no
// schedstat or the sample's previous one ran on another I/O thread.
struct LoopLag {
  double p50_us = 0, p99_us = 0, max_us = 0;
  double own_p50_us = 0, own_p99_us = 0;
  std::uint64_t samples = 0;
};

class Runtime {
 public:
  // Owns an io_context run by `io_threads` threads and a codec pool.
  explicit Runtime(RuntimeOptions options = {});
  // Adopts a service's io_context, which the caller keeps running (its threads
  // count as I/O threads for the contract above); io_threads is ignored.
  explicit Runtime(boost::asio::io_context& io, RuntimeOptions options = {});
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  boost::asio::io_context& io_context();
  boost::asio::any_io_executor io_executor();
  boost::asio::any_io_executor codec_executor();
  const RuntimeOptions& options() const;
  unsigned codec_threads() const;

  // True on a thread currently running the io_context.
  bool on_io_thread() const;
  // True on one of the codec pool's threads.
  bool on_codec_thread() const;
  // True if exactly one thread runs the io_context (an owned one with
  // io_threads == 1), so its handlers never run concurrently.
  bool serialized_io() const;

  RuntimeStats stats() const;
  void reset_stats();
  LoopLag loop_lag() const;
  void reset_loop_lag();
  // While paused, the loop-lag probe keeps its timer running but keeps no
  // samples (a benchmark leaves out the spans in which it measures something
  // else on the same cores).
  void pause_loop_lag(bool paused);

 private:
  friend struct detail::RuntimeAccess;
  detail::EngineState& engine();  // engine internal: scheduler, limits, key locks
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Asks the kernel for a time slice of `slice` for the calling thread: Linux
// >= 6.12's EEVDF custom slice (sched_setattr(2), sched_runtime; the kernel
// clamps it to 0.1-100 ms). A thread that wakes with a shorter slice than the
// running one preempts it at once. The thread's policy and nice stay as they
// were. Best effort: false if the kernel refused or the thread is not
// SCHED_OTHER; kernels before 6.12 accept and ignore it. Affects only the
// calling thread; safe from any thread.
bool set_thread_time_slice(std::chrono::microseconds slice);

// The calling thread's time slice as the kernel reports it (sched_getattr(2),
// sched_runtime): its own from set_thread_time_slice, else the kernel's
// default. 0 when the thread is not SCHED_OTHER or the kernel does not say
// (before Linux 6.12). Safe from any thread.
std::chrono::microseconds thread_time_slice();

}  // namespace zarrcoro
