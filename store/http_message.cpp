// The HTTP client's URLs, Range headers and responses: parse_url, Origin,
// range_header, take_value / take_partial, Response::header,
// etag_generation and status_text (see store/http_client.hpp).
#include "store/http_client.hpp"

#include <algorithm>
#include <charconv>
#include <limits>
#include <optional>

#include <boost/beast/http.hpp>

#include <zarrcoro/error.hpp>
#include <zarrcoro/store/http.hpp>

namespace zarrcoro::http {

namespace beast = boost::beast;

// ---------------------------------------------------------------------------
// URLs

std::string Origin::authority() const {
  const bool v6 = host.find(':') != std::string::npos;
  std::string out = v6 ? "[" + host + "]" : host;
  if (port != (tls ? 443 : 80)) out += ':' + std::to_string(port);  // ':', not ":" (GCC 12 -Wrestrict)
  return out;
}

std::string Origin::str() const {
  const bool v6 = host.find(':') != std::string::npos;
  return std::string(tls ? "https://" : "http://") + (v6 ? "[" + host + "]" : host) + ":" +
         std::to_string(port);
}

std::pair<Origin, std::string> parse_url(std::string_view url) {
  auto bad = [&](const std::string& why) -> std::pair<Origin, std::string> {
    throw InvalidArgument("", "url", "'" + std::string(url) + "': " + why);
  };
  Origin o;
  std::string_view rest;
  std::string scheme(url.substr(0, url.find("://")));
  for (auto& c : scheme)
    if (c >= 'A' && c <= 'Z') c = char(c - 'A' + 'a');
  if (scheme == "http" && url.size() >= 7) {
    rest = url.substr(7);
  } else if (scheme == "https" && url.size() >= 8) {
    o.tls = true;
    o.port = 443;
    rest = url.substr(8);
  } else {
    return bad("expected http:// or https://");
  }
  const std::size_t slash = rest.find_first_of("/?#");
  std::string_view auth = rest.substr(0, slash);
  std::string_view path = slash == std::string_view::npos ? "" : rest.substr(slash);
  path = path.substr(0, path.find_first_of("?#"));
  while (!path.empty() && path.back() == '/') path.remove_suffix(1);
  if (auth.find('@') != std::string_view::npos) return bad("credentials in URLs are not supported");
  std::string_view port;
  if (auth.starts_with("[")) {
    const std::size_t close = auth.find(']');
    if (close == std::string_view::npos) return bad("unterminated IPv6 address");
    o.host = std::string(auth.substr(1, close - 1));
    const auto after = auth.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') return bad("junk after the IPv6 address");
      port = after.substr(1);
    }
  } else {
    const std::size_t colon = auth.rfind(':');
    o.host = std::string(auth.substr(0, colon));
    if (colon != std::string_view::npos) port = auth.substr(colon + 1);
  }
  if (o.host.empty()) return bad("no host");
  for (auto& c : o.host)
    if (c >= 'A' && c <= 'Z') c = char(c - 'A' + 'a');
  if (!port.empty()) {
    unsigned value = 0;
    const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
    if (ec != std::errc{} || end != port.data() + port.size() || value == 0 || value > 65535)
      return bad("bad port '" + std::string(port) + "'");
    o.port = static_cast<std::uint16_t>(value);
  }
  return {o, std::string(path)};
}

// The Range header value for `range`, or "" for the whole value. Ranges
// with nothing to fetch (length 0) are handled by the caller.
std::string range_header(const ByteRange& range) {
  constexpr auto max = std::numeric_limits<std::uint64_t>::max();
  switch (range.kind) {
    case ByteRange::Kind::full:
      return "";
    case ByteRange::Kind::range:
      if (range.length > max - range.offset) return "bytes=" + std::to_string(range.offset) + "-";
      return "bytes=" + std::to_string(range.offset) + "-" +
             std::to_string(range.offset + range.length - 1);
    case ByteRange::Kind::suffix:
      // Servers parse the length as a signed 64-bit number: stay below that.
      return "bytes=-" + std::to_string(std::min<std::uint64_t>(range.length, max >> 1));
  }
  return "";
}

