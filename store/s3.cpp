#include <zarrcoro/store/s3.hpp>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <random>
#include <set>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/experimental/concurrent_channel.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <spdlog/spdlog.h>

#include <zarrcoro/error.hpp>
#include <zarrcoro/spawn.hpp>

#include "store/http_client.hpp"
#include "store/offload.hpp"
#include "store/s3_xml.hpp"
#include "store/sigv4.hpp"

namespace zarrcoro {

namespace asio = boost::asio;
namespace bh = boost::beast::http;

namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

std::string trim_slashes(std::string_view s) {
  while (!s.empty() && s.front() == '/') s.remove_prefix(1);
  while (!s.empty() && s.back() == '/') s.remove_suffix(1);
  return std::string(s);
}

}  // namespace

using s3xml::xml_escape;
using s3xml::xml_first;
using s3xml::xml_next;
using s3xml::xml_unescape;

namespace {

std::string_view as_text(const Bytes& b) {
  return {reinterpret_cast<const char*>(b.data()), b.size()};
}

// Runs `jobs` concurrently, on a strand of the current executor; waits for
// all; rethrows the first failure. A cancellation of the caller is passed on
// to the jobs, and the wait goes on until every job has ended: the jobs use
// what the caller lent them (multipart upload: the ETags they fill in).
// Then it raises operation_aborted.
awaitable<void> run_all(std::vector<awaitable<void>> jobs) {
  if (jobs.empty()) co_return;
  // On one strand: the cancellation below is emitted where the jobs run,
  // also when the caller's io_context has several threads.
  const asio::any_io_executor strand = asio::make_strand(co_await asio::this_coro::executor);
  struct State {
    explicit State(const asio::any_io_executor& e, std::size_t n) : left(n), done(e, 1), signals(n) {}
    std::atomic<std::size_t> left;
    std::mutex mu;
    std::exception_ptr first;
    asio::experimental::concurrent_channel<void(boost::system::error_code)> done;
    std::vector<asio::cancellation_signal> signals;  // one per job, emitted on the strand
  };
  auto state = std::make_shared<State>(strand, jobs.size());
  // No wait below may throw before every job has ended (restored at the end).
  const bool throw_if_cancelled = co_await asio::this_coro::throw_if_cancelled();
  co_await asio::this_coro::throw_if_cancelled(false);
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    auto finished = [state](std::exception_ptr e) {
      if (e) {
        std::lock_guard lock(state->mu);
        if (!state->first) state->first = e;
      }
      if (--state->left == 0) state->done.try_send(boost::system::error_code{});
    };
    try {
      co_spawn_safe(strand, std::move(jobs[i]), asio::bind_cancellation_slot(state->signals[i].slot(), std::move(finished)));
    } catch (...) {  // out of memory: the jobs not spawned count as done
      {
        std::lock_guard lock(state->mu);
        if (!state->first) state->first = std::current_exception();
      }
      const std::size_t unspawned = jobs.size() - i;
      if (state->left.fetch_sub(unspawned) == unspawned) state->done.try_send(boost::system::error_code{});
      break;
    }
  }
  auto [ec] = co_await state->done.async_receive(asio::as_tuple(asio::use_awaitable));
  if (ec) {  // cancelled: cancel the jobs, then wait for them, whatever comes
    asio::dispatch(strand, [state] {
      for (auto& s : state->signals) s.emit(asio::cancellation_type::terminal);
    });
    // Unless every job has ended already: a receive cancelled as the last
    // job's try_send lands can complete with channel_cancelled while that
    // message never reaches a second receive (Boost 1.81's channel), which
    // then waited forever (test_s3's cancelled multipart writes hung in
    // about one run of 15 under load).
    auto not_cancellable = asio::bind_cancellation_slot(asio::cancellation_slot(), asio::as_tuple(asio::use_awaitable));
    if (state->left.load() != 0) co_await state->done.async_receive(std::move(not_cancellable));
  }
  co_await asio::this_coro::throw_if_cancelled(throw_if_cancelled);
  const asio::cancellation_state cs = co_await asio::this_coro::cancellation_state;
  if (cs.cancelled() != asio::cancellation_type::none) throw boost::system::system_error(asio::error::operation_aborted);
  if (state->first) std::rethrow_exception(state->first);
}

