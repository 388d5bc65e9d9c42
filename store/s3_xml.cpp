// The minimal XML that S3Store reads and writes (store/s3_xml.hpp).
#include "store/s3_xml.hpp"

#include <charconv>
#include <cstdlib>

#include "core/text.hpp"

namespace zarrcoro::s3xml {

std::string xml_unescape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '&') {
      out += s[i];
      continue;
    }
    const std::size_t semi = s.find(';', i);
    if (semi == std::string_view::npos) {
      out += s[i];
      continue;
    }
    const std::string_view ent = s.substr(i + 1, semi - i - 1);
    if (ent == "amp") out += '&';
    else if (ent == "lt") out += '<';
    else if (ent == "gt") out += '>';
    else if (ent == "quot") out += '"';
    else if (ent == "apos") out += '\'';
    else if (ent.size() > 1 && ent[0] == '#') {
      const bool hexa = ent[1] == 'x' || ent[1] == 'X';
      const std::string digits(ent.substr(hexa ? 2 : 1));
      char* end = nullptr;
      const unsigned long cp = std::strtoul(digits.c_str(), &end, hexa ? 16 : 10);
      if (digits.empty() || *end != '\0' || cp > 0x10FFFF) {
        out.append(s.substr(i, semi - i + 1));
      } else {
        detail::append_utf8(out, static_cast<char32_t>(cp));
      }
    } else {
      out.append(s.substr(i, semi - i + 1));
    }
    i = semi;
  }
  return out;
}

std::string xml_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      case '\r': out += "&#13;"; break;  // keep line ends exact through XML parsing
      case '\n': out += "&#10;"; break;
      case '\t': out += "&#9;"; break;
      default: out += c;
    }
  }
  return out;
}

// The raw content of the next <tag>...</tag> (or <tag/>) in `doc` at or
// after `pos`, which then moves past it; nullopt when there is none.
std::optional<std::string_view> xml_next(std::string_view doc, std::string_view tag, std::size_t& pos) {
  // '<', not "<": GCC 12 warns -Wrestrict (a false positive) on "<" + std::string.
  const std::string open = '<' + std::string(tag) + ">";
  const std::string empty = '<' + std::string(tag) + "/>";
  const std::string close = "</" + std::string(tag) + ">";
  const std::size_t a = doc.find(open, pos), b = doc.find(empty, pos);
  if (b != std::string_view::npos && (a == std::string_view::npos || b < a)) {
    pos = b + empty.size();
    return std::string_view{};
  }
  if (a == std::string_view::npos) return std::nullopt;
  const std::size_t start = a + open.size();
  const std::size_t end = doc.find(close, start);
  if (end == std::string_view::npos) return std::nullopt;
  pos = end + close.size();
  return doc.substr(start, end - start);
}

// The unescaped text of the first <tag> in `doc`, or "".
std::string xml_first(std::string_view doc, std::string_view tag) {
  std::size_t pos = 0;
  const auto v = xml_next(doc, tag, pos);
  return v ? xml_unescape(*v) : std::string();
}

ListPage parse_list(std::string_view doc) {
  ListPage page;
  std::size_t pos = 0;
  while (auto contents = xml_next(doc, "Contents", pos)) {
    std::size_t p = 0;
    if (auto k = xml_next(*contents, "Key", p)) {
      page.keys.push_back(xml_unescape(*k));
      std::size_t q = 0;
      std::uint64_t size = kNoSize;
      if (auto sz = xml_next(*contents, "Size", q)) {
        const auto [end, ec] = std::from_chars(sz->data(), sz->data() + sz->size(), size);
        if (ec != std::errc() || end != sz->data() + sz->size()) size = kNoSize;
      }
      page.sizes.push_back(size);
    }
  }
  pos = 0;
  while (auto common = xml_next(doc, "CommonPrefixes", pos)) {
    std::size_t p = 0;
    if (auto k = xml_next(*common, "Prefix", p)) page.prefixes.push_back(xml_unescape(*k));
  }
  page.truncated = xml_first(doc, "IsTruncated") == "true";
  if (page.truncated) page.next = xml_first(doc, "NextContinuationToken");
  return page;
}

ErrorBody parse_error(std::string_view doc) {
  return {xml_first(doc, "Code"), xml_first(doc, "Message")};
}

}  // namespace zarrcoro::s3xml
