// Runtime: the io_context, the codec pool, their threads, and the loop-lag probe.
#include <zarrcoro/runtime.hpp>

#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <latch>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/post.hpp>
#include <spdlog/spdlog.h>

#include "engine/engine_state.hpp"

namespace zarrcoro {

namespace asio = boost::asio;

namespace {

// struct sched_attr of sched_setattr(2), first version (48 bytes); glibc 2.36
// has no wrapper.
struct SchedAttr {
  std::uint32_t size;
  std::uint32_t sched_policy;
  std::uint64_t sched_flags;
  std::int32_t sched_nice;
  std::uint32_t sched_priority;
  std::uint64_t sched_runtime, sched_deadline, sched_period;
};
static_assert(sizeof(SchedAttr) == 48);

// The calling thread's scheduling attributes, if it is SCHED_OTHER.
std::optional<SchedAttr> fair_sched_attr() {
#if defined(SYS_sched_getattr)
  SchedAttr a{};
  if (::syscall(SYS_sched_getattr, 0, &a, sizeof a, 0) == 0 && a.sched_policy == 0 /* SCHED_OTHER */) return a;
#endif
  return std::nullopt;
}

}  // namespace

// Measured without it: the I/O thread waited up to 4.5 ms on a core for the
// rest of a codec thread's slice, nice 10 notwithstanding, while the other
// core was idle.
bool set_thread_time_slice(std::chrono::microseconds slice) {
#if defined(SYS_sched_setattr)
  auto a = fair_sched_attr();
  if (!a) return false;
  a->size = sizeof *a;
  a->sched_flags &= 0x01;  // SCHED_FLAG_RESET_ON_FORK: only a privileged thread may clear it
  a->sched_runtime = static_cast<std::uint64_t>(slice.count()) * 1000;  // ns; keeps policy and nice
  return ::syscall(SYS_sched_setattr, 0, &*a, 0) == 0;
#else
  (void)slice;
  return false;
#endif
}

std::chrono::microseconds thread_time_slice() {
  const auto a = fair_sched_attr();
  return std::chrono::microseconds(a ? a->sched_runtime / 1000 : 0);
}

struct Runtime::Impl {
  RuntimeOptions options;
  std::unique_ptr<asio::io_context> owned_io;
  asio::io_context* io;
  unsigned threads;
  asio::thread_pool pool;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> guard;
  std::vector<std::thread> io_threads;
  detail::EngineState engine;

  // Loop-lag probe: a periodic timer whose lateness is sampled.
  asio::steady_timer lag_timer;
  std::chrono::steady_clock::time_point lag_due;
  mutable std::mutex lag_mu;
  std::vector<float> lag_samples;  // ring buffer, microseconds
  std::vector<float> own_samples;  // the same, less the thread's wait for a CPU (LoopLag::own_*)
  std::size_t lag_next = 0;
  double lag_max = 0;
  std::uint64_t lag_count = 0;
  bool lag_paused = false;
  // The probe's previous reading of its thread's CPU wait; touched only by
  // the probe's handler (one at a time).
  std::optional<std::uint64_t> last_wait_ns;
  std::thread::id last_wait_thread;
  bool stopping = false;

  static unsigned codec_threads(const RuntimeOptions& o) {
    return o.codec_threads ? o.codec_threads : std::max(1u, std::thread::hardware_concurrency());
  }

  Impl(RuntimeOptions o, asio::io_context* adopted)
      : options(o),
        owned_io(adopted ? nullptr : std::make_unique<asio::io_context>()),
        io(adopted ? adopted : owned_io.get()),
        threads(codec_threads(o)),
        pool(threads),
        engine(io->get_executor(), pool, threads, options,
               [io = io] { return io->get_executor().running_in_this_thread(); }),
        lag_timer(*io) {
    setup_codec_threads();
    if (options.lag_probe_interval.count() > 0) {
      lag_samples.reserve(1 << 16);
      own_samples.reserve(1 << 16);
      arm_lag_probe();
    }
    if (owned_io) {
      guard.emplace(io->get_executor());
      for (unsigned i = 0; i < std::max(1u, options.io_threads); ++i)
        io_threads.emplace_back([this] {
          ::pthread_setname_np(::pthread_self(), "zarrcoro-io");
          if (options.io_time_slice.count() > 0 && !set_thread_time_slice(options.io_time_slice))
            spdlog::debug("zarrcoro: the kernel refused a {} us time slice for the I/O thread",
                          options.io_time_slice.count());
          io->run();
        });
    }
  }

