// Decoding and encoding batches of chunks with an array's codec pipeline,
// without an Array: for callers that index and (optionally) fetch chunks
// themselves, such as zarr-python's codec pipeline interface
// (python/zarrcoro/pipeline.py). The codec work of one batch goes to the
// runtime's codec pool as ONE submission, which fans out over the pool's
// threads, and the batch completes once.
//
// Units: shapes, starts, steps and counts are in elements; strides, sizes
// and offsets in bytes. A decoded chunk is chunk_shape() elements of dtype()
// in C order and native byte order (chunk_bytes() bytes); it holds the whole
// chunk also at the array's edge, as the Zarr specs store it.
//
// Placement: a batch item names a box of its chunk (ChunkBox) and where the
// box lives in the caller's memory, a strided view (a NumPy view, say): box
// element (i_0, ..., i_{r-1}) is chunk element start_d + i_d * step_d and sits
// at `base + sum_d i_d * strides[d]` bytes. Strides may be negative; a
// source (encode) may also have stride 0 to broadcast one value. A shard
// (codecs: sharding_indexed alone) decodes only the inner chunks its box
// touches, each straight to its place: its index is checked whole, its other
// inner chunks not at all. A shard's encode decodes and re-encodes only the
// inner chunks its box touches (with steps: those a step lands in; the
// others keep their stored bytes) and lays the shard out as
// with_shard_layout says.
//
// Thread-safety: a ChunkCodec is an immutable, cheaply copyable handle to a
// prepared pipeline; all members may be called concurrently from any thread.
// A batch may be started from any thread; the caller keeps the items and all
// memory they point to alive, and does not touch the bytes a batch writes,
// until it completes. Two batches in flight may not write the same bytes.
//
// Scheduling: every item of a batch runs on the codec pool (never on an I/O
// thread, nor on the calling thread: read_now is the one exception, for
// plain copies that need no wait), one pool submission per batch
// (RuntimeStats::pool_submissions), fanned out over up to codec_threads()
// threads (fanout_posts). The batch completes on the pool thread that ends
// its last item, through the handler's associated executor (default: the
// codec pool, i.e. at once on that thread). Batches are not cancellable: a
// started batch runs to its end.
//
// Store forms (async_read, async_write): the engine also moves the chunks'
// bytes, given each item's store key: the store requests run on the
// runtime's io_context (at most RuntimeOptions::max_inflight_requests at
// once; values the store holds at once, such as page-cached files, are
// answered together by Store::try_read_now_many), the codec work is one pool
// submission as above. Reads and writes are unconditional, whole values, as
// zarr-python's own pipeline does them (no protection against another
// writer of the same chunk in between; Array is the API with that), except
// that a read of part of a shard (a box short of the whole shard) reads the
// shard's index (or takes it from the runtime's shard index cache, as
// Array's reads do), then by byte ranges the inner chunks the box touches
// (coalesced as Array coalesces them, RuntimeOptions::coalesce_gap and
// coalesce_max), each range on the condition that the shard is the one the
// index came from (a cached index that locates none of them: one byte
// read on that condition): a shard replaced or erased since is read whole
// instead, and so is every shard of a store without versions (one read
// more); a range shorter than its index says is CorruptChunk. An index read
// with a checksum is verified on the pool: such a batch makes two pool
// submissions. The store must outlive the operation. Store errors complete
// the batch with StoreError naming the key.
//
// Errors: construction raises InvalidMetadata / UnsupportedError naming the
// key and field (an unknown codec, a variable-length data type, which this
// interface does not carry). A batch completes with the typed Error of a
// chunk that failed (the lowest-numbered of those run; items after the first
// failure may be skipped; a failed decode may have written part of its box),
// its `key` the item's key: CorruptChunk for bytes that do not decode,
// InvalidArgument (field "box", "strides", "out" or "value") for an item that
// does not fit its chunk, found before any item runs (then nothing is
// written), UnsupportedError (field "chunk_grid") for a chunk larger than
// RuntimeOptions::max_chunk_bytes (async_read: one it must hold whole; a part
// of a shard read by ranges holds only its inner chunks).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/execution/outstanding_work.hpp>
#include <boost/asio/prefer.hpp>
#include <nlohmann/json_fwd.hpp>

#include <zarrcoro/async.hpp>
#include <zarrcoro/bytes.hpp>
#include <zarrcoro/dtype.hpp>
#include <zarrcoro/metadata.hpp>
#include <zarrcoro/runtime.hpp>
#include <zarrcoro/store.hpp>

