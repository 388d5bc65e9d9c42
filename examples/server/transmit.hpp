// One non-blocking step of sending a response to a socket: memory segments
// (a header, a body, the text parts of multipart/byteranges) by sendmsg,
// file ranges by sendfile(2). Free functions; any thread may call them, one
// call at a time per socket, with `out`, `at` and the segments' bytes left
// alone meanwhile. sendfile(2) takes no MSG_NOSIGNAL: a caller whose peer
// may close must ignore SIGPIPE (the server does).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace zarrcoro::server {

// Bytes of a response: `length` bytes at `data`, or (data null) at
// `offset` of the open file `fd`.
struct Segment {
  const void* data;
  int fd;
  std::uint64_t offset, length;

  static Segment of(const std::string& text) { return {text.data(), -1, 0, text.size()}; }
};

// Where a transmission stands: the next segment and the bytes of it sent.
struct Progress {
  std::size_t segment = 0;
  std::uint64_t done = 0;
};

// What one step moves (at least, unless the socket fills or nothing is
// left; each call at most), so that one large response does not hold the
// thread that sends it for long.
inline constexpr std::uint64_t kTransmitStep = 1 << 20;
// send_step with `on_loop`: a file range is not in the page cache.
inline constexpr int kDiskWait = -1;

// Sends `out` from `at` on, without blocking, until at least kTransmitStep
// bytes went out or nothing is left; each system call moves at most
// kTransmitStep bytes (so a header and a 1 MiB file range go in one step).
// Advances `at` past what went out. Consecutive memory segments (up to 8)
// go in one sendmsg, with MSG_MORE while anything follows (no partial frame
// leaves alone). Returns 0 when that much (or the rest) went out, EAGAIN
// when the socket took nothing more, ENODATA when a file ended before its
// range, else the errno of the failed call. With `on_loop`, file ranges go
// only from the page cache, never from the disk: kDiskWait when they are
// not cached. Empty segments are skipped.
int send_step(int socket, const std::vector<Segment>& out, Progress& at, bool on_loop = false);

// Whether the page cache holds all of `length` bytes at `offset` of the
// file (cachestat(2), Linux 6.5; without it: no). It starts no read.
bool in_page_cache(int fd, std::uint64_t offset, std::uint64_t length);

}  // namespace zarrcoro::server
