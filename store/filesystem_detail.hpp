// Helpers shared by the FilesystemStore's files (filesystem.cpp: the store,
// its root and opening beneath it; filesystem_read.cpp; filesystem_write.cpp;
// filesystem_list.cpp). Internal to the store layer.
#pragma once

#include <fcntl.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <charconv>
#include <cstring>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/execution/context.hpp>
#include <boost/asio/execution_context.hpp>
#include <boost/asio/query.hpp>
#include <boost/asio/random_access_file.hpp>

#include <zarrcoro/error.hpp>
#include <zarrcoro/store/filesystem.hpp>

#include "store/offload.hpp"

namespace zarrcoro {

namespace filesystem_detail {

namespace asio = boost::asio;
namespace fs = std::filesystem;

inline std::string os_error(int err) { return std::generic_category().message(err); }

[[noreturn]] inline void fail(const std::string& key, const std::string& what, int err) {
  throw StoreError(key, "", what + ": " + os_error(err));
}

// `p` in single quotes, for messages (filesystem.cpp).
std::string in_quotes(const fs::path& p);

constexpr std::string_view kTempTag = ".tmp.";
constexpr std::size_t kTempHex = 16;
// The most bytes an I/O thread copies to or from the page cache itself;
// larger values are copied on the store's pool.
constexpr std::uint64_t kReadNowBytes = std::uint64_t{256} << 10;

inline bool is_temp_name(std::string_view name) {
  if (name.size() < 2 + kTempTag.size() + kTempHex || name.front() != '.') return false;
  const auto tail = name.substr(name.size() - kTempHex);
  return name.substr(name.size() - kTempHex - kTempTag.size(), kTempTag.size()) == kTempTag &&
         std::all_of(tail.begin(), tail.end(), [](char c) { return std::isxdigit(static_cast<unsigned char>(c)); });
}

// validate_key, and no key's last segment may be named like a temporary
// file: list() would hide it and remove it once stale (stale_temp_age), and
// a read could see a write in progress.
inline void check_key(const std::string& key) {
  validate_key(key);
  const auto slash = key.rfind('/');
  if (is_temp_name(slash == std::string::npos ? std::string_view(key) : std::string_view(key).substr(slash + 1)))
    throw InvalidArgument(key, "key", "names of the form .<name>.tmp.<16 hex digits> are the filesystem store's temporary files");
}

inline void close_fd(int fd) {
  if (fd >= 0) ::close(fd);
}

// The inode's version (FS_IOC_GETVERSION, i_generation: ext4 and XFS give
// each new inode a fresh one, also when they reuse its number; btrfs never
// reuses inode numbers), or nullopt where the file system has none
// (overlayfs, NFS, most FUSE). Read into 8 bytes: the request is declared
// for a long, and FUSE passes that many to its server whatever the file
// system below writes.
inline std::optional<unsigned long long> inode_version(int fd) {
  alignas(long) unsigned char out[sizeof(long)] = {};
  if (fd < 0 || ::ioctl(fd, FS_IOC_GETVERSION, out) != 0) return std::nullopt;
  unsigned int version = 0;  // an int, in the first bytes
  std::memcpy(&version, out, sizeof version);
  return version;
}

// Whether a modification time is one the engine sets (unique_mtime: 1 ns
// past a microsecond).
inline bool engine_mtime(const struct stat& st) { return st.st_mtim.tv_nsec % 1000 == 1; }

// The generation of the file `st` describes (`fd` open on it): device,
// inode, size and modification time, and the inode's version (`version`,
// from `fd` if not given) where the file system keeps one. Every write
// renames a new file into place, whose inode is new or the one of a file
// removed before (ext4 reuses them at once), and sets a time unique in the
// process to the microsecond (unique_mtime). Another program's write sets
// the file system's own time, which a coarse clock (a tick of 1-10 ms on
// kernels before 6.13) repeats for every write within a tick: the
// version, which a reused inode does not keep, tells such files apart, and
// without one the generation may repeat. Where the time has no part finer
// than a microsecond, the file system keeps no finer times (seconds on
// ext4 with 128-byte inodes, FAT or some network file systems; 10 ms on
// exFAT) even for the engine's writes: then without a version (FAT,
// exFAT) the generation is unknown.
inline Generation generation_of(const struct stat& st, int fd, std::optional<unsigned long long> version = {}) {
  if (!version) version = inode_version(fd);
  if (!version && st.st_mtim.tv_nsec % 1000 == 0) return {};
  // "f<dev>:<ino>:<size>:<mtime s>.<mtime ns>[:<inode version>]" in hex;
  // to_chars, not snprintf, which was 1% of the I/O thread reading small chunks.
  char buf[112] = {'f'};
  char* at = buf + 1;
  const unsigned long long fields[] = {static_cast<unsigned long long>(st.st_dev),
                                       static_cast<unsigned long long>(st.st_ino),
                                       static_cast<unsigned long long>(st.st_size),
                                       static_cast<unsigned long long>(st.st_mtim.tv_sec),
                                       static_cast<unsigned long long>(st.st_mtim.tv_nsec),
                                       version.value_or(0)};
  for (std::size_t i = 0; i < std::size(fields) - (version ? 0 : 1); ++i) {
    if (i) *at++ = i == 4 ? '.' : ':';
    at = std::to_chars(at, buf + sizeof buf, fields[i], 16).ptr;
  }
  return {std::string(buf, at), !version && !engine_mtime(st)};
}

// Closes a descriptor at scope exit.
struct FdGuard {
  int fd;
  ~FdGuard() { close_fd(fd); }
};

// "a/c/0" -> {"a/c", "0"}; "zarr.json" -> {"", "zarr.json"}.
inline std::pair<std::string, std::string> split_key(const std::string& key) {
  const auto slash = key.rfind('/');
  if (slash == std::string::npos) return {"", key};
  return {key.substr(0, slash), key.substr(slash + 1)};
}

// Boost 1.81's io_uring backend beside the epoll reactor reads its eventfd,
// then takes at most 128 completions from the ring (complete_batch_size);
// the rest wait for the next completion to wake it again. A burst of more
// than 128 completions therefore ends with some never delivered, and their
// operations hang. So the file stores on one io_context keep at most kSlots
// io_uring operations in flight (a cancelled one brings its cancel's
// completion too: at most 2 x kSlots, with room left for Asio's own); an
// operation that finds no slot free runs the blocking way, on the store's
// pool. Other io_uring files on the same io_context are not counted.
class UringSlots : public asio::execution_context::service {
 public:
  static constexpr int kSlots = 48;
  static_assert(2 * kSlots < 128, "room for the completions of a cancel each, and a few of Asio's own");
  inline static asio::execution_context::id id;
  explicit UringSlots(asio::execution_context& ctx) : asio::execution_context::service(ctx) {}
  static UringSlots& of(const asio::any_io_executor& io) {
    return asio::use_service<UringSlots>(asio::query(io, asio::execution::context));
  }
  bool try_take() {
    if (used_.fetch_add(1, std::memory_order_relaxed) < kSlots) return true;
    used_.fetch_sub(1, std::memory_order_relaxed);
    return false;
  }
  void give_back() { used_.fetch_sub(1, std::memory_order_relaxed); }

