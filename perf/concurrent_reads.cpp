// concurrent_reads: the project's main benchmark.
//
// R readers each read ONE chunk per call, through the blocking API (R
// threads calling Array::read_blocking) and through the async API (R
// coroutines co_awaiting Array::read, spawned on a separate "client"
// io_context run by one thread: the benchmark's main thread, not a runtime
// thread). Every configuration runs once per dispatch mode of the engine
// (batched, per-chunk, inline on the I/O thread), each with its own Runtime.
//
// Every throughput is printed beside the codec-only limit measured in the same
// run: raw libzstd (ZSTD_decompressDCtx) or memcpy over the same encoded chunk
// bytes, on as many threads as the codec pool has, with no engine at all.
//
// Also measured: the amortized per-chunk cost of batched dispatch (many
// 64-byte chunks in one call, forced through the pool), and with --big one
// read of a whole 1 GiB zstd array into one buffer (time and peak RSS).
//
// Units: MB = 10^6 bytes (throughput), MiB = 2^20 bytes (memory).
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/use_future.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <nlohmann/json.hpp>
#include <zstd.h>

#include <zarrcoro/array.hpp>
#include <zarrcoro/error.hpp>
#include <zarrcoro/runtime.hpp>
#include <zarrcoro/store/filesystem.hpp>
#include <zarrcoro/store/open.hpp>
#include <zarrcoro/store/memory.hpp>

#include "perf_common.hpp"

namespace asio = boost::asio;
namespace fs = std::filesystem;
using namespace std::chrono_literals;
using nlohmann::json;
using namespace zarrcoro;
using namespace zarrcoro::perf;

