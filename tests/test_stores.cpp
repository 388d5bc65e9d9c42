// Stores: the conformance suite against every local store, plus
// filesystem- and counting-specific behaviour.
#include <fcntl.h>
#include <sched.h>
#include <linux/fs.h>
#include <liburing.h>
#include <sys/inotify.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <csignal>
#include <cstddef>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <iterator>
#include <set>
#include <span>
#include <thread>

#include <boost/asio/use_future.hpp>
#include <catch2/catch.hpp>

#include <zarrcoro/store/counting.hpp>
#include <zarrcoro/store/filesystem.hpp>
#include <zarrcoro/store/memory.hpp>

#include "child.hpp"
#include "rename_hook.hpp"
#include "store_conformance.hpp"
#include "support.hpp"

namespace fs = std::filesystem;
using namespace zarrcoro;
using zarrcoro::test::bytes_of;
using zarrcoro::test::in_child;
using zarrcoro::test::kChildSkipped;
using zarrcoro::test::refuse_syscalls;
using zarrcoro::test::StoreHarness;
using Strings = std::vector<std::string>;

namespace {

bool io_uring_works() {
  io_uring ring;
  if (io_uring_queue_init(4, &ring, 0) != 0) return false;
  io_uring_queue_exit(&ring);
  return true;
}

// A whole read of a small value that must not wait, as a caller's thread makes it.
ReadOptions must_not_wait() {
  ReadOptions o;
  o.caches_only = true;
  o.need_generation = false;
  o.size_hint = 100;
  return o;
}

// Which of the first `pages` pages of the open file `fd` are in the page
// cache (mincore of a mapping: reading them could bring them in).
std::vector<bool> resident_pages(int fd, std::size_t pages) {
  const std::size_t bytes = pages * static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> in_core(pages);
  void* map = ::mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0);
  REQUIRE(map != MAP_FAILED);
  REQUIRE(::mincore(map, bytes, in_core.data()) == 0);
  ::munmap(map, bytes);
  std::vector<bool> out(pages);
  for (std::size_t i = 0; i < pages; ++i) out[i] = in_core[i] & 1;
  return out;
}

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  REQUIRE(f.good());
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

void spit(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << text;
}

// Every non-directory entry below `root`, relative, sorted.
Strings files_below(const fs::path& root) {
  Strings out;
  for (const auto& e : fs::recursive_directory_iterator(root))
    if (!e.is_directory()) out.push_back(fs::relative(e.path(), root).generic_string());
  std::sort(out.begin(), out.end());
  return out;
}

using Make = std::function<std::shared_ptr<Store>(boost::asio::any_io_executor)>;

Make filesystem_factory(const fs::path& root, FilesystemOptions opts) {
  return [root, opts](boost::asio::any_io_executor io) -> std::shared_ptr<Store> {
    return std::make_shared<FilesystemStore>(io, root, opts);
  };
}

const FilesystemOptions kUring{};
const FilesystemOptions kFallback{.use_io_uring = false, .fallback_threads = 2};
// Keys resolved with one openat(O_NOFOLLOW) per component, as on kernels without openat2.
const FilesystemOptions kComponents{.use_openat2 = false};

}  // namespace

// ---------------------------------------------------------------------------
// Conformance

TEST_CASE("conformance: MemoryStore", "[stores][memory]") {
  test::run_store_conformance("memory", [](boost::asio::any_io_executor) {
    return std::make_shared<MemoryStore>();
  });
}

TEST_CASE("conformance: FilesystemStore (io_uring)", "[stores][filesystem]") {
  test::TempDir tmp("stores");
  test::run_store_conformance("filesystem io_uring", filesystem_factory(tmp.path / "store", kUring));
}

TEST_CASE("conformance: FilesystemStore (blocking fallback pool)", "[stores][filesystem]") {
  test::TempDir tmp("stores");
  test::run_store_conformance("filesystem fallback",
                              filesystem_factory(tmp.path / "store", kFallback));
}

TEST_CASE("conformance: FilesystemStore (per-component openat)", "[stores][filesystem]") {
  test::TempDir tmp("stores");
  test::run_store_conformance("filesystem openat", filesystem_factory(tmp.path / "store", kComponents));
}

TEST_CASE("conformance: FilesystemStore (durable)", "[stores][filesystem]") {
  test::TempDir tmp("stores");
  test::run_store_conformance("filesystem durable", filesystem_factory(tmp.path / "store", {.durable = true}));
}

TEST_CASE("conformance: CountingStore over MemoryStore", "[stores][counting]") {
  test::run_store_conformance("counting+memory", [](boost::asio::any_io_executor) {
    return std::make_shared<CountingStore>(std::make_shared<MemoryStore>());
  });
}

// ---------------------------------------------------------------------------
// MemoryStore

TEST_CASE("MemoryStore: size and url", "[stores][memory]") {
  auto store = std::make_shared<MemoryStore>();
  StoreHarness h([&](boost::asio::any_io_executor) { return store; });
  CHECK(store->url() == "memory://");
  CHECK(store->size() == 0);
  h.set("a", "1");
  h.set("b/c", "2");
  h.set("a", "3");
  CHECK(store->size() == 2);
  h.erase("a");
  CHECK(store->size() == 1);
}

TEST_CASE("MemoryStore: a get returns a copy the store does not share", "[stores][memory]") {
  StoreHarness h([](boost::asio::any_io_executor) { return std::make_shared<MemoryStore>(); });
  h.set("k", "abc");
  auto v = h.get("k");
  REQUIRE(v);
  (*v)[0] = std::byte('X');
  CHECK(h.text("k") == "abc");
}

// ---------------------------------------------------------------------------
// FilesystemStore

TEST_CASE("FilesystemStore: io_uring is used exactly when the kernel allows it",
          "[stores][filesystem]") {
  test::TempDir tmp("stores");
  boost::asio::io_context io;
  FilesystemStore uring(io.get_executor(), tmp.path, kUring);
  FilesystemStore fallback(io.get_executor(), tmp.path, kFallback);
  const bool works = io_uring_works();
  if (!works) WARN("io_uring is not available here: only the fallback path is exercised");
  CHECK(uring.uses_io_uring() == works);
  CHECK_FALSE(fallback.uses_io_uring());
}

namespace {
awaitable<void> read_key(std::shared_ptr<Store> store, int k, std::optional<Bytes>* out) {
  std::string key = "c/" + std::to_string(k);  // named: g++ 12 and temporaries beside co_await
  *out = co_await store->get(std::move(key));
}

// Writes `value` at c/k as one of many (WriteOptions::among_many); the
// generation stored into *out.
awaitable<void> write_among_many(std::shared_ptr<Store> store, int k, Bytes value, std::optional<Generation>* out) {
  std::string key = "c/" + std::to_string(k);
  WriteOptions options;
  options.among_many = true;
  *out = co_await store->write(std::move(key), std::move(value), std::move(options));
}

awaitable<void> read_with_generation(std::shared_ptr<Store> store, int k, ReadResult* out) {
  std::string key = "c/" + std::to_string(k);
  ReadOptions options;
  *out = co_await store->read(std::move(key), std::move(options));
}
}  // namespace

TEST_CASE("FilesystemStore: writes among many, and large ones, store exactly with the generation a read sees",
          "[stores][filesystem]") {
  // They run whole on the store's pool, not in the io_context's steps.
  test::TempDir tmp("stores");
  boost::asio::io_context io;
  auto store = std::make_shared<FilesystemStore>(io.get_executor(), tmp.path, kUring);
  constexpr int kKeys = 40;
  auto value_of = [](int k, int round) {
    Bytes v(k == 0 ? (std::size_t{300} << 10) : 4000 + static_cast<std::size_t>(k));  // c/0: above 256 KiB
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = std::byte(k * 31 + round * 7 + i);
    return v;
  };
  for (int round = 0; round < 2; ++round) {  // the second replaces the first
    INFO("round " << round);
    auto run = [&io](std::vector<std::future<void>>& done) {
      io.run();
      io.restart();
      for (auto& f : done) f.get();  // rethrows a failure
    };
    std::vector<std::optional<Generation>> written(kKeys);
    std::vector<std::future<void>> writes;
    for (int k = 0; k < kKeys; ++k)
      writes.push_back(boost::asio::co_spawn(io, write_among_many(store, k, value_of(k, round), &written[k]),
                                             boost::asio::use_future));
    run(writes);
    std::vector<ReadResult> got(kKeys);
    std::vector<std::future<void>> reads;
    for (int k = 0; k < kKeys; ++k)
      reads.push_back(boost::asio::co_spawn(io, read_with_generation(store, k, &got[k]), boost::asio::use_future));
    run(reads);
    for (int k = 0; k < kKeys; ++k) {
      INFO("c/" << k);
      REQUIRE(written[k]);
      REQUIRE(got[k].value);
      CHECK(*got[k].value == value_of(k, round));
      CHECK(got[k].generation == *written[k]);
    }
  }
  std::size_t files = 0;  // no temporary file left beside the values
  for (const auto& e : std::filesystem::directory_iterator(tmp.path / "c")) files += e.is_regular_file();
  CHECK(files == kKeys);
}

