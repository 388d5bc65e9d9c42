// The HTTP client's connections, host pools, attempts and retries: send()
// (see store/http_client.hpp). URLs and responses are in http_message.cpp,
// content codings in http_coding.cpp.
#include "store/http_client.hpp"

#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <optional>
#include <random>

#include <boost/asio/experimental/concurrent_channel.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <spdlog/spdlog.h>

#include <zarrcoro/error.hpp>
#include <zarrcoro/spawn.hpp>

namespace zarrcoro::http {

namespace asio = boost::asio;
namespace beast = boost::beast;
using tcp = asio::ip::tcp;
using error_code = boost::system::error_code;
using Clock = std::chrono::steady_clock;
using ResponseBody = beast_http::vector_body<std::byte, UninitAllocator<std::byte>>;
using RequestBody = beast_http::span_body<const std::byte>;
using asio::use_awaitable;

// ---------------------------------------------------------------------------
// Connections and pools

struct Client::Conn {
  std::optional<beast::tcp_stream> plain;
  std::optional<beast::ssl_stream<beast::tcp_stream>> tls;
  beast::flat_buffer buffer;
  Clock::time_point idle_since;

  beast::tcp_stream& tcp() { return tls ? beast::get_lowest_layer(*tls) : *plain; }
};

struct Client::HostPool {
  // A semaphore: the channel holds one token per free request slot.
  using Slots = asio::experimental::concurrent_channel<void(error_code)>;
  HostPool(const asio::any_io_executor& io, unsigned n) : slots(io, n) {
    for (unsigned i = 0; i < n; ++i) slots.try_send(error_code{});
  }
  Slots slots;
  std::mutex mu;
  std::vector<std::unique_ptr<Conn>> idle;  // most recently used last
};

struct Client::Attempt {
  Response response;
  error_code ec;
  std::string what;           // the failure, for messages
  bool retryable = true;      // meaningful when ec is set
  bool got_response = false;  // any response byte arrived
  bool keep_alive = false;    // the connection may serve another request
  unsigned sends = 0;         // exchanges begun, with those on pooled connections that failed first
  std::uint64_t sent = 0, received = 0;  // body bytes
};

namespace {

// Returns a request slot to its pool when the request leaves it.
struct SlotGuard {
  Client::HostPool* pool;
  ~SlotGuard();
};

const boost::system::error_category& http_category() {
  return beast_http::make_error_code(beast_http::error::end_of_stream).category();
}

bool retryable_status(unsigned s) {
  return s == 408 || s == 429 || s == 500 || s == 502 || s == 503 || s == 504;
}

std::string tls_detail(const error_code& ec, SSL* ssl) {
  std::string out = ec.message();
  if (ssl) {
    const long v = SSL_get_verify_result(ssl);
    if (v != X509_V_OK) out += std::string(" (") + X509_verify_cert_error_string(v) + ")";
  }
  return out;
}

std::string describe(const error_code& ec) {
  if (ec == beast::error::timeout) return "timed out";
  if (ec == beast_http::error::end_of_stream || ec == asio::error::eof)
    return "connection closed by the server";
  if (ec == beast_http::error::partial_message) return "response cut short (connection closed mid-body)";
  if (ec == asio::error::connection_reset) return "connection reset by the server";
  return ec.message();
}

thread_local std::mt19937_64 jitter_rng{std::random_device{}()};

// One request/response on an open connection. Parameters are pointers to
// objects in the awaiting frame (coroutine parameters stay values).
template <class Stream>
awaitable<void> do_exchange(Stream* stream_ptr, Client::Conn* conn, const Request* req_ptr,
                            const HttpClientOptions* opt_ptr, Client::Attempt* out) {
  Stream& stream = *stream_ptr;
  beast::tcp_stream& tcp = conn->tcp();
  beast::flat_buffer& buffer = conn->buffer;
  const Request& req = *req_ptr;
  const HttpClientOptions& opt = *opt_ptr;
  error_code& ec = out->ec;
  std::string& what = out->what;
  bool& retryable = out->retryable;
  bool& got_response = out->got_response;
  std::uint64_t& sent = out->sent;
  std::uint64_t& received = out->received;
  const auto deadline = Clock::now() + opt.request_timeout;
  // Arms the stream's timer for the next step: no progress for io_timeout, or
  // the end of the attempt, whichever comes first.
  auto arm = [&]() -> bool {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) return false;
    tcp.expires_after(std::min(left, opt.io_timeout));
    return true;
  };
  auto timeout = [&]() {
    ec = beast::error::timeout;
    what = "timed out";
  };

