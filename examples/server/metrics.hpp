// Server counters, rendered in the Prometheus text format for GET /metrics.
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include <zarrcoro/runtime.hpp>

namespace zarrcoro::server {

// The I/O loop thread's scheduling (LoopPriority, ServerOptions::loop_realtime).
struct LoopScheduling {
  bool realtime = false;         // under SCHED_FIFO now
  std::uint64_t fifo_exits = 0;  // windows after which it left SCHED_FIFO for using too much CPU
};

class Metrics {
 public:
  // A request whose header has been read, until its response is written.
  void request_started() { in_flight_.fetch_add(1, std::memory_order_relaxed); }
  void request_finished(const std::string& route, unsigned status, std::uint64_t bytes_sent);
  // Responses written without a parsed request (400/431 on a broken header, 503 over the cap).
  void response_without_request(const std::string& route, unsigned status, std::uint64_t bytes_sent);

  void connection_opened() { connections_.fetch_add(1, std::memory_order_relaxed); }
  void connection_closed() { connections_.fetch_sub(1, std::memory_order_relaxed); }
  void connection_rejected() { rejected_.fetch_add(1, std::memory_order_relaxed); }
  void timed_out() { timeouts_.fetch_add(1, std::memory_order_relaxed); }
  // A response that did not go out whole (client gone, write timeout, a
  // streamed slice that failed to decode after its header was sent).
  void response_aborted() { aborted_.fetch_add(1, std::memory_order_relaxed); }
  // A request whose engine work (a slice's decodes) was cancelled because
  // its client went away, its response's write failed or timed out, or
  // shutdown's deadline passed.
  void request_cancelled() { cancelled_.fetch_add(1, std::memory_order_relaxed); }
  void sent_from_file(std::uint64_t bytes) { sendfile_bytes_.fetch_add(bytes, std::memory_order_relaxed); }
  void transmit_step_on_pool() { pool_steps_.fetch_add(1, std::memory_order_relaxed); }
  // A request that waited for the loop's next poll (ServerOptions::loop_round_budget).
  void request_deferred() { deferred_.fetch_add(1, std::memory_order_relaxed); }
  // The memory of slice responses in flight: reserves `bytes` if the total
  // stays within `limit` (true), else reserves nothing (false).
  bool reserve_slice_memory(std::uint64_t bytes, std::uint64_t limit) {
    if (slice_bytes_.fetch_add(bytes) + bytes <= limit) return true;
    slice_bytes_.fetch_sub(bytes);
    return false;
  }
  void release_slice_memory(std::uint64_t bytes) { slice_bytes_.fetch_sub(bytes); }

  std::int64_t in_flight() const { return in_flight_.load(std::memory_order_relaxed); }
  std::int64_t connections() const { return connections_.load(std::memory_order_relaxed); }

  // The whole exposition text, with the runtime's loop lag and codec pool
  // figures and the loop thread's scheduling.
  std::string render(const RuntimeStats& stats, const LoopLag& lag, const LoopScheduling& sched) const;

 private:
  void count(const std::string& route, unsigned status, std::uint64_t bytes_sent);

  mutable std::mutex mu_;
  std::map<std::pair<std::string, unsigned>, std::uint64_t> requests_;  // (route, status) -> count
  std::atomic<std::uint64_t> bytes_sent_{0};
  std::atomic<std::int64_t> in_flight_{0};
  std::atomic<std::int64_t> connections_{0};
  std::atomic<std::uint64_t> rejected_{0};
  std::atomic<std::uint64_t> timeouts_{0};
  std::atomic<std::uint64_t> aborted_{0};
  std::atomic<std::uint64_t> cancelled_{0};
  std::atomic<std::uint64_t> sendfile_bytes_{0};
  std::atomic<std::uint64_t> pool_steps_{0};
  std::atomic<std::uint64_t> deferred_{0};
  std::atomic<std::uint64_t> slice_bytes_{0};
};

}  // namespace zarrcoro::server
