// HttpStore: the shared conformance suite's reads against nginx (Debian's
// nginx-light serving a temp dir, plain and TLS), and the HTTP client's
// behaviour under faults injected by tests/fault_server.hpp: ranges a server
// ignores or gets wrong, error statuses, resets, truncated bodies, stalls,
// keep-alive, the per-host concurrency bound, and content codings a server
// sends although the client asked for identity (case B39).
#include <dlfcn.h>
#include <fcntl.h>
#include <netdb.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/use_future.hpp>
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <zarrcoro/array.hpp>
#include <zarrcoro/error.hpp>
#include <zarrcoro/runtime.hpp>
#include <zarrcoro/store/filesystem.hpp>
#include <zarrcoro/store/counting.hpp>
#include <zarrcoro/store/http.hpp>

#ifdef ZARRCORO_HAVE_EXAMPLE_SERVER
#include <future>

#include "server.hpp"  // examples/server
#endif

#include "fault_server.hpp"
#include "store/http_client.hpp"
#include "store_conformance.hpp"
#include "support.hpp"

extern char** environ;

namespace fs = std::filesystem;
using namespace zarrcoro;
using namespace std::chrono_literals;
using test::Fault;
using test::FaultServer;
using test::StoreHarness;
using test::scaled;
using Strings = std::vector<std::string>;
using Clock = std::chrono::steady_clock;

namespace {

void spit(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << text;
}

std::string str(const Bytes& b) {
  return {reinterpret_cast<const char*>(b.data()), b.size()};
}

std::string random_text(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string s(n, '\0');
  for (auto& c : s) c = char(rng() & 0xff);
  return s;
}

bool on_path(const std::string& program) {
  for (const char* dir : {"/usr/sbin", "/usr/bin", "/sbin", "/bin", "/usr/local/bin", "/usr/local/sbin"})
    if (::access((std::string(dir) + "/" + program).c_str(), X_OK) == 0) return true;
  return false;
}

// Skips (WARN) or, under CI, fails when a required tool is missing.
#define REQUIRE_TOOL(cond, what)                                           \
  if (!(cond)) {                                                           \
    if (std::getenv("CI")) FAIL(what << " is required in CI");             \
    WARN("SKIPPED: " << what << " is not available here");                 \
    return;                                                                \
  }

// A free loopback port (bound and released; good enough for a test).
std::uint16_t free_port() {
  boost::asio::io_context io;
  boost::asio::ip::tcp::acceptor a(io, {boost::asio::ip::make_address("127.0.0.1"), 0});
  return a.local_endpoint().port();
}

// Runs a program quietly (stdout and stderr to /dev/null); its exit code.
int run_program(const std::vector<std::string>& argv) {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  ::posix_spawn_file_actions_init(&actions);
  ::posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  ::posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
  pid_t pid = 0;
  const int rc = ::posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
  ::posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) return -1;
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// nginx in the foreground (one process) serving <dir>/www on a plain and a
// TLS port of 127.0.0.1, directories answering 404 (try_files).
struct Nginx {
  test::TempDir dir{"http"};
  fs::path www = dir.path / "www";
  std::uint16_t port = 0, tls_port = 0;
  pid_t pid = -1;

  bool start() {
    fs::create_directories(www);
    fs::create_directories(dir.path / "tmp");
    const std::string d = dir.path.string();
    if (run_program({"openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout",
                     d + "/key.pem", "-out", d + "/cert.pem", "-days", "2", "-subj", "/CN=localhost",
                     "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"}) != 0)
      return false;
    for (int attempt = 0; attempt < 5; ++attempt) {
      port = free_port();
      tls_port = free_port();
      std::ofstream(dir.path / "nginx.conf")
          << "daemon off;\nmaster_process off;\nworker_processes 1;\npid " << d << "/nginx.pid;\n"
          << "error_log " << d << "/error.log warn;\nevents { worker_connections 1024; }\n"
          << "http {\n  access_log off;\n  default_type application/octet-stream;\n"
          << "  client_body_temp_path " << d << "/tmp/body;\n  proxy_temp_path " << d << "/tmp/proxy;\n"
          << "  fastcgi_temp_path " << d << "/tmp/fcgi;\n  uwsgi_temp_path " << d << "/tmp/uwsgi;\n"
          << "  scgi_temp_path " << d << "/tmp/scgi;\n  keepalive_requests 100000;\n"
          << "  server {\n    listen 127.0.0.1:" << port << ";\n    listen 127.0.0.1:" << tls_port
          << " ssl;\n    ssl_certificate " << d << "/cert.pem;\n    ssl_certificate_key " << d
          << "/key.pem;\n    root " << www.string() << ";\n    location / { try_files $uri =404; }\n  }\n}\n";
      const std::vector<std::string> argv{"nginx", "-e", d + "/error.log", "-p", d, "-c",
                                          d + "/nginx.conf"};
      std::vector<char*> args;
      for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      const std::string exe = ::access("/usr/sbin/nginx", X_OK) == 0 ? "/usr/sbin/nginx" : "nginx";
      // nginx dies with this process (even if a sanitizer aborts it) and
      // never holds ctest's output pipe open.
      pid = ::fork();
      if (pid == 0) {
        ::prctl(PR_SET_PDEATHSIG, SIGKILL);
        const int devnull = ::open("/dev/null", O_WRONLY);
        ::dup2(devnull, 1);
        ::dup2(devnull, 2);
        ::execvp(exe.c_str(), args.data());
        ::_exit(127);
      }
      if (pid < 0) return false;
      for (int i = 0; i < 100; ++i) {
        if (test::port_answers(port) && test::port_answers(tls_port)) return true;
        int status = 0;
        if (::waitpid(pid, &status, WNOHANG) == pid) break;  // exited (port taken?): try again
        std::this_thread::sleep_for(50ms);
      }
      stop();
    }
    return false;
  }
  void stop() {
    if (pid <= 0) return;
    ::kill(pid, SIGTERM);
    int status = 0;
    ::waitpid(pid, &status, 0);
    pid = -1;
  }
  ~Nginx() { stop(); }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port); }
  std::string tls_url(const std::string& host = "127.0.0.1") const {
    return "https://" + host + ":" + std::to_string(tls_port);
  }
  std::string cert() const { return (dir.path / "cert.pem").string(); }
};

// Reads through an HttpStore, writes (and lists) through a FilesystemStore
// on the directory the HTTP server serves: lets the shared conformance
// suite check every read of the HTTP store.
class ReadThroughHttp : public Store {
 public:
  ReadThroughHttp(std::shared_ptr<HttpStore> http, std::shared_ptr<FilesystemStore> files)
      : http_(std::move(http)), files_(std::move(files)) {}
  // No versions: the ETags of reads and the generations of writes would not
  // compare. Conditions raise UnsupportedError; generations are unknown.
  awaitable<ReadResult> read(std::string key, ReadOptions options) override {
    if (!options.if_equal.unknown()) throw UnsupportedError(key, "if_equal", "read through HTTP: no versions");
    ReadResult r = co_await http_->read(std::move(key), std::move(options));
    r.generation = {};
    co_return r;
  }
  awaitable<std::optional<Generation>> write(std::string key, std::optional<Bytes> value,
                                             WriteOptions options) override {
    if (!options.if_equal.unknown()) throw UnsupportedError(key, "if_equal", "read through HTTP: no versions");
    co_await files_->write(std::move(key), std::move(value), std::move(options));
    co_return Generation{};
  }
  awaitable<std::vector<std::string>> list(std::string prefix) override {
    co_return co_await files_->list(std::move(prefix));
  }
  std::string url() const override { return http_->url(); }