  beast_http::request<RequestBody> msg{req.method, req.target, 11};
  msg.set(beast_http::field::host, req.origin.authority());
  msg.set(beast_http::field::user_agent, "zarrcoro/0.1");
  // Coded bodies are not byte ranges of the value: ask for none (a caller's
  // own Accept-Encoding replaces this).
  msg.set(beast_http::field::accept_encoding, "identity");
  for (const auto& [k, v] : req.headers) msg.set(k, v);
  if (req.body_owner) {
    msg.body() = RequestBody::value_type(req.body.data(), req.body.size());
    msg.content_length(req.body.size());  // also 0 for an empty PUT
  } else {
    msg.prepare_payload();
  }

  beast_http::request_serializer<RequestBody> sr{msg};
  while (!sr.is_done()) {
    if (!arm()) co_return timeout();
    const std::size_t n = co_await beast_http::async_write_some(stream, sr, asio::redirect_error(use_awaitable, ec));
    (void)n;
    if (ec) {
      what = describe(ec);
      co_return;
    }
  }
  sent += req.body.size();

  // The final response's header, after any interim (1xx) ones, which carry
  // no body (RFC 9110 15.2: 100 Continue, 103 Early Hints): each is read
  // whole and dropped. (101 would switch protocols: never asked for, so
  // taken as final, and refused by the caller as any unexpected status.)
  constexpr int kMaxInterim = 16;
  std::optional<beast_http::response_parser<ResponseBody>> parsing;
  for (int interim = 0;; ++interim) {
    parsing.emplace();
    parsing->body_limit(opt.max_body_bytes);
    if (req.method == beast_http::verb::head) parsing->skip(true);
    const std::size_t before = buffer.size();
    while (!parsing->is_header_done()) {
      if (!arm()) co_return timeout();
      co_await beast_http::async_read_some(stream, buffer, *parsing, asio::redirect_error(use_awaitable, ec));
      if (buffer.size() != before || parsing->got_some()) got_response = true;
      if (ec) {
        what = describe(ec);
        // A message that does not parse is not worth repeating.
        retryable = ec.category() != http_category() ||
                    ec == beast_http::error::end_of_stream || ec == beast_http::error::partial_message;
        co_return;
      }
    }
    got_response = true;
    const unsigned code = parsing->get().result_int();
    if (code < 100 || code >= 200 || code == 101) break;
    if (interim == kMaxInterim) {
      ec = beast_http::error::bad_status;
      what = "more than " + std::to_string(kMaxInterim) + " interim (1xx) responses";
      retryable = false;
      co_return;
    }
  }
  auto& parser = *parsing;
  const unsigned status = parser.get().result_int();
  if (req.max_full_body && status == 200 && req.method != beast_http::verb::head) {
    const auto length = parser.content_length();
    if (length && *length > req.max_full_body) {
      ec = beast_http::error::body_limit;
      what = "the server ignored the Range header and answered 200 with the whole value (" +
             std::to_string(*length) + " bytes), more than the " +
             std::to_string(req.max_full_body) + "-byte limit for a whole-body fallback";
      retryable = false;
      co_return;
    }
    parser.body_limit(req.max_full_body);
  }
  while (!parser.is_done()) {
    if (!arm()) co_return timeout();
    co_await beast_http::async_read_some(stream, buffer, parser, asio::redirect_error(use_awaitable, ec));
    if (ec) {
      what = describe(ec);
      if (ec == beast_http::error::body_limit) {
        retryable = false;
        what = req.max_full_body && status == 200
                   ? "the server ignored the Range header and sent more than the " +
                         std::to_string(req.max_full_body) + "-byte limit for a whole-body fallback"
                   : "the response body is larger than the " + std::to_string(opt.max_body_bytes) +
                         "-byte limit";
      } else if (ec.category() == http_category()) {
        retryable = ec == beast_http::error::end_of_stream || ec == beast_http::error::partial_message;
      }
      co_return;
    }
  }
  tcp.expires_never();
  auto message = parser.release();
  out->keep_alive = message.keep_alive();
  out->response.status = message.result_int();
  out->response.body = std::move(message.body());
  received += out->response.body.size();
  out->response.headers = std::move(message.base());
}

}  // namespace

