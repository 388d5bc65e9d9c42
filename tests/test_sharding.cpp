// sharding_indexed through the engine: partial reads by byte ranges, the
// index cache, partial shard writes that keep untouched inner chunks, empty
// shards, nested shards, and no lost updates under concurrent writers.
#include <condition_variable>
#include <future>
#include <filesystem>
#include <map>
#include <mutex>
#include <numeric>
#include <set>
#include <thread>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_future.hpp>
#include <catch2/catch.hpp>

#include <zarrcoro/array.hpp>
#include <zarrcoro/error.hpp>
#include <zarrcoro/runtime.hpp>
#include <zarrcoro/store/counting.hpp>
#include <zarrcoro/store/filesystem.hpp>
#include <zarrcoro/store/memory.hpp>

#include "engine/runtime_access.hpp"
#include "in_place_store.hpp"
#include "support.hpp"

using namespace zarrcoro;
using nlohmann::json;
namespace asio = boost::asio;

namespace {

json sharding(std::vector<std::uint64_t> inner, json inner_codecs, std::string location = "end",
              json index_codecs = json::parse(R"([{"name":"bytes","configuration":{"endian":"little"}},{"name":"crc32c"}])")) {
  return json::array({{{"name", "sharding_indexed"},
                       {"configuration",
                        {{"chunk_shape", inner},
                         {"codecs", inner_codecs},
                         {"index_codecs", index_codecs},
                         {"index_location", location}}}}});
}

const json kZstd = json::parse(R"([{"name":"bytes","configuration":{"endian":"little"}},{"name":"zstd","configuration":{"level":1}}])");
const json kCrc = json::parse(R"([{"name":"bytes","configuration":{"endian":"little"}},{"name":"crc32c"}])");

ArrayMetadata meta(std::vector<std::uint64_t> shape, std::vector<std::uint64_t> shard, json codecs,
                   DataType dtype = DataTypeKind::int32) {
  ArrayMetadata m;
  m.shape = std::move(shape);
  m.chunk_shape = std::move(shard);
  m.data_type = dtype;
  m.codecs = std::move(codecs);
  return m;
}

std::vector<std::int32_t> iota_vec(std::size_t n) {
  std::vector<std::int32_t> v(n);
  std::iota(v.begin(), v.end(), 1);
  return v;
}

template <class T>
T run(Runtime& rt, asio::awaitable<T> a) {
  return asio::co_spawn(rt.io_executor(), std::move(a), asio::use_future).get();
}

std::uint64_t u64(const Bytes& b, std::size_t at) {
  std::uint64_t v;
  std::memcpy(&v, b.data() + at, 8);
  return v;
}

}  // namespace

TEST_CASE("reading one inner chunk transfers only the index and that chunk", "[sharding]") {
  Runtime rt({.codec_threads = 2});
  auto counting = std::make_shared<CountingStore>(std::make_shared<MemoryStore>());
  // One shard of 64x64 int32 (16 KiB) in 8x8 inner chunks; index 64 entries * 16 B + 4 B crc.
  auto a = Array::create_blocking(rt, counting, "", meta({64, 64}, {64, 64}, sharding({8, 8}, kZstd)));
  const auto data = iota_vec(64 * 64);
  a.write_blocking(Region::all(a.shape()), std::as_bytes(std::span(data)));
  const Bytes shard = *run(rt, counting->get("c/0/0"));
  const std::uint64_t index_bytes = 64 * 16 + 4;
  // Inner chunk (2, 3) is number 2 * 8 + 3 = 19 in C order.
  const std::uint64_t len19 = u64(shard, shard.size() - index_bytes + 19 * 16 + 8);
  // Another runtime (another process, say) has no index cached.
  Runtime other({.codec_threads = 2});
  auto b = Array::open_blocking(other, counting, "");
  counting->reset();
  auto r = b.read_blocking({{16, 24}, {24, 32}});
  for (std::uint64_t i = 0; i < 8; ++i)
    for (std::uint64_t j = 0; j < 8; ++j) REQUIRE(r.as<std::int32_t>()[i * 8 + j] == data[(16 + i) * 64 + 24 + j]);
  auto c = counting->counts();
  CHECK(c.gets == 2);  // the index (suffix range), then the chunk
  CHECK(c.get_bytes == index_bytes + len19);
  const auto log = counting->gets_log();
  CHECK(log[0].second.kind == ByteRange::Kind::suffix);
  CHECK(log[0].second.length == index_bytes);
  // Again: the index comes from the cache.
  counting->reset();
  b.read_blocking({{16, 24}, {17, 25}});
  CHECK(counting->counts().gets == 1);
  CHECK(counting->counts().get_bytes == len19);
  // The writing runtime cached the index of the shard it wrote.
  counting->reset();
  a.read_blocking({{16, 24}, {17, 25}});
  CHECK(counting->counts().gets == 1);
  // A write through a runtime replaces its cached index by the new shard's;
  // the other runtime's stale one fails its condition and is read again.
  const std::int32_t v = -7;
  a.write_blocking({{16, 24}, {17, 25}}, std::as_bytes(std::span(&v, 1)));
  counting->reset();
  CHECK(a.read_blocking({{16, 24}, {17, 25}}).as<std::int32_t>()[0] == -7);
  CHECK(counting->counts().gets == 1);
  CHECK(a.read_blocking({{16, 24}, {24, 32}}).as<std::int32_t>()[1] == data[16 * 64 + 25]);
  counting->reset();
  CHECK(b.read_blocking({{16, 24}, {17, 25}}).as<std::int32_t>()[0] == -7);
  CHECK(counting->counts().gets == 3);  // the chunk (changed), the index, the chunk
}