 private:
  std::shared_ptr<HttpStore> http_;
  std::shared_ptr<FilesystemStore> files_;
};

// Short backoffs for the fault tests. The timeouts are budgets that a
// healthy answer must beat, scaled for slow (sanitizer) builds; the faults
// that must trip them (stalls, delays) are longer than any scaled timeout
// by construction.
HttpStoreOptions fast(unsigned attempts = 4) {
  HttpStoreOptions o;
  o.http.max_attempts = attempts;
  o.http.connect_timeout = scaled(2000ms);
  o.http.io_timeout = scaled(500ms);
  o.http.request_timeout = scaled(5000ms);
  o.http.backoff_base = 5ms;
  o.http.backoff_max = 40ms;
  return o;
}

struct HttpHarness : StoreHarness {
  std::shared_ptr<HttpStore> http;
  HttpHarness(const std::string& url, HttpStoreOptions o)
      : StoreHarness([&](boost::asio::any_io_executor io) {
          return std::make_shared<HttpStore>(io, url, std::move(o));
        }),
        http(std::static_pointer_cast<HttpStore>(store)) {}
};

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "<no error>";
}

}  // namespace

// ---------------------------------------------------------------------------
// Against nginx

TEST_CASE("conformance: HttpStore reads over nginx (writes through the served directory)",
          "[http][nginx]") {
  REQUIRE_TOOL(on_path("nginx") && on_path("openssl"), "nginx (nginx-light) and openssl");
  static Nginx* nginx = nullptr;  // one server for all sections
  static std::unique_ptr<Nginx> owner;
  if (!nginx) {
    owner = std::make_unique<Nginx>();
    REQUIRE(owner->start());
    nginx = owner.get();
  }
  static int fresh = 0;
  test::run_store_conformance("http over nginx", [](boost::asio::any_io_executor io) -> std::shared_ptr<Store> {
    const std::string dir = "s" + std::to_string(++fresh);
    auto http = std::make_shared<HttpStore>(io, nginx->url() + "/" + dir);
    auto files = std::make_shared<FilesystemStore>(io, nginx->www / dir);
    return std::make_shared<ReadThroughHttp>(http, files);
  });
}

TEST_CASE("HttpStore over nginx: generations are ETags; conditional reads use If-Match", "[http][nginx]") {
  REQUIRE_TOOL(on_path("nginx") && on_path("openssl"), "nginx (nginx-light) and openssl");
  Nginx nginx;
  REQUIRE(nginx.start());
  spit(nginx.www / "v/k", "first value");
  HttpHarness h(nginx.url() + "/v", {});
  const ReadResult r1 = h.read("k");
  REQUIRE(r1.value);
  REQUIRE_FALSE(r1.generation.unknown());
  CHECK(r1.generation.token.front() == '"');
  const ReadResult part = h.read("k", r1.generation, ByteRange::from(6, 5));
  CHECK_FALSE(part.changed);
  REQUIRE(part.value);
  CHECK(str(*part.value) == "value");
  CHECK(h.read("missing").generation == Generation::absent());
  CHECK(h.read("missing", Generation::absent()).generation == Generation::absent());
  CHECK(h.read("k", Generation::absent()).changed);
  // Replaced (nginx's ETag is mtime and size: another size tells it apart).
  spit(nginx.www / "v/k", "the second value");
  const ReadResult stale = h.read("k", r1.generation, ByteRange::from(0, 3));
  CHECK(stale.changed);
  CHECK_FALSE(stale.value);
  CHECK(h.read("k").generation != r1.generation);
  CHECK(h.read("missing", r1.generation).changed);
}

TEST_CASE("HttpStore over nginx: values, ranges, keep-alive, read-only errors", "[http][nginx]") {
  REQUIRE_TOOL(on_path("nginx") && on_path("openssl"), "nginx (nginx-light) and openssl");
  Nginx nginx;
  REQUIRE(nginx.start());
  const std::string big = random_text(3 << 20, 7);
  spit(nginx.www / "data/a.zarr/zarr.json", "{}");
  spit(nginx.www / "data/a.zarr/c/0/0", big);
  spit(nginx.www / "data/a.zarr/with space/and%percent", "odd");
  HttpHarness h(nginx.url() + "/data/a.zarr/", {});
  CHECK(h.store->url() == nginx.url() + "/data/a.zarr");

  CHECK(h.text("zarr.json") == "{}");
  CHECK(h.text("with space/and%percent") == "odd");  // keys are URI-encoded
  CHECK(h.text("c/0/0") == big);
  CHECK(h.text("c/0/0", ByteRange::from(1 << 20, 5)) == big.substr(1 << 20, 5));
  CHECK(h.text("c/0/0", ByteRange::last(7)) == big.substr(big.size() - 7));
  CHECK_FALSE(h.get("c/0/1").has_value());
  CHECK_FALSE(h.exists("c"));  // a directory is not a value
  CHECK(h.exists("c/0/0"));

  // Everything so far went over one keep-alive connection.
  auto s = h.http->stats();
  CHECK(s.connections == 1);
  CHECK(s.retries == 0);
  CHECK(s.reused == s.attempts - 1);
  CHECK(s.bytes_received >= big.size());

  SECTION("writes, erases and listings fail clearly") {
    try {
      h.set("k", "v");
      FAIL("set succeeded");
    } catch (const StoreError& e) {
      CHECK(e.key() == "k");
      CHECK(e.field() == "read_only");
      CHECK_THAT(e.what(), Catch::Contains("read-only"));
    }
    CHECK_THROWS_AS(h.erase("zarr.json"), StoreError);
    CHECK_THROWS_WITH(h.erase("zarr.json"), Catch::Contains("read-only"));
    CHECK_THROWS_WITH(h.list(""), Catch::Contains("cannot list"));
    CHECK_THROWS_AS(h.set("../k", "v"), InvalidArgument);
    CHECK_THROWS_AS(h.get("a//b"), InvalidArgument);
    CHECK(h.text("zarr.json") == "{}");
  }

  SECTION("TLS with certificate verification") {
    HttpStoreOptions o;
    o.http.ca_file = nginx.cert();
    HttpHarness tls(nginx.tls_url() + "/data/a.zarr", o);
    CHECK(tls.text("zarr.json") == "{}");
    CHECK(tls.text("c/0/0", ByteRange::from(10, 10)) == big.substr(10, 10));
    HttpHarness by_name(nginx.tls_url("localhost") + "/data/a.zarr", o);  // resolved, SNI, DNS SAN
    CHECK(by_name.text("zarr.json") == "{}");

    // An unknown CA: fails at once with the verification error, no retries.
    HttpStoreOptions untrusted = fast(4);
    HttpHarness bad(nginx.tls_url() + "/data/a.zarr", untrusted);
    const auto t0 = Clock::now();
    try {
      bad.get("zarr.json");
      FAIL("an untrusted certificate was accepted");
    } catch (const StoreError& e) {
      CHECK(e.key() == "zarr.json");
      CHECK_THAT(e.what(), Catch::Contains("certificate verify failed"));
      CHECK_THAT(e.what(), Catch::Contains("self-signed") || Catch::Contains("self signed"));
    }
    CHECK(Clock::now() - t0 < scaled(5s));
    CHECK(bad.http->stats().retries == 0);

    // A name the certificate does not carry.
    o.http.connect_to["wrong.test"] = "127.0.0.1";
    HttpHarness wrong(nginx.tls_url("wrong.test") + "/data/a.zarr", o);
    CHECK_THROWS_WITH(wrong.get("zarr.json"), Catch::Contains("certificate verify failed"));

    // Verification off (for self-signed test servers only).
    HttpStoreOptions off;
    off.http.verify_tls = false;
    HttpHarness unchecked(nginx.tls_url() + "/data/a.zarr", off);
    CHECK(unchecked.text("zarr.json") == "{}");
  }
}

