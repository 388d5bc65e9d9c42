// Codec and codec pipeline tests: exact known answers for every codec, the
// shared/cases regressions that concern codecs (B14 index, B16, B20, B21,
// B23), pipeline parsing rules and errors, round trips of every data type,
// and the numcodecs fixture streams (zstd, zlib, gzip, crc32c).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include <zarrcoro/error.hpp>

#include "codecs/box.hpp"
#include "codecs/codec.hpp"
#include "codecs/pipeline.hpp"
#include "support.hpp"

namespace zarrcoro::codecs::detail {
std::uint32_t crc32c_portable(ByteSpan data, std::uint32_t seed);  // defined in codecs/codec.cpp
}

using namespace zarrcoro;
using namespace zarrcoro::codecs;
using zarrcoro::test::hex;
using zarrcoro::test::to_hex;
using json = nlohmann::json;
using Catch::Matchers::Contains;

namespace {

ByteSpan span_of(const std::string& s) { return {reinterpret_cast<const std::byte*>(s.data()), s.size()}; }
std::string str(ByteSpan b) { return {reinterpret_cast<const char*>(b.data()), b.size()}; }

Bytes iota_bytes(std::size_t n, int start = 0) {
  Bytes b(n);
  for (std::size_t i = 0; i < n; ++i) b[i] = static_cast<std::byte>((start + i) & 0xff);
  return b;
}

Bytes random_bytes(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  Bytes b(n);
  for (auto& x : b) x = static_cast<std::byte>(rng() & 0xff);
  return b;
}

Bytes concat(ByteSpan a, ByteSpan b) {
  Bytes r(a.begin(), a.end());
  r.insert(r.end(), b.begin(), b.end());
  return r;
}

template <class E, class F>
std::optional<E> catch_as(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e;
  }
  return std::nullopt;
}

// Runs `expr`, requires it to throw `Type` naming `fld`, with `text` in the message.
#define CHECK_ERROR(expr, Type, fld, text)                               \
  do {                                                                   \
    auto e_ = catch_as<Type>([&] { (void)(expr); });                     \
    REQUIRE(e_.has_value());                                             \
    CHECK(e_->field() == (fld));                                         \
    CHECK_THAT(std::string(e_->what()), Contains(text));                 \
  } while (0)

// The reference transpose, straight from the spec: B[B_pos] = A[A_pos] with
// B_pos[i] = A_pos[order[i]].
Bytes naive_transpose(ByteSpan a, const std::vector<std::uint64_t>& a_shape,
                      const std::vector<std::size_t>& order, std::size_t es) {
  const std::size_t rank = a_shape.size();
  std::vector<std::uint64_t> b_shape(rank), a_strides(rank, 1);
  for (std::size_t i = 0; i < rank; ++i) b_shape[i] = a_shape[order[i]];
  for (std::size_t i = rank; i-- > 1;) a_strides[i - 1] = a_strides[i] * a_shape[i];
  Bytes b(a.size());
  std::vector<std::uint64_t> pos(rank, 0);
  for (std::size_t lin = 0; lin < a.size() / es; ++lin) {
    std::uint64_t src = 0;
    for (std::size_t i = 0; i < rank; ++i) src += pos[i] * a_strides[order[i]];
    std::memcpy(b.data() + lin * es, a.data() + src * es, es);
    for (std::size_t i = rank; i-- > 0;) {
      if (++pos[i] < b_shape[i]) break;
      pos[i] = 0;
    }
  }
  return b;
}

Bytes swapped(ByteSpan a, std::size_t unit) {
  Bytes b(a.begin(), a.end());
  for (std::size_t i = 0; i < b.size(); i += unit) std::reverse(b.begin() + i, b.begin() + i + unit);
  return b;
}

// A zstd frame without a content size, made of raw blocks (as TensorStore's
// streaming writer leaves the size out): RFC 8878 section 3.1.1.
Bytes raw_zstd_frame(ByteSpan data, std::size_t block) {
  Bytes f = hex("28 b5 2f fd 00 58");  // magic; FHD 0: no size, no checksum; window 2 MiB
  std::size_t pos = 0;
  do {
    const std::size_t n = std::min(block, data.size() - pos);
    const std::uint32_t h = static_cast<std::uint32_t>(n << 3) | (pos + n == data.size() ? 1 : 0);
    for (int k = 0; k < 3; ++k) f.push_back(static_cast<std::byte>((h >> (8 * k)) & 0xff));
    f.insert(f.end(), data.begin() + pos, data.begin() + pos + n);
    pos += n;
  } while (pos < data.size());
  return f;
}

// CRC-32 (IEEE, as in the gzip trailer), bit by bit.
std::uint32_t crc32_ieee(ByteSpan data) {
  std::uint32_t c = 0xffffffffu;
  for (auto b : data) {
    c ^= static_cast<std::uint8_t>(b);
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
  }
  return ~c;
}

std::uint32_t le32(const std::byte* p) {
  std::uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

const std::vector<DataTypeKind> kAllKinds = {
    DataTypeKind::bool_,   DataTypeKind::int8,    DataTypeKind::int16,     DataTypeKind::int32,
    DataTypeKind::int64,   DataTypeKind::uint8,   DataTypeKind::uint16,    DataTypeKind::uint32,
    DataTypeKind::uint64,  DataTypeKind::float16, DataTypeKind::float32,   DataTypeKind::float64,
    DataTypeKind::complex64, DataTypeKind::complex128};

std::shared_ptr<const CodecPipeline> parse(const std::string& codecs, DataType dt,
                                           std::vector<std::uint64_t> shape) {
  return CodecPipeline::from_json(json::parse(codecs), ArraySpec{dt, std::move(shape)});
}

}  // namespace

// ---------------------------------------------------------------- basics

TEST_CASE("ArraySpec counts elements and bytes", "[codecs]") {
  CHECK(ArraySpec{DataTypeKind::float32, {}}.num_elements() == 1);  // 0-d: one element
  CHECK(ArraySpec{DataTypeKind::float32, {}}.num_bytes() == 4);
  CHECK(ArraySpec{DataTypeKind::int16, {2, 3, 5}}.num_elements() == 30);
  CHECK(ArraySpec{DataTypeKind::complex128, {2, 3}}.num_bytes() == 96);
  CHECK(ArraySpec{DataTypeKind::uint8, {4, 0, 7}}.num_bytes() == 0);
}

TEST_CASE("crc32c known answers", "[codecs][crc32c]") {
  CHECK(crc32c(span_of("123456789")) == 0xE3069283u);
  CHECK(crc32c(Bytes(32, std::byte{0})) == 0x8A9136AAu);    // RFC 3720 B.4
  CHECK(crc32c(Bytes(32, std::byte{0xff})) == 0x62A8AB43u);
  CHECK(crc32c(iota_bytes(32)) == 0x46DD794Eu);
  Bytes down(32);
  for (int i = 0; i < 32; ++i) down[i] = static_cast<std::byte>(31 - i);
  CHECK(crc32c(down) == 0x113FDB5Cu);
  CHECK(crc32c(ByteSpan{}) == 0u);
  CHECK(codecs::detail::crc32c_portable(span_of("123456789"), 0) == 0xE3069283u);
}

