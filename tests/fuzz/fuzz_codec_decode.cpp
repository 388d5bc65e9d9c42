// Each codec's decode through the codec pipeline. The first byte picks a
// fixed chain and chunk spec (low 7 bits, modulo the table) and a mode (top
// bit); the rest is
//  - mode 0: a stored chunk, decoded into the chunk spec (CodecPipeline::
//    decode). A chunk that decodes must re-encode and decode to the same
//    bytes;
//  - mode 1: decoded chunk bytes (repeated to the chunk's size), encoded and
//    decoded again: the round trip must be exact.
// The v2-only compressors (zlib, lz4) and the v2 forms of blosc and zstd go
// through the v2 adapter (codecs/v2.hpp), as a .zarray's compressor does.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <zarrcoro/dtype.hpp>

#include "codecs/pipeline.hpp"
#include "codecs/v2.hpp"
#include "fuzz_common.hpp"

using namespace zarrcoro;
using nlohmann::json;

namespace {

struct Chain {
  const char* name;
  std::vector<json> codecs;
  DataType dtype;
  std::vector<std::uint64_t> shape;
};

json bytes_codec(const char* endian) { return {{"name", "bytes"}, {"configuration", {{"endian", endian}}}}; }
json v2(const json& v2codec, const DataType& dt) { return codecs::v2_to_v3_codec(v2codec, dt.size()); }

std::vector<std::shared_ptr<const codecs::CodecPipeline>> make_pipelines() {
  const DataType rec = DataType::structured({
      StructField{"a", DataTypeKind::int16, {}, ByteOrder::big, 0},
      StructField{"u", DataType::fixed_unicode(2), {}, ByteOrder::unspecified, 0},
      StructField{"c", DataTypeKind::complex64, {2}, ByteOrder::unspecified, 0},
  });
  const std::vector<Chain> chains = {
      {"bytes", {bytes_codec("little")}, DataTypeKind::int32, {8, 8}},
      {"bytes big", {bytes_codec("big")}, DataTypeKind::float64, {4, 5}},
      {"bytes struct", {bytes_codec("big")}, rec, {3, 2}},
      {"bytes+gzip", {bytes_codec("little"), {{"name", "gzip"}, {"configuration", {{"level", 5}}}}},
       DataTypeKind::uint16, {16, 16}},
      {"bytes+zstd", {bytes_codec("little"), {{"name", "zstd"}, {"configuration", {{"level", 3}, {"checksum", true}}}}},
       DataTypeKind::int32, {10, 10}},
      {"bytes+zstd nocheck", {bytes_codec("big"), {{"name", "zstd"}, {"configuration", {{"level", 0}, {"checksum", false}}}}},
       DataTypeKind::complex128, {3, 3}},
      {"bytes+crc32c", {bytes_codec("little"), {{"name", "crc32c"}}}, DataTypeKind::uint8, {7, 9}},
      {"bytes+blosc lz4 shuffle",
       {bytes_codec("little"),
        {{"name", "blosc"},
         {"configuration", {{"cname", "lz4"}, {"clevel", 5}, {"shuffle", "shuffle"}, {"typesize", 4}, {"blocksize", 0}}}}},
       DataTypeKind::float32, {16, 16}},
      {"bytes+blosc zstd bitshuffle",
       {bytes_codec("little"),
        {{"name", "blosc"},
         {"configuration", {{"cname", "zstd"}, {"clevel", 3}, {"shuffle", "bitshuffle"}, {"typesize", 2}, {"blocksize", 0}}}}},
       DataTypeKind::int16, {33}},
      {"transpose+bytes", {{{"name", "transpose"}, {"configuration", {{"order", {1, 0}}}}}, bytes_codec("little")},
       DataTypeKind::int16, {5, 7}},
      {"transpose3+bytes+gzip+crc32c",
       {{{"name", "transpose"}, {"configuration", {{"order", {2, 0, 1}}}}}, bytes_codec("big"),
        {{"name", "gzip"}, {"configuration", {{"level", 1}}}}, {{"name", "crc32c"}}},
       DataTypeKind::uint32, {2, 3, 4}},
      {"v2 zlib", {bytes_codec("little"), v2({{"id", "zlib"}, {"level", 1}}, DataTypeKind::int32)},
       DataTypeKind::int32, {8, 8}},
      {"v2 gzip", {bytes_codec("big"), v2({{"id", "gzip"}, {"level", 1}}, DataTypeKind::float32)},
       DataTypeKind::float32, {12}},
      {"v2 lz4", {bytes_codec("little"), v2({{"id", "lz4"}, {"acceleration", 1}}, DataTypeKind::uint8)},
       DataTypeKind::uint8, {64}},
      {"v2 zstd checksum", {bytes_codec("little"), v2({{"id", "zstd"}, {"level", 1}, {"checksum", true}}, DataTypeKind::int64)},
       DataTypeKind::int64, {6, 6}},
      {"v2 blosc autoshuffle",
       {bytes_codec("little"), v2({{"id", "blosc"}, {"cname", "blosclz"}, {"clevel", 5}, {"shuffle", -1}, {"blocksize", 0}},
                                  DataTypeKind::uint16)},
       DataTypeKind::uint16, {40}},
      {"v2 S8 lz4 zlib", {bytes_codec("little"), v2({{"id", "lz4"}}, DataType::fixed_bytes(8)), v2({{"id", "zlib"}}, DataType::fixed_bytes(8))},
       DataType::fixed_bytes(8), {5}},
      {"bytes 0-d+zstd", {bytes_codec("little"), {{"name", "zstd"}, {"configuration", {{"level", 1}}}}},
       DataTypeKind::float16, {}},
  };
  std::vector<std::shared_ptr<const codecs::CodecPipeline>> out;
  for (const auto& c : chains) {
    codecs::ArraySpec spec{c.dtype, c.shape, {}};
    out.push_back(codecs::CodecPipeline::from_json(json(c.codecs), spec));
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const auto pipelines = make_pipelines();
  if (size < 1) return 0;
  const auto& p = *pipelines[(data[0] & 0x7f) % pipelines.size()];
  const bool roundtrip = data[0] & 0x80;
  const ByteSpan in = fuzz::bytes(data + 1, size - 1);
  const std::size_t n = p.chunk_spec().num_bytes();

  Bytes decoded(n);
  if (!roundtrip) {
    if (!fuzz::typed([&] { p.decode(in, MutableByteSpan(decoded)); })) return 0;
  } else {
    if (in.empty()) return 0;
    for (std::size_t i = 0; i < n; ++i) decoded[i] = in[i % in.size()];
  }
  Bytes encoded, again(n);
  p.encode(decoded, encoded);
  if (p.encoded_size() >= 0)
    fuzz::check(encoded.size() == static_cast<std::uint64_t>(p.encoded_size()), "encoded size is not the fixed size");
  p.decode(encoded, MutableByteSpan(again));  // no error expected: it was just encoded
  fuzz::check(again == decoded, "decode(encode(x)) != x");
  return 0;
}
