// Chunk indexing for a regular chunk grid (Zarr v3 core spec, "Chunk grids"):
// which chunks a region touches, which part of each, and where it lands; and
// the n-d box copies (codecs/box.hpp) move those parts.
#pragma once

#include <cstdint>
#include <vector>

#include <boost/container/small_vector.hpp>

#include <zarrcoro/array.hpp>

#include "codecs/box.hpp"

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

// An operation's parts, one per chunk: large blocks come from the block cache.
using ChunkParts = std::vector<ChunkPart, CachedAllocator<ChunkPart>>;

// All chunks `region` touches, in C order of their grid coordinates.
// `region` must lie within `shape` and have no empty dimension.
ChunkParts plan_chunks(const std::vector<std::uint64_t>& shape,
                                   const std::vector<std::uint64_t>& chunk_shape, const Region& region);

using codecs::all_equal;
using codecs::copy_box;
using codecs::fill_box;
using codecs::fill_elements;

}  // namespace zarrcoro::detail
