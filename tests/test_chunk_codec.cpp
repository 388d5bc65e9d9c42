// ChunkCodec (chunk_codec.hpp): batches of chunks decoded and encoded with an
// array's codec pipeline on the codec pool, one submission per batch.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <future>
#include <limits>
#include <map>
#include <numeric>
#include <thread>

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/use_future.hpp>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <zarrcoro/array.hpp>
#include <zarrcoro/chunk_codec.hpp>
#include <zarrcoro/error.hpp>
#include <zarrcoro/runtime.hpp>
#include <zarrcoro/store/counting.hpp>
#include <zarrcoro/store/filesystem.hpp>
#include <zarrcoro/store/memory.hpp>

#include "support.hpp"

using namespace zarrcoro;
using nlohmann::json;
namespace asio = boost::asio;

namespace {

ArrayMetadata make_meta(std::vector<std::uint64_t> shape, std::vector<std::uint64_t> chunks, DataType dtype,
                        const char* codecs) {
  ArrayMetadata m;
  m.shape = std::move(shape);
  m.chunk_shape = std::move(chunks);
  m.data_type = dtype;
  m.codecs = json::parse(codecs);
  return m;
}

const char* kZstd = R"([{"name":"bytes","configuration":{"endian":"little"}},{"name":"zstd","configuration":{"level":3}}])";
const char* kChains[] = {
    kZstd,
    R"([{"name":"bytes","configuration":{"endian":"little"}}])",
    R"([{"name":"transpose","configuration":{"order":[1,0]}},{"name":"bytes","configuration":{"endian":"big"}},{"name":"crc32c"}])",
    R"([{"name":"bytes","configuration":{"endian":"little"}},{"name":"gzip","configuration":{"level":1}}])",
};

std::optional<Bytes> stored(Store& store, const std::string& key) {
  return store.async_get(key, ByteRange{}, asio::use_future).get();
}

// The key of chunk (i, j) of a v3 array at the store's root.
std::string key_of(std::uint64_t i, std::uint64_t j) { return "c/" + std::to_string(i) + "/" + std::to_string(j); }

std::vector<std::int32_t> iota_vec(std::size_t n, std::int32_t start = 1) {
  std::vector<std::int32_t> v(n);
  std::iota(v.begin(), v.end(), start);
  return v;
}

// The items that decode every chunk of a 2-d int32 array of `shape` (chunks
// `cs`) into `out` (C order, shape), edge chunks by their part inside it.
std::vector<ChunkDecode> whole_array_items(const std::vector<std::uint64_t>& shape, const std::vector<std::uint64_t>& cs,
                                           std::vector<std::int32_t>& out, std::vector<std::optional<Bytes>>& chunks,
                                           Store& store) {
  std::vector<ChunkDecode> items;
  const std::int64_t es = sizeof(std::int32_t);
  for (std::uint64_t i = 0; i * cs[0] < shape[0]; ++i)
    for (std::uint64_t j = 0; j * cs[1] < shape[1]; ++j) {
      ChunkDecode d;
      d.key = key_of(i, j);
      chunks.push_back(stored(store, d.key));
      const std::uint64_t r0 = i * cs[0], c0 = j * cs[1];
      d.box = ChunkBox{{0, 0}, {1, 1}, {std::min(cs[0], shape[0] - r0), std::min(cs[1], shape[1] - c0)}};
      d.out = reinterpret_cast<std::byte*>(out.data() + r0 * shape[1] + c0);
      d.out_strides = {static_cast<std::int64_t>(shape[1]) * es, es};
      items.push_back(std::move(d));
    }
  for (std::size_t k = 0; k < items.size(); ++k)
    if (chunks[k]) items[k].encoded = ByteSpan(*chunks[k]);
  return items;
}

}  // namespace

TEST_CASE("a batch decoded into place equals what Array reads, in one pool submission", "[chunk_codec]") {
  for (const char* chain : kChains) {
    INFO(chain);
    Runtime rt(RuntimeOptions{.codec_threads = 2});
    auto store = std::make_shared<MemoryStore>();
    const std::vector<std::uint64_t> shape{10, 12}, cs{4, 5};
    auto meta = make_meta(shape, cs, DataTypeKind::int32, chain);
    meta.fill_value = Bytes(4, std::byte{0x7f});
    Array a = Array::create_blocking(rt, store, "", meta);
    auto data = iota_vec(10 * 12);
    a.write_blocking(Region{{0, 0}, {10, 8}}, std::as_bytes(std::span(data).first(80)));  // chunks of column 2 stay missing
    std::vector<std::int32_t> expected(120);
    a.read_blocking(Region{{0, 0}, {10, 12}}, std::as_writable_bytes(std::span(expected)));

    const ChunkCodec codec = ChunkCodec::from_metadata(a.metadata(), "zarr.json");
    CHECK(codec.chunk_shape() == cs);
    CHECK(codec.chunk_bytes() == 4 * 5 * 4);
    std::vector<std::int32_t> out(120, 0);
    std::vector<std::optional<Bytes>> chunks;
    auto items = whole_array_items(shape, cs, out, chunks, *store);
    REQUIRE(items.size() == 9);
    CHECK(!items[2].encoded);  // chunk (0, 2): missing, the fill value
    rt.reset_stats();
    codec.decode_blocking(rt, items);
    CHECK(std::memcmp(out.data(), expected.data(), out.size() * 4) == 0);
    const RuntimeStats s = rt.stats();
    CHECK(s.pool_submissions == 1);
    CHECK(s.chunks == 9);
    CHECK(s.codec_calls_on_io_thread == 0);
  }
}

TEST_CASE("boxes with steps, negative and Fortran strides, dropped dimensions", "[chunk_codec]") {
  Runtime rt(RuntimeOptions{.codec_threads = 2});
  const ChunkCodec codec = ChunkCodec::from_codecs(json::parse(kZstd), DataTypeKind::int32, {4, 6});
  auto chunk = iota_vec(24, 0);  // chunk[r][c] = 6 r + c
  std::vector<ChunkEncode> enc(1);
  enc[0].value = reinterpret_cast<const std::byte*>(chunk.data());
  codec.encode_blocking(rt, enc);
  REQUIRE(enc[0].encoded);
  const ByteSpan encoded(*enc[0].encoded);

  SECTION("steps: rows 1 and 3, columns 0, 2, 4") {
    std::vector<std::int32_t> out(6, -1);
    std::vector<ChunkDecode> d(1);
    d[0].encoded = encoded;
    d[0].box = ChunkBox{{1, 0}, {2, 2}, {2, 3}};
    d[0].out = reinterpret_cast<std::byte*>(out.data());
    codec.decode_blocking(rt, d);
    CHECK(out == std::vector<std::int32_t>{6, 8, 10, 18, 20, 22});
  }
  SECTION("negative strides: the box reversed along both axes") {
    std::vector<std::int32_t> out(24, -1);
    std::vector<ChunkDecode> d(1);
    d[0].encoded = encoded;
    d[0].out = reinterpret_cast<std::byte*>(out.data() + 23);
    d[0].out_strides = {-24, -4};
    codec.decode_blocking(rt, d);
    for (int k = 0; k < 24; ++k) CHECK(out[static_cast<std::size_t>(k)] == 23 - k);
  }
  SECTION("a Fortran-order destination") {
    std::vector<std::int32_t> out(24, -1);
    std::vector<ChunkDecode> d(1);
    d[0].encoded = encoded;
    d[0].out = reinterpret_cast<std::byte*>(out.data());
    d[0].out_strides = {4, 16};
    codec.decode_blocking(rt, d);
    for (int r = 0; r < 4; ++r)
      for (int c = 0; c < 6; ++c) CHECK(out[static_cast<std::size_t>(c * 4 + r)] == 6 * r + c);
  }
  SECTION("an integer index: one row, its dimension dropped on the caller's side (stride 0)") {
    std::vector<std::int32_t> out(6, -1);
    std::vector<ChunkDecode> d(1);
    d[0].encoded = encoded;
    d[0].box = ChunkBox{{2, 0}, {1, 1}, {1, 6}};
    d[0].out = reinterpret_cast<std::byte*>(out.data());
    d[0].out_strides = {0, 4};
    codec.decode_blocking(rt, d);
    CHECK(out == std::vector<std::int32_t>{12, 13, 14, 15, 16, 17});
  }
}

