// Zarr v3 metadata: parsing, fill values, chunk key encodings, strict JSON.
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include <catch2/catch.hpp>

#include <zarrcoro/error.hpp>
#include <zarrcoro/metadata.hpp>

#include "support.hpp"

using namespace zarrcoro;
using nlohmann::json;

namespace {

json base_array() {
  return json::parse(R"({
    "zarr_format": 3, "node_type": "array", "shape": [4, 6], "data_type": "float32",
    "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2, 3]}},
    "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
    "fill_value": 0.0, "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}]
  })");
}

template <class T>
T load(const FillValue& f) {
  REQUIRE(f.size() == sizeof(T));
  T v;
  std::memcpy(&v, f.data(), sizeof(T));
  return v;
}

template <class E>
void require_error(const json& j, const std::string& field) {
  try {
    ArrayMetadata::from_json(j, "a/zarr.json");
    FAIL("expected an error for field " << field);
  } catch (const E& e) {
    CHECK(e.key() == "a/zarr.json");
    CHECK(e.field() == field);
  }
}

}  // namespace

TEST_CASE("parses a v3 array document and writes it back", "[metadata]") {
  const auto m = ArrayMetadata::from_json(base_array(), "zarr.json");
  CHECK(m.shape == std::vector<std::uint64_t>{4, 6});
  CHECK(m.chunk_shape == std::vector<std::uint64_t>{2, 3});
  CHECK(m.data_type == DataType(DataTypeKind::float32));
  CHECK(m.grid_shape() == std::vector<std::uint64_t>{2, 2});
  const auto back = m.to_json();
  CHECK(back["fill_value"] == 0.0);
  CHECK(back["chunk_key_encoding"]["configuration"]["separator"] == "/");
  CHECK(ArrayMetadata::from_json(back, "zarr.json").to_json() == back);
}

TEST_CASE("chunk key encodings", "[metadata]") {
  const std::vector<std::uint64_t> c{1, 0, 12};
  CHECK(ChunkKeyEncoding{}.encode(c) == "c/1/0/12");
  CHECK(ChunkKeyEncoding{ChunkKeyEncoding::Kind::default_, '.'}.encode(c) == "c.1.0.12");
  CHECK(ChunkKeyEncoding{ChunkKeyEncoding::Kind::v2, '.'}.encode(c) == "1.0.12");
  CHECK(ChunkKeyEncoding{ChunkKeyEncoding::Kind::v2, '/'}.encode(c) == "1/0/12");
  CHECK(ChunkKeyEncoding{}.encode({}) == "c");
  CHECK(ChunkKeyEncoding{ChunkKeyEncoding::Kind::v2, '.'}.encode({}) == "0");
  const auto v2 = ChunkKeyEncoding::from_json(json::parse(R"({"name":"v2"})"), "k");
  CHECK(v2.kind == ChunkKeyEncoding::Kind::v2);
  CHECK(v2.separator == '.');
  CHECK_THROWS_AS(ChunkKeyEncoding::from_json(json::parse(R"({"name":"default","configuration":{"separator":"-"}})"), "k"),
                  InvalidMetadata);
}

TEST_CASE("float fill values: NaN, infinities, hex bits (b03)", "[metadata][regression]") {
  const DataType f32 = DataTypeKind::float32, f64 = DataTypeKind::float64, f16 = DataTypeKind::float16;
  CHECK(load<std::uint32_t>(parse_fill_value("NaN", f32, "k")) == 0x7fc00000u);
  CHECK(load<std::uint64_t>(parse_fill_value("-Infinity", f64, "k")) == 0xfff0000000000000ull);
  CHECK(load<std::uint16_t>(parse_fill_value("Infinity", f16, "k")) == 0x7c00u);
  CHECK(load<std::uint32_t>(parse_fill_value("0x7fc00001", f32, "k")) == 0x7fc00001u);
  CHECK(load<std::uint16_t>(parse_fill_value(1.5, f16, "k")) == 0x3e00u);
  // The writer emits the spec's forms, never a bare NaN; payload NaNs stay hex.
  CHECK(fill_value_to_json(parse_fill_value("NaN", f32, "k"), f32) == "NaN");
  CHECK(fill_value_to_json(parse_fill_value("0x7fc00001", f32, "k"), f32) == "0x7fc00001");
  CHECK(fill_value_to_json(parse_fill_value("-Infinity", f64, "k"), f64) == "-Infinity");
  const auto neg_zero = fill_value_to_json(parse_fill_value(-0.0, f32, "k"), f32);
  CHECK(std::signbit(neg_zero.get<double>()));
  // A float array whose fill_value is null is invalid, not zero.
  auto j = base_array();
  j["fill_value"] = nullptr;
  require_error<InvalidMetadata>(j, "fill_value");
  j["fill_value"] = "nan";
  require_error<InvalidMetadata>(j, "fill_value");
}

