// Engine-internal state owned by a Runtime: the scheduler, the in-flight
// limits and the per-key locks shared by every array of the runtime.
#pragma once

#include <unordered_map>

#include "codecs/sharding.hpp"
#include "engine/async_sync.hpp"
#include "engine/scheduler.hpp"

namespace zarrcoro::detail {

// Decoded shard indexes by store and key, so that repeated reads of one shard
// do not refetch its index. Writes through this runtime invalidate their key;
// an index fetched while any write ran is not cached (it may be stale).
class ShardIndexCache {
 public:
  using Index = std::shared_ptr<const codecs::ShardingCodec::Index>;
  static constexpr std::size_t kMaxEntries = 1 << 16;

  std::uint64_t generation() const { return generation_.load(std::memory_order_acquire); }
  Index find(const void* store, const std::string& key) {
    std::lock_guard lk(mu_);
    auto it = map_.find(id(store, key));
    return it == map_.end() ? nullptr : it->second;
  }
  // Caches `index` unless a write happened since `generation` was read.
  void put(const void* store, const std::string& key, Index index, std::uint64_t generation) {
    std::lock_guard lk(mu_);
    if (generation != generation_.load(std::memory_order_relaxed)) return;
    if (map_.size() >= kMaxEntries) map_.clear();
    map_[id(store, key)] = std::move(index);
  }
  void invalidate(const void* store, const std::string& key) {
    std::lock_guard lk(mu_);
    generation_.fetch_add(1, std::memory_order_release);
    map_.erase(id(store, key));
  }

 private:
  static std::string id(const void* store, const std::string& key) {
    return std::to_string(reinterpret_cast<std::uintptr_t>(store)) + ':' + key;
  }
  std::mutex mu_;
  std::atomic<std::uint64_t> generation_{0};
  std::unordered_map<std::string, Index> map_;
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
