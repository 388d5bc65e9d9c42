// Regions (boxes of an array, and their text form "start:stop,...") and
// NdArray, the owned result of a read.
#include <zarrcoro/array.hpp>

#include <charconv>
#include <string>
#include <string_view>
#include <vector>

#include <zarrcoro/error.hpp>

#include "core/checked.hpp"

namespace zarrcoro {

Region Region::all(const std::vector<std::uint64_t>& shape) {
  return {std::vector<std::uint64_t>(shape.size(), 0), shape};
}

std::vector<std::uint64_t> Region::shape() const {
  std::vector<std::uint64_t> s(start.size());
  for (std::size_t i = 0; i < s.size(); ++i) s[i] = stop[i] - start[i];
  return s;
}

std::uint64_t Region::num_elements() const {
  const auto n = checked_product(shape());
  if (!n) throw InvalidArgument("", "region", "holds more elements than fit in 64 bits");
  return *n;
}

namespace {
// `s` without the blanks around it (" 1:3 " is "1:3").
std::string_view trimmed(std::string_view s) {
  const auto first = s.find_first_not_of(" \t");
  if (first == std::string_view::npos) return {};
  return s.substr(first, s.find_last_not_of(" \t") - first + 1);
}
}  // namespace

Region Region::parse(const std::string& text, const std::vector<std::uint64_t>& shape) {
  Region r = all(shape);
  if (text.empty()) return r;
  std::vector<std::string> dims;
  std::size_t pos = 0;
  while (true) {
    const auto comma = text.find(',', pos);
    dims.push_back(text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos));
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  if (dims.size() != shape.size())
    throw InvalidArgument("", "region",
                          "'" + text + "' has " + std::to_string(dims.size()) +
                              " dimensions, the array has " + std::to_string(shape.size()));
  auto num = [&](std::string_view s, std::uint64_t dflt) {
    s = trimmed(s);
    if (s.empty()) return dflt;
    std::uint64_t v = 0;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec == std::errc::result_out_of_range)
      throw InvalidArgument("", "region", "'" + std::string(s) + "' does not fit in 64 bits");
    if (ec != std::errc() || p != s.data() + s.size())
      throw InvalidArgument("", "region", "'" + std::string(s) + "' is not a non-negative integer");
    return v;
  };
  for (std::size_t d = 0; d < dims.size(); ++d) {
    const std::string_view s = trimmed(dims[d]);
    const auto colon = s.find(':');
    if (s.empty()) continue;  // the whole dimension (shared/cases B43)
    if (colon == std::string_view::npos) {
      r.start[d] = num(s, 0);
      if (r.start[d] >= shape[d])
        throw InvalidArgument("", "region",
                              "index " + std::string(s) + " is outside [0, " + std::to_string(shape[d]) +
                                  ") in dimension " + std::to_string(d));
      r.stop[d] = r.start[d] + 1;
    } else {
      if (s.find(':', colon + 1) != std::string_view::npos)
        throw InvalidArgument("", "region", "'" + std::string(s) + "' has a step; only start:stop is supported");
      r.start[d] = num(s.substr(0, colon), 0);
      r.stop[d] = num(s.substr(colon + 1), shape[d]);
    }
    if (r.start[d] > r.stop[d])
      throw InvalidArgument("", "region",
                            "'" + std::string(s) + "' stops before it starts in dimension " + std::to_string(d));
    if (r.stop[d] > shape[d])
      throw InvalidArgument("", "region",
                            "'" + std::string(s) + "' is outside [0, " + std::to_string(shape[d]) +
                                ") in dimension " + std::to_string(d));
  }
  return r;
}

std::uint64_t NdArray::num_elements() const {
  const auto n = checked_product(shape);
  if (!n) throw InvalidArgument("", "shape", "holds more elements than fit in 64 bits");
  return *n;
}

}  // namespace zarrcoro
