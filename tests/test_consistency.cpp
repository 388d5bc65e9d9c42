// Consistency under concurrency (issue: "never wrong data"): versioned store
// reads make a partial shard read see one version of the shard, and
// read-modify-write is optimistic across runtimes and processes.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <functional>
#include <map>
#include <mutex>
#include <filesystem>
#include <numeric>
#include <random>
#include <thread>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/use_future.hpp>
#include <catch2/catch.hpp>

#include <zarrcoro/array.hpp>
#include <zarrcoro/error.hpp>
#include <zarrcoro/runtime.hpp>
#include <zarrcoro/store/filesystem.hpp>
#include <zarrcoro/store/memory.hpp>

#include "support.hpp"

extern char** environ;

using namespace zarrcoro;
using nlohmann::json;
namespace asio = boost::asio;
namespace fs = std::filesystem;

namespace {

json sharded(std::vector<std::uint64_t> inner, bool zstd) {
  json inner_codecs = json::array({{{"name", "bytes"}, {"configuration", {{"endian", "little"}}}}});
  if (zstd) inner_codecs.push_back({{"name", "zstd"}, {"configuration", {{"level", 1}}}});
  return json::array({{{"name", "sharding_indexed"},
                       {"configuration", {{"chunk_shape", inner}, {"codecs", inner_codecs}}}}});
}

ArrayMetadata meta(std::vector<std::uint64_t> shape, std::vector<std::uint64_t> chunks, json codecs) {
  ArrayMetadata m;
  m.shape = std::move(shape);
  m.chunk_shape = std::move(chunks);
  m.data_type = DataTypeKind::int32;
  m.codecs = std::move(codecs);
  return m;
}

std::vector<std::int32_t> ints(const NdArray& a) { return {a.as<std::int32_t>().begin(), a.as<std::int32_t>().end()}; }

void write(const Array& a, const Region& r, const std::vector<std::int32_t>& v) {
  a.write_blocking(r, std::as_bytes(std::span(v)));
}

// Runs `argv` as a child process; its exit status.
pid_t spawn(const std::vector<std::string>& argv) {
  std::vector<char*> args;
  for (const auto& s : argv) args.push_back(const_cast<char*>(s.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  REQUIRE(::posix_spawn(&pid, args[0], nullptr, nullptr, args.data(), environ) == 0);
  return pid;
}
int wait_exit(pid_t pid) {
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// The other writer of the stale-index tests: another FilesystemStore object
// on the same files, in `rt` (mode 0) or in a Runtime of its own (mode 1).
struct OtherWriter {
  OtherWriter(int mode, Runtime& same, const fs::path& dir)
      : own(mode == 1 ? std::make_unique<Runtime>(RuntimeOptions{.codec_threads = 1}) : nullptr),
        rt(own ? *own : same),
        store(std::make_shared<FilesystemStore>(rt.io_executor(), dir)) {}
  Array open(const std::string& path) const { return Array::open_blocking(rt, store, path); }
  std::unique_ptr<Runtime> own;
  Runtime& rt;
  std::shared_ptr<FilesystemStore> store;
};

// A store that cannot version values, over a map: its generations are
// unknown and conditions raise UnsupportedError. `after_get`, when set,
// runs once after a read of `hook_key` for a suffix range (a shard index at
// the end), before that read returns what it read.
class PlainStore final : public Store {
 public:
  std::string hook_key;
  std::function<awaitable<void>()> after_get;

  awaitable<ReadResult> read(std::string key, ReadOptions options) override {
    if (!options.if_equal.unknown()) throw UnsupportedError(key, "if_equal", "plain: no versions");
    const ByteRange range = options.range;
    ReadResult out;
    {
      std::lock_guard lk(mu_);
      if (auto it = values_.find(key); it != values_.end()) {
        const Bytes& v = it->second;
        const ByteExtent e = clip(range, v.size());
        out.value = Bytes(v.begin() + static_cast<std::ptrdiff_t>(e.begin),
                          v.begin() + static_cast<std::ptrdiff_t>(e.end));
      }
    }
    if (after_get && key == hook_key && range.kind == ByteRange::Kind::suffix) {
      const auto hook = std::exchange(after_get, nullptr);
      co_await hook();
    }
    co_return out;
  }
  awaitable<std::optional<Generation>> write(std::string key, std::optional<Bytes> value,
                                             WriteOptions options) override {
    if (!options.if_equal.unknown()) throw UnsupportedError(key, "if_equal", "plain: no versions");
    std::lock_guard lk(mu_);
    if (value) values_[key] = std::move(*value);
    else values_.erase(key);
    co_return Generation{};
  }
  awaitable<std::vector<std::string>> list(std::string prefix) override {
    std::lock_guard lk(mu_);
    std::vector<std::string> out;
    for (const auto& [k, v] : values_)
      if (k.starts_with(prefix)) out.push_back(k);
    co_return out;
  }
  std::string url() const override { return "plain"; }
  bool holds(const std::string& key) {
    std::lock_guard lk(mu_);
    return values_.contains(key);
  }

 private:
  std::mutex mu_;
  std::map<std::string, Bytes> values_;
};

awaitable<void> write_async(Array a, Region r, std::vector<std::int32_t> v) {
  co_await a.write(r, std::as_bytes(std::span(v)));
}

}  // namespace

TEST_CASE("stale shard index: a shard rewritten through another store object or runtime reads anew",
          "[consistency][regression]") {
  const int mode = GENERATE(0, 1);  // 0: another store object, same runtime; 1: another runtime
  INFO((mode == 0 ? "another FilesystemStore object" : "another Runtime"));
  test::TempDir dir("consistency");
  Runtime rt({.codec_threads = 2});
  auto store = std::make_shared<FilesystemStore>(rt.io_executor(), dir.path);
  // Uncompressed inner chunks: a stale index would silently decode other bytes.
  const auto m = meta({8, 8}, {8, 8}, sharded({4, 4}, false));
  const Array a = Array::create_blocking(rt, store, "a", m);
  std::vector<std::int32_t> v1(64);
  std::iota(v1.begin(), v1.end(), 1);
  write(a, Region::all({8, 8}), v1);
  CHECK(ints(a.read_blocking(Region::parse("4:8,4:8", {8, 8}))) ==
        std::vector<std::int32_t>{37, 38, 39, 40, 45, 46, 47, 48, 53, 54, 55, 56, 61, 62, 63, 64});  // index cached

  // The other writer leaves inner chunk (0, 0) empty: every later inner chunk moves.
  std::vector<std::int32_t> v2(64);
  for (std::size_t i = 0; i < 64; ++i) v2[i] = (i / 8 < 4 && i % 8 < 4) ? 0 : static_cast<std::int32_t>(1000 + i);
  const OtherWriter other(mode, rt, dir.path);
  write(other.open("a"), Region::all({8, 8}), v2);

  CHECK(ints(a.read_blocking(Region::parse("4:8,4:8", {8, 8}))) ==
        std::vector<std::int32_t>{1036, 1037, 1038, 1039, 1044, 1045, 1046, 1047, 1052, 1053, 1054, 1055, 1060,
                                  1061, 1062, 1063});
  CHECK(ints(a.read_blocking(Region::parse("0:2,0:8", {8, 8}))) ==
        std::vector<std::int32_t>{0, 0, 0, 0, 1004, 1005, 1006, 1007, 0, 0, 0, 0, 1012, 1013, 1014, 1015});
  // Erased by the other writer: fill, not the cached index's view.
  write(other.open("a"), Region::all({8, 8}), std::vector<std::int32_t>(64));
  CHECK(ints(a.read_blocking(Region::parse("4:6,4:6", {8, 8}))) == std::vector<std::int32_t>{0, 0, 0, 0});
}

TEST_CASE("stale shard index: inner chunks another writer added where the cached index had none read anew",
          "[consistency][regression]") {
  const int mode = GENERATE(0, 1);  // 0: another store object, same runtime; 1: another runtime
  INFO((mode == 0 ? "another FilesystemStore object" : "another Runtime"));
  test::TempDir dir("consistency");
  Runtime rt({.codec_threads = 1});
  auto store = std::make_shared<FilesystemStore>(rt.io_executor(), dir.path);
  const Array a = Array::create_blocking(rt, store, "a", meta({8, 8}, {8, 8}, sharded({4, 4}, false)));
  write(a, Region::parse("0:4,0:4", {8, 8}), std::vector<std::int32_t>(16, 7));
  // Inner chunk (1, 1) is absent: fill, from the index the write cached.
  const Region corner = Region::parse("4:6,4:6", {8, 8});
  CHECK(ints(a.read_blocking(corner)) == std::vector<std::int32_t>{0, 0, 0, 0});

  const OtherWriter other(mode, rt, dir.path);
  write(other.open("a"), corner, {1, 2, 3, 4});
  // No inner chunk this read needs is in the cached index, so no range read
  // checks it: the read must still see the other writer's.
  CHECK(ints(a.read_blocking(corner)) == std::vector<std::int32_t>{1, 2, 3, 4});
}

namespace {

// Every inner chunk (16 elements) is written whole with one token:
// chunk * 1'000'000 + writer * 10'000 + sequence. A read of any region must
// show, per inner chunk, 16 equal values: 0 (never written) or a token of
// that very chunk; anything else is data from another version or position.
constexpr std::uint64_t kInner = 16, kShards = 4, kPerShard = 16, kLen = kInner * kPerShard * kShards;

asio::awaitable<void> mixed_worker(Array a, int id, int ops, std::atomic<int>* bad, std::atomic<int>* errors,
                                   std::string* first_error) {
  std::mt19937 rng(static_cast<unsigned>(id));
  std::vector<std::int32_t> buf(4 * kInner);
  for (int k = 0; k < ops; ++k) {
    const std::uint64_t first = rng() % (kLen / kInner);
    try {
      if (rng() % 2) {
        const std::uint64_t count = 1 + rng() % std::min<std::uint64_t>(4, kLen / kInner - first);
        const Region r{{first * kInner}, {(first + count) * kInner}};
        buf.resize(count * kInner);
        co_await a.read(r, std::as_writable_bytes(std::span(buf)));
        for (std::uint64_t c = 0; c < count; ++c) {
          const std::int32_t v = buf[c * kInner];
          bool ok = v == 0 || static_cast<std::uint64_t>(v / 1'000'000) == first + c;
          for (std::uint64_t e = 1; e < kInner; ++e) ok = ok && buf[c * kInner + e] == v;
          if (!ok) ++*bad;
        }
      } else {
        const auto token = static_cast<std::int32_t>(first * 1'000'000 + static_cast<std::uint64_t>(id) * 10'000 + k);
        std::vector<std::int32_t> v(kInner, token);
        const Region r{{first * kInner}, {(first + 1) * kInner}};
        co_await a.write(r, std::as_bytes(std::span(v)));
      }
    } catch (const Error& e) {
      if (++*errors == 1) *first_error = e.what();  // only the first writer of it
    }
  }
}

}  // namespace

TEST_CASE("partial shard reads racing shard rewrites never return wrong data", "[consistency][regression]") {
  // memory; filesystem on its blocking pool; filesystem on io_uring (whose
  // completions, reaped by any of the I/O threads, need the tsan.supp entry
  // for Boost's io_uring service).
  const int store_kind = GENERATE(0, 1, 2);
  const bool zstd = GENERATE(false, true);
  INFO((store_kind == 0 ? "memory" : store_kind == 1 ? "filesystem, blocking pool" : "filesystem, io_uring")
       << (zstd ? ", zstd inner chunks" : ", uncompressed inner chunks"));
  test::TempDir dir("consistency");
  // 64 coroutines on a runtime of 16 threads (8 I/O, 8 codec).
  Runtime rt({.io_threads = 8, .codec_threads = 8});
  std::shared_ptr<Store> store;
  if (store_kind == 0) store = std::make_shared<MemoryStore>();
  else store = std::make_shared<FilesystemStore>(rt.io_executor(), dir.path, FilesystemOptions{.use_io_uring = store_kind == 2});
  const Array a = Array::create_blocking(rt, store, "a", meta({kLen}, {kInner * kPerShard}, sharded({kInner}, zstd)));
  std::atomic<int> bad{0}, errors{0};
  std::string first_error;
  std::vector<std::future<void>> jobs;
  for (int c = 0; c < 64; ++c)
    jobs.push_back(
        asio::co_spawn(rt.io_executor(), mixed_worker(a, c, 40, &bad, &errors, &first_error), asio::use_future));
  for (auto& j : jobs) j.get();
  INFO("first error: " << first_error);
  CHECK(bad == 0);
  CHECK(errors == 0);
}

TEST_CASE("two processes x 1000 partial writes into one shard and into one chunk lose no update",
          "[consistency][regression]") {
  const bool shard = GENERATE(true, false);
  INFO((shard ? "one shard (100-element inner chunks, zstd)" : "one chunk"));
  test::TempDir dir("consistency");
  {
    Runtime rt({.codec_threads = 1});
    auto store = std::make_shared<FilesystemStore>(rt.io_executor(), dir.path);
    json plain = json::array({{{"name", "bytes"}, {"configuration", {{"endian", "little"}}}}});
    Array::create_blocking(rt, store, "a", meta({2000}, {2000}, shard ? sharded({100}, true) : plain));
  }
  const pid_t even = spawn({ZARRCORO_PARTIAL_WRITER, dir.path.string(), "a", "0", "2000", "2"});
  const pid_t odd = spawn({ZARRCORO_PARTIAL_WRITER, dir.path.string(), "a", "1", "2000", "2"});
  CHECK(wait_exit(even) == 0);
  CHECK(wait_exit(odd) == 0);
  Runtime rt({.codec_threads = 1});
  auto store = std::make_shared<FilesystemStore>(rt.io_executor(), dir.path);
  const auto got = ints(Array::open_blocking(rt, store, "a").read_blocking(Region::all({2000})));
  std::vector<std::int32_t> want(2000);
  std::iota(want.begin(), want.end(), 1);
  CHECK(got == want);
}

TEST_CASE("a writer killed while holding the filesystem write lock does not block later writers",
          "[consistency][regression]") {
  test::TempDir dir("consistency");
  fs::create_directories(dir.path / "d");
  int ready[2];
  REQUIRE(::pipe(ready) == 0);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {  // only async-signal-safe calls here
    const int fd = ::open((dir.path / "d").c_str(), O_RDONLY | O_DIRECTORY);
    if (fd < 0 || ::flock(fd, LOCK_EX) != 0) ::_exit(1);
    (void)!::write(ready[1], "x", 1);
    for (;;) ::pause();
  }
  char c = 0;
  REQUIRE(::read(ready[0], &c, 1) == 1);  // the child holds the lock
  ::kill(child, SIGKILL);
  int status = 0;
  ::waitpid(child, &status, 0);
  ::close(ready[0]);
  ::close(ready[1]);

  Runtime rt({.codec_threads = 1});
  auto store = std::make_shared<FilesystemStore>(rt.io_executor(), dir.path);
  WriteOptions o;
  o.if_equal = Generation::absent();
  auto job = store->write("d/k", Bytes(3, std::byte{7}), std::move(o));
  const auto g = asio::co_spawn(rt.io_executor(), std::move(job), asio::use_future).get();
  REQUIRE(g);
  CHECK_FALSE(g->unknown());
}

namespace {

// A memory store where a rival writer wins the first `rival_wins`
// conditional writes: just before each, it replaces the value with itself
// (a new generation), so the condition fails as if another process had
// written in between.
class RivalStore : public MemoryStore {
 public:
  explicit RivalStore(std::uint64_t rival_wins) : rival_wins_(rival_wins) {}
  awaitable<std::optional<Generation>> write(std::string key, std::optional<Bytes> value,
                                             WriteOptions options) override {
    if (!options.if_equal.unknown() && lost_ < rival_wins_) {
      ++lost_;
      auto current = co_await get(key);
      if (current) co_await set(key, std::move(*current));
    }
    co_return co_await MemoryStore::write(std::move(key), std::move(value), std::move(options));
  }
  std::uint64_t lost() const { return lost_; }

 private:
  const std::uint64_t rival_wins_;
  std::atomic<std::uint64_t> lost_{0};
};

}  // namespace

TEST_CASE("a partial write that loses to another writer 70 times in a row still lands (was gave up after 64)",
          "[consistency][regression]") {
  // CI: on S3, one of two runtimes hammering one shard lost 64 times in a
  // row and raised; it must keep going while the other makes progress.
  const bool shard = GENERATE(false, true);
  INFO((shard ? "shard" : "chunk"));
  Runtime rt({.codec_threads = 1});
  auto store = std::make_shared<RivalStore>(70);
  json plain = json::array({{{"name", "bytes"}, {"configuration", {{"endian", "little"}}}}});
  const Array a = Array::create_blocking(rt, store, "a", meta({40}, {40}, shard ? sharded({10}, true) : plain));
  write(a, Region::parse("0:40", {40}), std::vector<std::int32_t>(40, 7));
  write(a, Region::parse("5:8", {40}), {1, 2, 3});
  CHECK(store->lost() == 70);
  std::vector<std::int32_t> want(40, 7);
  want[5] = 1, want[6] = 2, want[7] = 3;
  CHECK(ints(a.read_blocking(Region::all({40}))) == want);
}

TEST_CASE("a partial write that keeps losing raises StoreError on field generation after write_conflict_timeout",
          "[consistency][regression]") {
  Runtime rt({.codec_threads = 1, .write_conflict_timeout = std::chrono::milliseconds(200)});
  auto store = std::make_shared<RivalStore>(std::numeric_limits<std::uint64_t>::max());
  json plain = json::array({{{"name", "bytes"}, {"configuration", {{"endian", "little"}}}}});
  const Array a = Array::create_blocking(rt, store, "a", meta({40}, {40}, plain));
  write(a, Region::parse("0:40", {40}), std::vector<std::int32_t>(40, 7));
  try {
    write(a, Region::parse("5:8", {40}), {1, 2, 3});
    FAIL("the write succeeded");
  } catch (const StoreError& e) {
    CHECK(e.key() == "a/c/0");
    CHECK(e.field() == "generation");
    CHECK_THAT(e.what(), Catch::Contains("write_conflict_timeout"));
  }
  CHECK(store->lost() >= 2);
  // The rival's value stays.
  CHECK(ints(a.read_blocking(Region::all({40}))) == std::vector<std::int32_t>(40, 7));
}

TEST_CASE("a store that cannot version values: partial writes into chunks and shards not stored yet land "
          "(was: UnsupportedError on field if_equal)",
          "[consistency][regression]") {
  Runtime rt({.codec_threads = 1});
  auto store = std::make_shared<PlainStore>();
  SECTION("chunks") {
    const json bytes = json::parse(R"([{"name": "bytes", "configuration": {"endian": "little"}}])");
    auto a = Array::create_blocking(rt, store, "a", meta({8}, {4}, bytes));
    write(a, {{1}, {3}}, {7, 8});
    CHECK(ints(a.read_blocking(Region::all(a.shape()))) == std::vector<std::int32_t>{0, 7, 8, 0, 0, 0, 0, 0});
    write(a, {{1}, {3}}, {0, 0});  // all fill again: the chunk is erased
    CHECK_FALSE(store->holds("a/c/0"));
  }
  SECTION("shards") {
    auto a = Array::create_blocking(rt, store, "a", meta({8}, {8}, sharded({2}, false)));
    write(a, {{3}, {5}}, {7, 8});
    CHECK(ints(a.read_blocking(Region::all(a.shape()))) == std::vector<std::int32_t>{0, 0, 0, 7, 8, 0, 0, 0});
    CHECK(ints(a.read_blocking({{4}, {6}})) == std::vector<std::int32_t>{8, 0});
  }
}

TEST_CASE("a partial shard read on a store that cannot version values never mixes two versions of the shard "
          "written by its runtime (was: the new shard's inner chunk 1 read as inner chunk 0)",
          "[consistency][regression]") {
  Runtime rt({.codec_threads = 1});
  auto store = std::make_shared<PlainStore>();
  auto a = Array::create_blocking(rt, store, "a", meta({8}, {8}, sharded({4}, false)));
  write(a, Region::all(a.shape()), {1, 2, 3, 4, 5, 6, 7, 8});
  // Right after the reader has the old shard's index, the runtime replaces
  // the shard with one whose inner chunk 0 is all fill (not stored), so
  // inner chunk 1 moves to where inner chunk 0 was.
  store->hook_key = "a/c/0";
  store->after_get = [a] { return write_async(a, Region::all(a.shape()), {0, 0, 0, 0, 50, 60, 70, 80}); };
  CHECK(ints(a.read_blocking({{0}, {4}})) == std::vector<std::int32_t>{0, 0, 0, 0});
  CHECK_FALSE(store->after_get);  // the replacement ran
  CHECK(ints(a.read_blocking({{4}, {8}})) == std::vector<std::int32_t>{50, 60, 70, 80});

  SECTION("an erase of the shard between the index and the inner chunks reads as fill (was: CorruptChunk)") {
    write(a, Region::all(a.shape()), {1, 2, 3, 4, 5, 6, 7, 8});
    store->after_get = [a] { return write_async(a, Region::all(a.shape()), std::vector<std::int32_t>(8, 0)); };
    CHECK(ints(a.read_blocking({{4}, {8}})) == std::vector<std::int32_t>{0, 0, 0, 0});
    CHECK_FALSE(store->holds("a/c/0"));
  }
}

TEST_CASE("a store made where a freed one was does not use the freed one's cached shard indexes "
          "(was: a MemoryStore at the same address, whose generations repeat, read index bytes as data)",
          "[consistency][regression]") {
  // Declared before the runtime, which outlives every reference its threads hold to the stores.
  alignas(MemoryStore) unsigned char place[sizeof(MemoryStore)];
  std::atomic<bool> destroyed{false};
  Runtime rt({.codec_threads = 1});
  const auto make = [&] {
    destroyed = false;
    return std::shared_ptr<MemoryStore>(new (place) MemoryStore(), [&destroyed](MemoryStore* m) {
      m->~MemoryStore();
      destroyed = true;
    });
  };
  {
    auto first = make();
    auto a = Array::create_blocking(rt, first, "a", meta({8}, {8}, sharded({4}, false)));
    write(a, Region::all(a.shape()), {1, 2, 3, 4, 5, 6, 7, 8});
    CHECK(ints(a.read_blocking({{4}, {8}})) == std::vector<std::int32_t>{5, 6, 7, 8});  // its index is cached
  }
  // The read's last reference to the store may go a moment after it returned (on a codec thread).
  for (int i = 0; i < 30000 && !destroyed; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  REQUIRE(destroyed);
  auto second = make();
  REQUIRE(static_cast<void*>(second.get()) == static_cast<void*>(place));
  {
    // The same steps in another runtime: the same generations in the new store.
    Runtime other({.codec_threads = 1});
    auto a = Array::create_blocking(other, second, "a", meta({8}, {8}, sharded({4}, false)));
    write(a, Region::all(a.shape()), {0, 0, 0, 0, 50, 60, 70, 80});
  }
  auto b = Array::open_blocking(rt, second, "a");
  CHECK(ints(b.read_blocking({{4}, {8}})) == std::vector<std::int32_t>{50, 60, 70, 80});
  CHECK(ints(b.read_blocking({{0}, {4}})) == std::vector<std::int32_t>{0, 0, 0, 0});
}
