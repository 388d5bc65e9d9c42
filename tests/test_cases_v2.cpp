// Regression cases from public bug reports in other Zarr engines
// (shared/cases/CASES.md), Zarr v2 part: each reads the stored input under
// shared/cases/v2 and checks the expected values written here, then checks
// what the engine writes.
#include <bit>
#include <cmath>
#include <cstring>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/use_future.hpp>
#include <catch2/catch.hpp>

#include <zarrcoro/array.hpp>
#include <zarrcoro/error.hpp>
#include <zarrcoro/runtime.hpp>
#include <zarrcoro/store/counting.hpp>
#include <zarrcoro/store/filesystem.hpp>
#include <zarrcoro/store/memory.hpp>

#include "support.hpp"

using namespace zarrcoro;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

// A runtime and blocking helpers for store calls.
struct Env {
  Runtime rt{{.codec_threads = 2}};
  template <class T>
  T run(awaitable<T> a) {
    return boost::asio::co_spawn(rt.io_executor(), std::move(a), boost::asio::use_future).get();
  }
  std::optional<Bytes> get(Store& s, const std::string& key) { return run(s.get(key)); }
  void set(Store& s, const std::string& key, const std::string& text) {
    run(s.set(key, Bytes(reinterpret_cast<const std::byte*>(text.data()),
                         reinterpret_cast<const std::byte*>(text.data()) + text.size())));
  }
  void set(Store& s, const std::string& key, const Bytes& bytes) { run(s.set(key, bytes)); }
  std::string text(Store& s, const std::string& key) {
    auto v = get(s, key);
    REQUIRE(v);
    return {reinterpret_cast<const char*>(v->data()), v->size()};
  }
  // The document under `key`, parsed by nlohmann's strict RFC 8259 parser (no NaN tokens).
  json strict(Store& s, const std::string& key) { return json::parse(text(s, key)); }
  std::vector<std::string> keys(Store& s) { return run(s.list("")); }
};

// The env plus the stored inputs of shared/cases/v2.
struct Case : Env {
  std::shared_ptr<FilesystemStore> store;
  explicit Case(const fs::path& shared)
      : store(std::make_shared<FilesystemStore>(rt.io_executor(), shared / "cases" / "v2")) {}
  Array open(const std::string& name) { return Array::open_blocking(rt, store, name); }
  NdArray read(const std::string& name) {
    auto a = open(name);
    return a.read_blocking(Region::all(a.shape()));
  }
};

template <class T>
std::vector<T> values(const NdArray& a) {
  auto s = a.as<T>();
  return {s.begin(), s.end()};
}

template <class T>
ByteSpan bytes_of(const std::vector<T>& v) {
  return std::as_bytes(std::span(v));
}

}  // namespace

TEST_CASE("b01 (v2): big-endian struct fields decode per field; the dtype and bytes survive a rewrite",
          "[cases][regression][v2]") {
  ZARRCORO_REQUIRE_SHARED(shared);
  Case c(shared);
  const Array a = c.open("b01_struct");
  const auto fields = a.dtype().fields();
  REQUIRE(fields.size() == 2);
  CHECK(fields[0].name == "flux");
  CHECK(fields[0].type == DataType(DataTypeKind::float32));
  CHECK(fields[0].order == ByteOrder::big);  // the reopened dtype still says >f4
  CHECK(fields[1].name == "mask");
  CHECK(fields[1].type == DataType(DataTypeKind::int32));
  CHECK(fields[1].order == ByteOrder::big);
  const NdArray r = a.read_blocking(Region::all(a.shape()));
  REQUIRE(r.data.size() == 16);
  struct Rec {
    float flux;
    std::int32_t mask;
  };
  Rec recs[2];
  std::memcpy(recs, r.data.data(), 16);  // native order in memory
  CHECK(recs[0].flux == 1.0f);
  CHECK(recs[0].mask == 2);
  CHECK(recs[1].flux == -2.5f);
  CHECK(recs[1].mask == 7);

  auto mem = std::make_shared<MemoryStore>();
  auto w = Array::create_blocking(c.rt, mem, "", a.metadata());
  w.write_blocking(Region::all(w.shape()), r.data);
  CHECK(test::to_hex(*c.get(*mem, "0")) == "3f 80 00 00 00 00 00 02 c0 20 00 00 00 00 00 07");
  const json zarray = c.strict(*mem, ".zarray");
  CHECK(zarray["dtype"] == json::parse(R"([["flux", ">f4"], ["mask", ">i4"]])"));
  CHECK(zarray["fill_value"] == "AAAAAAAAAAA=");
}