TEST_CASE("FilesystemStore: 600 writes, then 600 uncached reads, at once all complete (was: some hung)",
          "[stores][filesystem][regression]") {
  // Boost 1.81's io_uring backend takes at most 128 completions per wake-up
  // of its eventfd; a burst beyond that stranded the rest (UringSlots).
  test::TempDir tmp("stores");
  boost::asio::io_context io;
  auto store = std::make_shared<FilesystemStore>(io.get_executor(), tmp.path, kUring);
  constexpr int kKeys = 600;
  auto value_of = [](int k) {
    Bytes v(4000);
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = std::byte(k * 31 + i);
    return v;
  };
  auto all = [&](auto start) {
    std::vector<std::future<void>> done;
    for (int k = 0; k < kKeys; ++k) done.push_back(boost::asio::co_spawn(io, start(k), boost::asio::use_future));
    std::thread runner([&] { io.run(); });
    for (auto& f : done)
      if (f.wait_for(test::scaled(std::chrono::seconds(30))) != std::future_status::ready) {
        FAIL_CHECK("an operation never completed");
        std::_Exit(1);  // the io_context's thread cannot be joined
      }
    runner.join();
    io.restart();
    for (auto& f : done) f.get();
  };
  auto write = [&](int k) { return store->set("c/" + std::to_string(k), value_of(k)); };
  all(write);
  for (int k = 0; k < kKeys; ++k) {  // out of the page cache: the reads go through io_uring
    const int fd = ::open((tmp.path / "c" / std::to_string(k)).c_str(), O_RDONLY);
    REQUIRE(fd >= 0);
    ::fdatasync(fd);
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
  std::vector<std::optional<Bytes>> got(kKeys);
  auto read = [&](int k) { return read_key(store, k, &got[k]); };
  all(read);
  for (int k = 0; k < kKeys; ++k) {
    REQUIRE(got[k]);
    CHECK(*got[k] == value_of(k));
  }
}

TEST_CASE("FilesystemStore: root and url", "[stores][filesystem]") {
  test::TempDir tmp("stores");
  boost::asio::io_context io;
  FilesystemStore store(io.get_executor(), tmp.path / "x" / ".." / "root/", kUring);
  const fs::path canon = fs::canonical(tmp.path) / "root";
  CHECK(store.root() == canon);
  CHECK(store.url() == "file://" + canon.string());
  CHECK_FALSE(fs::exists(canon));  // created lazily by the first set
}

TEST_CASE("FilesystemStore: layout and atomic replace and errors", "[stores][filesystem]") {
  const int mode = GENERATE(0, 1, 2);
  INFO((mode == 0 ? "io_uring, openat2" : mode == 1 ? "fallback pool, openat2" : "io_uring, per-component openat"));
  test::TempDir tmp("stores");
  const fs::path root = tmp.path / "root";
  auto make = filesystem_factory(root, mode == 0 ? kUring : mode == 1 ? kFallback : kComponents);
  StoreHarness h(make);

  SECTION("values are plain files at root/key, and plain files are values") {
    h.set("a/b/c", "hello");
    h.set("zarr.json", "{}");
    CHECK(slurp(root / "a/b/c") == "hello");
    CHECK(slurp(root / "zarr.json") == "{}");
    spit(root / "x/y.0", "external");
    CHECK(h.text("x/y.0") == "external");
    CHECK(h.list("") == Strings{"a/b/c", "x/y.0", "zarr.json"});
    CHECK(files_below(root) == Strings{"a/b/c", "x/y.0", "zarr.json"});
  }

  SECTION("a FIFO at a key: exists says no (as list, which skips it), get raises") {
    h.set("k", "v");
    REQUIRE(::mkfifo((root / "fifo").c_str(), 0600) == 0);
    CHECK_FALSE(h.exists("fifo"));
    CHECK(h.list("") == Strings{"k"});
    CHECK_THROWS_AS(h.get("fifo"), StoreError);
    CHECK(h.exists("k"));
  }

  SECTION("the root need not exist for reads") {
    CHECK_FALSE(h.get("a").has_value());
    CHECK_FALSE(h.exists("a"));
    CHECK(h.list("") == Strings{});
    CHECK(h.list("a/") == Strings{});
    CHECK_NOTHROW(h.erase("a/b"));
  }

  SECTION("atomic replace leaves no temporary files") {
    for (int i = 0; i < 20; ++i) h.set("d/k", std::string(100 * i, char('a' + i % 26)));
    CHECK(h.text("d/k") == std::string(1900, char('a' + 19)));
    CHECK(files_below(root) == Strings{"d/k"});
  }

  SECTION("temporary-file names are hidden from list, other dot files are not") {
    h.set(".zattrs", "{}");
    spit(root / "a/.c.tmp.0123456789abcdef", "partial");
    spit(root / "a/.c.tmp.not-hex-at-all", "kept");
    CHECK(h.list("") == Strings{".zattrs", "a/.c.tmp.not-hex-at-all"});
  }

  SECTION("a key named like a temporary file is refused, so list never hides it nor removes it") {
    for (const std::string key : {".c.tmp.0123456789abcdef", "a/.c.tmp.0123456789ABCDEF"}) {
      CAPTURE(key);
      CHECK_THROWS_AS(h.set(key, "v"), InvalidArgument);
      CHECK_THROWS_AS(h.get(key), InvalidArgument);
      CHECK_THROWS_AS(h.exists(key), InvalidArgument);
      CHECK_THROWS_AS(h.erase(key), InvalidArgument);
    }
    h.set("a/.c.tmp.0123", "short: a key");
    h.set(".c.tmp.0123456789abcdef/x", "a directory of that name: a key");
    CHECK(h.list("") == Strings{".c.tmp.0123456789abcdef/x", "a/.c.tmp.0123"});
  }

  SECTION("stale temporary files left by a killed writer are removed by list") {
    spit(root / "a/.c.tmp.0123456789abcdef", "left by a writer killed an hour ago");
    spit(root / "a/.d.tmp.fedcba9876543210", "a write in progress");
    const auto old = fs::file_time_type::clock::now() - std::chrono::hours(2);
    fs::last_write_time(root / "a/.c.tmp.0123456789abcdef", old);
    CHECK(h.list("") == Strings{});
    CHECK(files_below(root) == Strings{"a/.d.tmp.fedcba9876543210"});
  }

  SECTION("a directory at the key is not a value") {
    h.set("dir/x", "1");
    CHECK_FALSE(h.get("dir").has_value());
    CHECK_FALSE(h.exists("dir"));
    CHECK_NOTHROW(h.erase("dir"));
    CHECK(h.text("dir/x") == "1");
  }

  SECTION("a failed write raises StoreError naming the key; nothing is left behind") {
    h.set("d/x", "1");  // "d" is a directory: no value can be stored at "d"
    try {
      h.set("d", "v");
      FAIL("set over a directory succeeded");
    } catch (const StoreError& e) {
      CHECK(e.key() == "d");
      CHECK_THAT(e.what(), Catch::Contains("'d'") && Catch::Contains("directory"));
    }
    h.set("f", "file");  // "f" is a file: "f/x" cannot be created
    CHECK_THROWS_AS(h.set("f/x", "v"), StoreError);
    CHECK(h.text("d/x") == "1");
    CHECK(h.text("f") == "file");
    CHECK(files_below(root) == Strings{"d/x", "f"});
  }

  SECTION("a write failing midway keeps the old value intact") {
    h.set("k", "old value");
    // RLIMIT_FSIZE makes the write fail with EFBIG even for root.
    std::signal(SIGXFSZ, SIG_IGN);
    rlimit old{};
    REQUIRE(::getrlimit(RLIMIT_FSIZE, &old) == 0);
    rlimit low = old;
    low.rlim_cur = 64 * 1024;
    REQUIRE(::setrlimit(RLIMIT_FSIZE, &low) == 0);
    std::string what;
    try {
      h.set("k", test::random_bytes(1 << 20, 7));
    } catch (const StoreError& e) {
      what = e.what();
      CHECK(e.key() == "k");
    }
    REQUIRE(::setrlimit(RLIMIT_FSIZE, &old) == 0);
    std::signal(SIGXFSZ, SIG_DFL);
    INFO(what);
    CHECK_THAT(what, Catch::Contains("'k'") && Catch::Contains("too large"));
    CHECK(h.text("k") == "old value");
    CHECK(files_below(root) == Strings{"k"});
  }

  SECTION("a read-only directory makes set fail with StoreError") {
    if (::geteuid() == 0) {
      WARN("SKIPPED: running as root, permissions are not enforced");
      return;
    }
    h.set("ro/k", "old");
    fs::permissions(root / "ro", fs::perms::owner_read | fs::perms::owner_exec);
    CHECK_THROWS_AS(h.set("ro/k", "new"), StoreError);
    CHECK_THROWS_AS(h.set("ro/k2", "new"), StoreError);
    fs::permissions(root / "ro", fs::perms::owner_all);
    CHECK(h.text("ro/k") == "old");
    CHECK(files_below(root) == Strings{"ro/k"});
  }

  SECTION("erase prunes empty directories up to the root") {
    h.set("a/b/c/d", "1");
    h.set("a/x", "2");
    h.erase("a/b/c/d");
    CHECK_FALSE(fs::exists(root / "a/b"));
    CHECK(fs::exists(root / "a/x"));
    h.erase("a/x");
    CHECK_FALSE(fs::exists(root / "a"));
    CHECK(fs::is_directory(root));
    CHECK(h.list("") == Strings{});
  }

  SECTION("symlinks out of the root are refused") {
    const fs::path outside = tmp.path / "outside";
    spit(outside / "secret", "secret");
    fs::create_directories(root);
    fs::create_directory_symlink(outside, root / "dirlink");
    fs::create_symlink(outside / "secret", root / "filelink");
    CHECK_THROWS_AS(h.get("dirlink/secret"), StoreError);
    CHECK_THROWS_AS(h.get("filelink"), StoreError);
    CHECK_THROWS_AS(h.get("filelink", ByteRange::last(2)), StoreError);
    CHECK_THROWS_AS(h.exists("filelink"), StoreError);
    CHECK_THROWS_AS(h.set("dirlink/new", "x"), StoreError);
    CHECK_THROWS_AS(h.erase("dirlink/secret"), StoreError);
    CHECK_THROWS_AS(h.list("dirlink/"), StoreError);
    try {
      h.get("dirlink/secret");
    } catch (const StoreError& e) {
      CHECK(e.key() == "dirlink/secret");
    }
    CHECK(files_below(outside) == Strings{"secret"});
    CHECK(slurp(outside / "secret") == "secret");
    // Writing or erasing the link itself is safe: the link is replaced or
    // removed, its target stays.
    h.set("filelink", "x");
    CHECK_FALSE(fs::is_symlink(root / "filelink"));
    CHECK(h.text("filelink") == "x");
    CHECK(slurp(outside / "secret") == "secret");
    fs::create_symlink(outside / "secret", root / "filelink2");
    h.erase("filelink2");
    CHECK_FALSE(fs::is_symlink(root / "filelink2"));
    CHECK(slurp(outside / "secret") == "secret");
    h.erase("filelink");
    CHECK(h.list("") == Strings{});  // the directory link is not descended into
  }

  SECTION("symlinks inside the root are followed") {
    h.set("real/v", "data");
    fs::create_directory_symlink(root / "real", root / "alias");
    fs::create_symlink("real/v", root / "vlink");
    CHECK(h.text("alias/v") == "data");
    CHECK(h.text("vlink") == "data");
    h.set("alias/w", "via alias");  // through a directory link
    CHECK(slurp(root / "real/w") == "via alias");
    h.erase("alias/w");
    CHECK_FALSE(fs::exists(root / "real/w"));
    h.set("vlink", "new");  // replaces the link, as zarr-python and TensorStore do
    CHECK_FALSE(fs::is_symlink(root / "vlink"));
    CHECK(h.text("real/v") == "data");
    CHECK(h.text("vlink") == "new");
  }
}

// The swapper exchanges root/a (a real directory) with root/swap (a link to a
// directory outside the root) as fast as it can, while the store writes or
// lists through "a". A store that resolves a path in user space and then uses
// the path (as create_directories and directory_iterator do) follows the link
// when the exchange lands in between.
class DirectorySwapper {
 public:
  DirectorySwapper(const fs::path& root, const fs::path& outside) : root_(root) {
    fs::create_directories(root / "a");
    fs::create_directory_symlink(outside, root / "swap");
    thread_ = std::thread([this] {
      const std::string a = root_ / "a", swap = root_ / "swap";
      while (!stop_.load()) {
        if (::syscall(SYS_renameat2, AT_FDCWD, a.c_str(), AT_FDCWD, swap.c_str(), RENAME_EXCHANGE) == 0)
          swaps_.fetch_add(1);
        std::this_thread::sleep_for(std::chrono::microseconds(swaps_.load() % 2 ? 10 : 40));  // mostly a directory
      }
    });
  }
  ~DirectorySwapper() { stop(); }
  std::uint64_t stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    return swaps_.load();
  }

 private:
  fs::path root_;
  std::atomic<bool> stop_{false};
  std::atomic<std::uint64_t> swaps_{0};
  std::thread thread_;
};

