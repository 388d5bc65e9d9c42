// The read operation (read_op.hpp): fetch whole chunks, or a shard's index
// and the inner chunks a part needs, then decode on the pool into place.
#include "engine/read_op.hpp"

#include <algorithm>
#include <cstring>

#include <boost/asio/use_awaitable.hpp>

#include <zarrcoro/error.hpp>

#include "codecs/vlen.hpp"
#include "core/checked.hpp"
#include "engine/placement.hpp"
#include "engine/shard_plan.hpp"

namespace zarrcoro::detail {

namespace asio = boost::asio;
using asio::use_awaitable;

namespace {

class ReadOp final : public ChunkOp {
 public:
  // `strings`: read_strings' result (sized to the region), filled from the
  // views in `out` once every chunk is in.
  ReadOp(std::shared_ptr<const Array::State> st, ChunkParts parts, Region region,
         MutableByteSpan out, std::vector<std::string>* strings = nullptr)
      : ChunkOp(std::move(st), std::move(parts)), out_(region.shape(), out), strings_(strings) {
    if (st_->meta.data_type.is_variable_length()) heap_ = std::make_unique<codecs::VlenHeap>();
    tasks_.reserve(parts_.size());
    for (std::size_t i = 0; i < parts_.size(); ++i) tasks_.emplace_back(this, i).cancelled = &cancel_flag_;
  }

 private:
  static constexpr std::size_t kInPlace = InnerPiece::kInPlace;
  // A shard's task may run in parts (max_parts: its inner chunks), which the
  // pool's threads share: part k of n decodes the k-th n-th of `pieces`.
  struct Task final : ChunkTask {
    Task(ReadOp* op, std::size_t i) : op(op), i(i) {}
    void run() override {
      prepare();
      run_part(0, 1);
      finish();
    }
    void prepare() override {
      if (encoded && op->st_->shard) op->split_shard(i);  // a whole shard was fetched
    }
    void run_part(std::size_t k, std::size_t n) override {
      if (!pieces.empty()) op->decode_pieces(i, pieces.size() * k / n, pieces.size() * (k + 1) / n);
      else if (k == 0 && !in_place) op->decode(i, encoded);
    }
    void finish() override { buffers.clear(); }  // free the encoded bytes early
    ReadOp* op;
    std::size_t i;
    bool in_place = false;  // the store read the chunk straight into out_: nothing left to do
    std::optional<Bytes> encoded;
    std::vector<InnerPiece> pieces;  // partial shard reads
    std::vector<Bytes> buffers;      // coalesced byte ranges of the shard
  };

  asio::awaitable<void> fetch(std::size_t i) override {
    const auto& p = parts_[i];
    if (by_inner_chunks(i)) {
      const bool fetched_inner = co_await fetch_inner_chunks(i);  // no co_await beside && (g++ 12)
      if (fetched_inner) co_return;
    }
    Generation unconditional;  // named: g++ 12 and temporaries beside co_await
    const MutableByteSpan into = st_->shard ? MutableByteSpan() : read_target(*st_->pipeline, p, p.out_start);
    auto got = co_await read(st_->chunk_key(p.coords), ByteRange::all(), std::move(unconditional), into);
    fetched(i, std::move(got));
  }

  bool can_fetch_now(std::size_t i) const override { return !by_inner_chunks(i); }

  // Whether part i of a shard is read by its inner chunks (index, then
  // ranges): a partial shard always; a whole one when the store can read
  // its inner chunks straight into out_ and the shard is large enough for
  // that to beat one read of it (small ones are fetched many at once).
  bool by_inner_chunks(std::size_t i) const {
    if (!st_->shard) return false;
    if (!parts_[i].whole_chunk) return true;
    return st_->chunk_bytes() > kInPlaceShardBytes && inner_chunks_land_in_place();
  }
  // Whether the store can read whole inner chunks straight into out_: a
  // plain-copy inner pipeline, each inner chunk one contiguous run there.
  bool inner_chunks_land_in_place() const {
    const auto& inner = st_->shard->inner();
    return inner.is_trivial() && !heap_ && st_->store->reads_into() &&
           out_.lands_contiguously(inner.chunk_spec().shape);
  }
  static constexpr std::uint64_t kInPlaceShardBytes = std::uint64_t{256} << 10;

