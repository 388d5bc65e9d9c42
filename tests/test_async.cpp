// The Asio-native API: completion-token forms (use_future, callbacks,
// deferred, as_tuple, use_awaitable), error codes, and per-operation
// cancellation and deadlines of reads and writes on slow and real stores.
#include <atomic>
#include <cstring>
#include <future>
#include <numeric>
#include <thread>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/experimental/parallel_group.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/system_executor.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/use_future.hpp>
#include <catch2/catch.hpp>

#include <zarrcoro/array.hpp>
#include <zarrcoro/error.hpp>
#include <zarrcoro/runtime.hpp>
#include <zarrcoro/spawn.hpp>
#include <zarrcoro/store/filesystem.hpp>
#include <zarrcoro/store/memory.hpp>

#include "engine/runtime_access.hpp"
#include "support.hpp"

using namespace zarrcoro;
using nlohmann::json;
namespace asio = boost::asio;
using namespace std::chrono_literals;

namespace {

const char* kZstd = R"([{"name":"bytes","configuration":{"endian":"little"}},{"name":"zstd","configuration":{"level":1}}])";

ArrayMetadata meta_1d(std::uint64_t n, std::uint64_t chunk) {
  ArrayMetadata m;
  m.shape = {n};
  m.chunk_shape = {chunk};
  m.data_type = DataTypeKind::int32;
  m.codecs = json::parse(kZstd);
  return m;
}

std::vector<std::int32_t> iota_vec(std::size_t n, std::int32_t start) {
  std::vector<std::int32_t> v(n);
  std::iota(v.begin(), v.end(), start);
  return v;
}

ByteSpan as_bytes(const auto& v) { return std::as_bytes(std::span(v)); }
MutableByteSpan as_writable(auto&& v) { return std::as_writable_bytes(std::span(v)); }


template <class T>
T wait_for(std::future<T>& f) {
  REQUIRE(f.wait_for(test::scaled(30s)) == std::future_status::ready);
  return f.get();
}

// A MemoryStore whose gets and writes after the first `fast` of each wait
// for `delay` (far longer than any test runs: only cancellation ends them).
// It counts what started, what the delay held and what was cancelled.
class SlowStore final : public Store {
 public:
  explicit SlowStore(std::shared_ptr<Store> inner) : inner_(std::move(inner)) {}
  std::size_t fast_gets = 0, fast_writes = 0;
  std::chrono::hours delay{1};
  std::atomic<std::size_t> gets{0}, writes{0}, held{0}, cancelled{0};

  awaitable<ReadResult> read(std::string key, ReadOptions options) override {
    co_await hold(gets++ >= fast_gets);
    co_return co_await inner_->read(std::move(key), std::move(options));
  }
  awaitable<std::optional<Generation>> write(std::string key, std::optional<Bytes> value,
                                             WriteOptions options) override {
    co_await hold(writes++ >= fast_writes);
    co_return co_await inner_->write(std::move(key), std::move(value), std::move(options));
  }
  awaitable<std::vector<std::string>> list(std::string prefix) override {
    co_return co_await inner_->list(std::move(prefix));
  }
  std::string url() const override { return "slow+" + inner_->url(); }

 private:
  awaitable<void> hold(bool slow) {
    if (!slow) co_return;
    ++held;
    asio::steady_timer timer(co_await asio::this_coro::executor, delay);
    auto [ec] = co_await timer.async_wait(asio::as_tuple(asio::use_awaitable));
    if (ec == asio::error::operation_aborted) ++cancelled;
    if (ec) throw boost::system::system_error(ec);
  }
  std::shared_ptr<Store> inner_;
};

// Waits until `pred` holds (the runtime's threads make it so), or fails.
template <class Pred>
void wait_until(Pred pred) {
  const auto give_up = std::chrono::steady_clock::now() + test::scaled(30s);
  while (!pred()) {
    REQUIRE(std::chrono::steady_clock::now() < give_up);
    std::this_thread::sleep_for(1ms);
  }
}

}  // namespace