TEST_CASE("crc32c chains through its seed and agrees across kernels", "[codecs][crc32c]") {
  const Bytes data = random_bytes(4099, 7);
  const std::uint32_t whole = crc32c(data);
  for (std::size_t cut : {0, 1, 7, 8, 9, 31, 32, 33, 1000, 4098, 4099}) {
    const ByteSpan all(data);
    CHECK(crc32c(all.subspan(cut), crc32c(all.first(cut))) == whole);
  }
  CHECK(crc32c(span_of("56789"), crc32c(span_of("1234"))) == 0xE3069283u);
  // Every length and alignment up to 80 bytes: hardware == table.
  for (std::size_t off = 0; off < 8; ++off)
    for (std::size_t len = 0; off + len <= 80; ++len) {
      const ByteSpan s = ByteSpan(data).subspan(off, len);
      REQUIRE(crc32c(s, 0x1234567u) == codecs::detail::crc32c_portable(s, 0x1234567u));
    }
  CHECK(crc32c(data) == codecs::detail::crc32c_portable(data, 0));
}

// ---------------------------------------------------------------- bytes

TEST_CASE("bytes codec swaps each element of every data type", "[codecs][bytes]") {
  struct Case {
    DataTypeKind kind;
    std::string little, big;
  };
  const std::vector<Case> cases = {
      {DataTypeKind::int16, "02 01 04 03", "01 02 03 04"},                    // 0x0102, 0x0304
      {DataTypeKind::uint16, "ff 00", "00 ff"},
      {DataTypeKind::float16, "00 3c", "3c 00"},                               // 1.0
      {DataTypeKind::int32, "04 03 02 01", "01 02 03 04"},
      {DataTypeKind::uint32, "78 56 34 12 01 00 00 00", "12 34 56 78 00 00 00 01"},
      {DataTypeKind::float32, "00 00 80 3f", "3f 80 00 00"},                   // 1.0f
      {DataTypeKind::int64, "08 07 06 05 04 03 02 01", "01 02 03 04 05 06 07 08"},
      {DataTypeKind::uint64, "01 00 00 00 00 00 00 00", "00 00 00 00 00 00 00 01"},
      {DataTypeKind::float64, "00 00 00 00 00 00 f0 3f", "3f f0 00 00 00 00 00 00"},  // 1.0
      // complex: each component swapped on its own, real part first.
      {DataTypeKind::complex64, "00 00 80 3f 00 00 00 c0", "3f 80 00 00 c0 00 00 00"},  // 1-2i
      {DataTypeKind::complex128, "00 00 00 00 00 00 f0 3f 00 00 00 00 00 00 00 c0",
       "3f f0 00 00 00 00 00 00 c0 00 00 00 00 00 00 00"},
  };
  const auto big = make_bytes_codec(json{{"endian", "big"}});
  const auto little = make_bytes_codec(json{{"endian", "little"}});
  for (const auto& c : cases) {
    INFO(DataType(c.kind).name());
    const Bytes native = hex(c.little);
    const ArraySpec spec{c.kind, {native.size() / DataType(c.kind).size()}};
    Bytes out;
    big->encode(spec, native, out);
    CHECK(to_hex(out) == c.big);
    Bytes back(native.size());
    big->decode(spec, hex(c.big), back);
    CHECK(to_hex(back) == c.little);
    little->encode(spec, native, out);
    CHECK(to_hex(out) == c.little);
    CHECK_FALSE(big->is_identity(spec));
    CHECK(little->is_identity(spec));
  }
}

TEST_CASE("bytes codec: endian is optional only for single-byte types", "[codecs][bytes]") {
  const auto none = make_bytes_codec(nullptr);
  for (auto k : {DataTypeKind::bool_, DataTypeKind::int8, DataTypeKind::uint8}) {
    const ArraySpec spec{k, {3}};
    CHECK_NOTHROW(none->validate(spec));
    CHECK(none->is_identity(spec));
    CHECK(make_bytes_codec(json{{"endian", "big"}})->is_identity(spec));
    Bytes out;
    none->encode(spec, hex("01 00 ff"), out);
    CHECK(to_hex(out) == "01 00 ff");
  }
  CHECK_ERROR(none->validate(ArraySpec{DataTypeKind::int32, {2}}), InvalidMetadata, "endian", "int32");
  CHECK_ERROR(make_bytes_codec(json{{"endian", "middle"}}), InvalidMetadata, "endian", "\"middle\"");
  CHECK_ERROR(make_bytes_codec(json{{"endian", 1}}), InvalidMetadata, "endian", "little");
  CHECK_ERROR(make_bytes_codec(json{{"order", "C"}}), InvalidMetadata, "order", "unknown");
  CHECK(none->to_json() == json{{"name", "bytes"}});
  CHECK(make_bytes_codec(json{{"endian", "big"}})->to_json() ==
        json::parse(R"({"name":"bytes","configuration":{"endian":"big"}})"));
  CHECK(none->encoded_size(ArraySpec{DataTypeKind::uint8, {5, 2}}) == 10);
}

TEST_CASE("bytes codec rejects a chunk of the wrong size", "[codecs][bytes]") {
  const auto c = make_bytes_codec(json{{"endian", "little"}});
  Bytes out(8);
  CHECK_ERROR(c->decode(ArraySpec{DataTypeKind::int32, {2}}, hex("01 02 03"), out), CorruptChunk,
              "bytes", "bytes: chunk is 3 bytes, expected 8");
}

// ---------------------------------------------------------------- transpose

TEST_CASE("transpose B23: order [1,2,0] is not its own inverse", "[codecs][transpose][cases]") {
  const auto t = make_transpose_codec(json{{"order", {1, 2, 0}}});
  const ArraySpec spec{DataTypeKind::uint8, {2, 3, 2}};
  CHECK(t->encoded_spec(spec).shape == std::vector<std::uint64_t>{3, 2, 2});
  const Bytes logical = iota_bytes(12);
  Bytes enc(12), dec(12);
  t->encode(spec, logical, enc);
  CHECK(to_hex(enc) == "00 06 01 07 02 08 03 09 04 0a 05 0b");
  t->decode(spec, hex("00 06 01 07 02 08 03 09 04 0a 05 0b"), dec);
  CHECK(to_hex(dec) == to_hex(logical));
  // Applying the forward order again (the zarrita #14 bug) must not be what decode does.
  Bytes wrong(12);
  t->encode(spec, enc, wrong);
  CHECK(to_hex(wrong) != to_hex(logical));
}

TEST_CASE("transpose round trips random permutations against the reference", "[codecs][transpose]") {
  std::mt19937 rng(42);
  const std::vector<std::vector<std::uint64_t>> shapes = {
      {3, 4, 5, 6}, {1, 7, 1, 9}, {2, 1, 33, 70}, {5, 0, 3, 2}, {8, 8, 8, 8}};
  for (auto kind : {DataTypeKind::uint8, DataTypeKind::int16, DataTypeKind::float32,
                    DataTypeKind::float64, DataTypeKind::complex128}) {
    for (const auto& shape : shapes) {
      std::vector<std::size_t> order(4);
      std::iota(order.begin(), order.end(), 0);
      for (int rep = 0; rep < 6; ++rep) {
        std::shuffle(order.begin(), order.end(), rng);
        INFO(DataType(kind).name() << " order " << json(order).dump() << " shape " << json(shape).dump());
        const ArraySpec spec{kind, shape};
        const auto t = make_transpose_codec(json{{"order", order}});
        const Bytes a = random_bytes(spec.num_bytes(), rep);
        Bytes b(a.size()), back(a.size());
        t->encode(spec, a, b);
        REQUIRE(b == naive_transpose(a, shape, order, spec.dtype.size()));
        t->decode(spec, b, back);
        REQUIRE(back == a);
      }
    }
  }
}

