#include "server.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <spdlog/spdlog.h>

#include <zarrcoro/array.hpp>
#include <zarrcoro/error.hpp>
#include <zarrcoro/info.hpp>
#include <zarrcoro/npy.hpp>
#include <zarrcoro/store/filesystem.hpp>

#include "http_util.hpp"

namespace zarrcoro::server {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace fs = std::filesystem;
using tcp = asio::ip::tcp;
using asio::awaitable;
using asio::use_awaitable;

namespace {

using Request = http::request<http::string_body>;
using Response = http::response<http::vector_body<std::byte, UninitAllocator<std::byte>>>;

constexpr auto kTuple = asio::as_tuple(use_awaitable);

// ---- responses -----------------------------------------------------------

Response respond(http::status status, std::string_view content_type = {}) {
  Response res{status, 11};
  if (!content_type.empty()) res.set(http::field::content_type, content_type);
  return res;
}

void set_body(Response& res, std::string_view text) {
  const auto* p = reinterpret_cast<const std::byte*>(text.data());
  res.body().assign(p, p + text.size());
}

// A short plain-text reason: every error the server sends looks like this.
Response text(http::status status, std::string_view reason) {
  Response res = respond(status, "text/plain; charset=utf-8");
  set_body(res, std::string(reason) + "\n");
  return res;
}

Response not_found() { return text(http::status::not_found, "not found"); }

// An engine error as a response. Store errors carry file paths: logged, not sent.
Response error_response(const Error& e) {
  switch (e.code()) {
    case Errc::invalid_argument: return text(http::status::bad_request, e.what());
    case Errc::not_found: return text(http::status::not_found, e.what());
    case Errc::unsupported: return text(http::status::unprocessable_entity, e.what());
    case Errc::cancelled: return text(http::status::service_unavailable, "cancelled");
    case Errc::store_io:
      spdlog::warn("store error: {}", e.what());
      return text(http::status::internal_server_error, "store error");
    default:  // invalid metadata, corrupt chunk: the data is at fault, say where
      spdlog::warn("{}", e.what());
      return text(http::status::internal_server_error, e.what());
  }
}

// Why `key` is not a valid store key, or nullopt if it is.
std::optional<std::string> key_problem(const std::string& key) {
  try {
    validate_key(key);
    return std::nullopt;
  } catch (const Error& e) {
    return std::string(e.detail());
  }
}

bool is_metadata_key(std::string_view key) {
  const auto slash = key.rfind('/');
  const std::string_view name = slash == std::string_view::npos ? key : key.substr(slash + 1);
  return name == "zarr.json" || name == ".zarray" || name == ".zgroup" || name == ".zattrs" || name == ".zmetadata";
}

// ---- files -----------------------------------------------------------------

struct FileInfo {
  std::uint64_t size = 0;
  std::string etag, last_modified;
};

// Size and validators of the regular file at `p` (already checked by the store).
std::optional<FileInfo> file_info(const fs::path& p) {
  struct stat st {};
  if (::stat(p.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return std::nullopt;
  FileInfo info;
  info.size = static_cast<std::uint64_t>(st.st_size);
  const auto mtime_ns = std::uint64_t(st.st_mtim.tv_sec) * 1'000'000'000u + std::uint64_t(st.st_mtim.tv_nsec);
  char etag[48];
  std::snprintf(etag, sizeof etag, "\"%llx-%llx\"", static_cast<unsigned long long>(mtime_ns),
                static_cast<unsigned long long>(info.size));
  info.etag = etag;
  info.last_modified = http_date(std::chrono::system_clock::from_time_t(st.st_mtim.tv_sec));
  return info;
}

// If-None-Match: "*" or a list of entity tags, compared weakly.
bool etag_matches(std::string_view if_none_match, std::string_view etag) {
  while (!if_none_match.empty()) {
    const auto comma = if_none_match.find(',');
    std::string_view tag = if_none_match.substr(0, comma);
    if_none_match = comma == std::string_view::npos ? std::string_view{} : if_none_match.substr(comma + 1);
    while (!tag.empty() && tag.front() == ' ') tag.remove_prefix(1);
    while (!tag.empty() && tag.back() == ' ') tag.remove_suffix(1);
    if (tag.starts_with("W/")) tag.remove_prefix(2);
    if (tag == "*" || tag == etag) return true;
  }
  return false;
}

// True if `path` (a valid key or "") resolves, through symlinks, inside `root`.
bool inside(const fs::path& root, const std::string& path) {
  std::error_code ec;
  const fs::path p = fs::weakly_canonical(root / path, ec);
  const auto rel = p.lexically_relative(root);
  return !ec && !rel.empty() && *rel.begin() != "..";
}

// The sorted names of the subdirectories of `path` under `root` (a group's
// candidate children). Blocking, but a group's directory is small.
std::vector<std::string> subdirectories(const fs::path& root, const std::string& path) {
  std::error_code ec;
  const fs::path dir = fs::weakly_canonical(root / path, ec);
  std::vector<std::string> names;
  if (ec || !inside(root, path)) return names;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.is_directory(ec)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

// Bytes of `region` with `item`-byte elements; nullopt on overflow.
std::optional<std::uint64_t> region_bytes(const Region& r, std::uint64_t item) {
  std::uint64_t n = item;
  for (std::size_t d = 0; d < r.start.size(); ++d)
    if (__builtin_mul_overflow(n, r.stop[d] - r.start[d], &n)) return std::nullopt;
  return n;
}

std::string join(const std::vector<std::uint64_t>& v) {
  std::string s;
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s;
}

// Logs an exception that ended a detached coroutine (co_spawn would drop it).
void log_exception(std::exception_ptr e) {
  if (!e) return;
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    spdlog::error("server: connection failed: {}", x.what());
  }
}

tcp::endpoint parse_listen(const std::string& text) {
  const auto colon = text.rfind(':');
  if (colon == std::string::npos) throw std::invalid_argument("--listen: expected HOST:PORT, got '" + text + "'");
  std::string host = text.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  unsigned port = 0;
  const std::string p = text.substr(colon + 1);
  auto [end, ec] = std::from_chars(p.data(), p.data() + p.size(), port);
  if (ec != std::errc() || end != p.data() + p.size() || port > 65535)
    throw std::invalid_argument("--listen: bad port '" + p + "'");
  boost::system::error_code aec;
  const auto address = asio::ip::make_address(host, aec);
  if (aec) throw std::invalid_argument("--listen: bad address '" + host + "' (expected a numeric IP)");
  return {address, static_cast<unsigned short>(port)};
}

// One client connection. `idle` is touched only on the connection's strand.
struct Conn {
  explicit Conn(tcp::socket s) : stream(std::move(s)) {}
  beast::tcp_stream stream;
  bool idle = false;  // waiting for the next request (shutdown may close it)
};

// A handler's answer: the metrics route label, the response, and whatever
// must live until the response is sent (a slice's memory reservation).
struct Reply {
  std::string route;
  Response res;
  std::shared_ptr<void> hold;
};

Reply reply(std::string route, Response res) { return Reply{std::move(route), std::move(res), nullptr}; }

// What the response and the access log need of a request.
struct RequestLine {
  http::verb method = http::verb::get;
  unsigned version = 11;
  std::string target;

  static RequestLine of(const Request& req) { return {req.method(), req.version(), std::string(req.target())}; }
};

}  // namespace

// ---- the server -------------------------------------------------------------

struct Server::Impl : std::enable_shared_from_this<Impl> {
  Impl(Runtime& r, ServerOptions o)
      : rt(r),
        opt(std::move(o)),
        store(std::make_shared<FilesystemStore>(rt.io_executor(), opt.root)),
        strand(asio::make_strand(rt.io_context())),
        acceptor(strand),
        deadline(strand) {
    const tcp::endpoint ep = parse_listen(opt.listen);
    acceptor.open(ep.protocol());
    acceptor.set_option(asio::socket_base::reuse_address(true));
    acceptor.bind(ep);
    acceptor.listen(asio::socket_base::max_listen_connections);
    endpoint = acceptor.local_endpoint();
  }

  Runtime& rt;
  const ServerOptions opt;
  const std::shared_ptr<FilesystemStore> store;
  asio::strand<asio::io_context::executor_type> strand;  // acceptor and shutdown timer
  tcp::acceptor acceptor;
  asio::steady_timer deadline;
  tcp::endpoint endpoint;
  Metrics metrics;
  std::atomic<bool> stopping{false};
  std::atomic<std::uint64_t> slice_bytes{0};  // slice responses held in memory

  std::mutex mu;  // guards conns and on_stopped
  std::map<Conn*, std::shared_ptr<Conn>> conns;
  std::vector<std::function<void()>> on_stopped;  // shutdown() callbacks still to call

  // -- connections --

  static awaitable<void> accept_loop(std::shared_ptr<Impl> self) {
    for (;;) {
      auto [ec, socket] = co_await self->acceptor.async_accept(asio::make_strand(self->rt.io_context()), kTuple);
      if (self->stopping || ec == asio::error::operation_aborted) co_return;
      if (ec) {  // e.g. out of file descriptors: wait a little instead of spinning
        spdlog::warn("server: accept failed: {}", ec.message());
        asio::steady_timer pause(self->strand, std::chrono::milliseconds(50));
        co_await pause.async_wait(kTuple);
        continue;
      }
      boost::system::error_code ignored;
      socket.set_option(tcp::no_delay(true), ignored);
      auto conn = std::make_shared<Conn>(tcp::socket(std::move(socket)));
      bool admitted = false;
      {
        std::lock_guard lk(self->mu);
        if (self->conns.size() < self->opt.max_connections) {
          self->conns.emplace(conn.get(), conn);
          admitted = true;
        }
      }
      const auto ex = conn->stream.get_executor();
      if (admitted) {
        self->metrics.connection_opened();
        asio::co_spawn(ex, session(self, conn), log_exception);
      } else {
        self->metrics.connection_rejected();
        asio::co_spawn(ex, reject(self, conn), log_exception);
      }
    }
  }

  // Over the connection cap: a 503 written without reading the request.
  static awaitable<void> reject(std::shared_ptr<Impl> self, std::shared_ptr<Conn> conn) {
    static constexpr std::string_view kBusy =
        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nContent-Length: 21\r\n"
        "Retry-After: 1\r\nConnection: close\r\n\r\ntoo many connections\n";
    conn->stream.expires_after(std::chrono::seconds(1));
    auto [ec, n] = co_await asio::async_write(conn->stream, asio::buffer(kBusy), kTuple);
    self->metrics.response_without_request("rejected", 503, n);
    boost::system::error_code ignored;
    conn->stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
    conn->stream.close();
  }

  // Removes a finished connection; the last one after shutdown() calls on_stopped.
  void finished(Conn* conn) {
    {
      std::lock_guard lk(mu);
      conns.erase(conn);
    }
    metrics.connection_closed();
    if (stopping) check_drained();
  }

  // After shutdown(): once no connection is left, calls the waiting callbacks.
  void check_drained() {
    std::vector<std::function<void()>> callbacks;
    {
      std::lock_guard lk(mu);
      if (!conns.empty()) return;
      callbacks.swap(on_stopped);
    }
    if (callbacks.empty()) return;
    asio::post(strand, [self = shared_from_this(), callbacks = std::move(callbacks)] {
      self->deadline.cancel();
      for (const auto& f : callbacks) f();
    });
  }

  static awaitable<void> session(std::shared_ptr<Impl> self, std::shared_ptr<Conn> conn) {
    struct Finish {  // runs however the coroutine ends
      Impl* impl;
      Conn* conn;
      ~Finish() { impl->finished(conn); }
    } finish{self.get(), conn.get()};
    const ServerOptions& opt = self->opt;
    auto& stream = conn->stream;
    boost::system::error_code ec;
    const auto peer = stream.socket().remote_endpoint(ec);
    beast::flat_buffer buffer;

    for (;;) {
      // 1. Idle: wait (idle_timeout) for the first byte of the next request.
      if (buffer.size() == 0) {
        if (self->stopping) break;
        conn->idle = true;
        stream.expires_after(opt.idle_timeout);
        auto [rec, n] = co_await stream.async_read_some(buffer.prepare(4096), kTuple);
        conn->idle = false;
        if (rec == beast::error::timeout) self->metrics.timed_out();
        if (rec) break;  // closed by the client, idle timeout, or shutdown
        buffer.commit(n);
      }

      // 2. The header, within header_timeout of its first byte (slowloris).
      http::request_parser<http::string_body> parser;
      parser.header_limit(opt.max_header_bytes);
      parser.body_limit(opt.max_body_bytes);
      // Beast's header_limit bounds each parse step, not the whole header, so
      // the header is read step by step and its bytes are counted here.
      stream.expires_after(opt.header_timeout);
      boost::system::error_code hec;
      for (std::size_t header_bytes = 0; !hec && !parser.is_header_done();) {
        auto [rec, n] = co_await http::async_read_some(stream, buffer, parser, kTuple);
        hec = rec;
        header_bytes += n;
        if (!hec && header_bytes > opt.max_header_bytes) hec = http::error::header_limit;
      }
      if (hec == beast::error::timeout) {  // tcp_stream has closed the socket
        self->metrics.timed_out();
        break;
      }
      if (hec == http::error::end_of_stream) break;
      if (hec) {
        // (Arguments are named before co_await: gcc 12 mishandles temporaries there.)
        // A declared Content-Length over the body limit fails here already.
        const auto status = hec == http::error::header_limit ? http::status::request_header_fields_too_large
                            : hec == http::error::body_limit ? http::status::payload_too_large
                                                             : http::status::bad_request;
        std::string reason = hec == http::error::header_limit ? "request header too large"
                             : hec == http::error::body_limit ? "request body too large"
                                                              : "malformed request: " + hec.message();
        co_await send_raw(self, conn, status, std::move(reason));
        break;
      }
      Request& head = parser.get();
      const http::verb method = head.method();
      if (method != http::verb::get && method != http::verb::head && method != http::verb::options) {
        Response res = text(http::status::method_not_allowed, "method not allowed (GET, HEAD, OPTIONS)");
        res.set(http::field::allow, "GET, HEAD, OPTIONS");
        Reply r = reply("invalid", std::move(res));
        RequestLine line = RequestLine::of(head);
        co_await send(self, conn, std::move(r), std::move(line), false, false, peer);
        break;  // the body, if any, was not read: the connection cannot be reused
      }

      // 3. A body (unusual for GET) is read within body_timeout and ignored.
      if (!parser.is_done()) {
        stream.expires_after(opt.body_timeout);
        auto [bec, bn] = co_await http::async_read(stream, buffer, parser, kTuple);
        if (bec == beast::error::timeout) {
          self->metrics.timed_out();
          break;
        }
        if (bec) {
          const bool too_big = bec == http::error::body_limit;
          const auto status = too_big ? http::status::payload_too_large : http::status::bad_request;
          std::string reason = too_big ? "request body too large" : "malformed request body: " + bec.message();
          co_await send_raw(self, conn, status, std::move(reason));
          break;
        }
      }
      const Request& req = parser.get();

      // 4. Answer.
      self->metrics.request_started();
      Reply r;
      std::string target(req.target()), range(req[http::field::range]), inm(req[http::field::if_none_match]),
          cors(req[http::field::access_control_request_headers]);
      try {
        r = co_await self->handle(req.method(), std::move(target), std::move(range), std::move(inm), std::move(cors));
      } catch (const std::exception& e) {
        spdlog::error("server: {} {}: {}", std::string(req.method_string()), std::string(req.target()), e.what());
        r = reply("error", text(http::status::internal_server_error, "internal error"));
      }
      const bool keep_alive = req.keep_alive() && !self->stopping;
      RequestLine line = RequestLine::of(req);
      const bool ok = co_await send(self, conn, std::move(r), std::move(line), keep_alive, true, peer);
      if (!ok || !keep_alive) break;
    }
    stream.socket().shutdown(tcp::socket::shutdown_send, ec);
    stream.close();
  }

  // Writes a response to a request that could not be parsed.
  static awaitable<void> send_raw(std::shared_ptr<Impl> self, std::shared_ptr<Conn> conn, http::status status,
                                  std::string reason) {
    Response res = text(status, reason);
    res.keep_alive(false);
    add_cors(res);
    res.content_length(res.body().size());
    conn->stream.expires_after(std::chrono::seconds(5));
    auto [ec, n] = co_await http::async_write(conn->stream, res, kTuple);
    self->metrics.response_without_request("invalid", static_cast<unsigned>(status), n);
  }

  static void add_cors(Response& res) {
    res.set(http::field::access_control_allow_origin, "*");
    res.set(http::field::access_control_expose_headers,
            "Accept-Ranges, Content-Length, Content-Range, ETag, Last-Modified, X-Shape, X-Dtype");
  }

  // Finishes and writes `r` (a HEAD response keeps its Content-Length, drops
  // the body). Returns false if the connection failed.
  static awaitable<bool> send(std::shared_ptr<Impl> self, std::shared_ptr<Conn> conn, Reply r, RequestLine req,
                              bool keep_alive, bool counted, tcp::endpoint peer) {
    const auto start = std::chrono::steady_clock::now();
    Response& res = r.res;
    res.version(req.version);
    res.keep_alive(keep_alive);
    add_cors(res);
    const auto status = res.result();
    const std::uint64_t body = res.body().size();
    if (status != http::status::no_content && status != http::status::not_modified &&
        res.find(http::field::content_length) == res.end())
      res.content_length(body);
    if (req.method == http::verb::head) res.body().clear();
    conn->stream.expires_after(self->opt.write_timeout + std::chrono::seconds(body >> 20));
    auto [ec, n] = co_await http::async_write(conn->stream, res, kTuple);
    if (ec == beast::error::timeout) self->metrics.timed_out();
    if (counted) self->metrics.request_finished(r.route, res.result_int(), n);
    else self->metrics.response_without_request(r.route, res.result_int(), n);
    if (self->opt.access_log)
      if (auto log = spdlog::get("access"))
        log->info("{} \"{} {}\" {} {} {:.3f}ms{}", peer.address().to_string(), std::string(http::to_string(req.method)),
                  req.target, res.result_int(), n,
                  std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count(),
                  ec ? " (" + ec.message() + ")" : "");
    co_return !ec;
  }

  // -- routes --

  awaitable<Reply> handle(http::verb method, std::string target_text, std::string range, std::string if_none_match,
                          std::string cors_request_headers) {
    const auto target = parse_target(target_text);
    if (!target) co_return reply("invalid", text(http::status::bad_request, "bad request target"));
    if (method == http::verb::options) co_return reply("options", preflight(cors_request_headers));
    const std::string& path = target->path;
    if (path == "healthz") {
      Response res = respond(http::status::ok, "text/plain; charset=utf-8");
      set_body(res, "ok\n");
      res.set(http::field::cache_control, "no-store");
      co_return reply("healthz", std::move(res));
    }
    if (path == "metrics") {
      Response res = respond(http::status::ok, "text/plain; version=0.0.4; charset=utf-8");
      set_body(res, metrics.render(rt.stats(), rt.loop_lag()));
      res.set(http::field::cache_control, "no-store");
      co_return reply("metrics", std::move(res));
    }
    if (path == "api/v1" || path.starts_with("api/v1/")) {
      std::string rest = path.size() > 7 ? path.substr(7) : "";
      if (rest == "info" || rest.ends_with("/info")) {
        rest = rest == "info" ? "" : rest.substr(0, rest.size() - 5);
        Response res = co_await info(std::move(rest));
        co_return reply("info", std::move(res));
      }
      std::string query = target->query;
      Reply r = co_await slice(std::move(rest), std::move(query));
      co_return r;
    }
    const bool head = method == http::verb::head;
    Response res = co_await get_key(path, head, std::move(range), std::move(if_none_match));
    co_return reply("key", std::move(res));
  }

  static Response preflight(const std::string& request_headers) {
    Response res = respond(http::status::no_content);
    res.set(http::field::access_control_allow_methods, "GET, HEAD, OPTIONS");
    res.set(http::field::access_control_allow_headers, request_headers.empty() ? "Range, If-None-Match" : request_headers);
    res.set(http::field::access_control_max_age, "86400");
    return res;
  }

  // A store key: GET or HEAD, with Range and If-None-Match.
  awaitable<Response> get_key(std::string key, bool head, std::string range, std::string if_none_match) {
    if (key.empty()) co_return not_found();
    if (auto why = key_problem(key)) co_return text(http::status::bad_request, "invalid path: " + *why);
    // The store validates the key and refuses symlinks out of the root. A plain
    // GET reads at once; the others check existence before looking at the file.
    const bool plain = !head && range.empty() && if_none_match.empty();
    std::optional<Bytes> value;
    bool found = false;
    try {
      if (plain) {
        value = co_await store->get(key);
        found = value.has_value();
      } else {
        found = co_await store->exists(key);
      }
    } catch (const Error& e) {
      spdlog::debug("server: key '{}': {}", key, e.what());  // symlink escape, unreadable: a 404 to the client
    }
    if (!found) co_return not_found();
    const auto info = file_info(store->root() / key);
    if (!info) co_return not_found();

    Response res = respond(http::status::ok, is_metadata_key(key) ? "application/json" : "application/octet-stream");
    res.set(http::field::accept_ranges, "bytes");
    res.set(http::field::etag, info->etag);
    res.set(http::field::last_modified, info->last_modified);
    if (plain) {
      res.body() = std::move(*value);
      co_return res;
    }
    if (!if_none_match.empty() && etag_matches(if_none_match, info->etag)) {
      res.result(http::status::not_modified);
      res.erase(http::field::content_type);
      co_return res;
    }
    const RangeResult rr = range.empty() ? RangeResult{} : resolve_range(range, info->size);
    if (rr.kind == RangeResult::Kind::malformed || rr.kind == RangeResult::Kind::unsatisfiable) {
      Response bad = text(http::status::range_not_satisfiable, rr.kind == RangeResult::Kind::malformed
                                                                   ? "malformed Range header"
                                                                   : "range not satisfiable");
      bad.set(http::field::content_range, "bytes */" + std::to_string(info->size));
      co_return bad;
    }
    const bool partial = rr.kind == RangeResult::Kind::partial;
    const std::uint64_t first = partial ? rr.first : 0;
    const std::uint64_t length = partial ? rr.last - rr.first + 1 : info->size;
    if (partial) {
      res.result(http::status::partial_content);
      res.set(http::field::content_range, "bytes " + std::to_string(first) + "-" + std::to_string(first + length - 1) +
                                              "/" + std::to_string(info->size));
    }
    if (head) {
      res.content_length(length);
      co_return res;
    }
    try {
      const ByteRange wanted = partial ? ByteRange::from(first, length) : ByteRange::all();
      value = co_await store->get(key, wanted);
    } catch (const Error& e) {
      spdlog::debug("server: key '{}': {}", key, e.what());
      value.reset();
    }
    if (!value || value->size() != length) co_return not_found();  // vanished or changed meanwhile
    res.body() = std::move(*value);
    co_return res;
  }

  // GET /api/v1/<node>/info
  awaitable<Response> info(std::string path) {
    if (!path.empty())
      if (auto why = key_problem(path)) co_return text(http::status::bad_request, "invalid path: " + *why);
    if (!inside(store->root(), path)) co_return not_found();  // a symlink out of the root
    std::optional<Response> failure;
    nlohmann::ordered_json j;
    try {
      auto children = subdirectories(store->root(), path);
      j = co_await node_info(rt, store, path, std::move(children));
    } catch (const Error& e) {
      failure = error_response(e);
    }
    if (failure) co_return std::move(*failure);
    Response res = respond(http::status::ok, "application/json");
    set_body(res, j.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n");
    co_return res;
  }

  // GET /api/v1/<array>?region=...&format=npy|raw
  awaitable<Reply> slice(std::string path, std::string query) {
    auto fail = [](http::status s, std::string why) { return reply("slice", text(s, why)); };
    const auto params = parse_query(query);
    if (!params) co_return fail(http::status::bad_request, "malformed query string");
    std::string region_text, format = "npy";
    for (const auto& [k, v] : *params) {
      if (k == "region") region_text = v;
      else if (k == "format") format = v;
      else co_return fail(http::status::bad_request, "unknown parameter '" + k + "' (expected region, format)");
    }
    if (format != "npy" && format != "raw")
      co_return fail(http::status::bad_request, "format must be npy or raw, not '" + format + "'");
    if (!path.empty())
      if (auto why = key_problem(path)) co_return fail(http::status::bad_request, "invalid path: " + *why);
    if (!inside(store->root(), path)) co_return reply("slice", not_found());  // a symlink out of the root

    std::optional<Response> failure;
    Array array;
    try {
      array = co_await Array::open(rt, store, path);
    } catch (const Error& e) {
      failure = error_response(e);
    }
    if (failure) co_return reply("slice", std::move(*failure));
    Region region;
    try {
      region = Region::parse(region_text, array.shape());
    } catch (const Error& e) {
      failure = error_response(e);
    }
    if (failure) co_return reply("slice", std::move(*failure));
    const std::vector<std::uint64_t> shape = region.shape();
    // The .npy header names the real dtype (S, U, structs too); what a .npy
    // cannot hold is the request's problem: raw still serves it.
    std::string header;
    if (format == "npy") {
      try {
        header = npy_header(array.dtype(), shape);
      } catch (const Error& e) {
        failure = text(http::status::bad_request, std::string(e.what()) + " (format=raw sends the bytes alone)");
      }
      if (failure) co_return reply("slice", std::move(*failure));
    }

    const auto nbytes = region_bytes(region, array.dtype().size());
    if (!nbytes || *nbytes > opt.max_response_bytes)
      co_return fail(http::status::bad_request,
                     "region too large: " + (nbytes ? std::to_string(*nbytes) + " bytes" : std::string("overflow")) +
                         ", the limit is " + std::to_string(opt.max_response_bytes) + " bytes");
    // Reserve the response's memory in the server-wide budget until it is sent.
    if (slice_bytes.fetch_add(*nbytes) + *nbytes > opt.slice_memory) {
      slice_bytes.fetch_sub(*nbytes);
      Response busy = text(http::status::service_unavailable, "busy: too many large slices in flight");
      busy.set(http::field::retry_after, "1");
      co_return reply("slice", std::move(busy));
    }
    std::shared_ptr<void> hold(nullptr, [self = shared_from_this(), n = *nbytes](void*) { self->slice_bytes -= n; });

    Response res = respond(http::status::ok, "application/octet-stream");
    res.body().resize(header.size() + *nbytes);
    std::memcpy(res.body().data(), header.data(), header.size());
    try {  // decoded in the codec pool, straight into the response body
      const MutableByteSpan out = MutableByteSpan(res.body()).subspan(header.size());
      co_await array.read(region, out);
    } catch (const Error& e) {
      failure = error_response(e);
    }
    if (failure) co_return reply("slice", std::move(*failure));
    res.set("X-Shape", join(shape));
    res.set("X-Dtype", std::string(array.dtype().name()));
    co_return Reply{"slice", std::move(res), std::move(hold)};
  }

  // -- shutdown --

  void shutdown(std::function<void()> done) {
    {
      std::lock_guard lk(mu);
      on_stopped.push_back(std::move(done));
    }
    if (stopping.exchange(true)) return check_drained();  // a second call: just wait too
    std::vector<std::shared_ptr<Conn>> open;
    {
      std::lock_guard lk(mu);
      for (const auto& [p, c] : conns) open.push_back(c);
    }
    asio::post(strand, [self = shared_from_this()] {
      boost::system::error_code ignored;
      self->acceptor.close(ignored);
      self->deadline.expires_after(self->opt.shutdown_deadline);
      self->deadline.async_wait([self](boost::system::error_code ec) {
        if (!ec) self->force_close();
      });
    });
    for (auto& c : open)  // idle connections close now; busy ones after their response
      asio::post(c->stream.get_executor(), [c] {
        if (c->idle) c->stream.cancel();
      });
    check_drained();
  }

  void force_close() {
    std::vector<std::shared_ptr<Conn>> open;
    {
      std::lock_guard lk(mu);
      for (const auto& [p, c] : conns) open.push_back(c);
    }
    if (!open.empty()) spdlog::warn("server: shutdown deadline passed; closing {} connection(s)", open.size());
    for (auto& c : open)
      asio::post(c->stream.get_executor(), [c] {
        boost::system::error_code ignored;
        c->stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
        c->stream.cancel();
      });
  }
};

Server::Server(Runtime& rt, ServerOptions options) : impl_(std::make_shared<Impl>(rt, std::move(options))) {}

Server::~Server() {
  boost::system::error_code ignored;
  impl_->stopping = true;
  asio::post(impl_->strand, [impl = impl_] {
    boost::system::error_code ec;
    impl->acceptor.close(ec);
  });
}

tcp::endpoint Server::endpoint() const { return impl_->endpoint; }
const ServerOptions& Server::options() const { return impl_->opt; }
const Metrics& Server::metrics() const { return impl_->metrics; }

void Server::start() { asio::co_spawn(impl_->strand, Impl::accept_loop(impl_), log_exception); }

void Server::shutdown(std::function<void()> done) { impl_->shutdown(std::move(done)); }

}  // namespace zarrcoro::server
