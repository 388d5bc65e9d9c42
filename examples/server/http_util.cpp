#include "http_util.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <ctime>
#include <limits>

namespace zarrcoro::server {
namespace {

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// A whole decimal number (no sign, no spaces); nullopt otherwise or on overflow.
std::optional<std::uint64_t> number(std::string_view s) {
  std::uint64_t v = 0;
  if (s.empty() || s.front() < '0' || s.front() > '9') return std::nullopt;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
  return v;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

}  // namespace

std::optional<std::string> percent_decode(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (c == '%') {
      if (i + 2 >= text.size()) return std::nullopt;
      const int hi = hex_digit(text[i + 1]), lo = hex_digit(text[i + 2]);
      if (hi < 0 || lo < 0) return std::nullopt;
      c = static_cast<char>(hi * 16 + lo);
      i += 2;
    }
    if (c == '\0') return std::nullopt;
    out.push_back(c);
  }
  return out;
}

std::optional<Target> parse_target(std::string_view target) {
  if (target.empty() || target.front() != '/') return std::nullopt;
  const auto q = target.find('?');
  auto path = percent_decode(target.substr(1, q == std::string_view::npos ? std::string_view::npos : q - 1));
  if (!path) return std::nullopt;
  Target t;
  t.path = std::move(*path);
  if (q != std::string_view::npos) t.query = std::string(target.substr(q + 1));
  return t;
}

std::optional<std::string> repeated_param(const Params& params) {
  for (std::size_t i = 0; i < params.size(); ++i)
    for (std::size_t j = 0; j < i; ++j)
      if (params[j].first == params[i].first) return params[i].first;
  return std::nullopt;
}

std::optional<Params> parse_query(std::string_view query) {
  Params out;
  while (!query.empty()) {
    const auto amp = query.find('&');
    const std::string_view item = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view{} : query.substr(amp + 1);
    if (item.empty()) continue;
    const auto eq = item.find('=');
    auto key = percent_decode(item.substr(0, eq));
    auto value = percent_decode(eq == std::string_view::npos ? std::string_view{} : item.substr(eq + 1));
    if (!key || !value) return std::nullopt;
    out.emplace_back(std::move(*key), std::move(*value));
  }
  return out;
}

RangeSet resolve_ranges(std::string_view header, std::uint64_t size) {
  using Kind = RangeSet::Kind;
  header = trim(header);
  constexpr std::string_view unit = "bytes=";
  if (header.size() < unit.size()) return {};
  for (std::size_t i = 0; i < unit.size(); ++i)  // the unit is case-insensitive
    if (std::tolower(static_cast<unsigned char>(header[i])) != unit[i]) return {};
  std::string_view set = header.substr(unit.size());
  RangeSet out;
  std::size_t specs = 0;
  std::uint64_t total = 0;
  while (true) {
    const auto comma = set.find(',');
    const std::string_view spec = trim(set.substr(0, comma));
    set = comma == std::string_view::npos ? std::string_view{} : set.substr(comma + 1);
    if (!spec.empty()) {  // empty list elements are allowed (RFC 9110, 5.6.1)
      ++specs;
      const auto dash = spec.find('-');
      if (dash == std::string_view::npos) return {Kind::malformed, {}};
      const std::string_view a = trim(spec.substr(0, dash)), b = trim(spec.substr(dash + 1));
      std::optional<RangeSet::Range> r;
      if (a.empty()) {  // suffix: the last n bytes
        const auto n = number(b);
        if (!n) return {Kind::malformed, {}};
        if (*n > 0 && size > 0) r = RangeSet::Range{size - std::min(*n, size), size - 1};
      } else {
        const auto first = number(a);
        if (!first) return {Kind::malformed, {}};
        std::uint64_t last = std::numeric_limits<std::uint64_t>::max();
        if (!b.empty()) {
          const auto l = number(b);
          if (!l || *l < *first) return {Kind::malformed, {}};
          last = *l;
        }
        if (*first < size) r = RangeSet::Range{*first, std::min(last, size - 1)};
      }
      if (r) {
        out.ranges.push_back(*r);
        total += r->length();
      }
    }
    if (comma == std::string_view::npos) break;
  }
  if (specs == 0) return {Kind::malformed, {}};
  if (out.ranges.empty()) return {Kind::unsatisfiable, {}};
  if (out.ranges.size() > kMaxRanges || total > size) return {};
  out.kind = Kind::partial;
  return out;
}

bool etag_matches(std::string_view if_none_match, std::string_view etag) {
  if (etag.starts_with("W/")) etag.remove_prefix(2);
  while (!if_none_match.empty()) {
    const auto comma = if_none_match.find(',');
    std::string_view tag = trim(if_none_match.substr(0, comma));
    if_none_match = comma == std::string_view::npos ? std::string_view{} : if_none_match.substr(comma + 1);
    if (tag.starts_with("W/")) tag.remove_prefix(2);
    if (tag == "*" || (!etag.empty() && tag == etag)) return true;
  }
  return false;
}

std::string http_date(std::chrono::system_clock::time_point t) {
  const std::time_t tt = std::chrono::system_clock::to_time_t(t);
  std::tm tm{};
  gmtime_r(&tt, &tm);
  char buf[64];
  const auto n = std::strftime(buf, sizeof buf, "%a, %d %b %Y %H:%M:%S GMT", &tm);
  return std::string(buf, n);
}


std::optional<std::chrono::system_clock::time_point> parse_http_date(std::string_view text) {
  using std::chrono::system_clock;
  // libstdc++'s clock counts nanoseconds in 64 bits: years 1678 to 2262.
  constexpr auto kMax = std::chrono::duration_cast<std::chrono::seconds>(system_clock::duration::max()).count();
  constexpr auto kMin = std::chrono::duration_cast<std::chrono::seconds>(system_clock::duration::min()).count();
  const std::string s(trim(text));
  // IMF-fixdate, RFC 850 (two-digit year), asctime; all in GMT.
  for (const char* format : {"%a, %d %b %Y %H:%M:%S GMT", "%A, %d-%b-%y %H:%M:%S GMT", "%a %b %e %H:%M:%S %Y"}) {
    std::tm tm{};
    const char* end = ::strptime(s.c_str(), format, &tm);
    if (!end || *end != '\0') continue;
    // A date the clock cannot hold is no date here: an If-Modified-Since
    // with it is ignored (RFC 9110 13.1.3), and an If-Range with it never
    // matches, so the whole representation is sent.
    const std::time_t t = ::timegm(&tm);
    if (t < kMin || t > kMax) return std::nullopt;
    return system_clock::from_time_t(t);
  }
  return std::nullopt;
}

}  // namespace zarrcoro::server
