// A MemoryStore that reads into ReadOptions::into as FilesystemStore does
// (when the clipped range is exactly into.size() bytes), for engine tests
// of in-place reads without a file system. Counts what it read in place.
//
// Thread-safety: as MemoryStore; the counter is atomic.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>

#include <zarrcoro/store/memory.hpp>

namespace zarrcoro::test {

class InPlaceStore : public MemoryStore {
 public:
  std::atomic<std::uint64_t> in_place{0};  // reads answered into ReadOptions::into

  bool reads_into() const override { return true; }
  std::optional<ReadResult> try_read_now(const std::string& key, const ReadOptions& options) override {
    auto r = MemoryStore::try_read_now(key, options);
    if (r && r->value && !r->value->empty() && r->value->size() == options.into.size()) {
      std::copy(r->value->begin(), r->value->end(), options.into.begin());
      r->value.emplace();
      r->in_place = true;
      ++in_place;
    }
    return r;
  }
  awaitable<ReadResult> read(std::string key, ReadOptions options) override {
    co_return *try_read_now(key, options);
  }
};

}  // namespace zarrcoro::test
