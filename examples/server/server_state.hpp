// The state of one Server, shared by its listener, its connections' sessions
// and their handlers (each holds a shared_ptr to it), and of one connection.
//
// Thread-safety: the configuration and the pools (rt, opt, store, the
// transmit pool, inbox, round, priority) are set in the constructor and
// only read afterwards; Metrics is safe from any thread; `stopping` is
// atomic; the array cache, the slice gate and the set of connections are
// each guarded by the mutex named beside them. The acceptor and the
// shutdown timer belong to `strand`. A Conn is used on its connection's
// strand only (its stream's executor): shutdown posts its closes and
// cancel_work's emit there. The member functions may be called from any
// thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/beast/core/tcp_stream.hpp>

#include <zarrcoro/array.hpp>
#include <zarrcoro/runtime.hpp>
#include <zarrcoro/store/filesystem.hpp>

#include "loop_inbox.hpp"
#include "loop_priority.hpp"
#include "loop_round.hpp"
#include "metrics.hpp"
#include "response.hpp"
#include "server.hpp"

namespace zarrcoro::server {

// One client connection. `idle` is touched only on the connection's strand.
struct Conn {
  explicit Conn(tcp::socket s) : stream(std::move(s)), timer(stream.get_executor()) {}
  beast::tcp_stream stream;
  asio::steady_timer timer;  // the write deadline while a body waits for the socket
  std::uint64_t write_seq = 0;  // which transmission the timer belongs to
  bool idle = false;            // waiting for the next request (shutdown may close it)
  // Cancels the engine work of the request in flight (its slice decodes);
  // emitted on the connection's executor.
  asio::cancellation_signal cancel_work;
};

struct ServerState : std::enable_shared_from_this<ServerState> {
  // Opens the store, starts the transmit pool and binds the listening
  // socket (throws on failure); ignores SIGPIPE in the process. server.cpp.
  ServerState(Runtime& r, ServerOptions o);

  Runtime& rt;
  const ServerOptions opt;
  const std::shared_ptr<FilesystemStore> store;
  asio::strand<asio::io_context::executor_type> strand;  // acceptor and shutdown timer
  tcp::acceptor acceptor;
  asio::steady_timer deadline;
  tcp::endpoint endpoint;
  Metrics metrics;
  const unsigned transmit_threads;
  asio::thread_pool transmit_pool;  // copies of large bodies into sockets
  const std::shared_ptr<LoopInbox> inbox;  // the transmit pool's way back to the loop
  const std::shared_ptr<LoopRound> round;  // the loop's round budget; null when off
  const std::shared_ptr<LoopPriority> priority;  // the loop thread under SCHED_FIFO; null when off
  std::atomic<bool> stopping{false};

  std::mutex arrays_mu;  // guards arrays
  std::map<std::string, std::pair<Array, std::chrono::steady_clock::time_point>> arrays;  // path -> (array, until)
  // A slice waiting for a slot of the gate.
  struct GateWaiter {
    GateWaiter(const asio::any_io_executor& ex, std::chrono::steady_clock::time_point until) : timer(ex, until) {}
    asio::steady_timer timer;
    bool granted = false;  // guarded by gate_mu
  };
  std::mutex gate_mu;  // guards gate_busy, gate_queue and GateWaiter::granted
  std::size_t gate_busy = 0;
  std::deque<std::shared_ptr<GateWaiter>> gate_queue;

  std::mutex mu;  // guards conns and on_stopped
  std::map<Conn*, std::shared_ptr<Conn>> conns;
  std::vector<std::function<void()>> on_stopped;  // shutdown() callbacks still to call

  // The connections' registry and shutdown (these four: listener.cpp).
  // Removes a finished connection; the last one after shutdown() calls on_stopped.
  void finished(Conn* conn);
  // After shutdown(): once no connection is left, calls the waiting callbacks.
  void check_drained();
  // What Server::shutdown does (see server.hpp).
  void shutdown(std::function<void()> done);
  // At shutdown's deadline: ends every connection left and cancels its work.
  void force_close();
  // The slice gate (endpoints_data.cpp). Gives a slot back: to the first
  // waiter (marked granted under the lock, so that its timer expiring
  // meanwhile cannot lose the slot), else free.
  void leave_slice_gate();
};

}  // namespace zarrcoro::server
