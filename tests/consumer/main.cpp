// A tiny "existing service" that embeds the installed zarrcoro package: its own
// io_context run by its own threads, a steady_timer, a work guard, a loopback
// TCP echo of its own, and a Runtime adopting that io_context. Built by
// tests/consumer/run.sh with find_package(zarrcoro) and with pkg-config.
// Exit status 0 when every value matches.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <future>
#include <numeric>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include <boost/asio.hpp>

#include <zarrcoro/array.hpp>
#include <zarrcoro/error.hpp>
#include <zarrcoro/runtime.hpp>
#include <zarrcoro/store/filesystem.hpp>
#include <zarrcoro/store/memory.hpp>

// The package must carry the Asio configuration the library was built with.
#if !defined(BOOST_ASIO_HAS_IO_URING) || !defined(BOOST_ASIO_NO_DEPRECATED)
#error "the zarrcoro package did not pass its Asio macros to this translation unit"
#endif

namespace asio = boost::asio;
using asio::ip::tcp;
using namespace zarrcoro;

namespace {

int failures = 0;
void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "FAIL: %s\n", what);
    ++failures;
  }
}

constexpr std::uint64_t kRows = 100, kCols = 60;

std::int32_t expected(std::uint64_t r, std::uint64_t c) { return static_cast<std::int32_t>(r * 1000 + c); }

ArrayMetadata metadata() {
  ArrayMetadata meta;
  meta.shape = {kRows, kCols};
  meta.chunk_shape = {32, 16};
  meta.data_type = DataTypeKind::int32;
  meta.codecs = nlohmann::json::parse(R"([{"name": "bytes", "configuration": {"endian": "little"}},
                                          {"name": "zstd", "configuration": {"level": 3}}])");
  return meta;
}

// The service's own networking: a loopback echo, closed with close(ec).
asio::awaitable<void> echo_once(tcp::acceptor& acceptor) {
  tcp::socket peer = co_await acceptor.async_accept(asio::use_awaitable);
  char buf[4];
  co_await asio::async_read(peer, asio::buffer(buf), asio::use_awaitable);
  co_await asio::async_write(peer, asio::buffer(buf), asio::use_awaitable);
  boost::system::error_code ec;
  peer.close(ec);
}

asio::awaitable<std::string> ping(tcp::endpoint at) {
  tcp::socket s(co_await asio::this_coro::executor);
  co_await s.async_connect(at, asio::use_awaitable);
  co_await asio::async_write(s, asio::buffer("ping", 4), asio::use_awaitable);
  char buf[4];
  co_await asio::async_read(s, asio::buffer(buf), asio::use_awaitable);
  boost::system::error_code ec;
  s.shutdown(tcp::socket::shutdown_both, ec);
  s.close(ec);
  co_return std::string(buf, 4);
}

// Creates the array, writes it whole, reads a region back (coroutines on the
// service's io_context).
asio::awaitable<Array> create_and_fill(Runtime& rt, std::shared_ptr<Store> store) {
  Array a = co_await Array::create(rt, store, "data/a", metadata());
  std::vector<std::int32_t> all(kRows * kCols);
  for (std::uint64_t r = 0; r < kRows; ++r)
    for (std::uint64_t c = 0; c < kCols; ++c) all[r * kCols + c] = expected(r, c);
  const Region whole = Region::all(a.shape());
  co_await a.write(whole, std::as_bytes(std::span(all)));

  const Region part{{10, 5}, {45, 37}};  // named first (g++ 12 and braced temporaries)
  NdArray got = co_await a.read(part);
  bool same = got.shape == std::vector<std::uint64_t>{35, 32};
  auto values = got.as<std::int32_t>();
  for (std::uint64_t r = 10; same && r < 45; ++r)
    for (std::uint64_t c = 5; c < 37; ++c) same = same && values[(r - 10) * 32 + (c - 5)] == expected(r, c);
  check(same, "coroutine read of rows 10..45, columns 5..37");

  // Creating it again without CreateMode::overwrite: AlreadyExists.
  bool refused = false;
  try {
    co_await Array::create(rt, store, "data/a", metadata());
  } catch (const AlreadyExists&) {
    refused = true;
  }
  check(refused, "second create raises AlreadyExists");
  co_return a;
}

}  // namespace