TEST_CASE("b01 (v3): struct + bytes big/little decode the same records; mixed field orders are refused",
          "[cases][regression][v2]") {
  Env c;
  const std::string doc = R"({"zarr_format": 3, "node_type": "array", "shape": [2],
    "data_type": {"name": "struct", "configuration": {"fields": [
      {"name": "flux", "data_type": "float32"}, {"name": "mask", "data_type": "int32"}]}},
    "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2]}},
    "chunk_key_encoding": {"name": "default"}, "fill_value": {"flux": 0.0, "mask": 0},
    "codecs": [{"name": "bytes", "configuration": {"endian": "ENDIAN"}}]})";
  const std::string big = "3f 80 00 00 00 00 00 02 c0 20 00 00 00 00 00 07";
  const std::string little = "00 00 80 3f 02 00 00 00 00 00 20 c0 07 00 00 00";
  Bytes native;
  for (const auto& [endian, chunk] : {std::pair{"big", big}, std::pair{"little", little}}) {
    CAPTURE(endian);
    auto mem = std::make_shared<MemoryStore>();
    std::string d = doc;
    d.replace(d.find("ENDIAN"), 6, endian);
    c.set(*mem, "zarr.json", d);
    c.set(*mem, "c/0", test::hex(chunk));
    const Array a = Array::open_blocking(c.rt, mem, "");
    CHECK(a.dtype().fields()[0].order == ByteOrder::unspecified);  // v3: the bytes codec decides
    const NdArray r = a.read_blocking(Region::all(a.shape()));
    CHECK(test::to_hex(r.data) == little);  // native
    native = r.data;
    // Create, reopen and re-read in v3: the same bytes on disk.
    auto out = std::make_shared<MemoryStore>();
    auto w = Array::create_blocking(c.rt, out, "", a.metadata());
    w.write_blocking(Region::all(w.shape()), r.data);
    CHECK(test::to_hex(*c.get(*out, "c/0")) == chunk);
    CHECK(c.strict(*out, "zarr.json")["data_type"] == json::parse(R"({"name": "struct",
      "configuration": {"fields": [{"name": "flux", "data_type": "float32"}, {"name": "mask", "data_type": "int32"}]}})"));
    CHECK(test::to_hex(Array::open_blocking(c.rt, out, "").read_blocking(Region::all({2})).data) == little);
  }

  // flux big-endian, mask little-endian in one record.
  const DataType mixed = DataType::structured({{"flux", DataTypeKind::float32, {}, ByteOrder::big},
                                               {"mask", DataTypeKind::int32, {}, ByteOrder::little}});
  ArrayMetadata m;
  m.shape = {2};
  m.chunk_shape = {2};
  m.data_type = mixed;
  m.codecs = json::parse(R"([{"name": "bytes", "configuration": {"endian": "big"}}])");
  auto mem = std::make_shared<MemoryStore>();
  try {
    Array::create_blocking(c.rt, mem, "", m);
    FAIL("a v3 struct with mixed field byte orders must be refused");
  } catch (const UnsupportedError& e) {
    CHECK(e.field() == "data_type");
    CHECK(std::string(e.what()).find("different byte orders") != std::string::npos);
  }
  CHECK(c.keys(*mem).empty());
  // The same record type is fine as v2, where each field carries its order.
  m.zarr_format = 2;
  m.chunk_key_encoding = {ChunkKeyEncoding::Kind::v2, '.'};
  auto w = Array::create_blocking(c.rt, mem, "", m);
  w.write_blocking(Region::all({2}), native);
  CHECK(test::to_hex(*c.get(*mem, "0")) == "3f 80 00 00 02 00 00 00 c0 20 00 00 07 00 00 00");
  CHECK(c.strict(*mem, ".zarray")["dtype"] == json::parse(R"([["flux", ">f4"], ["mask", "<i4"]])"));
  const Array back = Array::open_blocking(c.rt, mem, "");
  CHECK(back.dtype() == mixed);
  CHECK(test::to_hex(back.read_blocking(Region::all({2})).data) == little);
}

