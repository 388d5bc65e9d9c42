// Zarr arrays: open, create, read and write rectangular regions.
//
// Thread-safety: an Array is a cheap, copyable handle to immutable metadata
// and a prepared codec pipeline; every method may be called concurrently from
// any thread or coroutine. Concurrent writes that touch the same chunk are
// serialized per chunk key inside the engine; writes to overlapping regions
// land in an unspecified order.
//
// Concurrency with other writers (other Runtimes, other processes), on a
// store that versions values (memory, filesystem, S3; see store.hpp):
//  - no update is lost: a write that covers part of a chunk (or of a shard)
//    reads it with its generation and stores conditionally, re-reading and
//    merging again when someone replaced it in between, with random growing
//    waits; while others keep winning it retries up to
//    RuntimeOptions::write_conflict_timeout, then raises StoreError with
//    field "generation";
//  - a reader sees each chunk, and each inner chunk of a shard, either
//    before or after any concurrent write, never a mix: a partial shard
//    read takes the index and the inner chunks from one version of the
//    shard (planned again from a fresh index up to 4 times, then read
//    whole in one request, so readers progress under any write load). A region spanning
//    several chunks may show some chunks old and others new.
// On a store that cannot version values these hold only for writers in one
// Runtime.
//
// Three APIs over the same engine (one implementation underneath):
//  - awaitable: methods returning `awaitable<...>`; they may be awaited from
//    a coroutine on any executor and resume on that executor. Errors are
//    raised as the typed exceptions each method names.
//  - completion token: `async_*` methods taking any Asio completion token
//    (use_awaitable, use_future, deferred, a callback, as_tuple(...),
//    bind_cancellation_slot(...)); they complete with
//    void(std::exception_ptr[, result]): the same typed exception, which
//    use_awaitable and use_future rethrow and which to_error_code (error.hpp)
//    turns into an error_code for handler styles that want one. The handler's
//    associated executor runs it (default: the runtime's io_context), and
//    its cancellation slot is honoured (see Cancellation). See async.hpp.
//  - blocking: `*_blocking` methods wait for the result. They may be called
//    from many threads at once, but not from an I/O or codec thread of the
//    runtime (that would deadlock): there they throw InvalidArgument.
//
// Cancellation (Asio per-operation cancellation; terminal, partial and total
// all mean "stop"): of an async_* call through its handler's slot, or of an
// awaitable read/write through the awaiting coroutine's cancellation state
// (e.g. `co_await (a.read(r, out) || timer.async_wait(use_awaitable))` with
// asio::experimental::awaitable_operators). A cancelled read or write
// starts no further chunk, cancels its store requests in flight and its
// waits for the byte budget, request slots and chunk locks (all released),
// skips codec work not yet begun, and completes with Cancelled (error code
// asio::error::operation_aborted) once the codec work already running has
// ended: about one chunk's decode time. After completion it never touches
// the caller's buffer; after a cancelled read the buffer's content is
// unspecified. A cancelled write is chunk-granular: every chunk holds its old
// or its new value, never a mix (stores replace values atomically, also when
// a request is cancelled); which chunks got the new value is unspecified,
// so rewrite the region to be sure. Open and create are cancelled through
// their store requests. A deadline is a cancellation by a timer: see the
// README ("Deadlines").
//
// Layout: buffers are C order, native byte order, `data_type.size()` bytes
// per element; a region's buffer holds exactly region.num_elements()
// elements. Missing chunks read as fill_value. A chunk whose every byte
// equals the fill value's bytes is not stored (an existing one is erased).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <zarrcoro/async.hpp>
#include <zarrcoro/bytes.hpp>
#include <zarrcoro/dtype.hpp>
#include <zarrcoro/metadata.hpp>
#include <zarrcoro/store.hpp>

namespace zarrcoro {

class Runtime;

// A box selection: per dimension the half-open element range [start, stop).
struct Region {
  std::vector<std::uint64_t> start, stop;

