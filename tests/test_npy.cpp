// .npy reader and writer: exact round trips, hand-built headers, byte order,
// Fortran order, versions 2.0/3.0, typed errors, and NumPy-written fixtures;
// the descr of every DataType (S, U and structs: shared/cases B45) and
// hostile headers (deep nesting, overflowing shapes, invalid UTF-8).
#include <sys/stat.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>

#include <catch2/catch.hpp>

#include <zarrcoro/error.hpp>
#include <zarrcoro/npy.hpp>
#include <zarrcoro/runtime.hpp>
#include <zarrcoro/store/filesystem.hpp>

#include "support.hpp"

namespace fs = std::filesystem;
using namespace zarrcoro;

namespace {

Bytes str_bytes(std::string_view s) {
  const auto* p = reinterpret_cast<const std::byte*>(s.data());
  return Bytes(p, p + s.size());
}

template <class T>
Bytes raw(std::initializer_list<T> values) {
  Bytes b(values.size() * sizeof(T));
  std::memcpy(b.data(), std::data(values), b.size());
  return b;
}

Bytes concat(std::initializer_list<Bytes> parts) {
  Bytes out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

// A whole .npy file: magic, version, little-endian header length, the header
// padded with spaces to a 64-byte boundary plus '\n', then `data`.
Bytes npy_file(std::string header, const Bytes& data, int major = 1) {
  const std::size_t prefix = major == 1 ? 10 : 12;
  header += std::string((64 - (prefix + header.size() + 1) % 64) % 64, ' ') + "\n";
  Bytes out = str_bytes(std::string("\x93NUMPY", 6));
  out.push_back(std::byte(major));
  out.push_back(std::byte{0});
  for (std::size_t i = 0; i < prefix - 8; ++i) out.push_back(std::byte((header.size() >> (8 * i)) & 0xff));
  return concat({out, str_bytes(header), data});
}

std::string header(std::string_view descr, std::string_view shape, bool fortran = false) {
  return "{'descr': '" + std::string(descr) + "', 'fortran_order': " + (fortran ? "True" : "False") +
         ", 'shape': " + std::string(shape) + ", }";
}

// The field of the InvalidArgument that `f` raises ("<no error>" if none).
std::string error_field(const std::function<void()>& f) {
  try {
    f();
  } catch (const InvalidArgument& e) {
    return e.field();
  }
  return "<no error>";
}

std::string field_of(const Bytes& npy) {
  return error_field([&] { parse_npy(npy); });
}

// Deterministic bytes for `n` elements of `t` (bool elements are 0 or 1).
Bytes pattern(DataType t, std::uint64_t n, unsigned seed) {
  std::mt19937 rng(seed);
  Bytes b(n * t.size());
  for (auto& x : b) x = std::byte(t == DataTypeKind::bool_ ? rng() & 1 : rng() & 0xff);
  return b;
}

}  // namespace

TEST_CASE("npy: every data type round-trips exactly through encode and parse") {
  const std::vector<std::vector<std::uint64_t>> shapes{{}, {5}, {3, 4}, {2, 3, 4}, {0, 3}, {1, 1, 1, 7}};
  for (int k = 0; k <= static_cast<int>(DataTypeKind::complex128); ++k) {
    const DataType t = static_cast<DataTypeKind>(k);
    for (const auto& shape : shapes) {
      CAPTURE(t.name(), shape);
      NdArray a{t, shape, {}};
      a.data = pattern(t, a.num_elements(), static_cast<unsigned>(k * 31 + shape.size()));
      const Bytes npy = encode_npy(a);
      REQUIRE(npy.size() >= 10);
      CHECK(std::memcmp(npy.data(), "\x93NUMPY\x01\x00", 8) == 0);
      const std::size_t hlen = std::to_integer<std::size_t>(npy[8]) | std::to_integer<std::size_t>(npy[9]) << 8;
      CHECK((10 + hlen) % 64 == 0);
      CHECK(npy[10 + hlen - 1] == std::byte{'\n'});
      CHECK(npy.size() == 10 + hlen + a.data.size());
      const NdArray b = parse_npy(npy);
      CHECK(b.dtype == t);
      CHECK(b.shape == shape);
      CHECK(b.data == a.data);
      CHECK(encode_npy(b) == npy);
    }
  }
}

TEST_CASE("npy: the writer emits NumPy's header byte for byte") {
  NdArray a{DataTypeKind::int32, {2, 3}, raw<std::int32_t>({0, 1, 2, 3, 4, 5})};
  const std::string h = "{'descr': '<i4', 'fortran_order': False, 'shape': (2, 3), }" + std::string(58, ' ') + "\n";
  const Bytes expected = concat({str_bytes(std::string("\x93NUMPY\x01\x00\x76\x00", 10)), str_bytes(h),
                                 test::hex("00000000 01000000 02000000 03000000 04000000 05000000")});
  CHECK(test::to_hex(encode_npy(a)) == test::to_hex(expected));

  const NdArray b = parse_npy(expected);
  CHECK(b.dtype == DataTypeKind::int32);
  CHECK(b.shape == std::vector<std::uint64_t>{2, 3});
  CHECK(std::vector<std::int32_t>(b.as<std::int32_t>().begin(), b.as<std::int32_t>().end()) ==
        std::vector<std::int32_t>{0, 1, 2, 3, 4, 5});

  // Descr and shape spelling for the other cases: 1-byte types use '|', 1-d
  // shapes get a trailing comma, 0-d is ().
  auto header_of = [](const NdArray& x) {
    const Bytes npy = encode_npy(x);
    const std::size_t hlen = std::to_integer<std::size_t>(npy[8]) | std::to_integer<std::size_t>(npy[9]) << 8;
    std::string s(reinterpret_cast<const char*>(npy.data()) + 10, hlen);
    return s.substr(0, s.find_last_not_of(" \n") + 1);
  };
  CHECK(header_of({DataTypeKind::bool_, {4}, raw<std::uint8_t>({0, 1, 1, 0})}) ==
        "{'descr': '|b1', 'fortran_order': False, 'shape': (4,), }");
  CHECK(header_of({DataTypeKind::complex128, {}, Bytes(16)}) ==
        "{'descr': '<c16', 'fortran_order': False, 'shape': (), }");
  CHECK(header_of({DataTypeKind::uint8, {0, 2}, {}}) == "{'descr': '|u1', 'fortran_order': False, 'shape': (0, 2), }");
}

TEST_CASE("npy: header spellings NumPy and Python 2 produce are accepted") {
  const Bytes data = raw<std::int16_t>({-1, 2, 3, -4, 5, 6});
  for (const std::string h : {
           std::string("{'descr': '<i2', 'fortran_order': False, 'shape': (2, 3), }"),
           std::string("{'descr':'<i2','fortran_order':False,'shape':(2,3)}"),
           std::string("{\"shape\": (2L, 3L), \"fortran_order\": False, \"descr\": \"<i2\"}"),
           std::string("{'descr': '=i2', 'fortran_order': False, 'shape': [2, 3], }"),
       }) {
    CAPTURE(h);
    const NdArray a = parse_npy(npy_file(h, data));
    CHECK(a.dtype == DataTypeKind::int16);
    CHECK(a.shape == std::vector<std::uint64_t>{2, 3});
    CHECK(a.data == data);
  }
  // Versions 2.0 and 3.0 have a 4-byte header length.
  for (int major : {2, 3}) {
    const NdArray a = parse_npy(npy_file(header("<i2", "(6,)"), data, major));
    CHECK(a.shape == std::vector<std::uint64_t>{6});
    CHECK(a.data == data);
  }
}

TEST_CASE("npy: big-endian data is swapped to native order") {
  NdArray a = parse_npy(npy_file(header(">i4", "(2, 2)"), test::hex("00000001 00000002 01020304 ffffffff")));
  CHECK(a.dtype == DataTypeKind::int32);
  CHECK(std::vector<std::int32_t>(a.as<std::int32_t>().begin(), a.as<std::int32_t>().end()) ==
        std::vector<std::int32_t>{1, 2, 0x01020304, -1});

  // Complex: each component is swapped on its own.
  a = parse_npy(npy_file(header(">c8", "(1,)"), test::hex("3f800000 c0200000")));
  CHECK(a.as<float>()[0] == 1.0f);
  CHECK(a.as<float>()[1] == -2.5f);

  a = parse_npy(npy_file(header(">f2", "(2,)"), test::hex("3c00 c000")));
  CHECK(test::to_hex(a.data) == "00 3c 00 c0");
  a = parse_npy(npy_file(header(">u8", "()"), test::hex("0102030405060708")));
  CHECK(a.as<std::uint64_t>()[0] == 0x0102030405060708u);
  // Single-byte types ignore the byte-order mark.
  a = parse_npy(npy_file(header(">u1", "(3,)"), test::hex("010203")));
  CHECK(test::to_hex(a.data) == "01 02 03");
}

TEST_CASE("npy: fortran_order True is converted to C order") {
  // [[0, 1, 2], [3, 4, 5]] stored column-major.
  NdArray a = parse_npy(npy_file(header("<i4", "(2, 3)", true), raw<std::int32_t>({0, 3, 1, 4, 2, 5})));
  CHECK(a.data == raw<std::int32_t>({0, 1, 2, 3, 4, 5}));

  // 3-d: value i*12 + j*4 + k at Fortran position i + 2*j + 6*k; big-endian too.
  std::vector<std::int32_t> f(24), c(24);
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k) {
        c[i * 12 + j * 4 + k] = i * 12 + j * 4 + k;
        f[i + 2 * j + 6 * k] = static_cast<std::int32_t>(__builtin_bswap32(static_cast<std::uint32_t>(i * 12 + j * 4 + k)));
      }
  Bytes fb(96);
  std::memcpy(fb.data(), f.data(), 96);
  a = parse_npy(npy_file(header(">i4", "(2, 3, 4)", true), fb));
  CHECK(a.shape == std::vector<std::uint64_t>{2, 3, 4});
  CHECK(std::vector<std::int32_t>(a.as<std::int32_t>().begin(), a.as<std::int32_t>().end()) == c);