TEST_CASE("every completion-token style reads and writes the same values") {
  Runtime rt;
  auto store = std::make_shared<MemoryStore>();
  const auto a = Array::async_create(rt, store, "a", meta_1d(100, 10), CreateMode::fail_if_exists, asio::use_future).get();
  const auto data = iota_vec(100, 1);

  SECTION("use_future") {
    a.async_write(Region::all(a.shape()), as_bytes(data), asio::use_future).get();
    std::vector<std::int32_t> back(100);
    a.async_read(Region::all(a.shape()), as_writable(back), asio::use_future).get();
    CHECK(back == data);
    const NdArray owned = a.async_read(Region{{5}, {8}}, asio::use_future).get();
    CHECK(std::vector<std::int32_t>(owned.as<std::int32_t>().begin(), owned.as<std::int32_t>().end()) ==
          std::vector<std::int32_t>{6, 7, 8});
    const NdArray none = a.async_read(Region{{7}, {7}}, asio::use_future).get();
    CHECK(none.dtype == a.dtype());
    CHECK(none.shape == std::vector<std::uint64_t>{0});
    CHECK(none.data.empty());
  }
  SECTION("a callback runs on the runtime's I/O thread, with no error") {
    std::promise<bool> on_io;
    a.async_write(Region::all(a.shape()), as_bytes(data), [&](std::exception_ptr e) {
      on_io.set_value(!e && rt.on_io_thread());
    });
    auto f = on_io.get_future();
    CHECK(wait_for(f));
    std::promise<std::pair<bool, std::vector<std::int32_t>>> got;
    a.async_read(Region{{98}, {100}}, [&](std::exception_ptr e, NdArray r) {
      got.set_value({!e, {r.as<std::int32_t>().begin(), r.as<std::int32_t>().end()}});
    });
    auto g = got.get_future();
    CHECK(wait_for(g) == std::pair<bool, std::vector<std::int32_t>>{true, {99, 100}});
  }
  SECTION("deferred: nothing starts until the deferred operation is initiated") {
    auto op = a.async_write(Region::all(a.shape()), as_bytes(data), asio::deferred);
    CHECK_FALSE(asio::co_spawn(rt.io_executor(), store->exists("a/c/0"), asio::use_future).get());
    std::move(op)(asio::use_future).get();
    CHECK(asio::co_spawn(rt.io_executor(), store->exists("a/c/0"), asio::use_future).get());
  }
  SECTION("use_awaitable and as_tuple in a coroutine") {
    auto task = [](Array a, std::vector<std::int32_t> data) -> asio::awaitable<std::vector<std::int32_t>> {
      co_await a.async_write(Region::all(a.shape()), as_bytes(data), asio::use_awaitable);
      Region first3{{0}, {3}};  // named: g++ 12 and braced temporaries beside co_await
      auto [e, r] = co_await a.async_read(std::move(first3), asio::as_tuple(asio::use_awaitable));
      if (e) std::rethrow_exception(e);
      co_return std::vector<std::int32_t>(r.as<std::int32_t>().begin(), r.as<std::int32_t>().end());
    };
    CHECK(asio::co_spawn(rt.io_executor(), task(a, data), asio::use_future).get() ==
          std::vector<std::int32_t>{1, 2, 3});
  }
}

TEST_CASE("token forms report typed errors and their error codes") {
  Runtime rt;
  auto store = std::make_shared<MemoryStore>();
  const auto a = Array::create_blocking(rt, store, "a", meta_1d(10, 5));

  SECTION("use_future rethrows the typed error") {
    std::vector<std::int32_t> out(3);
    CHECK_THROWS_AS(a.async_read(Region{{8}, {11}}, as_writable(out), asio::use_future).get(), InvalidArgument);
    CHECK_THROWS_AS(a.async_read(Region{{8}, {11}}, asio::use_future).get(), InvalidArgument);
    CHECK_THROWS_AS(Array::async_open(rt, store, "missing", asio::use_future).get(), NotFound);
    CHECK_THROWS_AS(Group::async_open(rt, store, "missing", asio::use_future).get(), NotFound);
  }
  SECTION("a callback gets the exception, to_error_code its code") {
    std::promise<boost::system::error_code> code;
    Array::async_open(rt, store, "missing", [&](std::exception_ptr e, Array) { code.set_value(to_error_code(e)); });
    auto f = code.get_future();
    const auto ec = wait_for(f);
    CHECK(ec == make_error_code(Errc::not_found));
    CHECK(ec.category().name() == std::string("zarrcoro"));
    CHECK(ec.message() == "not found");
    CHECK(to_error_code(nullptr) == boost::system::error_code());
    CHECK(to_error_code(std::make_exception_ptr(Cancelled("", "", "x"))) == asio::error::operation_aborted);
    CHECK(to_error_code(std::make_exception_ptr(CorruptChunk("k", "zstd", "x"))) ==
          make_error_code(Errc::corrupt_chunk));
  }
}

