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
// cores (clients on the same cores), the /healthz prober, itself a normal
// thread, missed its 5 ms p99 about as often either way (7 of 72 loads
// real-time, 5 of 54 normal, 2026-12-04/05); the loop's lag at 1 MiB fell
// from 1.84-3.58 ms to 0.09-0.17 ms. zarrcoro-server uses it by default
// where permitted.
//
// Needs CAP_SYS_NICE or RLIMIT_RTPRIO >= 1 (and real-time time in the
// cgroup); where the kernel refuses, start() logs one line (a warning where
// it was asked for) and the thread stays as it was. Where the process's
// cgroup has a CPU quota (cgroup_cpu_quota), a real-time thread would
// escape it: unless asked for, the loop then stays a normal thread. The
// priority is 1, the lowest real-time one, with SCHED_RESET_ON_FORK.
// stop() returns the thread to SCHED_OTHER, whatever policy it had before
// start().
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
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <spdlog/spdlog.h>

namespace zarrcoro::server {

// The CPU quota of this process's cgroup or of an ancestor within view, as
// "FILE: VALUE" (cgroup v2 cpu.max other than "max ...", or v1
// cpu.cfs_quota_us other than -1); nullopt if there is none or none can be
// read. A SCHED_FIFO thread is outside such a quota (CFS bandwidth control
// limits only normal threads), so a default real-time loop would let a
// container exceed it.
inline std::optional<std::string> cgroup_cpu_quota() {
  struct Mount {
    std::string root, point;
  };
  std::optional<Mount> v2, v1cpu;
  std::ifstream mounts("/proc/self/mountinfo");
  for (std::string line; std::getline(mounts, line);) {
    // id parent major:minor root mount-point options [optional...] - fstype source super-options
    std::istringstream in(line);
    std::string id, parent, dev, root, point, word;
    in >> id >> parent >> dev >> root >> point;
    while (in >> word && word != "-") {
    }
    std::string fstype, source, super;
    in >> fstype >> source >> super;
    if (fstype == "cgroup2" && !v2) v2 = Mount{root, point};
    if (fstype == "cgroup" && !v1cpu && ("," + super + ",").find(",cpu,") != std::string::npos)
      v1cpu = Mount{root, point};
  }
  auto quota_in = [](const Mount& m, std::string path, const char* file,
                     bool (*unlimited)(const std::string&)) -> std::optional<std::string> {
    if (m.root != "/" && path.rfind(m.root, 0) == 0) path = path.substr(m.root.size());
    while (true) {  // the cgroup, then each ancestor up to the mount's root
      const std::string at = m.point + (path == "/" ? "" : path) + "/" + file;
      std::ifstream f(at);
      std::string value;
      if (std::getline(f, value) && !unlimited(value)) return at + ": " + value;
      if (path.empty() || path == "/") return std::nullopt;
      path = path.substr(0, path.rfind('/'));
    }
  };
  std::ifstream groups("/proc/self/cgroup");
  for (std::string line; std::getline(groups, line);) {
    // hierarchy-id:controllers:path
    const auto a = line.find(':'), b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    std::optional<std::string> q;
    if (line.rfind("0::", 0) == 0 && v2)
      q = quota_in(*v2, path, "cpu.max", [](const std::string& v) { return v.rfind("max", 0) == 0; });
    else if (("," + controllers + ",").find(",cpu,") != std::string::npos && v1cpu)
      q = quota_in(*v1cpu, path, "cpu.cfs_quota_us", [](const std::string& v) { return v == "-1"; });
    if (q) return q;
  }
  return std::nullopt;
}

class LoopPriority : public std::enable_shared_from_this<LoopPriority> {
 public:
  // Shares of one core, measured over kWindow.
  static constexpr std::chrono::milliseconds kWindow{10};
  static constexpr double kLeave = 0.5;    // SCHED_FIFO -> SCHED_OTHER above it
  static constexpr double kRejoin = 0.25;  // SCHED_OTHER -> SCHED_FIFO below it

  // asked: the user asked for it (LoopRealtime::on): a refusal by the
  // kernel is a warning, and a cgroup CPU quota does not stop it. Else
  // (LoopRealtime::when_permitted) a refusal is an info line, and under a
  // CPU quota the loop stays a normal thread.
  LoopPriority(boost::asio::io_context& io, bool asked) : timer_(io), asked_(asked) {}

  // On the loop's thread: enters SCHED_FIFO and starts the guard's window.
  // Logs one line either way; does nothing more if the kernel refuses.
  void start() {
    boost::asio::post(timer_.get_executor(), [self = shared_from_this()] {
      if (self->stopped_) return;
      if (const auto quota = cgroup_cpu_quota()) {
        if (!self->asked_) {
          spdlog::info("server: the I/O loop stays a normal thread: a real-time thread would escape the CPU quota "
                       "({}); --loop-realtime overrides",
                       *quota);
          return;
        }
        spdlog::warn("server: the real-time I/O loop is outside the CPU quota ({})", *quota);
      }
      if (!self->enter_fifo()) {
        spdlog::log(self->asked_ ? spdlog::level::warn : spdlog::level::info,
                    "server: the I/O loop stays a normal thread: the kernel refused SCHED_FIFO: {} (it needs "
                    "CAP_SYS_NICE or RLIMIT_RTPRIO >= 1, and real-time time in the cgroup)",
                    std::strerror(errno));
        return;
      }
      spdlog::info("server: the I/O loop runs under SCHED_FIFO while it uses at most half of its core "
                   "(--no-loop-realtime: a normal thread)");
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
  const bool asked_;
  bool stopped_ = false, warned_ = false;
  std::atomic<bool> realtime_{false};
  std::atomic<std::uint64_t> exits_{0};
};

}  // namespace zarrcoro::server