  // Ranks 0 and 1 and empty arrays are the same in both orders.
  a = parse_npy(npy_file(header("<u2", "(3,)", true), raw<std::uint16_t>({7, 8, 9})));
  CHECK(a.data == raw<std::uint16_t>({7, 8, 9}));
  a = parse_npy(npy_file(header("<u2", "(3, 0)", true), {}));
  CHECK(a.data.empty());
}

TEST_CASE("npy: malformed or unsupported input raises InvalidArgument naming the field") {
  const Bytes six = raw<std::int32_t>({0, 1, 2, 3, 4, 5});
  const Bytes good = npy_file(header("<i4", "(2, 3)"), six);
  REQUIRE_NOTHROW(parse_npy(good));

  Bytes bad = good;
  bad[1] = std::byte{'X'};
  CHECK(field_of(bad) == "magic");
  CHECK(field_of(str_bytes("PK\x03\x04")) == "magic");
  CHECK(field_of({}) == "magic");
  bad = good;
  bad[6] = std::byte{4};
  CHECK(field_of(bad) == "version");

  // Truncation: inside the data, inside the header, inside the length.
  CHECK(field_of(Bytes(good.begin(), good.end() - 1)) == "data");
  CHECK(field_of(Bytes(good.begin(), good.begin() + 40)) == "header");
  CHECK(field_of(Bytes(good.begin(), good.begin() + 9)) == "header");
  CHECK(field_of(concat({good, test::hex("00")})) == "data");
  // A shape whose size overflows is truncated data, not an allocation.
  CHECK(field_of(npy_file(header("<i4", "(4294967296, 4294967296, 16)"), six)) == "data");

  CHECK(field_of(npy_file(header("|O", "(2,)"), Bytes(16))) == "descr");
  CHECK(field_of(npy_file(header("<M8[ns]", "(2,)"), Bytes(16))) == "descr");
  CHECK(field_of(npy_file(header("<i3", "(2,)"), Bytes(6))) == "descr");
  CHECK(field_of(npy_file(header("|V4", "(2,)"), Bytes(8))) == "descr");
  CHECK(field_of(npy_file(header("|S0", "(2,)"), {})) == "descr");
  CHECK(field_of(npy_file("{'descr': [('a', '<i4')], 'fortran_order': False, 'shape': (7,), }", six)) == "data");
  CHECK(field_of(npy_file(header("<i4", "(-1, 3)"), six)) == "shape");
  CHECK(field_of(npy_file(header("<i4", "6"), six)) == "shape");
  CHECK(field_of(npy_file("{'descr': '<i4', 'fortran_order': 0, 'shape': (6,), }", six)) == "fortran_order");
  CHECK(field_of(npy_file("{'descr': '<i4', 'fortran_order': False}", six)) == "shape");
  CHECK(field_of(npy_file("{'descr': '<i4', 'fortran_order': False, 'shape': (6,), 'x': 1}", six)) == "header");
  CHECK(field_of(npy_file("{'descr': '<i4', 'fortran_order': False, 'shape': (6,", six)) == "header");
  CHECK(field_of(npy_file("{'descr': '<i4' 'fortran_order': False, 'shape': (6,)}", six)) == "header");
  CHECK(field_of(npy_file("['descr', '<i4']", six)) == "header");
  CHECK(field_of(npy_file("{'descr': '<i4', 'fortran_order': False, 'shape': (6,)} junk", six)) == "header");

  // The writer refuses a buffer that does not match the shape.
  CHECK(error_field([] { encode_npy({DataTypeKind::int32, {2, 3}, Bytes(20)}); }) == "data");
}