  static Region all(const std::vector<std::uint64_t>& shape);
  std::vector<std::uint64_t> shape() const;
  // The product of the extents. Raises InvalidArgument(field "region") when
  // it does not fit in 64 bits (a huge array's whole region may not).
  std::uint64_t num_elements() const;
  // Parses "0:10,5:20" against `shape`: one field per dimension; an empty
  // field, ":" or "a:" / ":b" with the bound left out means the whole
  // dimension (or up to / from it), a single index "3" means 3:4. Raises
  // InvalidArgument(field "region") for a wrong number of fields, a bound
  // that is not a non-negative 64-bit integer, start > stop, or a range
  // outside the shape. The whole array: "" or "," repeated rank - 1 times.
  static Region parse(const std::string& text, const std::vector<std::uint64_t>& shape);
};

// An owned n-d array: C order, native byte order.
struct NdArray {
  DataType dtype;
  std::vector<std::uint64_t> shape;
  Bytes data;

  std::uint64_t num_elements() const;
  template <class T>
  std::span<T> as() {
    return {reinterpret_cast<T*>(data.data()), data.size() / sizeof(T)};
  }
  template <class T>
  std::span<const T> as() const {
    return {reinterpret_cast<const T*>(data.data()), data.size() / sizeof(T)};
  }
};

class Array {
 public:
  // An empty handle, to be assigned from open() or create().
  Array() = default;

  // Opens the array at `path` ("" = the store root; "a/b" otherwise).
  // Raises NotFound if there is no metadata document, InvalidMetadata /
  // UnsupportedError if it cannot be used (both naming key and field).
  static awaitable<Array> open(Runtime& rt, std::shared_ptr<Store> store, std::string path);
  // Writes `metadata` (validated first) and returns the array. Existing
  // chunks under `path` are left alone.
  static awaitable<Array> create(Runtime& rt, std::shared_ptr<Store> store, std::string path,
                                 ArrayMetadata metadata);
  static Array open_blocking(Runtime& rt, std::shared_ptr<Store> store, std::string path);
  static Array create_blocking(Runtime& rt, std::shared_ptr<Store> store, std::string path,
                               ArrayMetadata metadata);
  // Token forms of open and create: complete with void(std::exception_ptr, Array).
  template <class Token>
  static auto async_open(Runtime& rt, std::shared_ptr<Store> store, std::string path, Token&& token) {
    return detail::async_spawn(executor_of(rt), open(rt, std::move(store), std::move(path)),
                               std::forward<Token>(token));
  }
  template <class Token>
  static auto async_create(Runtime& rt, std::shared_ptr<Store> store, std::string path, ArrayMetadata metadata,
                           Token&& token) {
    return detail::async_spawn(executor_of(rt), create(rt, std::move(store), std::move(path), std::move(metadata)),
                               std::forward<Token>(token));
  }

  const ArrayMetadata& metadata() const;
  const std::string& path() const;
  const std::shared_ptr<Store>& store() const;
  DataType dtype() const { return metadata().data_type; }
  const std::vector<std::uint64_t>& shape() const { return metadata().shape; }
  // The store key of a chunk, e.g. "a/c/0/1".
  std::string chunk_key(std::span<const std::uint64_t> chunk_coords) const;
  // A short text of the codec chain, e.g. "bytes(little),zstd(3)".
  std::string describe_codecs() const;
  // The runtime's I/O executor: where the token forms run.
  boost::asio::any_io_executor get_executor() const;

  // Reads `region` into `out` (region.num_elements() * dtype().size() bytes).
  // Raises InvalidArgument (region out of bounds, a byte size that does not
  // fit in 64 bits, wrong buffer size),
  // CorruptChunk (key = chunk key, field = codec), StoreError.
  awaitable<void> read(Region region, MutableByteSpan out) const;
  awaitable<NdArray> read(Region region) const;
  // Writes `in` (region.num_elements() * dtype().size() bytes) to `region`.
  // The caller keeps `in` alive until the awaitable completes.
  awaitable<void> write(Region region, ByteSpan in) const;

