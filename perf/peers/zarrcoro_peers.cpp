// zarrcoro_peers: the C++ side of perf/peers (driven by perf/peers/peers.py).
//
// It times zarrcoro's engine through its blocking API, and the raw and
// codec-only limits, on commands it reads from stdin, one JSON object per
// line; it answers each with one JSON line on stdout:
//   {"seconds": S, "cpu_seconds": C}  the timed part of the command: wall-clock
//                             time, and the CPU time of the whole process
//   {"na": "reason"}          the command does not apply (e.g. a codec limit
//                             of an array without a codec)
//   {"error": "message"}      it failed
// Opening arrays, loading source data and anything asked with "dump" (the
// bytes read, written to a file for the driver to compare) are not timed.
//
// Engine commands (zarrcoro: one Runtime with default options for the
// process, but codec_sched_idle off with --no-codec-sched-idle; one
// FilesystemStore per array directory, opened once, without io_uring with
// --no-io-uring):
//   {"op": "read", "array": DIR[, "dump": FILE]}  whole array into a fresh buffer
//   {"op": "write", "array": DIR, "source": FILE}  whole array from FILE's raw bytes
//   {"op": "round_trip", "src": DIR, "dst": DIR}  read src whole, write it to dst
//   {"op": "regions", "array": DIR, "regions": [[start, stop], ...], "threads": T[, "dump": FILE]}
//       one read_blocking call per region (an NdArray each), T threads taking
//       regions in turn
//   {"op": "mem_write", "name": N, "meta": DOC, "source": FILE}  a fresh
//       MemoryStore with the array of metadata DOC (v3 zarr.json or v2 .zarray),
//       then the whole array written (only the write is timed)
//   {"op": "mem_read", "name": N[, "dump": FILE]}  that array read whole
// Limit commands (no engine; plain syscalls and libzstd on T threads, each
// taking files or chunks in turn; the files are those of the array at DIR):
//   {"op": "raw_read", "array": DIR, "threads": T}   open + pread + close of every stored file
//   {"op": "codec_read", "array": DIR, "threads": T}  ZSTD_decompressDCtx of every stored
//       chunk (inner chunk when sharded) from memory into a scratch buffer
//   {"op": "raw_write", "array": DIR, "dst": DIR, "threads": T}  open(temp) + write +
//       close + rename of every stored file's bytes under dst
//   {"op": "codec_write", "array": DIR, "threads": T}  ZSTD_compressCCtx of every
//       decoded chunk (at the array's level) from memory into a scratch buffer
//   {"op": "raw_regions", "array": DIR, "regions": [...], "threads": T}  per region,
//       per stored file it touches: open, pread of the shard index (sharded)
//       and of each chunk needed (or of the whole file), close
//   {"op": "codec_regions", "array": DIR, "regions": [...], "threads": T}
//       ZSTD_decompressDCtx of each chunk a region touches, from memory
//   {"op": "memcpy", "array": DIR, "threads": T}  a copy of every stored file's
//       bytes from memory into one resident buffer (a memory store's limit)
//   {"op": "seq", "ops": [CMD, ...]}  the commands one after another, timed together
//   {"op": "quit"}
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>
#include <zstd.h>

#include <zarrcoro/array.hpp>
#include <zarrcoro/runtime.hpp>
#include <zarrcoro/store/filesystem.hpp>
#include <zarrcoro/store/memory.hpp>

#include "../perf_common.hpp"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace zarrcoro;
using namespace zarrcoro::perf;

namespace {

// A command that does not apply (answered with {"na": ...}).
struct NotApplicable {
  std::string reason;
};

[[noreturn]] void fail_errno(const char* what, const std::string& path) {
  throw std::system_error(errno, std::generic_category(), std::string(what) + " " + path);
}

std::uint64_t product(const std::vector<std::uint64_t>& v) {
  std::uint64_t n = 1;
  for (auto x : v) n *= x;
  return n;
}

// Threads for the limits' loops, started once: a loop's time holds no
// thread creation. run(n, fn) runs fn on the caller and n - 1 workers, and
// returns when all n are done.
class Workers {
 public:
  ~Workers() {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    for (auto& t : threads_) t.join();
  }

