#include <zarrcoro/store/filesystem.hpp>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <functional>
#include <thread>
#include <random>
#include <system_error>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/random_access_file.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <spdlog/spdlog.h>

#include <zarrcoro/error.hpp>
#include <zarrcoro/store/memory.hpp>  // clip

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
constexpr std::size_t kTempHex = 16;

bool is_temp_name(std::string_view name) {
  if (name.size() < 2 + kTempTag.size() + kTempHex || name.front() != '.') return false;
  const auto tail = name.substr(name.size() - kTempHex);
  return name.substr(name.size() - kTempHex - kTempTag.size(), kTempTag.size()) == kTempTag &&
         std::all_of(tail.begin(), tail.end(), [](char c) { return std::isxdigit(static_cast<unsigned char>(c)); });
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

// The generation of the file `st` describes: a new file (every write
// renames a new one into place) has a new inode and modification time.
Generation generation_of(const struct stat& st) {
  char buf[96];
  std::snprintf(buf, sizeof buf, "f%llx:%llx:%llx:%llx.%lx", static_cast<unsigned long long>(st.st_dev),
                static_cast<unsigned long long>(st.st_ino), static_cast<unsigned long long>(st.st_size),
                static_cast<unsigned long long>(st.st_mtim.tv_sec), static_cast<long>(st.st_mtim.tv_nsec));
  return {buf};
}

// An exclusive flock(2) on a directory, held by conditional writes of the
// keys in it for the few system calls of check-and-rename. The kernel drops
// it when the holder's descriptor closes, also when the process is killed,
// so a dead writer never blocks others; a live holder that does not let go
// within kLockWait (stopped by a debugger, say) makes the write fail.
constexpr auto kLockWait = std::chrono::seconds(30);

class DirLock {
 public:
  DirLock(const std::string& key, const fs::path& dir) {
    fd_ = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd_ < 0 && errno != ENOENT) fail(key, "cannot open " + in_quotes(dir), errno);
    if (fd_ < 0) return;  // no directory: nothing to lock, the check sees no value
    const auto deadline = std::chrono::steady_clock::now() + kLockWait;
    auto pause = std::chrono::microseconds(20);
    while (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      if (err != EWOULDBLOCK && err != EINTR) {
        ::close(fd_);
        fail(key, "cannot lock " + in_quotes(dir), err);
      }
      if (std::chrono::steady_clock::now() > deadline) {
        ::close(fd_);
        throw StoreError(key, "", "timed out waiting for the write lock on " + in_quotes(dir));
      }
      std::this_thread::sleep_for(pause);
      pause = std::min<std::chrono::microseconds>(pause * 2, std::chrono::milliseconds(5));
    }
  }
  ~DirLock() { close_fd(fd_); }
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;

 private:
  int fd_ = -1;
};

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

template <class F>
awaitable<std::invoke_result_t<F&>> invoke(F f) {
  co_return f();
}

std::atomic<bool> warned{false};

}  // namespace

// A temporary file being written; removed on destruction unless committed.
struct FilesystemStore::Temp {
  std::string path;
  int fd = -1;
  bool committed = false;
  Temp(std::string p, int f) : path(std::move(p)), fd(f) {}
  Temp(const Temp&) = delete;
  Temp& operator=(const Temp&) = delete;
  ~Temp() {
    close_fd(fd);
    if (!committed) ::unlink(path.c_str());
  }
};

template <class F>
auto FilesystemStore::offload(F f) {
  return asio::co_spawn(pool_.get_executor(), invoke(std::move(f)), asio::use_awaitable);
}

FilesystemStore::FilesystemStore(asio::any_io_executor io, fs::path root, FilesystemOptions opts)
    : io_(std::move(io)),
      threads_(std::max(1u, opts.fallback_threads)),
      stale_temp_age_(opts.stale_temp_age),
      uring_(opts.use_io_uring),
      pool_(threads_) {
  std::error_code ec;
  root_ = fs::weakly_canonical(fs::absolute(root, ec), ec);
  if (ec) throw StoreError("", "root", "cannot resolve " + in_quotes(root) + ": " + ec.message());
  if (root_.filename().empty()) root_ = root_.parent_path();  // drop a trailing '/'
  if (uring_)
    if (auto why = probe_uring(io_)) disable_uring(why->c_str());
}

FilesystemStore::~FilesystemStore() { pool_.join(); }

