// S3Store against a real S3 server: a single-node Ceph radosgw on 127.0.0.1,
// started by tests/s3/rgw.sh (the CTest fixture `rgw` starts and stops it
// around this suite; by hand: `tests/s3/rgw.sh start`). The suite reads the
// endpoint and keys from $ZARRCORO_RGW_ROOT/env (default
// $TMPDIR/zarrcoro-rgw/env). Without radosgw it skips with a warning, or
// fails when CI is set.
//
// Covered: the shared conformance suite (path-style with signed payloads;
// virtual-hosted with UNSIGNED-PAYLOAD), listings with delimiters and
// continuation tokens, batch deletes, multipart uploads, error mapping
// (SignatureDoesNotMatch, InvalidAccessKeyId, NoSuchBucket), credentials
// from the environment, open_store, faults injected by a proxy in front of
// radosgw, and zarr arrays (sharded too) written and read through S3.
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <map>
#include <numeric>
#include <random>

#include <future>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_future.hpp>
#include <catch2/catch.hpp>

#include <zarrcoro/array.hpp>
#include <zarrcoro/runtime.hpp>
#include <zarrcoro/store/counting.hpp>
#include <zarrcoro/store/filesystem.hpp>
#include <zarrcoro/store/memory.hpp>
#include <zarrcoro/store/open.hpp>
#include <zarrcoro/store/s3.hpp>

#include "fault_server.hpp"
#include "store_conformance.hpp"
#include "support.hpp"

using namespace zarrcoro;
using namespace std::chrono_literals;
using test::Fault;
using test::FaultServer;
using test::StoreHarness;
using test::scaled;
using Strings = std::vector<std::string>;
using Clock = std::chrono::steady_clock;
using nlohmann::json;

namespace {

struct Rgw {
  std::string endpoint, bucket, region, access_key, secret_key, vhost_domain;
  std::uint16_t port = 0;
};

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}

// The running radosgw, from the env file that tests/s3/rgw.sh writes.
std::optional<Rgw> find_rgw() {
  const std::string tmp = env_or("TMPDIR", "/tmp");
  const std::string root = env_or("ZARRCORO_RGW_ROOT", tmp + "/zarrcoro-rgw");
  std::ifstream in(root + "/env");
  std::map<std::string, std::string> kv;
  for (std::string line; std::getline(in, line);)
    if (auto eq = line.find('='); eq != std::string::npos) kv[line.substr(0, eq)] = line.substr(eq + 1);
  Rgw r;
  r.endpoint = kv["ZARRCORO_S3_ENDPOINT"];
  r.bucket = kv["ZARRCORO_S3_BUCKET"];
  r.region = kv["ZARRCORO_S3_REGION"];
  r.access_key = kv["ZARRCORO_S3_ACCESS_KEY"];
  r.secret_key = kv["ZARRCORO_S3_SECRET_KEY"];
  r.vhost_domain = kv["ZARRCORO_S3_VHOST_DOMAIN"];
  const auto colon = r.endpoint.rfind(':');
  if (r.endpoint.empty() || colon == std::string::npos) return std::nullopt;
  r.port = static_cast<std::uint16_t>(std::stoi(r.endpoint.substr(colon + 1)));
  if (!test::port_answers(r.port)) return std::nullopt;
  return r;
}

const std::optional<Rgw>& rgw() {
  static const std::optional<Rgw> r = find_rgw();
  return r;
}

#define REQUIRE_RGW(var)                                                                      \
  if (!rgw()) {                                                                               \
    const char* msg = "radosgw is not running (tests/s3/rgw.sh start; CTest's rgw fixture "   \
                      "starts it)";                                                           \
    if (std::getenv("CI")) FAIL(msg);                                                         \
    WARN("SKIPPED: " << msg);                                                                 \
    return;                                                                                   \
  }                                                                                           \
  const Rgw& var = *rgw()

// A prefix no other run uses.
const std::string& run_prefix() {
  static const std::string p =
      "test-" + std::to_string(::getpid()) + "-" +
      std::to_string(std::chrono::system_clock::now().time_since_epoch().count() % 1000000000);
  return p;
}

S3Options options(const Rgw& r, const std::string& sub) {
  S3Options o;
  o.bucket = r.bucket;
  o.prefix = run_prefix() + "/" + sub;
  o.endpoint = r.endpoint;
  o.region = r.region;
  o.addressing = S3Addressing::path;
  o.credentials = S3Credentials{r.access_key, r.secret_key, ""};
  o.http.backoff_base = 10ms;
  o.http.backoff_max = 200ms;
  return o;
}

struct S3Harness : StoreHarness {
  std::shared_ptr<S3Store> s3;
  explicit S3Harness(S3Options o)
      : StoreHarness([&](boost::asio::any_io_executor io) { return std::make_shared<S3Store>(io, o); }),
        s3(std::static_pointer_cast<S3Store>(store)) {}
  S3Store::Listing list_dir(const std::string& prefix) { return test::run(io, s3->list_dir(prefix)); }
  void erase_many(Strings keys) { test::run(io, s3->erase_many(std::move(keys))); }
  std::size_t erase_prefix(const std::string& prefix) { return test::run(io, s3->erase_prefix(prefix)); }
  // Removes what the test wrote (best effort).
  void cleanup() {
    try {
      erase_prefix("");
    } catch (const std::exception& e) {
      WARN("cleanup of " << s3->url() << " failed: " << e.what());
    }
  }
};

std::string text_of(const Bytes& b) { return {reinterpret_cast<const char*>(b.data()), b.size()}; }

