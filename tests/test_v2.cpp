// Zarr v2 support: data type strings (incl. fixed-length bytes and unicode,
// structured types with per-field byte order and subarrays), fill values,
// `.zarray` parsing and writing, the compressor/filter adapter and its
// errors, F order and separators, blosc, groups, and v3 forms of the new
// data types.
#include <bit>
#include <cmath>
#include <cstring>
#include <random>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/use_future.hpp>
#include <catch2/catch.hpp>

#include <zarrcoro/array.hpp>
#include <zarrcoro/error.hpp>
#include <zarrcoro/metadata.hpp>
#include <zarrcoro/runtime.hpp>
#include <zarrcoro/store/memory.hpp>

#include "codecs/codec.hpp"
#include "codecs/pipeline.hpp"
#include "codecs/v2.hpp"
#include "support.hpp"

using namespace zarrcoro;
using nlohmann::json;
using test::hex;
using test::to_hex;

namespace {

// Raises E whose field is `field` and whose message contains `text`.
#define CHECK_ERROR(expr, E, field_, text)                                  \
  do {                                                                      \
    try {                                                                   \
      (void)(expr);                                                         \
      FAIL("expected " #E " from " #expr);                                  \
    } catch (const E& e) {                                                  \
      CHECK(e.field() == (field_));                                         \
      CHECK_THAT(std::string(e.what()), Catch::Contains(text));             \
    }                                                                       \
  } while (0)

json zarray(const std::string& dtype, const std::string& extra = "") {
  return json::parse(R"({"zarr_format": 2, "shape": [10, 7], "chunks": [4, 3], "dtype": )" + dtype +
                     R"(, "compressor": null, "filters": null, "order": "C", "fill_value": 0)" + extra + "}");
}

ArrayMetadata parse(const json& j) { return ArrayMetadata::from_v2_json(j, nullptr, "a/.zarray"); }

struct Env {
  Runtime rt{{.codec_threads = 2}};
  std::shared_ptr<MemoryStore> store = std::make_shared<MemoryStore>();
  template <class T>
  T run(awaitable<T> a) {
    return boost::asio::co_spawn(rt.io_executor(), std::move(a), boost::asio::use_future).get();
  }
  std::optional<Bytes> get(const std::string& key) { return run(store->get(key)); }
  json doc(const std::string& key) {
    auto v = get(key);
    REQUIRE(v);
    return json::parse(std::string(reinterpret_cast<const char*>(v->data()), v->size()));
  }
  void put(const std::string& key, const std::string& text) {
    run(store->set(key, Bytes(reinterpret_cast<const std::byte*>(text.data()),
                              reinterpret_cast<const std::byte*>(text.data()) + text.size())));
  }
  std::vector<std::string> keys(const std::string& prefix = "") { return run(store->list(prefix)); }
};

Bytes random_bytes(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  Bytes b(n);
  for (auto& x : b) x = static_cast<std::byte>(rng() % 7 == 0 ? 0 : rng());  // some zeros for the codecs
  return b;
}

ArrayMetadata v2_meta(DataType t, std::vector<std::uint64_t> shape, std::vector<std::uint64_t> chunks,
                      const std::string& codecs = R"(["bytes"])", char sep = '.') {
  ArrayMetadata m;
  m.zarr_format = 2;
  m.chunk_key_encoding = {ChunkKeyEncoding::Kind::v2, sep};
  m.shape = std::move(shape);
  m.chunk_shape = std::move(chunks);
  m.data_type = t;
  m.codecs = json::parse(codecs);
  return m;
}

}  // namespace

// ------------------------------------------------------------------ data types

TEST_CASE("v2 dtype strings: every simple type, byte orders, S and U", "[v2][dtype]") {
  struct Row {
    const char* text;
    DataType type;
    ByteOrder order;
  };
  const Row rows[] = {
      {"|b1", DataTypeKind::bool_, ByteOrder::unspecified},   {"|i1", DataTypeKind::int8, ByteOrder::unspecified},
      {"<i2", DataTypeKind::int16, ByteOrder::little},        {">i2", DataTypeKind::int16, ByteOrder::big},
      {"<i4", DataTypeKind::int32, ByteOrder::little},        {">i8", DataTypeKind::int64, ByteOrder::big},
      {"|u1", DataTypeKind::uint8, ByteOrder::unspecified},   {">u2", DataTypeKind::uint16, ByteOrder::big},
      {"<u4", DataTypeKind::uint32, ByteOrder::little},       {"<u8", DataTypeKind::uint64, ByteOrder::little},
      {"<f2", DataTypeKind::float16, ByteOrder::little},      {">f4", DataTypeKind::float32, ByteOrder::big},
      {"<f8", DataTypeKind::float64, ByteOrder::little},      {"<c8", DataTypeKind::complex64, ByteOrder::little},
      {">c16", DataTypeKind::complex128, ByteOrder::big},     {"|S5", DataType::fixed_bytes(5), ByteOrder::unspecified},
      {"<U4", DataType::fixed_unicode(4), ByteOrder::little}, {">U1", DataType::fixed_unicode(1), ByteOrder::big},
  };
  for (const auto& r : rows) {
    CAPTURE(r.text);
    const V2DataType t = parse_v2_dtype(r.text, "k");
    CHECK(t.type == r.type);
    CHECK(t.order == r.order);
    CHECK(v2_dtype_to_json(t.type, t.order) == r.text);
  }
  CHECK(DataType::fixed_bytes(5).size() == 5);
  CHECK(DataType::fixed_unicode(4).size() == 16);
  CHECK(DataType::fixed_unicode(4).swap_unit() == 4);
  CHECK(DataType::fixed_unicode(4).describe() == "U4");
  CHECK(parse_v2_dtype("<i1", "k").type == DataType(DataTypeKind::int8));  // any mark for one byte
  CHECK(v2_dtype_to_json(DataTypeKind::int8, ByteOrder::big) == "|i1");
  CHECK(parse_v2_dtype("=f8", "k").order == ByteOrder::little);  // native: this little-endian host

  CHECK_ERROR(parse_v2_dtype("|i4", "k"), InvalidMetadata, "dtype", "needs a byte order");
  CHECK_ERROR(parse_v2_dtype("<M8[ns]", "k"), UnsupportedError, "dtype", "unsupported data type '<M8[ns]'");
  CHECK_ERROR(parse_v2_dtype("|O", "k"), UnsupportedError, "filters", "needs an object codec");  // (test_strings.cpp)
  CHECK_ERROR(parse_v2_dtype("|O8", "k"), UnsupportedError, "dtype", "'|O8'");
  CHECK_ERROR(parse_v2_dtype("|V8", "k"), UnsupportedError, "dtype", "'|V8'");
  CHECK_ERROR(parse_v2_dtype("|S0", "k"), InvalidMetadata, "dtype", "positive length");
  CHECK_ERROR(parse_v2_dtype("<U", "k"), InvalidMetadata, "dtype", "");
  CHECK_ERROR(parse_v2_dtype("f8", "k"), InvalidMetadata, "dtype", "NumPy type string");
  CHECK_ERROR(parse_v2_dtype(42, "k"), InvalidMetadata, "dtype", "type string or a list");
}

TEST_CASE("v2 structured dtypes: field orders, subarrays, nesting; layout and swap plan", "[v2][dtype]") {
  const json j = json::parse(R"([["flux", ">f4"], ["mask", "<i4"], ["z", ">i2", [2, 3]], ["tag", "|S3"],
                                 ["p", [["x", "<f8"], ["c", ">c8"]]]])");
  const V2DataType t = parse_v2_dtype(j, "k");
  REQUIRE(t.type.is_structured());
  CHECK(t.order == ByteOrder::unspecified);
  const auto f = t.type.fields();
  REQUIRE(f.size() == 5);
  CHECK(f[0].name == "flux");
  CHECK(f[0].order == ByteOrder::big);
  CHECK(f[1].order == ByteOrder::little);
  CHECK(f[2].shape == std::vector<std::uint64_t>{2, 3});
  CHECK(f[2].size() == 12);
  CHECK(f[3].type == DataType::fixed_bytes(3));
  CHECK(f[3].order == ByteOrder::unspecified);
  CHECK(f[4].type.fields().size() == 2);
  CHECK(f[4].type.fields()[1].order == ByteOrder::big);
  const std::size_t offsets[] = {0, 4, 8, 20, 23};
  for (int i = 0; i < 5; ++i) CHECK(f[i].offset == offsets[i]);
  CHECK(t.type.size() == 23 + 16);
  CHECK(v2_dtype_to_json(t.type, ByteOrder::unspecified) == j);
  CHECK(t.type.describe() == "{flux: >float32, mask: <int32, z: >int16[2,3], tag: S3, p: {x: <float64, c: >complex64}}");
  // Equal field lists are the same type; any difference is another.
  CHECK(parse_v2_dtype(j, "other").type == t.type);
  CHECK_FALSE(parse_v2_dtype(json::parse(R"([["flux", "<f4"]])"), "k").type ==
              parse_v2_dtype(json::parse(R"([["flux", ">f4"]])"), "k").type);