TEST_CASE("transpose of large 2-d and 3-d chunks (tiled path)", "[codecs][transpose]") {
  for (auto kind : {DataTypeKind::uint8, DataTypeKind::uint16, DataTypeKind::uint32,
                    DataTypeKind::uint64, DataTypeKind::complex128}) {
    for (const auto& [shape, order] :
         std::vector<std::pair<std::vector<std::uint64_t>, std::vector<std::size_t>>>{
             {{67, 129}, {1, 0}}, {{5, 40, 37}, {2, 0, 1}}, {{40, 5, 37}, {0, 2, 1}}}) {
      const ArraySpec spec{kind, shape};
      const auto t = make_transpose_codec(json{{"order", order}});
      const Bytes a = random_bytes(spec.num_bytes(), 3);
      Bytes b(a.size()), back(a.size());
      t->encode(spec, a, b);
      REQUIRE(b == naive_transpose(a, shape, order, spec.dtype.size()));
      t->decode(spec, b, back);
      REQUIRE(back == a);
    }
  }
}

TEST_CASE("transpose accepts the legacy \"C\" and \"F\" orders", "[codecs][transpose]") {
  const ArraySpec spec{DataTypeKind::uint8, {2, 3}};
  const Bytes a = iota_bytes(6);
  Bytes out(6);
  const auto f = make_transpose_codec(json{{"order", "F"}});
  CHECK(f->encoded_spec(spec).shape == std::vector<std::uint64_t>{3, 2});
  f->encode(spec, a, out);
  CHECK(to_hex(out) == "00 03 01 04 02 05");
  CHECK(f->to_json() == json::parse(R"({"name":"transpose","configuration":{"order":"F"}})"));
  make_transpose_codec(json{{"order", "C"}})->encode(spec, a, out);
  CHECK(to_hex(out) == to_hex(a));
}

TEST_CASE("transpose rejects orders that are not permutations", "[codecs][transpose]") {
  for (const char* bad : {R"([0,0])", R"([1,2])", R"([-1,0])", R"([0.5,1])", R"("X")", R"(3)", R"([0,"1"])"}) {
    INFO(bad);
    CHECK_ERROR(make_transpose_codec(json{{"order", json::parse(bad)}}), InvalidMetadata, "order",
                "permutation");
  }
  CHECK_ERROR(make_transpose_codec(nullptr), InvalidMetadata, "order", "required");
  const auto t = make_transpose_codec(json{{"order", {1, 0}}});
  CHECK_ERROR(t->encoded_spec(ArraySpec{DataTypeKind::uint8, {2, 3, 4}}), InvalidMetadata, "order",
              "3 dimensions");
}

// ---------------------------------------------------------------- gzip / zlib

TEST_CASE("gzip writes RFC 1952 members with CRC32 and ISIZE", "[codecs][gzip][cases]") {
  for (int level : {0, 1, 6, 9}) {
    const auto gz = make_gzip_codec(json{{"level", level}});
    const Bytes data = concat(iota_bytes(5000), Bytes(3000, std::byte{7}));
    Bytes enc;
    gz->encode(data, enc);
    REQUIRE(enc.size() >= 18);
    CHECK(to_hex(ByteSpan(enc).first(3)) == "1f 8b 08");
    CHECK(le32(enc.data() + enc.size() - 8) == crc32_ieee(data));
    CHECK(le32(enc.data() + enc.size() - 4) == data.size());
    Bytes scratch;
    CHECK(to_bytes(gz->decode(enc, scratch, data.size())) == data);
    Bytes out(data.size());
    gz->decode_into(enc, out);
    CHECK(out == data);
  }
  CHECK(make_gzip_codec(json{{"level", 1}})->to_json() ==
        json::parse(R"({"name":"gzip","configuration":{"level":1}})"));
}

TEST_CASE("gzip B21: gzip member decodes, zlib stream is rejected", "[codecs][gzip][cases]") {
  const auto gz = make_gzip_codec(json{{"level", 1}});
  const Bytes member = hex("1f 8b 08 00 00 00 00 00 04 03 63 60 64 62 06 00 13 86 b9 8b 04 00 00 00");
  Bytes out(4), scratch;
  gz->decode_into(member, out);
  CHECK(to_hex(out) == "00 01 02 03");
  CHECK(to_hex(gz->decode(member, scratch, 4)) == "00 01 02 03");
  const Bytes zlib = hex("78 01 63 60 64 62 06 00 00 0e 00 07");
  CHECK_ERROR(gz->decode_into(zlib, out), CorruptChunk, "gzip",
              "gzip: data is zlib (RFC 1950) framed, not gzip (RFC 1952)");
  CHECK_ERROR(gz->decode(zlib, scratch, 4), CorruptChunk, "gzip", "zlib (RFC 1950)");
  // The zlib codec (v2) reads that same stream.
  Bytes z(4);
  make_zlib_codec(json{{"level", 1}})->decode_into(zlib, z);
  CHECK(to_hex(z) == "00 01 02 03");
}

TEST_CASE("gzip bounds and checks the decoded size", "[codecs][gzip]") {
  const auto gz = make_gzip_codec(json{{"level", 5}});
  const Bytes data = random_bytes(100000, 1);
  Bytes enc, scratch;
  gz->encode(data, enc);
  Bytes small(99999), large(100001);
  CHECK_ERROR(gz->decode_into(enc, small), CorruptChunk, "gzip", "exceeds");
  CHECK_ERROR(gz->decode_into(enc, large), CorruptChunk, "gzip", "decoded 100000 bytes, expected 100001");
  CHECK_ERROR(gz->decode(enc, scratch, 99999), CorruptChunk, "gzip", "exceeds");
  // A lying ISIZE trailer is caught, and does not size the buffer past the bound.
  Bytes liar = enc;
  std::memset(liar.data() + liar.size() - 4, 0xff, 4);
  Bytes fresh;
  CHECK_ERROR(gz->decode(liar, fresh, 1 << 20), CorruptChunk, "gzip", "incorrect length");
  CHECK(fresh.capacity() <= (1 << 20));
  CHECK_ERROR(gz->decode(ByteSpan(enc).first(enc.size() - 10), scratch, 1 << 20), CorruptChunk, "gzip",
              "truncated");
  Bytes flipped = enc;
  flipped[enc.size() - 6] ^= std::byte{1};  // CRC32 trailer
  CHECK_THROWS_AS(gz->decode(flipped, scratch, 1 << 20), CorruptChunk);
  CHECK_ERROR(gz->decode(hex("00 01 02"), scratch, 10), CorruptChunk, "gzip", "magic");
}

TEST_CASE("gzip decodes concatenated members and ignores zero padding", "[codecs][gzip]") {
  const auto gz = make_gzip_codec(json{{"level", 3}});
  Bytes a, b, scratch;
  gz->encode(span_of("Hello "), a);
  gz->encode(span_of("World!"), b);
  const Bytes both = concat(a, b);
  CHECK(str(gz->decode(both, scratch, 100)) == "Hello World!");
  Bytes out(12);
  gz->decode_into(concat(both, Bytes(5, std::byte{0})), out);
  CHECK(str(out) == "Hello World!");
  CHECK_ERROR(gz->decode(concat(a, hex("41 42 43")), scratch, 100), CorruptChunk, "gzip", "trailing");
}