TEST_CASE("a box of a shard decodes only the inner chunks it touches, each straight to its place", "[chunk_codec]") {
  Runtime rt(RuntimeOptions{.codec_threads = 2});
  // An 8 x 12 shard of 4 x 4 inner chunks (2 x 3 of them); inner chunk (1, 2) is all fill, so not stored.
  const ChunkCodec codec = ChunkCodec::from_codecs(
      json::parse(R"([{"name":"sharding_indexed","configuration":{"chunk_shape":[4,4],)"
                  R"("codecs":[{"name":"bytes","configuration":{"endian":"little"}},{"name":"zstd"}]}}])"),
      DataTypeKind::int32, {8, 12});
  std::vector<std::int32_t> shard(96);
  for (int r = 0; r < 8; ++r)
    for (int c = 0; c < 12; ++c) shard[static_cast<std::size_t>(r * 12 + c)] = r >= 4 && c >= 8 ? 0 : 12 * r + c + 1;
  std::vector<ChunkEncode> enc(1);
  enc[0].value = reinterpret_cast<const std::byte*>(shard.data());
  codec.encode_blocking(rt, enc);
  REQUIRE(enc[0].encoded);
  Bytes stored = *enc[0].encoded;
  auto decode = [&](ChunkBox box, std::int32_t* out, std::vector<std::int64_t> strides = {}) {
    std::vector<ChunkDecode> d(1);
    d[0].key = "c/0/0";
    d[0].encoded = ByteSpan(stored);
    d[0].box = std::move(box);
    d[0].out = reinterpret_cast<std::byte*>(out);
    d[0].out_strides = std::move(strides);
    codec.decode_blocking(rt, d);
  };

  SECTION("steps across inner chunk edges, a missing inner chunk read as fill") {
    std::vector<std::int32_t> out(9, -1);
    decode(ChunkBox{{1, 2}, {3, 4}, {3, 3}}, out.data());  // rows 1, 4, 7; columns 2, 6, 10
    CHECK(out == std::vector<std::int32_t>{15, 19, 23, 51, 55, 0, 87, 91, 0});
  }
  SECTION("the whole shard to reversed strides") {
    std::vector<std::int32_t> out(96, -1);
    decode(ChunkBox{}, out.data() + 95, {-48, -4});
    for (std::size_t k = 0; k < 96; ++k) CHECK(out[k] == shard[95 - k]);
  }
  SECTION("an inner chunk the box does not touch is never decoded") {
    // The index (little-endian offset, nbytes pairs at the end, then a crc32c of them) places inner chunk (0, 0).
    std::uint64_t offset = 0, nbytes = 0;
    std::memcpy(&offset, stored.data() + stored.size() - 4 - 6 * 16, 8);
    std::memcpy(&nbytes, stored.data() + stored.size() - 4 - 6 * 16 + 8, 8);
    REQUIRE(nbytes > 0);
    std::memset(stored.data() + offset, 0x5a, nbytes);
    std::vector<std::int32_t> out(16, -1);
    decode(ChunkBox{{4, 4}, {1, 1}, {4, 4}}, out.data());  // inner chunk (1, 1) alone
    for (std::size_t k = 0; k < 16; ++k) CHECK(out[k] == static_cast<std::int32_t>(12 * (4 + k / 4) + 4 + k % 4 + 1));
    CHECK_THROWS_AS(decode(ChunkBox{{3, 3}, {1, 1}, {2, 2}}, out.data()), CorruptChunk);  // touches (0, 0)
  }
}

TEST_CASE("a box of a shard of plain inner chunks: steps over inner chunks and any step for one element",
          "[chunk_codec]") {
  Runtime rt(RuntimeOptions{.codec_threads = 2});
  // A 4 x 12 shard of 2 x 2 inner chunks (2 x 6 of them) stored as plain bytes, the index first and unchecked.
  const ChunkCodec codec = ChunkCodec::from_codecs(
      json::parse(R"([{"name":"sharding_indexed","configuration":{"chunk_shape":[2,2],"index_location":"start",)"
                  R"("codecs":[{"name":"bytes","configuration":{"endian":"little"}}],)"
                  R"("index_codecs":[{"name":"bytes","configuration":{"endian":"little"}}]}}])"),
      DataTypeKind::int32, {4, 12});
  const auto shard = iota_vec(48);  // shard[r][c] = 12 r + c + 1
  std::vector<ChunkEncode> enc(1);
  enc[0].value = reinterpret_cast<const std::byte*>(shard.data());
  codec.encode_blocking(rt, enc);
  REQUIRE(enc[0].encoded);
  Bytes stored = *enc[0].encoded;
  auto decode = [&](ChunkBox box, std::vector<std::int32_t>& out) {
    std::vector<ChunkDecode> d(1);
    d[0].key = "c/0/0";
    d[0].encoded = ByteSpan(stored);
    d[0].box = std::move(box);
    d[0].out = reinterpret_cast<std::byte*>(out.data());
    codec.decode_blocking(rt, d);
  };

  SECTION("columns 1, 6 and 11 skip inner chunk columns 1, 2 and 4") {
    std::vector<std::int32_t> out(6, -1);
    decode(ChunkBox{{0, 1}, {3, 5}, {2, 3}}, out);
    CHECK(out == std::vector<std::int32_t>{2, 7, 12, 38, 43, 48});
  }
  SECTION("a dimension of one element with the largest step (a NumPy slice's) reads that element") {
    std::vector<std::int32_t> out(12, -1);
    decode(ChunkBox{{2, 0}, {std::numeric_limits<std::uint64_t>::max(), 1}, {1, 12}}, out);
    CHECK(out == iota_vec(12, 25));
  }
  SECTION("an inner chunk recorded one byte short: CorruptChunk naming the key") {
    std::uint64_t nbytes = 0;
    std::memcpy(&nbytes, stored.data() + 8, 8);  // entry 0: offset, then nbytes
    --nbytes;
    std::memcpy(stored.data() + 8, &nbytes, 8);
    std::vector<std::int32_t> out(4, -1);
    decode(ChunkBox{{0, 2}, {1, 1}, {2, 2}}, out);  // inner chunk (0, 1) alone: fine
    CHECK(out == std::vector<std::int32_t>{3, 4, 15, 16});
    try {
      decode(ChunkBox{{1, 1}, {1, 1}, {1, 2}}, out);  // touches inner chunk (0, 0)
      FAIL("no error");
    } catch (const CorruptChunk& e) {
      CHECK(e.key() == "c/0/0");
    }
  }
}

TEST_CASE("encode then decode round trips; encoded bytes are what Array stores", "[chunk_codec]") {
  for (const char* chain : kChains) {
    INFO(chain);
    Runtime rt(RuntimeOptions{.codec_threads = 2});
    auto store = std::make_shared<MemoryStore>();
    auto meta = make_meta({8, 10}, {4, 5}, DataTypeKind::int32, chain);
    Array a = Array::create_blocking(rt, store, "", meta);
    auto data = iota_vec(80);
    a.write_blocking(Region{{0, 0}, {8, 10}}, std::as_bytes(std::span(data)));
    const ChunkCodec codec = ChunkCodec::from_metadata(a.metadata());

    // Encode the four chunks from the C-order source through strided views.
    std::vector<ChunkEncode> items;
    for (std::uint64_t i = 0; i < 2; ++i)
      for (std::uint64_t j = 0; j < 2; ++j) {
        ChunkEncode e;
        e.key = key_of(i, j);
        e.value = reinterpret_cast<const std::byte*>(data.data() + i * 4 * 10 + j * 5);
        e.value_strides = {40, 4};
        items.push_back(std::move(e));
      }
    rt.reset_stats();
    codec.encode_blocking(rt, items);
    CHECK(rt.stats().pool_submissions == 1);
    for (auto& e : items) {
      INFO(e.key);
      REQUIRE(e.encoded);
      auto s = stored(*store, e.key);
      REQUIRE(s);
      CHECK(*e.encoded == *s);
    }
    // ... and they decode back to the data.
    std::vector<std::int32_t> back(80, 0);
    std::vector<ChunkDecode> dec;
    for (std::size_t k = 0; k < items.size(); ++k) {
      ChunkDecode d;
      d.key = items[k].key;
      d.encoded = ByteSpan(*items[k].encoded);
      d.out = reinterpret_cast<std::byte*>(back.data() + (k / 2) * 40 + (k % 2) * 5);
      d.out_strides = {40, 4};
      dec.push_back(std::move(d));
    }
    codec.decode_blocking(rt, dec);
    CHECK(back == data);
  }
}

