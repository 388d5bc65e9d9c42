// The sharding_indexed codec (codecs/sharding.hpp): the first byte picks a
// fixed configuration (modulo the table); the rest is a stored shard.
//  - the whole-shard decode (ShardingCodec::decode);
//  - the partial path the engine takes: decode_index on the index bytes
//    alone (no shard size known, as after a ranged read of the index), then
//    each present inner chunk that lies inside the input through inner();
//  - a partial write (ShardingCodec::update) keeping the untouched inner
//    chunks of the input: the result must decode to the old shard with the
//    box overwritten.
#include <algorithm>
#include <vector>

#include <nlohmann/json.hpp>

#include "codecs/sharding.hpp"
#include "fuzz_common.hpp"

using namespace zarrcoro;
using nlohmann::json;

namespace {

struct Config {
  json config;
  codecs::ArraySpec shard;
};

json bytes_codec(const char* endian) { return {{"name", "bytes"}, {"configuration", {{"endian", endian}}}}; }
const json kCrcIndex = json::array({bytes_codec("little"), {{"name", "crc32c"}}});
const json kPlainIndex = json::array({bytes_codec("little")});

Bytes fill_of(std::uint16_t v) { return {std::byte(v & 0xff), std::byte(v >> 8)}; }

std::vector<std::unique_ptr<codecs::ShardingCodec>> make_codecs() {
  const std::vector<Config> configs = {
      // 0: the default layout: plain inner chunks, [bytes, crc32c] index at the end.
      {{{"chunk_shape", {2, 2}}, {"codecs", json::array({bytes_codec("little")})}, {"index_codecs", kCrcIndex},
        {"index_location", "end"}},
       {DataTypeKind::uint16, {4, 4}, fill_of(7)}},
      // 1: gzip inner chunks, unchecked index at the start.
      {{{"chunk_shape", {3, 2}},
        {"codecs", json::array({bytes_codec("little"), {{"name", "gzip"}, {"configuration", {{"level", 1}}}}})},
        {"index_codecs", kPlainIndex},
        {"index_location", "start"}},
       {DataTypeKind::int32, {6, 4}, {}}},
      // 2: nested sharding (inner shards of 2x2 made of 1x1 chunks).
      {{{"chunk_shape", {2, 2}},
        {"codecs", json::array({{{"name", "sharding_indexed"},
                                 {"configuration",
                                  {{"chunk_shape", {1, 1}},
                                   {"codecs", json::array({bytes_codec("big")})},
                                   {"index_codecs", kCrcIndex}}}}})},
        {"index_codecs", kCrcIndex}},
       {DataTypeKind::uint16, {4, 4}, fill_of(0xffff)}},
      // 3: transpose + bytes + zstd inner chunks, 1-d with a crc32c index at the start.
      {{{"chunk_shape", {3, 2}},
        {"codecs", json::array({{{"name", "transpose"}, {"configuration", {{"order", {1, 0}}}}}, bytes_codec("big"),
                                {{"name", "zstd"}, {"configuration", {{"level", 1}}}}})},
        {"index_codecs", kCrcIndex},
        {"index_location", "start"}},
       {DataTypeKind::float32, {6, 4}, {}}},
      // 4: 1-d, crc32c inner chunks, big-endian index.
      {{{"chunk_shape", {4}},
        {"codecs", json::array({bytes_codec("little"), {{"name", "crc32c"}}})},
        {"index_codecs", json::array({bytes_codec("big"), {{"name", "crc32c"}}})}},
       {DataTypeKind::uint8, {16}, {std::byte{3}}}},
  };
  std::vector<std::unique_ptr<codecs::ShardingCodec>> out;
  for (const auto& c : configs) out.push_back(std::make_unique<codecs::ShardingCodec>(c.config, c.shard));
  return out;
}

const codecs::ArraySpec& spec_of(std::size_t i) {
  static const std::vector<codecs::ArraySpec> specs = {
      {DataTypeKind::uint16, {4, 4}, fill_of(7)},  {DataTypeKind::int32, {6, 4}, {}},
      {DataTypeKind::uint16, {4, 4}, fill_of(0xffff)}, {DataTypeKind::float32, {6, 4}, {}},
      {DataTypeKind::uint8, {16}, {std::byte{3}}},
  };
  return specs[i];
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const auto codecs_ = make_codecs();
  if (size < 1) return 0;
  const std::size_t pick = data[0] % codecs_.size();
  const auto& c = *codecs_[pick];
  const codecs::ArraySpec& spec = spec_of(pick);
  const ByteSpan in = fuzz::bytes(data + 1, size - 1);
  const std::size_t n = spec.num_bytes(), es = spec.dtype.size();

  // Whole-shard decode.
  Bytes whole(n);
  const bool decoded = fuzz::typed([&] { c.decode(spec, in, MutableByteSpan(whole)); });

  // Partial path: the index alone, then each inner chunk by its range.
  if (in.size() >= c.index_bytes()) {
    fuzz::typed([&] {
      const ByteSpan index = c.index_at_start() ? in.first(c.index_bytes()) : in.last(c.index_bytes());
      const auto idx = c.decode_index(index);
      Bytes chunk(c.inner().chunk_spec().num_bytes());
      for (std::size_t i = 0; i < idx.entries.size() / 2; ++i) {
        if (idx.missing(i) || idx.offset(i) > in.size() || idx.nbytes(i) > in.size() - idx.offset(i)) continue;
        fuzz::typed([&] { c.inner().decode(in.subspan(idx.offset(i), idx.nbytes(i)), MutableByteSpan(chunk)); });
      }
    });
  }

  // Partial write: a box of the shard overwritten, the rest kept from `in`.
  const std::size_t r = spec.shape.size();
  std::vector<std::uint64_t> shard_start(r), box(r);
  for (std::size_t d = 0; d < r; ++d) {
    shard_start[d] = (size + d) % spec.shape[d];
    box[d] = std::min<std::uint64_t>(2 + d, spec.shape[d] - shard_start[d]);
  }
  std::uint64_t box_elems = 1;
  for (auto b : box) box_elems *= b;
  Bytes src(box_elems * es);
  for (std::size_t i = 0; i < src.size(); ++i) src[i] = std::byte(i * 37 + 1);
  const std::vector<std::uint64_t> zero(r, 0);
  Bytes out;
  bool stored = false;
  if (!fuzz::typed([&] { stored = c.update(spec, in, src.data(), box, zero, shard_start, box, out); })) return 0;
  // update() validated the index, and a shard whose every touched chunk was
  // rewritten must decode. When the whole decode worked, the result is the
  // old shard with the box replaced.
  Bytes after(n);
  if (stored) {
    if (!fuzz::typed([&] { c.decode(spec, out, MutableByteSpan(after)); })) {
      fuzz::check(!decoded, "a shard that decoded no longer decodes after a partial write");
      return 0;
    }
  } else {
    const Bytes fill = spec.fill.empty() ? Bytes(es, std::byte{0}) : spec.fill;
    for (std::size_t i = 0; i < n; ++i) after[i] = fill[i % es];
  }
  if (!decoded) return 0;
  Bytes expect = whole;
  std::vector<std::uint64_t> pos(r, 0);
  for (std::uint64_t e = 0; e < box_elems; ++e) {
    // pos: the element's coordinates inside the box (C order).
    std::uint64_t rest = e, lin = 0;
    for (std::size_t d = r; d-- > 0;) {
      pos[d] = rest % box[d];
      rest /= box[d];
    }
    for (std::size_t d = 0; d < r; ++d) lin = lin * spec.shape[d] + shard_start[d] + pos[d];
    std::copy_n(src.begin() + static_cast<std::ptrdiff_t>(e * es), es, expect.begin() + static_cast<std::ptrdiff_t>(lin * es));
  }
  fuzz::check(after == expect, "a partial shard write changed bytes outside its box (or lost the box)");
  return 0;
}
