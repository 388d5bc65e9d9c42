// .npy reader and writer: exact round trips, hand-built headers, byte order,
// Fortran order, versions 2.0/3.0, typed errors, and NumPy-written fixtures.
#include <cstring>
#include <filesystem>
#include <functional>
#include <random>
#include <string>

#include <catch2/catch.hpp>

#include <zarrcoro/error.hpp>
#include <zarrcoro/npy.hpp>

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

  CHECK(field_of(npy_file(header("<U3", "(2,)"), Bytes(24))) == "descr");
  CHECK(field_of(npy_file(header("|O", "(2,)"), Bytes(16))) == "descr");
  CHECK(field_of(npy_file(header("<M8[ns]", "(2,)"), Bytes(16))) == "descr");
  CHECK(field_of(npy_file(header("<i3", "(2,)"), Bytes(6))) == "descr");
  CHECK(field_of(npy_file(header("|S1", "(2,)"), Bytes(2))) == "descr");
  CHECK(field_of(npy_file("{'descr': [('a', '<i4')], 'fortran_order': False, 'shape': (6,), }", six)) == "descr");
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
      CHECK(err.field() == "descr");  // strings, datetimes
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
