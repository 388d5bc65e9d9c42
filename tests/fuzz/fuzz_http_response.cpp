// HTTP GET answers as the HTTP and S3 stores read them (store/http_client.hpp
// take_value / take_partial), with a synthetic Response. Input lines:
//   1: the status ("206")
//   2: the requested range: "full", "<offset> <length>" or "-<length>"
//   3: the Content-Range header value (absent if the line is missing)
//   rest: the body.
// Whatever is returned must be what was asked for: a full request gets the
// body; a range gets at most `length` bytes, and a 200 answer its slice.
#include <charconv>

#include <zarrcoro/store/memory.hpp>  // clip

#include "fuzz_common.hpp"
#include "store/http_client.hpp"

using namespace zarrcoro;

namespace {

bool number(std::string_view s, std::uint64_t& v) {
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  return ec == std::errc{} && end == s.data() + s.size();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  // (No structured bindings here: clang 14 cannot capture them in lambdas.)
  const auto line1 = fuzz::split(fuzz::text(data, size), "\n");
  const auto line2 = fuzz::split(line1.second, "\n");
  bool has_cr = false;
  const auto line3 = fuzz::split(line2.second, "\n", &has_cr);
  const std::string_view status_line = line1.first, range_line = line2.first;
  const std::string_view content_range = line3.first, body = line3.second;

  std::uint64_t status = 0;
  if (!number(status_line, status) || status > 999) return 0;
  ByteRange range;
  if (range_line == "full") {
    range = ByteRange::all();
  } else if (range_line.starts_with("-")) {
    std::uint64_t n = 0;
    if (!number(range_line.substr(1), n)) return 0;
    range = ByteRange::last(n);
  } else {
    const auto ab = fuzz::split(range_line, " ");
    std::uint64_t off = 0, n = 0;
    if (!number(ab.first, off) || !number(ab.second, n)) return 0;
    range = ByteRange::from(off, n);
  }
  // The stores send no request for an empty range (they answer it themselves).
  if (range.kind != ByteRange::Kind::full && range.length == 0) return 0;

  auto make = [&] {
    http::Response r;
    r.status = static_cast<unsigned>(status);
    if (has_cr) r.headers.set("Content-Range", std::string(content_range));
    r.body = fuzz::owned(body);
    r.attempts = 1;
    return r;
  };
  const std::string key = "a/c/0", url = "http://example.invalid/a/c/0";

  fuzz::typed([&] {
    http::Response r = make();
    const auto v = http::take_value(key, url, range, r);
    if (!v) return;
    if (range.kind == ByteRange::Kind::full) {
      // (a 416 answer has no range to be past the end of here: it is no value)
      fuzz::check(v->size() == body.size(), "a whole-value request returned other bytes than the answer's body");
    } else if (status == 200) {
      const ByteExtent e = clip(range, body.size());
      fuzz::check(v->size() == e.size(), "a 200 answer was sliced wrongly");
    } else {
      fuzz::check(v->size() <= range.length, "more bytes than requested");
    }
  });
  fuzz::typed([&] {
    http::Response r = make();
    const Bytes v = http::take_partial(key, url, range, r);
    if (range.kind != ByteRange::Kind::full) fuzz::check(v.size() <= range.length, "more bytes than requested");
  });
  (void)http::range_header(range);
  (void)http::status_text(static_cast<unsigned>(status));
  return 0;
}
