// Text encodings shared by metadata, codecs, stores and .npy headers:
// UTF-8 (RFC 3629: no overlong forms, surrogates or code points above
// U+10FFFF) and base64 (RFC 4648, standard alphabet). Pure functions,
// thread-safe.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include <zarrcoro/bytes.hpp>

namespace zarrcoro::detail {

// Decodes the UTF-8 sequence at s[i], advancing i past it; nullopt (i
// unchanged) if it is not well-formed. i < s.size().
inline std::optional<char32_t> next_utf8(std::string_view s, std::size_t& i) {
  const auto c = static_cast<unsigned char>(s[i]);
  if (c < 0x80) return ++i, c;
  std::size_t n;
  char32_t cp, min;
  if ((c & 0xe0) == 0xc0) n = 1, cp = c & 0x1f, min = 0x80;
  else if ((c & 0xf0) == 0xe0) n = 2, cp = c & 0x0f, min = 0x800;
  else if ((c & 0xf8) == 0xf0) n = 3, cp = c & 0x07, min = 0x10000;
  else return std::nullopt;
  if (s.size() - i <= n) return std::nullopt;
  for (std::size_t k = 1; k <= n; ++k) {
    const auto d = static_cast<unsigned char>(s[i + k]);
    if ((d & 0xc0) != 0x80) return std::nullopt;
    cp = cp << 6 | (d & 0x3f);
  }
  if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return std::nullopt;
  i += n + 1;
  return cp;
}

// The offset of the first byte that starts no well-formed sequence, or
// nullopt if all of `s` is UTF-8.
std::optional<std::size_t> invalid_utf8_at(std::string_view s);
inline bool valid_utf8(std::string_view s) { return !invalid_utf8_at(s); }

// Appends code point `cp` (at most U+10FFFF, no surrogate) as UTF-8.
void append_utf8(std::string& out, char32_t cp);
// UTF-8 <-> code points; nullopt for invalid input.
std::optional<std::u32string> utf8_decode(std::string_view text);
std::optional<std::string> utf8_encode(std::u32string_view text);

// Base64 with padding; decode accepts padded or unpadded input, nullopt if
// it is not base64.
std::string base64_encode(ByteSpan data);
std::optional<Bytes> base64_decode(std::string_view text);

}  // namespace zarrcoro::detail
