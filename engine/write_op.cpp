// The write operation (write_op.hpp): per chunk, lock the key, read what a
// partial chunk keeps, merge and encode on the pool, store conditionally.
#include "engine/write_op.hpp"

#include <algorithm>
#include <chrono>
#include <random>

#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <zarrcoro/error.hpp>

#include "codecs/vlen.hpp"

namespace zarrcoro::detail {

namespace asio = boost::asio;
using asio::use_awaitable;

namespace {

class WriteOp final : public ChunkOp {
 public:
  WriteOp(std::shared_ptr<const Array::State> st, ChunkParts parts, Region region,
          ByteSpan in)
      : ChunkOp(std::move(st), std::move(parts)), region_shape_(region.shape()), in_(in) {
    if (st_->meta.data_type.is_variable_length()) heap_ = std::make_unique<codecs::VlenHeap>();
    tasks_.reserve(parts_.size());
    for (std::size_t i = 0; i < parts_.size(); ++i) tasks_.emplace_back(this, i).cancelled = &cancel_flag_;
  }

 private:
  struct Task final : ChunkTask {
    Task(WriteOp* op, std::size_t i) : op(op), i(i) {}
    void run() override { op->encode(i); }
    WriteOp* op;
    std::size_t i;
    std::string key;
    bool locked = false;
    bool read_existing = false;  // a partial write: read-modify-write
    std::optional<Bytes> existing;
    Generation generation;       // of `existing` (absent() when there was none)
    Bytes encoded;
    ShardIndexCache::Index index;  // of the shard in `encoded`, for the index cache
    bool erase = false;
  };

  bool has_finish() const override { return true; }

  // Encoded existing chunk + decoded chunk + encoded output.
  std::size_t budget_factor() const override { return 2; }

  asio::awaitable<void> fetch(std::size_t i) override {
    auto& t = tasks_[i];
    t.key = st_->chunk_key(parts_[i].coords);
    if (!engine_.key_locks.try_lock(t.key)) {
      suspend_active();
      const bool locked = co_await engine_.key_locks.lock(t.key);
      resume_active();
      if (!locked) throw_cancelled();
    }
    t.locked = true;
    t.bytes = st_->chunk_bytes();
    t.computes = !st_->pipeline->is_trivial();
    if (!parts_[i].whole_chunk) {
      t.read_existing = true;
      try {
        co_await read_existing(t);
      } catch (...) {
        unlock(t);
        throw;
      }
    }
  }

  // An all-fill chunk is erased, unless the store cannot erase it
  // conditionally (S3): an existing one is then overwritten with fill.
  bool erase_allowed(const Task& t) const {
    return !t.read_existing || t.generation.unknown() || t.generation.is_absent() ||
           st_->store->erases_atomically();
  }

  asio::awaitable<void> read_existing(Task& t) {
    Generation unconditional;
    auto got = co_await read(t.key, ByteRange::all(), std::move(unconditional));
    t.existing = std::move(got.value);
    t.generation = std::move(got.generation);
  }

  ChunkTask& task(std::size_t i) override { return tasks_[i]; }

  // True if every element of `chunk` is the fill value (variable length: by content).
  bool all_fill(ByteSpan chunk, std::size_t es) const {
    if (!heap_) return all_equal(chunk, st_->fill.data(), es);
    return codecs::all_views_equal(chunk, st_->fill_text);
  }

  void encode(std::size_t i) {
    const codecs::VlenHeapScope heap_scope(heap_.get());  // existing chunks decoded for a merge
    auto& t = tasks_[i];
    t.erase = false;
    const ChunkPart& p = parts_[i];
    const auto& spec = st_->pipeline->chunk_spec();
    const std::size_t es = spec.dtype.size();
    try {
      if (st_->shard) {
        // Rewrite the shard keeping the encoded inner chunks the write misses.
        std::optional<ByteSpan> existing;
        if (t.existing) existing = ByteSpan(*t.existing);
        t.erase = !st_->shard->update(spec, existing, in_.data(), region_shape_, p.out_start, p.chunk_start,
                                      p.shape, t.encoded);
        t.existing.reset();
        if (t.erase && !erase_allowed(t)) {
          st_->shard->encode_empty(t.encoded);
          t.erase = false;
        }
        // The new shard's index, so that a read after this write finds it cached.
        t.index.reset();
        if (!t.erase) t.index = std::make_shared<codecs::ShardingCodec::Index>(st_->shard->shard_index(t.encoded));
        return;
      }
      // A trivial pipeline (bytes in native order, nothing else) encodes as
      // a plain copy: gather straight into the encoded buffer and skip
      // encode, one copy of the data instead of two. An existing chunk of
      // the right size is then already its own decoding.
      const bool trivial = st_->pipeline->is_trivial();
      thread_local Bytes scratch;
      Bytes& chunk = trivial ? t.encoded : scratch;
      if (trivial && t.existing && t.existing->size() == st_->chunk_bytes()) {
        chunk = std::move(*t.existing);
        t.existing.reset();
      } else {
        chunk.resize(st_->chunk_bytes());
        if (t.existing) {
          st_->pipeline->decode(*t.existing, chunk);
          t.existing.reset();
        } else if (!std::equal(p.shape.begin(), p.shape.end(), spec.shape.begin())) {
          // New chunk (or an edge chunk): out-of-bounds and untouched parts hold the fill value.
          fill_elements(chunk.data(), spec.num_elements(), st_->fill.data(), es);
        }
      }
      copy_box(in_.data(), region_shape_, p.out_start, chunk.data(), spec.shape, p.chunk_start,
                       p.shape, es);
      if (!st_->store_fill_chunks && all_fill(chunk, es) && erase_allowed(t)) {
        t.erase = true;
        return;
      }
      if (!trivial) st_->pipeline->encode(chunk, t.encoded);
    } catch (...) {
      rethrow_with_key(std::current_exception(), t.key);
    }
  }

