// See send.hpp.
#include "send.hpp"

#include <chrono>
#include <ctime>
#include <type_traits>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/experimental/parallel_group.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/beast/core.hpp>
#include <spdlog/spdlog.h>

#include <zarrcoro/spawn.hpp>

#include "http_util.hpp"
#include "server_state.hpp"
#include "transmit.hpp"

namespace zarrcoro::server {
namespace {

// What is left of a body up to this size is sent from the loop (send(2) or,
// for a file range the page cache holds, sendfile(2), on the non-blocking
// socket) rather than from the transmit pool: the kernel's copy of 64 KiB
// costs the loop less than a hop to the pool and back.
constexpr std::uint64_t kSendOnLoop = 64 << 10;

// The status line and fields of `res` as Beast serializes them.
std::string header_text(Response& res) {
  http::response_serializer<Response::body_type> sr{res};
  sr.split(true);
  std::string out;
  boost::system::error_code ec;
  while (!ec && !sr.is_header_done())
    sr.next(ec, [&](boost::system::error_code&, const auto& buffers) {
      for (const auto b : beast::buffers_range_ref(buffers)) out.append(static_cast<const char*>(b.data()), b.size());
      sr.consume(beast::buffer_bytes(buffers));
    });
  return out;
}

// Sends `out` in order to the connection's socket, in steps of at most
// kTransmitStep bytes run on the transmit pool (send_step: memory by
// sendmsg, file ranges by sendfile(2); the socket is non-blocking), so
// that copies into the socket never take the loop's CPU; the last
// kSendOnLoop bytes go from the loop. While the socket is full, waits on
// the loop until it is writable, up to `deadline`. The caller has no other
// operation on the socket.
awaitable<Sent> transmit(std::shared_ptr<ServerState> self, std::shared_ptr<Conn> conn, std::vector<Segment> out,
                         std::chrono::steady_clock::time_point deadline) {
  auto& sock = conn->stream.socket();
  Sent sent;
  if (!sock.native_non_blocking()) sock.native_non_blocking(true, sent.ec);
  // The write deadline: the stream's timer covers its own writes only, and
  // steps on the pool never block; so a timer cancels the wait for a
  // writable socket, armed at the first such wait (a body that goes out
  // at once costs no timer). A handler of an earlier transmission that
  // was already queued when its timer was cancelled sees another
  // `write_seq` and does nothing.
  const std::uint64_t seq = ++conn->write_seq;
  bool armed = false;
  std::erase_if(out, [](const Segment& s) { return s.length == 0; });  // MSG_MORE must see what follows
  Progress at;
  std::uint64_t left = 0;
  for (const auto& s : out) left += s.length;
  // Counts what moved from `before` to `at`.
  auto count = [&](const Progress& before) {
    for (std::size_t i = before.segment; i <= at.segment && i < out.size(); ++i) {
      const std::uint64_t from = i == before.segment ? before.done : 0;
      const std::uint64_t to = i == at.segment ? at.done : out[i].length;
      sent.bytes += to - from;
      left -= to - from;
      if (!out[i].data) self->metrics.sent_from_file(to - from);
    }
  };
  while (!sent.ec && at.segment < out.size()) {
    // What is left of a small body goes at once, from the loop. File bytes
    // go that way only from the page cache: a range that would wait for
    // the disk goes from the pool.
    int err = kDiskWait;
    if (left <= kSendOnLoop) {
      const Progress before = at;
      err = send_step(sock.native_handle(), out, at, true);
      count(before);
    }
    if (err == kDiskWait) {
      const Progress before = at;
      self->metrics.transmit_step_on_pool();
      auto step = [fd = sock.native_handle(), segments = &out, progress = &at] {
        return send_step(fd, *segments, *progress);
      };
      err = co_await self->inbox->run(self->transmit_pool, std::move(step), use_awaitable);
      count(before);
    }
    const bool late = std::chrono::steady_clock::now() >= deadline;
    if (err == EAGAIN && late) {
      sent.ec = make_error_code(beast::error::timeout);
    } else if (err == EAGAIN) {
      if (!armed) {
        armed = true;
        conn->timer.expires_at(deadline);
        auto expire = [conn, seq](boost::system::error_code ec) {
          if (ec || conn->write_seq != seq) return;
          boost::system::error_code ignored;
          conn->stream.socket().cancel(ignored);
        };
        conn->timer.async_wait(std::move(expire));
      }
      auto [ec] = co_await sock.async_wait(tcp::socket::wait_write, kTuple);
      if (ec) sent.ec = std::chrono::steady_clock::now() >= deadline ? make_error_code(beast::error::timeout) : ec;
    } else if (err != 0) {  // the socket failed, or the file shrank under us (ENODATA)
      sent.ec = boost::system::error_code(err, boost::system::system_category());
    }
  }
  if (armed) conn->timer.cancel();
  ++conn->write_seq;  // an expiry already queued must not cancel what the connection does next
  co_return sent;
}

// transmit, failing with system_error when it fails (for a parallel group).
awaitable<void> transmit_or_throw(std::shared_ptr<ServerState> self, std::shared_ptr<Conn> conn,
                                  std::vector<Segment> out, std::chrono::steady_clock::time_point deadline,
                                  std::shared_ptr<Sent> result) {
  // A cancellation reaches transmit's waits as an error code, so that it
  // always ends its write deadline and reports the bytes sent.
  co_await asio::this_coro::throw_if_cancelled(false);
  *result = co_await transmit(self, conn, std::move(out), deadline);
  if (result->ec) throw boost::system::system_error(result->ec);
}

bool is_cancelled(const std::exception_ptr& e) {
  if (!e) return false;
  try {
    std::rethrow_exception(e);
  } catch (const Cancelled&) {
    return true;
  } catch (...) {
    return false;
  }
}

// Sends `head` and the pieces of `body` (texts, and file ranges by
// sendfile(2): no copy in user space).
awaitable<Sent> send_file(std::shared_ptr<ServerState> self, std::shared_ptr<Conn> conn, std::string head,
                          FileBody body, std::chrono::steady_clock::time_point deadline) {
  std::vector<Segment> out{Segment::of(head)};
  for (const auto& p : body.pieces)
    out.push_back(p.text.empty() ? Segment{nullptr, body.file->fd(), p.offset, p.length} : Segment::of(p.text));
  co_return co_await transmit(self, conn, std::move(out), deadline);
}

// Sends `head`, the .npy header and the slabs of `body` in order, each
// sent while the next is decoded in the codec pool (two slabs in memory
// at most). A slab that fails to decode after the header went out can
// only end the connection: the client sees a short body.
awaitable<Sent> send_slice(std::shared_ptr<ServerState> self, std::shared_ptr<Conn> conn, std::string head,
                           SliceBody body, std::chrono::steady_clock::time_point deadline) {
  head += body.npy_header;
  Sent sent;
  Bytes current = std::move(body.first), next;
  const std::size_t slabs = body.cuts.size() - 1;
  for (std::size_t k = 0; k < slabs && !sent.ec; ++k) {
    std::vector<Segment> out{Segment{current.data(), -1, 0, current.size()}};
    if (k == 0) out.insert(out.begin(), Segment::of(head));
    if (k + 1 == slabs) {
      body.slot.reset();  // nothing left to decode: another slice may start
      const Sent s = co_await transmit(self, conn, std::move(out), deadline);
      sent = {s.ec, sent.bytes + s.bytes};
      break;
    }
    const Region region = body.slab(k + 1);
    next.resize(body.slab_bytes(k + 1));
    const MutableByteSpan into(next);
    // A failed write (client gone, write timeout) cancels the decode,
    // and shutdown's deadline both.
    const auto ex = conn->stream.get_executor();
    auto result = std::make_shared<Sent>();
    auto write = co_spawn_safe(ex, transmit_or_throw(self, conn, std::move(out), deadline, result), asio::deferred);
    auto decode = co_spawn_safe(ex, body.array.read(region, into), asio::deferred);
    auto group = asio::experimental::make_parallel_group(std::move(write), std::move(decode));
    auto token = asio::bind_cancellation_slot(conn->cancel_work.slot(), use_awaitable);
    auto [order, wex, failure] = co_await group.async_wait(asio::experimental::wait_for_one_error(), token);
    sent = {result->ec, sent.bytes + result->bytes};
    if (is_cancelled(failure)) {
      self->metrics.request_cancelled();
    } else if (failure) {  // a slab that cannot be decoded: the connection ends, the body short
      try {
        std::rethrow_exception(failure);
      } catch (const std::exception& e) {
        spdlog::warn("server: slice of '{}' failed after its header was sent: {}", body.array.path(), e.what());
      }
      if (!sent.ec) sent.ec = make_error_code(asio::error::connection_aborted);
    }
    if (!sent.ec && wex) sent.ec = make_error_code(asio::error::operation_aborted);
    std::swap(current, next);
  }
  co_return sent;
}

}  // namespace

void add_common(Response& res) {
  thread_local std::time_t last = 0;  // formatted once a second per thread
  thread_local std::string date;
  if (const std::time_t now = std::time(nullptr); now != last) {
    last = now;
    date = http_date(std::chrono::system_clock::from_time_t(now));
  }
  res.set(http::field::date, date);
  res.set(http::field::access_control_allow_origin, "*");
  res.set(http::field::access_control_expose_headers,
          "Accept-Ranges, Content-Length, Content-Range, ETag, Last-Modified, X-Shape, X-Dtype");
}

awaitable<bool> send(std::shared_ptr<ServerState> self, std::shared_ptr<Conn> conn, Reply r, RequestLine req,
                     bool keep_alive, bool counted, tcp::endpoint peer) {
  const auto start = std::chrono::steady_clock::now();
  Response& res = r.res;
  res.version(req.version);
  res.keep_alive(keep_alive);
  add_common(res);
  const auto status = res.result();
  const std::uint64_t body = std::visit(
      [&](const auto& b) -> std::uint64_t {
        if constexpr (std::is_same_v<std::decay_t<decltype(b)>, std::monostate>) return res.body().size();
        else return b.size();
      },
      r.body);
  if (status != http::status::no_content && status != http::status::not_modified &&
      res.find(http::field::content_length) == res.end())
    res.content_length(body);
  if (req.method == http::verb::head) {
    res.body().clear();
    r.body = std::monostate{};
  }
  const auto deadline = std::chrono::steady_clock::now() + self->opt.write_timeout + std::chrono::seconds(body >> 20);
  Sent sent;
  std::string head = header_text(res);
  if (std::holds_alternative<std::monostate>(r.body)) {  // header and body in one sendmsg
    const auto& b = res.body();
    std::vector<Segment> out{Segment::of(head), Segment{b.data(), -1, 0, b.size()}};
    sent = co_await transmit(self, conn, std::move(out), deadline);
  } else {
    if (auto* file = std::get_if<FileBody>(&r.body))
      sent = co_await send_file(self, conn, std::move(head), std::move(*file), deadline);
    else
      sent = co_await send_slice(self, conn, std::move(head), std::move(std::get<SliceBody>(r.body)), deadline);
  }
  if (sent.ec) self->metrics.response_aborted();
  const auto ec = sent.ec;
  if (ec == beast::error::timeout) self->metrics.timed_out();
  if (counted) self->metrics.request_finished(r.route, res.result_int(), sent.bytes);
  else self->metrics.response_without_request(r.route, res.result_int(), sent.bytes);
  if (self->opt.access_log)
    if (auto log = spdlog::get("access"))
      log->info("{} \"{} {}\" {} {} {:.3f}ms{}", peer.address().to_string(), std::string(http::to_string(req.method)),
                req.target, res.result_int(), sent.bytes,
                std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count(),
                ec ? " (" + ec.message() + ")" : "");
  co_return !ec;
}

}  // namespace zarrcoro::server
