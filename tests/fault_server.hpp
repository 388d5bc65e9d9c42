// A small HTTP/1.1 test server that injects faults, for the HTTP and S3 store
// tests. It either serves files from memory (GET/HEAD with single byte
// ranges, like a static file server) or forwards every request to an
// upstream server (a proxy in front of radosgw). Before answering it applies
// the next queued fault: an error status, a connection reset or close
// before or in the middle of the body, a stall, a body cut short, a server
// that ignores Range, or one that sends the wrong range. It can also answer
// with a Content-Encoding (gzip, deflate, or just a label such as br),
// whatever the request's Accept-Encoding says.
//
// Thread-safety: all public methods may be called from any thread while the
// server runs. It listens on 127.0.0.1 on an ephemeral port; one thread
// accepts, one thread serves each connection (blocking I/O). The destructor
// stops everything: it closes the listener and every connection (stalls end
// at once) and joins the threads.
#pragma once

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>

#include <zlib.h>

namespace zarrcoro::test {

enum class Fault {
  none,
  status_500,             // answer 500 without doing anything
  status_503,             // answer 503 (with Retry-After: 0)
  status_429,             // answer 429
  reset_before_response,  // read the request, then reset the connection (RST)
  close_before_response,  // read the request, then close the connection (FIN)
  reset_mid_body,         // send the headers and half the body, then reset
  truncate_body,          // send the headers and half the body, then close (FIN)
  stall_before_response,  // read the request, then send nothing until stopped
  stall_mid_body,         // send the headers and half the body, then nothing
  ignore_range,           // answer a range request with 200 and the whole value
  wrong_range,            // answer a range request with a range shifted by one byte
  status_500_after_forward,  // proxy: forward the request upstream, then answer 500
  reset_after_forward,       // proxy: forward the request upstream, then reset
  interim_103,               // send a 103 Early Hints, then the answer
  stray_bytes_after,         // answer, then a moment later send "\r\n" (or, after a HEAD, its body)
};

class FaultServer {
 public:
  struct Seen {
    std::string method, target, range;
    std::size_t connection = 0;  // 1-based connection number
    std::string accept_encoding;  // "<none>" when the request had none
    std::string authorization;    // "<none>" when the request had none
  };

  FaultServer() : acceptor_(io_) {
    namespace ip = boost::asio::ip;
    acceptor_.open(ip::tcp::v4());
    acceptor_.set_option(ip::tcp::acceptor::reuse_address(true));
    acceptor_.bind({ip::make_address("127.0.0.1"), 0});
    acceptor_.listen();
    port_ = acceptor_.local_endpoint().port();
    accept_thread_ = std::thread([this] { accept_loop(); });
  }

  ~FaultServer() { stop(); }

  void stop() {
    {
      std::lock_guard lock(mu_);
      if (stopped_) return;
      stopped_ = true;
    }
    cv_.notify_all();
    // Wake the blocking accept with a connection of our own.
    try {
      boost::asio::io_context io;
      boost::asio::ip::tcp::socket s(io);
      s.connect({boost::asio::ip::make_address("127.0.0.1"), port_});
    } catch (...) {
    }
    if (accept_thread_.joinable()) accept_thread_.join();
    std::vector<std::thread> threads;
    {
      std::lock_guard lock(mu_);
      for (auto& s : sockets_) {
        boost::system::error_code ec;
        s->shutdown(boost::asio::ip::tcp::socket::shutdown_both, ec);
      }
      threads = std::move(threads_);
    }
    for (auto& t : threads) t.join();
  }