namespace {

constexpr double kMB = 1e6;
constexpr double kMiB = 1024.0 * 1024.0;

// ---- options -------------------------------------------------------------------

struct Options {
  std::string array_path;
  std::string dispatch = "all";
  std::string dataset = "all";  // default arrays to generate and run
  std::vector<unsigned> readers{1, 2, 8};
  std::string api = "both";
  double seconds = 1.5;
  unsigned codec_threads = 0;  // 0 = hardware threads
  unsigned lag_probe_us = 1000;
  std::string json_path;
  bool big = false, big_only = false, skip_overhead = false, overhead_only = false;
  std::string cache_dir;
};

struct DispatchMode {
  const char* name;
  Dispatch value;
};
constexpr DispatchMode kDispatchModes[] = {
    {"batched", Dispatch::batched}, {"per-chunk", Dispatch::per_chunk}, {"inline", Dispatch::inline_io}};

// FilesystemStore options for the measured runs (--no-io-uring).
FilesystemOptions g_fs_options;
// --io-time-slice-us and --no-codec-sched-idle, for every Runtime the benchmark makes.
std::chrono::microseconds g_io_time_slice = RuntimeOptions{}.io_time_slice;
bool g_codec_sched_idle = RuntimeOptions{}.codec_sched_idle;
// --no-caller-reads: every read through the io_context (RuntimeOptions::caller_reads).
bool g_caller_reads = RuntimeOptions{}.caller_reads;

// The store holding the array: a directory (FilesystemStore with the measured
// options), or a URL such as s3://bucket/prefix or http://host/path.
std::shared_ptr<Store> open_root(Runtime& rt, const std::string& root) {
  if (is_url(root)) return open_store(root, rt.io_executor());
  return std::make_shared<FilesystemStore>(rt.io_executor(), root, g_fs_options);
}

// ---- temporary directory ---------------------------------------------------------

// A fresh directory under the system temp dir, removed (with its contents) on
// destruction.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "zarrcoro-perf-XXXXXX").string();
    if (!mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed for " + tmpl);
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

// ---- synthetic data ----------------------------------------------------------------

// uint16 samples with compressible structure: a slowly varying diagonal ramp
// plus 4 bits of hash noise (zstd level 3 gets roughly 2-3x on it).
inline std::uint16_t sample(std::uint64_t y, std::uint64_t x) {
  std::uint64_t h = y * 0x9E3779B97F4A7C15ull ^ x * 0xC2B2AE3D27D4EB4Full;
  h ^= h >> 31;
  h *= 0xBF58476D1CE4E5B9ull;
  h ^= h >> 29;
  return static_cast<std::uint16_t>(((x + 2 * y) >> 5) * 3 + (h & 0xF));
}

void fill_rows(std::uint16_t* dst, std::uint64_t y0, std::uint64_t rows, std::uint64_t width) {
  for (std::uint64_t y = 0; y < rows; ++y)
    for (std::uint64_t x = 0; x < width; ++x) dst[y * width + x] = sample(y0 + y, x);
}

json codecs_json(bool zstd) {
  json c = json::array({{{"name", "bytes"}, {"configuration", {{"endian", "little"}}}}});
  if (zstd) c.push_back({{"name", "zstd"}, {"configuration", {{"level", 3}, {"checksum", false}}}});
  return c;
}

// Creates a 2-d uint16 array at `root` and fills it, `slab_rows` rows per
// write_blocking call (a multiple of the chunk height, so whole chunks only;
// slabs bound the generator's memory for the 1 GiB array of --big).
void generate_array(const fs::path& root, std::uint64_t height, std::uint64_t width,
                    std::uint64_t chunk_h, std::uint64_t chunk_w, bool zstd, std::uint64_t slab_rows) {
  Runtime rt;
  auto store = std::make_shared<FilesystemStore>(rt.io_executor(), root);
  ArrayMetadata m;
  m.shape = {height, width};
  m.data_type = DataTypeKind::uint16;
  m.chunk_shape = {chunk_h, chunk_w};
  m.codecs = codecs_json(zstd);
  const Array arr = Array::create_blocking(rt, store, "", m);
  std::vector<std::uint16_t> slab(slab_rows * width);
  for (std::uint64_t y0 = 0; y0 < height; y0 += slab_rows) {
    const std::uint64_t rows = std::min(slab_rows, height - y0);
    fill_rows(slab.data(), y0, rows, width);
    const Region region{{y0, 0}, {y0 + rows, width}};
    arr.write_blocking(region, ByteSpan(reinterpret_cast<const std::byte*>(slab.data()),
                                        rows * width * sizeof(std::uint16_t)));
  }
}

// ---- datasets ------------------------------------------------------------------------

// zstd: raw libzstd; store: open+pread+close of the chunk files (what a
// [bytes] chunk costs without the engine); memcpy: [bytes] chunks not in
// local files.
enum class LimitKind { zstd, store, memcpy, none };

const char* to_string(LimitKind k) {
  switch (k) {
    case LimitKind::zstd: return "zstd";
    case LimitKind::store: return "open+pread+close";
    case LimitKind::memcpy: return "memcpy";
    case LimitKind::none: return "n/a";
  }
  return "?";
}

struct ChunkRef {
  Region region;
  std::size_t bytes;  // decoded bytes of the region
};

struct Dataset {
  std::string name;
  fs::path root;
  std::string dtype, codec, shape_text, chunk_text;
  std::size_t chunk_bytes = 0;  // one full decoded chunk
  std::vector<ChunkRef> chunks;
  std::size_t max_region_bytes = 0;
  LimitKind limit = LimitKind::none;
  std::vector<Bytes> encoded;  // stored chunks (a sample for huge arrays), for the codec-only limit
  std::uint64_t encoded_total = 0, decoded_total = 0;
  std::vector<fs::path> files;  // the stored chunk files, for the store-only floor
  double codec_only_mb_s = 0;   // measured once for the header (full --seconds)
  double store_only_mb_s = 0;
};

std::string dims_text(const std::vector<std::uint64_t>& v) {
  std::string s = "[";
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

std::string bytes_text(double b) {
  char buf[32];
  if (b >= kMiB) std::snprintf(buf, sizeof buf, "%.4g MiB", b / kMiB);
  else if (b >= 1024) std::snprintf(buf, sizeof buf, "%.4g KiB", b / 1024);
  else std::snprintf(buf, sizeof buf, "%.0f B", b);
  return buf;
}

std::optional<Bytes> read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  if (!f) return std::nullopt;
  f.seekg(0, std::ios::end);
  const auto n = static_cast<std::size_t>(f.tellg());
  f.seekg(0);
  Bytes b(n);
  f.read(reinterpret_cast<char*>(b.data()), static_cast<std::streamsize>(n));
  if (!f) return std::nullopt;
  return b;
}

// Opens the array at `root`, lists its chunks and loads (a sample of) the
// stored chunk bytes for the codec-only limit.
Dataset load_dataset(std::string name, const fs::path& root, std::uint64_t max_sample = 1024) {
  RuntimeOptions o;
  o.io_time_slice = g_io_time_slice;
  o.codec_sched_idle = g_codec_sched_idle;
  o.codec_threads = 1;
  o.lag_probe_interval = 0us;
  Runtime rt(o);
  auto store = open_root(rt, root.string());
  const Array arr = Array::open_blocking(rt, store, "");
  const ArrayMetadata& m = arr.metadata();

  Dataset ds;
  ds.name = std::move(name);
  ds.root = root;
  ds.dtype = std::string(m.data_type.name());
  ds.codec = arr.describe_codecs();
  ds.shape_text = dims_text(m.shape);
  ds.chunk_text = dims_text(m.chunk_shape);
  const std::size_t es = m.data_type.size();
  ds.chunk_bytes = es;
  for (auto c : m.chunk_shape) ds.chunk_bytes *= c;

  std::vector<std::string> names;
  for (const auto& c : m.codecs) names.push_back(c.value("name", ""));
  if (names == std::vector<std::string>{"bytes"}) ds.limit = LimitKind::memcpy;
  else if (names == std::vector<std::string>{"bytes", "zstd"}) ds.limit = LimitKind::zstd;

  // Every chunk of the grid, in C order.
  const auto grid = m.grid_shape();
  std::uint64_t count = 1;
  for (auto g : grid) count *= g;
  if (count == 0 || m.shape.empty()) throw std::runtime_error("the array has no chunks to read");
  std::vector<std::uint64_t> coords(grid.size(), 0);
  std::vector<std::vector<std::uint64_t>> all_coords;
  for (std::uint64_t n = 0; n < count; ++n) {
    Region r;
    std::size_t bytes = es;
    for (std::size_t d = 0; d < grid.size(); ++d) {
      r.start.push_back(coords[d] * m.chunk_shape[d]);
      r.stop.push_back(std::min(m.shape[d], r.start[d] + m.chunk_shape[d]));
      bytes *= r.stop[d] - r.start[d];
    }
    ds.chunks.push_back({std::move(r), bytes});
    ds.max_region_bytes = std::max(ds.max_region_bytes, bytes);
    all_coords.push_back(coords);
    for (std::size_t d = grid.size(); d-- > 0;) {
      if (++coords[d] < grid[d]) break;
      coords[d] = 0;
    }
  }

  // Stored bytes: at most `max_sample` chunks / 512 MiB, sampled evenly over the grid.
  if (ds.limit != LimitKind::none) {
    const std::uint64_t step = std::max<std::uint64_t>(1, count / max_sample);
    for (std::uint64_t n = 0; n < count && ds.encoded_total < (std::uint64_t{512} << 20); n += step) {
      const fs::path file = root / arr.chunk_key(all_coords[n]);
      auto b = is_url(root.string())
                   ? asio::co_spawn(rt.io_executor(), store->get(arr.chunk_key(all_coords[n])), asio::use_future).get()
                   : read_file(file);
      if (b) {
        if (!is_url(root.string())) ds.files.push_back(file);
        ds.encoded_total += b->size();
        ds.decoded_total += ds.chunk_bytes;
        ds.encoded.push_back(std::move(*b));
      }
    }
    if (ds.encoded.empty()) ds.limit = LimitKind::none;  // nothing stored: all fill value
    if (ds.limit == LimitKind::memcpy && !ds.files.empty()) ds.limit = LimitKind::store;
  }
  return ds;
}

// ---- the codec-only limit -----------------------------------------------------------------

double store_only_floor(const Dataset& ds, unsigned threads, double seconds);

// Decodes the stored chunks round-robin on `threads` threads for `seconds`,
// with libzstd directly (or memcpy for uncompressed chunks): no engine, no
// store, no scheduling. Returns decoded MB/s. With `outs`, thread t decodes
// into outs[t], outs[t + threads], ... in turn (its own buffer where there is
// none), as the readers decode into theirs: one buffer per thread that stays
// in the cache would make the limit 7-8% faster than any reader can be.

double codec_only_limit(const Dataset& ds, unsigned threads, double seconds, std::vector<Bytes>* outs = nullptr) {
  if (ds.limit == LimitKind::none) return 0;
  if (ds.limit == LimitKind::store) return store_only_floor(ds, threads, seconds);
  std::atomic<std::uint64_t> total{0};
  std::atomic<bool> failed{false};
  const auto t0 = Clock::now();
  const auto deadline = t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  // Look at the clock about every 256 KiB of output.
  const std::size_t check_every = std::max<std::size_t>(1, (std::size_t{256} << 10) / ds.chunk_bytes);
  {
    std::vector<std::jthread> pool;
    for (unsigned t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        std::unique_ptr<ZSTD_DCtx, decltype(&ZSTD_freeDCtx)> dctx(ZSTD_createDCtx(), ZSTD_freeDCtx);
        Bytes own;
        std::vector<Bytes*> targets;
        for (std::size_t j = t; outs && j < outs->size(); j += threads)
          if ((*outs)[j].size() >= ds.chunk_bytes) targets.push_back(&(*outs)[j]);
        if (targets.empty()) {
          own = Bytes(ds.chunk_bytes);
          std::memset(own.data(), 0, own.size());
          targets.push_back(&own);
        }
        std::uint64_t done = 0;
        std::size_t i = t % ds.encoded.size();
        for (std::size_t k = 0;; ++k) {
          if (k % check_every == 0 && Clock::now() >= deadline) break;
          const Bytes& in = ds.encoded[i];
          Bytes& out = *targets[k % targets.size()];
          if (ds.limit == LimitKind::zstd) {
            const std::size_t n = ZSTD_decompressDCtx(dctx.get(), out.data(), out.size(), in.data(), in.size());
            if (ZSTD_isError(n) || n != out.size()) {
              failed = true;
              break;
            }
          } else {
            std::memcpy(out.data(), in.data(), std::min(in.size(), out.size()));
          }
          done += ds.chunk_bytes;
          if (++i == ds.encoded.size()) i = 0;
        }
        total += done;
      });
    }
  }
  if (failed) std::fprintf(stderr, "warning: %s: libzstd could not decode a stored chunk\n", ds.name.c_str());
  return static_cast<double>(total) / seconds_since(t0) / kMB;
}

