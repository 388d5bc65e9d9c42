// A progress line for long commands, on stderr: "LABEL: DONE/TOTAL UNIT,
// N MB, R MB/s, ETA S s". On a terminal one line updated in place (at most
// ten times a second); elsewhere, when forced, a line at most every second.
// finish() prints the final line. Not thread-safe: one command thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace zarrcoro::cli {

enum class ProgressMode { automatic, always, never };  // automatic: only on a terminal

class Progress {
 public:
  Progress(std::string label, std::string unit, std::uint64_t total, ProgressMode mode);
  // `items` more of the total done, having moved `bytes`.
  void add(std::uint64_t items, std::uint64_t bytes);
  void finish();

 private:
  void print(bool final);
  std::string label_, unit_;
  std::uint64_t total_, done_ = 0, bytes_ = 0;
  bool enabled_, tty_, finished_ = false;
  std::chrono::steady_clock::time_point start_, last_;
};

}  // namespace zarrcoro::cli
