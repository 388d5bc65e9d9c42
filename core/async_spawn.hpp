// The definition of detail::spawn (async.hpp), for the files that
// instantiate it: core/async.cpp for the base types, engine/async.cpp for
// the engine's (Array, Group, member lists).
#pragma once

#include <zarrcoro/async.hpp>
#include <zarrcoro/spawn.hpp>

#include <boost/asio/strand.hpp>
#include <boost/asio/system_executor.hpp>

namespace zarrcoro::detail {

template <class T>
void spawn(boost::asio::any_io_executor ex, boost::asio::awaitable<T> op, AnyCompletion<T> handler) {
  if (!ex) ex = boost::asio::system_executor();
  // On a strand of its own: a cancellation is delivered by dispatching to
  // the coroutine's executor, which must then not run it elsewhere at the
  // same time (an io_context run by several threads). co_spawn_safe: the
  // caller's slot may be cleared before that dispatch runs (spawn.hpp).
  co_spawn_safe(boost::asio::make_strand(ex), std::move(op), std::move(handler));
}

}  // namespace zarrcoro::detail