  // Swap plan: flux (4), z as six 2-byte values, the complex64 as two 4-byte floats.
  const auto runs = t.type.swap_runs(ByteOrder::unspecified);
  REQUIRE(runs.size() == 3);
  CHECK((runs[0].offset == 0 && runs[0].unit == 4 && runs[0].count == 1));
  CHECK((runs[1].offset == 8 && runs[1].unit == 2 && runs[1].count == 6));
  CHECK((runs[2].offset == 31 && runs[2].unit == 4 && runs[2].count == 2));
  CHECK_FALSE(t.type.needs_byte_order());
  CHECK(t.type.declared_byte_orders() == 3);

  const DataType plain = DataType::structured({{"a", DataTypeKind::float32}, {"b", DataTypeKind::int16, {2}}});
  CHECK(plain.needs_byte_order());
  CHECK(plain.declared_byte_orders() == 0);
  const auto big = plain.swap_runs(ByteOrder::big);
  REQUIRE(big.size() == 2);  // 4-byte then 2-byte values
  CHECK(plain.swap_runs(ByteOrder::little).empty());

  CHECK_ERROR(parse_v2_dtype(json::parse(R"([["a", "<i4"], ["a", "<i2"]])"), "k"), InvalidMetadata, "dtype", "duplicate");
  CHECK_ERROR(parse_v2_dtype(json::parse(R"([["a"]])"), "k"), InvalidMetadata, "dtype[0]", "[name, type]");
  CHECK_ERROR(parse_v2_dtype(json::parse(R"([["a", "<M8[s]"]])"), "k"), UnsupportedError, "dtype[0][1]", "<M8[s]");
  CHECK_ERROR(parse_v2_dtype(json::parse(R"([["a", "<i4", [-1]]])"), "k"), InvalidMetadata, "dtype[0][2]", "non-negative");
  CHECK_ERROR(parse_v2_dtype(json::parse(R"([["a", "<i4", [0]]])"), "k"), InvalidMetadata, "dtype", "no elements");
  CHECK_ERROR(parse_v2_dtype(json::array(), "k"), InvalidMetadata, "dtype", "list of");
  CHECK_THROWS_AS(DataType::structured({}), InvalidArgument);
  CHECK_THROWS_AS(DataType::fixed_bytes(0), InvalidArgument);
}

