// A Store over a directory tree: key "a/c/0/1" is the file <root>/a/c/0/1.
//
// Thread-safety: every method may be called concurrently from any thread and
// any executor; the store keeps no mutable state besides two flags and the
// root's descriptor. Concurrent writers of one key race (last rename wins)
// but never tear a value. Destroy the store only after its operations have
// completed. The root directory is opened once (when it exists, else at the
// first write): removing and recreating it under a live store is not
// supported; open a new store instead.
//
// I/O: the root directory is opened once, and every key is opened beneath
// it by the kernel: openat2(2) with RESOLVE_BENEATH, or, where the kernel
// lacks it, one openat(O_NOFOLLOW) per path component. A read of a small
// file costs open, fstat, one read and close; a read of a missing key one
// failed open. Reads of page-cached ranges up to 256 KiB run at once on the
// calling thread (preadv2 with RWF_NOWAIT), or, for many keys at once
// (try_read_now_many), on it and one thread of the store's pool; ranges that would wait for the
// disk move through io_uring, whose kernel workers wait; larger cached ones
// are copied by blocking reads on the store's small thread pool. A disk
// wait or a large copy never holds an I/O thread. Writes
// go to the file at once where the file system can tell it need not wait
// (pwritev2 with RWF_NOWAIT; ext4 cannot), else through io_uring
// (asio::random_access_file) on the io executor, whose kernel workers take
// them off the I/O thread. Unconditional writes larger than 256 KiB, or
// among many (WriteOptions::among_many), run whole as blocking calls on
// the store's pool, so that their system calls use two cores. The file
// stores of one io_context keep at most 48 io_uring operations in flight
// (Boost 1.81's io_uring backend can strand completions beyond 128 at
// once); the others go to the pool as blocking reads and writes. Opening, renaming and unlinking are short system
// calls on the calling thread. Directory walks (list) run on a small owned thread
// pool so the io thread never blocks on a large tree. If io_uring is
// unavailable (or disabled by the options), every operation runs as
// blocking I/O on that pool instead; the caller's executor is never blocked
// and resumes when the work completes.
//
// Layout: values are plain files; writes go to a hidden temporary file
// ".<name>.tmp.<16 hex digits>" in the target directory which is then renamed
// over the target, so readers see the old or the new value, never a mix, and
// a crash leaves the old or the new value, never a torn one. Files of that
// pattern are never read or listed; one that a killed writer left behind is
// removed by the next list() that walks its directory once it is older than
// FilesystemOptions::stale_temp_age. By default writes are not fsync'ed
// (atomic, not durable across a power loss); FilesystemOptions::durable adds
// fdatasync of the file before the rename and fsync of its directory after
// it (and after an erase).
//
// Keys are validated lexically with validate_key (InvalidArgument) before
// any system call; a key whose last segment has the temporary-file pattern
// above is refused too (InvalidArgument, by every method that takes a key;
// such files are simply never listed). Symlinks that stay inside the root are followed (also
// absolute ones, resolved in user space then); a key whose path leaves the
// root through a symlink is refused with StoreError. A write to a key that
// is a symlink replaces the link, like an erase removes it (as zarr-python
// and TensorStore do). list() does not descend into symlinked directories;
// it lists a file symlink when a read of it would succeed. Directories are
// created (mkdirat) and walked (list) through descriptors opened beneath
// the root, never by path, so a directory swapped for a symlink to the
// outside while the store works cannot make it create or list anything
// there. read() opens its file once, whatever path it then takes (a
// try_read_now that misses, then read(), open it twice).
#pragma once

#include <atomic>
#include <chrono>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/thread_pool.hpp>

#include <zarrcoro/store.hpp>

struct stat;  // <sys/stat.h>

namespace zarrcoro {

struct ByteExtent;  // <zarrcoro/store/memory.hpp>

struct FilesystemOptions {
  bool use_io_uring = true;       // false: always use the blocking fallback pool
  unsigned fallback_threads = 2;  // threads of the owned pool (at least 1)
  // list() removes temporary files whose last write is older than this
  // (left by a writer that was killed); zero keeps them.
  std::chrono::seconds stale_temp_age{3600};
  // true: a write survives a power loss once it returned (fdatasync of the
  // file, fsync of the directory); costs a disk flush per write.
  bool durable = false;
  // false: resolve keys with per-component openat(O_NOFOLLOW), as on kernels
  // without openat2(2) (also used automatically there). For tests.
  bool use_openat2 = true;
};

class FilesystemStore : public Store {
 public:
  // `io` must be an io_context executor (the runtime's I/O executor). `root`
  // need not exist yet: set creates directories as needed. Probes io_uring
  // once; if unavailable, logs one warning (per process) and falls back.
  FilesystemStore(boost::asio::any_io_executor io, std::filesystem::path root,
                  FilesystemOptions opts = {});
  ~FilesystemStore() override;