// The file system alone: open + pread + close of the same chunk files,
// round-robin on `threads` threads for `seconds`. Returns decoded-equivalent
// MB/s (stored bytes scaled by the chunk's decoded size), so it compares
// directly with the engine's throughput: the limit of [bytes] chunks.
double store_only_floor(const Dataset& ds, unsigned threads, double seconds) {
  if (ds.files.empty()) return 0;
  std::atomic<std::uint64_t> total{0};
  const auto t0 = Clock::now();
  const auto deadline = t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  {
    std::vector<std::jthread> pool;
    for (unsigned t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        std::size_t cap = 0;
        for (const auto& b : ds.encoded) cap = std::max(cap, b.size());
        Bytes buf(cap);
        std::uint64_t done = 0;
        for (std::size_t i = t % ds.files.size(); Clock::now() < deadline; i = (i + 1) % ds.files.size()) {
          const int fd = ::open(ds.files[i].c_str(), O_RDONLY | O_CLOEXEC);
          if (fd < 0) break;
          const auto n = ::pread(fd, buf.data(), ds.encoded[i].size(), 0);
          ::close(fd);
          if (n != static_cast<ssize_t>(ds.encoded[i].size())) break;
          done += ds.chunk_bytes;
        }
        total += done;
      });
    }
  }
  return static_cast<double>(total) / seconds_since(t0) / kMB;
}

// ---- the reader workloads -------------------------------------------------------------------

struct Sample {
  std::uint64_t chunks = 0, bytes = 0;
  double seconds = 0;
  std::string error;
};

Clock::time_point deadline_after(double seconds) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

// One output buffer per reader, touched once, so that no slice of a
// configuration pays page faults for them.
std::vector<Bytes> reader_buffers(const Dataset& ds, unsigned readers) {
  std::vector<Bytes> bufs;
  for (unsigned r = 0; r < readers; ++r) {
    bufs.emplace_back(ds.max_region_bytes);
    std::memset(bufs.back().data(), 0, bufs.back().size());
  }
  return bufs;
}

// R threads (reader r writes into bufs[r], seeded by `seed` + r), each: pick
// a chunk, Array::read_blocking it, repeat.
Sample run_blocking(const Array& arr, const Dataset& ds, std::vector<Bytes>& bufs, std::uint64_t seed,
                    double seconds) {
  std::atomic<std::uint64_t> chunks{0}, bytes{0};
  std::mutex mu;
  std::string error;
  const auto t0 = Clock::now();
  const auto deadline = deadline_after(seconds);
  {
    std::vector<std::jthread> threads;
    for (unsigned r = 0; r < bufs.size(); ++r) {
      threads.emplace_back([&, r] {
        Rng rng(seed + r + 1);
        Bytes& buf = bufs[r];
        std::uint64_t n = 0, b = 0;
        try {
          while (Clock::now() < deadline) {
            const ChunkRef& c = ds.chunks[rng.next() % ds.chunks.size()];
            arr.read_blocking(c.region, MutableByteSpan(buf.data(), c.bytes));
            ++n;
            b += c.bytes;
          }
        } catch (const std::exception& e) {
          std::lock_guard lk(mu);
          if (error.empty()) error = e.what();
        }
        chunks += n;
        bytes += b;
      });
    }
  }
  return {chunks, bytes, seconds_since(t0), error};
}

struct AsyncShared {
  const Dataset* ds;
  Array arr;
  std::vector<Bytes>* bufs;
  Clock::time_point deadline;
  std::uint64_t chunks = 0, bytes = 0;  // only touched on the client thread
  std::string error;
};

// One coroutine on the client io_context: pick a chunk, co_await Array::read, repeat.
asio::awaitable<void> async_reader(std::shared_ptr<AsyncShared> sh, unsigned id, std::uint64_t seed) {
  Rng rng(seed + id + 1);
  Bytes& buf = (*sh->bufs)[id];
  try {
    while (Clock::now() < sh->deadline) {
      const ChunkRef& c = sh->ds->chunks[rng.next() % sh->ds->chunks.size()];
      co_await sh->arr.read(c.region, MutableByteSpan(buf.data(), c.bytes));
      ++sh->chunks;
      sh->bytes += c.bytes;
    }
  } catch (const std::exception& e) {
    if (sh->error.empty()) sh->error = e.what();
  }
}

// R coroutines spawned on a separate io_context run by this (the main) thread.
Sample run_async(const Array& arr, const Dataset& ds, std::vector<Bytes>& bufs, std::uint64_t seed,
                 double seconds) {
  asio::io_context client(1);
  auto sh = std::make_shared<AsyncShared>();
  sh->ds = &ds;
  sh->arr = arr;
  sh->bufs = &bufs;
  const auto t0 = Clock::now();
  sh->deadline = deadline_after(seconds);
  for (unsigned r = 0; r < bufs.size(); ++r)
    asio::co_spawn(client, async_reader(sh, r, seed), [sh](std::exception_ptr e) {
      if (e && sh->error.empty()) sh->error = "unexpected exception in a reader";
    });
  client.run();  // returns when every reader has finished
  return {sh->chunks, sh->bytes, seconds_since(t0), sh->error};
}

// ---- one configuration ------------------------------------------------------------------------

struct Result {
  std::string dataset, dispatch, api, codec;
  LimitKind limit = LimitKind::none;
  unsigned readers = 0, codec_threads = 0;
  std::size_t chunk_bytes = 0;
  std::uint64_t chunks_read = 0;
  double seconds = 0, mb_s = 0, codec_only_mb_s = 0, ratio = 0, store_only_mb_s = 0;
  unsigned rounds = 0, rounds_kept = 0;  // rounds measured; those without a stop of the VM
  bool all_rounds = false;               // fewer than half were kept: all count
  double stolen_s = 0;                   // CPU time the hypervisor took during the rounds
  LoopLag lag;
  RuntimeStats stats;
  double peak_rss_mib = 0;
  std::string error;
};

