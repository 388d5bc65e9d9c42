// The HTTP/1.1 client shared by HttpStore and S3Store (Boost.Beast, OpenSSL).
//
// Thread-safety: a Client may be used concurrently from any thread and any
// executor. Per host (scheme, host, port) it keeps a pool of idle keep-alive
// connections (guarded by a mutex; a connection is checked out by one
// request at a time) and a semaphore bounding the requests in flight
// (HttpClientOptions::max_connections_per_host). A request in progress keeps
// the Client alive (it holds a shared_ptr to it), so create Clients with
// std::make_shared.
//
// Sockets, timers and the resolver run on the executor given at construction
// (the runtime's I/O executor), each connection on a strand of its own (its
// I/O and its timeout handlers never run concurrently, however many threads
// run the io_context); an awaiting coroutine resumes on its own executor.
// The client never blocks a thread.
//
// Interim (1xx) answers are read and skipped. A pooled connection that the
// server closed or sent unasked bytes on is dropped before reuse; one that
// fails before any answer byte is replaced once within the attempt (the
// request is then resent: Response::resent).
//
// send() makes up to max_attempts attempts with exponential backoff and
// jitter. Retried: failures to resolve or connect, resets, timeouts (no
// progress for io_timeout, or an attempt longer than request_timeout), a
// response cut short, and the statuses 408, 429, 500, 502, 503, 504. Not
// retried: TLS certificate or host name verification failures, a body above
// the limits, a malformed response (those fail at once). connect_timeout
// bounds the name lookup too (a lookup still running then is abandoned).
//
// Content codings: every request sends "Accept-Encoding: identity" (unless
// its headers set Accept-Encoding). A final response whose Content-Encoding
// lists gzip (x-gzip) or deflate (zlib-wrapped, or raw) is decoded before
// send() returns it, the decoded body held to the same limit as a body
// (max_body_bytes; max_full_body for a 200 answer to a range request), and
// its Content-Encoding header removed. A 2xx answer that cannot be decoded
// fails with StoreError field "Content-Encoding" naming the coding and the
// key: another coding (br, zstd, compress, ...), any coding on a 206 (a range
// of the coded bytes cannot be decoded alone), a corrupt or truncated
// stream, or a decoded body above the limit. Coded bytes are never returned
// as the value. An error answer's body (4xx, 5xx) is only a message: it is
// decoded likewise, or dropped when it cannot be. HEAD, 204 and 304 answers
// have no body and are left alone. Decoding runs on the client's strand.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/beast/http/fields.hpp>
#include <boost/beast/http/verb.hpp>

#include <zarrcoro/store.hpp>
#include <zarrcoro/store/http.hpp>

namespace zarrcoro::http {

namespace beast_http = boost::beast::http;

// Where requests go: scheme, host and port.
struct Origin {
  bool tls = false;
  std::string host;  // a name, an IPv4 address, or an IPv6 address without brackets
  std::uint16_t port = 80;

  // "host" or "host:port" (non-default port), IPv6 in brackets: the Host header.
  std::string authority() const;
  // "http://host:port" without a path.
  std::string str() const;
  bool operator==(const Origin&) const = default;
};

// Splits "http(s)://host[:port][/path]" into the origin and the path ("" or
// "/..." as written, without a trailing '/', query or fragment). Raises
// InvalidArgument for another scheme, an empty host, a bad port, or
// credentials in the URL.
std::pair<Origin, std::string> parse_url(std::string_view url);

struct Request {
  beast_http::verb method = beast_http::verb::get;
  Origin origin;
  std::string target = "/";  // origin-form, already encoded: "/path?query"
  // Host and Content-Length are added, and Accept-Encoding: identity unless set here.
  std::vector<std::pair<std::string, std::string>> headers;
  // The body (kept for retries, never copied): `body` points into storage
  // that `body_owner` keeps alive. No owner: no body.
  std::shared_ptr<const void> body_owner;
  ByteSpan body;
  std::string key;                    // the store key, for error messages
  // When nonzero: a 200 answer whose body is larger than this fails at once
  // (StoreError) without being downloaded. Used for range requests, where
  // 200 means the server ignored the range and sends the whole value.
  std::uint64_t max_full_body = 0;
};

struct Response {
  unsigned status = 0;
  beast_http::fields headers;
  Bytes body;
  unsigned attempts = 0;  // attempts this response took (1 = no retry)
  // The request went out more than once (a retry, or a resend on a new
  // connection after a pooled one failed): an earlier copy may have been
  // carried out, its answer lost.
  bool resent = false;