TEST_CASE("store and group token forms") {
  Runtime rt;
  SECTION("memory store (no executor of its own)") {
    auto store = std::make_shared<MemoryStore>();
    const Bytes v = test::hex("01 02 03 04");
    store->async_set("k", v, asio::use_future).get();
    CHECK(store->async_get("k", ByteRange::from(1, 2), asio::use_future).get() == test::hex("02 03"));
    CHECK(store->async_exists("k", asio::use_future).get());
    CHECK(store->async_list("", asio::use_future).get() == std::vector<std::string>{"k"});
    store->async_erase("k", asio::use_future).get();
    CHECK_FALSE(store->async_get("k", ByteRange::all(), asio::use_future).get().has_value());
    CHECK_THROWS_AS(store->async_get("../k", ByteRange::all(), asio::use_future).get(), InvalidArgument);
  }
  SECTION("filesystem store: operations run on its io_context") {
    test::TempDir dir("async");
    auto store = std::make_shared<FilesystemStore>(rt.io_executor(), dir.path);
    CHECK(store->get_executor() == rt.io_executor());
    store->async_set("a/b", test::hex("ff"), asio::use_future).get();
    std::promise<bool> on_io;
    store->async_get("a/b", ByteRange::all(), [&](std::exception_ptr e, std::optional<Bytes> v) {
      on_io.set_value(!e && v == test::hex("ff") && rt.on_io_thread());
    });
    auto f = on_io.get_future();
    CHECK(wait_for(f));
    const auto g = Group::async_create(rt, store, "g", json{{"x", 1}}, 3, CreateMode::fail_if_exists, asio::use_future)
                       .get();
    CHECK(Group::async_open(rt, store, "g", asio::use_future).get().attributes() == json{{"x", 1}});
    Array::create_blocking(rt, store, "g/a", meta_1d(4, 2));
    const auto members = g.async_members(false, asio::use_future).get();
    REQUIRE(members.size() == 1);
    CHECK(members[0].name == "a");
    CHECK(members[0].node_type == NodeType::array);
  }
}

// A read of 64 chunks from a store whose gets after the first 8 never end
// unless cancelled; the read is cancelled once every request slot holds
// such a get (or, with a small byte budget, while it waits for budget).
TEST_CASE("a cancelled read completes with Cancelled, aborts its store requests, decodes nothing more, "
          "releases its budget and never writes the buffer afterwards") {
  const bool budget_bound = GENERATE(false, true);
  CAPTURE(budget_bound);
  RuntimeOptions o;
  o.max_inflight_requests = budget_bound ? 64 : 4;
  o.max_inflight_bytes = budget_bound ? 4 * 16 * 4 : 1 << 20;  // 4 chunks: the spawner waits for budget
  Runtime rt(o);
  auto memory = std::make_shared<MemoryStore>();
  const auto data = iota_vec(64 * 16, 7);
  Array::create_blocking(rt, memory, "a", meta_1d(64 * 16, 16)).write_blocking(Region::all({64 * 16}), as_bytes(data));
  auto slow = std::make_shared<SlowStore>(memory);
  slow->fast_gets = 1;  // the metadata
  const auto a = Array::open_blocking(rt, slow, "a");
  const std::size_t gets_before = slow->gets;
  slow->fast_gets = gets_before + 8;

  std::vector<std::int32_t> out(64 * 16, 0x5a5a5a5a);
  asio::cancellation_signal cancel;
  rt.reset_stats();
  auto done = a.async_read(Region::all(a.shape()), as_writable(out),
                           asio::bind_cancellation_slot(cancel.slot(), asio::use_future));
  const std::size_t in_flight = 4;  // request slots, or chunks of budget
  wait_until([&] { return slow->held == in_flight; });
  const std::size_t gets_at_cancel = slow->gets;
  asio::post(rt.io_executor(), [&] { cancel.emit(asio::cancellation_type::terminal); });
  REQUIRE(done.wait_for(test::scaled(30s)) == std::future_status::ready);
  CHECK_THROWS_AS(done.get(), Cancelled);
  const auto canary = out;
  const auto decodes = rt.stats().codec_calls;

  CHECK(slow->cancelled == in_flight);                  // every held get was aborted
  CHECK(slow->gets == gets_at_cancel);                  // and none started afterwards
  CHECK(gets_at_cancel - gets_before == 8 + in_flight);
  // Budget-bound, the first 8 chunks were decoded to free budget; otherwise
  // they waited for a fuller batch and were skipped.
  CHECK(decodes == (budget_bound ? 8 : 0));

  // The budget and the request slots are back: a read of every chunk (the
  // whole budget and more) from the fast store completes.
  const auto fast = Array::open_blocking(rt, memory, "a");
  std::vector<std::int32_t> back(64 * 16);
  auto full = fast.async_read(Region::all(fast.shape()), as_writable(back), asio::use_future);
  wait_for(full);
  CHECK(back == data);
  CHECK(rt.stats().codec_calls == decodes + 64);  // only the second read decoded
  CHECK(out == canary);
}

