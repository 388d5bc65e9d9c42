// The partial shard read planner (shard_plan.hpp).
#include "engine/shard_plan.hpp"

#include <algorithm>

#include <zarrcoro/error.hpp>

#include "core/checked.hpp"

namespace zarrcoro::detail {

void locate_pieces(const codecs::ShardingCodec::Index& index, std::span<InnerPiece> pieces) {
  for (InnerPiece& piece : pieces) {
    const std::size_t n = piece.number;
    const bool missing = index.missing(n);
    piece.buffer = missing ? InnerPiece::kAbsent : 0;
    piece.offset = missing ? 0 : index.offset(n);
    piece.size = missing ? 0 : index.nbytes(n);
  }
}

ShardReadPlan plan_shard_reads(const codecs::ShardingCodec::Index& index, std::span<InnerPiece> pieces,
                               ShardCoalescing c) {
  locate_pieces(index, pieces);
  ShardReadPlan plan;
  auto& order = plan.order;
  for (std::size_t k = 0; k < pieces.size(); ++k)
    if (pieces[k].buffer != InnerPiece::kAbsent) order.push_back(k);
  std::sort(order.begin(), order.end(), [&](auto a, auto b) { return pieces[a].offset < pieces[b].offset; });
  for (std::size_t k = 0; k < order.size();) {
    const std::uint64_t begin = pieces[order[k]].offset;
    std::uint64_t end = begin + pieces[order[k]].size;
    std::size_t last = k + 1;
    for (; last < order.size(); ++last) {
      const auto& next = pieces[order[last]];
      const std::uint64_t new_end = std::max(end, next.offset + next.size);
      if (next.offset > saturating_add(end, c.gap) || new_end - begin > c.max) break;
      end = new_end;
    }
    plan.ranges.push_back({begin, end, k, last});
    k = last;
  }
  return plan;
}

void check_range_size(const std::string& key, std::uint64_t got, std::uint64_t begin, std::uint64_t end) {
  if (got != end - begin)
    throw CorruptChunk(key, "sharding_indexed",
                       "the shard is shorter than its index says (bytes " + std::to_string(begin) + "-" +
                           std::to_string(end) + ")");
}

void place_range(const ShardReadPlan& plan, const ShardRange& r, std::span<InnerPiece> pieces, std::size_t buffer) {
  for (std::size_t j = r.first; j < r.last; ++j) {
    pieces[plan.order[j]].buffer = buffer;
    pieces[plan.order[j]].offset -= r.begin;
  }
}

}  // namespace zarrcoro::detail