  std::uint16_t port() const { return port_; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

  // Origin mode: the value served at `path` ("/a/b").
  void put(const std::string& path, std::string value) {
    std::lock_guard lock(mu_);
    files_[path] = std::move(value);
  }
  // A fixed answer for `path` (status, extra headers, body), e.g. 410 or a
  // redirect; never content-coded by set_content_encoding. `path` is the
  // request target, or its path alone for any query.
  void answer(const std::string& path, unsigned status, std::vector<std::pair<std::string, std::string>> headers = {},
              std::string body = "") {
    std::lock_guard lock(mu_);
    fixed_[path] = {status, std::move(headers), std::move(body)};
  }
  // Answers with "Content-Encoding: <coding>" from now on ("" turns it off):
  // in origin mode the values (and 404 bodies) are coded before any range is
  // taken, as a server of precompressed files does, so a 206 is a range of
  // the coded bytes; in proxy mode 200 answers to GET are coded. Only for
  // targets starting with `prefix`; with `only_if_accepted`, only when the
  // request's Accept-Encoding names the coding. Bodies are really coded for
  // gzip, x-gzip and deflate (see encode); any other coding only labels them.
  void set_content_encoding(std::string coding, std::string prefix = "", bool only_if_accepted = false) {
    std::lock_guard lock(mu_);
    coding_ = std::move(coding);
    coding_prefix_ = std::move(prefix);
    coding_if_accepted_ = only_if_accepted;
  }
  // Answers that set_content_encoding coded (or labelled).
  std::size_t coded_answers() const { return coded_; }
  // `value` coded with gzip or x-gzip (level 9, mtime 0), deflate (zlib
  // wrapper) or raw-deflate (no wrapper); any other coding: unchanged.
  static std::string encode(const std::string& coding, const std::string& value) {
    int bits = 0;
    if (coding == "gzip" || coding == "x-gzip") bits = 15 + 16;
    else if (coding == "deflate") bits = 15;
    else if (coding == "raw-deflate") bits = -15;
    else return value;
    z_stream z{};
    if (deflateInit2(&z, 9, Z_DEFLATED, bits, 8, Z_DEFAULT_STRATEGY) != Z_OK) throw std::runtime_error("deflateInit2");
    std::string out(deflateBound(&z, value.size()), '\0');
    z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(value.data()));
    z.avail_in = static_cast<uInt>(value.size());
    z.next_out = reinterpret_cast<Bytef*>(out.data());
    z.avail_out = static_cast<uInt>(out.size());
    const int rc = deflate(&z, Z_FINISH);
    out.resize(z.total_out);
    deflateEnd(&z);
    if (rc != Z_STREAM_END) throw std::runtime_error("deflate");
    return out;
  }
  // Proxy mode: forward every request to 127.0.0.1:port.
  void forward_to(std::uint16_t port) { upstream_ = port; }

  // Queues `count` faults for the next requests whose method is `method`
  // (any method if empty), in order. `before`, if given, runs on the serving
  // thread when a request takes the fault, before anything else is done with
  // it (e.g. another client's write landing between two attempts).
  void inject(Fault f, int count = 1, std::string method = "", std::function<void()> before = {}) {
    std::lock_guard lock(mu_);
    for (int i = 0; i < count; ++i) queue_.push_back({f, method, before});
  }
  // The fault for every request when the queue has none for it.
  void set_default(Fault f) {
    std::lock_guard lock(mu_);
    default_ = f;
  }
  // Answers with chunked transfer encoding (no Content-Length) when true.
  void set_chunked(bool on) { chunked_ = on; }
  // Closes every connection after one response, without saying so (no
  // "Connection: close"): the client finds out on its next request.
  void set_drop_after_response(bool on) { drop_after_ = on; }
  // Waits this long before answering each request.
  void set_delay(std::chrono::milliseconds d) { delay_ms_ = d.count(); }

  std::vector<Seen> requests() const {
    std::lock_guard lock(mu_);
    return seen_;
  }
  std::size_t request_count() const {
    std::lock_guard lock(mu_);
    return seen_.size();
  }
  std::size_t connections() const { return connections_; }
  std::size_t max_in_flight() const { return max_in_flight_; }
  std::size_t faults_left() const {
    std::lock_guard lock(mu_);
    return queue_.size();
  }
  // The methods the queued faults wait for ("*" for any), in order.
  std::string pending() const {
    std::lock_guard lock(mu_);
    std::string out;
    for (const auto& q : queue_) out += (out.empty() ? "" : ",") + (q.method.empty() ? "*" : q.method);
    return out;
  }
  void clear_log() {
    std::lock_guard lock(mu_);
    seen_.clear();
  }

 private:
  using tcp = boost::asio::ip::tcp;
  using Request = boost::beast::http::request<boost::beast::http::string_body>;
  struct Queued {
    Fault fault;
    std::string method;
    std::function<void()> before;
  };
  struct Fixed {
    unsigned status = 200;
    std::vector<std::pair<std::string, std::string>> headers;
    std::string body;
  };
  struct Reply {
    unsigned status = 200;
    std::vector<std::pair<std::string, std::string>> headers;
    std::string body;
    bool head = false;  // a HEAD answer: headers describe `body` but it is not sent
  };

