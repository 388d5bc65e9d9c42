// Engine-internal state owned by a Runtime: the scheduler, the in-flight
// limits and the per-key locks shared by every array of the runtime.
#pragma once

#include <array>
#include <atomic>
#include <memory>
#include <optional>
#include <string_view>
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
// Indexes from stores that cannot version values are never cached, nor
// those whose generation may repeat (Generation::may_repeat). An entry
// holds a weak reference to its store, so a store made where a freed one
// was (same address, and the same generations: MemoryStore counts from 1
// in each) never finds the freed one's indexes. At most kMaxEntries
// indexes of kMaxBytes in all: beyond, the cache starts over. An entry is
// found only through a sharding codec of the same index layout
// (ShardingCodec::index_layout) as the one that decoded it: a handle that
// predates an overwrite of the array with other shards, or one opened from
// a consolidated copy that disagrees with the node, never plans its reads
// with another layout's index.
class ShardIndexCache {
 public:
  using Index = std::shared_ptr<const codecs::ShardingCodec::Index>;
  struct Entry {
    Index index;
    Generation generation;
  };
  static constexpr std::size_t kMaxEntries = 1 << 16;
  static constexpr std::size_t kMaxBytes = std::size_t{64} << 20;

  std::optional<Entry> find(const std::shared_ptr<Store>& store, const std::string& key,
                            const codecs::ShardingCodec& layout) {
    std::lock_guard lk(mu_);
    auto it = map_.find(id(store, key, layout));
    if (it == map_.end()) return std::nullopt;
    const Index& index = it->second.entry.index;
    if (!same_store(it->second.store, store) || (index && index->entries.size() != 2 * layout.num_inner())) {
      erase(it);
      return std::nullopt;
    }
    return it->second.entry;
  }
  // Does nothing for an unknown generation, or one that may repeat
  // (invalidate instead).
  void put(const std::shared_ptr<Store>& store, const std::string& key, const codecs::ShardingCodec& layout,
           Entry entry) {
    if (entry.generation.unknown() || entry.generation.may_repeat) return;
    const std::size_t bytes = bytes_of(entry);
    std::string at = id(store, key, layout);
    std::lock_guard lk(mu_);
    if (auto it = map_.find(at); it != map_.end()) erase(it);
    if (map_.size() >= kMaxEntries || bytes_ + bytes > kMaxBytes) {
      map_.clear();
      bytes_ = 0;
    }
    map_.emplace(std::move(at), Stored{store, std::move(entry)});
    bytes_ += bytes;
  }
  void invalidate(const std::shared_ptr<Store>& store, const std::string& key, const codecs::ShardingCodec& layout) {
    std::lock_guard lk(mu_);
    if (auto it = map_.find(id(store, key, layout)); it != map_.end()) erase(it);
  }

 private:
  struct Stored {
    std::weak_ptr<Store> store;  // keeps its control block, so no other store's can have its address
    Entry entry;
  };
  using Map = std::unordered_map<std::string, Stored>;

  static std::string id(const std::shared_ptr<Store>& store, const std::string& key,
                        const codecs::ShardingCodec& layout) {
    return std::to_string(reinterpret_cast<std::uintptr_t>(store.get())) + ':' + key + '\n' + layout.index_layout();
  }
  static bool same_store(const std::weak_ptr<Store>& a, const std::shared_ptr<Store>& b) {
    return !a.owner_before(b) && !b.owner_before(a);
  }
  static std::size_t bytes_of(const Entry& e) { return e.index ? e.index->entries.size() * sizeof(std::uint64_t) : 0; }
  void erase(Map::iterator it) {
    bytes_ -= bytes_of(it->second.entry);
    map_.erase(it);
  }
  std::mutex mu_;
  Map map_;
  std::size_t bytes_ = 0;  // of the indexes in map_
};

// Writes of this runtime in progress and done, per chunk key (striped: keys
// may share a counter), for stores that cannot version values. There a
// partial shard read takes its index and inner chunks from one version of
// the shard only with respect to this runtime's writers (array.hpp): it
// notes its key's count before reading the index and plans again when the
// count moved or was odd (a write in progress) by the end of its reads. A
// sequence lock without the lock: writers never wait for readers.
class WriteCounts {
 public:
  std::uint64_t now(std::string_view key) const { return slot(key).load(std::memory_order_acquire); }
  // True if no write of `key` ran since now() gave `before`.
  bool unchanged(std::string_view key, std::uint64_t before) const { return before % 2 == 0 && now(key) == before; }
  // Around each store write or erase of `key` (end also when it failed).
  void begin(std::string_view key) { slot(key).fetch_add(1, std::memory_order_acq_rel); }
  void end(std::string_view key) { slot(key).fetch_add(1, std::memory_order_acq_rel); }

 private:
  std::atomic<std::uint64_t>& slot(std::string_view key) const { return counts_[std::hash<std::string_view>()(key) % kSlots]; }
  static constexpr std::size_t kSlots = 256;
  mutable std::array<std::atomic<std::uint64_t>, kSlots> counts_{};
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
  WriteCounts writes;
};

}  // namespace zarrcoro::detail
