// The example HTTP server: serves a directory of Zarr hierarchies read-only.
//
//   GET|HEAD /<key>                       a store key's bytes: Range (one or several:
//                                         multipart/byteranges), If-Range, ETag and
//                                         If-None-Match, Last-Modified and If-Modified-Since
//   GET      /api/v1/<array>?region=0:10,5:20[&format=npy|raw]
//                                         a decoded region (.npy by default)
//   GET      /api/v1/<node>/info[?stats=1] the JSON of `zarrcoro info` (an array's
//                                         storage statistics only with stats=1)
//   GET      /view/<array>                 a slice viewer (HTML + JS, embedded: viewer/),
//                                         /view/ the root group's arrays; not an array: 404
//   GET      /metrics, /healthz           Prometheus text; "ok"
//   OPTIONS  *                            CORS preflight
// Every response carries CORS headers so that browser clients work. Store keys
// named "metrics", "healthz" or "view", or under "api/" or "view/" at the root
// are shadowed.
//
// Threading: the server runs on the Runtime's io_context, which the caller
// runs on one or more threads; each connection is a coroutine on its own
// strand. Decoding happens in the Runtime's codec pool (through the Array
// API), never on an I/O thread. Methods of Server may be called from any
// thread. Constructing a Server ignores SIGPIPE in the process (sendfile(2)
// cannot be told not to raise it when a client goes away).
//
// Large values never pass through the loop's CPU: a key's file is opened
// once (FilesystemStore::open_file); bodies up to 16 KiB are read from the
// page cache and written with the header in one call, larger responses
// (whole values, ranges, multipart) leave by sendfile(2), called on the server's transmit pool
// in steps of 1 MiB, except their last 64 KiB, which the loop copies from
// the page cache into the socket (cheaper than a hop to the pool and back;
// a range not in the page cache goes from the pool); the loop only waits
// for the socket to take more. A
// slice is decoded and sent in slabs of whole chunk rows (about 4 MiB): each
// slab is sent (from the transmit pool) while the next is decoded in the
// codec pool, so a response holds two slabs, and a slow reader holds back
// the decoding (back-pressure). If a slab fails to decode after the
// header went out, the connection is closed (the body is short). At most
// max_slices_in_flight slices are decoded at once; the others wait in order
// (a slot is given back when the last slab is decoded, so slow readers do
// not hold it). Range applies to GET only; HEAD answers as GET would.
//
// Defences: paths are percent-decoded, then validated as store keys and read
// through FilesystemStore (no "..", no absolute paths, no symlinks out of the
// root); header size and body size limits; header, body, idle and write
// timeouts; a cap on connections (over it: 503 and close); a cap on the bytes
// of one slice response and on the memory all slice responses hold at once.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>

#include <boost/asio/ip/tcp.hpp>

#include <zarrcoro/runtime.hpp>

#include "metrics.hpp"