TEST_CASE("the bytes codec swaps structured elements field by field", "[v2][dtype][codecs]") {
  // flux declared big, mask declared little, v inherits the codec's endian.
  const DataType t = DataType::structured({{"flux", DataTypeKind::float32, {}, ByteOrder::big},
                                           {"mask", DataTypeKind::int32, {}, ByteOrder::little},
                                           {"v", DataTypeKind::uint16, {2}}});
  const codecs::ArraySpec spec{t, {2}};
  const Bytes native = hex("00 00 80 3f 02 00 00 00 01 02 03 04  00 00 20 c0 07 00 00 00 05 06 07 08");
  struct Case {
    const char* endian;
    const char* stored;
  };
  for (const auto& c : {Case{"big", "3f 80 00 00 02 00 00 00 02 01 04 03 c0 20 00 00 07 00 00 00 06 05 08 07"},
                        Case{"little", "3f 80 00 00 02 00 00 00 01 02 03 04 c0 20 00 00 07 00 00 00 05 06 07 08"}}) {
    CAPTURE(c.endian);
    const auto p = codecs::CodecPipeline::from_json(
        json::parse(std::string(R"([{"name":"bytes","configuration":{"endian":")") + c.endian + "\"}}]"), spec);
    CHECK_FALSE(p->is_trivial());
    Bytes enc;
    p->encode(native, enc);
    CHECK(to_hex(enc) == c.stored);
    Bytes dec(native.size());
    p->decode(enc, dec);
    CHECK(dec == native);
  }
  // Without an endian, a field without its own order cannot be stored.
  CHECK_ERROR(codecs::CodecPipeline::from_json(json::parse(R"(["bytes"])"), spec), InvalidMetadata,
              "codecs[0].configuration.endian", "required for data type");
  // All-little declared fields: a plain copy.
  const DataType le = DataType::structured({{"a", DataTypeKind::float64, {}, ByteOrder::little}});
  CHECK(codecs::CodecPipeline::from_json(json::parse(R"(["bytes"])"), {le, {3}})->is_trivial());
  // Unicode swaps 4-byte code units.
  const auto u = codecs::CodecPipeline::from_json(json::parse(R"([{"name":"bytes","configuration":{"endian":"big"}}])"),
                                                  {DataType::fixed_unicode(2), {1}});
  Bytes enc;
  u->encode(hex("41 00 00 00 e9 00 00 00"), enc);
  CHECK(to_hex(enc) == "00 00 00 41 00 00 00 e9");
}

// ------------------------------------------------------------------ metadata

TEST_CASE(".zarray parsing: members, defaults and errors naming key and field", "[v2][metadata]") {
  const ArrayMetadata m = parse(zarray(R"(">i4")", R"(, "dimension_separator": "/")"));
  CHECK(m.zarr_format == 2);
  CHECK(m.shape == std::vector<std::uint64_t>{10, 7});
  CHECK(m.chunk_shape == std::vector<std::uint64_t>{4, 3});
  CHECK(m.data_type == DataType(DataTypeKind::int32));
  CHECK(m.chunk_key_encoding.kind == ChunkKeyEncoding::Kind::v2);
  CHECK(m.chunk_key_encoding.separator == '/');
  REQUIRE(m.v2);
  CHECK(m.v2->dtype == ">i4");
  CHECK(m.v2->order == 'C');
  CHECK_FALSE(m.v2->fill_value_null);
  CHECK(m.codecs == json::parse(R"([{"name": "bytes", "configuration": {"endian": "big"}}])"));
  CHECK(parse(zarray(R"("<i4")")).chunk_key_encoding.separator == '.');
  CHECK(parse(zarray(R"("<i4")", R"(, "order": "F")")).codecs[0] ==
        json::parse(R"({"name": "transpose", "configuration": {"order": [1, 0]}})"));
  CHECK(parse(zarray(R"("<i4")", R"(, "unknown_key": 1)")).shape.size() == 2);  // ignored, as the spec asks

  CHECK_ERROR(parse(zarray(R"("<i4")", R"(, "zarr_format": 3)")), InvalidMetadata, "zarr_format", "expected 2");
  CHECK_ERROR(parse(zarray(R"("<i4")", R"(, "order": "X")")), InvalidMetadata, "order", "\"C\" or \"F\"");
  CHECK_ERROR(parse(zarray(R"("<i4")", R"(, "chunks": [4])")), InvalidMetadata, "chunks", "rank");
  CHECK_ERROR(parse(zarray(R"("<i4")", R"(, "chunks": [4, 0])")), InvalidMetadata, "chunks", "> 0");
  CHECK_ERROR(parse(zarray(R"("<i4")", R"(, "shape": [-1, 2])")), InvalidMetadata, "shape", "non-negative");
  CHECK_ERROR(parse(zarray(R"("<i4")", R"(, "dimension_separator": "-")")), InvalidMetadata, "dimension_separator", "");
  CHECK_ERROR(parse(zarray(R"("<i4")", R"(, "compressor": "zlib")")), InvalidMetadata, "compressor", "codec object");
  CHECK_ERROR(parse(zarray(R"("<i4")", R"(, "filters": {"id": "zlib"})")), InvalidMetadata, "filters", "list");
  CHECK_ERROR(parse(zarray(R"("<i4")", R"(, "compressor": {"level": 1})")), InvalidMetadata, "compressor.id", "\"id\"");
  json missing = zarray(R"("<i4")");
  missing.erase("order");
  CHECK_ERROR(parse(missing), InvalidMetadata, "order", "missing");
  try {
    parse(zarray(R"("|i4")"));
    FAIL("expected InvalidMetadata");
  } catch (const InvalidMetadata& e) {
    CHECK(e.key() == "a/.zarray");
  }
  // .zattrs must be an object.
  CHECK_ERROR(ArrayMetadata::from_v2_json(zarray(R"("<i4")"), json::array(), "a/.zarray"), InvalidMetadata, "", "attributes");
  CHECK(ArrayMetadata::from_v2_json(zarray(R"("<i4")"), json{{"k", 1}}, "a/.zarray").attributes == json{{"k", 1}});
}

