// Decoded regions of an array: GET /api/v1/<array>?region=... (see
// endpoints.hpp), the slice gate and the cache of opened arrays.
#include <algorithm>

#include <boost/asio/post.hpp>
#include <boost/asio/this_coro.hpp>
#include <spdlog/spdlog.h>

#include <zarrcoro/npy.hpp>

#include "endpoints.hpp"
#include "http_util.hpp"
#include "server_state.hpp"

namespace zarrcoro::server {
namespace {

using GateWaiter = ServerState::GateWaiter;

// A streamed slice's slabs aim at this size (whole chunk rows, at least one).
constexpr std::uint64_t kSlabBytes = 4 << 20;

// Opened arrays kept (the cache is emptied when it would grow past this).
constexpr std::size_t kMaxCachedArrays = 1024;

// `attachment; filename="<array name>.npy"` (".bin" for raw bytes); the
// root array is "array". Names are ASCII-only there, with RFC 6266's
// filename* for the UTF-8 original.
std::string download_name(const std::string& path, const std::string& format) {
  const std::string name = (path.empty() ? std::string("array") : path.substr(path.rfind('/') + 1)) +
                           (format == "npy" ? ".npy" : ".bin");
  std::string ascii, encoded;
  for (const unsigned char c : name) {
    ascii += c < 0x80 && c >= 0x20 && c != '"' && c != '\\' ? static_cast<char>(c) : '_';
    if (std::isalnum(c) || c == '.' || c == '-' || c == '_') encoded += static_cast<char>(c);
    else encoded += fmt::format("%{:02X}", c);
  }
  return "attachment; filename=\"" + ascii + "\"; filename*=UTF-8''" + encoded;
}

// Bytes of `region` with `item`-byte elements; nullopt on overflow.
std::optional<std::uint64_t> region_bytes(const Region& r, std::uint64_t item) {
  std::uint64_t n = item;
  for (std::size_t d = 0; d < r.start.size(); ++d)
    if (__builtin_mul_overflow(n, r.stop[d] - r.start[d], &n)) return std::nullopt;
  return n;
}

std::string join(const std::vector<std::uint64_t>& v) {
  std::string s;
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(v[i]);
  }
  return s;
}

// Where a slice with `row_bytes` per index of its first dimension is cut
// into slabs along it: at chunk boundaries (a chunk is decoded once),
// about kSlabBytes each.
std::vector<std::uint64_t> slab_cuts(const Array& array, const Region& region, std::uint64_t row_bytes) {
  if (region.start.empty()) return {0, 1};  // rank 0: one element, one slab
  if (region.stop[0] == region.start[0]) return {region.start[0], region.start[0]};  // one empty slab
  const std::uint64_t chunk = array.metadata().chunk_shape[0];
  std::uint64_t chunk_row_bytes = 0;
  if (__builtin_mul_overflow(row_bytes, chunk, &chunk_row_bytes)) chunk_row_bytes = ~std::uint64_t{0};
  const std::uint64_t chunks_per_slab = std::max<std::uint64_t>(1, kSlabBytes / std::max<std::uint64_t>(1, chunk_row_bytes));
  // Over chunk indices, not offsets: an offset near 2^64 must not wrap.
  std::vector<std::uint64_t> cuts{region.start[0]};
  const std::uint64_t last = (region.stop[0] - 1) / chunk;
  for (std::uint64_t c = region.start[0] / chunk; last - c >= chunks_per_slab;) {
    c += chunks_per_slab;
    cuts.push_back(c * chunk);
  }
  cuts.push_back(region.stop[0]);
  return cuts;
}

// Waits for one of opt.max_slices_in_flight slots (first come, first
// served) for at most opt.slice_queue_timeout. Returns a handle that gives
// the slot back when it goes, or null if the wait timed out.
awaitable<std::shared_ptr<void>> enter_slice_gate(std::shared_ptr<ServerState> self) {
  std::shared_ptr<GateWaiter> wait;
  const auto ex = co_await asio::this_coro::executor;
  {
    std::lock_guard lk(self->gate_mu);
    if (self->gate_busy < std::max<std::size_t>(1, self->opt.max_slices_in_flight)) {
      ++self->gate_busy;
    } else {
      wait = std::make_shared<GateWaiter>(ex, std::chrono::steady_clock::now() + self->opt.slice_queue_timeout);
      self->gate_queue.push_back(wait);
    }
  }
  if (wait) {
    co_await wait->timer.async_wait(kTuple);  // cancelled when granted, else expired
    std::lock_guard lk(self->gate_mu);
    if (!wait->granted) {  // timed out: still queued, leave the queue
      std::erase(self->gate_queue, wait);
      co_return nullptr;
    }
  }
  co_return std::shared_ptr<void>(self.get(), [self](void*) { self->leave_slice_gate(); });
}

}  // namespace

void ServerState::leave_slice_gate() {
  std::shared_ptr<GateWaiter> next;
  {
    std::lock_guard lk(gate_mu);
    if (gate_queue.empty()) {
      --gate_busy;
      return;
    }
    next = std::move(gate_queue.front());
    gate_queue.pop_front();
    next->granted = true;
  }
  asio::post(next->timer.get_executor(), [next] { next->timer.cancel(); });
}

