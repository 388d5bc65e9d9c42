// A read-only Store over HTTP(S): key "a/c/0/1" is GET <base url>/a/c/0/1.
//
// Thread-safety: every method may be called concurrently from any thread and
// any executor. The store's HTTP client keeps a connection pool per host
// (guarded by a mutex; a connection serves one request at a time) and bounds
// the requests in flight per host. Destroy the store only after its
// operations have completed.
//
// Requests: GET for values (with a Range header for byte ranges, "bytes=-N"
// for suffixes), HEAD for exists. Keys are URI-encoded segment by segment.
//  - 200 or 206 -> the bytes. A 206 must carry a Content-Range that matches
//    the request exactly (a suffix, or a range of unknown total, only with
//    the value's length), else the get fails (never wrong data). A server
//    that ignores Range and answers 200 with the whole value is sliced
//    locally, up to `max_full_body` bytes; a larger whole body fails with
//    StoreError without being downloaded, and a 200 carrying a
//    Content-Range (a part mislabelled) fails too.
//  - 416 (range not satisfiable) -> the key exists, the range is empty.
//  - 404 and 410 -> missing key (nullopt / false).
//  - 301, 302, 303, 307, 308 -> the request is repeated at the Location (up
//    to 5 redirects, other hosts included; at another origin without the
//    configured `headers`, which are the origin's credentials; never from
//    https to http: StoreError field "Location").
//  - 412 -> `changed` for a read conditional on a generation; otherwise,
//    and for other statuses -> StoreError naming the key, field
//    "HTTP <status>". Interim 1xx answers are skipped.
// Transport failures, timeouts, 408, 429 and 5xx are retried (see
// HttpClientOptions) before failing with StoreError.
//
// Content codings: requests send "Accept-Encoding: identity" (unless
// `headers` sets Accept-Encoding). A server that answers with
// Content-Encoding gzip, x-gzip or deflate anyway is decoded (the decoded
// size bounded like a body: max_body_bytes, or max_full_body for a 200
// answer to a range request, which is then sliced); any other coding, any
// coding on a 206, a corrupt stream or a decoded size above the limit fails
// with StoreError field "Content-Encoding" naming the coding and the key.
// Coded bytes are never returned as the value.
//
// The store is read-only: writes (set and erase too) fail with StoreError
// (field "read_only"); list fails with StoreError (field "list"): plain HTTP has no
// way to enumerate keys.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <boost/asio/any_io_executor.hpp>

#include <zarrcoro/store.hpp>

