// The engine: scheduling invariants, read/write semantics, concurrency, and
// the regression cases of shared/cases that concern reads and writes.
#include <bit>
#include <filesystem>
#include <fstream>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <future>
#include <latch>
#include <mutex>
#include <numeric>
#include <optional>
#include <set>
#include <thread>

#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/use_future.hpp>
#include <catch2/catch.hpp>

#include <zarrcoro/array.hpp>
#include <zarrcoro/error.hpp>
#include <zarrcoro/runtime.hpp>
#include <zarrcoro/store/counting.hpp>
#include <zarrcoro/store/filesystem.hpp>
#include <zarrcoro/store/memory.hpp>

#include "in_place_store.hpp"
#include "support.hpp"

using namespace zarrcoro;
using nlohmann::json;
namespace asio = boost::asio;

namespace {

ArrayMetadata make_meta(std::vector<std::uint64_t> shape, std::vector<std::uint64_t> chunks,
                        DataType dtype, json codecs) {
  ArrayMetadata m;
  m.shape = std::move(shape);
  m.chunk_shape = std::move(chunks);
  m.data_type = dtype;
  m.codecs = std::move(codecs);
  return m;
}

json codecs_json(const std::string& text) { return json::parse(text); }

// Every chain whose work must never run on an I/O thread.
const char* kComputeChains[] = {
    R"([{"name":"bytes","configuration":{"endian":"little"}},{"name":"gzip","configuration":{"level":1}}])",
    R"([{"name":"bytes","configuration":{"endian":"little"}},{"name":"zstd","configuration":{"level":1}}])",
    R"([{"name":"bytes","configuration":{"endian":"little"}},{"name":"crc32c"}])",
    R"([{"name":"transpose","configuration":{"order":[1,0]}},{"name":"bytes","configuration":{"endian":"little"}}])",
    R"([{"name":"bytes","configuration":{"endian":"big"}}])",
    // numcodecs codecs as zarr-python 3 names them in v3 metadata
    R"([{"name":"bytes","configuration":{"endian":"little"}},{"name":"numcodecs.zlib","configuration":{"level":8}}])",
    R"([{"name":"bytes","configuration":{"endian":"little"}},{"name":"numcodecs.lz4","configuration":{"acceleration":1}}])",
};

std::vector<std::int32_t> iota_vec(std::size_t n, std::int32_t start = 1) {
  std::vector<std::int32_t> v(n);
  std::iota(v.begin(), v.end(), start);
  return v;
}

ByteSpan as_bytes(const auto& v) { return std::as_bytes(std::span(v)); }
MutableByteSpan as_writable(auto&& v) { return std::as_writable_bytes(std::span(v)); }

Bytes stored(Runtime& rt, const std::shared_ptr<Store>& s, const std::string& key) {
  auto v = asio::co_spawn(rt.io_executor(), s->get(key), asio::use_future).get();
  REQUIRE(v.has_value());
  return *v;
}

bool has_key(Runtime& rt, const std::shared_ptr<Store>& s, const std::string& key) {
  return asio::co_spawn(rt.io_executor(), s->exists(key), asio::use_future).get();
}

std::vector<std::string> keys(Runtime& rt, const std::shared_ptr<Store>& s, const std::string& prefix) {
  return asio::co_spawn(rt.io_executor(), s->list(prefix), asio::use_future).get();
}

asio::awaitable<std::vector<std::int32_t>> async_round_trip(Array a, std::vector<std::int32_t> data) {
  co_await a.write(Region::all(a.shape()), as_bytes(data));
  std::vector<std::int32_t> back(data.size());
  co_await a.read(Region::all(a.shape()), as_writable(back));
  co_return back;
}

}  // namespace

TEST_CASE("large buffers keep every byte, and a freed one serves the next of its size class", "[engine][bytes]") {
  for (const std::size_t n : {std::size_t{1}, std::size_t{256 << 10} - 1, std::size_t{256 << 10},
                              (std::size_t{4} << 20) + 1, (std::size_t{65} << 20) + 3}) {
    INFO(n << " bytes");
    Bytes b(n);
    for (std::size_t i = 0; i < n; i += 4093) b[i] = std::byte(i % 251);
    b[n - 1] = std::byte{42};
    Bytes copy = b;  // copied and moved through the same allocator
    Bytes moved = std::move(b);
    for (std::size_t i = 0; i + 1 < n; i += 4093) REQUIRE(copy[i] == std::byte(i % 251));
    CHECK(copy[n - 1] == std::byte{42});
    CHECK(moved == copy);
  }
  if (!detail::block_cache_enabled()) {
    WARN("SKIPPED the reuse check: this (AddressSanitizer) build allocates every block afresh");
    return;
  }
  const std::byte* first = nullptr;
  {
    Bytes shard((std::size_t{4} << 20) + 1);
    first = shard.data();
  }
  Bytes again((std::size_t{4} << 20) + 1000);  // within the same eighth of 4 MiB
  CHECK(again.data() == first);
  std::size_t cached = 0;
  {
    Bytes b(std::size_t{80} << 20);  // more than the cache holds: freed at once
    cached = detail::cached_block_bytes();
  }
  CHECK(detail::cached_block_bytes() == cached);
}

// With glibc's malloc, a small buffer allocated on one thread and freed on
// another (an encoded chunk read on the I/O thread, decoded and dropped on a
// codec thread) cost both threads a trip through the allocator's locks:
// 0.4 us of the 1.0 us per trivial chunk that concurrent_reads measured
// with every chunk forced through the pool.
TEST_CASE("small buffers keep every byte, and those freed on another thread, or left by a thread that ended, "
          "serve the next allocations",
          "[engine][bytes]") {
  // Sizes from 1 B to 256 KiB (every 7th below 4 KiB, then 1/8 apart) keep
  // their bytes, freed on another thread. (bytes.cpp checks the class edges.)
  std::vector<Bytes> made;
  for (std::size_t n = 1; n < (std::size_t{256} << 10); n = n < 4096 ? n + 7 : n * 9 / 8) {
    Bytes b(n);
    for (std::size_t i = 0; i < n; ++i) b[i] = std::byte(i * 7 + n);
    made.push_back(std::move(b));
  }
  const std::size_t total = made.size();
  std::size_t intact = 0;
  std::thread([&] {
    for (const Bytes& b : made) {
      bool same = true;
      for (std::size_t i = 0; i < b.size(); ++i) same = same && b[i] == std::byte(i * 7 + b.size());
      intact += same;
    }
    made.clear();
  }).join();
  CHECK(intact == total);
  if (!detail::block_cache_enabled()) {
    WARN("SKIPPED the reuse check: this (AddressSanitizer) build allocates every block afresh");
    return;
  }
  // 40 KB blocks, allocated on this thread and freed on one that then ends:
  // the next 40 allocations, on a third thread, are exactly those blocks
  // again. (The process-wide list is emptied first, so that blocks of the
  // class left by earlier tests neither answer nor crowd out these.)
  detail::release_small_blocks();
  constexpr std::size_t kBlock = 40000, kCount = 40;
  std::vector<Bytes> blocks;
  std::set<const std::byte*> first;
  for (std::size_t i = 0; i < kCount; ++i) {
    blocks.emplace_back(kBlock);
    first.insert(blocks.back().data());
  }
  REQUIRE(first.size() == kCount);
  std::thread([&] { blocks.clear(); }).join();
  std::set<const std::byte*> again;
  std::thread([&] {
    for (std::size_t i = 0; i < kCount; ++i) {
      blocks.emplace_back(kBlock);
      again.insert(blocks.back().data());
    }
  }).join();
  CHECK(again == first);
}

TEST_CASE("codec work never runs on an I/O thread", "[engine][invariant]") {
  Runtime rt({.codec_threads = 2});
  auto store = std::make_shared<MemoryStore>();
  for (const char* chain : kComputeChains) {
    INFO(chain);
    for (bool multi : {false, true}) {
      auto a = Array::create_blocking(rt, store, multi ? "m" : "s",
                                      make_meta({8, 12}, multi ? std::vector<std::uint64_t>{4, 3}
                                                               : std::vector<std::uint64_t>{8, 12},
                                                DataTypeKind::int32, codecs_json(chain)),
                                      CreateMode::overwrite);  // the previous chain's array
      const auto data = iota_vec(96);
      rt.reset_stats();
      // Blocking API.
      a.write_blocking(Region::all(a.shape()), as_bytes(data));
      std::vector<std::int32_t> back(96);
      a.read_blocking(Region::all(a.shape()), as_writable(back));
      CHECK(back == data);
      // Async API.
      auto via_async = asio::co_spawn(rt.io_executor(), async_round_trip(a, data), asio::use_future).get();
      CHECK(via_async == data);
      // A single-element read (partial chunk) and write (read-modify-write).
      const std::int32_t v = -5;
      a.write_blocking({{1, 1}, {2, 2}}, as_bytes(std::span(&v, 1)));
      std::int32_t w = 0;
      a.read_blocking({{1, 1}, {2, 2}}, as_writable(std::span(&w, 1)));
      CHECK(w == -5);
      const auto s = rt.stats();
      CHECK(s.codec_calls >= (multi ? 4 * 8 : 4));  // the counter sees the work...
      CHECK(s.codec_calls_on_io_thread == 0);        // ...and none of it on an I/O thread
      CHECK(s.codec_calls_off_pool == 0);            // ...nor on a caller's thread
      CHECK(s.pool_submissions > 0);
    }
  }
}

