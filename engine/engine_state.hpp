// Engine-internal state owned by a Runtime: the scheduler, the in-flight
// limits and the per-key locks shared by every array of the runtime.
#pragma once

#include "engine/async_sync.hpp"
#include "engine/scheduler.hpp"

namespace zarrcoro::detail {

struct EngineState {
  EngineState(boost::asio::any_io_executor io, boost::asio::thread_pool& pool, unsigned threads,
              const RuntimeOptions& o, std::function<bool()> on_io_thread)
      : scheduler(std::move(io), pool, threads, o, std::move(on_io_thread)),
        requests(std::max<std::size_t>(1, o.max_inflight_requests)),
        bytes(std::max<std::size_t>(1, o.max_inflight_bytes)) {}

  Scheduler scheduler;
  AsyncSemaphore requests;  // store requests in flight
  AsyncSemaphore bytes;     // decoded chunk bytes in flight
  KeyLocks key_locks;       // read-modify-write of one chunk key at a time
};

}  // namespace zarrcoro::detail