  // Names every pool thread "zarrcoro-codec", lowers its priority by
  // codec_nice and puts it under SCHED_IDLE (codec_sched_idle). One blocking
  // task per pool thread: each waits until all have started, so each lands
  // on its own thread.
  void setup_codec_threads() {
    auto started = std::make_shared<std::latch>(threads);  // shared: a task may still be waking when we return
    const int nice = options.codec_nice;
    const bool idle = options.codec_sched_idle;
    for (unsigned i = 0; i < threads; ++i)
      asio::post(pool, [started, nice, idle] {
        ::pthread_setname_np(::pthread_self(), "zarrcoro-codec");
        const auto tid = static_cast<id_t>(::gettid());
        errno = 0;
        const int current = nice > 0 ? ::getpriority(PRIO_PROCESS, tid) : 0;
        static std::atomic<bool> warned_nice{false}, warned_idle{false};
        if (nice > 0 && ((current == -1 && errno != 0) ||
                         ::setpriority(PRIO_PROCESS, tid, std::min(19, current + nice)) != 0) &&
            !warned_nice.exchange(true))
          spdlog::warn("zarrcoro: cannot lower the codec threads' priority: {}", std::strerror(errno));
        if (idle) {
          const sched_param none{};
          const int err = ::pthread_setschedparam(::pthread_self(), SCHED_IDLE, &none);
          if (err != 0 && !warned_idle.exchange(true))
            spdlog::warn("zarrcoro: cannot run the codec threads under SCHED_IDLE: {}", std::strerror(err));
        }
        started->arrive_and_wait();
      });
    started->wait();
  }

  // The calling thread's schedstat run_delay: nanoseconds it has waited
  // runnable for a CPU; nullopt without schedstat. One pread of an fd the
  // thread keeps open.
  static std::optional<std::uint64_t> cpu_wait_ns() {
    struct Fd {
      int fd = ::open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
      ~Fd() {
        if (fd >= 0) ::close(fd);
      }
    };
    thread_local Fd f;
    char buf[96];
    const ssize_t n = f.fd < 0 ? -1 : ::pread(f.fd, buf, sizeof buf, 0);
    if (n <= 0) return std::nullopt;
    // "run_ns delay_ns slices\n": the second field.
    const char* const end = buf + n;
    const char* p = std::find(static_cast<const char*>(buf), end, ' ');
    std::uint64_t delay_ns = 0;
    if (p == end || std::from_chars(p + 1, end, delay_ns).ec != std::errc{}) return std::nullopt;
    return delay_ns;
  }

  // Microseconds the calling I/O thread waited for a CPU since the probe's
  // previous sample, if that ran on this thread too; else 0.
  double cpu_wait_since_last_probe() {
    const auto now = cpu_wait_ns();
    const auto self = std::this_thread::get_id();
    const bool same = now && last_wait_ns && last_wait_thread == self && *now >= *last_wait_ns;
    const double waited = same ? static_cast<double>(*now - *last_wait_ns) / 1e3 : 0;
    last_wait_ns = now;
    last_wait_thread = self;
    return waited;
  }

  void arm_lag_probe() {
    lag_due = std::chrono::steady_clock::now() + options.lag_probe_interval;
    lag_timer.expires_at(lag_due);
    lag_timer.async_wait([this](boost::system::error_code ec) {
      if (ec) return;
      const double late =
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - lag_due).count();
      const double waited = cpu_wait_since_last_probe();
      {
        std::lock_guard lk(lag_mu);
        if (stopping) return;
        if (!lag_paused) {
          const auto own = static_cast<float>(std::max(0.0, late - waited));
          if (lag_samples.size() < (1u << 16)) {
            lag_samples.push_back(static_cast<float>(late));
            own_samples.push_back(own);
          } else {
            const std::size_t at = lag_next++ % lag_samples.size();
            lag_samples[at] = static_cast<float>(late);
            own_samples[at] = own;
          }
          lag_max = std::max(lag_max, late);
          ++lag_count;
        }
      }
      arm_lag_probe();
    });
  }

