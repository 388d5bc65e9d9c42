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
//
// Versions (the model of TensorStore's kvstore and of HTTP's ETag): `read`
// returns a value together with its Generation, and `read` and `write` can
// be made conditional on one. The engine builds its consistency on them:
// a partial shard read takes the index and every inner chunk from one
// generation of the shard, and a partial chunk or shard write is an
// optimistic read-modify-write that retries when another writer (another
// Runtime, another process) replaced the value in between.
//
// What each store guarantees: MemoryStore and FilesystemStore version every
// value and honour conditional reads and writes (FilesystemStore through a
// lock on the value's directory that the kernel drops if the writer dies;
// on a file system with coarse times and no inode versions, FAT and exFAT,
// its generations are unknown).
// HttpStore versions by ETag (conditional reads via If-Match); S3Store also
// writes conditionally (If-Match / If-None-Match). A store that cannot
// version values reports unknown generations and raises UnsupportedError
// for conditions; the engine then falls back to unconditional reads and
// writes (no protection against other writers).
#pragma once

#include <cstdint>
#include <exception>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>

#include <zarrcoro/async.hpp>
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
  // Whether it selects no byte of any value: a read of it asks only whether
  // the key holds a value (Store::exists).
  bool empty() const { return kind != Kind::full && length == 0; }
};

// The half-open byte interval [begin, end) that `range` selects from a value
// of `size` bytes, clipped to the value (see Store::read). Shared by stores.
struct ByteExtent {
  std::uint64_t begin = 0, end = 0;
  std::uint64_t size() const { return end - begin; }
};
ByteExtent clip(const ByteRange& range, std::uint64_t size);

// The version of one stored value: an opaque token that changes whenever the
// value is replaced (FilesystemStore: device, inode, size, modification
// time and inode version of the file read; MemoryStore: a counter; HTTP and
// S3: the ETag). Equal tokens mean the same value. The default-constructed
// generation is "unknown": in a result, the store cannot tell; as a
// condition, none.
struct Generation {
  std::string token;
  // The store cannot rule out that a later value gets this token again
  // (FilesystemStore: a file another program wrote, on a file system
  // without inode versions, see filesystem.hpp). Good for a condition
  // checked at once; a cache must not keep anything by it.
  bool may_repeat = false;

  // The generation of "no value at this key".
  static Generation absent() { return {"<absent>"}; }
  bool unknown() const { return token.empty(); }
  bool is_absent() const { return token == "<absent>"; }
  bool operator==(const Generation& other) const { return token == other.token; }
};

struct ReadOptions {
  ByteRange range;
  // When known: read only if the stored generation equals it; otherwise the
  // result says `changed` and holds nothing (HTTP: If-Match, 412).
  Generation if_equal;
  // Where the caller wants the bytes, if anywhere (e.g. their place in an
  // array's output). A store whose reads_into() is true reads the (clipped)
  // range straight into `into` when it is exactly into.size() bytes long;
  // the result then says `in_place` and its value is empty. Otherwise (any
  // other size, or a store that cannot) `into` is ignored and the value
  // comes as usual. The caller keeps `into` alive, and touches it not,
  // until the read completes (the kernel or a thread of the store may write
  // it). After an error, a failed condition, a value of another size or a
  // try_read_now that did not answer, its contents are unspecified.
  MutableByteSpan into;
  // False: the caller will not look at the result's generation (an
  // unconditional read), so a store may leave it unknown to save work
  // (FilesystemStore answers a small page-cached value that fits `into`
  // with open, read and close: no fstat).
  bool need_generation = true;
  // The value's likely size in bytes when the caller knows it (an array's
  // chunk: its decoded size plus a margin), 0 when not. Only a hint: a
  // store may read up to this many bytes (and one more) without first
  // asking for the size, and a wrong hint costs time, never data
  // (FilesystemStore answers a whole small page-cached value read without
  // need_generation with open, read and close: no fstat).
  std::size_t size_hint = 0;
  // try_read_now only: answer from what the store's caches hold alone, with
  // no wait of any length, also where the usual answer would wait briefly
  // (FilesystemStore: the path must be in the kernel's lookup cache, so a
  // key never looked up, even a missing one, is declined). For a call on a
  // thread that must never wait for a device (RuntimeOptions::caller_reads).
  bool caches_only = false;
};

