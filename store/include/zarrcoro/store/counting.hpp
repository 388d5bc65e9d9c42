// A Store decorator that counts the requests passing through it and records
// the byte range of every read. Used by tests ("a full read of a zero-size
// array makes zero store requests") and to verify partial (sharded) reads.
//
// Thread-safety: every method may be called concurrently. Counters are atomic;
// the read log is guarded by a mutex. counts() is a snapshot whose fields are
// read one by one, so it is exact only while no request is in flight.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <zarrcoro/store.hpp>

namespace zarrcoro {

class CountingStore : public Store {
 public:
  struct Counts {
    std::uint64_t gets = 0;       // reads, get and exists among them (including misses and failures)
    std::uint64_t get_bytes = 0;  // bytes returned by successful reads
    std::uint64_t get_misses = 0; // reads of an absent key
    std::uint64_t sets = 0;       // writes of a value (set among them)
    std::uint64_t set_bytes = 0;  // bytes written
    std::uint64_t erases = 0;     // writes of nullopt (erase among them)
    std::uint64_t conflicts = 0;  // reads and writes whose condition failed
    std::uint64_t lists = 0;      // list calls
    // All requests of any kind.
    std::uint64_t requests() const { return gets + sets + erases + lists; }
    bool operator==(const Counts&) const = default;
  };

  // `inner` must not be null.
  explicit CountingStore(std::shared_ptr<Store> inner);

  // Each method counts the call, then forwards to the inner store and
  // succeeds or fails exactly as it does (a call is counted even if the inner
  // store throws, e.g. for an invalid key).
  awaitable<std::vector<std::string>> list(std::string prefix) override;
  awaitable<std::vector<KeySize>> list_sizes(std::string prefix) override;  // counted as a list
  awaitable<ReadResult> read(std::string key, ReadOptions options) override;
  std::optional<ReadResult> try_read_now(const std::string& key, const ReadOptions& options) override;
  void try_read_now_many(std::span<const std::string> keys, std::span<const ReadOptions> options,
                         std::span<ReadNow> out) override;  // counted per key, as try_read_now
  bool reads_into() const override { return inner_->reads_into(); }
  awaitable<std::optional<Generation>> write(std::string key, std::optional<Bytes> value,
                                             WriteOptions options) override;
  // "counting+<inner url>"
  std::string url() const override;
  boost::asio::any_io_executor get_executor() const override { return inner_->get_executor(); }

  // A snapshot of the counters.
  Counts counts() const;
  // Every read so far, in call order: (key, requested range).
  std::vector<std::pair<std::string, ByteRange>> gets_log() const;
  // Zeroes the counters and clears the get log.
  void reset();

  const std::shared_ptr<Store>& inner() const { return inner_; }

 private:
  void count_get(const std::string& key, const ByteRange& range);
  void count_result(const ReadResult& r, std::size_t into_bytes);  // into_bytes: ReadOptions::into's size

  std::shared_ptr<Store> inner_;
  std::atomic<std::uint64_t> gets_{0}, get_bytes_{0}, get_misses_{0}, sets_{0}, set_bytes_{0},
      erases_{0}, lists_{0}, conflicts_{0};
  mutable std::mutex log_mu_;
  std::vector<std::pair<std::string, ByteRange>> log_;
};

}  // namespace zarrcoro
