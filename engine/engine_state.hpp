// Engine-internal state owned by a Runtime: the scheduler, the in-flight
// limits and the per-key locks shared by every array of the runtime.
#pragma once

#include <optional>
#include <unordered_map>

#include <zarrcoro/store.hpp>

#include "codecs/sharding.hpp"
#include "engine/async_sync.hpp"
#include "engine/scheduler.hpp"

namespace zarrcoro::detail {

// Decoded shard indexes by store and key, each with the generation of the
// shard it was decoded from. An entry is only a hint: every read that uses it
// is conditional on that generation, so a shard that anyone rewrote (another
// runtime, process or store object) is noticed and its index refetched.
// Indexes from stores that cannot version values are never cached. At most
// kMaxEntries indexes of kMaxBytes in all: beyond, the cache starts over.
class ShardIndexCache {
 public:
  using Index = std::shared_ptr<const codecs::ShardingCodec::Index>;
  struct Entry {
    Index index;
    Generation generation;
  };
  static constexpr std::size_t kMaxEntries = 1 << 16;
  static constexpr std::size_t kMaxBytes = std::size_t{64} << 20;

  std::optional<Entry> find(const void* store, const std::string& key) {
    std::lock_guard lk(mu_);
    auto it = map_.find(id(store, key));
    if (it == map_.end()) return std::nullopt;
    return it->second;
  }
  // Does nothing for an unknown generation (invalidate instead).
  void put(const void* store, const std::string& key, Entry entry) {
    if (entry.generation.unknown()) return;
    const std::size_t bytes = bytes_of(entry);
    std::lock_guard lk(mu_);
    erase(id(store, key));
    if (map_.size() >= kMaxEntries || bytes_ + bytes > kMaxBytes) {
      map_.clear();
      bytes_ = 0;
    }
    map_.emplace(id(store, key), std::move(entry));
    bytes_ += bytes;
  }
  void invalidate(const void* store, const std::string& key) {
    std::lock_guard lk(mu_);
    erase(id(store, key));
  }

 private:
  static std::string id(const void* store, const std::string& key) {
    return std::to_string(reinterpret_cast<std::uintptr_t>(store)) + ':' + key;
  }
  static std::size_t bytes_of(const Entry& e) { return e.index ? e.index->entries.size() * sizeof(std::uint64_t) : 0; }
  void erase(const std::string& id) {
    if (auto it = map_.find(id); it != map_.end()) {
      bytes_ -= bytes_of(it->second);
      map_.erase(it);
    }
  }
  std::mutex mu_;
  std::unordered_map<std::string, Entry> map_;
  std::size_t bytes_ = 0;  // of the indexes in map_
};

struct EngineState {
  EngineState(boost::asio::any_io_executor io, boost::asio::thread_pool& pool, unsigned threads,
              const RuntimeOptions& o, std::function<bool()> on_io_thread)
      : scheduler(std::move(io), pool, threads, o, std::move(on_io_thread)),
        requests(std::max<std::size_t>(1, o.max_inflight_requests)),
        bytes(std::max<std::size_t>(1, o.max_inflight_bytes)) {}

  Scheduler scheduler;
  AsyncSemaphore requests;  // store requests in flight
  AsyncSemaphore bytes;     // decoded chunk bytes in flight
  KeyLocks key_locks;       // read-modify-write of one chunk key at a time
  ShardIndexCache shard_indexes;
};

}  // namespace zarrcoro::detail