  void fetch_now(std::span<const std::size_t> parts, std::vector<char>& answered) override {
    keys_now_.clear();
    options_now_.assign(parts.size(), ReadOptions{});
    for (std::size_t k = 0; k < parts.size(); ++k) {
      const ChunkPart& p = parts_[parts[k]];
      keys_now_.push_back(st_->chunk_key(p.coords));
      if (!st_->shard) options_now_[k].into = read_target(*st_->pipeline, p, p.out_start);
      options_now_[k].need_generation = false;  // a whole chunk, read unconditionally
      options_now_[k].size_hint = st_->chunk_size_hint();
    }
    read_now_.assign(parts.size(), ReadNow{});
    st_->store->try_read_now_many(keys_now_, options_now_, read_now_);
    answered.assign(parts.size(), 1);
    for (std::size_t k = 0; k < parts.size(); ++k) {
      if (read_now_[k].error) tasks_[parts[k]].error = std::move(read_now_[k].error);  // skipped by the scheduler
      else if (read_now_[k].result) fetched(parts[k], std::move(*read_now_[k].result));
      else answered[k] = 0;
    }
  }

  // Chunk i's stored value (none: absent, reads as fill_value) is in, or
  // already in out_ (got.in_place).
  void fetched(std::size_t i, ReadResult got) {
    auto& t = tasks_[i];
    if (got.in_place) {
      t.in_place = true;
      t.bytes = 0;
      t.computes = false;
      return;
    }
    std::optional<Bytes>& v = got.value;
    const ChunkPart& p = parts_[i];
    std::uint64_t n = st_->meta.data_type.size();
    for (auto s : p.shape) n *= s;
    t.bytes = v ? std::max<std::uint64_t>(n, st_->chunk_bytes()) : n;
    t.computes = v && !st_->pipeline->is_trivial();
    // A whole shard splits into the inner chunks the part touches.
    t.max_parts = 1;
    if (v && st_->shard)
      for (std::size_t d = 0; d < p.shape.size(); ++d) {
        const std::uint64_t c = st_->shard->chunk_shape()[d];
        t.max_parts *= (p.chunk_start[d] + p.shape[d] + c - 1) / c - p.chunk_start[d] / c;
      }
    t.encoded = std::move(v);
  }

  // A part of a shard: fetch the shard index (cached), then only the inner
  // chunks the part touches, by byte ranges coalesced across small gaps.
  // Every range is read conditionally on the generation the index came
  // from, so index and inner chunks are of one version of the shard; when
  // the shard changed (a rewrite by anyone, or a stale cached index) the
  // part is planned again from a fresh index. False when the shard kept
  // changing: the caller then reads it whole, in one request (one version
  // by construction), so a reader makes progress under any write load.
  asio::awaitable<bool> fetch_inner_chunks(std::size_t i) {
    const std::string key = st_->chunk_key(parts_[i].coords);
    for (unsigned attempt = 0; attempt < kShardReadAttempts; ++attempt)
      if (co_await try_fetch_inner_chunks(i, key, attempt > 0)) co_return true;
    tasks_[i].pieces.clear();
    tasks_[i].buffers.clear();
    co_return false;
  }

  static constexpr unsigned kShardReadAttempts = 4;