TEST_CASE("FilesystemStore: rewrites of a value of one size get ever later modification times, so its generation "
          "never repeats where the file system's clock is coarse (was: one tick of kernels before 6.13)",
          "[stores][filesystem][regression]") {
  // Where file times come from a coarse clock (kernels before 6.13 stamp
  // them with the last tick), rewrites within a tick had one mtime and,
  // the inode reused and the size the same, one generation. Kernels with
  // multigrain timestamps (6.13 on, as on the machine this was written on)
  // give distinct times on their own, so there the test passes either way.
  test::TempDir tmp("stores");
  const fs::path root = tmp.path / "root";
  StoreHarness h(filesystem_factory(root, kUring));
  std::set<std::string> generations;
  std::int64_t last = 0;
  for (int i = 0; i < 200; ++i) {
    const auto g = h.write("c/0", std::string_view(i % 2 ? "AAAA" : "BBBB"), Generation{});
    REQUIRE(g);
    struct stat st {};
    REQUIRE(::stat((root / "c/0").c_str(), &st) == 0);
    const std::int64_t mtime = std::int64_t{st.st_mtim.tv_sec} * 1'000'000'000 + st.st_mtim.tv_nsec;
    INFO("write " << i);
    CHECK(mtime > last);
    last = mtime;
    CHECK(generations.insert(g->token).second);
  }
}

