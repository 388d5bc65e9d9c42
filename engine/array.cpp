// Arrays: the Array handle (open, create, metadata changes) and the glue
// from its three API forms (awaitable, completion token, blocking) to the
// operations on chunks. The path of a read and a write (see shared
// DESIGN.md): plan chunks -> fetch on the io_context (bounded) -> batches of
// codec work on the pool -> (writes) store on the io_context; its stages:
//   region.cpp      Region parsing
//   chunk_op.*      the many-chunk operation (fetch, batches, completion)
//   read_op.*       the read, with its partial shard reads
//   shard_plan.*    which byte ranges of a shard a read fetches (no I/O)
//   placement.*     decoded chunks into the output
//   caller_read.*   small reads with nothing to compute, on the calling thread
//   write_op.*      the write, with its conflict retries
#include <zarrcoro/array.hpp>

#include <algorithm>
#include <cstring>
#include <future>
#include <span>

#include <boost/asio/append.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/system_executor.hpp>

#include <zarrcoro/error.hpp>
#include <zarrcoro/runtime.hpp>

#include "codecs/pipeline.hpp"
#include "codecs/sharding.hpp"
#include "codecs/vlen.hpp"
#include "engine/array_state.hpp"
#include "engine/blocking.hpp"
#include "engine/caller_read.hpp"
#include "core/checked.hpp"
#include "engine/chunk_op.hpp"
#include "engine/conditional_update.hpp"
#include "engine/consolidated.hpp"
#include "engine/indexing.hpp"
#include "engine/node.hpp"
#include "engine/read_op.hpp"
#include "engine/write_op.hpp"