TEST_CASE("a call touching N chunks makes at most ceil(N / batch) pool submissions", "[engine][invariant]") {
  const std::size_t batch = GENERATE(1, 4, 16);
  Runtime rt({.codec_threads = 2, .batch_chunks = batch});
  auto store = std::make_shared<MemoryStore>();
  auto a = Array::create_blocking(rt, store, "a",
                                  make_meta({40, 10}, {1, 10}, DataTypeKind::int32, codecs_json(kComputeChains[1])));
  const auto data = iota_vec(400);
  const std::size_t n = 40, limit = (n + batch - 1) / batch;
  rt.reset_stats();
  a.write_blocking(Region::all(a.shape()), as_bytes(data));
  auto s = rt.stats();
  CHECK(s.chunks == n);
  CHECK(s.pool_submissions <= limit);
  rt.reset_stats();
  std::vector<std::int32_t> back(400);
  a.read_blocking(Region::all(a.shape()), as_writable(back));
  s = rt.stats();
  CHECK(back == data);
  CHECK(s.chunks == n);
  CHECK(s.pool_submissions <= limit);
  CHECK(s.pool_submissions >= 1);
}

// Each pool submission wakes a pool thread, which costs microseconds on a
// virtual machine: the batches one turn of the io_context hands over go out
// together, grouped up to batch_bytes. 16 chunks are less than one fetch
// window of a store that answers at once (32, ChunkOp::kWindow), so all 4
// batches of 4 are ready in the same turn.
TEST_CASE("the batches ready in one io_context turn share one pool submission", "[engine][invariant]") {
  const std::size_t batch_bytes = GENERATE(std::size_t{64} << 20, std::size_t{1});
  Runtime rt({.codec_threads = 2, .batch_chunks = 4, .batch_bytes = batch_bytes});
  auto a = Array::create_blocking(rt, std::make_shared<MemoryStore>(), "",
                                  make_meta({16, 10}, {1, 10}, DataTypeKind::int32, codecs_json(kComputeChains[1])));
  const auto data = iota_vec(160);
  a.write_blocking(Region::all(a.shape()), as_bytes(data));
  rt.reset_stats();
  std::vector<std::int32_t> back(160);
  a.read_blocking(Region::all(a.shape()), as_writable(back));
  const auto s = rt.stats();
  INFO("batch_bytes " << batch_bytes);
  CHECK(back == data);
  CHECK(s.chunks == 16);
  CHECK(s.pool_submissions == (batch_bytes == 1 ? 4u : 1u));  // a batch over batch_bytes goes out alone
}

TEST_CASE("per-chunk dispatch makes one submission per chunk (the baseline)", "[engine]") {
  Runtime rt({.codec_threads = 2, .batch_chunks = 16, .dispatch = Dispatch::per_chunk});
  auto a = Array::create_blocking(rt, std::make_shared<MemoryStore>(), "",
                                  make_meta({40}, {1}, DataTypeKind::int32, codecs_json(kComputeChains[1])));
  const auto data = iota_vec(40);
  a.write_blocking(Region::all(a.shape()), as_bytes(data));
  rt.reset_stats();
  std::vector<std::int32_t> back(40);
  a.read_blocking(Region::all(a.shape()), as_writable(back));
  CHECK(back == data);
  CHECK(rt.stats().pool_submissions == 40);
}

TEST_CASE("chunks with nothing to compute run without a hop", "[engine][invariant]") {
  // MemoryStore reads the chunks in place; a store returning values (as HTTP
  // and S3 do) leaves a copy to do, small enough to run inline.
  const bool values = GENERATE(false, true);
  INFO((values ? "a store returning values" : "MemoryStore"));
  Runtime rt({.codec_threads = 2});
  auto store =
      values ? std::shared_ptr<MemoryStore>(std::make_shared<test::ValueStore>()) : std::make_shared<MemoryStore>();
  auto a = Array::create_blocking(
      rt, store, "",
      make_meta({64}, {8}, DataTypeKind::int32, codecs_json(R"([{"name":"bytes","configuration":{"endian":"little"}}])")));
  const auto data = iota_vec(64);
  a.write_blocking(Region::all(a.shape()), as_bytes(data));
  rt.reset_stats();
  std::vector<std::int32_t> back(64);
  a.read_blocking(Region::all(a.shape()), as_writable(back));
  CHECK(back == data);
  const auto s = rt.stats();
  CHECK(s.pool_submissions == 0);
  CHECK(s.inline_batches == 1);
  CHECK(s.codec_calls == 0);
}

// MemoryStore copies a whole plain-copy chunk straight to its place in the
// output (ReadOptions::into): nothing is left to compute, so not even
// inline_bytes = 0 (which sends every other trivial chunk to the pool) makes
// a pool job. A store that returns values (as HTTP and S3 do) takes the hop.
TEST_CASE("whole plain-copy chunks from a MemoryStore land in the output with no pool job", "[engine][invariant]") {
  Runtime rt({.codec_threads = 2, .inline_bytes = 0});
  const auto meta =
      make_meta({64}, {8}, DataTypeKind::int32, codecs_json(R"([{"name":"bytes","configuration":{"endian":"little"}}])"));
  const auto data = iota_vec(64);
  for (const bool values : {false, true}) {
    INFO((values ? "a store returning values" : "MemoryStore"));
    auto store = values ? std::shared_ptr<MemoryStore>(std::make_shared<test::ValueStore>())
                        : std::make_shared<MemoryStore>();
    auto a = Array::create_blocking(rt, store, "", meta);
    a.write_blocking(Region::all(a.shape()), as_bytes(data));
    rt.reset_stats();
    std::vector<std::int32_t> back(64, -1);
    a.read_blocking(Region::all(a.shape()), as_writable(back));
    CHECK(back == data);
    CHECK(rt.stats().pool_submissions == (values ? 1u : 0u));
    // Elements 5-17: parts of chunks 0 and 2 (copied from their values) and
    // the whole chunk 1 between them (in place from MemoryStore).
    std::vector<std::int32_t> part(13, -1);
    rt.reset_stats();
    a.read_blocking({{5}, {18}}, as_writable(part));
    CHECK(part == std::vector<std::int32_t>(data.begin() + 5, data.begin() + 18));
    CHECK(rt.stats().pool_submissions == 1);  // the parts' copies: inline_bytes = 0 sends them to the pool
  }
}

// An operation keeps a part and a task per chunk, hundreds of bytes each.
// Allocated with plain new, a read of 65536 chunks after a write in the same
// Runtime faulted those tables in afresh on every call (glibc handed their
// pages back in between): 7,200 page faults a read, and 2.0-2.7 us per chunk
// against 0.6 us once they come from the block cache.
TEST_CASE("a repeated read of many chunks takes its per-chunk tables from the block cache and faults none in",
          "[engine][regression]") {
  if (!detail::block_cache_enabled() || test::kThreadSanitizer) {
    WARN("SKIPPED: in this sanitizer build the allocator and its shadow memory fault pages of their own");
    return;
  }
  Runtime rt({.codec_threads = 2});
  constexpr std::uint64_t kChunks = 65536;
  auto a = Array::create_blocking(rt, std::make_shared<MemoryStore>(), "",
                                  make_meta({kChunks * 4}, {4}, DataTypeKind::int32,
                                            codecs_json(R"([{"name":"bytes","configuration":{"endian":"little"}}])")));
  const auto data = iota_vec(kChunks * 4);
  a.write_blocking(Region::all(a.shape()), as_bytes(data));
  std::vector<std::int32_t> back(kChunks * 4);
  a.read_blocking(Region::all(a.shape()), as_writable(back));  // the tables' blocks go to the cache
  auto minor_faults = [] {
    rusage u{};
    ::getrusage(RUSAGE_SELF, &u);
    return u.ru_minflt;
  };
  const long before = minor_faults();
  for (int i = 0; i < 3; ++i) a.read_blocking(Region::all(a.shape()), as_writable(back));
  const long faults = minor_faults() - before;
  CHECK((back == data));  // not expanded: 262144 values
  // The tables alone span over 25 MB (6,000 pages) a read: plain vectors
  // faulted in 21,507 pages over these three reads.
  CHECK(faults < 1500);
}

TEST_CASE("the blocking API works from 8 threads at once", "[engine][invariant]") {
  Runtime rt({.codec_threads = 2});
  auto a = Array::create_blocking(rt, std::make_shared<MemoryStore>(), "",
                                  make_meta({64, 64}, {8, 8}, DataTypeKind::int32, codecs_json(kComputeChains[1])));
  const auto data = iota_vec(64 * 64);
  a.write_blocking(Region::all(a.shape()), as_bytes(data));
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int k = 0; k < 50; ++k) {
        const std::uint64_t r = static_cast<std::uint64_t>((t * 7 + k * 3) % 64);
        std::vector<std::int32_t> row(64);
        a.read_blocking({{r, 0}, {r + 1, 64}}, as_writable(row));
        for (std::uint64_t c = 0; c < 64; ++c)
          if (row[c] != data[r * 64 + c]) ++wrong;
      }
    });
  }
  for (auto& th : threads) th.join();
  CHECK(wrong == 0);
}