TEST_CASE("complex fill values are [re, im] (b05)", "[metadata][regression]") {
  const DataType c128 = DataTypeKind::complex128, c64 = DataTypeKind::complex64;
  const auto f = parse_fill_value(json::parse("[1.0, -2.0]"), c128, "k");
  CHECK(test::to_hex(f) == "00 00 00 00 00 00 f0 3f 00 00 00 00 00 00 00 c0");
  CHECK(fill_value_to_json(f, c128) == json::parse("[1.0, -2.0]"));
  const auto g = parse_fill_value(json::parse(R"(["NaN", "-Infinity"])"), c64, "k");
  CHECK(test::to_hex(g) == "00 00 c0 7f 00 00 80 ff");
  CHECK_THROWS_AS(parse_fill_value(json::parse(R"({"re": 1, "im": 2})"), c128, "k"), InvalidMetadata);
  CHECK_THROWS_AS(parse_fill_value(1.0, c128, "k"), InvalidMetadata);
}

TEST_CASE("bool and integer fill values must match the type (b06)", "[metadata][regression]") {
  const DataType b = DataTypeKind::bool_, u8 = DataTypeKind::uint8, i16 = DataTypeKind::int16;
  CHECK(test::to_hex(parse_fill_value(true, b, "k")) == "01");
  CHECK(fill_value_to_json(parse_fill_value(false, b, "k"), b) == false);
  // 0 and 1, which some writers stored for bool, are read leniently (issue #13) and written back as booleans.
  CHECK(test::to_hex(parse_fill_value(0, b, "k")) == "00");
  CHECK(test::to_hex(parse_fill_value(1, b, "k")) == "01");
  CHECK(fill_value_to_json(parse_fill_value(1, b, "k"), b) == true);
  CHECK_THROWS_AS(parse_fill_value(2, b, "k"), InvalidMetadata);
  CHECK_THROWS_AS(parse_fill_value(-1, b, "k"), InvalidMetadata);
  CHECK_THROWS_AS(parse_fill_value(1.0, b, "k"), InvalidMetadata);
  CHECK_THROWS_AS(parse_fill_value("true", b, "k"), InvalidMetadata);
  CHECK(load<std::uint8_t>(parse_fill_value(0.0, u8, "k")) == 0);  // integral float accepted
  CHECK(fill_value_to_json(parse_fill_value(0.0, u8, "k"), u8).is_number_integer());
  CHECK_THROWS_AS(parse_fill_value(0.5, u8, "k"), InvalidMetadata);
  CHECK_THROWS_AS(parse_fill_value(256, u8, "k"), InvalidMetadata);
  CHECK_THROWS_AS(parse_fill_value(-1, u8, "k"), InvalidMetadata);
  CHECK(load<std::int16_t>(parse_fill_value(-32768, i16, "k")) == -32768);
  CHECK(load<std::uint64_t>(parse_fill_value(json(18446744073709551615ull), DataTypeKind::uint64, "k")) ==
        18446744073709551615ull);
}

TEST_CASE("a bool array stored with fill_value 1 opens as true and is written back as true", "[metadata][regression]") {
  auto j = base_array();
  j["data_type"] = "bool";
  j["fill_value"] = 1;
  const auto m = ArrayMetadata::from_json(j, "a/zarr.json");
  CHECK(test::to_hex(m.fill_value) == "01");
  CHECK(m.to_json()["fill_value"] == true);
  j["fill_value"] = 0;
  CHECK(ArrayMetadata::from_json(j, "a/zarr.json").to_json()["fill_value"] == false);
}

