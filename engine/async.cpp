// The type-erased co_spawn behind every completion-token operation (async.hpp).
#include <zarrcoro/array.hpp>
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

template void spawn<void>(boost::asio::any_io_executor, boost::asio::awaitable<void>, AnyCompletion<void>);
template void spawn<Array>(boost::asio::any_io_executor, boost::asio::awaitable<Array>, AnyCompletion<Array>);
template void spawn<Group>(boost::asio::any_io_executor, boost::asio::awaitable<Group>, AnyCompletion<Group>);
template void spawn<std::vector<NodeEntry>>(boost::asio::any_io_executor,
                                            boost::asio::awaitable<std::vector<NodeEntry>>,
                                            AnyCompletion<std::vector<NodeEntry>>);
template void spawn<bool>(boost::asio::any_io_executor, boost::asio::awaitable<bool>, AnyCompletion<bool>);
template void spawn<std::optional<Bytes>>(boost::asio::any_io_executor, boost::asio::awaitable<std::optional<Bytes>>,
                                          AnyCompletion<std::optional<Bytes>>);
template void spawn<std::vector<std::string>>(boost::asio::any_io_executor,
                                              boost::asio::awaitable<std::vector<std::string>>,
                                              AnyCompletion<std::vector<std::string>>);
template void spawn<ReadResult>(boost::asio::any_io_executor, boost::asio::awaitable<ReadResult>,
                                AnyCompletion<ReadResult>);
template void spawn<std::optional<Generation>>(boost::asio::any_io_executor,
                                               boost::asio::awaitable<std::optional<Generation>>,
                                               AnyCompletion<std::optional<Generation>>);

}  // namespace zarrcoro::detail
