// MemoryStore variants for engine tests of in-place reads without a file
// system: InPlaceStore counts what it read into ReadOptions::into (as
// MemoryStore and FilesystemStore do, when the clipped range is exactly
// into.size() bytes); ValueStore never reads in place, as HTTP and S3 stores.
//
// Thread-safety: as MemoryStore; the counter is atomic.
#pragma once

#include <atomic>
#include <cstdint>

#include <zarrcoro/store/memory.hpp>

namespace zarrcoro::test {

class InPlaceStore : public MemoryStore {
 public:
  std::atomic<std::uint64_t> in_place{0};  // reads answered into ReadOptions::into

  std::optional<ReadResult> try_read_now(const std::string& key, const ReadOptions& options) override {
    auto r = MemoryStore::try_read_now(key, options);
    if (r && r->in_place) ++in_place;
    return r;
  }
  void try_read_now_many(std::span<const std::string> keys, std::span<const ReadOptions> options,
                         std::span<ReadNow> out) override {
    Store::try_read_now_many(keys, options, out);  // the try_read_now above per key
  }
  awaitable<ReadResult> read(std::string key, ReadOptions options) override {
    co_return *try_read_now(key, options);
  }
};

class ValueStore : public MemoryStore {
 public:
  bool reads_into() const override { return false; }
};

}  // namespace zarrcoro::test
