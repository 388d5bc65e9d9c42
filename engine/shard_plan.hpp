// The partial shard read planner: from a shard's decoded index and the inner
// chunks a read wants, the byte ranges of the shard to fetch and which of
// the wanted inner chunks each range feeds. It does no I/O and allocates
// nothing but the plan; read_op.cpp issues the reads (all conditional on the
// generation the index came from) and places what they return.
//
// Thread-safety: pure functions of their arguments.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <boost/container/small_vector.hpp>

#include "codecs/sharding.hpp"
#include "engine/indexing.hpp"

namespace zarrcoro::detail {

// An inner chunk of one shard that a partial read needs.
struct InnerPiece {
  // InnerPiece::buffer of an inner chunk absent from the index (reads as fill_value).
  static constexpr std::size_t kAbsent = std::string::npos;
  // InnerPiece::buffer of an inner chunk the store read straight into the output.
  static constexpr std::size_t kInPlace = std::string::npos - 1;

  ChunkPart part;           // within the shard; out_start relative to the shard part (the reader's)
  std::size_t number = 0;   // its number in the shard index (C order of the inner grid)
  std::size_t buffer = 0;   // index into the reader's buffers; kAbsent; kInPlace
  std::uint64_t offset = 0, size = 0;  // its bytes: in the shard once located, in its buffer once read
};

// How ranges merge (RuntimeOptions::coalesce_gap, coalesce_max).
struct ShardCoalescing {
  std::uint64_t gap = 0;  // a piece starting at most this many bytes past a range's end joins it...
  std::uint64_t max = 0;  // ...while the range stays within this many bytes (a larger piece: a range alone)
};

// One read of a shard: bytes [begin, end), holding the pieces order[first, last).
struct ShardRange {
  std::uint64_t begin = 0, end = 0;
  std::size_t first = 0, last = 0;  // into ShardReadPlan::order
};

struct ShardReadPlan {
  std::vector<std::size_t> order;  // the pieces present in the index (indices into `pieces`), by offset
  boost::container::small_vector<ShardRange, 4> ranges;  // by offset; none when no piece is present
};

// Locates each of `pieces` (by its number, below the index's inner chunk
// count) in `index`: its offset and size in the shard, buffer 0; an inner
// chunk the index marks absent (offset and nbytes 2^64 - 1): buffer
// kAbsent, offset and size 0.
void locate_pieces(const codecs::ShardingCodec::Index& index, std::span<InnerPiece> pieces);

// locate_pieces, then the reads: the present pieces sorted by offset and
// taken in that order into ranges; a range takes the next piece while that
// starts at most `c.gap` bytes past the range's end and the range, grown to
// cover it, stays within `c.max` bytes. A range covers the gaps it spans.
ShardReadPlan plan_shard_reads(const codecs::ShardingCodec::Index& index, std::span<InnerPiece> pieces,
                               ShardCoalescing c);

// Raises CorruptChunk (key, "sharding_indexed") unless `got` bytes came back
// for the read of bytes [begin, end) of shard `key`: the shard is shorter
// than its index says.
void check_range_size(const std::string& key, std::uint64_t got, std::uint64_t begin, std::uint64_t end);

// The pieces range `r` of `plan` holds now sit in `buffer` (the reader's
// buffer index, or InnerPiece::kInPlace), their offsets made relative to
// the range's start.
void place_range(const ShardReadPlan& plan, const ShardRange& r, std::span<InnerPiece> pieces, std::size_t buffer);

}  // namespace zarrcoro::detail