json to_json(const Result& r, const char* benchmark) {
  return {{"benchmark", benchmark},
          {"dataset", r.dataset},
          {"readers", r.readers},
          {"api", r.api},
          {"dispatch", r.dispatch},
          {"chunk_bytes", r.chunk_bytes},
          {"codec", r.codec},
          {"codec_threads", r.codec_threads},
          {"chunks_read", r.chunks_read},
          {"seconds", r.seconds},
          {"throughput_mb_s", r.mb_s},
          {"codec_only_kind", to_string(r.limit)},
          {"codec_only_mb_s", r.codec_only_mb_s},
          {"store_only_mb_s", r.store_only_mb_s},
          {"ratio", r.ratio},
          {"rounds", r.rounds},
          {"rounds_kept", r.rounds_kept},
          {"all_rounds_count", r.all_rounds},
          {"stolen_s", r.stolen_s},
          {"loop_lag_p50_us", r.lag.p50_us},
          {"loop_lag_p99_us", r.lag.p99_us},
          {"loop_own_lag_p99_us", r.lag.own_p99_us},
          {"loop_lag_max_us", r.lag.max_us},
          {"loop_lag_samples", r.lag.samples},
          {"pool_submissions", r.stats.pool_submissions},
          {"fanout_posts", r.stats.fanout_posts},
          {"inline_batches", r.stats.inline_batches},
          {"codec_calls_on_io_thread", r.stats.codec_calls_on_io_thread},
          {"peak_rss_mb", r.peak_rss_mib},
          {"error", r.error}};
}

// One configuration, measured in rounds so that a change of the machine's
// speed during it (this VM's moves by up to 1.5x within seconds) moves both
// sides of the ratio alike: each round runs the codec-only limit for half a
// slice, then the engine for a slice of about 0.3 s. Throughput and limit
// are totals over the rounds in which the VM was not stopped (the
// hypervisor took at most 20 ms of CPU: a stop takes about 100 ms of each
// vCPU, and falls on one side of the ratio only), or over all of them when
// fewer than half are left; the loop lag is sampled in every engine slice.
Result run_config(Runtime& rt, const Array& arr, const Dataset& ds, const char* dispatch,
                  const std::string& api, unsigned readers, double seconds) {
  constexpr double kStolenAtMost = 0.02;
  const unsigned rounds = std::max(1u, static_cast<unsigned>(std::lround(seconds / 0.3)));
  const double slice = seconds / rounds;
  std::vector<Bytes> bufs = reader_buffers(ds, readers);
  rt.reset_stats();
  rt.reset_loop_lag();
  reset_peak_rss();
  struct Round {
    double limit_mb = 0, limit_seconds = 0;
    Sample engine;
    double stolen = 0;
  };
  std::vector<Round> measured;
  std::string error;
  for (unsigned k = 0; k < rounds && error.empty(); ++k) {
    Round round;
    const double stolen_before = stolen_seconds();
    if (ds.limit != LimitKind::none) {
      rt.pause_loop_lag(true);
      round.limit_mb = codec_only_limit(ds, rt.codec_threads(), slice / 2, &bufs) * (slice / 2);
      round.limit_seconds = slice / 2;
      rt.pause_loop_lag(false);
    }
    const std::uint64_t seed = std::uint64_t{k} << 32;
    round.engine = api == "blocking" ? run_blocking(arr, ds, bufs, seed, slice) : run_async(arr, ds, bufs, seed, slice);
    round.stolen = stolen_seconds() - stolen_before;
    error = round.engine.error;
    measured.push_back(std::move(round));
  }
  const auto kept = std::count_if(measured.begin(), measured.end(),
                                  [&](const Round& r) { return r.stolen <= kStolenAtMost; });
  const bool keep_all = 2 * kept < static_cast<std::ptrdiff_t>(measured.size());
  Sample total;
  total.error = error;
  double limit_mb = 0, limit_seconds = 0, stolen = 0;
  for (const Round& round : measured) {
    stolen += round.stolen;
    if (!keep_all && round.stolen > kStolenAtMost) continue;
    limit_mb += round.limit_mb;
    limit_seconds += round.limit_seconds;
    total.chunks += round.engine.chunks;
    total.bytes += round.engine.bytes;
    total.seconds += round.engine.seconds;
  }
  Result r;
  r.dataset = ds.name;
  r.dispatch = dispatch;
  r.api = api;
  r.codec = ds.codec;
  r.limit = ds.limit;
  r.readers = readers;
  r.codec_threads = rt.codec_threads();
  r.chunk_bytes = ds.chunk_bytes;
  r.chunks_read = total.chunks;
  r.seconds = total.seconds;
  r.rounds = static_cast<unsigned>(measured.size());
  r.rounds_kept = static_cast<unsigned>(kept);
  r.all_rounds = keep_all;
  r.stolen_s = stolen;
  r.mb_s = static_cast<double>(total.bytes) / total.seconds / kMB;
  r.codec_only_mb_s = limit_seconds > 0 ? limit_mb / limit_seconds : 0;
  r.ratio = r.codec_only_mb_s > 0 ? r.mb_s / r.codec_only_mb_s : 0;
  r.store_only_mb_s = ds.store_only_mb_s;
  r.lag = rt.loop_lag();
  r.stats = rt.stats();
  r.peak_rss_mib = peak_rss_mib();
  r.error = total.error;
  return r;
}

// ---- the table -------------------------------------------------------------------------------

void print_table(std::vector<Result> rows) {
  auto dispatch_rank = [](const std::string& d) {
    for (std::size_t i = 0; i < std::size(kDispatchModes); ++i)
      if (d == kDispatchModes[i].name) return i;
    return std::size(kDispatchModes);
  };
  // Dispatch modes side by side: sort by dataset, api, readers, then dispatch.
  std::stable_sort(rows.begin(), rows.end(), [&](const Result& a, const Result& b) {
    return std::tie(a.dataset, a.api, a.readers) < std::tie(b.dataset, b.api, b.readers) ||
           (std::tie(a.dataset, a.api, a.readers) == std::tie(b.dataset, b.api, b.readers) &&
            dispatch_rank(a.dispatch) < dispatch_rank(b.dispatch));
  });
  std::printf("\n%-10s %-9s %-10s %3s %8s %9s %9s %6s %6s %9s %9s %8s %7s %8s\n", "dataset", "api",
              "dispatch", "R", "chunks", "MB/s", "limit", "ratio", "rounds", "lag p50", "lag p99", "pool",
              "chunks/", "peak RSS");
  std::printf("%-10s %-9s %-10s %3s %8s %9s %9s %6s %6s %9s %9s %8s %7s %8s\n", "", "", "", "", "read",
              "", "MB/s", "", "kept", "us", "us", "submits", "submit", "MiB");
  std::string last;
  for (const auto& r : rows) {
    const std::string group = r.dataset + r.api + std::to_string(r.readers);
    if (!last.empty() && group != last && r.dispatch == kDispatchModes[0].name) std::printf("\n");
    last = group;
    char per_sub[16] = "-";
    if (r.stats.pool_submissions)
      std::snprintf(per_sub, sizeof per_sub, "%.1f",
                    static_cast<double>(r.chunks_read) / static_cast<double>(r.stats.pool_submissions));
    char limit[16] = "n/a", ratio[16] = "n/a";
    if (r.codec_only_mb_s > 0) {
      std::snprintf(limit, sizeof limit, "%.0f", r.codec_only_mb_s);
      std::snprintf(ratio, sizeof ratio, "%.2fx", r.ratio);
    }
    char kept[16];
    std::snprintf(kept, sizeof kept, "%u/%u%s", r.rounds_kept, r.rounds, r.all_rounds ? "*" : "");
    std::printf("%-10s %-9s %-10s %3u %8llu %9.1f %9s %6s %6s %9.0f %9.0f %8llu %7s %8.0f%s%s\n",
                r.dataset.c_str(), r.api.c_str(), r.dispatch.c_str(), r.readers,
                static_cast<unsigned long long>(r.chunks_read), r.mb_s, limit, ratio, kept, r.lag.p50_us,
                r.lag.p99_us, static_cast<unsigned long long>(r.stats.pool_submissions), per_sub,
                r.peak_rss_mib, r.error.empty() ? "" : "  ERROR: ", r.error.c_str());
  }
}