void FilesystemStore::disable_uring(const char* why) {
  uring_ = false;
  if (!warned.exchange(true))
    spdlog::warn("zarrcoro: io_uring is unavailable ({}); FilesystemStore falls back to "
                 "blocking file I/O on {} pool thread(s)",
                 why, threads_);
}

std::string FilesystemStore::url() const { return "file://" + root_.string(); }

// root/key with symlinks resolved; StoreError if that leaves the root.
fs::path FilesystemStore::resolve(const std::string& key) const {
  std::error_code ec;
  fs::path p = fs::weakly_canonical(root_ / key, ec);
  if (ec) throw StoreError(key, "", "cannot resolve " + in_quotes(root_ / key) + ": " + ec.message());
  if (!within(root_, p) || p == root_)
    throw StoreError(key, "", "refusing to follow a symlink out of the store root " + in_quotes(root_));
  return p;
}

// Opens the regular file at `key` for reading; returns -1 if there is none.
// `generation` is taken from the open file, so it describes the bytes read.
int FilesystemStore::open_for_read(const std::string& key, std::uint64_t& size, Generation& generation) const {
  const fs::path p = resolve(key);
  // O_NONBLOCK so that a FIFO cannot block the open; cleared below.
  const int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    if (errno == ENOENT || errno == ENOTDIR) return -1;
    fail(key, "cannot open " + in_quotes(p), errno);
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    fail(key, "cannot stat " + in_quotes(p), err);
  }
  if (S_ISDIR(st.st_mode)) {
    ::close(fd);
    return -1;
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw StoreError(key, "", in_quotes(p) + " is not a regular file");
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  size = static_cast<std::uint64_t>(st.st_size);
  generation = generation_of(st);
  return fd;
}

// The generation of the value at `target` now (absent() if no regular file).
Generation FilesystemStore::current_generation(const std::string& key, const fs::path& target) const {
  struct stat st {};
  if (::stat(target.c_str(), &st) == 0) return S_ISREG(st.st_mode) ? generation_of(st) : Generation::absent();
  if (errno == ENOENT || errno == ENOTDIR) return Generation::absent();
  fail(key, "cannot stat " + in_quotes(target), errno);
}

// Opens `key` for a read; -1 when there is nothing to read: no value
// (result: absent) or a failed condition (result: changed).
int FilesystemStore::open_checked(const std::string& key, const ReadOptions& options, std::uint64_t& size,
                                  ReadResult& result) const {
  const int fd = open_for_read(key, size, result.generation);
  if (fd < 0) result.generation = Generation::absent();
  if (!options.if_equal.unknown() && options.if_equal != result.generation) {
    close_fd(fd);
    result.changed = true;
    return -1;
  }
  return fd;
}

ReadResult FilesystemStore::read_now(const std::string& key, const ReadOptions& options) const {
  ReadResult result;
  std::uint64_t size = 0;
  const int fd = open_checked(key, options, size, result);
  if (fd < 0) return result;
  const ByteExtent e = clip(options.range, size);
  Bytes out(e.size());
  std::size_t done = 0;
  while (done < out.size()) {
    const ssize_t n = ::pread(fd, out.data() + done, out.size() - done, e.begin + done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      fail(key, "cannot read " + in_quotes(root_ / key), err);
    }
    if (n == 0) break;  // the file shrank: a writer bypassed the store
    done += static_cast<std::size_t>(n);
  }
  ::close(fd);
  out.resize(done);
  result.value = std::move(out);
  return result;
}

FilesystemStore::Temp FilesystemStore::create_temp(const std::string& key,
                                                   const fs::path& target) const {
  const fs::path dir = target.parent_path();
  const std::string name = target.filename().string();
  for (int attempt = 0;; ++attempt) {
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) throw StoreError(key, "", "cannot create directory " + in_quotes(dir) + ": " + ec.message());
    std::string path = (dir / temp_name(name)).string();
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd >= 0) return Temp(std::move(path), fd);
    // EEXIST: a name clash; ENOENT: a concurrent erase pruned the directory.
    if ((errno == EEXIST || errno == ENOENT) && attempt < 16) continue;
    fail(key, "cannot create a temporary file in " + in_quotes(dir), errno);
  }
}