TEST_CASE("gzip and zlib configuration", "[codecs][gzip]") {
  CHECK_ERROR(make_gzip_codec(nullptr), InvalidMetadata, "level", "required");
  CHECK_ERROR(make_gzip_codec(json::object()), InvalidMetadata, "level", "required");
  CHECK_ERROR(make_gzip_codec(json{{"level", 10}}), InvalidMetadata, "level", "0..9");
  CHECK_ERROR(make_gzip_codec(json{{"level", -1}}), InvalidMetadata, "level", "0..9");
  CHECK_ERROR(make_gzip_codec(json{{"level", "5"}}), InvalidMetadata, "level", "0..9");
  CHECK_ERROR(make_gzip_codec(json{{"level", 5.5}}), InvalidMetadata, "level", "0..9");
  CHECK_ERROR(make_gzip_codec(json{{"level", 5}, {"x", 1}}), InvalidMetadata, "x", "unknown");
  const auto z = make_zlib_codec(json{{"level", -1}});
  Bytes enc, scratch;
  z->encode(span_of("zlib data zlib data"), enc);
  CHECK(static_cast<unsigned>(enc[0]) == 0x78);
  CHECK(str(z->decode(enc, scratch, 100)) == "zlib data zlib data");
  CHECK_ERROR(z->decode(concat(enc, hex("00")), scratch, 100), CorruptChunk, "zlib", "trailing");
}

// ---------------------------------------------------------------- zstd

TEST_CASE("zstd B20: a frame without content size decodes", "[codecs][zstd][cases]") {
  const auto z = make_zstd_codec(json{{"level", 0}, {"checksum", false}});
  const Bytes frame = hex("28 b5 2f fd 00 58 61 00 00 48 65 6c 6c 6f 20 57 6f 72 6c 64 21");
  Bytes scratch, out(12);
  CHECK(str(z->decode(frame, scratch, 12)) == "Hello World!");
  z->decode_into(frame, out);
  CHECK(str(out) == "Hello World!");
  // The known chunk size bounds the output: never grows past it.
  Bytes small(11), large(13);
  CHECK_ERROR(z->decode_into(frame, small), CorruptChunk, "zstd", "exceeds");
  CHECK_ERROR(z->decode(frame, scratch, 11), CorruptChunk, "zstd", "exceeds");
  CHECK_ERROR(z->decode_into(frame, large), CorruptChunk, "zstd", "decoded 12 bytes, expected 13");
  // Concatenated frames without sizes.
  CHECK(str(z->decode(concat(frame, frame), scratch, 100)) == "Hello World!Hello World!");
}

TEST_CASE("zstd streams large frames without content size", "[codecs][zstd]") {
  const auto z = make_zstd_codec(json{{"level", 3}});
  const Bytes data = random_bytes(1 << 20, 5);
  const Bytes frame = raw_zstd_frame(data, 100000);
  Bytes scratch, out(data.size());
  CHECK(to_bytes(z->decode(frame, scratch, data.size())) == data);
  z->decode_into(frame, out);
  CHECK(out == data);
  CHECK_ERROR(z->decode(frame, scratch, data.size() - 1), CorruptChunk, "zstd", "exceeds");
  CHECK_ERROR(z->decode(ByteSpan(frame).first(frame.size() - 1), scratch, data.size()), CorruptChunk,
              "zstd", "truncated");
}

TEST_CASE("zstd writes the content size, checks it, and handles size 0", "[codecs][zstd]") {
  const auto z = make_zstd_codec(json{{"level", 3}, {"checksum", false}});
  Bytes empty_enc, scratch;
  z->encode(ByteSpan{}, empty_enc);
  CHECK(z->decode(empty_enc, scratch, 0).empty());
  Bytes none;
  z->decode_into(empty_enc, none);
  // Content size 0, written by hand: single segment, 1-byte size 0, empty last raw block.
  CHECK(z->decode(hex("28 b5 2f fd 20 00 01 00 00"), scratch, 10).empty());
  Bytes one(1);
  CHECK_ERROR(z->decode_into(hex("28 b5 2f fd 20 00 01 00 00"), one), CorruptChunk, "zstd",
              "content size is 0 bytes, expected 1");

  const Bytes data = concat(iota_bytes(40000), Bytes(40000, std::byte{1}));
  Bytes enc;
  z->encode(data, enc);
  CHECK(to_hex(ByteSpan(enc).first(4)) == "28 b5 2f fd");
  CHECK((static_cast<unsigned>(enc[4]) & 0xc0) != 0);  // frame content size present
  CHECK(z->decode(enc, scratch, data.size()).size() == data.size());
  CHECK(Bytes(scratch.begin(), scratch.end()) == data);
  CHECK_ERROR(z->decode(enc, scratch, data.size() - 1), CorruptChunk, "zstd", "exceeds");
  Bytes wrong(data.size() + 1);
  CHECK_ERROR(z->decode_into(enc, wrong), CorruptChunk, "zstd", "expected 80001");
  // Two frames with sizes.
  Bytes enc2;
  z->encode(span_of("tail"), enc2);
  CHECK(z->decode(concat(enc, enc2), scratch, 1 << 20).size() == data.size() + 4);
  CHECK(str(ByteSpan(scratch).last(4)) == "tail");
  CHECK_ERROR(z->decode(hex("01 02 03 04 05 06"), scratch, 100), CorruptChunk, "zstd", "not a zstd frame");
  CHECK_ERROR(z->decode(concat(enc2, hex("01 02 03 04 05")), scratch, 100), CorruptChunk, "zstd",
              "trailing");
}

TEST_CASE("zstd checksum flag and levels", "[codecs][zstd]") {
  const Bytes data = random_bytes(5000, 9);
  Bytes enc, scratch;
  make_zstd_codec(json{{"level", 1}, {"checksum", true}})->encode(data, enc);
  CHECK((static_cast<unsigned>(enc[4]) & 0x04) != 0);  // Content_Checksum_flag
  const auto z = make_zstd_codec(json{{"level", 1}});
  CHECK(to_bytes(z->decode(enc, scratch, data.size())) == data);
  Bytes flipped = enc;
  flipped.back() ^= std::byte{0x55};  // the checksum itself
  CHECK_ERROR(z->decode(flipped, scratch, data.size()), CorruptChunk, "zstd", "checksum");
  make_zstd_codec(json{{"level", 1}, {"checksum", false}})->encode(data, enc);
  CHECK((static_cast<unsigned>(enc[4]) & 0x04) == 0);

  for (int level : {-7, -1, 0, 1, 19, 22, 100}) {
    const auto c = make_zstd_codec(json{{"level", level}, {"checksum", level < 0}});
    c->encode(data, enc);
    Bytes out(data.size());
    c->decode_into(enc, out);
    CHECK(out == data);
    CHECK(c->to_json() == json{{"name", "zstd"}, {"configuration", {{"level", level}, {"checksum", level < 0}}}});
  }
  CHECK(make_zstd_codec(nullptr)->to_json()["configuration"] == json{{"level", 0}, {"checksum", false}});
  CHECK_ERROR(make_zstd_codec(json{{"level", "3"}}), InvalidMetadata, "level", "integer");
  CHECK_ERROR(make_zstd_codec(json{{"level", 1.5}}), InvalidMetadata, "level", "integer");
  CHECK_ERROR(make_zstd_codec(json{{"checksum", 1}}), InvalidMetadata, "checksum", "boolean");
  CHECK_ERROR(make_zstd_codec(json{{"dict", 1}}), InvalidMetadata, "dict", "unknown");
}