  void run(unsigned n, const std::function<void()>& fn) {
    n = std::max(1u, n);
    while (threads_.size() < n - 1) threads_.emplace_back(&Workers::loop, this, static_cast<unsigned>(threads_.size()));
    {
      std::lock_guard lock(mutex_);
      job_ = &fn;
      active_ = pending_ = n - 1;
      ++generation_;
    }
    wake_.notify_all();
    fn();
    std::unique_lock lock(mutex_);
    done_.wait(lock, [&] { return pending_ == 0; });
  }

 private:
  void loop(unsigned index) {
    std::uint64_t seen = 0;
    for (;;) {
      const std::function<void()>* job;
      {
        std::unique_lock lock(mutex_);
        wake_.wait(lock, [&] { return stop_ || (generation_ != seen && index < active_); });
        if (stop_) return;
        seen = generation_;
        job = job_;
      }
      (*job)();
      std::lock_guard lock(mutex_);
      if (--pending_ == 0) done_.notify_one();
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_, done_;
  std::vector<std::thread> threads_;
  const std::function<void()>* job_ = nullptr;
  unsigned active_ = 0, pending_ = 0;
  std::uint64_t generation_ = 0;
  bool stop_ = false;
};

Workers& workers() {
  static Workers w;
  return w;
}

// Runs fn(i) for i in [0, n) on `threads` threads that take indices in turn.
template <class Fn>
void parallel(unsigned threads, std::size_t n, Fn&& fn) {
  std::atomic<std::size_t> next{0};
  std::exception_ptr error;
  std::mutex error_mutex;
  const std::function<void()> work = [&] {
    try {
      for (std::size_t i; (i = next++) < n;) fn(i);
    } catch (...) {
      std::lock_guard lock(error_mutex);
      error = std::current_exception();
      next = n;
    }
  };
  workers().run(threads, work);
  if (error) std::rethrow_exception(error);
}

Bytes read_file(const fs::path& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot open " + path.string());
  Bytes data(fs::file_size(path));
  f.read(reinterpret_cast<char*>(data.data()), static_cast<std::streamsize>(data.size()));
  if (!f) throw std::runtime_error("cannot read " + path.string());
  return data;
}

void write_file(const fs::path& path, ByteSpan data) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
  if (!f) throw std::runtime_error("cannot write " + path.string());
}

// The wall-clock and CPU time (user + system, every thread of the process:
// the caller's, the runtime's I/O and codec threads, the file store's) of
// the timed part of a command.
struct Timing {
  double wall = 0, cpu = 0;
  Timing& operator+=(const Timing& o) {
    wall += o.wall, cpu += o.cpu;
    return *this;
  }
};

double cpu_seconds() {
  rusage ru{};
  ::getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
}

struct Stopwatch {
  Clock::time_point t0 = Clock::now();
  double cpu0 = cpu_seconds();
  Timing elapsed() const { return {seconds_since(t0), cpu_seconds() - cpu0}; }
};

// A fresh output buffer, allocated as numpy.empty allocates one, so that the
// engine's reads fault in the same pages as the Python engines' do: malloc,
// and for 4 MiB or more transparent huge pages asked for with madvise (which
// numpy does on Linux; the kernel's default here is "madvise").
struct FreshBuffer {
  explicit FreshBuffer(std::size_t n) : size(n), data(static_cast<std::byte*>(std::malloc(n ? n : 1))) {
    if (!data) throw std::bad_alloc();
    if (n >= (std::size_t{1} << 22)) {
      const auto page = std::uintptr_t{1} << 21;
      const auto begin = (reinterpret_cast<std::uintptr_t>(data) + page - 1) & ~(page - 1);
      const auto end = reinterpret_cast<std::uintptr_t>(data) + n;
      if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
    }
  }
  ~FreshBuffer() { std::free(data); }
  FreshBuffer(const FreshBuffer&) = delete;
  FreshBuffer& operator=(const FreshBuffer&) = delete;
  MutableByteSpan span() const { return {data, size}; }