struct ReadResult {
  std::optional<Bytes> value;  // the (clipped) range; nullopt if the key holds no value or `changed`
  Generation generation;       // of the value read; absent() if none; unknown if the store cannot tell (then
                               // also for a missing key)
  bool changed = false;        // the if_equal condition failed: nothing was read
  bool in_place = false;       // the range went into ReadOptions::into; `value` is engaged and empty
};

// One answer of Store::try_read_now_many: what try_read_now returned, or
// the exception it raised.
struct ReadNow {
  std::optional<ReadResult> result;
  std::exception_ptr error;
};

// A key and the size of its value in bytes (Store::list_sizes).
struct KeySize {
  std::string key;
  std::uint64_t size = 0;
  bool operator==(const KeySize&) const = default;
};

struct WriteOptions {
  // When known: write only if the stored generation equals it (absent():
  // only if the key holds no value).
  Generation if_equal;
  // A hint: the caller writes other keys alongside this one (an array
  // write of many chunks), so that a store may spread their work over
  // threads of its own (FilesystemStore: its pool takes them whole).
  bool among_many = false;
};

class Store {
 public:
  virtual ~Store() = default;

  // ---- The primitives: a store implements read, write, list and url. ----

  // read and write take their options without defaults on purpose: g++ 12
  // miscompiles a defaulted (braced) argument with a destructor in a
  // co_await expression. Name the options first, e.g.
  //   ReadOptions o;
  //   o.if_equal = g;
  //   ReadResult r = co_await store->read(key, std::move(o));

  // A versioned, optionally conditional read (see Generation and
  // ReadOptions). The value is the requested range of the key's value,
  // clipped to its end (a suffix longer than the value is the whole
  // value), or nullopt if the key holds no value. A store that cannot
  // version values reports an unknown generation, also for a missing key
  // (absent() would be a condition it cannot honour), and raises
  // UnsupportedError(key, "if_equal") for a condition. An empty range asks
  // only whether the key holds a value (HTTP and S3: a HEAD request).
  virtual awaitable<ReadResult> read(std::string key, ReadOptions options) = 0;

  // Stores `value` (nullopt: erases the key; erasing an absent key
  // succeeds) if the condition holds, replacing any previous value
  // atomically: a concurrent reader sees the old or the new value, never a
  // mix. Returns the new generation (absent() after an erase; unknown if
  // the store cannot tell), or nullopt when the condition failed and
  // nothing was written. A store that cannot version values raises
  // UnsupportedError(key, "if_equal") for a condition.
  virtual awaitable<std::optional<Generation>> write(std::string key, std::optional<Bytes> value,
                                                     WriteOptions options) = 0;

  // All keys starting with `prefix` (which is a plain string prefix; use a
  // trailing '/' to list a "directory"), in lexicographic order.
  virtual awaitable<std::vector<std::string>> list(std::string prefix) = 0;

  // A short description for messages, e.g. "memory" or "file:///data/a.zarr".
  virtual std::string url() const = 0;

  // ---- Shorthands over read and write (same errors). ----

  // The value (or the requested part of it), or nullopt if the key is absent:
  // an unconditional read that needs no generation.
  awaitable<std::optional<Bytes>> get(std::string key, ByteRange range = {});
  // An unconditional write of `value`.
  awaitable<void> set(std::string key, Bytes value);
  // An unconditional erase; removing an absent key succeeds.
  awaitable<void> erase(std::string key);
  // True if `key` holds a value: a read of an empty range.
  awaitable<bool> exists(std::string key);

  // ---- Optional: defaults built on the primitives, which a store may answer faster. ----

  // Removes every key in `keys`; absent keys are fine. Raises InvalidArgument
  // for a bad key, StoreError naming the first key that could not be
  // removed (earlier ones may be gone). The default erases them one by one;
  // S3Store sends DeleteObjects requests of 1000 keys.
  virtual awaitable<void> erase_many(std::vector<std::string> keys);

  // list() with the size of each value in bytes (storage statistics, as
  // `zarrcoro info` shows them). The default lists, then reads each value
  // to measure it (a key that vanishes meanwhile is left out);
  // FilesystemStore (stat), MemoryStore and S3Store (ListObjectsV2's Size)
  // answer from the listing alone. Errors as list (a store that cannot list
  // raises there).
  virtual awaitable<std::vector<KeySize>> list_sizes(std::string prefix);