TEST_CASE("v2 compressors and filters: supported ids translate, others are unsupported codecs", "[v2][codecs]") {
  struct Row {
    const char* v2;
    const char* v3;
  };
  const Row rows[] = {
      {R"({"id": "zlib", "level": 3})", R"({"name": "zlib", "configuration": {"level": 3}})"},
      {R"({"id": "zlib"})", R"({"name": "zlib", "configuration": {"level": 1}})"},
      {R"({"id": "gzip", "level": 9})", R"({"name": "gzip", "configuration": {"level": 9}})"},
      {R"({"id": "zstd", "level": 5})", R"({"name": "zstd", "configuration": {"level": 5, "checksum": false}})"},
      {R"({"id": "zstd", "level": 6, "checksum": true})", R"({"name": "zstd", "configuration": {"level": 6, "checksum": true}})"},
      {R"({"id": "lz4", "acceleration": 2})", R"({"name": "lz4", "configuration": {"acceleration": 2}})"},
      {R"({"id": "blosc", "cname": "zstd", "clevel": 1, "shuffle": 2, "blocksize": 0})",
       R"({"name": "blosc", "configuration": {"cname": "zstd", "clevel": 1, "shuffle": "bitshuffle", "typesize": 4, "blocksize": 0}})"},
      {R"({"id": "blosc", "cname": "lz4", "clevel": 5, "shuffle": -1})",
       R"({"name": "blosc", "configuration": {"cname": "lz4", "clevel": 5, "shuffle": "shuffle", "typesize": 4, "blocksize": 0}})"},
      {R"({"id": "blosc"})",
       R"({"name": "blosc", "configuration": {"cname": "lz4", "clevel": 5, "shuffle": "shuffle", "typesize": 4, "blocksize": 0}})"},
  };
  for (const auto& r : rows) {
    CAPTURE(r.v2);
    CHECK(codecs::v2_to_v3_codec(json::parse(r.v2), 4) == json::parse(r.v3));
  }
  // AUTOSHUFFLE on 1-byte items is bit-wise.
  CHECK(codecs::v2_to_v3_codec(json::parse(R"({"id": "blosc", "shuffle": -1})"), 1)["configuration"]["shuffle"] == "bitshuffle");

  for (const char* id : {"bz2", "lzma", "pcodec", "zfpy", "adler32", "fletcher32", "crc32", "delta", "fixedscaleoffset",
                         "quantize", "bitround", "packbits", "categorize", "astype", "shuffle", "json2", "vlen-utf8"}) {
    CAPTURE(id);
    const std::string v2 = std::string(R"({"id": ")") + id + "\"}";
    CHECK_ERROR(parse(zarray(R"("<f8")", R"(, "compressor": )" + v2)), UnsupportedError, "compressor.id",
                std::string("unsupported codec '") + id + "'");
    CHECK_ERROR(parse(zarray(R"("<f8")", R"(, "filters": [{"id": "zlib"}, )" + v2 + "]")), UnsupportedError,
                "filters[1].id", std::string("unsupported codec '") + id + "'");
  }
  CHECK_ERROR(parse(zarray(R"("<i4")", R"(, "compressor": {"id": "zlib", "level": 99})")), InvalidMetadata,
              "compressor.level", "level");
  CHECK_ERROR(parse(zarray(R"("<i4")", R"(, "compressor": {"id": "blosc", "shuffle": 5})")), InvalidMetadata,
              "compressor.shuffle", "-1, 0, 1 or 2");
  CHECK_ERROR(parse(zarray(R"("<i4")", R"(, "compressor": {"id": "blosc", "cname": "nope"})")), UnsupportedError,
              "compressor.cname", "'nope'");
  CHECK_ERROR(parse(zarray(R"("<i4")", R"(, "compressor": {"id": "zstd", "level": 1, "extra": 0})")), InvalidMetadata,
              "compressor.extra", "unknown member 'extra'");
  // Filters come before the compressor in the chain: the compressor decodes first.
  const auto m = parse(zarray(R"("<i4")", R"(, "filters": [{"id": "gzip", "level": 1}], "compressor": {"id": "zstd", "level": 1})"));
  REQUIRE(m.codecs.size() == 3);
  CHECK(m.codecs[1]["name"] == "gzip");
  CHECK(m.codecs[2]["name"] == "zstd");
}

