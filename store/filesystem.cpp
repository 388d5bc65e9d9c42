#include <zarrcoro/store/filesystem.hpp>

#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/file.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <functional>
#include <memory>
#include <thread>
#include <random>
#include <system_error>

#include <boost/asio/post.hpp>
#include <boost/asio/random_access_file.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <spdlog/spdlog.h>

#include <zarrcoro/error.hpp>

#include "store/offload.hpp"

namespace zarrcoro {

namespace asio = boost::asio;
namespace fs = std::filesystem;

namespace {

std::string os_error(int err) { return std::generic_category().message(err); }

[[noreturn]] void fail(const std::string& key, const std::string& what, int err) {
  throw StoreError(key, "", what + ": " + os_error(err));
}

std::string in_quotes(const fs::path& p) { return "'" + p.string() + "'"; }

// True if `p` is `root` or lies below it (both absolute and normalized).
bool within(const fs::path& root, const fs::path& p) {
  return std::mismatch(root.begin(), root.end(), p.begin(), p.end()).first == root.end();
}

constexpr std::string_view kTempTag = ".tmp.";
constexpr std::uint64_t kReadNowBytes = std::uint64_t{256} << 10;
// open_for_read's answer when an open only through the lookup cache would wait.
constexpr int kWouldWait = -2;
constexpr std::size_t kTempHex = 16;

bool is_temp_name(std::string_view name) {
  if (name.size() < 2 + kTempTag.size() + kTempHex || name.front() != '.') return false;
  const auto tail = name.substr(name.size() - kTempHex);
  return name.substr(name.size() - kTempHex - kTempTag.size(), kTempTag.size()) == kTempTag &&
         std::all_of(tail.begin(), tail.end(), [](char c) { return std::isxdigit(static_cast<unsigned char>(c)); });
}

// validate_key, and no key's last segment may be named like a temporary
// file: list() would hide it and remove it once stale (stale_temp_age), and
// a read could see a write in progress.
void check_key(const std::string& key) {
  validate_key(key);
  const auto slash = key.rfind('/');
  if (is_temp_name(slash == std::string::npos ? std::string_view(key) : std::string_view(key).substr(slash + 1)))
    throw InvalidArgument(key, "key", "names of the form .<name>.tmp.<16 hex digits> are the filesystem store's temporary files");
}

std::string temp_name(const std::string& name) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  static constexpr char digits[] = "0123456789abcdef";
  std::string s = "." + name.substr(0, 200) + std::string(kTempTag);  // stay below NAME_MAX
  auto r = rng();
  for (std::size_t i = 0; i < kTempHex; ++i, r >>= 4) s += digits[r & 15];
  return s;
}

void close_fd(int fd) {
  if (fd >= 0) ::close(fd);
}

// The inode's version (FS_IOC_GETVERSION, i_generation: ext4, XFS, btrfs
// give each new inode a fresh one, also when they reuse its number), or
// nullopt where the file system has none.
std::optional<unsigned long long> inode_version(int fd) {
  int version = 0;
  if (fd < 0 || ::ioctl(fd, FS_IOC_GETVERSION, &version) != 0) return std::nullopt;
  return static_cast<unsigned int>(version);
}

// The generation of the file `st` describes (`fd` open on it): a new file
// (every write renames a new one into place) has a new inode, or the one of
// a file removed before (ext4 reuses them at once), and a new modification
// time (unique_mtime: the file system's own clock may be too coarse).
// Where the time has no part finer than a microsecond, the file system
// keeps no finer times (seconds on ext4 with 128-byte inodes, FAT or some
// network file systems; 10 ms on exFAT) and rewrites of one size within
// its tick could repeat all of that: the inode's version (`version`, from
// `fd` if not given) is added, and without one (FAT, exFAT) the
// generation is unknown.
Generation generation_of(const struct stat& st, int fd, std::optional<unsigned long long> version = {}) {
  const bool coarse = st.st_mtim.tv_nsec % 1000 == 0;
  if (coarse && !version) version = inode_version(fd);
  if (coarse && !version) return {};
  // "f<dev>:<ino>:<size>:<mtime s>.<mtime ns>[:<inode version>]" in hex;
  // to_chars, not snprintf, which was 1% of the I/O thread reading small chunks.
  char buf[112] = {'f'};
  char* at = buf + 1;
  const unsigned long long fields[] = {static_cast<unsigned long long>(st.st_dev),
                                       static_cast<unsigned long long>(st.st_ino),
                                       static_cast<unsigned long long>(st.st_size),
                                       static_cast<unsigned long long>(st.st_mtim.tv_sec),
                                       static_cast<unsigned long long>(st.st_mtim.tv_nsec),
                                       coarse ? *version : 0};
  for (std::size_t i = 0; i < std::size(fields) - (coarse ? 0 : 1); ++i) {
    if (i) *at++ = i == 4 ? '.' : ':';
    at = std::to_chars(at, buf + sizeof buf, fields[i], 16).ptr;
  }
  return {std::string(buf, at)};
}

// A modification time for the file a write is about to rename into place,
// at least a microsecond later than any this process gave before (the
// real-time clock, or past the last one given), and with 1 ns past the
// microsecond: a file system that keeps it whole keeps the write's
// generation apart from the value it replaced by it alone, and one that
// drops the nanoseconds shows that it did (generation_of). Set explicitly because the
// file system's own timestamps may come from a coarse clock (a tick of
// 1-10 ms on kernels before 6.13), where three rewrites of a value of one
// size within a tick could repeat a generation (A, B, A: ext4 hands the
// freed inode back), and a conditional write or a cached shard index would
// then take a value for the one it replaced.
timespec unique_mtime() {
  static std::atomic<std::int64_t> last{0};
  timespec now{};
  ::clock_gettime(CLOCK_REALTIME, &now);
  const std::int64_t clock = (std::int64_t{now.tv_sec} * 1'000'000'000 + now.tv_nsec) / 1000 * 1000 + 1;
  std::int64_t prev = last.load(std::memory_order_relaxed), next;
  do next = std::max(clock, prev + 1000);
  while (!last.compare_exchange_weak(prev, next, std::memory_order_relaxed));
  return {static_cast<time_t>(next / 1'000'000'000), static_cast<long>(next % 1'000'000'000)};
}

// A flock(2) on a directory, held by every rename over (or unlink of) a key
// in it for the few system calls that take: exclusive for a conditional one,
// which checks the value's generation and renames as one step; shared for the
// others, which then cannot land between that check and that rename. The
// kernel drops it when the holder's descriptor closes, also when the process
// is killed, so a dead writer never blocks others; a live holder that does
// not let go within kLockWait (stopped by a debugger, say) makes the write
// fail. Without `wait`, only a lock that is free is taken (held() says).
// flock(2) prefers no one: a steady stream of unconditional writes into one
// directory from other processes can hold a conditional one off until then.
constexpr auto kLockWait = std::chrono::seconds(30);
class DirLock {
 public:
  DirLock(const std::string& key, int dir_fd, bool exclusive, bool wait = true) : fd_(dir_fd) {
    const int op = (exclusive ? LOCK_EX : LOCK_SH) | LOCK_NB;
    const auto deadline = std::chrono::steady_clock::now() + kLockWait;
    auto pause = std::chrono::microseconds(20);
    while (::flock(fd_, op) != 0) {
      const int err = errno;
      if (err == EINTR) continue;
      if (err != EWOULDBLOCK) {
        // A file system without flock (ENOLCK: NFS without a lock daemon;
        // EOPNOTSUPP: some FUSE or CIFS mounts): a conditional write cannot
        // be honoured there, but an unconditional one goes on unlocked.
        if (exclusive) fail(key, "cannot lock the key's directory", err);
        static std::atomic<bool> warned{false};
        if (!warned.exchange(true))
          spdlog::warn("zarrcoro: cannot lock the directory of '{}' ({}): writes there go on without the lock",
                       key, std::strerror(err));
        unlocked_ = true;
        return;
      }
      if (!wait) {
        fd_ = -1;
        return;
      }
      if (std::chrono::steady_clock::now() > deadline)
        throw StoreError(key, "", "timed out waiting for the write lock on the key's directory");
      std::this_thread::sleep_for(pause);
      pause = std::min<std::chrono::microseconds>(pause * 2, std::chrono::milliseconds(5));
    }
  }
  ~DirLock() {
    if (fd_ >= 0 && !unlocked_) ::flock(fd_, LOCK_UN);
  }
  // False only when, without `wait`, the lock was taken by another.
  bool held() const { return fd_ >= 0; }
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;

 private:
  int fd_;
  bool unlocked_ = false;  // no flock on this file system: went on without
};

// Closes a descriptor at scope exit.
struct FdGuard {
  int fd;
  ~FdGuard() { close_fd(fd); }
};

// "a/c/0" -> {"a/c", "0"}; "zarr.json" -> {"", "zarr.json"}.
std::pair<std::string, std::string> split_key(const std::string& key) {
  const auto slash = key.rfind('/');
  if (slash == std::string::npos) return {"", key};
  return {key.substr(0, slash), key.substr(slash + 1)};
}

// Opens `path` beneath `dir` with one openat(O_NOFOLLOW) per component: the
// portable form of openat2(RESOLVE_BENEATH) for kernels without it. A
// symlink met on the way fails with ELOOP.
int open_by_components(int dir, const std::string& path, int flags, mode_t mode) {
  int owned = -1;
  std::size_t start = 0;
  for (;;) {
    const std::size_t slash = path.find('/', start);
    const std::string part = path.substr(start, slash == std::string::npos ? std::string::npos : slash - start);
    const bool last = slash == std::string::npos;
    const int fd = last ? ::openat(dir, part.c_str(), flags | O_NOFOLLOW | O_CLOEXEC, mode)
                        : ::openat(dir, part.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    int err = fd < 0 ? errno : 0;
    struct stat st {};
    if (fd >= 0 && last && (flags & O_PATH) && ::fstat(fd, &st) == 0 && S_ISLNK(st.st_mode)) {
      ::close(fd);
      err = ELOOP;  // O_PATH | O_NOFOLLOW opens the link itself
    } else if (fd < 0 && err == ENOTDIR && ::fstatat(dir, part.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 &&
               S_ISLNK(st.st_mode)) {
      err = ELOOP;
    }
    close_fd(owned);
    if (last || fd < 0) {
      errno = err;
      return fd >= 0 && err != ELOOP ? fd : -1;
    }
    owned = dir = fd;
    start = slash + 1;
  }
}

// Wraps `fd` in an io_uring file, or returns nullopt (with `why`) if io_uring
// cannot be set up; `fd` is then still owned by the caller.
std::optional<asio::random_access_file> wrap(const asio::any_io_executor& io, int fd,
                                             std::string& why) {
  try {
    return asio::random_access_file(io, fd);
  } catch (const std::exception& e) {
    why = e.what();
    return std::nullopt;
  }
}

// Sets up io_uring on `io`'s context (once per context); the error if it cannot.
std::optional<std::string> probe_uring(const asio::any_io_executor& io) {
  try {
    asio::random_access_file probe(io);
    return std::nullopt;
  } catch (const std::exception& e) {
    return e.what();
  }
}

std::atomic<bool> warned{false};

}  // namespace

// A temporary file being written beside its key; removed on destruction
// unless committed.
struct FilesystemStore::Temp {
  std::string key, name, temp_name;
  int dir_fd = -1, fd = -1;
  struct stat st {};  // of the temporary file, once closed
  std::optional<unsigned long long> version;  // its inode's, where its times are coarse
  bool committed = false;
  explicit Temp(const std::string& k) : key(k), name(split_key(k).second) {}
  Temp(const Temp&) = delete;
  Temp& operator=(const Temp&) = delete;
  ~Temp() {
    close_fd(fd);
    if (!committed && !temp_name.empty()) ::unlinkat(dir_fd, temp_name.c_str(), 0);
    close_fd(dir_fd);
  }
};

template <class F>
auto FilesystemStore::offload(F f) {
  return detail::run_on_pool(pool_.get_executor(), std::move(f));
}

FilesystemStore::FilesystemStore(asio::any_io_executor io, fs::path root, FilesystemOptions opts)
    : io_(std::move(io)),
      threads_(std::max(1u, opts.fallback_threads)),
      stale_temp_age_(opts.stale_temp_age),
      durable_(opts.durable),
      openat2_(opts.use_openat2),
      uring_(opts.use_io_uring),
      pool_(threads_) {
  std::error_code ec;
  root_ = fs::weakly_canonical(fs::absolute(root, ec), ec);
  if (ec) throw StoreError("", "root", "cannot resolve " + in_quotes(root) + ": " + ec.message());
  if (root_.filename().empty()) root_ = root_.parent_path();  // drop a trailing '/'
  root_fd(false);
  if (openat2_ && !openat2_works()) openat2_ = false;  // an old kernel, or a seccomp filter refusing it
  if (uring_)
    if (auto why = probe_uring(io_)) disable_uring(why->c_str());
}

FilesystemStore::~FilesystemStore() {
  pool_.join();
  close_fd(root_fd_.load());
}

void FilesystemStore::disable_uring(const char* why) {
  uring_ = false;
  if (!warned.exchange(true))
    spdlog::warn("zarrcoro: io_uring is unavailable ({}); FilesystemStore falls back to "
                 "blocking file I/O on {} pool thread(s)",
                 why, threads_);
}

std::string FilesystemStore::url() const { return "file://" + root_.string(); }

// Whether openat2(2) can be used here: kernels before 5.6 lack it, and some
// container seccomp profiles refuse it with EPERM.
bool FilesystemStore::openat2_works() {
  open_how how{};
  how.flags = O_PATH | O_CLOEXEC;
  how.resolve = RESOLVE_NO_MAGICLINKS;
  const long fd = ::syscall(SYS_openat2, AT_FDCWD, ".", &how, sizeof how);
  if (fd < 0) return false;
  ::close(static_cast<int>(fd));
  return true;
}

bool FilesystemStore::resolves_cached() {
  static const bool works = [] {
    open_how how{};
    how.flags = O_PATH | O_CLOEXEC;
    how.resolve = RESOLVE_CACHED;
    const long fd = ::syscall(SYS_openat2, AT_FDCWD, "/", &how, sizeof how);
    if (fd < 0) return false;
    ::close(static_cast<int>(fd));
    return true;
  }();
  return works;
}

// The root directory's descriptor, opened once; -1 (errno ENOENT) while the
// root does not exist, unless `create` makes it.
int FilesystemStore::root_fd(bool create) const {
  int fd = root_fd_.load(std::memory_order_acquire);
  if (fd >= 0) return fd;
  fd = ::open(root_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0 && errno == ENOENT && create) {
    std::error_code ec;
    fs::create_directories(root_, ec);
    if (ec) throw StoreError("", "root", "cannot create " + in_quotes(root_) + ": " + ec.message());
    fd = ::open(root_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  }
  if (fd < 0) {
    if (errno == ENOENT) return -1;
    fail("", "cannot open the store root " + in_quotes(root_), errno);
  }
  int none = -1;
  if (!root_fd_.compare_exchange_strong(none, fd, std::memory_order_acq_rel)) {
    ::close(fd);  // another thread opened it first
    return none;
  }
  return fd;
}

// Opens the relative `path` beneath the root in the kernel; -1 with errno
// on failure (ENOENT also while the root does not exist). EXDEV or ELOOP: a
// symlink on the way (leaving the root, or any, per-component). `cached`:
// only through the kernel's lookup cache (openat2 RESOLVE_CACHED), so that
// the open never waits for the disk; EAGAIN when it would (also where the
// kernel cannot promise it: before 5.12, or without openat2).
int FilesystemStore::open_at(const std::string& path, int flags, mode_t mode, bool cached) const {
  const int root = root_fd(false);
  if (root < 0) {
    errno = ENOENT;
    return -1;
  }
  if (openat2_.load(std::memory_order_relaxed)) {
    open_how how{};
    how.flags = static_cast<std::uint64_t>(flags | O_CLOEXEC);
    how.mode = (flags & O_CREAT) ? mode : 0;
    how.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
    if (cached && resolve_cached_.load(std::memory_order_relaxed)) how.resolve |= RESOLVE_CACHED;
    for (int attempt = 0;; ++attempt) {
      const long fd = ::syscall(SYS_openat2, root, path.c_str(), &how, sizeof how);
      if (fd < 0 && errno == EINVAL && (how.resolve & RESOLVE_CACHED)) {
        resolve_cached_ = false;  // kernel before 5.12
        break;
      }
      // EAGAIN: not all in the lookup cache (RESOLVE_CACHED), or a
      // concurrent rename beneath the root, where the kernel asks to retry.
      if (fd < 0 && errno == EAGAIN && !(how.resolve & RESOLVE_CACHED) && attempt < 16) continue;
      if (fd >= 0 || errno != ENOSYS) return static_cast<int>(fd);
      openat2_ = false;  // kernel before 5.6
      break;
    }
  }
  if (cached) {
    errno = EAGAIN;
    return -1;
  }
  return open_by_components(root, path, flags, mode);
}

// open_at, following symlinks that stay inside the root: a path with a
// symlink the kernel would not follow beneath the root (an absolute one, or
// any on the per-component path) is resolved in user space and opened
// without symlinks. StoreError if it leaves the root.
int FilesystemStore::open_beneath(const std::string& key, const std::string& path, int flags, mode_t mode,
                                  bool cached) const {
  int fd = open_at(path, flags, mode, cached);
  if (fd >= 0 || (errno != EXDEV && errno != ELOOP)) return fd;
  if (cached) {  // resolving the symlinks may wait
    errno = EAGAIN;
    return -1;
  }
  const fs::path real = resolve(key, path.empty() ? key : path);
  fd = open_at(real.lexically_relative(root_).string(), flags, mode);
  if (fd < 0 && (errno == EXDEV || errno == ELOOP))
    throw StoreError(key, "", "refusing to follow a symlink out of the store root " + in_quotes(root_));
  return fd;
}

// Opens directory `dir` ("" is the root) for the *at calls of a write;
// `create` makes it (and the root) when missing. -1 with errno when it
// does not exist and `create` is false.
int FilesystemStore::open_dir(const std::string& key, const std::string& dir, bool create) const {
  const std::string path = dir.empty() ? "." : dir;
  if (create) root_fd(true);
  int fd = open_beneath(key, path, O_RDONLY | O_DIRECTORY);
  if (fd < 0 && errno == ENOENT && create) {
    make_dirs(key, dir);
    fd = open_beneath(key, path, O_RDONLY | O_DIRECTORY);
    if (fd >= 0 && durable_) {
      // New directory entries survive a power loss only once their parents are flushed.
      for (std::string d = dir;; d = split_key(d).first) {
        const int sync_fd = d == dir ? fd : open_dir(key, d, false);
        const bool ok = sync_fd >= 0 && ::fsync(sync_fd) == 0;
        const int err = errno;
        if (sync_fd != fd) close_fd(sync_fd);
        if (!ok) fail(key, "cannot sync directory " + in_quotes(root_ / d), err);
        if (d.empty()) break;
      }
    }
  }
  if (fd < 0 && (create || (errno != ENOENT && errno != ENOTDIR)))
    fail(key, "cannot open directory " + in_quotes(root_ / dir), errno);
  return fd;
}

// Creates the missing directories of `dir` below the root: each one with
// mkdirat(2) in its parent, a directory the kernel opened beneath the root.
// A directory swapped for a symlink meanwhile is refused by that open, so
// nothing is ever created outside the root (a path resolved in user space
// and then created could be).
void FilesystemStore::make_dirs(const std::string& key, const std::string& dir) const {
  for (int attempt = 0;; ++attempt) {
    int parent = open_beneath(key, ".", O_RDONLY | O_DIRECTORY);
    if (parent < 0) fail(key, "cannot open the store root " + in_quotes(root_), errno);
    int err = 0;
    std::string path;
    for (std::size_t begin = 0; begin <= dir.size();) {
      FdGuard guard{parent};
      const std::size_t end = std::min(dir.find('/', begin), dir.size());
      path = dir.substr(0, end);
      parent = ::mkdirat(parent, path.c_str() + begin, 0777) != 0 && errno != EEXIST
                   ? -1
                   : open_beneath(key, path, O_RDONLY | O_DIRECTORY);  // follows links inside the root
      if (parent < 0) {
        err = errno;
        break;
      }
      begin = end + 1;
    }
    if (!err) {
      close_fd(parent);
      return;
    }
    // ENOENT: a concurrent erase pruned a directory just made; make it again.
    if (err != ENOENT || attempt >= 16) fail(key, "cannot create directory " + in_quotes(root_ / path), err);
  }
}

// root/path with symlinks resolved; StoreError naming `key` if that leaves
// the root.
fs::path FilesystemStore::resolve(const std::string& key, const std::string& path) const {
  std::error_code ec;
  fs::path p = fs::weakly_canonical(root_ / path, ec);
  if (ec) throw StoreError(key, "", "cannot resolve " + in_quotes(root_ / path) + ": " + ec.message());
  if (!within(root_, p) || p == root_)
    throw StoreError(key, "", "refusing to follow a symlink out of the store root " + in_quotes(root_));
  return p;
}

// Opens the regular file at `key` for reading; returns -1 if there is none,
// kWouldWait if `cached` (open_at) and the open would wait for the disk.
// `generation` is taken from the open file, so it describes the bytes read.
// The descriptor is O_NONBLOCK (so that a FIFO cannot block the open).
int FilesystemStore::open_for_read(const std::string& key, struct stat& st, bool cached) const {
  const int fd = open_beneath(key, key, O_RDONLY | O_NONBLOCK, 0, cached);
  if (fd < 0) {
    if (errno == ENOENT || errno == ENOTDIR) return -1;
    if (cached && errno == EAGAIN) return kWouldWait;
    fail(key, "cannot open " + in_quotes(root_ / key), errno);
  }
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    fail(key, "cannot stat " + in_quotes(root_ / key), err);
  }
  if (S_ISDIR(st.st_mode)) {
    ::close(fd);
    return -1;
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw StoreError(key, "", in_quotes(root_ / key) + " is not a regular file");
  }
  return fd;
}

FilesystemStore::OpenFile::~OpenFile() { close_fd(fd_); }

std::optional<FilesystemStore::OpenFile> FilesystemStore::open_file(const std::string& key) const {
  check_key(key);
  struct stat st {};
  const int fd = open_for_read(key, st);
  if (fd < 0) return std::nullopt;
  const auto since_epoch = std::chrono::seconds(st.st_mtim.tv_sec) + std::chrono::nanoseconds(st.st_mtim.tv_nsec);
  const std::chrono::system_clock::time_point modified(
      std::chrono::duration_cast<std::chrono::system_clock::duration>(since_epoch));
  return std::optional<OpenFile>(std::in_place, fd, static_cast<std::uint64_t>(st.st_size), generation_of(st, fd),
                                modified);
}

// The generation of the value named `name` in the directory `dir_fd` now
// (absent() if no regular file), for the compare of a conditional commit:
// the same directory the lock and the rename use. A symlink there is
// followed, as a read of the key does.
Generation FilesystemStore::generation_at(const std::string& key, int dir_fd, const std::string& name) const {
  struct stat st {};
  if (::fstatat(dir_fd, name.c_str(), &st, 0) == 0) {
    if (!S_ISREG(st.st_mode)) return Generation::absent();
    if (st.st_mtim.tv_nsec % 1000 != 0) return generation_of(st, -1);
    // Coarse times: the inode's version, from the file opened here (and
    // stat'ed again on that descriptor: the name may have moved on).
    const int fd = ::openat(dir_fd, name.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return errno == ENOENT ? Generation::absent() : Generation{};
    const FdGuard guard{fd};
    if (::fstat(fd, &st) != 0) return {};
    return generation_of(st, fd);
  }
  if (errno == ENOENT || errno == ENOTDIR || errno == ELOOP) return Generation::absent();
  fail(key, "cannot stat " + in_quotes(root_ / key), errno);
}

// Opens `key` for a read; -1 when there is nothing to read: no value
// (result: absent) or a failed condition (result: changed); kWouldWait as
// open_for_read.
int FilesystemStore::open_checked(const std::string& key, const ReadOptions& options, std::uint64_t& size,
                                  ReadResult& result, bool cached) const {
  struct stat st {};
  const int fd = open_for_read(key, st, cached);
  if (fd == kWouldWait) return fd;
  size = static_cast<std::uint64_t>(st.st_size);
  result.generation = fd < 0 ? Generation::absent() : generation_of(st, fd);
  if (!options.if_equal.unknown() && options.if_equal != result.generation) {
    close_fd(fd);
    result.changed = true;
    return -1;
  }
  return fd;
}

namespace {

// Where a read of `n` bytes goes: the caller's buffer (ReadOptions::into)
// when it holds exactly n bytes, else a value of its own. Not movable: the
// span may point into the object.
class ReadTarget {
 public:
  ReadTarget(MutableByteSpan into, std::size_t n) : in_place_(n > 0 && into.size() == n) {
    if (!in_place_) own_.resize(n);
    span_ = in_place_ ? into : MutableByteSpan(own_);
  }
  ReadTarget(const ReadTarget&) = delete;
  ReadTarget& operator=(const ReadTarget&) = delete;
  MutableByteSpan span() const { return span_; }
  // The first `done` bytes of span() are the value read: into `result`. A
  // short read into the caller's buffer comes back as a value of its own,
  // so that the caller sees its size.
  void deliver(ReadResult& result, std::size_t done) {
    if (in_place_ && done == span_.size()) {
      result.value.emplace();
      result.in_place = true;
      return;
    }
    if (in_place_) own_.assign(span_.begin(), span_.begin() + static_cast<std::ptrdiff_t>(done));
    own_.resize(done);
    result.value = std::move(own_);
  }

 private:
  bool in_place_;
  Bytes own_;
  MutableByteSpan span_;
};

// Reads [begin + done, begin + out.size()) of `fd` into `out` from `done`
// on. `nowait`: only what the page cache holds (preadv2 RWF_NOWAIT), so the
// calling I/O thread never waits for the disk. Returns false at end of
// file; errno-style failure as -1 in `err`.
bool read_into(int fd, MutableByteSpan out, std::uint64_t begin, std::size_t& done, bool nowait, int& err) {
  err = 0;
  while (done < out.size()) {
    iovec iov{out.data() + done, out.size() - done};
    const ssize_t n = nowait ? ::preadv2(fd, &iov, 1, static_cast<off_t>(begin + done), RWF_NOWAIT)
                             : ::pread(fd, iov.iov_base, iov.iov_len, static_cast<off_t>(begin + done));
    if (n > 0) {
      done += static_cast<std::size_t>(n);
      continue;
    }
    if (n == 0) return false;  // end of file: a writer bypassing the store shrank it
    if (errno == EINTR) continue;
    if (errno == EAGAIN && !nowait) {  // O_NONBLOCK mattered (a FUSE file, say)
      ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
      continue;
    }
    err = errno;
    return true;
  }
  return true;
}

}  // namespace

// Reads extent `e` of the open `fd` into result.value with blocking reads.
void FilesystemStore::read_blocking(const std::string& key, int fd, const ByteExtent& e, MutableByteSpan into,
                                    ReadResult& result) const {
  ReadTarget out(into, e.size());
  std::size_t done = 0;
  int err = 0;
  if (read_into(fd, out.span(), e.begin, done, false, err) && done < e.size())
    fail(key, "cannot read " + in_quotes(root_ / key), err);
  out.deliver(result, done);
}

// A whole read with blocking calls (on the pool, when io_uring is unavailable).
ReadResult FilesystemStore::read_now(const std::string& key, const ReadOptions& options) const {
  ReadResult result;
  std::uint64_t size = 0;
  const int fd = open_checked(key, options, size, result);
  if (fd < 0) return result;
  FdGuard guard{fd};
  read_blocking(key, fd, clip(options.range, size), options.into, result);
  return result;
}

// Creates the temporary file of `temp.key` (and its directory if needed).
void FilesystemStore::create_temp(Temp& temp) const {
  const std::string& key = temp.key;
  const std::string dir = split_key(key).first;
  for (int attempt = 0;; ++attempt) {
    if (temp.dir_fd < 0) temp.dir_fd = open_dir(key, dir, true);
    temp.temp_name = temp_name(temp.name);
    temp.fd = ::openat(temp.dir_fd, temp.temp_name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (temp.fd >= 0) return;
    const int err = errno;
    temp.temp_name.clear();
    // EEXIST: a name clash; ENOENT: a concurrent erase pruned the directory.
    if (err == ENOENT) close_fd(std::exchange(temp.dir_fd, -1));
    if ((err == EEXIST || err == ENOENT) && attempt < 16) continue;
    fail(key, "cannot create a temporary file in " + in_quotes(root_ / dir), err);
  }
}

// Renames the written temporary file over its key if the value there has
// generation `if_equal` (when known); returns the new value's generation, or
// nullopt (the temporary file is then removed) when the condition failed.
// With `would_wait` (an unconditional commit on the I/O thread): when the
// directory's lock is not free, sets it and returns nullopt, the temporary
// file kept for a commit that may wait.
std::optional<Generation> FilesystemStore::commit(Temp& temp, const Generation& if_equal, bool* would_wait) const {
  const std::string& key = temp.key;
  const std::string where = in_quotes(root_ / key);
  if (temp.fd >= 0) {  // closed once, with its modification time set (and flushed when durable)
    const int fd = std::exchange(temp.fd, -1);
    const timespec times[2] = {{0, UTIME_OMIT}, unique_mtime()};  // atime kept
    ::futimens(fd, times);  // where refused, the file system's own time stands
    const bool ok = ::fstat(fd, &temp.st) == 0 && (!durable_ || ::fdatasync(fd) == 0);
    const int err = errno;
    if (ok && temp.st.st_mtim.tv_nsec % 1000 == 0) temp.version = inode_version(fd);  // coarse times
    if (::close(fd) != 0 || !ok) fail(key, "cannot write a temporary file for " + where, ok ? errno : err);
  }
  const DirLock lock(key, temp.dir_fd, !if_equal.unknown(), would_wait == nullptr);
  if (!lock.held()) {
    *would_wait = true;
    return std::nullopt;
  }
  if (!if_equal.unknown() && generation_at(key, temp.dir_fd, temp.name) != if_equal) return std::nullopt;
  if (::renameat(temp.dir_fd, temp.temp_name.c_str(), temp.dir_fd, temp.name.c_str()) != 0)
    fail(key, "cannot replace " + where, errno);
  temp.committed = true;
  if (durable_ && ::fsync(temp.dir_fd) != 0) fail(key, "cannot sync the directory of " + where, errno);
  return generation_of(temp.st, -1, temp.version);  // rename keeps the inode, its version and the times
}

namespace {

// Writes all of `value` at offset `done` on of `fd`; `nowait`: only while the
// kernel need not wait (pwritev2 RWF_NOWAIT). errno-style failure in `err`.
void write_from(int fd, const Bytes& value, std::size_t& done, bool nowait, int& err) {
  err = 0;
  while (done < value.size()) {
    iovec iov{const_cast<std::byte*>(value.data() + done), value.size() - done};
    const ssize_t n = nowait ? ::pwritev2(fd, &iov, 1, static_cast<off_t>(done), RWF_NOWAIT)
                             : ::pwrite(fd, iov.iov_base, iov.iov_len, static_cast<off_t>(done));
    if (n > 0) {
      done += static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    err = n < 0 ? errno : EIO;
    return;
  }
}

}  // namespace

std::optional<Generation> FilesystemStore::write_now(const std::string& key, const Bytes& value,
                                                     const Generation& if_equal) const {
  Temp temp(key);
  create_temp(temp);
  std::size_t done = 0;
  int err = 0;
  write_from(temp.fd, value, done, false, err);
  if (err) fail(key, "cannot write a temporary file for " + in_quotes(root_ / key), err);
  return commit(temp, if_equal);
}

bool FilesystemStore::erase_now(const std::string& key, const Generation& if_equal, bool* would_wait) const {
  const auto [dir, name] = split_key(key);
  const int dir_fd = open_dir(key, dir, false);
  if (dir_fd < 0) return if_equal.unknown() || if_equal.is_absent();  // no directory, no value
  {
    FdGuard guard{dir_fd};
    const DirLock lock(key, dir_fd, !if_equal.unknown(), would_wait == nullptr);  // as commit's
    if (!lock.held()) {
      *would_wait = true;
      return false;
    }
    if (!if_equal.unknown() && generation_at(key, dir_fd, name) != if_equal) return false;
    // A symlink at the key is removed, not followed.
    if (::unlinkat(dir_fd, name.c_str(), 0) != 0 && errno != ENOENT && errno != ENOTDIR && errno != EISDIR)
      fail(key, "cannot remove " + in_quotes(root_ / key), errno);
    if (durable_ && ::fsync(dir_fd) != 0) fail(key, "cannot sync the directory of " + in_quotes(root_ / key), errno);
  }
  // Prune the directories the erase left empty, up to, not including, the
  // root. Best effort: the erase has happened.
  try {
    for (std::string d = dir; !d.empty();) {
      const auto [parent, base] = split_key(d);
      const int parent_fd = open_dir(key, parent, false);
      if (parent_fd < 0) break;
      FdGuard guard{parent_fd};
      if (::unlinkat(parent_fd, base.c_str(), AT_REMOVEDIR) != 0) break;  // not empty (or gone): stop
      d = parent;
    }
  } catch (const Error&) {
  }
  return true;
}

bool FilesystemStore::exists_now(const std::string& key) const {
  struct stat st {};
  return stat_file(key, st);
}

// Whether a regular file is at `key` (symlinks inside the root followed);
// `st` describes it. StoreError as a read of the key.
bool FilesystemStore::stat_file(const std::string& key, struct stat& st) const {
  const int fd = open_beneath(key, key, O_PATH);
  if (fd < 0) {
    if (errno == ENOENT || errno == ENOTDIR) return false;
    fail(key, "cannot open " + in_quotes(root_ / key), errno);
  }
  FdGuard guard{fd};
  if (::fstat(fd, &st) != 0) fail(key, "cannot stat " + in_quotes(root_ / key), errno);
  return S_ISREG(st.st_mode);
}

// A temporary file is stale when nothing has written it for stale_temp_age:
// its writer was killed. Failures (raced by another cleaner) are ignored.
void FilesystemStore::remove_if_stale(int dir_fd, const char* name) const {
  if (stale_temp_age_.count() <= 0) return;
  struct stat st {};
  if (::fstatat(dir_fd, name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode)) return;
  const auto written = std::chrono::system_clock::from_time_t(st.st_mtim.tv_sec);
  if (std::chrono::system_clock::now() - written > stale_temp_age_) ::unlinkat(dir_fd, name, 0);
}

namespace {

struct DirCloser {
  void operator()(DIR* d) const { ::closedir(d); }
};

}  // namespace

// Walks the directories with descriptors: the start is opened beneath the
// root by the kernel, each subdirectory with openat(O_NOFOLLOW) in its
// parent, so a directory swapped for a symlink meanwhile is never walked
// (a path-based walk could list names outside the root). Directory links
// are not descended into; a file link is listed when it leads to a regular
// file inside the root, as a read of it would.
std::vector<std::string> FilesystemStore::list_now(const std::string& prefix) const {
  std::vector<std::string> keys;
  for (auto& ks : walk_now(prefix, false)) keys.push_back(std::move(ks.key));
  return keys;
}

// list_now, with each value's size when `sizes` (one fstatat per file).
std::vector<KeySize> FilesystemStore::walk_now(const std::string& prefix, bool sizes) const {
  std::vector<KeySize> keys;
  // Start at the deepest directory the prefix names.
  const std::string dir = prefix.substr(0, prefix.rfind('/') + 1);  // "" or "a/b/"
  if (!dir.empty()) {
    try {
      validate_key(dir.substr(0, dir.size() - 1));
    } catch (const InvalidArgument&) {
      return keys;  // no valid key starts with this prefix
    }
  }
  const int start = open_beneath(prefix, dir.empty() ? "." : dir.substr(0, dir.size() - 1), O_RDONLY | O_DIRECTORY);
  if (start < 0) {
    if (errno == ENOENT || errno == ENOTDIR) return keys;
    fail(prefix, "cannot list " + in_quotes(root_ / dir), errno);
  }
  // Depth-first; directories vanishing under a concurrent erase are skipped.
  auto walk = [&](auto& self, int fd, const std::string& rel) -> void {
    const std::unique_ptr<DIR, DirCloser> d(::fdopendir(fd));  // owns fd
    if (!d) {
      const int err = errno;
      close_fd(fd);
      fail(prefix, "cannot list " + in_quotes(root_ / rel), err);
    }
    for (errno = 0; const dirent* e = ::readdir(d.get()); errno = 0) {
      const std::string name = e->d_name;
      if (name == "." || name == "..") continue;
      const std::string key = rel + name;
      unsigned char type = e->d_type;
      if (type == DT_UNKNOWN) {  // file systems that do not fill d_type
        struct stat st {};
        if (::fstatat(::dirfd(d.get()), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
          if (errno == ENOENT) continue;  // removed meanwhile
          fail(prefix, "cannot stat " + in_quotes(root_ / key), errno);
        }
        type = S_ISDIR(st.st_mode) ? DT_DIR : S_ISREG(st.st_mode) ? DT_REG : S_ISLNK(st.st_mode) ? DT_LNK : DT_UNKNOWN;
      }
      if (type == DT_DIR) {
        const std::string sub = key + "/";
        if (!sub.starts_with(prefix) && !prefix.starts_with(sub)) continue;
        const int sub_fd = ::openat(::dirfd(d.get()), e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (sub_fd >= 0) self(self, sub_fd, sub);
        else if (errno != ENOENT && errno != ENOTDIR && errno != ELOOP)  // gone, or swapped for a file or link
          fail(prefix, "cannot list " + in_quotes(root_ / key), errno);
      } else if (is_temp_name(name)) {
        remove_if_stale(::dirfd(d.get()), e->d_name);
      } else if (key.starts_with(prefix) && (type == DT_REG || type == DT_LNK)) {
        struct stat st {};
        bool file = type == DT_REG;
        if (file && sizes && ::fstatat(::dirfd(d.get()), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
          if (errno != ENOENT) fail(prefix, "cannot stat " + in_quotes(root_ / key), errno);
          file = false;  // removed meanwhile
        }
        if (type == DT_LNK) file = link_to_file(key, st);
        if (file) keys.push_back(KeySize{key, static_cast<std::uint64_t>(st.st_size)});
      }
    }
    if (errno != 0 && errno != ENOENT) fail(prefix, "cannot list " + in_quotes(root_ / rel), errno);
  };
  walk(walk, start, dir);
  std::sort(keys.begin(), keys.end(), [](const KeySize& a, const KeySize& b) { return a.key < b.key; });
  return keys;
}

// Whether the symlink at `key` leads to a regular file inside the root; `st`
// describes that file.
bool FilesystemStore::link_to_file(const std::string& key, struct stat& st) const {
  try {
    return stat_file(key, st);
  } catch (const StoreError&) {
    return false;  // it leaves the root, or cannot be followed: no key to read
  }
}

// Reads extent `e` of the open `fd` into result.value if that is short work
// for the calling (I/O) thread: at most kReadNowBytes, all in the page cache
// (preadv2 RWF_NOWAIT). False if not (`into` may then hold part of it).
bool FilesystemStore::read_cached(const std::string& key, int fd, const ByteExtent& e, MutableByteSpan into,
                                  ReadResult& result) const {
  if (e.size() > kReadNowBytes || (e.size() > 0 && !nowait_reads_.load(std::memory_order_relaxed))) return false;
  ReadTarget out(into, e.size());
  std::size_t done = 0;
  int err = 0;
  if (read_into(fd, out.span(), e.begin, done, true, err) && done < e.size()) {
    if (err == EOPNOTSUPP) nowait_reads_ = false;  // the file system cannot say (NFS, FUSE)
    if (err == EAGAIN || err == EOPNOTSUPP) return false;
    fail(key, "cannot read " + in_quotes(root_ / key), err);
  }
  out.deliver(result, done);
  return true;
}

// A whole value read with open, one read and close (no fstat: no
// generation), when it is in the page cache: straight into
// ReadOptions::into when it is exactly that long (in_place), else, when it
// is at most size_hint bytes, into a buffer of its own. A missing key, or
// one the read calls a directory (EISDIR), reads as absent. Nullopt when
// this cannot tell (longer, not cached, empty, an error, not a file one can
// pread without waiting): the usual path then decides and reports. The
// read asks for one byte more than its buffer holds: getting fewer means
// the end of the file, unless the count is a multiple of the page size,
// where a read without waiting may also stop at a page that is not cached:
// one more read of the next byte must then find the end. (An empty read
// goes the usual way too: a device such as /dev/null reads empty without
// waiting, and only the usual path refuses what is not a regular file.)
std::optional<ReadResult> FilesystemStore::read_whole_now(const std::string& key, const ReadOptions& options) const {
  ReadResult result;
  const int fd = open_beneath(key, key, O_RDONLY | O_NONBLOCK, 0, options.caches_only);
  if (fd < 0) {
    if (errno != ENOENT && errno != ENOTDIR) return std::nullopt;
    result.generation = Generation::absent();
    return result;
  }
  FdGuard guard{fd};
  // The buffer's capacity stays size_hint until the value is freed (the
  // engine decodes it soon, within its in-flight byte budget).
  Bytes own(options.into.empty() ? options.size_hint : 0);
  const MutableByteSpan buf = options.into.empty() ? MutableByteSpan(own) : options.into;
  std::byte beyond{};
  iovec iov[2] = {{buf.data(), buf.size()}, {&beyond, 1}};
  auto read_at = [fd](iovec* v, int n, std::uint64_t at) {
    ssize_t got;
    do got = ::preadv2(fd, v, n, static_cast<off_t>(at), RWF_NOWAIT);
    while (got < 0 && errno == EINTR);
    return got;
  };
  const ssize_t n = read_at(iov, 2, 0);
  if (n < 0 && errno == EISDIR) {
    result.generation = Generation::absent();
    return result;
  }
  if (n <= 0 || static_cast<std::size_t>(n) > buf.size()) return std::nullopt;
  static const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  const auto size = static_cast<std::size_t>(n);
  if (size % page == 0 && read_at(iov + 1, 1, size) != 0) return std::nullopt;
  if (options.into.empty()) {
    own.resize(size);
    result.value = std::move(own);
  } else if (size == buf.size()) {
    result.value.emplace();
    result.in_place = true;
  } else {  // shorter than `into`: a value of its own, so that the caller sees its size
    result.value = Bytes(buf.begin(), buf.begin() + n);
  }
  return result;
}

namespace {

// Whether try_read_now declines `options` without a system call: a whole
// value expected larger than the I/O thread may copy, which read() then
// takes, rather than an open, fstat and close first for nothing.
bool expected_too_large(const ReadOptions& options) {
  return options.range.kind == ByteRange::Kind::full &&
         (options.into.empty() ? options.size_hint : options.into.size()) > kReadNowBytes;
}

}  // namespace

// With io_uring only (else every operation goes to the pool): open, fstat,
// read_cached, close; without the fstat (read_whole_now) for a whole value
// that fits ReadOptions::into, or size_hint, when the caller needs no
// generation.
std::optional<ReadResult> FilesystemStore::try_read_now(const std::string& key, const ReadOptions& options) {
  check_key(key);
  if (!uses_io_uring() || expected_too_large(options)) return std::nullopt;
  if (options.range.kind == ByteRange::Kind::full) {
    const std::size_t most = options.into.empty() ? options.size_hint : options.into.size();
    if (most > 0 && !options.need_generation && options.if_equal.unknown() &&
        nowait_reads_.load(std::memory_order_relaxed))
      if (auto r = read_whole_now(key, options)) return r;
  }
  ReadResult result;
  std::uint64_t size = 0;
  const int fd = open_checked(key, options, size, result, options.caches_only);
  if (fd == kWouldWait) return std::nullopt;
  if (fd < 0) return result;
  FdGuard guard{fd};
  if (read_cached(key, fd, clip(options.range, size), options.into, result)) return result;
  return std::nullopt;
}

void FilesystemStore::try_read_now_many(std::span<const std::string> keys, std::span<const ReadOptions> options,
                                        std::span<ReadNow> out) {
  constexpr std::size_t kShareFrom = 8;
  // Worth a helper only when enough keys will cost system calls.
  std::size_t calls = 0;
  if (uses_io_uring())
    for (const ReadOptions& o : options)
      if (!expected_too_large(o) && ++calls == kShareFrom) break;
  if (calls < kShareFrom) return Store::try_read_now_many(keys, options, out);
  struct Shared {
    Shared(std::span<const std::string> k, std::span<const ReadOptions> o, std::span<ReadNow> r)
        : keys(k), options(o), out(r) {}
    std::span<const std::string> keys;
    std::span<const ReadOptions> options;
    std::span<ReadNow> out;
    std::atomic<std::size_t> next{0};
    std::atomic<std::uint32_t> done{0};
  };
  // The helper may start after the caller has returned: it then claims no
  // key and touches only `shared`.
  auto shared = std::make_shared<Shared>(keys, options, out);
  auto work = [this](Shared& s) {
    const auto n = static_cast<std::uint32_t>(s.keys.size());
    for (std::size_t k; (k = s.next.fetch_add(1, std::memory_order_relaxed)) < n;) {
      Store::try_read_now_many(s.keys.subspan(k, 1), s.options.subspan(k, 1), s.out.subspan(k, 1));  // this one key
      if (s.done.fetch_add(1, std::memory_order_acq_rel) + 1 == n) s.done.notify_one();
    }
  };
  asio::post(pool_, [shared, work] { work(*shared); });
  work(*shared);
  const auto n = static_cast<std::uint32_t>(keys.size());
  for (auto d = shared->done.load(std::memory_order_acquire); d < n; d = shared->done.load(std::memory_order_acquire))
    shared->done.wait(d, std::memory_order_acquire);
}

// With io_uring the file is opened once, here, and read at once when the
// page cache holds a small range; a range that is not in the page cache
// moves through io_uring, whose kernel workers wait for the disk; a large
// one is copied by a blocking read on the pool (io_uring would copy
// page-cached data inline, on the submitting I/O thread).
awaitable<ReadResult> FilesystemStore::read(std::string key, ReadOptions options) {
  check_key(key);
  if (!uses_io_uring()) {
    auto job = std::bind_front(&FilesystemStore::read_now, this, std::move(key), std::move(options));
    co_return co_await offload(std::move(job));
  }
  ReadResult result;
  std::uint64_t size = 0;
  FdGuard guard{open_checked(key, options, size, result)};
  if (guard.fd < 0) co_return result;
  const ByteExtent e = clip(options.range, size);
  if (read_cached(key, guard.fd, e, options.into, result)) co_return result;
  std::string why;
  if (e.size() <= kReadNowBytes) {
    ::fcntl(guard.fd, F_SETFL, ::fcntl(guard.fd, F_GETFL) & ~O_NONBLOCK);  // io_uring would fail EAGAIN
    if (auto file = wrap(io_, guard.fd, why)) {
      guard.fd = -1;  // owned by `file`
      ReadTarget out(options.into, e.size());
      const MutableByteSpan buf = out.span();
      std::size_t done = 0;
      while (done < buf.size()) {
        boost::system::error_code ec;
        const std::size_t n = co_await file->async_read_some_at(
            e.begin + done, asio::buffer(buf.data() + done, buf.size() - done),
            asio::redirect_error(asio::use_awaitable, ec));
        done += n;
        if (ec == asio::error::eof) break;
        if (ec == asio::error::operation_aborted) throw boost::system::system_error(ec);  // cancelled (see Store)
        if (ec) throw StoreError(key, "", "cannot read " + in_quotes(root_ / key) + ": " + ec.message());
      }
      out.deliver(result, done);
      co_return result;
    }
    disable_uring(why.c_str());
  }
  const int fd = guard.fd;
  auto job = [this, &key, fd, &e, &options, &result] { read_blocking(key, fd, e, options.into, result); };
  co_await offload(std::move(job));
  co_return result;
}

// With io_uring: the temporary file is created on the calling thread and
// written directly while the kernel need not wait, else through io_uring; an
// unconditional, non-durable commit (a rename) follows on the calling
// thread if the directory's lock is free. Conditional commits (which may
// wait for the lock), durable ones (which flush), unconditional ones that
// found the lock taken and every blocking fallback run on the pool.
awaitable<std::optional<Generation>> FilesystemStore::write(std::string key, std::optional<Bytes> value,
                                                            WriteOptions options) {
  check_key(key);
  const bool inline_commit = options.if_equal.unknown() && !durable_;
  if (!value) {
    if (uses_io_uring() && inline_commit) {
      bool would_wait = false;
      erase_now(key, {}, &would_wait);
      if (!would_wait) co_return Generation::absent();
    }
    auto job = [this, key = std::move(key), if_equal = std::move(options.if_equal)] { return erase_now(key, if_equal); };
    const bool erased = co_await offload(std::move(job));
    if (!erased) co_return std::nullopt;
    co_return Generation::absent();
  }
  if (uses_io_uring()) {
    Temp temp(key);
    create_temp(temp);
    const Bytes& bytes = *value;
    std::size_t done = 0;
    int err = 0;
    if (nowait_writes_.load(std::memory_order_relaxed)) {
      write_from(temp.fd, bytes, done, true, err);
      if (err == EOPNOTSUPP) nowait_writes_ = false;  // the file system cannot say (ext4 buffered writes)
      else if (err && err != EAGAIN) fail(key, "cannot write a temporary file for " + in_quotes(root_ / key), err);
    }
    std::string why;
    if (done < bytes.size()) {
      auto file = wrap(io_, temp.fd, why);
      if (file) temp.fd = -1;  // owned by `file` until released below
      if (!file) {
        disable_uring(why.c_str());
        write_from(temp.fd, bytes, done, false, err);  // this once, inline
        if (err) fail(key, "cannot write a temporary file for " + in_quotes(root_ / key), err);
      }
      while (file && done < bytes.size()) {
        boost::system::error_code ec;
        const std::size_t n = co_await file->async_write_some_at(
            done, asio::buffer(bytes.data() + done, bytes.size() - done),
            asio::redirect_error(asio::use_awaitable, ec));
        done += n;
        if (!ec && n == 0) ec = asio::error::make_error_code(asio::error::broken_pipe);
        if (ec == asio::error::operation_aborted) throw boost::system::system_error(ec);  // cancelled (see Store)
        if (ec) throw StoreError(key, "", "cannot write a temporary file for " + in_quotes(root_ / key) + ": " + ec.message());
      }
      if (file) temp.fd = file->release();
    }
    bool would_wait = false;
    if (inline_commit)
      if (auto stored = commit(temp, {}, &would_wait); !would_wait) co_return stored;
    auto job = [this, &temp, &options] { return commit(temp, options.if_equal); };
    co_return co_await offload(std::move(job));
  }
  auto job = std::bind_front(&FilesystemStore::write_now, this, std::move(key), std::move(*value),
                             std::move(options.if_equal));
  co_return co_await offload(std::move(job));
}

awaitable<std::optional<Bytes>> FilesystemStore::get(std::string key, ByteRange range) {
  return get_by_read(std::move(key), range);
}

awaitable<void> FilesystemStore::set(std::string key, Bytes value) {
  return set_by_write(std::move(key), std::move(value));
}

awaitable<void> FilesystemStore::erase(std::string key) { return set_by_write(std::move(key), std::nullopt); }

awaitable<bool> FilesystemStore::exists(std::string key) {
  check_key(key);
  if (uses_io_uring()) co_return exists_now(key);
  auto job = std::bind_front(&FilesystemStore::exists_now, this, std::move(key));
  co_return co_await offload(std::move(job));
}

awaitable<std::vector<KeySize>> FilesystemStore::list_sizes(std::string prefix) {
  auto job = std::bind_front(&FilesystemStore::walk_now, this, std::move(prefix), true);
  co_return co_await offload(std::move(job));
}

awaitable<std::vector<std::string>> FilesystemStore::list(std::string prefix) {
  auto job = std::bind_front(&FilesystemStore::list_now, this, std::move(prefix));
  co_return co_await offload(std::move(job));
}

}  // namespace zarrcoro