  // One attempt; false when the shard changed under it.
  asio::awaitable<bool> try_fetch_inner_chunks(std::size_t i, std::string key, bool refetch_index) {
    const auto& sc = *st_->shard;
    const ChunkPart& p = parts_[i];
    auto& t = tasks_[i];
    t.pieces.clear();
    t.buffers.clear();
    const std::uint64_t writes_before = engine_.writes.now(key);
    const ShardIndex found = co_await shard_index(key, refetch_index);
    const auto& shard = found.entry;
    t.computes = false;
    t.bytes = 0;
    t.max_parts = 1;
    if (!shard.index) {  // no shard: fill
      t.bytes = st_->meta.data_type.size();
      for (auto s : p.shape) t.bytes *= s;
      co_return true;
    }
    const MutableByteSpan whole = whole_shard_target(i, *shard.index);
    bool current;  // (named: no co_await beside ?: in g++ 12)
    if (!whole.empty()) current = co_await read_back_to_back(i, key, shard, whole);
    else current = co_await read_planned(i, key, shard, found.cached);
    // Without generations, only this runtime's writes can be seen to have
    // replaced the shard meanwhile.
    if (current && shard.generation.unknown()) current = engine_.writes.unchanged(key, writes_before);
    if (!current) {
      engine_.shard_indexes.invalidate(st_->store, key, *st_->shard);
      co_return false;
    }
    t.in_place = t.pieces.empty();
    // What is left for the pool: decoding the buffered inner chunks, filling the absent ones.
    const std::size_t left = static_cast<std::size_t>(
        std::count_if(t.pieces.begin(), t.pieces.end(), [](const InnerPiece& x) { return x.buffer != kInPlace; }));
    t.bytes = left * sc.inner().chunk_spec().num_bytes();
    t.computes = !t.buffers.empty();
    t.max_parts = left > 0 ? t.pieces.size() : 1;
    co_return true;
  }

  // The reads of try_fetch_inner_chunks for part i of shard `key` (index
  // and generation in `shard`): they leave in tasks_[i] the pieces and
  // buffers the pool has left to place; false when the shard changed.
  //
  // This one when whole_shard_target gave `whole`: requests of whole inner
  // chunks of at most coalesce_max bytes, read in place, with no plan per
  // inner chunk (pieces stay empty unless the store answers with a value
  // of its own).
  asio::awaitable<bool> read_back_to_back(std::size_t i, std::string key, ShardIndexCache::Entry shard,
                                          MutableByteSpan whole) {
    auto& t = tasks_[i];
    const std::uint64_t n = st_->shard->inner().chunk_spec().num_bytes(), begin = shard.index->offset(0);
    const std::uint64_t step = std::max<std::uint64_t>(1, st_->rt->options().coalesce_max / n) * n;
    for (std::uint64_t at = 0; at < whole.size(); at += step) {
      const std::uint64_t len = std::min<std::uint64_t>(step, whole.size() - at);
      auto got = co_await read(key, ByteRange::from(begin + at, len), shard.generation, whole.subspan(at, len));
      if (got.changed || !got.value) co_return false;  // replaced or erased since the index
      check_range(key, got, begin + at, begin + at + len);
      if (got.in_place) continue;
      if (t.pieces.empty()) {  // then place what came as values of their own on the pool
        plan_pieces(i);
        locate_pieces(*shard.index, t.pieces);
        for (auto& piece : t.pieces) piece.buffer = kInPlace;
      }
      for (std::uint64_t k = at / n; k < (at + len) / n; ++k) {
        t.pieces[k].buffer = t.buffers.size();
        t.pieces[k].offset = k * n - at;
      }
      t.buffers.push_back(std::move(*got.value));
    }
    co_return true;
  }

