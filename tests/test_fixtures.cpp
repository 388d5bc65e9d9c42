// Real Zarr v3 and v2 data written by zarrs, zarr-python 2 and 3 and for
// zarr.js (shared/fixtures): every array listed in an EXPECTED.json reads
// exactly, or fails with a clear UnsupportedError naming the codec or data
// type when it is outside the set this engine implements.
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>

#include <catch2/catch.hpp>

#include <zarrcoro/array.hpp>
#include <zarrcoro/error.hpp>
#include <zarrcoro/npy.hpp>
#include <zarrcoro/runtime.hpp>
#include <zarrcoro/store/filesystem.hpp>

#include "support.hpp"

using namespace zarrcoro;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

// Codecs outside the Zarr core set that may be reported as unsupported.
const char* kOutsideCore[] = {"bz2", "zfpy", "pcodec", "adler32", "fletcher32"};
// Types whose support lands with later issues.
const char* kPending[] = {"\"string\""};

bool mentions(const std::string& text, const char* what) { return text.find(what) != std::string::npos; }

double element(const NdArray& a, std::size_t i, std::size_t component) {
  const auto* p = a.data.data() + i * a.dtype.size();
  auto get = [&]<class T>(T) {
    T v;
    std::memcpy(&v, p + component * sizeof(T), sizeof(T));
    return static_cast<double>(v);
  };
  using K = DataTypeKind;
  switch (a.dtype.kind()) {
    case K::float16: {
      std::uint16_t h;
      std::memcpy(&h, p, 2);
      return float16_to_float32(h);
    }
    case K::float32: case K::complex64: return get(float{});
    case K::float64: case K::complex128: return get(double{});
    default: return 0;
  }
}

void compare(const NdArray& got, const NdArray& want, const json& spec, const std::string& name) {
  INFO(name);
  REQUIRE(got.dtype == want.dtype);
  REQUIRE(got.shape == want.shape);
  const std::size_t n = spec.contains("compare_prefix") ? spec["compare_prefix"].get<std::size_t>()
                                                         : static_cast<std::size_t>(got.num_elements());
  if (spec.contains("tolerance")) {
    const double tol = spec["tolerance"].get<double>();
    for (std::size_t i = 0; i < n; ++i) REQUIRE(std::abs(element(got, i, 0) - element(want, i, 0)) <= tol);
    return;
  }
  const std::size_t bytes = n * got.dtype.size();
  if (std::memcmp(got.data.data(), want.data.data(), bytes) != 0) {
    for (std::size_t i = 0; i < bytes; ++i)
      if (got.data[i] != want.data[i]) FAIL("first differing byte at offset " << i);
  }
}

struct Tally {
  int exact = 0, unsupported = 0, pending = 0;
};

// read_npy covers the numeric dtypes; the v2 fixtures also hold byte strings
// ('|S1') and UTF-32 strings ('<U4'), whose .npy data is the raw elements.
NdArray read_expected(const fs::path& file) {
  try {
    return read_npy(file);
  } catch (const InvalidArgument& e) {
    if (e.field() != "descr") throw;
  }
  const Bytes raw = test::read_file(file);
  const std::string head(reinterpret_cast<const char*>(raw.data()), std::min<std::size_t>(raw.size(), 4096));
  std::uint16_t header_len;
  std::memcpy(&header_len, raw.data() + 8, 2);  // format 1.0
  const auto field = [&](const std::string& name) {
    const auto at = head.find("'" + name + "': ");
    REQUIRE(at != std::string::npos);
    return head.substr(at + name.size() + 4);
  };
  const std::string descr = field("descr").substr(1, field("descr").find('\'', 1) - 1);
  const std::string shape_text = field("shape").substr(1, field("shape").find(')') - 1);
  NdArray a;
  const std::size_t n = std::stoul(descr.substr(2));
  REQUIRE((descr[1] == 'S' || descr[1] == 'U'));
  a.dtype = descr[1] == 'S' ? DataType::fixed_bytes(n) : DataType::fixed_unicode(n);
  for (std::size_t pos = 0; pos < shape_text.size();) {
    const auto comma = shape_text.find(',', pos);
    const std::string item = shape_text.substr(pos, comma - pos);
    if (item.find_first_of("0123456789") != std::string::npos) a.shape.push_back(std::stoull(item));
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  a.data.assign(raw.begin() + 10 + header_len, raw.end());
  REQUIRE(a.data.size() == a.num_elements() * a.dtype.size());
  if (descr[0] == '>') apply_swap_runs(a.dtype.swap_runs(ByteOrder::big), a.dtype.size(), a.data.data(), a.data.data(), a.num_elements());
  return a;
}

// Arrays whose documented reading differs from EXPECTED.json: zarr-python 2
// reads `nested_legacy` (no dimension_separator, keys "0/0") only through
// its NestedDirectoryStore; by the v2 spec the separator is ".", so chunk
// "0.0" is missing and the array reads as its fill value (PROVENANCE.md).
const char* kReadsAsFill[] = {"fixture/nested_legacy"};

// Reads the arrays of `folder` stored in `zarr_format` (v3: zarr.json; v2:
// .zarray and no zarr.json).
void run_folder(const fs::path& folder, Tally& tally, int zarr_format = 3) {
  const auto expected = json::parse(std::ifstream(folder / "EXPECTED.json"));
  Runtime rt({.codec_threads = 2});
  auto store = std::make_shared<FilesystemStore>(rt.io_executor(), folder);
  for (const auto& [path, spec] : expected.items()) {
    const fs::path v3_meta = folder / path / "zarr.json";
    const fs::path meta = zarr_format == 3 ? v3_meta : folder / path / ".zarray";
    if (!fs::exists(meta) || (zarr_format == 2 && fs::exists(v3_meta))) continue;
    const std::string meta_key = path + (zarr_format == 3 ? "/zarr.json" : "/.zarray");
    std::ifstream in(meta);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (std::any_of(std::begin(kPending), std::end(kPending), [&](auto w) { return mentions(text, w); })) {
      ++tally.pending;
      continue;
    }
    const auto outside = std::find_if(std::begin(kOutsideCore), std::end(kOutsideCore),
                                      [&](auto w) { return mentions(text, w); });
    if (outside != std::end(kOutsideCore)) {
      INFO(path);
      try {
        Array::open_blocking(rt, store, path);
        FAIL("expected UnsupportedError for " << path);
      } catch (const UnsupportedError& e) {
        CHECK(std::string(e.what()).find(*outside) != std::string::npos);
        CHECK(e.key() == meta_key);
      }
      ++tally.unsupported;
      continue;
    }
    auto a = Array::open_blocking(rt, store, path);
    NdArray want;
    if (spec.contains("npy")) {
      want = read_expected(folder / spec["npy"].get<std::string>());
    } else {
      FAIL("unhandled expectation form for " << path);
    }
    if (std::find(std::begin(kReadsAsFill), std::end(kReadsAsFill), path) != std::end(kReadsAsFill)) {
      const NdArray got = a.read_blocking(Region::all(a.shape()));
      INFO(path);
      CHECK(got.shape == want.shape);
      CHECK(std::all_of(got.data.begin(), got.data.end(), [](std::byte b) { return b == std::byte{0}; }));
      continue;
    }
    compare(a.read_blocking(Region::all(a.shape())), want, spec, path);
    ++tally.exact;
  }
}

}  // namespace