std::string random_hex64() {
  std::random_device rd;
  const std::uint64_t v = (std::uint64_t{rd()} << 32) ^ rd();
  char out[17];
  std::snprintf(out, sizeof out, "%016llx", static_cast<unsigned long long>(v));
  return out;
}

// The user-metadata header naming a conditional PutObject.
constexpr const char* kWriteIdHeader = "x-amz-meta-zarrcoro-write";

const std::string& empty_sha256() {
  static const std::string h = sigv4::sha256_hex(std::string_view{});
  return h;
}

}  // namespace

// ---------------------------------------------------------------------------

S3Options S3Options::from_url(std::string_view url, S3Options base) {
  if (!url.starts_with("s3://"))
    throw InvalidArgument("", "url", "'" + std::string(url) + "': expected s3://bucket[/prefix]");
  std::string_view rest = url.substr(5);
  const std::size_t slash = rest.find('/');
  base.bucket = std::string(rest.substr(0, slash));
  base.prefix = slash == std::string_view::npos ? "" : trim_slashes(rest.substr(slash + 1));
  if (base.bucket.empty())
    throw InvalidArgument("", "url", "'" + std::string(url) + "': no bucket name");
  return base;
}

S3Options S3Options::from_url(std::string_view url) { return from_url(url, S3Options{}); }

struct S3Store::Impl {
  S3Options options;
  std::string base;  // "<prefix>/" or ""
  http::Origin origin;
  std::string bucket_path;  // "/bucket" (path-style) or "" (virtual-hosted)
  std::string shown;        // "s3://bucket/prefix"
  std::shared_ptr<http::Client> client;
  // Hashes large payloads off the I/O threads (SHA-256 runs at 1-2 GB/s: a
  // 64 MiB body would hold an I/O thread for tens of milliseconds).
  asio::thread_pool hasher{2};
  // Names each conditional PutObject (x-amz-meta-zarrcoro-write): a random
  // 64-bit prefix for this store, then a count.
  const std::string write_prefix = random_hex64();
  std::atomic<std::uint64_t> writes{0};

  std::string next_write_id() { return write_prefix + "-" + std::to_string(++writes); }

  std::string object(const std::string& key) const { return base + key; }
  std::string url_of(const std::string& object) const {
    return "s3://" + options.bucket + "/" + object;
  }

  // A signed request for `object` ("" for the bucket itself).
  http::Request make(bh::verb method, const std::string& object, sigv4::Pairs query,
                     sigv4::Pairs headers, std::shared_ptr<const void> owner, ByteSpan body,
                     const std::string& key, std::string payload_hash = "") const {
    http::Request r;
    r.method = method;
    r.origin = origin;
    r.key = key;
    std::string path = bucket_path + "/" + sigv4::uri_encode(object, false);
    if (object.empty() && !bucket_path.empty()) path = bucket_path;
    r.target = path;
    const std::string q = sigv4::canonical_query(query);
    if (!q.empty()) r.target += "?" + q;
    r.body_owner = std::move(owner);
    r.body = body;
    if (options.anonymous) {
      r.headers = std::move(headers);
      return r;
    }
    sigv4::Request s;
    s.method = std::string(bh::to_string(method));
    s.canonical_uri = path;
    s.query = std::move(query);
    s.headers = std::move(headers);
    s.headers.emplace_back("host", origin.authority());
    if (!options.sign_payload) s.payload_hash = std::string(sigv4::kUnsignedPayload);
    else if (!payload_hash.empty()) s.payload_hash = std::move(payload_hash);
    else if (body.empty()) s.payload_hash = empty_sha256();
    else s.payload_hash = sigv4::sha256_hex(body);
    const sigv4::Credentials creds{options.credentials->access_key, options.credentials->secret_key,
                                   options.credentials->session_token};
    sigv4::sign(s, creds, sigv4::amz_date(std::chrono::system_clock::now()), options.region, "s3");
    r.headers = std::move(s.headers);
    return r;
  }