namespace zarrcoro {

namespace asio = boost::asio;
using asio::use_awaitable;
using detail::ChunkOp;
using detail::ChunkParts;

namespace {

// ---- from the API forms to the operations -------------------------------------

// The operations the API forms start (their classes are private to
// read_op.cpp and write_op.cpp).
struct Read {
  static std::shared_ptr<ChunkOp> make(std::shared_ptr<const Array::State> st, ChunkParts parts,
                                       const Region& region, MutableByteSpan out,
                                       std::vector<std::string>* strings = nullptr) {
    return detail::make_read_op(std::move(st), std::move(parts), region, out, strings);
  }
};
struct Write {
  static std::shared_ptr<ChunkOp> make(std::shared_ptr<const Array::State> st, ChunkParts parts,
                                       const Region& region, ByteSpan in) {
    return detail::make_write_op(std::move(st), std::move(parts), region, in);
  }
};

// Raises InvalidArgument naming the array's metadata key unless `r` lies
// within the array and (when given) `buffer_bytes` is its exact size.
void check_region(const Array::State& st, const Region& r, std::optional<std::size_t> buffer_bytes) {
  const ArrayMetadata& m = st.meta;
  auto bad = [&](const char* field, const std::string& why) {
    throw InvalidArgument(detail::array_metadata_key(st.path, m.zarr_format), field, why);
  };
  if (r.start.size() != m.rank() || r.stop.size() != m.rank())
    bad("region", "rank " + std::to_string(r.start.size()) + " does not match the array's rank " +
                      std::to_string(m.rank()));
  for (std::size_t d = 0; d < m.rank(); ++d) {
    if (r.start[d] <= r.stop[d] && r.stop[d] <= m.shape[d]) continue;
    const std::string box = "[" + std::to_string(r.start[d]) + ", " + std::to_string(r.stop[d]) + ")";
    if (r.start[d] > r.stop[d]) bad("region", box + " stops before it starts in dimension " + std::to_string(d));
    bad("region", box + " is outside [0, " + std::to_string(m.shape[d]) + ") in dimension " + std::to_string(d));
  }
  const auto bytes = checked_mul(r.num_elements(), m.data_type.size());
  if (!bytes) bad("region", "needs more bytes than fit in 64 bits");
  const std::uint64_t need = *bytes;
  if (buffer_bytes && *buffer_bytes != need)
    bad("buffer", "is " + std::to_string(*buffer_bytes) + " bytes, the region needs " + std::to_string(need));
}

// The op reading or writing `region` of `buf`; null when there is nothing
// left to do: an empty region, or a read answered on the calling thread
// (caller_read.hpp).
template <class Op, class Buffer, class... Extra>
std::shared_ptr<ChunkOp> make_op(const std::shared_ptr<const Array::State>& st, const Region& region, Buffer buf,
                                 Extra... extra) {
  check_region(*st, region, buf.size());
  auto parts = detail::plan_chunks(st->meta.shape, st->meta.chunk_shape, region);
  if (parts.empty()) return nullptr;
  if constexpr (std::is_same_v<Op, Read>)
    if (detail::read_on_caller(*st, parts, region, buf)) return nullptr;
  return Op::make(st, std::move(parts), region, buf, extra...);
}

// Starts `op` with the completion `token` (signature void(std::exception_ptr));
// the token's cancellation slot reaches the op through its handler. The op
// owns the handler; the initiation keeps no reference to the op, so that a
// coroutine awaiting it does not either (the two would keep each other
// alive should the io_context be destroyed with the op in flight).
template <class Op, class Token>
auto initiate_op(std::shared_ptr<Op> op, Token&& token) {
  auto initiation = [op = std::move(op)](auto handler) mutable { std::exchange(op, nullptr)->start(std::move(handler)); };
  return asio::async_initiate<Token, void(std::exception_ptr)>(std::move(initiation), token);
}

template <class Op, class Buffer, class... Extra>
asio::awaitable<void> run_op(std::shared_ptr<const Array::State> st, Region region, Buffer buf, Extra... extra) {
  auto op = make_op<Op>(st, region, buf, extra...);
  if (op) co_await initiate_op(std::move(op), use_awaitable);
}

void check_fixed_size(const Array::State& st, const char* use);

// make_op for read / write of a fixed-size data type (not read_strings / write_strings).
template <class Op, class Buffer>
std::shared_ptr<ChunkOp> make_fixed_size_op(const std::shared_ptr<const Array::State>& st, const Region& region,
                                            Buffer buf) {
  check_fixed_size(*st, std::is_same_v<Op, Read> ? "read_strings" : "write_strings");
  return make_op<Op>(st, region, buf);
}

// run_op for the token forms: errors, and an empty region, complete the
// handler through its executor (the runtime's io_context by default), never
// inside the initiating call.
template <class Op, class Buffer>
void start_op(const std::shared_ptr<const Array::State>& st, const Region& region, Buffer buf,
              detail::AnyCompletion<void> handler) {
  std::shared_ptr<ChunkOp> op;
  std::exception_ptr error;
  try {
    op = make_fixed_size_op<Op>(st, region, buf);
  } catch (...) {
    error = std::current_exception();
  }
  if (op) return op->start(std::move(handler));
  asio::post(st->rt->io_executor(), asio::append(std::move(handler), error));
}

// run_op for the blocking API: `op` (nullptr: nothing to do), planned on
// the calling thread, is completed from whichever thread ends it (a pool
// thread, for a read), with no coroutine on the io_context around it. The
// caller has called detail::refuse_runtime_thread first.
template <class Op>
void wait_op(std::shared_ptr<Op> op) {
  if (!op) return;
  std::promise<void> promise;
  auto done = promise.get_future();
  op->start(asio::bind_executor(asio::system_executor(), [p = std::move(promise)](std::exception_ptr e) mutable {
    if (e) p.set_exception(e);
    else p.set_value();
  }));
  done.get();
}

// Chunks per dimension d of a grid over n elements (no overflow near 2^64).
std::uint64_t grid_extent(const ArrayMetadata& m, std::uint64_t n, std::size_t d) {
  return n / m.chunk_shape[d] + (n % m.chunk_shape[d] != 0);
}

// The chunks of the old grid wholly outside `next` (another shape), in
// disjoint slabs: per dimension d the old grid's chunk indices past next's
// grid, with the dimensions before d inside both grids. Erased in batches.
asio::awaitable<void> erase_chunks_outside(std::shared_ptr<const Array::State> st, std::vector<std::uint64_t> next) {
  const auto& m = st->meta;
  const std::size_t rank = m.rank();
  std::vector<std::string> batch;
  for (std::size_t d = 0; d < rank; ++d) {
    std::vector<std::uint64_t> lo(rank, 0), hi(rank);
    for (std::size_t e = 0; e < rank; ++e) hi[e] = grid_extent(m, e < d ? std::min(next[e], m.shape[e]) : m.shape[e], e);
    lo[d] = grid_extent(m, next[d], d);
    if (lo[d] >= hi[d] || std::any_of(hi.begin(), hi.end(), [](auto h) { return h == 0; })) continue;
    std::vector<std::uint64_t> c = lo;
    for (bool more = true; more;) {
      batch.push_back(st->chunk_key(c));
      if (batch.size() == 4096) {
        auto full = std::exchange(batch, std::vector<std::string>());  // named: g++ 12
        co_await st->store->erase_many(std::move(full));
      }
      more = false;
      for (std::size_t e = rank; e-- > 0;) {
        if (++c[e] < hi[e]) {
          more = true;
          break;
        }
        c[e] = lo[e];
      }
    }
  }
  if (!batch.empty()) co_await st->store->erase_many(std::move(batch));
}

// Raw element access is for fixed-size types; variable-length ones go
// through read_strings / write_strings (their elements are views).
void check_fixed_size(const Array::State& st, const char* use) {
  if (st.meta.data_type.is_variable_length())
    throw InvalidArgument(detail::array_metadata_key(st.path, st.meta.zarr_format), "data_type",
                          "the array holds variable-length " + st.meta.data_type.describe() + " elements: use " + use);
}

void check_variable_length(const Array::State& st) {
  if (!st.meta.data_type.is_variable_length())
    throw InvalidArgument(detail::array_metadata_key(st.path, st.meta.zarr_format), "data_type",
                          "read_strings / write_strings need a string or bytes array, not " +
                              st.meta.data_type.describe());
}

// run_op<Read> of a fixed-size data type, in one coroutine frame; its
// read for the caller's thread goes with the other reads that thread's
// coroutines start (read_on_caller_together).
asio::awaitable<void> read_raw(std::shared_ptr<const Array::State> st, Region region, MutableByteSpan out) {
  check_fixed_size(*st, "read_strings");
  check_region(*st, region, out.size());
  auto parts = detail::plan_chunks(st->meta.shape, st->meta.chunk_shape, region);
  if (parts.empty()) co_return;
  if (detail::for_caller(*st, parts)) {
    const asio::any_io_executor ex = co_await asio::this_coro::executor;
    if (!detail::caller_reads_together(ex)) {
      if (detail::read_on_caller(*st, parts, region, out)) co_return;
    } else {
      const bool answered = co_await detail::read_on_caller_together(*st, parts, region, out);
      if (answered) co_return;
    }
  }
  auto op = Read::make(st, std::move(parts), region, out);
  co_await initiate_op(std::move(op), use_awaitable);
}

asio::awaitable<void> write_raw(std::shared_ptr<const Array::State> st, Region region, ByteSpan in) {
  auto op = make_fixed_size_op<Write>(st, region, in);
  if (op) co_await initiate_op(std::move(op), use_awaitable);
}

// read_strings' buffers: the views the chunks decode to, and the strings
// they become (checked before anything is sized).
struct StringsRead {
  Bytes views;
  std::vector<std::string> out;
};
StringsRead strings_read(const Array::State& st, const Region& region) {
  check_variable_length(st);
  check_region(st, region, std::nullopt);
  const std::uint64_t n = region.num_elements();
  return {Bytes(n * sizeof(codecs::VlenView)), std::vector<std::string>(n)};
}

// write_strings' input: views of the caller's strings (empty ones all zero,
// like the empty fill value); UTF-8 is checked by the vlen-utf8 encoder on
// the pool.
Bytes string_views(const Array::State& st, const Region& region, std::span<const std::string> in) {
  check_variable_length(st);
  check_region(st, region, std::nullopt);
  if (in.size() != region.num_elements())
    throw InvalidArgument("", "buffer",
                          "holds " + std::to_string(in.size()) + " strings, the region " +
                              std::to_string(region.num_elements()) + " elements");
  Bytes views(in.size() * sizeof(codecs::VlenView));
  for (std::size_t i = 0; i < in.size(); ++i) {
    const codecs::VlenView v{in[i].empty() ? nullptr : in[i].data(), in[i].size()};
    std::memcpy(views.data() + i * sizeof v, &v, sizeof v);
  }
  return views;
}

asio::awaitable<std::vector<std::string>> read_strings_op(std::shared_ptr<const Array::State> st, Region region) {
  auto r = strings_read(*st, region);
  co_await run_op<Read>(st, std::move(region), MutableByteSpan(r.views), &r.out);
  co_return std::move(r.out);
}

asio::awaitable<void> write_strings_op(std::shared_ptr<const Array::State> st, Region region,
                                       std::span<const std::string> in) {
  const Bytes views = string_views(*st, region, in);
  co_await run_op<Write>(std::move(st), std::move(region), ByteSpan(views));
}

// read(region)'s result: the data type, the region's shape, and room for
// its elements (checked before anything is sized).
NdArray sized_result(const Array::State& st, const Region& region) {
  check_fixed_size(st, "read_strings");
  check_region(st, region, std::nullopt);
  NdArray a{st.meta.data_type, region.shape(), {}};
  a.data.resize(region.num_elements() * st.meta.data_type.size());
  return a;
}

asio::awaitable<NdArray> read_owned(std::shared_ptr<const Array::State> st, Region region) {
  NdArray a = sized_result(*st, region);
  co_await read_raw(st, std::move(region), MutableByteSpan(a.data));
  co_return a;
}

}  // namespace

// ---- Array ---------------------------------------------------------------------

namespace {
std::shared_ptr<Array::State> make_state(Runtime& rt, std::shared_ptr<Store> store, std::string path,
                                         ArrayMetadata meta) {
  auto st = std::make_shared<Array::State>();
  st->rt = &rt;
  st->store = std::move(store);
  st->prefix = detail::node_prefix(path, meta.zarr_format);
  st->path = std::move(path);
  const std::string key = detail::array_metadata_key(st->path, meta.zarr_format);
  meta.validate(key);
  if (meta.data_type.is_variable_length()) {
    st->fill_text.assign(reinterpret_cast<const char*>(meta.fill_value.data()), meta.fill_value.size());
    const codecs::VlenView v{st->fill_text.empty() ? nullptr : st->fill_text.data(), st->fill_text.size()};
    st->fill.resize(sizeof v);
    std::memcpy(st->fill.data(), &v, sizeof v);
  } else {
    if (meta.fill_value.empty()) meta.fill_value.assign(meta.data_type.size(), std::byte{0});
    st->fill = meta.fill_value;
  }
  st->store_fill_chunks = meta.zarr_format == 2 && meta.v2 && meta.v2->fill_value_null;
  // Every size the engine derives from a chunk follows from this one: check
  // it before any codec is prepared or buffer sized (shared/cases B34).
  const char* grid_field = meta.zarr_format == 2 ? "chunks" : "chunk_grid.configuration.chunk_shape";
  const auto chunk_bytes = checked_product(meta.chunk_shape, meta.data_type.size());
  if (!chunk_bytes)
    throw InvalidMetadata(key, grid_field, "a chunk of this shape holds more bytes than fit in 64 bits");
  const std::uint64_t limit = rt.options().max_chunk_bytes;
  if (*chunk_bytes > limit)
    throw UnsupportedError(key, grid_field,
                           "a chunk of " + std::to_string(*chunk_bytes) + " bytes is larger than the limit of " +
                               std::to_string(limit) + " (RuntimeOptions::max_chunk_bytes)");
  codecs::ArraySpec spec{meta.data_type, meta.chunk_shape, st->fill};
  try {
    st->pipeline = codecs::CodecPipeline::from_json(detail::pipeline_codecs(meta), spec);
  } catch (const Error& e) {
    throw_error(e.code(), key, e.field(), e.detail());
  }
  if (st->pipeline->array_to_bytes_only())
    st->shard = dynamic_cast<const codecs::ShardingCodec*>(&st->pipeline->array_to_bytes());
  if (st->shard && st->shard->index_bytes() > limit)
    throw UnsupportedError(key, "codecs[0].configuration.chunk_shape",
                           "a shard index of " + std::to_string(st->shard->index_bytes()) +
                               " bytes is larger than the limit of " + std::to_string(limit) +
                               " (RuntimeOptions::max_chunk_bytes)");
  if (meta.zarr_format == 3) meta.codecs = st->pipeline->to_json();
  st->meta = std::move(meta);
  return st;
}
}  // namespace

asio::awaitable<Array> Array::open(Runtime& rt, std::shared_ptr<Store> store, std::string path) {
  auto meta = co_await detail::load_array_metadata(*store, path);
  co_return Array(make_state(rt, std::move(store), std::move(path), std::move(meta)));
}

Array Array::from_metadata(Runtime& rt, std::shared_ptr<Store> store, std::string path, ArrayMetadata metadata) {
  return Array(make_state(rt, std::move(store), std::move(path), std::move(metadata)));
}

asio::awaitable<Array> Array::create(Runtime& rt, std::shared_ptr<Store> store, std::string path,
                                     ArrayMetadata metadata, CreateMode mode) {
  auto st = make_state(rt, store, std::move(path), std::move(metadata));
  auto copies = co_await detail::check_consolidated(*store, st->path);
  co_await detail::prepare_create(*store, st->path, mode);
  co_await detail::create_parents(*store, st->path, st->meta.zarr_format);
  co_await detail::store_array_metadata(*store, st->path, st->meta, mode == CreateMode::overwrite, std::move(copies),
                                        rt.options().write_conflict_timeout);
  co_return Array(std::move(st));
}

Array Array::open_blocking(Runtime& rt, std::shared_ptr<Store> store, std::string path) {
  return detail::wait(rt, open(rt, std::move(store), std::move(path)));
}

Array Array::create_blocking(Runtime& rt, std::shared_ptr<Store> store, std::string path,
                             ArrayMetadata metadata, CreateMode mode) {
  return detail::wait(rt, create(rt, std::move(store), std::move(path), std::move(metadata), mode));
}

const std::shared_ptr<const Array::State>& Array::state() const {
  if (!state_)
    throw InvalidArgument("", "", "an empty Array handle (default-constructed): assign it from open() or create()");
  return state_;
}

const ArrayMetadata& Array::metadata() const { return state()->meta; }
const std::string& Array::path() const { return state()->path; }
const std::shared_ptr<Store>& Array::store() const { return state()->store; }
std::string Array::chunk_key(std::span<const std::uint64_t> coords) const { return state()->chunk_key(coords); }
std::string Array::describe_codecs() const { return state()->pipeline->describe(); }

asio::any_io_executor Array::get_executor() const { return state()->rt->io_executor(); }
asio::any_io_executor Array::executor_of(Runtime& rt) { return rt.io_executor(); }

namespace {
const char* const kStale = "the array's stored metadata changed since this handle was opened; open it again";

// A metadata document to compare: the v3 document, or v2 `.zarray` and `.zattrs`.
nlohmann::json metadata_json(const ArrayMetadata& m, const std::string& key) {
  if (m.zarr_format == 2) return nlohmann::json::array({m.to_v2_json(key), m.attributes});
  return m.to_json();
}

// Shrinking: first the parts of the chunks across the new boundary that
// fall outside it are written with fill_value (through the old shape), so
// that growing again shows fill, not old data (B28), and the chunks wholly
// outside are erased; then the metadata is replaced (one atomic set).
// After it only the update of consolidated copies can fail (checked
// beforehand), and its error says that the array was resized.
// Raises InvalidArgument unless the stored metadata is still `st`'s: a
// change made from an old copy (e.g. consolidated metadata) would write
// its stale parts back.
asio::awaitable<void> require_current(std::shared_ptr<const Array::State> st) {
  const auto& m = st->meta;
  const std::string key = detail::array_metadata_key(st->path, m.zarr_format);
  ArrayMetadata stored_meta = co_await detail::load_array_metadata(*st->store, st->path);
  auto stored = make_state(*st->rt, st->store, st->path, std::move(stored_meta));
  if (stored->meta.zarr_format != m.zarr_format || metadata_json(stored->meta, key) != metadata_json(m, key))
    throw InvalidArgument(key, "", kStale);
}

// One attempt of replace_metadata: `current` is the document under `key`
// (v3 zarr.json, v2 .zarray or .zattrs); it must still be what `st` has.
asio::awaitable<detail::Update> replaced_document(std::shared_ptr<const Array::State> st,
                                                 std::shared_ptr<const Array::State> next, std::string key,
                                                 std::optional<Bytes> current) {
  const ArrayMetadata& m = st->meta;
  if (!current) throw NotFound(key, "", "the array is gone (no '" + key + "')");
  const nlohmann::json doc = detail::parse_doc(*current, key);
  if (key.ends_with(".zattrs")) {  // v2 attributes
    if (doc != m.attributes) throw InvalidArgument(key, "", kStale);
    if (next->meta.attributes.empty()) co_return detail::Update::erase();
    co_return detail::Update::store(detail::v2_json_bytes(next->meta.attributes));
  }
  // Compared as this handle's were made: normalized by a prepared state.
  ArrayMetadata stored_meta = m.zarr_format == 2 ? ArrayMetadata::from_v2_json(doc, m.attributes, key)
                                                 : ArrayMetadata::from_json(doc, key);
  const auto stored = make_state(*st->rt, st->store, st->path, std::move(stored_meta));
  if (metadata_json(stored->meta, key) != metadata_json(m, key)) throw InvalidArgument(key, "", kStale);
  co_return detail::Update::store(m.zarr_format == 2 ? detail::v2_json_bytes(next->meta.to_v2_json(key))
                                                     : detail::json_bytes(next->meta.to_json()));
}

// Replaces the array's stored metadata by `next`'s (which changes its
// attributes or its shape) with one conditional update of the document
// that holds the change, made only while that document is still what `st`
// was opened with: a change from a stale handle (an old consolidated copy,
// another process's resize since) raises InvalidArgument and writes
// nothing, in this process or any other. Then the consolidated copies
// follow.
asio::awaitable<void> replace_metadata(std::shared_ptr<const Array::State> st, std::shared_ptr<const Array::State> next,
                                       std::vector<std::string> copies) {
  const auto& m = st->meta;
  const bool attributes_only = m.zarr_format == 2 && next->meta.shape == m.shape;
  const std::string key =
      attributes_only ? detail::node_prefix(st->path) + ".zattrs" : detail::array_metadata_key(st->path, m.zarr_format);
  detail::Modify replace = [st, next, key](std::optional<Bytes> current) {
    if (!current && key.ends_with(".zattrs")) current = Bytes{std::byte{'{'}, std::byte{'}'}};  // absent: no attributes
    return replaced_document(st, next, key, std::move(current));
  };
  const auto timeout = st->rt->options().write_conflict_timeout;
  co_await detail::conditional_update(*st->store, key, std::move(replace), timeout);
  co_await detail::update_consolidated(*st->store, st->path, false, std::move(copies), timeout);
}

asio::awaitable<std::shared_ptr<const Array::State>> set_array_attributes(std::shared_ptr<const Array::State> st,
                                                                           nlohmann::json attributes) {
  const std::string key = detail::array_metadata_key(st->path, st->meta.zarr_format);
  detail::check_attributes(attributes, key);
  ArrayMetadata meta = st->meta;
  meta.attributes = std::move(attributes);
  auto next = make_state(*st->rt, st->store, st->path, std::move(meta));
  co_await require_current(st);
  auto copies = co_await detail::check_consolidated(*st->store, st->path);
  co_await replace_metadata(st, next, std::move(copies));
  co_return next;
}

asio::awaitable<std::shared_ptr<const Array::State>> resize_array(std::shared_ptr<const Array::State> st,
                                                                   std::vector<std::uint64_t> shape) {
  const auto& m = st->meta;
  const std::string key = detail::array_metadata_key(st->path, m.zarr_format);
  if (shape.size() != m.rank())
    throw InvalidArgument(key, "shape",
                          "the new shape has " + std::to_string(shape.size()) + " dimensions, the array has " +
                              std::to_string(m.rank()));
  ArrayMetadata meta = m;
  meta.shape = shape;
  auto next = make_state(*st->rt, st->store, st->path, std::move(meta));  // validated like create
  // This handle's metadata must be what is stored: resizing from an old
  // copy (e.g. consolidated metadata) would write its stale attributes back
  // and cut along a grid that is no longer the array's.
  co_await require_current(st);
  auto copies = co_await detail::check_consolidated(*st->store, st->path);
  const std::size_t es = m.data_type.size();
  // n rounded up to whole chunks, within the old shape.
  auto cut_end = [&](std::uint64_t n, std::size_t d) {
    const std::uint64_t c = m.chunk_shape[d], up = saturating_add(n, (c - n % c) % c);
    return std::min(m.shape[d], up);
  };
  for (std::size_t d = 0; d < m.rank(); ++d) {
    if (shape[d] >= m.shape[d] || shape[d] % m.chunk_shape[d] == 0) continue;
    Region cut = Region::all(m.shape);
    for (std::size_t e = 0; e < m.rank(); ++e) cut.stop[e] = cut_end(shape[e], e);
    cut.start[d] = shape[d];
    const auto n = cut.num_elements();
    if (n == 0) continue;
    Bytes fill(n * es);
    detail::fill_elements(fill.data(), n, st->fill.data(), es);
    co_await run_op<Write>(st, std::move(cut), ByteSpan(fill));
  }
  co_await erase_chunks_outside(st, std::move(shape));
  co_await replace_metadata(st, next, std::move(copies));
  co_return next;
}

asio::awaitable<std::shared_ptr<const Array::State>> append_array(std::shared_ptr<const Array::State> st, ByteSpan data,
                                                                   std::vector<std::uint64_t> data_shape,
                                                                   std::size_t axis) {
  check_fixed_size(*st, "resize and write_strings");
  const auto& m = st->meta;
  const std::string key = detail::array_metadata_key(st->path, m.zarr_format);
  if (axis >= m.rank()) throw InvalidArgument(key, "axis", "the array has " + std::to_string(m.rank()) + " dimensions");
  if (data_shape.size() != m.rank())
    throw InvalidArgument(key, "shape", "the data has " + std::to_string(data_shape.size()) + " dimensions, the array " +
                                            std::to_string(m.rank()));
  for (std::size_t d = 0; d < m.rank(); ++d)
    if (d != axis && data_shape[d] != m.shape[d])
      throw InvalidArgument(key, "shape",
                            "the data has " + std::to_string(data_shape[d]) + " elements in dimension " +
                                std::to_string(d) + ", the array " + std::to_string(m.shape[d]));
  const auto bytes = checked_product(data_shape, m.data_type.size());
  if (!bytes || *bytes != data.size())
    throw InvalidArgument(key, "buffer", "is " + std::to_string(data.size()) + " bytes, not the data shape's size");
  auto shape = m.shape;
  const auto grown = checked_add(shape[axis], data_shape[axis]);
  if (!grown) throw InvalidArgument(key, "shape", "appending overflows 64 bits");
  shape[axis] = *grown;
  auto grown_state = co_await resize_array(st, shape);
  Region where = Region::all(shape);
  where.start[axis] = m.shape[axis];
  co_await run_op<Write>(grown_state, std::move(where), data);
  co_return grown_state;
}
}  // namespace

// Not coroutines: the operations hold the array's state, not the handle.
asio::awaitable<Array> Array::adopt(asio::awaitable<std::shared_ptr<const State>> op) {
  co_return Array(co_await std::move(op));
}

asio::awaitable<Array> Array::resize(std::vector<std::uint64_t> shape) const {
  return adopt(resize_array(state(), std::move(shape)));
}

asio::awaitable<Array> Array::append(ByteSpan data, std::vector<std::uint64_t> data_shape, std::size_t axis) const {
  return adopt(append_array(state(), data, std::move(data_shape), axis));
}

asio::awaitable<Array> Array::set_attributes(nlohmann::json attributes) const {
  return adopt(set_array_attributes(state(), std::move(attributes)));
}

Array Array::set_attributes_blocking(nlohmann::json attributes) const {
  return detail::wait(*state()->rt, set_attributes(std::move(attributes)));
}

Array Array::resize_blocking(std::vector<std::uint64_t> shape) const {
  return detail::wait(*state()->rt, resize(std::move(shape)));
}

Array Array::append_blocking(ByteSpan data, std::vector<std::uint64_t> data_shape, std::size_t axis) const {
  return detail::wait(*state()->rt, append(data, std::move(data_shape), axis));
}

asio::awaitable<void> Array::read(Region region, MutableByteSpan out) const {
  return read_raw(state(), std::move(region), out);
}

asio::awaitable<NdArray> Array::read(Region region) const { return read_owned(state(), std::move(region)); }

asio::awaitable<void> Array::write(Region region, ByteSpan in) const {
  return write_raw(state(), std::move(region), in);
}

asio::awaitable<std::vector<std::string>> Array::read_strings(Region region) const {
  return read_strings_op(state(), std::move(region));
}

asio::awaitable<void> Array::write_strings(Region region, std::span<const std::string> in) const {
  return write_strings_op(state(), std::move(region), in);
}

std::vector<std::string> Array::read_strings_blocking(const Region& region) const {
  detail::refuse_runtime_thread(*state()->rt);
  auto r = strings_read(*state(), region);
  wait_op(make_op<Read>(state(), region, MutableByteSpan(r.views), &r.out));
  return std::move(r.out);
}

void Array::write_strings_blocking(const Region& region, std::span<const std::string> in) const {
  detail::refuse_runtime_thread(*state()->rt);
  const Bytes views = string_views(*state(), region, in);
  wait_op(make_op<Write>(state(), region, ByteSpan(views)));
}

void Array::start_read(std::shared_ptr<const State> st, Region region, MutableByteSpan out,
                       detail::AnyCompletion<void> handler) {
  start_op<Read>(st, region, out, std::move(handler));
}

void Array::start_write(std::shared_ptr<const State> st, Region region, ByteSpan in,
                        detail::AnyCompletion<void> handler) {
  start_op<Write>(st, region, in, std::move(handler));
}

void Array::start_read_owned(std::shared_ptr<const State> st, Region region, detail::AnyCompletion<NdArray> handler) {
  std::shared_ptr<ChunkOp> op;
  NdArray a;
  std::exception_ptr error;
  try {
    a = sized_result(*st, region);
    op = make_op<Read>(st, region, MutableByteSpan(a.data));
  } catch (...) {
    error = std::current_exception();
  }
  // Moved along with the handler, `a` keeps its elements where the op writes them.
  auto done = asio::append(std::move(handler), std::move(a));
  if (op) return initiate_op(std::move(op), std::move(done));
  asio::post(st->rt->io_executor(), asio::append(std::move(done), error));
}

void Array::read_blocking(const Region& region, MutableByteSpan out) const {
  detail::refuse_runtime_thread(*state()->rt);
  wait_op(make_fixed_size_op<Read>(state(), region, out));
}

NdArray Array::read_blocking(const Region& region) const {
  detail::refuse_runtime_thread(*state()->rt);
  NdArray a = sized_result(*state(), region);
  wait_op(make_op<Read>(state(), region, MutableByteSpan(a.data)));
  return a;
}

void Array::write_blocking(const Region& region, ByteSpan in) const {
  detail::refuse_runtime_thread(*state()->rt);
  wait_op(make_fixed_size_op<Write>(state(), region, in));
}

}  // namespace zarrcoro