TEST_CASE("a deadline on an awaitable read: awaitable_operators race it against a timer") {
  Runtime rt;
  auto memory = std::make_shared<MemoryStore>();
  Array::create_blocking(rt, memory, "a", meta_1d(32 * 16, 16)).write_blocking(Region::all({32 * 16}),
                                                                               as_bytes(iota_vec(32 * 16, 0)));
  auto slow = std::make_shared<SlowStore>(memory);
  slow->fast_gets = 1;  // the metadata
  const auto a = Array::open_blocking(rt, slow, "a");

  auto with_deadline = [](Array a, std::chrono::milliseconds limit) -> asio::awaitable<std::size_t> {
    using namespace asio::experimental::awaitable_operators;
    std::vector<std::int32_t> out(a.shape()[0]);
    asio::steady_timer deadline(co_await asio::this_coro::executor, limit);
    auto read = a.read(Region::all(a.shape()), as_writable(out));  // named first (g++ 12)
    auto timeout = deadline.async_wait(asio::use_awaitable);
    auto winner = co_await (std::move(read) || std::move(timeout));
    co_return winner.index();
  };
  CHECK(asio::co_spawn(rt.io_executor(), with_deadline(a, test::scaled(200ms)), asio::use_future).get() == 1);
  CHECK(slow->held > 0);
  CHECK(slow->cancelled == slow->held);
}

TEST_CASE("a deadline on a token-form read: parallel_group with a timer") {
  Runtime rt;
  auto memory = std::make_shared<MemoryStore>();
  Array::create_blocking(rt, memory, "a", meta_1d(8 * 16, 16)).write_blocking(Region::all({8 * 16}),
                                                                             as_bytes(iota_vec(8 * 16, 0)));
  auto slow = std::make_shared<SlowStore>(memory);
  slow->fast_gets = 1;
  const auto a = Array::open_blocking(rt, slow, "a");
  std::vector<std::int32_t> out(8 * 16);
  asio::steady_timer deadline(rt.io_executor(), test::scaled(200ms));
  auto [order, read_error, timer_error] =
      asio::experimental::make_parallel_group(a.async_read(Region::all(a.shape()), as_writable(out), asio::deferred),
                                              deadline.async_wait(asio::deferred))
          .async_wait(asio::experimental::wait_for_one(), asio::use_future)
          .get();
  CHECK(order[0] == 1);  // the timer completed first
  CHECK(to_error_code(read_error) == asio::error::operation_aborted);
  CHECK_FALSE(timer_error);
  CHECK(slow->cancelled == slow->held);
}

TEST_CASE("a cancelled write leaves every chunk old or new, never torn, and releases its chunk locks") {
  Runtime rt;
  auto memory = std::make_shared<MemoryStore>();
  const auto old_data = iota_vec(16 * 16, 1000);
  Array::create_blocking(rt, memory, "a", meta_1d(16 * 16, 16)).write_blocking(Region::all({16 * 16}),
                                                                              as_bytes(old_data));
  auto slow = std::make_shared<SlowStore>(memory);
  slow->fast_gets = 1000;
  slow->fast_writes = 4;
  const auto a = Array::open_blocking(rt, slow, "a");
  const auto new_data = iota_vec(16 * 16, -5000);
  asio::cancellation_signal cancel;
  auto done = a.async_write(Region::all(a.shape()), as_bytes(new_data),
                            asio::bind_cancellation_slot(cancel.slot(), asio::use_future));
  wait_until([&] { return slow->writes == 16; });  // 4 stored, 12 held
  asio::post(rt.io_executor(), [&] { cancel.emit(asio::cancellation_type::terminal); });
  REQUIRE(done.wait_for(test::scaled(30s)) == std::future_status::ready);
  CHECK_THROWS_AS(done.get(), Cancelled);
  CHECK(slow->cancelled == 12);

  const auto back = Array::open_blocking(rt, memory, "a").read_blocking(Region::all({16 * 16}));
  const auto v = back.as<std::int32_t>();
  std::size_t new_chunks = 0;
  for (std::size_t c = 0; c < 16; ++c) {
    const bool is_new = std::equal(v.begin() + c * 16, v.begin() + c * 16 + 16, new_data.begin() + c * 16);
    const bool is_old = std::equal(v.begin() + c * 16, v.begin() + c * 16 + 16, old_data.begin() + c * 16);
    CHECK((is_new || is_old));
    new_chunks += is_new;
  }
  CHECK(new_chunks == 4);
  // The chunk locks are free, those of the cancelled chunks too: a write
  // over every chunk completes.
  Array::open_blocking(rt, memory, "a").write_blocking(Region::all({16 * 16}), as_bytes(new_data));
}