// ---- batched per-chunk dispatch overhead --------------------------------------------------------

struct Overhead {
  std::string mode;
  double ns_per_chunk = 0;
  std::uint64_t submissions = 0, inline_batches = 0;
};

// A MemoryStore that hands every value back (reads_into() false), as the
// HTTP and S3 stores do: each chunk then goes through the codec pipeline, so
// that inline_bytes = 0 sends it to the pool.
struct ValueMemoryStore final : MemoryStore {
  bool reads_into() const override { return false; }
};

// Many 64-byte chunks ([bytes little], int32[16]) in a MemoryStore, read whole
// in one call. Returns the memcpy baseline (ns per chunk) and, per mode, the
// engine's amortized ns per chunk (min of `reps` calls). Every mode but the
// last reads from a ValueMemoryStore; the last reads from a MemoryStore,
// which copies each chunk straight into the output (no codec work, no hop).
std::pair<double, std::vector<Overhead>> measure_overhead(unsigned codec_threads, std::vector<Result>& records) {
  constexpr std::uint64_t kChunks = 65536, kElems = 16, kChunkBytes = kElems * sizeof(std::int32_t);
  constexpr int kReps = 5;
  auto store = std::make_shared<MemoryStore>();
  auto value_store = std::make_shared<ValueMemoryStore>();
  std::vector<std::int32_t> data(kChunks * kElems);
  std::iota(data.begin(), data.end(), 1);
  const std::size_t total = data.size() * sizeof(std::int32_t);
  {
    Runtime rt;
    ArrayMetadata m;
    m.shape = {kChunks * kElems};
    m.data_type = DataTypeKind::int32;
    m.chunk_shape = {kElems};
    m.codecs = codecs_json(false);
    for (const std::shared_ptr<MemoryStore>& s : {store, std::shared_ptr<MemoryStore>(value_store)})
      Array::create_blocking(rt, s, "", m)
          .write_blocking(Region::all(m.shape), ByteSpan(reinterpret_cast<const std::byte*>(data.data()), total));
  }
  Bytes out(total);
  std::memset(out.data(), 0, out.size());

  // Baseline: one memcpy per chunk from separately allocated buffers (what a
  // store hands back) into the output.
  double memcpy_ns = 1e300;
  {
    std::vector<Bytes> chunks;
    for (std::uint64_t c = 0; c < kChunks; ++c)
      chunks.push_back(to_bytes(ByteSpan(reinterpret_cast<const std::byte*>(data.data() + c * kElems), kChunkBytes)));
    for (int rep = 0; rep < kReps; ++rep) {
      const auto t0 = Clock::now();
      for (std::uint64_t c = 0; c < kChunks; ++c) std::memcpy(out.data() + c * kChunkBytes, chunks[c].data(), kChunkBytes);
      asm volatile("" ::: "memory");
      memcpy_ns = std::min(memcpy_ns, seconds_since(t0) * 1e9 / kChunks);
    }
  }

  struct Mode {
    const char* name;
    Dispatch dispatch;
    std::size_t inline_bytes;
    bool in_place = false;  // read from `store`, not `value_store`
  };
  const std::size_t default_inline = RuntimeOptions{}.inline_bytes;
  const Mode modes[] = {{"batched", Dispatch::batched, 0},
                        {"per-chunk", Dispatch::per_chunk, 0},
                        {"inline", Dispatch::inline_io, 0},
                        {"batched, default inline_bytes", Dispatch::batched, default_inline},
                        {"in place, default options", Dispatch::batched, default_inline, true}};
  std::vector<Overhead> results;
  for (const Mode& mode : modes) {
    RuntimeOptions o;
    o.io_time_slice = g_io_time_slice;
    o.codec_sched_idle = g_codec_sched_idle;
    o.codec_threads = codec_threads;
    o.dispatch = mode.dispatch;
    o.inline_bytes = mode.inline_bytes;
    Runtime rt(o);
    const Array arr = Array::open_blocking(rt, mode.in_place ? store : value_store, "");
    const Region all = Region::all(arr.shape());
    arr.read_blocking(all, out);  // warm-up
    rt.reset_stats();
    rt.reset_loop_lag();
    reset_peak_rss();
    double best = 1e300;
    for (int rep = 0; rep < kReps; ++rep) {
      std::memset(out.data(), 0, out.size());
      const auto t0 = Clock::now();
      arr.read_blocking(all, out);
      best = std::min(best, seconds_since(t0));
      if (std::memcmp(out.data(), data.data(), total) != 0)
        throw std::runtime_error(std::string("overhead test (") + mode.name + "): data read back differs");
    }
    const RuntimeStats s = rt.stats();
    Overhead ov{mode.name, best * 1e9 / kChunks, s.pool_submissions / kReps, s.inline_batches / kReps};
    results.push_back(ov);

    Result r;
    r.dataset = "tiny_64B";
    r.dispatch = mode.name;
    r.api = "blocking";
    r.codec = arr.describe_codecs();
    r.limit = LimitKind::memcpy;
    r.readers = 1;
    r.codec_threads = rt.codec_threads();
    r.chunk_bytes = kChunkBytes;
    r.chunks_read = kChunks;
    r.seconds = best;
    r.mb_s = static_cast<double>(total) / best / kMB;
    r.codec_only_mb_s = static_cast<double>(total) / (memcpy_ns * kChunks * 1e-9) / kMB;
    r.ratio = r.mb_s / r.codec_only_mb_s;
    r.lag = rt.loop_lag();
    r.stats = s;
    r.stats.pool_submissions = ov.submissions;
    r.stats.inline_batches = ov.inline_batches;
    r.peak_rss_mib = peak_rss_mib();
    records.push_back(r);
  }
  return {memcpy_ns, results};
}