SlotGuard::~SlotGuard() { pool->slots.try_send(error_code{}); }

Client::Client(asio::any_io_executor io, HttpClientOptions options)
    : io_(asio::make_strand(io)), options_(std::move(options)), tls_(asio::ssl::context::tls_client) {
  options_.max_connections_per_host = std::max(1u, options_.max_connections_per_host);
  options_.max_attempts = std::max(1u, options_.max_attempts);
  error_code ec;
  if (options_.verify_tls) {
    tls_.set_verify_mode(asio::ssl::verify_peer, ec);
    tls_.set_default_verify_paths(ec);  // a machine without a trust store still works with ca_file
    if (!options_.ca_file.empty()) {
      tls_.load_verify_file(options_.ca_file, ec);
      if (ec)
        throw InvalidArgument("", "ca_file", "cannot load CA file '" + options_.ca_file + "': " + ec.message());
    }
  } else {
    tls_.set_verify_mode(asio::ssl::verify_none, ec);
  }
}

Client::~Client() = default;

HttpClientStats Client::stats() const {
  return {requests_, attempts_, retries_, connections_, reused_, bytes_received_, bytes_sent_};
}

std::shared_ptr<Client::HostPool> Client::pool_for(const Origin& origin) {
  std::lock_guard lock(mu_);
  auto& pool = pools_[origin.str()];
  if (!pool) pool = std::make_shared<HostPool>(io_, options_.max_connections_per_host);
  return pool;
}

std::chrono::milliseconds Client::backoff(unsigned retry, const Response* response) const {
  using ms = std::chrono::milliseconds;
  const auto cap = options_.backoff_max;
  if (response) {
    const std::string after = response->header("Retry-After");
    unsigned seconds = 0;
    const auto [end, ec] = std::from_chars(after.data(), after.data() + after.size(), seconds);
    if (!after.empty() && ec == std::errc{} && end == after.data() + after.size()) {
      const ms wanted{std::uint64_t{seconds} * 1000};
      if (wanted <= cap) return std::max(wanted, ms{1});
    }
  }
  const unsigned shift = std::min(retry - 1, 20u);
  const auto full = std::min<std::int64_t>(cap.count(), options_.backoff_base.count() << shift);
  if (full <= 0) return ms{0};
  std::uniform_int_distribution<std::int64_t> pick(full / 2, full);
  return ms{pick(jitter_rng)};
}