TEST_CASE("a read cancelled on the filesystem store completes with Cancelled before decoding every chunk") {
  test::TempDir dir("cancel-fs");
  Runtime rt;
  auto store = std::make_shared<FilesystemStore>(rt.io_executor(), dir.path);
  const std::uint64_t n = 2048 * 64;
  const auto data = iota_vec(n, 3);
  Array::create_blocking(rt, store, "a", meta_1d(n, 64)).write_blocking(Region::all({n}), as_bytes(data));
  const auto a = Array::open_blocking(rt, store, "a");
  std::vector<std::int32_t> out(n, 0x5a5a5a5a);
  asio::cancellation_signal cancel;
  rt.reset_stats();
  // Cancelled right after it starts, on the I/O thread: the read has fetched
  // at most one slice of chunks.
  std::promise<std::future<void>> started;
  asio::post(rt.io_executor(), [&] {
    started.set_value(a.async_read(Region::all(a.shape()), as_writable(out),
                                   asio::bind_cancellation_slot(cancel.slot(), asio::use_future)));
    cancel.emit(asio::cancellation_type::terminal);
  });
  auto done = started.get_future().get();
  REQUIRE(done.wait_for(test::scaled(30s)) == std::future_status::ready);
  CHECK_THROWS_AS(done.get(), Cancelled);
  const auto canary = out;
  CHECK(rt.stats().codec_calls < 2048);
  std::vector<std::int32_t> back(n);
  a.read_blocking(Region::all({n}), as_writable(back));  // budget and slots are free
  CHECK(back == data);
  CHECK(out == canary);
}

TEST_CASE("reads cancelled at any point on the filesystem store complete once, with Cancelled or the exact data") {
  // Regression: a chunk read offloaded to the store's pool (a large chunk,
  // or the fallback pool) whose read was cancelled meanwhile ended the
  // process (std::terminate on the pool thread, seen in the example server
  // when clients left with slices in flight).
  const bool uring = GENERATE(true, false);
  INFO((uring ? "io_uring" : "fallback pool"));
  test::TempDir dir("cancel-any");
  Runtime rt;
  FilesystemOptions fo;
  fo.use_io_uring = uring;
  auto store = std::make_shared<FilesystemStore>(rt.io_executor(), dir.path, fo);
  const std::uint64_t chunk = 128 * 1024, n = 6 * chunk;  // 512 KiB chunks: read on the store's pool
  const auto data = iota_vec(n, 5);
  Array::create_blocking(rt, store, "a", meta_1d(n, chunk)).write_blocking(Region::all({n}), as_bytes(data));
  const auto a = Array::open_blocking(rt, store, "a");
  int cancelled = 0;
  for (int round = 0; round < 48; ++round) {
    INFO("round " << round);
    std::vector<std::int32_t> out(n, 0);
    asio::cancellation_signal cancel;
    std::promise<std::future<void>> started;
    std::promise<void> emitted;
    // The cancellation comes on the I/O thread after 4 * round hops
    // through its queue, so that it meets the read at many points (the
    // later ones may come after the read completed whole).
    std::function<void(int)> hop = [&](int left) {
      if (left > 0) return asio::post(rt.io_executor(), [&hop, left] { hop(left - 1); });
      cancel.emit(asio::cancellation_type::terminal);
      emitted.set_value();
    };
    asio::post(rt.io_executor(), [&] {
      started.set_value(a.async_read(Region::all(a.shape()), as_writable(out),
                                     asio::bind_cancellation_slot(cancel.slot(), asio::use_future)));
      hop(4 * round);
    });
    auto done = started.get_future().get();
    emitted.get_future().wait();  // `hop` and `cancel` may go
    REQUIRE(done.wait_for(test::scaled(30s)) == std::future_status::ready);
    try {
      done.get();
      CHECK(out == data);
    } catch (const Cancelled&) {
      ++cancelled;
    }
  }
  INFO(cancelled << " of 48 reads ended cancelled");
  CHECK(cancelled > 0);
  std::vector<std::int32_t> back(n);
  a.read_blocking(Region::all({n}), as_writable(back));  // budget and slots are free
  CHECK(back == data);
}

namespace {

// One shard of two inner chunks of 16384 int32 (64 KiB each, zstd) in a
// memory store: a read of it is one task that the pool runs in two parts.
struct OneShard {
  explicit OneShard(Runtime& rt) {
    ArrayMetadata m = meta_1d(kN, kN);
    m.codecs = json::parse(std::string(R"([{"name":"sharding_indexed","configuration":{"chunk_shape":[16384],"codecs":)") +
                           kZstd + "}}]");
    array = Array::create_blocking(rt, std::make_shared<MemoryStore>(), "a", m);
    array.write_blocking(Region::all(array.shape()), as_bytes(data));
  }
  static constexpr std::uint64_t kN = 32768;
  std::vector<std::int32_t> data = iota_vec(kN, 11);
  Array array;
};

// Runs `f` on the I/O thread and waits until it has run.
void on_io_thread(Runtime& rt, std::function<void()> f) {
  std::promise<void> ran;
  asio::post(rt.io_executor(), [&] {
    f();
    ran.set_value();
  });
  ran.get_future().wait();
}

}  // namespace

