// Batches of chunks through an array's codec pipeline on the codec pool
// (chunk_codec.hpp): one post per batch, fanned out over the pool's threads.
#include <zarrcoro/chunk_codec.hpp>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstring>
#include <future>
#include <limits>
#include <mutex>
#include <numeric>
#include <type_traits>
#include <utility>

#include <boost/asio/post.hpp>
#include <nlohmann/json.hpp>

#include <zarrcoro/error.hpp>

#include "codecs/box.hpp"
#include "codecs/pipeline.hpp"
#include "codecs/sharding.hpp"
#include "core/caught.hpp"
#include "core/checked.hpp"
#include "engine/caller_read.hpp"
#include "engine/engine_state.hpp"
#include "engine/node.hpp"
#include "engine/runtime_access.hpp"
#include "engine/shard_plan.hpp"

namespace zarrcoro {

namespace asio = boost::asio;

struct ChunkCodec::Impl {
  std::shared_ptr<const codecs::CodecPipeline> pipeline;
  DataType dtype;
  std::vector<std::uint64_t> shape;
  FillValue fill;
  std::uint64_t chunk_bytes = 0;
  std::vector<std::int64_t> c_strides;  // bytes, of a decoded chunk (C order)
  const codecs::ShardingCodec* shard = nullptr;  // the whole pipeline, when it is sharding_indexed alone
  codecs::ShardingCodec::Layout layout;          // how `shard` encodes
};

namespace {

std::shared_ptr<ChunkCodec::Impl> prepare(const nlohmann::json& codecs, DataType dtype,
                                          std::vector<std::uint64_t> shape, FillValue fill, const std::string& key,
                                          const char* grid_field) {
  if (dtype.is_variable_length())
    throw UnsupportedError(key, "data_type",
                           "variable-length data type '" + std::string(dtype.name()) +
                               "': chunk batches carry fixed-size elements only");
  if (fill.empty()) fill.assign(dtype.size(), std::byte{0});
  if (fill.size() != dtype.size())
    throw InvalidMetadata(key, "fill_value",
                          "the fill value has " + std::to_string(fill.size()) + " bytes, the data type " +
                              std::to_string(dtype.size()));
  for (std::uint64_t d : shape)
    if (d == 0) throw InvalidMetadata(key, grid_field, "a chunk dimension of 0");
  const auto bytes = checked_product(shape, dtype.size());
  if (!bytes || *bytes > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
    throw InvalidMetadata(key, grid_field, "a chunk of this shape holds more bytes than fit in 64 bits");
  auto impl = std::make_shared<ChunkCodec::Impl>();
  codecs::ArraySpec spec{dtype, shape, fill};
  try {
    impl->pipeline = codecs::CodecPipeline::from_json(codecs, spec);
  } catch (const Error& e) {
    throw_error(e.code(), key, e.field(), e.detail());
  }
  if (impl->pipeline->array_to_bytes_only())
    impl->shard = dynamic_cast<const codecs::ShardingCodec*>(&impl->pipeline->array_to_bytes());
  impl->layout.fill_as_zarr_python = true;  // as drop_if_fill compares
  impl->dtype = dtype;
  impl->shape = std::move(shape);
  impl->fill = std::move(fill);
  impl->chunk_bytes = *bytes;
  impl->c_strides.resize(impl->shape.size());
  std::int64_t stride = static_cast<std::int64_t>(dtype.size());
  for (std::size_t d = impl->shape.size(); d-- > 0;) {
    impl->c_strides[d] = stride;
    stride *= static_cast<std::int64_t>(impl->shape[d]);
  }
  return impl;
}

// ---- strided copies ------------------------------------------------------------

// A strided copy of `count` (per dimension) elements of `es` bytes from
// `src` to `dst`, each side with its own byte strides (a stride of 0 on the
// source repeats an element). Dimensions of count 1 are dropped and
// adjacent ones that are contiguous on both sides are merged first, so a
// box that is one run on both sides is one memcpy.
void strided_copy(const std::byte* src, std::vector<std::int64_t> ss, std::byte* dst, std::vector<std::int64_t> ds,
                  std::vector<std::uint64_t> count, std::size_t es) {
  for (std::uint64_t c : count)
    if (c == 0) return;
  // Drop singleton dimensions.
  std::size_t r = 0;
  for (std::size_t d = 0; d < count.size(); ++d) {
    if (count[d] == 1) continue;
    count[r] = count[d], ss[r] = ss[d], ds[r] = ds[d];
    ++r;
  }
  count.resize(r), ss.resize(r), ds.resize(r);
  // Merge dimension d into d + 1 where both sides step over d + 1 exactly.
  for (std::size_t d = count.size(); d-- > 1;) {
    const auto n = static_cast<std::int64_t>(count[d]);
    if (ss[d - 1] == ss[d] * n && ds[d - 1] == ds[d] * n) {
      count[d] *= count[d - 1];
      count.erase(count.begin() + static_cast<std::ptrdiff_t>(d - 1));
      ss.erase(ss.begin() + static_cast<std::ptrdiff_t>(d - 1));
      ds.erase(ds.begin() + static_cast<std::ptrdiff_t>(d - 1));
    }
  }
  const std::int64_t ies = static_cast<std::int64_t>(es);
  if (count.empty()) {
    std::memcpy(dst, src, es);
    return;
  }
  const std::size_t rank = count.size();
  const std::uint64_t inner = count[rank - 1];
  const std::int64_t sin = ss[rank - 1], din = ds[rank - 1];
  auto run = [&](const std::byte* s, std::byte* t) {
    if (sin == ies && din == ies) {
      std::memcpy(t, s, inner * es);
      return;
    }
    switch (es) {
      case 1:
        for (std::uint64_t i = 0; i < inner; ++i, s += sin, t += din) *t = *s;
        return;
      case 2:
        for (std::uint64_t i = 0; i < inner; ++i, s += sin, t += din) std::memcpy(t, s, 2);
        return;
      case 4:
        for (std::uint64_t i = 0; i < inner; ++i, s += sin, t += din) std::memcpy(t, s, 4);
        return;
      case 8:
        for (std::uint64_t i = 0; i < inner; ++i, s += sin, t += din) std::memcpy(t, s, 8);
        return;
      default:
        for (std::uint64_t i = 0; i < inner; ++i, s += sin, t += din) std::memcpy(t, s, es);
    }
  };
  if (rank == 1) {
    run(src, dst);
    return;
  }
  // Odometer over the outer dimensions.
  std::vector<std::uint64_t> idx(rank - 1, 0);
  const std::byte* s = src;
  std::byte* t = dst;
  for (;;) {
    run(s, t);
    std::size_t d = rank - 1;
    for (;;) {
      if (d == 0) return;
      --d;
      if (++idx[d] < count[d]) {
        s += ss[d];
        t += ds[d];
        break;
      }
      s -= ss[d] * static_cast<std::int64_t>(count[d] - 1);  // back to the start of dimension d
      t -= ds[d] * static_cast<std::int64_t>(count[d] - 1);
      idx[d] = 0;
    }
  }
}

// The C-contiguous strides of a box of `count` elements of `es` bytes.
std::vector<std::int64_t> contiguous_strides(const std::vector<std::uint64_t>& count, std::size_t es) {
  std::vector<std::int64_t> s(count.size());
  std::int64_t stride = static_cast<std::int64_t>(es);
  for (std::size_t d = count.size(); d-- > 0;) {
    s[d] = stride;
    stride *= static_cast<std::int64_t>(count[d]);
  }
  return s;
}

// An item's box made explicit (the whole chunk when empty), its strides on
// the caller's side, and where the box starts in a decoded chunk.
struct Box {
  std::vector<std::uint64_t> count;
  std::vector<std::int64_t> chunk_strides;  // bytes per box step, in the decoded chunk
  std::int64_t chunk_offset = 0;            // of box element 0, in the decoded chunk
  std::vector<std::int64_t> user_strides;
  bool whole = false;          // the box is the whole chunk in C order
  bool user_contiguous = false;  // ... and the caller's side is C-contiguous
  std::uint64_t elements = 0;
};

Box resolve(const ChunkCodec::Impl& c, const ChunkBox& b, const std::vector<std::int64_t>& strides,
            const std::string& key) {
  const std::size_t rank = c.shape.size();
  const std::size_t es = c.dtype.size();
  Box out;
  if (b.start.empty() && b.step.empty() && b.count.empty()) {
    out.count = c.shape;
  } else {
    if (b.start.size() != rank || b.step.size() != rank || b.count.size() != rank)
      throw InvalidArgument(key, "box",
                            "start, step and count must have one entry per chunk dimension (" + std::to_string(rank) +
                                ")");
    out.count = b.count;
  }
  out.chunk_strides.resize(rank);
  out.whole = true;
  for (std::size_t d = 0; d < rank; ++d) {
    const std::uint64_t start = b.start.empty() ? 0 : b.start[d];
    const std::uint64_t n = out.count[d];
    const std::uint64_t given = b.step.empty() ? 1 : b.step[d];
    if (given == 0) throw InvalidArgument(key, "box", "a step of 0 in dimension " + std::to_string(d));
    const std::uint64_t step = n > 1 ? given : 1;  // one element: any step (a NumPy slice's) stays in bounds
    if (n > 0 && (start >= c.shape[d] || (n - 1) > (c.shape[d] - 1 - start) / step))
      throw InvalidArgument(key, "box",
                            "dimension " + std::to_string(d) + " reaches past the chunk's " + std::to_string(c.shape[d]) +
                                " elements");
    out.chunk_strides[d] = c.c_strides[d] * static_cast<std::int64_t>(step);
    out.chunk_offset += c.c_strides[d] * static_cast<std::int64_t>(start);
    if (start != 0 || step != 1 || n != c.shape[d]) out.whole = false;
  }
  out.elements = checked_product(out.count).value_or(0);
  if (strides.empty()) {
    out.user_strides = contiguous_strides(out.count, es);
  } else {
    if (strides.size() != rank)
      throw InvalidArgument(key, "strides", "one stride per chunk dimension (" + std::to_string(rank) + ") expected");
    out.user_strides = strides;
  }
  out.user_contiguous = out.whole;
  if (out.whole) {
    const auto cs = contiguous_strides(out.count, es);
    for (std::size_t d = 0; d < rank; ++d)
      if (out.count[d] > 1 && out.user_strides[d] != cs[d]) out.user_contiguous = false;
  }
  return out;
}

bool all_fill(const ChunkCodec::Impl& c, const std::byte* p) {
  return codecs::all_equal_as_zarr_python(ByteSpan(p, c.chunk_bytes), c.fill.data(), c.dtype);
}

// Per-thread scratch for a decoded chunk.
std::byte* scratch(std::uint64_t bytes) {
  thread_local Bytes buf;
  if (buf.size() < bytes) buf.resize(bytes);
  return buf.data();
}

// Rethrows a chunk's error with its key.
[[noreturn]] void rethrow_keyed(const std::string& key) {
  try {
    throw;
  } catch (const Error& e) {
    if (!e.key().empty() || key.empty()) throw;
    throw_error(e.code(), key, e.field(), e.detail());
  }
}

// ---- the items -----------------------------------------------------------------

// The inner chunks of a shard that the box of `b` (made explicit in `box`)
// touches, in C order of the inner grid: visit(number, n, dst, src), where
// `n` counts, per dimension, the box elements in that inner chunk, `dst` is
// the byte offset of the first from the box's element 0 in the caller's
// memory, and `src` its byte offset in the decoded inner chunk.
template <class Visit>
void for_each_touched(const ChunkCodec::Impl& c, const codecs::ShardingCodec& sc, const ChunkBox& b, const Box& box,
                      Visit visit) {
  const std::size_t rank = c.shape.size();
  const auto& ics = sc.chunk_shape();
  const auto inner_strides = contiguous_strides(ics, c.dtype.size());
  // Per dimension: the box's first element and step in the shard, and the inner chunks it spans.
  std::vector<std::uint64_t> start(rank, 0), step(rank, 1), first(rank), last(rank), n(rank);
  for (std::size_t d = 0; d < rank; ++d) {
    if (!b.start.empty()) start[d] = b.start[d];
    if (!b.step.empty() && box.count[d] > 1) step[d] = b.step[d];  // one element: any step
    first[d] = start[d] / ics[d];
    last[d] = (start[d] + (box.count[d] - 1) * step[d]) / ics[d];
  }
  std::vector<std::uint64_t> j = first;  // the inner chunk's coordinates in the shard
  for (;;) {
    // The box elements [lo, lo + n) that fall in inner chunk j, per dimension.
    bool touched = true;
    std::int64_t dst = 0, src = 0;
    for (std::size_t d = 0; d < rank && touched; ++d) {
      const std::uint64_t a = j[d] * ics[d], e = a + ics[d];
      const std::uint64_t lo = a <= start[d] ? 0 : (a - start[d] - 1) / step[d] + 1;
      const std::uint64_t hi = std::min(box.count[d], (e - start[d] - 1) / step[d] + 1);  // e > start
      touched = lo < hi;
      n[d] = hi - lo;
      dst += static_cast<std::int64_t>(lo) * box.user_strides[d];
      src += static_cast<std::int64_t>(start[d] + lo * step[d] - a) * inner_strides[d];
    }
    if (touched) visit(sc.inner_number(j), std::as_const(n), dst, src);
    std::size_t d = rank;
    while (d > 0 && ++j[d - 1] > last[d - 1]) {
      j[d - 1] = first[d - 1];
      --d;
    }
    if (d == 0) return;
  }
}

// A box of a shard placed inner chunk by inner chunk: only the inner chunks
// the box touches are decoded (as zarr-python's partial shard reads do), each
// copied from a scratch of its own size straight to its place. `stored(number)`
// gives an inner chunk's stored bytes, nullopt for one the index marks missing.
template <class Stored>
void decode_shard_box(const ChunkCodec::Impl& c, const codecs::ShardingCodec& sc, const ChunkDecode& item,
                      const Box& box, Stored stored) {
  const std::size_t rank = c.shape.size(), es = c.dtype.size();
  const codecs::CodecPipeline& inner = sc.inner();
  const std::uint64_t inner_bytes = inner.chunk_spec().num_bytes();
  const auto inner_strides = contiguous_strides(sc.chunk_shape(), es);
  std::vector<std::int64_t> src_strides(rank);  // of a box step in an inner chunk
  for (std::size_t d = 0; d < rank; ++d)
    src_strides[d] = inner_strides[d] * static_cast<std::int64_t>(item.box.step.empty() || box.count[d] <= 1
                                                                       ? 1
                                                                       : item.box.step[d]);
  const std::vector<std::int64_t> broadcast(rank, 0);
  for_each_touched(c, sc, item.box, box,
                   [&](std::size_t number, const std::vector<std::uint64_t>& n, std::int64_t dst, std::int64_t src) {
                     const std::optional<ByteSpan> bytes = stored(number);
                     if (!bytes) {
                       strided_copy(c.fill.data(), broadcast, item.out + dst, box.user_strides, n, es);
                       return;
                     }
                     const std::byte* chunk = bytes->data();  // a plain copy: the stored bytes are the decoded chunk
                     if (!inner.is_trivial() || bytes->size() != inner_bytes) {
                       std::byte* s = scratch(inner_bytes);
                       inner.decode(*bytes, MutableByteSpan(s, inner_bytes));
                       chunk = s;
                     }
                     strided_copy(chunk + src, src_strides, item.out + dst, box.user_strides, n, es);
                   });
}

void decode_one(const ChunkCodec::Impl& c, const ChunkDecode& item, const Box& box) {
  const std::size_t es = c.dtype.size();
  if (box.elements == 0) return;
  if (!item.encoded) {  // missing: the fill value, broadcast
    strided_copy(c.fill.data(), std::vector<std::int64_t>(box.count.size(), 0), item.out, box.user_strides, box.count,
                 es);
    return;
  }
  const ByteSpan encoded = *item.encoded;
  if (box.user_contiguous) {
    c.pipeline->decode(encoded, MutableByteSpan(item.out, c.chunk_bytes));
    return;
  }
  if (c.shard) {
    const auto index = c.shard->shard_index(encoded);
    decode_shard_box(c, *c.shard, item, box, [&](std::size_t k) -> std::optional<ByteSpan> {
      if (index.missing(k)) return std::nullopt;
      return encoded.subspan(index.offset(k), index.nbytes(k));
    });
    return;
  }
  const std::byte* chunk;
  if (c.pipeline->is_trivial() && encoded.size() == c.chunk_bytes) {
    chunk = encoded.data();  // a plain copy: the stored bytes are the decoded chunk
  } else {
    std::byte* s = scratch(c.chunk_bytes);
    c.pipeline->decode(encoded, MutableByteSpan(s, c.chunk_bytes));
    chunk = s;
  }
  strided_copy(chunk + box.chunk_offset, box.chunk_strides, item.out, box.user_strides, box.count, es);
}

// A shard, encoded in the codec's layout. A box of unit steps merges by
// ShardingCodec::update, which keeps the encoded bytes of the inner chunks
// the box does not touch; so does a box with steps for the inner chunks no
// step lands in (they stay missing where they were, as zarr-python leaves
// them).
void encode_shard(const ChunkCodec::Impl& c, const codecs::ShardingCodec& sc, ChunkEncode& item, const Box& box) {
  const std::size_t rank = c.shape.size(), es = c.dtype.size();
  const codecs::ArraySpec spec{c.dtype, c.shape, c.fill};
  const std::vector<std::uint64_t> zero(rank, 0);
  const std::optional<ByteSpan> existing = !box.whole && item.keep_rest ? item.existing : std::nullopt;
  bool unit_steps = true;
  for (std::size_t d = 0; d < item.box.step.size(); ++d)
    unit_steps = unit_steps && (item.box.step[d] == 1 || box.count[d] <= 1);
  Bytes out;
  bool stored;
  if (box.user_contiguous) {
    stored = sc.update(spec, std::nullopt, item.value, c.shape, zero, zero, c.shape, out, &c.layout);
  } else if (unit_steps) {  // the new values gathered C-contiguous, merged by update
    std::vector<std::int64_t> strides(rank);
    std::int64_t stride = static_cast<std::int64_t>(es);
    for (std::size_t d = rank; d-- > 0; stride *= static_cast<std::int64_t>(box.count[d])) strides[d] = stride;
    std::byte* s = scratch(box.elements * es);
    strided_copy(item.value, box.user_strides, s, strides, box.count, es);
    const std::vector<std::uint64_t>& start = item.box.start.empty() ? zero : item.box.start;
    stored = sc.update(spec, existing, s, box.count, zero, start, box.count, out, &c.layout);
  } else {  // steps: only the inner chunks a step lands in are decoded, merged and encoded again
    const auto& inner = sc.chunk_shape();
    const auto& per_shard = sc.chunks_per_shard();
    std::vector<std::vector<std::uint8_t>> hit(rank);  // per dimension, the inner chunks a step lands in
    for (std::size_t d = 0; d < rank; ++d) {
      hit[d].assign(per_shard[d], 0);
      for (std::uint64_t k = 0; k < box.count[d]; ++k)
        hit[d][(item.box.start[d] + k * item.box.step[d]) / inner[d]] = 1;
    }
    std::vector<std::uint8_t> only(sc.num_inner(), 0);
    std::vector<std::uint64_t> coords(rank), at(rank);
    for (std::size_t i = 0; i < only.size(); ++i) {
      sc.inner_coords(i, coords);
      bool all = true;
      for (std::size_t d = 0; d < rank; ++d) all = all && hit[d][coords[d]];
      only[i] = all;
    }
    std::byte* s = scratch(c.chunk_bytes);
    codecs::fill_elements(s, c.chunk_bytes / es, c.fill.data(), es);
    if (existing) {
      const auto index = sc.shard_index(*existing);
      Bytes decoded(sc.inner().chunk_spec().num_bytes());
      for (std::size_t i = 0; i < only.size(); ++i) {
        if (!only[i] || index.missing(i)) continue;
        sc.inner().decode(existing->subspan(index.offset(i), index.nbytes(i)), decoded);
        sc.inner_coords(i, coords);
        for (std::size_t d = 0; d < rank; ++d) at[d] = coords[d] * inner[d];
        codecs::copy_box(decoded.data(), inner, zero, s, c.shape, at, inner, es);
      }
    }
    strided_copy(item.value, box.user_strides, s + box.chunk_offset, box.chunk_strides, box.count, es);
    stored = sc.update(spec, existing, s, c.shape, zero, zero, c.shape, out, &c.layout, only);
  }
  if (!stored) {  // no inner chunk left
    if (item.drop_if_fill) {
      item.encoded.reset();
      return;
    }
    sc.encode_empty(out);
  }
  item.encoded = std::move(out);
}

void encode_one(const ChunkCodec::Impl& c, ChunkEncode& item, const Box& box) {
  if (c.shard) {
    encode_shard(c, *c.shard, item, box);
    return;
  }
  const std::size_t es = c.dtype.size();
  const std::byte* chunk;
  if (box.user_contiguous) {
    chunk = item.value;  // the new values are the whole chunk, in order
  } else {
    std::byte* s = scratch(c.chunk_bytes);
    if (!box.whole && item.existing && item.keep_rest) {
      c.pipeline->decode(*item.existing, MutableByteSpan(s, c.chunk_bytes));
    } else if (!box.whole) {
      codecs::fill_elements(s, c.chunk_bytes / es, c.fill.data(), es);
    }
    strided_copy(item.value, box.user_strides, s + box.chunk_offset, box.chunk_strides, box.count, es);
    chunk = s;
  }
  if (item.drop_if_fill && all_fill(c, chunk)) {
    item.encoded.reset();
    return;
  }
  Bytes out;
  c.pipeline->encode(ByteSpan(chunk, c.chunk_bytes), out);
  item.encoded = std::move(out);
}

// ---- one batch on the pool -------------------------------------------------------

// The batch's state, shared by the threads it fans out over: each takes the
// next item until none is left; the one that ends the last item completes.
struct Job {
  Runtime* rt = nullptr;
  detail::SchedulerCounters* counters = nullptr;
  std::size_t n = 0;
  std::function<void(std::size_t)> run;
  std::optional<detail::AnyCompletion<void>> handler;  // emplaced once (see chunk_op.hpp)
  std::atomic<std::size_t> next{0}, finished{0};
  std::atomic<bool> failed{false};
  std::mutex mu;
  std::size_t error_index = SIZE_MAX;
  std::exception_ptr error;

  void fail(std::size_t i, std::exception_ptr e) {
    std::lock_guard lock(mu);
    if (i < error_index) error_index = i, error = std::move(e);
    failed.store(true, std::memory_order_relaxed);
  }
  void complete() {
    counters->queue_depth.fetch_sub(1, std::memory_order_relaxed);
    std::exception_ptr e;
    {
      std::lock_guard lock(mu);
      e = error;
    }
    std::move (*handler)(e);
  }
};

void work(const std::shared_ptr<Job>& job) {
  for (;;) {
    const std::size_t i = job->next.fetch_add(1, std::memory_order_relaxed);
    if (i >= job->n) return;
    if (!job->failed.load(std::memory_order_relaxed)) {
      try {
        job->run(i);
      } catch (...) {
        job->fail(i, std::current_exception());
      }
    }
    if (job->finished.fetch_add(1, std::memory_order_acq_rel) + 1 == job->n) job->complete();
  }
}

// Decoded bytes a helper thread should have to itself before a batch fans
// out to it: below this, waking a thread costs more than it saves.
constexpr std::uint64_t kFanoutBytes = std::uint64_t{128} << 10;

void submit(Runtime& rt, std::shared_ptr<Job> job, std::uint64_t batch_bytes) {
  auto& counters = detail::RuntimeAccess::engine(rt).scheduler.counters();
  job->counters = &counters;
  if (job->n == 0) {  // nothing to run: complete through the pool all the same
    asio::post(rt.codec_executor(), [job] { std::move (*job->handler)(std::exception_ptr()); });
    return;
  }
  const std::uint64_t threads = std::max(1u, rt.codec_threads());
  const std::size_t helpers =
      static_cast<std::size_t>(std::min({threads - 1, std::uint64_t{job->n - 1}, batch_bytes / kFanoutBytes}));
  counters.pool_submissions.fetch_add(1, std::memory_order_relaxed);
  counters.queue_depth.fetch_add(1, std::memory_order_relaxed);
  auto ex = rt.codec_executor();
  asio::post(ex, [job, helpers, ex] {
    for (std::size_t k = 0; k < helpers; ++k) {
      job->counters->fanout_posts.fetch_add(1, std::memory_order_relaxed);
      asio::post(ex, [job] { work(job); });
    }
    work(job);
  });
}

// Counts an item as the scheduler counts a chunk task.
void count(Runtime& rt, bool computes) { detail::RuntimeAccess::engine(rt).scheduler.count_chunk(computes); }

void check_size(Runtime& rt, const ChunkCodec::Impl& c, const std::string& key) {
  if (c.chunk_bytes > rt.options().max_chunk_bytes)
    throw UnsupportedError(key, "chunk_grid",
                           "a chunk of " + std::to_string(c.chunk_bytes) + " bytes is larger than the limit of " +
                               std::to_string(rt.options().max_chunk_bytes) + " (RuntimeOptions::max_chunk_bytes)");
}

// Fails `handler` through the pool (never inside the initiating call).
void fail_through_pool(Runtime& rt, detail::AnyCompletion<void> handler, std::exception_ptr e) {
  auto job = std::make_shared<Job>();
  job->handler.emplace(std::move(handler));
  asio::post(rt.codec_executor(), [job, e] { std::move (*job->handler)(e); });
}

template <class F>
void wait_for(F start) {
  std::promise<void> done;
  auto finished = done.get_future();
  start([&done](std::exception_ptr e) {
    if (e) done.set_exception(e);
    else done.set_value();
  });
  finished.get();
}

}  // namespace

// ---- ChunkCodec ------------------------------------------------------------------

ChunkCodec ChunkCodec::from_metadata(const ArrayMetadata& metadata, const std::string& key) {
  metadata.validate(key);
  const char* grid_field = metadata.zarr_format == 2 ? "chunks" : "chunk_grid.configuration.chunk_shape";
  return ChunkCodec(prepare(detail::pipeline_codecs(metadata), metadata.data_type, metadata.chunk_shape,
                            metadata.fill_value, key, grid_field));
}

ChunkCodec ChunkCodec::from_codecs(const nlohmann::json& codecs, DataType dtype, std::vector<std::uint64_t> chunk_shape,
                                   FillValue fill, const std::string& key) {
  return ChunkCodec(prepare(codecs, dtype, std::move(chunk_shape), std::move(fill), key, "chunk_shape"));
}

ChunkCodec ChunkCodec::with_shard_layout(ShardLayout layout) const {
  if (!impl_->shard)
    throw InvalidArgument("", "layout", "a shard layout for " + describe() + ", which is not sharding_indexed alone");
  if (dynamic_cast<const codecs::ShardingCodec*>(&impl_->shard->inner().array_to_bytes()))
    throw InvalidArgument("", "layout", "a shard layout for " + describe() + ", whose inner chunks are shards");
  using Order = codecs::ShardingCodec::InnerOrder;
  const Order order = layout.order == ShardLayout::Order::morton            ? Order::morton
                      : layout.order == ShardLayout::Order::colexicographic ? Order::colexicographic
                                                                            : Order::lexicographic;
  auto impl = std::make_shared<Impl>(*impl_);
  impl->layout = impl_->shard->layout(order, layout.keep_empty);
  impl->layout.fill_as_zarr_python = true;
  return ChunkCodec(std::move(impl));
}

const std::vector<std::uint64_t>& ChunkCodec::chunk_shape() const { return impl_->shape; }
DataType ChunkCodec::dtype() const { return impl_->dtype; }
std::uint64_t ChunkCodec::chunk_bytes() const { return impl_->chunk_bytes; }
const FillValue& ChunkCodec::fill() const { return impl_->fill; }
std::int64_t ChunkCodec::encoded_size() const { return impl_->pipeline->encoded_size(); }
bool ChunkCodec::is_trivial() const { return impl_->pipeline->is_trivial(); }
nlohmann::json ChunkCodec::codecs() const { return impl_->pipeline->to_json(); }
std::string ChunkCodec::describe() const { return impl_->pipeline->describe(); }

void ChunkCodec::decode_blocking(Runtime& rt, std::span<ChunkDecode> items) const {
  if (rt.on_codec_thread())
    throw InvalidArgument("", "runtime", "decode_blocking on a codec thread of the runtime would deadlock");
  wait_for([&](auto done) { async_decode(rt, items, std::move(done)); });
}

void ChunkCodec::encode_blocking(Runtime& rt, std::span<ChunkEncode> items) const {
  if (rt.on_codec_thread())
    throw InvalidArgument("", "runtime", "encode_blocking on a codec thread of the runtime would deadlock");
  wait_for([&](auto done) { async_encode(rt, items, std::move(done)); });
}

namespace {

// Where an item's box lives in the caller's memory, and the error when it has none.
const std::vector<std::int64_t>& strides_of(const ChunkDecode& item) { return item.out_strides; }
const std::vector<std::int64_t>& strides_of(const ChunkEncode& item) { return item.value_strides; }
void check_memory(const ChunkDecode& item, const Box& box) {
  if (box.elements > 0 && !item.out) throw InvalidArgument(item.key, "out", "no destination for a box of elements");
}
void check_memory(const ChunkEncode& item, const Box& box) {
  if (box.elements > 0 && !item.value) throw InvalidArgument(item.key, "value", "no source for a box of elements");
}

// Checks every item of a batch (before any runs: then nothing is written),
// then submits the batch as one job whose item i runs `run(item, box)` on
// the pool, its errors keyed to the item.
template <class Item, class Run>
void start_batch(Runtime& rt, const ChunkCodec& codec, std::span<Item> items, detail::AnyCompletion<void> handler, Run run) {
  const ChunkCodec::Impl& c = codec.impl();
  auto boxes = std::make_shared<std::vector<Box>>();
  std::exception_ptr error = caught([&] {
    boxes->reserve(items.size());
    for (const Item& item : items) {
      check_size(rt, c, item.key);
      boxes->push_back(resolve(c, item.box, strides_of(item), item.key));
      check_memory(item, boxes->back());
    }
  });
  if (error) return fail_through_pool(rt, std::move(handler), std::move(error));
  auto job = std::make_shared<Job>();
  job->rt = &rt;
  job->n = items.size();
  job->handler.emplace(std::move(handler));
  job->run = [&rt, codec, items, boxes, run](std::size_t i) {
    Item& item = items[i];
    try {
      run(rt, codec.impl(), item, (*boxes)[i]);
    } catch (...) {
      rethrow_keyed(item.key);
    }
  };
  submit(rt, std::move(job), items.size() * c.chunk_bytes);
}

}  // namespace

namespace detail {

void start_decode(Runtime& rt, const ChunkCodec& codec, std::span<ChunkDecode> items, AnyCompletion<void> handler) {
  start_batch(rt, codec, items, std::move(handler),
              [](Runtime& r, const ChunkCodec::Impl& c, const ChunkDecode& item, const Box& box) {
                count(r, item.encoded && !c.pipeline->is_trivial());
                decode_one(c, item, box);
              });
}

void start_encode(Runtime& rt, const ChunkCodec& codec, std::span<ChunkEncode> items, AnyCompletion<void> handler) {
  start_batch(rt, codec, items, std::move(handler),
              [](Runtime& r, const ChunkCodec::Impl& c, ChunkEncode& item, const Box& box) {
                count(r, !c.pipeline->is_trivial());
                encode_one(c, item, box);
              });
}

}  // namespace detail

// ---- the store forms -------------------------------------------------------------

namespace {

// Store requests of one batch, started by `start(i, done)` for each i of
// `todo`, at most `limit` at once; `finish(error)` runs once after the last
// one started has ended (with the first error, after which none starts).
class StoreRequests : public std::enable_shared_from_this<StoreRequests> {
 public:
  using Done = std::function<void(std::exception_ptr)>;
  using Start = std::function<void(std::size_t, Done)>;
  StoreRequests(std::vector<std::size_t> todo, std::size_t limit, Start start, Done finish)
      : todo_(std::move(todo)), limit_(std::max<std::size_t>(1, limit)), start_(std::move(start)),
        finish_(std::move(finish)) {}

