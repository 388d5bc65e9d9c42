// The example server's request parsing (examples/server/http_util.hpp; pure
// functions, no sockets): the input's first line is a value size, the second
// a Range header (also tried as an HTTP-date), the rest a request target.
// Properties: resolved partial ranges are 1..kMaxRanges, each inside the
// value, adding up to at most the value; a parsed date formats back to an
// HTTP-date; a parsed target's path decodes cleanly and its query splits
// into parameters or is refused.
#include <charconv>

#include "fuzz_common.hpp"
#include "http_util.hpp"

using namespace zarrcoro;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  // (No structured bindings here: clang 14 cannot capture them in lambdas.)
  const auto line1 = fuzz::split(fuzz::text(data, size), "\n");
  const auto line2 = fuzz::split(line1.second, "\n");
  const std::string_view size_line = line1.first, range = line2.first, target = line2.second;
  std::uint64_t value_size = 0;
  {
    const auto [end, ec] = std::from_chars(size_line.data(), size_line.data() + size_line.size(), value_size);
    if (ec != std::errc{} || end != size_line.data() + size_line.size()) return 0;
  }

  fuzz::typed([&] {
    const auto r = server::resolve_ranges(range, value_size);
    if (r.kind != server::RangeSet::Kind::partial) {
      fuzz::check(r.ranges.empty(), "ranges without a partial result");
      return;
    }
    fuzz::check(!r.ranges.empty() && r.ranges.size() <= server::kMaxRanges, "a partial result with 0 or too many ranges");
    std::uint64_t total = 0;
    for (const auto& x : r.ranges) {
      fuzz::check(x.first <= x.last && x.last < value_size, "a partial range outside the value");
      total += x.length();
    }
    fuzz::check(total <= value_size, "partial ranges adding up to more than the value");
  });
  fuzz::typed([&] {
    if (const auto t = server::parse_http_date(range))
      fuzz::check(server::http_date(*t).ends_with(" GMT"), "a parsed date that does not format as an HTTP-date");
  });
  fuzz::typed([&] {
    if (const auto t = server::parse_target(target)) {
      if (const auto params = server::parse_query(t->query))
        for (const auto& [k, v] : *params) (void)(k.size() + v.size());
    }
    (void)server::percent_decode(target);
    (void)server::parse_query(target);
  });
  return 0;
}