// Sets an environment variable for one scope.
struct ScopedEnv {
  std::vector<std::pair<std::string, std::optional<std::string>>> saved;
  void set(const std::string& k, const std::optional<std::string>& v) {
    const char* old = std::getenv(k.c_str());
    saved.emplace_back(k, old ? std::optional<std::string>(old) : std::nullopt);
    if (v) ::setenv(k.c_str(), v->c_str(), 1);
    else ::unsetenv(k.c_str());
  }
  ~ScopedEnv() {
    for (auto it = saved.rbegin(); it != saved.rend(); ++it) {
      if (it->second) ::setenv(it->first.c_str(), it->second->c_str(), 1);
      else ::unsetenv(it->first.c_str());
    }
  }
};

template <class T>
T run_on(Runtime& rt, boost::asio::awaitable<T> a) {
  return boost::asio::co_spawn(rt.io_executor(), std::move(a), boost::asio::use_future).get();
}

}  // namespace

// ---------------------------------------------------------------------------
// Conformance

TEST_CASE("conformance: S3Store on radosgw (path-style, signed payloads)", "[s3][rgw]") {
  REQUIRE_RGW(r);
  static int fresh = 0;
  test::run_store_conformance("s3 path-style", [&r](boost::asio::any_io_executor io) -> std::shared_ptr<Store> {
    return std::make_shared<S3Store>(io, options(r, "conf-path-" + std::to_string(++fresh)));
  });
}

TEST_CASE("conformance: S3Store on radosgw (virtual-hosted, UNSIGNED-PAYLOAD)", "[s3][rgw]") {
  REQUIRE_RGW(r);
  if (r.vhost_domain.empty()) {
    WARN("SKIPPED: this radosgw has no DNS name for virtual-hosted buckets");
    return;
  }
  static int fresh = 0;
  test::run_store_conformance("s3 virtual-hosted", [&r](boost::asio::any_io_executor io) -> std::shared_ptr<Store> {
    auto o = options(r, "conf-vhost-" + std::to_string(++fresh));
    o.endpoint = "http://" + r.vhost_domain + ":" + std::to_string(r.port);
    o.addressing = S3Addressing::virtual_hosted;
    o.sign_payload = false;
    o.http.connect_to[r.bucket + "." + r.vhost_domain] = "127.0.0.1";
    return std::make_shared<S3Store>(io, o);
  });
}

// ---------------------------------------------------------------------------
// S3 specifics

TEST_CASE("S3Store: listings page through continuation tokens; list_dir uses a delimiter", "[s3][rgw]") {
  REQUIRE_RGW(r);
  auto o = options(r, "list");
  o.max_keys = 2;
  S3Harness h(o);
  const Strings keys{"a/b", "a/c/d", "a/c/e/f", "a/x.y", "ab", "b", "zarr.json"};
  for (const auto& k : keys) h.set(k, k);
  const auto before = h.s3->stats().requests;
  CHECK(h.list("") == keys);
  CHECK(h.s3->stats().requests - before == 4);  // 7 keys, 2 per page
  CHECK(h.list("a/") == Strings{"a/b", "a/c/d", "a/c/e/f", "a/x.y"});
  CHECK(h.list("a") == Strings{"a/b", "a/c/d", "a/c/e/f", "a/x.y", "ab"});
  CHECK(h.list("a/c/e") == Strings{"a/c/e/f"});
  CHECK(h.list("q") == Strings{});

  auto top = h.list_dir("");
  CHECK(top.keys == Strings{"ab", "b", "zarr.json"});
  CHECK(top.prefixes == Strings{"a/"});
  auto a = h.list_dir("a/");
  CHECK(a.keys == Strings{"a/b", "a/x.y"});
  CHECK(a.prefixes == Strings{"a/c/"});
  auto c = h.list_dir("a/c/");
  CHECK(c.keys == Strings{"a/c/d"});
  CHECK(c.prefixes == Strings{"a/c/e/"});
  CHECK(h.list_dir("nothing/").keys.empty());
  CHECK_THROWS_AS(h.list_dir("a"), InvalidArgument);
  h.cleanup();
}

TEST_CASE("S3Store: keys with characters that need encoding", "[s3][rgw]") {
  REQUIRE_RGW(r);
  S3Harness h(options(r, "odd keys"));  // a space in the prefix too
  const Strings keys{"a b/c", "e&f=g?h", "k+l", "m%20n", "p'q\"r", "s<t>u", "v#w", "x~y_z.-", "\xc3\xa9t\xc3\xa9", "tab\there"};
  for (const auto& k : keys) h.set(k, "value of " + k);
  for (const auto& k : keys) CHECK(h.text(k) == "value of " + k);
  Strings sorted = keys;
  std::sort(sorted.begin(), sorted.end());
  CHECK(h.list("") == sorted);
  h.erase_many(keys);
  CHECK(h.list("") == Strings{});
}

TEST_CASE("S3Store: batch delete and erase_prefix", "[s3][rgw]") {
  REQUIRE_RGW(r);
  S3Harness h(options(r, "batch"));
  constexpr int n = 1005;  // more than one DeleteObjects request
  Strings keys;
  std::vector<awaitable<void>> jobs;
  for (int i = 0; i < n; ++i) {
    keys.push_back("d/" + std::to_string(i));
    jobs.push_back(h.store->set(keys.back(), test::bytes_of("x")));
  }
  h.set("keep/me", "kept");
  test::run_all(h.io, std::move(jobs), 2);
  CHECK(h.list("d/").size() == std::size_t(n));
  const auto before = h.s3->stats().requests;
  keys.push_back("d/never-was");  // absent keys are fine
  h.erase_many(keys);
  CHECK(h.s3->stats().requests - before == 2);
  CHECK(h.list("d/") == Strings{});
  CHECK(h.text("keep/me") == "kept");
  CHECK_THROWS_AS(h.erase_many({"ok", "../bad"}), InvalidArgument);
  h.set("e/1", "1");
  h.set("e/2", "2");
  CHECK(h.erase_prefix("e/") == 2);
  CHECK(h.list("") == Strings{"keep/me"});
  h.erase_many({});
  h.cleanup();
}