  void accept_loop() {
    for (;;) {
      auto socket = std::make_shared<tcp::socket>(io_);
      boost::system::error_code ec;
      acceptor_.accept(*socket, ec);
      std::lock_guard lock(mu_);
      if (stopped_) return;
      if (ec) continue;
      const std::size_t id = ++connections_;
      sockets_.push_back(socket);
      threads_.emplace_back([this, socket, id] { serve(socket, id); });
    }
  }

  // Sleeps until stopped or `ms` elapsed; returns false if stopped.
  bool sleep_for(std::int64_t ms) {
    std::unique_lock lock(mu_);
    return !cv_.wait_for(lock, std::chrono::milliseconds(ms), [this] { return stopped_; });
  }

  Fault next_fault(const std::string& method) {
    std::function<void()> before;
    Fault f;
    {
      std::lock_guard lock(mu_);
      f = default_;
      for (auto it = queue_.begin(); it != queue_.end(); ++it) {
        if (it->method.empty() || it->method == method) {
          f = it->fault;
          before = std::move(it->before);
          queue_.erase(it);
          break;
        }
      }
    }
    if (before) before();
    return f;
  }

  // Closes `s` with a reset (RST) or a normal close (FIN); under the lock,
  // as stop() may shut the socket down concurrently.
  void reset(tcp::socket& s) { close(s, true); }
  void close(tcp::socket& s, bool rst) {
    std::lock_guard lock(mu_);
    boost::system::error_code ec;
    if (rst) s.set_option(boost::asio::socket_base::linger(true, 0), ec);
    s.close(ec);
  }

  // Parses "bytes=a-b", "bytes=a-", "bytes=-n" against `size`: [begin, end),
  // or nullopt when unsatisfiable; `whole` when there is no usable range.
  static std::optional<std::pair<std::uint64_t, std::uint64_t>> parse_range(const std::string& h, std::uint64_t size, bool& whole) {
    whole = true;
    if (h.rfind("bytes=", 0) != 0) return std::pair<std::uint64_t, std::uint64_t>{0, size};
    const std::string spec = h.substr(6);
    const auto dash = spec.find('-');
    if (dash == std::string::npos || spec.find(',') != std::string::npos) return std::pair<std::uint64_t, std::uint64_t>{0, size};
    whole = false;
    const std::string a = spec.substr(0, dash), b = spec.substr(dash + 1);
    if (a.empty()) {
      const std::uint64_t n = std::stoull(b);
      if (n == 0) return std::nullopt;
      return std::pair<std::uint64_t, std::uint64_t>{size - std::min(n, size), size};
    }
    const std::uint64_t first = std::stoull(a);
    if (first >= size) return std::nullopt;
    std::uint64_t last = b.empty() ? size - 1 : std::stoull(b);
    last = std::min(last, size - 1);
    return std::pair<std::uint64_t, std::uint64_t>{first, last + 1};
  }

  // The Content-Encoding to answer `req` with, or "".
  std::string coding_for(const Request& req) const {
    std::lock_guard lock(mu_);
    if (coding_.empty() || std::string_view(req.target()).substr(0, coding_prefix_.size()) != coding_prefix_)
      return "";
    if (coding_if_accepted_) {
      auto lower = [](std::string t) {
        for (auto& c : t) c = char(std::tolower(static_cast<unsigned char>(c)));
        return t;
      };
      const std::string accepted = lower(std::string(req[boost::beast::http::field::accept_encoding]));
      if (accepted.find(lower(coding_)) == std::string::npos) return "";
    }
    return coding_;
  }