#ifdef ZARRCORO_HAVE_EXAMPLE_SERVER
// The project's example server (examples/server), in process on its own
// io_context thread, serving a temp dir.
struct ExampleServer {
  test::TempDir dir{"http"};
  boost::asio::io_context io;
  std::unique_ptr<Runtime> rt;
  std::unique_ptr<server::Server> srv;
  std::thread thread;
  ExampleServer() {
    rt = std::make_unique<Runtime>(io, RuntimeOptions{.codec_threads = 1});
    server::ServerOptions o;
    o.root = dir.path;
    o.listen = "127.0.0.1:0";
    srv = std::make_unique<server::Server>(*rt, o);
    srv->start();
    thread = std::thread([this] { io.run(); });
  }
  ~ExampleServer() {
    std::promise<void> done;
    srv->shutdown([&] {
      done.set_value();
      io.stop();
    });
    done.get_future().wait();
    thread.join();
    srv.reset();
    rt.reset();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(srv->endpoint().port()); }
};

TEST_CASE("conformance: HttpStore reads over the example server (examples/server)", "[http][example-server]") {
  ExampleServer server;  // outlives the harness the suite builds below
  test::run_store_conformance("http over examples/server", [&server](boost::asio::any_io_executor io) -> std::shared_ptr<Store> {
    auto http = std::make_shared<HttpStore>(io, server.url() + "/store");
    auto files = std::make_shared<FilesystemStore>(io, server.dir.path / "store");
    return std::make_shared<ReadThroughHttp>(http, files);
  });
}
#endif

TEST_CASE("HttpStore over nginx reads the shared fixtures exactly as the filesystem does",
          "[http][nginx][fixtures]") {
  REQUIRE_TOOL(on_path("nginx") && on_path("openssl"), "nginx (nginx-light) and openssl");
  ZARRCORO_REQUIRE_SHARED(shared);
  Nginx nginx;
  nginx.www = shared / "fixtures";  // served read-only, as it is
  REQUIRE(nginx.start());
  Runtime rt({.codec_threads = 2});
  int same = 0, same_error = 0;
  for (const char* folder : {"zarrs", "zarrs_snapshot_data"}) {
    const fs::path dir = shared / "fixtures" / folder;
    if (!fs::exists(dir / "EXPECTED.json")) continue;
    const auto expected = nlohmann::json::parse(std::ifstream(dir / "EXPECTED.json"));
    auto local = std::make_shared<FilesystemStore>(rt.io_executor(), dir);
    auto remote = std::make_shared<HttpStore>(rt.io_executor(), nginx.url() + "/" + folder);
    for (const auto& [path, spec] : expected.items()) {
      if (!fs::exists(dir / path / "zarr.json")) continue;
      INFO(folder << "/" << path);
      std::optional<NdArray> want;
      std::optional<Errc> want_error;
      try {
        auto a = Array::open_blocking(rt, local, path);
        want = a.read_blocking(Region::all(a.shape()));
      } catch (const Error& e) {
        want_error = e.code();
      }
      try {
        auto a = Array::open_blocking(rt, remote, path);
        const NdArray got = a.read_blocking(Region::all(a.shape()));
        REQUIRE(want.has_value());
        CHECK(got.shape == want->shape);
        CHECK((got.data == want->data));
        ++same;
      } catch (const Error& e) {
        INFO(e.what());
        REQUIRE(want_error.has_value());
        CHECK(e.code() == *want_error);
        ++same_error;
      }
    }
  }
  WARN("fixtures read over HTTP: " << same << " identical to the filesystem, " << same_error
                                   << " failing identically (unsupported)");
  CHECK(same >= 50);
}

// ---------------------------------------------------------------------------
// Against the fault-injecting server

TEST_CASE("HttpStore: a group's members need consolidated metadata (UnsupportedError saying so); arrays open",
          "[http][faults]") {
  FaultServer server;
  server.put("/h/zarr.json", R"({"zarr_format": 3, "node_type": "group"})");
  server.put("/h/a/zarr.json", R"({"zarr_format": 3, "node_type": "array", "shape": [2], "data_type": "uint8",
      "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2]}},
      "chunk_key_encoding": {"name": "default"}, "fill_value": 7, "codecs": [{"name": "bytes"}]})");
  Runtime rt;
  auto http = std::make_shared<HttpStore>(rt.io_executor(), server.url() + "/h", fast());
  const Group g = Group::open_blocking(rt, http, "");
  try {
    g.members_blocking();
    FAIL("listed the members of a group over HTTP");
  } catch (const UnsupportedError& e) {
    CHECK(e.field() == "list");
    CHECK(std::string(e.what()).find("or consolidated metadata in the group (none was found)") != std::string::npos);
  }
  CHECK(Array::open_blocking(rt, http, "a").read_blocking(Region::all({2})).data == Bytes{std::byte{7}, std::byte{7}});
  // Creating needs no listing to refuse: the node is found by its metadata.
  ArrayMetadata m = Array::open_blocking(rt, http, "a").metadata();
  CHECK_THROWS_AS(Array::create_blocking(rt, http, "a", m), AlreadyExists);
}

TEST_CASE("HttpStore: a v2 hierarchy with .zmetadata lists and opens from that one document", "[http][faults]") {
  FaultServer server;
  server.put("/h/.zmetadata", R"({"zarr_consolidated_format": 1, "metadata": {
      ".zgroup": {"zarr_format": 2}, ".zattrs": {"title": "t"},
      "g/.zgroup": {"zarr_format": 2},
      "g/a/.zarray": {"zarr_format": 2, "shape": [3], "chunks": [2], "dtype": "|u1", "compressor": null,
                      "fill_value": 9, "filters": null, "order": "C"},
      "g/a/.zattrs": {"units": "m"}}})");
  server.put("/h/g/a/0", std::string("\x01\x02", 2));
  Runtime rt;
  auto counting = std::make_shared<CountingStore>(std::make_shared<HttpStore>(rt.io_executor(), server.url() + "/h", fast()));
  const Group root = Group::open_blocking(rt, counting, "");
  CHECK(root.attributes() == nlohmann::json{{"title", "t"}});
  CHECK(counting->counts().gets == 2);  // zarr.json (404), .zmetadata
  const auto all = root.members_blocking(true);
  REQUIRE(all.size() == 2);
  CHECK((all[0].name == "g" && all[0].node_type == NodeType::group && all[0].zarr_format == 2));
  CHECK((all[1].name == "g/a" && all[1].node_type == NodeType::array && all[1].zarr_format == 2));
  const Array a = root.open_group_blocking("g").open_array_blocking("a");
  CHECK(a.metadata().attributes == nlohmann::json{{"units", "m"}});
  CHECK(counting->counts().gets == 2);
  CHECK(a.read_blocking(Region::all({3})).data == Bytes{std::byte{1}, std::byte{2}, std::byte{9}});
}

