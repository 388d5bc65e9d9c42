// disk_io: the issue's 1e6 int32 array (1000 chunks of 1000, 4 KB each) on a
// FilesystemStore with a warm page cache, in four layouts: v2 without a
// compressor, v3 [bytes], v3 [bytes, zstd(1)] and v3 sharded (10 shards of
// 100 inner [bytes] chunks). For each: the whole array written with one
// write_blocking and read with one read_blocking (one default Runtime), beside
// the raw limit on the same files (a plain loop of open/pread/close, or
// open/write/close/rename of a temporary file, on 1 and on 2 threads, no
// codec) and, for zstd, beside the same loops with the codec in them (one
// pread of up to the compress bound, then ZSTD_decompressDCtx into the
// output; writes compress with ZSTD_compressCCtx first): the limit for a
// compressed layout, which the raw one is not. For v2, beside zarr-python 2 (perf/disk_io_zarr_python.py run
// with /usr/bin/python3 on the same directory). Minimum over --rounds
// rounds, each of one write and --reads reads (every reader alike).
// Every zarrcoro read is checked against 0..999999: exit status 1 otherwise.
//
//   build/perf/disk_io [--rounds N] [--reads N] [--dir PARENT] [--json FILE] [--python EXE]
//                      [--no-codec-sched-idle]
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <optional>
#include <string>
#include <system_error>
#include <thread>
#include <vector>


#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <zstd.h>

#include <zarrcoro/array.hpp>
#include <zarrcoro/runtime.hpp>
#include <zarrcoro/store/filesystem.hpp>

#include "perf_common.hpp"

using nlohmann::json;
using namespace zarrcoro;
using namespace zarrcoro::perf;
namespace fs = std::filesystem;

namespace {

constexpr std::uint64_t kN = 1'000'000, kChunk = 1000;
constexpr double kLimitTarget = 1.5, kZarrPythonTarget = 0.25;

struct Layout {
  const char* name;
  const char* dir;  // under the temporary directory
  int zarr_format;
  std::uint64_t chunk;  // elements per stored file (a shard for the sharded layout)
  const char* codecs;
  int zstd_level = 0;  // > 0: [bytes, zstd(level)], measured against the raw loops with zstd too
};

const Layout kLayouts[] = {
    {"v2 null", "v2", 2, kChunk, R"([{"name": "bytes", "configuration": {"endian": "little"}}])"},
    {"v3 bytes", "v3_bytes", 3, kChunk, R"([{"name": "bytes", "configuration": {"endian": "little"}}])"},
    {"v3 zstd(1)", "v3_zstd", 3, kChunk,
     R"([{"name": "bytes", "configuration": {"endian": "little"}},
         {"name": "zstd", "configuration": {"level": 1, "checksum": false}}])",
     1},
    {"v3 sharded", "v3_sharded", 3, 100 * kChunk,
     R"([{"name": "sharding_indexed", "configuration": {"chunk_shape": [1000],
          "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
          "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}]}}])"},
};

[[noreturn]] void fail_errno(const char* what, const std::string& path) {
  throw std::system_error(errno, std::generic_category(), std::string(what) + " " + path);
}

// One stored file (a chunk or a shard) and its bytes, for the raw loops.
struct StoredFile {
  std::string path, temp;
  Bytes data;
  std::size_t offset = 0;  // where the raw read puts it in the output buffer
  std::size_t decoded_offset = 0, decoded_size = 0;  // where its decoded bytes go in the array's buffer
  Bytes decoded;  // what the raw write with zstd compresses
};