TEST_CASE("v2 fill values: every kind, as zarr-python 2 reads and writes them", "[v2][metadata]") {
  struct Row {
    const char* dtype;
    const char* fill;
    const char* native;   // hex of the element in memory
    const char* written;  // the JSON written back
  };
  const Row rows[] = {
      {R"("|b1")", "true", "01", "true"},
      {R"("|b1")", "0", "00", "false"},
      {R"("|u1")", "0.0", "00", "0"},
      {R"("<i2")", "-3", "fd ff", "-3"},
      {R"(">u8")", "18446744073709551615", "ff ff ff ff ff ff ff ff", "18446744073709551615"},
      {R"("<f4")", "1.5", "00 00 c0 3f", "1.5"},
      {R"("<f8")", R"("NaN")", "00 00 00 00 00 00 f8 7f", R"("NaN")"},
      {R"(">f8")", R"("-Infinity")", "00 00 00 00 00 00 f0 ff", R"("-Infinity")"},
      {R"("<f2")", R"("Infinity")", "00 7c", R"("Infinity")"},
      {R"("<c8")", "[1.0, -2.0]", "00 00 80 3f 00 00 00 c0", "[1.0, -2.0]"},
      {R"("|S4")", R"("YWI=")", "61 62 00 00", R"("YWI=")"},
      {R"("|S2")", "0", "30 00", R"("MA==")"},
      {R"("|S3")", R"("")", "00 00 00", R"("")"},
      {R"("<U2")", R"("xé")", "78 00 00 00 e9 00 00 00", R"("xé")"},
      {R"(">U2")", "0", "30 00 00 00 00 00 00 00", R"("0")"},
      {R"([["a", ">i2"], ["b", "<i2"]])", R"("AAEAAg==")", "01 00 00 02", R"("AAEAAg==")"},
      {R"([["a", ">i2"], ["b", "<i2"]])", "0", "00 00 00 00", R"("AAAAAA==")"},
  };
  for (const auto& r : rows) {
    CAPTURE(r.dtype, r.fill);
    const json j = zarray(r.dtype, std::string(R"(, "fill_value": )") + r.fill);
    const ArrayMetadata m = parse(j);
    CHECK(to_hex(m.fill_value) == r.native);
    CHECK(m.to_v2_json()["fill_value"] == json::parse(r.written));
  }
  const ArrayMetadata null = parse(zarray(R"("<f4")", R"(, "fill_value": null)"));
  CHECK(null.v2->fill_value_null);
  CHECK(null.to_v2_json()["fill_value"].is_null());
  CHECK_ERROR(parse(zarray(R"("<i4")", R"(, "fill_value": 0.5)")), InvalidMetadata, "fill_value", "non-integral");
  CHECK_ERROR(parse(zarray(R"("<i4")", R"(, "fill_value": "x")")), InvalidMetadata, "fill_value", "");
  CHECK_ERROR(parse(zarray(R"("|u1")", R"(, "fill_value": 256)")), InvalidMetadata, "fill_value", "out of range");
  CHECK_ERROR(parse(zarray(R"("|S2")", R"(, "fill_value": "!!")")), InvalidMetadata, "fill_value", "base64");
  CHECK_ERROR(parse(zarray(R"([["a", "<i4"]])", R"(, "fill_value": "AAA=")")), InvalidMetadata, "fill_value", "4-byte record");
  // A NaN with a payload is still written as "NaN" (v2 has no hex form).
  ArrayMetadata m = parse(zarray(R"("<f4")"));
  m.fill_value = hex("01 00 c0 7f");
  CHECK(m.to_v2_json()["fill_value"] == "NaN");
}

TEST_CASE("writing .zarray: from V2Info, or derived from a v3-style codec chain", "[v2][metadata]") {
  // Reproduced as read, optional defaults left out.
  const json in = json::parse(R"({"zarr_format": 2, "shape": [5], "chunks": [2], "dtype": ">f8", "order": "C",
      "compressor": {"id": "blosc", "cname": "lz4", "clevel": 5, "shuffle": 1, "blocksize": 0},
      "filters": [{"id": "zlib", "level": 2}], "fill_value": "NaN", "dimension_separator": "."})");
  json out = parse(in).to_v2_json();
  json expected = in;
  expected.erase("dimension_separator");
  CHECK(out == expected);

  ArrayMetadata m = v2_meta(DataTypeKind::int16, {6, 5}, {4, 2},
                            R"([{"name": "transpose", "configuration": {"order": [1, 0]}},
                                {"name": "bytes", "configuration": {"endian": "big"}},
                                {"name": "gzip", "configuration": {"level": 3}},
                                {"name": "blosc", "configuration": {"cname": "zstd", "clevel": 2, "shuffle": "bitshuffle", "typesize": 2}}])",
                            '/');
  out = m.to_v2_json();
  CHECK(out == json::parse(R"({"zarr_format": 2, "shape": [6, 5], "chunks": [4, 2], "dtype": ">i2", "order": "F",
      "compressor": {"id": "blosc", "cname": "zstd", "clevel": 2, "shuffle": 2, "blocksize": 0},
      "filters": [{"id": "gzip", "level": 3}], "fill_value": 0, "dimension_separator": "/"})"));
  CHECK(m.v2_codecs() == parse(out).codecs);

  m.codecs = json::parse(R"(["bytes", {"name": "crc32c"}])");
  m.data_type = DataTypeKind::uint8;
  CHECK_ERROR(m.to_v2_json("x/.zarray"), UnsupportedError, "codecs[1].name", "crc32c");
  m.codecs = json::parse(R"([{"name": "transpose", "configuration": {"order": [0, 1]}}, "bytes"])");
  CHECK(m.to_v2_json()["order"] == "C");
  ArrayMetadata m3 = v2_meta(DataTypeKind::uint8, {2, 2, 2}, {1, 1, 1},
                             R"([{"name": "transpose", "configuration": {"order": [1, 2, 0]}}, "bytes"])");
  CHECK_ERROR(m3.to_v2_json(), UnsupportedError, "codecs[0]", "only C or F order");
  m3.codecs = json::parse(R"([{"name": "sharding_indexed", "configuration": {}}])");
  CHECK_ERROR(m3.to_v2_json(), UnsupportedError, "codecs[0]", "no Zarr v2 form");

  // A v2 array needs the v2 key encoding and has no dimension names.
  Env env;
  ArrayMetadata bad = v2_meta(DataTypeKind::uint8, {2}, {2});
  bad.chunk_key_encoding = {};
  CHECK_ERROR(Array::create_blocking(env.rt, env.store, "", bad), InvalidMetadata, "dimension_separator", "v2 chunk key");
  bad = v2_meta(DataTypeKind::uint8, {2}, {2});
  bad.dimension_names = std::vector<std::optional<std::string>>{"x"};
  CHECK_ERROR(Array::create_blocking(env.rt, env.store, "", bad), InvalidMetadata, "dimension_names", "_ARRAY_DIMENSIONS");
  bad = v2_meta(DataTypeKind::uint8, {2}, {2});
  bad.v2 = V2Info{">i4"};
  CHECK_ERROR(Array::create_blocking(env.rt, env.store, "", bad), InvalidMetadata, "dtype", "does not describe");
  CHECK(env.keys().empty());
}