TEST_CASE("HttpStore: a server that ignores Range is sliced locally", "[http][faults]") {
  FaultServer server;
  const std::string value = "0123456789";
  server.put("/v", value);
  server.put("/e", "");
  server.set_default(Fault::ignore_range);
  server.set_chunked(GENERATE(false, true));
  HttpHarness h(server.url(), fast());
  constexpr auto max = std::numeric_limits<std::uint64_t>::max();
  CHECK(h.text("v") == value);
  CHECK(h.text("v", ByteRange::from(2, 3)) == "234");
  CHECK(h.text("v", ByteRange::from(8, 5)) == "89");
  CHECK(h.text("v", ByteRange::from(3, max)) == "3456789");
  CHECK(h.text("v", ByteRange::from(10, 1)) == "");
  CHECK(h.text("v", ByteRange::from(max, max)) == "");
  CHECK(h.text("v", ByteRange::last(3)) == "789");
  CHECK(h.text("v", ByteRange::last(20)) == value);
  CHECK(h.text("v", ByteRange::last(0)) == "");
  CHECK(h.text("v", ByteRange::from(4, 0)) == "");
  CHECK(h.text("e", ByteRange::from(0, 4)) == "");
  CHECK(h.text("missing", ByteRange::from(0, 4)) == "<missing>");
  CHECK(h.text("missing", ByteRange::from(0, 0)) == "<missing>");
  // The requests did carry the Range header.
  bool ranged = false;
  for (const auto& r : server.requests()) ranged |= r.range == "bytes=2-4";
  CHECK(ranged);
}

TEST_CASE("HttpStore: a whole-body answer above the limit fails loudly", "[http][faults]") {
  FaultServer server;
  server.put("/big", random_text(1 << 20, 3));
  server.set_default(Fault::ignore_range);
  const bool chunked = GENERATE(false, true);
  server.set_chunked(chunked);
  INFO((chunked ? "chunked" : "with Content-Length"));
  auto o = fast();
  o.max_full_body = 64 << 10;
  HttpHarness h(server.url(), o);
  try {
    h.get("big", ByteRange::from(0, 10));
    FAIL("a 1 MiB whole body was accepted for a 10-byte range");
  } catch (const StoreError& e) {
    CHECK(e.key() == "big");
    CHECK_THAT(e.what(), Catch::Contains("ignored the Range"));
    CHECK_THAT(e.what(), Catch::Contains("65536"));
  }
  CHECK(server.request_count() == 1);  // not retried
  // Whole-value reads are not limited by it.
  CHECK(h.get("big")->size() == std::size_t(1 << 20));
}

TEST_CASE("HttpStore: a 206 with another range is an error, never wrong data", "[http][faults]") {
  FaultServer server;
  server.put("/v", "0123456789");
  server.set_default(Fault::wrong_range);
  HttpHarness h(server.url(), fast());
  for (const ByteRange r : {ByteRange::from(2, 3), ByteRange::from(0, 4), ByteRange::last(3)}) {
    try {
      const auto v = h.get("v", r);
      FAIL("got '" << (v ? str(*v) : "<missing>") << "' for a wrong range");
    } catch (const StoreError& e) {
      CHECK(e.field() == "Content-Range");
      CHECK_THAT(e.what(), Catch::Contains("another range"));
    }
  }
  server.set_default(Fault::none);
  CHECK(h.text("v", ByteRange::from(2, 3)) == "234");
}

TEST_CASE("HttpStore: 5xx and 429 are retried with backoff", "[http][faults]") {
  FaultServer server;
  const std::string value = random_text(100000, 5);
  server.put("/k", value);
  HttpHarness h(server.url(), fast(4));

  SECTION("then success") {
    server.inject(Fault::status_500);
    server.inject(Fault::status_503);
    server.inject(Fault::status_429);
    CHECK(h.text("k") == value);
    CHECK(server.request_count() == 4);
    CHECK(h.http->stats().retries == 3);
    server.inject(Fault::status_503, 2, "HEAD");
    CHECK(h.exists("k"));
  }
  SECTION("until the attempts run out") {
    server.set_default(Fault::status_503);
    try {
      h.get("k");
      FAIL("succeeded against a server answering 503");
    } catch (const StoreError& e) {
      CHECK(e.key() == "k");
      CHECK(e.field() == "HTTP 503");
      CHECK_THAT(e.what(), Catch::Contains("503 Service Unavailable") && Catch::Contains("4 attempts"));
    }
    CHECK(server.request_count() == 4);
  }
}

TEST_CASE("HttpStore: resets, early closes and truncated bodies are retried", "[http][faults]") {
  const Fault fault = GENERATE(Fault::reset_before_response, Fault::close_before_response,
                               Fault::reset_mid_body, Fault::truncate_body);
  INFO("fault " << int(fault));
  FaultServer server;
  const std::string value = random_text(200000, 9);
  server.put("/k", value);
  HttpHarness h(server.url(), fast(4));
  server.inject(fault, 3);
  CHECK(h.text("k") == value);
  CHECK(server.faults_left() == 0);
  server.inject(fault, 3);
  CHECK(h.text("k", ByteRange::from(1000, 50000)) == value.substr(1000, 50000));
  server.inject(fault, 3);
  CHECK(h.exists("k"));

  server.set_default(fault);
  try {
    h.get("k");
    FAIL("succeeded against a server that always fails");
  } catch (const StoreError& e) {
    CHECK(e.key() == "k");
    CHECK_THAT(e.what(), Catch::Contains("gave up after 4 attempts"));
  }
}

TEST_CASE("HttpStore: stalls time out; no request hangs past its timeout", "[http][faults]") {
  FaultServer server;
  server.put("/k", random_text(100000, 11));
  const Fault fault = GENERATE(Fault::stall_before_response, Fault::stall_mid_body);
  INFO("fault " << int(fault));
  auto o = fast(3);  // a stall never ends: each attempt takes io_timeout
  HttpHarness h(server.url(), o);

  SECTION("every attempt stalls: a timeout error after 3 attempts") {
    server.set_default(fault);
    const auto t0 = Clock::now();
    try {
      h.get("k");
      FAIL("succeeded against a stalled server");
    } catch (const StoreError& e) {
      CHECK(e.key() == "k");
      CHECK_THAT(e.what(), Catch::Contains("timed out") && Catch::Contains("3 attempts"));
    }
    const auto took = Clock::now() - t0;
    CHECK(took >= 3 * o.http.io_timeout);
    CHECK(took < 3 * o.http.io_timeout + 2 * o.http.backoff_max + scaled(3000ms));
    CHECK(server.request_count() == 3);
  }
  SECTION("one stall, then an answer") {
    server.inject(fault);
    CHECK(h.get("k")->size() == 100000u);
  }
}