 private:
  void shutdown() override {}
  std::atomic<int> used_{0};
};

// One slot of `io`'s UringSlots, held for an io_uring file's operations
// (which run one after another); false when none was free.
class UringSlot {
 public:
  explicit UringSlot(const asio::any_io_executor& io) {
    UringSlots& slots = UringSlots::of(io);
    if (slots.try_take()) slots_ = &slots;
  }
  ~UringSlot() {
    if (slots_) slots_->give_back();
  }
  UringSlot(const UringSlot&) = delete;
  UringSlot& operator=(const UringSlot&) = delete;
  explicit operator bool() const { return slots_ != nullptr; }

 private:
  UringSlots* slots_ = nullptr;
};

// Wraps `fd` in an io_uring file, or returns nullopt (with `why`) if io_uring
// cannot be set up; `fd` is then still owned by the caller.
inline std::optional<asio::random_access_file> wrap(const asio::any_io_executor& io, int fd,
                                                    std::string& why) {
  try {
    return asio::random_access_file(io, fd);
  } catch (const std::exception& e) {
    why = e.what();
    return std::nullopt;
  }
}

}  // namespace filesystem_detail

template <class F>
auto FilesystemStore::offload(F f) {
  return detail::run_on_pool(pool_.get_executor(), std::move(f));
}

}  // namespace zarrcoro