TEST_CASE("a partial encode merges into the stored chunk or the fill value", "[chunk_codec]") {
  Runtime rt(RuntimeOptions{.codec_threads = 1});
  std::int32_t fill = -7;
  Bytes fill_bytes(4);
  std::memcpy(fill_bytes.data(), &fill, 4);
  const ChunkCodec codec = ChunkCodec::from_codecs(json::parse(kZstd), DataTypeKind::int32, {3, 3}, fill_bytes);
  auto base = iota_vec(9, 0);
  std::vector<ChunkEncode> first(1);
  first[0].value = reinterpret_cast<const std::byte*>(base.data());
  codec.encode_blocking(rt, first);

  const std::int32_t v = 100;
  std::vector<ChunkEncode> items(2);
  items[0].existing = ByteSpan(*first[0].encoded);  // merged into the stored chunk
  items[1].existing = std::nullopt;                  // merged into the fill value
  for (auto& e : items) {
    e.box = ChunkBox{{0, 1}, {1, 1}, {3, 1}};  // column 1
    e.value = reinterpret_cast<const std::byte*>(&v);
    e.value_strides = {0, 0};  // one value, broadcast
  }
  codec.encode_blocking(rt, items);
  std::vector<std::int32_t> a(9), b(9);
  std::vector<ChunkDecode> d(2);
  d[0].encoded = ByteSpan(*items[0].encoded);
  d[0].out = reinterpret_cast<std::byte*>(a.data());
  d[1].encoded = ByteSpan(*items[1].encoded);
  d[1].out = reinterpret_cast<std::byte*>(b.data());
  codec.decode_blocking(rt, d);
  CHECK(a == std::vector<std::int32_t>{0, 100, 2, 3, 100, 5, 6, 100, 8});
  CHECK(b == std::vector<std::int32_t>{-7, 100, -7, -7, 100, -7, -7, 100, -7});
}

namespace {

// A 6 x 4 int32 shard of 2 x 2 inner chunks (3 x 2 of them, C-order numbers
// 0-5); the index (bytes, crc32c) at the end.
ChunkCodec six_inner_chunks(const char* inner) {
  return ChunkCodec::from_codecs(json::parse(std::string(R"([{"name":"sharding_indexed","configuration":{)"
                                                         R"("chunk_shape":[2,2],"codecs":)") +
                                             inner + "}}]"),
                                 DataTypeKind::int32, {6, 4});
}

// The stored inner chunks of shard `s` of six_inner_chunks: (offset, nbytes) by C-order number, missing ones absent.
std::map<int, std::pair<std::uint64_t, std::uint64_t>> inner_chunks_of(const Bytes& s) {
  REQUIRE(s.size() >= 6 * 16 + 4);
  std::map<int, std::pair<std::uint64_t, std::uint64_t>> out;
  for (int i = 0; i < 6; ++i) {
    std::uint64_t offset = 0, nbytes = 0;
    std::memcpy(&offset, s.data() + s.size() - 4 - 6 * 16 + 16 * i, 8);
    std::memcpy(&nbytes, s.data() + s.size() - 4 - 6 * 16 + 16 * i + 8, 8);
    if (offset != ~std::uint64_t{0}) out[i] = {offset, nbytes};
  }
  return out;
}

// The C-order numbers of the stored inner chunks, in the order they are stored.
std::vector<int> stored_order(const Bytes& s) {
  std::vector<std::pair<std::uint64_t, int>> by_offset;
  for (const auto& [i, at] : inner_chunks_of(s)) by_offset.emplace_back(at.first, i);
  std::sort(by_offset.begin(), by_offset.end());
  std::vector<int> out;
  for (const auto& b : by_offset) out.push_back(b.second);
  return out;
}

Bytes encode_whole(Runtime& rt, const ChunkCodec& codec, const std::vector<std::int32_t>& values) {
  std::vector<ChunkEncode> e(1);
  e[0].value = reinterpret_cast<const std::byte*>(values.data());
  codec.encode_blocking(rt, e);
  REQUIRE(e[0].encoded);
  return *e[0].encoded;
}

// `box` (default: the whole chunk) of an int32 chunk, decoded in C order.
std::vector<std::int32_t> decode_box(Runtime& rt, const ChunkCodec& codec, const Bytes& encoded, ChunkBox box = {}) {
  std::uint64_t n = codec.chunk_bytes() / 4;
  if (!box.count.empty()) n = std::accumulate(box.count.begin(), box.count.end(), std::uint64_t{1}, std::multiplies<>());
  std::vector<std::int32_t> out(n, -1);
  std::vector<ChunkDecode> d(1);
  d[0].encoded = ByteSpan(encoded);
  d[0].box = std::move(box);
  d[0].out = reinterpret_cast<std::byte*>(out.data());
  codec.decode_blocking(rt, d);
  return out;
}

}  // namespace

TEST_CASE("a shard layout stores inner chunks in zarr-python's orders and keeps empty ones on request",
          "[chunk_codec]") {
  Runtime rt(RuntimeOptions{.codec_threads = 1});
  const ChunkCodec codec = six_inner_chunks(R"([{"name":"bytes","configuration":{"endian":"little"}}])");
  using Order = ShardLayout::Order;
  const auto values = iota_vec(24);
  auto order_of = [&](ShardLayout layout, const std::vector<std::int32_t>& v) {
    const ChunkCodec laid = codec.with_shard_layout(layout);
    const Bytes s = encode_whole(rt, laid, v);
    CHECK(decode_box(rt, laid, s) == v);
    return stored_order(s);
  };
  CHECK(stored_order(encode_whole(rt, codec, values)) == std::vector<int>{0, 1, 2, 3, 4, 5});
  CHECK(order_of({Order::lexicographic}, values) == std::vector<int>{0, 1, 2, 3, 4, 5});
  // zarr-python 3.4.2: morton_order_coords((3, 2)) is (0,0) (1,0) (0,1) (1,1) (2,0) (2,1).
  CHECK(order_of({Order::morton}, values) == std::vector<int>{0, 2, 1, 3, 4, 5});
  CHECK(order_of({Order::colexicographic}, values) == std::vector<int>{0, 2, 4, 1, 3, 5});
  // Inner chunk (1, 0), number 2, all fill: not stored, unless keep_empty.
  auto holed = values;
  for (std::size_t r = 2; r < 4; ++r)
    for (std::size_t c = 0; c < 2; ++c) holed[r * 4 + c] = 0;
  CHECK(order_of({Order::morton}, holed) == std::vector<int>{0, 1, 3, 4, 5});
  CHECK(order_of({Order::morton, true}, holed) == std::vector<int>{0, 2, 1, 3, 4, 5});
  CHECK_THROWS_AS(ChunkCodec::from_codecs(json::parse(kZstd), DataTypeKind::int32, {2, 2}).with_shard_layout({}),
                  InvalidArgument);
  // Nested shards would keep their own (C-order) layout: refused.
  const ChunkCodec nested = six_inner_chunks(
      R"([{"name":"sharding_indexed","configuration":{"chunk_shape":[1,2],)"
      R"("codecs":[{"name":"bytes","configuration":{"endian":"little"}}]}}])");
  CHECK_THROWS_AS(nested.with_shard_layout({Order::morton}), InvalidArgument);
}