  Reply origin(const Request& req, Fault fault) {
    Reply r;
    r.head = req.method() == boost::beast::http::verb::head;
    const std::string target(req.target());
    std::optional<std::string> value;
    {
      std::lock_guard lock(mu_);
      auto it = fixed_.find(target);
      if (it == fixed_.end()) it = fixed_.find(target.substr(0, target.find('?')));
      if (it != fixed_.end()) {
        r.status = it->second.status;
        r.headers = it->second.headers;
        r.body = it->second.body;
        return r;
      }
      if (auto it = files_.find(target); it != files_.end()) value = it->second;
    }
    const std::string coding = coding_for(req);
    if (!coding.empty()) {
      ++coded_;
      r.headers.emplace_back("Content-Encoding", coding);
    }
    if (!value) {
      r.status = 404;
      r.body = encode(coding, "not found");
      return r;
    }
    if (!coding.empty()) *value = encode(coding, *value);
    const std::string range(req[boost::beast::http::field::range]);
    bool whole = true;
    const auto ext = parse_range(range, value->size(), whole);
    if (whole || fault == Fault::ignore_range) {
      r.body = *value;
      return r;
    }
    if (!ext) {
      r.status = 416;
      r.headers.emplace_back("Content-Range", "bytes */" + std::to_string(value->size()));
      return r;
    }
    auto [b, e] = *ext;
    if (fault == Fault::wrong_range) {
      if (b > 0) --b, --e;
      else if (e < value->size()) ++b, ++e;
    }
    r.status = 206;
    r.body = value->substr(b, e - b);
    r.headers.emplace_back("Content-Range", "bytes " + std::to_string(b) + "-" + std::to_string(e - 1) +
                                                "/" + std::to_string(value->size()));
    return r;
  }

  Reply forward(const Request& req) {
    namespace http = boost::beast::http;
    boost::asio::io_context io;
    tcp::socket up(io);
    up.connect({boost::asio::ip::make_address("127.0.0.1"), upstream_});
    Request copy = req;
    copy.keep_alive(false);
    http::write(up, copy);
    boost::beast::flat_buffer buf;
    http::response_parser<http::string_body> parser;
    parser.body_limit(std::uint64_t{1} << 32);
    if (req.method() == http::verb::head) parser.skip(true);
    http::read(up, buf, parser);
    auto& res = parser.get();
    Reply r;
    r.head = req.method() == http::verb::head;
    r.status = res.result_int();
    for (const auto& f : res) {
      const auto name = f.name();
      if (name == http::field::content_length || name == http::field::transfer_encoding ||
          name == http::field::connection)
        continue;
      r.headers.emplace_back(std::string(f.name_string()), std::string(f.value()));
    }
    if (r.head && res.has_content_length())
      r.headers.emplace_back("Content-Length", std::string(res[http::field::content_length]));
    r.body = std::move(res.body());
    if (const std::string coding = coding_for(req);
        !coding.empty() && r.status == 200 && req.method() == http::verb::get) {
      ++coded_;
      r.headers.emplace_back("Content-Encoding", coding);
      r.body = encode(coding, r.body);
    }
    return r;
  }

  // Writes `r`, applying a mid-body fault; returns false when the connection is done.
  bool respond(tcp::socket& s, const Reply& r, Fault fault, bool keep_alive) {
    std::string head = "HTTP/1.1 " + std::to_string(r.status) + " " +
                       std::string(boost::beast::http::obsolete_reason(boost::beast::http::int_to_status(r.status))) + "\r\n";
    bool has_length = false;
    for (const auto& [k, v] : r.headers) {
      head += k + ": " + v + "\r\n";
      if (boost::beast::iequals(k, "Content-Length")) has_length = true;
    }
    const bool chunked = chunked_ && !r.head;
    if (chunked) head += "Transfer-Encoding: chunked\r\n";
    else if (!has_length) head += "Content-Length: " + std::to_string(r.body.size()) + "\r\n";
    if (!keep_alive) head += "Connection: close\r\n";
    head += "\r\n";
    std::string body = r.head ? std::string() : r.body;
    if (chunked) {
      std::string framed;
      char len[32];
      for (std::size_t i = 0; i < body.size(); i += 4096) {
        const std::size_t n = std::min<std::size_t>(4096, body.size() - i);
        std::snprintf(len, sizeof len, "%zx\r\n", n);
        framed += len;
        framed.append(body, i, n);
        framed += "\r\n";
      }
      framed += "0\r\n\r\n";
      body = std::move(framed);
    }
    boost::system::error_code ec;
    const bool mid = fault == Fault::reset_mid_body || fault == Fault::truncate_body ||
                     fault == Fault::stall_mid_body;
    if (mid && !r.head) {
      boost::asio::write(s, boost::asio::buffer(head), ec);
      boost::asio::write(s, boost::asio::buffer(body.data(), body.size() / 2), ec);
      if (fault == Fault::reset_mid_body) reset(s);
      else if (fault == Fault::truncate_body) close(s, false);
      else sleep_for(600000);
      return false;
    }
    if (fault == Fault::interim_103) head = "HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n" + head;
    head += body;
    boost::asio::write(s, boost::asio::buffer(head), ec);
    if (fault == Fault::stray_bytes_after && !ec) {  // once the client has taken the answer
      if (!sleep_for(50)) return false;
      const std::string stray = r.head ? r.body : "\r\n";
      boost::asio::write(s, boost::asio::buffer(stray), ec);
    }
    return !ec && keep_alive && !drop_after_;
  }