namespace zarrcoro {

// A box of a chunk: per chunk dimension its first element, step (>= 1) and
// element count. Empty vectors: the whole chunk, C order.
struct ChunkBox {
  std::vector<std::uint64_t> start, step, count;
};

// One chunk to decode into the caller's memory.
struct ChunkDecode {
  std::string key;                  // names the chunk in errors
  std::optional<ByteSpan> encoded;  // the stored chunk; nullopt: missing, the box gets the fill value
  ChunkBox box;
  std::byte* out = nullptr;              // where box element (0, ..., 0) lands
  std::vector<std::int64_t> out_strides;  // per chunk dimension; empty: the box C-contiguous at `out`
  bool found = false;  // async_read (out): the key held a value (else the box got the fill value)
};

// One chunk to encode: the new values of its box merged into what the chunk
// holds, then encoded.
struct ChunkEncode {
  std::string key;                   // names the chunk in errors
  std::optional<ByteSpan> existing;  // the stored chunk, for a box short of the whole chunk;
                                     // nullopt: the rest of the chunk is the fill value
  ChunkBox box;
  const std::byte* value = nullptr;         // box element (0, ..., 0) of the new values
  std::vector<std::int64_t> value_strides;  // per chunk dimension; 0 broadcasts; empty: C-contiguous
  // zarr-python's write_empty_chunks=false: when every element of the chunk
  // equals the fill value afterwards (as zarr-python compares: bitwise,
  // except that a NaN fill matches any NaN, and complex parts compare as
  // numbers), no bytes are produced (`encoded` stays nullopt: erase the key).
  bool drop_if_fill = false;
  // What the chunk holds outside the box: `existing` (async_encode) or the
  // stored chunk (async_write) when true; the fill value when false (as
  // zarr-python writes a chunk its selection covers within the array's
  // shape: an edge chunk's elements beyond the shape become fill).
  bool keep_rest = true;
  std::optional<Bytes> encoded;  // out: the encoded chunk, or nullopt when dropped
};

// How encoding lays out a shard (codecs: sharding_indexed alone). Every
// layout reads the same through the shard index, so none is part of the
// metadata; zarr-python sets them per write (ShardingCodec's
// subchunk_write_order, the array's write_empty_chunks).
struct ShardLayout {
  enum class Order {
    lexicographic,    // C order: the last dimension's inner chunks next to each other (Array's writes)
    colexicographic,  // F order
    morton,           // ascending compressed Morton code: zarr-python's default
  };
  Order order = Order::lexicographic;
  bool keep_empty = false;  // store inner chunks that are all fill_value too
};

class ChunkCodec;
namespace detail {
void start_decode(Runtime& rt, const ChunkCodec& codec, std::span<ChunkDecode> items, AnyCompletion<void> handler);
void start_encode(Runtime& rt, const ChunkCodec& codec, std::span<ChunkEncode> items, AnyCompletion<void> handler);
void start_read(Runtime& rt, std::shared_ptr<Store> store, const ChunkCodec& codec, std::span<ChunkDecode> items,
                AnyCompletion<void> handler);
void start_write(Runtime& rt, std::shared_ptr<Store> store, const ChunkCodec& codec, std::span<ChunkEncode> items,
                 AnyCompletion<void> handler);
}  // namespace detail

class ChunkCodec {
 public:
  // The pipeline of the array `metadata` describes (v3, or v2 through its
  // equivalent chain: metadata.hpp), for its regular chunks; its fill value
  // (v2 null: zeros). `key` names the metadata document in errors.
  static ChunkCodec from_metadata(const ArrayMetadata& metadata, const std::string& key = "");
  // A pipeline from a v3 `codecs` list for chunks of `chunk_shape` elements
  // of `dtype` (fixed size), whose fill value is `fill` (one element in
  // native order; empty: zeros). `key` names the list's owner in errors.
  static ChunkCodec from_codecs(const nlohmann::json& codecs, DataType dtype, std::vector<std::uint64_t> chunk_shape,
                                FillValue fill = {}, const std::string& key = "");

  const std::vector<std::uint64_t>& chunk_shape() const;
  DataType dtype() const;
  std::uint64_t chunk_bytes() const;  // of a decoded chunk
  const FillValue& fill() const;      // one element, dtype().size() bytes
  // The size of every encoded chunk when it is fixed (bytes, crc32c), else -1.
  std::int64_t encoded_size() const;
  // True if decoding is a plain copy (native-order `bytes` alone).
  bool is_trivial() const;
  // The v3 `codecs` list the pipeline runs (v2: the equivalent chain).
  nlohmann::json codecs() const;
  std::string describe() const;  // e.g. "bytes(little),zstd(3)"

  // This pipeline, encoding shards with `layout`. Raises InvalidArgument
  // (field "layout") unless the pipeline is sharding_indexed alone, whose
  // inner codecs hold no sharding_indexed (a nested shard would keep its own
  // layout), or for a Morton order over more than 2^64 codes. A shard's
  // inner chunk is all fill_value as drop_if_fill compares, with or without
  // a layout.
  ChunkCodec with_shard_layout(ShardLayout layout) const;

