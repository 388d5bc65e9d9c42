// The store conformance suite: the behaviour every zarrcoro::Store must show,
// written against the Store interface only, so that each store (memory,
// filesystem, and later HTTP and S3) runs the same checks.
//
// Usage, inside a TEST_CASE:
//   run_store_conformance("memory", [](boost::asio::any_io_executor io) {
//     return std::make_shared<MemoryStore>();
//   });
// The suite consists of Catch2 SECTIONs; Catch2 re-enters the TEST_CASE for
// each one, and each calls `make` for a fresh store, which must start empty.
// `make` receives the executor of the io_context the suite runs; the suite
// drives that io_context in the test thread (and on extra threads for the
// concurrency sections). Assertions only ever run in the test thread.
//
// Thread-safety: the helpers are for one test thread; run() may run the
// io_context on extra threads it owns and joins before returning.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <exception>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <catch2/catch.hpp>

#include <zarrcoro/error.hpp>
#include <zarrcoro/store.hpp>

#include "support.hpp"

namespace zarrcoro::test {

// Runs `jobs` concurrently on `io` (this thread plus `threads - 1` more) until
// all finish; rethrows the first failure in job order.
inline void run_all(boost::asio::io_context& io, std::vector<awaitable<void>> jobs,
                    unsigned threads = 1) {
  std::vector<std::exception_ptr> errors(jobs.size());
  for (std::size_t i = 0; i < jobs.size(); ++i)
    boost::asio::co_spawn(io, std::move(jobs[i]),
                          [&errors, i](std::exception_ptr e) { errors[i] = e; });
  io.restart();
  std::vector<std::thread> extra;
  for (unsigned t = 1; t < threads; ++t) extra.emplace_back([&io] { io.run(); });
  io.run();
  for (auto& t : extra) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

// Runs `io` in this thread until it is out of work. A run that goes on for
// more than 300 s (scaled) is a hang: it aborts, so that the failure names
// the test case (Catch reports the signal) instead of a silent ctest timeout.
inline void run_watched(boost::asio::io_context& io) {
  const auto deadline = std::chrono::steady_clock::now() + scaled(std::chrono::seconds(300));
  io.restart();
  while (!io.stopped()) {
    io.run_for(std::chrono::seconds(1));
    if (!io.stopped() && std::chrono::steady_clock::now() > deadline) {
      std::fprintf(stderr, "store test: the io_context still has work after 300 s (scaled): a hang\n");
      std::abort();
    }
  }
}

// Runs one awaitable to completion on `io` in this thread; returns its value
// or rethrows its exception.
template <class T>
T run(boost::asio::io_context& io, awaitable<T> job) {
  std::exception_ptr error;
  std::optional<std::conditional_t<std::is_void_v<T>, bool, T>> value;
  boost::asio::co_spawn(io, std::move(job), [&](std::exception_ptr e, auto&&... v) {
    error = e;
    if constexpr (sizeof...(v) == 1) value.emplace(std::move(v)...);
  });
  run_watched(io);
  if (error) std::rethrow_exception(error);
  if constexpr (!std::is_void_v<T>) return std::move(*value);
}

inline Bytes bytes_of(std::string_view s) {
  Bytes b(s.size());
  std::transform(s.begin(), s.end(), b.begin(), [](char c) { return std::byte(c); });
  return b;
}

inline Bytes random_bytes(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  Bytes b(n);
  for (auto& x : b) x = std::byte(rng() & 0xff);
  return b;
}

// A store plus the io_context driving it, with blocking shorthands.
struct StoreHarness {
  boost::asio::io_context io;
  std::shared_ptr<Store> store;

  explicit StoreHarness(
      const std::function<std::shared_ptr<Store>(boost::asio::any_io_executor)>& make)
      : store(make(io.get_executor())) {}
  ~StoreHarness() { store.reset(); }  // before the io_context

  std::optional<Bytes> get(const std::string& key, ByteRange r = {}) {
    return run(io, store->get(key, r));
  }
  // The value as text, or "<missing>".
  std::string text(const std::string& key, ByteRange r = {}) {
    auto v = get(key, r);
    if (!v) return "<missing>";
    std::string s(v->size(), '\0');
    std::transform(v->begin(), v->end(), s.begin(), [](std::byte b) { return char(b); });
    return s;
  }
  void set(const std::string& key, Bytes value) { run(io, store->set(key, std::move(value))); }
  void set(const std::string& key, std::string_view value) { set(key, bytes_of(value)); }
  void erase(const std::string& key) { run(io, store->erase(key)); }
  bool exists(const std::string& key) { return run(io, store->exists(key)); }
  std::vector<std::string> list(const std::string& prefix) { return run(io, store->list(prefix)); }
  std::vector<KeySize> list_sizes(const std::string& prefix) { return run(io, store->list_sizes(prefix)); }
  ReadResult read(const std::string& key, Generation if_equal = {}, ByteRange r = {}) {
    ReadOptions o;
    o.range = r;
    o.if_equal = std::move(if_equal);
    return run(io, store->read(key, std::move(o)));
  }
  std::optional<Generation> write(const std::string& key, std::optional<std::string_view> value,
                                  Generation if_equal = {}) {
    WriteOptions o;
    o.if_equal = std::move(if_equal);
    std::optional<Bytes> v;
    if (value) v = bytes_of(*value);
    return run(io, store->write(key, std::move(v), std::move(o)));
  }
};

namespace conformance_detail {

inline awaitable<void> set_then_get(std::shared_ptr<Store> s, std::string key, Bytes value,
                                    std::optional<Bytes>* out) {
  co_await s->set(key, std::move(value));
  *out = co_await s->get(key);
}

// Writes `rounds` values of `size` bytes, each filled with one byte value.
inline awaitable<void> write_uniform(std::shared_ptr<Store> s, std::string key, int writer,
                                     int rounds, std::size_t size) {
  for (int r = 0; r < rounds; ++r)
    co_await s->set(key, Bytes(size, std::byte(writer * rounds + r)));
}

// Reads `key` `rounds` times; counts reads that are not a single whole value.
inline awaitable<void> read_uniform(std::shared_ptr<Store> s, std::string key, int rounds,
                                    std::size_t size, int* torn) {
  for (int r = 0; r < rounds; ++r) {
    auto v = co_await s->get(key);
    if (!v || v->size() != size ||
        std::any_of(v->begin(), v->end(), [&](std::byte b) { return b != v->front(); }))
      ++*torn;
  }
}

// Adds 1 to the decimal counter at `key` `rounds` times, each an optimistic
// read-modify-write (conditional write, retried on conflict).
inline awaitable<void> increment(std::shared_ptr<Store> s, std::string key, int rounds, int* conflicts) {
  for (int r = 0; r < rounds; ++r) {
    for (;;) {
      ReadOptions ro;
      const ReadResult cur = co_await s->read(key, std::move(ro));
      const int n = cur.value ? std::stoi(std::string(reinterpret_cast<const char*>(cur.value->data()),
                                                      cur.value->size()))
                              : 0;
      const std::string next = std::to_string(n + 1);
      std::optional<Bytes> v(bytes_of(next));
      WriteOptions wo;
      wo.if_equal = cur.generation;
      if (co_await s->write(key, std::move(v), std::move(wo))) break;
      if (++*conflicts > 100 * rounds) throw std::runtime_error("no progress: every conditional write conflicts");
    }
  }
}

// Whether `e` is what a cancelled store operation raises (see Store:
// system_error with asio::error::operation_aborted).
inline bool is_cancellation(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const boost::system::system_error& se) {
    return se.code() == boost::asio::error::operation_aborted;
  } catch (...) {
    return false;
  }
}

// Starts `job` on `io` with a cancellation slot, lets the io_context run
// `polls` handlers, emits a terminal cancellation, and runs the io_context
// until everything is done; counts the completions and keeps the outcome.
template <class T>
struct Outcome {
  int completions = 0;
  std::exception_ptr error;
  std::optional<T> value;
};
template <class T>
Outcome<T> cancel_after(boost::asio::io_context& io, awaitable<T> job, int polls) {
  Outcome<T> out;
  boost::asio::cancellation_signal signal;
  io.restart();
  boost::asio::co_spawn(io, std::move(job),
                        boost::asio::bind_cancellation_slot(signal.slot(), [&out](std::exception_ptr e, auto&&... v) {
                          ++out.completions;
                          out.error = e;
                          if constexpr (sizeof...(v) == 1)
                            if (!e) out.value.emplace(std::move(v)...);
                        }));
  for (int k = 0; k < polls && io.poll_one() == 1; ++k) {
  }
  signal.emit(boost::asio::cancellation_type::terminal);
  io.restart();
  io.run();
  return out;
}

inline awaitable<bool> set_done(std::shared_ptr<Store> s, std::string key, Bytes value) {
  co_await s->set(std::move(key), std::move(value));
  co_return true;
}

}  // namespace conformance_detail

inline void run_store_conformance(
    const std::string& name,
    std::function<std::shared_ptr<Store>(boost::asio::any_io_executor)> make) {
  using Strings = std::vector<std::string>;
  constexpr auto max = std::numeric_limits<std::uint64_t>::max();
  INFO("store: " << name);
  StoreHarness h(make);
  INFO("url: " << h.store->url());
  REQUIRE_FALSE(h.store->url().empty());

  SECTION("a fresh store is empty and a missing key is absent") {
    CHECK(h.list("") == Strings{});
    CHECK_FALSE(h.get("nope").has_value());
    CHECK_FALSE(h.get("nope", ByteRange::from(0, 4)).has_value());
    CHECK_FALSE(h.get("nope", ByteRange::last(4)).has_value());
    CHECK_FALSE(h.get("a/b/c/zarr.json").has_value());
    CHECK_FALSE(h.exists("nope"));
  }

  SECTION("set/get round trip") {
    h.set("empty", Bytes{});
    h.set("one", bytes_of("x"));
    const Bytes big = random_bytes(1 << 20, 42);
    h.set("big/value", big);

    const auto empty = h.get("empty");
    REQUIRE(empty.has_value());
    CHECK(empty->empty());
    CHECK(h.exists("empty"));
    CHECK(h.text("one") == "x");
    const auto got = h.get("big/value");
    REQUIRE(got.has_value());
    REQUIRE(got->size() == big.size());
    CHECK((*got == big));
    const auto mid = h.get("big/value", ByteRange::from(300000, 5000));
    REQUIRE(mid.has_value());
    CHECK((*mid == Bytes(big.begin() + 300000, big.begin() + 305000)));
    CHECK(h.list("") == Strings{"big/value", "empty", "one"});
  }

  SECTION("overwrite replaces the whole value") {
    h.set("k", "a rather long first value");
    h.set("k", "2");
    CHECK(h.text("k") == "2");
    h.set("k", "third");
    CHECK(h.text("k") == "third");
    h.set("k", Bytes{});
    CHECK(h.text("k") == "");
    CHECK(h.list("") == Strings{"k"});
  }

  SECTION("byte ranges") {
    h.set("v", "0123456789");
    CHECK(h.text("v", ByteRange::all()) == "0123456789");
    CHECK(h.text("v", ByteRange::from(2, 3)) == "234");
    CHECK(h.text("v", ByteRange::from(0, 10)) == "0123456789");
    CHECK(h.text("v", ByteRange::from(0, 0)) == "");
    CHECK(h.text("v", ByteRange::from(8, 5)) == "89");         // clipped at the end
    CHECK(h.text("v", ByteRange::from(3, max)) == "3456789");  // no overflow
    CHECK(h.text("v", ByteRange::from(10, 1)) == "");          // at the end: empty, not missing
    CHECK(h.text("v", ByteRange::from(20, 5)) == "");
    CHECK(h.text("v", ByteRange::from(max, max)) == "");
    CHECK(h.text("v", ByteRange::last(3)) == "789");
    CHECK(h.text("v", ByteRange::last(10)) == "0123456789");
    CHECK(h.text("v", ByteRange::last(20)) == "0123456789");   // longer: whole value
    CHECK(h.text("v", ByteRange::last(max)) == "0123456789");
    CHECK(h.text("v", ByteRange::last(0)) == "");
    h.set("e", Bytes{});
    CHECK(h.text("e", ByteRange::from(0, 4)) == "");
    CHECK(h.text("e", ByteRange::last(4)) == "");
  }

  SECTION("erase") {
    h.set("a/b/c", "1");
    h.set("a/b/d", "2");
    h.set("x", "3");
    h.erase("a/b/c");
    CHECK_FALSE(h.get("a/b/c").has_value());
    CHECK_FALSE(h.exists("a/b/c"));
    CHECK(h.text("a/b/d") == "2");
    h.erase("x");
    CHECK_FALSE(h.exists("x"));
    CHECK_NOTHROW(h.erase("x"));          // already gone
    CHECK_NOTHROW(h.erase("never/was"));  // never existed
    h.erase("a/b/d");
    CHECK(h.list("") == Strings{});
    h.set("a/b/c", "again");  // the pruned path can be written again
    CHECK(h.text("a/b/c") == "again");
  }

  SECTION("exists") {
    h.set("a/b", "1");
    CHECK(h.exists("a/b"));
    CHECK_FALSE(h.exists("a"));  // a prefix is not a key
    CHECK_FALSE(h.exists("a/b/c"));
    CHECK_FALSE(h.exists("a/bb"));
    CHECK_FALSE(h.get("a").has_value());
  }

  SECTION("list with a prefix") {
    for (const char* k : {"b", "a/c/d", "ab", "a/b.x", "a/b", "zarr.json", "a/c/e/f"}) h.set(k, "v");
    h.set("a/b", "overwritten");  // no temporary files may appear in listings
    CHECK(h.list("") == Strings{"a/b", "a/b.x", "a/c/d", "a/c/e/f", "ab", "b", "zarr.json"});
    CHECK(h.list("a/") == Strings{"a/b", "a/b.x", "a/c/d", "a/c/e/f"});
    CHECK(h.list("a") == Strings{"a/b", "a/b.x", "a/c/d", "a/c/e/f", "ab"});
    CHECK(h.list("a/b") == Strings{"a/b", "a/b.x"});
    CHECK(h.list("a/c/") == Strings{"a/c/d", "a/c/e/f"});
    CHECK(h.list("a/c/e") == Strings{"a/c/e/f"});
    CHECK(h.list("a/c/e/f") == Strings{"a/c/e/f"});
    CHECK(h.list("z") == Strings{"zarr.json"});
    CHECK(h.list("nope/") == Strings{});
    CHECK(h.list("a/x") == Strings{});
    CHECK(h.list("../") == Strings{});
    // list_sizes: the same keys with their values' sizes ("overwritten": 11 bytes).
    h.set("a/c/d", std::string_view(""));
    CHECK(h.list_sizes("a/") == std::vector<KeySize>{{"a/b", 11}, {"a/b.x", 1}, {"a/c/d", 0}, {"a/c/e/f", 1}});
    CHECK(h.list_sizes("z") == std::vector<KeySize>{{"zarr.json", 1}});
    CHECK(h.list_sizes("nope/").empty());
  }

  SECTION("invalid keys are rejected with InvalidArgument") {
    for (const std::string key : {"", "/abs", "a/../b", "a//b", "./a", "a/", "..", "a/.", "/"}) {
      INFO("key: '" << key << "'");
      CHECK_THROWS_AS(h.get(key), InvalidArgument);
      CHECK_THROWS_AS(h.get(key, ByteRange::from(0, 1)), InvalidArgument);
      CHECK_THROWS_AS(h.set(key, "v"), InvalidArgument);
      CHECK_THROWS_AS(h.erase(key), InvalidArgument);
      CHECK_THROWS_AS(h.exists(key), InvalidArgument);
    }
    CHECK(h.list("") == Strings{});
  }

  SECTION("keys with dots") {
    const Strings keys{".zattrs", "a/.zarray", "a/c.0.0", "a/c/0.1", "c.0.0", "zarr.json"};
    for (const auto& k : keys) h.set(k, k);
    for (const auto& k : keys) CHECK(h.text(k) == k);
    CHECK(h.list("") == keys);
  }

  SECTION("50 concurrent set/get of distinct keys") {
    constexpr int n = 50;
    std::vector<std::optional<Bytes>> got(n);
    std::vector<Bytes> want;
    std::vector<awaitable<void>> jobs;
    for (int i = 0; i < n; ++i) {
      want.push_back(random_bytes(1 + 997 * i, i));
      jobs.push_back(conformance_detail::set_then_get(h.store, "c/" + std::to_string(i) + "/v",
                                                      want.back(), &got[i]));
    }
    run_all(h.io, std::move(jobs), 4);
    for (int i = 0; i < n; ++i) {
      INFO("key c/" << i << "/v");
      REQUIRE(got[i].has_value());
      CHECK((*got[i] == want[i]));
    }
    CHECK(h.list("c/").size() == n);
  }

  SECTION("versions: reads return generations; conditional reads, writes and erases") {
    h.set("k", "one");
    const ReadResult r1 = h.read("k");
    REQUIRE(r1.value);
    CHECK(h.text("k") == "one");
    if (r1.generation.unknown()) {  // a store that cannot version values refuses conditions
      CHECK_THROWS_AS(h.read("k", r1.generation.absent()), UnsupportedError);
      CHECK_THROWS_AS(h.write("k", "x", Generation::absent()), UnsupportedError);
      return;
    }
    const Generation g1 = r1.generation;
    CHECK_FALSE(g1.is_absent());
    const ReadResult missing = h.read("nope");
    CHECK_FALSE(missing.value);
    CHECK_FALSE(missing.changed);
    CHECK(missing.generation == Generation::absent());
    // Unchanged value: the same generation; a matching condition reads (ranges too).
    CHECK(h.read("k").generation == g1);
    const ReadResult same = h.read("k", g1, ByteRange::from(1, 2));
    CHECK_FALSE(same.changed);
    REQUIRE(same.value);
    CHECK(*same.value == bytes_of("ne"));
    // Replaced: a new generation; the old one no longer reads. (S3's ETag
    // is the MD5 of the bytes: rewriting equal bytes may keep it, which is
    // harmless, as a reader then sees the same bytes.)
    h.set("k", "uno");
    const Generation g2 = h.read("k").generation;
    CHECK(g2 != g1);
    const ReadResult stale = h.read("k", g1);
    CHECK(stale.changed);
    CHECK_FALSE(stale.value);
    CHECK(h.read("nope", g1).changed);
    CHECK_FALSE(h.read("nope", Generation::absent()).changed);
    // Conditional writes: only against the current generation.
    CHECK_FALSE(h.write("k", "two", g1));
    CHECK(h.text("k") == "uno");
    const auto g3 = h.write("k", "two", g2);
    REQUIRE(g3);
    CHECK(h.text("k") == "two");
    CHECK(h.read("k").generation == *g3);
    CHECK_FALSE(h.write("k", "three", Generation::absent()));  // "only if absent" on a present key
    const auto created = h.write("new/key", "v", Generation::absent());
    REQUIRE(created);
    CHECK(h.read("new/key").generation == *created);
    // Conditional erases.
    CHECK_FALSE(h.write("k", std::nullopt, g2));
    CHECK(h.exists("k"));
    CHECK(h.write("k", std::nullopt, *g3) == Generation::absent());
    CHECK_FALSE(h.exists("k"));
    CHECK(h.write("k", std::nullopt, Generation::absent()) == Generation::absent());
    // Unconditional writes report the new generation.
    const auto g4 = h.write("k", "four");
    REQUIRE(g4);
    CHECK(h.read("k").generation == *g4);
  }

  SECTION("try_read_now answers like read, or not at all") {
    h.set("k", "hello");
    h.set("d/e", "x");
    const ReadResult whole = h.read("k");
    auto now = [&](const std::string& key, Generation if_equal = {}, ByteRange r = {}) {
      ReadOptions o;
      o.range = r;
      o.if_equal = std::move(if_equal);
      return h.store->try_read_now(key, o);
    };
    if (auto r = now("k")) {
      REQUIRE(r->value);
      CHECK(*r->value == bytes_of("hello"));
      CHECK(r->generation == whole.generation);
      CHECK_FALSE(r->changed);
    }
    if (auto r = now("k", {}, ByteRange::from(1, 3))) {
      REQUIRE(r->value);
      CHECK(*r->value == bytes_of("ell"));
    }
    if (auto r = now("k", {}, ByteRange::last(2))) {
      REQUIRE(r->value);
      CHECK(*r->value == bytes_of("lo"));
    }
    if (auto r = now("nope")) {
      CHECK_FALSE(r->value);
      CHECK_FALSE(r->changed);
    }
    if (auto r = now("d")) CHECK_FALSE(r->value);  // a "directory" is no value
    if (!whole.generation.unknown()) {
      if (auto r = now("k", whole.generation)) {
        CHECK_FALSE(r->changed);
        CHECK(r->value);
      }
      if (auto r = now("k", Generation::absent())) {
        CHECK(r->changed);
        CHECK_FALSE(r->value);
      }
    }
    if (now("k")) CHECK_THROWS_AS(now("../k"), InvalidArgument);  // a store that answers checks keys
  }

  SECTION("try_read_now_many answers each key like try_read_now, in place") {
    // Enough keys for a store to share the work between threads.
    std::vector<std::string> keys;
    for (int i = 0; i < 40; ++i) {
      keys.push_back("m/" + std::to_string(i));
      h.set(keys.back(), "v" + std::to_string(i));
    }
    h.set("big", Bytes(300 * 1024, std::byte{7}));
    keys.insert(keys.begin() + 3, "m/nope");
    keys.insert(keys.begin() + 10, "../escape");
    keys.insert(keys.begin() + 20, "big");
    keys.insert(keys.begin() + 30, "m");  // a "directory" is no value
    const ReadOptions whole;
    const std::vector<ReadOptions> wholes(keys.size());
    std::vector<ReadNow> out(keys.size());
    h.store->try_read_now_many(keys, wholes, out);
    const bool answers = h.store->try_read_now("m/0", whole).has_value();
    for (std::size_t k = 0; k < keys.size(); ++k) {
      INFO(keys[k]);
      const ReadNow& r = out[k];
      if (keys[k] == "../escape") {
        if (answers) {
          REQUIRE(r.error);
          CHECK_THROWS_AS(std::rethrow_exception(r.error), InvalidArgument);
        }
        continue;
      }
      CHECK_FALSE(r.error);
      if (!r.result) continue;  // not at once: the caller reads
      if (keys[k] == "m/nope" || keys[k] == "m") {
        CHECK_FALSE(r.result->value);
      } else if (keys[k] == "big") {
        REQUIRE(r.result->value);
        CHECK(*r.result->value == Bytes(300 * 1024, std::byte{7}));
      } else {
        REQUIRE(r.result->value);
        CHECK(*r.result->value == bytes_of("v" + keys[k].substr(2)));
        CHECK(r.result->generation == h.read(keys[k]).generation);
      }
    }
  }

  SECTION("try_read_now_many honours each key's own options across many keys, small and large values") {
    // More keys than one lock's group (MemoryStore looks keys up 64 at a
    // time, copying up to 16 KiB of them under the lock): small values,
    // 3000-byte ones that use a group's budget up, 70 KiB ones over it, and
    // a bad key in a later group.
    std::vector<std::string> keys;
    std::vector<Bytes> values;
    for (int i = 0; i < 150; ++i) {
      keys.push_back("n/" + std::to_string(i));
      values.push_back(i % 37 == 5  ? Bytes(70 * 1024, static_cast<std::byte>(i))
                       : i % 5 == 0 ? Bytes(3000, static_cast<std::byte>(i))
                                    : bytes_of("value " + std::to_string(i)));
      h.set(keys.back(), values.back());
    }
    keys[100] = "../escape";
    const bool versioned = !h.read(keys[0]).generation.unknown();
    const bool answers = h.store->try_read_now(keys[0], ReadOptions()).has_value();
    std::size_t answered = 0;
    // By k % 4: the whole value, bytes [2, 5), on the condition that the key
    // be absent (it is not), into a buffer of the value's size.
    std::vector<ReadOptions> options(keys.size());
    std::vector<Bytes> buffers(keys.size());
    for (std::size_t k = 0; k < keys.size(); ++k) {
      if (k % 4 == 1) options[k].range = ByteRange::from(2, 3);
      if (k % 4 == 2 && versioned) options[k].if_equal = Generation::absent();
      if (k % 4 == 3) {
        buffers[k] = Bytes(values[k].size(), std::byte{0xEE});
        options[k].into = buffers[k];
      }
    }
    std::vector<ReadNow> out(keys.size());
    h.store->try_read_now_many(keys, options, out);
    for (std::size_t k = 0; k < keys.size(); ++k) {
      INFO(keys[k]);
      if (k == 100) {
        if (answers) {
          REQUIRE(out[k].error);
          CHECK_THROWS_AS(std::rethrow_exception(out[k].error), InvalidArgument);
        }
        continue;
      }
      CHECK_FALSE(out[k].error);
      if (!out[k].result) continue;  // not at once (a file store: not in the page cache): the caller reads
      ++answered;
      const ReadResult& r = *out[k].result;
      if (k % 4 == 2 && versioned) {
        CHECK(r.changed);
        CHECK_FALSE(r.value);
        continue;
      }
      CHECK_FALSE(r.changed);
      REQUIRE(r.value);
      if (versioned) CHECK(r.generation == h.read(keys[k]).generation);
      if (k % 4 == 1) {
        CHECK(*r.value == Bytes(values[k].begin() + 2, values[k].begin() + 5));
      } else if (k % 4 == 3 && h.store->reads_into()) {
        CHECK(r.in_place);
        CHECK(buffers[k] == values[k]);
      } else {
        CHECK(*r.value == values[k]);
      }
    }
    if (answers) CHECK(answered > 0);
    if (answers && h.store->url() == "memory://") CHECK(answered == keys.size() - 1);  // all but the bad key
  }

  SECTION("read and try_read_now fill ReadOptions::into when the range fits it exactly, else return the value") {
    const Bytes small = bytes_of("0123456789");
    Bytes large(600 * 1024);  // read on a file store's pool, not at once
    for (std::size_t i = 0; i < large.size(); ++i) large[i] = std::byte(i * 7 % 251);
    h.set("s", small);
    h.set("l", large);
    const Generation generation = h.read("l").generation;
    auto read_into = [&](const std::string& key, ByteRange r, MutableByteSpan into, Generation if_equal = {}) {
      ReadOptions o;
      o.range = r;
      o.if_equal = std::move(if_equal);
      o.into = into;
      return run(h.io, h.store->read(key, std::move(o)));
    };
    // `r` read `expected` with `into` of its size: in place where the store can.
    auto check_fits = [&](const ReadResult& r, ByteSpan into, ByteSpan expected) {
      REQUIRE(r.value);
      CHECK(r.in_place == h.store->reads_into());
      if (r.in_place) {
        CHECK(r.value->empty());
        CHECK(std::equal(into.begin(), into.end(), expected.begin(), expected.end()));
      } else {
        CHECK(*r.value == Bytes(expected.begin(), expected.end()));
      }
    };
    Bytes buf(large.size(), std::byte{0xEE});
    check_fits(read_into("l", {}, buf), buf, large);
    Bytes part(1000, std::byte{0xEE});
    check_fits(read_into("l", ByteRange::from(5000, 1000), part), part, ByteSpan(large).subspan(5000, 1000));
    Bytes tail(4, std::byte{0xEE});  // a range clipped at the end fits by its clipped size
    check_fits(read_into("s", ByteRange::from(6, 100), tail), tail, ByteSpan(small).subspan(6));
    Bytes sbuf(small.size(), std::byte{0xEE});
    check_fits(read_into("s", {}, sbuf), sbuf, small);
    std::fill(sbuf.begin(), sbuf.end(), std::byte{0xEE});
    ReadOptions now;
    now.into = sbuf;
    if (auto r = h.store->try_read_now("s", now)) check_fits(*r, sbuf, small);
    // The same without a generation (which may then be unknown).
    std::fill(sbuf.begin(), sbuf.end(), std::byte{0xEE});
    now.need_generation = false;
    if (auto r = h.store->try_read_now("s", now)) check_fits(*r, sbuf, small);
    if (auto r = h.store->try_read_now("nope", now)) {
      CHECK_FALSE(r->value);
      CHECK_FALSE(r->in_place);
    }
    // A buffer of another size is not used: the value comes as usual.
    Bytes wrong(small.size() + 1);
    const ReadResult other = read_into("s", {}, wrong);
    REQUIRE(other.value);
    CHECK_FALSE(other.in_place);
    CHECK(*other.value == small);
    // A failed condition and an absent key read nothing.
    if (!generation.unknown()) {
      const ReadResult c = read_into("l", {}, buf, Generation::absent());
      CHECK(c.changed);
      CHECK_FALSE(c.value);
      CHECK_FALSE(c.in_place);
    }
    const ReadResult missing = read_into("nope", {}, sbuf);
    CHECK_FALSE(missing.value);
    CHECK_FALSE(missing.in_place);
  }

  SECTION("reads and writes cancelled at any point complete once, with their result or a cancellation") {
    // Large values, so that the stores' work runs on their pools (file
    // reads, payload hashes) where they have any. Regression: a filesystem
    // read cancelled while its job ran on the fallback pool ended the
    // process (std::terminate, "co_await: Operation canceled").
    const Bytes big = random_bytes(std::size_t{512} << 10, 11);
    h.set("big", big);
    int cancelled = 0;
    for (int i = 0; i < 160; ++i) {
      INFO("round " << i);
      if (i % 4 == 3) {
        auto w = conformance_detail::cancel_after(h.io, conformance_detail::set_done(h.store, "big", big), i % 8);
        REQUIRE(w.completions == 1);
        if (w.error) REQUIRE(conformance_detail::is_cancellation(w.error));
        cancelled += w.error != nullptr;
      } else {
        auto r = conformance_detail::cancel_after(h.io, h.store->get("big"), i % 8);
        REQUIRE(r.completions == 1);
        if (r.error) {
          REQUIRE(conformance_detail::is_cancellation(r.error));
          ++cancelled;
        } else {
          REQUIRE(r.value);  // completed with a result: the whole value
          REQUIRE(*r.value == std::optional<Bytes>(big));
        }
      }
    }
    INFO(cancelled << " of 160 operations ended cancelled");
    // The store keeps working, and every write left the whole value.
    CHECK(h.get("big") == std::optional<Bytes>(big));
    CHECK(h.list("") == Strings{"big"});
  }

  SECTION("versions: concurrent optimistic increments lose no update") {
    h.set("counter", "0");
    if (h.read("counter").generation.unknown()) return;
    constexpr int workers = 8, rounds = 25;
    int conflicts[workers] = {};
    std::vector<awaitable<void>> jobs;
    for (int w = 0; w < workers; ++w)
      jobs.push_back(conformance_detail::increment(h.store, "counter", rounds, &conflicts[w]));
    run_all(h.io, std::move(jobs), 4);
    CHECK(h.text("counter") == std::to_string(workers * rounds));
  }

  SECTION("concurrent overwrites of one key never tear a value") {
    constexpr std::size_t size = 64 * 1024;
    constexpr int writers = 4, readers = 4, rounds = 10;
    h.set("hot", Bytes(size, std::byte(0)));
    int torn[readers] = {};
    std::vector<awaitable<void>> jobs;
    for (int w = 0; w < writers; ++w)
      jobs.push_back(conformance_detail::write_uniform(h.store, "hot", w, rounds, size));
    for (int r = 0; r < readers; ++r)
      jobs.push_back(conformance_detail::read_uniform(h.store, "hot", rounds, size, &torn[r]));
    run_all(h.io, std::move(jobs), 4);
    for (int t : torn) CHECK(t == 0);
    CHECK(h.list("") == Strings{"hot"});
  }
}

}  // namespace zarrcoro::test
