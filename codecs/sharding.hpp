// The sharding_indexed array -> bytes codec (Zarr v3 sharding_indexed codec
// spec): a shard holds inner chunks, each encoded with the inner `codecs`,
// plus an index of (offset, nbytes) uint64 pairs, one per inner chunk in C
// order, encoded with `index_codecs` and placed at the `start` or `end` of
// the shard. Offsets are absolute in the shard; an inner chunk that is absent
// (all fill_value) has offset = nbytes = 2^64 - 1.
//
// Besides whole-shard encode/decode, the engine uses the partial-access
// members to read an index and single inner chunks by byte ranges, and to
// rewrite a shard keeping the encoded bytes of inner chunks a write does not
// touch. Thread-safety: immutable after construction; all members are safe
// to call concurrently.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "codecs/codec.hpp"
#include "codecs/pipeline.hpp"

namespace zarrcoro::codecs {

class ShardingCodec final : public ArrayToBytesCodec {
 public:
  static constexpr std::uint64_t kMissing = ~std::uint64_t{0};

  // The decoded index: per inner chunk (C order) its offset and size in bytes.
  struct Index {
    std::vector<std::uint64_t> entries;  // offset, nbytes, offset, nbytes, ...
    std::uint64_t offset(std::size_t i) const { return entries[2 * i]; }
    std::uint64_t nbytes(std::size_t i) const { return entries[2 * i + 1]; }
    bool missing(std::size_t i) const { return offset(i) == kMissing && nbytes(i) == kMissing; }
  };

  // `shard` is the decoded representation of one shard (the array's chunk).
  // Raises InvalidMetadata (field "chunk_shape", "index_codecs", ...) or
  // UnsupportedError for an unknown inner codec.
  ShardingCodec(const nlohmann::json& config, const ArraySpec& shard);

  std::string name() const override { return "sharding_indexed"; }
  nlohmann::json to_json() const override;
  void validate(const ArraySpec& spec) const override;
  bool is_identity(const ArraySpec&) const override { return false; }
  void encode(const ArraySpec& spec, ByteSpan in, Bytes& out) const override;
  void decode(const ArraySpec& spec, ByteSpan in, MutableByteSpan out) const override;

  // ---- partial access ----
  const std::vector<std::uint64_t>& chunk_shape() const { return chunk_shape_; }       // inner chunk
  const std::vector<std::uint64_t>& chunks_per_shard() const { return per_shard_; }
  const CodecPipeline& inner() const { return *inner_; }
  std::uint64_t index_bytes() const { return index_bytes_; }  // encoded index size
  bool index_at_start() const { return index_at_start_; }
  bool index_trivial() const { return index_->is_trivial(); }  // no checksum to verify
  std::size_t num_inner() const { return num_inner_; }
  // What gives a decoded index its meaning (inner chunks per shard, index
  // codecs and location), as text: two codecs whose layouts are equal read
  // the same index from the same shard bytes.
  const std::string& index_layout() const { return index_layout_; }
  // Linear (C order) number of the inner chunk at `coords`, and back.
  std::size_t inner_number(std::span<const std::uint64_t> coords) const;
  void inner_coords(std::size_t number, std::span<std::uint64_t> coords) const;

  // Decodes the encoded index (index_bytes() long). `shard_size` (if known)
  // bounds the entries. Raises CorruptChunk (checksum, entries out of range).
  Index decode_index(ByteSpan encoded, std::optional<std::uint64_t> shard_size = {}) const;
  // The index of the whole stored shard `shard`. Raises CorruptChunk as
  // decode_index, and for a shard shorter than its index.
  Index shard_index(ByteSpan shard) const;

  // How update() lays out a shard: the order its inner chunks are stored
  // in, and whether those all fill_value are stored. Any layout reads the
  // same through the index, so none is part of the metadata (zarr-python
  // sets them per write: subchunk_write_order, write_empty_chunks).
  enum class InnerOrder { lexicographic, colexicographic, morton };
  struct Layout {
    std::vector<std::size_t> order;  // inner chunk numbers (C order) as stored; empty: C order
    bool keep_empty = false;
    // An inner chunk is all fill_value as zarr-python compares
    // (all_equal_as_zarr_python: any NaN matches a NaN fill); else bitwise.
    bool fill_as_zarr_python = false;
  };
  // `order` over this codec's inner chunks. morton: zarr-python's order,
  // ascending compressed Morton code (per bit round, dimension 0 lowest).
  Layout layout(InnerOrder order, bool keep_empty) const;

  // Encodes a shard equal to `existing` (nullopt: all fill) with the box
  // `box` at `shard_start` overwritten from `src` (C order, shape
  // `src_shape`, box starting at `src_start`). Inner chunks the box does not
  // touch keep their encoded bytes; touched ones that end up all fill_value
  // are dropped (unless layout->keep_empty). Inner chunks are stored in
  // layout->order (default: C order). `only`, when not empty, holds one
  // flag per inner chunk (C order): those flagged 0 count as untouched.
  // Returns false (and leaves `out` empty) if no inner chunk remains, i.e.
  // the shard should not be stored.
  bool update(const ArraySpec& spec, std::optional<ByteSpan> existing, const std::byte* src,
              std::span<const std::uint64_t> src_shape, std::span<const std::uint64_t> src_start,
              std::span<const std::uint64_t> shard_start, std::span<const std::uint64_t> box, Bytes& out,
              const Layout* layout = nullptr, std::span<const std::uint8_t> only = {}) const;
  // A shard of only missing inner chunks (its index alone): what reads as
  // all fill_value where a shard cannot be erased.
  void encode_empty(Bytes& out) const;

 private:
  std::vector<std::uint64_t> chunk_shape_, per_shard_;
  std::size_t num_inner_ = 1;
  std::shared_ptr<const CodecPipeline> inner_, index_;
  std::uint64_t index_bytes_ = 0;
  bool index_at_start_ = false;
  nlohmann::json inner_json_, index_json_;
  std::string index_layout_;
};

}  // namespace zarrcoro::codecs