TEST_CASE("nearby inner chunks are fetched in one coalesced range", "[sharding]") {
  auto counting = std::make_shared<CountingStore>(std::make_shared<MemoryStore>());
  Runtime rt({.codec_threads = 2});
  auto a = Array::create_blocking(rt, counting, "", meta({64}, {64}, sharding({8}, kZstd)));
  const auto data = iota_vec(64);
  a.write_blocking(Region::all(a.shape()), std::as_bytes(std::span(data)));
  counting->reset();
  auto r = a.read_blocking({{4}, {60}});  // 8 inner chunks, most of the shard but not all
  CHECK(std::equal(r.as<std::int32_t>().begin(), r.as<std::int32_t>().end(), data.begin() + 4));
  CHECK(counting->counts().gets == 1);  // one merged range (the write cached the index)
  // With no gap allowed and every other chunk, each chunk is its own request.
  Runtime strict({.codec_threads = 2, .coalesce_gap = 0});
  auto b = Array::open_blocking(strict, counting, "");
  counting->reset();
  b.read_blocking({{0}, {1}});
  b.read_blocking({{16}, {17}});
  CHECK(counting->counts().gets == 3);  // index once, then two single chunks
}

TEST_CASE("a partial shard write keeps the encoded bytes of untouched inner chunks", "[sharding]") {
  Runtime rt({.codec_threads = 2});
  auto store = std::make_shared<MemoryStore>();
  auto a = Array::create_blocking(rt, store, "", meta({16}, {16}, sharding({4}, kCrc)));
  const auto data = iota_vec(16);
  a.write_blocking(Region::all(a.shape()), std::as_bytes(std::span(data)));
  Bytes shard = *run(rt, store->get("c/0"));
  // Corrupt inner chunk 3's checksum: decoding it would fail, keeping it must not.
  const std::uint64_t index_bytes = 4 * 16 + 4;
  const std::uint64_t off3 = u64(shard, shard.size() - index_bytes + 3 * 16);
  shard[off3 + 16 + 3] ^= std::byte{0xff};  // last byte of its crc32c
  run(rt, store->set("c/0", shard));
  const std::int32_t v = 100;
  a.write_blocking({{5}, {6}}, std::as_bytes(std::span(&v, 1)));  // inner chunk 1 only
  const Bytes after = *run(rt, store->get("c/0"));
  const std::uint64_t new_off3 = u64(after, after.size() - index_bytes + 3 * 16);
  CHECK(test::to_hex(ByteSpan(after).subspan(new_off3, 20)) == test::to_hex(ByteSpan(shard).subspan(off3, 20)));
  CHECK(a.read_blocking({{4}, {8}}).as<std::int32_t>()[1] == 100);
  CHECK_THROWS_AS(a.read_blocking({{12}, {16}}), CorruptChunk);  // still corrupt: kept verbatim
}

TEST_CASE("index at start: offsets are absolute; checked by parsing the index by hand", "[sharding]") {
  Runtime rt({.codec_threads = 2});
  auto store = std::make_shared<MemoryStore>();
  const json plain = json::parse(R"([{"name":"bytes","configuration":{"endian":"little"}}])");
  auto a = Array::create_blocking(rt, store, "", meta({8}, {8}, sharding({2}, plain, "start")));
  const std::vector<std::int32_t> data{1, 2, 0, 0, 5, 6, 7, 8};
  a.write_blocking(Region::all(a.shape()), std::as_bytes(std::span(data)));
  const Bytes shard = *run(rt, store->get("c/0"));
  const std::uint64_t index_bytes = 4 * 16 + 4;
  REQUIRE(shard.size() == index_bytes + 3 * 8);  // inner chunk 1 is all fill: not stored
  CHECK(u64(shard, 16) == ~std::uint64_t{0});
  CHECK(u64(shard, 24) == ~std::uint64_t{0});
  for (std::size_t k : {0, 2, 3}) {
    const std::uint64_t off = u64(shard, k * 16), len = u64(shard, k * 16 + 8);
    REQUIRE(len == 8);
    REQUIRE(off >= index_bytes);
    std::int32_t pair[2];
    std::memcpy(pair, shard.data() + off, 8);
    CHECK(pair[0] == data[2 * k]);
    CHECK(pair[1] == data[2 * k + 1]);
  }
  auto r = a.read_blocking({{1}, {7}});
  CHECK(std::vector<std::int32_t>(r.as<std::int32_t>().begin(), r.as<std::int32_t>().end()) ==
        std::vector<std::int32_t>{2, 0, 0, 5, 6, 7});
}

TEST_CASE("all-empty shards are not stored, and writing fill erases a shard", "[sharding]") {
  Runtime rt({.codec_threads = 2});
  auto store = std::make_shared<MemoryStore>();
  auto a = Array::create_blocking(rt, store, "", meta({8}, {4}, sharding({2}, kZstd)));
  const std::vector<std::int32_t> zeros(8, 0), some{0, 0, 0, 0, 1, 0, 0, 0};
  a.write_blocking(Region::all(a.shape()), std::as_bytes(std::span(zeros)));
  CHECK(run(rt, store->list("")).size() == 1);  // zarr.json only
  a.write_blocking(Region::all(a.shape()), std::as_bytes(std::span(some)));
  CHECK(run(rt, store->list("c/")) == std::vector<std::string>{"c/1"});
  const std::int32_t zero = 0;
  a.write_blocking({{4}, {5}}, std::as_bytes(std::span(&zero, 1)));  // partial write back to fill
  CHECK(run(rt, store->list("c/")).empty());
}

