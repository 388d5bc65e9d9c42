// See cli/progress.hpp.
#include "cli/progress.hpp"

#include <unistd.h>

#include <cstdio>

namespace zarrcoro::cli {

Progress::Progress(std::string label, std::string unit, std::uint64_t total, ProgressMode mode)
    : label_(std::move(label)), unit_(std::move(unit)), total_(total), tty_(::isatty(STDERR_FILENO) == 1),
      start_(std::chrono::steady_clock::now()), last_(start_) {
  enabled_ = mode == ProgressMode::always || (mode == ProgressMode::automatic && tty_);
}

void Progress::add(std::uint64_t items, std::uint64_t bytes) {
  done_ += items;
  bytes_ += bytes;
  if (!enabled_) return;
  const auto now = std::chrono::steady_clock::now();
  if (now - last_ < (tty_ ? std::chrono::milliseconds(100) : std::chrono::milliseconds(1000))) return;
  last_ = now;
  print(false);
}

void Progress::finish() {
  if (!enabled_ || finished_) return;
  finished_ = true;
  print(true);
}

void Progress::print(bool final) {
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const double mb = static_cast<double>(bytes_) / 1e6, rate = s > 0 ? mb / s : 0;
  char eta[32] = "";
  if (!final && done_ > 0 && done_ < total_)
    std::snprintf(eta, sizeof eta, ", ETA %.0f s", s * static_cast<double>(total_ - done_) / static_cast<double>(done_));
  std::fprintf(stderr, "%s%s: %llu/%llu %s, %.1f MB, %.1f MB/s%s%s%s", tty_ ? "\r" : "", label_.c_str(),
               static_cast<unsigned long long>(done_), static_cast<unsigned long long>(total_), unit_.c_str(), mb,
               rate, eta, tty_ ? "\x1b[K" : "", final || !tty_ ? "\n" : "");
  std::fflush(stderr);
}

}  // namespace zarrcoro::cli