TEST_CASE("a partial encode of a shard keeps the bytes of the inner chunks it does not touch", "[chunk_codec]") {
  Runtime rt(RuntimeOptions{.codec_threads = 1});
  const ChunkCodec codec =
      six_inner_chunks(R"([{"name":"bytes","configuration":{"endian":"little"}},{"name":"zstd"}])")
          .with_shard_layout({ShardLayout::Order::morton});
  const auto values = iota_vec(24);
  Bytes before = encode_whole(rt, codec, values);
  const std::int32_t v = 100;
  auto merge = [&](ChunkBox box) {
    std::vector<ChunkEncode> e(1);
    e[0].existing = ByteSpan(before);
    e[0].box = std::move(box);
    e[0].value = reinterpret_cast<const std::byte*>(&v);
    e[0].value_strides = {0, 0};
    codec.encode_blocking(rt, e);
    return e[0].encoded;
  };
  auto expect = values;
  // Inner chunk 5 made undecodable: a merge that does not touch it takes its bytes over as they are.
  const auto old = inner_chunks_of(before);
  auto damage_inner_chunk_5 = [&] { std::memset(before.data() + old.at(5).first, 0x5a, old.at(5).second); };
  // `after` holds inner chunks `untouched` as `before` held them, in Morton order, and its rows 0-3 (inner
  // chunks 0-3) decode to `expect`.
  auto check_merged = [&](const Bytes& after, std::initializer_list<int> untouched) {
    CHECK(stored_order(after) == std::vector<int>{0, 2, 1, 3, 4, 5});
    const auto now = inner_chunks_of(after);
    for (int i : untouched) {
      INFO("inner chunk " << i);
      REQUIRE(old.at(i).second == now.at(i).second);
      CHECK(std::memcmp(before.data() + old.at(i).first, after.data() + now.at(i).first, old.at(i).second) == 0);
    }
    CHECK(decode_box(rt, codec, after, ChunkBox{{0, 0}, {1, 1}, {4, 4}}) ==
          std::vector<std::int32_t>(expect.begin(), expect.begin() + 16));
  };
  SECTION("a box of unit steps: inner chunks (0, 0) and (1, 0) rewritten, the others neither decoded nor encoded") {
    damage_inner_chunk_5();
    const auto after = merge(ChunkBox{{1, 0}, {1, 1}, {2, 2}});  // rows 1-2, columns 0-1
    REQUIRE(after);
    for (std::size_t r = 1; r < 3; ++r)
      for (std::size_t c = 0; c < 2; ++c) expect[r * 4 + c] = v;
    check_merged(*after, {1, 3, 4, 5});
  }
  SECTION("a box with steps landing in every inner chunk") {
    const auto after = merge(ChunkBox{{0, 1}, {2, 2}, {3, 2}});  // rows 0, 2, 4; columns 1, 3
    REQUIRE(after);
    for (std::size_t r : {0, 2, 4})
      for (std::size_t c : {1, 3}) expect[r * 4 + c] = v;
    CHECK(decode_box(rt, codec, *after) == expect);
    CHECK(stored_order(*after) == std::vector<int>{0, 2, 1, 3, 4, 5});
  }
  SECTION("a box with steps over inner chunks: those no step lands in are neither decoded nor encoded") {
    damage_inner_chunk_5();
    const auto after = merge(ChunkBox{{0, 1}, {4, 1}, {2, 1}});  // rows 0 and 4 of column 1: inner chunks 0 and 4
    REQUIRE(after);
    expect[1] = expect[17] = v;
    check_merged(*after, {1, 2, 3, 5});
  }
  SECTION("a box with steps into a shard that keeps empty inner chunks: only those a step lands in are stored") {
    const ChunkCodec keeping = codec.with_shard_layout({ShardLayout::Order::morton, true});
    std::vector<ChunkEncode> e(1);  // nothing stored yet: the rest is fill
    e[0].box = ChunkBox{{0, 1}, {4, 1}, {2, 1}};  // rows 0 and 4 of column 1: inner chunks (0, 0) and (2, 0)
    e[0].value = reinterpret_cast<const std::byte*>(&v);
    e[0].value_strides = {0, 0};
    keeping.encode_blocking(rt, e);
    REQUIRE(e[0].encoded);
    CHECK(stored_order(*e[0].encoded) == std::vector<int>{0, 4});
    std::vector<std::int32_t> expect_fill(24, 0);
    expect_fill[1] = expect_fill[17] = v;
    CHECK(decode_box(rt, keeping, *e[0].encoded) == expect_fill);
  }
  SECTION("all fill: erased with drop_if_fill, else a shard of its index alone") {
    std::vector<std::int32_t> zeros(24, 0);
    std::vector<ChunkEncode> e(2);
    for (auto& item : e) item.value = reinterpret_cast<const std::byte*>(zeros.data());
    e[0].drop_if_fill = true;
    codec.encode_blocking(rt, e);
    CHECK_FALSE(e[0].encoded);
    REQUIRE(e[1].encoded);
    CHECK(e[1].encoded->size() == 6 * 16 + 4);
    CHECK(decode_box(rt, codec, *e[1].encoded) == zeros);
  }
}

TEST_CASE("a shard's inner chunk of other NaNs than its NaN fill is dropped, as zarr-python drops it",
          "[chunk_codec]") {
  Runtime rt(RuntimeOptions{.codec_threads = 1});
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Bytes fill(4);
  std::memcpy(fill.data(), &nan, 4);
  const ChunkCodec codec = ChunkCodec::from_codecs(
      json::parse(R"([{"name":"sharding_indexed","configuration":{"chunk_shape":[2,2],)"
                  R"("codecs":[{"name":"bytes","configuration":{"endian":"little"}}]}}])"),
      DataTypeKind::float32, {2, 4}, fill);
  const float negative_nan = -nan;  // another bit pattern: the sign bit set
  std::vector<float> values{negative_nan, negative_nan, 1, 2, negative_nan, negative_nan, 3, 4};
  for (const ChunkCodec& c : {codec, codec.with_shard_layout({ShardLayout::Order::morton})}) {
    std::vector<ChunkEncode> e(2);
    e[0].value = reinterpret_cast<const std::byte*>(values.data());
    e[1].value = e[0].value;
    e[1].box = ChunkBox{{0, 0}, {1, 1}, {2, 2}};  // inner chunk 0 alone
    e[1].value_strides = {16, 4};
    e[1].drop_if_fill = true;
    c.encode_blocking(rt, e);
    REQUIRE(e[0].encoded);
    CHECK(e[0].encoded->size() == 16 + 2 * 16 + 4);  // inner chunk 1 alone, and the index
    CHECK_FALSE(e[1].encoded);  // nothing else: the shard is erased
  }
}

TEST_CASE("drop_if_fill compares as zarr-python does", "[chunk_codec]") {
  Runtime rt(RuntimeOptions{.codec_threads = 1});
  auto encode_one = [&](DataType dtype, Bytes fill, Bytes chunk) {
    const ChunkCodec codec =
        ChunkCodec::from_codecs(json::parse(R"([{"name":"bytes","configuration":{"endian":"little"}}])"), dtype,
                                {chunk.size() / dtype.size()}, std::move(fill));
    std::vector<ChunkEncode> e(1);
    e[0].value = chunk.data();
    e[0].drop_if_fill = true;
    codec.encode_blocking(rt, e);
    return e[0].encoded.has_value();
  };
  auto f64 = [](std::initializer_list<double> v) {
    Bytes b(v.size() * 8);
    std::memcpy(b.data(), std::data(v), b.size());
    return b;
  };
  const double nan = std::numeric_limits<double>::quiet_NaN();
  double other_nan;
  const std::uint64_t payload = 0x7ff8000000000123ull;
  std::memcpy(&other_nan, &payload, 8);
  CHECK_FALSE(encode_one(DataTypeKind::float64, f64({0.0}), f64({0.0, 0.0})));        // all fill: dropped
  CHECK(encode_one(DataTypeKind::float64, f64({0.0}), f64({0.0, -0.0})));             // -0.0 is not a zero fill
  CHECK(encode_one(DataTypeKind::float64, f64({1.0}), f64({1.0, 2.0})));
  CHECK_FALSE(encode_one(DataTypeKind::float64, f64({nan}), f64({nan, other_nan})));  // any NaN matches a NaN fill
  CHECK(encode_one(DataTypeKind::float64, f64({nan}), f64({nan, 1.0})));
  CHECK_FALSE(encode_one(DataTypeKind::complex128, f64({0.0, 0.0}), f64({-0.0, 0.0})));  // complex: as numbers
  CHECK_FALSE(encode_one(DataTypeKind::complex128, f64({nan, 0.0}), f64({1.0, nan})));
  CHECK_FALSE(encode_one(DataTypeKind::int16, Bytes(2, std::byte{3}), Bytes(8, std::byte{3})));
  CHECK(encode_one(DataTypeKind::int16, Bytes(2, std::byte{3}), Bytes{std::byte{3}, std::byte{3}, std::byte{3}, std::byte{4}}));
}

TEST_CASE("v2 metadata: big-endian and Fortran-order chunks decode as Array reads them", "[chunk_codec]") {
  Runtime rt(RuntimeOptions{.codec_threads = 2});
  auto store = std::make_shared<MemoryStore>();
  const json zarray = json::parse(R"({"zarr_format": 2, "shape": [6, 7], "chunks": [4, 4], "dtype": ">i4",
      "compressor": {"id": "zlib", "level": 1}, "fill_value": 5, "order": "F", "filters": null})");
  auto meta = ArrayMetadata::from_v2_json(zarray, nullptr, ".zarray");
  Array a = Array::create_blocking(rt, store, "", meta);
  auto data = iota_vec(42);
  a.write_blocking(Region{{0, 0}, {4, 7}}, std::as_bytes(std::span(data).first(28)));
  std::vector<std::int32_t> expected(42);
  a.read_blocking(Region{{0, 0}, {6, 7}}, std::as_writable_bytes(std::span(expected)));

  const ChunkCodec codec = ChunkCodec::from_metadata(a.metadata(), ".zarray");
  std::vector<std::int32_t> out(42, 0);
  std::vector<ChunkDecode> items;
  std::vector<std::optional<Bytes>> chunks;
  for (std::uint64_t i = 0; i < 2; ++i)
    for (std::uint64_t j = 0; j < 2; ++j) chunks.push_back(stored(*store, std::to_string(i) + "." + std::to_string(j)));
  for (std::uint64_t i = 0; i < 2; ++i)
    for (std::uint64_t j = 0; j < 2; ++j) {
      ChunkDecode d;
      d.key = std::to_string(i) + "." + std::to_string(j);
      if (auto& c = chunks[i * 2 + j]) d.encoded = ByteSpan(*c);
      d.box = ChunkBox{{0, 0}, {1, 1}, {std::min<std::uint64_t>(4, 6 - i * 4), std::min<std::uint64_t>(4, 7 - j * 4)}};
      d.out = reinterpret_cast<std::byte*>(out.data() + i * 4 * 7 + j * 4);
      d.out_strides = {28, 4};
      items.push_back(std::move(d));
    }
  CHECK(!items[2].encoded);  // row 1 of chunks is missing: fill 5
  codec.decode_blocking(rt, items);
  CHECK(out == expected);
}