int main() {
  const auto root = std::filesystem::temp_directory_path() /
                    ("zarrcoro-consumer-" + std::to_string(::getpid()));
  asio::io_context io;
  auto guard = asio::make_work_guard(io);
  std::vector<std::thread> loop;
  for (int i = 0; i < 2; ++i) loop.emplace_back([&] { io.run(); });

  // The service's own periodic work.
  std::atomic<int> ticks{0};
  std::atomic<bool> stopping{false};
  asio::steady_timer heartbeat(io);
  std::function<void(boost::system::error_code)> tick = [&](boost::system::error_code ec) {
    if (ec || stopping) return;
    ++ticks;
    heartbeat.expires_after(std::chrono::milliseconds(1));
    heartbeat.async_wait(tick);
  };
  heartbeat.expires_after(std::chrono::milliseconds(1));
  heartbeat.async_wait(tick);

  {
    Runtime rt(io, {.codec_threads = 2});
    auto store = std::make_shared<FilesystemStore>(rt.io_executor(), root);

    // 1. The service's own Asio: a loopback echo on its io_context.
    tcp::acceptor acceptor(io, tcp::endpoint(asio::ip::address_v4::loopback(), 0));
    asio::co_spawn(io, echo_once(acceptor), asio::detached);
    std::future<std::string> pong = asio::co_spawn(io, ping(acceptor.local_endpoint()), asio::use_future);
    check(pong.get() == "ping", "loopback echo");

    // 2. Coroutines: create, write, read.
    Array a = asio::co_spawn(io, create_and_fill(rt, store), asio::use_future).get();

    // 3. Token forms from a thread that is not an I/O thread.
    std::vector<std::int32_t> row(kCols, -1);
    Region last_row{{kRows - 1, 0}, {kRows, kCols}};
    a.async_read(last_row, std::as_writable_bytes(std::span(row)), asio::use_future).get();
    bool same = true;
    for (std::uint64_t c = 0; c < kCols; ++c) same = same && row[c] == expected(kRows - 1, c);
    check(same, "use_future read of the last row");

    std::vector<std::int32_t> minus(kCols, -7);
    std::promise<void> written;
    a.async_write(Region{{0, 0}, {1, kCols}}, std::as_bytes(std::span(minus)), [&](std::exception_ptr e) {
      if (e) written.set_exception(e);
      else written.set_value();
    });
    written.get_future().get();
    Array reopened = Array::open_blocking(rt, store, "data/a");
    NdArray first = reopened.read_blocking(Region{{0, 0}, {2, kCols}});
    auto v = first.as<std::int32_t>();
    check(v.size() == 2 * kCols && v[0] == -7 && v[kCols - 1] == -7 && v[kCols] == expected(1, 0),
          "callback write, then a blocking read of a reopened array");

    // 4. A memory store beside it, with overwrite.
    auto mem = std::make_shared<MemoryStore>();
    Array m = Array::create_blocking(rt, mem, "", metadata());
    m = Array::create_blocking(rt, mem, "", metadata(), CreateMode::overwrite);
    NdArray zeros = m.read_blocking(Region{{0, 0}, {1, 1}});
    check(zeros.as<std::int32_t>()[0] == 0, "overwritten array reads the fill value");
    check(rt.stats().codec_calls_on_io_thread == 0, "no codec work on the service's I/O threads");

    stopping = true;
    guard.reset();
    io.stop();
    for (auto& t : loop) t.join();
  }
  std::filesystem::remove_all(root);
  check(ticks > 0, "the service's timer kept ticking");
  std::printf("consumer: %s (%d timer ticks)\n", failures ? "FAILED" : "ok", ticks.load());
  return failures ? 1 : 0;
}
