// Codec interfaces (Zarr v3 core spec, "Codecs"): the three kinds of codec and
// the registry that parses them from JSON.
//
// Codecs are synchronous, pure and thread-safe: a parsed codec is immutable
// and its encode/decode may run concurrently on any thread. They never know
// about executors; the engine decides where they run. Per-thread state (e.g.
// a zstd context) lives in thread_local storage inside the codec's file.
//
// Errors: parsing raises InvalidMetadata (bad configuration) or
// UnsupportedError (unknown codec); decoding raises CorruptChunk. The `key`
// of errors raised here is empty: the engine rethrows with the chunk key.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include <zarrcoro/bytes.hpp>
#include <zarrcoro/dtype.hpp>

namespace zarrcoro::codecs {

// The decoded representation a codec sees: C-order elements of `dtype` in
// native byte order, `shape` in elements.
struct ArraySpec {
  DataType dtype;
  std::vector<std::uint64_t> shape;
  Bytes fill;  // one element's bytes (the array's fill_value); empty = zeros

  std::uint64_t num_elements() const;
  std::uint64_t num_bytes() const { return num_elements() * dtype.size(); }
};

// array -> array (e.g. transpose). Encoded and decoded hold the same bytes count.
class ArrayToArrayCodec {
 public:
  virtual ~ArrayToArrayCodec() = default;
  virtual std::string name() const = 0;
  virtual nlohmann::json to_json() const = 0;
  // The representation this codec produces when encoding `decoded`.
  // Raises InvalidMetadata if the codec cannot apply (e.g. order rank mismatch).
  virtual ArraySpec encoded_spec(const ArraySpec& decoded) const = 0;
  // `in` and `out` are `decoded.num_bytes()` long and do not overlap.
  virtual void encode(const ArraySpec& decoded, ByteSpan in, MutableByteSpan out) const = 0;
  virtual void decode(const ArraySpec& decoded, ByteSpan in, MutableByteSpan out) const = 0;
};

// array -> bytes (e.g. bytes with an endianness).
class ArrayToBytesCodec {
 public:
  virtual ~ArrayToBytesCodec() = default;
  virtual std::string name() const = 0;
  virtual nlohmann::json to_json() const = 0;
  // Raises InvalidMetadata if the codec cannot encode `spec` (e.g. `bytes`
  // without `endian` for a multi-byte type).
  virtual void validate(const ArraySpec& spec) const = 0;
  // True if decoding `spec` is a plain copy (native byte order): the engine
  // then treats the chain as having nothing to compute.
  virtual bool is_identity(const ArraySpec& spec) const = 0;
  // Encoded size for `spec`, if it is fixed (bytes: spec.num_bytes()), else
  // -1 (e.g. sharding). Lets the pipeline decode straight into place and
  // size shard indexes.
  virtual std::int64_t encoded_size(const ArraySpec& spec) const { return -1; }
  // `in` is `spec.num_bytes()` long; appends nothing: `out` is replaced.
  virtual void encode(const ArraySpec& spec, ByteSpan in, Bytes& out) const = 0;
  // Fills `out` (exactly `spec.num_bytes()` long) from `in`; raises
  // CorruptChunk if `in` has the wrong size or is malformed.
  virtual void decode(const ArraySpec& spec, ByteSpan in, MutableByteSpan out) const = 0;
};

// bytes -> bytes (gzip, zstd, crc32c, blosc).
class BytesToBytesCodec {
 public:
  virtual ~BytesToBytesCodec() = default;
  virtual std::string name() const = 0;
  virtual nlohmann::json to_json() const = 0;
  // Encoded size for a decoded size, if it is fixed (crc32c: +4), else -1.
  virtual std::int64_t encoded_size(std::uint64_t decoded_size) const { return -1; }
  // `out` is replaced with the encoded bytes.
  virtual void encode(ByteSpan in, Bytes& out) const = 0;
  // Decodes `in`, returning a view of the result: either into `scratch`
  // (resized as needed) or a subspan of `in` (crc32c strips its checksum
  // without copying). `max_size` bounds the decoded size: exceeding it is
  // CorruptChunk (a decoder never grows without bound).
  virtual ByteSpan decode(ByteSpan in, Bytes& scratch, std::uint64_t max_size) const = 0;
  // Decodes `in` into exactly `out.size()` bytes; a different decoded size
  // is CorruptChunk.
  virtual void decode_into(ByteSpan in, MutableByteSpan out) const = 0;
};

// Factory functions, one per codec file. Each parses the codec's
// `configuration` object (may be null when absent) and validates it. Their
// InvalidMetadata names the configuration member (e.g. "level"); the pipeline
// prefixes where the codec sits (e.g. "codecs[1].configuration.level").
std::unique_ptr<ArrayToBytesCodec> make_bytes_codec(const nlohmann::json& config);
std::unique_ptr<ArrayToArrayCodec> make_transpose_codec(const nlohmann::json& config);
std::unique_ptr<BytesToBytesCodec> make_gzip_codec(const nlohmann::json& config);
std::unique_ptr<BytesToBytesCodec> make_zstd_codec(const nlohmann::json& config);
std::unique_ptr<BytesToBytesCodec> make_crc32c_codec(const nlohmann::json& config);
// sharding_indexed needs the shard's representation to prepare its inner pipelines.
std::unique_ptr<ArrayToBytesCodec> make_sharding_codec(const nlohmann::json& config, const ArraySpec& shard);
std::unique_ptr<BytesToBytesCodec> make_blosc_codec(const nlohmann::json& config);
// numcodecs compressors that are not Zarr v3 core codecs: zlib (RFC 1950
// framing), {"level": -1..9}, and lz4 (size header + LZ4 block),
// {"acceleration": n}. Named "zlib" and "lz4" for the v2 adapter
// (codecs/v2.hpp), "numcodecs.zlib" and "numcodecs.lz4" in v3 metadata
// (zarr-python 3's names); `name` is the one the codec reports and writes.
std::unique_ptr<BytesToBytesCodec> make_zlib_codec(const nlohmann::json& config, std::string_view name = "zlib");
std::unique_ptr<BytesToBytesCodec> make_lz4_codec(const nlohmann::json& config, std::string_view name = "lz4");

// CRC-32C (Castagnoli) of `data`, as used by the crc32c codec and shard indexes.
std::uint32_t crc32c(ByteSpan data, std::uint32_t seed = 0);

}  // namespace zarrcoro::codecs
