// Resize and append: shapes, the chunks kept and erased, fill after
// shrinking and growing again (B28), v2 and v3, sharded, and the errors.
#include <numeric>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/use_future.hpp>
#include <catch2/catch.hpp>

#include <zarrcoro/array.hpp>
#include <zarrcoro/error.hpp>
#include <zarrcoro/runtime.hpp>
#include <zarrcoro/store/counting.hpp>
#include <zarrcoro/store/memory.hpp>

#include "support.hpp"

using namespace zarrcoro;
using nlohmann::json;
namespace asio = boost::asio;

namespace {

const char* kZstd = R"([{"name":"bytes","configuration":{"endian":"little"}},{"name":"zstd","configuration":{"level":1}}])";
const char* kSharded = R"([{"name":"sharding_indexed","configuration":{"chunk_shape":[2,2],
  "codecs":[{"name":"bytes","configuration":{"endian":"little"}}],
  "index_codecs":[{"name":"bytes","configuration":{"endian":"little"}},{"name":"crc32c"}]}}])";

ArrayMetadata meta(std::vector<std::uint64_t> shape, std::vector<std::uint64_t> chunks, int zarr_format,
                   const char* codecs = kZstd) {
  ArrayMetadata m;
  m.shape = std::move(shape);
  m.chunk_shape = std::move(chunks);
  m.data_type = DataTypeKind::int32;
  const std::int32_t fill = -1;
  m.fill_value = to_bytes(std::as_bytes(std::span(&fill, 1)));
  m.codecs = json::parse(codecs);
  if (zarr_format == 2) {
    m.zarr_format = 2;
    m.chunk_key_encoding = {ChunkKeyEncoding::Kind::v2, '.'};
  }
  return m;
}

std::vector<std::int32_t> values(const NdArray& a) { return {a.as<std::int32_t>().begin(), a.as<std::int32_t>().end()}; }

std::vector<std::string> keys(Runtime& rt, const std::shared_ptr<Store>& s, const std::string& prefix) {
  return asio::co_spawn(rt.io_executor(), s->list(prefix), asio::use_future).get();
}

// 6x6 of 10 * row + column, chunks 4x4.
Array six_by_six(Runtime& rt, const std::shared_ptr<Store>& store, int zarr_format, const char* codecs = kZstd) {
  const auto a = Array::create_blocking(rt, store, "a", meta({6, 6}, {4, 4}, zarr_format, codecs));
  std::vector<std::int32_t> v(36);
  for (int i = 0; i < 36; ++i) v[i] = 10 * (i / 6) + i % 6;
  a.write_blocking(Region::all({6, 6}), std::as_bytes(std::span(v)));
  return a;
}

}  // namespace

TEST_CASE("b28: a shrunk array grown again reads fill where the cut data was, v2 and v3, sharded too") {
  const int zarr_format = GENERATE(2, 3);
  const bool sharded = GENERATE(false, true);
  if (sharded && zarr_format == 2) return;
  CAPTURE(zarr_format, sharded);
  Runtime rt;
  auto store = std::make_shared<MemoryStore>();
  const auto a = six_by_six(rt, store, zarr_format, sharded ? kSharded : kZstd);
  const auto small = a.resize_blocking({3, 5});
  CHECK(small.shape() == std::vector<std::uint64_t>{3, 5});
  CHECK(values(small.read_blocking(Region::all({3, 5}))) ==
        std::vector<std::int32_t>{0, 1, 2, 3, 4, 10, 11, 12, 13, 14, 20, 21, 22, 23, 24});
  // Opened anew: the stored shape is the new one.
  CHECK(Array::open_blocking(rt, store, "a").shape() == std::vector<std::uint64_t>{3, 5});
  const auto big = small.resize_blocking({6, 6});
  CHECK(values(big.read_blocking(Region::all({6, 6}))) ==
        std::vector<std::int32_t>{0,  1,  2,  3,  4,  -1, 10, 11, 12, 13, 14, -1, 20, 21, 22, 23, 24, -1,
                                  -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1});
}