  std::size_t size;
  std::byte* data;
};

Region region_of(const json& j) {
  return Region{j.at(0).get<std::vector<std::uint64_t>>(), j.at(1).get<std::vector<std::uint64_t>>()};
}

std::uint64_t get_le64(const std::byte* p) {
  std::uint64_t v;
  std::memcpy(&v, p, 8);
  return v;  // x86-64 and the other targets the project runs on are little-endian
}

// ---- the layout of an array's stored files, for the limits ---------------------

// One encoded chunk inside a stored file.
struct Segment {
  std::uint64_t offset = 0, length = 0;
};

struct StoredFile {
  std::string key;
  fs::path path;
  std::vector<std::uint64_t> coords;  // in the (outer) chunk grid
  Bytes data;                         // the file's bytes (loaded once)
  std::vector<Segment> segments;      // per inner chunk in C order (length 0: absent)
};

struct Layout {
  fs::path root;
  ArrayMetadata meta;
  std::vector<std::uint64_t> outer, inner;  // chunk (shard) and inner chunk shapes; equal when unsharded
  bool sharded = false, index_at_end = true;
  std::size_t index_bytes = 0;
  std::optional<int> zstd_level;  // the chunks' codec: zstd at this level, or none
  std::string other_codec;        // a codec the limits do not model (then codec limits are n/a)
  std::size_t chunk_bytes = 0;    // one decoded (inner) chunk
  std::vector<StoredFile> files;  // every chunk of the grid that is stored
  std::vector<Bytes> decoded;     // codec_write's inputs, per (file, segment), made on first use

