// detail::spawn for the result types of the engine's operations (the base
// layer's are in core/async.cpp).
#include <zarrcoro/array.hpp>

#include "core/async_spawn.hpp"

namespace zarrcoro::detail {

template void spawn<Array>(boost::asio::any_io_executor, boost::asio::awaitable<Array>, AnyCompletion<Array>);
template void spawn<Group>(boost::asio::any_io_executor, boost::asio::awaitable<Group>, AnyCompletion<Group>);
template void spawn<std::vector<NodeEntry>>(boost::asio::any_io_executor,
                                            boost::asio::awaitable<std::vector<NodeEntry>>,
                                            AnyCompletion<std::vector<NodeEntry>>);

}  // namespace zarrcoro::detail