TEST_CASE("FilesystemStore: where times are coarse, A, B, A of one size have distinct generations by the inode's "
          "version, or unknown ones (was: on a file system that keeps seconds, the second A had the first one's)",
          "[stores][filesystem][regression]") {
  // Such a file system (ext4 with 128-byte inodes, FAT, exFAT, some network
  // file systems) drops the nanoseconds each write sets, and ext4 hands a
  // freed inode straight back: A's generation came back with the second A,
  // and a conditional write on it replaced B unseen. Here the times such a
  // file system would keep are set by hand after each write.
  const bool uring = GENERATE(false, true);
  INFO((uring ? "io_uring" : "blocking pool"));
  test::TempDir tmp("stores");
  const fs::path root = tmp.path / "root";
  const std::string file = (root / "c/0").string();
  StoreHarness h(filesystem_factory(root, uring ? kUring : kFallback));
  const auto written = h.write("c/0", "AAAA", Generation{});
  REQUIRE(written);
  CHECK_FALSE(written->unknown());  // the time this write set is kept whole here
  struct stat st {};
  REQUIRE(::stat(file.c_str(), &st) == 0);
  CHECK(st.st_mtim.tv_nsec % 1000 == 1);
  CHECK(h.read("c/0").generation == *written);
  // Whether this file system gives inodes a version (ext4, XFS, btrfs do).
  const bool versions = test::inode_versions(file);
  INFO("inode versions: " << versions);
  auto coarsen = [&](long ns) {  // seconds, 10 ms (exFAT), microseconds
    const timespec times[2] = {{0, UTIME_OMIT}, {1'000'000'000, ns}};
    REQUIRE(::utimensat(AT_FDCWD, file.c_str(), times, 0) == 0);
  };
  for (const long ns : {0L, 500'000'000L, 123'456'000L}) {
    INFO("ns " << ns);
    coarsen(ns);
    const ReadResult a = h.read("c/0");
    REQUIRE(a.value);
    CHECK(a.generation.unknown() == !versions);
    if (!versions) continue;
    REQUIRE(h.write("c/0", "BBBB", Generation{}));
    coarsen(ns);
    REQUIRE(h.write("c/0", "AAAA", Generation{}));
    coarsen(ns);
    const ReadResult again = h.read("c/0");
    CHECK(again.generation != a.generation);  // by the version, whatever inode came back
    CHECK_FALSE(h.write("c/0", "DDDD", a.generation).has_value());
    CHECK(h.text("c/0") == "AAAA");
    CHECK(h.write("c/0", "EEEE", again.generation).has_value());
    CHECK(h.text("c/0") == "EEEE");
  }
}

TEST_CASE("FilesystemStore: A, B, A renamed in by another program within one tick of a coarse clock have distinct "
          "generations by the inode's version, or ones that may repeat (was: the inode number came back, and with the "
          "size and time, the generation)",
          "[stores][filesystem][regression]") {
  // zarr-python renames a new file over a value; the file system stamps it
  // with its own clock, which before kernel 6.13 repeats one time for every
  // write within a tick (set by hand here), and ext4 hands the freed inode
  // number to the next new file. A cached shard index or a conditional
  // write then took the second A for the first. Without inode versions
  // (tmpfs, overlayfs) the generations may repeat, and say so.
  const bool uring = GENERATE(false, true);
  INFO((uring ? "io_uring" : "blocking pool"));
  test::TempDir tmp("stores");
  const fs::path root = tmp.path / "root";
  StoreHarness h(filesystem_factory(root, uring ? kUring : kFallback));
  REQUIRE(h.write("c/0", "AAAA", Generation{}));
  const fs::path file = root / "c/0";
  constexpr std::int64_t tick = 1'700'000'000'123'456'789;  // finer than a microsecond, not the engine's mark
  auto other_program_writes = [&](std::string_view text) {
    test::replace_file(file, std::as_bytes(std::span(text)), tick);
    struct stat st {};
    REQUIRE(::stat(file.c_str(), &st) == 0);
    return st.st_ino;
  };
  const auto first_inode = other_program_writes("AAAA");
  const ReadResult first = h.read("c/0");
  REQUIRE_FALSE(first.generation.unknown());
  other_program_writes("BBBB");
  if (other_program_writes("AAAA") != first_inode)
    WARN("this file system did not hand the inode number back (tmpfs, btrfs): the case cannot arise here");
  const ReadResult again = h.read("c/0");
  if (!test::inode_versions(file)) {
    CHECK(first.generation.may_repeat);
    CHECK(again.generation.may_repeat);
    return;
  }
  CHECK_FALSE(again.generation.may_repeat);
  CHECK(again.generation != first.generation);
  CHECK_FALSE(h.write("c/0", "DDDD", first.generation).has_value());
  CHECK(h.text("c/0") == "AAAA");
  CHECK(h.write("c/0", "EEEE", again.generation).has_value());
  CHECK(h.text("c/0") == "EEEE");
}

TEST_CASE("FilesystemStore on a file system without inode versions: another program's file has a generation that "
          "may repeat, the engine's own a lasting one (was: a cache kept a shard index by a generation that repeats)",
          "[stores][filesystem][regression]") {
  // overlayfs, NFS and most FUSE file systems have no FS_IOC_GETVERSION
  // (refused here, as they refuse it): A, B, A renamed in by another
  // program within one tick of a coarse clock then have one generation.
  test::TempDir tmp("stores");
  const fs::path file = tmp.path / "c" / "0";
  const auto status = in_child([&] {
    if (!test::refuse_ioctl(FS_IOC_GETVERSION, ENOTTY)) return kChildSkipped;
    StoreHarness h(filesystem_factory(tmp.path, kUring));
    const auto written = h.write("c/0", "AAAA", Generation{});
    if (!written || written->unknown() || written->may_repeat) return 20;
    const ReadResult own = h.read("c/0");
    if (!(own.generation == *written) || own.generation.may_repeat) return 21;
    test::replace_file(file, std::as_bytes(std::span(std::string_view("BBBB"))), 1'700'000'000'123'456'789);
    const ReadResult other = h.read("c/0");
    if (other.generation.unknown() || !other.generation.may_repeat) return 22;
    // Good for a condition checked at once.
    if (h.write("c/0", "CCCC", other.generation) != std::nullopt && h.text("c/0") == "CCCC") return 0;
    return 23;
  });
  if (status) CHECK(*status == 0);
}

TEST_CASE("FilesystemStore: an unconditional write never lands between a conditional write's check and its rename "
          "(was: the conditional write replaced it unseen)",
          "[stores][filesystem][regression]") {
  // Two stores on one root, as two processes would be. The second one's
  // write starts while the first one's conditional write has checked the
  // generation and not yet renamed: it must wait for that rename, and land
  // after it, not before (where the rename would replace it unseen).
  const bool uring = GENERATE(false, true);
  INFO((uring ? "io_uring" : "blocking pool"));
  test::TempDir tmp("stores");
  const fs::path root = tmp.path / "root";
  StoreHarness h(filesystem_factory(root, uring ? kUring : kFallback)),
      other(filesystem_factory(root, uring ? kUring : kFallback));
  h.set("a/k", "old");
  const Generation old = h.read("a/k").generation;
  std::future<void> theirs;
  {
    std::lock_guard lock(test::rename_hook_mu);
    test::before_next_rename = [&] {
      theirs = std::async(std::launch::async, [&] { other.set("a/k", "theirs"); });
      // Done at once without the lock; with it, waits for this rename.
      theirs.wait_for(test::scaled(std::chrono::milliseconds(500)));
    };
  }
  const auto mine = h.write("a/k", "mine", old);
  REQUIRE(theirs.valid());
  theirs.get();
  CHECK(mine.has_value());          // nothing landed between its check and its rename
  CHECK(h.text("a/k") == "theirs");  // and the later write was not lost
}

TEST_CASE("FilesystemStore: a directory swapped for a symlink mid-write never creates anything outside the root",
          "[stores][filesystem]") {
  const bool components = GENERATE(false, true);
  INFO((components ? "per-component openat" : "openat2"));
  test::TempDir tmp("stores");
  const fs::path root = tmp.path / "root", outside = tmp.path / "outside";
  fs::create_directories(outside);
  StoreHarness h(filesystem_factory(root, components ? kComponents : kUring));
  DirectorySwapper swapper(root, outside);
  int written = 0, refused = 0;
  Strings other_keys;
  for (int i = 0; i < 3000; ++i) {
    try {
      h.set("a/b/c/k", "x");  // creates a/b/c when missing
      h.erase("a/b/c/k");     // prunes a/b/c and a/b again
      ++written;
    } catch (const StoreError& e) {  // "a" was the link when the store looked
      ++refused;
      if (e.key() != "a/b/c/k") other_keys.push_back(e.what());
    }
  }
  CHECK(other_keys == Strings{});  // a refusal names the key written, not a directory on its way
  INFO("swaps " << swapper.stop() << ", written " << written << ", refused " << refused);
  CHECK(written > 0);
  CHECK(files_below(outside) == Strings{});
  CHECK(fs::is_empty(outside));
}

TEST_CASE("FilesystemStore: a directory swapped for a symlink mid-list never lists names outside the root",
          "[stores][filesystem]") {
  const bool components = GENERATE(false, true);
  INFO((components ? "per-component openat" : "openat2"));
  test::TempDir tmp("stores");
  const fs::path root = tmp.path / "root", outside = tmp.path / "outside";
  for (int i = 0; i < 8; ++i) spit(outside / ("secret" + std::to_string(i)), "secret");
  StoreHarness h(filesystem_factory(root, components ? kComponents : kUring));
  h.set("a/k", "inside");
  h.set("z", "inside");
  DirectorySwapper swapper(root, outside);
  int lists = 0;
  Strings leaked;
  for (; lists < 3000 && leaked.empty(); ++lists)
    for (const auto& key : h.list(""))
      if (key.find("secret") != std::string::npos) leaked.push_back(key);
  INFO("swaps " << swapper.stop() << ", lists " << lists);
  CHECK(leaked == Strings{});
}

TEST_CASE("FilesystemStore: falls back at runtime when io_uring_setup is refused",
          "[stores][filesystem]") {
  test::TempDir tmp("stores");
  // seccomp filters cannot be removed, so the refusal runs in a child process.
  const auto status = in_child([&] {
    if (!refuse_syscalls({__NR_io_uring_setup})) return kChildSkipped;
    if (io_uring_works()) return 10;
    boost::asio::io_context io;
    auto store = std::make_shared<FilesystemStore>(io.get_executor(), tmp.path, kUring);
    if (store->uses_io_uring()) return 11;
    StoreHarness h([&](boost::asio::any_io_executor) { return store; });
    h.set("a/b", "value");
    if (h.text("a/b", ByteRange::from(1, 3)) != "alu") return 12;
    if (h.list("") != Strings{"a/b"}) return 13;
    return 0;
  });
  if (!status) return;
  CHECK(*status == 0);
  CHECK(slurp(tmp.path / "a/b") == "value");
}

// ---------------------------------------------------------------------------
// CountingStore

TEST_CASE("CountingStore: counts every request exactly", "[stores][counting]") {
  auto counting = std::make_shared<CountingStore>(std::make_shared<MemoryStore>());
  StoreHarness h([&](boost::asio::any_io_executor) { return counting; });
  CHECK(counting->url() == "counting+memory://");
  CHECK(counting->counts() == CountingStore::Counts{});

  h.set("a", "abc");
  h.set("b", "hello");
  CHECK(h.text("a") == "abc");
  CHECK(h.text("b", ByteRange::from(1, 2)) == "el");
  CHECK(h.text("b", ByteRange::last(10)) == "hello");
  CHECK_FALSE(h.get("missing").has_value());
  CHECK(h.exists("a"));
  CHECK_FALSE(h.exists("z"));
  CHECK(h.list("") == Strings{"a", "b"});
  h.erase("a");
  h.erase("z");
  CHECK_THROWS_AS(h.get("../x"), InvalidArgument);

  // get and exists are reads (exists of an empty range), set and erase writes.
  const auto c = counting->counts();
  CHECK(c.gets == 7);
  CHECK(c.get_bytes == 3 + 2 + 5);
  CHECK(c.get_misses == 2);
  CHECK(c.sets == 2);
  CHECK(c.set_bytes == 8);
  CHECK(c.lists == 1);
  CHECK(c.erases == 2);
  CHECK(c.requests() == 12);

  const auto log = counting->gets_log();
  REQUIRE(log.size() == 7);
  CHECK(log[0].first == "a");
  CHECK(log[0].second.kind == ByteRange::Kind::full);
  CHECK(log[1].first == "b");
  CHECK(log[1].second.kind == ByteRange::Kind::range);
  CHECK(log[1].second.offset == 1);
  CHECK(log[1].second.length == 2);
  CHECK(log[2].second.kind == ByteRange::Kind::suffix);
  CHECK(log[2].second.length == 10);
  CHECK(log[3].first == "missing");
  for (const std::size_t k : {4, 5}) {
    CHECK(log[k].first == (k == 4 ? "a" : "z"));
    CHECK(log[k].second.kind == ByteRange::Kind::range);
    CHECK(log[k].second.length == 0);
  }
  CHECK(log[6].first == "../x");

  counting->reset();
  CHECK(counting->counts() == CountingStore::Counts{});
  CHECK(counting->gets_log().empty());
  CHECK(h.text("b") == "hello");
  CHECK(counting->counts().gets == 1);
  CHECK(counting->counts().requests() == 1);
}

TEST_CASE("CountingStore: rejects a null inner store", "[stores][counting]") {
  CHECK_THROWS_AS(CountingStore(nullptr), InvalidArgument);
}

TEST_CASE("FilesystemStore: a read opens its file once, small or large, cached or not", "[stores][filesystem]") {
  const int mode = GENERATE(0, 1);
  INFO((mode == 0 ? "io_uring" : "fallback pool"));
  test::TempDir tmp("stores");
  StoreHarness h(filesystem_factory(tmp.path, mode == 0 ? kUring : kFallback));
  Bytes large((std::size_t{256} << 10) + 1);
  for (std::size_t i = 0; i < large.size(); ++i) large[i] = std::byte(i * 7);
  const Bytes small(large.begin(), large.begin() + 4096);
  h.set("small", small);
  h.set("large", large);
  // inotify reports every open of a watched file.
  const int in = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  REQUIRE(in >= 0);
  auto opens = [&](const char* name, auto&& read) {
    // (Closes are watched too: successive identical events would be merged.)
    const int wd = ::inotify_add_watch(in, (tmp.path / name).c_str(), IN_OPEN | IN_CLOSE_NOWRITE);
    REQUIRE(wd >= 0);
    read();
    int n = 0;
    alignas(inotify_event) char buf[4096];
    for (ssize_t got; (got = ::read(in, buf, sizeof buf)) > 0;)
      for (char* p = buf; p < buf + got; p += sizeof(inotify_event) + reinterpret_cast<inotify_event*>(p)->len)
        n += (reinterpret_cast<inotify_event*>(p)->mask & IN_OPEN) != 0;
    ::inotify_rm_watch(in, wd);
    return n;
  };
  CHECK(opens("small", [&] { CHECK(*h.get("small") == small); }) == 1);
  CHECK(opens("large", [&] { CHECK(*h.get("large") == large); }) == 1);  // more than the at-once limit
  const int fd = ::open((tmp.path / "small").c_str(), O_RDONLY);  // evicted: io_uring reads it
  REQUIRE(fd >= 0);
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
  CHECK(opens("small", [&] { CHECK(*h.get("small") == small); }) == 1);
  ::close(in);
}

// The harness's FilesystemStore if it can answer at once (on io_uring), else null, with a warning.
static FilesystemStore* store_answering_now(StoreHarness& h) {
  auto* store = static_cast<FilesystemStore*>(h.store.get());
  if (store->uses_io_uring()) return store;
  WARN("SKIPPED: io_uring is unavailable here, so the store answers nothing at once");
  return nullptr;
}

TEST_CASE("FilesystemStore: small page-cached reads are answered at once, large and cold ones are not",
          "[stores][filesystem]") {
  test::TempDir tmp("stores");
  StoreHarness h(filesystem_factory(tmp.path, kUring));
  auto* store = store_answering_now(h);
  if (!store) return;
  Bytes small(4096), large((std::size_t{256} << 10) + 1);
  for (std::size_t i = 0; i < large.size(); ++i) large[i] = std::byte(i * 7);
  std::copy_n(large.begin(), small.size(), small.begin());
  h.set("small", small);
  h.set("large", large);
  const ReadOptions whole{};
  const auto now = store->try_read_now("small", whole);
  REQUIRE(now);
  REQUIRE(now->value);
  CHECK(*now->value == small);
  CHECK(now->generation == h.read("small").generation);
  CHECK_FALSE(store->try_read_now("large", whole));  // more than 256 KiB: not on the caller's thread
  ReadOptions head;
  head.range = ByteRange::from(0, 4096);
  const auto part = store->try_read_now("large", head);  // a small range of it is
  REQUIRE(part);
  CHECK(*part->value == small);
  CHECK(*h.get("large") == large);  // read() answers the large one on the pool
  const auto missing = store->try_read_now("nope", whole);
  REQUIRE(missing);
  CHECK_FALSE(missing->value);
  // Evicted from the page cache: not answered at once (where the kernel
  // drops clean pages on request), but read() still returns the bytes.
  const int fd = ::open((tmp.path / "small").c_str(), O_RDONLY);
  REQUIRE(fd >= 0);
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
  if (store->try_read_now("small", whole)) WARN("the kernel kept the file's pages; the cold path was not exercised");
  // The cold read goes through io_uring, into the caller's buffer when asked.
  Bytes into(small.size(), std::byte{0xEE});
  ReadOptions in_place;
  in_place.into = into;
  const ReadResult cold = test::run(h.io, store->read("small", std::move(in_place)));
  REQUIRE(cold.value);
  CHECK(cold.in_place);
  CHECK(into == small);
  CHECK(*h.get("small") == small);
}

namespace {
// Sizes around a page (where a read without waiting may stop short) and a
// few chunk sizes, for the reads that find a value's end without fstat.
std::array<std::size_t, 7> sizes_around_a_page(std::size_t page) {
  return {1, 4000, page - 1, page, page + 1, 2 * page, 3 * page + 5};
}

// A value whose bytes depend on its size.
Bytes sized_value(std::size_t n) {
  Bytes b(n);
  for (std::size_t i = 0; i < n; ++i) b[i] = std::byte(i * 13 + n);
  return b;
}

// Stores sized_value(n) under "v/<n>" for each size; returns the keys in that order.
std::vector<std::string> put_sized_values(StoreHarness& h, std::span<const std::size_t> sizes) {
  std::vector<std::string> keys;
  for (std::size_t n : sizes) {
    keys.push_back("v/" + std::to_string(n));
    h.set(keys.back(), sized_value(n));
  }
  return keys;
}
}  // namespace

TEST_CASE("FilesystemStore: a read into a buffer of the value's size needing no generation costs open, read and "
          "close, and a value of another size is never taken for it",
          "[stores][filesystem]") {
  test::TempDir tmp("stores");
  const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  const auto sizes = sizes_around_a_page(page);
  const auto value = sized_value;
  std::vector<std::string> keys;
  {
    StoreHarness h(filesystem_factory(tmp.path, kUring));
    auto* store = store_answering_now(h);
    if (!store) return;
    keys = put_sized_values(h, sizes);
    fs::create_directories(tmp.path / "dir");
    keys.push_back("dir");   // a directory: no value
    keys.push_back("nope");  // absent
    // A buffer of each size, and of one byte less and more: only the exact size is read in place.
    for (int delta : {0, -1, 1}) {
      INFO("buffer size - value size = " << delta);
      std::vector<Bytes> buffers;
      std::vector<ReadOptions> options(keys.size());
      for (std::size_t k = 0; k < keys.size(); ++k) {
        const std::size_t n = k < std::size(sizes) ? sizes[k] : 8;
        buffers.emplace_back(n + delta, std::byte{0xEE});
        options[k].into = buffers.back();
        options[k].need_generation = false;
      }
      std::vector<ReadNow> out(keys.size());
      store->try_read_now_many(keys, options, out);
      for (std::size_t k = 0; k < keys.size(); ++k) {
        INFO(keys[k]);
        REQUIRE_FALSE(out[k].error);
        REQUIRE(out[k].result);
        const ReadResult& r = *out[k].result;
        if (k >= std::size(sizes)) {
          CHECK_FALSE(r.value);
          continue;
        }
        REQUIRE(r.value);
        CHECK(r.in_place == (delta == 0));
        CHECK((r.in_place ? buffers[k] : *r.value) == value(sizes[k]));
      }
    }
  }  // the store's threads end here: the child below is forked without them
  // With every stat system call refused (seccomp, in a child process, all
  // threads), the exact-size reads and the absent key still answer: open,
  // read and close only. (A directory goes the usual way: preadv2 without
  // waiting refuses it with EOPNOTSUPP, as on a file system that cannot say.)
  keys.erase(keys.end() - 2);
  std::vector<Bytes> buffers;
  std::vector<ReadOptions> options(keys.size());
  for (std::size_t k = 0; k < keys.size(); ++k) {
    buffers.emplace_back(k < std::size(sizes) ? sizes[k] : 8);
    options[k].into = buffers.back();
    options[k].need_generation = false;
  }
  const auto status = in_child([&] {
    boost::asio::io_context io;
    FilesystemStore store(io.get_executor(), tmp.path, kUring);
    if (!store.uses_io_uring()) return 19;
    if (!refuse_syscalls({__NR_newfstatat, __NR_fstat, __NR_statx})) return kChildSkipped;
    std::vector<ReadNow> out(keys.size());
    store.try_read_now_many(keys, options, out);
    for (std::size_t k = 0; k < keys.size(); ++k) {
      if (out[k].error || !out[k].result) return 20 + static_cast<int>(k);
      const ReadResult& r = *out[k].result;
      const bool ok = k < std::size(sizes) ? r.in_place && buffers[k] == value(sizes[k]) : !r.value;
      if (!ok) return 40 + static_cast<int>(k);
    }
    return 0;
  });
  if (status) CHECK(*status == 0);
}

TEST_CASE("FilesystemStore: a whole read with a size hint needing no generation costs open, read and close, and a "
          "value longer than the hint still reads whole",
          "[stores][filesystem]") {
  test::TempDir tmp("stores");
  const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  const auto sizes = sizes_around_a_page(page);
  const auto value = sized_value;
  std::vector<std::string> keys;
  {
    StoreHarness h(filesystem_factory(tmp.path, kUring));
    auto* store = store_answering_now(h);
    if (!store) return;
    keys = put_sized_values(h, sizes);
    h.set("empty", Bytes());
    fs::create_directories(tmp.path / "dir");
    keys.push_back("empty");  // a value of no bytes: the usual path
    keys.push_back("dir");    // a directory: no value
    keys.push_back("nope");   // absent
    // A hint of the exact size, one byte less or more, and about twice the
    // size: every value reads whole, its generation known only where the
    // hint fell short (the usual path, with fstat).
    for (std::size_t factor : {1, 2}) {
      for (int delta : {0, -1, 1}) {
        INFO("hint = " << factor << " x size + " << delta);
        std::vector<ReadOptions> options(keys.size());
        for (std::size_t k = 0; k < keys.size(); ++k) {
          const std::size_t n = k < std::size(sizes) ? sizes[k] : 8;
          options[k].size_hint = factor * n + delta;
          options[k].need_generation = false;
        }
        std::vector<ReadNow> out(keys.size());
        store->try_read_now_many(keys, options, out);
        for (std::size_t k = 0; k < keys.size(); ++k) {
          INFO(keys[k] << ", hint " << options[k].size_hint);
          REQUIRE_FALSE(out[k].error);
          REQUIRE(out[k].result);
          const ReadResult& r = *out[k].result;
          if (keys[k] == "empty") {
            REQUIRE(r.value);
            CHECK(r.value->empty());
            CHECK_FALSE(r.generation.unknown());
            continue;
          }
          if (k >= std::size(sizes)) {
            CHECK_FALSE(r.value);
            if (keys[k] == "nope") CHECK(r.generation == Generation::absent());
            continue;
          }
          REQUIRE(r.value);
          CHECK_FALSE(r.in_place);
          CHECK(*r.value == value(sizes[k]));
          CHECK(r.generation.unknown() == (options[k].size_hint >= sizes[k]));
        }
      }
    }
    // A value whose third page is not in the page cache: a read without
    // waiting stops there, after a multiple of the page size, which must
    // not be taken for the end of the value. Either the read does not
    // answer at once or it answers the whole value.
    const std::size_t last = std::size(sizes) - 1;  // 3 pages and 5 bytes
    const int fd = ::open((tmp.path / keys[last]).c_str(), O_RDONLY);
    REQUIRE(fd >= 0);
    ::fdatasync(fd);
    ::posix_fadvise(fd, static_cast<off_t>(2 * page), static_cast<off_t>(page), POSIX_FADV_DONTNEED);
    const std::vector<bool> resident = resident_pages(fd, 4);
    ::close(fd);
    if (resident[0] && resident[1] && !resident[2]) {
      ReadOptions o;
      o.size_hint = 4 * page;
      o.need_generation = false;
      const auto r = store->try_read_now(keys[last], o);
      if (r) {
        REQUIRE(r->value);
        CHECK(*r->value == value(sizes[last]));
      }
    } else {
      WARN("the kernel kept the third page (or dropped the first two): a read stopping at an uncached page was not "
           "exercised");
    }
  }  // the store's threads end here: the child below is forked without them
  // With every stat system call refused (seccomp, in a child process, all
  // threads), values within their hint and the absent key still answer:
  // open, read and close only.
  keys.erase(keys.end() - 3, keys.end() - 1);  // "empty" and "dir" go the usual way
  std::vector<ReadOptions> options(keys.size());
  for (std::size_t k = 0; k < keys.size(); ++k) {
    options[k].size_hint = k < std::size(sizes) ? sizes[k] + 100 : 8;
    options[k].need_generation = false;
  }
  const auto status = in_child([&] {
    boost::asio::io_context io;
    FilesystemStore store(io.get_executor(), tmp.path, kUring);
    if (!store.uses_io_uring()) return 19;
    if (!refuse_syscalls({__NR_newfstatat, __NR_fstat, __NR_statx})) return kChildSkipped;
    std::vector<ReadNow> out(keys.size());
    store.try_read_now_many(keys, options, out);
    for (std::size_t k = 0; k < keys.size(); ++k) {
      if (out[k].error || !out[k].result) return 20 + static_cast<int>(k);
      const ReadResult& r = *out[k].result;
      const bool ok = k < std::size(sizes) ? r.value && *r.value == value(sizes[k]) : !r.value;
      if (!ok) return 40 + static_cast<int>(k);
    }
    return 0;
  });
  if (status) CHECK(*status == 0);
}

TEST_CASE("FilesystemStore: try_read_now declines a whole value expected above 256 KiB without opening it, and "
          "read() then answers it",
          "[stores][filesystem]") {
  test::TempDir tmp("stores");
  const std::string big(300 << 10, 'b'), small = "small";
  {
    StoreHarness h(filesystem_factory(tmp.path, kUring));
    if (!store_answering_now(h)) return;
    h.set("big", big);
    h.set("small", small);
    ReadOptions o;
    o.size_hint = big.size() + 100;  // an engine's hint for a large chunk
    CHECK_FALSE(h.store->try_read_now("big", o));
    o.need_generation = false;
    CHECK_FALSE(h.store->try_read_now("big", o));
    const ReadResult got = h.read("big");
    REQUIRE(got.value);
    CHECK(*got.value == bytes_of(big));
  }  // the store's threads end here: the child below is forked without them
  // With every open refused (seccomp, in a child), a whole read hinted or
  // aimed (ReadOptions::into) above 256 KiB still declines, whatever the
  // value's real size: it opened nothing. One hinted small does try, and
  // fails on the refused open.
  const auto status = in_child([&] {
    boost::asio::io_context io;
    FilesystemStore store(io.get_executor(), tmp.path, kUring);
    if (!store.uses_io_uring()) return 19;
    if (!refuse_syscalls({__NR_openat, __NR_openat2, __NR_open})) return kChildSkipped;
    for (const char* key : {"big", "small", "nope"}) {
      ReadOptions hinted;
      hinted.size_hint = (256 << 10) + 1;
      if (store.try_read_now(key, hinted)) return 20;
      Bytes buffer((256 << 10) + 1);
      ReadOptions into;
      into.into = buffer;
      into.need_generation = false;
      if (store.try_read_now(key, into)) return 21;
    }
    ReadOptions small_hint;
    small_hint.size_hint = 100;
    try {
      store.try_read_now("small", small_hint);
      return 22;
    } catch (const Error&) {
    }
    return 0;
  });
  if (status) CHECK(*status == 0);
}

TEST_CASE("FilesystemStore: try_read_now with caches_only declines a path the kernel has not looked up, and answers "
          "it once it has",
          "[stores][filesystem]") {
  // A caller's thread must never wait for the disk, not even for a directory
  // lookup: caches_only opens only through the kernel's lookup cache. A
  // missing key never looked up is not in it; the usual read looks it up
  // (and the kernel remembers that it is missing).
  test::TempDir tmp("stores");
  StoreHarness h(filesystem_factory(tmp.path, kUring));
  auto* store = store_answering_now(h);
  if (!store) return;
  if (!FilesystemStore::resolves_cached()) {
    WARN("SKIPPED: the kernel cannot open through its lookup cache alone (RESOLVE_CACHED, Linux >= 5.12)");
    return;
  }
  h.set("c/0", std::string(4096, 'x'));
  Bytes into(4096);
  ReadOptions cached;
  cached.caches_only = true;
  cached.need_generation = false;
  cached.into = into;
  const auto present = store->try_read_now("c/0", cached);  // written through this kernel: looked up
  REQUIRE(present);
  CHECK(present->in_place);
  CHECK(into == bytes_of(std::string(4096, 'x')));
  CHECK_FALSE(store->try_read_now("c/1", cached));  // never looked up
  CHECK_FALSE(h.read("c/1").value);                 // the usual path looks it up: absent
  const auto missing = store->try_read_now("c/1", cached);
  REQUIRE(missing);
  CHECK_FALSE(missing->value);
  CHECK(missing->generation == Generation::absent());
}

TEST_CASE("FilesystemStore: a whole read at once into a page takes a file of exactly that page and never the first "
          "page of a longer file",
          "[stores][filesystem]") {
  // A read without waiting that fills a page-multiple buffer may have
  // stopped at an uncached page: its end must be found (a second read, or
  // lseek on ext4, XFS, btrfs and F2FS) before the value is taken in place.
  test::TempDir tmp("stores");
  StoreHarness h(filesystem_factory(tmp.path, kUring));
  auto* store = store_answering_now(h);
  if (!store) return;
  const std::size_t page_size = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  const std::string page(page_size, 'p'), longer = std::string(page_size, 'l') + std::string(page_size, 'm');
  h.set("c/0", page);
  h.set("c/1", longer);
  for (const bool caches_only : {true, false}) {
    if (caches_only && !FilesystemStore::resolves_cached()) continue;
    INFO("caches_only " << caches_only);
    // c/1 leaves the page cache, and its first page alone comes back (no
    // readahead): a read without waiting stops after it.
    const int fd = ::open((tmp.path / "c/1").c_str(), O_RDONLY);
    REQUIRE(fd >= 0);
    ::fdatasync(fd);
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM);
    char first = 0;
    REQUIRE(::pread(fd, &first, 1, 0) == 1);
    const std::vector<bool> resident = resident_pages(fd, 2);
    ::close(fd);
    if (!resident[0] || resident[1])
      WARN("the kernel kept c/1's second page (or dropped its first): a read stopping at an uncached page was not "
           "exercised");
    Bytes into(page_size);
    ReadOptions o;
    o.caches_only = caches_only;
    o.need_generation = false;
    o.into = into;
    const auto exact = store->try_read_now("c/0", o);
    REQUIRE(exact);
    CHECK(exact->in_place);
    CHECK(into == bytes_of(page));
    const auto got = store->try_read_now("c/1", o);  // declined, or the whole file as a value of its own
    if (got) {
      CHECK_FALSE(got->in_place);
      REQUIRE(got->value);
      CHECK(*got->value == bytes_of(longer));
    }
    CHECK(h.read("c/1").value == bytes_of(longer));
  }
}

TEST_CASE("FilesystemStore: a whole read at once of a key beneath another mount takes open and read alone",
          "[stores][filesystem]") {
  // The read that finds a file's end with lseek opens only on the root's
  // mount (RESOLVE_NO_XDEV). A key beneath a bind mount is opened again
  // the usual way, its end found by reading: answered with fstat and lseek
  // refused.
  test::TempDir tmp("stores");
  struct statfs fs_info {};
  REQUIRE(::statfs(tmp.path.c_str(), &fs_info) == 0);
  if (fs_info.f_type != EXT4_SUPER_MAGIC && fs_info.f_type != XFS_SUPER_MAGIC &&
      fs_info.f_type != BTRFS_SUPER_MAGIC && fs_info.f_type != F2FS_SUPER_MAGIC)
    WARN("the temporary directory is not on ext4, XFS, btrfs or F2FS: the store never reads a size with lseek there");
  const fs::path root = tmp.path / "root", outside = tmp.path / "outside";
  fs::create_directories(root / "m");
  const std::string page(static_cast<std::size_t>(::sysconf(_SC_PAGESIZE)), 'q');
  spit(outside / "c0", page);
  constexpr int kNoMount = 78;
  const auto status = in_child([&] {
    // A bind mount of `outside` at root/m, in a mount namespace of the
    // child's own (as root, or in a user namespace of its own).
    if (::unshare(CLONE_NEWNS) != 0 && ::unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0) return kNoMount;
    if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) return kNoMount;
    if (::mount(outside.c_str(), (root / "m").c_str(), nullptr, MS_BIND, nullptr) != 0) return kNoMount;
    boost::asio::io_context io;
    FilesystemStore store(io.get_executor(), root, kUring);
    if (!store.uses_io_uring() || !FilesystemStore::resolves_cached()) return kNoMount;
    if (!refuse_syscalls({__NR_newfstatat, __NR_fstat, __NR_statx, __NR_lseek})) return kChildSkipped;
    Bytes into(page.size());
    ReadOptions o;
    o.caches_only = true;
    o.need_generation = false;
    o.into = into;
    const auto r = store.try_read_now("m/c0", o);
    if (!r || !r->in_place) return 20;
    return into == bytes_of(page) ? 0 : 21;
  });
  if (status == kNoMount) {
    WARN("SKIPPED: no bind mount in a mount namespace of a child's own here (or no io_uring, or no RESOLVE_CACHED)");
    return;
  }
  if (status) CHECK(*status == 0);
}