TEST_CASE("npy: files are written and read back; errors name the file") {
  const fs::path dir = fs::temp_directory_path() / ("zarrcoro_npy_" + std::to_string(std::random_device{}()));
  fs::create_directories(dir);
  NdArray a{DataTypeKind::float64, {3, 2}, raw<double>({1.5, -2, 0, 1e300, -0.0, 3})};
  write_npy(dir / "a.npy", a);
  const NdArray b = read_npy(dir / "a.npy");
  CHECK(b.data == a.data);
  CHECK(b.shape == a.shape);
  CHECK(test::read_file(dir / "a.npy") == encode_npy(a));

  try {
    read_npy(dir / "missing.npy");
    FAIL("no error");
  } catch (const InvalidArgument& e) {
    CHECK(e.key() == (dir / "missing.npy").string());
    CHECK(e.field() == "file");
  }
  CHECK(error_field([&] { read_npy(dir); }) == "file");
  CHECK(error_field([&] { write_npy(dir / "no" / "such" / "dir.npy", a); }) == "file");
  write_npy(dir / "t.npy", a);
  fs::resize_file(dir / "t.npy", fs::file_size(dir / "t.npy") - 8);
  try {
    read_npy(dir / "t.npy");
    FAIL("no error");
  } catch (const InvalidArgument& e) {
    CHECK(e.key() == (dir / "t.npy").string());
    CHECK(e.field() == "data");
    CHECK(std::string(e.what()).find("t.npy") != std::string::npos);
  }
  fs::remove_all(dir);
}

TEST_CASE("npy: NumPy-written fixtures parse, or are refused for their dtype") {
  ZARRCORO_REQUIRE_SHARED(shared);
  int parsed = 0, refused = 0;
  for (const auto& e : fs::recursive_directory_iterator(shared / "fixtures")) {
    if (e.path().extension() != ".npy") continue;
    CAPTURE(e.path().string());
    const Bytes file = test::read_file(e.path());
    try {
      const NdArray a = parse_npy(file);
      CHECK(a.data.size() == a.num_elements() * a.dtype.size());
      const NdArray b = parse_npy(encode_npy(a));
      CHECK(b.data == a.data);
      CHECK(b.shape == a.shape);
      ++parsed;
    } catch (const InvalidArgument& err) {
      CHECK(err.field() == "descr");  // datetimes, objects
      ++refused;
    }
  }
  if (parsed == 0) {
    WARN("SKIPPED: no .npy fixtures found");
    return;
  }
  CHECK(parsed > 50);

  // Big- and little-endian twins hold the same values.
  const fs::path js = shared / "fixtures/zarr.js/expected";
  if (fs::exists(js / "simple_BE.npy")) {
    const NdArray be = read_npy(js / "simple_BE.npy"), le = read_npy(js / "simple_LE.npy");
    CHECK(be.data == le.data);
    CHECK(le.as<std::int32_t>()[0] == 1);
    CHECK(le.as<std::int32_t>()[1] == 2);
    CHECK(le.as<std::int32_t>()[63] == 3);
    CHECK(read_npy(js / "simple_float16_BE.npy").data == read_npy(js / "simple_float16_LE.npy").data);
    // NumPy's own header for a '<i4' (8, 8) array is exactly what we write.
    CHECK(encode_npy(le) == test::read_file(js / "simple_LE.npy"));
  }
}

// ---- the descr of every DataType (issue #10, shared/cases B45) ------------------------

