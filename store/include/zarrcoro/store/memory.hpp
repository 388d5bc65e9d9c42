// An in-memory Store: a hash map from key to value.
//
// Thread-safety: every method may be called concurrently from any thread; a
// single mutex guards the map. Values are immutable once stored (shared
// between the map and in-flight readers), so a get copies its range outside
// the lock and a concurrent set never tears it (try_read_now_many copies up
// to 16 KiB of each group of 64 keys under the lock, the rest outside).
// Every stored value carries a version number unique within the store (its
// Generation); conditional reads and writes compare it under the mutex.
//
// Cost: a read, write or exists is one hash lookup in an open-addressing
// table (constant time); a read whose range fits ReadOptions::into exactly
// is one copy there, with no allocation. try_read_now_many takes the lock
// once per 64 keys (an engine read of many small chunks: about 0.1 us less
// per chunk than one try_read_now each). list and list_sizes scan every key
// and sort the matches.
#pragma once

#include <memory>
#include <mutex>
#include <string>

#include <boost/unordered/unordered_flat_map.hpp>

#include <zarrcoro/store.hpp>

namespace zarrcoro {

class MemoryStore : public Store {
 public:
  MemoryStore() = default;

  // Success: keys starting with `prefix`, sorted. Never fails.
  awaitable<std::vector<std::string>> list(std::string prefix) override;
  awaitable<std::vector<KeySize>> list_sizes(std::string prefix) override;
  // Versioned and conditional (compare-and-swap), see Store: a read
  // returns a copy of the (clipped) range, or nullopt if absent; a write is
  // visible to every later read. Failure: InvalidArgument for a bad key.
  awaitable<ReadResult> read(std::string key, ReadOptions options) override;
  // Always answers.
  std::optional<ReadResult> try_read_now(const std::string& key, const ReadOptions& options) override;
  // Answers every key, a group of keys per lock, without calling
  // try_read_now: a subclass that overrides try_read_now overrides this too
  // (Store::try_read_now_many calls try_read_now for each key).
  void try_read_now_many(std::span<const std::string> keys, std::span<const ReadOptions> options,
                         std::span<ReadNow> out) override;
  // True: a range of exactly into.size() bytes is copied there.
  bool reads_into() const override { return true; }
  awaitable<std::optional<Generation>> write(std::string key, std::optional<Bytes> value,
                                             WriteOptions options) override;
  // "memory://"
  std::string url() const override;

  // The number of keys stored.
  std::size_t size() const;

 private:
  struct Entry {
    std::shared_ptr<const Bytes> bytes;
    std::uint64_t version;
  };
  static Generation generation_of(const Entry* e);
  const Entry* look_up(const std::string& key, const ReadOptions& options, ReadResult& r) const;
  void copy_out(const Bytes& value, const ReadOptions& options, ReadResult& r) const;

  mutable std::mutex mu_;
  std::uint64_t next_version_ = 1;
  boost::unordered_flat_map<std::string, Entry> values_;  // no pointer into it outlives mu_
};

}  // namespace zarrcoro