  // Raises the StoreError for an S3 error answer.
  [[noreturn]] void fail(const std::string& key, std::string_view op, const std::string& object,
                         const http::Response& r) const {
    const std::string_view body = as_text(r.body);
    auto [code, message] = s3xml::parse_error(body);
    std::string msg = std::string(op) + " " + url_of(object) + ": HTTP " + std::to_string(r.status) +
                      " " + std::string(http::status_text(r.status));
    if (!code.empty()) msg += ": " + code;
    if (!message.empty()) msg += ": " + message;
    if (code == "SignatureDoesNotMatch")
      msg += " (check the secret key, the region '" + options.region + "' and the clock)";
    if (const std::string region = r.header("x-amz-bucket-region"); !region.empty())
      msg += " (the bucket is in region '" + region + "')";
    if (r.attempts > 1) msg += " (after " + std::to_string(r.attempts) + " attempts)";
    if (code.empty()) code = "HTTP " + std::to_string(r.status);
    throw StoreError(key, code, msg);
  }

  awaitable<http::Response> send(http::Request r) const {
    auto client = this->client;
    co_return co_await client->send(std::move(r));
  }
};

S3Store::S3Store(asio::any_io_executor io, S3Options o) : impl_(std::make_shared<Impl>()) {
  auto& d = *impl_;
  if (o.bucket.empty() || o.bucket.find('/') != std::string::npos)
    throw InvalidArgument("", "bucket", "S3 bucket name '" + o.bucket + "' is empty or contains '/'");
  o.prefix = trim_slashes(o.prefix);
  if (o.region.empty()) o.region = env("AWS_REGION");
  if (o.region.empty()) o.region = env("AWS_DEFAULT_REGION");
  if (o.region.empty()) o.region = "us-east-1";
  bool aws = false;
  if (o.endpoint.empty()) o.endpoint = env("AWS_ENDPOINT_URL_S3");
  if (o.endpoint.empty()) o.endpoint = env("AWS_ENDPOINT_URL");
  if (o.endpoint.empty()) {
    o.endpoint = "https://s3." + o.region + ".amazonaws.com";
    aws = true;
  }
  if (!o.credentials && !o.anonymous) {
    S3Credentials c{env("AWS_ACCESS_KEY_ID"), env("AWS_SECRET_ACCESS_KEY"), env("AWS_SESSION_TOKEN")};
    if (c.access_key.empty() || c.secret_key.empty())
      throw InvalidArgument("", "credentials",
                            "no S3 credentials for s3://" + o.bucket +
                                ": set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or configure "
                                "S3Options::credentials, or S3Options::anonymous for public buckets)");
    o.credentials = std::move(c);
  }
  o.max_keys = std::clamp(o.max_keys, 1u, 1000u);
  o.multipart_concurrency = std::max(1u, o.multipart_concurrency);
  if (o.part_size == 0) o.part_size = std::uint64_t{16} << 20;

  auto [origin, path] = http::parse_url(o.endpoint);
  if (!path.empty())
    throw InvalidArgument("", "endpoint", "S3 endpoint '" + o.endpoint + "' must not have a path");
  S3Addressing mode = o.addressing;
  if (mode == S3Addressing::automatic)
    mode = aws && o.bucket.find('.') == std::string::npos ? S3Addressing::virtual_hosted
                                                          : S3Addressing::path;
  if (mode == S3Addressing::virtual_hosted) {
    origin.host = o.bucket + "." + origin.host;
    d.bucket_path = "";
  } else {
    d.bucket_path = "/" + sigv4::uri_encode(o.bucket, true);
  }
  d.origin = origin;
  d.base = o.prefix.empty() ? "" : o.prefix + "/";
  d.shown = "s3://" + o.bucket + (o.prefix.empty() ? "" : "/" + o.prefix);
  d.client = std::make_shared<http::Client>(std::move(io), o.http);
  d.options = std::move(o);
}

S3Store::~S3Store() = default;