TEST_CASE("v3: the new data types have v3 forms; v2-only codecs and unwritable structs are refused", "[v2][metadata]") {
  CHECK(data_type_to_json(DataType::fixed_bytes(7)) ==
        json::parse(R"({"name": "null_terminated_bytes", "configuration": {"length_bytes": 7}})"));
  CHECK(data_type_to_json(DataType::fixed_unicode(3)) ==
        json::parse(R"({"name": "fixed_length_utf32", "configuration": {"length_bytes": 12}})"));
  const DataType s = DataType::structured({{"a", DataTypeKind::uint8}, {"b", DataType::fixed_unicode(1)}});
  const json sj = json::parse(R"({"name": "struct", "configuration": {"fields": [
      {"name": "a", "data_type": "uint8"},
      {"name": "b", "data_type": {"name": "fixed_length_utf32", "configuration": {"length_bytes": 4}}}]}})");
  CHECK(data_type_to_json(s) == sj);
  for (const DataType t : {DataType::fixed_bytes(7), DataType::fixed_unicode(3), s})
    CHECK(parse_data_type(data_type_to_json(t), "k") == t);
  CHECK(parse_data_type(json::parse(R"({"name": "structured", "configuration": {"fields": [["a", "uint8"], ["b",
      {"name": "fixed_length_utf32", "configuration": {"length_bytes": 4}}]]}})"), "k") == s);
  CHECK_ERROR(parse_data_type(json::parse(R"({"name": "fixed_length_utf32", "configuration": {"length_bytes": 6}})"), "k"),
              InvalidMetadata, "data_type.configuration.length_bytes", "divisible by 4");
  CHECK_ERROR(parse_data_type(json::parse(R"({"name": "numpy.datetime64"})"), "k"), UnsupportedError, "data_type",
              "numpy.datetime64");

  // v3 fill values of the new kinds.
  CHECK(fill_value_to_json(parse_fill_value("aGk=", DataType::fixed_bytes(3), "k"), DataType::fixed_bytes(3)) == "aGk=");
  CHECK(to_hex(parse_fill_value("é", DataType::fixed_unicode(2), "k")) == "e9 00 00 00 00 00 00 00");
  const json sfill = json::parse(R"({"a": 7, "b": "z"})");
  CHECK(to_hex(parse_fill_value(sfill, s, "k")) == "07 7a 00 00 00");
  CHECK(fill_value_to_json(parse_fill_value(sfill, s, "k"), s) == sfill);
  CHECK_ERROR(parse_fill_value(json::parse(R"({"a": 7})"), s, "k"), InvalidMetadata, "fill_value", "'b'");
  CHECK_ERROR(parse_fill_value(json::parse(R"({"a": 7, "b": "z", "c": 1})"), s, "k"), InvalidMetadata, "fill_value", "'c'");
  CHECK_ERROR(parse_fill_value("abc", DataType::fixed_unicode(2), "k"), InvalidMetadata, "fill_value", "at most 2");

  Env env;
  ArrayMetadata m;
  m.shape = {4};
  m.chunk_shape = {4};
  m.data_type = DataTypeKind::int32;
  m.codecs = json::parse(R"([{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "zlib", "configuration": {"level": 1}}])");
  CHECK_ERROR(Array::create_blocking(env.rt, env.store, "", m), UnsupportedError, "codecs[1]", "unsupported codec 'zlib'");
  m.codecs = json::parse(R"([{"name": "bytes", "configuration": {"endian": "little"}}])");
  m.data_type = DataType::structured({{"z", DataTypeKind::int16, {2}}});
  CHECK_ERROR(Array::create_blocking(env.rt, env.store, "", m), UnsupportedError, "data_type", "subarray");
  m.data_type = DataType::structured({{"a", DataTypeKind::int16, {}, ByteOrder::big}});
  CHECK_ERROR(Array::create_blocking(env.rt, env.store, "", m), InvalidMetadata, "codecs[0].configuration.endian",
              "big-endian");
  CHECK(env.keys().empty());
  m.codecs = json::parse(R"([{"name": "bytes", "configuration": {"endian": "big"}}])");
  Array::create_blocking(env.rt, env.store, "", m).write_blocking(Region::all({4}), hex("01 00 02 00 03 00 04 00"));
  CHECK(to_hex(*env.get("c/0")) == "00 01 00 02 00 03 00 04");
}

// ------------------------------------------------------------------ engine round trips