  void run() { pump(); }

 private:
  void pump() {
    std::vector<std::size_t> starting;
    bool finished = false;
    std::exception_ptr error;
    {
      std::lock_guard lock(mu_);
      while (!error_ && next_ < todo_.size() && active_ < limit_) {
        starting.push_back(todo_[next_++]);
        ++active_;
      }
      if (active_ == 0 && !finished_ && (error_ || next_ == todo_.size())) {
        finished = finished_ = true;
        error = error_;
      }
    }
    for (std::size_t i : starting) {
      std::exception_ptr failed =
          caught([&] { start_(i, [self = shared_from_this()](std::exception_ptr e) { self->done(std::move(e)); }); });
      if (failed) done(std::move(failed));
    }
    if (finished) finish_(error);
  }
  void done(std::exception_ptr e) {
    {
      std::lock_guard lock(mu_);
      --active_;
      if (e && !error_) error_ = std::move(e);
    }
    pump();
  }

  std::vector<std::size_t> todo_;
  std::size_t limit_;
  Start start_;
  Done finish_;
  std::mutex mu_;
  std::size_t next_ = 0, active_ = 0;
  bool finished_ = false;
  std::exception_ptr error_;
};

// One batch of a store form: the items, the values read for them, the handler.
template <class Item>
struct StoreBatch {
  StoreBatch(Runtime& r, std::shared_ptr<Store> s, ChunkCodec c, std::span<Item> i, detail::AnyCompletion<void> h)
      : rt(&r), store(std::move(s)), codec(std::move(c)), items(i), values(i.size()) {
    handler.emplace(std::move(h));
  }