namespace {

StructField fld(std::string name, DataType type, std::vector<std::uint64_t> shape = {},
                ByteOrder order = ByteOrder::unspecified) {
  StructField f;
  f.name = std::move(name);
  f.type = type;
  f.shape = std::move(shape);
  f.order = order;
  return f;
}

DataType b45_struct() {
  return DataType::structured({fld("a", DataType::fixed_bytes(3)), fld("n", DataTypeKind::int16),
                               fld("u", DataType::fixed_unicode(2)), fld("b", DataType::fixed_bytes(2))});
}

// The kind, field and message of the zarrcoro::Error that `f` raises; FAILs
// if anything else escapes.
struct Raised {
  std::optional<Errc> code;
  std::string field, what;
};
Raised raised(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return {e.code(), e.field(), e.what()};
  } catch (const std::exception& e) {
    FAIL("a non-zarrcoro exception escaped: " << e.what());
  }
  return {};
}

bool printable_ascii(const std::string& s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return c >= 0x20 && c < 0x7f; });
}

}  // namespace

TEST_CASE("npy: npy_descr names S, U and structured types as NumPy writes them (B45 included)") {
  const std::vector<std::pair<DataType, std::string>> scalars{
      {DataTypeKind::bool_, "|b1"},    {DataTypeKind::int8, "|i1"},       {DataTypeKind::int16, "<i2"},
      {DataTypeKind::int32, "<i4"},    {DataTypeKind::int64, "<i8"},      {DataTypeKind::uint8, "|u1"},
      {DataTypeKind::uint16, "<u2"},   {DataTypeKind::uint32, "<u4"},     {DataTypeKind::uint64, "<u8"},
      {DataTypeKind::float16, "<f2"},  {DataTypeKind::float32, "<f4"},    {DataTypeKind::float64, "<f8"},
      {DataTypeKind::complex64, "<c8"}, {DataTypeKind::complex128, "<c16"}, {DataType::fixed_bytes(4), "|S4"},
      {DataType::fixed_bytes(1), "|S1"}, {DataType::fixed_unicode(2), "<U2"}, {DataType::fixed_unicode(100), "<U100"},
  };
  for (const auto& [t, descr] : scalars) {
    CAPTURE(t.describe());
    CHECK(npy_descr(t) == descr);
    CHECK(parse_npy_descr("'" + descr + "'") == t);
  }
  CHECK(npy_descr(b45_struct()) == "[('a', '|S3'), ('n', '<i2'), ('u', '<U2'), ('b', '|S2')]");
  // A declared stored byte order does not show: the engine's buffer is native.
  const DataType declared = DataType::structured(
      {fld("a", DataType::fixed_bytes(3)), fld("n", DataTypeKind::int16, {}, ByteOrder::big),
       fld("u", DataType::fixed_unicode(2), {}, ByteOrder::little), fld("b", DataType::fixed_bytes(2))});
  CHECK(npy_descr(declared) == npy_descr(b45_struct()));
  const DataType nested = DataType::structured(
      {fld("z", DataTypeKind::int16, {2, 2}),
       fld("s", DataType::structured({fld("x", DataTypeKind::uint8), fld("y", DataTypeKind::float64, {3})}), {2}),
       fld("q", DataTypeKind::bool_)});
  CHECK(npy_descr(nested) == "[('z', '<i2', (2, 2)), ('s', [('x', '|u1'), ('y', '<f8', (3,))], (2,)), ('q', '|b1')]");
  CHECK(nested.size() == 59);  // packed, as NumPy's itemsize
  for (DataType t : {b45_struct(), nested}) CHECK(parse_npy_descr(npy_descr(t)) == t);

  // Whole headers byte for byte as NumPy 1.24 np.save writes them (growth
  // room, padding, Latin-1 names in format 1.0, UTF-8 names in 3.0).
  struct Case {
    DataType t;
    std::vector<std::uint64_t> shape;
    std::string numpy_hex;
  };
  const DataType names = DataType::structured(
      {fld("it's", DataTypeKind::uint8), fld("a\\b\"c", DataTypeKind::uint16), fld("\xc3\xa9\t", DataTypeKind::uint8)});
  for (const Case& c : {
           Case{b45_struct(), {3},
                "934e554d50590100b6007b276465736372273a205b282761272c20277c533327292c2028276e272c20273c693227292c2028"
                "2775272c20273c553227292c20282762272c20277c533227295d2c2027666f727472616e5f6f72646572273a2046616c7365"
                "2c20277368617065273a2028332c292c207d2020202020202020202020202020202020202020202020202020202020202020"
                "20202020202020202020202020202020202020202020202020202020202020202020202020202020200a"},
           Case{DataType::fixed_bytes(4), {2},
                "934e554d5059010076007b276465736372273a20277c5334272c2027666f727472616e5f6f72646572273a2046616c73652c"
                "20277368617065273a2028322c292c207d202020202020202020202020202020202020202020202020202020202020202020"
                "2020202020202020202020202020202020202020202020202020200a"},
           Case{DataType::fixed_unicode(2), {2},
                "934e554d5059010076007b276465736372273a20273c5532272c2027666f727472616e5f6f72646572273a2046616c73652c"
                "20277368617065273a2028322c292c207d202020202020202020202020202020202020202020202020202020202020202020"
                "2020202020202020202020202020202020202020202020202020200a"},
           Case{nested, {2, 3},
                "934e554d50590100b6007b276465736372273a205b28277a272c20273c6932272c2028322c203229292c20282773272c205b"
                "282778272c20277c753127292c20282779272c20273c6638272c2028332c29295d2c2028322c29292c20282771272c20277c"
                "623127295d2c2027666f727472616e5f6f72646572273a2046616c73652c20277368617065273a2028322c2033292c207d20"
                "20202020202020202020202020202020202020202020202020202020202020202020202020202020200a"},
           Case{names, {1},
                "934e554d50590100b6007b276465736372273a205b282269742773222c20277c753127292c202827615c5c622263272c2027"
                "3c753227292c202827e95c74272c20277c753127295d2c2027666f727472616e5f6f72646572273a2046616c73652c202773"
                "68617065273a2028312c292c207d202020202020202020202020202020202020202020202020202020202020202020202020"
                "20202020202020202020202020202020202020202020202020202020202020202020202020202020200a"},
           Case{DataType::structured({fld("\xce\xb1", DataTypeKind::int32)}), {4},
                "934e554d50590300740000007b276465736372273a205b2827ceb1272c20273c693427295d2c2027666f727472616e5f6f72"
                "646572273a2046616c73652c20277368617065273a2028342c292c207d202020202020202020202020202020202020202020"
                "2020202020202020202020202020202020202020202020202020200a"},
       }) {
    CAPTURE(c.t.describe());
    const std::string h = npy_header(c.t, c.shape);
    CHECK(test::to_hex(str_bytes(h)) == test::to_hex(test::hex(c.numpy_hex)));
    // ... and it parses back to the same type (names unescaped, Latin-1 decoded).
    NdArray a{c.t, c.shape, {}};
    a.data = pattern(c.t, a.num_elements(), 7);
    const NdArray b = parse_npy(encode_npy(a));
    CHECK(b.dtype == c.t);
    CHECK(b.data == a.data);
    CHECK(encode_npy(b) == encode_npy(a));
  }
}