// in_child of `body` on a FilesystemStore with io_uring over a fresh root
// holding "c/0"; 19 where this machine has no io_uring.
std::optional<int> in_child_with_store(const std::function<int(FilesystemStore&)>& body) {
  test::TempDir tmp("stores");
  spit(tmp.path / "c" / "0", "value");
  return in_child([&] {
    boost::asio::io_context io;
    FilesystemStore store(io.get_executor(), tmp.path, kUring);
    if (!store.uses_io_uring()) return 19;
    return body(store);
  });
}

TEST_CASE("FilesystemStore on a kernel without RESOLVE_CACHED: a read that must not wait declines and never opens",
          "[stores][filesystem][regression]") {
  // Linux 5.6-5.11 has openat2 but refuses RESOLVE_CACHED (EINVAL). The
  // store then knows no open that cannot wait: it used to open without the
  // flag after the first refusal, on a thread that must not wait.
  const auto status = in_child_with_store([](FilesystemStore& store) {
    // Every openat2 refused as 5.6-5.11 refuses one with RESOLVE_CACHED.
    if (!refuse_syscalls({__NR_openat2}, EINVAL)) return kChildSkipped;
    for (int round = 0; round < 2; ++round) {  // the first refusal, then what the store learnt from it
      try {
        if (store.try_read_now("c/0", must_not_wait())) return 20 + round;
      } catch (const Error&) {
        return 30 + round;  // it opened without RESOLVE_CACHED (refused here too) and failed
      }
    }
    return 0;
  });
  if (status) CHECK(*status == 0);
}