  // Token forms of read and write: same arguments, results and errors;
  // complete with void(std::exception_ptr) (read into a buffer, write) or
  // void(std::exception_ptr, NdArray). The caller keeps `out` / `in` alive
  // until the handler runs. The handle may be dropped at once.
  template <class Token>
  auto async_read(Region region, MutableByteSpan out, Token&& token) const {
    return detail::async_spawn(get_executor(), read(std::move(region), out), std::forward<Token>(token));
  }
  template <class Token>
  auto async_read(Region region, Token&& token) const {
    return detail::async_spawn(get_executor(), read(std::move(region)), std::forward<Token>(token));
  }
  template <class Token>
  auto async_write(Region region, ByteSpan in, Token&& token) const {
    return detail::async_spawn(get_executor(), write(std::move(region), in), std::forward<Token>(token));
  }

  void read_blocking(const Region& region, MutableByteSpan out) const;
  NdArray read_blocking(const Region& region) const;
  void write_blocking(const Region& region, ByteSpan in) const;

  struct State;  // engine internal

 private:
  static boost::asio::any_io_executor executor_of(Runtime& rt);
  explicit Array(std::shared_ptr<const State> state) : state_(std::move(state)) {}
  std::shared_ptr<const State> state_;
};

// Groups (Zarr v3 core spec, "Group metadata"; Zarr v2 `.zgroup` + `.zattrs`).
class Group {
 public:
  Group() = default;  // an empty handle, to be assigned from open() or create()

  // Opens v3 `zarr.json`, else v2 `.zgroup` (attributes from `.zattrs`).
  // Raises NotFound / InvalidMetadata like Array::open.
  static awaitable<Group> open(Runtime& rt, std::shared_ptr<Store> store, std::string path);
  // zarr_format 2 writes `.zgroup`, `.zattrs` (when there are attributes)
  // and a `.zgroup` at each ancestor holding no node yet (v2 spec, "Groups").
  static awaitable<Group> create(Runtime& rt, std::shared_ptr<Store> store, std::string path,
                                 nlohmann::json attributes = nlohmann::json::object(), int zarr_format = 3);
  static Group open_blocking(Runtime& rt, std::shared_ptr<Store> store, std::string path);
  static Group create_blocking(Runtime& rt, std::shared_ptr<Store> store, std::string path,
                               nlohmann::json attributes = nlohmann::json::object(), int zarr_format = 3);
  // Token forms: complete with void(std::exception_ptr, Group); see Array.
  template <class Token>
  static auto async_open(Runtime& rt, std::shared_ptr<Store> store, std::string path, Token&& token) {
    return detail::async_spawn(executor_of(rt), open(rt, std::move(store), std::move(path)),
                               std::forward<Token>(token));
  }
  template <class Token>
  static auto async_create(Runtime& rt, std::shared_ptr<Store> store, std::string path, nlohmann::json attributes,
                           int zarr_format, Token&& token) {
    return detail::async_spawn(executor_of(rt),
                               create(rt, std::move(store), std::move(path), std::move(attributes), zarr_format),
                               std::forward<Token>(token));
  }

  const std::string& path() const { return path_; }
  const nlohmann::json& attributes() const { return attributes_; }
  int zarr_format() const { return zarr_format_; }

 private:
  static boost::asio::any_io_executor executor_of(Runtime& rt);
  Group(std::string path, nlohmann::json attrs, int zarr_format)
      : path_(std::move(path)), attributes_(std::move(attrs)), zarr_format_(zarr_format) {}
  std::string path_;
  nlohmann::json attributes_;
  int zarr_format_ = 3;
};

}  // namespace zarrcoro
