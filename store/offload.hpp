// Runs a synchronous job on a thread pool from a coroutine: the stores'
// blocking work (file I/O on FilesystemStore's fallback pool, S3 payload
// hashes). Internal to the store layer.
#pragma once

#include <type_traits>
#include <utility>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/use_awaitable.hpp>

namespace zarrcoro::detail {

template <class F>
boost::asio::awaitable<std::invoke_result_t<F&>> invoke_job(F f) {
  co_return f();
}

// Runs `f()` on `pool` and resumes the calling coroutine on its own
// executor with f's result, or rethrows what f threw. The wait ignores the
// caller's cancellation (the job cannot be interrupted): a cancelled
// caller resumes once the job has ended, and the buffers it lent the job
// are then free. This is also what keeps the process alive: in Boost 1.81,
// a coroutine co_spawn'ed with a cancellation forwarded to it that completes
// without suspending (a job like this one) throws operation_aborted from
// co_spawn's own entry point if that cancellation came while it ran,
// outside anything that could catch it: std::terminate on the pool thread.
template <class Executor, class F>
boost::asio::awaitable<std::invoke_result_t<F&>> run_on_pool(Executor pool, F f) {
  // (The token is named first: g++ 12 and temporaries in a co_await.)
  auto not_cancellable = boost::asio::bind_cancellation_slot(boost::asio::cancellation_slot(), boost::asio::use_awaitable);
  co_return co_await boost::asio::co_spawn(pool, invoke_job(std::move(f)), std::move(not_cancellable));
}

}  // namespace zarrcoro::detail