const S3Options& S3Store::options() const { return impl_->options; }
HttpClientStats S3Store::stats() const { return impl_->client->stats(); }
std::string S3Store::url() const { return impl_->shown; }
asio::any_io_executor S3Store::get_executor() const { return impl_->client->executor(); }

// The condition headers of a write for `if_equal` (none when unknown). The
// ETag goes without its quotes: radosgw compares a write's If-Match with
// the stored, unquoted ETag (a quoted one never matches), and S3 takes both.
static sigv4::Pairs condition_headers(const Generation& if_equal) {
  if (if_equal.unknown()) return {};
  if (if_equal.is_absent()) return {{"If-None-Match", "*"}};
  std::string etag = if_equal.token;
  if (etag.size() >= 2 && etag.front() == '"' && etag.back() == '"') etag = etag.substr(1, etag.size() - 2);
  return {{"If-Match", std::move(etag)}};
}

awaitable<ReadResult> S3Store::read(std::string key, ReadOptions options) {
  validate_key(key);
  const auto d = impl_;
  const ByteRange range = options.range;
  const bool empty_range = range.empty();
  const std::string object = d->object(key);
  sigv4::Pairs headers;
  if (!options.if_equal.unknown() && !options.if_equal.is_absent())
    headers.emplace_back("If-Match", options.if_equal.token);
  const std::string range_value = empty_range ? "" : http::range_header(range);
  if (!range_value.empty()) headers.emplace_back("Range", range_value);
  http::Request req = d->make(empty_range ? bh::verb::head : bh::verb::get, object, {}, std::move(headers), nullptr,
                              {}, key);
  if (!range_value.empty()) req.max_full_body = d->options.max_full_body;
  http::Response r = co_await d->send(std::move(req));
  ReadResult result;
  if (r.status == 412 && !options.if_equal.unknown() && !options.if_equal.is_absent()) {  // If-Match failed
    result.changed = true;
    co_return result;
  }
  if (r.status == 404) {
    const std::string code = empty_range ? "" : xml_first(as_text(r.body), "Code");
    if (!code.empty() && code != "NoSuchKey") d->fail(key, "GET", object, r);
    result.generation = Generation::absent();
  } else if (empty_range && r.status == 200) {
    result.generation = http::etag_generation(r);
    result.value = Bytes{};
  } else if (auto value = empty_range ? std::nullopt : http::take_value(key, d->url_of(object), range, r)) {
    result.generation = http::etag_generation(r);
    result.value = std::move(value);
  } else {
    d->fail(key, empty_range ? "HEAD" : "GET", object, r);
  }
  if (!options.if_equal.unknown() && result.generation != options.if_equal) {
    result.value.reset();
    result.changed = true;
  }
  co_return result;
}

// `hash(body)` (e.g. sigv4::md5_base64, a Content-MD5 value): inline for a small body, else on the store's hashing threads.
static awaitable<std::string> hashed(std::shared_ptr<S3Store::Impl> d, ByteSpan body,
                                     std::string (*hash)(ByteSpan)) {
  if (body.size() < (256 << 10)) co_return hash(body);
  auto job = [body, hash] { return hash(body); };
  co_return co_await detail::run_on_pool(d->hasher.get_executor(), std::move(job));
}

// The payload hash to sign for `body`: "" (make() decides: small bodies are
// hashed inline) or the SHA-256 computed on the store's hashing threads.
static awaitable<std::string> payload_hash(std::shared_ptr<S3Store::Impl> d, ByteSpan body) {
  constexpr std::size_t inline_limit = 256 << 10;
  if (d->options.anonymous || !d->options.sign_payload || body.size() < inline_limit) co_return "";
  auto job = [body] { return sigv4::sha256_hex(body); };
  co_return co_await detail::run_on_pool(d->hasher.get_executor(), std::move(job));
}

