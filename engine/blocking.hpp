// The blocking API: run an awaitable on the runtime's io_context and wait
// for it (Array's read_blocking, write_blocking, read_strings_blocking and
// write_strings_blocking start their op directly instead), refusing to do
// so from a runtime thread (the wait would block the very thread that has
// to make progress).
#pragma once

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/use_future.hpp>

#include <zarrcoro/error.hpp>
#include <zarrcoro/runtime.hpp>

namespace zarrcoro::detail {

inline void refuse_runtime_thread(Runtime& rt) {
  if (rt.on_io_thread() || rt.on_codec_thread())
    throw InvalidArgument("", "", "a blocking call on a runtime thread would deadlock; co_await the "
                                  "async API instead");
}

template <class T>
T wait(Runtime& rt, boost::asio::awaitable<T> a) {
  refuse_runtime_thread(rt);
  return boost::asio::co_spawn(rt.io_executor(), std::move(a), boost::asio::use_future).get();
}

}  // namespace zarrcoro::detail