TEST_CASE("nested sharding and edge shards round-trip", "[sharding]") {
  Runtime rt({.codec_threads = 2});
  auto store = std::make_shared<MemoryStore>();
  const json nested = sharding({4, 4}, sharding({2, 2}, kZstd));
  auto a = Array::create_blocking(rt, store, "", meta({10, 13}, {8, 8}, nested));
  const auto data = iota_vec(130);
  a.write_blocking(Region::all(a.shape()), std::as_bytes(std::span(data)));
  auto r = a.read_blocking(Region::all(a.shape()));
  CHECK(std::equal(data.begin(), data.end(), r.as<std::int32_t>().begin()));
  auto part = a.read_blocking({{3, 5}, {9, 12}});
  for (std::uint64_t i = 0; i < 6; ++i)
    for (std::uint64_t j = 0; j < 7; ++j)
      REQUIRE(part.as<std::int32_t>()[i * 7 + j] == data[(3 + i) * 13 + 5 + j]);
}

TEST_CASE("inner chunks land in the selection exactly, whole or in part, aligned or not", "[sharding]") {
  // Whole inner chunks contiguous in the output are decoded straight into
  // it; a plain-copy ([bytes]) inner chunk is copied from the shard's bytes,
  // or read there by a store that reads in place (ReadOptions::into).
  const json inner = GENERATE(json::parse(R"([{"name":"bytes","configuration":{"endian":"little"}}])"), kZstd);
  const auto inner_shape = GENERATE(std::vector<std::uint64_t>{3, 10}, std::vector<std::uint64_t>{3, 5});
  const bool in_place = GENERATE(false, true);
  INFO(inner.dump() << ", inner chunks " << inner_shape[0] << "x" << inner_shape[1] << ", in place " << in_place);
  Runtime rt({.codec_threads = 2});
  auto store = in_place ? std::shared_ptr<MemoryStore>(std::make_shared<test::InPlaceStore>()) : std::make_shared<test::ValueStore>();
  auto a = Array::create_blocking(rt, store, "", meta({12, 10}, {6, 10}, sharding(inner_shape, inner)));
  const auto data = iota_vec(120);
  a.write_blocking(Region::all(a.shape()), std::as_bytes(std::span(data)));
  for (const Region& r : {Region::all(a.shape()), Region{{3, 0}, {9, 10}}, Region{{3, 5}, {6, 10}},
                          Region{{1, 2}, {11, 9}}, Region{{7, 4}, {8, 5}}}) {
    INFO("selection " << r.start[0] << ":" << r.stop[0] << ", " << r.start[1] << ":" << r.stop[1]);
    const auto result = a.read_blocking(r);
    const auto got = result.as<std::int32_t>();
    std::size_t k = 0;
    for (std::uint64_t i = r.start[0]; i < r.stop[0]; ++i)
      for (std::uint64_t j = r.start[1]; j < r.stop[1]; ++j) REQUIRE(got[k++] == data[i * 10 + j]);
    CHECK(k == got.size());
  }
  // Read in place: exactly the [bytes] inner chunks whole and contiguous in
  // a selection of part of a shard (whole shards this small are read whole).
  // 3x10: one inner chunk of each shard in the second selection; 3x5: the
  // third selection's one inner chunk.
  if (auto* s = dynamic_cast<test::InPlaceStore*>(store.get()))
    CHECK(s->in_place == (inner.size() != 1 ? 0u : inner_shape[1] == 10 ? 2u : 1u));
}

TEST_CASE("a large whole shard of plain-copy inner chunks is read in place by one range", "[sharding]") {
  // 250,000 int32: two whole shards of 400 KB (100 inner chunks each, read
  // by the index and one range) and an edge shard of 50 inner chunks.
  Runtime rt({.codec_threads = 2});
  auto store = std::make_shared<test::InPlaceStore>();
  const json bytes = json::parse(R"([{"name":"bytes","configuration":{"endian":"little"}}])");
  auto a = Array::create_blocking(rt, store, "", meta({250000}, {100000}, sharding({1000}, bytes)));
  const auto data = iota_vec(250000);
  a.write_blocking(Region::all(a.shape()), std::as_bytes(std::span(data)));
  const auto result = a.read_blocking(Region::all(a.shape()));
  const auto got = result.as<std::int32_t>();
  CHECK(std::vector<std::int32_t>(got.begin(), got.end()) == data);
  CHECK(store->in_place == 3);
}

// A sharding codec for shards of n int32 in inner chunks of one element:
// n inner chunks, with the index codecs and location given.
codecs::ShardingCodec layout_of(std::uint64_t n, std::string location = "end") {
  const json bytes = json::parse(R"([{"name":"bytes","configuration":{"endian":"little"}}])");
  return codecs::ShardingCodec(sharding({1}, bytes, location)[0]["configuration"],
                               codecs::ArraySpec{DataTypeKind::int32, {n}});
}

TEST_CASE("the shard index cache holds at most kMaxBytes of indexes, counting each key once", "[sharding]") {
  using Cache = detail::ShardIndexCache;
  Cache cache;
  auto quarter = std::make_shared<codecs::ShardingCodec::Index>();
  quarter->entries.resize(Cache::kMaxBytes / sizeof(std::uint64_t) / 4);
  const auto layout = layout_of(quarter->entries.size() / 2);
  const std::shared_ptr<Store> store = std::make_shared<MemoryStore>();
  for (int k = 0; k < 4; ++k)
    for (int again = 0; again < 3; ++again) cache.put(store, "k" + std::to_string(k), layout, {quarter, Generation{"g"}});
  for (int k = 0; k < 4; ++k) CHECK(cache.find(store, "k" + std::to_string(k), layout));  // exactly kMaxBytes
  cache.put(store, "k4", layout, {quarter, Generation{"g"}});  // one more: the cache starts over
  CHECK_FALSE(cache.find(store, "k0", layout));
  CHECK(cache.find(store, "k4", layout));
  cache.invalidate(store, "k4", layout);
  for (int k = 0; k < 4; ++k) cache.put(store, "k" + std::to_string(k), layout, {quarter, Generation{"g"}});
  CHECK(cache.find(store, "k0", layout));  // the invalidated entry's bytes were given back
  cache.put(store, "k0", layout, {quarter, Generation{}});  // an unknown generation is not cached
  CHECK(cache.find(store, "k0", layout)->generation == Generation{"g"});
}