// Renames the written temporary file over `target` if the value there has
// generation `if_equal` (when known); returns the new value's generation, or
// nullopt (the temporary file is then removed) when the condition failed.
std::optional<Generation> FilesystemStore::commit(const std::string& key, Temp& temp, const fs::path& target,
                                                  const Generation& if_equal) const {
  struct stat st {};
  if (temp.fd >= 0) {
    const int fd = std::exchange(temp.fd, -1);
    const bool stat_ok = ::fstat(fd, &st) == 0;
    if (::close(fd) != 0 || !stat_ok) fail(key, "cannot write " + in_quotes(temp.path), errno);
  } else if (::stat(temp.path.c_str(), &st) != 0) {
    fail(key, "cannot stat " + in_quotes(temp.path), errno);
  }
  std::optional<DirLock> lock;
  if (!if_equal.unknown()) {
    lock.emplace(key, target.parent_path());
    if (current_generation(key, target) != if_equal) return std::nullopt;
  }
  if (::rename(temp.path.c_str(), target.c_str()) != 0)
    fail(key, "cannot replace " + in_quotes(target), errno);
  temp.committed = true;
  return generation_of(st);  // rename keeps the inode and the times
}

std::optional<Generation> FilesystemStore::write_now(const std::string& key, const Bytes& value,
                                                     const Generation& if_equal) const {
  const fs::path target = resolve(key);
  Temp temp = create_temp(key, target);
  std::size_t done = 0;
  while (done < value.size()) {
    const ssize_t n = ::pwrite(temp.fd, value.data() + done, value.size() - done, done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail(key, "cannot write " + in_quotes(temp.path), n < 0 ? errno : EIO);
    done += static_cast<std::size_t>(n);
  }
  return commit(key, temp, target, if_equal);
}

bool FilesystemStore::erase_now(const std::string& key, const Generation& if_equal) const {
  // Resolve only the parent: a symlink at the key itself is removed, not followed.
  const fs::path lexical = root_ / key;
  const std::string parent_key = fs::path(key).parent_path().string();
  if (!parent_key.empty()) resolve(parent_key);
  {
    std::optional<DirLock> lock;
    if (!if_equal.unknown()) {
      lock.emplace(key, lexical.parent_path());
      if (current_generation(key, lexical) != if_equal) return false;
    }
    if (::unlink(lexical.c_str()) != 0 && errno != ENOENT && errno != ENOTDIR && errno != EISDIR)
      fail(key, "cannot remove " + in_quotes(lexical), errno);
  }
  for (fs::path dir = lexical.parent_path(); dir != root_ && within(root_, dir);
       dir = dir.parent_path())
    if (::rmdir(dir.c_str()) != 0) break;  // not empty (or already gone): stop
  return true;
}

bool FilesystemStore::exists_now(const std::string& key) const {
  const fs::path p = resolve(key);
  struct stat st {};
  if (::stat(p.c_str(), &st) == 0) return S_ISREG(st.st_mode);
  if (errno == ENOENT || errno == ENOTDIR) return false;
  fail(key, "cannot stat " + in_quotes(p), errno);
}

// A temporary file is stale when nothing has written it for stale_temp_age:
// its writer was killed. Failures (raced by another cleaner) are ignored.
void FilesystemStore::remove_if_stale(const fs::path& path) const {
  if (stale_temp_age_.count() <= 0) return;
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return;
  const auto written = std::chrono::system_clock::from_time_t(st.st_mtim.tv_sec);
  if (std::chrono::system_clock::now() - written > stale_temp_age_) ::unlink(path.c_str());
}

std::vector<std::string> FilesystemStore::list_now(const std::string& prefix) const {
  std::vector<std::string> keys;
  // Start at the deepest directory the prefix names.
  const std::string dir = prefix.substr(0, prefix.rfind('/') + 1);  // "" or "a/b/"
  fs::path start = root_;
  if (!dir.empty()) {
    try {
      validate_key(dir.substr(0, dir.size() - 1));
    } catch (const InvalidArgument&) {
      return keys;  // no valid key starts with this prefix
    }
    start = resolve(dir.substr(0, dir.size() - 1));
  }
  // Depth-first walk; directories vanishing under a concurrent erase are skipped.
  auto walk = [&](auto& self, const fs::path& path, const std::string& rel) -> void {
    std::error_code ec;
    fs::directory_iterator it(path, ec), end;
    if (ec) {
      if (ec == std::errc::no_such_file_or_directory || ec == std::errc::not_a_directory) return;
      throw StoreError(prefix, "", "cannot list " + in_quotes(path) + ": " + ec.message());
    }
    for (; it != end; it.increment(ec)) {
      if (ec) break;
      const std::string name = it->path().filename().string();
      const std::string key = rel + name;
      std::error_code sec;
      if (it->is_directory(sec) && !it->is_symlink(sec)) {
        const std::string sub = key + "/";
        if (sub.starts_with(prefix) || prefix.starts_with(sub)) self(self, it->path(), sub);
      } else if (is_temp_name(name)) {
        remove_if_stale(it->path());
      } else if (it->is_regular_file(sec) && key.starts_with(prefix)) {
        keys.push_back(key);
      }
    }
    if (ec && ec != std::errc::no_such_file_or_directory)
      throw StoreError(prefix, "", "cannot list " + in_quotes(path) + ": " + ec.message());
  };
  walk(walk, start, dir);
  std::sort(keys.begin(), keys.end());
  return keys;
}

awaitable<ReadResult> FilesystemStore::read(std::string key, ReadOptions options) {
  validate_key(key);
  if (uses_io_uring()) {
    ReadResult result;
    std::uint64_t size = 0;
    const int fd = open_checked(key, options, size, result);
    if (fd < 0) co_return result;
    std::string why;
    if (auto file = wrap(io_, fd, why)) {
      const ByteExtent e = clip(options.range, size);
      Bytes out(e.size());
      std::size_t done = 0;
      while (done < out.size()) {
        boost::system::error_code ec;
        const std::size_t n = co_await file->async_read_some_at(
            e.begin + done, asio::buffer(out.data() + done, out.size() - done),
            asio::redirect_error(asio::use_awaitable, ec));
        done += n;
        if (ec == asio::error::eof) break;
        if (ec) throw StoreError(key, "", "cannot read " + in_quotes(root_ / key) + ": " + ec.message());
      }
      out.resize(done);
      result.value = std::move(out);
      co_return result;
    }
    close_fd(fd);
    disable_uring(why.c_str());
  }
  auto job = std::bind_front(&FilesystemStore::read_now, this, std::move(key), std::move(options));
  co_return co_await offload(std::move(job));
}

awaitable<std::optional<Generation>> FilesystemStore::write(std::string key, std::optional<Bytes> value,
                                                            WriteOptions options) {
  validate_key(key);
  if (!value) {
    // An unconditional erase is a few short system calls; a conditional one
    // may wait for the directory lock: on the pool.
    if (uses_io_uring() && options.if_equal.unknown()) {
      erase_now(key, {});
      co_return Generation::absent();
    }
    auto job = std::bind_front(&FilesystemStore::erase_now, this, std::move(key), std::move(options.if_equal));
    if (!co_await offload(std::move(job))) co_return std::nullopt;
    co_return Generation::absent();
  }
  if (uses_io_uring()) {
    const fs::path target = resolve(key);
    Temp temp = create_temp(key, target);
    std::string why;
    if (auto file = wrap(io_, temp.fd, why)) {
      temp.fd = -1;  // owned by `file` now
      const Bytes& bytes = *value;
      std::size_t done = 0;
      while (done < bytes.size()) {
        boost::system::error_code ec;
        const std::size_t n = co_await file->async_write_some_at(
            done, asio::buffer(bytes.data() + done, bytes.size() - done),
            asio::redirect_error(asio::use_awaitable, ec));
        done += n;
        if (!ec && n == 0) ec = asio::error::make_error_code(asio::error::broken_pipe);
        if (ec) throw StoreError(key, "", "cannot write " + in_quotes(temp.path) + ": " + ec.message());
      }
      boost::system::error_code ec;
      file->close(ec);
      if (ec) throw StoreError(key, "", "cannot write " + in_quotes(temp.path) + ": " + ec.message());
      if (options.if_equal.unknown()) co_return commit(key, temp, target, {});
      auto job = [this, &key, &temp, &target, &options] { return commit(key, temp, target, options.if_equal); };
      co_return co_await offload(std::move(job));
    }
    disable_uring(why.c_str());
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
  validate_key(key);
  if (uses_io_uring()) co_return exists_now(key);
  auto job = std::bind_front(&FilesystemStore::exists_now, this, std::move(key));
  co_return co_await offload(std::move(job));
}

awaitable<std::vector<std::string>> FilesystemStore::list(std::string prefix) {
  auto job = std::bind_front(&FilesystemStore::list_now, this, std::move(prefix));
  co_return co_await offload(std::move(job));
}

}  // namespace zarrcoro