TEST_CASE("HttpStore: request_timeout bounds a slow attempt", "[http][faults]") {
  FaultServer server;
  server.put("/k", "v");
  auto o = fast(2);
  o.http.request_timeout = scaled(300ms);
  o.http.io_timeout = 100 * o.http.request_timeout;
  server.set_delay(100 * o.http.request_timeout);  // ends only when the server stops
  HttpHarness h(server.url(), o);
  const auto t0 = Clock::now();
  CHECK_THROWS_WITH(h.get("k"), Catch::Contains("timed out"));
  CHECK(Clock::now() - t0 < 2 * o.http.request_timeout + scaled(4000ms));  // not 2 x the delay
}

TEST_CASE("HttpStore: random faults never give wrong data", "[http][faults]") {
  FaultServer server;
  const std::string value = random_text(300000, 13);
  server.put("/k", value);
  std::mt19937 rng(42);
  const Fault faults[] = {Fault::status_500, Fault::status_503, Fault::reset_before_response,
                          Fault::reset_mid_body, Fault::truncate_body, Fault::close_before_response,
                          Fault::ignore_range, Fault::stall_mid_body};
  // (Fault::wrong_range is left out: it fails a read at once, by design; see above.)
  for (int i = 0; i < 1500; ++i)
    server.inject(rng() % 3 == 0 ? faults[rng() % std::size(faults)] : Fault::none);
  // stall_mid_body never ends, so any io_timeout trips it; a healthy answer
  // gets a generous, scaled budget (a read fails only when 8 faults hit it).
  auto o = fast(8);
  o.http.io_timeout = scaled(1000ms);
  HttpHarness h(server.url(), o);

  constexpr int n = 300;
  std::vector<ByteRange> ranges;
  for (int i = 0; i < n; ++i) {
    const auto a = rng() % value.size();
    ranges.push_back(i % 3 == 0 ? ByteRange::last(rng() % 5000 + 1) : ByteRange::from(a, rng() % 20000 + 1));
  }
  std::vector<std::optional<Bytes>> got(n);
  std::vector<std::string> errors(n);
  auto read_one = [](std::shared_ptr<HttpStore> s, ByteRange r, std::optional<Bytes>* out,
                     std::string* err) -> awaitable<void> {
    try {
      *out = co_await s->get("k", r);
    } catch (const StoreError& e) {
      *err = e.what();
    }
  };
  std::vector<awaitable<void>> jobs;
  for (int i = 0; i < n; ++i) jobs.push_back(read_one(h.http, ranges[i], &got[i], &errors[i]));
  test::run_all(h.io, std::move(jobs), 2);

  int ok = 0, failed = 0, wrong = 0;
  for (int i = 0; i < n; ++i) {
    if (!errors[i].empty()) {
      ++failed;
      continue;
    }
    REQUIRE(got[i].has_value());
    const auto& r = ranges[i];
    const std::string want = r.kind == ByteRange::Kind::suffix
                                 ? value.substr(value.size() - std::min<std::size_t>(r.length, value.size()))
                                 : value.substr(r.offset, r.length);
    if (str(*got[i]) == want) ++ok;
    else ++wrong;
  }
  INFO("ok " << ok << ", failed " << failed << ", retries " << h.http->stats().retries);
  CHECK(wrong == 0);
  CHECK(ok >= n - 5);  // 8 attempts: a read fails only if 8 faults hit it in a row
  CHECK(h.http->stats().retries > 30);
}

TEST_CASE("HttpStore: keep-alive connections are pooled and replaced when dropped", "[http][faults]") {
  FaultServer server;
  server.put("/k", "value");
  HttpHarness h(server.url(), fast());
  SECTION("sequential requests share one connection") {
    for (int i = 0; i < 20; ++i) CHECK(h.text("k") == "value");
    CHECK(server.connections() == 1);
    CHECK(h.http->stats().reused == 19);
  }
  SECTION("a connection the server closed is replaced without a retry") {
    server.set_drop_after_response(true);
    for (int i = 0; i < 5; ++i) CHECK(h.text("k") == "value");
    INFO("stats: attempts " << h.http->stats().attempts << " reused " << h.http->stats().reused);
    CHECK(server.connections() == 5);
    CHECK(h.http->stats().retries == 0);
    CHECK(server.request_count() == 5);
  }
}

TEST_CASE("HttpStore: requests in flight per host are bounded", "[http][faults]") {
  FaultServer server;
  server.put("/k", "value");
  server.set_delay(40ms);
  auto o = fast();
  o.http.max_connections_per_host = 3;
  HttpHarness h(server.url(), o);
  std::vector<std::optional<Bytes>> got(24);
  auto read_one = [](std::shared_ptr<HttpStore> s, std::optional<Bytes>* out) -> awaitable<void> {
    *out = co_await s->get("k");
  };
  std::vector<awaitable<void>> jobs;
  for (auto& g : got) jobs.push_back(read_one(h.http, &g));
  test::run_all(h.io, std::move(jobs), 2);
  for (auto& g : got) CHECK((g && str(*g) == "value"));
  CHECK(server.max_in_flight() == 3);
  CHECK(server.connections() == 3);
}

TEST_CASE("HttpStore: statuses, redirects, URLs", "[http][faults]") {
  FaultServer server;
  server.put("/base/a%20b/c%25d", "encoded");  // the raw request target
  server.put("/base/v", "value");
  server.answer("/base/gone", 410);
  server.answer("/base/secret", 403);
  server.answer("/base/moved", 302, {{"Location", "/base/v"}});
  server.answer("/base/rel", 307, {{"Location", "v"}});
  server.answer("/base/loop", 301, {{"Location", "/base/loop"}});
  HttpHarness h(server.url() + "/base", fast());
  CHECK(h.text("a b/c%d") == "encoded");
  CHECK(server.requests().back().target == "/base/a%20b/c%25d");
  CHECK(h.text("gone") == "<missing>");
  CHECK_FALSE(h.exists("gone"));
  CHECK_FALSE(h.exists("nothing"));
  try {
    h.get("secret");
    FAIL("403 was not an error");
  } catch (const StoreError& e) {
    CHECK(e.field() == "HTTP 403");
    CHECK(e.key() == "secret");
    CHECK_THAT(e.what(), Catch::Contains("403 Forbidden"));
  }
  CHECK(h.text("moved") == "value");
  CHECK(h.text("rel", ByteRange::from(1, 2)) == "al");
  CHECK(h.exists("moved"));
  CHECK_THROWS_WITH(h.get("loop"), Catch::Contains("redirects"));

  boost::asio::io_context io;
  for (const char* bad : {"ftp://host/x", "http://", "http://h:99999/", "http://user@h/x", "http://h:x/"}) {
    INFO(bad);
    CHECK_THROWS_AS(HttpStore(io.get_executor(), bad), InvalidArgument);
  }
  CHECK(HttpStore(io.get_executor(), "HTTP://Example.COM:80/a/").url() == "http://example.com/a");
  CHECK(HttpStore(io.get_executor(), "https://[::1]:8443").url() == "https://[::1]:8443");
}

// ---------------------------------------------------------------------------
// Answers that once gave wrong data, errors or hangs (from a cold review of
// the HTTP client); each test fails without its fix.

TEST_CASE("HttpStore: a 200 that carries a Content-Range is an error, never sliced again (was: wrong data)",
          "[http][faults][regression]") {
  FaultServer server;
  server.answer("/r", 200, {{"Content-Range", "bytes 2-4/10"}}, "234");  // a range labelled 200
  HttpHarness h(server.url(), fast());
  try {
    h.get("r", ByteRange::from(2, 3));
    FAIL("a 200 with a Content-Range was taken as the whole value");
  } catch (const StoreError& e) {
    CHECK(e.field() == "Content-Range");
    CHECK(e.key() == "r");
    CHECK_THAT(e.what(), Catch::Contains("bytes 2-4/10"));
  }
  server.put("/v", "0123456789");  // a whole value (no Content-Range) is still sliced
  server.inject(Fault::ignore_range);
  CHECK(h.text("v", ByteRange::from(2, 3)) == "234");
}