// The ETag S3 gives an object completed from parts with these ETags:
// "<hex MD5 of the concatenated binary MD5s>-<number of parts>", quoted.
static std::string multipart_etag(const std::vector<std::string>& etags) {
  Bytes digests;
  for (std::string e : etags) {
    if (e.size() >= 2 && e.front() == '"' && e.back() == '"') e = e.substr(1, e.size() - 2);
    if (e.size() != 32 || e.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos) return "";
    for (std::size_t i = 0; i < 32; i += 2)
      digests.push_back(std::byte(std::stoul(e.substr(i, 2), nullptr, 16)));
  }
  return "\"" + sigv4::hex(sigv4::md5(digests)) + "-" + std::to_string(etags.size()) + "\"";
}

// A multipart-upload worker: uploads parts (taking the next part number from
// `next`) until none is left; records each part's ETag in (*etags)[part].
static awaitable<void> upload_parts(std::shared_ptr<S3Store::Impl> d, std::string key,
                                    std::string object, std::string upload_id,
                                    std::shared_ptr<const Bytes> data,
                                    std::shared_ptr<std::atomic<std::size_t>> next,
                                    std::vector<std::string>* etags) {
  const std::uint64_t part_size = d->options.part_size;
  const std::size_t parts = etags->size();
  for (;;) {
    const std::size_t i = (*next)++;
    if (i >= parts) co_return;
    const std::uint64_t begin = std::uint64_t{i} * part_size;
    const ByteSpan span(data->data() + begin, std::min<std::uint64_t>(part_size, data->size() - begin));
    sigv4::Pairs headers;
    if (!d->options.sign_payload) {
      std::string md5 = co_await hashed(d, span, sigv4::md5_base64);
      headers.emplace_back("Content-MD5", std::move(md5));
    }
    std::string hash = co_await payload_hash(d, span);
    http::Request r_req = d->make(
        bh::verb::put, object, {{"partNumber", std::to_string(i + 1)}, {"uploadId", upload_id}},
        std::move(headers), data, span, key, std::move(hash));
    http::Response r = co_await d->send(std::move(r_req));
    if (r.status != 200) d->fail(key, "UploadPart " + std::to_string(i + 1), object, r);
    std::string etag = r.header("ETag");
    if (etag.empty())
      throw StoreError(key, "ETag", "UploadPart " + std::to_string(i + 1) + " " + d->url_of(object) +
                                        ": no ETag in the answer");
    (*etags)[i] = std::move(etag);  // each part index is taken once: no race
  }
}

