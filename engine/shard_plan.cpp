// The partial shard read planner (shard_plan.hpp).
#include "engine/shard_plan.hpp"

#include <algorithm>

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

}  // namespace zarrcoro::detail