// ---------------------------------------------------------------- crc32c codec

TEST_CASE("crc32c codec appends and strips a little-endian checksum", "[codecs][crc32c]") {
  const auto c = make_crc32c_codec(nullptr);
  Bytes enc, scratch;
  c->encode(span_of("123456789"), enc);
  CHECK(to_hex(ByteSpan(enc).last(4)) == "83 92 06 e3");
  CHECK(c->encoded_size(9) == 13);
  const ByteSpan payload = c->decode(enc, scratch, 9);
  CHECK(str(payload) == "123456789");
  CHECK(payload.data() == enc.data());  // a view, no copy
  Bytes out(9);
  c->decode_into(enc, out);
  CHECK(str(out) == "123456789");
  Bytes bad = enc;
  bad[0] = std::byte{'0'};
  CHECK_ERROR(c->decode(bad, scratch, 9), CorruptChunk, "crc32c",
              "crc32c: checksum mismatch (stored 0xe3069283, computed 0x");
  CHECK_ERROR(c->decode(hex("01 02 03"), scratch, 9), CorruptChunk, "crc32c", "too short");
  CHECK_ERROR(c->decode(enc, scratch, 8), CorruptChunk, "crc32c", "expected 8");
  Bytes eight(8);
  CHECK_ERROR(c->decode_into(enc, eight), CorruptChunk, "crc32c", "expected 8");
  CHECK_NOTHROW(make_crc32c_codec(json::object()));
  CHECK_THROWS_AS(make_crc32c_codec(json{{"a", 1}}), InvalidMetadata);
  CHECK(c->to_json() == json{{"name", "crc32c"}});
}

// ---------------------------------------------------------------- pipeline

TEST_CASE("pipeline parse errors are typed and name the field", "[codecs][pipeline]") {
  const DataType i32 = DataTypeKind::int32;
  CHECK_ERROR(parse(R"([{"name":"bytes","configuration":{"endian":"little"}},{"name":"foo"}])", i32, {4}),
              UnsupportedError, "codecs[1]", "unsupported codec 'foo'");
  CHECK_ERROR(parse(R"([{"name":"foo","must_understand":true},"bytes"])", DataTypeKind::uint8, {4}),
              UnsupportedError, "codecs[0]", "'foo'");
  for (const char* unknown : {"numcodecs.bz2", "vlen-array"})
    CHECK_ERROR(parse(std::string(R"(["bytes",{"name":")") + unknown + "\"}]", DataTypeKind::uint8, {4}),
                UnsupportedError, "codecs[1]", unknown);
  // vlen-utf8 is known (an array-to-bytes codec) but needs the string type.
  CHECK_ERROR(parse(R"(["bytes",{"name":"vlen-utf8"}])", DataTypeKind::uint8, {4}), InvalidMetadata, "codecs",
              "more than one array-to-bytes codec");
  CHECK_ERROR(parse(R"([{"name":"vlen-utf8"}])", DataTypeKind::uint8, {4}), InvalidMetadata, "codecs[0].configuration",
              "needs the data type string");
  CHECK_ERROR(parse(R"([{"name":"bytes","configuration":{"endian":"little"}},{"name":"bytes","configuration":{"endian":"big"}}])", i32, {4}),
              InvalidMetadata, "codecs", "more than one array-to-bytes codec");
  CHECK_ERROR(parse(R"([{"name":"gzip","configuration":{"level":1}},{"name":"bytes","configuration":{"endian":"little"}}])", i32, {4}),
              InvalidMetadata, "codecs", "'gzip' (codecs[0]) must come after");
  CHECK_ERROR(parse(R"([{"name":"bytes","configuration":{"endian":"little"}},{"name":"transpose","configuration":{"order":[0]}}])", i32, {4}),
              InvalidMetadata, "codecs", "'transpose' (codecs[1]) must come before");
  CHECK_ERROR(parse(R"([{"name":"crc32c"}])", i32, {4}), InvalidMetadata, "codecs", "must come after");
  CHECK_ERROR(parse(R"([])", i32, {4}), InvalidMetadata, "codecs", "no array-to-bytes codec");
  CHECK_ERROR(parse(R"({"name":"bytes"})", i32, {4}), InvalidMetadata, "codecs", "JSON array");
  CHECK_ERROR(parse(R"([{"name":"bytes"}])", i32, {4}), InvalidMetadata, "codecs[0].configuration.endian",
              "required for data type int32");
  CHECK_ERROR(parse(R"([{"name":"transpose","configuration":{"order":[0,0]}},{"name":"bytes"}])",
                    DataTypeKind::uint8, {2, 2}),
              InvalidMetadata, "codecs[0].configuration.order", "permutation");
  CHECK_ERROR(parse(R"([{"name":"transpose","configuration":{"order":[1,0]}},{"name":"bytes"}])",
                    DataTypeKind::uint8, {2, 2, 2}),
              InvalidMetadata, "codecs[0].configuration.order", "3 dimensions");
  CHECK_ERROR(parse(R"(["bytes",{"name":"gzip"}])", DataTypeKind::uint8, {4}), InvalidMetadata,
              "codecs[1].configuration.level", "required");
  CHECK_ERROR(parse(R"([1])", i32, {4}), InvalidMetadata, "codecs[0]", "codec object or name");
  CHECK_ERROR(parse(R"([{"configuration":{}}])", i32, {4}), InvalidMetadata, "codecs[0].name", "name");
  CHECK_ERROR(parse(R"([{"name":"bytes","configuration":[]}])", i32, {4}), InvalidMetadata,
              "codecs[0].configuration", "JSON object");
  CHECK_ERROR(parse(R"([{"name":"x","must_understand":"no"},"bytes"])", i32, {4}), InvalidMetadata,
              "codecs[0].must_understand", "boolean");
}

TEST_CASE("pipeline skips unknown codecs with must_understand false", "[codecs][pipeline]") {
  const auto p = parse(
      R"([{"name":"bytes"},{"name":"my_checksum","must_understand":false,"configuration":{"a":1}},"crc32c"])",
      DataTypeKind::uint8, {3});
  CHECK(p->describe() == "bytes,crc32c");
  Bytes enc;
  p->encode(hex("01 02 03"), enc);
  CHECK(enc.size() == 7);
  Bytes out(3);
  p->decode(enc, out);
  CHECK(to_hex(out) == "01 02 03");
}