awaitable<std::optional<Generation>> S3Store::write(std::string key, std::optional<Bytes> value,
                                                    WriteOptions options) {
  validate_key(key);
  const auto d = impl_;
  const std::string object = d->object(key);
  const auto& o = d->options;
  if (!value) {
    if (!options.if_equal.unknown()) {  // DeleteObject has no condition: check first (not atomic)
      ReadOptions probe;
      probe.range = ByteRange::from(0, 0);
      const ReadResult now = co_await read(key, std::move(probe));
      if (now.generation != options.if_equal) co_return std::nullopt;
      if (now.generation.is_absent()) co_return Generation::absent();
    }
    http::Request r_req = d->make(bh::verb::delete_, object, {}, {}, nullptr, {}, key);
    http::Response r = co_await d->send(std::move(r_req));
    if (r.status == 204 || r.status == 200) co_return Generation::absent();
    if (r.status == 404 && xml_first(as_text(r.body), "Code") == "NoSuchKey") co_return Generation::absent();
    d->fail(key, "DELETE", object, r);
  }
  auto data = std::make_shared<const Bytes>(std::move(*value));
  const ByteSpan all(*data);
  const bool conditional = !options.if_equal.unknown();

  // A conditional write is one PutObject (a multipart upload cannot carry
  // the condition): up to S3's single-PUT limit of 5 GiB.
  if (conditional && all.size() > (std::uint64_t{5} << 30))
    throw UnsupportedError(key, "if_equal", "a conditional write of more than 5 GiB (one PutObject) to " + url());
  if (conditional || o.multipart_threshold == 0 || all.size() < o.multipart_threshold || all.size() <= o.part_size) {
    sigv4::Pairs headers = condition_headers(options.if_equal);
    headers.emplace_back("Content-Type", "application/octet-stream");
    const std::string write_id = conditional ? d->next_write_id() : "";
    if (conditional) headers.emplace_back(kWriteIdHeader, write_id);
    if (!o.sign_payload) {
      std::string md5 = co_await hashed(d, all, sigv4::md5_base64);
      headers.emplace_back("Content-MD5", std::move(md5));
    }
    std::string hash = co_await payload_hash(d, all);
    http::Request r_req = d->make(bh::verb::put, object, {}, std::move(headers), data, all, key, std::move(hash));
    http::Response r = co_await d->send(std::move(r_req));
    if (conditional && (r.status == 412 || (r.status == 409 && xml_first(as_text(r.body), "Code") ==
                                                                    "ConditionalRequestConflict"))) {
      // A write sent again (after a reset, a timeout, a pooled connection
      // found closed) may fail its condition against itself, landed by an
      // earlier send whose answer was lost: the object that is there now
      // carries this write's id if so. (Its bytes would not tell: another
      // writer may have landed the same bytes, and then this write lost.)
      if (r.resent) {
        http::Request head_req = d->make(bh::verb::head, object, {}, {}, nullptr, {}, key);
        http::Response head = co_await d->send(std::move(head_req));
        if (head.status == 200 && head.header(kWriteIdHeader) == write_id) co_return http::etag_generation(head);
        if (head.status != 200 && head.status != 404) d->fail(key, "HEAD", object, head);
      }
      co_return std::nullopt;
    }
    if (r.status != 200) d->fail(key, "PUT", object, r);
    co_return http::etag_generation(r);
  }

  // Multipart upload.
  http::Request created_req = d->make(bh::verb::post, object, {{"uploads", ""}},
                                                    {{"Content-Type", "application/octet-stream"}},
                                                    nullptr, {}, key);
  http::Response created = co_await d->send(std::move(created_req));
  if (created.status != 200) d->fail(key, "CreateMultipartUpload", object, created);
  const std::string upload_id = xml_first(as_text(created.body), "UploadId");
  if (upload_id.empty())
    throw StoreError(key, "UploadId", "CreateMultipartUpload " + d->url_of(object) + ": no UploadId in the answer");

  const std::size_t parts = static_cast<std::size_t>((all.size() + o.part_size - 1) / o.part_size);
  std::vector<std::string> etags(parts);
  std::exception_ptr failure;
  try {
    auto next = std::make_shared<std::atomic<std::size_t>>(0);
    std::vector<awaitable<void>> workers;
    const unsigned n_workers = static_cast<unsigned>(std::min<std::size_t>(o.multipart_concurrency, parts));
    for (unsigned w = 0; w < n_workers; ++w)
      workers.push_back(upload_parts(d, key, object, upload_id, data, next, &etags));
    co_await run_all(std::move(workers));

    std::string xml = "<CompleteMultipartUpload>";
    for (std::size_t i = 0; i < parts; ++i)
      xml += "<Part><PartNumber>" + std::to_string(i + 1) + "</PartNumber><ETag>" +
             xml_escape(etags[i]) + "</ETag></Part>";
    xml += "</CompleteMultipartUpload>";
    auto body = std::make_shared<const Bytes>(reinterpret_cast<const std::byte*>(xml.data()),
                                              reinterpret_cast<const std::byte*>(xml.data()) + xml.size());
    http::Request done_req = d->make(bh::verb::post, object, {{"uploadId", upload_id}},
                                                   {{"Content-Type", "application/xml"}}, body,
                                                   ByteSpan(*body), key);
    http::Response done = co_await d->send(std::move(done_req));
    // S3 may answer 200 and still report an error in the body.
    const bool error = done.status != 200 || as_text(done.body).find("<Error>") != std::string_view::npos;
    if (!error) co_return Generation{};  // the ETag of a completed upload is in its XML: not needed
    // A completion sent again finds the upload gone when an earlier send did
    // complete it but its answer was lost: accept the object if it is exactly
    // the one these parts make (S3's multipart ETag: MD5 of the parts' MD5s).
    if (done.resent && xml_first(as_text(done.body), "Code") == "NoSuchUpload") {
      http::Request head_req = d->make(bh::verb::head, object, {}, {}, nullptr, {}, key);
      http::Response head = co_await d->send(std::move(head_req));
      if (head.status == 200 && head.header("ETag") == multipart_etag(etags) &&
          head.header("Content-Length") == std::to_string(all.size()))
        co_return http::etag_generation(head);
    }
    d->fail(key, "CompleteMultipartUpload", object, done);
  } catch (...) {
    failure = std::current_exception();
  }
  // Abort (best effort) so that no parts linger, then report the failure;
  // also when the write was cancelled (the request then still goes out).
  const bool throw_if_cancelled = co_await asio::this_coro::throw_if_cancelled();
  co_await asio::this_coro::throw_if_cancelled(false);
  try {
    http::Request r_req = d->make(bh::verb::delete_, object, {{"uploadId", upload_id}},
                                                {}, nullptr, {}, key);
    http::Response r = co_await d->send(std::move(r_req));
    if (r.status != 204 && r.status != 200 && r.status != 404)
      spdlog::warn("zarrcoro s3: aborting the multipart upload of {} failed: HTTP {}",
                   d->url_of(object), r.status);
  } catch (const std::exception& e) {
    spdlog::warn("zarrcoro s3: aborting the multipart upload of {} failed: {}", d->url_of(object), e.what());
  }
  co_await asio::this_coro::throw_if_cancelled(throw_if_cancelled);
  std::rethrow_exception(failure);
}

