// Overflow-checked size arithmetic. Every count, byte size and offset that is
// derived from metadata, a stored chunk or a request (products of shapes,
// chunk counts, offset + length, shard index entries, region bounds) goes
// through these helpers, so that a value which does not fit in 64 bits is
// caught before anything is allocated or read (shared/cases B34).
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>

namespace zarrcoro {

// a * b, or nullopt if it does not fit in 64 bits.
inline std::optional<std::uint64_t> checked_mul(std::uint64_t a, std::uint64_t b) {
  std::uint64_t r;
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}

// a + b, or nullopt if it does not fit in 64 bits.
inline std::optional<std::uint64_t> checked_add(std::uint64_t a, std::uint64_t b) {
  std::uint64_t r;
  if (__builtin_add_overflow(a, b, &r)) return std::nullopt;
  return r;
}

// a + b, or UINT64_MAX if it does not fit (for bounds that only get compared).
inline std::uint64_t saturating_add(std::uint64_t a, std::uint64_t b) {
  std::uint64_t r;
  return __builtin_add_overflow(a, b, &r) ? UINT64_MAX : r;
}

// The product of `dims` times `factor` (1 for an element count, an element
// size for a byte count), or nullopt if it does not fit in 64 bits. A zero
// dimension makes the product 0 whatever the others.
template <class Dims>
std::optional<std::uint64_t> checked_product(const Dims& dims, std::uint64_t factor = 1) {
  std::uint64_t n = factor;
  bool overflow = false;
  for (std::uint64_t d : dims) {
    if (d == 0) return 0;
    overflow = overflow || __builtin_mul_overflow(n, d, &n);
  }
  if (overflow) return std::nullopt;
  return n;
}

}  // namespace zarrcoro