TEST_CASE("v2 arrays round-trip through the engine: every compressor, C and F order, both separators, edge chunks",
          "[v2][engine]") {
  const char* compressors[] = {
      "null",
      R"({"id": "zlib", "level": 1})",
      R"({"id": "gzip", "level": 6})",
      R"({"id": "zstd", "level": 3})",
      R"({"id": "zstd", "level": 1, "checksum": true})",
      R"({"id": "lz4", "acceleration": 1})",
      R"({"id": "blosc", "cname": "lz4", "clevel": 5, "shuffle": 1, "blocksize": 0})",
      R"({"id": "blosc", "cname": "lz4hc", "clevel": 9, "shuffle": 2, "blocksize": 0})",
      R"({"id": "blosc", "cname": "blosclz", "clevel": 1, "shuffle": 0, "blocksize": 0})",
      R"({"id": "blosc", "cname": "zstd", "clevel": 3, "shuffle": -1, "blocksize": 128})",
      R"({"id": "blosc", "cname": "zlib", "clevel": 6, "shuffle": 1, "blocksize": 0})",
  };
  const char* dtypes[] = {R"("<i4")", R"(">f8")", R"("|u1")", R"(">U3")", R"([["a", ">f4"], ["b", "<i2", [2]]])"};
  Env env;
  int n = 0;
  for (const char* comp : compressors)
    for (const char* dt : dtypes)
      for (const char* order : {"C", "F"})
        for (const char* sep : {".", "/"}) {
          CAPTURE(comp, dt, order, sep);
          const std::string path = "x" + std::to_string(n);
          const json j = json::parse(std::string(R"({"zarr_format": 2, "shape": [9, 5, 3], "chunks": [4, 2, 3], "dtype": )") +
                                     dt + R"(, "compressor": )" + comp + R"(, "filters": null, "order": ")" + order +
                                     R"(", "fill_value": null, "dimension_separator": ")" + sep + "\"}");
          ArrayMetadata m = ArrayMetadata::from_v2_json(j, nullptr, ".zarray");
          const Array a = Array::create_blocking(env.rt, env.store, path, m);
          const std::size_t es = a.dtype().size();
          Bytes data = random_bytes(9 * 5 * 3 * es, ++n);
          if (a.dtype().kind() == DataTypeKind::unicode)
            for (std::size_t i = 0; i < data.size(); i += 4) data[i + 2] = data[i + 3] = std::byte{0};
          a.write_blocking(Region::all({9, 5, 3}), data);
          CHECK(env.get(path + "/2" + sep + "2" + sep + "0"));  // the corner edge chunk, by its key
          const Array back = Array::open_blocking(env.rt, env.store, path);
          CHECK(back.metadata().to_v2_json() == m.to_v2_json());
          CHECK(back.read_blocking(Region::all({9, 5, 3})).data == data);
          // A partial read and a partial write across chunk borders.
          const NdArray part = back.read_blocking(Region::parse("3:7,1:4,1:2", back.shape()));
          for (std::size_t i = 0; i < 4; ++i)
            for (std::size_t k = 0; k < 3; ++k)
              CHECK(std::memcmp(part.data.data() + (i * 3 + k) * es,
                                data.data() + (((3 + i) * 5 + (1 + k)) * 3 + 1) * es, es) == 0);
        }
}

TEST_CASE("blosc codec: configurations, round trips, corrupt and mis-sized frames", "[v2][codecs][blosc]") {
  for (const char* cname : {"lz4", "lz4hc", "blosclz", "zstd", "zlib"})
    for (const char* shuffle : {"noshuffle", "shuffle", "bitshuffle"})
      for (std::size_t n : {0, 1, 7, 4096, 100003}) {
        CAPTURE(cname, shuffle, n);
        const auto c = codecs::make_blosc_codec(
            {{"cname", cname}, {"clevel", 5}, {"shuffle", shuffle}, {"typesize", 4}, {"blocksize", 0}});
        const Bytes in = random_bytes(n, static_cast<unsigned>(n));
        Bytes enc, scratch;
        c->encode(in, enc);
        CHECK(c->decode(enc, scratch, n) .size() == n);
        CHECK(Bytes(scratch.begin(), scratch.end()) == in);
        Bytes out(n);
        c->decode_into(enc, out);
        CHECK(out == in);
        if (n > 0) {
          Bytes wrong(n + 1);
          CHECK_ERROR(c->decode_into(enc, wrong), CorruptChunk, "blosc", "expected " + std::to_string(n + 1));
          CHECK_ERROR(c->decode(enc, scratch, n - 1), CorruptChunk, "blosc", "more than the expected");
        }
      }
  const auto c = codecs::make_blosc_codec({{"cname", "lz4"}, {"clevel", 1}, {"shuffle", 1}, {"typesize", 300}});
  Bytes enc, out(3000);
  c->encode(random_bytes(3000, 1), enc);  // typesize beyond blosc's 255: stored as 1
  c->decode_into(enc, out);
  CHECK(out == random_bytes(3000, 1));
  CHECK(c->to_json() == json::parse(R"({"name": "blosc", "configuration": {"cname": "lz4", "clevel": 1,
                                       "shuffle": "shuffle", "typesize": 300, "blocksize": 0}})"));

  Bytes garbage = hex("02 01 21 04 10 00 00 00 20 00 00 00 ff ff ff ff 00 00");
  CHECK_ERROR(c->decode_into(garbage, out), CorruptChunk, "blosc", "");
  CHECK_ERROR(c->decode_into(hex("02 01"), out), CorruptChunk, "blosc", "too short");
  enc.resize(enc.size() / 2);  // truncated frame
  CHECK_ERROR(c->decode_into(enc, out), CorruptChunk, "blosc", "");

  CHECK_ERROR(codecs::make_blosc_codec({{"cname", "lz4"}, {"clevel", 1}}), InvalidMetadata, "shuffle", "required");
  CHECK_ERROR(codecs::make_blosc_codec({{"cname", "lz4"}, {"clevel", 10}, {"shuffle", "shuffle"}, {"typesize", 4}}),
              InvalidMetadata, "clevel", "0..9");
  CHECK_ERROR(codecs::make_blosc_codec({{"cname", "lz4"}, {"clevel", 1}, {"shuffle", "shuffle"}}), InvalidMetadata,
              "typesize", "required");
  CHECK_ERROR(codecs::make_blosc_codec({{"cname", "lz4"}, {"clevel", 1}, {"shuffle", "byte"}}), InvalidMetadata,
              "shuffle", "noshuffle");
  CHECK_ERROR(codecs::make_blosc_codec({{"cname", "brotli"}, {"clevel", 1}, {"shuffle", "noshuffle"}}), UnsupportedError,
              "cname", "'brotli'");
  CHECK_ERROR(codecs::make_blosc_codec({{"cname", "lz4"}, {"clevel", 1}, {"shuffle", 0}, {"x", 1}}), InvalidMetadata,
              "x", "unknown");
  CHECK_NOTHROW(codecs::make_blosc_codec({{"cname", "lz4"}, {"clevel", 1}, {"shuffle", 0}}));  // numcodecs integer form
}

