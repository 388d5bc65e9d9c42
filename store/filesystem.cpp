// FilesystemStore: the store and its root, and the opening of paths
// beneath the root (openat2, or per component), directories included.
// Reads, writes and listing are in filesystem_read.cpp, filesystem_write.cpp
// and filesystem_list.cpp.
#include <zarrcoro/store/filesystem.hpp>

#include <fcntl.h>
#include <linux/openat2.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <system_error>

#include <boost/asio/random_access_file.hpp>
#include <spdlog/spdlog.h>

#include <zarrcoro/error.hpp>

#include "store/filesystem_detail.hpp"

namespace zarrcoro {

namespace asio = boost::asio;
namespace fs = std::filesystem;
using namespace filesystem_detail;

std::string filesystem_detail::in_quotes(const fs::path& p) {
  std::string out = "'";  // not "'" + p.string() + "'": GCC 12 warns -Wrestrict (a false positive)
  out += p.native();
  out += '\'';
  return out;
}

namespace {

// True if `p` is `root` or lies below it (both absolute and normalized).
bool within(const fs::path& root, const fs::path& p) {
  return std::mismatch(root.begin(), root.end(), p.begin(), p.end()).first == root.end();
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
  struct statfs fs_info {};
  const int root_dir = root_fd_.load();
  if (root_dir >= 0 && ::fstatfs(root_dir, &fs_info) == 0) {
    const auto type = fs_info.f_type;
    in_memory_ = type == TMPFS_MAGIC || type == RAMFS_MAGIC;
    seek_end_ = type == EXT4_SUPER_MAGIC || type == XFS_SUPER_MAGIC || type == BTRFS_SUPER_MAGIC ||
                type == F2FS_SUPER_MAGIC;
  }
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

namespace {

// Whether openat2(2) opens `path` with `resolve` flags here.
bool openat2_opens(const char* path, std::uint64_t resolve) {
  open_how how{};
  how.flags = O_PATH | O_CLOEXEC;
  how.resolve = resolve;
  const long fd = ::syscall(SYS_openat2, AT_FDCWD, path, &how, sizeof how);
  if (fd < 0) return false;
  ::close(static_cast<int>(fd));
  return true;
}

}  // namespace

// Whether openat2(2) can be used here: kernels before 5.6 lack it, and some
// container seccomp profiles refuse it with EPERM.
bool FilesystemStore::openat2_works() { return openat2_opens(".", RESOLVE_NO_MAGICLINKS); }

bool FilesystemStore::resolves_cached() {
  static const bool works = openat2_opens("/", RESOLVE_CACHED);
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
// kernel cannot promise it: before 5.12, or without openat2). `same_mount`:
// on the root's mount only (RESOLVE_NO_XDEV): a mount on the way gives
// EXDEV, or EAGAIN with `cached`; EAGAIN without openat2.
int FilesystemStore::open_at(const std::string& path, int flags, mode_t mode, bool cached, bool same_mount) const {
  const int root = root_fd(false);
  if (root < 0) {
    errno = ENOENT;
    return -1;
  }
  // Without RESOLVE_CACHED (before 5.12) no open is known not to wait.
  if (openat2_.load(std::memory_order_relaxed) && (!cached || resolve_cached_.load(std::memory_order_relaxed))) {
    open_how how{};
    how.flags = static_cast<std::uint64_t>(flags | O_CLOEXEC);
    how.mode = (flags & O_CREAT) ? mode : 0;
    how.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
    if (cached) how.resolve |= RESOLVE_CACHED;
    if (same_mount) how.resolve |= RESOLVE_NO_XDEV;
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
  if (cached || same_mount) {
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

}  // namespace zarrcoro
