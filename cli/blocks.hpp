// Blocks: the unit in which reencode, import and export move an array, so
// that memory stays bounded whatever its size. A block is a box of whole
// chunks (of whole shards for a sharded array) of at most a byte bound
// (kBlockBytes by default; at least one chunk), aligned to the chunk grid
// and clipped to the region being moved. Two blocks are in flight at once:
// the next is read while the last is written (pipelined()).
// Single-threaded command-line code.
#pragma once

#include <cstdint>
#include <filesystem>
#include <future>
#include <vector>

#include <zarrcoro/array.hpp>

#include "cli/common.hpp"

namespace zarrcoro::cli {

// The default bound of one block in bytes (--block-bytes changes it).
inline constexpr std::uint64_t kBlockBytes = std::uint64_t{64} << 20;

// The blocks covering `bounds` (a region of an array) on a grid of blocks
// made of whole chunks of `chunk_shape`: as many as fit in `max_bytes` of
// `item_size`-byte elements, growing the last dimension first; at least one
// chunk.
class Blocks {
 public:
  Blocks(const Region& bounds, const std::vector<std::uint64_t>& chunk_shape, std::uint64_t item_size,
         std::uint64_t max_bytes);

  std::uint64_t count() const { return count_; }
  // The shape of a whole block, clipped to the bounds' extent.
  std::vector<std::uint64_t> block_shape() const;
  // Block `i` (C order over the grid), clipped to the bounds.
  Region region(std::uint64_t i) const;

 private:
  Region bounds_;
  std::vector<std::uint64_t> block_, first_, per_dim_;  // first_: grid index of the first block per dimension
  std::uint64_t count_ = 1;
};

// Runs write(i, read(i).get()) for i in [0, n), starting read(i + 1) before
// write(i): `read` returns a std::future (e.g. from use_future or
// std::async), `write` consumes the value. Exceptions propagate; a read in
// flight when a write fails finishes in the background or in its future's
// destructor.
template <class Read, class Write>
void pipelined(std::uint64_t n, Read read, Write write) {
  if (n == 0) return;
  auto next = read(std::uint64_t{0});
  for (std::uint64_t i = 0; i < n; ++i) {
    auto value = next.get();
    if (i + 1 < n) next = read(i + 1);
    write(i, value);
  }
}

// `f`, whose get() prefixes engine errors with `dir` as at() does.
template <class T>
std::future<T> at_dir(const std::filesystem::path& dir, std::future<T> f) {
  return std::async(std::launch::deferred, [dir, f = std::move(f)]() mutable { return at(dir, [&] { return f.get(); }); });
}

}  // namespace zarrcoro::cli