void raw_read(const StoredFile& f, std::byte* out) {
  const int fd = ::open(f.path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail_errno("open", f.path);
  const ssize_t n = ::pread(fd, out, f.data.size(), 0);
  ::close(fd);
  if (n != static_cast<ssize_t>(f.data.size())) fail_errno("short pread of", f.path);
}

void raw_write(const StoredFile& f) {
  const int fd = ::open(f.temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail_errno("open", f.temp);
  const ssize_t n = ::write(fd, f.data.data(), f.data.size());
  if (n != static_cast<ssize_t>(f.data.size()) || ::close(fd) != 0) fail_errno("write", f.temp);
  if (::rename(f.temp.c_str(), f.path.c_str()) != 0) fail_errno("rename to", f.path);
}

// The raw read with zstd: open, one pread of up to the compress bound of
// the decoded size (a compressed file's size is not known in advance, and
// asking for it would cost an fstat), close, then one ZSTD_decompressDCtx
// into `out`: the least a plain reader of these files does.
void raw_read_zstd(const StoredFile& f, std::byte* out) {
  thread_local std::unique_ptr<ZSTD_DCtx, decltype(&ZSTD_freeDCtx)> dctx(ZSTD_createDCtx(), ZSTD_freeDCtx);
  thread_local Bytes buf;
  buf.resize(ZSTD_compressBound(f.decoded_size) + 1);
  const int fd = ::open(f.path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail_errno("open", f.path);
  const ssize_t n = ::pread(fd, buf.data(), buf.size(), 0);
  ::close(fd);
  if (n < 0 || static_cast<std::size_t>(n) == buf.size()) fail_errno("pread (or a file past the bound)", f.path);
  const std::size_t d = ZSTD_decompressDCtx(dctx.get(), out, f.decoded_size, buf.data(), static_cast<std::size_t>(n));
  if (ZSTD_isError(d) || d != f.decoded_size) throw std::runtime_error("raw zstd decode failed: " + f.path);
}

// The raw write with zstd: ZSTD_compressCCtx, then as raw_write.
void raw_write_zstd(const StoredFile& f, int level) {
  thread_local std::unique_ptr<ZSTD_CCtx, decltype(&ZSTD_freeCCtx)> cctx(ZSTD_createCCtx(), ZSTD_freeCCtx);
  thread_local Bytes buf;
  buf.resize(ZSTD_compressBound(f.decoded.size()));
  const std::size_t n = ZSTD_compressCCtx(cctx.get(), buf.data(), buf.size(), f.decoded.data(), f.decoded.size(), level);
  if (ZSTD_isError(n)) throw std::runtime_error("raw zstd encode failed: " + f.path);
  const int fd = ::open(f.temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail_errno("open", f.temp);
  const ssize_t w = ::write(fd, buf.data(), n);
  if (w != static_cast<ssize_t>(n) || ::close(fd) != 0) fail_errno("write", f.temp);
  if (::rename(f.temp.c_str(), f.path.c_str()) != 0) fail_errno("rename to", f.path);
}

// Runs `op` over files [0, n) split into `threads` contiguous parts, one
// thread each (the calling thread alone for 1); milliseconds.
template <class Op>
double timed_split(std::size_t n, unsigned threads, Op op) {
  std::vector<std::exception_ptr> errors(threads);
  auto part = [&](unsigned t) {
    try {
      for (std::size_t i = n * t / threads; i < n * (t + 1) / threads; ++i) op(i);
    } catch (...) {
      errors[t] = std::current_exception();
    }
  };
  const auto t0 = Clock::now();
  if (threads == 1) {
    part(0);
  } else {
    std::vector<std::jthread> pool;
    for (unsigned t = 0; t < threads; ++t) pool.emplace_back(part, t);
  }
  const double ms = seconds_since(t0) * 1e3;
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
  return ms;
}

double timed_ms(auto&& f) {
  const auto t0 = Clock::now();
  f();
  return seconds_since(t0) * 1e3;
}

std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// zarr-python's min read/write ms on the v2 array at `dir`, or nullopt (with
// a message) when `python` cannot import zarr. Throws when the script fails
// otherwise (e.g. it read wrong data).
std::optional<json> run_zarr_python(const std::string& python, const std::string& script, const fs::path& dir,
                                    int rounds, int reads) {
  const std::string cmd = quote(python) + " " + quote(script) + " " + quote(dir.string()) + " " +
                          std::to_string(rounds) + " " + std::to_string(reads);
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) fail_errno("popen", cmd);
  std::string out;
  char buf[4096];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  const int status = ::pclose(p);
  const int rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  while (!out.empty() && std::isspace(static_cast<unsigned char>(out.back()))) out.pop_back();
  if (rc == 3 || rc == 126 || rc == 127) {
    std::printf("zarr-python: skipped (%s cannot run the script or import zarr: %s)\n", python.c_str(),
                out.empty() ? ("exit status " + std::to_string(rc)).c_str() : out.c_str());
    return std::nullopt;
  }
  if (rc != 0) throw std::runtime_error("zarr-python script failed (exit status " + std::to_string(rc) + "): " + cmd);
  return json::parse(out);
}

struct Row {
  std::string layout, op, codecs;
  std::size_t files = 0, stored_bytes = 0;
  double zarrcoro_ms = 1e300, raw1_ms = 1e300, raw2_ms = 1e300;
  std::optional<double> codec1_ms, codec2_ms;  // the raw loops with the codec (zstd layouts)
  std::optional<double> zarr_python_ms;
  double limit_ms() const { return std::min(raw1_ms, raw2_ms); }
  std::optional<double> codec_limit_ms() const {
    if (!codec1_ms) return std::nullopt;
    return std::min(*codec1_ms, *codec2_ms);
  }
};

const char* meets(bool ok) { return ok ? "meets" : "misses"; }

}  // namespace

int main(int argc, char** argv) {
  int rounds = 7, reads = 5;
  bool codec_sched_idle = true;
  std::string parent = fs::temp_directory_path().string(), json_path = "disk_io.json";
  std::string python = "/usr/bin/python3", script = ZARRCORO_PERF_SOURCE_DIR "/disk_io_zarr_python.py";
  CLI::App app{"zarrcoro disk_io: 1e6 int32 in 1000 chunks on the filesystem store, against the raw file limit"};
  app.add_option("--rounds", rounds, "Timed rounds per measurement (the minimum is reported)")
      ->check(CLI::Range(1, 1000));
  app.add_option("--reads", reads, "Reads per round, by zarrcoro, the raw loops and zarr-python alike")
      ->check(CLI::Range(1, 1000));
  app.add_option("--dir", parent, "Parent directory of the temporary arrays (removed at exit)")
      ->check(CLI::ExistingDirectory);
  app.add_option("--json", json_path, "Write the results as JSON to FILE");
  app.add_option("--python", python, "Python with zarr 2 for the comparison");
  app.add_option("--zarr-python-script", script, "Path of disk_io_zarr_python.py");
  app.add_flag("!--no-codec-sched-idle", codec_sched_idle,
               "Codec threads keep the normal policy (RuntimeOptions::codec_sched_idle = false; nice 10 only)");
  CLI11_PARSE(app, argc, argv);

  std::string tmpl = (fs::path(parent) / "zarrcoro-disk-io-XXXXXX").string();
  if (!::mkdtemp(tmpl.data())) {
    std::fprintf(stderr, "disk_io: mkdtemp %s: %s\n", tmpl.c_str(), std::strerror(errno));
    return 1;
  }
  const fs::path dir = tmpl;
  struct Cleanup {
    fs::path p;
    ~Cleanup() {
      std::error_code ec;
      fs::remove_all(p, ec);
    }
  } cleanup{dir};

  std::vector<std::int32_t> data(kN);
  std::iota(data.begin(), data.end(), 0);
  const ByteSpan in(reinterpret_cast<const std::byte*>(data.data()), kN * sizeof(std::int32_t));
  Bytes out(in.size());
  std::vector<Row> rows;
  try {
    RuntimeOptions ro;
    ro.codec_sched_idle = codec_sched_idle;
    Runtime rt(ro);
    std::printf("disk_io: %llu int32 in chunks of %llu (4 KB), FilesystemStore in %s, page cache warm; min of %d "
                "rounds of one write and %d reads, ms\n",
                static_cast<unsigned long long>(kN), static_cast<unsigned long long>(kChunk), dir.c_str(), rounds,
                reads);
    std::printf("  zarrcoro: one Runtime (%s options: %u I/O thread, %u codec threads under %s), one read_blocking or\n"
                "  write_blocking of the whole array; limit: the same files through plain open/pread/close (reads)\n"
                "  or open(temp)/write/close/rename (writes), no codec, on 1 and 2 threads, the better of the two\n",
                codec_sched_idle ? "default" : "default but codec_sched_idle", rt.options().io_threads,
                rt.codec_threads(), codec_sched_idle ? "SCHED_IDLE" : "nice 10");
    std::printf("  load average at start: %s\n\n", load_average().c_str());
    std::fflush(stdout);

    for (const Layout& l : kLayouts) {
      const fs::path root = dir / l.dir;
      auto store = std::make_shared<FilesystemStore>(rt.io_executor(), root);
      ArrayMetadata m;
      m.zarr_format = l.zarr_format;
      if (l.zarr_format == 2) m.chunk_key_encoding = {ChunkKeyEncoding::Kind::v2, '.'};
      m.shape = {kN};
      m.data_type = DataTypeKind::int32;
      m.chunk_shape = {l.chunk};
      m.codecs = json::parse(l.codecs);
      const Array arr = Array::create_blocking(rt, store, "", m);
      const Region all = Region::all(m.shape);
      arr.write_blocking(all, in);

      auto verified_read = [&] {
        std::memset(out.data(), 0xAB, out.size());
        const double ms = timed_ms([&] { arr.read_blocking(all, out); });
        if (std::memcmp(out.data(), in.data(), in.size()) != 0)
          throw std::runtime_error(std::string("DATA MISMATCH: layout ") + l.name + " did not read back 0..999999");
        return ms;
      };
      verified_read();

      // The stored files, their bytes (for the raw writes) and their places in one output buffer (raw reads).
      std::vector<StoredFile> files;
      std::size_t stored = 0;
      for (std::uint64_t k = 0; k < kN / l.chunk; ++k) {
        const std::uint64_t c[] = {k};
        const fs::path p = root / arr.chunk_key(c);
        StoredFile f;
        f.path = p.string();
        f.temp = (p.parent_path() / ("." + p.filename().string() + ".rawtmp")).string();
        f.data = Bytes(fs::file_size(p));
        f.offset = stored;
        f.decoded_size = l.chunk * sizeof(std::int32_t);
        f.decoded_offset = k * f.decoded_size;
        if (l.zstd_level > 0) f.decoded = to_bytes(in.subspan(f.decoded_offset, f.decoded_size));
        raw_read(f, f.data.data());
        stored += f.data.size();
        files.push_back(std::move(f));
      }
      std::printf("%-11s %s, %zu files, %zu bytes stored, store on %s\n", l.name, arr.describe_codecs().c_str(),
                  files.size(), stored, store->uses_io_uring() ? "io_uring" : "its blocking pool");
      std::fflush(stdout);
      Bytes raw_out(stored);
      std::memset(raw_out.data(), 0, stored);

      Row rd;
      rd.layout = l.name;
      rd.codecs = arr.describe_codecs();
      rd.files = files.size();
      rd.stored_bytes = stored;
      Row wr = rd;
      rd.op = "read";
      wr.op = "write";
      for (int r = 0; r < rounds; ++r) {
        wr.zarrcoro_ms = std::min(wr.zarrcoro_ms, timed_ms([&] { arr.write_blocking(all, in); }));
        for (int k = 0; k < reads; ++k) rd.zarrcoro_ms = std::min(rd.zarrcoro_ms, verified_read());
        for (unsigned t : {1u, 2u}) {
          const double w = timed_split(files.size(), t, [&](std::size_t i) { raw_write(files[i]); });
          double& wbest = t == 1 ? wr.raw1_ms : wr.raw2_ms;
          double& rbest = t == 1 ? rd.raw1_ms : rd.raw2_ms;
          wbest = std::min(wbest, w);
          for (int k = 0; k < reads; ++k)
            rbest = std::min(rbest, timed_split(files.size(), t, [&](std::size_t i) {
                               raw_read(files[i], raw_out.data() + files[i].offset);
                             }));
          if (l.zstd_level == 0) continue;
          auto& cw = t == 1 ? wr.codec1_ms : wr.codec2_ms;
          auto& cr = t == 1 ? rd.codec1_ms : rd.codec2_ms;
          const double cwt = timed_split(files.size(), t, [&](std::size_t i) { raw_write_zstd(files[i], l.zstd_level); });
          cw = std::min(cw.value_or(1e300), cwt);
          for (int k = 0; k < reads; ++k) {
            std::memset(out.data(), 0xAB, out.size());
            cr = std::min(cr.value_or(1e300), timed_split(files.size(), t, [&](std::size_t i) {
                            raw_read_zstd(files[i], out.data() + files[i].decoded_offset);
                          }));
            if (std::memcmp(out.data(), in.data(), in.size()) != 0)
              throw std::runtime_error(std::string("raw zstd loop read back wrong data: layout ") + l.name);
          }
        }
      }
      verified_read();  // after the raw rewrites of the same bytes

      if (l.zarr_format == 2) {
        if (auto zp = run_zarr_python(python, script, root, rounds, reads)) {
          rd.zarr_python_ms = (*zp)["read_ms"].get<double>();
          wr.zarr_python_ms = (*zp)["write_ms"].get<double>();
          std::printf("            zarr-python %s on it: read %.2f ms, write %.2f ms\n",
                      (*zp)["zarr_version"].get<std::string>().c_str(), *rd.zarr_python_ms, *wr.zarr_python_ms);
          verified_read();  // what zarr-python wrote
        }
      }
      rows.push_back(rd);
      rows.push_back(wr);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "disk_io: FAILED: %s\n", e.what());
    return 1;
  }

  std::printf("\n%-11s %-5s %9s %8s %8s %8s %9s %-16s %9s %8s %9s %8s %-16s\n", "layout", "op", "zarrcoro", "raw 1t",
              "raw 2t", "limit", "zc/limit", "target <=1.5x", "raw+zstd", "zc/r+z", "zarr-py", "zc/zp", "target <=0.25x");
  json records = json::array();
  for (const Row& r : rows) {
    const double ratio = r.zarrcoro_ms / r.limit_ms();
    const bool ok = ratio <= kLimitTarget;
    char zp[16] = "n/a", zpr[16] = "", zpt[16] = "", cl[16] = "-", clr[16] = "";
    const std::optional<double> codec_limit = r.codec_limit_ms();
    if (codec_limit) {
      std::snprintf(cl, sizeof cl, "%.2f", *codec_limit);
      std::snprintf(clr, sizeof clr, "%.2f", r.zarrcoro_ms / *codec_limit);
    }
    std::optional<double> zp_ratio;
    if (r.zarr_python_ms) {
      zp_ratio = r.zarrcoro_ms / *r.zarr_python_ms;
      std::snprintf(zp, sizeof zp, "%.2f", *r.zarr_python_ms);
      std::snprintf(zpr, sizeof zpr, "%.3f", *zp_ratio);
      if (r.op == "read") std::snprintf(zpt, sizeof zpt, "%s", meets(*zp_ratio <= kZarrPythonTarget));
    }
    std::printf("%-11s %-5s %9.2f %8.2f %8.2f %8.2f %9.2f %-16s %9s %8s %9s %8s %-16s\n", r.layout.c_str(),
                r.op.c_str(), r.zarrcoro_ms, r.raw1_ms, r.raw2_ms, r.limit_ms(), ratio, meets(ok), cl, clr, zp, zpr,
                zpt);
    json j = {{"benchmark", "disk_io"},
              {"layout", r.layout},
              {"op", r.op},
              {"codec", r.codecs},
              {"elements", kN},
              {"chunk_elements", kChunk},
              {"files", r.files},
              {"stored_bytes", r.stored_bytes},
              {"store", "filesystem"},
              {"codec_sched_idle", codec_sched_idle},
              {"rounds", rounds},
              {"reads_per_round", reads},
              {"zarrcoro_ms", r.zarrcoro_ms},
              {"raw_1_thread_ms", r.raw1_ms},
              {"raw_2_threads_ms", r.raw2_ms},
              {"limit_ms", r.limit_ms()},
              {"ratio_to_limit", ratio},
              {"meets_limit_target", ok},
              {"raw_zstd_1_thread_ms", nullptr},
              {"raw_zstd_2_threads_ms", nullptr},
              {"raw_zstd_limit_ms", nullptr},
              {"ratio_to_raw_zstd_limit", nullptr},
              {"zarr_python_ms", nullptr},
              {"ratio_to_zarr_python", nullptr},
              {"data_ok", true}};
    if (codec_limit) {
      j["raw_zstd_1_thread_ms"] = *r.codec1_ms;
      j["raw_zstd_2_threads_ms"] = *r.codec2_ms;
      j["raw_zstd_limit_ms"] = *codec_limit;
      j["ratio_to_raw_zstd_limit"] = r.zarrcoro_ms / *codec_limit;
    }
    if (r.zarr_python_ms) {
      j["zarr_python_ms"] = *r.zarr_python_ms;
      j["ratio_to_zarr_python"] = *zp_ratio;
      if (r.op == "read") j["meets_zarr_python_target"] = *zp_ratio <= kZarrPythonTarget;
    }
    records.push_back(std::move(j));
  }
  std::printf("targets (issue): reads and writes within %.1fx the raw limit; reads at most %.2fx zarr-python's time\n"
              "(the limit has no codec: for zstd(1) the ratio includes (de)compression; raw+zstd: the same loops\n"
              " with ZSTD_decompressDCtx, or ZSTD_compressCCtx, per file, the better of 1 and 2 threads)\n",
              kLimitTarget, kZarrPythonTarget);
  std::printf("data read back equals 0..999999 in every layout: yes; load average at end: %s\n",
              load_average().c_str());

  if (!json_path.empty() && !write_records(json_path, records, "disk_io")) return 1;
  return 0;
}