// ---- --big: a 1 GiB array read whole into one buffer ------------------------------------------------

json run_big(const fs::path& cache_dir, unsigned codec_threads) {
  constexpr std::uint64_t kH = 16384, kW = 32768, kCH = 1024, kCW = 2048;  // uint16: 1 GiB, 4 MiB chunks
  const std::uint64_t out_bytes = kH * kW * sizeof(std::uint16_t);
  const fs::path dir = cache_dir / "big_1GiB_uint16_zstd3";
  const fs::path marker = cache_dir / "big_1GiB_uint16_zstd3.complete";
  if (!fs::exists(marker)) {
    std::printf("--big: generating a 1 GiB zstd array in %s (cached for later runs) ...\n", dir.c_str());
    std::fflush(stdout);
    std::error_code ec;
    fs::remove_all(dir, ec);
    fs::create_directories(dir);
    const auto t0 = Clock::now();
    generate_array(dir, kH, kW, kCH, kCW, true, kCH);
    std::ofstream(marker) << "complete\n";
    std::printf("--big: generated in %.1f s\n", seconds_since(t0));
  } else {
    std::printf("--big: using the cached array %s (delete it and %s to regenerate)\n", dir.c_str(),
                marker.filename().c_str());
  }

  RuntimeOptions o;
  o.io_time_slice = g_io_time_slice;
  o.codec_sched_idle = g_codec_sched_idle;
  o.codec_threads = codec_threads;
  Runtime rt(o);
  auto store = std::make_shared<FilesystemStore>(rt.io_executor(), dir, g_fs_options);
  const Array arr = Array::open_blocking(rt, store, "");
  if (arr.shape() != std::vector<std::uint64_t>{kH, kW} || arr.dtype() != DataType(DataTypeKind::uint16))
    throw std::runtime_error("the cached --big array has an unexpected shape or type; delete " + dir.string());
  std::uint64_t stored = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) stored += e.file_size();

  // Not touched before the read: its pages become resident as chunks land
  // (what a caller with a fresh buffer sees: page faults and zeroing included).
  std::unique_ptr<std::byte[]> out(new std::byte[out_bytes]);
  reset_peak_rss();
  const double rss_before = peak_rss_mib();
  rt.reset_stats();
  rt.reset_loop_lag();
  const auto t0 = Clock::now();
  arr.read_blocking(Region::all(arr.shape()), MutableByteSpan(out.get(), out_bytes));
  const double secs = seconds_since(t0);
  const double peak = peak_rss_mib();
  const LoopLag lag = rt.loop_lag();
  const RuntimeStats st = rt.stats();
  // The same read again into the now resident buffer: no page faults.
  const auto t1 = Clock::now();
  arr.read_blocking(Region::all(arr.shape()), MutableByteSpan(out.get(), out_bytes));
  const double warm_secs = seconds_since(t1);
  // The codec-only limit on 16 of its chunks (after the reads, so that the
  // sample does not count in the peak RSS above).
  const Dataset big_sample = load_dataset("big_1GiB", dir, 16);
  const double limit = codec_only_limit(big_sample, rt.codec_threads(), 1.0);

  // Spot-check the data against the generator.
  const auto* v = reinterpret_cast<const std::uint16_t*>(out.get());
  std::uint64_t bad = 0;
  for (std::uint64_t i = 0; i < kH * kW; i += 4099)
    if (v[i] != sample(i / kW, i % kW)) ++bad;

  const double out_mib = static_cast<double>(out_bytes) / kMiB;
  const bool pass = peak < out_mib + 300;
  std::printf("\n--big: one read_blocking of the whole 1 GiB array (%s, stored %.0f MiB, %llu chunks of 4 MiB)\n",
              arr.describe_codecs().c_str(), static_cast<double>(stored) / kMiB,
              static_cast<unsigned long long>((kH / kCH) * (kW / kCW)));
  const double mb_s = static_cast<double>(out_bytes) / secs / kMB;
  const double warm_mb_s = static_cast<double>(out_bytes) / warm_secs / kMB;
  std::printf("  time %.3f s, %.0f MB/s (%.2fx codec-only %.0f MB/s), pool submissions %llu, loop lag p99 %.0f us\n",
              secs, mb_s, mb_s / limit, limit, static_cast<unsigned long long>(st.pool_submissions), lag.p99_us);
  std::printf("  again into the same, now resident buffer: %.3f s, %.0f MB/s (%.2fx): the difference is the\n"
              "  cost of faulting in and zeroing 1 GiB of fresh pages\n",
              warm_secs, warm_mb_s, warm_mb_s / limit);
  std::printf("  peak RSS %.0f MiB (%.0f MiB before the read); target: < output %.0f MiB + 300 MiB  %s\n", peak,
              rss_before, out_mib, verdict(pass));
  std::printf("  data spot check: %s\n", bad ? "MISMATCH" : "ok");
  return {{"benchmark", "big_read"},
          {"dataset", "big_1GiB"},
          {"readers", 1},
          {"api", "blocking"},
          {"dispatch", "batched"},
          {"chunk_bytes", kCH * kCW * sizeof(std::uint16_t)},
          {"codec", arr.describe_codecs()},
          {"codec_threads", rt.codec_threads()},
          {"chunks_read", (kH / kCH) * (kW / kCW)},
          {"seconds", secs},
          {"throughput_mb_s", mb_s},
          {"codec_only_mb_s", limit},
          {"ratio", mb_s / limit},
          {"warm_buffer_seconds", warm_secs},
          {"warm_buffer_throughput_mb_s", warm_mb_s},
          {"loop_lag_p50_us", lag.p50_us},
          {"loop_lag_p99_us", lag.p99_us},
          {"pool_submissions", st.pool_submissions},
          {"peak_rss_mb", peak},
          {"output_mb", out_mib},
          {"rss_target_pass", pass},
          {"data_ok", bad == 0}};
}

// ---- main ------------------------------------------------------------------------------------------