TEST_CASE("S3Store: multipart uploads above the threshold", "[s3][rgw]") {
  REQUIRE_RGW(r);
  auto o = options(r, "multipart");
  o.multipart_threshold = 5 << 20;
  o.part_size = 5 << 20;
  o.sign_payload = GENERATE(true, false);
  INFO((o.sign_payload ? "signed payload" : "UNSIGNED-PAYLOAD + Content-MD5"));
  S3Harness h(o);
  const Bytes big = test::random_bytes((12 << 20) + 123, 17);  // 3 parts
  auto before = h.s3->stats();
  h.set("big", big);
  auto after = h.s3->stats();
  CHECK(after.requests - before.requests == 1 + 3 + 1);  // create, 3 parts, complete
  CHECK(after.bytes_sent - before.bytes_sent >= big.size());
  const auto got = h.get("big");
  REQUIRE(got.has_value());
  CHECK((*got == big));
  const std::uint64_t edge = 5 << 20;
  const auto across = h.get("big", ByteRange::from(edge - 10, 20));
  CHECK((across && *across == Bytes(big.begin() + edge - 10, big.begin() + edge + 10)));
  const auto tail = h.get("big", ByteRange::last(1000));
  CHECK((tail && *tail == Bytes(big.end() - 1000, big.end())));
  h.set("big", "small now");  // replaced by a plain PUT
  CHECK(h.text("big") == "small now");
  // Exactly one part's worth goes as one PUT.
  before = h.s3->stats();
  h.set("one", test::random_bytes(5 << 20, 3));
  CHECK(h.s3->stats().requests - before.requests == 1);
  h.cleanup();
}

TEST_CASE("S3Store: a multipart write cancelled at any point waits for its parts and leaves a whole value "
          "(was: hung when cancelled as its last part ended)",
          "[s3][rgw]") {
  // Regression: a cancelled multipart write returned while its part uploads
  // still ran and wrote their ETags into its freed frame.
  REQUIRE_RGW(r);
  auto o = options(r, "multipart-cancel");
  o.multipart_threshold = 5 << 20;
  o.part_size = 5 << 20;
  o.multipart_concurrency = 2;
  S3Harness h(o);
  const Bytes a = test::random_bytes((10 << 20) + 5, 1), b = test::random_bytes((10 << 20) + 5, 2);  // 3 parts each
  h.set("v", a);
  int cancelled = 0;
  for (int round = 0; round < 12; ++round) {
    INFO("round " << round);
    const Bytes& next = round % 2 ? a : b;
    boost::asio::cancellation_signal signal;
    int completions = 0;
    std::exception_ptr error;
    h.io.restart();
    boost::asio::co_spawn(h.io, h.store->set("v", next),
                          boost::asio::bind_cancellation_slot(signal.slot(), [&](std::exception_ptr e) {
                            ++completions;
                            error = e;
                          }));
    // Cancelled after a growing number of handlers: early rounds during the
    // CreateMultipartUpload request, later ones while parts are in flight.
    for (int k = 0; k < 6 * round && completions == 0 && h.io.run_one() == 1; ++k) {
    }
    signal.emit(boost::asio::cancellation_type::terminal);
    test::run_watched(h.io);
    REQUIRE(completions == 1);
    if (error) {
      ++cancelled;
      try {
        std::rethrow_exception(error);
      } catch (const boost::system::system_error& e) {
        CHECK(e.code() == boost::asio::error::operation_aborted);
      }
    }
    const auto got = h.get("v");
    REQUIRE(got.has_value());
    CHECK((*got == a || *got == b));
    if (!error) CHECK((*got == next));
  }
  INFO(cancelled << " of 12 writes ended cancelled");
  CHECK(cancelled > 0);
  h.cleanup();
}

