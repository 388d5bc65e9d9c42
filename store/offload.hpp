// Runs a synchronous job on a thread pool from a coroutine: the stores'
// blocking work (file I/O on FilesystemStore's pool, S3 payload hashes).
// Internal to the store layer.
#pragma once

#include <exception>
#include <optional>
#include <type_traits>
#include <utility>
#include <variant>

#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>

namespace zarrcoro::detail {

// Runs `f()` on `pool` and resumes the calling coroutine on its own
// executor with f's result, or rethrows what f threw: one post to the pool
// and one back, so a job costs at most two thread wake-ups (co_spawn, which
// this replaced, posted to the pool twice).
//
// The wait ignores the caller's cancellation (the job cannot be
// interrupted): a cancelled caller resumes once the job has ended, and the
// buffers it lent the job are then free. co_spawn was also unsafe here: in
// Boost 1.81 a coroutine co_spawn'ed with a cancellation forwarded to it
// that completes without suspending (a job like this one) throws
// operation_aborted from co_spawn's own entry point if that cancellation
// came while it ran, outside anything that could catch it: std::terminate.
template <class Executor, class F>
boost::asio::awaitable<std::invoke_result_t<F&>> run_on_pool(Executor pool, F f) {
  namespace asio = boost::asio;
  using R = std::invoke_result_t<F&>;
  using Value = std::optional<std::conditional_t<std::is_void_v<R>, std::monostate, R>>;
  auto initiate = [pool](auto handler, F job) {
    auto work = asio::make_work_guard(asio::get_associated_executor(handler));
    auto run = [handler = std::move(handler), job = std::move(job), work = std::move(work)]() mutable {
      std::exception_ptr error;
      Value value;
      try {
        if constexpr (std::is_void_v<R>) {
          job();
          value.emplace();
        } else {
          value.emplace(job());
        }
      } catch (...) {
        error = std::current_exception();
      }
      const auto caller = work.get_executor();
      auto complete = [handler = std::move(handler), error, value = std::move(value)]() mutable {
        std::move(handler)(error, std::move(value));
      };
      asio::post(caller, std::move(complete));
      work.reset();
    };
    asio::post(pool, std::move(run));
  };
  // (Named first: g++ 12 and temporaries in a co_await.)
  auto token = asio::use_awaitable;
  Value value = co_await asio::async_initiate<decltype(token), void(std::exception_ptr, Value)>(
      std::move(initiate), token, std::move(f));
  if constexpr (!std::is_void_v<R>) co_return std::move(*value);
}

}  // namespace zarrcoro::detail
