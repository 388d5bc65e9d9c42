// A read answered on the calling thread (RuntimeOptions::caller_reads): a
// call of a few small chunks with nothing to compute, each of which the
// store can read at once without waiting (Store::try_read_now: a value in
// memory, a file in the page cache), is read into place, copied or filled
// by the caller, with no hop to the io_context and back. No codec work is
// involved, and the store never waits for a device or a network there.
//
// A coroutine's reads go together: those that coroutines on one execution
// context start before its next turn (a handler posted once, run after the
// handlers ready then) wait for that turn, which answers them on that
// context's thread; from four waiting reads on, the runtime's I/O thread
// takes some of them too. So one client thread's many small reads use two
// cores, and a coroutine that reads yields to the others.
//
// Thread-safety: any thread (the store's try_read_now is thread-safe);
// `out` is the caller's until the read returns or completes.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>

#include <zarrcoro/array.hpp>
#include <zarrcoro/bytes.hpp>

#include "engine/array_state.hpp"
#include "engine/indexing.hpp"

namespace zarrcoro::detail {

// The most chunks a call answered on the caller may touch: each costs the
// caller a few system calls, which a longer call shares over two cores
// through the io_context (Store::try_read_now_many).
inline constexpr std::size_t kCallerReadChunks = 4;

// Whether a read of `parts` is one for the caller's thread (see above).
bool for_caller(const Array::State& st, const ChunkParts& parts);

// True when the read of `parts` (plan_chunks of `region`) into `out` (the
// region's elements, C order) was answered here: `out` then holds them.
// False when it was not for the caller (see above) or a chunk could not be
// read at once: the caller runs the read operation, and `out`'s contents
// are unspecified until then. Raises what that operation would: the
// store's errors, a chunk of the wrong size (naming its key).
bool read_on_caller(const Array::State& st, const ChunkParts& parts, const Region& region, MutableByteSpan out);

// For a coroutine's read that is for_caller, whose executor is `ex`:
// whether it goes with the other reads started on ex's execution context
// (read_on_caller_together) rather than read_on_caller at once. Together
// while the latest turn there had more than one read, and for one read in
// 16 otherwise, to find out (a coroutine whose reads are all answered at
// once would never yield).
bool caller_reads_together(const boost::asio::any_io_executor& ex);

// read_on_caller for a coroutine, with the other reads started on its
// executor's execution context meanwhile (see above). For a read that is
// for_caller. The awaiting coroutine resumes through its executor, never
// inside this call; `st`, `parts`, `region` and `out` must live until then.
// Destroying that context destroys the reads still waiting, with their
// coroutines (after the I/O thread has posted the one it may be
// answering). A cancellation of the coroutine does not reach a waiting
// read (it completes within a turn).
boost::asio::awaitable<bool> read_on_caller_together(const Array::State& st, const ChunkParts& parts,
                                                      const Region& region, MutableByteSpan out);

}  // namespace zarrcoro::detail
