// The read operation: one ChunkOp (chunk_op.hpp) filling a caller's buffer
// with a region's elements. Whole chunks are fetched (many at once where the
// store can answer at once, straight into the buffer where it can read in
// place) and decoded on the pool into their place (placement.hpp); a part
// of a shard fetches the shard's index (cached) and then only the inner
// chunks it needs, by ranges the shard planner (shard_plan.hpp) coalesces,
// all of one generation of the shard. Absent chunks read as fill_value.
//
// Thread-safety: as ChunkOp; `out` (and `strings`) must stay valid, and not
// be touched by the caller, until the op completes.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <zarrcoro/array.hpp>
#include <zarrcoro/bytes.hpp>

#include "engine/chunk_op.hpp"

namespace zarrcoro::detail {

// The op reading `parts` (the chunks `region` touches, plan_chunks) into
// `out` (the region's elements, C order). Variable-length types: `out`
// receives VlenViews, and `strings` (read_strings' result, sized to the
// region) the strings they view, once every chunk is in.
std::shared_ptr<ChunkOp> make_read_op(std::shared_ptr<const Array::State> st, ChunkParts parts,
                                      const Region& region, MutableByteSpan out,
                                      std::vector<std::string>* strings = nullptr);

}  // namespace zarrcoro::detail