  // This one otherwise: the inner chunks part i touches, planned one by
  // one, read by their byte ranges sorted by offset and coalesced across
  // small gaps (plan_shard_reads), in place where a run lands so in out_
  // (in_place_run).
  asio::awaitable<bool> read_planned(std::size_t i, std::string key, ShardIndexCache::Entry shard,
                                     bool cached) {
    auto& t = tasks_[i];
    plan_pieces(i);
    const auto& opt = st_->rt->options();
    const ShardReadPlan plan = plan_shard_reads(*shard.index, t.pieces, {opt.coalesce_gap, opt.coalesce_max});
    // Only the range reads below check a cached index against the shard:
    // without one (every inner chunk needed is absent from the index), a
    // read of one byte must, or inner chunks written since (by another
    // process, or by a write whose index a slower reader's replaced in the
    // cache) would read as fill_value.
    if (plan.order.empty() && cached) {
      const auto got = co_await read(key, ByteRange::from(0, 1), shard.generation);
      if (got.changed || !got.value) co_return false;
    }
    for (const ShardRange& r : plan.ranges) {
      const MutableByteSpan into = in_place_run(i, plan.order, r.first, r.last);
      auto got = co_await read(key, ByteRange::from(r.begin, r.end - r.begin), shard.generation, into);
      if (got.changed || !got.value) co_return false;  // replaced or erased since the index
      check_range(key, got, r.begin, r.end);
      place_range(plan, r, t.pieces, got.in_place ? kInPlace : t.buffers.size());
      if (!got.in_place) t.buffers.push_back(std::move(*got.value));
    }
    co_return true;
  }

  // Raises CorruptChunk unless `got`, the read of bytes [begin, end) of
  // shard `key` (a value), holds all of them.
  static void check_range(const std::string& key, const ReadResult& got, std::uint64_t begin, std::uint64_t end) {
    if (!got.in_place) check_range_size(key, got.value->size(), begin, end);
  }

  // The place in out_ of whole shard part i when one read can fill it: the
  // shard is one contiguous run of out_, and so is each of its plain-copy
  // inner chunks, so (both landing contiguously) the inner chunks follow
  // one another there in C order; and `index` has every inner chunk at its
  // decoded size, back to back in that order from offset(0). Empty
  // otherwise (then the inner chunks are planned one by one).
  MutableByteSpan whole_shard_target(std::size_t i, const codecs::ShardingCodec::Index& index) const {
    if (!inner_chunks_land_in_place()) return {};
    const ChunkPart& p = parts_[i];
    const MutableByteSpan target = out_.contiguous_target(st_->pipeline->chunk_spec(), p, p.out_start);
    const std::uint64_t n = st_->shard->inner().chunk_spec().num_bytes();
    if (target.empty() || n == 0 || index.entries.size() != 2 * (target.size() / n)) return {};
    const std::uint64_t begin = index.offset(0);
    if (begin > codecs::ShardingCodec::kMissing - target.size()) return {};
    for (std::size_t k = 0, count = target.size() / n; k < count; ++k)
      if (index.offset(k) != begin + k * n || index.nbytes(k) != n) return {};
    return target;
  }

  // The place in out_ of the inner chunks order[k, last) of part i, when
  // the store can read them there as they are: a plain-copy inner pipeline,
  // each stored at its decoded size, back to back in the shard and in out_.
  // Empty otherwise.
  MutableByteSpan in_place_run(std::size_t i, const std::vector<std::size_t>& order, std::size_t k,
                               std::size_t last) const {
    const auto& pieces = tasks_[i].pieces;
    const ChunkPart& p = parts_[i];
    std::byte* start = nullptr;
    std::uint64_t size = 0;
    Dims out_start(p.out_start.size());
    for (std::size_t j = k; j < last; ++j) {
      const InnerPiece& piece = pieces[order[j]];
      for (std::size_t d = 0; d < out_start.size(); ++d) out_start[d] = p.out_start[d] + piece.part.out_start[d];
      const MutableByteSpan target = read_target(st_->shard->inner(), piece.part, out_start);
      if (target.empty() || target.size() != piece.size) return {};
      if (j == k) start = target.data();
      else if (piece.offset != pieces[order[k]].offset + size || target.data() != start + size) return {};
      size += piece.size;
    }
    return {start, size};
  }