TEST_CASE("npy: the B45 arrays' dtypes and bytes go through .npy exactly") {
  ZARRCORO_REQUIRE_SHARED(shared);
  Runtime rt({.codec_threads = 1});
  auto store = std::make_shared<FilesystemStore>(rt.io_executor(), shared / "cases" / "v2");
  for (const auto& [name, descr] : std::vector<std::pair<std::string, std::string>>{
           {"b45_struct_strings", "[('a', '|S3'), ('n', '<i2'), ('u', '<U2'), ('b', '|S2')]"},
           {"b45_S4", "|S4"},
           {"b45_U2", "<U2"}}) {
    CAPTURE(name);
    const Array a = Array::open_blocking(rt, store, name);
    CHECK(npy_descr(a.dtype()) == descr);
    const NdArray data = a.read_blocking(Region::all(a.shape()));
    const NdArray back = parse_npy(encode_npy(data));
    CHECK(back.data == data.data);
    CHECK(back.shape == data.shape);
    CHECK(npy_descr(back.dtype) == descr);
    if (name == "b45_struct_strings")
      CHECK(test::to_hex(data.data) == test::to_hex(test::read_file(shared / "cases/v2/b45_struct_strings.expected.bin")));
  }
}

TEST_CASE("npy: structured fields stored big-endian are swapped field by field; Fortran order too") {
  // Two records of [('a', '>i4'), ('b', '<i2'), ('c', '>U1', (2,)), ('d', '|S2')].
  const Bytes stored = test::hex(
      "00000001 0200 00000041 00000042 7879"
      "fffffffe 0300 000000e9 00000000 7a00");
  const NdArray a = parse_npy(npy_file(
      "{'descr': [('a', '>i4'), ('b', '<i2'), ('c', '>U1', (2,)), ('d', '|S2')], 'fortran_order': False, "
      "'shape': (2,), }",
      stored));
  CHECK(npy_descr(a.dtype) == "[('a', '<i4'), ('b', '<i2'), ('c', '<U1', (2,)), ('d', '|S2')]");
  for (const auto& f : a.dtype.fields()) CHECK(f.order == ByteOrder::unspecified);
  CHECK(test::to_hex(a.data) == test::to_hex(test::hex("01000000 0200 41000000 42000000 7879"
                                                       "feffffff 0300 e9000000 00000000 7a00")));
  // A big-endian U and a Fortran-order struct array.
  CHECK(test::to_hex(parse_npy(npy_file(header(">U2", "(1,)"), test::hex("00000078 000000e9"))).data) ==
        "78 00 00 00 e9 00 00 00");
  const NdArray f = parse_npy(npy_file("{'descr': [('x', '|u1'), ('y', '<u2')], 'fortran_order': True, 'shape': (2, 2), }",
                                       test::hex("000a00 010b00 020c00 030d00")));  // (0,0) (1,0) (0,1) (1,1)
  CHECK(test::to_hex(f.data) == test::to_hex(test::hex("000a00 020c00 010b00 030d00")));
}

TEST_CASE("npy: a header nested 30,000 deep is an InvalidArgument, not a stack overflow") {
  const std::string deep(30000, '[');
  for (const std::string& h : {"{'descr': " + deep, "{'descr': '<i4', 'fortran_order': False, 'shape': " +
                                                        std::string(30000, '(')}) {
    const Raised r = raised([&] { parse_npy(npy_file(h, {})); });
    CHECK(r.code == Errc::invalid_argument);
    CHECK(r.field == "header");
    CHECK(r.what.find("nested deeper than 64") != std::string::npos);
    CHECK(r.what.size() < 300);
  }
  CHECK(raised([&] { parse_npy_descr(deep); }).field == "header");
  // Within the literal's limit but structs nested beyond kNpyMaxStructDepth.
  std::string descr = "'<i4'";
  for (int i = 0; i < 17; ++i) descr = "[('f', " + descr + ")]";
  CHECK(raised([&] { parse_npy_descr(descr); }).field == "descr");
  std::string ok = "'<i4'";
  for (int i = 0; i < 16; ++i) ok = "[('f', " + ok + ")]";
  CHECK(parse_npy_descr(ok).size() == 4);
}