TEST_CASE("b02: a NaN fill is written as the JSON string \"NaN\", never a bare token", "[cases][regression][v2]") {
  ZARRCORO_REQUIRE_SHARED(shared);
  Case c(shared);
  const NdArray r = c.read("b02_nan");
  REQUIRE(r.shape == std::vector<std::uint64_t>{2});
  for (double v : r.as<double>()) CHECK(std::isnan(v));

  for (const auto& [fill, text] : {std::pair{double(NAN), "NaN"}, std::pair{double(INFINITY), "Infinity"}, std::pair{-double(INFINITY), "-Infinity"}}) {
    auto mem = std::make_shared<MemoryStore>();
    Group::create_blocking(c.rt, mem, "", {}, 2);
    ArrayMetadata m;
    m.zarr_format = 2;
    m.chunk_key_encoding = {ChunkKeyEncoding::Kind::v2, '.'};
    m.shape = {12};
    m.chunk_shape = {12};
    m.data_type = DataTypeKind::float64;
    m.fill_value.resize(8);
    std::memcpy(m.fill_value.data(), &fill, 8);
    Array::create_blocking(c.rt, mem, "a", m);
    const std::string doc = c.text(*mem, "a/.zarray");
    const json j = json::parse(doc);  // strict: a bare NaN would not parse
    CHECK(j["fill_value"].is_string());
    CHECK(j["fill_value"] == text);
    CHECK(doc.find(std::string("\"fill_value\": \"") + text + "\"") != std::string::npos);
    const NdArray back = Array::open_blocking(c.rt, mem, "a").read_blocking(Region::all({12}));
    for (double v : back.as<double>()) CHECK(std::bit_cast<std::uint64_t>(v) == std::bit_cast<std::uint64_t>(fill));
  }
  // Buggy writers' bare tokens are still read.
  auto mem = std::make_shared<MemoryStore>();
  c.set(*mem, ".zarray", R"({"zarr_format": 2, "shape": [2], "chunks": [2], "dtype": "<f4", "compressor": null,
    "filters": null, "order": "C", "fill_value": NaN})");
  const NdArray bare = Array::open_blocking(c.rt, mem, "").read_blocking(Region::all({2}));
  for (float v : bare.as<float>()) CHECK(std::isnan(v));
}

TEST_CASE("b06: |u1 with fill 0.0 opens and reads [0, 0]; 0.5 is an error; writers emit integers",
          "[cases][regression][v2]") {
  ZARRCORO_REQUIRE_SHARED(shared);
  Case c(shared);
  CHECK(values<std::uint8_t>(c.read("b06_u1_float_fill")) == std::vector<std::uint8_t>{0, 0});
  auto mem = std::make_shared<MemoryStore>();
  Array::create_blocking(c.rt, mem, "", c.open("b06_u1_float_fill").metadata());
  const json written = c.strict(*mem, ".zarray")["fill_value"];
  CHECK(written.is_number_integer());
  CHECK(written == 0);
  c.set(*mem, ".zarray", R"({"zarr_format": 2, "shape": [2], "chunks": [2], "dtype": "|u1", "compressor": null,
    "filters": null, "order": "C", "fill_value": 0.5})");
  try {
    Array::open_blocking(c.rt, mem, "");
    FAIL("0.5 is not an integer fill");
  } catch (const InvalidMetadata& e) {
    CHECK(e.key() == ".zarray");
    CHECK(e.field() == "fill_value");
  }
}

TEST_CASE("b07: fill_value null opens, missing chunks read as 0, and null is written back",
          "[cases][regression][v2]") {
  ZARRCORO_REQUIRE_SHARED(shared);
  Case c(shared);
  const Array a = c.open("b07_null");
  REQUIRE(a.metadata().v2);
  CHECK(a.metadata().v2->fill_value_null);
  CHECK(values<float>(a.read_blocking(Region::all(a.shape()))) == std::vector<float>{1, 2, 0, 0});
  // Metadata rewritten by the engine keeps null.
  auto mem = std::make_shared<MemoryStore>();
  ArrayMetadata m = a.metadata();
  m.shape = {6};  // as after a resize
  Array::create_blocking(c.rt, mem, "", m);
  const json j = c.strict(*mem, ".zarray");
  CHECK(j["fill_value"].is_null());
  CHECK(j["shape"] == json::array({6}));
}