  // Success: sorted keys of the regular files (and of symlinks to regular
  // files inside the root) whose '/'-joined relative path
  // starts with `prefix` (temporary files excluded, stale ones removed; a
  // prefix no valid key can start with yields none). Failure: StoreError.
  awaitable<std::vector<std::string>> list(std::string prefix) override;
  // list() with each file's size (one fstatat per file during the walk).
  awaitable<std::vector<KeySize>> list_sizes(std::string prefix) override;
  // "file://<absolute root>"
  std::string url() const override;
  boost::asio::any_io_executor get_executor() const override { return io_; }
  // read: the (clipped) range of the file's contents, or nullopt if no
  // regular file is at the key (a directory there counts as absent; any
  // other kind of file raises StoreError, except to an empty-range read
  // without a generation or condition, Store::exists's, which stats the
  // path and answers nullopt for it).
  // write: the file holds exactly `value` (parent directories created), or
  // no file is at the key (empty parent directories up to, not including,
  // the root removed). Failure: InvalidArgument (bad key), StoreError
  // naming the key and the OS error (also for a symlink that escapes the
  // root); after a failed write the previous value is intact and no
  // temporary file is left behind.
  // Versioned and conditional (see Store). The generation is the
  // device, inode, size and modification time of the file and the inode's
  // version (FS_IOC_GETVERSION; ext4, XFS, btrfs), taken from the
  // descriptor the read uses; each write sets a time unique in the process
  // to the microsecond (1 ns past it). The version tells apart files that
  // another program renames into place within one tick of a coarse file
  // clock (kernels before 6.13), where the inode number comes back. On a
  // file system without versions (overlayfs, NFS, most FUSE) the
  // generation of a file with another program's time may repeat
  // (Generation::may_repeat: no cache keeps anything by it). Where the
  // file's time has no part finer than a microsecond (ext4 with 128-byte
  // inodes, FAT, exFAT, some network file systems) and the file system has
  // no versions, the generation is unknown (conditions then cannot be
  // honoured). A program that rewrites a file in place, rather than
  // renaming a new one over it, twice within one tick of a coarse clock
  // leaves no trace in any of these. A conditional write or erase holds an
  // exclusive flock(2) on the key's directory while it compares and
  // renames (or unlinks), and an unconditional one a shared lock while it
  // renames (or unlinks): so nothing lands at a key between a conditional
  // writer's check and its rename, in this process or another (between
  // unconditional ones, the last rename wins). The kernel releases the lock
  // of a killed writer; one that waits more than 30 s for it fails with
  // StoreError. The I/O thread never waits for it: an unconditional write
  // that finds the lock taken renames on the store's pool.
  awaitable<ReadResult> read(std::string key, ReadOptions options) override;
  // With io_uring: opens the file and answers if the range is at most
  // 256 KiB and in the page cache (preadv2 RWF_NOWAIT); else, and on the
  // blocking fallback pool, nullopt. With ReadOptions::caches_only the open
  // too must not wait: the path must be in the kernel's lookup cache
  // (openat2 RESOLVE_CACHED, Linux >= 5.12; nullopt where the kernel cannot
  // promise it). A root on tmpfs or ramfs, which hold every page in memory
  // and refuse RWF_NOWAIT, is read with plain reads (a page swapped out
  // would then be waited for). A whole value whose ReadOptions::into
  // or size_hint is above 256 KiB is nullopt at once, with no system call.
  // A whole value read into
  // ReadOptions::into without need_generation costs open, read and close
  // (no fstat; a value whose size is a multiple of the page size, one read
  // more, or on ext4, XFS, btrfs and F2FS one lseek); the generation is then
  // unknown. So does a whole value of at most
  // ReadOptions::size_hint bytes (itself at most 256 KiB) without
  // need_generation; a longer one costs one open, read and close more, then
  // the usual path. An empty value goes the usual path. (Such a read may
  // take a device file inside the root that reads without waiting, and
  // fewer bytes than asked, for a short file that the usual path would
  // refuse.)
  std::optional<ReadResult> try_read_now(const std::string& key, const ReadOptions& options) override;
  // try_read_now of many keys, shared between the calling thread and one
  // thread of the store's pool (both take the next key in turn: the caller
  // never waits for a helper that has not started, and at the end only for
  // the key the helper is reading), so the system calls of many small
  // reads run on two cores. Under 8 keys, all on the calling thread.
  void try_read_now_many(std::span<const std::string> keys, std::span<const ReadOptions> options,
                         std::span<ReadNow> out) override;
  // True: every read fills ReadOptions::into when it fits (see Store).
  bool reads_into() const override { return true; }
  awaitable<std::optional<Generation>> write(std::string key, std::optional<Bytes> value,
                                             WriteOptions options) override;