TEST_CASE("unknown fields and must_understand (b25)", "[metadata][regression]") {
  auto j = base_array();
  j["my_ext"] = json::parse(R"({"name": "my_ext", "must_understand": false})");
  CHECK_NOTHROW(ArrayMetadata::from_json(j, "a/zarr.json"));
  j["my_ext"]["must_understand"] = true;
  require_error<UnsupportedError>(j, "my_ext");
  j["my_ext"] = 1;
  require_error<UnsupportedError>(j, "my_ext");
}

TEST_CASE("malformed documents name the field", "[metadata]") {
  auto j = base_array();
  j["chunk_grid"]["configuration"]["chunk_shape"] = json::array({0, 3});
  require_error<InvalidMetadata>(j, "chunk_grid.configuration.chunk_shape");
  j = base_array();
  j["chunk_grid"]["configuration"]["chunk_shape"] = json::array({2});
  require_error<InvalidMetadata>(j, "chunk_grid.configuration.chunk_shape");
  j = base_array();
  j["data_type"] = "float8";
  require_error<UnsupportedError>(j, "data_type");
  j = base_array();
  j["shape"] = json::array({-1, 2});
  require_error<InvalidMetadata>(j, "shape");
  j = base_array();
  j.erase("codecs");
  require_error<InvalidMetadata>(j, "codecs");
  j = base_array();
  j["zarr_format"] = 2;
  require_error<InvalidMetadata>(j, "zarr_format");
  j = base_array();
  j["dimension_names"] = json::array({"x"});
  require_error<InvalidMetadata>(j, "dimension_names");
  j = base_array();
  j["chunk_grid"]["name"] = "rectilinear";
  require_error<UnsupportedError>(j, "chunk_grid");
}

TEST_CASE("attributes with NaN and Infinity (b26)", "[metadata][regression]") {
  const auto j = parse_json(R"({"a": NaN, "b": Infinity, "c": -Infinity, "d": "NaN", "e": "x NaN"})", "k");
  CHECK(std::isnan(j["a"].get<double>()));
  CHECK(j["b"].get<double>() == std::numeric_limits<double>::infinity());
  CHECK(j["c"].get<double>() == -std::numeric_limits<double>::infinity());
  CHECK(j["d"] == "NaN");  // strings are never turned into floats
  CHECK(j["e"] == "x NaN");
  // Writing non-finite attributes is refused by default: output stays strict JSON.
  CHECK_THROWS_AS(dump_json(j), InvalidArgument);
  CHECK_THROWS_AS(parse_json("{\"a\": }", "bad.json"), InvalidMetadata);
}

TEST_CASE("written metadata is strict JSON with spec fill forms", "[metadata]") {
  ArrayMetadata m;
  m.shape = {12};
  m.chunk_shape = {4};
  m.data_type = DataTypeKind::float64;
  m.fill_value = parse_fill_value("NaN", m.data_type, "k");
  m.dimension_names = std::vector<std::optional<std::string>>{"x"};
  const std::string text = dump_json(m.to_json());
  CHECK(text.find("\"fill_value\": \"NaN\"") != std::string::npos);
  CHECK_NOTHROW(json::parse(text));  // nlohmann rejects bare NaN tokens
  const auto back = ArrayMetadata::from_json(json::parse(text), "k");
  CHECK(back.dimension_names->at(0) == "x");
}

TEST_CASE("float16 conversion", "[dtype]") {
  CHECK(float16_to_float32(0x3c00) == 1.0f);
  CHECK(float16_to_float32(0xc000) == -2.0f);
  CHECK(float16_to_float32(0x0001) == std::ldexp(1.0f, -24));  // smallest subnormal
  CHECK(float16_to_float32(0x7bff) == 65504.0f);
  CHECK(std::isnan(float16_to_float32(0x7e00)));
  CHECK(float32_to_float16(1.0f) == 0x3c00);
  CHECK(float32_to_float16(65504.0f) == 0x7bff);
  CHECK(float32_to_float16(1e6f) == 0x7c00);
  CHECK(float32_to_float16(std::ldexp(1.0f, -24)) == 0x0001);
  CHECK(float32_to_float16(-0.0f) == 0x8000);
  for (std::uint32_t h = 0; h < 0x10000; ++h) {  // every non-NaN half round-trips
    const auto bits = static_cast<std::uint16_t>(h);
    if ((bits & 0x7c00) == 0x7c00 && (bits & 0x3ff)) continue;
    REQUIRE(float32_to_float16(float16_to_float32(bits)) == bits);
  }
}

