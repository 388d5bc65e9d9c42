// See cli/blocks.hpp.
#include "cli/blocks.hpp"

#include <algorithm>

namespace zarrcoro::cli {

Blocks::Blocks(const Region& bounds, const std::vector<std::uint64_t>& chunk_shape, std::uint64_t item_size,
               std::uint64_t max_bytes)
    : bounds_(bounds) {
  const std::size_t rank = chunk_shape.size();
  const auto extent = bounds.shape();
  block_.resize(rank);
  std::uint64_t bytes = item_size;  // of one block so far (an upper bound; saturating past max_bytes)
  for (std::size_t d = 0; d < rank; ++d) {
    block_[d] = std::max<std::uint64_t>(1, chunk_shape[d]);
    bytes = bytes > max_bytes ? bytes : bytes * std::max<std::uint64_t>(1, std::min(block_[d], extent[d]));
  }
  for (std::size_t d = rank; d-- > 0;) {  // grow by whole chunks, the last dimension first
    if (extent[d] == 0) continue;
    const std::uint64_t units = (bounds.stop[d] - 1) / block_[d] - bounds.start[d] / block_[d] + 1;  // chunks spanned
    if (units == 1) continue;
    const std::uint64_t per_chunk = std::max<std::uint64_t>(1, bytes / std::min(block_[d], extent[d]) * block_[d]);
    const std::uint64_t k = std::clamp<std::uint64_t>(max_bytes / per_chunk, 1, units);
    bytes = per_chunk * k;
    block_[d] *= k;
    if (k < units) break;
  }
  first_.resize(rank);
  per_dim_.resize(rank);
  for (std::size_t d = 0; d < rank; ++d) {
    first_[d] = bounds.start[d] / block_[d];
    per_dim_[d] = extent[d] == 0 ? 0 : (bounds.stop[d] + block_[d] - 1) / block_[d] - first_[d];
    count_ *= per_dim_[d];
  }
}

std::vector<std::uint64_t> Blocks::block_shape() const {
  std::vector<std::uint64_t> b = block_;
  const auto extent = bounds_.shape();
  for (std::size_t d = 0; d < b.size(); ++d) b[d] = std::min(b[d], extent[d]);
  return b;
}

Region Blocks::region(std::uint64_t i) const {
  Region r = bounds_;
  for (std::size_t d = block_.size(); d-- > 0;) {
    const std::uint64_t at = first_[d] + i % per_dim_[d];
    i /= per_dim_[d];
    r.start[d] = std::max(bounds_.start[d], at * block_[d]);
    r.stop[d] = std::min(bounds_.stop[d], (at + 1) * block_[d]);
  }
  return r;
}

}  // namespace zarrcoro::cli