TEST_CASE("npy: shapes whose size overflows fail before any allocation") {
  const Bytes four(4);
  for (const std::string& shape : {"(1099511627776, 1099511627776)", "(18446744073709551615, 2)",
                                   "(4294967296, 4294967296, 16)"}) {
    CAPTURE(shape);
    CHECK(field_of(npy_file(header("<i4", shape), four)) == "data");
    CHECK(field_of(npy_file("{'descr': [('a', '|S3'), ('u', '<U2')], 'fortran_order': False, 'shape': " + shape + "}",
                            four)) == "data");
  }
  CHECK(field_of(npy_file(header("<i4", "(18446744073709551616,)"), four)) == "header");  // beyond 64 bits
  std::string many = "(";
  for (int i = 0; i < 65; ++i) many += "1, ";
  CHECK(field_of(npy_file(header("<i4", many + ")"), four)) == "shape");
  // Subarray shapes whose element count wraps around 2^64 or exceeds 2^31.
  for (const std::string& sub : {"(9223372036854775809, 2)", "(4294967296, 4294967296)", "(2147483648,)", "(0,)"}) {
    CAPTURE(sub);
    CHECK(field_of(npy_file("{'descr': [('a', '|u1', " + sub + ")], 'fortran_order': False, 'shape': (1,)}", four)) ==
          "descr");
  }
  // Element sizes: DataType's 2^31 limit, as a descr error.
  CHECK(field_of(npy_file(header("|S2147483648", "(1,)"), four)) == "descr");
  CHECK(field_of(npy_file(header("<U1073741824", "(1,)"), four)) == "descr");
  CHECK(field_of(npy_file(header("|S99999999999999999999999", "(1,)"), four)) == "descr");
  CHECK(field_of(npy_file("{'descr': [('a', '|S1073741824'), ('b', '|S1073741824')], 'fortran_order': False, "
                          "'shape': (1,)}",
                          four)) == "descr");
  // A header length beyond the limit is refused before it is read.
  Bytes big = str_bytes(std::string("\x93NUMPY\x02\x00\xf0\xff\xff\xff{", 13));
  CHECK(field_of(big) == "header");
  CHECK(raised([&] { parse_npy(big); }).what.find("exceeds the limit") != std::string::npos);
}

TEST_CASE("npy: bad descrs, invalid UTF-8 and truncation give InvalidArgument with printable messages") {
  const Bytes two(2);
  struct Case {
    std::string header;
    std::string field;
    int major = 1;
  };
  for (const Case& c : {
           Case{"{'descr': [], 'fortran_order': False, 'shape': (1,)}", "descr"},
           Case{"{'descr': [('a',)], 'fortran_order': False, 'shape': (1,)}", "descr"},
           Case{"{'descr': [('a', '|u1', (1,), 4)], 'fortran_order': False, 'shape': (1,)}", "descr"},
           Case{"{'descr': [(1, '|u1')], 'fortran_order': False, 'shape': (1,)}", "descr"},
           Case{"{'descr': [('a', '|u1'), ('a', '|u1')], 'fortran_order': False, 'shape': (1,)}", "descr"},
           Case{"{'descr': [('', '|V2')], 'fortran_order': False, 'shape': (1,)}", "descr"},
           Case{"{'descr': [(('title', 'a'), '<i2')], 'fortran_order': False, 'shape': (1,)}", "descr"},
           Case{"{'descr': [('a', '<i2', ('x',))], 'fortran_order': False, 'shape': (1,)}", "descr"},
           Case{"{'descr': [('a', 7)], 'fortran_order': False, 'shape': (1,)}", "descr"},
           Case{"{'descr': {'names': ['a'], 'formats': ['<i2']}, 'fortran_order': False, 'shape': (1,)}", "descr"},
           Case{"{'descr': '|S', 'fortran_order': False, 'shape': (1,)}", "descr"},
           Case{"{'descr': '<U0', 'fortran_order': False, 'shape': (1,)}", "descr"},
           Case{"{'descr': '<U-1', 'fortran_order': False, 'shape': (1,)}", "descr"},
           Case{"{'descr': '\xff\xfe\x01', 'fortran_order': False, 'shape': (1,)}", "descr"},  // Latin-1 in 1.0
           Case{"{'descr': '<i2\xff', 'fortran_order': False, 'shape': (1,)}", "header", 3},  // not UTF-8 in 3.0
           Case{"{'descr': '<i2', 'fortran_order': False, 'shape': (1,)\xc0\x80}", "header", 3},  // overlong
           Case{"{'descr': '<i2', \x01'fortran_order': False, 'shape': (1,)}", "header"},
           Case{std::string("{'descr': '<i2\x00', 'fortran_order': False, 'shape': (1,)}", 56), "header"},
           Case{"{'descr': '<i\\x3', 'fortran_order': False, 'shape': (1,)}", "header"},
           Case{"{'descr': '\\ud800', 'fortran_order': False, 'shape': (1,)}", "header"},
           Case{"{'descr': '\\U00110000', 'fortran_order': False, 'shape': (1,)}", "header"},
           Case{"{'descr': '<i2\n', 'fortran_order': False, 'shape': (1,)}", "header"},
           Case{"{'descr': '<i2', 'fortran_order': False, 'shape': (1,), '\xe9\x01': 1}", "header"},
       }) {
    CAPTURE(c.header);
    const Raised r = raised([&] { parse_npy(npy_file(c.header, two, c.major)); });
    CHECK(r.code == Errc::invalid_argument);
    CHECK(r.field == c.field);
    CHECK(printable_ascii(r.what));
  }
  // Escapes NumPy writes in names decode to the same UTF-8 names.
  CHECK(parse_npy_descr("[(\"it's\", '|u1'), ('a\\\\b\\tc\\x41\\u00e9\\U0001F600\\101', '|u1')]").fields()[1].name ==
        "a\\b\tcA\xc3\xa9\xf0\x9f\x98\x80" "A");
  // Truncated at every length: an InvalidArgument each time.
  NdArray a{b45_struct(), {2}, {}};
  a.data = pattern(a.dtype, 2, 3);
  const Bytes good = encode_npy(a);
  for (std::size_t n = 0; n < good.size(); ++n) {
    CAPTURE(n);
    CHECK(raised([&] { parse_npy(Bytes(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(n))); }).code ==
          Errc::invalid_argument);
  }
}