// Lists with ListObjectsV2 (all pages); names relative to the store's prefix.
static awaitable<S3Store::Listing> list_objects(std::shared_ptr<S3Store::Impl> d, std::string prefix,
                                                bool delimited) {
  S3Store::Listing out;
  std::string token;
  std::set<std::string> tokens;  // every one given: a server that cycles is an error, not a hang
  const std::string full = d->base + prefix;
  for (int page_no = 0;; ++page_no) {
    sigv4::Pairs query{{"list-type", "2"},
                       {"prefix", full},
                       {"max-keys", std::to_string(d->options.max_keys)}};
    if (delimited) query.emplace_back("delimiter", "/");
    if (!token.empty()) query.emplace_back("continuation-token", token);
    http::Request r_req = d->make(bh::verb::get, "", std::move(query), {}, nullptr, {}, prefix);
    http::Response r = co_await d->send(std::move(r_req));
    if (r.status != 200) d->fail(prefix, "ListObjectsV2", full, r);
    s3xml::ListPage page = s3xml::parse_list(as_text(r.body));
    for (std::size_t i = 0; i < page.keys.size(); ++i)
      if (page.keys[i].starts_with(d->base)) {
        out.keys.push_back(page.keys[i].substr(d->base.size()));
        out.sizes.push_back(page.sizes[i]);
      }
    for (auto& p : page.prefixes)
      if (p.starts_with(d->base)) out.prefixes.push_back(p.substr(d->base.size()));
    if (!page.truncated) break;
    // Without a new token the rest cannot be asked for: an error, never a
    // listing cut short (a ListObjects v1 answer has NextMarker instead).
    if (page.next.empty())
      throw StoreError(prefix, "NextContinuationToken",
                       "ListObjectsV2 " + d->url_of(full) + ": IsTruncated without a NextContinuationToken");
    if (!tokens.insert(page.next).second)
      throw StoreError(prefix, "NextContinuationToken",
                       "ListObjectsV2 " + d->url_of(full) + ": the server repeated a continuation token");
    token = std::move(page.next);
  }
  if (!std::is_sorted(out.keys.begin(), out.keys.end())) {  // (S3 lists in order; keep sizes with their keys)
    std::vector<std::size_t> order(out.keys.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return out.keys[a] < out.keys[b]; });
    S3Store::Listing sorted;
    for (std::size_t i : order) {
      sorted.keys.push_back(std::move(out.keys[i]));
      sorted.sizes.push_back(out.sizes[i]);
    }
    sorted.prefixes = std::move(out.prefixes);
    out = std::move(sorted);
  }
  std::sort(out.prefixes.begin(), out.prefixes.end());
  co_return out;
}