  // The inner chunks part i needs (their parts and numbers; located by the
  // callers, locate_pieces).
  void plan_pieces(std::size_t i) {
    const auto& sc = *st_->shard;
    const ChunkPart& p = parts_[i];
    Region sub{{p.chunk_start.begin(), p.chunk_start.end()}, {}};
    for (std::size_t d = 0; d < p.shape.size(); ++d) sub.stop.push_back(p.chunk_start[d] + p.shape[d]);
    auto inner = plan_chunks(st_->meta.chunk_shape, sc.chunk_shape(), sub);
    auto& pieces = tasks_[i].pieces;
    pieces.reserve(inner.size());
    for (auto& ip : inner) {
      InnerPiece& piece = pieces.emplace_back();
      piece.number = sc.inner_number(ip.coords);
      piece.part = std::move(ip);
    }
  }

  // On a pool thread: a whole shard was fetched; read its index and address
  // its inner chunks in place, so each is decoded straight to the output.
  void split_shard(std::size_t i) {
    auto& t = tasks_[i];
    const auto& sc = *st_->shard;
    const ByteSpan in = *t.encoded;
    try {
      const auto index = sc.shard_index(in);
      plan_pieces(i);
      locate_pieces(index, t.pieces);
    } catch (...) {
      rethrow_with_key(std::current_exception(), st_->chunk_key(parts_[i].coords));
    }
    t.buffers.push_back(std::move(*t.encoded));
    t.encoded.reset();
  }

  // The decoded index of shard `key` with the shard's generation (a null
  // index if the shard does not exist), from the cache unless `refetch`;
  // `cached` if it came from the cache (unchecked against the store).
  struct ShardIndex {
    ShardIndexCache::Entry entry;
    bool cached = false;
  };
  asio::awaitable<ShardIndex> shard_index(std::string key, bool refetch) {
    auto& cache = engine_.shard_indexes;
    if (!refetch)
      if (auto hit = cache.find(st_->store, key, *st_->shard)) co_return ShardIndex{std::move(*hit), true};
    const auto& sc = *st_->shard;
    const auto range = sc.index_at_start() ? ByteRange::from(0, sc.index_bytes()) : ByteRange::last(sc.index_bytes());
    Generation unconditional;
    auto got = co_await read(key, range, std::move(unconditional));
    if (!got.value) co_return ShardIndex{{nullptr, std::move(got.generation)}};
    // Decoding (and checking) the index is codec work: it goes to the pool.
    struct IndexTask final : ChunkTask {
      void run() override { index = std::make_shared<codecs::ShardingCodec::Index>(codec->decode_index(encoded)); }
      const codecs::ShardingCodec* codec;
      Bytes encoded;
      ShardIndexCache::Index index;
    } task;
    task.codec = &sc;
    task.encoded = std::move(*got.value);
    task.bytes = task.encoded.size();
    task.computes = !sc.index_trivial();
    co_await run_task(task);
    if (task.error) rethrow_with_key(task.error, key);
    ShardIndexCache::Entry entry{task.index, std::move(got.generation)};
    cache.put(st_->store, key, sc, entry);
    co_return ShardIndex{std::move(entry)};
  }

  ChunkTask& task(std::size_t i) override { return tasks_[i]; }

  // On a pool thread (or inline when there is nothing to compute).
  void decode(std::size_t i, std::optional<Bytes>& encoded) {
    const codecs::VlenHeapScope heap_scope(heap_.get());
    const ChunkPart& p = parts_[i];
    if (!encoded) {
      out_.fill(p.out_start, p.shape, st_->fill.data(), st_->meta.data_type.size());
      return;
    }
    try {
      out_.decode_to_out(*st_->pipeline, *encoded, p, p.out_start);
    } catch (...) {
      rethrow_with_key(std::current_exception(), st_->chunk_key(p.coords));
    }
    encoded.reset();  // free the encoded bytes early
  }