TEST_CASE("HttpStore: a 206 of unknown length must be the exact range; a suffix needs the length "
          "(was: short ranges and a suffix of the first bytes taken)",
          "[http][faults][regression]") {
  FaultServer server;
  server.answer("/short", 206, {{"Content-Range", "bytes 0-4/*"}}, "01234");
  server.answer("/head", 206, {{"Content-Range", "bytes 0-2/*"}}, "012");
  server.answer("/exact", 206, {{"Content-Range", "bytes 3-5/*"}}, "345");
  HttpHarness h(server.url(), fast());
  auto field_of = [&](const std::string& key, ByteRange r) {
    try {
      const auto v = h.get(key, r);
      return "<value '" + std::string(reinterpret_cast<const char*>(v->data()), v->size()) + "'>";
    } catch (const StoreError& e) {
      return e.field() + ": " + e.what();
    }
  };
  CHECK_THAT(field_of("short", ByteRange::from(0, 10)),
             Catch::StartsWith("Content-Range") && Catch::Contains("less than requested"));
  CHECK_THAT(field_of("head", ByteRange::last(3)),
             Catch::StartsWith("Content-Range") && Catch::Contains("suffix answer without the value's length"));
  CHECK(field_of("exact", ByteRange::from(3, 3)) == "<value '345'>");
}

TEST_CASE("HttpStore: a 412 to a read without a condition is an error (was: read as a missing key, so fill values)",
          "[http][faults][regression]") {
  FaultServer server;
  server.answer("/k", 412, {}, "blocked by a proxy");
  HttpHarness h(server.url(), fast());
  try {
    h.get("k");
    FAIL("a 412 without a condition was a missing key");
  } catch (const StoreError& e) {
    CHECK(e.field() == "HTTP 412");
  }
  CHECK_THROWS_AS(h.read("k", Generation::absent()), StoreError);  // no If-Match was sent for absence either
}

TEST_CASE("HttpStore: an ETag marked as one that may repeat gives a generation that may repeat (was: a shard index "
          "cached by the example server's tag for another program's file, which a later file got again)",
          "[http][faults][regression]") {
  FaultServer server;
  server.answer("/marked", 200, {{"ETag", "\"1f-4;may-repeat\""}}, "AAAA");
  server.answer("/plain", 200, {{"ETag", "\"1f-4\""}}, "AAAA");
  server.answer("/weak", 200, {{"ETag", "W/\"1f-4;may-repeat\""}}, "AAAA");
  HttpHarness h(server.url(), fast());
  const ReadResult marked = h.read("marked");
  CHECK(marked.generation.token == "\"1f-4;may-repeat\"");
  CHECK(marked.generation.may_repeat);
  const ReadResult plain = h.read("plain");
  CHECK(plain.generation.token == "\"1f-4\"");
  CHECK_FALSE(plain.generation.may_repeat);
  CHECK(h.read("weak").generation.unknown());
}

TEST_CASE("HttpStore: a redirect to another origin drops the store's own headers; the same origin keeps them "
          "(was: Authorization sent to any host)",
          "[http][faults][regression]") {
  FaultServer origin, other;
  other.put("/k", "there");
  origin.put("/here", "here");
  origin.answer("/away", 302, {{"Location", other.url() + "/k"}});
  origin.answer("/AWAY", 302, {{"Location", "HTTP://127.0.0.1:" + std::to_string(other.port()) + "/k"}});
  origin.answer("/scheme-relative", 302, {{"Location", "//127.0.0.1:" + std::to_string(other.port()) + "/k"}});
  origin.answer("/near", 302, {{"Location", "/here"}});
  auto o = fast();
  o.headers = {{"Authorization", "Bearer for-the-origin-only"}};
  HttpHarness h(origin.url(), o);
  for (const char* key : {"away", "AWAY", "scheme-relative"}) {
    INFO(key);
    other.clear_log();
    CHECK(h.text(key) == "there");
    REQUIRE(other.requests().size() == 1);
    CHECK(other.requests()[0].authorization == "<none>");
  }
  CHECK(origin.requests().back().authorization == "Bearer for-the-origin-only");
  origin.clear_log();
  CHECK(h.text("near") == "here");
  REQUIRE(origin.requests().size() == 2);
  CHECK(origin.requests()[1].authorization == "Bearer for-the-origin-only");
  // A Location that is no URL is a StoreError on field Location, naming the key.
  origin.answer("/bad", 302, {{"Location", "http://h:99999/x"}});
  try {
    h.get("bad");
    FAIL("a redirect to a bad port was followed");
  } catch (const StoreError& e) {
    CHECK(e.key() == "bad");
    CHECK(e.field() == "Location");
    CHECK_THAT(e.what(), Catch::Contains("bad port '99999'"));
  }
}

TEST_CASE("HttpStore: interim 1xx answers are skipped (was: a 103 Early Hints failed the read)",
          "[http][faults][regression]") {
  FaultServer server;
  server.put("/v", "value");
  HttpHarness h(server.url(), fast(1));
  server.inject(Fault::interim_103);
  CHECK(h.text("v") == "value");
  server.inject(Fault::interim_103);
  CHECK(h.text("v", ByteRange::from(1, 3)) == "alu");
  CHECK(h.text("v") == "value");  // the connection is still in step
  CHECK(server.connections() == 1);
}

TEST_CASE("HttpStore: a pooled connection the server sent stray bytes on is not reused "
          "(was: the next request failed with 'bad version')",
          "[http][faults][regression]") {
  FaultServer server;
  server.put("/v", "value");
  HttpHarness h(server.url(), fast(1));  // one attempt: a desynchronized connection would fail the read
  for (const char* method : {"GET", "HEAD"}) {
    INFO(method);
    server.inject(Fault::stray_bytes_after, 1, method);  // a CRLF after a GET; the body after a HEAD
    if (std::string(method) == "GET") CHECK(h.text("v") == "value");
    else CHECK(h.exists("v"));
    std::this_thread::sleep_for(scaled(300ms));  // the stray bytes arrive while the connection is idle
    CHECK(h.text("v") == "value");
  }
  CHECK(server.connections() == 3);  // each connection with stray bytes was dropped
}

namespace {

// Name lookups of kHangingHost block until the test lets them go (for the
// test below); every other name resolves as usual.
constexpr const char* kHangingHost = "hangs.zarrcoro.test";
std::mutex lookup_mu;
std::condition_variable lookup_cv;
bool lookups_released = false;

}  // namespace

extern "C" int getaddrinfo(const char* node, const char* service, const struct addrinfo* hints,
                           struct addrinfo** res) {
  if (node && std::string_view(node) == kHangingHost) {
    std::unique_lock lock(lookup_mu);
    lookup_cv.wait_for(lock, std::chrono::seconds(120), [] { return lookups_released; });
    return EAI_AGAIN;
  }
  using Fn = int (*)(const char*, const char*, const struct addrinfo*, struct addrinfo**);
  static const auto next = reinterpret_cast<Fn>(::dlsym(RTLD_NEXT, "getaddrinfo"));
  return next(node, service, hints, res);
}