  ~Impl() {
    {
      std::lock_guard lk(lag_mu);
      stopping = true;
    }
    // Cancel the probe on the loop's own thread(s) to avoid racing it. An
    // adopted io_context must not be running while its Runtime is destroyed.
    if (owned_io) asio::post(*io, [this] { lag_timer.cancel(); });
    else lag_timer.cancel();
    // Operations still in flight complete first: the io_context runs out of
    // work only once they have, and they need the pool until then (a pool
    // joined first stops while idle, and a later batch would never run).
    if (owned_io) {
      guard.reset();
      for (auto& t : io_threads) t.join();
    }
    pool.join();
  }
};

Runtime::Runtime(RuntimeOptions options) : impl_(std::make_unique<Impl>(options, nullptr)) {}
Runtime::Runtime(asio::io_context& io, RuntimeOptions options)
    : impl_(std::make_unique<Impl>(options, &io)) {}
Runtime::~Runtime() = default;

asio::io_context& Runtime::io_context() { return *impl_->io; }
asio::any_io_executor Runtime::io_executor() { return impl_->io->get_executor(); }
asio::any_io_executor Runtime::codec_executor() { return impl_->pool.get_executor(); }
const RuntimeOptions& Runtime::options() const { return impl_->options; }
unsigned Runtime::codec_threads() const { return impl_->threads; }
bool Runtime::on_io_thread() const { return impl_->io->get_executor().running_in_this_thread(); }
bool Runtime::on_codec_thread() const { return impl_->pool.get_executor().running_in_this_thread(); }
bool Runtime::serialized_io() const { return impl_->owned_io && impl_->io_threads.size() == 1; }
detail::EngineState& Runtime::engine() { return impl_->engine; }

RuntimeStats Runtime::stats() const {
  const auto& c = impl_->engine.scheduler.counters();
  RuntimeStats s;
  s.pool_submissions = c.pool_submissions.load();
  s.fanout_posts = c.fanout_posts.load();
  s.inline_batches = c.inline_batches.load();
  s.chunks = c.chunks.load();
  s.codec_calls = c.codec_calls.load();
  s.codec_calls_on_io_thread = c.codec_calls_on_io_thread.load();
  s.codec_calls_off_pool = c.codec_calls_off_pool.load();
  s.pool_queue_depth = c.queue_depth.load();
  s.caller_reads = c.caller_reads.load();
  return s;
}

void Runtime::reset_stats() {
  auto& c = impl_->engine.scheduler.counters();
  for (auto* a : {&c.pool_submissions, &c.fanout_posts, &c.inline_batches, &c.chunks,
                  &c.codec_calls, &c.codec_calls_on_io_thread, &c.codec_calls_off_pool, &c.caller_reads})
    a->store(0);
}

LoopLag Runtime::loop_lag() const {
  std::vector<float> v, own;
  LoopLag out;
  {
    std::lock_guard lk(impl_->lag_mu);
    v = impl_->lag_samples;
    own = impl_->own_samples;
    out.max_us = impl_->lag_max;
    out.samples = impl_->lag_count;
  }
  if (v.empty()) return out;
  auto pct = [](std::vector<float>& s, double p) {
    const auto k = static_cast<std::size_t>(p * static_cast<double>(s.size() - 1));
    std::nth_element(s.begin(), s.begin() + static_cast<std::ptrdiff_t>(k), s.end());
    return static_cast<double>(s[k]);
  };
  out.p50_us = pct(v, 0.50);
  out.p99_us = pct(v, 0.99);
  out.own_p50_us = pct(own, 0.50);
  out.own_p99_us = pct(own, 0.99);
  return out;
}

void Runtime::pause_loop_lag(bool paused) {
  std::lock_guard lk(impl_->lag_mu);
  impl_->lag_paused = paused;
}

void Runtime::reset_loop_lag() {
  std::lock_guard lk(impl_->lag_mu);
  impl_->lag_samples.clear();
  impl_->own_samples.clear();
  impl_->lag_next = 0;
  impl_->lag_max = 0;
  impl_->lag_count = 0;
}

}  // namespace zarrcoro
