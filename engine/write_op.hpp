// The write operation: one ChunkOp (chunk_op.hpp) storing a region's
// elements into the chunks it touches. Whole chunks are encoded and stored;
// a partial chunk is an optimistic read-modify-write, stored on condition
// of the generation it was read at and retried on conflict (within
// RuntimeOptions::write_conflict_timeout); in-process writers of one key
// take turns on the runtime's key lock. A shard is rewritten keeping the
// encoded inner chunks the write misses, and its new index cached.
//
// Thread-safety: as ChunkOp; `in` must stay valid and unchanged until the
// op completes.
#pragma once

#include <memory>

#include <zarrcoro/array.hpp>
#include <zarrcoro/bytes.hpp>

#include "engine/chunk_op.hpp"

namespace zarrcoro::detail {

// The op writing `in` (the elements of `region`, C order; variable-length
// types: VlenViews) into `parts`, the chunks `region` touches (plan_chunks).
std::shared_ptr<ChunkOp> make_write_op(std::shared_ptr<const Array::State> st, ChunkParts parts,
                                       const Region& region, ByteSpan in);

}  // namespace zarrcoro::detail
