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
// Cancellation (Asio per-operation cancellation; terminal and partial mean
// "stop", total alone is ignored since a chunk may already be written or
// decoded): of an async_* call through its handler's slot, or of an
// awaitable read/write through the awaiting coroutine's cancellation state
// (e.g. `co_await (a.read(r, out) || timer.async_wait(use_awaitable))` with
// asio::experimental::awaitable_operators). A cancelled read or write
// starts no further chunk, cancels its store requests in flight and its
// waits for the byte budget, request slots and chunk locks (all released),
// skips codec work not yet begun, and completes with Cancelled (error code
// asio::error::operation_aborted) once the codec work already running has
// ended: about one chunk's decode time. (Cancelled before it began, it may
// complete with boost::system::system_error(operation_aborted) instead:
// to_error_code gives both the same code.) After completion it never touches
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
#include <zarrcoro/node.hpp>
#include <zarrcoro/region.hpp>
#include <zarrcoro/store.hpp>

namespace zarrcoro {

class Runtime;

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
  // An empty handle, to be assigned from open() or create(). Every other
  // method of an empty handle raises InvalidArgument.
  Array() = default;
  // False for an empty handle.
  explicit operator bool() const noexcept { return state_ != nullptr; }

  // Opens the array at `path` ("" = the store root; "a/b" otherwise).
  // Raises NotFound if there is no metadata document, InvalidMetadata /
  // UnsupportedError if it cannot be used (both naming key and field).
  static awaitable<Array> open(Runtime& rt, std::shared_ptr<Store> store, std::string path);
  // Writes `metadata` (validated first, before the store is touched) and
  // returns the array. Each ancestor of `path` (and the root) that holds no
  // node yet gets a group document without attributes in the array's
  // format (v3 `zarr.json`, v2 `.zgroup`), as zarr-python 3 writes them: a
  // v3 hierarchy has no implicit groups. Where a node exists at `path`
  // (array or group, v2 or v3): AlreadyExists by default;
  // CreateMode::overwrite removes it and everything under it first (see
  // CreateMode). Also raises InvalidMetadata / UnsupportedError for
  // metadata it cannot use, StoreError.
  static awaitable<Array> create(Runtime& rt, std::shared_ptr<Store> store, std::string path,
                                 ArrayMetadata metadata, CreateMode mode = CreateMode::fail_if_exists);
  static Array open_blocking(Runtime& rt, std::shared_ptr<Store> store, std::string path);
  static Array create_blocking(Runtime& rt, std::shared_ptr<Store> store, std::string path,
                               ArrayMetadata metadata, CreateMode mode = CreateMode::fail_if_exists);
  // Token forms of open and create: complete with void(std::exception_ptr, Array).
  template <class Token>
  static auto async_open(Runtime& rt, std::shared_ptr<Store> store, std::string path, Token&& token) {
    return detail::async_spawn(executor_of(rt), open(rt, std::move(store), std::move(path)),
                               std::forward<Token>(token));
  }
  template <class Token>
  static auto async_create(Runtime& rt, std::shared_ptr<Store> store, std::string path, ArrayMetadata metadata,
                           CreateMode mode, Token&& token) {
    return detail::async_spawn(executor_of(rt),
                               create(rt, std::move(store), std::move(path), std::move(metadata), mode),
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

  // Variable-length strings and bytes (data type string / bytes in v3, "|O"
  // with a vlen-utf8 / vlen-bytes object codec in v2; see dtype.hpp). Their
  // elements are never exposed as raw bytes: read / write / append on such
  // an array raise InvalidArgument(field "data_type"), and read_strings /
  // write_strings on any other array do the same.
  //
  // read_strings returns region.num_elements() values in C order over the
  // region: for string arrays UTF-8 text, for bytes arrays arbitrary bytes
  // (a std::string is used as a byte container). Missing chunks read as
  // fill_value (the empty string unless the metadata says otherwise).
  // write_strings stores `in` (region.num_elements() values, C order; the
  // caller keeps them alive until the awaitable completes); a partial chunk
  // is read, merged and re-encoded (read-modify-write, as write). A chunk
  // whose every value equals fill_value is not stored.
  // Decoding and encoding run on the codec pool in batches, like read and
  // write; read_strings turns the decoded chunks into strings there too.
  // Limits: one chunk's encoded stream at most codecs::kMaxVlenChunkBytes
  // (1 GiB; a write of a chunk beyond it raises InvalidArgument, a read of
  // one CorruptChunk), so one value too. Sharding with vlen inner chunks works
  // (partial shard reads and writes included).
  // Errors: InvalidArgument (wrong data type, region, count of values; field
  // "buffer" for the count), InvalidArgument naming the chunk key for a
  // value written to a string array that is not valid UTF-8, CorruptChunk
  // (key = chunk key, field "vlen-utf8" / "vlen-bytes") for malformed
  // encoded chunks: a count other than the chunk's element count, a length
  // running past the end, invalid UTF-8; StoreError, Cancelled.
  // Thread-safety and cancellation as read / write.
  awaitable<std::vector<std::string>> read_strings(Region region) const;
  awaitable<void> write_strings(Region region, std::span<const std::string> in) const;
  std::vector<std::string> read_strings_blocking(const Region& region) const;
  void write_strings_blocking(const Region& region, std::span<const std::string> in) const;
  // Token forms: complete with void(std::exception_ptr, std::vector<std::string>)
  // and void(std::exception_ptr).
  template <class Token>
  auto async_read_strings(Region region, Token&& token) const {
    return detail::async_spawn(get_executor(), read_strings(std::move(region)), std::forward<Token>(token));
  }
  template <class Token>
  auto async_write_strings(Region region, std::span<const std::string> in, Token&& token) const {
    return detail::async_spawn(get_executor(), write_strings(std::move(region), in), std::forward<Token>(token));
  }

  // Token forms of read and write: same arguments, results and errors;
  // complete with void(std::exception_ptr) (read into a buffer, write) or
  // void(std::exception_ptr, NdArray) (after an error the NdArray's
  // contents are unspecified). The caller keeps `out` / `in` alive until
  // the handler runs. The handle may be dropped at once.
  // They start the operation without a coroutine around it: a read whose
  // last batch decodes on the pool completes from there (see runtime.hpp),
  // so a handler whose executor runs it inline (e.g. use_future's, or one
  // bound to system_executor) runs on a codec thread; it must not throw.
  // By then (and when a blocking read or write returns) the operation holds
  // no reference to the array's state or its store: the caller may free
  // what it lent the array at once.
  template <class Token>
  auto async_read(Region region, MutableByteSpan out, Token&& token) const {
    return boost::asio::async_initiate<Token, void(std::exception_ptr)>(Initiate<&Array::start_read>{}, token,
                                                                        state(), std::move(region), out);
  }
  template <class Token>
  auto async_read(Region region, Token&& token) const {
    return boost::asio::async_initiate<Token, void(std::exception_ptr, NdArray)>(
        Initiate<&Array::start_read_owned, NdArray>{}, token, state(), std::move(region));
  }
  template <class Token>
  auto async_write(Region region, ByteSpan in, Token&& token) const {
    return boost::asio::async_initiate<Token, void(std::exception_ptr)>(Initiate<&Array::start_write>{}, token,
                                                                        state(), std::move(region), in);
  }

  // Changes the shape (v3 and v2 "shape"; rank, chunk grid, codecs and
  // attributes stay) and returns the resized array; this handle keeps the
  // old shape. Growing writes only the metadata: the new elements read as
  // fill_value. Shrinking first writes fill_value over the parts of the
  // chunks across the new boundary that fall outside it (so that growing
  // again shows fill, not old data) and erases the chunks wholly outside
  // the new shape, then replaces the metadata (one atomic store write: a
  // reader opening the array sees the old or the new shape). A shrink that
  // fails midway keeps the old shape; what it was cutting may already read
  // as fill_value. Resizing
  // while others write to the array through the old shape is not
  // supported: chunks they write outside the new shape may remain (unseen
  // until it grows again).
  // Consolidated copies are updated (see Group). Raises
  // InvalidArgument(field "shape") for another rank, InvalidArgument
  // (field "") when the stored metadata is no longer this handle's (open
  // the array again; the metadata is written only if its document is still
  // the one this handle has, checked by a conditional write, so also
  // against other processes), InvalidMetadata / UnsupportedError as create for a
  // shape it refuses, StoreError.
  awaitable<Array> resize(std::vector<std::uint64_t> shape) const;
  // Grows dimension `axis` by data_shape[axis] and writes `data` (C order,
  // data_shape, whose other extents equal the array's) there; returns the
  // grown array. The caller keeps `data` alive until it completes. Raises
  // InvalidArgument (axis, a rank or extent that does not match, a size
  // that overflows, the buffer size), and what resize and write raise.
  awaitable<Array> append(ByteSpan data, std::vector<std::uint64_t> data_shape, std::size_t axis) const;
  Array resize_blocking(std::vector<std::uint64_t> shape) const;
  Array append_blocking(ByteSpan data, std::vector<std::uint64_t> data_shape, std::size_t axis) const;
  // Token forms: complete with void(std::exception_ptr, Array).
  template <class Token>
  auto async_resize(std::vector<std::uint64_t> shape, Token&& token) const {
    return detail::async_spawn(get_executor(), resize(std::move(shape)), std::forward<Token>(token));
  }
  template <class Token>
  auto async_append(ByteSpan data, std::vector<std::uint64_t> data_shape, std::size_t axis, Token&& token) const {
    return detail::async_spawn(get_executor(), append(data, std::move(data_shape), axis), std::forward<Token>(token));
  }

  // Replaces the attributes (v3 `attributes` in zarr.json; v2 `.zattrs`,
  // erased when empty) and returns the updated array; this handle keeps the
  // old ones. To merge, pass metadata().attributes with the changes
  // applied. One atomic store write of the metadata document; consolidated copies are
  // updated (see Group). Raises InvalidArgument(field "attributes") for a
  // value that is not an object or not strict JSON (NaN), InvalidArgument
  // (field "") when the stored metadata is no longer this handle's (open
  // the array again; as for resize, checked by the conditional write of the
  // document: v3 zarr.json, v2 .zattrs), StoreError.
  awaitable<Array> set_attributes(nlohmann::json attributes) const;
  Array set_attributes_blocking(nlohmann::json attributes) const;
  template <class Token>
  auto async_set_attributes(nlohmann::json attributes, Token&& token) const {
    return detail::async_spawn(get_executor(), set_attributes(std::move(attributes)), std::forward<Token>(token));
  }

  void read_blocking(const Region& region, MutableByteSpan out) const;
  NdArray read_blocking(const Region& region) const;
  void write_blocking(const Region& region, ByteSpan in) const;

  struct State;  // engine internal

 private:
  static boost::asio::any_io_executor executor_of(Runtime& rt);
  // The token forms' operations; errors reach `handler` (never inline).
  static void start_read(std::shared_ptr<const State> st, Region region, MutableByteSpan out,
                         detail::AnyCompletion<void> handler);
  static void start_write(std::shared_ptr<const State> st, Region region, ByteSpan in,
                          detail::AnyCompletion<void> handler);
  static void start_read_owned(std::shared_ptr<const State> st, Region region,
                               detail::AnyCompletion<NdArray> handler);
  template <auto Start, class Result = void>
  struct Initiate {
    template <class Handler, class... Buffer>
    void operator()(Handler&& handler, std::shared_ptr<const State> st, Region region, Buffer... buf) const {
      Start(std::move(st), std::move(region), buf..., detail::AnyCompletion<Result>(std::forward<Handler>(handler)));
    }
  };
  // The handle of the state `op` makes (a coroutine holding no handle).
  static awaitable<Array> adopt(awaitable<std::shared_ptr<const State>> op);
  // An array from metadata already read (Group: consolidated metadata);
  // validated like open.
  friend class Group;
  static Array from_metadata(Runtime& rt, std::shared_ptr<Store> store, std::string path, ArrayMetadata metadata);
  explicit Array(std::shared_ptr<const State> state) : state_(std::move(state)) {}
  const std::shared_ptr<const State>& state() const;  // InvalidArgument for an empty handle
  std::shared_ptr<const State> state_;
};

}  // namespace zarrcoro

// Group (and Consolidated) were declared here before: includers of this
// header keep them. Included last, as group.hpp needs Array.
#include <zarrcoro/group.hpp>