TEST_CASE("npy: mutated and random headers raise only zarrcoro errors") {
  NdArray a{DataType::structured({fld("a", DataType::fixed_bytes(3)), fld("n", DataTypeKind::int16, {2}),
                                  fld("s", DataType::structured({fld("u", DataType::fixed_unicode(2))}))}),
            {2},
            {}};
  a.data = pattern(a.dtype, 2, 5);
  const Bytes good = encode_npy(a);
  const std::size_t hend = 10 + (std::to_integer<std::size_t>(good[8]) | std::to_integer<std::size_t>(good[9]) << 8);
  std::size_t parsed = 0, refused = 0;
  for (std::size_t i = 0; i < hend; ++i)
    for (unsigned v : {0x00u, 0x01u, 0x0au, 0x22u, 0x27u, 0x28u, 0x29u, 0x2cu, 0x30u, 0x39u, 0x5bu, 0x5cu, 0x5du, 0x7bu,
                       0x7du, 0x80u, 0xc3u, 0xffu}) {
      Bytes m = good;
      m[i] = std::byte(v);
      const Raised r = raised([&] { parse_npy(m); });
      if (!r.code) {
        ++parsed;
        continue;
      }
      ++refused;
      CAPTURE(i, v, r.what);
      CHECK(r.code == Errc::invalid_argument);
      CHECK(printable_ascii(r.what));
    }
  CHECK(refused > 1000);
  // Random Python-ish text.
  std::mt19937 rng(45);
  const std::string alphabet = "{}[](),:'\" \\xuU0123456789SUVObifc<>|=TrueFalseNone-L\xff\xc3\x80";
  for (int k = 0; k < 20000; ++k) {
    std::string h = "{'descr': ";
    const std::size_t len = rng() % 60;
    for (std::size_t j = 0; j < len; ++j) h += alphabet[rng() % alphabet.size()];
    const Raised r = raised([&] { parse_npy(npy_file(h, {}, 1 + static_cast<int>(rng() % 3))); });
    CAPTURE(h);
    CHECK(r.code == Errc::invalid_argument);
    CHECK(printable_ascii(r.what));
  }
}

TEST_CASE("npy: types and shapes a .npy cannot hold are refused by the writer as UnsupportedError") {
  DataType deep = DataTypeKind::int32;
  for (int i = 0; i < 17; ++i) deep = DataType::structured({fld("f", deep)});
  Raised r = raised([&] { npy_descr(deep); });
  CHECK(r.code == Errc::unsupported);
  CHECK(r.field == "descr");
  CHECK(raised([&] { encode_npy({deep, {1}, Bytes(4)}); }).code == Errc::unsupported);
  const fs::path file = fs::temp_directory_path() / ("zarrcoro_npy_deep_" + std::to_string(std::random_device{}()));
  try {
    write_npy(file, {deep, {1}, Bytes(4)});
    FAIL("no error");
  } catch (const UnsupportedError& e) {
    CHECK(e.key() == file.string());
    CHECK(e.field() == "descr");
  }
  CHECK_FALSE(fs::exists(file));

  const DataType wide = DataType::structured({fld("w", DataTypeKind::uint8, std::vector<std::uint64_t>(65, 1))});
  CHECK(raised([&] { npy_descr(wide); }).code == Errc::unsupported);
  r = raised([&] { npy_header(DataTypeKind::uint8, std::vector<std::uint64_t>(65, 1)); });
  CHECK(r.code == Errc::unsupported);
  CHECK(r.field == "shape");
  CHECK(npy_header(DataTypeKind::uint8, std::vector<std::uint64_t>(64, 1)).size() % 64 == 0);
}

namespace {

// The box `r` of the C-order array `a`, element by element.
Bytes box_of(const NdArray& a, const Region& r) {
  const std::size_t item = a.dtype.size();
  Bytes out(r.num_elements() * item);
  if (out.empty()) return out;
  std::vector<std::uint64_t> idx = r.start;
  for (std::uint64_t n = 0; n < r.num_elements(); ++n) {
    std::uint64_t off = 0;
    for (std::size_t d = 0; d < idx.size(); ++d) off = off * a.shape[d] + idx[d];
    std::memcpy(out.data() + n * item, a.data.data() + off * item, item);
    for (std::size_t d = idx.size(); d-- > 0;) {
      if (++idx[d] < r.stop[d]) break;
      idx[d] = r.start[d];
    }
  }
  return out;
}

void write_bytes(const fs::path& p, const Bytes& b) {
  std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

}  // namespace

TEST_CASE("npy: NpyReader reads any box of C, Fortran, big-endian and structured files exactly") {
  test::TempDir tmp;
  // 3-d int32, value i*12 + j*4 + k: C order little-endian, Fortran order big-endian.
  std::vector<std::int32_t> c(24), f(24);
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k) {
        c[i * 12 + j * 4 + k] = i * 12 + j * 4 + k;
        f[i + 2 * j + 6 * k] = static_cast<std::int32_t>(__builtin_bswap32(static_cast<std::uint32_t>(i * 12 + j * 4 + k)));
      }
  Bytes cb(96), fb(96);
  std::memcpy(cb.data(), c.data(), 96);
  std::memcpy(fb.data(), f.data(), 96);
  write_bytes(tmp.path / "c.npy", npy_file(header("<i4", "(2, 3, 4)"), cb));
  write_bytes(tmp.path / "f.npy", npy_file(header(">i4", "(2, 3, 4)", true), fb));
  const NdArray whole{DataTypeKind::int32, {2, 3, 4}, cb};
  for (const char* name : {"c.npy", "f.npy"}) {
    const NpyReader r(tmp.path / name);
    CHECK(r.dtype() == DataTypeKind::int32);
    CHECK(r.shape() == std::vector<std::uint64_t>{2, 3, 4});
    CHECK(r.fortran_order() == (std::string(name) == "f.npy"));
    for (const Region& box : {Region::all({2, 3, 4}), Region{{0, 0, 0}, {1, 3, 4}}, Region{{1, 1, 1}, {2, 3, 3}},
                              Region{{0, 2, 0}, {2, 3, 4}}, Region{{0, 0, 3}, {2, 3, 4}}, Region{{1, 0, 0}, {1, 3, 4}}}) {
      INFO(name << " box " << box.start[0] << box.start[1] << box.start[2] << ":" << box.stop[0] << box.stop[1]
                << box.stop[2]);
      const NdArray got = r.read(box);
      CHECK(got.shape == box.shape());
      CHECK(got.data == box_of(whole, box));
    }
    CHECK(error_field([&] { r.read(Region{{0, 0, 0}, {3, 3, 4}}); }) == "region");
    CHECK(error_field([&] { r.read(Region{{0}, {1}}); }) == "region");
  }

