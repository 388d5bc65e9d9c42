// mvce: the minimal example. 1,000,000 int32 values in chunks of
// 1000 in a MemoryStore, as Zarr v3 with [bytes] and with [bytes, zstd level
// 0]: write the whole array with one write_blocking, read it back with one
// read_blocking. Each is timed 7 times (min reported, median beside it), and
// printed next to the reference numbers quoted in the issue. The data read
// back must equal what was written (exit status 1 otherwise).
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include <blosc.h>

#include <CLI/CLI.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/use_future.hpp>
#include <nlohmann/json.hpp>

#include <zarrcoro/array.hpp>
#include <zarrcoro/runtime.hpp>
#include <zarrcoro/store/memory.hpp>

#include "perf_common.hpp"

using nlohmann::json;
using namespace zarrcoro;
using namespace zarrcoro::perf;

namespace {

constexpr std::uint64_t kElements = 1'000'000, kChunk = 1000;

enum class Codec { none, zstd, blosc_lz4 };

struct Case {
  const char* name;
  int zarr_format;
  Codec codec;
  double ref_write_ms, ref_read_ms;  // zarr-python 3.3, from the issues
  double ref2_write_ms = 0, ref2_read_ms = 0;  // zarr-python 2.13 (v2 cases)
};

// The codec chain of a case. v2 arrays derive their `.zarray` (dtype byte
// order, compressor) from it.
json chain(Codec codec) {
  json c = json::array({{{"name", "bytes"}, {"configuration", {{"endian", "little"}}}}});
  if (codec == Codec::zstd) c.push_back({{"name", "zstd"}, {"configuration", {{"level", 0}, {"checksum", false}}}});
  if (codec == Codec::blosc_lz4)  // zarr-python 2's default compressor
    c.push_back({{"name", "blosc"},
                 {"configuration",
                  {{"cname", "lz4"}, {"clevel", 5}, {"shuffle", "shuffle"}, {"typesize", 4}, {"blocksize", 0}}}});
  return c;
}

// The codec-only limit for a blosc chunk: blosc_decompress_ctx of the same
// encoded chunks on `threads` threads into one output buffer; ms.
double blosc_limit_ms(const std::vector<Bytes>& chunks, unsigned threads, std::byte* out, std::size_t chunk_bytes) {
  std::atomic<std::size_t> next{0};
  const auto t0 = Clock::now();
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t)
    pool.emplace_back([&] {
      for (std::size_t i; (i = next++) < chunks.size();)
        blosc_decompress_ctx(chunks[i].data(), out + i * chunk_bytes, chunk_bytes, 1);
    });
  for (auto& th : pool) th.join();
  return seconds_since(t0) * 1e3;
}

struct Timing {
  double min_ms = 0, median_ms = 0;
};

Timing summarize(std::vector<double> ms) {
  std::sort(ms.begin(), ms.end());
  return {ms.front(), ms[ms.size() / 2]};
}

double elapsed_ms(Clock::time_point t0) { return seconds_since(t0) * 1e3; }

}  // namespace