TEST_CASE("zarrs codec snapshots (14 data types x codecs) read exactly", "[fixtures]") {
  ZARRCORO_REQUIRE_SHARED(shared);
  Tally t;
  run_folder(shared / "fixtures" / "zarrs_snapshot_data", t);
  CHECK(t.exact == 112);  // bytes, transpose, sharding, blosc, crc32c, gzip, zstd x (14 types + 2 NaN-fill floats)
  CHECK(t.pending == 0);
  WARN("zarrs_snapshot_data: " << t.exact << " exact");
}

TEST_CASE("zarrs and zarr-python v3 arrays read exactly", "[fixtures]") {
  ZARRCORO_REQUIRE_SHARED(shared);
  Tally t;
  run_folder(shared / "fixtures" / "zarrs", t);
  CHECK(t.exact == 14);  // incl. blosc (3), sharding (2), fixed_length_utf32 and numcodecs.zlib
  CHECK(t.unsupported == 8);
  WARN("zarrs: " << t.exact << " exact, " << t.unsupported << " unsupported (clear error), " << t.pending
                 << " pending (strings)");
}

TEST_CASE("zarr-python 2 format-compatibility arrays (v2) read exactly", "[fixtures][v2]") {
  ZARRCORO_REQUIRE_SHARED(shared);
  Tally t;
  run_folder(shared / "fixtures" / "zarr-python-v2", t, 2);
  // 24 arrays x {none, zlib, blosc zstd noshuffle/shuffle/bitshuffle, blosc lz4}
  // + flat, flat_legacy, meta, nested; nested_legacy reads as fill (above).
  CHECK(t.exact == 148);
  CHECK(t.unsupported == 24);  // bz2 x 24
  WARN("zarr-python-v2: " << t.exact << " exact, " << t.unsupported << " unsupported (bz2, clear error)");
}

TEST_CASE("zarr.js fixtures (v2: big-endian, F order, nested keys, float16) read exactly", "[fixtures][v2]") {
  ZARRCORO_REQUIRE_SHARED(shared);
  Tally t;
  run_folder(shared / "fixtures" / "zarr.js", t, 2);
  CHECK(t.exact == 12);
  CHECK(t.unsupported == 0);
}

TEST_CASE("zarrs v2 and zarr-python 3 v2 arrays read exactly", "[fixtures][v2]") {
  ZARRCORO_REQUIRE_SHARED(shared);
  Tally t;
  run_folder(shared / "fixtures" / "zarrs", t, 2);
  // v2/: none C/F, blosc C/F, gzip, zstd; zarr_python_compat/: fill null x 3, <U4 and >U4.
  CHECK(t.exact == 11);
  CHECK(t.unsupported == 5);  // bz2, pcodec, zfpy, adler32, fletcher32
  WARN("zarrs v2: " << t.exact << " exact, " << t.unsupported << " unsupported (clear error)");
}

TEST_CASE("a partial region of a real array matches the same slice of the whole", "[fixtures]") {
  ZARRCORO_REQUIRE_SHARED(shared);
  const fs::path folder = shared / "fixtures" / "zarrs";
  Runtime rt({.codec_threads = 2});
  auto store = std::make_shared<FilesystemStore>(rt.io_executor(), folder);
  auto a = Array::open_blocking(rt, store, "v3/array_zstd.zarr");
  const auto want = read_npy(folder / "expected/float32_10x10_arange.npy");
  const auto r = a.read_blocking(Region::parse("3:8,2:9", a.shape()));
  REQUIRE(r.shape == std::vector<std::uint64_t>{5, 7});
  for (std::size_t i = 0; i < 5; ++i)
    for (std::size_t j = 0; j < 7; ++j)
      REQUIRE(r.as<float>()[i * 7 + j] == want.as<float>()[(i + 3) * 10 + (j + 2)]);
}
