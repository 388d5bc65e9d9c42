// Async API: coroutines co_await reads; the codec work runs on the runtime's
// pool in batches, and each coroutine resumes on its own executor.
#include <cstdio>
#include <numeric>
#include <vector>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>

#include <zarrcoro/array.hpp>
#include <zarrcoro/runtime.hpp>
#include <zarrcoro/store/memory.hpp>

using namespace zarrcoro;

boost::asio::awaitable<double> sum_rows(Array a, std::uint64_t first, std::uint64_t last) {
  const Region region{{first, 0}, {last, a.shape()[1]}};  // built outside the co_await (gcc 12)
  NdArray rows = co_await a.read(region);
  double sum = 0;
  for (std::int64_t v : rows.as<std::int64_t>()) sum += static_cast<double>(v);
  co_return sum;
}

boost::asio::awaitable<void> app(Runtime& rt, int& status) {
  ArrayMetadata meta;
  meta.shape = {512, 512};
  meta.chunk_shape = {64, 64};
  meta.data_type = DataTypeKind::int64;
  meta.codecs = nlohmann::json::parse(R"([{"name": "bytes", "configuration": {"endian": "little"}},
                                          {"name": "gzip", "configuration": {"level": 5}}])");
  Array a = co_await Array::create(rt, std::make_shared<MemoryStore>(), "", meta);

  std::vector<std::int64_t> data(512 * 512);
  std::iota(data.begin(), data.end(), 0);
  co_await a.write(Region::all(a.shape()), std::as_bytes(std::span(data)));

  const double top = co_await sum_rows(a, 0, 256), bottom = co_await sum_rows(a, 256, 512);
  const double n = 512.0 * 512.0;
  std::printf("sum = %.0f (expected %.0f)\n", top + bottom, n * (n - 1) / 2);
  status = top + bottom == n * (n - 1) / 2 ? 0 : 1;
}

int main() {
  Runtime rt;                    // owns the I/O thread and the codec pool
  boost::asio::io_context app_io;  // the application's own loop
  int status = 2;
  boost::asio::co_spawn(app_io, app(rt, status), [](std::exception_ptr e) {
    if (e) std::rethrow_exception(e);
  });
  app_io.run();
  return status;
}
