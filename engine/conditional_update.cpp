// Optimistic read-modify-write; see engine/conditional_update.hpp.
#include "engine/conditional_update.hpp"

#include <algorithm>
#include <random>

#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <zarrcoro/error.hpp>

namespace zarrcoro::detail {

awaitable<void> conflict_backoff(unsigned attempt) {
  thread_local std::minstd_rand rng{std::random_device{}()};
  const int ms = std::min(100, 1 << std::min(attempt, 7u));
  std::uniform_int_distribution<int> us(ms * 500, ms * 1500);
  boost::asio::steady_timer timer(co_await boost::asio::this_coro::executor, std::chrono::microseconds(us(rng)));
  co_await timer.async_wait(boost::asio::use_awaitable);
}

awaitable<bool> conditional_update(Store& store, std::string key, Modify modify, std::chrono::milliseconds timeout) {
  const auto give_up = std::chrono::steady_clock::now() + timeout;
  for (unsigned attempt = 0;; ++attempt) {
    ReadOptions whole;  // (named: g++ 12 and braced temporaries beside a co_await)
    ReadResult read = co_await store.read(key, std::move(whole));
    Update update = co_await modify(std::move(read.value));
    if (update.kind == Update::Kind::keep) co_return false;
    WriteOptions condition;
    condition.if_equal = read.generation;
    std::optional<Bytes> value;
    if (update.kind == Update::Kind::store) value = std::move(update.value);
    const auto written = co_await store.write(key, std::move(value), std::move(condition));
    if (written) co_return true;
    if (std::chrono::steady_clock::now() > give_up)
      throw StoreError(key, "generation",
                       "another writer kept replacing it: " + std::to_string(attempt + 1) + " attempts in " +
                           std::to_string(timeout.count()) + " ms");
    co_await conflict_backoff(attempt);
  }
}

}  // namespace zarrcoro::detail