TEST_CASE("b07: with fill_value null, all-zero chunks are still stored", "[cases][regression][v2]") {
  // Regression: zero chunks were dropped as "equal to the fill value", but a
  // null fill is no fill: zarr-python 2 reads missing chunks as undefined.
  ZARRCORO_REQUIRE_SHARED(shared);
  Case c(shared);
  auto mem = std::make_shared<MemoryStore>();
  Array a = Array::create_blocking(c.rt, mem, "", c.open("b07_null").metadata());
  const std::vector<float> zeros(4, 0.0f);
  a.write_blocking(Region::all(a.shape()), std::as_bytes(std::span(zeros)));
  CHECK(c.get(*mem, "0").has_value());
  CHECK(c.get(*mem, "1").has_value());
}

TEST_CASE("b08: order F chunks read transposed into C order, and writing gives the same chunk",
          "[cases][regression][v2]") {
  ZARRCORO_REQUIRE_SHARED(shared);
  Case c(shared);
  const Array a = c.open("b08_forder");
  const NdArray r = a.read_blocking(Region::all(a.shape()));
  REQUIRE(r.shape == std::vector<std::uint64_t>{3, 4});
  CHECK(values<std::int32_t>(r) == std::vector<std::int32_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});
  auto mem = std::make_shared<MemoryStore>();
  auto w = Array::create_blocking(c.rt, mem, "", a.metadata());
  w.write_blocking(Region::all(w.shape()), r.data);
  CHECK(*c.get(*mem, "0.0") == *c.get(*c.store, "b08_forder/0.0"));
  CHECK(c.strict(*mem, ".zarray")["order"] == "F");
}

TEST_CASE("b09: dimension_separator \"/\" reads nested keys; written keys follow the separator",
          "[cases][regression][v2]") {
  ZARRCORO_REQUIRE_SHARED(shared);
  Case c(shared);
  const Array a = c.open("b09_slash");
  std::vector<std::uint8_t> want(16, 0);
  for (int row : {2, 3})
    for (int col : {0, 1}) want[row * 4 + col] = 9;
  const NdArray r = a.read_blocking(Region::all(a.shape()));
  CHECK(values<std::uint8_t>(r) == want);
  CHECK(a.chunk_key(std::vector<std::uint64_t>{1, 0}) == "b09_slash/1/0");

  auto mem = std::make_shared<MemoryStore>();
  Array::create_blocking(c.rt, mem, "", a.metadata()).write_blocking(Region::all({4, 4}), r.data);
  CHECK(c.keys(*mem) == std::vector<std::string>{".zarray", "1/0"});
  CHECK(c.strict(*mem, ".zarray")["dimension_separator"] == "/");
  // Without the member the separator is ".", and the member is left out on write.
  ArrayMetadata m = a.metadata();
  m.chunk_key_encoding.separator = '.';
  auto dot = std::make_shared<MemoryStore>();
  Array::create_blocking(c.rt, dot, "", m).write_blocking(Region::all({4, 4}), r.data);
  CHECK(c.keys(*dot) == std::vector<std::string>{".zarray", "1.0"});
  CHECK_FALSE(c.strict(*dot, ".zarray").contains("dimension_separator"));
}

TEST_CASE("b11: edge chunks are stored at full chunk size", "[cases][regression][v2]") {
  ZARRCORO_REQUIRE_SHARED(shared);
  Case c(shared);
  const Array a = c.open("b11_edge");
  CHECK(values<std::uint16_t>(a.read_blocking(Region::all(a.shape()))) == std::vector<std::uint16_t>{1, 2, 3});

  auto mem = std::make_shared<MemoryStore>();
  auto w = Array::create_blocking(c.rt, mem, "", a.metadata());
  w.write_blocking(Region::all({3}), bytes_of(std::vector<std::uint16_t>{1, 2, 3}));
  CHECK(test::to_hex(*c.get(*mem, "0")) == "01 00 02 00 03 00 00 00");
  c.set(*mem, "0", test::hex("01 00 02 00 03 00"));  // 6 bytes: clipped to the array
  try {
    w.read_blocking(Region::all({3}));
    FAIL("a short uncompressed chunk must be a size mismatch");
  } catch (const CorruptChunk& e) {
    CHECK(e.key() == "0");
  }

  // blosc: the header's decoded size must be the full chunk (8 bytes).
  ArrayMetadata m = a.metadata();
  m.v2->compressor = json::parse(R"({"id": "blosc", "cname": "lz4", "clevel": 5, "shuffle": 1, "blocksize": 0})");
  auto blosc = std::make_shared<MemoryStore>();
  auto b = Array::create_blocking(c.rt, blosc, "", m);
  b.write_blocking(Region::all({3}), bytes_of(std::vector<std::uint16_t>{1, 2, 3}));
  const Bytes chunk = *c.get(*blosc, "0");
  std::uint32_t nbytes;
  std::memcpy(&nbytes, chunk.data() + 4, 4);  // blosc header: decoded size
  CHECK(nbytes == 8);
  CHECK(values<std::uint16_t>(b.read_blocking(Region::all({3}))) == std::vector<std::uint16_t>{1, 2, 3});
  // A blosc chunk of the clipped size (6 bytes, as z5 once expected) is refused.
  ArrayMetadata m6 = m;
  m6.shape = {3};
  m6.chunk_shape = {3};
  auto six = std::make_shared<MemoryStore>();
  Array::create_blocking(c.rt, six, "", m6).write_blocking(Region::all({3}), bytes_of(std::vector<std::uint16_t>{1, 2, 3}));
  c.set(*blosc, "0", *c.get(*six, "0"));
  try {
    b.read_blocking(Region::all({3}));
    FAIL("a blosc chunk decoding to 6 bytes must be refused");
  } catch (const CorruptChunk& e) {
    CHECK(e.field() == "blosc");
    CHECK(std::string(e.what()).find("expected 8") != std::string::npos);
  }
}

