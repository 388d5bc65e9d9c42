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

// ---- hostile input -----------------------------------------------------------

TEST_CASE("b34: element counts that overflow 64 bits are refused, never wrapped", "[cases][regression][hostile]") {
  ZARRCORO_REQUIRE_SHARED(shared);
  Case c(shared / "cases");

  // A shape of 2^96 elements opens; a small region of it reads the fill
  // value; the whole array fails at once, before any allocation.
  auto huge = Array::open_blocking(c.rt, c.store, "b34_shape_2p96");
  const auto part = huge.read_blocking(Region::parse("0:2,0:2,4294967295:4294967296", huge.shape()));
  CHECK(part.shape == std::vector<std::uint64_t>{2, 2, 1});
  CHECK(values<std::uint8_t>(part) == std::vector<std::uint8_t>{7, 7, 7, 7});
  CHECK(huge.metadata().grid_shape() ==
        std::vector<std::uint64_t>{std::uint64_t{1} << 32, std::uint64_t{1} << 32, std::uint64_t{1} << 32});
  try {
    huge.read_blocking(Region::all(huge.shape()));
    FAIL("a read of 2^96 elements did not fail");
  } catch (const InvalidArgument& e) {
    CHECK(e.field() == "region");
    CHECK_THAT(e.what(), Catch::Contains("64 bits"));
  }
  std::byte one{};
  CHECK_THROWS_AS(huge.read_blocking(Region::all(huge.shape()), MutableByteSpan(&one, 1)), InvalidArgument);
  CHECK_THROWS_AS(huge.write_blocking(Region::all(huge.shape()), ByteSpan(&one, 1)), InvalidArgument);
  // 2^33 x 2^31 x 1 = 2^64 elements: wraps to 0 unchecked.
  Region wraps{{0, 0, 0}, {std::uint64_t{1} << 33, std::uint64_t{1} << 31, 1}};
  CHECK_THROWS_AS(huge.read_blocking(wraps, MutableByteSpan()), InvalidArgument);

  // A chunk shape whose element count wraps is refused when the metadata is
  // read, naming chunk_grid, whatever the chunk holds.
  for (const char* name : {"b34_chunk_2p64", "b34_chunk_2p64_empty", "b34_chunk_2p64_missing", "b34_chunk_wrap2"}) {
    INFO(name);
    try {
      (void)Array::open_blocking(c.rt, c.store, name);
      FAIL("opened");
    } catch (const InvalidMetadata& e) {
      CHECK(e.key() == std::string(name) + "/zarr.json");
      CHECK(e.field() == "chunk_grid.configuration.chunk_shape");
    }
  }
  // Shapes that are not 64-bit non-negative integers.
  for (const char* name : {"b34_shape_2p64", "b34_shape_neg", "b34_shape_frac"}) {
    INFO(name);
    try {
      (void)Array::open_blocking(c.rt, c.store, name);
      FAIL("opened");
    } catch (const InvalidMetadata& e) {
      CHECK(e.field() == "shape");
    }
  }
}

TEST_CASE("b34: a chunk larger than max_chunk_bytes is refused at open and at create", "[cases][regression][hostile]") {
  Runtime rt({.codec_threads = 1, .max_chunk_bytes = 1 << 20});
  auto store = std::make_shared<MemoryStore>();
  ArrayMetadata m;
  m.shape = {10};
  m.chunk_shape = {(1 << 20) / 4 + 1};
  m.data_type = DataTypeKind::int32;
  try {
    (void)Array::create_blocking(rt, store, "a", m);
    FAIL("created");
  } catch (const UnsupportedError& e) {
    CHECK(e.field() == "chunk_grid.configuration.chunk_shape");
    CHECK_THAT(e.what(), Catch::Contains("max_chunk_bytes"));
  }
  m.chunk_shape = {(1 << 20) / 4};
  CHECK_NOTHROW(Array::create_blocking(rt, store, "a", m));
  // A shard index of 2^20 entries (16 MiB) is over the limit too.
  m.shape = {1 << 20};
  m.chunk_shape = {1 << 18};
  m.codecs = nlohmann::json::parse(R"([{"name":"sharding_indexed","configuration":{"chunk_shape":[1],
      "codecs":[{"name":"bytes","configuration":{"endian":"little"}}]}}])");
  Runtime small({.codec_threads = 1, .max_chunk_bytes = 1 << 20});
  CHECK_THROWS_AS(Array::create_blocking(small, store, "s", m), UnsupportedError);
}

