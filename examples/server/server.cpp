#include "server.hpp"

#include <pthread.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <csignal>
#include <cstring>
#include <ctime>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <variant>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/experimental/parallel_group.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <spdlog/spdlog.h>

#include <zarrcoro/array.hpp>
#include <zarrcoro/error.hpp>
#include <zarrcoro/info.hpp>
#include <zarrcoro/npy.hpp>
#include <zarrcoro/spawn.hpp>
#include <zarrcoro/store/filesystem.hpp>

#include "http_util.hpp"
#include "loop_inbox.hpp"
#include "loop_priority.hpp"
#include "loop_round.hpp"
#include "transmit.hpp"
#include "viewer_assets.hpp"

namespace zarrcoro::server {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace fs = std::filesystem;
using tcp = asio::ip::tcp;
using asio::awaitable;
using asio::use_awaitable;

namespace {

using Request = http::request<http::string_body>;
using Response = http::response<http::vector_body<std::byte, UninitAllocator<std::byte>>>;

constexpr auto kTuple = asio::as_tuple(use_awaitable);

// ---- responses -----------------------------------------------------------

Response respond(http::status status, std::string_view content_type = {}) {
  Response res{status, 11};
  if (!content_type.empty()) res.set(http::field::content_type, content_type);
  return res;
}

void set_body(Response& res, std::string_view text) {
  const auto* p = reinterpret_cast<const std::byte*>(text.data());
  res.body().assign(p, p + text.size());
}

// A short plain-text reason: every error the server sends looks like this.
Response text(http::status status, std::string_view reason) {
  Response res = respond(status, "text/plain; charset=utf-8");
  set_body(res, std::string(reason) + "\n");
  return res;
}

Response not_found() { return text(http::status::not_found, "not found"); }

// An engine error as a response. Store errors carry file paths: logged, not sent.
Response error_response(const Error& e) {
  switch (e.code()) {
    case Errc::invalid_argument: return text(http::status::bad_request, e.what());
    case Errc::not_found: return text(http::status::not_found, e.what());
    case Errc::already_exists: return text(http::status::conflict, e.what());
    case Errc::unsupported: return text(http::status::unprocessable_entity, e.what());
    case Errc::cancelled: return text(http::status::service_unavailable, "cancelled");
    case Errc::store_io:
      spdlog::warn("store error: {}", e.what());
      return text(http::status::internal_server_error, "store error");
    default:  // invalid metadata, corrupt chunk: the data is at fault, say where
      spdlog::warn("{}", e.what());
      return text(http::status::internal_server_error, e.what());
  }
}

// Why `key` is not a valid store key, or nullopt if it is.
std::optional<std::string> key_problem(const std::string& key) {
  try {
    validate_key(key);
    return std::nullopt;
  } catch (const Error& e) {
    return std::string(e.detail());
  }
}

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

std::string members_json(const std::vector<NodeEntry>& found) {
  nlohmann::json list = nlohmann::json::array();
  for (const auto& m : found)
    list.push_back({{"name", m.name},
                    {"node_type", m.node_type == NodeType::array ? "array" : "group"},
                    {"zarr_format", m.zarr_format},
                    {"implicit", m.implicit}});
  return nlohmann::json{{"members", std::move(list)}}.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) +
         "\n";
}

std::string html_escape(std::string_view s) {
  std::string out;
  for (const char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

// A path as a URL path: every byte but unreserved ones and '/' percent-encoded.
std::string url_path(std::string_view s) {
  std::string out;
  for (const unsigned char c : s) {
    if (std::isalnum(c) || c == '/' || c == '.' || c == '-' || c == '_' || c == '~') out += static_cast<char>(c);
    else out += fmt::format("%{:02X}", c);
  }
  return out;
}

struct DirEntry {
  std::string name;
  bool dir;
};

// A directory's page: for people, the members of the group there (with
// links to their pages, info and .npy downloads); for tools (fsspec's HTTP
// listing reads the links of a page), a link to every entry.
std::string index_html(const std::string& dir, const std::optional<std::vector<NodeEntry>>& members,
                       const std::vector<DirEntry>& entries) {
  const std::string title = "/" + (dir.empty() ? "" : dir + "/");
  const std::string prefix = dir.empty() ? "" : dir + "/";
  // Links to the node's info (only where there is a node: a group, or an
  // array's metadata), its members and the directory above.
  const bool node = members || std::any_of(entries.begin(), entries.end(), [](const DirEntry& e) {
                      return !e.dir && (e.name == "zarr.json" || e.name == ".zarray" || e.name == ".zgroup");
                    });
  std::vector<std::string> links;
  if (node) links.push_back("<a href=\"/api/v1/" + url_path(prefix) + "info\">info</a>");
  if (members) links.push_back("<a href=\"/api/v1/" + url_path(prefix) + "members?recursive=1\">members (JSON)</a>");
  if (!dir.empty()) {
    const auto up = dir.rfind('/');
    links.push_back("<a href=\"/" + url_path(up == std::string::npos ? "" : dir.substr(0, up) + "/") + "\">up</a>");
  }
  std::string h = "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>zarrcoro " + html_escape(title) +
                  "</title></head>\n<body>\n<h1>" + html_escape(title) + "</h1>\n";
  for (std::size_t i = 0; i < links.size(); ++i)
    h += (i == 0 ? "<p>" : " &middot; ") + links[i] + (i + 1 == links.size() ? "</p>\n" : "");
  if (members) {
    h += "<h2>Members</h2>\n<ul>\n";
    for (const auto& m : *members) {
      const std::string path = prefix + m.name;
      h += "<li><a href=\"/" + url_path(path) + "/\">" + html_escape(m.name) + "/</a> ";
      if (m.node_type == NodeType::group) h += "group</li>\n";
      else
        h += "array: <a href=\"/api/v1/" + url_path(path) + "/info\">info</a>, <a href=\"/api/v1/" + url_path(path) +
             "?format=npy\">.npy</a>, <a href=\"/view/" + url_path(path) + "\">view</a></li>\n";
    }
    if (members->empty()) h += "<li>(none)</li>\n";
    h += "</ul>\n";
  }
  h += "<h2>Keys</h2>\n<ul>\n";
  for (const auto& e : entries) {
    const std::string name = e.name + (e.dir ? "/" : "");
    h += "<li><a href=\"/" + url_path(prefix + name) + "\">" + html_escape(name) + "</a></li>\n";
  }
  return h + "</ul>\n</body></html>\n";
}

// A query string holding at most the flag `name` (=1|true|0|false), read
// into `value`; a 400 response for anything else.
std::optional<Response> flag_param(const std::string& query, const std::string& name, bool& value) {
  const auto params = parse_query(query);
  if (!params) return text(http::status::bad_request, "malformed query string");
  if (auto twice = repeated_param(*params)) return text(http::status::bad_request, "parameter '" + *twice + "' given twice");
  for (const auto& [k, v] : *params) {
    if (k == name && (v == "1" || v == "true")) value = true;
    else if (k == name && (v == "0" || v == "false")) value = false;
    else {
      std::string what = "unknown parameter '";
      what.append(k).append("=").append(v).append("' (expected ").append(name).append("=1|0)");
      return text(http::status::bad_request, what);
    }
  }
  return std::nullopt;
}

// ---- the slice viewer (/view/) ----------------------------------------------

// What the viewer's pages may load: their own scripts, styles and API only.
constexpr std::string_view kViewerPolicy =
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

// A small page of the viewer's (a list of arrays, or why there is nothing to
// view); `body` is HTML whose names are escaped already.
std::string viewer_page(std::string_view title, std::string_view body) {
  return "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>" + html_escape(title) +
         "</title><link rel=\"icon\" href=\"data:,\"><link rel=\"stylesheet\" href=\"/view/__static/viewer.css\">"
         "</head>\n<body class=\"page\">\n<header><a href=\"/view/\">arrays</a> <a href=\"/\">directory</a></header>\n"
         "<div class=\"page-body\">\n<h1>" +
         html_escape(title) + "</h1>\n" + std::string(body) + "</div>\n</body></html>\n";
}

// A viewer page as a response (never cached: it says what is there now).
Response viewer_page_response(http::status status, std::string_view title, std::string_view body) {
  Response res = respond(status, "text/html; charset=utf-8");
  set_body(res, viewer_page(title, body));
  res.set(http::field::cache_control, "no-store");
  res.set("Content-Security-Policy", kViewerPolicy);
  return res;
}

// The arrays among `members` (paths relative to `group`) as a list of links to their viewers.
std::string array_links(const std::string& group, const std::vector<NodeEntry>& members) {
  std::string h;
  for (const auto& m : members) {
    if (m.node_type != NodeType::array) continue;
    const std::string path = group.empty() ? m.name : group + "/" + m.name;
    h += "<li><a href=\"/view/" + url_path(path) + "\">" + html_escape(path) + "</a></li>\n";
  }
  return h.empty() ? std::string() : "<ul>\n" + h + "</ul>\n";
}

// An embedded file of the viewer, validated by its ETag (If-None-Match: 304).
Response viewer_asset(const ViewerAsset& a, const std::string& if_none_match) {
  Response res = respond(http::status::ok, a.content_type);
  res.set(http::field::etag, a.etag);
  res.set(http::field::cache_control, "no-cache");  // revalidated: a new server may bring new files
  res.set("X-Content-Type-Options", "nosniff");
  if (a.name.ends_with(".html")) res.set("Content-Security-Policy", kViewerPolicy);
  if (!if_none_match.empty() && etag_matches(if_none_match, a.etag)) {
    res.result(http::status::not_modified);
    res.erase(http::field::content_type);
    return res;
  }
  set_body(res, a.body);
  return res;
}

bool is_metadata_key(std::string_view key) {
  const auto slash = key.rfind('/');
  const std::string_view name = slash == std::string_view::npos ? key : key.substr(slash + 1);
  return name == "zarr.json" || name == ".zarray" || name == ".zgroup" || name == ".zattrs" || name == ".zmetadata";
}

// ---- files -----------------------------------------------------------------

// Bodies up to this size are read into memory and written with the header in
// one system call on the loop; larger ones leave by sendfile(2) from the
// transmit pool, all but their last kSendOnLoop bytes (see below).
constexpr std::uint64_t kInMemoryBody = 16 << 10;
// What is left of a body up to this size is sent from the loop (send(2) or,
// for a file range the page cache holds, sendfile(2), on the non-blocking
// socket) rather than from the transmit pool: the kernel's copy of 64 KiB
// costs the loop less than a hop to the pool and back.
constexpr std::uint64_t kSendOnLoop = 64 << 10;
// A streamed slice's slabs aim at this size (whole chunk rows, at least one).
constexpr std::uint64_t kSlabBytes = 4 << 20;

// The entity tag of a file: a hash (FNV-1a, stable across restarts) of its
// store generation (device, inode, size, modification time), so that a value
// renamed into place is a new tag even within one tick of the file clock.
// None ("") where the generation is unknown (a file system that keeps only
// coarse times): no tag is better than one that outlives a rewrite.
std::string etag_of(const FilesystemStore::OpenFile& f) {
  if (f.generation().unknown()) return {};
  std::uint64_t h = 0xcbf29ce484222325u;
  for (const char c : f.generation().token) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3u;
  char etag[48];
  std::snprintf(etag, sizeof etag, "\"%016llx-%llx\"", static_cast<unsigned long long>(h),
                static_cast<unsigned long long>(f.size()));
  return etag;
}

// Opened arrays kept (the cache is emptied when it would grow past this).
constexpr std::size_t kMaxCachedArrays = 1024;

// The boundary of multipart/byteranges bodies: not in any part's header.
constexpr std::string_view kBoundary = "zarrcoro-byteranges-3d9f1c0a7b25e864";

// True if `path` (a valid key or "") resolves, through symlinks, inside `root`.
bool inside(const fs::path& root, const std::string& path) {
  std::error_code ec;
  const fs::path p = fs::weakly_canonical(root / path, ec);
  const auto rel = p.lexically_relative(root);
  return !ec && !rel.empty() && *rel.begin() != "..";
}

// The sorted names of the subdirectories of `path` under `root` (a group's
// candidate children). Blocking, but a group's directory is small.
std::vector<std::string> subdirectories(const fs::path& root, const std::string& path) {
  std::error_code ec;
  const fs::path dir = fs::weakly_canonical(root / path, ec);
  std::vector<std::string> names;
  if (ec || !inside(root, path)) return names;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.is_directory(ec)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

// The entries of the directory `path` under `root`, sorted by name; nullopt
// if it is no directory inside the root. Blocking (a directory of chunks
// may be large): run it off the loop.
std::optional<std::vector<DirEntry>> directory_entries(const fs::path& root, const std::string& path) {
  std::error_code ec;
  const fs::path dir = fs::weakly_canonical(root / path, ec);
  if (ec || !inside(root, path) || !fs::is_directory(dir, ec)) return std::nullopt;
  std::vector<DirEntry> out;
  for (const auto& e : fs::directory_iterator(dir, ec)) out.push_back({e.path().filename().string(), e.is_directory(ec)});
  std::sort(out.begin(), out.end(), [](const DirEntry& a, const DirEntry& b) { return a.name < b.name; });
  return out;
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

// Logs an exception that ended a detached coroutine (co_spawn would drop it).
void log_exception(std::exception_ptr e) {
  if (!e) return;
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    spdlog::error("server: connection failed: {}", x.what());
  }
}

tcp::endpoint parse_listen(const std::string& text) {
  const auto colon = text.rfind(':');
  if (colon == std::string::npos) throw std::invalid_argument("--listen: expected HOST:PORT, got '" + text + "'");
  std::string host = text.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  unsigned port = 0;
  const std::string p = text.substr(colon + 1);
  auto [end, ec] = std::from_chars(p.data(), p.data() + p.size(), port);
  if (ec != std::errc() || end != p.data() + p.size() || port > 65535)
    throw std::invalid_argument("--listen: bad port '" + p + "'");
  boost::system::error_code aec;
  const auto address = asio::ip::make_address(host, aec);
  if (!aec) return {address, static_cast<unsigned short>(port)};
  asio::io_context io;  // a host name: its first IPv4 address, else its first
  const auto found = tcp::resolver(io).resolve(host, p, aec);
  if (aec || found.empty())
    throw std::invalid_argument("--listen: cannot resolve '" + host + "'" + (aec ? ": " + aec.message() : ""));
  for (const auto& entry : found)
    if (entry.endpoint().address().is_v4()) return entry.endpoint();
  return found.begin()->endpoint();
}

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

// A key's file sent from its descriptor: `pieces` in order, each a short
// text (a multipart part's header) or a range of the file (sendfile).
struct FileBody {
  struct Piece {
    std::string text;
    std::uint64_t offset = 0, length = 0;  // a file range when `text` is empty
  };
  std::shared_ptr<const FilesystemStore::OpenFile> file;
  std::vector<Piece> pieces;

  std::uint64_t size() const {
    std::uint64_t n = 0;
    for (const auto& p : pieces) n += p.text.empty() ? p.length : p.text.size();
    return n;
  }
};

// A slice sent slab by slab: the region's rows [cuts[k], cuts[k + 1]) along
// its first dimension (whole chunk rows, contiguous in C order), each decoded
// in the codec pool while the previous one is written. Slab 0 is decoded
// before the header goes out, so that most failures still get a status.
struct SliceBody {
  Array array;
  Region region;
  std::string npy_header;               // empty for format=raw
  std::vector<std::uint64_t> cuts;      // indices along dimension 0, first = region.start[0]
  std::uint64_t row_bytes = 0;          // bytes of one index along dimension 0
  Bytes first;                          // slab 0, decoded
  std::shared_ptr<void> slot;           // of the slice gate: given back once the last slab is decoded

  std::uint64_t size() const { return npy_header.size() + (cuts.back() - cuts.front()) * row_bytes; }
  std::uint64_t slab_bytes(std::size_t k) const { return (cuts[k + 1] - cuts[k]) * row_bytes; }
  Region slab(std::size_t k) const {
    Region r = region;
    if (!r.start.empty()) r.start[0] = cuts[k], r.stop[0] = cuts[k + 1];
    return r;
  }
};

// A handler's answer: the metrics route label, the response (its body in
// memory, or in `body`), and whatever must live until the response is sent
// (a slice's memory reservation).
struct Reply {
  std::string route;
  Response res;
  std::shared_ptr<void> hold;
  std::variant<std::monostate, FileBody, SliceBody> body;  // monostate: res.body()
};

Reply reply(std::string route, Response res) { return Reply{std::move(route), std::move(res), nullptr, {}}; }

// How much of a response went out, and why it stopped short.
struct Sent {
  boost::system::error_code ec;
  std::uint64_t bytes = 0;
};

// The headers that make a key's response conditional or partial.
struct Preconditions {
  std::string range, if_range, if_none_match, if_modified_since;

  static Preconditions of(const Request& req) {
    return {std::string(req[http::field::range]), std::string(req[http::field::if_range]),
            std::string(req[http::field::if_none_match]), std::string(req[http::field::if_modified_since])};
  }
};

// What the response and the access log need of a request.
struct RequestLine {
  http::verb method = http::verb::get;
  unsigned version = 11;
  std::string target;

  static RequestLine of(const Request& req) { return {req.method(), req.version(), std::string(req.target())}; }
};

}  // namespace

// ---- the server -------------------------------------------------------------

struct Server::Impl : std::enable_shared_from_this<Impl> {
  Impl(Runtime& r, ServerOptions o)
      : rt(r),
        opt(std::move(o)),
        store(std::make_shared<FilesystemStore>(rt.io_executor(), opt.root)),
        strand(asio::make_strand(rt.io_context())),
        acceptor(strand),
        deadline(strand),
        transmit_threads(opt.transmit_threads ? opt.transmit_threads : std::max(1u, std::thread::hardware_concurrency() / 2)),
        transmit_pool(transmit_threads),
        inbox(std::make_shared<LoopInbox>(rt.io_context())),
        round(opt.loop_round_budget.count() > 0 ? std::make_shared<LoopRound>(rt.io_context(), opt.loop_round_budget)
                                                : nullptr),
        priority(opt.loop_realtime == LoopRealtime::off
                     ? nullptr
                     : std::make_shared<LoopPriority>(rt.io_context(), opt.loop_realtime == LoopRealtime::on)) {
    // sendfile(2) has no MSG_NOSIGNAL: a client gone mid-body must not kill us.
    std::signal(SIGPIPE, SIG_IGN);
    for (unsigned i = 0; i < transmit_threads; ++i)  // named for top -H and perf (best effort)
      asio::post(transmit_pool, [] { ::pthread_setname_np(::pthread_self(), "zarrcoro-tx"); });
    const tcp::endpoint ep = parse_listen(opt.listen);
    boost::system::error_code ec;
    acceptor.open(ep.protocol(), ec);
    if (!ec) acceptor.set_option(asio::socket_base::reuse_address(true), ec);
    if (!ec) acceptor.bind(ep, ec);
    if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) throw std::runtime_error("--listen " + opt.listen + ": cannot listen there: " + ec.message());
    endpoint = acceptor.local_endpoint();
  }

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

  // -- connections --

  static awaitable<void> accept_loop(std::shared_ptr<Impl> self) {
    for (;;) {
      auto [ec, socket] = co_await self->acceptor.async_accept(asio::make_strand(self->rt.io_context()), kTuple);
      if (self->stopping || ec == asio::error::operation_aborted) co_return;
      if (ec) {  // e.g. out of file descriptors: wait a little instead of spinning
        spdlog::warn("server: accept failed: {}", ec.message());
        asio::steady_timer pause(self->strand, std::chrono::milliseconds(50));
        co_await pause.async_wait(kTuple);
        continue;
      }
      boost::system::error_code ignored;
      socket.set_option(tcp::no_delay(true), ignored);
      auto conn = std::make_shared<Conn>(tcp::socket(std::move(socket)));
      bool admitted = false;
      {
        std::lock_guard lk(self->mu);
        if (self->conns.size() < self->opt.max_connections) {
          self->conns.emplace(conn.get(), conn);
          admitted = true;
        }
      }
      const auto ex = conn->stream.get_executor();
      if (admitted) {
        self->metrics.connection_opened();
        asio::co_spawn(ex, session(self, conn), log_exception);
      } else {
        self->metrics.connection_rejected();
        asio::co_spawn(ex, reject(self, conn), log_exception);
      }
    }
  }

  // Over the connection cap: a 503 written without reading the request.
  static awaitable<void> reject(std::shared_ptr<Impl> self, std::shared_ptr<Conn> conn) {
    static constexpr std::string_view kBusy =
        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nContent-Length: 21\r\n"
        "Retry-After: 1\r\nConnection: close\r\n\r\ntoo many connections\n";
    conn->stream.expires_after(std::chrono::seconds(1));
    auto [ec, n] = co_await asio::async_write(conn->stream, asio::buffer(kBusy), kTuple);
    self->metrics.response_without_request("rejected", 503, n);
    boost::system::error_code ignored;
    conn->stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
    conn->stream.close();
  }

  // Removes a finished connection; the last one after shutdown() calls on_stopped.
  void finished(Conn* conn) {
    {
      std::lock_guard lk(mu);
      conns.erase(conn);
    }
    metrics.connection_closed();
    if (stopping) check_drained();
  }

  // After shutdown(): once no connection is left, calls the waiting callbacks.
  void check_drained() {
    std::vector<std::function<void()>> callbacks;
    {
      std::lock_guard lk(mu);
      if (!conns.empty()) return;
      callbacks.swap(on_stopped);
    }
    if (callbacks.empty()) return;
    asio::post(strand, [self = shared_from_this(), callbacks = std::move(callbacks)] {
      self->deadline.cancel();
      for (const auto& f : callbacks) f();
    });
  }

  static awaitable<void> session(std::shared_ptr<Impl> self, std::shared_ptr<Conn> conn) {
    struct Finish {  // runs however the coroutine ends
      Impl* impl;
      Conn* conn;
      ~Finish() { impl->finished(conn); }
    } finish{self.get(), conn.get()};
    const ServerOptions& opt = self->opt;
    auto& stream = conn->stream;
    boost::system::error_code ec;
    const auto peer = stream.socket().remote_endpoint(ec);
    beast::flat_buffer buffer;

    for (;;) {
      // 1. Idle: wait (idle_timeout) for the first byte of the next request.
      if (buffer.size() == 0) {
        if (self->stopping) break;
        conn->idle = true;
        stream.expires_after(opt.idle_timeout);
        auto [rec, n] = co_await stream.async_read_some(buffer.prepare(4096), kTuple);
        conn->idle = false;
        if (rec == beast::error::timeout) self->metrics.timed_out();
        if (rec) break;  // closed by the client, idle timeout, or shutdown
        buffer.commit(n);
      }

      // 2. The header, within header_timeout of its first byte (slowloris).
      http::request_parser<http::string_body> parser;
      parser.header_limit(opt.max_header_bytes);
      parser.body_limit(opt.max_body_bytes);
      // Beast's header_limit bounds each parse step, not the whole header, so
      // the header is read step by step and its bytes are counted here.
      stream.expires_after(opt.header_timeout);
      boost::system::error_code hec;
      for (std::size_t header_bytes = 0; !hec && !parser.is_header_done();) {
        auto [rec, n] = co_await http::async_read_some(stream, buffer, parser, kTuple);
        hec = rec;
        header_bytes += n;
        if (!hec && header_bytes > opt.max_header_bytes) hec = http::error::header_limit;
      }
      if (hec == beast::error::timeout) {  // tcp_stream has closed the socket
        self->metrics.timed_out();
        break;
      }
      if (hec == http::error::end_of_stream) break;
      if (hec) {
        // (Arguments are named before co_await: gcc 12 mishandles temporaries there.)
        // A declared Content-Length over the body limit fails here already.
        const auto status = hec == http::error::header_limit ? http::status::request_header_fields_too_large
                            : hec == http::error::body_limit ? http::status::payload_too_large
                                                             : http::status::bad_request;
        std::string reason = hec == http::error::header_limit ? "request header too large"
                             : hec == http::error::body_limit ? "request body too large"
                                                              : "malformed request: " + hec.message();
        co_await send_raw(self, conn, status, std::move(reason));
        break;
      }
      Request& head = parser.get();
      const http::verb method = head.method();
      if (method != http::verb::get && method != http::verb::head && method != http::verb::options) {
        Response res = text(http::status::method_not_allowed, "method not allowed (GET, HEAD, OPTIONS)");
        res.set(http::field::allow, "GET, HEAD, OPTIONS");
        Reply r = reply("invalid", std::move(res));
        RequestLine line = RequestLine::of(head);
        co_await send(self, conn, std::move(r), std::move(line), false, false, peer);
        break;  // the body, if any, was not read: the connection cannot be reused
      }

      // 3. A body (unusual for GET) is read within body_timeout and ignored.
      if (!parser.is_done()) {
        stream.expires_after(opt.body_timeout);
        auto [bec, bn] = co_await http::async_read(stream, buffer, parser, kTuple);
        if (bec == beast::error::timeout) {
          self->metrics.timed_out();
          break;
        }
        if (bec) {
          const bool too_big = bec == http::error::body_limit;
          const auto status = too_big ? http::status::payload_too_large : http::status::bad_request;
          std::string reason = too_big ? "request body too large" : "malformed request body: " + bec.message();
          co_await send_raw(self, conn, status, std::move(reason));
          break;
        }
      }
      const Request& req = parser.get();

      // 4. Answer, once the loop's round has room for it (LoopRound). A
      // health check skips the line: answering it costs less than waiting,
      // and a load balancer must not take a busy server for a dead one.
      if (self->round && req.target() != "/healthz" && self->round->spent()) {
        self->metrics.request_deferred();
        co_await self->round->async_wait(use_awaitable);
      }
      self->metrics.request_started();
      Reply r;
      std::string target(req.target());
      Preconditions pre = Preconditions::of(req);
      std::string cors(req[http::field::access_control_request_headers]);
      // An API request (one that decodes) is cancelled when its client
      // goes away meanwhile, or at shutdown's deadline.
      const bool decodes = target.starts_with("/api/");
      std::exception_ptr failed;
      bool gone = false;
      if (decodes) {
        const auto ex = stream.get_executor();
        auto work = co_spawn_safe(ex, self->handle(req.method(), std::move(target), std::move(pre), std::move(cors)),
                                  asio::deferred);
        auto watch = co_spawn_safe(ex, client_gone(conn), asio::deferred);
        auto group = asio::experimental::make_parallel_group(std::move(work), std::move(watch));
        auto token = asio::bind_cancellation_slot(conn->cancel_work.slot(), use_awaitable);
        const UntilReplyOrGone until;
        auto [order, e, answer, watch_error, client_left] = co_await group.async_wait(until, token);
        failed = e;
        gone = client_left;
        r = std::move(answer);
      } else {
        try {
          r = co_await self->handle(req.method(), std::move(target), std::move(pre), std::move(cors));
        } catch (...) {
          failed = std::current_exception();
        }
      }
      if (gone) {  // nobody to answer
        self->metrics.request_cancelled();
        self->metrics.request_finished("cancelled", 499, 0);
        break;
      }
      if (failed) {
        try {
          std::rethrow_exception(failed);
        } catch (const std::exception& e) {
          spdlog::error("server: {} {}: {}", std::string(req.method_string()), std::string(req.target()), e.what());
        }
        r = reply("error", text(http::status::internal_server_error, "internal error"));
      }
      const bool keep_alive = req.keep_alive() && !self->stopping;
      RequestLine line = RequestLine::of(req);
      const bool ok = co_await send(self, conn, std::move(r), std::move(line), keep_alive, true, peer);
      if (!ok || !keep_alive) break;
    }
    stream.socket().shutdown(tcp::socket::shutdown_send, ec);
    stream.close();
  }

  // Completes true when the client has closed its end or the connection
  // failed, false when it sent more (a pipelined request) or was cancelled.
  // A client that only shut down its sending side looks the same as one
  // that left: like nginx for proxied requests, the request is abandoned.
  static awaitable<bool> client_gone(std::shared_ptr<Conn> conn) {
    auto& sock = conn->stream.socket();
    auto [ec] = co_await sock.async_wait(tcp::socket::wait_read, kTuple);
    if (ec == asio::error::operation_aborted) co_return false;
    if (ec) co_return true;
    char byte;
    const auto n = ::recv(sock.native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    co_return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
  }

  // The wait of a request beside client_gone: done when the reply is ready
  // (the watch is cancelled) or the client is gone (the request's work is).
  struct UntilReplyOrGone {
    asio::cancellation_type operator()(const std::exception_ptr&, const Reply&) const {
      return asio::cancellation_type::terminal;
    }
    asio::cancellation_type operator()(const std::exception_ptr& e, bool gone) const {
      return !e && gone ? asio::cancellation_type::terminal : asio::cancellation_type::none;
    }
  };

  // Writes a response to a request that could not be parsed.
  static awaitable<void> send_raw(std::shared_ptr<Impl> self, std::shared_ptr<Conn> conn, http::status status,
                                  std::string reason) {
    Response res = text(status, reason);
    res.keep_alive(false);
    add_common(res);
    res.content_length(res.body().size());
    conn->stream.expires_after(std::chrono::seconds(5));
    auto [ec, n] = co_await http::async_write(conn->stream, res, kTuple);
    self->metrics.response_without_request("invalid", static_cast<unsigned>(status), n);
  }

  // The headers every response carries: Date (RFC 9110 6.6.1) and CORS.
  static void add_common(Response& res) {
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

  // Finishes and writes `r` (a HEAD response keeps its Content-Length, drops
  // the body). Returns false if the connection failed.
  static awaitable<bool> send(std::shared_ptr<Impl> self, std::shared_ptr<Conn> conn, Reply r, RequestLine req,
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

  // The status line and fields of `res` as Beast serializes them.
  static std::string header_text(Response& res) {
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

  // Sends `head` and the pieces of `body` (texts, and file ranges by
  // sendfile(2): no copy in user space).
  static awaitable<Sent> send_file(std::shared_ptr<Impl> self, std::shared_ptr<Conn> conn, std::string head,
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
  static awaitable<Sent> send_slice(std::shared_ptr<Impl> self, std::shared_ptr<Conn> conn, std::string head,
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

  // transmit, failing with system_error when it fails (for a parallel group).
  static awaitable<void> transmit_or_throw(std::shared_ptr<Impl> self, std::shared_ptr<Conn> conn,
                                           std::vector<Segment> out, std::chrono::steady_clock::time_point deadline,
                                           std::shared_ptr<Sent> result) {
    // A cancellation reaches transmit's waits as an error code, so that it
    // always ends its write deadline and reports the bytes sent.
    co_await asio::this_coro::throw_if_cancelled(false);
    *result = co_await transmit(self, conn, std::move(out), deadline);
    if (result->ec) throw boost::system::system_error(result->ec);
  }

  static bool is_cancelled(const std::exception_ptr& e) {
    if (!e) return false;
    try {
      std::rethrow_exception(e);
    } catch (const Cancelled&) {
      return true;
    } catch (...) {
      return false;
    }
  }

  // Sends `out` in order to the connection's socket, in steps of at most
  // kTransmitStep bytes run on the transmit pool (send_step: memory by
  // sendmsg, file ranges by sendfile(2); the socket is non-blocking), so
  // that copies into the socket never take the loop's CPU; the last
  // kSendOnLoop bytes go from the loop. While the socket is full, waits on
  // the loop until it is writable, up to `deadline`. The caller has no other
  // operation on the socket.
  static awaitable<Sent> transmit(std::shared_ptr<Impl> self, std::shared_ptr<Conn> conn, std::vector<Segment> out,
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

  // -- routes --

  awaitable<Reply> handle(http::verb method, std::string target_text, Preconditions pre,
                          std::string cors_request_headers) {
    const auto target = parse_target(target_text);
    if (!target) co_return reply("invalid", text(http::status::bad_request, "bad request target"));
    if (method == http::verb::options) co_return reply("options", preflight(cors_request_headers));
    const std::string& path = target->path;
    if (path == "healthz") {
      Response res = respond(http::status::ok, "text/plain; charset=utf-8");
      set_body(res, "ok\n");
      res.set(http::field::cache_control, "no-store");
      co_return reply("healthz", std::move(res));
    }
    if (path == "metrics") {
      Response res = respond(http::status::ok, "text/plain; version=0.0.4; charset=utf-8");
      const LoopScheduling sched{priority && priority->realtime(), priority ? priority->fifo_exits() : 0};
      set_body(res, metrics.render(rt.stats(), rt.loop_lag(), sched));
      res.set(http::field::cache_control, "no-store");
      co_return reply("metrics", std::move(res));
    }
    if (path == "view") {
      Response res = respond(http::status::moved_permanently);
      res.set(http::field::location, "/view/");
      co_return reply("view", std::move(res));
    }
    if (path.starts_with("view/")) {  // the slice viewer
      std::string rest = path.substr(5);
      Response res = co_await view(std::move(rest), std::move(pre.if_none_match));
      co_return reply("view", std::move(res));
    }
    if (path.empty() || path.ends_with('/')) {  // a group's page, for people
      std::string group = path.empty() ? "" : path.substr(0, path.size() - 1);
      Response res = co_await index_page(std::move(group));
      co_return reply("index", std::move(res));
    }
    if (path == "api/v1" || path.starts_with("api/v1/")) {
      std::string rest = path.size() > 7 ? path.substr(7) : "";
      if (rest == "members" || rest.ends_with("/members")) {
        rest = rest == "members" ? "" : rest.substr(0, rest.size() - 8);
        std::string query = target->query;
        Response res = co_await members(std::move(rest), std::move(query));
        co_return reply("members", std::move(res));
      }
      if (rest == "info" || rest.ends_with("/info")) {
        rest = rest == "info" ? "" : rest.substr(0, rest.size() - 5);
        std::string query = target->query;
        Response res = co_await info(std::move(rest), std::move(query));
        co_return reply("info", std::move(res));
      }
      std::string query = target->query;
      Reply r = co_await slice(std::move(rest), std::move(query), method == http::verb::head);
      co_return r;
    }
    const bool head = method == http::verb::head;
    Reply r = co_await get_key(path, head, std::move(pre));
    co_return r;
  }

  static Response preflight(const std::string& request_headers) {
    Response res = respond(http::status::no_content);
    res.set(http::field::access_control_allow_methods, "GET, HEAD, OPTIONS");
    res.set(http::field::access_control_allow_headers, request_headers.empty() ? "Range, If-None-Match" : request_headers);
    res.set(http::field::access_control_max_age, "86400");
    return res;
  }

  // A store key: GET or HEAD, with Range (one or several), If-Range,
  // If-None-Match and If-Modified-Since (RFC 9110 13.2.2: the latter only
  // without the former). The file is opened once; its descriptor gives the
  // validators and the bytes, so they always agree. Small bodies are read
  // into memory where the page cache has them; others leave by sendfile.
  awaitable<Reply> get_key(std::string key, bool head, Preconditions pre) {
    if (key.empty()) co_return reply("key", not_found());
    if (auto why = key_problem(key)) co_return reply("key", text(http::status::bad_request, "invalid path: " + *why));
    std::shared_ptr<const FilesystemStore::OpenFile> file;
    try {
      if (auto f = store->open_file(key)) file = std::make_shared<const FilesystemStore::OpenFile>(std::move(*f));
    } catch (const Error& e) {
      spdlog::debug("server: key '{}': {}", key, e.what());  // symlink escape, unreadable: a 404 to the client
    }
    // (A directory is no key: 404 here, its page is at "dir/". Serving the
    // page for "dir" too would make stores and clients see a key there.)
    if (!file) co_return reply("key", not_found());

    const std::string etag = etag_of(*file);
    const std::string last_modified = http_date(file->modified());
    const auto modified_s = std::chrono::floor<std::chrono::seconds>(file->modified());
    Response res = respond(http::status::ok, is_metadata_key(key) ? "application/json" : "application/octet-stream");
    res.set(http::field::accept_ranges, "bytes");
    if (!etag.empty()) res.set(http::field::etag, etag);
    res.set(http::field::last_modified, last_modified);

    bool not_modified = false;
    if (!pre.if_none_match.empty()) {
      not_modified = etag_matches(pre.if_none_match, etag);
    } else if (!pre.if_modified_since.empty()) {
      const auto since = parse_http_date(pre.if_modified_since);
      not_modified = since && modified_s <= *since;
    }
    if (not_modified) {
      res.result(http::status::not_modified);
      res.erase(http::field::content_type);
      co_return reply("key", std::move(res));
    }

    // Range applies to GET only (RFC 9110 14.2; HEAD answers as a plain GET
    // would). If-Range: the ranges apply only to the representation the
    // client has (its ETag, or exactly the Last-Modified date); else all of it.
    bool use_range = !head && !pre.range.empty();
    if (use_range && !pre.if_range.empty()) {
      const std::string_view v = pre.if_range;
      if (v.starts_with('"') || v.starts_with("W/")) use_range = !etag.empty() && v == etag;
      else  // a date validates only a file at least a second older than now (RFC 9110 13.1.5: strong)
        use_range = parse_http_date(v) == std::optional(modified_s) &&
                    file->modified() + std::chrono::seconds(1) <= std::chrono::system_clock::now();
    }
    const RangeSet rs = use_range ? resolve_ranges(pre.range, file->size()) : RangeSet{};
    if (rs.kind == RangeSet::Kind::malformed || rs.kind == RangeSet::Kind::unsatisfiable) {
      Response bad = text(http::status::range_not_satisfiable,
                          rs.kind == RangeSet::Kind::malformed ? "malformed Range header" : "range not satisfiable");
      bad.set(http::field::accept_ranges, "bytes");
      bad.set(http::field::content_range, "bytes */" + std::to_string(file->size()));
      co_return reply("key", std::move(bad));
    }

    FileBody body{file, {}};
    const std::string total = "/" + std::to_string(file->size());
    auto content_range = [&](const RangeSet::Range& r) {
      return "bytes " + std::to_string(r.first) + "-" + std::to_string(r.last) + total;
    };
    if (rs.kind != RangeSet::Kind::partial) {
      body.pieces.push_back({{}, 0, file->size()});
    } else if (rs.ranges.size() == 1) {
      res.result(http::status::partial_content);
      res.set(http::field::content_range, content_range(rs.ranges[0]));
      body.pieces.push_back({{}, rs.ranges[0].first, rs.ranges[0].length()});
    } else {  // multipart/byteranges (RFC 9110 14.6)
      const std::string type(res[http::field::content_type]);
      res.result(http::status::partial_content);
      res.set(http::field::content_type, "multipart/byteranges; boundary=" + std::string(kBoundary));
      for (std::size_t i = 0; i < rs.ranges.size(); ++i) {
        std::string part = (i ? "\r\n--" : "--") + std::string(kBoundary) + "\r\nContent-Type: " + type +
                           "\r\nContent-Range: " + content_range(rs.ranges[i]) + "\r\n\r\n";
        body.pieces.push_back({std::move(part), 0, 0});
        body.pieces.push_back({{}, rs.ranges[i].first, rs.ranges[i].length()});
      }
      body.pieces.push_back({"\r\n--" + std::string(kBoundary) + "--\r\n", 0, 0});
    }
    const std::uint64_t length = body.size();
    res.content_length(length);
    if (head) co_return reply("key", std::move(res));
    // Large, or of a file whose version the store cannot name (unknown
    // generation): sent from the open file, which stays that version.
    if (length > kInMemoryBody || file->generation().unknown())
      co_return Reply{"key", std::move(res), nullptr, std::move(body)};

    // Small: the pieces in memory, from the page cache at once, or through
    // the store (io_uring) from the same file version when the disk must wait.
    auto& out = res.body();
    out.resize(length);
    std::size_t at = 0;
    for (const auto& p : body.pieces) {
      if (!p.text.empty()) {
        std::memcpy(out.data() + at, p.text.data(), p.text.size());
        at += p.text.size();
        continue;
      }
      iovec iov{out.data() + at, static_cast<std::size_t>(p.length)};
      const ssize_t n = ::preadv2(file->fd(), &iov, 1, static_cast<off_t>(p.offset), RWF_NOWAIT);
      if (n != static_cast<ssize_t>(p.length)) {
        ReadOptions ro;
        ro.range = ByteRange::from(p.offset, p.length);
        ro.if_equal = file->generation();
        ro.into = MutableByteSpan(reinterpret_cast<std::byte*>(out.data() + at), p.length);
        ReadResult rr;
        bool failed = false;
        try {
          rr = co_await store->read(key, ro);
        } catch (const Error& e) {
          spdlog::warn("server: key '{}': {}", key, e.what());
          failed = true;
        }
        if (failed) co_return reply("key", text(http::status::internal_server_error, "store error"));
        if (!rr.value || (!rr.in_place && rr.value->size() != p.length)) {  // replaced or shrunk: ask again
          Response busy = text(http::status::service_unavailable, "the value changed while it was read; retry");
          busy.set(http::field::retry_after, "0");
          co_return reply("key", std::move(busy));
        }
        if (!rr.in_place) std::memcpy(out.data() + at, rr.value->data(), p.length);
      }
      at += p.length;
    }
    co_return reply("key", std::move(res));
  }

  // GET /api/v1/<node>/info[?stats=1]: an array's storage statistics (a
  // walk of its chunk keys) only when asked for, else null.
  awaitable<Response> info(std::string path, std::string query) {
    if (!path.empty())
      if (auto why = key_problem(path)) co_return text(http::status::bad_request, "invalid path: " + *why);
    bool stats = false;
    if (auto bad = flag_param(query, "stats", stats)) co_return std::move(*bad);
    if (!inside(store->root(), path)) co_return not_found();  // a symlink out of the root
    std::optional<Response> failure;
    nlohmann::ordered_json j;
    try {
      auto children = subdirectories(store->root(), path);
      j = co_await node_info(rt, store, path, std::move(children), stats);
    } catch (const Error& e) {
      failure = error_response(e);
    }
    if (failure) co_return std::move(*failure);
    Response res = respond(http::status::ok, "application/json");
    set_body(res, j.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n");
    co_return res;
  }

  // The group at `path` (consolidated metadata used when present) and its
  // members, or the error response.
  awaitable<std::variant<std::vector<NodeEntry>, Response>> group_members(std::string path, bool recursive) {
    if (!path.empty())
      if (auto why = key_problem(path)) co_return text(http::status::bad_request, "invalid path: " + *why);
    if (!inside(store->root(), path)) co_return not_found();  // a symlink out of the root
    std::optional<Response> failure;
    std::vector<NodeEntry> found;
    try {
      const Group g = co_await Group::open(rt, store, path);
      found = co_await g.members(recursive);
    } catch (const InvalidMetadata& e) {  // an array there: no group, as for a missing one
      failure = e.field() == "node_type" ? text(http::status::not_found, "'" + path + "' is not a group")
                                         : error_response(e);
    } catch (const Error& e) {
      failure = error_response(e);
    }
    if (failure) co_return std::move(*failure);
    co_return found;
  }

  // GET /api/v1/<group>/members[?recursive=1]: {"members": [{"name",
  // "node_type", "zarr_format", "implicit"}, ...]} as Group::members lists them.
  awaitable<Response> members(std::string path, std::string query) {
    bool recursive = false;
    if (auto bad = flag_param(query, "recursive", recursive)) co_return std::move(*bad);
    auto found = co_await group_members(std::move(path), recursive);
    if (auto* failure = std::get_if<Response>(&found)) co_return std::move(*failure);
    Response res = respond(http::status::ok, "application/json");
    set_body(res, members_json(std::get<std::vector<NodeEntry>>(found)));
    co_return res;
  }

  // GET / and GET /<dir>/: an HTML page of the directory (index_html).
  awaitable<Response> index_page(std::string path) {
    if (!path.empty())
      if (auto why = key_problem(path)) co_return text(http::status::bad_request, "invalid path: " + *why);
    auto list = [root = store->root(), path] { return directory_entries(root, path); };
    auto entries = co_await inbox->run(transmit_pool, std::move(list), use_awaitable);
    if (!entries) co_return not_found();
    auto found = co_await group_members(path, false);
    std::optional<std::vector<NodeEntry>> members;
    if (auto* list = std::get_if<std::vector<NodeEntry>>(&found)) members = std::move(*list);
    Response res = respond(http::status::ok, "text/html; charset=utf-8");
    set_body(res, index_html(path, members, *entries));
    co_return res;
  }

  // GET /view/<array>: the viewer (the same page for every array; it reads
  // the array's path from its URL); /view/__static/<file>: its script and
  // style sheet; /view/: the arrays of the root group. Anything that is not
  // an array is a 404 page saying so (with a group's arrays, if a group).
  // "__" starts no Zarr v3 node name (the prefix is reserved), so no array
  // is shadowed by the files.
  awaitable<Response> view(std::string path, std::string if_none_match) {
    if (path.starts_with("__static/")) {
      const auto* asset = find_viewer_asset(std::string_view(path).substr(9));
      if (!asset || asset->name.ends_with(".html"))  // the page itself is served at /view/<array> only
        co_return viewer_page_response(http::status::not_found, "not found", "");
      co_return viewer_asset(*asset, if_none_match);
    }
    if (path.ends_with('/')) path.pop_back();
    const std::string shown = path.empty() ? "/" : path;
    if (!path.empty())
      if (auto why = key_problem(path))
        co_return viewer_page_response(http::status::not_found, "no array at " + shown,
                                       "<p>This is not a valid array path: " + html_escape(*why) + "</p>\n");
    std::optional<Response> failure;
    bool group = false;
    try {
      co_await open_array(path);
    } catch (const InvalidMetadata& e) {  // a group there, or an invalid array
      group = e.field() == "node_type";
      if (!group) failure = error_response(e);
    } catch (const StoreError&) {  // a symlink out of the root, an unreadable file
      failure = not_found();
    } catch (const Error& e) {
      failure = error_response(e);
    }
    if (!failure && !group) {
      const auto* page = find_viewer_asset("viewer.html");
      co_return viewer_asset(*page, if_none_match);
    }
    // Not an array: what is there instead (a group's arrays are listed; a
    // v2 group is no array's NotFound).
    std::string arrays;
    if (group || path.empty() || failure->result() == http::status::not_found) {
      auto found = co_await group_members(path, true);
      if (auto* list = std::get_if<std::vector<NodeEntry>>(&found)) {
        group = true;
        arrays = array_links(path, *list);
      }
    }
    if (path.empty()) {  // /view/: the arrays of the root group
      std::string body = group ? (arrays.empty() ? "<p>The root group holds no array.</p>\n" : arrays)
                               : "<p>There is no Zarr group at the root. Browse the <a href=\"/\">directories</a>: "
                                 "each group's page links its arrays' viewers.</p>\n";
      co_return viewer_page_response(http::status::ok, "arrays", body);
    }
    const auto status = failure && failure->result() != http::status::not_found ? failure->result()
                                                                               : http::status::not_found;
    std::string body;
    if (group) {
      body = "<p>" + html_escape(shown) + " is a group, not an array." +
             (arrays.empty() ? " It holds no array.</p>\n" : " Its arrays:</p>\n" + arrays);
    } else if (status == http::status::not_found) {
      body = "<p>There is no array at " + html_escape(shown) + ".</p>\n";
    } else {  // an array that cannot be opened: say why
      const auto& b = failure->body();
      body = "<p>The array at " + html_escape(shown) + " cannot be opened: " +
             html_escape(std::string_view(reinterpret_cast<const char*>(b.data()), b.size())) + "</p>\n";
    }
    body += "<p>Browse the <a href=\"/\">directories</a> for arrays to view.</p>\n";
    co_return viewer_page_response(status, group ? shown + " is not an array" : "no array at " + shown, body);
  }

  // GET /api/v1/<array>?region=...&format=npy|raw
  awaitable<Reply> slice(std::string path, std::string query, bool head) {
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
      array = co_await open_array(path);
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
    if (!nbytes || *nbytes > opt.max_response_bytes)
      co_return fail(http::status::bad_request,
                     "region too large: " + (nbytes ? std::to_string(*nbytes) + " bytes" : std::string("overflow")) +
                         ", the limit is " + std::to_string(opt.max_response_bytes) + " bytes");
    Response res = respond(http::status::ok, "application/octet-stream");
    res.set(http::field::content_disposition, download_name(path, format));
    res.set("X-Shape", join(shape));
    res.set("X-Dtype", std::string(array.dtype().name()));
    if (head) {  // the length is known without decoding anything
      res.content_length(header.size() + *nbytes);
      co_return reply("slice", std::move(res));
    }
    // A slot among the slices being decoded, held until the last slab is.
    auto slot = co_await enter_slice_gate(shared_from_this());
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
    if (!metrics.reserve_slice_memory(reserved, opt.slice_memory)) {
      Response busy = text(http::status::service_unavailable, "busy: too many large slices in flight");
      busy.set(http::field::retry_after, "1");
      co_return reply("slice", std::move(busy));
    }
    std::shared_ptr<void> hold(nullptr, [self = shared_from_this(), reserved](void*) {
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

  // The array at `path`, opened at most opt.metadata_max_age ago.
  awaitable<Array> open_array(std::string path) {
    const auto now = std::chrono::steady_clock::now();
    {
      std::lock_guard lk(arrays_mu);
      if (auto it = arrays.find(path); it != arrays.end() && now < it->second.second) co_return it->second.first;
    }
    Array array = co_await Array::open(rt, store, path);
    if (opt.metadata_max_age.count() > 0) {
      std::lock_guard lk(arrays_mu);
      if (arrays.size() >= kMaxCachedArrays) arrays.clear();
      arrays[path] = {array, now + opt.metadata_max_age};
    }
    co_return array;
  }

  // Waits for one of opt.max_slices_in_flight slots (first come, first
  // served) for at most opt.slice_queue_timeout. Returns a handle that gives
  // the slot back when it goes, or null if the wait timed out.
  static awaitable<std::shared_ptr<void>> enter_slice_gate(std::shared_ptr<Impl> self) {
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

  // Gives a slot back: to the first waiter (marked granted under the lock,
  // so that its timer expiring meanwhile cannot lose the slot), else free.
  void leave_slice_gate() {
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

  // Where a slice with `row_bytes` per index of its first dimension is cut
  // into slabs along it: at chunk boundaries (a chunk is decoded once),
  // about kSlabBytes each.
  static std::vector<std::uint64_t> slab_cuts(const Array& array, const Region& region, std::uint64_t row_bytes) {
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

  // -- shutdown --

  void shutdown(std::function<void()> done) {
    {
      std::lock_guard lk(mu);
      on_stopped.push_back(std::move(done));
    }
    if (stopping.exchange(true)) return check_drained();  // a second call: just wait too
    if (priority) priority->stop();  // queued on the loop before `done` can be
    std::vector<std::shared_ptr<Conn>> open;
    {
      std::lock_guard lk(mu);
      for (const auto& [p, c] : conns) open.push_back(c);
    }
    asio::post(strand, [self = shared_from_this()] {
      boost::system::error_code ignored;
      self->acceptor.close(ignored);
      self->deadline.expires_after(self->opt.shutdown_deadline);
      self->deadline.async_wait([self](boost::system::error_code ec) {
        if (!ec) self->force_close();
      });
    });
    for (auto& c : open)  // idle connections close now; busy ones after their response
      asio::post(c->stream.get_executor(), [c] {
        if (c->idle) c->stream.cancel();
      });
    check_drained();
  }

  void force_close() {
    std::vector<std::shared_ptr<Conn>> open;
    {
      std::lock_guard lk(mu);
      for (const auto& [p, c] : conns) open.push_back(c);
    }
    if (!open.empty()) spdlog::warn("server: shutdown deadline passed; closing {} connection(s)", open.size());
    for (auto& c : open)
      asio::post(c->stream.get_executor(), [c] {
        boost::system::error_code ignored;
        c->stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
        c->stream.cancel();
        c->cancel_work.emit(asio::cancellation_type::terminal);
      });
  }
};

Server::Server(Runtime& rt, ServerOptions options) : impl_(std::make_shared<Impl>(rt, std::move(options))) {}

Server::~Server() {
  boost::system::error_code ignored;
  impl_->stopping = true;
  if (impl_->priority) impl_->priority->stop();  // when shutdown() was not called
  asio::post(impl_->strand, [impl = impl_] {
    boost::system::error_code ec;
    impl->acceptor.close(ec);
  });
}

tcp::endpoint Server::endpoint() const { return impl_->endpoint; }
const ServerOptions& Server::options() const { return impl_->opt; }
const Metrics& Server::metrics() const { return impl_->metrics; }

void Server::start() {
  if (impl_->priority) impl_->priority->start();
  asio::co_spawn(impl_->strand, Impl::accept_loop(impl_), log_exception);
}

void Server::shutdown(std::function<void()> done) { impl_->shutdown(std::move(done)); }

}  // namespace zarrcoro::server