TEST_CASE("b13: a zero-length dimension reads an empty array with zero store requests; chunks [0] is refused",
          "[cases][regression][v2]") {
  ZARRCORO_REQUIRE_SHARED(shared);
  Case c(shared);
  auto counting = std::make_shared<CountingStore>(c.store);
  const Array a = Array::open_blocking(c.rt, counting, "b13_zero");
  counting->reset();
  const NdArray r = a.read_blocking(Region::all(a.shape()));
  CHECK(r.shape == std::vector<std::uint64_t>{1, 0});
  CHECK(r.data.empty());
  CHECK(counting->counts().requests() == 0);

  auto mem = std::make_shared<MemoryStore>();
  c.set(*mem, ".zarray", R"({"zarr_format": 2, "shape": [0], "chunks": [0], "dtype": "<i4", "compressor": null,
    "filters": null, "order": "C", "fill_value": 0})");
  try {
    Array::open_blocking(c.rt, mem, "");
    FAIL("chunks [0] must be refused at open");
  } catch (const InvalidMetadata& e) {
    CHECK(e.field() == "chunks");
  }
  ArrayMetadata m = a.metadata();
  m.chunk_shape = {1, 0};
  CHECK_THROWS_AS(Array::create_blocking(c.rt, std::make_shared<MemoryStore>(), "", m), InvalidMetadata);
}

TEST_CASE("b14: a 0-d v2 array reads 42 from key \"0\"", "[cases][regression][v2]") {
  ZARRCORO_REQUIRE_SHARED(shared);
  Case c(shared);
  const Array a = c.open("b14_0d");
  CHECK(a.chunk_key({}) == "b14_0d/0");
  CHECK(values<float>(a.read_blocking(Region::all({}))) == std::vector<float>{42.0f});
}

TEST_CASE("b24: a bytes-to-bytes codec under filters (zlib, compressor null) decodes", "[cases][regression][v2]") {
  ZARRCORO_REQUIRE_SHARED(shared);
  Case c(shared);
  const Array a = c.open("b24_filters");
  CHECK(a.describe_codecs() == "bytes(little),zlib(2)");
  CHECK(values<std::int32_t>(a.read_blocking(Region::all({1}))) == std::vector<std::int32_t>{42});
  // Filters before the compressor: the compressor decodes first.
  ArrayMetadata m = a.metadata();
  m.v2->compressor = json::parse(R"({"id": "zstd", "level": 1})");
  auto mem = std::make_shared<MemoryStore>();
  auto w = Array::create_blocking(c.rt, mem, "", m);
  CHECK(w.describe_codecs() == "bytes(little),zlib(2),zstd(1)");
  w.write_blocking(Region::all({1}), bytes_of(std::vector<std::int32_t>{-7}));
  CHECK(test::to_hex(*c.get(*mem, "0")).starts_with("28 b5 2f fd"));  // outermost: zstd
  CHECK(values<std::int32_t>(Array::open_blocking(c.rt, mem, "").read_blocking(Region::all({1}))) ==
        std::vector<std::int32_t>{-7});
}

