// FilesystemStore: writes and erases (write): temporary files,
// the directory lock and the commit.
#include <zarrcoro/store/filesystem.hpp>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <functional>
#include <random>
#include <thread>

#include <boost/asio/random_access_file.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <spdlog/spdlog.h>

#include <zarrcoro/error.hpp>

#include "store/filesystem_detail.hpp"

namespace zarrcoro {

namespace asio = boost::asio;
using namespace filesystem_detail;

namespace {

std::string temp_name(const std::string& name) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  static constexpr char digits[] = "0123456789abcdef";
  std::string s = "." + name.substr(0, 200) + std::string(kTempTag);  // stay below NAME_MAX
  auto r = rng();
  for (std::size_t i = 0; i < kTempHex; ++i, r >>= 4) s += digits[r & 15];
  return s;
}

// A modification time for the file a write is about to rename into place,
// at least a microsecond later than any this process gave before (the
// real-time clock, or past the last one given), and with 1 ns past the
// microsecond: a file system that keeps it whole keeps the write's
// generation apart from the value it replaced by it alone, and one that
// drops the nanoseconds shows that it did (generation_of, engine_mtime). Set explicitly because the
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

}  // namespace

// A temporary file being written beside its key; removed on destruction
// unless committed.
struct FilesystemStore::Temp {
  std::string key, name, temp_name;
  int dir_fd = -1, fd = -1;
  struct stat st {};  // of the temporary file, once closed
  std::optional<unsigned long long> version;  // its inode's
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

// The generation of the value named `name` in the directory `dir_fd` now
// (absent() if no regular file), for the compare of a conditional commit:
// the same directory the lock and the rename use. A symlink there is
// followed, as a read of the key does. The file is opened for the
// inode's version (generation_of).
Generation FilesystemStore::generation_at(const std::string& key, int dir_fd, const std::string& name) const {
  struct stat st {};
  if (::fstatat(dir_fd, name.c_str(), &st, 0) != 0) {
    if (errno == ENOENT || errno == ENOTDIR || errno == ELOOP) return Generation::absent();
    fail(key, "cannot stat " + in_quotes(root_ / key), errno);
  }
  if (!S_ISREG(st.st_mode)) return Generation::absent();  // never opened: a FIFO or a device
  // Opened (and stat'ed again on that descriptor: the name may have moved on).
  const int fd = ::openat(dir_fd, name.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    if (errno == ENOENT || errno == ENOTDIR || errno == ELOOP) return Generation::absent();
    fail(key, "cannot open " + in_quotes(root_ / key), errno);
  }
  const FdGuard guard{fd};
  if (::fstat(fd, &st) != 0) fail(key, "cannot stat " + in_quotes(root_ / key), errno);
  return generation_of(st, fd);
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
    if (ok) temp.version = inode_version(fd);
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
  // Unconditional writes among many, and large ones, run whole on the
  // pool: many writes' system calls then use two cores, and the I/O thread
  // never copies a large value.
  if (uses_io_uring() && inline_commit && (options.among_many || value->size() > kReadNowBytes)) {
    auto job = std::bind_front(&FilesystemStore::write_now, this, std::move(key), std::move(*value), Generation{});
    co_return co_await offload(std::move(job));
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
      UringSlot slot(io_);  // none free: this write waits on the pool (see UringSlots)
      std::optional<asio::random_access_file> file;
      if (slot) {
        file = wrap(io_, temp.fd, why);
        if (file) temp.fd = -1;  // owned by `file` until released below
        else disable_uring(why.c_str());
      }
      if (!file) {
        auto job = [&temp, &bytes, &done, &err] { write_from(temp.fd, bytes, done, false, err); };
        co_await offload(std::move(job));
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

}  // namespace zarrcoro