TEST_CASE("pipeline triviality, description, size and JSON round trip", "[codecs][pipeline]") {
  CHECK(parse(R"([{"name":"bytes","configuration":{"endian":"little"}}])", DataTypeKind::int32, {4})->is_trivial());
  CHECK(parse(R"([{"name":"bytes"}])", DataTypeKind::uint8, {4})->is_trivial());
  CHECK(parse(R"(["bytes"])", DataTypeKind::bool_, {4})->is_trivial());
  CHECK(parse(R"([{"name":"bytes","configuration":{"endian":"big"}}])", DataTypeKind::uint8, {4})->is_trivial());
  CHECK_FALSE(parse(R"([{"name":"bytes","configuration":{"endian":"big"}}])", DataTypeKind::int32, {4})->is_trivial());
  CHECK_FALSE(parse(R"([{"name":"bytes","configuration":{"endian":"little"}},"crc32c"])", DataTypeKind::int32, {4})->is_trivial());
  CHECK_FALSE(parse(R"([{"name":"transpose","configuration":{"order":[0]}},"bytes"])", DataTypeKind::uint8, {4})->is_trivial());

  const std::string text =
      R"([{"name":"transpose","configuration":{"order":[1,0]}},{"name":"bytes","configuration":{"endian":"little"}},)"
      R"({"name":"zstd","configuration":{"level":3,"checksum":false}},{"name":"crc32c"}])";
  const auto p = parse(text, DataTypeKind::float32, {3, 5});
  CHECK(p->describe() == "transpose,bytes(little),zstd(3),crc32c");
  CHECK(p->to_json() == json::parse(text));
  CHECK(CodecPipeline::from_json(p->to_json(), p->chunk_spec())->to_json() == p->to_json());
  CHECK(parse(R"(["bytes",{"name":"zstd","configuration":{"level":-2,"checksum":true}},{"name":"gzip","configuration":{"level":4}}])",
              DataTypeKind::uint8, {4})->describe() == "bytes,zstd(-2,checksum),gzip(4)");
  CHECK(p->encoded_size() == -1);
  // B16: the shard index size comes from the index codecs, with or without crc32c.
  CHECK(parse(R"([{"name":"bytes","configuration":{"endian":"little"}}])", DataTypeKind::uint64, {2, 2})->encoded_size() == 32);
  CHECK(parse(R"([{"name":"bytes","configuration":{"endian":"little"}},"crc32c"])", DataTypeKind::uint64, {2, 2})->encoded_size() == 36);
}

TEST_CASE("pipeline B14: the sharded 0-d index is [bytes, crc32c] exactly", "[codecs][pipeline][cases]") {
  const auto p = parse(R"([{"name":"bytes","configuration":{"endian":"little"}},{"name":"crc32c"}])",
                       DataTypeKind::uint64, {1, 2});
  const Bytes index = hex("00 00 00 00 00 00 00 00 04 00 00 00 00 00 00 00 87 18 6d 63");
  Bytes out(16), enc;
  p->decode(index, out);
  std::uint64_t entry[2];
  std::memcpy(entry, out.data(), 16);
  CHECK(entry[0] == 0);
  CHECK(entry[1] == 4);
  p->encode(out, enc);
  CHECK(to_hex(enc) == to_hex(index));
}

TEST_CASE("pipeline decodes the codec regression cases (B20, B21, B23)", "[codecs][pipeline][cases]") {
  Bytes out(12);
  parse(R"(["bytes",{"name":"zstd","configuration":{"level":0,"checksum":false}}])", DataTypeKind::uint8, {12})
      ->decode(hex("28 b5 2f fd 00 58 61 00 00 48 65 6c 6c 6f 20 57 6f 72 6c 64 21"), out);
  CHECK(str(out) == "Hello World!");

  const auto gz = parse(R"(["bytes",{"name":"gzip","configuration":{"level":1}}])", DataTypeKind::uint8, {4});
  Bytes four(4);
  gz->decode(hex("1f 8b 08 00 00 00 00 00 04 03 63 60 64 62 06 00 13 86 b9 8b 04 00 00 00"), four);
  CHECK(to_hex(four) == "00 01 02 03");
  CHECK_ERROR(gz->decode(hex("78 01 63 60 64 62 06 00 00 0e 00 07"), four), CorruptChunk, "gzip", "RFC 1950");
  Bytes enc;
  gz->encode(four, enc);
  CHECK(to_hex(ByteSpan(enc).first(2)) == "1f 8b");

  const auto tr = parse(
      R"([{"name":"transpose","configuration":{"order":[1,2,0]}},{"name":"bytes","configuration":{"endian":"little"}}])",
      DataTypeKind::uint8, {2, 3, 2});
  CHECK_FALSE(tr->is_trivial());
  tr->decode(hex("00 06 01 07 02 08 03 09 04 0a 05 0b"), out);
  CHECK(to_hex(out) == to_hex(iota_bytes(12)));
  tr->encode(iota_bytes(12), enc);
  CHECK(to_hex(enc) == "00 06 01 07 02 08 03 09 04 0a 05 0b");
}

TEST_CASE("pipeline decodes the shared/cases chunk files", "[codecs][pipeline][cases]") {
  ZARRCORO_REQUIRE_SHARED(shared);
  const auto cases = shared / "cases";
  Bytes out(12);
  parse(R"(["bytes",{"name":"zstd","configuration":{"level":0,"checksum":false}}])", DataTypeKind::uint8, {12})
      ->decode(test::read_file(cases / "b20_zstd/c/0"), out);
  CHECK(str(out) == "Hello World!");
  const auto gz = parse(R"(["bytes",{"name":"gzip","configuration":{"level":1}}])", DataTypeKind::uint8, {4});
  Bytes four(4);
  gz->decode(test::read_file(cases / "b21_gzip/c/0"), four);
  CHECK(to_hex(four) == "00 01 02 03");
  CHECK_THROWS_AS(gz->decode(test::read_file(cases / "b21_zlib_as_gzip/c/0"), four), CorruptChunk);
  parse(R"([{"name":"transpose","configuration":{"order":[1,2,0]}},{"name":"bytes","configuration":{"endian":"little"}}])",
        DataTypeKind::uint8, {2, 3, 2})
      ->decode(test::read_file(cases / "b23_transpose/c/0/0/0"), out);
  CHECK(to_hex(out) == to_hex(iota_bytes(12)));
}

TEST_CASE("pipeline errors: size and checksum", "[codecs][pipeline]") {
  const auto trivial = parse(R"([{"name":"bytes","configuration":{"endian":"little"}}])", DataTypeKind::int32, {1});
  Bytes out(4);
  CHECK_ERROR(trivial->decode(hex("01 02 03"), out), CorruptChunk, "bytes", "bytes: chunk is 3 bytes, expected 4");
  Bytes wrong_out(5);
  CHECK_THROWS_AS(trivial->decode(hex("01 02 03 04"), wrong_out), InvalidArgument);
  Bytes enc;
  CHECK_THROWS_AS(trivial->encode(hex("01 02 03"), enc), InvalidArgument);

  const auto checked = parse(R"([{"name":"bytes","configuration":{"endian":"big"}},"crc32c"])", DataTypeKind::int32, {1});
  checked->encode(hex("01 02 03 04"), enc);
  CHECK(to_hex(ByteSpan(enc).first(4)) == "04 03 02 01");
  checked->decode(enc, out);
  CHECK(to_hex(out) == "01 02 03 04");
  enc[1] ^= std::byte{0x10};
  CHECK_ERROR(checked->decode(enc, out), CorruptChunk, "crc32c", "checksum mismatch");
  CHECK_ERROR(checked->decode(hex("01 02 03 04 05"), out), CorruptChunk, "crc32c", "checksum mismatch");
}

