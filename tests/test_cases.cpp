// Regression cases from public bug reports in other Zarr engines
// (shared/cases/CASES.md), v3 part: each reads the stored input and checks
// the expected values written here.
#include <bit>
#include <cmath>
#include <cstring>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/use_future.hpp>
#include <catch2/catch.hpp>

#include <zarrcoro/array.hpp>
#include <zarrcoro/error.hpp>
#include <zarrcoro/runtime.hpp>
#include <zarrcoro/store/filesystem.hpp>
#include <zarrcoro/store/memory.hpp>

#include "support.hpp"

using namespace zarrcoro;
namespace fs = std::filesystem;

namespace {

struct Case {
  Runtime rt{{.codec_threads = 2}};
  std::shared_ptr<FilesystemStore> store;
  explicit Case(const fs::path& cases) : store(std::make_shared<FilesystemStore>(rt.io_executor(), cases)) {}
  NdArray read(const std::string& name) {
    auto a = Array::open_blocking(rt, store, name);
    return a.read_blocking(Region::all(a.shape()));
  }
};

template <class T>
std::vector<T> values(const NdArray& a) {
  auto s = a.as<T>();
  return {s.begin(), s.end()};
}

}  // namespace

TEST_CASE("b03: NaN and -Infinity fill values read as such, not 0", "[cases][regression]") {
  ZARRCORO_REQUIRE_SHARED(shared);
  Case c(shared / "cases");
  const auto nan = c.read("b03_nan");
  REQUIRE(nan.shape == std::vector<std::uint64_t>{2, 3});
  for (float v : nan.as<float>()) CHECK(std::isnan(v));
  CHECK(values<double>(c.read("b03_ninf")) == std::vector<double>{-INFINITY, -INFINITY});
}

TEST_CASE("b05: complex128 fill [1.0, -2.0]", "[cases][regression]") {
  ZARRCORO_REQUIRE_SHARED(shared);
  Case c(shared / "cases");
  const auto a = c.read("b05_complex");
  CHECK(test::to_hex(a.data) ==
        "00 00 00 00 00 00 f0 3f 00 00 00 00 00 00 00 c0 00 00 00 00 00 00 f0 3f 00 00 00 00 00 00 00 c0");
}

TEST_CASE("b06: bool array with fill false", "[cases][regression]") {
  ZARRCORO_REQUIRE_SHARED(shared);
  Case c(shared / "cases");
  CHECK(test::to_hex(c.read("b06_bool").data) == "01 00 01 00 00 00");
}

TEST_CASE("b09: default chunk key encoding with '.' separator", "[cases][regression]") {
  ZARRCORO_REQUIRE_SHARED(shared);
  Case c(shared / "cases");
  const auto a = c.read("b09_dot");
  std::vector<std::uint8_t> want(16, 0);
  for (int r : {2, 3})
    for (int col : {0, 1}) want[r * 4 + col] = 9;
  CHECK(values<std::uint8_t>(a) == want);
  // Written keys use the same encoding.
  auto store = std::make_shared<MemoryStore>();
  auto meta = Array::open_blocking(c.rt, c.store, "b09_dot").metadata();
  auto w = Array::create_blocking(c.rt, store, "", meta);
  w.write_blocking(Region::all(w.shape()), a.data);
  auto keys = boost::asio::co_spawn(c.rt.io_executor(), store->list("c"), boost::asio::use_future).get();
  CHECK(keys == std::vector<std::string>{"c.1.0"});
}

TEST_CASE("b12: expected state after a partial write into edge chunks", "[cases][regression]") {
  ZARRCORO_REQUIRE_SHARED(shared);
  Case c(shared / "cases");
  CHECK(values<std::int32_t>(c.read("b12_edge")) == std::vector<std::int32_t>{0, 0, 0, 0, 0, 0, 0, 7, 8, 9});
}

TEST_CASE("b14: 0-d array reads 42", "[cases][regression]") {
  ZARRCORO_REQUIRE_SHARED(shared);
  Case c(shared / "cases");
  CHECK(values<float>(c.read("b14_0d")) == std::vector<float>{42.0f});
}