TEST_CASE("b25 (v2): a zstd compressor with a checksum key opens; checksum true writes and checks it",
          "[cases][regression][v2]") {
  Env c;
  for (const bool checksum : {false, true}) {
    CAPTURE(checksum);
    auto mem = std::make_shared<MemoryStore>();
    c.set(*mem, ".zarray", std::string(R"({"zarr_format": 2, "shape": [64], "chunks": [64], "dtype": "<i4",
      "order": "C", "filters": null, "fill_value": 0, "dimension_separator": ".",
      "compressor": {"checksum": )") + (checksum ? "true" : "false") + R"(, "id": "zstd", "level": 6}})");
    const Array a = Array::open_blocking(c.rt, mem, "");
    std::vector<std::int32_t> data(64);
    for (int i = 0; i < 64; ++i) data[i] = i * i;
    a.write_blocking(Region::all({64}), bytes_of(data));
    Bytes chunk = *c.get(*mem, "0");
    const bool flag = (static_cast<unsigned>(chunk[4]) & 0x04) != 0;  // frame header: content checksum
    CHECK(flag == checksum);
    CHECK(values<std::int32_t>(a.read_blocking(Region::all({64}))) == data);
    if (checksum) {
      chunk.back() ^= std::byte{0xff};
      c.set(*mem, "0", chunk);
      CHECK_THROWS_AS(a.read_blocking(Region::all({64})), CorruptChunk);
    }
    // Rewritten, the document keeps `checksum` only when true and leaves out
    // dimension_separator "." (defaults, which strict readers may refuse).
    auto out = std::make_shared<MemoryStore>();
    Array::create_blocking(c.rt, out, "", a.metadata());
    const json j = c.strict(*out, ".zarray");
    CHECK(j["compressor"] == (checksum ? json::parse(R"({"checksum": true, "id": "zstd", "level": 6})")
                                       : json::parse(R"({"id": "zstd", "level": 6})")));
    CHECK_FALSE(j.contains("dimension_separator"));
  }
}

TEST_CASE("b46: a \"|O\" vlen-utf8 array with zarr-python 2's fill_value 0 reads \"\" where nothing is stored "
          "(was: the text \"0\"), and a partial write stores \"\" in the slots it did not write",
          "[cases][regression][v2]") {
  ZARRCORO_REQUIRE_SHARED(shared);
  Env c;
  auto cases = std::make_shared<FilesystemStore>(c.rt.io_executor(), shared / "cases" / "b46_vlen_fill0");
  const auto strings = [&](const std::string& name) {
    const Array a = Array::open_blocking(c.rt, cases, name);
    return a.read_strings_blocking(Region::all(a.shape()));
  };
  using Strings = std::vector<std::string>;
  CHECK(strings("fill0") == Strings{"a", "bb", "", "", ""});
  CHECK(strings("fill_null") == Strings{"a", "bb", "", "", ""});
  CHECK(strings("fill_str0") == Strings{"a", "bb", "", "0", "0"});  // the text "0" stays "0"
  CHECK(strings("bytes_fill0") == Strings{"a", "bb", "", "", ""});

  // Writing "z" to element 2 stores chunk 1 as ["z", ""], the bytes zarr-python 2.13 writes for it.
  auto mem = std::make_shared<MemoryStore>();
  c.set(*mem, ".zarray", c.text(*cases, "fill0_write/.zarray"));
  const Array w = Array::open_blocking(c.rt, mem, "");
  const Strings z{"z"};
  w.write_strings_blocking(Region::parse("2", w.shape()), z);
  CHECK(test::to_hex(*c.get(*mem, "1")) == "02 00 00 00 01 00 00 00 7a 00 00 00 00");
  CHECK(w.read_strings_blocking(Region::all(w.shape())) == Strings{"", "", "z", "", ""});
  // A v3 copy (zarrcoro reencode keeps the fill value) says "".
  CHECK(fill_value_to_json(w.metadata().fill_value, w.dtype()) == "");

  // Any other number is no fill for a vlen string: refused by field, never read as its text.
  json one = c.strict(*cases, "fill0/.zarray");
  one["fill_value"] = 1;
  c.set(*mem, ".zarray", one.dump());
  try {
    (void)Array::open_blocking(c.rt, mem, "");
    FAIL("opened");
  } catch (const InvalidMetadata& e) {
    CHECK(e.key() == ".zarray");
    CHECK(e.field() == "fill_value");
  }
}