// A read's last batch is handed to the pool: the pool thread that ends it
// completes the read, through the caller's executor, without a hop back to
// the I/O thread (which costs a wake-up and a turn of the loop per read):
// for read_blocking, an awaiting coroutine and the token form alike, into a
// buffer or into an NdArray.
TEST_CASE("a read whose last batch decodes on the pool completes from there, while the I/O thread is busy",
          "[async][regression]") {
  const std::string api =
      GENERATE("blocking", "awaiting", "token", "blocking, NdArray", "awaiting, NdArray", "token, NdArray");
  CAPTURE(api);
  // "awaiting": a coroutine on a thread of the caller's own. Declared first:
  // the pool thread that posts to it may still be inside that post when
  // run() returns; the Runtime's end waits for it.
  asio::io_context client;
  Runtime rt({.codec_threads = 1});
  OneShard shard(rt);
  std::promise<void> io_free;
  const std::shared_future<void> free_io = io_free.get_future().share();
  std::atomic<int> hooked{0};
  // While the first inner chunk decodes, the I/O thread runs a handler that
  // waits for io_free: it runs nothing else until the test ends.
  detail::RuntimeAccess::engine(rt).scheduler.part_hook = [&](const detail::ChunkTask&, std::size_t k) {
    if (k == 0 && hooked++ == 0) asio::post(rt.io_executor(), [free_io] { free_io.wait(); });
  };
  std::vector<std::int32_t> back(OneShard::kN);
  std::future<void> done;
  std::future<NdArray> owned;
  const Region all = Region::all({OneShard::kN});
  if (api == "blocking")
    done = std::async(std::launch::async, [&] { shard.array.read_blocking(all, as_writable(back)); });
  else if (api == "awaiting")
    done = asio::co_spawn(client, shard.array.read(all, as_writable(back)), asio::use_future);
  else if (api == "token")  // use_future's handler runs wherever the operation completes
    done = shard.array.async_read(all, as_writable(back), asio::use_future);
  else if (api == "blocking, NdArray")
    owned = std::async(std::launch::async, [&] { return shard.array.read_blocking(all); });
  else if (api == "awaiting, NdArray")
    owned = asio::co_spawn(client, shard.array.read(all), asio::use_future);
  else
    owned = shard.array.async_read(all, asio::use_future);
  std::thread client_thread([&] { client.run(); });
  const auto status = done.valid() ? done.wait_for(test::scaled(30s)) : owned.wait_for(test::scaled(30s));
  const bool completed_while_io_busy = status == std::future_status::ready;
  io_free.set_value();
  if (done.valid()) {
    done.get();
  } else {
    const NdArray r = owned.get();
    REQUIRE(r.shape == std::vector<std::uint64_t>{OneShard::kN});
    REQUIRE(r.data.size() == OneShard::kN * sizeof(std::int32_t));
    std::memcpy(back.data(), r.data.data(), r.data.size());
  }
  client_thread.join();
  detail::RuntimeAccess::engine(rt).scheduler.part_hook = nullptr;
  REQUIRE(hooked == 1);  // the shard decoded in parts, the I/O thread was held
  CHECK(completed_while_io_busy);
  CHECK(back == shard.data);
}

// A caller may free what it lent the array (a store whose timer is on
// another runtime's io_context, say) as soon as it learns that the call
// ended, while the thread that ended it is still unwinding the op: a codec
// thread under SCHED_IDLE may wait long for its core. (Measured failure, in
// CI under ASan: a codec thread dropped an op's last reference to such a
// store after the test had destroyed that io_context: heap-use-after-free.)
TEST_CASE("an operation lets go of the array's state and store before its caller learns that it ended",
          "[async][regression]") {
  const std::string op = GENERATE("read handed off to the pool", "read ending on the I/O thread", "write");
  CAPTURE(op);
  Runtime rt({.codec_threads = 1});
  auto store = std::make_shared<MemoryStore>();
  ArrayMetadata m = meta_1d(OneShard::kN, OneShard::kN);
  if (op == "read handed off to the pool")
    m.codecs = json::parse(std::string(R"([{"name":"sharding_indexed","configuration":{"chunk_shape":[16384],"codecs":)") +
                           kZstd + "}}]");
  else if (op == "read ending on the I/O thread")  // nothing to compute: no pool
    m.codecs = json::parse(R"([{"name":"bytes","configuration":{"endian":"little"}}])");
  Array a = Array::create_blocking(rt, store, "a", m);
  const auto data = iota_vec(OneShard::kN, 3);
  a.write_blocking(Region::all(a.shape()), as_bytes(data));
  std::vector<std::int32_t> back(OneShard::kN);
  // The op cannot begin before the handle is dropped: the I/O thread waits.
  std::promise<void> open_gate;
  asio::post(rt.io_executor(), [gate = open_gate.get_future().share()] { gate.wait(); });
  std::promise<long> holders;  // of the store when the handler runs: the test's alone
  auto handler = asio::bind_executor(asio::system_executor(), [&](std::exception_ptr e) {
    holders.set_value(e ? -1 : store.use_count());
  });
  const Region all = Region::all(a.shape());
  if (op == "write") a.async_write(all, as_bytes(data), std::move(handler));
  else a.async_read(all, as_writable(back), std::move(handler));
  a = Array();
  open_gate.set_value();
  CHECK(holders.get_future().get() == 1);
  if (op != "write") CHECK(back == data);
}