awaitable<std::unique_ptr<Client::Conn>> Client::connect(Origin o, Attempt* out_ptr,
                                                         asio::any_io_executor strand) {
  Attempt& out = *out_ptr;
  const auto deadline = Clock::now() + options_.connect_timeout;
  auto left = [&] {
    return std::max(std::chrono::milliseconds{1},
                    std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()));
  };
  std::string host = o.host;
  if (auto it = options_.connect_to.find(o.host); it != options_.connect_to.end()) host = it->second;

  std::vector<tcp::endpoint> endpoints;
  error_code ec;
  const auto address = asio::ip::make_address(host, ec);
  if (!ec) {
    endpoints.emplace_back(address, o.port);
  } else {
    // getaddrinfo cannot be interrupted: a lookup still running at the
    // deadline is left to finish on its own (its result dropped), rather
    // than awaited as a cancelled operation would be.
    struct Lookup {
      tcp::resolver resolver;
      asio::steady_timer deadline;
      std::optional<error_code> ec;
      tcp::resolver::results_type found;
      explicit Lookup(const asio::any_io_executor& ex) : resolver(ex), deadline(ex) {}
    };
    auto lookup = std::make_shared<Lookup>(strand);
    lookup->deadline.expires_after(left());
    lookup->resolver.async_resolve(host, std::to_string(o.port),
                                   [lookup](error_code e, tcp::resolver::results_type found) {
                                     lookup->ec = e;
                                     lookup->found = std::move(found);
                                     lookup->deadline.cancel();
                                   });
    error_code waited;
    co_await lookup->deadline.async_wait(asio::redirect_error(use_awaitable, waited));
    if (!lookup->ec) {
      const bool cancelled = waited == asio::error::operation_aborted;  // by the caller
      lookup->resolver.cancel();
      out.ec = cancelled ? make_error_code(asio::error::operation_aborted) : make_error_code(beast::error::timeout);
      out.retryable = !cancelled;
      out.what = "resolving '" + host + (cancelled ? "' was cancelled" : "' timed out");
      co_return nullptr;
    }
    if (*lookup->ec) {
      out.ec = *lookup->ec;
      out.what = "cannot resolve '" + host + "': " + lookup->ec->message();
      co_return nullptr;
    }
    for (const auto& e : lookup->found) endpoints.push_back(e.endpoint());
  }

  auto conn = std::make_unique<Conn>();
  // The stream's timer handlers run on its strand, as does every operation
  // on it (see attempt()): safe with several threads running the io_context.
  if (o.tls) conn->tls.emplace(strand, tls_);
  else conn->plain.emplace(strand);
  auto& stream = conn->tcp();
  stream.expires_after(left());
  co_await stream.async_connect(endpoints, asio::redirect_error(use_awaitable, ec));
  if (ec) {
    out.ec = ec;
    out.what = "cannot connect to " + o.str() + ": " + (ec == beast::error::timeout ? "timed out" : ec.message());
    co_return nullptr;
  }
  stream.socket().set_option(tcp::no_delay(true), ec);
  if (o.tls) {
    SSL* ssl = conn->tls->native_handle();
    error_code not_ip;
    asio::ip::make_address(o.host, not_ip);
    if (not_ip) SSL_set_tlsext_host_name(ssl, o.host.c_str());
    if (options_.verify_tls) conn->tls->set_verify_callback(asio::ssl::host_name_verification(o.host));
    stream.expires_after(left());
    co_await conn->tls->async_handshake(asio::ssl::stream_base::client,
                                        asio::redirect_error(use_awaitable, ec));
    if (ec) {
      out.ec = ec;
      out.retryable = ec.category() != asio::error::get_ssl_category();
      out.what = "TLS handshake with " + o.str() + " failed: " +
                 (ec == beast::error::timeout ? std::string("timed out") : tls_detail(ec, ssl));
      co_return nullptr;
    }
  }
  stream.expires_never();
  ++connections_;
  co_return conn;
}

awaitable<void> Client::exchange(Conn* conn, const Request* req, Attempt* out) {
  if (conn->tls) co_await do_exchange(&*conn->tls, conn, req, &options_, out);
  else co_await do_exchange(&*conn->plain, conn, req, &options_, out);
  bytes_sent_ += out->sent;
  bytes_received_ += out->received;
}