TEST_CASE("errors: typed, naming the chunk's key and the field", "[chunk_codec]") {
  Runtime rt(RuntimeOptions{.codec_threads = 2});
  const ChunkCodec codec = ChunkCodec::from_codecs(json::parse(kZstd), DataTypeKind::int32, {4});
  std::vector<std::int32_t> out(4, 9);
  const Bytes junk(13, std::byte{0x42});

  SECTION("bytes that do not decode: CorruptChunk naming the key") {
    std::vector<ChunkDecode> d(1);
    d[0].key = "a/c/3";
    d[0].encoded = ByteSpan(junk);
    d[0].out = reinterpret_cast<std::byte*>(out.data());
    try {
      codec.decode_blocking(rt, d);
      FAIL("no error");
    } catch (const CorruptChunk& e) {
      CHECK(e.key() == "a/c/3");
    }
  }
  SECTION("a box past the chunk: InvalidArgument, and nothing is written") {
    std::vector<ChunkDecode> d(2);
    d[0].key = "c/0";
    d[0].out = reinterpret_cast<std::byte*>(out.data());  // a missing chunk: would fill
    d[1].key = "c/1";
    d[1].box = ChunkBox{{2}, {1}, {3}};
    d[1].out = reinterpret_cast<std::byte*>(out.data());
    try {
      codec.decode_blocking(rt, d);
      FAIL("no error");
    } catch (const InvalidArgument& e) {
      CHECK(e.key() == "c/1");
      CHECK(e.field() == "box");
    }
    CHECK(out == std::vector<std::int32_t>(4, 9));
  }
  SECTION("an unknown codec and a variable-length data type are refused at construction") {
    CHECK_THROWS_AS(ChunkCodec::from_codecs(json::parse(R"([{"name":"bytes"},{"name":"nope"}])"), DataTypeKind::uint8,
                                            {4}, {}, "x/zarr.json"),
                    UnsupportedError);
    CHECK_THROWS_AS(ChunkCodec::from_codecs(json::parse(R"([{"name":"vlen-utf8"}])"), DataTypeKind::string, {4}),
                    UnsupportedError);
  }
  SECTION("the first failing item wins; the completion carries it through a callback") {
    std::vector<ChunkDecode> d(3);
    for (int k = 0; k < 3; ++k) {
      d[static_cast<std::size_t>(k)].key = "c/" + std::to_string(k);
      d[static_cast<std::size_t>(k)].encoded = ByteSpan(junk);
      d[static_cast<std::size_t>(k)].out = reinterpret_cast<std::byte*>(out.data());
    }
    std::promise<std::exception_ptr> done;
    codec.async_decode(rt, d, [&](std::exception_ptr e) { done.set_value(e); });
    auto e = done.get_future().get();
    REQUIRE(e);
    try {
      std::rethrow_exception(e);
    } catch (const CorruptChunk& err) {
      CHECK(err.key() == "c/0");
    }
  }
}

TEST_CASE("completion: on a pool thread by default, or through the handler's executor", "[chunk_codec]") {
  Runtime rt(RuntimeOptions{.codec_threads = 2});
  const ChunkCodec codec = ChunkCodec::from_codecs(json::parse(kZstd), DataTypeKind::int32, {16});
  std::vector<std::int32_t> out(16);
  std::vector<ChunkDecode> d(1);
  d[0].out = reinterpret_cast<std::byte*>(out.data());

  std::promise<bool> on_pool;
  codec.async_decode(rt, d, [&](std::exception_ptr) { on_pool.set_value(rt.on_codec_thread()); });
  CHECK(on_pool.get_future().get());

  // Awaited from a coroutine on the io_context: resumes there.
  auto f = asio::co_spawn(
      rt.io_executor(),
      [](Runtime* r, ChunkCodec c, std::span<ChunkDecode> items) -> asio::awaitable<bool> {
        co_await c.async_decode(*r, items, asio::use_awaitable);
        co_return r->on_io_thread();
      }(&rt, codec, d),
      asio::use_future);
  CHECK(f.get());
  CHECK(out == std::vector<std::int32_t>(16, 0));
}

TEST_CASE("a large batch fans out over the pool's threads from its one submission", "[chunk_codec]") {
  Runtime rt(RuntimeOptions{.codec_threads = 2});
  const ChunkCodec codec = ChunkCodec::from_codecs(json::parse(kZstd), DataTypeKind::int32, {64 * 1024});
  std::vector<std::int32_t> src = iota_vec(64 * 1024 * 8);
  std::vector<ChunkEncode> e(8);
  for (std::size_t k = 0; k < 8; ++k) e[k].value = reinterpret_cast<const std::byte*>(src.data() + k * 64 * 1024);
  codec.encode_blocking(rt, e);
  std::vector<std::int32_t> back(src.size());
  std::vector<ChunkDecode> d(8);
  for (std::size_t k = 0; k < 8; ++k) {
    d[k].encoded = ByteSpan(*e[k].encoded);
    d[k].out = reinterpret_cast<std::byte*>(back.data() + k * 64 * 1024);
  }
  rt.reset_stats();
  codec.decode_blocking(rt, d);
  CHECK(back == src);
  const RuntimeStats s = rt.stats();
  CHECK(s.pool_submissions == 1);
  CHECK(s.fanout_posts == 1);  // two threads: one more post
  CHECK(s.codec_calls == 8);
  CHECK(s.pool_queue_depth == 0);
}

TEST_CASE("the store forms: read and decode into place, encode and store, on a file store", "[chunk_codec]") {
  test::TempDir dir("chunk-codec");
  Runtime rt(RuntimeOptions{.codec_threads = 2});
  auto store = std::make_shared<FilesystemStore>(rt.io_executor(), dir.path);
  const std::vector<std::uint64_t> shape{10, 12}, cs{4, 5};
  auto meta = make_meta(shape, cs, DataTypeKind::int32, kZstd);
  Array a = Array::create_blocking(rt, store, "", meta);
  auto data = iota_vec(120);
  a.write_blocking(Region{{0, 0}, {10, 8}}, std::as_bytes(std::span(data).first(80)));
  std::vector<std::int32_t> expected(120);
  a.read_blocking(Region{{0, 0}, {10, 12}}, std::as_writable_bytes(std::span(expected)));
  const ChunkCodec codec = ChunkCodec::from_metadata(a.metadata());

  std::vector<std::int32_t> out(120, -5);
  std::vector<std::optional<Bytes>> unused;
  auto items = whole_array_items(shape, cs, out, unused, *store);
  for (auto& d : items) d.encoded.reset();  // the engine reads them
  rt.reset_stats();
  codec.async_read(rt, store, items, asio::use_future).get();
  CHECK(out == expected);
  CHECK(rt.stats().pool_submissions == 1);
  CHECK(items[0].found);
  CHECK_FALSE(items[2].found);  // chunk (0, 2) is missing
  for (auto& d : items) CHECK_FALSE(d.encoded);

  // Write every chunk anew (all 7s, one column of chunk (1, 1) only, and
  // chunk (2, 0) back to the fill value): stored, merged, erased.
  std::vector<std::int32_t> sevens(20, 7), zeros(20, 0);
  std::vector<ChunkEncode> enc(3);
  enc[0].key = "c/0/0";
  enc[0].value = reinterpret_cast<const std::byte*>(sevens.data());
  enc[1].key = "c/1/1";
  enc[1].box = ChunkBox{{0, 2}, {1, 1}, {4, 1}};
  enc[1].value = reinterpret_cast<const std::byte*>(sevens.data());
  enc[2].key = "c/2/0";
  enc[2].value = reinterpret_cast<const std::byte*>(zeros.data());
  enc[2].drop_if_fill = true;
  codec.async_write(rt, store, enc, asio::use_future).get();
  for (auto& e : enc) CHECK_FALSE(e.encoded);
  CHECK_FALSE(std::filesystem::exists(dir.path / "c/2/0"));
  for (std::size_t r = 0; r < 4; ++r)
    for (std::size_t c = 0; c < 5; ++c) expected[r * 12 + c] = 7;
  for (std::size_t r = 4; r < 8; ++r) expected[r * 12 + 7] = 7;
  for (std::size_t r = 8; r < 10; ++r)
    for (std::size_t c = 0; c < 5; ++c) expected[r * 12 + c] = 0;
  std::vector<std::int32_t> back(120);
  a.read_blocking(Region{{0, 0}, {10, 12}}, std::as_writable_bytes(std::span(back)));
  CHECK(back == expected);

  SECTION("a bad key fails the batch naming it") {
    std::vector<ChunkDecode> bad(1);
    bad[0].key = "../escape";
    bad[0].out = reinterpret_cast<std::byte*>(out.data());
    try {
      codec.async_read(rt, store, bad, asio::use_future).get();
      FAIL("no error");
    } catch (const InvalidArgument& e) {
      CHECK(e.key() == "../escape");
    }
  }
}

