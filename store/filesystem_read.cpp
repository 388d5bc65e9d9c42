// FilesystemStore: reads (read, try_read_now, open_file).
#include <zarrcoro/store/filesystem.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <functional>
#include <memory>

#include <boost/asio/post.hpp>
#include <boost/asio/random_access_file.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <zarrcoro/error.hpp>

#include "store/filesystem_detail.hpp"

namespace zarrcoro {

namespace asio = boost::asio;
using namespace filesystem_detail;

namespace {

// open_for_read's answer when an open only through the lookup cache would wait.
constexpr int kWouldWait = -2;

}  // namespace

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

// Reads extent `e` of the open `fd` into result.value if that is short work
// for the calling (I/O) thread: at most kReadNowBytes, all in the page cache
// (preadv2 RWF_NOWAIT). False if not (`into` may then hold part of it).
bool FilesystemStore::read_cached(const std::string& key, int fd, const ByteExtent& e, MutableByteSpan into,
                                  ReadResult& result) const {
  if (e.size() > kReadNowBytes || (e.size() > 0 && !nowait_reads_.load(std::memory_order_relaxed))) return false;
  ReadTarget out(into, e.size());
  std::size_t done = 0;
  int err = 0;
  if (read_into(fd, out.span(), e.begin, done, !in_memory_, err) && done < e.size()) {
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
// one more read of the next byte must then find the end (not on tmpfs or
// ramfs, where every page is in memory and reads are plain), or, cheaper,
// lseek to it where that never waits (seek_end_: a file opened with
// RESOLVE_NO_XDEV, on the root's ext4, XFS, btrfs or F2FS, where SEEK_END
// reads the size in memory). (An empty read
// goes the usual way too: a device such as /dev/null reads empty without
// waiting, and only the usual path refuses what is not a regular file.)
std::optional<ReadResult> FilesystemStore::read_whole_now(const std::string& key, const ReadOptions& options) const {
  ReadResult result;
  // A key that open_at cannot open on the root's mount (EXDEV: a mount or
  // a symlink leaving the root on the way; ELOOP: a magic link; EAGAIN: a
  // mount, with caches_only, or a lookup not cached, which then fails
  // twice) is opened as before, and its end found by reading.
  bool by_lseek = seek_end_;
  int fd = by_lseek ? open_at(key, O_RDONLY | O_NONBLOCK, 0, options.caches_only, true) : -1;
  if (by_lseek && fd < 0 && (errno == EXDEV || errno == ELOOP || errno == EAGAIN)) by_lseek = false;
  if (!by_lseek) fd = open_beneath(key, key, O_RDONLY | O_NONBLOCK, 0, options.caches_only);
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
  const int flags = in_memory_ ? 0 : RWF_NOWAIT;
  auto read_at = [fd, flags](iovec* v, int n, std::uint64_t at) {
    ssize_t got;
    do got = ::preadv2(fd, v, n, static_cast<off_t>(at), flags);
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
  if (!in_memory_ && size % page == 0 &&
      (by_lseek ? ::lseek(fd, 0, SEEK_END) != static_cast<off_t>(size) : read_at(iov + 1, 1, size) != 0))
    return std::nullopt;
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
  // Where RWF_NOWAIT is refused (NFS, FUSE) no read is sure not to wait, and
  // the open and fstat before it may ask a server: decline before them.
  if (options.caches_only && !nowait_reads_.load(std::memory_order_relaxed)) return std::nullopt;
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
  if (options.range.empty() && !options.need_generation &&
      options.if_equal.unknown()) {  // whether a regular file is there (Store::exists): no open for reading
    auto job = [this, key] {
      ReadResult r;
      struct stat st {};
      if (stat_file(key, st)) r.value.emplace();
      return r;
    };
    if (uses_io_uring()) co_return job();
    co_return co_await offload(std::move(job));
  }
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
    UringSlot slot(io_);  // none free: this read waits on the pool (see UringSlots)
    if (slot) {
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
  }
  const int fd = guard.fd;
  auto job = [this, &key, fd, &e, &options, &result] { read_blocking(key, fd, e, options.into, result); };
  co_await offload(std::move(job));
  co_return result;
}

}  // namespace zarrcoro