TEST_CASE("S3Store: errors carry the key and the S3 error code", "[s3][rgw]") {
  REQUIRE_RGW(r);
  S3Harness good(options(r, "errors"));
  good.set("k", "v");

  SECTION("a wrong secret is SignatureDoesNotMatch, never a missing key") {
    auto o = options(r, "errors");
    o.credentials->secret_key = "wrong";
    S3Harness h(o);
    try {
      h.get("k");
      FAIL("a bad signature was accepted");
    } catch (const StoreError& e) {
      CHECK(e.key() == "k");
      CHECK(e.field() == "SignatureDoesNotMatch");
      CHECK_THAT(e.what(), Catch::Contains("403") && Catch::Contains("SignatureDoesNotMatch"));
    }
    try {
      h.get("missing");
      FAIL("a bad signature looked like a missing key");
    } catch (const StoreError& e) {
      CHECK(e.field() == "SignatureDoesNotMatch");
    }
    CHECK_THROWS_WITH(h.set("k", "x"), Catch::Contains("SignatureDoesNotMatch"));
    CHECK_THROWS_WITH(h.list(""), Catch::Contains("SignatureDoesNotMatch"));
    try {
      h.exists("k");  // HEAD: no error document
      FAIL("HEAD with a bad signature succeeded");
    } catch (const StoreError& e) {
      CHECK(e.field() == "HTTP 403");
    }
    CHECK(good.text("k") == "v");
  }
  SECTION("an unknown access key is InvalidAccessKeyId") {
    auto o = options(r, "errors");
    o.credentials->access_key = "AKIANOBODY";
    S3Harness h(o);
    try {
      h.get("k");
      FAIL("an unknown key was accepted");
    } catch (const StoreError& e) {
      CHECK(e.field() == "InvalidAccessKeyId");
    }
  }
  SECTION("a missing bucket is an error, not a missing key") {
    auto o = options(r, "errors");
    o.bucket = "zarrcoro-no-such-bucket";
    S3Harness h(o);
    try {
      h.get("k");
      FAIL("a missing bucket looked like a missing key");
    } catch (const StoreError& e) {
      CHECK(e.key() == "k");
      CHECK(e.field() == "NoSuchBucket");
      CHECK_THAT(e.what(), Catch::Contains("s3://zarrcoro-no-such-bucket/"));
    }
    CHECK_THROWS_WITH(h.set("k", "v"), Catch::Contains("NoSuchBucket"));
    CHECK_THROWS_WITH(h.list(""), Catch::Contains("NoSuchBucket"));
    CHECK_THROWS_WITH(h.erase("k"), Catch::Contains("NoSuchBucket"));
  }
  SECTION("creating the bucket again is fine") {
    CHECK_NOTHROW(test::run(good.io, good.s3->create_bucket()));
  }
  SECTION("options are checked") {
    boost::asio::io_context io;
    auto o = options(r, "x");
    o.bucket = "";
    CHECK_THROWS_AS(S3Store(io.get_executor(), o), InvalidArgument);
    o = options(r, "x");
    o.endpoint = "http://127.0.0.1:1/path";
    CHECK_THROWS_AS(S3Store(io.get_executor(), o), InvalidArgument);
    o = options(r, "x");
    o.endpoint = "ftp://127.0.0.1";
    CHECK_THROWS_AS(S3Store(io.get_executor(), o), InvalidArgument);
  }
  good.cleanup();
}

TEST_CASE("S3Store: credentials, region and endpoint from the environment; open_store", "[s3][rgw]") {
  REQUIRE_RGW(r);
  boost::asio::io_context io;
  {
    ScopedEnv env;
    for (const char* k : {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_REGION",
                          "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"})
      env.set(k, std::nullopt);
    try {
      S3Store s(io.get_executor(), S3Options::from_url("s3://" + r.bucket + "/x"));
      FAIL("constructed without credentials");
    } catch (const InvalidArgument& e) {
      CHECK_THAT(e.what(), Catch::Contains("AWS_ACCESS_KEY_ID"));
    }
    // Defaults: AWS's own endpoint, virtual-hosted (no request is made here).
    S3Options anon = S3Options::from_url("s3://bucket/a/b/");
    anon.anonymous = true;
    S3Store aws(io.get_executor(), anon);
    CHECK(aws.options().endpoint == "https://s3.us-east-1.amazonaws.com");
    CHECK(aws.options().region == "us-east-1");
    CHECK(aws.url() == "s3://bucket/a/b");
  }
  ScopedEnv env;
  env.set("AWS_ACCESS_KEY_ID", r.access_key);
  env.set("AWS_SECRET_ACCESS_KEY", r.secret_key);
  env.set("AWS_SESSION_TOKEN", std::nullopt);
  env.set("AWS_REGION", r.region);
  env.set("AWS_ENDPOINT_URL", r.endpoint);
  env.set("AWS_ENDPOINT_URL_S3", std::nullopt);
  const std::string url = "s3://" + r.bucket + "/" + run_prefix() + "/env";
  StoreHarness h([&](boost::asio::any_io_executor ex) { return open_store(url, ex); });
  REQUIRE(std::dynamic_pointer_cast<S3Store>(h.store));
  CHECK(h.store->url() == url);
  h.set("a/zarr.json", "{}");
  CHECK(h.text("a/zarr.json") == "{}");
  CHECK(h.list("") == Strings{"a/zarr.json"});
  h.erase("a/zarr.json");
  CHECK_FALSE(h.exists("a/zarr.json"));
}

TEST_CASE("open_store maps paths and URLs to stores", "[s3][open]") {
  boost::asio::io_context io;
  const auto ex = io.get_executor();
  const std::string tmp = std::filesystem::temp_directory_path().string();
  auto f = open_store(tmp + "/zarrcoro open/a.zarr", ex);
  CHECK(std::dynamic_pointer_cast<FilesystemStore>(f));
  CHECK(f->url() == "file://" + tmp + "/zarrcoro open/a.zarr");
  auto g = open_store("file://" + tmp + "/zarrcoro%20open/a.zarr", ex);
  CHECK(g->url() == f->url());
  CHECK(open_store("file://localhost" + tmp + "/x", ex)->url() == "file://" + tmp + "/x");
  CHECK(std::dynamic_pointer_cast<FilesystemStore>(open_store("relative/dir", ex)));
  auto h = open_store("http://127.0.0.1:8080/data/a.zarr/", ex);
  CHECK(std::dynamic_pointer_cast<HttpStore>(h));
  CHECK(h->url() == "http://127.0.0.1:8080/data/a.zarr");
  CHECK(std::dynamic_pointer_cast<HttpStore>(open_store("HTTPS://example.com/x", ex)));
  CHECK(std::dynamic_pointer_cast<MemoryStore>(open_store("memory://", ex)));
  OpenOptions o;
  o.s3.anonymous = true;
  auto s = open_store("s3://bucket/pre/fix", ex, o);
  CHECK(std::dynamic_pointer_cast<S3Store>(s));
  CHECK(s->url() == "s3://bucket/pre/fix");
  CHECK_THROWS_WITH(open_store("gs://bucket/x", ex), Catch::Contains("unsupported store scheme 'gs'"));
  CHECK_THROWS_AS(open_store("s3://", ex, o), InvalidArgument);
  CHECK_THROWS_AS(open_store("file://relative", ex), InvalidArgument);
  CHECK_THROWS_AS(open_store("", ex), InvalidArgument);
  CHECK(is_url("s3://b"));
  CHECK_FALSE(is_url("/a/b"));
  CHECK_FALSE(is_url("a:b"));
}