TEST_CASE("float16 from a double rounds once: every tie to even, and a double just off a tie to the nearer half "
          "(was: through float32, which turned the near side into a tie)",
          "[dtype][regression]") {
  for (std::uint16_t h = 0; h < 0x7bff; ++h) {  // each pair of adjacent positive finite halves
    CAPTURE(h);
    const double lo = float16_to_float32(h), hi = float16_to_float32(static_cast<std::uint16_t>(h + 1));
    const double mid = (lo + hi) / 2;  // exact in a double
    const auto even = static_cast<std::uint16_t>(h % 2 == 0 ? h : h + 1);
    REQUIRE(float64_to_float16(mid) == even);
    REQUIRE(float64_to_float16(-mid) == (even | 0x8000));
    REQUIRE(float64_to_float16(std::nextafter(mid, 0.0)) == h);
    REQUIRE(float64_to_float16(std::nextafter(mid, 1.0e9)) == h + 1);
  }
  CHECK(float64_to_float16(65520.0) == 0x7c00);                          // the tie above the largest half: inf
  CHECK(float64_to_float16(std::nextafter(65520.0, 0.0)) == 0x7bff);
  CHECK(float64_to_float16(std::ldexp(1.0, -25)) == 0x0000);             // half the smallest subnormal: tie to 0
  CHECK(float64_to_float16(std::ldexp(1.0, -25) + std::ldexp(1.0, -60)) == 0x0001);
  CHECK(float64_to_float16(1.0e-300) == 0x0000);
  CHECK(float64_to_float16(std::numeric_limits<double>::denorm_min()) == 0x0000);
  CHECK(float64_to_float16(-std::numeric_limits<double>::infinity()) == 0xfc00);
  CHECK(float64_to_float16(std::bit_cast<double>(0x7ff0000000000001ull)) == 0x7e00);  // a payload below the half's bits: still a quiet NaN
}

TEST_CASE("Zarr v3.1 extension definitions: short-hand names and name-only objects for data types (struct fields too), "
          "chunk key encodings and chunk grids (was: refused)",
          "[metadata][v3.1]") {
  auto j = base_array();
  j["data_type"] = {{"name", "int16"}};
  j["chunk_key_encoding"] = "v2";
  j["fill_value"] = -3;
  auto m = ArrayMetadata::from_json(j, "a/zarr.json");
  CHECK(m.data_type == DataType(DataTypeKind::int16));
  CHECK(m.chunk_key_encoding.kind == ChunkKeyEncoding::Kind::v2);
  CHECK(m.chunk_key_encoding.separator == '.');
  CHECK(load<std::int16_t>(m.fill_value) == -3);
  // Written in the long form, as zarr-python 3.4 writes it.
  CHECK(m.to_json()["data_type"] == "int16");
  CHECK(m.to_json()["chunk_key_encoding"] == json::parse(R"({"name": "v2", "configuration": {"separator": "."}})"));

  j["chunk_key_encoding"] = {{"name", "default"}};
  CHECK(ArrayMetadata::from_json(j, "a/zarr.json").chunk_key_encoding.separator == '/');
  j["data_type"] = json::parse(R"({"name": "struct", "configuration": {"fields": [
      {"name": "x", "data_type": {"name": "float32"}}, {"name": "y", "data_type": "uint8"}]}})");
  j["fill_value"] = {{"x", 1.5}, {"y", 2}};
  m = ArrayMetadata::from_json(j, "a/zarr.json");
  REQUIRE(m.data_type.fields().size() == 2);
  CHECK(m.data_type.fields()[0].type == DataType(DataTypeKind::float32));
  CHECK(test::to_hex(m.fill_value) == "00 00 c0 3f 02");

  // What stays refused, by field: a simple type with a configuration, an
  // unknown name in either form, a grid without its configuration.
  j = base_array();
  j["data_type"] = {{"name", "int16"}, {"configuration", {{"endian", "big"}}}};
  require_error<InvalidMetadata>(j, "data_type.configuration");
  j = base_array();
  j["data_type"] = {{"name", "float8"}};
  require_error<UnsupportedError>(j, "data_type");
  j = base_array();
  j["chunk_key_encoding"] = "v3";
  require_error<UnsupportedError>(j, "chunk_key_encoding");
  j = base_array();
  j["chunk_key_encoding"] = 2;
  require_error<InvalidMetadata>(j, "chunk_key_encoding");
  j = base_array();
  j["chunk_grid"] = "regular";
  require_error<InvalidMetadata>(j, "chunk_grid.configuration.chunk_shape");
  j = base_array();
  j["chunk_grid"] = {{"name", "regular"}};
  require_error<InvalidMetadata>(j, "chunk_grid.configuration.chunk_shape");
  j = base_array();
  j["chunk_grid"] = "rectilinear";
  require_error<UnsupportedError>(j, "chunk_grid");
}

