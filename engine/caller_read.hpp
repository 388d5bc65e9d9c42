// A read answered on the calling thread (RuntimeOptions::caller_reads): a
// call of a few small chunks with nothing to compute, each of which the
// store can read at once without waiting (Store::try_read_now: a value in
// memory, a file in the page cache), is read into place, copied or filled
// by the caller, with no hop to the io_context and back. No codec work is
// involved, and the store never waits for a device or a network there.
//
// Thread-safety: any thread (the store's try_read_now is thread-safe);
// `out` is the caller's until it returns.
#pragma once

#include <zarrcoro/array.hpp>
#include <zarrcoro/bytes.hpp>

#include "engine/array_state.hpp"
#include "engine/indexing.hpp"

namespace zarrcoro::detail {

// The most chunks a call answered on the caller may touch: each costs the
// caller a few system calls, which a longer call shares over two cores
// through the io_context (Store::try_read_now_many).
inline constexpr std::size_t kCallerReadChunks = 4;

// True when the read of `parts` (plan_chunks of `region`) into `out` (the
// region's elements, C order) was answered here: `out` then holds them.
// False when it was not for the caller (see above) or a chunk could not be
// read at once: the caller runs the read operation, and `out`'s contents
// are unspecified until then. Raises what that operation would: the
// store's errors, a chunk of the wrong size (naming its key).
bool read_on_caller(const Array::State& st, const ChunkParts& parts, const Region& region, MutableByteSpan out);

}  // namespace zarrcoro::detail
