// Chunk planning (see indexing.hpp).
#include "engine/indexing.hpp"

#include "core/checked.hpp"

namespace zarrcoro::detail {
namespace {

struct Segment {
  std::uint64_t chunk, chunk_start, out_start, length;
  bool whole;
};

}  // namespace

ChunkParts plan_chunks(const std::vector<std::uint64_t>& shape,
                                   const std::vector<std::uint64_t>& chunk_shape, const Region& region) {
  const std::size_t r = shape.size();
  std::vector<std::vector<Segment>> segs(r);
  for (std::size_t d = 0; d < r; ++d) {
    const std::uint64_t c = chunk_shape[d], lo = region.start[d], hi = region.stop[d];
    if (lo >= hi) return {};
    // Chunks lo / c to (hi - 1) / c; a chunk's end saturates (chunk
    // shapes near 2^64 must not wrap: shared/cases B34).
    for (std::uint64_t k = lo / c, last = (hi - 1) / c; k <= last; ++k) {
      const std::uint64_t cs = k * c, ce = saturating_add(cs, c);
      const std::uint64_t a = std::max(lo, cs), b = std::min(hi, ce);
      const std::uint64_t in_bounds = std::min(shape[d], ce) - cs;
      segs[d].push_back({k, a - cs, a - lo, b - a, b - a == in_bounds});
    }
  }
  std::size_t total = 1;  // at most the region's element count, which the caller checked
  for (auto& s : segs) total *= s.size();
  ChunkParts parts;
  parts.reserve(total);
  Dims idx(r, 0);
  for (std::size_t n = 0; n < total; ++n) {
    ChunkPart& p = parts.emplace_back();
    p.coords.resize(r);
    p.chunk_start.resize(r);
    p.out_start.resize(r);
    p.shape.resize(r);
    p.whole_chunk = true;
    for (std::size_t d = 0; d < r; ++d) {
      const Segment& s = segs[d][idx[d]];
      p.coords[d] = s.chunk;
      p.chunk_start[d] = s.chunk_start;
      p.out_start[d] = s.out_start;
      p.shape[d] = s.length;
      p.whole_chunk = p.whole_chunk && s.whole;
    }
    for (std::size_t d = r; d-- > 0;) {
      if (++idx[d] < segs[d].size()) break;
      idx[d] = 0;
    }
  }
  return parts;
}

}  // namespace zarrcoro::detail