// ---------------------------------------------------------------------------
// Faults: a proxy in front of radosgw

TEST_CASE("S3Store through a faulty proxy: retries succeed, data stays exact", "[s3][rgw][faults]") {
  REQUIRE_RGW(r);
  FaultServer proxy;
  proxy.forward_to(r.port);
  auto o = options(r, "faults");
  o.endpoint = proxy.url();
  o.http.max_attempts = 5;
  o.http.io_timeout = scaled(2000ms);
  o.http.backoff_base = 5ms;
  o.http.backoff_max = 50ms;
  S3Harness h(o);
  const Bytes value = test::random_bytes(300000, 23);

  SECTION("each kind of fault, on each kind of request") {
    for (const Fault f : {Fault::status_500, Fault::status_503, Fault::status_429,
                          Fault::reset_before_response, Fault::close_before_response,
                          Fault::reset_mid_body, Fault::truncate_body, Fault::status_500_after_forward,
                          Fault::reset_after_forward}) {
      INFO("fault " << int(f));
      proxy.inject(f, 2, "PUT");
      h.set("k", value);
      proxy.inject(f, 2, "GET");
      const auto got = h.get("k");
      REQUIRE(got.has_value());
      CHECK((*got == value));
      proxy.inject(f, 2, "GET");
      const auto part = h.get("k", ByteRange::from(1000, 5000));
      CHECK((part && *part == Bytes(value.begin() + 1000, value.begin() + 6000)));
      proxy.inject(f, 2, "HEAD");
      CHECK(h.exists("k"));
      proxy.inject(f, 2, "GET");
      CHECK(h.list("") == Strings{"k"});
      // A 204 answer has no body to cut short: mid-body faults do not apply.
      if (f != Fault::reset_mid_body && f != Fault::truncate_body) proxy.inject(f, 2, "DELETE");
      h.erase("k");
      CHECK_FALSE(h.exists("k"));
      proxy.inject(f, 2, "POST");
      h.set("m", "x");
      h.erase_many({"m"});
      INFO("left: " << proxy.pending());
      CHECK(proxy.faults_left() == 0);
    }
  }
  SECTION("a multipart upload whose completion answer is lost") {
    auto m = o;
    m.multipart_threshold = 5 << 20;
    m.part_size = 5 << 20;
    S3Harness mh(m);
    const Bytes big = test::random_bytes((10 << 20) + 7, 29);
    proxy.inject(Fault::reset_before_response, 1, "PUT");   // a part, retried
    proxy.inject(Fault::none, 1, "POST");                     // CreateMultipartUpload
    proxy.inject(Fault::reset_after_forward, 1, "POST");      // CompleteMultipartUpload: done, answer lost
    mh.set("big", big);
    const auto got = mh.get("big");
    CHECK((got && *got == big));
  }
  SECTION("a conditional write whose answer is lost reports that it landed (was: 'condition failed')") {
    // Also when its bytes are those already there.
    proxy.inject(Fault::reset_after_forward, 1, "PUT");
    const auto same = h.write("same", "x", Generation::absent());
    REQUIRE(same.has_value());
    proxy.inject(Fault::reset_after_forward, 1, "PUT");
    const auto again = h.write("same", "x", *same);
    REQUIRE(again.has_value());
    CHECK(*again == h.read("same").generation);
    // The retry fails its condition against the write its first attempt landed.
    proxy.inject(Fault::reset_after_forward, 1, "PUT");
    const auto created = h.write("cond", "mine", Generation::absent());
    REQUIRE(created.has_value());
    CHECK(*created == h.read("cond").generation);
    proxy.inject(Fault::reset_after_forward, 1, "PUT");
    const auto replaced = h.write("cond", "mine again", *created);
    REQUIRE(replaced.has_value());
    CHECK(h.text("cond") == "mine again");
    CHECK_FALSE(h.write("cond", "theirs", *created).has_value());  // a real conflict still fails
    CHECK(h.text("cond") == "mine again");
    CHECK(proxy.faults_left() == 0);
  }
  SECTION("a conditional write sent again after another writer landed the same bytes fails its condition "
          "(was: it reported that it landed, and the other writer's update was lost)") {
    // Two writers both read "1" and write "2" on it: one of them must fail.
    // Ours is reset before it reaches radosgw; the other lands meanwhile;
    // ours, sent again, fails its condition against bytes that equal its own.
    const auto base = h.write("counter", "1", Generation::absent());
    REQUIRE(base.has_value());
    S3Harness other(options(r, "faults"));  // straight to radosgw, not through the proxy
    bool landed = false;
    proxy.inject(Fault::reset_before_response, 1, "PUT", [&] { landed = other.write("counter", "2", *base).has_value(); });
    CHECK_FALSE(h.write("counter", "2", *base).has_value());
    CHECK(landed);
    CHECK(h.text("counter") == "2");
    CHECK(proxy.faults_left() == 0);
  }
  SECTION("random faults on a workload never give wrong data") {
    std::mt19937 rng(7);
    const Fault faults[] = {Fault::status_500, Fault::status_503, Fault::reset_before_response,
                            Fault::reset_mid_body, Fault::truncate_body, Fault::close_before_response,
                            Fault::status_500_after_forward, Fault::reset_after_forward};
    for (int i = 0; i < 2000; ++i) proxy.inject(rng() % 4 == 0 ? faults[rng() % std::size(faults)] : Fault::none);
    auto strong = o;
    strong.http.max_attempts = 10;
    S3Harness s(strong);
    constexpr int n = 40;
    std::vector<Bytes> values;
    std::vector<awaitable<void>> writes;
    for (int i = 0; i < n; ++i) {
      values.push_back(test::random_bytes(1000 + 997 * i, 100 + i));
      writes.push_back(s.store->set("w/" + std::to_string(i), values.back()));
    }
    test::run_all(s.io, std::move(writes), 2);
    for (int i = 0; i < n; ++i) {
      INFO("w/" << i);
      const auto whole = s.get("w/" + std::to_string(i));
      CHECK((whole && *whole == values[i]));
      const auto suffix = s.get("w/" + std::to_string(i), ByteRange::last(100));
      CHECK((suffix && *suffix == Bytes(values[i].end() - 100, values[i].end())));
    }
    CHECK(s.list("w/").size() == std::size_t(n));
    CHECK(s.s3->stats().retries > 10);
    s.cleanup();
  }
  SECTION("a stalled proxy fails within the timeout") {
    proxy.set_default(Fault::stall_before_response);
    auto t = o;
    t.http.max_attempts = 2;
    t.http.io_timeout = scaled(300ms);  // the stall never ends
    S3Harness s(t);
    const auto t0 = Clock::now();
    CHECK_THROWS_WITH(s.get("k"), Catch::Contains("timed out") && Catch::Contains("2 attempts"));
    CHECK(Clock::now() - t0 < 2 * t.http.io_timeout + scaled(4000ms));
    proxy.set_default(Fault::none);
  }
  h.cleanup();
}