TEST_CASE("the shard index cache gives an index only to a sharding codec of the layout that decoded it "
          "(was: a handle from before an overwrite with other shards read past the end of the new index)",
          "[sharding][regression]") {
  using Cache = detail::ShardIndexCache;
  Cache cache;
  const std::shared_ptr<Store> store = std::make_shared<MemoryStore>();
  auto index = std::make_shared<codecs::ShardingCodec::Index>();
  index->entries.assign(2 * 4, 0);  // four inner chunks
  const auto four = layout_of(4), four_at_start = layout_of(4, "start"), sixteen = layout_of(16);
  cache.put(store, "c/0", four, {index, Generation{"g"}});
  CHECK(cache.find(store, "c/0", four));
  CHECK_FALSE(cache.find(store, "c/0", sixteen));        // other inner chunks per shard
  CHECK_FALSE(cache.find(store, "c/0", four_at_start));  // the index elsewhere in the shard
  // An entry whose size disagrees with its layout is never handed out.
  auto short_index = std::make_shared<codecs::ShardingCodec::Index>();
  short_index->entries.assign(2 * 3, 0);
  cache.put(store, "c/1", four, {short_index, Generation{"g"}});
  CHECK_FALSE(cache.find(store, "c/1", four));
}

TEST_CASE("the shard index cache keeps nothing by a generation that may repeat", "[sharding][regression]") {
  // A file another program wrote, on a file system without inode versions
  // (FilesystemStore, Generation::may_repeat): the same generation could
  // come back with a shard of another layout.
  detail::ShardIndexCache cache;
  auto store = std::make_shared<MemoryStore>();
  auto index = std::make_shared<codecs::ShardingCodec::Index>();
  index->entries.assign(2 * 4, 0);
  const auto four = layout_of(4);
  cache.put(store, "c/0", four, {index, Generation{"g", true}});
  CHECK_FALSE(cache.find(store, "c/0", four));
  cache.put(store, "c/0", four, {index, Generation{"g"}});
  CHECK(cache.find(store, "c/0", four));
}

TEST_CASE("a handle from before an overwrite with fewer inner chunks per shard never reads past the new index "
          "(heap out-of-bounds read under ASan before)",
          "[sharding][regression]") {
  Runtime rt({.codec_threads = 1});
  auto store = std::make_shared<MemoryStore>();
  const json bytes = json::parse(R"([{"name":"bytes","configuration":{"endian":"little"}}])");
  const Array old = Array::create_blocking(rt, store, "a", meta({8, 8}, {8, 8}, sharding({2, 2}, bytes)));
  const auto data = iota_vec(64);
  old.write_blocking(Region::all(old.shape()), std::as_bytes(std::span(data)));
  const Array now = Array::create_blocking(rt, store, "a", meta({8, 8}, {8, 8}, sharding({4, 4}, bytes)),
                                           CreateMode::overwrite);
  now.write_blocking(Region::all(now.shape()), std::as_bytes(std::span(data)));  // caches a 4-entry index
  // The old handle reads its last inner chunk (number 15 of 16) with its own
  // layout: from the index its own codec decodes out of the new shard's
  // bytes, whose offsets lie past the shard's end.
  CHECK_THROWS_AS(old.read_blocking(Region::parse("6:8,6:8", old.shape())), CorruptChunk);
  const auto back = now.read_blocking(Region::all(now.shape()));
  CHECK(std::vector<std::int32_t>(back.as<std::int32_t>().begin(), back.as<std::int32_t>().end()) == data);
}

TEST_CASE("a shard write whose new generation is unknown drops the cached index", "[sharding][regression]") {
  // A store whose writes cannot report the new generation (S3 multipart
  // uploads, weak ETags): the cached index of the old shard must not stay,
  // or a read would take inner chunks the write added for absent (fill).
  struct Store : MemoryStore {
    awaitable<std::optional<Generation>> write(std::string key, std::optional<Bytes> value,
                                               WriteOptions options) override {
      auto g = co_await MemoryStore::write(std::move(key), std::move(value), std::move(options));
      if (g) g = Generation{};
      co_return g;
    }
  };
  Runtime rt({.codec_threads = 1});
  auto store = std::make_shared<Store>();
  const json bytes = json::parse(R"([{"name":"bytes","configuration":{"endian":"little"}}])");
  auto a = Array::create_blocking(rt, store, "", meta({8}, {8}, sharding({2}, bytes)));
  const std::int32_t head[] = {1, 2};
  a.write_blocking({{0}, {2}}, std::as_bytes(std::span(head)));
  CHECK(a.read_blocking({{4}, {6}}).as<std::int32_t>()[0] == 0);  // absent: fill; the index is now cached
  const std::int32_t mid[] = {5, 6};
  a.write_blocking({{4}, {6}}, std::as_bytes(std::span(mid)));
  const auto result = a.read_blocking({{4}, {6}});
  CHECK(std::vector<std::int32_t>(result.as<std::int32_t>().begin(), result.as<std::int32_t>().end()) ==
        std::vector<std::int32_t>{5, 6});
}

