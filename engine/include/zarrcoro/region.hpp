// A box selection of an n-dimensional array: Region.
//
// Thread-safety: a plain value; const methods (and the static ones) are
// safe to call concurrently.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace zarrcoro {

// A box selection: per dimension the half-open element range [start, stop).
struct Region {
  std::vector<std::uint64_t> start, stop;
  bool operator==(const Region&) const = default;

  static Region all(const std::vector<std::uint64_t>& shape);
  std::vector<std::uint64_t> shape() const;
  // The product of the extents. Raises InvalidArgument(field "region") when
  // it does not fit in 64 bits (a huge array's whole region may not).
  std::uint64_t num_elements() const;
  // Parses "0:10,5:20" against `shape`: one field per dimension; an empty
  // field, ":" or "a:" / ":b" with the bound left out means the whole
  // dimension (or up to / from it), a single index "3" means 3:4; blanks
  // around fields and bounds are ignored (" 1 : 3 , 2"). Raises
  // InvalidArgument(field "region") for a wrong number of fields, a bound
  // that is not a non-negative 64-bit integer, start > stop, or a range
  // outside the shape. The whole array: "" or "," repeated rank - 1 times.
  static Region parse(const std::string& text, const std::vector<std::uint64_t>& shape);
};

}  // namespace zarrcoro