  // A structured file with one big-endian field: swapped field by field, as parse_npy does.
  const Bytes rec = concat({raw<std::uint16_t>({0x0102}), raw<std::uint32_t>({0x01020304})});
  Bytes recs;
  for (int i = 0; i < 5; ++i) recs = concat({recs, rec});
  const Bytes file = npy_file("{'descr': [('a', '<u2'), ('b', '>u4')], 'fortran_order': False, 'shape': (5,), }", recs);
  write_bytes(tmp.path / "s.npy", file);
  const NdArray parsed = parse_npy(file);
  const NpyReader s(tmp.path / "s.npy");
  CHECK(s.dtype() == parsed.dtype);
  CHECK(s.read(Region{{1}, {4}}).data == box_of(parsed, Region{{1}, {4}}));

  // Rank 0, an empty box; the header's errors as read_npy's.
  write_bytes(tmp.path / "z.npy", npy_file(header("<f8", "()"), raw<double>({2.5})));
  CHECK(NpyReader(tmp.path / "z.npy").read(Region{}).data == raw<double>({2.5}));
  CHECK(NpyReader(tmp.path / "c.npy").read(Region{{1, 1, 1}, {1, 3, 4}}).data.empty());
  write_bytes(tmp.path / "short.npy", npy_file(header("<i4", "(2, 3, 4)"), Bytes(95)));
  CHECK(error_field([&] { NpyReader(tmp.path / "short.npy"); }) == "data");
  CHECK(error_field([&] { NpyReader(tmp.path / "missing.npy"); }) == "file");
}

TEST_CASE("npy: NpyWriter writes boxes in any order; the file appears only on commit") {
  test::TempDir tmp;
  const DataType t = DataTypeKind::uint16;
  const NdArray a{t, {5, 7}, pattern(t, 35, 3)};
  const fs::path out = tmp.path / "out.npy";
  {
    NpyWriter w(out, t, a.shape);
    for (const Region& box : {Region{{3, 0}, {5, 7}}, Region{{0, 4}, {3, 7}}, Region{{0, 0}, {3, 4}}})
      w.write(box, box_of(a, box));
    CHECK_FALSE(fs::exists(out));
    CHECK(error_field([&] { w.write(Region{{0, 0}, {6, 7}}, Bytes(84)); }) == "region");
    CHECK(error_field([&] { w.write(Region{{0, 0}, {1, 7}}, Bytes(13)); }) == "data");
    w.commit();
  }
  CHECK(test::read_file(out) == encode_npy(a));

  // Destroyed without commit: nothing left behind, an existing file untouched.
  { NpyWriter w(out, t, {2}); }
  CHECK(test::read_file(out) == encode_npy(a));
  CHECK(std::distance(fs::directory_iterator(tmp.path), fs::directory_iterator{}) == 1);
  CHECK(error_field([&] { NpyWriter(tmp.path / "no/such/dir/x.npy", t, {2}); }) == "file");
}

TEST_CASE("npy: NpyWriter replaces a symlink's target and keeps its mode; a device or FIFO is refused, never blocks") {
  test::TempDir tmp;
  const DataType t = DataTypeKind::uint16;
  const NdArray a{t, {5, 7}, pattern(t, 35, 3)};
  const fs::path target = tmp.path / "target.npy", link = tmp.path / "link.npy";
  write_bytes(target, Bytes(3));
  fs::permissions(target, fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read);
  fs::create_symlink("target.npy", link);
  {
    NpyWriter w(link, t, a.shape);
    w.write(Region::all(a.shape), a.data);
    w.commit();
  }
  CHECK(fs::is_symlink(link));  // written through, not replaced by a file
  CHECK(test::read_file(target) == encode_npy(a));
  CHECK(fs::status(target).permissions() == (fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read));
  CHECK(std::distance(fs::directory_iterator(tmp.path), fs::directory_iterator{}) == 2);  // no temporary file left
  REQUIRE(::mkfifo((tmp.path / "fifo").c_str(), 0600) == 0);
  CHECK(error_field([&] { NpyWriter(tmp.path / "fifo", t, {2}); }) == "file");
  CHECK(error_field([&] { NpyReader r(tmp.path / "fifo"); }) == "file");  // (an open without a writer would block)
  CHECK(error_field([&] { NpyWriter("/dev/null", t, {2}); }) == "file");
}
