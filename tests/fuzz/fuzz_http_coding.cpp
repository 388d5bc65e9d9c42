// Content-Encoding of HTTP answers, as the HTTP client decodes it before the
// stores see a body (store/http_coding.cpp, http::decode_content). Input lines:
//   1: the status ("200")
//   2: the Content-Encoding value ("gzip", "deflate, gzip", "br", ...)
//   3: the limit on the decoded body, in bytes (at most 1 MiB)
//   rest: the body as the server sent it.
// Only StoreError naming Content-Encoding may leave, and only for a 2xx
// answer; a decoded body is within the limit and carries no Content-Encoding.
// Round trip: the rest, coded by zlib as gzip, as zlib-wrapped deflate and as
// raw deflate, decodes to exactly itself when it fits the limit, and fails
// when it does not.
#include <charconv>
#include <string>

#include "fuzz_common.hpp"
#include "store/http_client.hpp"
#include "tests/fault_server.hpp"  // FaultServer::encode: zlib's own coding

using namespace zarrcoro;

namespace {

bool number(std::string_view s, std::uint64_t& v) {
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  return ec == std::errc{} && end == s.data() + s.size();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto line1 = fuzz::split(fuzz::text(data, size), "\n");
  const auto line2 = fuzz::split(line1.second, "\n");
  const auto line3 = fuzz::split(line2.second, "\n");
  const std::string_view coding = line2.first, body = line3.second;
  std::uint64_t status = 0, limit = 0;
  if (!number(line1.first, status) || status < 100 || status > 999) return 0;
  if (!number(line3.first, limit) || limit > (std::uint64_t{1} << 20)) return 0;
  // No answer's header holds these (Beast's parser refuses them; its fields
  // throw std::length_error for a value of 64 KiB).
  if (coding.size() > 8192) return 0;
  for (const char c : coding)
    if ((c >= 0 && c < 0x20 && c != '\t') || c == 0x7f) return 0;

  http::Request req;
  req.key = "a/c/0";
  const std::string url = "http://example.invalid/a/c/0";
  auto answer = [&](std::string_view encoding, Bytes coded) {
    http::Response r;
    r.status = static_cast<unsigned>(status);
    r.headers.set("Content-Encoding", std::string(encoding));
    r.body = std::move(coded);
    r.attempts = 1;
    return r;
  };

  http::Response r = answer(coding, fuzz::owned(body));
  const bool decoded = fuzz::typed([&] { http::decode_content(req, url, limit, r); });
  const bool data_answer = status >= 200 && status < 300;
  fuzz::check(decoded || data_answer, "an error answer's body that cannot be decoded threw instead of being dropped");
  // The header is removed exactly when a coding was undone (or, for an error
  // answer, its body dropped).
  if (decoded && r.headers.find(http::beast_http::field::content_encoding) == r.headers.end())
    fuzz::check(r.body.size() <= limit, "a decoded body above the limit");

  if (status != 200) return 0;
  const std::string plain(body);
  for (const std::string coding_name : {"gzip", "deflate", "raw-deflate"}) {
    const std::string zipped = test::FaultServer::encode(coding_name, plain);
    http::Response coded = answer(coding_name == "gzip" ? "gzip" : "deflate", fuzz::owned(zipped));
    const bool ok = fuzz::typed([&] { http::decode_content(req, url, limit, coded); });
    if (body.size() > limit) {
      fuzz::check(!ok, "a body above the limit decoded");
    } else {
      fuzz::check(ok, "zlib's own coding of the body did not decode");
      fuzz::check(coded.body == fuzz::owned(body), "the body decoded to other bytes");
      fuzz::check(coded.headers.find(http::beast_http::field::content_encoding) == coded.headers.end(),
                  "Content-Encoding was left on a decoded body");
    }
  }
  return 0;
}
