// co_spawn without Boost 1.81's use after free on cancellation. The library
// spawns every coroutine whose completion handler may carry a cancellation
// slot with co_spawn_safe; so can its users (the example server does).
//
// The fault: when the handler given to asio::co_spawn has an associated
// executor (use_awaitable, any_completion_handler, bind_cancellation_slot,
// parallel groups all do), co_spawn forwards a cancellation by dispatching
// `[sig] { sig->emit(); }` to the coroutine's executor, `sig` a raw pointer
// into storage that the handler's cancellation slot owns. From another
// thread or strand that lambda is queued; if the coroutine completes first,
// its awaiter clears its slot (or a caller destroys its signal) and the
// lambda later emits on freed memory. (Later Asio releases hold the signal
// in shared ownership; that is what this does.)
//
// co_spawn_safe(ex, awaitable, token) behaves as asio::co_spawn(ex,
// awaitable, token): same completion signature, the coroutine runs on `ex`,
// the handler is invoked through its associated executor (default `ex`),
// and a cancellation emitted on the handler's slot reaches the coroutine on
// `ex`. Thread-safety: as asio::co_spawn.
#pragma once

#include <exception>
#include <memory>
#include <utility>

#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/executor_work_guard.hpp>

namespace zarrcoro::detail {

// Installed in the caller's slot: passes a cancellation to the coroutine's
// executor, keeping the signal alive until it has been emitted there.
template <class Executor>
struct ForwardCancellation {
  // (A constructor: slot emplace() constructs with parentheses, which
  // clang 14 does not accept for an aggregate.)
  ForwardCancellation(std::shared_ptr<boost::asio::cancellation_signal> s, Executor e)
      : signal(std::move(s)), ex(std::move(e)) {}

  std::shared_ptr<boost::asio::cancellation_signal> signal;
  Executor ex;
  void operator()(boost::asio::cancellation_type_t type) {
    auto emit = [s = signal, type] { s->emit(type); };
    boost::asio::dispatch(ex, std::move(emit));
  }
};

// The handler co_spawn sees. It has a cancellation slot and no associated
// executor, so co_spawn emits a cancellation at once (it already runs on
// the coroutine's executor, sent there by ForwardCancellation); it hands the
// result to the caller's handler through that handler's executor.
template <class Handler, class Executor>
struct RelayCompletion {
  using WorkExecutor = boost::asio::associated_executor_t<Handler, Executor>;
  using cancellation_slot_type = boost::asio::cancellation_slot;

  Handler handler;
  std::shared_ptr<boost::asio::cancellation_signal> signal;
  boost::asio::executor_work_guard<WorkExecutor> work;

  cancellation_slot_type get_cancellation_slot() const noexcept { return signal->slot(); }

  template <class... Args>
  void operator()(std::exception_ptr e, Args... result) {
    const WorkExecutor to = work.get_executor();
    auto complete = [h = std::move(handler), e, ... r = std::move(result)]() mutable { std::move(h)(e, std::move(r)...); };
    boost::asio::dispatch(to, std::move(complete));
    work.reset();
  }
};

template <class Executor>
struct InitiateSafeSpawn {
  Executor ex;
  template <class Handler, class T, class AwaitableExecutor>
  void operator()(Handler&& handler, boost::asio::awaitable<T, AwaitableExecutor> a) const {
    using H = std::decay_t<Handler>;
    auto slot = boost::asio::get_associated_cancellation_slot(handler);
    if (!slot.is_connected()) {
      boost::asio::co_spawn(ex, std::move(a), std::forward<Handler>(handler));
      return;
    }
    auto signal = std::make_shared<boost::asio::cancellation_signal>();
    slot.template emplace<ForwardCancellation<Executor>>(signal, ex);
    auto work = boost::asio::make_work_guard(boost::asio::get_associated_executor(handler, ex));
    RelayCompletion<H, Executor> relay{std::forward<Handler>(handler), std::move(signal), std::move(work)};
    boost::asio::co_spawn(ex, std::move(a), std::move(relay));
  }
};

}  // namespace zarrcoro::detail

namespace zarrcoro {

namespace detail {
template <class T>
struct SpawnSignature {
  using type = void(std::exception_ptr, T);
};
template <>
struct SpawnSignature<void> {
  using type = void(std::exception_ptr);
};
}  // namespace detail

template <class Executor, class T, class AwaitableExecutor, class Token>
auto co_spawn_safe(const Executor& ex, boost::asio::awaitable<T, AwaitableExecutor> a, Token&& token) {
  return boost::asio::async_initiate<Token, typename detail::SpawnSignature<T>::type>(
      detail::InitiateSafeSpawn<AwaitableExecutor>{AwaitableExecutor(ex)}, token, std::move(a));
}

}  // namespace zarrcoro
