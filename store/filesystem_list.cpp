// FilesystemStore: listing (list, list_sizes): walks of the directories
// beneath the root, and the removal of stale temporary files.
#include <zarrcoro/store/filesystem.hpp>

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <functional>
#include <memory>

#include <zarrcoro/error.hpp>

#include "store/filesystem_detail.hpp"

namespace zarrcoro {

using namespace filesystem_detail;

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

awaitable<std::vector<KeySize>> FilesystemStore::list_sizes(std::string prefix) {
  auto job = std::bind_front(&FilesystemStore::walk_now, this, std::move(prefix), true);
  co_return co_await offload(std::move(job));
}

awaitable<std::vector<std::string>> FilesystemStore::list(std::string prefix) {
  auto job = std::bind_front(&FilesystemStore::list_now, this, std::move(prefix));
  co_return co_await offload(std::move(job));
}

}  // namespace zarrcoro
