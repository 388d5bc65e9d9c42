// Placing chunks into a read's output (placement.hpp).
#include "engine/placement.hpp"

namespace zarrcoro::detail {

void Placement::decode_to_out(const codecs::CodecPipeline& pipeline, ByteSpan encoded, const ChunkPart& part,
                              const Dims& out_start) const {
  const auto& spec = pipeline.chunk_spec();
  const std::size_t es = spec.dtype.size();
  const std::uint64_t n = spec.num_bytes();
  if (const MutableByteSpan target = contiguous_target(spec, part, out_start); !target.empty()) {
    pipeline.decode(encoded, target);
    return;
  }
  ByteSpan decoded = encoded;
  if (!pipeline.is_trivial() || encoded.size() != n) {
    thread_local Bytes scratch;
    scratch.resize(n);
    pipeline.decode(encoded, scratch);
    decoded = scratch;
  }
  copy_box(decoded.data(), spec.shape, part.chunk_start, out_.data(), region_shape_, out_start, part.shape, es);
}

void Placement::fill(const Dims& out_start, const Dims& shape, const std::byte* fill, std::size_t es) const {
  fill_box(out_.data(), region_shape_, out_start, shape, fill, es);
}

}  // namespace zarrcoro::detail