TEST_CASE("integer fill values one past either end of every integer type are refused, the ends themselves read "
          "(was: an integer just below -2^63 read as -2^63)",
          "[metadata][regression]") {
  struct Range {
    DataTypeKind kind;
    const char *min, *max, *below, *above;
  };
  const Range ranges[] = {
      {DataTypeKind::int8, "-128", "127", "-129", "128"},
      {DataTypeKind::int16, "-32768", "32767", "-32769", "32768"},
      {DataTypeKind::int32, "-2147483648", "2147483647", "-2147483649", "2147483648"},
      {DataTypeKind::int64, "-9223372036854775808", "9223372036854775807", "-9223372036854775809",
       "9223372036854775808"},
      {DataTypeKind::uint8, "0", "255", "-1", "256"},
      {DataTypeKind::uint16, "0", "65535", "-1", "65536"},
      {DataTypeKind::uint32, "0", "4294967295", "-1", "4294967296"},
      {DataTypeKind::uint64, "0", "18446744073709551615", "-1", "18446744073709551616"},
  };
  const auto fill = [](const char* text, DataType t) { return parse_fill_value(parse_json(text, "k"), t, "k"); };
  for (const auto& r : ranges) {
    const DataType t = r.kind;
    CAPTURE(t.describe());
    CHECK(fill_value_to_json(fill(r.min, t), t).dump() == r.min);
    CHECK(fill_value_to_json(fill(r.max, t), t).dump() == r.max);
    CHECK_THROWS_AS(fill(r.below, t), InvalidMetadata);
    CHECK_THROWS_AS(fill(r.above, t), InvalidMetadata);
  }
  // Further below -2^63, an integer is the double nearest to it, as before.
  CHECK(parse_json("[-9223372036854775809, -1000000000000000000000]", "k") ==
        json::array({std::nextafter(-0x1p63, -1e300), -1e21}));
  CHECK(parse_json("-9223372036854775808", "k").get<std::int64_t>() == std::numeric_limits<std::int64_t>::min());
}

TEST_CASE("a metadata document with anything after its JSON value is refused", "[metadata][hostile]") {
  const std::string texts[] = {"{} x", "{}{}", "{} 1", "{}]", "{}\"", "{} NaN", std::string("{}\0", 3), "{} /* */"};
  for (const std::string& text : texts) {
    CAPTURE(text);
    try {
      (void)parse_json(text, "a/zarr.json");
      FAIL("parsed");
    } catch (const InvalidMetadata& e) {
      CHECK(e.key() == "a/zarr.json");
    }
  }
  CHECK(parse_json("{}\n\t ", "a/zarr.json") == json::object());  // white space is no content
}

TEST_CASE("the bytes data type's fill value: base64 (zarr-python 3) or an array of byte values (the registered type)",
          "[metadata][v3.1]") {
  const DataType t = DataTypeKind::vlen_bytes;
  CHECK(test::to_hex(parse_fill_value(json::array({0, 255, 7}), t, "k")) == "00 ff 07");
  CHECK(parse_fill_value(json::array(), t, "k").empty());
  CHECK(fill_value_to_json(parse_fill_value(json::array({0, 255, 7}), t, "k"), t) == "AP8H");  // written as zarr-python 3.4 reads it
  CHECK(test::to_hex(parse_fill_value("AP8H", t, "k")) == "00 ff 07");
  for (const json& bad : {json::array({256}), json::array({-1}), json::array({"a"}), json::array({1.5}), json(3)})
    CHECK_THROWS_AS(parse_fill_value(bad, t, "k"), InvalidMetadata);
}