awaitable<std::vector<std::string>> S3Store::list(std::string prefix) {
  auto listing = co_await list_objects(impl_, std::move(prefix), false);
  co_return std::move(listing.keys);
}

awaitable<std::vector<KeySize>> S3Store::list_sizes(std::string prefix) {
  auto listing = co_await list_objects(impl_, std::move(prefix), false);
  std::vector<KeySize> out;
  for (std::size_t i = 0; i < listing.keys.size(); ++i) {
    KeySize ks;
    ks.key = std::move(listing.keys[i]);
    ks.size = listing.sizes[i];
    if (ks.size == s3xml::kNoSize)
      throw StoreError(ks.key, "list", "the bucket listing gives no valid <Size> for this key");
    out.push_back(std::move(ks));
  }
  co_return out;
}

awaitable<S3Store::Listing> S3Store::list_dir(std::string prefix) {
  if (!prefix.empty() && prefix.back() != '/')
    throw InvalidArgument(prefix, "prefix", "list_dir needs \"\" or a prefix ending in '/'");
  co_return co_await list_objects(impl_, std::move(prefix), true);
}

awaitable<void> S3Store::erase_many(std::vector<std::string> keys) {
  for (const auto& k : keys) validate_key(k);
  const auto d = impl_;
  for (std::size_t start = 0; start < keys.size(); start += 1000) {
    const std::size_t end = std::min(keys.size(), start + 1000);
    std::string xml = "<Delete><Quiet>true</Quiet>";
    for (std::size_t i = start; i < end; ++i)
      xml += "<Object><Key>" + xml_escape(d->object(keys[i])) + "</Key></Object>";
    xml += "</Delete>";
    auto body = std::make_shared<const Bytes>(reinterpret_cast<const std::byte*>(xml.data()),
                                              reinterpret_cast<const std::byte*>(xml.data()) + xml.size());
    const ByteSpan span(*body);
    http::Request r_req = d->make(
        bh::verb::post, "", {{"delete", ""}},
        {{"Content-Type", "application/xml"}, {"Content-MD5", sigv4::md5_base64(span)}}, body, span,
        keys[start]);
    http::Response r = co_await d->send(std::move(r_req));
    if (r.status != 200) d->fail(keys[start], "DeleteObjects", "", r);
    // Quiet mode lists only the failures.
    const std::string_view doc = as_text(r.body);
    std::size_t pos = 0;
    if (auto err = xml_next(doc, "Error", pos)) {
      std::string object = xml_first(*err, "Key");
      const std::string code = xml_first(*err, "Code");
      const std::string key = object.starts_with(d->base) ? object.substr(d->base.size()) : object;
      throw StoreError(key, code.empty() ? "DeleteObjects" : code,
                       "DeleteObjects " + d->url_of(object) + ": " + code + ": " +
                           xml_first(*err, "Message"));
    }
  }
}

awaitable<std::size_t> S3Store::erase_prefix(std::string prefix) {
  auto keys = co_await list(std::move(prefix));
  const std::size_t n = keys.size();
  co_await erase_many(std::move(keys));
  co_return n;
}

awaitable<void> S3Store::create_bucket() {
  const auto d = impl_;
  std::shared_ptr<const Bytes> body;
  ByteSpan span;
  if (d->options.region != "us-east-1") {
    const std::string xml = "<CreateBucketConfiguration><LocationConstraint>" +
                            xml_escape(d->options.region) +
                            "</LocationConstraint></CreateBucketConfiguration>";
    body = std::make_shared<const Bytes>(reinterpret_cast<const std::byte*>(xml.data()),
                                         reinterpret_cast<const std::byte*>(xml.data()) + xml.size());
    span = ByteSpan(*body);
  }
  http::Request r_req = d->make(bh::verb::put, "", {}, {}, body, span, "");
  http::Response r = co_await d->send(std::move(r_req));
  if (r.status == 200) co_return;
  if (r.status == 409 && xml_first(as_text(r.body), "Code") == "BucketAlreadyOwnedByYou") co_return;
  d->fail("", "CreateBucket", "", r);
}

}  // namespace zarrcoro