  // On a pool thread: decode the fetched inner chunks [from, to) of a shard part.
  void decode_pieces(std::size_t i, std::size_t from, std::size_t to) {
    const codecs::VlenHeapScope heap_scope(heap_.get());
    const ChunkPart& p = parts_[i];
    auto& t = tasks_[i];
    const auto& inner = st_->shard->inner();
    const std::size_t es = st_->meta.data_type.size();
    Dims out_start(p.out_start.size());
    for (std::size_t j = from; j < to; ++j) {
      const auto& piece = t.pieces[j];
      for (std::size_t d = 0; d < out_start.size(); ++d) out_start[d] = p.out_start[d] + piece.part.out_start[d];
      if (piece.buffer == kInPlace) continue;
      if (piece.buffer == InnerPiece::kAbsent) {
        out_.fill(out_start, piece.part.shape, st_->fill.data(), es);
        continue;
      }
      try {
        out_.decode_to_out(inner, ByteSpan(t.buffers[piece.buffer]).subspan(piece.offset, piece.size),
                           piece.part, out_start);
      } catch (...) {
        rethrow_with_key(std::current_exception(), st_->chunk_key(p.coords));
      }
    }
  }

  // Where the store may read a chunk of `pipeline` as it is stored
  // (ReadOptions::into): its contiguous_target when the pipeline is a plain
  // copy of fixed-size elements and the store reads in place; else empty.
  MutableByteSpan read_target(const codecs::CodecPipeline& pipeline, const ChunkPart& part,
                              const Dims& out_start) const {
    if (heap_ || !pipeline.is_trivial() || !st_->store->reads_into()) return {};
    return out_.contiguous_target(pipeline.chunk_spec(), part, out_start);
  }

  bool has_after_all() const override { return strings_ != nullptr; }
  void release_tables() override {
    decltype(tasks_)().swap(tasks_);
    ChunkOp::release_tables();
  }

  // The views in out_ -> *strings_, on the pool in parts (the pool's
  // threads share a large region).
  asio::awaitable<void> after_all() override {
    if (!strings_) co_return;
    struct Convert final : ChunkTask {
      void run() override { run_part(0, 1); }
      void run_part(std::size_t k, std::size_t n) override {
        const std::size_t count = out->size();
        for (std::size_t e = count * k / n, end = count * (k + 1) / n; e < end; ++e) {
          codecs::VlenView v;
          std::memcpy(&v, views.data() + e * sizeof v, sizeof v);
          (*out)[e].assign(v.data ? v.data : "", v.size);
        }
      }
      ByteSpan views;
      std::vector<std::string>* out;
    } convert;
    convert.views = out_.bytes();
    convert.out = strings_;
    convert.bytes = out_.bytes().size();
    convert.computes = strings_->size() > 4096;  // small ones run inline
    convert.max_parts = std::max<std::size_t>(1, std::min<std::size_t>(64, strings_->size() / 4096));
    convert.cancelled = &cancel_flag_;
    co_await run_task(convert);
    if (convert.error) std::rethrow_exception(convert.error);
  }

  Placement out_;
  std::vector<std::string>* strings_ = nullptr;
  std::unique_ptr<codecs::VlenHeap> heap_;  // variable-length types: owns the decoded bytes out_'s views point into
  std::vector<Task, CachedAllocator<Task>> tasks_;
  std::vector<std::string> keys_now_;  // fetch_now's scratch
  std::vector<ReadOptions> options_now_;
  std::vector<ReadNow> read_now_;
};

}  // namespace

std::shared_ptr<ChunkOp> make_read_op(std::shared_ptr<const Array::State> st, ChunkParts parts,
                                      const Region& region, MutableByteSpan out,
                                      std::vector<std::string>* strings) {
  return std::make_shared<ReadOp>(std::move(st), std::move(parts), region, out, strings);
}

}  // namespace zarrcoro::detail