TEST_CASE("the blocking API called from an I/O thread throws instead of deadlocking", "[engine][invariant]") {
  Runtime rt({.codec_threads = 1});
  auto a = Array::create_blocking(rt, std::make_shared<MemoryStore>(), "",
                                  make_meta({4}, {2}, DataTypeKind::int32, codecs_json(kComputeChains[1])));
  std::promise<std::string> result;
  asio::post(rt.io_executor(), [&] {
    try {
      a.read_blocking(Region::all(a.shape()));
      result.set_value("no error");
    } catch (const InvalidArgument& e) {
      result.set_value(e.what());
    }
  });
  const auto msg = result.get_future().get();
  CHECK(msg.find("deadlock") != std::string::npos);
  // ...and from a codec pool thread.
  std::promise<bool> threw;
  asio::post(rt.codec_executor(), [&] {
    try {
      a.read_blocking(Region::all(a.shape()));
      threw.set_value(false);
    } catch (const InvalidArgument&) {
      threw.set_value(true);
    }
  });
  CHECK(threw.get_future().get());
}

TEST_CASE("missing chunks read as fill_value; regions land exactly", "[engine]") {
  Runtime rt({.codec_threads = 2});
  auto m = make_meta({5, 7}, {2, 3}, DataTypeKind::int16, codecs_json(kComputeChains[0]));
  m.fill_value = parse_fill_value(-1, m.data_type, "k");
  auto a = Array::create_blocking(rt, std::make_shared<MemoryStore>(), "x/y", m);
  auto all = a.read_blocking(Region::all(a.shape()));
  for (auto v : all.as<std::int16_t>()) REQUIRE(v == -1);
  // Write a 2x4 block at (1, 2) and read a region straddling it.
  std::vector<std::int16_t> block{10, 11, 12, 13, 20, 21, 22, 23};
  a.write_blocking({{1, 2}, {3, 6}}, as_bytes(block));
  auto r = a.read_blocking({{0, 1}, {4, 7}});
  const std::vector<std::int16_t> expect{-1, -1, -1, -1, -1, -1,  //
                                         -1, 10, 11, 12, 13, -1,  //
                                         -1, 20, 21, 22, 23, -1,  //
                                         -1, -1, -1, -1, -1, -1};
  CHECK(std::vector<std::int16_t>(r.as<std::int16_t>().begin(), r.as<std::int16_t>().end()) == expect);
  CHECK(r.shape == std::vector<std::uint64_t>{4, 6});
  CHECK(a.chunk_key(std::vector<std::uint64_t>{1, 2}) == "x/y/c/1/2");
}

TEST_CASE("partial writes into edge chunks and existing chunks (b12)", "[engine][regression]") {
  Runtime rt({.codec_threads = 2});
  auto store = std::make_shared<MemoryStore>();
  auto a = Array::create_blocking(
      rt, store, "",
      make_meta({10}, {3}, DataTypeKind::int32, codecs_json(R"([{"name":"bytes","configuration":{"endian":"little"}}])")));
  const std::vector<std::int32_t> step1{7, 8, 9};
  a.write_blocking({{7}, {10}}, as_bytes(step1));
  CHECK(test::to_hex(stored(rt, store, "c/2")) == "00 00 00 00 07 00 00 00 08 00 00 00");
  CHECK(test::to_hex(stored(rt, store, "c/3")) == "09 00 00 00 00 00 00 00 00 00 00 00");
  std::vector<std::int32_t> back(4);
  a.read_blocking({{6}, {10}}, as_writable(back));
  CHECK(back == std::vector<std::int32_t>{0, 7, 8, 9});
  const std::int32_t five = 5;
  a.write_blocking({{6}, {7}}, as_bytes(std::span(&five, 1)));
  CHECK(test::to_hex(stored(rt, store, "c/2")) == "05 00 00 00 07 00 00 00 08 00 00 00");
  a.read_blocking({{6}, {10}}, as_writable(back));
  CHECK(back == std::vector<std::int32_t>{5, 7, 8, 9});
}

TEST_CASE("0-d arrays: the only chunk key is c (b14)", "[engine][regression]") {
  Runtime rt({.codec_threads = 1});
  auto store = std::make_shared<MemoryStore>();
  auto a = Array::create_blocking(rt, store, "",
                                  make_meta({}, {}, DataTypeKind::float32, codecs_json(kComputeChains[1])));
  CHECK(a.read_blocking(Region::all({})).as<float>()[0] == 0.0f);
  const float v = 42.0f;
  a.write_blocking(Region::all({}), as_bytes(std::span(&v, 1)));
  CHECK(keys(rt, store, "c") == std::vector<std::string>{"c"});
  CHECK(a.read_blocking(Region::all({})).as<float>()[0] == 42.0f);
}

TEST_CASE("zero-length dimensions make no store requests (b13)", "[engine][regression]") {
  Runtime rt({.codec_threads = 1});
  auto counting = std::make_shared<CountingStore>(std::make_shared<MemoryStore>());
  auto a = Array::create_blocking(rt, counting, "",
                                  make_meta({0}, {1}, DataTypeKind::int32, codecs_json(kComputeChains[1])));
  auto b = Array::create_blocking(rt, counting, "b",
                                  make_meta({1, 0}, {1, 1}, DataTypeKind::int32, codecs_json(kComputeChains[1])));
  counting->reset();
  CHECK(a.read_blocking(Region::all(a.shape())).data.empty());
  const auto r = b.read_blocking(Region::all(b.shape()));
  CHECK(r.shape == std::vector<std::uint64_t>{1, 0});
  CHECK(r.data.empty());
  CHECK(counting->counts().gets == 0);
  // A chunk dimension of 0 is rejected at create.
  CHECK_THROWS_AS(Array::create_blocking(rt, counting, "z",
                                         make_meta({0}, {0}, DataTypeKind::int32, codecs_json(kComputeChains[1]))),
                  InvalidMetadata);
}

TEST_CASE("empty chunks: bitwise comparison with the fill value (b29)", "[engine][regression]") {
  Runtime rt({.codec_threads = 2});
  auto store = std::make_shared<MemoryStore>();
  auto a = Array::create_blocking(
      rt, store, "",
      make_meta({2}, {1}, DataTypeKind::float32, codecs_json(R"([{"name":"bytes","configuration":{"endian":"little"}}])")));
  const std::vector<float> zeros{0.0f, 0.0f}, neg{-0.0f, -0.0f};
  a.write_blocking(Region::all(a.shape()), as_bytes(zeros));
  CHECK(keys(rt, store, "c").empty());
  a.write_blocking(Region::all(a.shape()), as_bytes(neg));
  CHECK(keys(rt, store, "c/") == std::vector<std::string>{"c/0", "c/1"});
  CHECK(test::to_hex(stored(rt, store, "c/0")) == "00 00 00 80");
  CHECK(std::signbit(a.read_blocking(Region::all(a.shape())).as<float>()[1]));
  // Writing the fill value again erases the stored chunks.
  a.write_blocking(Region::all(a.shape()), as_bytes(zeros));
  CHECK(keys(rt, store, "c").empty());
  // A NaN payload differs from the canonical NaN fill: stored, payload kept.
  auto m = make_meta({1}, {1}, DataTypeKind::float32, codecs_json(R"([{"name":"bytes","configuration":{"endian":"little"}}])"));
  m.fill_value = parse_fill_value("NaN", m.data_type, "k");
  auto n = Array::create_blocking(rt, store, "n", m);
  const float payload = std::bit_cast<float>(0x7fc00001u);
  n.write_blocking(Region::all(n.shape()), as_bytes(std::span(&payload, 1)));
  CHECK(test::to_hex(stored(rt, store, "n/c/0")) == "01 00 c0 7f");
  CHECK(std::bit_cast<std::uint32_t>(n.read_blocking(Region::all(n.shape())).as<float>()[0]) == 0x7fc00001u);
}

TEST_CASE("concurrent writers into one chunk lose no update", "[engine][concurrency]") {
  Runtime rt({.codec_threads = 2});
  auto store = std::make_shared<MemoryStore>();
  auto a = Array::create_blocking(rt, store, "",
                                  make_meta({8 * 100}, {8 * 100}, DataTypeKind::int32, codecs_json(kComputeChains[1])));
  std::vector<std::thread> writers;
  for (int t = 0; t < 8; ++t) {
    writers.emplace_back([&, t] {
      for (std::uint64_t k = 0; k < 100; ++k) {
        const std::uint64_t i = k * 8 + static_cast<std::uint64_t>(t);
        const auto v = static_cast<std::int32_t>(i + 1);
        a.write_blocking({{i}, {i + 1}}, as_bytes(std::span(&v, 1)));
      }
    });
  }
  for (auto& w : writers) w.join();
  const auto r = a.read_blocking(Region::all(a.shape()));
  const auto expect = iota_vec(800);
  CHECK(std::equal(expect.begin(), expect.end(), r.as<std::int32_t>().begin()));
}

