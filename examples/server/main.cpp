// zarrcoro-server: serves a directory of Zarr hierarchies over HTTP.
//
//   zarrcoro-server --root DIR [--listen 127.0.0.1:8080] [--access-log] ...
//
// Prints "listening on http://HOST:PORT" on stdout once it accepts
// connections (useful with --listen 127.0.0.1:0). SIGINT or SIGTERM stops it
// gracefully (see Server::shutdown); it then exits 0. A bad option or root
// exits 2 with one line on stderr.
#include <csignal>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <memory>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <zarrcoro/runtime.hpp>

#include "server.hpp"

namespace asio = boost::asio;
using namespace zarrcoro;

int main(int argc, char** argv) {
  spdlog::set_default_logger(spdlog::stderr_color_mt("zarrcoro-server"));
  spdlog::set_level(spdlog::level::info);

  server::ServerOptions opt;
  unsigned io_threads = 1, codec_threads = 0;
  int codec_nice = 10;
  bool codec_sched_idle = true;
  unsigned io_time_slice_us = 100, round_budget_us = 500;
  double metadata_s = 1, slice_queue_s = 10, header_s = 10, body_s = 10, idle_s = 30, write_s = 30, shutdown_s = 10;
  std::uint64_t max_response_mib = 256, slice_memory_mib = 1024;
  bool verbose = false;

  CLI::App app{"zarrcoro-server: Zarr over HTTP with byte ranges, a slice API and metrics"};
  app.add_option("--root", opt.root, "Directory of Zarr hierarchies to serve (read-only)")
      ->required()
      ->check(CLI::ExistingDirectory);
  app.add_option("--listen", opt.listen,
                 "HOST:PORT to listen on: a numeric IP, [IPv6] or a host name (its first IPv4 address, else its "
                 "first); port 0: any free port")
      ->capture_default_str();
  app.add_option("--io-threads", io_threads, "Threads running the I/O loop")->check(CLI::Range(1u, 256u))->capture_default_str();
  app.add_option("--codec-threads", codec_threads, "Codec pool threads (0: one per core)")->capture_default_str();
  app.add_option("--codec-nice", codec_nice, "Niceness added to codec threads (0: none; no effect under SCHED_IDLE, see --no-codec-sched-idle)")
      ->check(CLI::Range(0, 19))
      ->capture_default_str();
  app.add_flag("!--no-codec-sched-idle", codec_sched_idle,
               "Leave the codec threads' scheduling policy alone (default: SCHED_IDLE, so that a runnable I/O loop is picked before them)");
  app.add_option("--io-time-slice-us", io_time_slice_us,
                 "Time slice asked of the kernel for each I/O thread, us (0: the kernel's default; Linux >= 6.12)")
      ->check(CLI::Range(0u, 100000u))
      ->capture_default_str();
  app.add_option("--loop-round-budget-us", round_budget_us,
                 "With one I/O thread: a request this far into a round of the loop (from the first request to the "
                 "next poll for events) waits for the next poll, so that timers and new clients come first, us (0: off)")
      ->check(CLI::Range(0u, 1000000u))
      ->capture_default_str();
  bool loop_realtime = true;
  app.add_flag("--loop-realtime,!--no-loop-realtime", loop_realtime,
               "With one I/O thread: run the loop's thread under SCHED_FIFO while it uses at most half of its core. "
               "Default: where permitted (CAP_SYS_NICE or RLIMIT_RTPRIO >= 1) and the cgroup sets no CPU quota; "
               "else a normal thread and an info line. --loop-realtime: also under a quota, and warns where refused");
  app.add_option("--max-connections", opt.max_connections, "Open connections; more get 503")->capture_default_str();
  app.add_option("--max-header-bytes", opt.max_header_bytes, "Request header size limit (431 over it)")->capture_default_str();
  app.add_option("--max-response-mib", max_response_mib, "Largest slice response, MiB (400 over it)")
      ->check(CLI::Range(std::uint64_t{1}, std::uint64_t{1} << 40))
      ->capture_default_str();
  app.add_option("--slice-memory-mib", slice_memory_mib, "All slice responses in memory at once, MiB (503 over it)")
      ->check(CLI::Range(std::uint64_t{1}, std::uint64_t{1} << 40))
      ->capture_default_str();
  app.add_option("--max-slices-in-flight", opt.max_slices_in_flight, "Slices decoded at once; more wait their turn")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 20))
      ->capture_default_str();
  app.add_option("--slice-queue-timeout", slice_queue_s, "Seconds a slice may wait for its turn (then 503)")
      ->capture_default_str();
  app.add_option("--transmit-threads", opt.transmit_threads, "Threads copying large bodies into sockets (0: half the cores)")
      ->check(CLI::Range(0u, 256u))
      ->capture_default_str();
  app.add_option("--metadata-max-age", metadata_s, "Seconds an array's parsed metadata is reused (0: read it every time)")
      ->capture_default_str();
  app.add_option("--header-timeout", header_s, "Seconds to receive a request header")->capture_default_str();
  app.add_option("--body-timeout", body_s, "Seconds to receive a request body")->capture_default_str();
  app.add_option("--idle-timeout", idle_s, "Seconds a keep-alive connection may wait for a request")->capture_default_str();
  app.add_option("--write-timeout", write_s, "Seconds to send a response (plus 1 s per MiB)")->capture_default_str();
  app.add_option("--shutdown-deadline", shutdown_s, "Seconds in-flight requests get on SIGINT/SIGTERM")
      ->capture_default_str();
  app.add_flag("--access-log", opt.access_log, "Log one line a request on stdout");
  app.add_flag("-v,--verbose", verbose, "Debug logging");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);
    std::cerr << "zarrcoro-server: error: " << e.what() << std::endl;
    return 2;
  }
  auto ms = [](double s) { return std::chrono::milliseconds(static_cast<std::int64_t>(s * 1000)); };
  opt.metadata_max_age = ms(metadata_s);
  opt.slice_queue_timeout = ms(slice_queue_s);
  opt.header_timeout = ms(header_s);
  opt.body_timeout = ms(body_s);
  opt.idle_timeout = ms(idle_s);
  opt.write_timeout = ms(write_s);
  opt.shutdown_deadline = ms(shutdown_s);
  opt.max_response_bytes = max_response_mib << 20;
  opt.slice_memory = slice_memory_mib << 20;
  if (io_threads == 1) opt.loop_round_budget = std::chrono::microseconds(round_budget_us);
  else if (app.count("--loop-round-budget-us") > 0 && round_budget_us > 0)
    spdlog::warn("--loop-round-budget-us is ignored with more than one I/O thread");
  const bool realtime_asked = app.count("--loop-realtime") > 0;
  opt.loop_realtime = !loop_realtime ? server::LoopRealtime::off
                      : realtime_asked ? server::LoopRealtime::on
                                       : server::LoopRealtime::when_permitted;
  if (io_threads > 1 && opt.loop_realtime != server::LoopRealtime::off) {
    if (realtime_asked) spdlog::warn("--loop-realtime is ignored with more than one I/O thread");
    opt.loop_realtime = server::LoopRealtime::off;
  }
  if (verbose) spdlog::set_level(spdlog::level::debug);
  if (opt.access_log) spdlog::stdout_logger_mt("access")->set_pattern("%Y-%m-%dT%H:%M:%S.%e %v");

  try {
    // The service owns its io_context; the Runtime adopts it, so store I/O,
    // HTTP and the loop-lag probe share one loop, and codecs get their pool.
    asio::io_context io(static_cast<int>(io_threads));
    RuntimeOptions ro;
    ro.codec_nice = codec_nice;
    ro.codec_sched_idle = codec_sched_idle;
    ro.codec_threads = codec_threads;
    Runtime rt(io, ro);
    server::Server srv(rt, opt);

    asio::signal_set signals(io, SIGINT, SIGTERM);
    auto on_signal = [&](boost::system::error_code ec, int sig) {
      if (ec) return;
      spdlog::info("signal {}: stopping (in-flight requests get {} s)", sig, shutdown_s);
      srv.shutdown([&io] { io.stop(); });
    };
    signals.async_wait(on_signal);

    srv.start();
    const auto ep = srv.endpoint();
    const std::string host = ep.address().is_v6() ? "[" + ep.address().to_string() + "]" : ep.address().to_string();
    std::printf("listening on http://%s:%u\n", host.c_str(), static_cast<unsigned>(ep.port()));
    std::fflush(stdout);

    // The loop's threads are ours, not the Runtime's: give each the short
    // time slice an owned I/O thread gets, so that it preempts codec threads.
    const auto run_loop = [&io, io_time_slice_us] {
      if (io_time_slice_us > 0) set_thread_time_slice(std::chrono::microseconds(io_time_slice_us));
      io.run();
    };
    std::vector<std::thread> threads;
    for (unsigned i = 1; i < io_threads; ++i) threads.emplace_back(run_loop);
    run_loop();
    for (auto& t : threads) t.join();
    spdlog::info("stopped");
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "zarrcoro-server: error: " << e.what() << std::endl;
    return 2;
  }
}