TEST_CASE("pipeline round trips every data type", "[codecs][pipeline]") {
  const std::vector<std::string> chains = {
      R"([{"name":"transpose","configuration":{"order":[2,0,1]}},{"name":"bytes","configuration":{"endian":"big"}},{"name":"crc32c"},{"name":"zstd","configuration":{"level":1,"checksum":true}}])",
      R"([{"name":"bytes","configuration":{"endian":"little"}},{"name":"zstd","configuration":{"level":3,"checksum":false}}])",
      R"([{"name":"bytes","configuration":{"endian":"big"}},{"name":"gzip","configuration":{"level":6}},{"name":"crc32c"}])",
      R"([{"name":"transpose","configuration":{"order":[1,2,0]}},{"name":"transpose","configuration":{"order":"F"}},{"name":"bytes","configuration":{"endian":"little"}}])",
      R"([{"name":"transpose","configuration":{"order":[1,0,2]}},{"name":"bytes","configuration":{"endian":"little"}},{"name":"gzip","configuration":{"level":1}},{"name":"zstd","configuration":{"level":-1,"checksum":false}},"crc32c"])",
      R"([{"name":"bytes","configuration":{"endian":"little"}},"crc32c","crc32c","crc32c"])",
  };
  const std::vector<std::uint64_t> shape = {3, 4, 5};
  for (const auto& chain : chains) {
    for (auto kind : kAllKinds) {
      INFO(chain << " " << DataType(kind).name());
      const auto p = parse(chain, kind, shape);
      const Bytes data = random_bytes(p->chunk_spec().num_bytes(), static_cast<unsigned>(kind));
      Bytes enc, out(data.size());
      p->encode(data, enc);
      p->decode(enc, out);
      REQUIRE(out == data);
    }
  }
}

TEST_CASE("pipeline encodes to the exact reference bytes", "[codecs][pipeline]") {
  // [transpose [2,0,1], bytes big, crc32c] on int32 3x4x5: the encoded chunk is
  // the reference transpose, then each element byte-reversed, then the CRC.
  const auto p = parse(
      R"([{"name":"transpose","configuration":{"order":[2,0,1]}},{"name":"bytes","configuration":{"endian":"big"}},"crc32c"])",
      DataTypeKind::int32, {3, 4, 5});
  const Bytes data = random_bytes(240, 11);
  Bytes expected = swapped(naive_transpose(data, {3, 4, 5}, {2, 0, 1}, 4), 4);
  const std::uint32_t crc = crc32c(expected);
  for (int k = 0; k < 4; ++k) expected.push_back(static_cast<std::byte>((crc >> (8 * k)) & 0xff));
  Bytes enc;
  p->encode(data, enc);
  CHECK(enc == expected);
  // Two transposes compose: [1,2,0] then [1,0,2] on 2x3x4.
  const auto two = parse(
      R"([{"name":"transpose","configuration":{"order":[1,2,0]}},{"name":"transpose","configuration":{"order":[1,0,2]}},"bytes"])",
      DataTypeKind::uint8, {2, 3, 4});
  const Bytes a = iota_bytes(24);
  two->encode(a, enc);
  CHECK(enc == naive_transpose(naive_transpose(a, {2, 3, 4}, {1, 2, 0}, 1), {3, 4, 2}, {1, 0, 2}, 1));
  Bytes back(24);
  two->decode(enc, back);
  CHECK(back == a);
}

namespace {
// An array -> bytes codec that runs a whole inner pipeline, as sharding does.
class NestedCodec final : public ArrayToBytesCodec {
 public:
  explicit NestedCodec(std::shared_ptr<const CodecPipeline> inner) : inner_(std::move(inner)) {}
  std::string name() const override { return "nested"; }
  json to_json() const override { return {{"name", "nested"}}; }
  void validate(const ArraySpec&) const override {}
  bool is_identity(const ArraySpec&) const override { return false; }
  void encode(const ArraySpec&, ByteSpan in, Bytes& out) const override { inner_->encode(in, out); }
  void decode(const ArraySpec&, ByteSpan in, MutableByteSpan out) const override { inner_->decode(in, out); }

 private:
  std::shared_ptr<const CodecPipeline> inner_;
};
}  // namespace

TEST_CASE("pipeline scratch is safe when a codec runs a nested pipeline", "[codecs][pipeline]") {
  const ArraySpec spec{DataTypeKind::float64, {64, 16}};
  auto inner = parse(
      R"([{"name":"bytes","configuration":{"endian":"little"}},"crc32c",{"name":"zstd","configuration":{"level":1}}])",
      DataTypeKind::float64, {64, 16});
  std::vector<std::unique_ptr<BytesToBytesCodec>> b2b;
  b2b.push_back(make_zstd_codec(json{{"level", 2}}));
  b2b.push_back(make_crc32c_codec(nullptr));
  const CodecPipeline outer({}, std::make_unique<NestedCodec>(inner), std::move(b2b), spec);
  CHECK(outer.encoded_size() == -1);
  CHECK(outer.describe() == "nested,zstd(2),crc32c");
  const Bytes data = random_bytes(spec.num_bytes(), 4);
  Bytes enc, out(data.size());
  outer.encode(data, enc);
  outer.decode(enc, out);
  CHECK(out == data);
}

TEST_CASE("one pipeline decodes on several threads at once", "[codecs][pipeline]") {
  const auto p = parse(
      R"([{"name":"transpose","configuration":{"order":[1,0]}},{"name":"bytes","configuration":{"endian":"big"}},)"
      R"({"name":"gzip","configuration":{"level":1}},{"name":"zstd","configuration":{"level":1}},"crc32c"])",
      DataTypeKind::int32, {40, 50});
  std::vector<Bytes> inputs, encoded(8);
  for (unsigned k = 0; k < 8; ++k) {
    inputs.push_back(random_bytes(p->chunk_spec().num_bytes(), 100 + k));
    p->encode(inputs[k], encoded[k]);
  }
  std::vector<int> failures(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      Bytes out(inputs[0].size()), enc;
      for (int rep = 0; rep < 40; ++rep) {
        const std::size_t k = static_cast<std::size_t>(rep + t) % inputs.size();
        p->decode(encoded[k], out);
        p->encode(inputs[k], enc);
        if (out != inputs[k] || enc != encoded[k]) ++failures[t];
      }
    });
  for (auto& th : threads) th.join();
  CHECK(failures == std::vector<int>(4, 0));
}

// ---------------------------------------------------------------- numcodecs fixtures

namespace {
// The raw element bytes of a .npy file (after the header; F-order arrays stay F).
Bytes npy_data(const std::filesystem::path& p) {
  const Bytes f = test::read_file(p);
  REQUIRE(f.size() >= 10);
  REQUIRE(to_hex(ByteSpan(f).first(6)) == "93 4e 55 4d 50 59");  // \x93NUMPY
  const unsigned major = static_cast<unsigned>(f[6]);
  std::size_t header, start;
  if (major == 1) {
    header = static_cast<std::size_t>(f[8]) | (static_cast<std::size_t>(f[9]) << 8);
    start = 10;
  } else {
    header = le32(f.data() + 8);
    start = 12;
  }
  REQUIRE(start + header <= f.size());
  return Bytes(f.begin() + static_cast<std::ptrdiff_t>(start + header), f.end());
}

std::unique_ptr<BytesToBytesCodec> fixture_codec(const json& cfg) {
  const std::string id = cfg.at("id");
  if (id == "zstd")
    return make_zstd_codec(json{{"level", cfg.value("level", 0)}, {"checksum", cfg.value("checksum", false)}});
  if (id == "zlib") return make_zlib_codec(json{{"level", cfg.value("level", 1)}});
  if (id == "gzip") return make_gzip_codec(json{{"level", std::clamp(cfg.value("level", 1), 0, 9)}});
  if (id == "crc32c") return make_crc32c_codec(nullptr);
  FAIL("unexpected fixture codec " << id);
  return nullptr;
}
}  // namespace