  // A regular file held open for serving it without copying it through user
  // space (sendfile(2), splice(2)): a read-only descriptor, closed by the
  // destructor, with what fstat said when it was opened. Move-only. The file
  // is the value the key held at open: a later write renames a new file over
  // the key and leaves this one intact.
  class OpenFile {
   public:
    OpenFile(int fd, std::uint64_t size, Generation generation, std::chrono::system_clock::time_point modified)
        : fd_(fd), size_(size), generation_(std::move(generation)), modified_(modified) {}
    OpenFile(OpenFile&& o) noexcept
        : fd_(std::exchange(o.fd_, -1)), size_(o.size_), generation_(std::move(o.generation_)), modified_(o.modified_) {}
    OpenFile& operator=(OpenFile&&) = delete;
    ~OpenFile();
    int fd() const { return fd_; }
    std::uint64_t size() const { return size_; }          // bytes
    const Generation& generation() const { return generation_; }  // as read() reports it
    std::chrono::system_clock::time_point modified() const { return modified_; }  // st_mtim, in ns

   private:
    int fd_;
    std::uint64_t size_;
    Generation generation_;
    std::chrono::system_clock::time_point modified_;
  };
  // Opens the file at `key` as a read does (same key validation, same
  // symlink rules), on the calling thread: one open and one fstat, no read.
  // Success: the open file, or nullopt if no regular file is at the key.
  // Failure: InvalidArgument (bad key), StoreError (I/O error, symlink escape).
  std::optional<OpenFile> open_file(const std::string& key) const;

  // True while file contents move through io_uring; false when using the
  // blocking fallback pool.
  bool uses_io_uring() const { return uring_.load(std::memory_order_relaxed); }
  // True if this kernel opens through its lookup cache alone (openat2
  // RESOLVE_CACHED, Linux >= 5.12), as try_read_now does with
  // ReadOptions::caches_only; without it such a read is always declined.
  static bool resolves_cached();
  // The absolute, symlink-resolved root directory.
  const std::filesystem::path& root() const { return root_; }

 private:
  struct Temp;
  int root_fd(bool create) const;
  int open_at(const std::string& path, int flags, mode_t mode = 0, bool cached = false, bool same_mount = false) const;
  int open_beneath(const std::string& key, const std::string& path, int flags, mode_t mode = 0,
                   bool cached = false) const;
  int open_dir(const std::string& key, const std::string& dir, bool create) const;
  void make_dirs(const std::string& key, const std::string& dir) const;
  std::filesystem::path resolve(const std::string& key, const std::string& path) const;
  int open_for_read(const std::string& key, struct ::stat& st, bool cached = false) const;
  int open_checked(const std::string& key, const ReadOptions& options, std::uint64_t& size,
                   ReadResult& result, bool cached = false) const;
  Generation generation_at(const std::string& key, int dir_fd, const std::string& name) const;
  static bool openat2_works();
  bool read_cached(const std::string& key, int fd, const ByteExtent& e, MutableByteSpan into, ReadResult& result) const;
  std::optional<ReadResult> read_whole_now(const std::string& key, const ReadOptions& options) const;
  void read_blocking(const std::string& key, int fd, const ByteExtent& e, MutableByteSpan into,
                     ReadResult& result) const;
  void create_temp(Temp& temp) const;
  std::optional<Generation> commit(Temp& temp, const Generation& if_equal, bool* would_wait = nullptr) const;
  ReadResult read_now(const std::string& key, const ReadOptions& options) const;
  std::optional<Generation> write_now(const std::string& key, const Bytes& value, const Generation& if_equal) const;
  bool erase_now(const std::string& key, const Generation& if_equal, bool* would_wait = nullptr) const;
  bool stat_file(const std::string& key, struct ::stat& st) const;
  std::vector<std::string> list_now(const std::string& prefix) const;
  std::vector<KeySize> walk_now(const std::string& prefix, bool sizes) const;
  void remove_if_stale(int dir_fd, const char* name) const;
  bool link_to_file(const std::string& key, struct ::stat& st) const;
  void disable_uring(const char* why);
  template <class F>
  auto offload(F f);

  boost::asio::any_io_executor io_;
  std::filesystem::path root_;
  unsigned threads_;
  std::chrono::seconds stale_temp_age_;
  bool durable_;
  mutable std::atomic<bool> openat2_;
  mutable std::atomic<bool> resolve_cached_{true};  // openat2 knows RESOLVE_CACHED (Linux >= 5.12)
  mutable std::atomic<int> root_fd_{-1};
  std::atomic<bool> nowait_writes_{true};  // pwritev2(RWF_NOWAIT) is worth trying
  mutable std::atomic<bool> nowait_reads_{true};  // preadv2(RWF_NOWAIT) is supported
  // The root is on tmpfs or ramfs: every page is in memory, and those file
  // systems refuse RWF_NOWAIT, so reads that must not wait read plainly.
  bool in_memory_ = false;
  // The root is on a local disk file system (ext2-4, XFS, btrfs, F2FS),
  // where lseek(SEEK_END) reads the size in memory: no network or cluster
  // lock to wait for.
  bool seek_end_ = false;
  std::atomic<bool> uring_;
  boost::asio::thread_pool pool_;
};

}  // namespace zarrcoro