  // Stores the encoded chunk. A partial write is an optimistic
  // read-modify-write: it stores only if the chunk still has the generation
  // it was read at; when another writer (another runtime or process; this
  // runtime's writers wait on the key lock) replaced it in between, it reads
  // the chunk again, merges again on the pool and retries. Every failed
  // attempt means another writer made progress, so the retries go on while
  // that lasts, bounded by RuntimeOptions::write_conflict_timeout: a writer
  // that keeps losing to a faster one completes once that one pauses.
  asio::awaitable<void> finish(std::size_t i) override {
    auto& t = tasks_[i];
    if (!t.locked) co_return;  // its fetch failed
    if (cancelled_ && !t.error) t.error = std::make_exception_ptr(Cancelled("", "", "cancelled before it was stored"));
    try {
      const auto give_up = std::chrono::steady_clock::now() + st_->rt->options().write_conflict_timeout;
      for (unsigned attempt = 1; !t.error; ++attempt) {
        std::optional<Bytes> value;
        if (!t.erase) value = std::move(t.encoded);
        const Generation if_equal = t.read_existing ? t.generation : Generation();
        const auto stored = co_await put(t.key, std::move(value), if_equal);
        if (st_->shard) {  // the new shard's index, or none when its generation is unknown
          if (stored && t.index && !stored->unknown() && !stored->may_repeat)
            engine_.shard_indexes.put(st_->store, t.key, *st_->shard, {t.index, *stored});
          else
            engine_.shard_indexes.invalidate(st_->store, t.key, *st_->shard);
        }
        if (stored) break;
        if (cancelled_) throw_cancelled();  // the chunk keeps what the other writer stored
        if (std::chrono::steady_clock::now() >= give_up)
          throw StoreError(t.key, "generation",
                           "other writers replaced the chunk during each of " + std::to_string(attempt) +
                               " attempts to update it (write_conflict_timeout)");
        co_await backoff(attempt);
        co_await read_existing(t);
        co_await run_task(t);  // merge again
      }
      if (t.error) std::rethrow_exception(t.error);
    } catch (...) {
      unlock(t);
      throw;
    }
    unlock(t);
  }

  // A random wait before retrying a conflicting write, growing with the
  // attempt (up to ~50 ms), so that contending writers spread out instead
  // of colliding again in lockstep.
  asio::awaitable<void> backoff(unsigned attempt) {
    thread_local std::minstd_rand rng{std::random_device{}()};
    const std::uint64_t cap_us = std::uint64_t{50} << std::min(attempt, 10u);
    asio::steady_timer timer(strand_, std::chrono::microseconds(rng() % (cap_us + 1)));
    co_await timer.async_wait(use_awaitable);
  }

  void unlock(Task& t) {
    if (t.locked) engine_.key_locks.unlock(t.key);
    t.locked = false;
  }

  std::vector<std::uint64_t> region_shape_;
  ByteSpan in_;
  std::unique_ptr<codecs::VlenHeap> heap_;  // variable-length types: existing chunks' decoded bytes
  std::vector<Task, CachedAllocator<Task>> tasks_;
};

}  // namespace

std::shared_ptr<ChunkOp> make_write_op(std::shared_ptr<const Array::State> st, ChunkParts parts,
                                       const Region& region, ByteSpan in) {
  return std::make_shared<WriteOp>(std::move(st), std::move(parts), region, in);
}

}  // namespace zarrcoro::detail