TEST_CASE("resize: shrinking erases the chunks wholly outside the new shape, growing writes only metadata") {
  Runtime rt;
  auto store = std::make_shared<MemoryStore>();
  const auto a = six_by_six(rt, store, 3);
  CHECK(keys(rt, store, "a/c/") == std::vector<std::string>{"a/c/0/0", "a/c/0/1", "a/c/1/0", "a/c/1/1"});
  const auto b = a.resize_blocking({4, 6});  // the chunk row 1 is wholly outside
  CHECK(keys(rt, store, "a/c/") == std::vector<std::string>{"a/c/0/0", "a/c/0/1"});
  const auto c = b.resize_blocking({9, 7});
  CHECK(keys(rt, store, "a/c/") == std::vector<std::string>{"a/c/0/0", "a/c/0/1"});
  const auto all = values(c.read_blocking(Region::all({9, 7})));
  CHECK(all[0 * 7 + 5] == 5);
  CHECK(all[3 * 7 + 5] == 35);
  CHECK(all[3 * 7 + 6] == -1);
  CHECK(all[4 * 7 + 0] == -1);
  CHECK(all[8 * 7 + 6] == -1);
  const auto empty = c.resize_blocking({0, 7});
  CHECK(keys(rt, store, "a/c/").empty());
  CHECK(empty.read_blocking(Region::all({0, 7})).data.empty());
}

TEST_CASE("append grows one axis and writes the data there, v2 and v3") {
  const int zarr_format = GENERATE(2, 3);
  CAPTURE(zarr_format);
  Runtime rt;
  auto store = std::make_shared<MemoryStore>();
  auto a = six_by_six(rt, store, zarr_format);
  const std::vector<std::int32_t> rows{100, 101, 102, 103, 104, 105};
  a = a.append_blocking(std::as_bytes(std::span(rows)), {1, 6}, 0);
  CHECK(a.shape() == std::vector<std::uint64_t>{7, 6});
  CHECK(values(a.read_blocking(Region{{5, 0}, {7, 6}})) ==
        std::vector<std::int32_t>{50, 51, 52, 53, 54, 55, 100, 101, 102, 103, 104, 105});
  const std::vector<std::int32_t> column{-7, -8, -9, -10, -11, -12, -13};
  a = asio::co_spawn(rt.io_executor(), a.append(std::as_bytes(std::span(column)), {7, 1}, 1), asio::use_future).get();
  CHECK(Array::open_blocking(rt, store, "a").shape() == std::vector<std::uint64_t>{7, 7});
  CHECK(values(a.read_blocking(Region{{0, 6}, {7, 7}})) == column);
  CHECK(values(a.read_blocking(Region{{6, 0}, {7, 7}})) ==
        std::vector<std::int32_t>{100, 101, 102, 103, 104, 105, -13});
}

TEST_CASE("resize and append refuse what does not fit, before changing anything") {
  Runtime rt;
  auto store = std::make_shared<MemoryStore>();
  const auto a = six_by_six(rt, store, 3);
  CHECK_THROWS_AS(a.resize_blocking({6}), InvalidArgument);
  const std::vector<std::int32_t> row{1, 2, 3, 4, 5, 6};
  CHECK_THROWS_AS(a.append_blocking(std::as_bytes(std::span(row)), {1, 6}, 2), InvalidArgument);     // axis
  CHECK_THROWS_AS(a.append_blocking(std::as_bytes(std::span(row)), {1, 5}, 0), InvalidArgument);     // extent
  CHECK_THROWS_AS(a.append_blocking(std::as_bytes(std::span(row)), {2, 6}, 0), InvalidArgument);     // buffer
  CHECK_THROWS_AS(a.append_blocking(std::as_bytes(std::span(row)), {1, 6, 1}, 0), InvalidArgument);  // rank
  CHECK(Array::open_blocking(rt, store, "a").shape() == std::vector<std::uint64_t>{6, 6});
}