// A memory store that answers no read at once and, holding a
// `replacement`, puts it under `key` right after the next read of a suffix
// of it: another writer between a shard's index and its inner chunks.
// Without `versions`, its reads tell no generation (as a store that cannot
// version values), and refuse a condition.
struct ShardSwappingStore final : MemoryStore {
  std::string key = "c/0/0";
  std::optional<Bytes> replacement;
  bool versions = true;
  std::optional<ReadResult> try_read_now(const std::string&, const ReadOptions&) override { return std::nullopt; }
  void try_read_now_many(std::span<const std::string>, std::span<const ReadOptions>, std::span<ReadNow>) override {}
  awaitable<ReadResult> read(std::string k, ReadOptions options) override {
    if (!versions && !options.if_equal.unknown()) throw UnsupportedError(k, "if_equal", "no versions");
    auto r = co_await MemoryStore::read(k, options);
    if (!versions) r.generation = Generation{};
    if (replacement && k == key && options.range.kind == ByteRange::Kind::suffix) {
      Bytes next = std::move(*replacement);
      replacement.reset();
      co_await set(std::move(k), std::move(next));
    }
    co_return r;
  }
};

TEST_CASE("the store form reads part of a shard by byte ranges: its index, then the inner chunks the box touches",
          "[chunk_codec]") {
  Runtime rt(RuntimeOptions{.codec_threads = 2});
  // An 8 x 12 shard of 4 x 4 inner chunks (2 x 3 of them); inner chunk (1, 2) is all fill, so not stored.
  const char* inner = R"("codecs":[{"name":"bytes","configuration":{"endian":"little"}},{"name":"zstd"}])";
  const ChunkCodec codec = ChunkCodec::from_codecs(
      json::parse(std::string(R"([{"name":"sharding_indexed","configuration":{"chunk_shape":[4,4],)") + inner + "}}]"),
      DataTypeKind::int32, {8, 12});
  // The same shards, their index first and without a checksum.
  const ChunkCodec plain_index = ChunkCodec::from_codecs(
      json::parse(std::string(R"([{"name":"sharding_indexed","configuration":{"chunk_shape":[4,4],)") + inner +
                  R"(,"index_codecs":[{"name":"bytes","configuration":{"endian":"little"}}],)"
                  R"("index_location":"start"}}])"),
      DataTypeKind::int32, {8, 12});
  auto values = [](std::int32_t base) {
    std::vector<std::int32_t> v(96);
    for (int r = 0; r < 8; ++r)
      for (int c = 0; c < 12; ++c) v[static_cast<std::size_t>(r * 12 + c)] = r >= 4 && c >= 8 ? 0 : base + 12 * r + c + 1;
    return v;
  };
  auto encode = [&](const ChunkCodec& cc, const std::vector<std::int32_t>& v) {
    std::vector<ChunkEncode> enc(1);
    enc[0].value = reinterpret_cast<const std::byte*>(v.data());
    cc.encode_blocking(rt, enc);
    return *enc[0].encoded;
  };
  auto swapping = std::make_shared<ShardSwappingStore>();
  auto store = std::make_shared<CountingStore>(swapping);
  Bytes shard = encode(codec, values(0));
  auto put = [&](Bytes v) { swapping->async_set("c/0/0", std::move(v), asio::use_future).get(); };
  put(shard);
  bool found = false;
  Runtime* runtime = &rt;
  auto read = [&](ChunkBox box, std::size_t n, const ChunkCodec& cc, std::string key = "c/0/0") {
    std::vector<std::int32_t> out(n, -1);
    std::vector<ChunkDecode> d(1);
    d[0].key = std::move(key);
    d[0].box = std::move(box);
    d[0].out = reinterpret_cast<std::byte*>(out.data());
    store->reset();
    runtime->reset_stats();
    cc.async_read(*runtime, store, d, asio::use_future).get();
    found = d[0].found;
    CHECK_FALSE(d[0].encoded);
    return out;
  };
  auto kinds = [&] {
    std::vector<ByteRange::Kind> k;
    for (const auto& [key, range] : store->gets_log()) k.push_back(range.kind);
    return k;
  };
  using Kind = ByteRange::Kind;
  // A read of `box` through `cc` that must fail with CorruptChunk naming c/0/0.
  auto read_corrupt = [&](const ChunkBox& box, std::size_t n, const ChunkCodec& cc) {
    try {
      read(box, n, cc);
      FAIL("no error");
    } catch (const CorruptChunk& e) {
      CHECK(e.key() == "c/0/0");
    }
  };
  const ChunkBox steps{{1, 2}, {3, 4}, {3, 3}};  // rows 1, 4, 7; columns 2, 6, 10
  const std::vector<std::int32_t> at_steps{15, 19, 23, 51, 55, 0, 87, 91, 0};

  SECTION("the index, then the inner chunks touched in one range; a missing one reads as fill") {
    CHECK(read(steps, 9, codec) == at_steps);
    CHECK(found);
    CHECK(kinds() == std::vector<Kind>{Kind::suffix, Kind::range});
    CHECK(store->gets_log()[0].second.length == 6 * 16 + 4);  // the index and its crc32c
    CHECK(rt.stats().pool_submissions == 2);                   // the index's checksum, then the inner chunks
  }
  SECTION("an inner chunk outside the box is never read") {
    std::uint64_t offset = 0, nbytes = 0;  // inner chunk (0, 0), from the index at the end
    std::memcpy(&offset, shard.data() + shard.size() - 4 - 6 * 16, 8);
    std::memcpy(&nbytes, shard.data() + shard.size() - 4 - 6 * 16 + 8, 8);
    std::memset(shard.data() + offset, 0x5a, nbytes);
    put(shard);
    const auto out = read(ChunkBox{{4, 4}, {1, 1}, {4, 4}}, 16, codec);  // inner chunk (1, 1) alone
    for (std::size_t k = 0; k < 16; ++k) CHECK(out[k] == static_cast<std::int32_t>(12 * (4 + k / 4) + 4 + k % 4 + 1));
    read_corrupt(ChunkBox{{3, 3}, {1, 1}, {2, 2}}, 4, codec);  // touches (0, 0)
  }
  SECTION("no shard: the fill value, from one read") {
    CHECK(read(steps, 9, codec, "c/9/9") == std::vector<std::int32_t>(9, 0));
    CHECK_FALSE(found);
    CHECK(kinds() == std::vector<Kind>{Kind::suffix});
  }
  SECTION("only missing inner chunks touched: the index alone") {
    CHECK(read(ChunkBox{{5, 9}, {1, 1}, {2, 2}}, 4, codec) == std::vector<std::int32_t>(4, 0));
    CHECK(found);
    CHECK(kinds() == std::vector<Kind>{Kind::suffix});
  }
  SECTION("a shard replaced between its index and its inner chunks is read whole: the new one") {
    swapping->replacement = encode(codec, values(1000));
    CHECK(read(steps, 9, codec) == std::vector<std::int32_t>{1015, 1019, 1023, 1051, 1055, 0, 1087, 1091, 0});
    CHECK(kinds() == std::vector<Kind>{Kind::suffix, Kind::range, Kind::full});
  }
  SECTION("an index first without a checksum is located at once: one pool submission") {
    put(encode(plain_index, values(0)));
    CHECK(read(steps, 9, plain_index) == at_steps);
    CHECK(kinds() == std::vector<Kind>{Kind::range, Kind::range});
    CHECK(store->gets_log()[0].second.offset == 0);
    CHECK(store->gets_log()[0].second.length == 6 * 16);
    CHECK(rt.stats().pool_submissions == 1);
  }
  SECTION("a shard shorter than its index says is corrupt, named by its key") {
    Bytes cut = encode(plain_index, values(0));
    cut.resize(cut.size() - 3);
    put(cut);
    read_corrupt(steps, 9, plain_index);
    CHECK(kinds() == std::vector<Kind>{Kind::range, Kind::range});
  }
  SECTION("an index whose checksum fails is corrupt, named by its key, and no inner chunk is read") {
    shard[shard.size() - 1] ^= std::byte{0xff};  // the index's crc32c, at the very end
    put(shard);
    read_corrupt(steps, 9, codec);
    CHECK(kinds() == std::vector<Kind>{Kind::suffix});
  }
  SECTION("a store without versions: the index, then the shard whole (no index and inner chunks of two shards)") {
    swapping->versions = false;
    CHECK(read(steps, 9, codec) == at_steps);
    CHECK(kinds() == std::vector<Kind>{Kind::suffix, Kind::full});
  }
  SECTION("inner chunks far apart: a range each (coalesce_gap 0); an index at the end without a checksum") {
    Runtime apart(RuntimeOptions{.codec_threads = 2, .coalesce_gap = 0});
    runtime = &apart;
    const ChunkCodec end_index = ChunkCodec::from_codecs(
        json::parse(std::string(R"([{"name":"sharding_indexed","configuration":{"chunk_shape":[4,4],)") + inner +
                    R"(,"index_codecs":[{"name":"bytes","configuration":{"endian":"little"}}]}}])"),
        DataTypeKind::int32, {8, 12});
    put(encode(end_index, values(0)));
    const ChunkBox apart_box{{0, 0}, {1, 8}, {1, 2}};  // inner chunks (0, 0) and (0, 2), (0, 1) between them
    CHECK(read(apart_box, 2, end_index) == std::vector<std::int32_t>{1, 9});
    CHECK(kinds() == std::vector<Kind>{Kind::suffix, Kind::range, Kind::range});
    CHECK(apart.stats().pool_submissions == 1);
  }
  SECTION("a shard over max_chunk_bytes is read by ranges, never whole") {
    Runtime small(RuntimeOptions{.codec_threads = 2, .max_chunk_bytes = 256});  // the shard decodes to 384 bytes
    runtime = &small;
    CHECK(read(steps, 9, codec) == at_steps);
    try {
      read(ChunkBox{}, 96, codec);
      FAIL("no error");
    } catch (const UnsupportedError& e) {
      CHECK(e.key() == "c/0/0");
      CHECK(e.field() == "chunk_grid");
    }
    put(encode(codec, values(1000)));  // replaced since its index was cached: then read whole, refused as well
    CHECK_THROWS_AS(read(steps, 9, codec), UnsupportedError);
  }
  SECTION("the index of a shard read before comes from the runtime's cache, checked by the ranges") {
    CHECK(read(steps, 9, codec) == at_steps);
    CHECK(read(steps, 9, codec) == at_steps);
    CHECK(kinds() == std::vector<Kind>{Kind::range});  // no index read
    CHECK(rt.stats().pool_submissions == 1);
    put(encode(codec, values(1000)));  // replaced since: the range is refused, the shard read whole
    const std::vector<std::int32_t> at_steps_after{1015, 1019, 1023, 1051, 1055, 0, 1087, 1091, 0};
    CHECK(read(steps, 9, codec) == at_steps_after);
    CHECK(kinds() == std::vector<Kind>{Kind::range, Kind::full});
    CHECK(read(steps, 9, codec) == at_steps_after);  // and its index read anew
    CHECK(kinds() == std::vector<Kind>{Kind::suffix, Kind::range});
  }
  SECTION("a cached index that locates none of the inner chunks touched: one byte checks the shard") {
    const ChunkBox missing{{5, 9}, {1, 1}, {2, 2}};  // inner chunk (1, 2), all fill: not stored
    CHECK(read(missing, 4, codec) == std::vector<std::int32_t>(4, 0));
    CHECK(read(missing, 4, codec) == std::vector<std::int32_t>(4, 0));
    CHECK(kinds() == std::vector<Kind>{Kind::range});
    CHECK(store->gets_log()[0].second.length == 1);
    std::vector<std::int32_t> v = values(0);
    v[5 * 12 + 9] = 77;  // now stored
    put(encode(codec, v));
    CHECK(read(missing, 4, codec) == std::vector<std::int32_t>{77, 0, 0, 0});
    CHECK(kinds() == std::vector<Kind>{Kind::range, Kind::full});
  }
  SECTION("a batch of shards read whole, by ranges, missing, and replaced in between") {
    swapping->key = "c/0/1";
    put(encode(codec, values(0)));
    swapping->async_set("c/0/1", encode(codec, values(0)), asio::use_future).get();
    swapping->async_set("c/1/0", encode(codec, values(2000)), asio::use_future).get();
    swapping->replacement = encode(codec, values(1000));
    std::vector<std::int32_t> out(9 + 9 + 96 + 9, -1);
    std::vector<ChunkDecode> d(4);
    const char* keys[] = {"c/0/0", "c/0/1", "c/1/0", "c/9/9"};
    std::size_t at = 0;
    for (std::size_t k = 0; k < 4; ++k) {
      d[k].key = keys[k];
      if (k != 2) d[k].box = steps;
      d[k].out = reinterpret_cast<std::byte*>(out.data() + at);
      at += k == 2 ? 96 : 9;
    }
    store->reset();
    codec.async_read(rt, store, d, asio::use_future).get();
    std::vector<std::int32_t> expected = at_steps;
    for (std::int32_t v : at_steps) expected.push_back(v == 0 ? 0 : v + 1000);
    for (std::int32_t v : values(2000)) expected.push_back(v);
    for (int k = 0; k < 9; ++k) expected.push_back(0);
    CHECK(out == expected);
    CHECK((d[0].found && d[1].found && d[2].found && !d[3].found));
    std::map<std::string, std::vector<Kind>> by_key;
    for (const auto& [key, range] : store->gets_log()) by_key[key].push_back(range.kind);
    CHECK(by_key["c/0/0"] == std::vector<Kind>{Kind::suffix, Kind::range});
    CHECK(by_key["c/0/1"] == std::vector<Kind>{Kind::suffix, Kind::range, Kind::full});
    CHECK(by_key["c/1/0"] == std::vector<Kind>{Kind::full});
    CHECK(by_key["c/9/9"] == std::vector<Kind>{Kind::suffix});
  }
}