TEST_CASE("b43: empty and out-of-range region syntax", "[cases][regression][hostile]") {
  ZARRCORO_REQUIRE_SHARED(shared);
  Case c(shared / "cases");
  auto a = Array::open_blocking(c.rt, c.store, "b43_regions");  // uint8 [4,6] = arange(24)
  REQUIRE(a.shape() == std::vector<std::uint64_t>{4, 6});
  const auto cols = a.read_blocking(Region::parse(",0:2", a.shape()));
  CHECK(cols.shape == std::vector<std::uint64_t>{4, 2});
  CHECK(values<std::uint8_t>(cols) == std::vector<std::uint8_t>{0, 1, 6, 7, 12, 13, 18, 19});
  const auto whole = a.read_blocking(Region::parse(",", a.shape()));
  CHECK(whole.shape == std::vector<std::uint64_t>{4, 6});
  CHECK(whole.as<std::uint8_t>()[23] == 23);
  CHECK(values<std::uint8_t>(a.read_blocking(Region::parse("2,:3", a.shape()))) == std::vector<std::uint8_t>{12, 13, 14});
  CHECK(values<std::uint8_t>(a.read_blocking(Region::parse("3:,4:", a.shape()))) == std::vector<std::uint8_t>{22, 23});
  for (const char* bad : {"0:5,0:6", "18446744073709551615,0:6", "0:18446744073709551616,0:6", "-1:4,0:6",
                          "3:1,0:6", "0:2", "0:2,0:2,0:2", "4,0:6", "x,0:6", "1:2:3,0:6"}) {
    INFO(bad);
    try {
      (void)Region::parse(bad, a.shape());
      FAIL("accepted");
    } catch (const InvalidArgument& e) {
      CHECK(e.field() == "region");
    }
  }
}

TEST_CASE("hostile metadata: typed errors naming the field, never a JSON library exception", "[hostile]") {
  Runtime rt({.codec_threads = 1});
  auto store = std::make_shared<MemoryStore>();
  const std::string base = R"({"zarr_format":3,"node_type":"array","shape":[4],"data_type":"uint8",
    "chunk_grid":{"name":"regular","configuration":{"chunk_shape":[2]}},
    "chunk_key_encoding":{"name":"default"},"fill_value":0,
    "codecs":[{"name":"bytes"}]})";
  auto put = [&](const std::string& path, const std::string& doc) {
    Bytes value(reinterpret_cast<const std::byte*>(doc.data()), reinterpret_cast<const std::byte*>(doc.data()) + doc.size());
    boost::asio::co_spawn(rt.io_executor(), store->set(path + "/zarr.json", std::move(value)), boost::asio::use_future).get();
  };
  auto replaced = [&](const std::string& from, const std::string& to) {
    std::string doc = base;
    const auto at = doc.find(from);
    REQUIRE(at != std::string::npos);
    return doc.replace(at, from.size(), to);
  };
  auto open_error = [&](const std::string& path) -> std::pair<Errc, std::string> {
    try {
      (void)Array::open_blocking(rt, store, path);
    } catch (const Error& e) {
      return {e.code(), e.field()};
    }
    return {Errc::cancelled, "opened"};
  };
  put("ok", base);
  CHECK_NOTHROW(Array::open_blocking(rt, store, "ok"));

  put("number", replaced("\"fill_value\":0", "\"fill_value\":7E777"));
  CHECK(open_error("number") == std::pair<Errc, std::string>{Errc::invalid_metadata, ""});
  put("grid_name", replaced("\"name\":\"regular\"", "\"name\":5"));
  CHECK(open_error("grid_name") == std::pair<Errc, std::string>{Errc::invalid_metadata, "chunk_grid"});
  put("key_encoding", replaced("{\"name\":\"default\"}", "{\"name\":\"default\",\"configuration\":{\"separator\":7}}"));
  CHECK(open_error("key_encoding").first == Errc::invalid_metadata);
  CHECK(open_error("key_encoding").second.rfind("chunk_key_encoding", 0) == 0);
  put("codec_config", replaced("{\"name\":\"bytes\"}", "{\"name\":\"bytes\",\"configuration\":{\"endian\":5}}"));
  CHECK(open_error("codec_config").first == Errc::invalid_metadata);
  CHECK(open_error("codec_config").second.rfind("codecs[0]", 0) == 0);
  put("zstd_level", replaced("{\"name\":\"bytes\"}", "{\"name\":\"bytes\"},{\"name\":\"zstd\",\"configuration\":{\"level\":\"x\"}}"));
  CHECK(open_error("zstd_level").first == Errc::invalid_metadata);
  CHECK(open_error("zstd_level").second.rfind("codecs[1]", 0) == 0);
  put("utf8", base.substr(0, base.size() - 1) + ",\"attributes\":{\"a\":\"\xff\xfe\"}}");
  CHECK(open_error("utf8") == std::pair<Errc, std::string>{Errc::invalid_metadata, ""});
  put("dtype_len", replaced("\"data_type\":\"uint8\"",
                            "\"data_type\":{\"name\":\"fixed_length_utf32\",\"configuration\":{\"length_bytes\":399999996}}"));
  CHECK(open_error("dtype_len") == std::pair<Errc, std::string>{Errc::invalid_metadata, "data_type.configuration.length_bytes"});
  // A 25-byte v2 dtype declaring a 400 MB element: refused before any allocation.
  const std::string zarray = R"({"zarr_format":2,"shape":[4],"chunks":[2],"dtype":"<U99999999","compressor":null,
    "fill_value":null,"order":"C","filters":null})";
  Bytes zb(reinterpret_cast<const std::byte*>(zarray.data()), reinterpret_cast<const std::byte*>(zarray.data()) + zarray.size());
  boost::asio::co_spawn(rt.io_executor(), store->set("v2u/.zarray", std::move(zb)), boost::asio::use_future).get();
  CHECK(open_error("v2u") == std::pair<Errc, std::string>{Errc::invalid_metadata, "dtype"});

  // Attributes nested deeper than kMaxJsonDepth: refused, no stack overflow.
  for (std::size_t depth : {std::size_t{10000}, std::size_t{1000000}}) {
    INFO(depth);
    const std::string deep = std::string(depth, '[') + std::string(depth, ']');
    put("deep", base.substr(0, base.size() - 1) + ",\"attributes\":{\"a\":" + deep + "}}");
    try {
      (void)Array::open_blocking(rt, store, "deep");
      FAIL("opened");
    } catch (const InvalidMetadata& e) {
      CHECK_THAT(e.what(), Catch::Contains("nested deeper"));
    }
  }
  const std::string ok_depth = std::string(kMaxJsonDepth - 2, '[') + std::string(kMaxJsonDepth - 2, ']');
  put("deep_ok", base.substr(0, base.size() - 1) + ",\"attributes\":{\"a\":" + ok_depth + "}}");
  CHECK_NOTHROW(Array::open_blocking(rt, store, "deep_ok"));
}