// The handler's executor (here the runtime's I/O loop, a callback's
// default) counts a handed-off read as outstanding work until it
// completes: destroying the Runtime meanwhile still delivers the result.
// (Measured failure: the I/O threads ran out of work and ended while the
// last batch decoded, and the callback was never called.)
TEST_CASE("a callback of a read handed off to the pool still runs when the Runtime is destroyed meanwhile",
          "[async][regression]") {
  auto rt = std::make_unique<Runtime>(RuntimeOptions{.codec_threads = 1});
  OneShard shard(*rt);
  std::atomic<bool> destroying{false};
  std::atomic<int> hooked{0};
  // The decode waits until ~Runtime has begun, and a while after, so that
  // the I/O threads would have ended if the read did not hold them.
  detail::RuntimeAccess::engine(*rt).scheduler.part_hook = [&](const detail::ChunkTask&, std::size_t k) {
    if (k != 0 || hooked++ != 0) return;
    while (!destroying) std::this_thread::sleep_for(1ms);
    std::this_thread::sleep_for(test::scaled(200ms));
  };
  std::vector<std::int32_t> back(OneShard::kN);
  std::atomic<int> calls{0};
  std::exception_ptr error;
  shard.array.async_read(Region::all({OneShard::kN}), as_writable(back), [&](std::exception_ptr e) {
    error = e;
    ++calls;
  });
  shard.array = Array();  // the read keeps what it needs
  destroying = true;
  rt.reset();
  REQUIRE(hooked == 1);
  CHECK(calls == 1);
  CHECK_FALSE(error);
  CHECK(back == shard.data);
}

// A read whose last batch cannot be queued for the pool (out of memory)
// fails with that error and gives its memory budget back. (It hung: the op
// was marked handed off before the submission threw, so nothing completed
// it; then the submission's throw kept the batch's budget for good.)
TEST_CASE("a read whose last batch fails to be submitted completes with the error and returns its budget",
          "[async][regression]") {
  RuntimeOptions options;
  options.codec_threads = 1;
  options.max_inflight_bytes = OneShard::kN * sizeof(std::int32_t);  // one shard: a leak would block the next read
  Runtime rt(options);
  OneShard shard(rt);
  detail::RuntimeAccess::engine(rt).scheduler.fault_hook = [](std::string_view point) {
    if (point == "queue") throw std::bad_alloc();
  };
  std::vector<std::int32_t> back(OneShard::kN);
  auto done = shard.array.async_read(Region::all({OneShard::kN}), as_writable(back), asio::use_future);
  REQUIRE(done.wait_for(test::scaled(30s)) == std::future_status::ready);
  CHECK_THROWS_AS(done.get(), std::bad_alloc);
  detail::RuntimeAccess::engine(rt).scheduler.fault_hook = nullptr;
  auto again = shard.array.async_read(Region::all({OneShard::kN}), as_writable(back), asio::use_future);
  REQUIRE(again.wait_for(test::scaled(30s)) == std::future_status::ready);
  again.get();
  CHECK(back == shard.data);
}

// Past submit(), the scheduler itself may fail to allocate: posting its
// deferred flush (it then flushes at once), building or posting a pool job
// (the batches in no job fail with the error), or, with per-chunk dispatch,
// posting a chunk (the chunks not posted fail). Either way every read
// completes, the reads after it too, and no submission stays counted.
TEST_CASE("a scheduler that cannot post its flush or build a pool job fails no read silently and keeps working",
          "[async][regression]") {
  const std::string point = GENERATE("post", "flush", "post_job", "post_chunk");
  CAPTURE(point);
  RuntimeOptions options;
  options.codec_threads = 1;
  if (point == "post_chunk") options.dispatch = Dispatch::per_chunk;
  options.max_inflight_bytes = OneShard::kN * sizeof(std::int32_t);  // one shard: a leak would block the next read
  Runtime rt(options);
  OneShard shard(rt);
  detail::RuntimeAccess::engine(rt).scheduler.fault_hook = [point](std::string_view at) {
    if (at == point) throw std::bad_alloc();
  };
  std::vector<std::int32_t> back(OneShard::kN, -1);
  auto first = shard.array.async_read(Region::all({OneShard::kN}), as_writable(back), asio::use_future);
  REQUIRE(first.wait_for(test::scaled(30s)) == std::future_status::ready);
  detail::RuntimeAccess::engine(rt).scheduler.fault_hook = nullptr;
  if (point == "post") {  // flushed at once instead: the read is whole
    first.get();
    CHECK(back == shard.data);
  } else {
    CHECK_THROWS_AS(first.get(), std::bad_alloc);
  }
  std::vector<std::int32_t> again(OneShard::kN, -1);
  auto second = shard.array.async_read(Region::all({OneShard::kN}), as_writable(again), asio::use_future);
  REQUIRE(second.wait_for(test::scaled(30s)) == std::future_status::ready);
  second.get();
  CHECK(again == shard.data);
  const auto& counters = detail::RuntimeAccess::engine(rt).scheduler.counters();
  wait_until([&] { return counters.queue_depth.load() == 0; });  // (a job counts until its last task is done)
}