TEST_CASE("S3Store: a 412 to a read without a condition and a listing cut short without a token are errors "
          "(was: a missing key; the first page only)",
          "[s3][faults][regression]") {
  FaultServer server;
  server.answer("/bucket/blocked", 412, {}, "<Error><Code>PreconditionFailed</Code></Error>");
  server.answer("/bucket", 200, {{"Content-Type", "application/xml"}},
                "<?xml version=\"1.0\"?><ListBucketResult><IsTruncated>true</IsTruncated>"
                "<Contents><Key>a</Key><Size>1</Size></Contents><NextMarker>a</NextMarker></ListBucketResult>");
  S3Options o;
  o.bucket = "bucket";
  o.endpoint = server.url();
  o.region = "us-east-1";
  o.addressing = S3Addressing::path;
  o.anonymous = true;
  o.http.max_attempts = 1;
  S3Harness h(o);
  try {
    h.get("blocked");
    FAIL("a 412 without a condition was a missing key");
  } catch (const StoreError& e) {
    CHECK(e.key() == "blocked");
    CHECK_THAT(e.what(), Catch::Contains("412"));
  }
  try {
    h.list("");
    FAIL("a truncated listing without a continuation token was taken as complete");
  } catch (const StoreError& e) {
    CHECK(e.field() == "NextContinuationToken");
    CHECK_THAT(e.what(), Catch::Contains("IsTruncated without a NextContinuationToken"));
  }
}

// ---------------------------------------------------------------------------
// Arrays through S3

TEST_CASE("Array: write and read back through S3Store", "[s3][rgw][array]") {
  REQUIRE_RGW(r);
  Runtime rt({.codec_threads = 2});
  auto s3 = std::make_shared<S3Store>(rt.io_executor(), options(r, "array"));
  auto counting = std::make_shared<CountingStore>(s3);

  ArrayMetadata m;
  m.shape = {100, 70};
  m.chunk_shape = {32, 32};
  m.data_type = DataTypeKind::int32;
  m.codecs = json::parse(R"([{"name":"bytes","configuration":{"endian":"little"}},{"name":"zstd","configuration":{"level":1}}])");
  auto a = Array::create_blocking(rt, counting, "plain", m);
  std::vector<std::int32_t> data(100 * 70);
  std::iota(data.begin(), data.end(), -3000);
  a.write_blocking(Region::all(a.shape()), std::as_bytes(std::span(data)));
  CHECK(counting->counts().sets >= 4 * 3);

  auto b = Array::open_blocking(rt, s3, "plain");
  CHECK(b.shape() == m.shape);
  std::vector<std::int32_t> back(data.size());
  b.read_blocking(Region::all(b.shape()), std::as_writable_bytes(std::span(back)));
  CHECK(back == data);
  auto part = b.read_blocking(Region::parse("40:50,60:70", b.shape()));
  for (int i = 0; i < 10; ++i)
    for (int j = 0; j < 10; ++j) REQUIRE(part.as<std::int32_t>()[i * 10 + j] == data[(40 + i) * 70 + 60 + j]);

  counting->reset();
  a.read_blocking(Region::parse("0:10,0:10", a.shape()));
  CHECK(counting->counts().gets == 1);  // one chunk, metadata already loaded
}