// A MemoryStore that does not answer `declined` at once, and notes whether
// every read at once asked for the caches alone.
struct DecliningStore final : MemoryStore {
  std::string declined;
  bool caches_only = true;
  std::optional<ReadResult> try_read_now(const std::string& key, const ReadOptions& options) override {
    caches_only = caches_only && options.caches_only;
    if (key == declined) return std::nullopt;
    return MemoryStore::try_read_now(key, options);
  }
};

TEST_CASE("read_now: a few plain chunks a store holds at once are placed on the calling thread", "[chunk_codec]") {
  Runtime rt(RuntimeOptions{.codec_threads = 2});
  auto store = std::make_shared<DecliningStore>();
  const std::vector<std::uint64_t> shape{8, 10}, cs{4, 5};
  Array a = Array::create_blocking(rt, store, "", make_meta(shape, cs, DataTypeKind::int32, kChains[1]));
  auto data = iota_vec(80);
  a.write_blocking(Region{{0, 0}, {4, 10}}, std::as_bytes(std::span(data).first(40)));  // chunks (0, 0) and (0, 1)
  const ChunkCodec codec = ChunkCodec::from_metadata(a.metadata());
  std::vector<std::int32_t> out(40, -5);
  auto item = [&](const char* key, std::size_t at) {
    ChunkDecode d;
    d.key = key;
    d.out = reinterpret_cast<std::byte*>(out.data() + at);
    return d;
  };

  SECTION("a stored chunk and a missing one: placed, with found, and no pool submission") {
    std::vector<ChunkDecode> items{item("c/0/1", 0), item("c/1/0", 20)};
    rt.reset_stats();
    REQUIRE(codec.read_now(rt, *store, items));
    for (std::size_t k = 0; k < 20; ++k) CHECK(out[k] == static_cast<std::int32_t>(10 * (k / 5) + 5 + k % 5 + 1));
    for (std::size_t k = 20; k < 40; ++k) CHECK(out[k] == 0);
    CHECK(items[0].found);
    CHECK_FALSE(items[1].found);
    CHECK_FALSE(items[0].encoded);
    CHECK(rt.stats().pool_submissions == 0);
    CHECK(rt.stats().caller_reads == 1);
    CHECK(store->caches_only);
  }
  SECTION("a value the store cannot give at once: false, and nothing written, not even the values it gave") {
    store->declined = "c/1/0";
    std::vector<ChunkDecode> items{item("c/0/0", 0), item("c/1/0", 20)};
    CHECK_FALSE(codec.read_now(rt, *store, items));
    CHECK(out == std::vector<std::int32_t>(40, -5));
    CHECK_FALSE(items[0].found);
  }
  SECTION("more than 4 items, or a codec with work to do: nothing done, nothing written") {
    std::vector<ChunkDecode> five{item("c/0/0", 0), item("c/0/1", 0), item("c/1/0", 0), item("c/1/1", 0),
                                  item("c/0/0", 20)};
    CHECK_FALSE(codec.read_now(rt, *store, five));
    const ChunkCodec zstd = ChunkCodec::from_codecs(json::parse(kZstd), DataTypeKind::int32, cs);
    std::vector<ChunkDecode> one{item("c/0/0", 0)};
    CHECK_FALSE(zstd.read_now(rt, *store, one));
    Runtime off(RuntimeOptions{.codec_threads = 1, .caller_reads = false});
    CHECK_FALSE(codec.read_now(off, *store, one));
    CHECK(out == std::vector<std::int32_t>(40, -5));
  }
  SECTION("an item with nowhere to go: InvalidArgument naming it, as async_read") {
    std::vector<ChunkDecode> items{item("c/0/0", 0)};
    items[0].out = nullptr;
    try {
      codec.read_now(rt, *store, items);
      FAIL("no error");
    } catch (const InvalidArgument& e) {
      CHECK(e.key() == "c/0/0");
      CHECK(e.field() == "out");
    }
  }
  SECTION("a stored value of the wrong size: CorruptChunk naming its key") {
    store->async_set("c/1/1", Bytes(3, std::byte{1}), asio::use_future).get();
    std::vector<ChunkDecode> items{item("c/1/1", 0)};
    try {
      codec.read_now(rt, *store, items);
      FAIL("no error");
    } catch (const CorruptChunk& e) {
      CHECK(e.key() == "c/1/1");
    }
  }
}

