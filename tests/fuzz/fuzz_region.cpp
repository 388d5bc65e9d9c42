// Region::parse: the input's first line is the array shape (decimal numbers
// separated by ','; an empty line is a 0-d array), the rest the region text
// ("0:10,5:20"). A region that parses must lie inside the shape, with
// start <= stop in every dimension; num_elements() either fits or raises.
#include <charconv>
#include <vector>

#include <zarrcoro/array.hpp>

#include "fuzz_common.hpp"

using namespace zarrcoro;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  // (No structured bindings here: clang 14 cannot capture them in lambdas.)
  const auto parts = fuzz::split(fuzz::text(data, size), "\n");
  const std::string_view line = parts.first, text = parts.second;
  std::vector<std::uint64_t> shape;
  std::string_view s = line;
  while (!s.empty() && shape.size() < 64) {
    std::uint64_t v = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc{}) return 0;  // not a shape: uninteresting
    shape.push_back(v);
    s.remove_prefix(static_cast<std::size_t>(end - s.data()));
    if (!s.empty()) {
      if (s.front() != ',') return 0;
      s.remove_prefix(1);
    }
  }
  fuzz::typed([&] {
    const Region r = Region::parse(std::string(text), shape);
    fuzz::check(r.start.size() == shape.size() && r.stop.size() == shape.size(), "region of the wrong rank");
    for (std::size_t d = 0; d < shape.size(); ++d)
      fuzz::check(r.start[d] <= r.stop[d] && r.stop[d] <= shape[d], "region outside the shape");
    const auto ext = r.shape();
    fuzz::check(ext.size() == shape.size(), "region shape of the wrong rank");
    (void)r.num_elements();
  });
  fuzz::typed([&] { (void)Region::all(shape).num_elements(); });
  return 0;
}