TEST_CASE("FilesystemStore where RWF_NOWAIT is refused: a read that must not wait declines before it opens",
          "[stores][filesystem][regression]") {
  // NFS and FUSE refuse preadv2(RWF_NOWAIT) (EOPNOTSUPP). No read there is
  // sure not to wait, and the open and fstat before it may ask a server:
  // a read that must not wait (the caller's thread, zarr-python's event
  // loop) used to make them and then decline.
  const auto status = in_child_with_store([](FilesystemStore& store) {
    if (!refuse_syscalls({__NR_preadv2}, EOPNOTSUPP)) return kChildSkipped;
    if (store.try_read_now("c/0", must_not_wait())) return 20;  // the refusal: the store learns it
    if (!refuse_syscalls({__NR_openat2, __NR_openat, __NR_newfstatat, __NR_fstat, __NR_statx})) return kChildSkipped;
    try {
      if (store.try_read_now("c/0", must_not_wait())) return 21;
    } catch (const Error&) {
      return 30;  // it opened (refused here) before declining
    }
    return 0;
  });
  if (status) CHECK(*status == 0);
}

TEST_CASE("FilesystemStore on tmpfs answers small reads at once (tmpfs refuses RWF_NOWAIT, which sent every read the long way)",
          "[stores][filesystem][regression]") {
  struct statfs shm {};
  if (::statfs("/dev/shm", &shm) != 0 || shm.f_type != TMPFS_MAGIC) {
    WARN("SKIPPED: no tmpfs at /dev/shm");
    return;
  }
  std::string tmpl = "/dev/shm/zarrcoro-stores-XXXXXX";
  REQUIRE(::mkdtemp(tmpl.data()));
  struct Remove {
    std::string path;
    ~Remove() { std::filesystem::remove_all(path); }
  } remove{tmpl};
  StoreHarness h(filesystem_factory(tmpl, kUring));
  auto* store = store_answering_now(h);
  if (!store) return;
  Bytes value(4096);
  for (std::size_t i = 0; i < value.size(); ++i) value[i] = std::byte(i * 13);
  h.set("c/0", value);
  Bytes into(value.size());
  ReadOptions whole;  // as the engine reads a chunk: into its place, no generation
  whole.need_generation = false;
  whole.into = into;
  for (const bool cached : {false, true}) {
    INFO("caches_only " << cached);
    std::fill(into.begin(), into.end(), std::byte{0});
    whole.caches_only = cached;
    const auto now = store->try_read_now("c/0", whole);
    REQUIRE(now);
    CHECK(now->in_place);
    CHECK(into == value);
  }
  ReadOptions with_generation;
  const auto versioned = store->try_read_now("c/0", with_generation);
  REQUIRE(versioned);
  REQUIRE(versioned->value);
  CHECK(*versioned->value == value);
  CHECK(versioned->generation == h.read("c/0").generation);
}