awaitable<Array> open_array(std::shared_ptr<ServerState> self, std::string path) {
  const auto now = std::chrono::steady_clock::now();
  {
    std::lock_guard lk(self->arrays_mu);
    if (auto it = self->arrays.find(path); it != self->arrays.end() && now < it->second.second)
      co_return it->second.first;
  }
  Array array = co_await Array::open(self->rt, self->store, path);
  if (self->opt.metadata_max_age.count() > 0) {
    std::lock_guard lk(self->arrays_mu);
    if (self->arrays.size() >= kMaxCachedArrays) self->arrays.clear();
    self->arrays[path] = {array, now + self->opt.metadata_max_age};
  }
  co_return array;
}

awaitable<Reply> slice(std::shared_ptr<ServerState> self, std::string path, std::string query, bool head) {
  auto fail = [](http::status s, std::string why) { return reply("slice", text(s, why)); };
  const auto params = parse_query(query);
  if (!params) co_return fail(http::status::bad_request, "malformed query string");
  std::string region_text, format = "npy";
  if (auto twice = repeated_param(*params))
    co_return fail(http::status::bad_request, "parameter '" + *twice + "' given twice");
  for (const auto& [k, v] : *params) {
    if (k == "region") region_text = v;
    else if (k == "format") format = v;
    else co_return fail(http::status::bad_request, "unknown parameter '" + k + "' (expected region, format)");
  }
  if (format != "npy" && format != "raw")
    co_return fail(http::status::bad_request, "format must be npy or raw, not '" + format + "'");
  if (!path.empty())
    if (auto why = key_problem(path)) co_return fail(http::status::bad_request, "invalid path: " + *why);

  std::optional<Response> failure;
  Array array;
  try {
    array = co_await open_array(self, path);
  } catch (const StoreError& e) {  // a symlink out of the root, an unreadable file
    spdlog::debug("server: array '{}': {}", path, e.what());
    failure = not_found();
  } catch (const Error& e) {
    failure = error_response(e);
  }
  if (failure) co_return reply("slice", std::move(*failure));
  Region region;
  try {
    region = Region::parse(region_text, array.shape());
  } catch (const Error& e) {
    failure = error_response(e);
  }
  if (failure) co_return reply("slice", std::move(*failure));
  const std::vector<std::uint64_t> shape = region.shape();
  if (array.dtype().is_variable_length())
    co_return fail(http::status::bad_request,
                   "array '" + path + "' holds variable-length " + std::string(array.dtype().name()) +
                       " elements: slices (.npy or raw) are served for fixed-size data types only; GET its "
                       "chunks by key");
  // The .npy header names the real dtype (S, U, structs too); what a .npy
  // cannot hold is the request's problem: raw still serves it.
  std::string header;
  if (format == "npy") {
    try {
      header = npy_header(array.dtype(), shape);
    } catch (const Error& e) {
      failure = text(http::status::bad_request, std::string(e.what()) + " (format=raw sends the bytes alone)");
    }
    if (failure) co_return reply("slice", std::move(*failure));
  }

  const auto nbytes = region_bytes(region, array.dtype().size());
  if (!nbytes || *nbytes > self->opt.max_response_bytes)
    co_return fail(http::status::bad_request,
                   "region too large: " + (nbytes ? std::to_string(*nbytes) + " bytes" : std::string("overflow")) +
                       ", the limit is " + std::to_string(self->opt.max_response_bytes) + " bytes");
  Response res = respond(http::status::ok, "application/octet-stream");
  res.set(http::field::content_disposition, download_name(path, format));
  res.set("X-Shape", join(shape));
  res.set("X-Dtype", std::string(array.dtype().name()));
  if (head) {  // the length is known without decoding anything
    res.content_length(header.size() + *nbytes);
    co_return reply("slice", std::move(res));
  }
  // A slot among the slices being decoded, held until the last slab is.
  auto slot = co_await enter_slice_gate(self);
  if (!slot) {
    Response busy = text(http::status::service_unavailable, "busy: too many slices waiting");
    busy.set(http::field::retry_after, "1");
    co_return reply("slice", std::move(busy));
  }
  const std::uint64_t row_bytes = region.start.empty() || shape[0] == 0 ? *nbytes : *nbytes / shape[0];
  SliceBody body{array, region, std::move(header), slab_cuts(array, region, row_bytes), row_bytes, {}, std::move(slot)};
  // Reserve the memory of the two slabs in flight in the server-wide budget
  // until the response is sent.
  std::uint64_t largest = 0;
  for (std::size_t k = 0; k + 1 < body.cuts.size(); ++k)
    largest = std::max(largest, body.slab_bytes(k));
  const std::uint64_t reserved = std::min(*nbytes, 2 * largest);
  if (!self->metrics.reserve_slice_memory(reserved, self->opt.slice_memory)) {
    Response busy = text(http::status::service_unavailable, "busy: too many large slices in flight");
    busy.set(http::field::retry_after, "1");
    co_return reply("slice", std::move(busy));
  }
  std::shared_ptr<void> hold(nullptr, [self, reserved](void*) {
    self->metrics.release_slice_memory(reserved);
  });
  try {  // slab 0, decoded in the codec pool
    body.first.resize(body.slab_bytes(0));
    const Region first = body.slab(0);
    co_await array.read(first, MutableByteSpan(body.first));
  } catch (const Error& e) {
    failure = error_response(e);
  }
  if (failure) co_return reply("slice", std::move(*failure));
  co_return Reply{"slice", std::move(res), std::move(hold), std::move(body)};
}

}  // namespace zarrcoro::server