namespace zarrcoro {

namespace http {
class Client;
struct Origin;
struct Request;
struct Response;
}

// Settings of the HTTP/1.1 client shared by the HTTP and S3 stores.
struct HttpClientOptions {
  // Requests in flight per host (scheme, host and port); more wait in a queue.
  unsigned max_connections_per_host = 32;
  // Idle keep-alive connections are closed after this long (servers close
  // theirs too; a request on a connection the server closed meanwhile is
  // resent once on a new connection without counting as an attempt).
  std::chrono::milliseconds idle_keepalive{10000};
  // Name resolution + TCP connect + TLS handshake.
  std::chrono::milliseconds connect_timeout{10000};
  // Longest wait for any progress (a read or a write) on an open connection:
  // a stalled server fails the attempt after this long.
  std::chrono::milliseconds io_timeout{30000};
  // Longest time for one whole attempt (sending the request and receiving
  // the complete response), however steady the progress.
  std::chrono::milliseconds request_timeout{300000};
  // Attempts per request, the first included (at least 1). Retried: connect
  // failures, resets, timeouts, truncated responses, HTTP 408, 429, 500,
  // 502, 503 and 504.
  unsigned max_attempts = 4;
  // Backoff before retry n (n = 1, 2, ...): a uniformly random delay in
  // [d/2, d] where d = min(backoff_max, backoff_base * 2^(n-1)); a
  // Retry-After header (seconds) up to backoff_max is honoured.
  std::chrono::milliseconds backoff_base{100};
  std::chrono::milliseconds backoff_max{5000};
  // Largest response body accepted (a larger one fails the request).
  std::uint64_t max_body_bytes = std::uint64_t{4} << 30;
  // TLS: the peer certificate and host name are verified against the
  // system's trust store, plus `ca_file` (PEM) when set. `verify_tls =
  // false` disables verification (tests against self-signed servers only).
  bool verify_tls = true;
  std::string ca_file;
  // Connect to another address than the URL's host, like curl --connect-to:
  // host name -> address (e.g. a virtual-hosted S3 name -> "127.0.0.1").
  // Host header, TLS SNI and certificate checks still use the URL's host.
  std::map<std::string, std::string> connect_to;
};

// Counters of an HTTP client (monotonic, since construction).
struct HttpClientStats {
  std::uint64_t requests = 0;     // logical requests (each may take several attempts)
  std::uint64_t attempts = 0;     // requests sent on a connection
  std::uint64_t retries = 0;      // attempts after a retryable failure
  std::uint64_t connections = 0;  // connections opened
  std::uint64_t reused = 0;       // attempts sent on a pooled keep-alive connection
  std::uint64_t bytes_received = 0;  // response body bytes
  std::uint64_t bytes_sent = 0;      // request body bytes
};

struct HttpStoreOptions {
  HttpClientOptions http;
  // Largest whole body accepted when a server answers a range request with
  // 200 and the whole value (it is then sliced locally).
  std::uint64_t max_full_body = std::uint64_t{64} << 20;
  // Extra headers sent with every request to the store's origin (e.g.
  // Authorization); not to another origin a redirect leads to.
  std::vector<std::pair<std::string, std::string>> headers;
};

class HttpStore : public Store {
 public:
  // `base_url` is "http://host[:port][/path]" or "https://..."; a trailing
  // '/' is optional. `io` runs the client's sockets and timers (the
  // runtime's I/O executor). Raises InvalidArgument for a malformed URL.
  HttpStore(boost::asio::any_io_executor io, std::string base_url, HttpStoreOptions options = {});
  ~HttpStore() override;

  // The end of the opaque part of an ETag that a later value of the key
  // may get again (zarrcoro's server tags so another program's file on a
  // file system without inode versions): "\"<tag>;may-repeat\"". Such a
  // tag's generation is `may_repeat`, so no cache keeps anything by it.
  // Other servers' tags are taken as lasting, as HTTP asks of a strong tag
  // (nginx's, a time in seconds and a size, repeats for values of one size
  // replaced within a second).
  static constexpr std::string_view kMayRepeatETagSuffix = ";may-repeat";

  // Success: the (clipped) range of the value, or nullopt when the server
  // answers 404 or 410, with the value's generation: its strong ETag
  // (unknown when the server sends none, or a weak one; `may_repeat` when
  // the tag ends in kMayRepeatETagSuffix). An empty range is
  // a HEAD request. A condition is sent as If-Match; a 412, or an answer
  // whose ETag differs (a server that ignores If-Match), reads as
  // `changed`. A condition on absence is checked on the answer.
  // Failure: InvalidArgument (bad key), StoreError (transport failure after
  // retries, an unexpected status, a 206 that does not match the request, a
  // whole-body fallback above max_full_body, a Content-Encoding that cannot
  // be decoded).
  awaitable<ReadResult> read(std::string key, ReadOptions options) override;
  // Failure, always: InvalidArgument for a bad key, else StoreError (read-only).
  awaitable<std::optional<Generation>> write(std::string key, std::optional<Bytes> value,
                                             WriteOptions options) override;
  // Failure, always: StoreError (HTTP cannot enumerate keys).
  awaitable<std::vector<std::string>> list(std::string prefix) override;
  // The base URL, without a trailing '/'.
  std::string url() const override;
  boost::asio::any_io_executor get_executor() const override;

  HttpClientStats stats() const;

 private:
  std::string target(const std::string& key) const;
  awaitable<http::Response> fetch(http::Request request);  // follows redirects

  std::unique_ptr<http::Origin> origin_;
  std::string base_;   // "http://host:port" (no path)
  std::string path_;   // "" or "/a/b" (encoded, no trailing '/')
  std::string url_;    // as url() returns it
  HttpStoreOptions options_;
  std::shared_ptr<http::Client> client_;
};

}  // namespace zarrcoro