TEST_CASE("HttpStore: connect_timeout bounds a name lookup that hangs (was: the request waited for the lookup)",
          "[http][faults][regression]") {
  bool released_first = false;
  {
    // An io_context that runs on (a harness's run would wait for the lookup's work).
    boost::asio::io_context io;
    auto work = boost::asio::make_work_guard(io);
    std::thread runner([&io] { io.run(); });
    auto o = fast(1);
    o.http.connect_timeout = scaled(300ms);
    auto store = std::make_shared<HttpStore>(io.get_executor(), std::string("http://") + kHangingHost + ":8080", o);
    auto got = boost::asio::co_spawn(io, store->get("k"), boost::asio::use_future);
    try {
      got.get();
      FAIL("a lookup that never ends gave a value");
    } catch (const StoreError& e) {
      CHECK_THAT(e.what(), Catch::Contains("resolving 'hangs.zarrcoro.test' timed out"));
    }
    {
      std::lock_guard lock(lookup_mu);
      released_first = lookups_released;  // the request ended while the lookup still hung
      lookups_released = true;
    }
    lookup_cv.notify_all();
    store.reset();
    work.reset();
    runner.join();
  }
  CHECK_FALSE(released_first);
}

TEST_CASE("HttpStore: nothing listening fails after the attempts, quickly", "[http][faults]") {
  std::string url;
  {
    FaultServer gone;
    url = gone.url();
  }
  HttpHarness h(url, fast(3));
  const auto t0 = Clock::now();
  try {
    h.get("k");
    FAIL("connected to a closed port");
  } catch (const StoreError& e) {
    CHECK(e.key() == "k");
    CHECK_THAT(e.what(), Catch::Contains("cannot connect") && Catch::Contains("3 attempts"));
  }
  CHECK(Clock::now() - t0 < scaled(5s));
}

// ---------------------------------------------------------------------------
// Content codings (case B39): a server that answers with Content-Encoding
// gzip although the client asked for identity. The coded bytes must never
// reach the codec pipeline as the value.

namespace {

// The StoreError a get raises ("<no error>" when it returns data instead).
std::string coding_error(HttpHarness& h, const std::string& key, ByteRange r = {}) {
  try {
    const auto v = h.get(key, r);
    return "<no error: " + (v ? "'" + test::to_hex(*v) + "'" : std::string("missing")) + ">";
  } catch (const StoreError& e) {
    if (e.field() != "Content-Encoding") return "field '" + e.field() + "': " + e.what();
    return e.what();
  }
}

}  // namespace

TEST_CASE("b39: a gzip Content-Encoding is decoded, never read as data", "[http][faults][b39]") {
  ZARRCORO_REQUIRE_SHARED(shared);
  const fs::path cases = shared / "cases";
  // 0: every body coded; 1: only chunk keys; 2: only when the request's
  // Accept-Encoding names gzip (the client asks for identity: nothing coded).
  const int mode = GENERATE(0, 1, 2);
  INFO("mode " << mode);
  FaultServer server;
  for (const char* name : {"b39_gzip_small", "b39_gzip_256"}) {
    const fs::path dir = cases / name;
    REQUIRE(fs::exists(dir / "zarr.json"));
    server.put(std::string("/") + name + "/zarr.json", str(test::read_file(dir / "zarr.json")));
    server.put(std::string("/") + name + "/c/0", str(test::read_file(dir / "c" / "0")));
  }
  const Bytes small = test::read_file(cases / "b39_gzip_small" / "c" / "0");
  const Bytes chunk256 = test::read_file(cases / "b39_gzip_256" / "c" / "0");
  REQUIRE(test::to_hex(small) == test::to_hex(test::hex("01 02 03 04")));
  REQUIRE(chunk256.size() == 256);
  // The case's point: coded, the 256-byte chunk is 256 bytes again, so only
  // the header tells the coded bytes from the value.
  CHECK(FaultServer::encode("gzip", str(chunk256)).size() == 256);

  Runtime rt({.codec_threads = 2});
  auto store = std::make_shared<HttpStore>(rt.io_executor(), server.url(), fast());
  for (const auto& [name, want] : {std::pair<std::string, const Bytes*>{"b39_gzip_small", &small},
                                   std::pair<std::string, const Bytes*>{"b39_gzip_256", &chunk256}}) {
    INFO(name);
    server.set_content_encoding("gzip", mode == 1 ? "/" + name + "/c/" : "", mode == 2);
    auto a = Array::open_blocking(rt, store, name);
    const NdArray got = a.read_blocking(Region::all(a.shape()));
    CHECK(got.shape == std::vector<std::uint64_t>{want->size()});
    CHECK(test::to_hex(got.data) == test::to_hex(*want));
  }
  if (mode == 2) CHECK(server.coded_answers() == 0);
  else CHECK(server.coded_answers() >= 2);
  REQUIRE(server.request_count() > 0);
  for (const auto& r : server.requests()) {
    INFO(r.method << " " << r.target);
    CHECK(r.accept_encoding == "identity");
  }
}

TEST_CASE("b39: requests send Accept-Encoding: identity unless the caller sets one", "[http][faults][b39]") {
  FaultServer server;
  server.put("/v", "value");
  {
    HttpHarness h(server.url(), fast());
    CHECK(h.text("v") == "value");
    CHECK(h.text("v", ByteRange::from(1, 2)) == "al");
    CHECK(h.exists("v"));
    CHECK(h.text("missing") == "<missing>");
    REQUIRE(server.request_count() == 4);
    for (const auto& r : server.requests()) {
      INFO(r.method << " " << r.target);
      CHECK(r.accept_encoding == "identity");
    }
  }
  // A caller that accepts gzip gets it, decoded.
  server.clear_log();
  server.set_content_encoding("gzip", "", true);
  auto o = fast();
  o.headers.emplace_back("accept-encoding", "gzip");
  HttpHarness h(server.url(), o);
  CHECK(h.text("v") == "value");
  CHECK(server.coded_answers() == 1);
  REQUIRE(server.request_count() == 1);
  CHECK(server.requests()[0].accept_encoding == "gzip");
}

TEST_CASE("b39: gzip and deflate answers are decoded, whole and sliced from a 200 to a range request",
          "[http][faults][b39]") {
  FaultServer server;
  std::string value = random_text(50000, 11);
  value += std::string(200000, 'z');  // compressible too
  server.put("/v", value);
  server.put("/e", "");
  const std::string coding = GENERATE(as<std::string>{}, "gzip", "x-gzip", "deflate", "GZIP");
  const bool chunked = GENERATE(false, true);
  INFO(coding << (chunked ? ", chunked" : ""));
  server.set_chunked(chunked);
  server.set_content_encoding(coding == "GZIP" ? "gzip" : coding);
  HttpHarness h(server.url(), fast());
  CHECK(h.text("v") == value);
  CHECK(h.text("e") == "");
  CHECK(h.text("missing") == "<missing>");  // the coded 404 body is only a message
  CHECK(h.exists("v"));
  // A server that ignores Range sends the whole coded value: decoded, then sliced.
  server.set_default(Fault::ignore_range);
  CHECK(h.text("v", ByteRange::from(49990, 20)) == value.substr(49990, 20));
  CHECK(h.text("v", ByteRange::last(5)) == "zzzzz");
  CHECK(server.coded_answers() >= 5);
}

