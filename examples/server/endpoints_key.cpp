// GET|HEAD of a store key (see endpoints.hpp).
#include <sys/uio.h>

#include <cstdio>
#include <cstring>

#include <spdlog/spdlog.h>

#include <zarrcoro/store/http.hpp>

#include "endpoints.hpp"
#include "http_util.hpp"
#include "server_state.hpp"

namespace zarrcoro::server {
namespace {

bool is_metadata_key(std::string_view key) {
  const auto slash = key.rfind('/');
  const std::string_view name = slash == std::string_view::npos ? key : key.substr(slash + 1);
  return name == "zarr.json" || name == ".zarray" || name == ".zgroup" || name == ".zattrs" || name == ".zmetadata";
}

// Bodies up to this size are read into memory and written with the header in
// one system call on the loop; larger ones leave by sendfile(2) from the
// transmit pool, all but their last kSendOnLoop bytes (send.cpp).
constexpr std::uint64_t kInMemoryBody = 16 << 10;

// The entity tag of a file: a hash (FNV-1a, stable across restarts) of its
// store generation (device, inode, size, modification time, inode version), so that a value
// renamed into place is a new tag even within one tick of the file clock.
// None ("") where the generation is unknown (a file system that keeps only
// coarse times): no tag is better than one that outlives a rewrite. One
// that may repeat (another program's file on a file system without inode
// versions) still gets a tag, marked (HttpStore::kMayRepeatETagSuffix):
// without one, clients could not tell a file replaced between two range
// requests, which is far likelier than A, B, A within one tick of a coarse
// clock. By the mark, HttpStore caches nothing by it, and this server
// answers no If-None-Match or If-Range by it.
std::string etag_of(const FilesystemStore::OpenFile& f) {
  const Generation& g = f.generation();
  if (g.unknown()) return {};
  std::uint64_t h = 0xcbf29ce484222325u;
  for (const char c : g.token) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3u;
  char opaque[48];
  std::snprintf(opaque, sizeof opaque, "%016llx-%llx", static_cast<unsigned long long>(h),
                static_cast<unsigned long long>(f.size()));
  return '"' + std::string(opaque) + std::string(g.may_repeat ? HttpStore::kMayRepeatETagSuffix : "") + '"';
}

// The boundary of multipart/byteranges bodies: not in any part's header.
constexpr std::string_view kBoundary = "zarrcoro-byteranges-3d9f1c0a7b25e864";

}  // namespace

awaitable<Reply> get_key(std::shared_ptr<ServerState> self, std::string key, bool head, Preconditions pre) {
  if (key.empty()) co_return reply("key", not_found());
  if (auto why = key_problem(key)) co_return reply("key", text(http::status::bad_request, "invalid path: " + *why));
  std::shared_ptr<const FilesystemStore::OpenFile> file;
  try {
    if (auto f = self->store->open_file(key)) file = std::make_shared<const FilesystemStore::OpenFile>(std::move(*f));
  } catch (const Error& e) {
    spdlog::debug("server: key '{}': {}", key, e.what());  // symlink escape, unreadable: a 404 to the client
  }
  // (A directory is no key: 404 here, its page is at "dir/". Serving the
  // page for "dir" too would make stores and clients see a key there.)
  if (!file) co_return reply("key", not_found());

  const std::string etag = etag_of(*file);
  // The tag a client's If-None-Match or If-Range may match: none if it may
  // name another version of the file too (only "*" then matches).
  const std::string lasting_etag = file->generation().may_repeat ? "" : etag;
  const std::string last_modified = http_date(file->modified());
  const auto modified_s = std::chrono::floor<std::chrono::seconds>(file->modified());
  Response res = respond(http::status::ok, is_metadata_key(key) ? "application/json" : "application/octet-stream");
  res.set(http::field::accept_ranges, "bytes");
  if (!etag.empty()) res.set(http::field::etag, etag);
  res.set(http::field::last_modified, last_modified);

  bool not_modified = false;
  if (!pre.if_none_match.empty()) {
    not_modified = etag_matches(pre.if_none_match, lasting_etag);
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
    if (v.starts_with('"') || v.starts_with("W/")) use_range = !lasting_etag.empty() && v == lasting_etag;
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
  // Large, or of a file whose version the store cannot name surely
  // (unknown, or may repeat): sent from the open file, which stays that
  // version.
  if (length > kInMemoryBody || file->generation().unknown() || file->generation().may_repeat)
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
        rr = co_await self->store->read(key, ro);
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

}  // namespace zarrcoro::server