TEST_CASE("a tiny memory budget still completes (no deadlock)", "[engine]") {
  Runtime rt({.codec_threads = 2, .max_inflight_requests = 1, .max_inflight_bytes = 1});
  auto a = Array::create_blocking(rt, std::make_shared<MemoryStore>(), "",
                                  make_meta({100}, {10}, DataTypeKind::int32, codecs_json(kComputeChains[1])));
  const auto data = iota_vec(100);
  a.write_blocking(Region::all(a.shape()), as_bytes(data));
  std::vector<std::int32_t> back(100);
  a.read_blocking(Region::all(a.shape()), as_writable(back));
  CHECK(back == data);
}

TEST_CASE("a paused loop-lag probe keeps no samples, and resumes", "[engine]") {
  Runtime rt({.codec_threads = 1, .lag_probe_interval = std::chrono::microseconds(200)});
  rt.pause_loop_lag(true);
  rt.reset_loop_lag();
  // Several probe periods pass while paused: the timer fires, nothing is kept.
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const LoopLag paused = rt.loop_lag();
  CHECK(paused.samples == 0);
  CHECK(paused.max_us == 0);
  rt.pause_loop_lag(false);
  for (int i = 0; i < 5000 && rt.loop_lag().samples == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  CHECK(rt.loop_lag().samples > 0);
}

TEST_CASE("the loop lag's own figure keeps what the loop's own work cost, less only its waits for a CPU",
          "[engine]") {
  Runtime rt({.codec_threads = 1, .lag_probe_interval = std::chrono::microseconds(2000)});
  rt.reset_loop_lag();
  // Three handlers that each use 30 ms of the I/O thread's CPU (however long
  // that takes on a busy machine), with probe ticks between them.
  for (int i = 0; i < 3; ++i) {
    std::promise<void> done;
    boost::asio::post(rt.io_context(), [&done] {
      const auto cpu_ms = [] {
        timespec ts{};
        ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
        return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) / 1e6;
      };
      const double start = cpu_ms();
      while (cpu_ms() - start < 30) {
      }
      done.set_value();
    });
    done.get_future().wait();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const LoopLag lag = rt.loop_lag();
  INFO("samples " << lag.samples << ", p50 " << lag.p50_us << " us, p99 " << lag.p99_us << " us, own p50 "
                  << lag.own_p50_us << " us, own p99 " << lag.own_p99_us << " us");
  REQUIRE(lag.samples >= 3);
  REQUIRE(lag.samples <= 100);  // p99 is then the second-largest sample or above: a stall
  CHECK(lag.own_p99_us >= 25000);  // the CPU the handlers used is the loop's own
  CHECK(lag.own_p99_us <= lag.p99_us);
  CHECK(lag.own_p50_us <= lag.p50_us);
}

namespace {

// sched_getattr(2) of the calling thread, or nullopt where the system call
// is missing.
struct SchedAttr {
  std::uint64_t runtime_ns;
  int nice;
  std::uint32_t policy;
};

std::optional<SchedAttr> own_sched_attr() {
#ifdef SYS_sched_getattr
  struct {
    std::uint32_t size, policy;
    std::uint64_t flags;
    std::int32_t nice;
    std::uint32_t priority;
    std::uint64_t runtime, deadline, period;
  } a{};
  if (::syscall(SYS_sched_getattr, 0, &a, sizeof a, 0) != 0) return std::nullopt;
  return SchedAttr{a.runtime, a.nice, a.policy};
#else
  return std::nullopt;
#endif
}

std::optional<SchedAttr> sched_attr_on(asio::any_io_executor ex) {
  std::promise<std::optional<SchedAttr>> p;
  asio::post(ex, [&p] { p.set_value(own_sched_attr()); });
  return p.get_future().get();
}

}  // namespace

// Regression: the I/O thread waited up to 4.5 ms for a core behind a nice-10
// codec thread's time slice while the other core was idle (loop lag p99
// 3.4 ms with two readers of 4 MiB zstd chunks).
TEST_CASE("the I/O thread asks for a short time slice, so that it preempts codec threads at once",
          "[engine][regression]") {
  const auto here = own_sched_attr();
  if (!here) {
    WARN("skipped: no sched_getattr on this system");
    return;
  }
  {
    Runtime rt({.codec_threads = 1, .codec_nice = 10, .io_time_slice = std::chrono::microseconds(100)});
    const auto io = sched_attr_on(rt.io_executor());
    const auto codec = sched_attr_on(rt.codec_executor());
    REQUIRE(io);
    REQUIRE(codec);
    CHECK(io->nice == here->nice);
    CHECK(codec->nice == std::min(19, here->nice + 10));
    // Whether this kernel (Linux >= 6.12) and its sandbox grant a custom slice at all.
    std::optional<SchedAttr> probe;
    std::thread([&probe] {
      if (set_thread_time_slice(std::chrono::microseconds(100))) probe = own_sched_attr();
    }).join();
    if (!probe || probe->runtime_ns != 100'000) {
      WARN("skipped the slice check: this kernel has no custom time slice (Linux >= 6.12) or refuses it");
    } else {
      CHECK(io->runtime_ns == 100'000);
      CHECK(codec->runtime_ns == here->runtime_ns);
    }
  }
  {
    Runtime rt({.codec_threads = 1, .io_time_slice = std::chrono::microseconds(0)});
    const auto io = sched_attr_on(rt.io_executor());
    REQUIRE(io);
    CHECK(io->runtime_ns == here->runtime_ns);  // the kernel's default, as on the thread that made the Runtime
  }
}

// Regression: with blocking readers (perf/concurrent_reads, 8 threads calling
// read_blocking on 4 MiB zstd chunks) the loop lag p99 was 1.1-1.9 ms. A
// reader the I/O thread woke preempted it; the kernel then picked a nice-10
// codec thread ahead of the runnable I/O thread and ran it to the next tick
// (4 ms at HZ=250). perf sched timehist: the I/O thread runnable for 4.2 ms
// while codec threads ran on both cores.
TEST_CASE("codec threads run under SCHED_IDLE, so that a runnable I/O thread is picked before them",
          "[engine][regression]") {
  CHECK(RuntimeOptions{}.codec_sched_idle);  // the default
  const auto here = own_sched_attr();
  if (!here || here->policy != SCHED_OTHER) {
    WARN("skipped: no sched_getattr, or this test runs under another policy than SCHED_OTHER");
    return;
  }
  bool idle_granted = false;  // whether this kernel and its sandbox let a thread take SCHED_IDLE
  std::thread([&idle_granted] {
    const sched_param none{};
    idle_granted = ::pthread_setschedparam(::pthread_self(), SCHED_IDLE, &none) == 0;
  }).join();
  const bool idle = GENERATE(true, false);
  INFO("codec_sched_idle " << idle);
  if (idle && !idle_granted) {
    WARN("skipped the SCHED_IDLE case: this system refuses SCHED_IDLE");
    return;
  }
  RuntimeOptions o{.codec_threads = 2};
  o.codec_sched_idle = idle;
  Runtime rt(o);
  const auto io = sched_attr_on(rt.io_executor());
  REQUIRE(io);
  CHECK(io->policy == SCHED_OTHER);
  // Both pool threads, each held until the other has answered. The latch
  // is shared: a task may still be leaving it when its answer is read.
  auto both = std::make_shared<std::latch>(2);
  std::vector<std::future<std::optional<SchedAttr>>> codec;
  for (int i = 0; i < 2; ++i)
    codec.push_back(asio::post(rt.codec_executor(), asio::use_future([both] {
                                 both->arrive_and_wait();
                                 return own_sched_attr();
                               })));
  for (auto& f : codec) {
    const auto a = f.get();
    REQUIRE(a);
    CHECK(a->policy == (idle ? SCHED_IDLE : SCHED_OTHER));
  }
}

TEST_CASE("a runtime can adopt a service's io_context", "[engine]") {
  asio::io_context io;
  auto guard = asio::make_work_guard(io);
  std::thread loop([&] { io.run(); });
  {
    Runtime rt(io, {.codec_threads = 2});
    auto a = Array::create_blocking(rt, std::make_shared<MemoryStore>(), "",
                                    make_meta({16}, {4}, DataTypeKind::int32, codecs_json(kComputeChains[1])));
    const auto data = iota_vec(16);
    a.write_blocking(Region::all(a.shape()), as_bytes(data));
    auto r = a.read_blocking(Region::all(a.shape()));
    CHECK(std::equal(data.begin(), data.end(), r.as<std::int32_t>().begin()));
    CHECK(rt.stats().codec_calls_on_io_thread == 0);
    guard.reset();
    io.stop();
    loop.join();
  }
}

TEST_CASE("a plain-copy chunk of the wrong size is CorruptChunk in whole and partial reads", "[engine][errors]") {
  // A [bytes] chunk is copied to the selection straight from the stored
  // bytes when the read needs only part of it (or read there, by a store
  // that reads in place); a stored value of the wrong size must still fail,
  // not be read past its end.
  Runtime rt({.codec_threads = 1});
  const bool in_place = GENERATE(false, true);
  INFO("in place " << in_place);
  auto store = in_place ? std::shared_ptr<MemoryStore>(std::make_shared<test::InPlaceStore>()) : std::make_shared<test::ValueStore>();
  auto a = Array::create_blocking(
      rt, store, "", make_meta({4, 4}, {2, 4}, DataTypeKind::int32, codecs_json(R"([{"name":"bytes","configuration":{"endian":"little"}}])")));
  const auto data = iota_vec(16);
  a.write_blocking(Region::all(a.shape()), as_bytes(data));
  // Exact values: a selection inside a chunk, across chunks, and whole rows.
  std::vector<std::int32_t> inner(2);
  a.read_blocking({{1, 1}, {2, 3}}, as_writable(inner));
  CHECK(inner == std::vector<std::int32_t>{6, 7});
  std::vector<std::int32_t> across(4);
  a.read_blocking({{1, 2}, {3, 4}}, as_writable(across));
  CHECK(across == std::vector<std::int32_t>{7, 8, 11, 12});
  std::vector<std::int32_t> rows(8);
  a.read_blocking({{1, 0}, {3, 4}}, as_writable(rows));
  CHECK(rows == iota_vec(8, 5));

  Bytes shorter = stored(rt, store, "c/1/0");
  shorter.resize(shorter.size() - 4);
  asio::co_spawn(rt.io_executor(), store->set("c/1/0", shorter), asio::use_future).get();
  for (const Region& r : {Region::all(a.shape()), Region{{3, 1}, {4, 2}}}) {
    try {
      a.read_blocking(r);
      FAIL("expected CorruptChunk");
    } catch (const CorruptChunk& e) {
      CHECK(e.key() == "c/1/0");
      CHECK(e.field() == "bytes");
    }
  }
}

TEST_CASE("whole plain-copy chunks are read in place exactly where they land contiguously", "[engine]") {
  // A store that reads in place (ReadOptions::into) gets each whole [bytes]
  // chunk's place in the output; edge chunks, partial chunks, chunks that
  // land in strided rows and computed chunks go through the pipeline.
  struct Case {
    std::vector<std::uint64_t> shape, chunks;
    const char* codecs;
    Region selection;
    std::uint64_t in_place;  // chunks read in place
  };
  const char* bytes = R"([{"name":"bytes","configuration":{"endian":"little"}}])";
  const Case cases[] = {
      {{4, 4}, {2, 4}, bytes, Region::all({4, 4}), 2},       // whole rows
      {{4, 4}, {1, 4}, bytes, {{1, 0}, {3, 4}}, 2},          // rows of a selection
      {{4, 4}, {4, 2}, bytes, Region::all({4, 4}), 0},       // strided in the output
      {{5, 4}, {2, 4}, bytes, Region::all({5, 4}), 2},       // the edge chunk is partial
      {{4, 4}, {2, 4}, bytes, {{0, 1}, {4, 4}}, 0},          // partial chunks
      {{2, 1, 4}, {1, 1, 4}, bytes, Region::all({2, 1, 4}), 2},
      {{4, 4}, {2, 4}, kComputeChains[1], Region::all({4, 4}), 0},  // zstd
      {{4, 4}, {2, 4}, kComputeChains[4], Region::all({4, 4}), 0},  // big-endian bytes
  };
  for (const auto& c : cases) {
    INFO(c.codecs << ", chunks of " << c.chunks.size() << " dims, " << c.chunks[0] << " rows");
    Runtime rt({.codec_threads = 1});
    auto store = std::make_shared<test::InPlaceStore>();
    auto a = Array::create_blocking(rt, store, "", make_meta(c.shape, c.chunks, DataTypeKind::int32, codecs_json(c.codecs)));
    std::uint64_t n = 1;
    for (auto s : c.shape) n *= s;
    const auto data = iota_vec(n);
    a.write_blocking(Region::all(a.shape()), as_bytes(data));
    const auto result = a.read_blocking(c.selection);
    const auto got = result.as<std::int32_t>();
    // The selection's elements in C order (the last dimension fastest).
    std::vector<std::int32_t> expected;
    std::vector<std::uint64_t> at = c.selection.start;
    for (bool more = true; more;) {
      std::uint64_t flat = 0;
      for (std::size_t d = 0; d < at.size(); ++d) flat = flat * c.shape[d] + at[d];
      expected.push_back(data[flat]);
      more = false;
      for (std::size_t d = at.size(); d-- > 0;) {
        if (++at[d] < c.selection.stop[d]) {
          more = true;
          break;
        }
        at[d] = c.selection.start[d];
      }
    }
    CHECK(std::vector<std::int32_t>(got.begin(), got.end()) == expected);
    CHECK(store->in_place == c.in_place);
  }
}

TEST_CASE("bad calls get typed errors naming the key and the field", "[engine][errors]") {
  Runtime rt({.codec_threads = 1});
  auto store = std::make_shared<MemoryStore>();
  auto a = Array::create_blocking(rt, store, "",
                                  make_meta({4}, {2}, DataTypeKind::int32, codecs_json(kComputeChains[2])));
  std::vector<std::int32_t> buf(4);
  CHECK_THROWS_AS(a.read_blocking({{0}, {5}}, as_writable(buf)), InvalidArgument);
  CHECK_THROWS_AS(a.read_blocking({{0}, {3}}, as_writable(buf)), InvalidArgument);  // buffer size
  CHECK_THROWS_AS(a.read_blocking({{0, 0}, {1, 1}}, as_writable(buf)), InvalidArgument);
  // A corrupted chunk: the crc32c mismatch names the chunk key and the codec.
  const auto data = iota_vec(4);
  a.write_blocking(Region::all(a.shape()), as_bytes(data));
  Bytes bad = stored(rt, store, "c/1");
  bad[0] ^= std::byte{1};
  asio::co_spawn(rt.io_executor(), store->set("c/1", bad), asio::use_future).get();
  try {
    a.read_blocking(Region::all(a.shape()), as_writable(buf));
    FAIL("expected CorruptChunk");
  } catch (const CorruptChunk& e) {
    CHECK(e.key() == "c/1");
    CHECK(e.field() == "crc32c");
  }
  // Opening a missing array: NotFound naming the metadata key.
  try {
    Array::open_blocking(rt, store, "nope");
    FAIL("expected NotFound");
  } catch (const NotFound& e) {
    CHECK(e.key() == "nope/zarr.json");
  }
  CHECK_THROWS_AS(Array::open_blocking(rt, store, "../x"), InvalidArgument);
}

TEST_CASE("an empty Array or Group handle raises InvalidArgument on use (was a crash)", "[engine][errors][regression]") {
  const Array a;
  const Group g;
  CHECK_FALSE(a);
  CHECK_FALSE(g);
  std::vector<std::int32_t> buf(1);
  CHECK_THROWS_WITH(a.shape(), Catch::Contains("an empty Array handle"));
  CHECK_THROWS_AS(a.read_blocking({{0}, {1}}, as_writable(buf)), InvalidArgument);
  CHECK_THROWS_AS(a.async_read({{0}, {1}}, as_writable(buf), asio::use_future), InvalidArgument);
  CHECK_THROWS_AS(a.resize_blocking({2}), InvalidArgument);
  CHECK_THROWS_WITH(g.members_blocking(), Catch::Contains("an empty Group handle"));
  CHECK_THROWS_AS(g.open_array_blocking("x"), InvalidArgument);
  CHECK_THROWS_AS(g.async_consolidate(asio::use_future), InvalidArgument);
  Runtime rt({.codec_threads = 1});
  CHECK(Array::create_blocking(rt, std::make_shared<MemoryStore>(), "",
                               make_meta({4}, {2}, DataTypeKind::int32, codecs_json(kComputeChains[2]))));
}

TEST_CASE("region errors name the array's metadata key; an inverted region says so (was key '', 'outside')",
          "[engine][errors][regression]") {
  Runtime rt({.codec_threads = 1});
  auto a = Array::create_blocking(rt, std::make_shared<MemoryStore>(), "x/arr",
                                  make_meta({10, 7}, {5, 7}, DataTypeKind::int32, codecs_json(kComputeChains[2])));
  try {
    a.read_blocking(Region{{5, 0}, {4, 7}});
    FAIL("an inverted region was read");
  } catch (const InvalidArgument& e) {
    CHECK(e.key() == "x/arr/zarr.json");
    CHECK(e.field() == "region");
    CHECK(e.detail() == "[5, 4) stops before it starts in dimension 0");
  }
  std::vector<std::int32_t> buf(3);
  try {
    a.read_blocking(Region{{0, 0}, {1, 4}}, as_writable(buf));
    FAIL("a buffer of the wrong size was filled");
  } catch (const InvalidArgument& e) {
    CHECK(e.key() == "x/arr/zarr.json");
    CHECK(e.field() == "buffer");
  }
  CHECK(Region::parse(" 1 : 3 , 2", a.shape()) == Region{{1, 2}, {3, 3}});
  CHECK(Region::parse(" , ", a.shape()) == Region::all(a.shape()));
  CHECK_THROWS_WITH(Region::parse("1 2,", a.shape()), Catch::Contains("'1 2' is not a non-negative integer"));
}

TEST_CASE("groups and reopened arrays keep their metadata", "[engine]") {
  Runtime rt({.codec_threads = 1});
  auto store = std::make_shared<MemoryStore>();
  auto g = Group::create_blocking(rt, store, "g", {{"title", "t"}});
  CHECK(Group::open_blocking(rt, store, "g").attributes()["title"] == "t");
  auto m = make_meta({3}, {2}, DataTypeKind::uint8, codecs_json(R"([{"name":"bytes"}])"));
  m.attributes = {{"units", "m"}};
  m.dimension_names = std::vector<std::optional<std::string>>{"x"};
  Array::create_blocking(rt, store, "g/a", m);
  auto a = Array::open_blocking(rt, store, "g/a");
  CHECK(a.metadata().attributes["units"] == "m");
  CHECK(a.metadata().dimension_names->at(0) == "x");
  CHECK_THROWS_AS(Group::open_blocking(rt, store, "g/a"), InvalidMetadata);
  CHECK(Region::parse("0:2", {3}).stop == std::vector<std::uint64_t>{2});
  CHECK(Region::parse(":,1", {3, 4}).start == std::vector<std::uint64_t>{0, 1});
  CHECK_THROWS_AS(Region::parse("0:9", {3}), InvalidArgument);
}

TEST_CASE("a write of thousands of chunks to the filesystem store completes (no io_uring stall)",
          "[engine][regression]") {
  // Regression: set/erase were not bounded by max_inflight_requests; 4096
  // concurrent file writes completing at once stalled Boost 1.81's io_uring
  // service and the call never returned.
  Runtime rt({.codec_threads = 2});
  const auto dir = std::filesystem::temp_directory_path() / ("zarrcoro-many-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  auto store = std::make_shared<FilesystemStore>(rt.io_executor(), dir);
  auto a = Array::create_blocking(
      rt, store, "",
      make_meta({4096 * 16}, {16}, DataTypeKind::int32, codecs_json(R"([{"name":"bytes","configuration":{"endian":"little"}}])")));
  const auto data = iota_vec(4096 * 16);
  a.write_blocking(Region::all(a.shape()), as_bytes(data));
  std::vector<std::int32_t> back(data.size());
  a.read_blocking(Region::all(a.shape()), as_writable(back));
  CHECK(back == data);
  CHECK(keys(rt, store, "c/").size() == 4096);
  std::filesystem::remove_all(dir);
}

TEST_CASE("compressed chunks stored a page, two pages and three pages long, and longer than their size hint, read "
          "back exactly from the filesystem store",
          "[engine][regression]") {
  // The engine asks the filesystem store for compressed chunks with a size
  // hint (their decoded size and a margin), which it reads without an
  // fstat. Chunks of three pages decoded, padded with a zstd skippable
  // frame (RFC 8878; what a zstd decoder skips) to one, two and three pages
  // (within the hint: each read that ends at a page must find the end of
  // the file with one more read) and to four pages and a byte (longer than
  // the hint: the usual path).
  const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  const std::uint64_t chunk = 3 * page / sizeof(std::int32_t);
  Runtime rt({.codec_threads = 2});
  test::TempDir tmp("size-hint");
  auto store = std::make_shared<FilesystemStore>(rt.io_executor(), tmp.path);
  auto a = Array::create_blocking(rt, store, "",
                                  make_meta({5 * chunk}, {chunk}, DataTypeKind::int32,
                                            codecs_json(R"([{"name":"bytes","configuration":{"endian":"little"}},
                                                            {"name":"zstd","configuration":{"level":1}}])")));
  std::vector<std::int32_t> data(4 * chunk);  // chunk 4 is never written: fill_value
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<std::int32_t>(i % 100 + i / chunk);
  a.write_blocking(Region::parse("0:" + std::to_string(4 * chunk), a.shape()), as_bytes(data));
  auto pad_to = [&](int c, std::size_t size) {
    const auto path = tmp.path / "c" / std::to_string(c);
    Bytes bytes = test::read_file(path);
    REQUIRE(bytes.size() + 8 <= size);
    const std::uint32_t magic = 0x184D2A50, payload = static_cast<std::uint32_t>(size - bytes.size() - 8);
    for (int i = 0; i < 4; ++i) bytes.push_back(std::byte(magic >> (8 * i)));
    for (int i = 0; i < 4; ++i) bytes.push_back(std::byte(payload >> (8 * i)));
    bytes.resize(size, std::byte{0x5A});
    std::ofstream(path, std::ios::binary | std::ios::trunc)
        .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    REQUIRE(std::filesystem::file_size(path) == size);
  };
  pad_to(0, page);
  pad_to(1, 2 * page);
  pad_to(2, 3 * page);
  pad_to(3, 4 * page + 1);
  std::vector<std::int32_t> back(5 * chunk, -1);
  for (int round = 0; round < 2; ++round) {  // the second with the files surely in the page cache
    a.read_blocking(Region::all(a.shape()), as_writable(back));
    CHECK(std::equal(data.begin(), data.end(), back.begin()));
    CHECK(std::all_of(back.begin() + static_cast<std::ptrdiff_t>(4 * chunk), back.end(),
                      [](std::int32_t v) { return v == 0; }));
  }
}

namespace {

// A memory store that answers try_read_now only for keys `answers_now`
// accepts (the others go through read), counting both paths, and can fail
// one key's try_read_now.
class SplitStore : public MemoryStore {
 public:
  std::function<bool(const std::string&)> answers_now = [](const std::string&) { return true; };
  std::function<void()> before_answer;  // called first in each try_read_now
  std::string fail_key;
  std::atomic<std::uint64_t> now_answers{0}, reads{0};

  bool fail_many = false;  // try_read_now_many itself throws (out of memory)
  void try_read_now_many(std::span<const std::string> keys, std::span<const ReadOptions> options,
                         std::span<ReadNow> out) override {
    if (fail_many) throw std::bad_alloc();
    Store::try_read_now_many(keys, options, out);  // this try_read_now per key
  }
  std::optional<ReadResult> try_read_now(const std::string& key, const ReadOptions& options) override {
    {
      std::lock_guard lk(mu);
      now_threads.insert(std::this_thread::get_id());
    }
    if (before_answer) before_answer();
    if (key == fail_key) throw StoreError(key, "", "injected failure");
    if (!answers_now(key)) return std::nullopt;
    ++now_answers;
    return MemoryStore::try_read_now(key, options);
  }
  std::set<std::thread::id> threads_asked() {
    std::lock_guard lk(mu);
    return std::exchange(now_threads, {});
  }
  std::mutex mu;
  std::set<std::thread::id> now_threads;  // where try_read_now was called (under mu)
  std::chrono::milliseconds delay{0};  // before each read answers
  awaitable<ReadResult> read(std::string key, ReadOptions options) override {
    ++reads;
    if (delay.count() > 0) {
      asio::steady_timer timer(co_await asio::this_coro::executor, delay);
      co_await timer.async_wait(asio::use_awaitable);
    }
    co_return co_await MemoryStore::read(std::move(key), std::move(options));
  }
};

json raw_codecs() { return codecs_json(R"([{"name":"bytes","configuration":{"endian":"little"}}])"); }

// Reads chunks first, first + 1, ... (count of them, modulo `chunks`) of
// the 8-element int32 chunks of `a`, one call each, appending them to *out.
// A store error ends it, with the error's key in *failed.
asio::awaitable<void> read_chunk_run(Array a, std::uint64_t first, int count, std::uint64_t chunks,
                                     std::vector<std::int32_t>* out, std::string* failed) {
  try {
    for (int i = 0; i < count; ++i) {
      const std::uint64_t c = (first + static_cast<std::uint64_t>(i)) % chunks;
      std::vector<std::int32_t> chunk(8, -1);
      const Region r{{c * 8}, {c * 8 + 8}};
      co_await a.read(r, as_writable(chunk));
      out->insert(out->end(), chunk.begin(), chunk.end());
    }
  } catch (const StoreError& e) {
    *failed = e.key();
  }
}

// An array of `chunks` raw int32 chunks of 8 elements in `store`, holding
// iota_vec: 1, 2, 3, ... (what read_chunk_run reads).
Array iota_chunks(Runtime& rt, std::shared_ptr<Store> store, std::uint64_t chunks) {
  auto meta = make_meta({chunks * 8}, {8}, DataTypeKind::int32, raw_codecs());
  auto a = Array::create_blocking(rt, std::move(store), "", std::move(meta));
  a.write_blocking(Region::all(a.shape()), as_bytes(iota_vec(chunks * 8)));
  return a;
}

// What read_chunk_run reads of an array holding iota_vec: 1, 2, 3, ...
std::vector<std::int32_t> chunk_run(std::uint64_t first, int count, std::uint64_t chunks) {
  std::vector<std::int32_t> want;
  for (int i = 0; i < count; ++i) {
    const auto c = static_cast<std::int32_t>((first + static_cast<std::uint64_t>(i)) % chunks);
    for (std::int32_t k = 1; k <= 8; ++k) want.push_back(c * 8 + k);  // iota_vec: 1, 2, 3, ...
  }
  return want;
}

}  // namespace

TEST_CASE("chunks the store answers at once and chunks it answers later land exactly", "[engine]") {
  const bool compute = GENERATE(false, true);
  INFO((compute ? "zstd" : "raw bytes"));
  Runtime rt({.codec_threads = 2});
  auto store = std::make_shared<SplitStore>();
  auto a = Array::create_blocking(rt, store, "",
                                  make_meta({100}, {5}, DataTypeKind::int32,
                                            compute ? codecs_json(kComputeChains[1]) : raw_codecs()));
  const auto data = iota_vec(100);
  a.write_blocking(Region::all(a.shape()), as_bytes(data));
  // Chunks 0, 2, 4, ... at once; 1, 3, 5, ... through read.
  store->answers_now = [](const std::string& key) { return std::stoi(key.substr(key.rfind('/') + 1)) % 2 == 0; };
  store->now_answers = store->reads = 0;
  std::vector<std::int32_t> back(100);
  a.read_blocking(Region::all(a.shape()), as_writable(back));
  CHECK(back == data);
  CHECK(store->now_answers == 10);
  CHECK(store->reads == 10);
}

// RuntimeOptions::caller_reads: a read of a few chunks with nothing to
// compute, which the store answers at once, is answered on the caller's
// thread, blocking or awaited: no hop to the io_context, no batch, no pool job.
TEST_CASE("a small read with nothing to compute is answered on the calling thread, with no hop",
          "[engine][invariant]") {
  Runtime rt({.codec_threads = 2});
  auto store = std::make_shared<SplitStore>();
  auto a = Array::create_blocking(rt, store, "", make_meta({64}, {8}, DataTypeKind::int32, raw_codecs()));
  const auto data = iota_vec(40);  // chunks 0-4; 5-7 are missing and read as the fill value 0
  a.write_blocking({{0}, {40}}, as_bytes(data));
  rt.reset_stats();
  store->reads = 0;
  store->threads_asked();
  std::vector<std::int32_t> part(8, -1);  // parts of chunks 0 and 1
  a.read_blocking({{3}, {11}}, as_writable(part));
  CHECK(part == iota_vec(8, 4));
  std::vector<std::int32_t> tail(14, -1);  // part of chunk 4, chunk 5 whole, part of chunk 6: 10 fills
  a.read_blocking({{36}, {50}}, as_writable(tail));
  std::vector<std::int32_t> want{37, 38, 39, 40};
  want.resize(14, 0);
  CHECK(tail == want);
  std::vector<std::int32_t> whole(8, -1);  // chunk 1, read into place
  asio::io_context client;
  auto done = asio::co_spawn(client, a.read({{8}, {16}}, as_writable(whole)), asio::use_future);
  client.run();
  done.get();
  CHECK(whole == iota_vec(8, 9));
  const RuntimeStats s = rt.stats();
  CHECK(s.caller_reads == 3);
  CHECK(s.pool_submissions == 0);
  CHECK(s.inline_batches == 0);
  CHECK(s.chunks == 0);
  CHECK(store->reads == 0);
  CHECK(store->threads_asked() == std::set<std::thread::id>{std::this_thread::get_id()});

  // caller_reads = false: the same reads go through the io_context.
  Runtime io_only({.codec_threads = 2, .caller_reads = false});
  auto b = Array::open_blocking(io_only, store, "");
  std::fill(part.begin(), part.end(), -1);
  b.read_blocking({{3}, {11}}, as_writable(part));
  CHECK(part == iota_vec(8, 4));
  CHECK(io_only.stats().caller_reads == 0);
  CHECK(io_only.stats().inline_batches == 1);
  CHECK(store->threads_asked().count(std::this_thread::get_id()) == 0);
}

// Coroutines awaiting small reads on one thread: the reads started before
// that thread's next turn go together, and the runtime's I/O thread answers
// some of them, so that one client thread's reads use two cores.
TEST_CASE("small reads awaited by many coroutines of one thread are shared with the I/O thread, each exact",
          "[engine][invariant]") {
  Runtime rt({.codec_threads = 2});
  auto store = std::make_shared<SplitStore>();
  constexpr std::uint64_t kChunks = 32;
  auto a = iota_chunks(rt, store, kChunks);
  const auto io_thread = asio::post(rt.io_executor(), asio::use_future([] { return std::this_thread::get_id(); })).get();
  // Past the first 16 reads (those answered at once until a read goes
  // through a turn to find the other coroutines), the calling thread's reads
  // wait until another thread has answered one: the I/O thread must take part.
  const auto caller = std::this_thread::get_id();
  std::mutex mu;
  std::condition_variable cv;
  int caller_calls = 0;
  bool other_answered = false, gave_up = false;
  store->before_answer = [&] {
    std::unique_lock lock(mu);
    if (std::this_thread::get_id() != caller) {
      other_answered = true;
      cv.notify_all();
    } else if (++caller_calls > 16 && !gave_up) {
      gave_up = !cv.wait_for(lock, test::scaled(std::chrono::seconds(30)), [&] { return other_answered; });
    }
  };
  rt.reset_stats();
  store->threads_asked();
  store->reads = 0;
  constexpr int kReaders = 8, kReads = 40;
  asio::io_context client;
  std::vector<std::vector<std::int32_t>> got(kReaders);
  std::vector<std::string> failed(kReaders);
  for (int r = 0; r < kReaders; ++r)
    asio::co_spawn(client, read_chunk_run(a, static_cast<std::uint64_t>(r) * 5, kReads, kChunks, &got[r], &failed[r]),
                   asio::detached);
  client.run();
  for (int r = 0; r < kReaders; ++r) {
    INFO("reader " << r);
    CHECK(failed[r].empty());
    CHECK(got[r] == chunk_run(static_cast<std::uint64_t>(r) * 5, kReads, kChunks));
  }
  CHECK(other_answered);
  CHECK(store->threads_asked() == std::set<std::thread::id>{caller, io_thread});
  const RuntimeStats s = rt.stats();
  CHECK(s.caller_reads == kReaders * kReads);
  CHECK(s.chunks == 0);
  CHECK(s.pool_submissions == 0);
  CHECK(store->reads == 0);
}

// The helper is called in but cannot come: its I/O thread is held. The
// readers' turn must still answer every read, however many it leaves
// waiting for the helper at a time.
TEST_CASE("reads waiting for a held I/O thread: the readers' turn answers them all (was: half waited for the helper)",
          "[engine][regression]") {
  Runtime rt({.codec_threads = 1});
  auto store = std::make_shared<SplitStore>();
  constexpr std::uint64_t kChunks = 32;
  auto a = iota_chunks(rt, store, kChunks);
  std::promise<void> release, holding;
  auto held = release.get_future().share();
  asio::post(rt.io_executor(), [held, &holding] {
    holding.set_value();
    held.wait();
  });
  holding.get_future().wait();
  store->threads_asked();
  constexpr int kReaders = 8, kReads = 40;
  std::vector<std::vector<std::int32_t>> got(kReaders);
  std::vector<std::string> failed(kReaders);
  asio::io_context client;
  for (int r = 0; r < kReaders; ++r)
    asio::co_spawn(client, read_chunk_run(a, static_cast<std::uint64_t>(r) * 5, kReads, kChunks, &got[r], &failed[r]),
                   asio::detached);
  client.run_for(test::scaled(std::chrono::seconds(30)));  // a hang fails here
  const bool all_done = client.stopped();
  release.set_value();
  REQUIRE(all_done);
  for (int r = 0; r < kReaders; ++r) {
    INFO("reader " << r);
    CHECK(failed[r].empty());
    CHECK(got[r] == chunk_run(static_cast<std::uint64_t>(r) * 5, kReads, kChunks));
  }
  CHECK(store->threads_asked() == std::set<std::thread::id>{std::this_thread::get_id()});
  CHECK(rt.stats().caller_reads == kReaders * kReads);
}

TEST_CASE("a coroutine whose small reads are answered at once lets its thread's other handlers run (was: not until its last read)",
          "[engine]") {
  Runtime rt({.codec_threads = 1});
  auto store = std::make_shared<SplitStore>();
  auto a = iota_chunks(rt, store, 8);
  asio::io_context client;
  std::vector<std::int32_t> got;
  std::string failed;
  asio::co_spawn(client, read_chunk_run(a, 0, 100, 8, &got, &failed), asio::detached);
  std::size_t read_before_other = 0;
  asio::post(client, [&] { read_before_other = got.size() / 8; });
  client.run();
  CHECK(got == chunk_run(0, 100, 8));
  CHECK(read_before_other == 15);  // the 16th read went through a turn, after this handler
  CHECK(rt.stats().caller_reads == 100);
}

TEST_CASE("a store error in reads that went together fails that read alone, with its key", "[engine][errors]") {
  Runtime rt({.codec_threads = 1});
  auto store = std::make_shared<SplitStore>();
  auto a = iota_chunks(rt, store, 8);
  store->fail_key = "c/7";
  asio::io_context client;
  constexpr int kReaders = 6;
  std::vector<std::vector<std::int32_t>> got(kReaders);
  std::vector<std::string> failed(kReaders);
  // Reader r reads chunks r, r + 1, ... r + 6 (of 0-6 and 7 only at its end):
  // reader 0 never meets c/7; reader r > 0 fails at its (7 - r)-th read.
  for (int r = 0; r < kReaders; ++r)
    asio::co_spawn(client, read_chunk_run(a, static_cast<std::uint64_t>(r), 7, 64, &got[r], &failed[r]),
                   asio::detached);
  client.run();
  CHECK(failed[0].empty());
  CHECK(got[0] == chunk_run(0, 7, 64));
  for (int r = 1; r < kReaders; ++r) {
    INFO("reader " << r);
    CHECK(failed[r] == "c/7");
    CHECK(got[r] == chunk_run(static_cast<std::uint64_t>(r), 7 - r, 64));
  }
}

TEST_CASE("reads waiting to go together when their io_context is destroyed are dropped with their coroutines",
          "[engine][lifetime]") {
  Runtime rt({.codec_threads = 1});
  auto store = std::make_shared<SplitStore>();
  auto a = iota_chunks(rt, store, 8);
  std::vector<std::int32_t> got0, got1;
  std::string failed0, failed1;
  std::future<void> done0, done1;
  {
    asio::io_context client;
    // The first coroutine's 16th read waits for a turn, and the second's
    // first read joins it; the client stops before that turn runs.
    done0 = asio::co_spawn(client, read_chunk_run(a, 0, 100, 8, &got0, &failed0), asio::use_future);
    done1 = asio::co_spawn(client, read_chunk_run(a, 0, 100, 8, &got1, &failed1), asio::use_future);
    asio::post(client, [&client] { client.stop(); });
    client.run();
    CHECK(got0.size() == 15 * 8);
    CHECK(got1.empty());
  }
  CHECK_THROWS_AS(done0.get(), std::future_error);  // the coroutines were destroyed, not resumed
  CHECK_THROWS_AS(done1.get(), std::future_error);
  // The thread's later reads, on another io_context, are answered.
  asio::io_context next;
  std::vector<std::int32_t> got;
  std::string failed;
  asio::co_spawn(next, read_chunk_run(a, 3, 40, 8, &got, &failed), asio::detached);
  next.run();
  CHECK(got == chunk_run(3, 40, 8));
}

TEST_CASE("a read the caller cannot answer at once, or that computes, goes through the io_context exactly",
          "[engine]") {
  Runtime rt({.codec_threads = 2});
  const bool compute = GENERATE(false, true);
  INFO((compute ? "zstd" : "raw bytes, one chunk not answered at once"));
  auto store = std::make_shared<SplitStore>();
  auto a = Array::create_blocking(rt, store, "",
                                  make_meta({64}, {8}, DataTypeKind::int32,
                                            compute ? codecs_json(kComputeChains[1]) : raw_codecs()));
  const auto data = iota_vec(64);
  a.write_blocking(Region::all(a.shape()), as_bytes(data));
  store->answers_now = [](const std::string& key) { return key != "c/1"; };
  rt.reset_stats();
  store->reads = 0;
  std::vector<std::int32_t> part(12, -1);  // chunks 0 and 1
  a.read_blocking({{2}, {14}}, as_writable(part));
  CHECK(part == iota_vec(12, 3));
  CHECK(rt.stats().caller_reads == 0);
  CHECK(store->reads == 1);  // c/1 (the others answered at once, on the I/O thread)
  // Too many chunks for the caller (kCallerReadChunks = 4): all through the io_context.
  store->answers_now = [](const std::string&) { return true; };
  std::vector<std::int32_t> five(40, -1);
  a.read_blocking({{0}, {40}}, as_writable(five));
  CHECK(five == iota_vec(40));
  CHECK(rt.stats().caller_reads == 0);
}

TEST_CASE("a small read answered on the caller raises the store's error and a wrong-sized chunk's, with the key",
          "[engine][errors]") {
  Runtime rt({.codec_threads = 1});
  auto store = std::make_shared<SplitStore>();
  auto a = Array::create_blocking(rt, store, "", make_meta({16}, {8}, DataTypeKind::int32, raw_codecs()));
  a.write_blocking(Region::all(a.shape()), as_bytes(iota_vec(16)));
  store->fail_key = "c/0";
  std::vector<std::int32_t> out(8);
  try {
    a.read_blocking({{0}, {8}}, as_writable(out));
    FAIL("expected StoreError");
  } catch (const StoreError& e) {
    CHECK(e.key() == "c/0");
  }
  store->fail_key.clear();
  Bytes shorter = stored(rt, store, "c/1");
  shorter.resize(shorter.size() - 4);
  asio::co_spawn(rt.io_executor(), store->set("c/1", shorter), asio::use_future).get();
  for (const Region& r : {Region{{8}, {16}}, Region{{9}, {10}}}) {
    try {
      a.read_blocking(r);
      FAIL("expected CorruptChunk");
    } catch (const CorruptChunk& e) {
      CHECK(e.key() == "c/1");
    }
  }
  CHECK(rt.stats().caller_reads == 0);
}

TEST_CASE("a Runtime destroyed while a read waits for its store lets the read finish instead of hanging",
          "[engine][lifetime]") {
  // The pool used to be joined first: idle while the read waited for the
  // store, it stopped, and the read's codec batch then never ran, so the
  // I/O thread's join waited forever (an export whose write failed with the
  // next block's read in flight hung there).
  auto store = std::make_shared<SplitStore>();
  auto rt = std::make_unique<Runtime>(RuntimeOptions{.codec_threads = 2});
  auto a = std::make_optional(Array::create_blocking(
      *rt, store, "", make_meta({100}, {5}, DataTypeKind::int32, codecs_json(kComputeChains[1]))));  // zstd: pool work
  const auto data = iota_vec(100);
  a->write_blocking(Region::all(a->shape()), as_bytes(data));
  store->answers_now = [](const std::string&) { return false; };
  store->delay = std::chrono::milliseconds(100);
  store->reads = 0;  // the chunk reads alone (creating read the metadata keys)
  std::vector<std::int32_t> back(100);
  auto read = asio::co_spawn(rt->io_executor(), a->read(Region::all(a->shape()), as_writable(back)), asio::use_future);
  a.reset();
  auto destroyed = std::async(std::launch::async, [&] { rt.reset(); });
  if (destroyed.wait_for(test::scaled(std::chrono::milliseconds(30000))) != std::future_status::ready) {
    FAIL_CHECK("~Runtime hung with a read in flight");
    std::_Exit(1);  // the hung destructor cannot be unwound
  }
  read.get();
  CHECK(back == data);
  CHECK(store->reads == 20);
}

TEST_CASE("a failing try_read_now fails the read with the store's error and releases its budget", "[engine][errors]") {
  // A budget of one chunk: a leaked reservation stalls the next read.
  Runtime rt({.codec_threads = 1, .max_inflight_bytes = 20});
  auto store = std::make_shared<SplitStore>();
  auto a = Array::create_blocking(rt, store, "", make_meta({100}, {5}, DataTypeKind::int32, raw_codecs()));
  const auto data = iota_vec(100);
  a.write_blocking(Region::all(a.shape()), as_bytes(data));
  store->fail_key = "c/7";
  std::vector<std::int32_t> back(100);
  try {
    a.read_blocking(Region::all(a.shape()), as_writable(back));
    FAIL("the read succeeded");
  } catch (const StoreError& e) {
    CHECK(e.key() == "c/7");
    CHECK_THAT(e.what(), Catch::Contains("injected failure"));
  }
  store->fail_key.clear();
  auto again = asio::co_spawn(rt.io_executor(), a.read(Region::all(a.shape()), as_writable(back)), asio::use_future);
  REQUIRE(again.wait_for(test::scaled(std::chrono::milliseconds(10000))) == std::future_status::ready);
  again.get();
  CHECK(back == data);
}

TEST_CASE("a store failing a whole window of reads at once fails the read and releases the window's budget",
          "[engine][errors]") {
  // A budget of one window's chunks: leaked reservations stall the next read.
  Runtime rt({.codec_threads = 1, .max_inflight_bytes = 20 * 32});
  auto store = std::make_shared<SplitStore>();
  auto a = Array::create_blocking(rt, store, "", make_meta({1000}, {5}, DataTypeKind::int32, raw_codecs()));
  const auto data = iota_vec(1000);
  a.write_blocking(Region::all(a.shape()), as_bytes(data));
  store->fail_many = true;
  std::vector<std::int32_t> back(1000);
  CHECK_THROWS_AS(a.read_blocking(Region::all(a.shape()), as_writable(back)), std::bad_alloc);
  store->fail_many = false;
  auto again = asio::co_spawn(rt.io_executor(), a.read(Region::all(a.shape()), as_writable(back)), asio::use_future);
  REQUIRE(again.wait_for(test::scaled(std::chrono::milliseconds(10000))) == std::future_status::ready);
  again.get();
  CHECK(back == data);
}

TEST_CASE("a long run of chunks fetched at once lets other handlers on the io_context run", "[engine][invariant]") {
  // 20000 chunks answered at once take far longer than the engine's 200 us
  // slice: a handler posted after the read started runs before the last
  // chunk is fetched.
  Runtime rt({.codec_threads = 1});
  auto store = std::make_shared<SplitStore>();
  auto a = Array::create_blocking(rt, store, "", make_meta({20000}, {1}, DataTypeKind::int32, raw_codecs()));
  const auto data = iota_vec(20000);
  a.write_blocking(Region::all(a.shape()), as_bytes(data));
  store->now_answers = 0;
  std::vector<std::int32_t> back(20000);
  auto read = asio::co_spawn(rt.io_executor(), a.read(Region::all(a.shape()), as_writable(back)), asio::use_future);
  std::promise<std::uint64_t> fetched_then;
  asio::post(rt.io_executor(), [&] { fetched_then.set_value(store->now_answers.load()); });
  const std::uint64_t fetched = fetched_then.get_future().get();
  read.get();
  CHECK(back == data);
  CHECK(store->now_answers == 20000);
  CHECK(fetched < 20000);
}