TEST_CASE("a cached shard index is not used for a shard another program renamed in within one tick of a coarse "
          "clock (was: the inner chunk it added read as fill_value)",
          "[sharding][regression]") {
  // Two shards of one size, each holding another inner chunk, written by
  // another program (zarr-python's LocalStore renames a new file over the
  // shard) with the one time a coarse file clock gives every write within
  // a tick; ext4 hands a new file the inode number freed last.
  test::TempDir dir("sharding-other-program");
  Runtime rt({.codec_threads = 1});
  auto store = std::make_shared<FilesystemStore>(rt.io_executor(), dir.path);
  const json bytes = json::parse(R"([{"name":"bytes","configuration":{"endian":"little"}}])");
  const ArrayMetadata m = meta({8}, {8}, sharding({2}, bytes));
  const std::int32_t head[] = {1, 2}, mid[] = {5, 6};
  Array::create_blocking(rt, store, "x", m).write_blocking({{0}, {2}}, std::as_bytes(std::span(head)));
  Array::create_blocking(rt, store, "y", m).write_blocking({{2}, {4}}, std::as_bytes(std::span(mid)));
  const Bytes only_head = test::read_file(dir.path / "x/c/0"), only_mid = test::read_file(dir.path / "y/c/0");
  REQUIRE(only_head.size() == only_mid.size());
  const Array a = Array::create_blocking(rt, store, "a", m);
  constexpr std::int64_t tick = 1'700'000'000'123'456'789;
  test::replace_file(dir.path / "a/c/0", only_head, tick);
  auto values = [&] {
    const NdArray r = a.read_blocking({{2}, {4}});  // inner chunk 1 only: by the shard's index
    return std::vector<std::int32_t>(r.as<std::int32_t>().begin(), r.as<std::int32_t>().end());
  };
  CHECK(values() == std::vector<std::int32_t>{0, 0});  // fill; the index is cached if inode versions
  test::replace_file(dir.path / "a/c/0", only_head, tick);  // frees the first file's inode number
  test::replace_file(dir.path / "a/c/0", only_mid, tick);   // which this one gets
  CHECK(values() == std::vector<std::int32_t>{5, 6});
}

TEST_CASE("a reader's index older than a concurrent write's never hides the write's inner chunks",
          "[sharding][regression]") {
  // The reader fetches the index, then waits (here: at a gate) while a
  // write in the same runtime replaces the shard and caches the new index;
  // the reader then caches its older index over it. A later read needing
  // only inner chunks that index lacks must not take them for absent.
  struct GatedStore : MemoryStore {
    // The gate opens by itself after a while, so a failing test cannot hang the runtime.
    explicit GatedStore(asio::any_io_executor io) : gate(io, test::scaled(std::chrono::seconds(60))) {}
    awaitable<ReadResult> read(std::string key, ReadOptions options) override {
      const bool index_read = options.range.kind == ByteRange::Kind::suffix;
      auto got = co_await MemoryStore::read(std::move(key), std::move(options));
      if (index_read && hold.exchange(false)) {
        at_gate.set_value();
        boost::system::error_code ec;
        co_await gate.async_wait(asio::redirect_error(asio::use_awaitable, ec));
      }
      co_return got;
    }
    std::atomic<bool> hold{false};
    std::promise<void> at_gate;
    asio::steady_timer gate;
  };
  Runtime writer_rt({.codec_threads = 1}), rt({.codec_threads = 1});
  const json bytes = json::parse(R"([{"name":"bytes","configuration":{"endian":"little"}}])");
  auto store = std::make_shared<GatedStore>(rt.io_executor());
  const std::int32_t head[] = {1, 2};
  Array::create_blocking(writer_rt, store, "", meta({8}, {8}, sharding({2}, bytes)))
      .write_blocking({{0}, {2}}, std::as_bytes(std::span(head)));
  const Array a = Array::open_blocking(rt, store, "");
  store->hold = true;
  auto at_gate = store->at_gate.get_future();
  auto reader = asio::co_spawn(rt.io_executor(), a.read({{4}, {6}}), asio::use_future);
  REQUIRE(at_gate.wait_for(test::scaled(std::chrono::seconds(30))) == std::future_status::ready);
  const std::int32_t mid[] = {5, 6};
  a.write_blocking({{4}, {6}}, std::as_bytes(std::span(mid)));
  asio::post(rt.io_executor(), [&] { store->gate.cancel(); });  // after the wait began: one I/O thread
  const NdArray before = reader.get();
  CHECK(before.as<std::int32_t>()[0] == 0);  // it began before the write
  const auto after = a.read_blocking({{4}, {6}});
  CHECK(std::vector<std::int32_t>(after.as<std::int32_t>().begin(), after.as<std::int32_t>().end()) ==
        std::vector<std::int32_t>{5, 6});
}