TEST_CASE("numcodecs fixtures decode exactly (zstd, zlib, gzip, crc32c)", "[codecs][fixtures]") {
  ZARRCORO_REQUIRE_SHARED(shared);
  namespace fs = std::filesystem;
  const fs::path root = shared / "fixtures" / "numcodecs" / "fixture";
  for (const char* codec : {"zstd", "zlib", "gzip", "crc32c"}) {
    std::size_t decoded = 0;
    for (const auto& dir : fs::directory_iterator(root / codec)) {
      if (!dir.is_directory()) continue;
      const json cfg = json::parse(str(test::read_file(dir.path() / "config.json")));
      const auto c = fixture_codec(cfg);
      for (const auto& f : fs::directory_iterator(dir.path())) {
        const std::string name = f.path().filename().string();
        if (name.rfind("encoded.", 0) != 0) continue;
        const std::string nn = name.substr(8, 2);
        INFO(f.path().string());
        const Bytes expected = npy_data(root / codec / ("array." + nn + ".npy"));
        const Bytes encoded = test::read_file(f.path());
        Bytes scratch, out(expected.size());
        const ByteSpan got = c->decode(encoded, scratch, expected.size());
        REQUIRE(got.size() == expected.size());
        REQUIRE(std::equal(got.begin(), got.end(), expected.begin()));
        c->decode_into(encoded, out);
        REQUIRE(out == expected);
        // Our own encoding reads back; crc32c is deterministic, so byte-exact.
        Bytes ours;
        c->encode(expected, ours);
        if (std::string(codec) == "crc32c") CHECK(ours == encoded);
        c->decode_into(ours, out);
        REQUIRE(out == expected);
        ++decoded;
      }
    }
    INFO(codec);
    CHECK(decoded >= 13);
  }
}

// ---------------------------------------------------------------------------
// N-d box copies (codecs/box.hpp), against an element-by-element reference.

namespace {

std::uint64_t c_order_offset(const std::vector<std::uint64_t>& shape, const std::vector<std::uint64_t>& at) {
  std::uint64_t off = 0;
  for (std::size_t i = 0; i < shape.size(); ++i) off = off * shape[i] + at[i];
  return off;
}

// Calls f(index in box) for every element of `box`, in C order.
template <class F>
void for_each_index(const std::vector<std::uint64_t>& box, F&& f) {
  for (auto b : box)
    if (b == 0) return;
  std::vector<std::uint64_t> idx(box.size(), 0);
  while (true) {
    f(idx);
    std::size_t d = box.size();
    while (d > 0 && ++idx[d - 1] == box[d - 1]) idx[--d] = 0;
    if (d == 0) return;
  }
}

}  // namespace

TEST_CASE("copy_box and fill_box place every box exactly as an element-by-element copy does", "[box]") {
  // Shapes chosen so that runs of 16, 32, 64 and 128 bytes (copied by
  // fixed-size row copies) occur beside other run lengths, in ranks 0 to 4,
  // with boxes that are whole arrays, whole trailing dimensions, or neither.
  std::mt19937_64 rng(42);
  auto pick = [&](std::uint64_t lo, std::uint64_t hi) { return std::uniform_int_distribution<std::uint64_t>(lo, hi)(rng); };
  const std::uint64_t sizes[] = {1, 2, 3, 4, 8, 16, 32, 64};
  int cases = 0, fixed_runs = 0;
  for (int iter = 0; iter < 2000; ++iter) {
    const std::size_t rank = pick(0, 4), es = std::size_t{1} << pick(0, 3);
    std::vector<std::uint64_t> src_shape(rank), dst_shape(rank), box(rank), src_start(rank), dst_start(rank);
    for (std::size_t i = 0; i < rank; ++i) {
      box[i] = sizes[pick(0, 7)] / (i + 1 < rank ? 8 : 1);
      if (box[i] == 0) box[i] = 1;
      src_shape[i] = box[i] + (pick(0, 2) ? 0 : pick(1, 5));
      dst_shape[i] = box[i] + (pick(0, 2) ? 0 : pick(1, 5));
      src_start[i] = pick(0, src_shape[i] - box[i]);
      dst_start[i] = pick(0, dst_shape[i] - box[i]);
    }
    auto count = [](const std::vector<std::uint64_t>& s) {
      return std::accumulate(s.begin(), s.end(), std::uint64_t{1}, std::multiplies<>());
    };
    std::vector<std::byte> src(count(src_shape) * es), dst(count(dst_shape) * es), want;
    for (auto& b : src) b = static_cast<std::byte>(pick(0, 255));
    for (auto& b : dst) b = static_cast<std::byte>(pick(0, 255));
    want = dst;
    std::vector<std::uint64_t> s(rank), d(rank);
    for_each_index(box, [&](const std::vector<std::uint64_t>& at) {
      for (std::size_t i = 0; i < rank; ++i) s[i] = src_start[i] + at[i], d[i] = dst_start[i] + at[i];
      std::memcpy(want.data() + c_order_offset(dst_shape, d) * es, src.data() + c_order_offset(src_shape, s) * es, es);
    });
    copy_box(src.data(), src_shape, src_start, dst.data(), dst_shape, dst_start, box, es);
    INFO("iteration " << iter << ", rank " << rank << ", element size " << es);
    REQUIRE(dst == want);
    // The run copy_box copies (its trailing dimensions merged as it does):
    // count the cases it copies as rows of a fixed size.
    if (rank > 1) {
      std::size_t k = rank - 1;
      std::uint64_t run = es;
      while (k > 0 && box[k] == src_shape[k] && box[k] == dst_shape[k]) run *= box[k--];
      run *= box[k];
      if (k > 0 && (run == 16 || run == 32 || run == 64 || run == 128)) ++fixed_runs;
    }

    const std::vector<std::byte> value = [&] {
      std::vector<std::byte> v(es);
      for (auto& b : v) b = static_cast<std::byte>(pick(0, 255));
      return v;
    }();
    for_each_index(box, [&](const std::vector<std::uint64_t>& at) {
      for (std::size_t i = 0; i < rank; ++i) d[i] = dst_start[i] + at[i];
      std::memcpy(want.data() + c_order_offset(dst_shape, d) * es, value.data(), es);
    });
    fill_box(dst.data(), dst_shape, dst_start, box, value.data(), es);
    REQUIRE(dst == want);
    ++cases;
  }
  CHECK(cases == 2000);
  CHECK(fixed_runs > 100);  // the fixed-size row copies were exercised
}

TEST_CASE("Zarr v3.1 short-hand codec names, also inside a shard, are read and written in the long form",
          "[codecs][pipeline][v3.1]") {
  const auto p = parse(R"([{"name": "sharding_indexed", "configuration": {"chunk_shape": [2],
      "codecs": ["bytes", "zstd"], "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, "crc32c"],
      "index_location": "end"}}])",
                       DataTypeKind::uint8, {4});
  CHECK(p->to_json() == json::parse(R"([{"name": "sharding_indexed", "configuration": {"chunk_shape": [2],
      "codecs": [{"name": "bytes"}, {"name": "zstd", "configuration": {"level": 0, "checksum": false}}],
      "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}],
      "index_location": "end"}}])"));
  Bytes enc;
  p->encode(hex("01 02 03 04"), enc);
  Bytes out(4);
  p->decode(enc, out);
  CHECK(to_hex(out) == "01 02 03 04");
  // A short-hand name stands for a codec without configuration: where the
  // codec's specification requires one, it is refused by field.
  CHECK_ERROR(parse(R"(["bytes", "gzip"])", DataTypeKind::uint8, {4}), InvalidMetadata, "codecs[1].configuration.level", "level");
  CHECK_ERROR(parse(R"(["transpose", "bytes"])", DataTypeKind::uint8, {4}), InvalidMetadata, "codecs[0].configuration.order", "order");
}
