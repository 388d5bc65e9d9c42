// detail::spawn for the result types of the base layer's operations (the
// stores'); engine/async.cpp adds the engine's.
#include <zarrcoro/store.hpp>

#include "core/async_spawn.hpp"

namespace zarrcoro::detail {

template void spawn<void>(boost::asio::any_io_executor, boost::asio::awaitable<void>, AnyCompletion<void>);
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