TEST_CASE("the store form's cached shard index is not used for a shard another program renamed in within one "
          "tick of a coarse clock (was: possible by the file's generation alone)",
          "[chunk_codec][regression]") {
  // Two shards of one size, each holding another inner chunk, renamed in as
  // zarr-python's LocalStore writes them, with the one time a coarse file
  // clock gives every write within a tick; ext4 hands a new file the inode
  // number freed last.
  test::TempDir dir("chunk-codec-other-program");
  Runtime rt(RuntimeOptions{.codec_threads = 1});
  auto store = std::make_shared<FilesystemStore>(rt.io_executor(), dir.path);
  const ChunkCodec codec = ChunkCodec::from_codecs(
      json::parse(R"([{"name":"sharding_indexed","configuration":{"chunk_shape":[2],)"
                  R"("codecs":[{"name":"bytes","configuration":{"endian":"little"}}]}}])"),
      DataTypeKind::int32, {8});
  const Bytes only_head = encode_whole(rt, codec, {1, 2, 0, 0, 0, 0, 0, 0}),
              only_mid = encode_whole(rt, codec, {0, 0, 5, 6, 0, 0, 0, 0});
  REQUIRE(only_head.size() == only_mid.size());
  auto read = [&] {  // inner chunk 1 only: by the shard's index
    std::vector<std::int32_t> out(2, -1);
    std::vector<ChunkDecode> d(1);
    d[0].key = "c/0";
    d[0].box = {{2}, {1}, {2}};
    d[0].out = reinterpret_cast<std::byte*>(out.data());
    codec.async_read(rt, store, d, asio::use_future).get();
    return out;
  };
  constexpr std::int64_t tick = 1'700'000'000'123'456'789;
  test::replace_file(dir.path / "c/0", only_head, tick);
  CHECK(read() == std::vector<std::int32_t>{0, 0});  // fill; the index is cached if inode versions
  test::replace_file(dir.path / "c/0", only_head, tick);  // frees the first file's inode number
  test::replace_file(dir.path / "c/0", only_mid, tick);   // which this one gets
  CHECK(read() == std::vector<std::int32_t>{5, 6});
}

TEST_CASE("a store error the I/O thread completes a read with is freed by its catcher, not behind it "
          "(was: freed by the I/O thread's catch block, a ThreadSanitizer race)",
          "[chunk_codec][regression]") {
  // The handler runs on the I/O thread and keeps it until the caller has
  // caught the error and dropped it, then lets it go through a relaxed flag:
  // no order ThreadSanitizer can see. Whatever the I/O thread still holds of
  // the exception is freed after the caller read it, which TSan reports.
  //
  // What the handler uses is declared before the runtime: the handler may
  // still be reading `handled` on the I/O thread when this scope ends, and
  // ~Runtime joins that thread (was: a stack-use-after-scope under ASan).
  std::vector<std::int32_t> out(4);
  std::vector<ChunkDecode> bad(1);
  bad[0].key = "../escape";
  bad[0].out = reinterpret_cast<std::byte*>(out.data());
  std::exception_ptr delivered;
  std::atomic<bool> arrived{false}, handled{false};
  test::TempDir dir("chunk-codec-error");
  Runtime rt(RuntimeOptions{.codec_threads = 2});
  auto store = std::make_shared<FilesystemStore>(rt.io_executor(), dir.path);
  const ChunkCodec codec = ChunkCodec::from_codecs(json::parse(kZstd), DataTypeKind::int32, {4});
  auto handler = [&](std::exception_ptr e) {
    delivered = std::move(e);
    arrived.store(true, std::memory_order_release);
    while (!handled.load(std::memory_order_relaxed)) std::this_thread::yield();
  };
  codec.async_read(rt, store, bad, asio::bind_executor(rt.io_executor(), handler));
  const auto deadline = std::chrono::steady_clock::now() + test::scaled(std::chrono::seconds(30));
  while (!arrived.load(std::memory_order_acquire) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::yield();
  std::string key;
  {
    struct Release {  // lets the I/O thread go however this block ends
      std::atomic<bool>& handled;
      ~Release() { handled.store(true, std::memory_order_relaxed); }
    } release{handled};
    REQUIRE(arrived.load(std::memory_order_acquire));
    REQUIRE(delivered);
    try {
      std::rethrow_exception(std::exchange(delivered, nullptr));
    } catch (const InvalidArgument& e) {
      key = e.key();
    } catch (...) {  // another error: `key` stays empty
    }
  }
  CHECK(key == "../escape");
}

TEST_CASE("five store-form write batches at once all complete (was: one of 257 file writes in flight hung)",
          "[chunk_codec][regression]") {
  // 4 x 64 chunks and 1: more io_uring writes at once than Boost 1.81's
  // backend takes per wake-up (see filesystem_detail.hpp, UringSlots).
  test::TempDir dir("chunk-codec-many");
  Runtime rt(RuntimeOptions{.codec_threads = 2});
  const bool files = GENERATE(true, false);
  CAPTURE(files);
  std::shared_ptr<Store> store;
  if (files) store = std::make_shared<FilesystemStore>(rt.io_executor(), dir.path);
  else store = std::make_shared<MemoryStore>();
  const std::uint64_t chunks = 257, n = 1000;
  Array a = Array::create_blocking(rt, store, "", make_meta({chunks * n}, {n}, DataTypeKind::int32, kChains[0]));
  const ChunkCodec codec = ChunkCodec::from_metadata(a.metadata());
  const auto data = iota_vec(chunks * n);
  std::vector<std::vector<ChunkEncode>> batches;
  for (std::uint64_t first = 0; first < chunks; first += 64) {
    auto& batch = batches.emplace_back();
    for (std::uint64_t i = first; i < std::min(chunks, first + 64); ++i) {
      ChunkEncode e;
      e.key = "c/" + std::to_string(i);
      e.value = reinterpret_cast<const std::byte*>(data.data() + i * n);
      batch.push_back(std::move(e));
    }
  }
  std::vector<std::future<void>> done;
  for (auto& batch : batches) done.push_back(codec.async_write(rt, store, batch, asio::use_future));
  for (auto& f : done) {
    if (f.wait_for(test::scaled(std::chrono::seconds(30))) != std::future_status::ready) {
      FAIL_CHECK("a write batch never completed");
      std::_Exit(1);  // the runtime cannot be destroyed with the write in flight
    }
    f.get();
  }
  std::vector<std::int32_t> back(chunks * n);
  a.read_blocking(Region::all(a.shape()), std::as_writable_bytes(std::span(back)));
  CHECK(back == data);
}