TEST_CASE("inner chunks stored out of order are read in place only where shard and selection agree",
          "[sharding]") {
  // A shard by hand: four inner chunks of two int32 stored in the order
  // 2, 3, 0, 1, then the index. Bytes 0-15 of the shard belong at elements
  // 4-7 of the array: one coalesced range, which must not land at 0-3.
  Runtime rt({.codec_threads = 1});
  auto store = std::make_shared<test::InPlaceStore>();
  const json index_bytes = json::parse(R"([{"name":"bytes","configuration":{"endian":"little"}}])");
  auto a = Array::create_blocking(rt, store, "", meta({8}, {8}, sharding({2}, index_bytes, "end", index_bytes)));
  const auto data = iota_vec(8);
  Bytes shard(32 + 64);
  const std::uint64_t place[] = {2, 3, 0, 1};  // where inner chunk n is stored, in inner chunks
  for (std::uint64_t n = 0; n < 4; ++n) {
    std::memcpy(shard.data() + place[n] * 8, data.data() + n * 2, 8);
    const std::uint64_t entry[] = {place[n] * 8, 8};  // offset, nbytes (little-endian machine)
    std::memcpy(shard.data() + 32 + n * 16, entry, 16);
  }
  asio::co_spawn(rt.io_executor(), store->set("c/0", shard), asio::use_future).get();
  const auto whole_result = a.read_blocking(Region::all(a.shape()));
  const auto whole = whole_result.as<std::int32_t>();
  CHECK(std::vector<std::int32_t>(whole.begin(), whole.end()) == data);
  CHECK(store->in_place == 0);  // the range holds chunks 2, 3, 0, 1: not in the selection's order
  const auto tail_result = a.read_blocking({{4}, {8}});
  const auto tail = tail_result.as<std::int32_t>();
  CHECK(std::vector<std::int32_t>(tail.begin(), tail.end()) == std::vector<std::int32_t>{5, 6, 7, 8});
  CHECK(store->in_place == 1);  // chunks 2, 3: back to back in both
}

TEST_CASE("a large whole shard is read in place by one range only where its index has every inner chunk back to back in C order",
          "[sharding][regression]") {
  // Shards of 400 KB (over the engine's 256 KiB threshold for reading a
  // whole shard by its index): 100 inner chunks of 1000 int32, written by
  // hand with the index (bytes only) at the end. Shard 1 is always stored
  // in C order from offset 0; shard 0 is laid out as each section says.
  // The engine skips planning inner chunk by inner chunk only for a layout
  // where one read lands every inner chunk in its place, and must get the
  // others right by that plan (or raise), not by the one read.
  // A store that says it reads in place but answers values of their own
  // (ReadOptions::into is a request): the engine must place them itself.
  struct DecliningStore final : MemoryStore {
    bool reads_into() const override { return true; }
    std::optional<ReadResult> try_read_now(const std::string& key, const ReadOptions& options) override {
      ReadOptions plain = options;
      plain.into = {};
      return MemoryStore::try_read_now(key, plain);
    }
    void try_read_now_many(std::span<const std::string> keys, std::span<const ReadOptions> options,
                           std::span<ReadNow> out) override {
      Store::try_read_now_many(keys, options, out);  // this try_read_now per key
    }
    awaitable<ReadResult> read(std::string key, ReadOptions options) override { co_return *try_read_now(key, options); }
  };
  const int kind = GENERATE(0, 1, 2);  // in-place memory store, filesystem store, declining store
  // Requests of at most the default 16 MiB (one per shard), or of 10 inner chunks.
  const std::size_t coalesce_max = GENERATE(std::size_t{16} << 20, std::size_t{40000});
  INFO("store kind " << kind << ", coalesce_max " << coalesce_max);
  constexpr std::uint64_t kInner = 1000, kCount = 100, kBytes = kInner * 4, kMissing = ~std::uint64_t{0};
  const auto data = iota_vec(2 * kCount * kInner);
  // The shard of shard number `s` with inner chunk n at byte offset at[n]
  // (kMissing: absent) and nbytes[n] bytes long.
  const auto shard_of = [&](std::uint64_t s, const std::vector<std::uint64_t>& at, const std::vector<std::uint64_t>& nbytes) {
    std::uint64_t end = 0;
    for (std::uint64_t n = 0; n < kCount; ++n)
      if (at[n] != kMissing) end = std::max(end, at[n] + kBytes);
    Bytes shard(end + kCount * 16, std::byte{0x5a});
    for (std::uint64_t n = 0; n < kCount; ++n) {
      if (at[n] != kMissing)
        std::memcpy(shard.data() + at[n], data.data() + (s * kCount + n) * kInner, kBytes);
      const std::uint64_t entry[] = {at[n], nbytes[n]};  // little-endian machine
      std::memcpy(shard.data() + end + n * 16, entry, 16);
    }
    return shard;
  };
  std::vector<std::uint64_t> at(kCount), nbytes(kCount, kBytes);
  for (std::uint64_t n = 0; n < kCount; ++n) at[n] = n * kBytes;
  const std::vector<std::uint64_t> in_order = at;
  auto expected = data;
  std::uint64_t in_place = 2;  // one range per shard
  SECTION("in C order from offset 0") {}
  SECTION("in C order after 64 bytes of something else") {
    for (auto& x : at) x += 64;
  }
  SECTION("inner chunks 0 and 1 swapped") {
    std::swap(at[0], at[1]);
    in_place = 1;
  }
  SECTION("a gap of 8 bytes before inner chunk 50") {
    for (std::uint64_t n = 50; n < kCount; ++n) at[n] += 8;
    in_place = 1;
  }
  SECTION("inner chunk 7 absent (fill_value 0)") {
    at[7] = nbytes[7] = kMissing;
    std::fill_n(expected.begin() + 7 * kInner, kInner, 0);
    in_place = 1;
  }
  SECTION("inner chunk 3 recorded 4 bytes short, the others where C order puts them") {
    nbytes[3] = kBytes - 4;
    expected.clear();  // CorruptChunk
  }
  test::TempDir dir("sharding-in-place");
  Runtime rt({.codec_threads = 2, .coalesce_max = coalesce_max});
  std::shared_ptr<Store> store;
  if (kind == 0) store = std::make_shared<test::InPlaceStore>();
  else if (kind == 1) store = std::make_shared<FilesystemStore>(rt.io_executor(), dir.path);
  else store = std::make_shared<DecliningStore>();
  const json bytes = json::parse(R"([{"name":"bytes","configuration":{"endian":"little"}}])");
  auto a = Array::create_blocking(rt, store, "", meta({2 * kCount * kInner}, {kCount * kInner},
                                                       sharding({kInner}, bytes, "end", bytes)));
  const Bytes shard0 = shard_of(0, at, nbytes), shard1 = shard_of(1, in_order, std::vector<std::uint64_t>(kCount, kBytes));
  run(rt, store->set("c/0", shard0));
  run(rt, store->set("c/1", shard1));
  if (expected.empty()) {
    try {
      a.read_blocking(Region::all(a.shape()));
      FAIL("expected CorruptChunk");
    } catch (const CorruptChunk& e) {
      CHECK(e.key() == "c/0");
    }
    return;
  }
  const auto result = a.read_blocking(Region::all(a.shape()));
  const auto got = result.as<std::int32_t>();
  CHECK(std::vector<std::int32_t>(got.begin(), got.end()) == expected);
  if (auto* s = dynamic_cast<test::InPlaceStore*>(store.get()); s && coalesce_max > 400000)
    CHECK(s->in_place == in_place);
}

