// The minimal XML that S3Store reads and writes (store/s3_xml.cpp): enough for
// S3's flat documents (ListObjectsV2 results, error bodies, DeleteObjects).
// Internal to the store layer; exposed so that tests and the fuzz targets
// (tests/fuzz/fuzz_s3_xml.cpp) can call the parsers without a network.
//
// Thread-safety: pure functions. Errors: none; malformed input yields what
// could be found (missing tags are empty / absent).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace zarrcoro::s3xml {

// Replaces the five predefined entities and &#N; / &#xN; character
// references (as UTF-8); anything else is kept as written.
std::string xml_unescape(std::string_view s);
// Escapes & < > " ' and CR, LF, TAB.
std::string xml_escape(std::string_view s);
// The raw content of the next <tag>...</tag> (or <tag/>) in `doc` at or
// after `pos`, which then moves past it; nullopt when there is none.
std::optional<std::string_view> xml_next(std::string_view doc, std::string_view tag, std::size_t& pos);
// The unescaped text of the first <tag> in `doc`, or "".
std::string xml_first(std::string_view doc, std::string_view tag);

// A key's size that the listing does not give (absent or malformed <Size>).
inline constexpr std::uint64_t kNoSize = ~std::uint64_t{0};

// One ListObjectsV2 result page.
struct ListPage {
  std::vector<std::string> keys, prefixes;
  std::vector<std::uint64_t> sizes;  // per key: its <Size> (kNoSize when absent or malformed)
  bool truncated = false;  // <IsTruncated>true: more pages follow
  std::string next;        // NextContinuationToken when truncated, "" when the server gave none
};
ListPage parse_list(std::string_view doc);

// The <Code> and <Message> of an S3 error body ("" when absent).
struct ErrorBody {
  std::string code, message;
};
ErrorBody parse_error(std::string_view doc);

}  // namespace zarrcoro::s3xml
