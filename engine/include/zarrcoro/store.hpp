// The asynchronous key-value store interface (Zarr v3 core spec, "Stores").
//
// Thread-safety: a Store is shared by all arrays of a Runtime. Every method
// may be called concurrently from coroutines running on the runtime's
// io_context (any of its threads); implementations synchronize internally.
// Stores never run codec work: they move bytes.
//
// Keys are '/'-separated relative paths such as "a/b/zarr.json" or "a/c/0/1".
// A key must not be empty, start with '/', or contain a "." or ".." segment or
// an empty segment; stores reject such keys with InvalidArgument.
//
// Errors: StoreError for I/O failures (naming the key), InvalidArgument for a
// bad key. A missing key is not an error: `get` returns nullopt.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/awaitable.hpp>

#include <zarrcoro/bytes.hpp>

namespace zarrcoro {

template <class T>
using awaitable = boost::asio::awaitable<T>;

// A request for part of a value.
struct ByteRange {
  enum class Kind : std::uint8_t { full, range, suffix };
  Kind kind = Kind::full;
  std::uint64_t offset = 0;  // kind == range: first byte
  std::uint64_t length = 0;  // kind == range: byte count; kind == suffix: last `length` bytes

  static ByteRange all() { return {}; }
  static ByteRange from(std::uint64_t offset, std::uint64_t length) {
    return {Kind::range, offset, length};
  }
  static ByteRange last(std::uint64_t length) { return {Kind::suffix, 0, length}; }
};

class Store {
 public:
  virtual ~Store() = default;

  // Returns the value (or the requested part of it), or nullopt if the key is
  // absent. A range reaching past the end is clipped to the value's end; a
  // suffix longer than the value returns the whole value.
  virtual awaitable<std::optional<Bytes>> get(std::string key, ByteRange range = {}) = 0;

  // Stores `value` under `key`, replacing any previous value atomically: a
  // concurrent reader sees the old or the new value, never a mix.
  virtual awaitable<void> set(std::string key, Bytes value) = 0;

  // Removes `key`; removing an absent key succeeds.
  virtual awaitable<void> erase(std::string key) = 0;

  // True if `key` holds a value.
  virtual awaitable<bool> exists(std::string key) = 0;

  // All keys starting with `prefix` (which is a plain string prefix; use a
  // trailing '/' to list a "directory"), in lexicographic order.
  virtual awaitable<std::vector<std::string>> list(std::string prefix) = 0;

  // A short description for messages, e.g. "memory" or "file:///data/a.zarr".
  virtual std::string url() const = 0;
};

// Throws InvalidArgument unless `key` is a valid store key (see above).
void validate_key(const std::string& key);

}  // namespace zarrcoro
