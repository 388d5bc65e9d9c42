// Small HTTP helpers of the example server: request targets, Range headers
// and dates (the slice API's .npy header is zarrcoro::npy_header). Pure
// functions, safe to call from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace zarrcoro::server {

// "%41b" -> "Ab". nullopt on a malformed escape or a decoded NUL byte.
std::optional<std::string> percent_decode(std::string_view text);

// An origin-form request target ("/a/b?x=1") split and decoded: `path`
// without its leading '/', `query` as sent (decode each parameter).
struct Target {
  std::string path;
  std::string query;
};
// nullopt unless the target starts with '/' and its path decodes cleanly
// (absolute-form "http://...", "*" and bad escapes are refused).
std::optional<Target> parse_target(std::string_view target);

// "a=1&b=%3A" -> {{"a","1"},{"b",":"}}; nullopt on a bad escape.
using Params = std::vector<std::pair<std::string, std::string>>;
std::optional<Params> parse_query(std::string_view query);

// A Range header resolved against a value of `size` bytes.
struct RangeResult {
  enum class Kind : std::uint8_t {
    none,           // no usable range: send the whole value (absent, another unit, several ranges)
    partial,        // send bytes [first, last]
    unsatisfiable,  // 416: starts at or past the end, or a zero-length suffix
    malformed,      // 416: not a byte range ("bytes=x-", "bytes=5-2")
  };
  Kind kind = Kind::none;
  std::uint64_t first = 0, last = 0;  // inclusive, for `partial`
};
// Understands "bytes=a-b", "bytes=a-" and "bytes=-n" (RFC 9110, 14.1.2).
RangeResult resolve_range(std::string_view header, std::uint64_t size);

// An IMF-fixdate, e.g. "Sun, 06 Nov 1994 08:49:37 GMT".
std::string http_date(std::chrono::system_clock::time_point t);

}  // namespace zarrcoro::server