TEST_CASE("resize: shrinking one axis while growing another erases only old chunks outside, each once") {
  Runtime rt;
  auto memory = std::make_shared<MemoryStore>();
  auto counting = std::make_shared<CountingStore>(memory);
  const auto a = six_by_six(rt, counting, 3);
  counting->reset();
  const auto b = a.resize_blocking({1000000, 3});  // rows grow, columns shrink to chunk column 0
  CHECK(counting->counts().erases == 2);            // chunks (0, 1) and (1, 1)
  CHECK(keys(rt, memory, "a/c/") == std::vector<std::string>{"a/c/0/0", "a/c/1/0"});
  CHECK(values(b.read_blocking(Region{{4, 0}, {7, 3}})) ==
        std::vector<std::int32_t>{40, 41, 42, 50, 51, 52, -1, -1, -1});
}

TEST_CASE("resize: thousands of chunks outside are erased in batches") {
  Runtime rt;
  auto memory = std::make_shared<MemoryStore>();
  auto counting = std::make_shared<CountingStore>(memory);
  ArrayMetadata m = meta({5000}, {1}, 3);
  const auto a = Array::create_blocking(rt, counting, "a", m);
  counting->reset();
  CHECK(a.resize_blocking({0}).shape() == std::vector<std::uint64_t>{0});
  CHECK(counting->counts().erases == 5000);  // 4096 + 904, every chunk once
}

namespace {
// A memory store where another writer replaces `key` with `replacement`
// right after the next full read of it: between a read-modify-write's read
// and its write, as another process can.
struct RacingStore : MemoryStore {
  std::string key;
  std::optional<Bytes> replacement;
  awaitable<ReadResult> read(std::string k, ReadOptions options) override {
    auto r = co_await MemoryStore::read(k, options);
    if (replacement && k == key && options.range.kind == ByteRange::Kind::full) {
      Bytes next = std::move(*replacement);
      replacement.reset();
      co_await set(std::move(k), std::move(next));
    }
    co_return r;
  }
};

Bytes text_bytes(const std::string& s) {
  return Bytes(reinterpret_cast<const std::byte*>(s.data()), reinterpret_cast<const std::byte*>(s.data()) + s.size());
}
}  // namespace

TEST_CASE("set_attributes and resize from a handle whose array another writer changed between their read and their "
          "write raise InvalidArgument and write nothing (was: the stale metadata written back over it)",
          "[regression]") {
  const int format = GENERATE(2, 3);
  CAPTURE(format);
  Runtime rt;
  auto store = std::make_shared<RacingStore>();
  const Array a = Array::create_blocking(rt, store, "a", meta({8}, {4}, format));
  const std::string key = format == 2 ? "a/.zarray" : "a/zarr.json";
  // Another writer grows the array to 16 (its document, as it would store it).
  ArrayMetadata grown = a.metadata();
  grown.shape = {16};
  const std::string grown_doc = format == 2 ? grown.to_v2_json(key).dump() : grown.to_json().dump();
  const auto stored_shape = [&] { return Array::open_blocking(rt, store, "a").shape(); };

  store->key = key;
  store->replacement = text_bytes(grown_doc);
  CHECK_THROWS_AS(a.resize_blocking({4}), InvalidArgument);
  CHECK(stored_shape() == std::vector<std::uint64_t>{16});
  if (format == 3) {  // v2 attributes live in .zattrs, apart from the shape
    store->replacement = text_bytes(grown_doc);
    CHECK_THROWS_AS(a.set_attributes_blocking(json{{"k", 1}}), InvalidArgument);
    CHECK(stored_shape() == std::vector<std::uint64_t>{16});
    CHECK(Array::open_blocking(rt, store, "a").metadata().attributes.empty());
  } else {  // another writer sets the attributes in between
    const Array fresh = Array::open_blocking(rt, store, "a");
    store->key = "a/.zattrs";
    store->replacement = text_bytes(R"({"theirs": 2})");
    CHECK_THROWS_AS(fresh.set_attributes_blocking(json{{"mine", 1}}), InvalidArgument);
    CHECK(Array::open_blocking(rt, store, "a").metadata().attributes == json{{"theirs", 2}});
  }
  // Reopened, the handle is current and both succeed.
  const Array b = Array::open_blocking(rt, store, "a").set_attributes_blocking(json{{"k", 2}}).resize_blocking({12});
  CHECK(stored_shape() == std::vector<std::uint64_t>{12});
  CHECK(Array::open_blocking(rt, store, "a").metadata().attributes == json{{"k", 2}});
}
