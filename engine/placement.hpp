// Placing chunks into a read's output: the region's elements in C order,
// where each chunk's part (ChunkPart, or an inner chunk's part within its
// shard's) lands at its out_start. A decoded chunk goes straight into the
// output where it is whole and one contiguous run of it, else through a
// box copy; an absent one is filled with fill_value.
//
// Thread-safety: immutable after construction; every member may run
// concurrently (on pool threads) for disjoint parts of the output.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include <zarrcoro/bytes.hpp>

#include "codecs/codec.hpp"
#include "codecs/pipeline.hpp"
#include "engine/indexing.hpp"

namespace zarrcoro::detail {

class Placement {
 public:
  // `out`: the region's elements (region_shape, C order).
  Placement(std::vector<std::uint64_t> region_shape, MutableByteSpan out)
      : region_shape_(std::move(region_shape)), out_(out) {}

  MutableByteSpan bytes() const { return out_; }

  // True if a whole chunk of shape `chunk` is one contiguous run of out_:
  // every dimension after its first non-singleton one spans the region.
  bool lands_contiguously(const std::vector<std::uint64_t>& chunk) const {
    std::size_t d = 0;
    while (d < chunk.size() && chunk[d] == 1) ++d;
    for (++d; d < chunk.size(); ++d)
      if (chunk[d] != region_shape_[d]) return false;
    return true;
  }

  // A chunk's place in out_ (`part` of a chunk of `spec`, at `out_start`),
  // when the part is the whole chunk and lands contiguously there; empty
  // otherwise.
  MutableByteSpan contiguous_target(const codecs::ArraySpec& spec, const ChunkPart& part,
                                    const Dims& out_start) const {
    if (!std::equal(spec.shape.begin(), spec.shape.end(), part.shape.begin(), part.shape.end()) ||
        !lands_contiguously(spec.shape))
      return {};
    std::uint64_t off = 0, stride = spec.dtype.size();
    for (std::size_t d = region_shape_.size(); d-- > 0;) {
      off += out_start[d] * stride;
      stride *= region_shape_[d];
    }
    return out_.subspan(off, spec.num_bytes());
  }

  // Decodes one chunk of `pipeline` into `part` of out_, placed at
  // `out_start`: straight into out_ when the part is the whole chunk and
  // lands contiguously there; a trivial pipeline's bytes (a plain copy) are
  // copied from `encoded` directly; otherwise through a per-thread scratch
  // chunk. Raises what the pipeline raises.
  void decode_to_out(const codecs::CodecPipeline& pipeline, ByteSpan encoded, const ChunkPart& part,
                     const Dims& out_start) const;

  // Sets the box `shape` of out_ at `out_start` to the element `fill` (es bytes).
  void fill(const Dims& out_start, const Dims& shape, const std::byte* fill, std::size_t es) const;

 private:
  std::vector<std::uint64_t> region_shape_;
  MutableByteSpan out_;
};

}  // namespace zarrcoro::detail
