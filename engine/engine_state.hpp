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
// Indexes from stores that cannot version values are never cached.
class ShardIndexCache {
 public:
  using Index = std::shared_ptr<const codecs::ShardingCodec::Index>;
  struct Entry {
    Index index;
    Generation generation;
  };
  static constexpr std::size_t kMaxEntries = 1 << 16;

  std::optional<Entry> find(const void* store, const std::string& key) {
    std::lock_guard lk(mu_);
    auto it = map_.find(id(store, key));
    if (it == map_.end()) return std::nullopt;
    return it->second;
  }
  void put(const void* store, const std::string& key, Entry entry) {
    if (entry.generation.unknown()) return;
    std::lock_guard lk(mu_);
    if (map_.size() >= kMaxEntries) map_.clear();
    map_[id(store, key)] = std::move(entry);
  }
  void invalidate(const void* store, const std::string& key) {
    std::lock_guard lk(mu_);
    map_.erase(id(store, key));
  }

 private:
  static std::string id(const void* store, const std::string& key) {
    return std::to_string(reinterpret_cast<std::uintptr_t>(store)) + ':' + key;
  }
  std::mutex mu_;
  std::unordered_map<std::string, Entry> map_;
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
