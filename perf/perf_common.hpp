// Small helpers shared by the benchmarks: timing, peak RSS, a fast PRNG,
// verdict strings. Header-only; benchmark code, not part of the library.
#pragma once

#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>

namespace zarrcoro::perf {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// splitmix64: a tiny, good-enough generator for choosing chunks and noise.
struct Rng {
  std::uint64_t state;
  explicit Rng(std::uint64_t seed) : state(seed * 0x9E3779B97F4A7C15ull + 1) {}
  std::uint64_t next() {
    std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
};

// Peak resident set size in MiB. Prefers /proc's VmHWM, which
// reset_peak_rss() can lower to the current RSS (Linux >= 4.0); falls back to
// getrusage's ru_maxrss (process lifetime, never reset).
inline double peak_rss_mib() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;  // kB
  }
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_maxrss) / 1024.0;  // kB on Linux
}

// Resets the peak RSS to the current RSS. Returns false if unsupported, in
// which case peak_rss_mib() reports the lifetime peak.
inline bool reset_peak_rss() {
  std::ofstream clear("/proc/self/clear_refs");
  if (!clear) return false;
  clear << "5";
  clear.flush();
  return static_cast<bool>(clear);
}

inline const char* verdict(bool ok) { return ok ? "PASS" : "MISS"; }

// CPU time the hypervisor has taken from this machine's CPUs since boot,
// all CPUs together ("steal" in /proc/stat), in seconds, to 10 ms; 0 where
// it cannot be read. The 2-core VM the project is measured on stops both
// vCPUs for about 100 ms a few times in 5 s once both are busy (a program
// that only spins on both cores sees those stops, on one core none), and
// accounts them as steal: a measurement that contains one says little.
inline double stolen_seconds() {
  std::ifstream f("/proc/stat");
  std::string cpu;
  std::uint64_t v[8] = {};
  f >> cpu;
  for (auto& x : v) f >> x;
  static const long hz = ::sysconf(_SC_CLK_TCK);
  return f && cpu == "cpu" && hz > 0 ? static_cast<double>(v[7]) / static_cast<double>(hz) : 0;
}

// The 1, 5 and 15 minute load averages, e.g. "1.92 2.12 2.11".
inline std::string load_average() {
  std::ifstream f("/proc/loadavg");
  std::string a, b, c;
  f >> a >> b >> c;
  return f ? a + " " + b + " " + c : "n/a";
}

// Writes a benchmark's JSON records (an nlohmann::json array) to `path` and
// says so; false (with a message on stderr) if it cannot.
template <class Json>
bool write_records(const std::string& path, const Json& records, const char* tool) {
  std::ofstream f(path);
  f << records.dump(2) << "\n";
  if (!f) {
    std::fprintf(stderr, "%s: cannot write %s\n", tool, path.c_str());
    return false;
  }
  std::printf("wrote %zu records to %s\n", records.size(), path.c_str());
  return true;
}

}  // namespace zarrcoro::perf