TEST_CASE("fuzz regressions: integral float fills at 2^63 and 2^64, groups with mistyped members, are typed errors",
          "[hostile][regression]") {
  // Found by tests/fuzz (fuzz_fill_value, fuzz_metadata_v3): converting 2^63
  // to int64 was undefined behaviour; a non-string node_type threw a JSON
  // library exception.
  CHECK_THROWS_AS(parse_fill_value(nlohmann::json::parse("9223372036854775808.0"), DataTypeKind::int64, "k"),
                  InvalidMetadata);
  CHECK_THROWS_AS(parse_fill_value(nlohmann::json::parse("18446744073709551616"), DataTypeKind::uint64, "k"),
                  InvalidMetadata);
  CHECK_THROWS_AS(parse_fill_value(nlohmann::json::parse("2147483648.0"), DataTypeKind::int32, "k"), InvalidMetadata);
  const auto fill = parse_fill_value(nlohmann::json::parse("-9223372036854775808.0"), DataTypeKind::int64, "k");
  std::int64_t v;
  std::memcpy(&v, fill.data(), 8);
  CHECK(v == INT64_MIN);
  Runtime rt({.codec_threads = 1});
  auto store = std::make_shared<MemoryStore>();
  for (const std::string doc : {R"({"zarr_format":3,"node_type":7})", R"({"zarr_format":"3","node_type":"group"})"}) {
    INFO(doc);
    Bytes b(reinterpret_cast<const std::byte*>(doc.data()), reinterpret_cast<const std::byte*>(doc.data()) + doc.size());
    boost::asio::co_spawn(rt.io_executor(), store->set("g/zarr.json", std::move(b)), boost::asio::use_future).get();
    CHECK_THROWS_AS(Group::open_blocking(rt, store, "g"), InvalidMetadata);
  }
}

TEST_CASE("b49: float fills given as JSON numbers are rounded once, half to even (was: float64 -> float32 -> float16)",
          "[cases][regression]") {
  ZARRCORO_REQUIRE_SHARED(shared);
  Case c(shared / "cases" / "b49_float_fill");
  // The first element's little-endian bits; each array has three, none stored.
  const std::pair<const char*, const char*> expected[] = {
      {"f16_double_rounding", "01 3c"},            {"f16_subnormal_double_rounding", "01 00"},
      {"v2_f2_double_rounding", "01 3c"},          {"f16_tie_even_down", "00 3c"},
      {"f16_tie_even_up", "02 3c"},                {"f16_overflow_tie", "00 7c"},
      {"f16_below_overflow", "ff 7b"},             {"f32_tie_even_down", "00 00 80 4b"},
      {"f32_tie_even_up", "02 00 80 4b"},
  };
  for (const auto& [name, bits] : expected) {
    CAPTURE(name);
    const std::string one(bits);
    CHECK(test::to_hex(c.read(name).data) == one + " " + one + " " + one);
  }
}
