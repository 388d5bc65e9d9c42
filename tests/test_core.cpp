// The base layer's own parts (core/): UTF-8 and base64 (core/text.hpp),
// byte-range clipping. Errors, data types and the Store contract have their
// suites (test_metadata, test_stores).
#include <catch2/catch.hpp>

#include <zarrcoro/store.hpp>

#include "core/text.hpp"
#include "support.hpp"

using namespace zarrcoro;
using namespace zarrcoro::detail;

TEST_CASE("UTF-8: well-formed sequences decode; overlong forms, surrogates, code points past U+10FFFF and "
          "truncated or stray bytes do not, at the offset where they start",
          "[core][text]") {
  CHECK(utf8_decode("a\xc3\xa9\xe2\x88\x85\xf0\x9f\x98\x80") == std::u32string{U'a', 0xe9, 0x2205, 0x1f600});
  CHECK(utf8_encode(U"a\u00e9\u2205\U0001f600") == "a\xc3\xa9\xe2\x88\x85\xf0\x9f\x98\x80");
  CHECK(utf8_decode("") == std::u32string());
  const std::pair<std::string, std::size_t> bad[] = {
      {"ab\xc0\x80", 2},          // overlong NUL
      {"\xe0\x80\xaf", 0},        // overlong '/'
      {"x\xed\xa0\x80", 1},       // a surrogate, U+D800
      {"\xf4\x90\x80\x80", 0},    // U+110000
      {"ok\xe2\x88", 2},          // truncated at the end
      {"\x80", 0},                // a continuation byte alone
      {"a\xff", 1},
  };
  for (const auto& [text, at] : bad) {
    CAPTURE(test::to_hex(std::as_bytes(std::span(text.data(), text.size()))));
    CHECK(invalid_utf8_at(text) == at);
    CHECK_FALSE(valid_utf8(text));
    CHECK_FALSE(utf8_decode(text));
  }
  CHECK(valid_utf8("\xf4\x8f\xbf\xbf"));  // U+10FFFF, the last
  CHECK_FALSE(utf8_encode(std::u32string(1, char32_t{0xd800})));
  CHECK_FALSE(utf8_encode(std::u32string(1, char32_t{0x110000})));
}

TEST_CASE("base64: the RFC 4648 test vectors, padded and unpadded; anything else is refused", "[core][text]") {
  const std::pair<std::string, std::string> vectors[] = {{"", ""},         {"f", "Zg=="},     {"fo", "Zm8="},
                                                         {"foo", "Zm9v"},  {"foob", "Zm9vYg=="}, {"fooba", "Zm9vYmE="},
                                                         {"foobar", "Zm9vYmFy"}};
  for (const auto& [plain, coded] : vectors) {
    const Bytes bytes(reinterpret_cast<const std::byte*>(plain.data()), reinterpret_cast<const std::byte*>(plain.data()) + plain.size());
    CHECK(base64_encode(bytes) == coded);
    CHECK(base64_decode(coded) == bytes);
    std::string unpadded = coded;
    while (!unpadded.empty() && unpadded.back() == '=') unpadded.pop_back();
    CHECK(base64_decode(unpadded) == bytes);
  }
  CHECK_FALSE(base64_decode("Zm9v!"));
  CHECK_FALSE(base64_decode("Z"));  // one character cannot end a group
  CHECK(test::to_hex(*base64_decode("AP8H")) == "00 ff 07");
}

TEST_CASE("clip: a byte range against a value's size", "[core]") {
  const auto extent = [](ByteRange r, std::uint64_t size) {
    const ByteExtent e = clip(r, size);
    return std::pair{e.begin, e.end};
  };
  CHECK(extent(ByteRange::all(), 10) == std::pair<std::uint64_t, std::uint64_t>{0, 10});
  CHECK(extent(ByteRange::from(3, 4), 10) == std::pair<std::uint64_t, std::uint64_t>{3, 7});
  CHECK(extent(ByteRange::from(8, 4), 10) == std::pair<std::uint64_t, std::uint64_t>{8, 10});
  CHECK(extent(ByteRange::from(12, 4), 10) == std::pair<std::uint64_t, std::uint64_t>{10, 10});
  CHECK(extent(ByteRange::from(3, UINT64_MAX), 10) == std::pair<std::uint64_t, std::uint64_t>{3, 10});
  CHECK(extent(ByteRange::last(4), 10) == std::pair<std::uint64_t, std::uint64_t>{6, 10});
  CHECK(extent(ByteRange::last(40), 10) == std::pair<std::uint64_t, std::uint64_t>{0, 10});
}

TEST_CASE("ByteRange::empty: a range of no bytes, whatever its offset", "[core]") {
  CHECK(ByteRange::from(0, 0).empty());
  CHECK(ByteRange::from(12, 0).empty());
  CHECK(ByteRange::last(0).empty());
  CHECK_FALSE(ByteRange::all().empty());  // the whole value, even of a value of 0 bytes
  CHECK_FALSE(ByteRange::from(0, 1).empty());
  CHECK_FALSE(ByteRange::last(1).empty());
}