  // The same read answered at once on the calling thread, when the store can
  // do so without waiting (a value in memory, a file in the page cache), or
  // nullopt when it cannot: then call read(). It never waits on a network
  // and never for long on a disk (with ReadOptions::caches_only, not at
  // all). Lets the engine fetch many small chunks without a coroutine per
  // chunk. Same errors as read. Default: nullopt.
  virtual std::optional<ReadResult> try_read_now(const std::string& key, const ReadOptions& options);

  // try_read_now for each of `keys` with its `options`: on return, out[k]
  // holds what try_read_now(keys[k], options[k]) returned, or the error it
  // raised (out[k].result is then nullopt); what out[k] held before is
  // replaced. `options` and `out` have keys.size() elements. The store may share the work
  // with threads of its own (a file store spreads the system calls of many
  // small reads over two cores), so one call may answer on several cores;
  // it returns once every key is answered. A key's error goes into its
  // out[k]; the call itself throws only std::bad_alloc. Default:
  // try_read_now for each key in turn, on the calling thread.
  virtual void try_read_now_many(std::span<const std::string> keys, std::span<const ReadOptions> options,
                                 std::span<ReadNow> out);

  // True if read() and try_read_now() fill ReadOptions::into (see there);
  // the same for the store's lifetime. Default: false; FilesystemStore and
  // MemoryStore: true.
  virtual bool reads_into() const { return false; }

  // The executor this store's I/O runs on (the io_context it was made
  // with), where its token-form operations run; empty for a store that does
  // no I/O of its own (MemoryStore; a decorator forwards its inner store's).
  virtual boost::asio::any_io_executor get_executor() const { return {}; }

  // Completion-token forms of get, set, erase, exists, list, read and write
  // (see async.hpp): each runs the awaitable form on get_executor() (if
  // empty, on the system executor) and completes with
  // void(std::exception_ptr[, result]) through `token` (use_awaitable,
  // use_future, deferred, a callback, as_tuple(...)). Same results and
  // errors as the awaitable forms. Cancellation (the handler's slot) aborts
  // the store's requests in flight (io_uring cancel, socket cancel): the
  // operation then fails with boost::system::system_error
  // (asio::error::operation_aborted); a cancelled write or set may or may
  // not have replaced the value, never partly. The store must outlive the
  // operation.
  template <class Token>
  auto async_get(std::string key, ByteRange range, Token&& token) {
    return detail::async_spawn(get_executor(), get(std::move(key), range), std::forward<Token>(token));
  }
  template <class Token>
  auto async_set(std::string key, Bytes value, Token&& token) {
    return detail::async_spawn(get_executor(), set(std::move(key), std::move(value)), std::forward<Token>(token));
  }
  template <class Token>
  auto async_erase(std::string key, Token&& token) {
    return detail::async_spawn(get_executor(), erase(std::move(key)), std::forward<Token>(token));
  }
  template <class Token>
  auto async_exists(std::string key, Token&& token) {
    return detail::async_spawn(get_executor(), exists(std::move(key)), std::forward<Token>(token));
  }
  template <class Token>
  auto async_list(std::string prefix, Token&& token) {
    return detail::async_spawn(get_executor(), list(std::move(prefix)), std::forward<Token>(token));
  }
  template <class Token>
  auto async_read(std::string key, ReadOptions options, Token&& token) {
    return detail::async_spawn(get_executor(), read(std::move(key), std::move(options)), std::forward<Token>(token));
  }
  template <class Token>
  auto async_write(std::string key, std::optional<Bytes> value, WriteOptions options, Token&& token) {
    return detail::async_spawn(get_executor(), write(std::move(key), std::move(value), std::move(options)),
                               std::forward<Token>(token));
  }

  // False if a conditional erase is not atomic here (S3 servers ignore
  // If-Match on DeleteObject; S3Store checks, then deletes). The engine then
  // stores an all-fill chunk conditionally instead of erasing one.
  virtual bool erases_atomically() const { return true; }
};

// Throws InvalidArgument unless `key` is a valid store key (see above).
void validate_key(const std::string& key);

}  // namespace zarrcoro
