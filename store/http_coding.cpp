// The HTTP client's content codings: gzip and deflate response bodies
// decoded before send() returns them (see store/http_client.hpp).
#include "store/http_client.hpp"

#include <zlib.h>

#include <algorithm>
#include <string>
#include <vector>

#include <boost/beast/core/string.hpp>
#include <boost/beast/http.hpp>

#include <zarrcoro/error.hpp>

namespace zarrcoro::http {

namespace beast = boost::beast;

namespace {

enum class Coding { gzip, deflate };

// Inflates `in` into `out`, at most `limit` bytes: gzip (one or more
// members), or deflate, zlib-wrapped as RFC 9110 says or raw as some servers
// send it. "" on success, else why not: never a partial result.
std::string inflate_body(Coding coding, ByteSpan in, std::uint64_t limit, Bytes& out) {
  int bits = 15 + 16;  // gzip only
  if (coding == Coding::deflate) {
    // A zlib header: method 8 in the low nibble, the first two bytes a multiple of 31.
    const unsigned b0 = in.size() >= 2 ? std::to_integer<unsigned>(in[0]) : 0;
    const unsigned b1 = in.size() >= 2 ? std::to_integer<unsigned>(in[1]) : 0;
    bits = in.size() >= 2 && (b0 & 0x0f) == 8 && ((b0 << 8) | b1) % 31 == 0 ? 15 : -15;
  }
  z_stream z{};
  if (inflateInit2(&z, bits) != Z_OK) return "zlib cannot be initialised";
  struct End {
    z_stream* z;
    ~End() { inflateEnd(z); }
  } end{&z};
  constexpr std::size_t piece = std::size_t{1} << 30;  // avail_in/out are 32-bit
  const std::byte* next = in.data();
  std::size_t in_left = in.size();
  std::size_t produced = 0;
  out.clear();
  for (;;) {
    if (z.avail_in == 0 && in_left > 0) {
      z.next_in = reinterpret_cast<Bytef*>(const_cast<std::byte*>(next));
      z.avail_in = static_cast<uInt>(std::min(in_left, piece));
      next += z.avail_in;
      in_left -= z.avail_in;
    }
    if (produced == out.size()) {
      // Room for one byte past the limit, to tell "exactly the limit" from "more".
      const std::uint64_t want = std::max<std::uint64_t>({std::uint64_t{64} << 10, std::uint64_t{produced} * 2,
                                                          std::uint64_t{in.size()} * 4});
      out.resize(static_cast<std::size_t>(limit < want ? limit + 1 : want));
    }
    z.next_out = reinterpret_cast<Bytef*>(out.data() + produced);
    z.avail_out = static_cast<uInt>(std::min(out.size() - produced, piece));
    const uInt room = z.avail_out;
    const int rc = inflate(&z, Z_NO_FLUSH);
    produced += room - z.avail_out;
    if (produced > limit) break;
    if (rc == Z_STREAM_END) {
      if (z.avail_in == 0 && in_left == 0) {
        out.resize(produced);
        return "";
      }
      if (coding != Coding::gzip) return "bytes after the end of the deflate stream";
      inflateReset(&z);  // another gzip member (anything else fails its header check)
      continue;
    }
    if (rc != Z_OK && rc != Z_BUF_ERROR)
      return std::string("corrupt ") + (coding == Coding::gzip ? "gzip" : "deflate") + " data" +
             (z.msg ? std::string(" (") + z.msg + ")" : std::string());
    if (z.avail_in == 0 && in_left == 0 && z.avail_out > 0)
      return std::string("the ") + (coding == Coding::gzip ? "gzip" : "deflate") + " stream is cut short";
  }
  out.clear();
  return "it decodes to more than the " + std::to_string(limit) + "-byte limit";
}

// The codings a Content-Encoding value lists, lowercased, without "identity".
std::vector<std::string> content_codings(std::string_view value) {
  std::vector<std::string> out;
  while (!value.empty()) {
    const std::size_t comma = value.find(',');
    std::string_view token = value.substr(0, comma);
    value = comma == std::string_view::npos ? std::string_view() : value.substr(comma + 1);
    while (!token.empty() && (token.front() == ' ' || token.front() == '\t')) token.remove_prefix(1);
    while (!token.empty() && (token.back() == ' ' || token.back() == '\t')) token.remove_suffix(1);
    std::string t(token);
    for (auto& c : t)
      if (c >= 'A' && c <= 'Z') c = char(c - 'A' + 'a');
    if (!t.empty() && t != "identity") out.push_back(std::move(t));
  }
  return out;
}

}  // namespace

// Replaces a coded body of `r` by the value it codes, at most `limit` bytes;
// raises StoreError (field "Content-Encoding") when a 2xx body cannot be
// decoded. An error answer's body that cannot be decoded is dropped instead.
void decode_content(const Request& req, const std::string& url, std::uint64_t limit, Response& r) {
  if (req.method == beast_http::verb::head || r.status == 204 || r.status == 304) return;  // no body
  if (r.body.empty() && req.method != beast_http::verb::get) return;  // e.g. a PUT's answer
  const std::string header = r.header("Content-Encoding");
  const auto codings = content_codings(header);
  if (codings.empty()) return;
  // An error answer's body is only a message: decoded when possible, else dropped.
  const bool data = r.status >= 200 && r.status < 300;
  const std::string method(beast_http::to_string(req.method));
  std::string asked = "identity";
  for (const auto& [k, v] : req.headers)
    if (beast::iequals(k, "Accept-Encoding")) asked = v;
  auto fail = [&](const std::string& why) {
    if (!data) {
      r.body.clear();
      r.headers.erase(beast_http::field::content_encoding);
      return;
    }
    throw StoreError(req.key, "Content-Encoding",
                     method + " " + url + ": the server answered HTTP " + std::to_string(r.status) +
                         " with Content-Encoding '" + header + "' for key '" + req.key + "' (asked for '" +
                         asked + "'): " + why);
  };
  if (r.status == 206)
    return fail("a 206 answer is a range of the coded value, which cannot be decoded alone");
  std::vector<Coding> steps;
  for (const auto& c : codings) {
    if (c == "gzip" || c == "x-gzip") steps.push_back(Coding::gzip);
    else if (c == "deflate") steps.push_back(Coding::deflate);
    else return fail("the coding '" + c + "' is not supported (only gzip and deflate are decoded)");
  }
  // Codings are listed in the order they were applied: undo the last first.
  Bytes decoded;
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
    if (std::string why = inflate_body(*it, r.body, limit, decoded); !why.empty()) return fail(why);
    r.body.swap(decoded);
  }
  r.headers.erase(beast_http::field::content_encoding);
}

}  // namespace zarrcoro::http