TEST_CASE("b20: zstd frame without a content size decodes", "[cases][regression]") {
  ZARRCORO_REQUIRE_SHARED(shared);
  Case c(shared / "cases");
  const auto a = c.read("b20_zstd");
  CHECK(std::string(reinterpret_cast<const char*>(a.data.data()), a.data.size()) == "Hello World!");
}

TEST_CASE("b21: gzip reads RFC 1952; a zlib stream labelled gzip is a clear error", "[cases][regression]") {
  ZARRCORO_REQUIRE_SHARED(shared);
  Case c(shared / "cases");
  CHECK(test::to_hex(c.read("b21_gzip").data) == "00 01 02 03");
  try {
    c.read("b21_zlib_as_gzip");
    FAIL("expected CorruptChunk");
  } catch (const CorruptChunk& e) {
    CHECK(e.key() == "b21_zlib_as_gzip/c/0");
    CHECK(e.field() == "gzip");
  }
}

TEST_CASE("b23: transpose decodes with the inverse order", "[cases][regression]") {
  ZARRCORO_REQUIRE_SHARED(shared);
  Case c(shared / "cases");
  const auto a = c.read("b23_transpose");
  REQUIRE(a.shape == std::vector<std::uint64_t>{2, 3, 2});
  std::vector<std::uint8_t> want(12);
  for (int i = 0; i < 12; ++i) want[i] = static_cast<std::uint8_t>(i);
  CHECK(values<std::uint8_t>(a) == want);
  // Encoding arange(12) gives exactly the stored bytes.
  auto store = std::make_shared<MemoryStore>();
  auto w = Array::create_blocking(c.rt, store, "", Array::open_blocking(c.rt, c.store, "b23_transpose").metadata());
  w.write_blocking(Region::all(w.shape()), a.data);
  auto chunk = boost::asio::co_spawn(c.rt.io_executor(), store->get("c/0/0/0"), boost::asio::use_future).get();
  CHECK(test::to_hex(*chunk) == "00 06 01 07 02 08 03 09 04 0a 05 0b");
}

TEST_CASE("b25: must_understand false is ignored, true and plain unknown fields fail", "[cases][regression]") {
  ZARRCORO_REQUIRE_SHARED(shared);
  Case c(shared / "cases");
  CHECK(c.read("b25_mu_false").data.size() == 2);
  for (const char* name : {"b25_mu_true", "b25_plain_unknown"}) {
    try {
      Array::open_blocking(c.rt, c.store, name);
      FAIL("expected UnsupportedError for " << name);
    } catch (const UnsupportedError& e) {
      CHECK(e.field() == "my_ext");
      CHECK(std::string(e.what()).find("my_ext") != std::string::npos);
    }
  }
}

TEST_CASE("b14: sharded 0-d array reads 42 and writes the same 24 bytes", "[cases][regression][sharding]") {
  ZARRCORO_REQUIRE_SHARED(shared);
  Case c(shared / "cases");
  CHECK(values<float>(c.read("b14_0d_sharded")) == std::vector<float>{42.0f});
  auto store = std::make_shared<MemoryStore>();
  auto w = Array::create_blocking(c.rt, store, "", Array::open_blocking(c.rt, c.store, "b14_0d_sharded").metadata());
  const float v = 42.0f;
  w.write_blocking(Region::all({}), std::as_bytes(std::span(&v, 1)));
  auto shard = boost::asio::co_spawn(c.rt.io_executor(), store->get("c"), boost::asio::use_future).get();
  CHECK(test::to_hex(*shard) ==
        "00 00 28 42 00 00 00 00 00 00 00 00 04 00 00 00 00 00 00 00 87 18 6d 63");
}

TEST_CASE("b16: shard index length follows index_codecs (no crc32c: 32 bytes)", "[cases][regression][sharding]") {
  ZARRCORO_REQUIRE_SHARED(shared);
  Case c(shared / "cases");
  CHECK(values<std::uint8_t>(c.read("b16_nocrc")) == std::vector<std::uint8_t>{1, 2, 3, 4});
}