  // The header's value, or "" when absent.
  std::string header(std::string_view name) const;
};

class Client : public std::enable_shared_from_this<Client> {
 public:
  // Raises InvalidArgument if the TLS settings cannot be applied (e.g. an
  // unreadable ca_file).
  Client(boost::asio::any_io_executor io, HttpClientOptions options);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Success: the final response, whatever its status (after the last
  // attempt it may still be a retryable status such as 503), its body
  // decoded from any gzip or deflate Content-Encoding.
  // Failure: StoreError naming request.key and the URL, with the last
  // transport error and the number of attempts ("timed out", "connection
  // reset", "certificate verify failed", ...); StoreError field
  // "Content-Encoding" for a 2xx body that cannot be decoded (see above).
  awaitable<Response> send(Request request);

  HttpClientStats stats() const;
  const HttpClientOptions& options() const { return options_; }
  const boost::asio::any_io_executor& executor() const { return io_; }

  // Implementation types (http_client.cpp).
  struct HostPool;
  struct Conn;
  struct Attempt;

 private:
  awaitable<Response> send_on_strand(Request request);
  std::shared_ptr<HostPool> pool_for(const Origin& origin);
  // Coroutine parameters point into the awaiting frame.
  awaitable<Attempt> attempt(const Request* request, HostPool* pool);
  awaitable<std::unique_ptr<Conn>> connect(Origin origin, Attempt* out,
                                           boost::asio::any_io_executor strand);
  awaitable<void> exchange(Conn* conn, const Request* request, Attempt* out);
  std::chrono::milliseconds backoff(unsigned retry, const Response* response) const;

  boost::asio::any_io_executor io_;
  HttpClientOptions options_;
  boost::asio::ssl::context tls_;
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<HostPool>> pools_;
  std::atomic<std::uint64_t> requests_{0}, attempts_{0}, retries_{0}, connections_{0}, reused_{0},
      bytes_received_{0}, bytes_sent_{0};
};

// A response's generation: its strong ETag, verbatim (If-Match takes it
// back as is), `may_repeat` by HttpStore::kMayRepeatETagSuffix. A weak or
// missing ETag cannot make a condition (If-Match compares strongly): unknown.
Generation etag_generation(const Response& r);

// The reason phrase of an HTTP status, e.g. "Service Unavailable".
std::string_view status_text(unsigned status);

// The Range header value for `range` ("bytes=a-b", "bytes=a-", "bytes=-n"),
// or "" for the whole value. A range of length 0 has no header value: the
// caller handles it (the value's existence is all it needs).
std::string range_header(const ByteRange& range);

// The bytes of a 206 answer `r` to a request for `range` of `key`, after
// checking its Content-Range against the request; raises StoreError (field
// "Content-Range") when the server sent another range, a malformed one, or
// a body of another length: never wrong data.
Bytes take_partial(const std::string& key, const std::string& url, const ByteRange& range,
                   Response& r);

// The value (or part) a GET for `range` of `key` returned, for the statuses
// that carry one: 200 (sliced here if the server ignored the range), 206
// (checked as take_partial does; StoreError "HTTP 206" for a whole-value
// request) and 416 (the value exists, the range starts past its end: empty).
// nullopt for any other status, which the caller maps to its own errors.
std::optional<Bytes> take_value(const std::string& key, const std::string& url, const ByteRange& range,
                                Response& r);

// Replaces a coded body of `r` (the final response to `req`, sent to
// `url`) by the value it codes, at most `limit` bytes, as the header above
// says of content codings (http_coding.cpp; send() calls it).
void decode_content(const Request& req, const std::string& url, std::uint64_t limit, Response& r);

}  // namespace zarrcoro::http
