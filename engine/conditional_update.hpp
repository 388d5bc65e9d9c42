// Optimistic read-modify-write of one stored value (docs/design.md,
// "Consistency"): read the value with its generation, compute the new one,
// write it only if the stored value is still that generation; on a
// conflict, wait a random, growing while and start again.
//
// Thread-safety: a free coroutine; each call is independent.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>

#include <zarrcoro/store.hpp>

namespace zarrcoro::detail {

// What one attempt decided: store `value`, erase the key, or leave it.
struct Update {
  enum class Kind { store, erase, keep } kind = Kind::keep;
  Bytes value;

  static Update store(Bytes v) { return {Kind::store, std::move(v)}; }
  static Update erase() { return {Kind::erase, {}}; }
  static Update keep() { return {}; }
};

// How long conflicts may go on before the update gives up: the same
// default as RuntimeOptions::write_conflict_timeout.
inline constexpr std::chrono::milliseconds kDefaultConflictTimeout{60000};

// The computation of one attempt: `current` is the stored value (nullopt:
// absent). Called again after each conflict, with the value then stored.
// Errors it raises end the update.
using Modify = std::function<awaitable<Update>(std::optional<Bytes> current)>;

// Runs `modify` on the value under `key` and stores its result if nobody
// replaced the value in between, retrying while others do, for at most
// `timeout`; then StoreError(key, field "generation"). Returns true if it
// stored or erased, false if `modify` chose to keep the value.
awaitable<bool> conditional_update(Store& store, std::string key, Modify modify,
                                   std::chrono::milliseconds timeout = kDefaultConflictTimeout);

// The wait before attempt `attempt + 1` of a conflicting write: random,
// growing from about 1 ms to about 100 ms.
awaitable<void> conflict_backoff(unsigned attempt);

}  // namespace zarrcoro::detail