  void serve(std::shared_ptr<tcp::socket> socket, std::size_t id) {
    serve_requests(*socket, id);
    close(*socket, false);  // the connection is done (a no-op if already closed)
  }

  void serve_requests(tcp::socket& s, std::size_t id) {
    namespace http = boost::beast::http;
    boost::beast::flat_buffer buf;
    for (;;) {
      http::request_parser<http::string_body> parser;
      parser.body_limit(std::uint64_t{1} << 32);
      boost::system::error_code ec;
      http::read(s, buf, parser, ec);
      if (ec) break;
      Request req = parser.release();
      const std::string method(req.method_string());
      const Fault fault = next_fault(method);
      {
        std::lock_guard lock(mu_);
        auto header = [&](http::field f) {
          const auto it = req.find(f);
          return it == req.end() ? std::string("<none>") : std::string(it->value());
        };
        seen_.push_back({method, std::string(req.target()), std::string(req[http::field::range]), id,
                         header(http::field::accept_encoding), header(http::field::authorization)});
      }
      const std::size_t now = ++in_flight_;
      std::size_t prev = max_in_flight_;
      while (now > prev && !max_in_flight_.compare_exchange_weak(prev, now)) {
      }
      struct Leave {
        std::atomic<std::size_t>& n;
        ~Leave() { --n; }
      } leave{in_flight_};
      if (delay_ms_ > 0 && !sleep_for(delay_ms_)) break;
      switch (fault) {
        case Fault::reset_before_response:
          reset(s);
          return;
        case Fault::close_before_response:
          close(s, false);
          return;
        case Fault::stall_before_response:
          sleep_for(600000);
          return;
        case Fault::status_500:
        case Fault::status_503:
        case Fault::status_429: {
          Reply r;
          r.head = req.method() == http::verb::head;
          r.status = fault == Fault::status_500 ? 500 : fault == Fault::status_503 ? 503 : 429;
          r.body = "<Error><Code>InjectedFault</Code><Message>injected by the test server</Message></Error>";
          if (fault != Fault::status_500) r.headers.emplace_back("Retry-After", "0");
          if (!respond(s, r, Fault::none, req.keep_alive())) return;
          continue;
        }
        default:
          break;
      }
      Reply r;
      try {
        r = upstream_ ? forward(req) : origin(req, fault);
      } catch (const std::exception& e) {
        r = Reply{};
        r.status = 502;
        r.body = e.what();
      }
      if (fault == Fault::status_500_after_forward) {
        r = Reply{};
        r.status = 500;
      } else if (fault == Fault::reset_after_forward) {
        reset(s);
        return;
      }
      if (!respond(s, r, fault, req.keep_alive())) return;
    }
  }

  boost::asio::io_context io_;
  tcp::acceptor acceptor_;
  std::uint16_t port_ = 0;
  std::uint16_t upstream_ = 0;
  std::thread accept_thread_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopped_ = false;
  std::vector<std::shared_ptr<tcp::socket>> sockets_;
  std::vector<std::thread> threads_;
  std::map<std::string, std::string> files_;
  std::map<std::string, Fixed> fixed_;
  std::string coding_, coding_prefix_;
  bool coding_if_accepted_ = false;
  std::atomic<std::size_t> coded_{0};
  std::deque<Queued> queue_;
  Fault default_ = Fault::none;
  std::vector<Seen> seen_;
  std::atomic<bool> chunked_{false}, drop_after_{false};
  std::atomic<std::int64_t> delay_ms_{0};
  std::atomic<std::size_t> connections_{0}, in_flight_{0}, max_in_flight_{0};
};

}  // namespace zarrcoro::test
