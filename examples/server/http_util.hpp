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
// The first parameter name `params` holds twice, if any (a request's
// parameters are refused then, rather than one of them winning silently).
std::optional<std::string> repeated_param(const Params& params);

// A Range header resolved against a value of `size` bytes (RFC 9110, 14.2).
struct RangeSet {
  enum class Kind : std::uint8_t {
    none,           // send the whole value: no Range, another unit, or a set the server may ignore
    partial,        // send `ranges`: one (a 206 with Content-Range) or several (multipart/byteranges)
    unsatisfiable,  // 416: no range starts before the end (or only zero-length suffixes)
    malformed,      // 416: not a byte-range set ("bytes=x-", "bytes=5-2", "bytes=")
  };
  struct Range {
    std::uint64_t first = 0, last = 0;  // inclusive byte offsets
    std::uint64_t length() const { return last - first + 1; }
  };
  Kind kind = Kind::none;
  std::vector<Range> ranges;  // in the order asked, unsatisfiable ones dropped; for `partial`
};
// More ranges than this, or ranges adding up to more bytes than the value
// (overlaps), are ignored (200 with the whole value), as RFC 9110 allows.
inline constexpr std::size_t kMaxRanges = 64;
// Understands "bytes=a-b", "bytes=a-" and "bytes=-n", comma-separated.
RangeSet resolve_ranges(std::string_view header, std::uint64_t size);

// If-None-Match: true if "*" or one of the listed entity tags equals `etag`
// (weak comparison, RFC 9110 13.1.2); an empty `etag` (none) matches "*" only.
bool etag_matches(std::string_view if_none_match, std::string_view etag);

// An IMF-fixdate, e.g. "Sun, 06 Nov 1994 08:49:37 GMT".
std::string http_date(std::chrono::system_clock::time_point t);
// An HTTP-date in any of the three forms RFC 9110 (5.6.7) makes recipients
// accept: IMF-fixdate, RFC 850 and asctime. nullopt if it is none of them.
std::optional<std::chrono::system_clock::time_point> parse_http_date(std::string_view text);

}  // namespace zarrcoro::server
