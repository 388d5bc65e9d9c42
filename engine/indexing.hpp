// Chunk indexing for a regular chunk grid (Zarr v3 core spec, "Chunk grids"):
// which chunks a region touches, which part of each, and where it lands; and
// the n-d box copies that move those parts.
#pragma once

#include <cstdint>
#include <vector>

#include <boost/container/small_vector.hpp>

#include <zarrcoro/array.hpp>

namespace zarrcoro::detail {

using Dims = boost::container::small_vector<std::uint64_t, 6>;

// The part of one chunk a region touches.
struct ChunkPart {
  Dims coords;       // chunk grid coordinates
  Dims chunk_start;  // first element of the part, within the chunk
  Dims out_start;    // first element of the part, within the region
  Dims shape;        // extent of the part
  bool whole_chunk;  // covers every in-bounds element of the chunk
};

// All chunks `region` touches, in C order of their grid coordinates.
// `region` must lie within `shape` and have no empty dimension.
std::vector<ChunkPart> plan_chunks(const std::vector<std::uint64_t>& shape,
                                   const std::vector<std::uint64_t>& chunk_shape, const Region& region);

// Copies the box `box` (C order) from an array `src` of shape `src_shape`
// starting at `src_start` to `dst` of shape `dst_shape` at `dst_start`.
void copy_box(const std::byte* src, std::span<const std::uint64_t> src_shape,
              std::span<const std::uint64_t> src_start, std::byte* dst,
              std::span<const std::uint64_t> dst_shape, std::span<const std::uint64_t> dst_start,
              std::span<const std::uint64_t> box, std::size_t elem_size);

// Sets every element of the box to `value` (elem_size bytes).
void fill_box(std::byte* dst, std::span<const std::uint64_t> dst_shape,
              std::span<const std::uint64_t> dst_start, std::span<const std::uint64_t> box,
              const std::byte* value, std::size_t elem_size);

// Fills `n` elements with `value`.
void fill_elements(std::byte* dst, std::uint64_t n, const std::byte* value, std::size_t elem_size);

// True if every element of `data` equals `value` bitwise.
bool all_equal(ByteSpan data, const std::byte* value, std::size_t elem_size);

}  // namespace zarrcoro::detail
