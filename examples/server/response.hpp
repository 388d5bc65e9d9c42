// The vocabulary of the example server's handlers: the request and response
// types, the error responses every handler sends, and what a handler
// answers (a Reply: a response with its body in memory, in a file, or in a
// slice still to decode) for the session to send.
//
// Thread-safety: value types and pure functions; a value is used by one
// coroutine at a time (a request's handler, then its session).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/http.hpp>

#include <zarrcoro/array.hpp>
#include <zarrcoro/bytes.hpp>
#include <zarrcoro/error.hpp>
#include <zarrcoro/store/filesystem.hpp>

namespace zarrcoro::server {

// Shorthands of the server's sources.
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace fs = std::filesystem;
using tcp = asio::ip::tcp;
using asio::awaitable;
using asio::use_awaitable;

using Request = http::request<http::string_body>;
using Response = http::response<http::vector_body<std::byte, UninitAllocator<std::byte>>>;

// Completes a co_await with (error_code, result...) instead of throwing.
inline constexpr auto kTuple = asio::as_tuple(use_awaitable);

// ---- responses -----------------------------------------------------------

// A response with `status` and, if given, a Content-Type.
Response respond(http::status status, std::string_view content_type = {});

// `text` as the body of `res`.
void set_body(Response& res, std::string_view text);

// A short plain-text reason: every error the server sends looks like this.
Response text(http::status status, std::string_view reason);

Response not_found();

// An engine error as a response. Store errors carry file paths: logged, not sent.
Response error_response(const Error& e);

// Why `key` is not a valid store key, or nullopt if it is.
std::optional<std::string> key_problem(const std::string& key);

// ---- what a handler answers ------------------------------------------------

// A key's file sent from its descriptor: `pieces` in order, each a short
// text (a multipart part's header) or a range of the file (sendfile).
struct FileBody {
  struct Piece {
    std::string text;
    std::uint64_t offset = 0, length = 0;  // a file range when `text` is empty
  };
  std::shared_ptr<const FilesystemStore::OpenFile> file;
  std::vector<Piece> pieces;

  std::uint64_t size() const {
    std::uint64_t n = 0;
    for (const auto& p : pieces) n += p.text.empty() ? p.length : p.text.size();
    return n;
  }
};

// A slice sent slab by slab: the region's rows [cuts[k], cuts[k + 1]) along
// its first dimension (whole chunk rows, contiguous in C order), each decoded
// in the codec pool while the previous one is written. Slab 0 is decoded
// before the header goes out, so that most failures still get a status.
struct SliceBody {
  Array array;
  Region region;
  std::string npy_header;               // empty for format=raw
  std::vector<std::uint64_t> cuts;      // indices along dimension 0, first = region.start[0]
  std::uint64_t row_bytes = 0;          // bytes of one index along dimension 0
  Bytes first;                          // slab 0, decoded
  std::shared_ptr<void> slot;           // of the slice gate: given back once the last slab is decoded

  std::uint64_t size() const { return npy_header.size() + (cuts.back() - cuts.front()) * row_bytes; }
  std::uint64_t slab_bytes(std::size_t k) const { return (cuts[k + 1] - cuts[k]) * row_bytes; }
  Region slab(std::size_t k) const {
    Region r = region;
    if (!r.start.empty()) r.start[0] = cuts[k], r.stop[0] = cuts[k + 1];
    return r;
  }
};

// A handler's answer: the metrics route label, the response (its body in
// memory, or in `body`), and whatever must live until the response is sent
// (a slice's memory reservation).
struct Reply {
  std::string route;
  Response res;
  std::shared_ptr<void> hold;
  std::variant<std::monostate, FileBody, SliceBody> body;  // monostate: res.body()
};

inline Reply reply(std::string route, Response res) { return Reply{std::move(route), std::move(res), nullptr, {}}; }

// How much of a response went out, and why it stopped short.
struct Sent {
  boost::system::error_code ec;
  std::uint64_t bytes = 0;
};

// The headers that make a key's response conditional or partial.
struct Preconditions {
  std::string range, if_range, if_none_match, if_modified_since;

  static Preconditions of(const Request& req) {
    return {std::string(req[http::field::range]), std::string(req[http::field::if_range]),
            std::string(req[http::field::if_none_match]), std::string(req[http::field::if_modified_since])};
  }
};

// What the response and the access log need of a request.
struct RequestLine {
  http::verb method = http::verb::get;
  unsigned version = 11;
  std::string target;

  static RequestLine of(const Request& req) { return {req.method(), req.version(), std::string(req.target())}; }
};

}  // namespace zarrcoro::server