TEST_CASE("FilesystemStore: try_read_now_many answers every page-cached small file of a large batch with its bytes",
          "[stores][filesystem]") {
  test::TempDir tmp("stores");
  StoreHarness h(filesystem_factory(tmp.path, kUring));
  auto* store = store_answering_now(h);
  if (!store) return;
  // Shared with a thread of the store's pool: each answer must land in its own slot.
  std::vector<std::string> keys;
  for (int i = 0; i < 500; ++i) {
    keys.push_back("c/" + std::to_string(i));
    if (i % 7 != 3) h.set(keys.back(), std::string(100 + i, static_cast<char>('a' + i % 26)));
  }
  auto value_of = [](int i) { return bytes_of(std::string(100 + i, static_cast<char>('a' + i % 26))); };
  // Odd rounds give each key a place of its own in one buffer (ReadOptions::into):
  // of the value's size, or one byte more for every fifth key (then unused).
  std::vector<std::size_t> place(keys.size() + 1);
  for (int i = 0; i < 500; ++i) place[i + 1] = place[i] + 100 + i + (i % 5 == 0);
  Bytes buffer(place.back());
  for (int round = 0; round < 6; ++round) {
    const bool into = round % 2 == 1;
    std::vector<ReadOptions> options(keys.size());
    if (into) {
      std::fill(buffer.begin(), buffer.end(), std::byte{0xEE});
      for (int i = 0; i < 500; ++i) options[i].into = MutableByteSpan(buffer).subspan(place[i], place[i + 1] - place[i]);
    }
    std::vector<ReadNow> out(keys.size());
    store->try_read_now_many(keys, options, out);
    for (int i = 0; i < 500; ++i) {
      INFO("key " << keys[i] << ", round " << round);
      REQUIRE_FALSE(out[i].error);
      REQUIRE(out[i].result);
      const ReadResult& r = *out[i].result;
      if (i % 7 == 3) {
        CHECK_FALSE(r.value);
        CHECK_FALSE(r.in_place);
        continue;
      }
      REQUIRE(r.value);
      CHECK(r.in_place == (into && i % 5 != 0));
      if (r.in_place) {
        CHECK(r.value->empty());
        CHECK(Bytes(buffer.begin() + place[i], buffer.begin() + place[i] + 100 + i) == value_of(i));
      } else {
        CHECK(*r.value == value_of(i));
      }
    }
  }
}
