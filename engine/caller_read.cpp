// Reads answered on the calling thread (caller_read.hpp).
#include "engine/caller_read.hpp"

#include <optional>
#include <string>

#include <zarrcoro/runtime.hpp>
#include <zarrcoro/store.hpp>

#include "engine/chunk_op.hpp"
#include "engine/engine_state.hpp"
#include "engine/placement.hpp"
#include "engine/runtime_access.hpp"

namespace zarrcoro::detail {

bool read_on_caller(const Array::State& st, const ChunkParts& parts, const Region& region, MutableByteSpan out) {
  const RuntimeOptions& o = st.rt->options();
  if (!o.caller_reads || st.shard || st.meta.data_type.is_variable_length() || !st.pipeline->is_trivial() ||
      parts.size() > kCallerReadChunks || parts.size() * st.chunk_bytes() > o.inline_bytes)
    return false;
  const Placement place(region.shape(), out);
  const codecs::ArraySpec& spec = st.pipeline->chunk_spec();
  ReadOptions options;
  options.need_generation = false;  // whole chunks, read unconditionally
  options.caches_only = true;       // the caller's thread never waits for a device
  options.size_hint = st.chunk_size_hint();
  for (const ChunkPart& p : parts) {
    const std::string key = st.chunk_key(p.coords);
    options.into = st.store->reads_into() ? place.contiguous_target(spec, p, p.out_start) : MutableByteSpan();
    std::optional<ReadResult> got = st.store->try_read_now(key, options);
    if (!got) return false;
    if (got->in_place) continue;
    if (!got->value) {
      place.fill(p.out_start, p.shape, st.fill.data(), st.meta.data_type.size());
      continue;
    }
    try {
      place.decode_to_out(*st.pipeline, *got->value, p, p.out_start);
    } catch (...) {
      rethrow_with_key(std::current_exception(), key);
    }
  }
  RuntimeAccess::engine(*st.rt).scheduler.counters().caller_reads.fetch_add(1, std::memory_order_relaxed);
  return true;
}

}  // namespace zarrcoro::detail