int run(const Options& opt) {
  const unsigned threads = opt.codec_threads ? opt.codec_threads : std::max(1u, std::thread::hardware_concurrency());
  std::vector<DispatchMode> dispatches;
  for (const auto& d : kDispatchModes)
    if (opt.dispatch == "all" || opt.dispatch == d.name) dispatches.push_back(d);
  std::vector<std::string> apis;
  if (opt.api != "async") apis.push_back("blocking");
  if (opt.api != "blocking") apis.push_back("async");
  std::vector<unsigned> readers = opt.readers;
  std::sort(readers.begin(), readers.end());
  readers.erase(std::unique(readers.begin(), readers.end()), readers.end());

  json records = json::array();
  const fs::path cache_dir =
      opt.cache_dir.empty() ? fs::temp_directory_path() / "zarrcoro-perf-cache" : fs::path(opt.cache_dir);

  std::printf("concurrent_reads: %u codec threads (pool, %s nice %d), 1 I/O thread, %u hardware threads\n",
              threads, g_codec_sched_idle ? "SCHED_IDLE," : "normal policy,", RuntimeOptions{}.codec_nice,
              std::thread::hardware_concurrency());
  std::printf("  blocking API: R threads calling Array::read_blocking, one chunk per call\n");
  std::printf("  async API:    R coroutines co_awaiting Array::read, one chunk per call, on a separate\n"
              "                client io_context run by one thread (not the runtime's io_context)\n");
  std::printf("  limit: codec-only throughput (libzstd on the same stored chunks into the readers' buffers,\n"
              "         %u threads, no engine); for [bytes] chunks the store alone (open+pread+close of the\n"
              "         chunk files, %u threads); each configuration alternates ~0.3 s of reads with ~0.15 s\n"
              "         of the limit; rounds kept: those in which the VM's host took at most 20 ms of CPU\n"
              "         (steal in /proc/stat), the ratio's rounds; *: fewer than half were left, all count\n",
              threads, threads);
  std::printf("  MB = 10^6 bytes; loop lag = lateness of a %u us timer on the runtime's io_context\n",
              opt.lag_probe_us);
  std::printf("  load average at start: %s; FilesystemStore reads: %s\n", load_average().c_str(),
              g_fs_options.use_io_uring ? "page-cached ones up to 256 KiB on the I/O thread, others on its pool"
                                        : "all on its pool (--no-io-uring)");

  std::vector<Result> rows;
  std::optional<TempDir> temp;
  std::vector<Dataset> datasets;
  if (!opt.big_only && !opt.overhead_only) {
    if (!opt.array_path.empty()) {
      datasets.push_back(load_dataset(opt.array_path, opt.array_path));
    } else {
      temp.emplace();
      const auto t0 = Clock::now();
      std::printf("generating default arrays in %s ...\n", temp->path().c_str());
      std::fflush(stdout);
      if (opt.dataset != "raw_4KiB") {
        // zstd_4MiB: uint16 [4096, 12288] in 24 chunks of [1024, 2048] (4 MiB).
        generate_array(temp->path() / "zstd_4MiB", 4096, 12288, 1024, 2048, true, 1024);
        datasets.push_back(load_dataset("zstd_4MiB", temp->path() / "zstd_4MiB"));
      }
      if (opt.dataset != "zstd_4MiB") {
        // raw_4KiB: uint16 [2048, 4096] in 4096 chunks of [32, 64] (4 KiB), one write call.
        generate_array(temp->path() / "raw_4KiB", 2048, 4096, 32, 64, false, 2048);
        datasets.push_back(load_dataset("raw_4KiB", temp->path() / "raw_4KiB"));
      }
      std::printf("generated in %.1f s\n", seconds_since(t0));
    }
  }

  for (auto& ds : datasets) {
    ds.codec_only_mb_s = codec_only_limit(ds, threads, opt.seconds);
    ds.store_only_mb_s = store_only_floor(ds, threads, std::min(opt.seconds, 1.0));
    std::printf("\n%s: %s %s, chunks %s (%s), %zu chunks, codecs %s\n", ds.name.c_str(), ds.dtype.c_str(),
                ds.shape_text.c_str(), ds.chunk_text.c_str(), bytes_text(static_cast<double>(ds.chunk_bytes)).c_str(),
                ds.chunks.size(), ds.codec.c_str());
    if (ds.limit != LimitKind::none)
      std::printf("  stored/decoded %.3f (%.2fx), limit (%s, %u threads): %.0f MB/s\n",
                  static_cast<double>(ds.encoded_total) / static_cast<double>(ds.decoded_total),
                  static_cast<double>(ds.decoded_total) / static_cast<double>(ds.encoded_total), to_string(ds.limit),
                  threads, ds.codec_only_mb_s);
    else
      std::printf("  codec-only limit: n/a (only [bytes] and [bytes, zstd] chains have one here)\n");
    if (ds.store_only_mb_s > 0 && ds.limit != LimitKind::store)
      std::printf("  for reference, the file system alone (open+pread+close of the chunk files, %u threads): %.0f MB/s\n",
                  threads, ds.store_only_mb_s);
    std::fflush(stdout);

    for (const auto& d : dispatches) {
      RuntimeOptions o;
      o.io_time_slice = g_io_time_slice;
      o.codec_sched_idle = g_codec_sched_idle;
      o.codec_threads = threads;
      o.dispatch = d.value;
      o.caller_reads = g_caller_reads;
      o.lag_probe_interval = std::chrono::microseconds(opt.lag_probe_us);
      Runtime rt(o);
      auto store = open_root(rt, ds.root.string());
      const Array arr = Array::open_blocking(rt, store, "");
      // Warm-up: thread-local codec contexts and scratch, page cache.
      Bytes buf(ds.max_region_bytes);
      for (std::size_t i = 0; i < std::min<std::size_t>(ds.chunks.size(), 64); ++i)
        arr.read_blocking(ds.chunks[i].region, MutableByteSpan(buf.data(), ds.chunks[i].bytes));
      for (const auto& api : apis) {
        for (unsigned r : readers) {
          std::fprintf(stderr, "  running %s %s %s R=%u ...\n", ds.name.c_str(), d.name, api.c_str(), r);
          rows.push_back(run_config(rt, arr, ds, d.name, api, r, opt.seconds));
        }
      }
    }
    if (ds.limit != LimitKind::none) {
      double lo = 1e300, hi = 0;
      for (const auto& r : rows)
        if (r.dataset == ds.name) lo = std::min(lo, r.codec_only_mb_s), hi = std::max(hi, r.codec_only_mb_s);
      std::printf("  %s: codec-only limit, measured in rounds with each configuration: %.0f to %.0f MB/s%s\n",
                  ds.name.c_str(), lo, hi,
                  hi > 1.15 * lo ? " (the machine's speed moved; each ratio compares rounds run side by side)" : "");
    }
  }
  if (!rows.empty()) print_table(rows);
  for (const auto& r : rows) records.push_back(to_json(r, "concurrent_reads"));

  // Dispatch overhead with tiny chunks.
  std::optional<double> batched_overhead_ns, pool_hop_ns, in_place_ns;
  if (!opt.big_only && !opt.skip_overhead) {
    std::vector<Result> ov_records;
    const auto [memcpy_ns, ov] = measure_overhead(threads, ov_records);
    std::printf("\nper-chunk dispatch overhead: 65536 chunks of 64 B ([bytes little]) read in one read_blocking\n"
                "call, min of 5 calls; from a MemoryStore that returns each value (as HTTP and S3 stores do),\n"
                "where inline_bytes = 0 forces trivial chunks through the pool; the last row from a MemoryStore,\n"
                "which copies each chunk straight into the output\n");
    std::printf("  %-30s %10s %12s %10s %8s\n", "mode", "ns/chunk", "over memcpy", "pool subs", "inline");
    std::printf("  %-30s %10.1f\n", "memcpy baseline", memcpy_ns);
    for (const auto& o : ov)
      std::printf("  %-30s %10.1f %12.1f %10llu %8llu\n", o.mode.c_str(), o.ns_per_chunk, o.ns_per_chunk - memcpy_ns,
                  static_cast<unsigned long long>(o.submissions), static_cast<unsigned long long>(o.inline_batches));
    batched_overhead_ns = ov.front().ns_per_chunk - memcpy_ns;
    in_place_ns = ov.back().ns_per_chunk - memcpy_ns;
    pool_hop_ns = ov[0].ns_per_chunk - ov[2].ns_per_chunk;  // batched - inline, both forced (inline_bytes = 0)
    for (const auto& r : ov_records) records.push_back(to_json(r, "dispatch_overhead"));
  }

  // Targets from the issue.
  if (!opt.big_only) {
    std::printf("\ntargets (from the issue):\n");
    if (batched_overhead_ns) {
      std::printf("  batched dispatch overhead < 1 us/chunk (engine - memcpy): %6.3f us/chunk   %s\n",
                  *batched_overhead_ns / 1000, verdict(*batched_overhead_ns < 1000));
      std::printf("    of which the pool hop itself (batched - inline): %.3f us/chunk; the rest is the\n"
                  "    engine's per-chunk path shared by every mode (planning, the store lookup and copy, ...)\n",
                  *pool_hop_ns / 1000);
      std::printf("    (read in place from a MemoryStore, default options, no hop: %.3f us/chunk)\n", *in_place_ns / 1000);
    }
    const unsigned top = readers.empty() ? 0 : readers.back();
    for (const auto& ds : datasets) {
      if (ds.limit != LimitKind::zstd) continue;
      for (const auto& r : rows) {
        if (r.dataset != ds.name || r.dispatch != std::string("batched") || r.readers != top) continue;
        std::printf("  %u-reader zstd throughput >= 0.9x codec-only (%s, %s): %5.2fx        %s%s\n", top,
                    ds.name.c_str(), r.api.c_str(), r.ratio, verdict(r.ratio >= 0.9),
                    top == 8 ? "" : "  (8 readers not run)");
      }
      for (const auto& r : rows) {
        if (r.dataset != ds.name || r.dispatch != std::string("batched") || r.readers != top) continue;
        std::printf("  loop lag p99 < 1 ms, pool saturated (%s, %u readers, %s): %7.0f us   %s  (less CPU waits: %.0f us)\n",
                    ds.name.c_str(), top, r.api.c_str(), r.lag.p99_us, verdict(r.lag.p99_us < 1000), r.lag.own_p99_us);
      }
    }
    if (std::none_of(datasets.begin(), datasets.end(), [](const Dataset& d) { return d.limit == LimitKind::zstd; }))
      std::printf("  (throughput and loop-lag targets need a [bytes, zstd] array)\n");
  }

  if (opt.big || opt.big_only) records.push_back(run_big(cache_dir, threads));

  const double rss = [] {
    rusage ru{};
    getrusage(RUSAGE_SELF, &ru);
    return static_cast<double>(ru.ru_maxrss) / 1024.0;
  }();
  std::printf("\nprocess peak RSS (getrusage ru_maxrss, whole run): %.0f MiB; load average at end: %s\n", rss,
              load_average().c_str());

  if (!opt.json_path.empty() && !write_records(opt.json_path, records, "concurrent_reads")) return 1;
  const bool errors = std::any_of(rows.begin(), rows.end(), [](const Result& r) { return !r.error.empty(); });
  return errors ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  CLI::App app{"zarrcoro concurrent_reads: engine dispatch modes under concurrent one-chunk readers"};
  app.add_option("--array", opt.array_path, "Existing array: a directory or a URL (s3://bucket/prefix, http://...), array at its root")
      ->check(CLI::Validator(
          [](std::string& v) { return is_url(v) || fs::is_directory(v) ? std::string() : "Directory does not exist: " + v; },
          "DIR|URL"));
  app.add_option("--dispatch", opt.dispatch, "Dispatch mode(s) to run")
      ->check(CLI::IsMember({"batched", "per-chunk", "inline", "all"}));
  app.add_option("--dataset", opt.dataset, "Which default array(s) to generate and run (ignored with --array)")
      ->check(CLI::IsMember({"zstd_4MiB", "raw_4KiB", "all"}));
  app.add_option("--readers", opt.readers, "Reader counts, comma separated")->delimiter(',');
  app.add_option("--api", opt.api, "API(s) to drive")->check(CLI::IsMember({"blocking", "async", "both"}));
  app.add_option("--seconds", opt.seconds, "Seconds per configuration (and per codec-only limit)")
      ->check(CLI::PositiveNumber);
  app.add_option("--codec-threads", opt.codec_threads, "Codec pool threads (default: hardware threads)");
  app.add_option("--lag-probe-us", opt.lag_probe_us, "Loop-lag probe interval in microseconds")
      ->check(CLI::Range(100u, 100000u));
  long io_time_slice_us = g_io_time_slice.count();
  app.add_option("--io-time-slice-us", io_time_slice_us,
                 "Time slice of the I/O thread in microseconds (RuntimeOptions::io_time_slice; 0 = kernel default)")
      ->check(CLI::Range(0L, 100000L));
  app.add_flag("!--no-codec-sched-idle", g_codec_sched_idle,
               "Codec threads keep the normal policy (RuntimeOptions::codec_sched_idle = false; nice 10 only)");
  app.add_flag("!--no-caller-reads", g_caller_reads,
               "Every read through the io_context, none answered on the caller's thread (RuntimeOptions::caller_reads)");
  app.add_option("--json", opt.json_path, "Write one JSON object per configuration run to FILE");
  app.add_flag("--big", opt.big, "Also read a 1 GiB zstd array whole into one buffer (generated once, cached)");
  app.add_flag("--big-only", opt.big_only, "Run only the --big test");
  app.add_flag("--skip-overhead", opt.skip_overhead, "Skip the tiny-chunk dispatch overhead test");
  app.add_flag("--overhead-only", opt.overhead_only, "Run only the tiny-chunk dispatch overhead test");
  bool no_io_uring = false;
  app.add_flag("--no-io-uring", no_io_uring, "FilesystemStore: blocking reads on its own threads instead of io_uring");
  app.add_option("--cache-dir", opt.cache_dir, "Where --big keeps its array (default: <tmp>/zarrcoro-perf-cache)");
  CLI11_PARSE(app, argc, argv);
  g_fs_options.use_io_uring = !no_io_uring;
  g_io_time_slice = std::chrono::microseconds(io_time_slice_us);
  if (opt.readers.empty() || std::find(opt.readers.begin(), opt.readers.end(), 0u) != opt.readers.end()) {
    std::fprintf(stderr, "--readers: give positive counts, e.g. 1,2,8\n");
    return 2;
  }
  try {
    return run(opt);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "concurrent_reads: %s\n", e.what());
    return 1;
  }
}