int main(int argc, char** argv) {
  int runs = 7;
  std::string json_path;
  unsigned codec_threads = 0;
  CLI::App app{"zarrcoro mvce: 1e6 int32 in chunks of 1000, MemoryStore, write all / read all"};
  app.add_option("--runs", runs, "Timed runs per operation (the minimum is reported)")->check(CLI::Range(1, 1000));
  app.add_option("--codec-threads", codec_threads, "Codec pool threads (default: hardware threads)");
  app.add_option("--json", json_path, "Write the results as JSON to FILE");
  CLI11_PARSE(app, argc, argv);

  const Case cases[] = {
      {"v3 [bytes]", 3, Codec::none, 132, 82},
      {"v3 [bytes, zstd(0)]", 3, Codec::zstd, 425, 249},
      {"v2 no compressor", 2, Codec::none, 271, 166, 10.6, 11.3},
      {"v2 blosc lz4 (default)", 2, Codec::blosc_lz4, 342, 222, 15.9, 15.9},
  };
  double blosc_limit = 0;

  std::vector<std::int32_t> data(kElements);
  std::iota(data.begin(), data.end(), 0);
  const ByteSpan in(reinterpret_cast<const std::byte*>(data.data()), data.size() * sizeof(std::int32_t));
  Bytes out(in.size());
  std::memset(out.data(), 0, out.size());

  RuntimeOptions options;
  options.codec_threads = codec_threads;
  Runtime rt(options);

  ArrayMetadata meta;
  meta.shape = {kElements};
  meta.data_type = DataTypeKind::int32;
  meta.chunk_shape = {kChunk};
  const Region all = Region::all(meta.shape);

  json records = json::array();
  bool data_ok = true;
  std::vector<std::pair<Timing, Timing>> results;
  try {
    for (const Case& c : cases) {
      meta.zarr_format = c.zarr_format;
      meta.chunk_key_encoding = c.zarr_format == 2 ? ChunkKeyEncoding{ChunkKeyEncoding::Kind::v2, '.'}
                                                   : ChunkKeyEncoding{};
      meta.codecs = chain(c.codec);

      // Write: a fresh store each run (creating the array is not timed).
      std::vector<double> write_ms, read_ms;
      bool case_ok = true;
      std::shared_ptr<MemoryStore> store;
      Array arr;
      for (int r = 0; r < runs; ++r) {
        store = std::make_shared<MemoryStore>();
        arr = Array::create_blocking(rt, store, "", meta);
        const auto t0 = Clock::now();
        arr.write_blocking(all, in);
        write_ms.push_back(elapsed_ms(t0));
      }
      // Read: the last store written, into a preallocated (already touched) buffer.
      for (int r = 0; r < runs; ++r) {
        std::memset(out.data(), 0xAB, out.size());
        const auto t0 = Clock::now();
        arr.read_blocking(all, out);
        read_ms.push_back(elapsed_ms(t0));
        if (std::memcmp(out.data(), in.data(), in.size()) != 0) case_ok = data_ok = false;
      }
      if (c.codec == Codec::blosc_lz4) {  // the limit, on the chunks just written
        std::vector<Bytes> encoded;
        for (std::uint64_t k = 0; k < kElements / kChunk; ++k) {
          const std::vector<std::uint64_t> coords{k};
          encoded.push_back(*boost::asio::co_spawn(rt.io_executor(), store->get(arr.chunk_key(coords)),
                                                   boost::asio::use_future).get());
        }
        std::vector<double> ms;
        for (int r = 0; r < runs; ++r)
          ms.push_back(blosc_limit_ms(encoded, rt.codec_threads(), out.data(), kChunk * sizeof(std::int32_t)));
        blosc_limit = summarize(ms).min_ms;
      }
      const Timing w = summarize(write_ms), rd = summarize(read_ms);
      results.emplace_back(w, rd);
      records.push_back({{"benchmark", "mvce"},
                         {"case", c.name},
                         {"codec", arr.describe_codecs()},
                         {"elements", kElements},
                         {"chunk_elements", kChunk},
                         {"chunks", kElements / kChunk},
                         {"store", "memory"},
                         {"runs", runs},
                         {"codec_threads", rt.codec_threads()},
                         {"write_ms_min", w.min_ms},
                         {"write_ms_median", w.median_ms},
                         {"read_ms_min", rd.min_ms},
                         {"read_ms_median", rd.median_ms},
                         {"ref_zarr_python_3_3_write_ms", c.ref_write_ms},
                         {"ref_zarr_python_3_3_read_ms", c.ref_read_ms},
                         {"data_ok", case_ok}});
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mvce: %s\n", e.what());
    return 1;
  }

  std::printf("mvce: %llu int32 in chunks of %llu (%llu chunks), MemoryStore, %u codec threads; "
              "min (median) of %d runs, ms\n\n",
              static_cast<unsigned long long>(kElements), static_cast<unsigned long long>(kChunk),
              static_cast<unsigned long long>(kElements / kChunk), rt.codec_threads(), runs);
  std::printf("%-24s %18s %18s   %s\n", "case", "write ms", "read ms", "zarr-python 3.3 write / read ms");
  for (std::size_t i = 0; i < std::size(cases); ++i) {
    const auto& [w, rd] = results[i];
    char wbuf[32], rbuf[32];
    std::snprintf(wbuf, sizeof wbuf, "%.3f (%.3f)", w.min_ms, w.median_ms);
    std::snprintf(rbuf, sizeof rbuf, "%.3f (%.3f)", rd.min_ms, rd.median_ms);
    std::printf("%-24s %18s %18s   %.0f / %.0f  (%.0fx / %.0fx faster)\n", cases[i].name, wbuf, rbuf,
                cases[i].ref_write_ms, cases[i].ref_read_ms, cases[i].ref_write_ms / w.min_ms,
                cases[i].ref_read_ms / rd.min_ms);
  }
  const double raw_read = results[0].second.min_ms;
  std::printf("\nreference: z5 reads the uncompressed array from disk in 6 ms (ours: %.3f ms from memory)\n", raw_read);
  std::printf("target: no-compressor read < 1 ms: %.3f ms  %s\n", raw_read, verdict(raw_read < 1.0));
  const double v2_raw = results[2].second.min_ms, v2_blosc = results[3].second.min_ms;
  std::printf("v2 reference: zarr-python 2.13 writes/reads them in %.1f/%.1f ms (no compressor) and %.1f/%.1f ms "
              "(blosc)\n",
              cases[2].ref2_write_ms, cases[2].ref2_read_ms, cases[3].ref2_write_ms, cases[3].ref2_read_ms);
  std::printf("target: v2 no-compressor read < 1.5 ms: %.3f ms  %s\n", v2_raw, verdict(v2_raw < 1.5));
  std::printf("target: v2 blosc read within 1.3x of the codec-only limit (blosc_decompress_ctx, same chunks and "
              "threads, %.3f ms): %.2fx  %s\n",
              blosc_limit, v2_blosc / blosc_limit, verdict(v2_blosc <= 1.3 * blosc_limit));
  std::printf("data read back equals data written: %s\n", data_ok ? "yes" : "NO");

  if (!json_path.empty() && !write_records(json_path, records, "mvce")) return 1;
  return data_ok ? 0 : 1;
}
