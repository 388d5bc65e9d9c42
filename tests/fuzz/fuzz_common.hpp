// Shared helpers of the libFuzzer targets (tests/fuzz/fuzz_*.cpp).
//
// The property every target checks: only typed errors leave the library.
// A target catches `const zarrcoro::Error&` and nothing else; any other
// exception (std::out_of_range, nlohmann::json::exception, ...) escapes
// LLVMFuzzerTestOneInput and libFuzzer reports it as a crash ("deadly
// signal" after std::terminate). Sanitizer reports, timeouts and
// out-of-memory are crashes too. A target may add its own checks (round
// trips) with check(), which aborts with a message.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include <zarrcoro/bytes.hpp>
#include <zarrcoro/error.hpp>
#include <zarrcoro/runtime.hpp>

namespace fuzz {

// Runs `f`, swallowing zarrcoro::Error only. Returns true if `f` completed.
template <class F>
bool typed(F&& f) {
  try {
    std::forward<F>(f)();
    return true;
  } catch (const zarrcoro::Error&) {
    return false;
  }
}

// A property of the target failed: report and abort (libFuzzer: crash).
[[noreturn]] inline void fail(const char* what) {
  std::fprintf(stderr, "fuzz check failed: %s\n", what);
  std::fflush(stderr);
  std::abort();
}
inline void check(bool ok, const char* what) {
  if (!ok) fail(what);
}

inline std::string_view text(const std::uint8_t* data, std::size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}
inline zarrcoro::ByteSpan bytes(const std::uint8_t* data, std::size_t size) {
  return {reinterpret_cast<const std::byte*>(data), size};
}
inline zarrcoro::Bytes owned(std::string_view s) {
  zarrcoro::Bytes b(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) b[i] = static_cast<std::byte>(s[i]);
  return b;
}

// Splits `s` at the first occurrence of `sep`: {before, after}; `found` says
// whether it occurred (else after is empty).
inline std::pair<std::string_view, std::string_view> split(std::string_view s, std::string_view sep,
                                                           bool* found = nullptr) {
  const std::size_t at = s.find(sep);
  if (found) *found = at != std::string_view::npos;
  if (at == std::string_view::npos) return {s, {}};
  return {s.substr(0, at), s.substr(at + sep.size())};
}

// One small runtime for the targets that go through the engine (memory
// store): one I/O thread, one codec thread, no loop-lag timer, and chunks
// bounded so that a document cannot ask for more memory than the fuzzer's
// RSS limit. Never destroyed (its threads outlive every input).
inline zarrcoro::Runtime& runtime() {
  static zarrcoro::Runtime* rt = [] {
    zarrcoro::RuntimeOptions o;
    o.io_threads = 1;
    o.codec_threads = 1;
    o.max_chunk_bytes = std::uint64_t{16} << 20;
    o.max_inflight_bytes = std::size_t{64} << 20;
    o.lag_probe_interval = std::chrono::microseconds(0);
    return new zarrcoro::Runtime(o);
  }();
  return *rt;
}

}  // namespace fuzz