TEST_CASE("Array over S3: a cancelled read aborts its requests in flight, completes with Cancelled, and the "
          "store serves the next read exactly", "[s3][rgw][array]") {
  REQUIRE_RGW(r);
  RuntimeOptions ro;
  ro.codec_threads = 2;
  ro.max_inflight_requests = 8;
  Runtime rt(ro);
  auto s3 = std::make_shared<S3Store>(rt.io_executor(), options(r, "cancel"));
  ArrayMetadata m;
  m.shape = {256 * 64};
  m.chunk_shape = {64};
  m.data_type = DataTypeKind::int32;
  m.codecs = json::parse(R"([{"name":"bytes","configuration":{"endian":"little"}},{"name":"zstd","configuration":{"level":1}}])");
  std::vector<std::int32_t> data(256 * 64);
  std::iota(data.begin(), data.end(), 11);
  Array::create_blocking(rt, s3, "a", m, CreateMode::overwrite)
      .write_blocking(Region::all(m.shape), std::as_bytes(std::span(data)));
  const auto a = Array::open_blocking(rt, s3, "a");

  std::vector<std::int32_t> out(data.size(), 0x5a5a5a5a);
  boost::asio::cancellation_signal cancel;
  rt.reset_stats();
  // Cancelled on the I/O thread right after it starts: its first requests
  // are on the wire, none answered.
  std::promise<std::future<void>> started;
  boost::asio::post(rt.io_executor(), [&] {
    started.set_value(a.async_read(Region::all(a.shape()), std::as_writable_bytes(std::span(out)),
                                   boost::asio::bind_cancellation_slot(cancel.slot(), boost::asio::use_future)));
    cancel.emit(boost::asio::cancellation_type::terminal);
  });
  auto done = started.get_future().get();
  REQUIRE(done.wait_for(scaled(30s)) == std::future_status::ready);
  CHECK_THROWS_AS(done.get(), Cancelled);
  CHECK(rt.stats().codec_calls == 0);
  const auto canary = out;

  std::vector<std::int32_t> back(data.size());
  a.read_blocking(Region::all(a.shape()), std::as_writable_bytes(std::span(back)));
  CHECK(back == data);
  CHECK(out == canary);
}

TEST_CASE("Array: sharded partial reads fetch only the needed ranges over S3", "[s3][rgw][array]") {
  REQUIRE_RGW(r);
  Runtime rt({.codec_threads = 2});
  auto o = options(r, "sharded");
  o.multipart_threshold = 5 << 20;  // the shard (about 9 MiB) goes up in parts
  o.part_size = 5 << 20;
  auto s3 = std::make_shared<S3Store>(rt.io_executor(), o);
  auto counting = std::make_shared<CountingStore>(s3);
  ArrayMetadata m;
  m.shape = {1536, 1536};
  m.chunk_shape = {1536, 1536};  // one shard
  m.data_type = DataTypeKind::int32;
  m.codecs = json::parse(R"([{"name":"sharding_indexed","configuration":{"chunk_shape":[64,64],
      "codecs":[{"name":"bytes","configuration":{"endian":"little"}}],
      "index_codecs":[{"name":"bytes","configuration":{"endian":"little"}},{"name":"crc32c"}],
      "index_location":"end"}}])");
  auto a = Array::create_blocking(rt, counting, "s", m);
  std::vector<std::int32_t> data(std::size_t{1536} * 1536);
  std::iota(data.begin(), data.end(), 0);
  auto before = s3->stats();
  a.write_blocking(Region::all(a.shape()), std::as_bytes(std::span(data)));
  auto after = s3->stats();
  CHECK(after.requests - before.requests >= 1 + 2 + 1);  // multipart: create, 2 parts, complete

  auto b = Array::open_blocking(rt, counting, "s");
  counting->reset();
  before = s3->stats();
  auto r1 = b.read_blocking(Region::parse("64:128,128:192", b.shape()));  // inner chunk (1, 2)
  for (int i = 0; i < 64; ++i)
    for (int j = 0; j < 64; ++j)
      REQUIRE(r1.as<std::int32_t>()[i * 64 + j] == data[std::size_t(64 + i) * 1536 + 128 + j]);
  after = s3->stats();
  const auto c = counting->counts();
  CHECK(c.gets == 2);  // the shard index (suffix range), then the inner chunk (range)
  const std::uint64_t index_bytes = 24 * 24 * 16 + 4;
  CHECK(c.get_bytes == index_bytes + 64 * 64 * 4);
  // On the wire: exactly those bytes, not the 9 MiB shard.
  CHECK(after.bytes_received - before.bytes_received == c.get_bytes);
  const auto log = counting->gets_log();
  REQUIRE(log.size() == 2);
  CHECK(log[0].second.kind == ByteRange::Kind::suffix);
  CHECK(log[1].second.kind == ByteRange::Kind::range);

  std::vector<std::int32_t> back(data.size());
  b.read_blocking(Region::all(b.shape()), std::as_writable_bytes(std::span(back)));
  CHECK(back == data);
}