TEST_CASE("an inner chunk of the wrong size is CorruptChunk naming the shard, in whole and partial reads",
          "[sharding][errors]") {
  Runtime rt({.codec_threads = 1});
  const bool in_place = GENERATE(false, true);
  INFO("in place " << in_place);
  auto store = in_place ? std::shared_ptr<MemoryStore>(std::make_shared<test::InPlaceStore>()) : std::make_shared<test::ValueStore>();
  const json index_bytes = json::parse(R"([{"name":"bytes","configuration":{"endian":"little"}}])");
  auto a = Array::create_blocking(rt, store, "", meta({4}, {4}, sharding({4}, index_bytes, "end", index_bytes)));
  // A shard by hand: one inner chunk of 12 bytes where 4 int32 take 16;
  // the index (offset 0, nbytes 12) follows it.
  Bytes shard(12 + 16, std::byte{0});
  shard[20] = std::byte{12};
  asio::co_spawn(rt.io_executor(), store->set("c/0", shard), asio::use_future).get();
  for (const Region& r : {Region::all(a.shape()), Region{{1}, {2}}}) {
    try {
      a.read_blocking(r);
      FAIL("expected CorruptChunk");
    } catch (const CorruptChunk& e) {
      CHECK(e.key() == "c/0");
      CHECK(e.field() == "bytes");
    }
  }
}

TEST_CASE("sharded reads and writes keep codec work off the I/O thread", "[sharding][invariant]") {
  Runtime rt({.codec_threads = 2});
  auto a = Array::create_blocking(rt, std::make_shared<MemoryStore>(), "",
                                  meta({32, 32}, {16, 16}, sharding({4, 4}, kZstd)));
  const auto data = iota_vec(32 * 32);
  rt.reset_stats();
  a.write_blocking(Region::all(a.shape()), std::as_bytes(std::span(data)));
  a.write_blocking({{1, 1}, {2, 2}}, std::as_bytes(std::span(data.data(), 1)));
  a.read_blocking(Region::all(a.shape()));
  a.read_blocking({{5, 5}, {6, 6}});
  const auto s = rt.stats();
  CHECK(s.codec_calls > 0);
  CHECK(s.codec_calls_on_io_thread == 0);
}

// Records which pool thread runs each part of a split task (through the
// scheduler's test hook). With `rendezvous`, a part waits until a second
// thread has run one too (or a scaled 10 s pass): only a job whose threads
// share one task gets past it at once.
struct PartLog {
  std::mutex mu;
  std::condition_variable cv;
  std::map<std::size_t, int> parts;  // part -> times run
  std::set<std::thread::id> threads;
  bool all_on_codec_threads = true;

  explicit PartLog(Runtime& rt, bool rendezvous) : rt_(rt) {
    detail::RuntimeAccess::engine(rt).scheduler.part_hook = [this, rendezvous](const detail::ChunkTask&, std::size_t k) {
      std::unique_lock lk(mu);
      ++parts[k];
      threads.insert(std::this_thread::get_id());
      all_on_codec_threads = all_on_codec_threads && rt_.on_codec_thread() && !rt_.on_io_thread();
      cv.notify_all();
      if (rendezvous) cv.wait_for(lk, test::scaled(std::chrono::milliseconds(10000)), [&] { return threads.size() > 1; });
    };
  }
  ~PartLog() { detail::RuntimeAccess::engine(rt_).scheduler.part_hook = nullptr; }

 private:
  Runtime& rt_;
};