  // Decodes every item into its place (a missing chunk: the fill value).
  // Completion signature void(std::exception_ptr).
  template <class Token>
  auto async_decode(Runtime& rt, std::span<ChunkDecode> items, Token&& token) const {
    return boost::asio::async_initiate<Token, void(std::exception_ptr)>(Initiate<Decode>{}, token, &rt, *this, items);
  }
  // Encodes every item (ChunkEncode::encoded). Completion as async_decode.
  template <class Token>
  auto async_encode(Runtime& rt, std::span<ChunkEncode> items, Token&& token) const {
    return boost::asio::async_initiate<Token, void(std::exception_ptr)>(Initiate<Encode>{}, token, &rt, *this, items);
  }
  // Reads each item's `key` from `store` (part of a shard: its index and
  // inner chunks by byte ranges, see Store forms) and decodes it into place,
  // as async_decode (a missing key: the fill value; `found` says which);
  // `encoded` is ignored, and nullopt at completion.
  template <class Token>
  auto async_read(Runtime& rt, std::shared_ptr<Store> store, std::span<ChunkDecode> items, Token&& token) const {
    return boost::asio::async_initiate<Token, void(std::exception_ptr)>(InitiateStore<Read>{}, token, &rt,
                                                                         std::move(store), *this, items);
  }
  // Encodes each item as async_encode, reading its stored chunk first where
  // its box is not the whole chunk and keep_rest (`existing` is ignored), and stores it
  // under `key`: the encoded bytes, or an erase for a dropped chunk.
  // `encoded` is nullopt at completion (the bytes went to the store).
  template <class Token>
  auto async_write(Runtime& rt, std::shared_ptr<Store> store, std::span<ChunkEncode> items, Token&& token) const {
    return boost::asio::async_initiate<Token, void(std::exception_ptr)>(InitiateStore<Write>{}, token, &rt,
                                                                         std::move(store), *this, items);
  }

  // async_read's work on the calling thread, where it needs no wait and no
  // codec work (RuntimeOptions::caller_reads, as Array's reads): at most 4
  // items whose decode is a plain copy (is_trivial()), inline_bytes in all,
  // each value held by `store` at once (a value in memory, a page-cached
  // file: Store::try_read_now with caches_only; the file store needs
  // io_uring and openat2). True when done, as async_read completes; false
  // when it did not apply, having written nothing (then start async_read).
  // Raises what async_read would complete with: the store's errors,
  // InvalidArgument for an item, CorruptChunk (then the items' `found` and
  // the boxes' contents are unspecified).
  bool read_now(Runtime& rt, Store& store, std::span<ChunkDecode> items) const;

  // The same, waiting: not from a thread of the runtime's codec pool (that
  // could deadlock: InvalidArgument). Raises what the batch completes with.
  void decode_blocking(Runtime& rt, std::span<ChunkDecode> items) const;
  void encode_blocking(Runtime& rt, std::span<ChunkEncode> items) const;

  struct Impl;
  const Impl& impl() const { return *impl_; }

 private:
  explicit ChunkCodec(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}

  struct Decode {
    static void start(Runtime& rt, const ChunkCodec& c, std::span<ChunkDecode> items, detail::AnyCompletion<void> h) {
      detail::start_decode(rt, c, items, std::move(h));
    }
  };
  struct Encode {
    static void start(Runtime& rt, const ChunkCodec& c, std::span<ChunkEncode> items, detail::AnyCompletion<void> h) {
      detail::start_encode(rt, c, items, std::move(h));
    }
  };
  struct Read {
    static void start(Runtime& rt, std::shared_ptr<Store> s, const ChunkCodec& c, std::span<ChunkDecode> items,
                      detail::AnyCompletion<void> h) {
      detail::start_read(rt, std::move(s), c, items, std::move(h));
    }
  };
  struct Write {
    static void start(Runtime& rt, std::shared_ptr<Store> s, const ChunkCodec& c, std::span<ChunkEncode> items,
                      detail::AnyCompletion<void> h) {
      detail::start_write(rt, std::move(s), c, items, std::move(h));
    }
  };
  // The handler, dispatched through its associated executor (default: the pool).
  template <class Handler>
  static detail::AnyCompletion<void> completion(Handler&& handler, Runtime& rt) {
    namespace asio = boost::asio;
    auto ex = asio::prefer(asio::get_associated_executor(handler, rt.codec_executor()),
                           asio::execution::outstanding_work.tracked);
    auto complete = [h = std::forward<Handler>(handler), ex](std::exception_ptr e) mutable {
      asio::dispatch(ex, [h = std::move(h), e = std::move(e)]() mutable { std::move(h)(std::move(e)); });
    };
    return detail::AnyCompletion<void>(std::move(complete));
  }
  template <class Op>
  struct InitiateStore {
    template <class Handler, class Item>
    void operator()(Handler&& handler, Runtime* rt, std::shared_ptr<Store> store, ChunkCodec codec,
                    std::span<Item> items) const {
      Op::start(*rt, std::move(store), codec, items, completion(std::forward<Handler>(handler), *rt));
    }
  };
  template <class Op>
  struct Initiate {
    template <class Handler, class Item>
    void operator()(Handler&& handler, Runtime* rt, ChunkCodec codec, std::span<Item> items) const {
      Op::start(*rt, codec, items, completion(std::forward<Handler>(handler), *rt));
    }
  };

  std::shared_ptr<const Impl> impl_;
};

}  // namespace zarrcoro