TEST_CASE("Array over S3: two runtimes writing one shard lose no update; a rewritten shard reads anew",
          "[s3][rgw][array][consistency]") {
  REQUIRE_RGW(r);
  Runtime rt1({.codec_threads = 1}), rt2({.codec_threads = 1});
  const auto o = options(r, "consistency");
  auto s1 = std::make_shared<S3Store>(rt1.io_executor(), o);
  auto s2 = std::make_shared<S3Store>(rt2.io_executor(), o);
  ArrayMetadata m;
  m.shape = {400};
  m.chunk_shape = {400};
  m.data_type = DataTypeKind::int32;
  m.codecs = json::parse(R"([{"name":"sharding_indexed","configuration":{"chunk_shape":[20],
      "codecs":[{"name":"bytes","configuration":{"endian":"little"}},{"name":"zstd","configuration":{"level":1}}]}}])");
  const Array a1 = Array::create_blocking(rt1, s1, "shard", m);
  const Array a2 = Array::open_blocking(rt2, s2, "shard");
  // Runtime 1 caches the (empty) shard's state; runtime 2 writes.
  CHECK(a1.read_blocking(Region::parse("0:2", m.shape)).as<std::int32_t>()[0] == 0);
  // Each thread reports its error instead of terminating the process.
  auto writer = [](Array a, std::uint64_t first, std::string* error) {
    try {
      for (std::uint64_t i = first; i < 400; i += 2) {
        const auto v = static_cast<std::int32_t>(i + 1);
        a.write_blocking(Region{{i}, {i + 1}}, std::as_bytes(std::span(&v, 1)));
      }
    } catch (const std::exception& e) {
      *error = e.what();
    }
  };
  std::string e1, e2;
  std::thread t1(writer, a1, 0, &e1), t2(writer, a2, 1, &e2);
  t1.join();
  t2.join();
  CHECK(e1 == "");
  CHECK(e2 == "");
  std::vector<std::int32_t> want(400);
  std::iota(want.begin(), want.end(), 1);
  for (const Array* a : {&a1, &a2}) {
    const auto got = a->read_blocking(Region::all(m.shape));
    CHECK(std::equal(want.begin(), want.end(), got.as<std::int32_t>().begin()));
    const auto part = a->read_blocking(Region::parse("390:393", m.shape));
    CHECK(std::vector<std::int32_t>(part.as<std::int32_t>().begin(), part.as<std::int32_t>().end()) ==
          std::vector<std::int32_t>{391, 392, 393});
  }
  // Runtime 2 clears a region through its own index; runtime 1 sees it.
  const std::vector<std::int32_t> zeros(40);
  a2.write_blocking(Region::parse("0:40", m.shape), std::as_bytes(std::span(zeros)));
  CHECK(a1.read_blocking(Region::parse("20:22", m.shape)).as<std::int32_t>()[1] == 0);
  S3Harness(o).cleanup();
}

TEST_CASE("Group::members and create with overwrite on S3, with more keys than one listing page",
          "[s3][rgw][array]") {
  REQUIRE_RGW(r);
  Runtime rt({.codec_threads = 1});
  auto o = options(r, "hierarchy");
  o.max_keys = 3;  // every listing below takes several pages
  auto s3 = std::make_shared<S3Store>(rt.io_executor(), o);
  ArrayMetadata m;
  m.shape = {8};
  m.chunk_shape = {2};
  m.data_type = DataTypeKind::float32;
  m.codecs = json::parse(R"([{"name":"bytes","configuration":{"endian":"little"}}])");
  const Group root = Group::create_blocking(rt, s3, "");
  const std::vector<float> ones(8, 1.5f);
  Array::create_blocking(rt, s3, "a", m).write_blocking(Region::all(m.shape), std::as_bytes(std::span(ones)));
  Group::create_blocking(rt, s3, "g");
  ArrayMetadata v2 = m;
  v2.zarr_format = 2;
  v2.chunk_key_encoding = {ChunkKeyEncoding::Kind::v2, '.'};
  Array::create_blocking(rt, s3, "g/b", v2).write_blocking(Region::all(m.shape), std::as_bytes(std::span(ones)));
  Group::create_blocking(rt, s3, "g/h", json::object(), 2);
  REQUIRE(run_on(rt, s3->list("")).size() == 1 + 5 + 1 + 5 + 1);  // > 3 pages

  const std::vector<NodeEntry> all{{"a", NodeType::array, 3, false},
                                   {"g", NodeType::group, 3, false},
                                   {"g/b", NodeType::array, 2, false},
                                   {"g/h", NodeType::group, 2, false}};
  CHECK(root.members_blocking(true) == all);
  CHECK(root.members_blocking() == std::vector<NodeEntry>{all[0], all[1]});

  CHECK_THROWS_AS(Array::create_blocking(rt, s3, "a", m), AlreadyExists);
  ArrayMetadata i32 = m;
  i32.data_type = DataTypeKind::int32;
  const auto before = s3->stats().requests;
  const Array a = Array::create_blocking(rt, s3, "a", i32, CreateMode::overwrite);
  // 2 listing pages of a/ (5 keys), 2 DeleteObjects (the metadata first,
  // then the 4 chunks), 1 PutObject: not one DeleteObject per key; and
  // first 2 GETs looking for a consolidated copy to update (the root's
  // zarr.json, its .zmetadata), then 1 HEAD finding the parent group (the
  // root's zarr.json).
  CHECK(s3->stats().requests - before == 8);
  CHECK(run_on(rt, s3->list("a/")) == Strings{"a/zarr.json"});
  std::vector<std::int32_t> back(8, -1);
  a.read_blocking(Region::all(a.shape()), std::as_writable_bytes(std::span(back)));
  CHECK(back == std::vector<std::int32_t>(8, 0));  // the fill value, not 1069547520
  CHECK(root.members_blocking(true) == all);

  // Consolidated metadata: written from the listing, updated by a create
  // with a conditional PUT (If-Match on the copy's ETag), read in one GET.
  root.consolidate_blocking();
  Array::create_blocking(rt, s3, "g/new", m);
  const auto before_open = s3->stats().requests;
  const Group again = Group::open_blocking(rt, s3, "");
  auto with_new = all;
  with_new.insert(with_new.begin() + 4, NodeEntry{"g/new", NodeType::array, 3, false});
  CHECK(again.members_blocking(true) == with_new);
  CHECK(s3->stats().requests - before_open == 1);

  Group::create_blocking(rt, s3, "", json::object(), 3, CreateMode::overwrite);
  CHECK(run_on(rt, s3->list("")) == Strings{"zarr.json"});
  run_on(rt, s3->erase("zarr.json"));
}
