// LoopPriority: the I/O loop's thread under SCHED_FIFO while the loop is
// light (ServerOptions::loop_realtime).
//
// Why: on a kernel that does not preempt kernel code (Debian's default,
// "Dynamic Preempt: none"), a loop that wakes on a core held by a thread in a
// long system call (a 1 MiB sendfile, a client's read of it) waits for that
// call to end: 2-3 ms at the p99 under 1 MiB key GETs on two cores, however
// short the loop's own work. A real-time thread takes a core at the next
// preemption point instead.
//
// The guard: a real-time thread that keeps its core busy starves the others
// on it and, past 95% of a second, is stopped by the kernel's real-time
// throttling for the rest of it (a 50 ms stall). So every window (10 ms) the
// loop measures its own CPU time: over kLeave of the window (half),
// it goes back to SCHED_OTHER (with its nice and time slice), and
// under kRejoin (a quarter) it returns to SCHED_FIFO, unless the window
// ended late (over twice its length: the thread may have been kept from its
// core, e.g. by the VM's host, rather than idle). A loop saturated by small
// requests thus stays a normal thread; one that mostly waits is real-time.
// The guard acts between handlers: one handler that ran for most of a
// second would still be throttled.
//
// The cost is the other threads': a real-time loop takes a core from
// whatever runs there, bounded by the guard. In perf/server_load.sh on two
// cores (clients on the same cores), eleven runs alternated on 2026-12-05
// gave the /healthz prober, itself a normal thread, a p99 under 5 ms
// beside every load with it, and missed twice without it; four runs on
// 2026-12-04 had shown the opposite (7 of 24 loads against 3, mostly the
// VM's stops). zarrcoro-server uses it by default where permitted.
//
// Needs CAP_SYS_NICE or RLIMIT_RTPRIO >= 1; without them start() logs one
// line (a warning where it was asked for) and the thread stays as it was. The priority is 1, the lowest
// real-time one, with SCHED_RESET_ON_FORK. stop() returns the thread to
// SCHED_OTHER, whatever policy it had before start().
//
// Thread-safety: only for an io_context that one thread runs (the thread
// whose policy changes is whichever runs the handlers). start() and stop()
// may be called from any thread, start() once; realtime() and fifo_exits()
// too. Both act through handlers posted to the loop: they take effect when
// it runs them.
#pragma once

#include <sched.h>
#include <time.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <spdlog/spdlog.h>

namespace zarrcoro::server {

class LoopPriority : public std::enable_shared_from_this<LoopPriority> {
 public:
  // Shares of one core, measured over kWindow.
  static constexpr std::chrono::milliseconds kWindow{10};
  static constexpr double kLeave = 0.5;    // SCHED_FIFO -> SCHED_OTHER above it
  static constexpr double kRejoin = 0.25;  // SCHED_OTHER -> SCHED_FIFO below it

  // warn_if_refused: a refusal by the kernel is a warning (asked for), else
  // an info line (the default where permitted).
  LoopPriority(boost::asio::io_context& io, bool warn_if_refused) : timer_(io), warn_if_refused_(warn_if_refused) {}

  // On the loop's thread: enters SCHED_FIFO and starts the guard's window.
  // Logs once and does nothing more if the kernel refuses.
  void start() {
    boost::asio::post(timer_.get_executor(), [self = shared_from_this()] {
      if (self->stopped_) return;
      if (!self->enter_fifo()) {
        spdlog::log(self->warn_if_refused_ ? spdlog::level::warn : spdlog::level::info,
                    "server: the I/O loop stays a normal thread: SCHED_FIFO was refused: {} (needs CAP_SYS_NICE or "
                    "RLIMIT_RTPRIO >= 1)",
                    std::strerror(errno));
        return;
      }
      self->begin_window();
    });
  }

  // On the loop's thread: stops the guard and returns the thread to
  // SCHED_OTHER. Idempotent.
  void stop() {
    boost::asio::post(timer_.get_executor(), [self = shared_from_this()] {
      self->stopped_ = true;
      self->timer_.cancel();
      if (self->realtime_.load()) self->leave_fifo();
    });
  }

  bool realtime() const { return realtime_.load(std::memory_order_relaxed); }
  // Windows after which the loop left SCHED_FIFO for using too much CPU.
  std::uint64_t fifo_exits() const { return exits_.load(std::memory_order_relaxed); }

 private:
  static std::chrono::nanoseconds thread_cpu() {
    timespec ts{};
    ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec);
  }

  // SCHED_RESET_ON_FORK stays set both ways: an unprivileged thread (one
  // with RLIMIT_RTPRIO only) may not clear it. Since Linux 6.12 the kernel
  // keeps the thread's own time slice (set_thread_time_slice) through
  // SCHED_FIFO and back; its nice is kept too.
  bool set_policy(int policy, int priority) {
    sched_param p{};
    p.sched_priority = priority;
    if (::sched_setscheduler(0, policy | SCHED_RESET_ON_FORK, &p) != 0) return false;
    realtime_ = policy == SCHED_FIFO;
    return true;
  }
  bool enter_fifo() { return set_policy(SCHED_FIFO, 1); }
  bool leave_fifo() {
    if (set_policy(SCHED_OTHER, 0)) return true;
    if (!warned_) spdlog::warn("server: the I/O loop cannot leave SCHED_FIFO: {}", std::strerror(errno));
    warned_ = true;
    return false;
  }

  void begin_window() {
    if (stopped_) return;
    cpu_start_ = thread_cpu();
    wall_start_ = std::chrono::steady_clock::now();
    timer_.expires_after(kWindow);
    timer_.async_wait([w = weak_from_this()](const boost::system::error_code& ec) {
      if (auto self = w.lock(); self && !ec) self->end_window();
    });
  }

  void end_window() {
    if (stopped_) return;  // a window that ended before stop() ran, queued behind it
    const auto wall = std::chrono::steady_clock::now() - wall_start_;
    const double share = std::chrono::duration<double>(thread_cpu() - cpu_start_).count() /
                         std::chrono::duration<double>(wall).count();
    if (realtime_.load() && share > kLeave) {
      if (leave_fifo()) exits_.fetch_add(1, std::memory_order_relaxed);
    } else if (!realtime_.load() && share < kRejoin && wall <= 2 * kWindow) {
      enter_fifo();  // not after a late window: the thread may have been kept from its core, not idle
    }
    begin_window();
  }

  boost::asio::steady_timer timer_;
  std::chrono::nanoseconds cpu_start_{0};
  std::chrono::steady_clock::time_point wall_start_;
  const bool warn_if_refused_;
  bool stopped_ = false, warned_ = false;
  std::atomic<bool> realtime_{false};
  std::atomic<std::uint64_t> exits_{0};
};

}  // namespace zarrcoro::server