TEST_CASE("lz4 (numcodecs framing): round trip and size checks", "[v2][codecs]") {
  const auto c = codecs::make_lz4_codec(json::object());
  const Bytes in = random_bytes(10000, 3);
  Bytes enc, out(in.size());
  c->encode(in, enc);
  std::uint32_t stated;
  std::memcpy(&stated, enc.data(), 4);
  CHECK(stated == in.size());
  c->decode_into(enc, out);
  CHECK(out == in);
  Bytes small(10);
  CHECK_ERROR(c->decode_into(enc, small), CorruptChunk, "lz4", "expected 10");
  enc[6] = std::byte{0xff};
  enc.resize(40);
  CHECK_THROWS_AS(c->decode_into(enc, out), CorruptChunk);
  CHECK_ERROR(codecs::make_lz4_codec({{"acceleration", 0}}), InvalidMetadata, "acceleration", ">= 1");
}

TEST_CASE("v2 groups: .zgroup and .zattrs, ancestors created, format reported", "[v2][groups]") {
  Env env;
  const Group g = Group::create_blocking(env.rt, env.store, "a/b", {{"k", "é"}}, 2);
  CHECK(g.zarr_format() == 2);
  CHECK(env.keys() == std::vector<std::string>{".zgroup", "a/.zgroup", "a/b/.zattrs", "a/b/.zgroup"});
  CHECK(env.doc("a/b/.zgroup") == json{{"zarr_format", 2}});
  const auto raw = env.get("a/b/.zattrs");
  CHECK(std::string(reinterpret_cast<const char*>(raw->data()), raw->size()).find("\\u00e9") != std::string::npos);
  const Group back = Group::open_blocking(env.rt, env.store, "a/b");
  CHECK(back.zarr_format() == 2);
  CHECK(back.attributes() == json{{"k", "é"}});
  CHECK(Group::open_blocking(env.rt, env.store, "a").attributes() == json::object());

  // An array inside creates no .zgroup where a node already is.
  Array::create_blocking(env.rt, env.store, "a/b/c/arr", v2_meta(DataTypeKind::uint8, {2}, {2}));
  CHECK(env.keys("a/b/c/") == std::vector<std::string>{"a/b/c/.zgroup", "a/b/c/arr/.zarray"});
  // v3 is preferred when both exist (create would refuse: written by hand).
  env.put("a/zarr.json", R"({"zarr_format": 3, "node_type": "group", "attributes": {"v": 3}})");
  CHECK(Group::open_blocking(env.rt, env.store, "a").zarr_format() == 3);

  env.put("bad/.zgroup", R"({"zarr_format": 3})");
  CHECK_ERROR(Group::open_blocking(env.rt, env.store, "bad"), InvalidMetadata, "zarr_format", "expected 2");
  try {
    Group::open_blocking(env.rt, env.store, "none");
    FAIL("expected NotFound");
  } catch (const NotFound& e) {
    CHECK_THAT(std::string(e.what()), Catch::Contains("none/.zgroup"));
  }
  try {
    Array::open_blocking(env.rt, env.store, "none");
    FAIL("expected NotFound");
  } catch (const NotFound& e) {
    CHECK(e.key() == "none/zarr.json");
    CHECK_THAT(std::string(e.what()), Catch::Contains("none/.zarray"));
  }
  // Non-finite attributes are refused before anything is written.
  const std::size_t before = env.keys().size();
  CHECK_THROWS_AS(Group::create_blocking(env.rt, env.store, "nan", {{"x", NAN}}, 2), InvalidArgument);
  ArrayMetadata m = v2_meta(DataTypeKind::uint8, {2}, {2});
  m.attributes = {{"x", INFINITY}};
  CHECK_THROWS_AS(Array::create_blocking(env.rt, env.store, "nan2", m), InvalidArgument);
  CHECK(env.keys().size() == before);
}

TEST_CASE("v2 attributes and fixed-length strings through the engine", "[v2][engine]") {
  Env env;
  ArrayMetadata m = v2_meta(DataType::fixed_unicode(2), {3}, {2}, R"([{"name": "bytes", "configuration": {"endian": "big"}}])");
  m.attributes = {{"_ARRAY_DIMENSIONS", {"x"}}};
  const Array a = Array::create_blocking(env.rt, env.store, "", m);
  const Bytes text = hex("41 00 00 00 42 00 00 00  e9 00 00 00 00 00 00 00  3a 26 00 00 00 00 00 00");  // "AB", "é", "☺"
  a.write_blocking(Region::all({3}), text);
  CHECK(to_hex(*env.get("0")) == "00 00 00 41 00 00 00 42 00 00 00 e9 00 00 00 00");
  CHECK(env.doc(".zattrs") == json{{"_ARRAY_DIMENSIONS", {"x"}}});
  CHECK(env.doc(".zarray")["dtype"] == ">U2");
  const Array back = Array::open_blocking(env.rt, env.store, "");
  CHECK(back.metadata().attributes == m.attributes);
  CHECK(back.read_blocking(Region::all({3})).data == text);
  // Rewriting without attributes removes .zattrs (absent means {}).
  ArrayMetadata none = back.metadata();
  none.attributes = json::object();
  Array::create_blocking(env.rt, env.store, "", none, CreateMode::overwrite);
  CHECK_FALSE(env.get(".zattrs"));

  const Array s = Array::create_blocking(env.rt, env.store, "s", v2_meta(DataType::fixed_bytes(3), {2}, {2}));
  s.write_blocking(Region::all({2}), hex("61 62 63 64 00 00"));
  CHECK(env.doc("s/.zarray")["dtype"] == "|S3");
  CHECK(to_hex(*env.get("s/0")) == "61 62 63 64 00 00");
}