// Checks a 206 answer against the requested range and returns its bytes;
// raises StoreError when the Content-Range does not match.
std::optional<Bytes> take_value(const std::string& key, const std::string& url, const ByteRange& range,
                                Response& r) {
  switch (r.status) {
    case 200: {
      if (range.kind == ByteRange::Kind::full) return std::move(r.body);
      // A 200 is the whole value (the server ignored the range), unless a
      // Content-Range says it is a part mislabelled: slicing that would be
      // wrong data.
      if (!r.header("Content-Range").empty())
        throw StoreError(key, "Content-Range",
                         "GET " + url + ": a 200 answer to a range request with a Content-Range ('" +
                             r.header("Content-Range") + "'): a part or the whole value?");
      // The server ignored the range: slice the whole value.
      const ByteExtent e = clip(range, r.body.size());
      return Bytes(r.body.begin() + static_cast<std::ptrdiff_t>(e.begin),
                   r.body.begin() + static_cast<std::ptrdiff_t>(e.end));
    }
    case 206:
      if (range.kind == ByteRange::Kind::full)
        throw StoreError(key, "HTTP 206", "GET " + url + ": a partial answer to a whole-value request");
      return take_partial(key, url, range, r);
    case 416:  // the range starts past the end; a whole-value request has no range to miss
      if (range.kind == ByteRange::Kind::full)
        throw StoreError(key, "HTTP 416", "GET " + url + ": 416 to a request without a Range");
      return Bytes{};
    default:
      return std::nullopt;
  }
}

Bytes take_partial(const std::string& key, const std::string& url, const ByteRange& range,
                   Response& r) {
  // "bytes first-last/total" (total may be "*").
  const std::string cr = r.header("Content-Range");
  auto fail = [&](const std::string& why) -> Bytes {
    throw StoreError(key, "Content-Range",
                     "GET " + url + ": " + why + " (Content-Range '" + cr + "', " +
                         std::to_string(r.body.size()) + " body bytes)");
  };
  std::uint64_t first = 0, last = 0, total = 0;
  bool total_known = false;
  {
    std::string_view s(cr);
    if (!s.starts_with("bytes ")) return fail("a 206 answer without a byte Content-Range");
    s.remove_prefix(6);
    auto num = [&](std::uint64_t& v) {
      const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
      if (ec != std::errc{} || end == s.data()) return false;
      s.remove_prefix(static_cast<std::size_t>(end - s.data()));
      return true;
    };
    if (!num(first) || s.empty() || s.front() != '-') return fail("a malformed Content-Range");
    s.remove_prefix(1);
    if (!num(last) || s.empty() || s.front() != '/') return fail("a malformed Content-Range");
    s.remove_prefix(1);
    if (s == "*") total_known = false;
    else if (num(total) && s.empty()) total_known = true;
    else return fail("a malformed Content-Range");
  }
  if (last < first || r.body.size() != last - first + 1)
    return fail("the body length does not match the Content-Range");
  if (total_known && last >= total) return fail("a Content-Range beyond the value's end");
  // The expected extent: a suffix needs the total to be checked exactly.
  std::uint64_t want_first = 0, want_last = 0;
  if (range.kind == ByteRange::Kind::range) {
    want_first = range.offset;
    const std::uint64_t end = range.length > std::numeric_limits<std::uint64_t>::max() - range.offset
                                  ? std::numeric_limits<std::uint64_t>::max()
                                  : range.offset + range.length;
    want_last = end - 1;
    if (total_known && want_last >= total) want_last = total - 1;
    // Without the total, a shorter answer could be the value's end or a
    // part of what was asked: only the exact range is taken.
    if (first != want_first || last != want_last)
      return fail(total_known || last > want_last || first != want_first
                      ? "the server sent another range than requested"
                      : "the server sent less than requested without the value's length");
  } else if (range.kind == ByteRange::Kind::suffix) {
    // A suffix is located by the total: a server that does not know it
    // cannot have answered one.
    if (!total_known) return fail("a suffix answer without the value's length");
    const ByteExtent e = clip(range, total);
    if (first != e.begin || last + 1 != e.end) return fail("the server sent another range than requested");
  }
  return std::move(r.body);
}

std::string Response::header(std::string_view name) const {
  const auto it = headers.find(beast::string_view(name.data(), name.size()));
  return it == headers.end() ? std::string() : std::string(it->value());
}

Generation etag_generation(const Response& r) {
  std::string etag = r.header("ETag");
  if (etag.size() < 2 || etag.front() != '"') return {};
  const std::string_view opaque = std::string_view(etag).substr(1, etag.size() - 2);
  const bool may_repeat = opaque.ends_with(HttpStore::kMayRepeatETagSuffix);
  return {std::move(etag), may_repeat};
}

std::string_view status_text(unsigned status) {
  const auto s = beast_http::obsolete_reason(beast_http::int_to_status(status));
  return {s.data(), s.size()};
}

}  // namespace zarrcoro::http