  Runtime* rt;
  std::shared_ptr<Store> store;
  ChunkCodec codec;
  std::span<Item> items;
  std::vector<std::optional<Bytes>> values;  // what was read, by item
  std::optional<detail::AnyCompletion<void>> handler;  // emplaced once

  void complete(std::exception_ptr e) {
    values.clear();
    std::move (*handler)(std::move(e));
  }
};

ReadOptions whole_value(const ChunkCodec::Impl& c) {
  ReadOptions o;
  o.need_generation = false;  // unconditional whole values
  o.size_hint = static_cast<std::size_t>(std::min<std::uint64_t>(c.chunk_bytes + c.chunk_bytes / 64 + 256, 64u << 20));
  return o;
}

// Store reads of one batch: read k asks for item[k]'s key with options[k]
// and gets result[k].
struct Reads {
  std::vector<std::size_t> item;
  std::vector<ReadOptions> options;
  std::vector<ReadResult> result;
  void add(std::size_t i, ReadOptions o) {
    item.push_back(i);
    options.push_back(std::move(o));
  }
};

// Runs `reads` on the io_context (what the store holds at once first,
// together; the rest at most max_inflight_requests at once), then
// `then(error)`, once, after the last has ended.
template <class Item>
void read_all(const std::shared_ptr<StoreBatch<Item>>& b, std::shared_ptr<Reads> reads,
              std::function<void(std::exception_ptr)> then) {
  asio::post(b->rt->io_executor(), [b, reads = std::move(reads), then = std::move(then)]() mutable {
    const std::size_t n = reads->item.size();
    reads->result.assign(n, ReadResult{});
    std::vector<std::size_t> waiting;
    std::exception_ptr error = caught([&] {
      std::vector<std::string> keys;
      keys.reserve(n);
      for (std::size_t i : reads->item) keys.push_back(b->items[i].key);
      std::vector<ReadNow> now(n);
      b->store->try_read_now_many(keys, reads->options, now);
      for (std::size_t k = 0; k < n; ++k) {
        if (now[k].error) std::rethrow_exception(now[k].error);
        if (now[k].result) reads->result[k] = std::move(*now[k].result);
        else waiting.push_back(k);
      }
    });
    if (error) return then(std::move(error));
    auto start = [b, reads](std::size_t k, StoreRequests::Done done) {
      b->store->async_read(b->items[reads->item[k]].key, reads->options[k],
                           [reads, k, done = std::move(done)](std::exception_ptr e, ReadResult r) {
                             if (!e) reads->result[k] = std::move(r);
                             done(std::move(e));
                           });
    };
    std::make_shared<StoreRequests>(std::move(waiting), b->rt->options().max_inflight_requests, std::move(start),
                                    std::move(then))
        ->run();
  });
}

// Reads the whole values of items `todo` into b->values, then runs `then(error)`.
template <class Item>
void read_values(const std::shared_ptr<StoreBatch<Item>>& b, const std::vector<std::size_t>& todo,
                 std::function<void(std::exception_ptr)> then) {
  auto reads = std::make_shared<Reads>();
  for (std::size_t i : todo) reads->add(i, whole_value(b->codec.impl()));
  read_all(b, reads, [b, reads, then = std::move(then)](std::exception_ptr e) {
    if (!e)
      for (std::size_t k = 0; k < reads->item.size(); ++k) b->values[reads->item[k]] = std::move(reads->result[k].value);
    then(std::move(e));
  });
}

// Checks every item's box before anything is read or written; returns the boxes.
template <class Item>
std::vector<Box> check_items(Runtime& rt, const ChunkCodec::Impl& c, std::span<Item> items) {
  std::vector<Box> boxes;
  boxes.reserve(items.size());
  for (const Item& item : items) {
    check_size(rt, c, item.key);
    boxes.push_back(resolve(c, item.box, strides_of(item), item.key));
  }
  return boxes;
}

// ---- reads of parts of shards ----------------------------------------------------

// An item of a read whose box is part of a shard (codecs: sharding_indexed
// alone): its index first (read, or from the runtime's shard index cache),
// then the inner chunks the box touches by byte ranges, coalesced as Array
// coalesces them, each read on the condition that the shard is still the
// one the index came from.
struct ShardPart {
  bool by_ranges = false;  // false: the whole value (StoreBatch::values), as for other items
  Generation generation;   // of the index
  std::optional<Bytes> encoded_index;  // as read, until decoded
  detail::ShardIndexCache::Index index;
  bool cached = false;  // `index` came from the runtime's shard index cache, unchecked against the store
  std::vector<detail::InnerPiece> pieces;  // the inner chunks touched, in for_each_touched's order
  detail::ShardReadPlan plan;
  std::vector<Bytes> buffers;  // by plan.ranges
  // The reads of read_inner_chunks: the ranges, or one byte to check a
  // cached index that locates none of the inner chunks touched.
  std::size_t reads() const { return plan.ranges.empty() && cached ? 1 : plan.ranges.size(); }
};

struct ReadBatch : StoreBatch<ChunkDecode> {
  ReadBatch(Runtime& r, std::shared_ptr<Store> s, ChunkCodec c, std::span<ChunkDecode> i, std::vector<Box> b,
            detail::AnyCompletion<void> h)
      : StoreBatch(r, std::move(s), std::move(c), i, std::move(h)), boxes(std::move(b)) {}
  std::vector<Box> boxes;        // by item
  std::vector<ShardPart> parts;  // by item; empty when no item reads by ranges
  bool by_ranges(std::size_t i) const { return !parts.empty() && parts[i].by_ranges; }
};

void locate_inner_chunks(const std::shared_ptr<ReadBatch>& b);
void read_inner_chunks(const std::shared_ptr<ReadBatch>& b);
void decode_read(const std::shared_ptr<ReadBatch>& b);

// Reads items `whole` of a batch whole after all (their shards changed, or
// the store cannot tell), then runs `next(b)`.
void read_whole(const std::shared_ptr<ReadBatch>& b, const std::vector<std::size_t>& whole,
                void (*next)(const std::shared_ptr<ReadBatch>&)) {
  if (whole.empty()) return next(b);
  std::exception_ptr error = caught([&] {
    for (std::size_t i : whole) check_size(*b->rt, b->codec.impl(), b->items[i].key);
  });
  if (error) return b->complete(std::move(error));
  read_values<ChunkDecode>(b, whole, [b, next](std::exception_ptr e) {
    if (e) return b->complete(std::move(e));
    next(b);
  });
}

// The first reads are in: the indexes of the items read by ranges, the
// values of the others.
void indexes_read(const std::shared_ptr<ReadBatch>& b, Reads& reads) {
  std::vector<std::size_t> whole;
  for (std::size_t k = 0; k < reads.item.size(); ++k) {
    const std::size_t i = reads.item[k];
    ReadResult& got = reads.result[k];
    ShardPart* p = b->by_ranges(i) ? &b->parts[i] : nullptr;
    if (!p) {
      b->values[i] = std::move(got.value);
    } else if (!got.value) {
      p->by_ranges = false;  // no shard: the fill value
    } else if (got.generation.unknown()) {
      p->by_ranges = false;  // a store without versions: no index and inner chunks of one shard but a whole read
      whole.push_back(i);
    } else {
      p->encoded_index = std::move(got.value);
      p->generation = std::move(got.generation);
    }
  }
  read_whole(b, whole, locate_inner_chunks);
}

// The ranges of each item's inner chunks, from its index: an index read is
// decoded (and cached) on the pool where it has a checksum to verify, else
// at once (a copy of the entries), as is a cached one.
void locate_inner_chunks(const std::shared_ptr<ReadBatch>& b) {
  std::vector<std::size_t> todo;
  bool checksums = false;
  const ChunkCodec::Impl& c = b->codec.impl();
  for (std::size_t i = 0; i < b->items.size(); ++i)
    if (b->by_ranges(i)) {
      todo.push_back(i);
      checksums = checksums || (b->parts[i].encoded_index && !c.shard->index_trivial());
    }
  if (todo.empty()) return decode_read(b);
  auto locate = [b](std::size_t i) {
    const ChunkCodec::Impl& c = b->codec.impl();
    ShardPart& p = b->parts[i];
    const ChunkDecode& item = b->items[i];
    try {
      if (p.encoded_index) {
        p.index = std::make_shared<const codecs::ShardingCodec::Index>(c.shard->decode_index(*p.encoded_index));
        p.encoded_index.reset();
        detail::RuntimeAccess::engine(*b->rt).shard_indexes.put(b->store, item.key, *c.shard, {p.index, p.generation});
      }
      for_each_touched(c, *c.shard, item.box, b->boxes[i],
                       [&](std::size_t number, const auto&, std::int64_t, std::int64_t) {
                         p.pieces.emplace_back().number = number;
                       });
      const RuntimeOptions& o = b->rt->options();
      p.plan = detail::plan_shard_reads(*p.index, p.pieces, {o.coalesce_gap, o.coalesce_max});
    } catch (...) {
      rethrow_keyed(item.key);
    }
  };
  if (!checksums) {
    std::exception_ptr error = caught([&] {
      for (std::size_t i : todo) locate(i);
    });
    if (error) return b->complete(std::move(error));
    return read_inner_chunks(b);
  }
  auto job = std::make_shared<Job>();
  job->rt = b->rt;
  job->n = todo.size();
  job->run = [locate, todo](std::size_t k) { locate(todo[k]); };
  job->handler.emplace(detail::AnyCompletion<void>([b](std::exception_ptr e) {
    if (e) return b->complete(std::move(e));
    read_inner_chunks(b);
  }));
  submit(*b->rt, std::move(job), todo.size() * c.shard->index_bytes());
}

// The planned ranges. A shard replaced or erased since its index was read
// (or cached) is read whole instead (one version), and dropped from the
// cache; a range shorter than the index says of the shard it came from is
// CorruptChunk.
void read_inner_chunks(const std::shared_ptr<ReadBatch>& b) {
  auto reads = std::make_shared<Reads>();
  for (std::size_t i = 0; i < b->items.size(); ++i) {
    if (!b->by_ranges(i)) continue;
    const ShardPart& p = b->parts[i];
    auto add = [&](ByteRange range) {
      ReadOptions o;
      o.range = range;
      o.if_equal = p.generation;
      o.need_generation = false;
      reads->add(i, std::move(o));
    };
    for (const detail::ShardRange& r : p.plan.ranges) add(ByteRange::from(r.begin, r.end - r.begin));
    if (p.reads() > p.plan.ranges.size()) add(ByteRange::from(0, 1));
  }
  if (reads->item.empty()) return decode_read(b);  // every inner chunk touched is missing
  read_all<ChunkDecode>(b, reads, [b, reads](std::exception_ptr e) {
    if (e) return b->complete(std::move(e));
    std::vector<std::size_t> whole;
    e = caught([&] {
      for (std::size_t k = 0; k < reads->item.size();) {
        const std::size_t i = reads->item[k];
        ShardPart& p = b->parts[i];
        bool current = true;
        for (std::size_t n = p.reads(), r = 0; r < n; ++r) {
          ReadResult& got = reads->result[k++];
          current = current && !got.changed && got.value;
          if (!current || r >= p.plan.ranges.size()) continue;
          const detail::ShardRange& range = p.plan.ranges[r];
          detail::check_range_size(b->items[i].key, got.value->size(), range.begin, range.end);
          detail::place_range(p.plan, range, p.pieces, p.buffers.size());
          p.buffers.push_back(std::move(*got.value));
        }
        if (!current) {
          detail::RuntimeAccess::engine(*b->rt).shard_indexes.invalidate(b->store, b->items[i].key,
                                                                         *b->codec.impl().shard);
          p = ShardPart{};
          whole.push_back(i);
        }
      }
    });
    if (e) return b->complete(std::move(e));
    read_whole(b, whole, decode_read);
  });
}

// Item i's box from the inner chunks read by ranges.
void decode_pieces(const ChunkCodec::Impl& c, const ChunkDecode& item, const Box& box, const ShardPart& p) {
  std::size_t k = 0;  // the pieces are in the order decode_shard_box asks for them
  decode_shard_box(c, *c.shard, item, box, [&](std::size_t) -> std::optional<ByteSpan> {
    const detail::InnerPiece& piece = p.pieces[k++];
    if (piece.buffer == detail::InnerPiece::kAbsent) return std::nullopt;
    return ByteSpan(p.buffers[piece.buffer]).subspan(piece.offset, piece.size);
  });
}

// Every item into place, in one pool submission.
void decode_read(const std::shared_ptr<ReadBatch>& b) {
  const ChunkCodec::Impl& c = b->codec.impl();
  std::uint64_t bytes = 0;
  for (std::size_t i = 0; i < b->items.size(); ++i) {
    ChunkDecode& item = b->items[i];
    item.found = b->values[i].has_value() || b->by_ranges(i);
    item.encoded = b->values[i] ? std::optional<ByteSpan>(ByteSpan(*b->values[i])) : std::nullopt;
    bytes += b->by_ranges(i) ? b->boxes[i].elements * c.dtype.size() : c.chunk_bytes;
  }
  auto job = std::make_shared<Job>();
  job->rt = b->rt;
  job->n = b->items.size();
  job->handler.emplace(detail::AnyCompletion<void>([b](std::exception_ptr e) {
    for (auto& item : b->items) item.encoded.reset();
    b->complete(std::move(e));
  }));
  job->run = [b](std::size_t i) {
    const ChunkCodec::Impl& c = b->codec.impl();
    const ChunkDecode& item = b->items[i];
    try {
      if (b->by_ranges(i)) {
        count(*b->rt, !c.shard->inner().is_trivial());
        decode_pieces(c, item, b->boxes[i], b->parts[i]);
      } else {
        count(*b->rt, item.encoded && !c.pipeline->is_trivial());
        decode_one(c, item, b->boxes[i]);
      }
    } catch (...) {
      rethrow_keyed(item.key);
    }
  };
  submit(*b->rt, std::move(job), bytes);
}

}  // namespace

namespace detail {

void start_read(Runtime& rt, std::shared_ptr<Store> store, const ChunkCodec& codec, std::span<ChunkDecode> items,
                AnyCompletion<void> handler) {
  const ChunkCodec::Impl& c = codec.impl();
  std::vector<Box> boxes;
  std::vector<char> ranged(items.size(), 0);
  std::exception_ptr error = caught([&] {
    boxes.reserve(items.size());
    for (std::size_t i = 0; i < items.size(); ++i) {
      const ChunkDecode& item = items[i];
      boxes.push_back(resolve(c, item.box, item.out_strides, item.key));
      check_memory(item, boxes.back());
      ranged[i] = c.shard && !boxes[i].whole && boxes[i].elements > 0;
      if (!ranged[i]) check_size(rt, c, item.key);  // a shard read by ranges is never held whole
    }
  });
  if (error) return fail_through_pool(rt, std::move(handler), std::move(error));
  auto b = std::make_shared<ReadBatch>(rt, std::move(store), codec, items, std::move(boxes), std::move(handler));
  auto reads = std::make_shared<Reads>();
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (!ranged[i]) {
      reads->add(i, whole_value(c));
      continue;
    }
    if (b->parts.empty()) b->parts.resize(items.size());
    ShardPart& p = b->parts[i];
    p.by_ranges = true;
    auto hit = detail::RuntimeAccess::engine(rt).shard_indexes.find(b->store, items[i].key, *c.shard);
    if (hit && hit->index) {
      p.index = std::move(hit->index);
      p.generation = std::move(hit->generation);
      p.cached = true;
      continue;
    }
    ReadOptions o;
    const std::uint64_t n = c.shard->index_bytes();
    o.range = c.shard->index_at_start() ? ByteRange::from(0, n) : ByteRange::last(n);
    reads->add(i, std::move(o));
  }
  read_all<ChunkDecode>(b, reads, [b, reads](std::exception_ptr e) {
    if (e) return b->complete(std::move(e));
    indexes_read(b, *reads);
  });
}

void start_write(Runtime& rt, std::shared_ptr<Store> store, const ChunkCodec& codec, std::span<ChunkEncode> items,
                 AnyCompletion<void> handler) {
  const ChunkCodec::Impl& c = codec.impl();
  std::vector<std::size_t> partial;  // items that keep what their box does not cover: read first
  std::exception_ptr error = caught([&] {
    const std::vector<Box> boxes = check_items(rt, c, items);
    for (std::size_t i = 0; i < items.size(); ++i)
      if (items[i].keep_rest && !boxes[i].whole) partial.push_back(i);
  });
  if (error) return fail_through_pool(rt, std::move(handler), std::move(error));
  auto b = std::make_shared<StoreBatch<ChunkEncode>>(rt, std::move(store), codec, items, std::move(handler));
  auto store_all = [b]() {
    std::vector<std::size_t> all(b->items.size());
    std::iota(all.begin(), all.end(), std::size_t{0});
    auto start = [b](std::size_t i, StoreRequests::Done done) {
      std::optional<Bytes> value = std::move(b->items[i].encoded);
      b->items[i].encoded.reset();
      b->store->async_write(b->items[i].key, std::move(value), WriteOptions{},
                            [done = std::move(done)](std::exception_ptr e, std::optional<Generation>) {
                              done(std::move(e));
                            });
    };
    std::make_shared<StoreRequests>(std::move(all), b->rt->options().max_inflight_requests, std::move(start),
                                    [b](std::exception_ptr e) { b->complete(std::move(e)); })
        ->run();
  };
  read_values(b, std::move(partial), [b, store_all](std::exception_ptr e) {
    if (e) {
      b->complete(std::move(e));
      return;
    }
    for (std::size_t i = 0; i < b->items.size(); ++i)
      b->items[i].existing = b->values[i] ? std::optional<ByteSpan>(ByteSpan(*b->values[i])) : std::nullopt;
    start_encode(*b->rt, b->codec, b->items, AnyCompletion<void>([b, store_all](std::exception_ptr e) {
                   for (auto& item : b->items) item.existing.reset();
                   b->values.clear();
                   if (e) {
                     b->complete(std::move(e));
                     return;
                   }
                   asio::post(b->rt->io_executor(), store_all);
                 }));
  });
}

}  // namespace detail

bool ChunkCodec::read_now(Runtime& rt, Store& store, std::span<ChunkDecode> items) const {
  const Impl& c = *impl_;
  const RuntimeOptions& o = rt.options();
  if (!o.caller_reads || !c.pipeline->is_trivial() || items.empty() || items.size() > detail::kCallerReadChunks ||
      c.chunk_bytes > o.inline_bytes / items.size())
    return false;
  std::vector<Box> boxes;
  boxes.reserve(items.size());
  for (const ChunkDecode& item : items) {
    check_size(rt, c, item.key);
    boxes.push_back(resolve(c, item.box, item.out_strides, item.key));
    check_memory(item, boxes.back());
  }
  ReadOptions options = whole_value(c);
  options.caches_only = true;  // the calling thread never waits for a device
  std::vector<std::optional<Bytes>> values(items.size());
  for (std::size_t i = 0; i < items.size(); ++i) {
    std::optional<ReadResult> got = store.try_read_now(items[i].key, options);
    if (!got) return false;  // nothing written yet
    values[i] = std::move(got->value);
  }
  for (std::size_t i = 0; i < items.size(); ++i) {
    ChunkDecode& item = items[i];
    item.found = values[i].has_value();
    item.encoded = values[i] ? std::optional<ByteSpan>(ByteSpan(*values[i])) : std::nullopt;
    try {
      decode_one(c, item, boxes[i]);
    } catch (...) {
      item.encoded.reset();
      rethrow_keyed(item.key);
    }
    item.encoded.reset();
  }
  detail::RuntimeAccess::engine(rt).scheduler.counters().caller_reads.fetch_add(1, std::memory_order_relaxed);
  return true;
}

}  // namespace zarrcoro
