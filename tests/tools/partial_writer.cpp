// A second process for the consistency tests: opens the array at PATH in the
// store at DIR and writes, one element at a time, the int32 value i + 1 to
// every element i of [FIRST, STOP) whose index is FIRST plus a multiple of
// STEP. Each write is a partial chunk (or partial shard) write, so it is a
// read-modify-write racing with the other process. Exit 0 on success.
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <span>

#include <zarrcoro/array.hpp>
#include <zarrcoro/runtime.hpp>
#include <zarrcoro/store/filesystem.hpp>

int main(int argc, char** argv) {
  if (argc != 6) {
    std::fprintf(stderr, "usage: %s DIR PATH FIRST STOP STEP\n", argv[0]);
    return 2;
  }
  try {
    using namespace zarrcoro;
    Runtime rt({.codec_threads = 1});
    auto store = std::make_shared<FilesystemStore>(rt.io_executor(), argv[1]);
    const Array a = Array::open_blocking(rt, store, argv[2]);
    const std::uint64_t first = std::strtoull(argv[3], nullptr, 10), stop = std::strtoull(argv[4], nullptr, 10),
                        step = std::strtoull(argv[5], nullptr, 10);
    for (std::uint64_t i = first; i < stop; i += step) {
      const auto v = static_cast<std::int32_t>(i + 1);
      a.write_blocking(Region{{i}, {i + 1}}, std::as_bytes(std::span(&v, 1)));
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "partial_writer: %s\n", e.what());
    return 1;
  }
}