// Once handed to the pool, a read still honours cancellation: the inner
// chunks not yet begun are skipped, and it completes with Cancelled even
// when the cancel comes during its very last piece of codec work.
TEST_CASE("a read cancelled while its last batch decodes completes with Cancelled and begins no more inner chunks",
          "[async][regression]") {
  const std::size_t cancel_at = GENERATE(0, 1);  // the inner chunk decoding when the cancel comes
  CAPTURE(cancel_at);
  Runtime rt({.codec_threads = 1});
  OneShard shard(rt);
  std::vector<std::int32_t> out(OneShard::kN, 0x5a5a5a5a);
  asio::cancellation_signal cancel;
  detail::RuntimeAccess::engine(rt).scheduler.part_hook = [&](const detail::ChunkTask&, std::size_t k) {
    if (k != cancel_at) return;
    on_io_thread(rt, [&] { cancel.emit(asio::cancellation_type::terminal); });
    on_io_thread(rt, [] {});  // and whatever the emission posted there
  };
  auto done = shard.array.async_read(Region::all({OneShard::kN}), as_writable(out),
                                     asio::bind_cancellation_slot(cancel.slot(), asio::use_future));
  REQUIRE(done.wait_for(test::scaled(30s)) == std::future_status::ready);
  detail::RuntimeAccess::engine(rt).scheduler.part_hook = nullptr;
  CHECK_THROWS_AS(done.get(), Cancelled);
  const auto second = std::span(out).subspan(16384);
  const bool second_untouched = std::all_of(second.begin(), second.end(), [](std::int32_t v) { return v == 0x5a5a5a5a; });
  CHECK(second_untouched == (cancel_at == 0));
}

namespace {

// Waits on a timer that only an explicit cancel() ends (the coroutine's own
// cancellation is not bound to it), then returns 7.
asio::awaitable<int> finish_when_timer_cancelled(asio::steady_timer* t) {
  auto ignore_cancellation = asio::bind_cancellation_slot(asio::cancellation_slot(), asio::as_tuple(asio::use_awaitable));
  co_await t->async_wait(std::move(ignore_cancellation));
  {
    // Asio recycles a slot's handler memory per thread (two blocks): these
    // two fill that cache, so that the next slot cleared on this thread
    // really frees its memory, where ASan sees any later use.
    asio::cancellation_signal a, b;
    a.slot().assign([](asio::cancellation_type) {});
    b.slot().assign([](asio::cancellation_type) {});
  }
  co_return 7;
}

asio::awaitable<int> await_on_other_strand(asio::any_io_executor strand, asio::steady_timer* t) {
  co_return co_await co_spawn_safe(strand, finish_when_timer_cancelled(t), asio::use_awaitable);
}

}  // namespace

// Boost 1.81's co_spawn forwards a cancellation to another executor through
// a queued lambda holding a raw pointer into the awaiting coroutine's slot.
// Here that lambda runs after the spawned coroutine completed and its awaiter
// resumed and cleared the slot: with asio::co_spawn, a use after free (seen
// in S3 multipart writes cancelled mid-upload; ASan reports it here).
TEST_CASE("co_spawn_safe: a cancellation queued behind the spawned coroutine's completion touches no freed memory",
          "[async][regression]") {
  asio::io_context io;
  const asio::any_io_executor strand = asio::make_strand(io);
  asio::steady_timer timer(strand, asio::steady_timer::time_point::max());
  asio::cancellation_signal cancel;
  int calls = 0, value = 0;
  std::exception_ptr error;
  asio::co_spawn(io, await_on_other_strand(strand, &timer),
                 asio::bind_cancellation_slot(cancel.slot(), [&](std::exception_ptr e, int v) {
                   ++calls;
                   error = e;
                   value = v;
                 }));
  io.poll();  // the inner coroutine now waits on the timer
  REQUIRE(calls == 0);
  // The strand stays busy (a handler that posts one more to it), so what
  // comes next queues there in order: the timer's completion (resumes the
  // inner coroutine, which completes, and its awaiter at once), then the
  // cancellation forwarded to the strand.
  asio::post(strand, [strand] { asio::post(strand, [] {}); });
  timer.cancel();
  cancel.emit(asio::cancellation_type::terminal);
  io.run();
  CHECK(calls == 1);
  CHECK_FALSE(error);
  CHECK(value == 7);
}