namespace {

// True if an idle connection is still open with nothing to read: neither
// closed by the server nor holding bytes no request asked for. (No handler
// of an idle connection runs, so its socket may be probed from here.)
bool quiet(Client::Conn& conn) {
  char byte;
  const ssize_t n = ::recv(conn.tcp().socket().native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

// Destroys a connection on its strand, after any of its handlers (a timeout
// handler may be about to close the socket): never concurrently with them.
void discard(std::unique_ptr<Client::Conn> conn) {
  if (!conn) return;
  const auto strand = conn->tcp().get_executor();
  asio::post(strand, [c = std::move(conn)]() mutable { c.reset(); });
}

}  // namespace

awaitable<Client::Attempt> Client::attempt(const Request* req_ptr, HostPool* pool_ptr) {
  const Request& req = *req_ptr;
  HostPool& pool = *pool_ptr;
  unsigned sends = 0;
  for (int round = 0;; ++round) {
    Attempt out;
    std::unique_ptr<Conn> conn;
    std::vector<std::unique_ptr<Conn>> expired;
    if (round == 0) {
      std::lock_guard lock(pool.mu);
      const auto now = Clock::now();
      // Drop connections idle too long: their server may have closed them.
      for (auto& c : pool.idle)
        if (now - c->idle_since > options_.idle_keepalive) expired.push_back(std::move(c));
      std::erase(pool.idle, nullptr);
      // And those the server closed, or sent bytes on, since they were
      // pooled (a stray CRLF, a body after a HEAD answer): the next answer
      // read there would not be this request's.
      while (!pool.idle.empty() && !conn) {
        conn = std::move(pool.idle.back());
        pool.idle.pop_back();
        if (!quiet(*conn)) expired.push_back(std::move(conn));
      }
    }
    for (auto& c : expired) discard(std::move(c));
    const bool reused = conn != nullptr;
    if (!conn) {
      // A new connection gets its own strand; connect and exchange run on it.
      const asio::any_io_executor strand = asio::make_strand(io_);
      conn = co_await co_spawn_safe(strand, connect(req.origin, &out, strand), use_awaitable);
      if (!conn) co_return out;
    }
    ++attempts_;
    out.sends = ++sends;
    if (reused) ++reused_;
    co_await co_spawn_safe(conn->tcp().get_executor(), exchange(conn.get(), &req, &out), use_awaitable);
    if (out.ec && reused && !out.got_response && out.ec != beast::error::timeout) {
      // The server closed the pooled connection before this request reached
      // it; so are probably the other idle ones. Once more on a new one.
      std::vector<std::unique_ptr<Conn>> stale;
      {
        std::lock_guard lock(pool.mu);
        stale.swap(pool.idle);
      }
      for (auto& c : stale) discard(std::move(c));
      discard(std::move(conn));
      continue;
    }
    // Only a connection with nothing left over is reusable (a server that
    // sent more than one message's worth would desynchronize it).
    if (!out.ec && out.keep_alive && conn->buffer.size() == 0) {
      conn->idle_since = Clock::now();
      std::lock_guard lock(pool.mu);
      pool.idle.push_back(std::move(conn));
    }
    discard(std::move(conn));
    co_return out;
  }
}

awaitable<Response> Client::send(Request request) {
  // Every connection, timer and pool slot of this client lives on one strand;
  // the request runs there too, so a timeout firing on another I/O thread
  // never races with the coroutine that owns the connection.
  co_return co_await co_spawn_safe(io_, send_on_strand(std::move(request)), use_awaitable);
}

awaitable<Response> Client::send_on_strand(Request request) {
  const auto self = shared_from_this();  // outlive the store if need be
  ++requests_;
  const auto pool = pool_for(request.origin);
  const unsigned max_attempts = options_.max_attempts;
  unsigned sends = 0;
  for (unsigned n = 1;; ++n) {
    Attempt a;
    {
      co_await pool->slots.async_receive(use_awaitable);
      SlotGuard guard{pool.get()};
      a = co_await attempt(&request, pool.get());
    }
    sends += a.sends;
    std::chrono::milliseconds delay{};
    const std::string url = request.origin.str() + request.target;
    const std::string method(beast_http::to_string(request.method));
    if (!a.ec) {
      if (!retryable_status(a.response.status) || n >= max_attempts) {
        a.response.attempts = n;
        a.response.resent = sends > 1;
        // The same bound as the coded body: a 200 answer to a range request
        // is held to max_full_body.
        const bool fallback = request.max_full_body && a.response.status == 200;
        decode_content(request, url,
                       fallback ? std::min(request.max_full_body, options_.max_body_bytes)
                                : options_.max_body_bytes,
                       a.response);
        co_return std::move(a.response);
      }
      delay = backoff(n, &a.response);
      spdlog::debug("zarrcoro http: {} {}: HTTP {}; retry {} of {} in {} ms", method, url,
                    a.response.status, n, max_attempts - 1, delay.count());
    } else {
      if (!a.retryable || n >= max_attempts) {
        std::string msg = method + " " + url + ": " + a.what;
        if (n > 1) msg += " (gave up after " + std::to_string(n) + " attempts)";
        throw StoreError(request.key, "", msg);
      }
      delay = backoff(n, nullptr);
      spdlog::debug("zarrcoro http: {} {}: {}; retry {} of {} in {} ms", method, url, a.what, n,
                    max_attempts - 1, delay.count());
    }
    ++retries_;
    asio::steady_timer timer(io_, delay);
    co_await timer.async_wait(use_awaitable);
  }
}

}  // namespace zarrcoro::http