TEST_CASE("b39: coding lists, raw deflate and several gzip members are decoded", "[http][faults][b39]") {
  FaultServer server;
  const std::string value = random_text(3000, 12) + std::string(3000, 'a');
  const auto gz = FaultServer::encode("gzip", value);
  server.answer("/list", 200, {{"Content-Encoding", "GZip, identity"}}, gz);
  server.answer("/twice", 200, {{"Content-Encoding", "deflate,gzip"}},
                FaultServer::encode("gzip", FaultServer::encode("deflate", value)));
  server.answer("/raw", 200, {{"Content-Encoding", "deflate"}}, FaultServer::encode("raw-deflate", value));
  server.answer("/members", 200, {{"Content-Encoding", "gzip"}},
                FaultServer::encode("gzip", value.substr(0, 1000)) + FaultServer::encode("gzip", value.substr(1000)));
  server.answer("/identity", 200, {{"Content-Encoding", "identity"}}, value);
  server.answer("/empty-gzip", 200, {{"Content-Encoding", "gzip"}}, FaultServer::encode("gzip", ""));
  HttpHarness h(server.url(), fast());
  for (const char* key : {"list", "twice", "raw", "members", "identity"}) {
    INFO(key);
    CHECK(h.text(key) == value);
  }
  CHECK(h.text("empty-gzip") == "");
}

TEST_CASE("b39: another Content-Encoding fails with StoreError, never data", "[http][faults][b39]") {
  FaultServer server;
  server.put("/k", "01234567");
  const std::string coding = GENERATE(as<std::string>{}, "br", "zstd", "compress", "x-unknown");
  INFO(coding);
  server.set_content_encoding(coding);
  HttpHarness h(server.url(), fast());
  const std::string e = coding_error(h, "k");
  CHECK_THAT(e, Catch::Contains("field 'Content-Encoding'") && Catch::Contains("'" + coding + "'") &&
                    Catch::Contains("key 'k'") && Catch::Contains("not supported"));
  CHECK(server.request_count() == 1);  // not retried
  // With a coded answer to a range request too, and a coding listed after gzip.
  server.set_default(Fault::ignore_range);
  CHECK_THAT(coding_error(h, "k", ByteRange::from(1, 2)), Catch::Contains("'" + coding + "'"));
  server.answer("/both", 200, {{"Content-Encoding", "gzip, " + coding}}, FaultServer::encode("gzip", "x"));
  CHECK_THAT(coding_error(h, "both"), Catch::Contains("field 'Content-Encoding'") && Catch::Contains(coding));
  // An error answer's body is only a message: a missing key stays missing.
  CHECK(h.text("missing") == "<missing>");
  CHECK(h.exists("k"));  // HEAD: no body to decode
}

TEST_CASE("b39: a 206 with a Content-Encoding fails: coded ranges cannot be decoded alone",
          "[http][faults][b39]") {
  FaultServer server;
  const std::string value = random_text(5000, 13);
  server.put("/v", value);
  server.set_content_encoding("gzip");
  HttpHarness h(server.url(), fast());
  for (const ByteRange r : {ByteRange::from(2, 3), ByteRange::from(0, 10), ByteRange::last(3)}) {
    const std::string e = coding_error(h, "v", r);
    CHECK_THAT(e, Catch::Contains("field 'Content-Encoding'") && Catch::Contains("206") &&
                      Catch::Contains("'gzip'") && Catch::Contains("key 'v'"));
  }
  bool ranged = false;
  for (const auto& r : server.requests()) ranged |= r.range == "bytes=2-4";
  CHECK(ranged);
  CHECK(h.text("v") == value);  // the whole value decodes
}

TEST_CASE("b39: a gzip body that decodes past the body limits fails", "[http][faults][b39]") {
  FaultServer server;
  const std::string zeros(1 << 20, '\0');
  REQUIRE(FaultServer::encode("gzip", zeros).size() < (4 << 10));  // small coded: a bomb
  server.put("/bomb", zeros);
  server.put("/fits", std::string(64 << 10, '\0'));
  server.set_content_encoding("gzip");
  {
    auto o = fast();
    o.http.max_body_bytes = 64 << 10;
    HttpHarness h(server.url(), o);
    const std::string e = coding_error(h, "bomb");
    CHECK_THAT(e, Catch::Contains("field 'Content-Encoding'") && Catch::Contains("65536-byte limit"));
    CHECK(h.get("fits")->size() == std::size_t(64 << 10));  // exactly the limit is fine
    CHECK(server.request_count() == 2);                       // not retried
  }
  // A 200 answer to a range request is held to max_full_body, decoded.
  server.set_default(Fault::ignore_range);
  auto o = fast();
  o.max_full_body = 64 << 10;
  HttpHarness h(server.url(), o);
  CHECK_THAT(coding_error(h, "bomb", ByteRange::from(0, 10)),
             Catch::Contains("field 'Content-Encoding'") && Catch::Contains("65536-byte limit"));
  CHECK(h.get("bomb")->size() == zeros.size());  // whole-value reads are not limited by it
}

TEST_CASE("b39: a corrupt or truncated coded body fails with StoreError, not data", "[http][faults][b39]") {
  FaultServer server;
  const std::string value = random_text(4000, 14);
  const std::string gz = FaultServer::encode("gzip", value);
  const std::string zl = FaultServer::encode("deflate", value);
  std::string flipped = gz;
  flipped[gz.size() / 2] = char(flipped[gz.size() / 2] ^ 0x55);
  std::string bad_crc = gz;
  bad_crc[gz.size() - 6] = char(bad_crc[gz.size() - 6] ^ 1);  // the CRC-32 trailer
  const std::vector<std::pair<std::string, std::pair<std::string, std::string>>> bodies{
      {"plain", {"gzip", "this is not gzip at all"}},
      {"flipped", {"gzip", flipped}},
      {"crc", {"gzip", bad_crc}},
      {"truncated", {"gzip", gz.substr(0, gz.size() - 4)}},
      {"half", {"gzip", gz.substr(0, gz.size() / 2)}},
      {"junk-after", {"gzip", gz + "junk"}},
      {"empty", {"gzip", ""}},
      {"deflate-truncated", {"deflate", zl.substr(0, zl.size() - 3)}},
      {"deflate-junk-after", {"deflate", zl + "x"}},
  };
  for (const auto& [key, coded] : bodies) server.answer("/" + key, 200, {{"Content-Encoding", coded.first}}, coded.second);
  HttpHarness h(server.url(), fast());
  for (const auto& [key, coded] : bodies) {
    INFO(key);
    CHECK_THAT(coding_error(h, key), Catch::Contains("field 'Content-Encoding'") &&
                                         Catch::Contains("'" + coded.first + "'") &&
                                         Catch::Contains("key '" + key + "'"));
  }
  CHECK(server.request_count() == bodies.size());  // none retried
}

TEST_CASE("fuzz regression: a 416 to a request without a Range is an error, not an empty value", "[http][regression]") {
  http::Response r;
  r.status = 416;
  CHECK_THROWS_AS(http::take_value("k", "http://h/k", ByteRange::all(), r), StoreError);
  CHECK(http::take_value("k", "http://h/k", ByteRange::from(10, 5), r) == Bytes{});
}
