#include "metrics.hpp"

#include <cstdio>

namespace zarrcoro::server {
namespace {

void metric(std::string& out, const char* name, const char* type, const char* help) {
  out += "# HELP ";
  out += name;
  out += ' ';
  out += help;
  out += "\n# TYPE ";
  out += name;
  out += ' ';
  out += type;
  out += '\n';
}

void sample(std::string& out, const std::string& name_and_labels, double value) {
  char buf[64];
  std::snprintf(buf, sizeof buf, " %.9g\n", value);
  out += name_and_labels;
  out += buf;
}

}  // namespace

void Metrics::count(const std::string& route, unsigned status, std::uint64_t bytes_sent) {
  bytes_sent_.fetch_add(bytes_sent, std::memory_order_relaxed);
  std::lock_guard lk(mu_);
  ++requests_[{route, status}];
}

void Metrics::request_finished(const std::string& route, unsigned status, std::uint64_t bytes_sent) {
  in_flight_.fetch_sub(1, std::memory_order_relaxed);
  count(route, status, bytes_sent);
}

void Metrics::response_without_request(const std::string& route, unsigned status, std::uint64_t bytes_sent) {
  count(route, status, bytes_sent);
}

std::string Metrics::render(const RuntimeStats& stats, const LoopLag& lag, const LoopScheduling& sched) const {
  std::string out;
  metric(out, "zarrcoro_http_requests_total", "counter", "HTTP responses by route and status code.");
  {
    std::lock_guard lk(mu_);
    for (const auto& [key, n] : requests_)
      sample(out, "zarrcoro_http_requests_total{route=\"" + key.first + "\",status=\"" + std::to_string(key.second) + "\"}",
             static_cast<double>(n));
  }
  metric(out, "zarrcoro_http_response_bytes_total", "counter", "Bytes sent in responses (headers and bodies).");
  sample(out, "zarrcoro_http_response_bytes_total", static_cast<double>(bytes_sent_.load()));
  metric(out, "zarrcoro_http_requests_in_flight", "gauge", "Requests read and not yet answered.");
  sample(out, "zarrcoro_http_requests_in_flight", static_cast<double>(in_flight_.load()));
  metric(out, "zarrcoro_http_connections", "gauge", "Open client connections.");
  sample(out, "zarrcoro_http_connections", static_cast<double>(connections_.load()));
  metric(out, "zarrcoro_http_connections_rejected_total", "counter", "Connections refused over the connection cap.");
  sample(out, "zarrcoro_http_connections_rejected_total", static_cast<double>(rejected_.load()));
  metric(out, "zarrcoro_http_timeouts_total", "counter", "Connections closed by a read, idle or write timeout.");
  sample(out, "zarrcoro_http_timeouts_total", static_cast<double>(timeouts_.load()));
  metric(out, "zarrcoro_http_responses_aborted_total", "counter",
         "Responses that did not go out whole: the client went away, a write timed out, or a streamed slice failed.");
  sample(out, "zarrcoro_http_responses_aborted_total", static_cast<double>(aborted_.load()));
  metric(out, "zarrcoro_http_requests_cancelled_total", "counter",
         "Requests whose decoding was cancelled: the client went away, a write failed or timed out, or shutdown's "
         "deadline passed.");
  sample(out, "zarrcoro_http_requests_cancelled_total", static_cast<double>(cancelled_.load()));
  metric(out, "zarrcoro_http_sendfile_bytes_total", "counter", "Body bytes sent from files by sendfile(2), not copied.");
  sample(out, "zarrcoro_http_sendfile_bytes_total", static_cast<double>(sendfile_bytes_.load()));
  metric(out, "zarrcoro_http_transmit_pool_steps_total", "counter",
         "Body sends run on the transmit pool (large bodies, and small ones not in the page cache).");
  sample(out, "zarrcoro_http_transmit_pool_steps_total", static_cast<double>(pool_steps_.load()));
  metric(out, "zarrcoro_http_requests_deferred_total", "counter",
         "Requests that waited for a later poll of the I/O loop because its round had run past its budget.");
  sample(out, "zarrcoro_http_requests_deferred_total", static_cast<double>(deferred_.load()));
  metric(out, "zarrcoro_http_slice_memory_bytes", "gauge", "Memory reserved by slice responses in flight.");
  sample(out, "zarrcoro_http_slice_memory_bytes", static_cast<double>(slice_bytes_.load()));

  metric(out, "zarrcoro_io_loop_lag_seconds", "gauge",
         "Lateness of a periodic timer on the I/O loop (recent samples): how long a ready handler waits.");
  sample(out, "zarrcoro_io_loop_lag_seconds{quantile=\"0.5\"}", lag.p50_us * 1e-6);
  sample(out, "zarrcoro_io_loop_lag_seconds{quantile=\"0.99\"}", lag.p99_us * 1e-6);
  sample(out, "zarrcoro_io_loop_lag_seconds{quantile=\"1\"}", lag.max_us * 1e-6);
  metric(out, "zarrcoro_io_loop_own_lag_seconds", "gauge",
         "Each lateness sample less the time the I/O thread waited for a CPU since the previous sample "
         "(schedstat run_delay; can understate): what the loop's own work left. Mostly the plain figure with more "
         "than one I/O thread.");
  sample(out, "zarrcoro_io_loop_own_lag_seconds{quantile=\"0.5\"}", lag.own_p50_us * 1e-6);
  sample(out, "zarrcoro_io_loop_own_lag_seconds{quantile=\"0.99\"}", lag.own_p99_us * 1e-6);
  metric(out, "zarrcoro_io_loop_lag_samples_total", "counter", "Loop-lag probe samples taken.");
  sample(out, "zarrcoro_io_loop_lag_samples_total", static_cast<double>(lag.samples));
  metric(out, "zarrcoro_io_loop_realtime", "gauge",
         "1 while the I/O loop's thread runs under SCHED_FIFO (the default where permitted), else 0.");
  sample(out, "zarrcoro_io_loop_realtime", sched.realtime ? 1 : 0);
  metric(out, "zarrcoro_io_loop_realtime_exits_total", "counter",
         "Times the I/O loop's thread left SCHED_FIFO because it used more than half of its core.");
  sample(out, "zarrcoro_io_loop_realtime_exits_total", static_cast<double>(sched.fifo_exits));

  metric(out, "zarrcoro_codec_pool_queue_depth", "gauge", "Jobs (batches of chunk work) submitted to the codec pool and not finished.");
  sample(out, "zarrcoro_codec_pool_queue_depth", static_cast<double>(stats.pool_queue_depth));
  metric(out, "zarrcoro_codec_pool_submissions_total", "counter", "Jobs (batches of chunk work) submitted to the codec pool.");
  sample(out, "zarrcoro_codec_pool_submissions_total", static_cast<double>(stats.pool_submissions));
  metric(out, "zarrcoro_codec_inline_batches_total", "counter", "Trivial batches run on the I/O thread (no codec work).");
  sample(out, "zarrcoro_codec_inline_batches_total", static_cast<double>(stats.inline_batches));
  metric(out, "zarrcoro_codec_chunks_total", "counter", "Chunk tasks executed.");
  sample(out, "zarrcoro_codec_chunks_total", static_cast<double>(stats.chunks));
  metric(out, "zarrcoro_codec_calls_on_io_thread_total", "counter", "Codec calls run on an I/O thread (stays 0).");
  sample(out, "zarrcoro_codec_calls_on_io_thread_total", static_cast<double>(stats.codec_calls_on_io_thread));
  return out;
}

}  // namespace zarrcoro::server