  std::uint64_t inner_per_shard() const {
    std::uint64_t n = 1;
    for (std::size_t d = 0; d < outer.size(); ++d) n *= outer[d] / inner[d];
    return n;
  }
};

// The chain's compressor: zstd (with its level), none, or something else.
void read_chain(Layout& l, const json& chain) {
  for (const auto& c : chain) {
    const std::string name = c.at("name");
    if (name == "zstd") {
      l.zstd_level = c.contains("configuration") ? c["configuration"].value("level", 0) : 0;
    } else if (name != "bytes") {
      l.other_codec = name;
    }
  }
}

std::vector<Segment> parse_segments(const Layout& l, const StoredFile& f) {
  if (!l.sharded) return {Segment{0, f.data.size()}};
  const std::uint64_t n = l.inner_per_shard();
  if (f.data.size() < l.index_bytes) throw std::runtime_error("shard shorter than its index: " + f.key);
  const std::byte* index = f.data.data() + (l.index_at_end ? f.data.size() - l.index_bytes : 0);
  std::vector<Segment> segs(n);
  for (std::uint64_t i = 0; i < n; ++i) {
    const std::uint64_t off = get_le64(index + 16 * i), len = get_le64(index + 16 * i + 8);
    if (off != ~std::uint64_t{0}) segs[i] = {off, len};
  }
  return segs;
}

std::unique_ptr<Layout> make_layout(Runtime& rt, const fs::path& root) {
  auto l = std::make_unique<Layout>();
  l->root = root;
  const Array arr = Array::open_blocking(rt, std::make_shared<FilesystemStore>(rt.io_executor(), root), "");
  l->meta = arr.metadata();
  const json chain = l->meta.zarr_format == 2 ? l->meta.v2_codecs() : l->meta.codecs;
  l->outer = l->inner = l->meta.chunk_shape;
  if (!chain.empty() && chain[0].at("name") == "sharding_indexed") {
    const json& cfg = chain[0].at("configuration");
    l->sharded = true;
    l->inner = cfg.at("chunk_shape").get<std::vector<std::uint64_t>>();
    l->index_at_end = cfg.value("index_location", "end") == "end";
    bool crc = false;
    for (const auto& c : cfg.at("index_codecs")) crc = crc || c.at("name") == "crc32c";
    l->index_bytes = 16 * l->inner_per_shard() + (crc ? 4 : 0);
    read_chain(*l, cfg.at("codecs"));
  } else {
    read_chain(*l, chain);
  }
  l->chunk_bytes = product(l->inner) * l->meta.data_type.size();
  const auto grid = l->meta.grid_shape();
  std::vector<std::uint64_t> c(grid.size(), 0);
  for (std::uint64_t i = 0, n = product(grid); i < n; ++i) {
    std::uint64_t rest = i;
    for (std::size_t d = grid.size(); d-- > 0;) c[d] = rest % grid[d], rest /= grid[d];
    const std::string key = arr.chunk_key(c);
    const fs::path path = root / key;
    if (!fs::exists(path)) continue;
    StoredFile f{key, path, c, read_file(path), {}};
    f.segments = parse_segments(*l, f);
    l->files.push_back(std::move(f));
  }
  if (l->files.empty()) throw std::runtime_error("no stored chunk under " + root.string());
  return l;
}

// Per-thread codec contexts and scratch buffers, made once per thread.
ZSTD_DCtx* dctx() {
  thread_local std::unique_ptr<ZSTD_DCtx, decltype(&ZSTD_freeDCtx)> c(ZSTD_createDCtx(), ZSTD_freeDCtx);
  return c.get();
}
ZSTD_CCtx* cctx() {
  thread_local std::unique_ptr<ZSTD_CCtx, decltype(&ZSTD_freeCCtx)> c(ZSTD_createCCtx(), ZSTD_freeCCtx);
  return c.get();
}
std::byte* scratch(std::size_t bytes) {
  thread_local Bytes buf;
  if (buf.size() < bytes) buf.resize(bytes);
  return buf.data();
}

void decode(const Layout& l, const std::byte* src, std::uint64_t length, std::byte* out) {
  const std::size_t n = ZSTD_decompressDCtx(dctx(), out, l.chunk_bytes, src, length);
  if (ZSTD_isError(n) || n != l.chunk_bytes) throw std::runtime_error("zstd: cannot decode a chunk");
}

void require_codec(const Layout& l) {
  if (!l.other_codec.empty()) throw NotApplicable{"the codec-only limit models zstd only, not " + l.other_codec};
  if (!l.zstd_level) throw NotApplicable{"no codec to time: the chunks are stored uncompressed"};
}

// Every (file, segment) that holds a chunk.
std::vector<std::pair<std::size_t, std::size_t>> all_segments(const Layout& l) {
  std::vector<std::pair<std::size_t, std::size_t>> out;
  for (std::size_t f = 0; f < l.files.size(); ++f)
    for (std::size_t s = 0; s < l.files[f].segments.size(); ++s)
      if (l.files[f].segments[s].length) out.emplace_back(f, s);
  return out;
}

// The chunks a region touches, grouped by stored file: (file index, inner
// chunk indices within it). Chunks that are not stored are left out.
std::vector<std::pair<std::size_t, std::vector<std::size_t>>> touched(const Layout& l, const Region& r) {
  const std::size_t rank = l.inner.size();
  std::map<std::vector<std::uint64_t>, std::size_t> file_of;
  for (std::size_t i = 0; i < l.files.size(); ++i) file_of[l.files[i].coords] = i;
  std::vector<std::uint64_t> lo(rank), hi(rank), c(rank);
  for (std::size_t d = 0; d < rank; ++d) {
    if (r.stop[d] <= r.start[d]) return {};
    lo[d] = r.start[d] / l.inner[d];
    hi[d] = (r.stop[d] - 1) / l.inner[d];
  }
  std::map<std::size_t, std::vector<std::size_t>> groups;
  c = lo;
  for (;;) {
    std::vector<std::uint64_t> outer(rank);
    std::uint64_t within = 0;
    for (std::size_t d = 0; d < rank; ++d) {
      const std::uint64_t per = l.outer[d] / l.inner[d];
      outer[d] = c[d] / per;
      within = within * per + c[d] % per;
    }
    if (auto it = file_of.find(outer); it != file_of.end() && l.files[it->second].segments[within].length)
      groups[it->second].push_back(within);
    std::size_t d = rank;
    while (d-- > 0 && ++c[d] > hi[d]) c[d] = lo[d];
    if (d == static_cast<std::size_t>(-1)) break;
  }
  return {groups.begin(), groups.end()};
}

// open + pread of the whole file + close.
void raw_read_file(const StoredFile& f) {
  const int fd = ::open(f.path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail_errno("open", f.path);
  const ssize_t n = ::pread(fd, scratch(f.data.size()), f.data.size(), 0);
  ::close(fd);
  if (n != static_cast<ssize_t>(f.data.size())) fail_errno("short pread of", f.path);
}

// open, pread of the index and of each needed inner chunk, close (sharded);
// the whole file otherwise.
void raw_read_parts(const Layout& l, const StoredFile& f, const std::vector<std::size_t>& inner) {
  if (!l.sharded) return raw_read_file(f);
  const int fd = ::open(f.path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail_errno("open", f.path);
  const std::uint64_t index_at = l.index_at_end ? f.data.size() - l.index_bytes : 0;
  std::byte* index = scratch(l.index_bytes + l.chunk_bytes * 2);
  std::byte* buf = index + l.index_bytes;
  if (::pread(fd, index, l.index_bytes, static_cast<off_t>(index_at)) != static_cast<ssize_t>(l.index_bytes))
    fail_errno("pread of the index of", f.path);
  for (std::size_t i : inner) {
    const std::uint64_t off = get_le64(index + 16 * i), len = get_le64(index + 16 * i + 8);
    if (len > l.chunk_bytes * 2) throw std::runtime_error("inner chunk larger than expected in " + f.key);
    if (::pread(fd, buf, len, static_cast<off_t>(off)) != static_cast<ssize_t>(len)) fail_errno("pread of", f.path);
  }
  ::close(fd);
}

void raw_write_file(const StoredFile& f, const fs::path& dst, unsigned long tag) {
  const fs::path path = dst / f.key;
  const std::string temp = path.string() + ".tmp" + std::to_string(tag);
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail_errno("open", temp);
  const ssize_t n = ::write(fd, f.data.data(), f.data.size());
  if (n != static_cast<ssize_t>(f.data.size()) || ::close(fd) != 0) fail_errno("write", temp);
  if (::rename(temp.c_str(), path.c_str()) != 0) fail_errno("rename to", path);
}

// ---- the program's state --------------------------------------------------------

class Peers {
 public:
  Peers(const RuntimeOptions& options, const FilesystemOptions& fs_options) : rt_(options), fs_options_(fs_options) {}

  // Answers one command: the seconds of its timed part.
  Timing run(const json& cmd) {
    const std::string op = cmd.at("op");
    const unsigned threads = cmd.value("threads", 1u);
    if (op == "seq") {
      Timing total;
      for (const auto& c : cmd.at("ops")) total += run(c);
      return total;
    }
    if (op == "read") return read_all(array(cmd.at("array")), dump_of(cmd));
    if (op == "write") {
      const Array a = array(cmd.at("array"));
      const Bytes& src = source(cmd.at("source"));
      const Stopwatch t0;
      a.write_blocking(Region::all(a.shape()), src);
      return t0.elapsed();
    }
    if (op == "round_trip") {
      const Array src = array(cmd.at("src")), dst = array(cmd.at("dst"));
      const Stopwatch t0;
      const FreshBuffer buf(product(src.shape()) * src.dtype().size());
      src.read_blocking(Region::all(src.shape()), buf.span());
      dst.write_blocking(Region::all(dst.shape()), buf.span());
      return t0.elapsed();
    }
    if (op == "regions") return read_regions(array(cmd.at("array")), regions(cmd), threads, dump_of(cmd));
    if (op == "mem_write") {
      const json& doc = cmd.at("meta");
      ArrayMetadata meta = doc.value("zarr_format", 3) == 2
                               ? ArrayMetadata::from_v2_json(doc, json(nullptr), ".zarray")
                               : ArrayMetadata::from_json(doc, "zarr.json");
      const Array a = Array::create_blocking(rt_, std::make_shared<MemoryStore>(), "", meta);
      const Bytes& src = source(cmd.at("source"));
      const Stopwatch t0;
      a.write_blocking(Region::all(a.shape()), src);
      const Timing s = t0.elapsed();
      memory_[cmd.at("name")] = a;
      return s;
    }
    if (op == "mem_read") {
      auto it = memory_.find(cmd.at("name"));
      if (it == memory_.end()) throw std::runtime_error("no memory array " + cmd.at("name").get<std::string>());
      return read_all(it->second, dump_of(cmd));
    }
    return limit(op, cmd, threads);
  }

 private:
  Timing limit(const std::string& op, const json& cmd, unsigned threads) {
    Layout& l = layout(cmd.at("array"));
    if (op == "raw_read") {
      const Stopwatch t0;
      parallel(threads, l.files.size(), [&](std::size_t i) { raw_read_file(l.files[i]); });
      return t0.elapsed();
    }
    if (op == "codec_read") {
      require_codec(l);
      const auto segs = all_segments(l);
      const Stopwatch t0;
      parallel(threads, segs.size(), [&](std::size_t i) {
        const StoredFile& f = l.files[segs[i].first];
        const Segment& s = f.segments[segs[i].second];
        decode(l, f.data.data() + s.offset, s.length, scratch(l.chunk_bytes));
      });
      return t0.elapsed();
    }
    if (op == "raw_write") {
      const fs::path dst = cmd.at("dst").get<std::string>();
      for (const auto& f : l.files) fs::create_directories((dst / f.key).parent_path());
      const Stopwatch t0;
      parallel(threads, l.files.size(), [&](std::size_t i) { raw_write_file(l.files[i], dst, i); });
      return t0.elapsed();
    }
    if (op == "codec_write") {
      require_codec(l);
      const auto segs = all_segments(l);
      if (l.decoded.size() != segs.size()) {
        l.decoded.resize(segs.size());
        for (std::size_t i = 0; i < segs.size(); ++i) {
          const StoredFile& f = l.files[segs[i].first];
          const Segment& s = f.segments[segs[i].second];
          l.decoded[i].resize(l.chunk_bytes);
          decode(l, f.data.data() + s.offset, s.length, l.decoded[i].data());
        }
      }
      const std::size_t bound = ZSTD_compressBound(l.chunk_bytes);
      const Stopwatch t0;
      parallel(threads, segs.size(), [&](std::size_t i) {
        const std::size_t n = ZSTD_compressCCtx(cctx(), scratch(bound), bound, l.decoded[i].data(), l.chunk_bytes,
                                                *l.zstd_level);
        if (ZSTD_isError(n)) throw std::runtime_error("zstd: cannot encode a chunk");
      });
      return t0.elapsed();
    }
    if (op == "raw_regions" || op == "codec_regions") {
      const bool codec = op == "codec_regions";
      if (codec) require_codec(l);
      std::vector<std::vector<std::pair<std::size_t, std::vector<std::size_t>>>> plans;
      for (const Region& r : regions(cmd)) plans.push_back(touched(l, r));
      const Stopwatch t0;
      parallel(threads, plans.size(), [&](std::size_t i) {
        for (const auto& [file, inner] : plans[i]) {
          const StoredFile& f = l.files[file];
          if (!codec) {
            raw_read_parts(l, f, inner);
            continue;
          }
          for (std::size_t k : inner)
            decode(l, f.data.data() + f.segments[k].offset, f.segments[k].length, scratch(l.chunk_bytes));
        }
      });
      return t0.elapsed();
    }
    if (op == "memcpy") {
      std::vector<std::size_t> offsets;
      std::size_t total = 0;
      for (const auto& f : l.files) offsets.push_back(total), total += f.data.size();
      if (memcpy_target_.size() < total) {
        memcpy_target_.resize(total);
        std::memset(memcpy_target_.data(), 0, total);  // resident before timing
      }
      const Stopwatch t0;
      parallel(threads, l.files.size(), [&](std::size_t i) {
        std::memcpy(memcpy_target_.data() + offsets[i], l.files[i].data.data(), l.files[i].data.size());
      });
      return t0.elapsed();
    }
    throw std::runtime_error("unknown op " + op);
  }

  Timing read_all(const Array& a, const std::string& dump) {
    const Stopwatch t0;
    const FreshBuffer buf(product(a.shape()) * a.dtype().size());  // faulted in by the read
    a.read_blocking(Region::all(a.shape()), buf.span());
    const Timing s = t0.elapsed();
    if (!dump.empty()) write_file(dump, buf.span());
    return s;
  }

  Timing read_regions(const Array& a, const std::vector<Region>& rs, unsigned threads, const std::string& dump) {
    std::vector<NdArray> kept(dump.empty() ? 0 : rs.size());
    const Stopwatch t0;
    parallel(threads, rs.size(), [&](std::size_t i) {
      NdArray part = a.read_blocking(rs[i]);
      if (!kept.empty()) kept[i] = std::move(part);
    });
    const Timing s = t0.elapsed();
    if (!dump.empty()) {
      std::ofstream f(dump, std::ios::binary | std::ios::trunc);
      for (const auto& p : kept)
        f.write(reinterpret_cast<const char*>(p.data.data()), static_cast<std::streamsize>(p.data.size()));
      if (!f) throw std::runtime_error("cannot write " + dump);
    }
    return s;
  }

  static std::string dump_of(const json& cmd) { return cmd.value("dump", std::string()); }

  static std::vector<Region> regions(const json& cmd) {
    std::vector<Region> out;
    for (const auto& r : cmd.at("regions")) out.push_back(region_of(r));
    return out;
  }

  Array array(const std::string& dir) {
    auto it = arrays_.find(dir);
    if (it == arrays_.end()) {
      auto store = std::make_shared<FilesystemStore>(rt_.io_executor(), dir, fs_options_);
      it = arrays_.emplace(dir, Array::open_blocking(rt_, std::move(store), "")).first;
    }
    return it->second;
  }

  const Bytes& source(const std::string& path) {
    auto it = sources_.find(path);
    if (it == sources_.end()) it = sources_.emplace(path, read_file(path)).first;
    return it->second;
  }

  Layout& layout(const std::string& dir) {
    auto it = layouts_.find(dir);
    if (it == layouts_.end()) it = layouts_.emplace(dir, make_layout(rt_, dir)).first;
    return *it->second;
  }

  Runtime rt_;
  FilesystemOptions fs_options_;
  std::map<std::string, Array> arrays_, memory_;
  std::map<std::string, Bytes> sources_;
  std::map<std::string, std::unique_ptr<Layout>> layouts_;
  Bytes memcpy_target_;
};

}  // namespace

int main(int argc, char** argv) {
  RuntimeOptions options;
  FilesystemOptions fs_options;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--no-codec-sched-idle") == 0) {
      options.codec_sched_idle = false;
    } else if (std::strcmp(argv[i], "--no-io-uring") == 0) {
      fs_options.use_io_uring = false;
    } else {
      std::fprintf(stderr,
                   "usage: %s [--no-codec-sched-idle] [--no-io-uring] < commands (JSON lines; see the source's "
                   "header)\n",
                   argv[0]);
      return 2;
    }
  }
  Peers peers(options, fs_options);
  std::printf("{\"ready\": true, \"hardware_threads\": %u}\n", std::thread::hardware_concurrency());
  std::fflush(stdout);
  for (std::string line; std::getline(std::cin, line);) {
    if (line.empty()) continue;
    json answer;
    try {
      const json cmd = json::parse(line);
      if (cmd.at("op") == "quit") break;
      const Timing t = peers.run(cmd);
      answer = {{"seconds", t.wall}, {"cpu_seconds", t.cpu}};
    } catch (const NotApplicable& na) {
      answer = {{"na", na.reason}};
    } catch (const std::exception& e) {
      answer = {{"error", e.what()}};
    }
    std::printf("%s\n", answer.dump().c_str());
    std::fflush(stdout);
  }
  return 0;
}
