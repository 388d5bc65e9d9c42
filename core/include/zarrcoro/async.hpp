// Completion-token forms of zarrcoro's asynchronous operations (Asio's
// universal asynchronous model): the plumbing behind Array::async_read,
// Store::async_get and the others. Users call those, not this.
//
// Every token-form operation has the completion signature
//   void(std::exception_ptr)       or   void(std::exception_ptr, T)
// like asio::co_spawn: with use_awaitable and use_future the typed zarrcoro
// Error (or a boost::system::system_error from Asio) is rethrown; a callback
// receives it and may turn it into an error_code with to_error_code().
// The operation runs as a coroutine on the given executor (the runtime's
// io_context; Array::async_read and async_write start theirs directly, see
// array.hpp); the handler is invoked through its associated
// executor (default: that executor). Its associated cancellation slot is honoured:
// see Array::async_read for what cancellation does. Its allocator is used
// for the type-erased handler.
//
// Thread-safety: initiating is thread-safe; the awaitable passed in must not
// be shared.
#pragma once

#include <exception>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/awaitable.hpp>

namespace zarrcoro::detail {

template <class T>
struct Completion {
  using signature = void(std::exception_ptr, T);
};
template <>
struct Completion<void> {
  using signature = void(std::exception_ptr);
};
template <class T>
using CompletionSignature = typename Completion<T>::signature;
template <class T>
using AnyCompletion = boost::asio::any_completion_handler<CompletionSignature<T>>;

// co_spawn(ex, op, handler), compiled once per result type (core/async.cpp
// and engine/async.cpp instantiate it for every T the public API uses). An empty `ex` means the
// system executor (a store that does no I/O of its own).
template <class T>
void spawn(boost::asio::any_io_executor ex, boost::asio::awaitable<T> op, AnyCompletion<T> handler);

struct InitiateSpawn {
  template <class Handler, class T>
  void operator()(Handler&& handler, boost::asio::any_io_executor ex, boost::asio::awaitable<T> op) const {
    spawn<T>(std::move(ex), std::move(op), AnyCompletion<T>(std::forward<Handler>(handler)));
  }
};

// The token form of `op`: runs it on `ex` and completes through `token`.
template <class T, class Token>
auto async_spawn(boost::asio::any_io_executor ex, boost::asio::awaitable<T> op, Token&& token) {
  return boost::asio::async_initiate<Token, CompletionSignature<T>>(InitiateSpawn{}, token, std::move(ex),
                                                                     std::move(op));
}

}  // namespace zarrcoro::detail