TEST_CASE("one shard's inner chunks are decoded on every pool thread, in one pool submission", "[sharding][invariant]") {
  Runtime rt({.codec_threads = 2});
  // One shard of 4 inner chunks of 128x128 int32 (64 KiB each): it splits into 4 parts.
  auto a = Array::create_blocking(rt, std::make_shared<MemoryStore>(), "",
                                  meta({4, 128, 128}, {4, 128, 128}, sharding({1, 128, 128}, kZstd)));
  const auto data = iota_vec(4 * 128 * 128);
  a.write_blocking(Region::all(a.shape()), std::as_bytes(std::span(data)));
  {
    PartLog log(rt, true);
    rt.reset_stats();
    std::vector<std::int32_t> back(data.size());
    a.read_blocking(Region::all(a.shape()), std::as_writable_bytes(std::span(back)));
    CHECK(back == data);  // bit-exact
    const auto s = rt.stats();
    CHECK(s.pool_submissions == 1);
    CHECK(s.chunks == 1);  // one shard
    CHECK(s.codec_calls_on_io_thread == 0);
    CHECK(log.parts == std::map<std::size_t, int>{{0, 1}, {1, 1}, {2, 1}, {3, 1}});  // each inner chunk once
    CHECK(log.threads.size() == 2);  // by both pool threads
    CHECK(log.all_on_codec_threads);
  }
  {
    // A partial read of the same shard (index, then the inner chunks by range) splits too.
    PartLog log(rt, false);
    const Region r{{0, 3, 5}, {4, 120, 127}};
    const auto part = a.read_blocking(r);
    const auto got = part.as<std::int32_t>();
    std::size_t n = 0, bad = 0;
    for (std::uint64_t i = 0; i < 4; ++i)
      for (std::uint64_t j = 3; j < 120; ++j)
        for (std::uint64_t k = 5; k < 127; ++k) bad += got[n++] != data[(i * 128 + j) * 128 + k];
    CHECK(n == got.size());
    CHECK(bad == 0);
    CHECK(log.parts.size() == 4);
    CHECK(log.all_on_codec_threads);
  }
  {
    // A corrupt inner chunk fails the read with the shard's key, the others decode.
    auto store = std::make_shared<MemoryStore>();
    auto b = Array::create_blocking(rt, store, "", meta({4, 128, 128}, {4, 128, 128}, sharding({1, 128, 128}, kCrc)));
    b.write_blocking(Region::all(b.shape()), std::as_bytes(std::span(data)));
    Bytes shard = *run(rt, store->get("c/0/0/0"));
    const std::uint64_t index_bytes = 4 * 16 + 4;
    const std::uint64_t off2 = u64(shard, shard.size() - index_bytes + 2 * 16);
    const std::uint64_t len2 = u64(shard, shard.size() - index_bytes + 2 * 16 + 8);
    shard[off2 + len2 - 1] ^= std::byte{0xff};  // inner chunk 2's crc32c
    run(rt, store->set("c/0/0/0", shard));
    try {
      b.read_blocking(Region::all(b.shape()));
      FAIL("expected CorruptChunk");
    } catch (const CorruptChunk& e) {
      CHECK(e.key() == "c/0/0/0");
    }
  }
}

TEST_CASE("a compressor in index_codecs is rejected (b16)", "[sharding][regression]") {
  Runtime rt({.codec_threads = 1});
  const json bad = sharding({2}, kZstd, "end", kZstd);
  try {
    Array::create_blocking(rt, std::make_shared<MemoryStore>(), "", meta({4}, {4}, bad));
    FAIL("expected InvalidMetadata");
  } catch (const InvalidMetadata& e) {
    CHECK(e.field().find("index_codecs") != std::string::npos);
  }
  CHECK_THROWS_AS(Array::create_blocking(rt, std::make_shared<MemoryStore>(), "",
                                         meta({6}, {6}, sharding({4}, kZstd))),
                  InvalidMetadata);  // shard shape not divisible by the inner chunk shape
}

TEST_CASE("sharding chunk_shape given as signed JSON integers is accepted", "[sharding][regression]") {
  Runtime rt({.codec_threads = 1});
  json codecs = sharding({2}, kCrc);
  codecs[0]["configuration"]["chunk_shape"] = json::array({2, 2});  // int literals: signed JSON integers
  auto a = Array::create_blocking(rt, std::make_shared<MemoryStore>(), "", meta({4, 4}, {4, 4}, codecs));
  const auto v = iota_vec(16);
  a.write_blocking(Region::all(a.shape()), std::as_bytes(std::span(v)));
  const auto back = a.read_blocking(Region::parse("2:4,0:2", a.shape()));
  CHECK(std::vector<std::int32_t>(back.as<std::int32_t>().begin(), back.as<std::int32_t>().end()) ==
        std::vector<std::int32_t>{9, 10, 13, 14});
  codecs[0]["configuration"]["chunk_shape"] = json::array({2, -2});
  CHECK_THROWS_AS(Array::create_blocking(rt, std::make_shared<MemoryStore>(), "", meta({4, 4}, {4, 4}, codecs)),
                  InvalidMetadata);
}

TEST_CASE("8 writers x 1000 single-element writes into one shard lose no update", "[sharding][concurrency]") {
  const bool on_disk = GENERATE(false, true);
  Runtime rt({.codec_threads = 2});
  const auto dir = std::filesystem::temp_directory_path() / ("zarrcoro-shard-stress-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::shared_ptr<Store> store = on_disk ? std::shared_ptr<Store>(std::make_shared<FilesystemStore>(rt.io_executor(), dir))
                                         : std::make_shared<MemoryStore>();
  auto a = Array::create_blocking(rt, store, "", meta({8000}, {8000}, sharding({500}, kZstd)));
  std::vector<std::thread> writers;
  for (int t = 0; t < 8; ++t) {
    writers.emplace_back([&, t] {
      for (std::uint64_t k = 0; k < 1000; ++k) {
        const std::uint64_t i = k * 8 + static_cast<std::uint64_t>(t);
        const auto v = static_cast<std::int32_t>(i + 1);
        a.write_blocking({{i}, {i + 1}}, std::as_bytes(std::span(&v, 1)));
      }
    });
  }
  for (auto& w : writers) w.join();
  const auto r = Array::open_blocking(rt, store, "").read_blocking(Region::all({8000}));
  const auto expect = iota_vec(8000);
  CHECK(std::equal(expect.begin(), expect.end(), r.as<std::int32_t>().begin()));
  std::filesystem::remove_all(dir);
}
