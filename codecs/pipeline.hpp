// The codec pipeline (Zarr v3 core spec, "Codecs"): zero or more
// array-to-array codecs, exactly one array-to-bytes codec, zero or more
// bytes-to-bytes codecs, parsed from the `codecs` JSON list and resolved
// against the chunk's decoded representation into an immutable prepared state.
//
// Thread-safety: a CodecPipeline is immutable after construction; encode and
// decode may run concurrently on any threads. Scratch buffers and compression
// contexts are per thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "codecs/codec.hpp"

namespace zarrcoro::codecs {

class CodecPipeline {
 public:
  // Parses a v3 `codecs` list for chunks described by `chunk_spec` (the full
  // chunk shape of a regular grid and the array's data type).
  // Raises InvalidMetadata for a malformed list (no array-to-bytes codec, two
  // of them, wrong order, bad configuration; the field is "codecs[i]..."), and
  // UnsupportedError naming an unknown codec (unless it says
  // "must_understand": false, in which case it is skipped with a warning).
  static std::shared_ptr<const CodecPipeline> from_json(const nlohmann::json& codecs,
                                                        const ArraySpec& chunk_spec);

  CodecPipeline(std::vector<std::unique_ptr<ArrayToArrayCodec>> a2a,
                std::unique_ptr<ArrayToBytesCodec> a2b,
                std::vector<std::unique_ptr<BytesToBytesCodec>> b2b, ArraySpec chunk_spec);
  ~CodecPipeline();

  // The `codecs` list as JSON, in the v3 form (with "name"/"configuration").
  nlohmann::json to_json() const;
  const ArraySpec& chunk_spec() const { return chunk_spec_; }

  // True if decoding is a plain copy: no array-to-array codec, an identity
  // array-to-bytes codec and no bytes-to-bytes codec. The engine runs such
  // chunks without a hop to the codec pool.
  bool is_trivial() const { return trivial_; }
  // The array-to-bytes codec, and whether it is the whole chain (no codec
  // before or after it): then its own partial-access members (sharding) apply
  // to the stored bytes directly.
  const ArrayToBytesCodec& array_to_bytes() const { return *a2b_; }
  bool array_to_bytes_only() const { return a2a_.empty() && b2b_.empty(); }
  // Short human description, e.g. "transpose,bytes(little),zstd(3)".
  std::string describe() const;
  // Size of every encoded chunk if it is fixed (bytes, crc32c: e.g. a shard
  // index of N entries with [bytes, crc32c] is 16 N + 4), else -1.
  std::int64_t encoded_size() const;

  // Decodes one encoded chunk into `out`, which is exactly
  // chunk_spec().num_bytes() long (C order, native byte order).
  // Raises CorruptChunk (field = the failing codec's name).
  void decode(ByteSpan encoded, MutableByteSpan out) const;

  // Encodes one chunk held in `decoded` (chunk_spec().num_bytes() long, C
  // order, native byte order) into `out` (replaced).
  void encode(ByteSpan decoded, Bytes& out) const;

 private:
  std::vector<std::unique_ptr<ArrayToArrayCodec>> a2a_;
  std::unique_ptr<ArrayToBytesCodec> a2b_;
  std::vector<std::unique_ptr<BytesToBytesCodec>> b2b_;
  ArraySpec chunk_spec_;
  std::vector<ArraySpec> a2a_specs_;  // decoded spec seen by each a2a codec; back() feeds a2b
  ArraySpec a2b_spec_;
  bool trivial_ = false;
};

}  // namespace zarrcoro::codecs