namespace zarrcoro::server {

struct ServerState;  // server_state.hpp

// Whether the I/O loop's thread runs under SCHED_FIFO while the loop is light
// (ServerOptions::loop_realtime, loop_priority.hpp).
enum class LoopRealtime {
  off,
  when_permitted,  // tried unless the cgroup has a CPU quota; refused: one info line and a normal thread
  on,              // tried; refused: one warning and a normal thread
};

struct ServerOptions {
  std::filesystem::path root;              // the directory served (must exist)
  std::string listen = "127.0.0.1:8080";   // "host:port" or "[v6]:port", host numeric or a name; port 0 picks a free one
  std::size_t max_connections = 1024;      // more are answered 503 and closed
  std::uint32_t max_header_bytes = 8 * 1024;          // over it: 431
  std::uint64_t max_body_bytes = 64 * 1024;           // request bodies are read and ignored; over it: 413
  std::uint64_t max_response_bytes = std::uint64_t{256} << 20;  // one slice response; over it: 400
  std::uint64_t slice_memory = std::uint64_t{1} << 30;  // slabs of all slice responses held at once; over it: 503
  // Slices being decoded (from their first slab to their last); more wait
  // their turn (first come, first served). Bounds the work the I/O loop has
  // ready at once, so that other requests (/healthz, small keys) are answered
  // quickly under a heavy slice load.
  std::size_t max_slices_in_flight = 8;  // 0 counts as 1
  // A slice that waited this long for a slot is answered 503 (Retry-After).
  std::chrono::milliseconds slice_queue_timeout{10'000};
  // Threads that copy large bodies into sockets (sendfile(2), send(2)), so
  // that the I/O loop never spends its CPU on them. 0: half the cores, at
  // least one (the rest stay free for the loop).
  unsigned transmit_threads = 0;
  // An array's metadata is read again when its cached copy is this old (0:
  // at every slice request).
  std::chrono::milliseconds metadata_max_age{1'000};
  std::chrono::milliseconds header_timeout{10'000};  // from a request's first byte to the end of its header
  std::chrono::milliseconds body_timeout{10'000};    // to read a request body
  std::chrono::milliseconds idle_timeout{30'000};    // keep-alive: wait for the next request
  std::chrono::milliseconds write_timeout{30'000};   // per response, plus 1 s per MiB of body
  std::chrono::milliseconds shutdown_deadline{10'000};  // in-flight requests get this long
  // The I/O loop's round budget (loop_round.hpp). A round opens with the
  // first request that finds none open and closes at the loop's next poll
  // for events; a request about to be answered longer than this into a
  // round first waits, and goes at a later poll in the order the requests
  // began to wait, so that timers and new clients are not queued behind a
  // whole round of requests: it bounds the loop's lag when many small
  // requests keep it busy. A request for "/healthz" never waits. Only for
  // an io_context that one thread runs (the state is not synchronized).
  // 0: off (zarrcoro-server sets 500 us with --io-threads 1).
  std::chrono::microseconds loop_round_budget{0};
  // Runs the loop's thread under SCHED_FIFO (priority 1) while the loop
  // uses at most half of its core, measured every 10 ms, and as a normal
  // thread (with its nice and time slice) while it uses more, until it
  // uses less than a quarter (loop_priority.hpp). On a kernel that does not
  // preempt kernel code, a normal loop thread waits for its core behind
  // other threads' system calls: under 1 MiB key GETs on two cores its lag
  // p99 was 2.3-3.6 ms, of which its own work 0.1 ms; real-time, 0.1-0.2
  // ms. A loop saturated by 4 KB GETs stays a normal thread. Needs
  // CAP_SYS_NICE or RLIMIT_RTPRIO >= 1; without them the thread stays as it
  // was (see LoopRealtime). A real-time thread is outside a cgroup's CPU
  // quota: when_permitted leaves the loop normal under one. shutdown() (or the destructor) returns the
  // thread to SCHED_OTHER. Only for an io_context that one thread runs.
  // Shown in /metrics as zarrcoro_io_loop_realtime. Off here, for a process
  // that embeds the server and owns its threads' policies; zarrcoro-server
  // runs with when_permitted unless given --no-loop-realtime.
  LoopRealtime loop_realtime = LoopRealtime::off;
  bool access_log = false;                 // one line a request on the "access" spdlog logger
};

class Server {
 public:
  // Opens the store and binds the listening socket (throws on failure); does
  // not accept until start(). `rt` must outlive the server.
  Server(Runtime& rt, ServerOptions options);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // The bound address (with the real port when 0 was asked for).
  boost::asio::ip::tcp::endpoint endpoint() const;
  const ServerOptions& options() const;
  const Metrics& metrics() const;

  void start();
  // Graceful stop: closes the listening socket, closes idle connections,
  // lets requests in flight finish (their responses say Connection: close)
  // and force-closes what remains after options.shutdown_deadline. Calls
  // `done` once, on an I/O thread, when no connection is left. Idempotent.
  void shutdown(std::function<void()> done);

 private:
  std::shared_ptr<ServerState> impl_;  // shared with the connection coroutines
};

}  // namespace zarrcoro::server
