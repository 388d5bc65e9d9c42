// See transmit.hpp.
#include "transmit.hpp"

#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>

namespace zarrcoro::server {

int send_step(int socket, const std::vector<Segment>& out, Progress& at, bool on_loop) {
  std::uint64_t moved = 0;
  while (at.segment < out.size() && moved < kTransmitStep) {
    const Segment& s = out[at.segment];
    ssize_t n = 0;
    if (s.data) {  // this and the memory segments after it, up to kTransmitStep bytes
      constexpr std::size_t kGather = 8;
      iovec iov[kGather];
      std::size_t count = 0, i = at.segment;
      std::uint64_t gathered = 0, skip = at.done;
      for (; i < out.size() && out[i].data && count < kGather && gathered < kTransmitStep; ++i, skip = 0) {
        const std::uint64_t take = std::min(out[i].length - skip, kTransmitStep - gathered);
        iov[count++] = {const_cast<char*>(static_cast<const char*>(out[i].data)) + skip, take};
        gathered += take;
        if (take < out[i].length - skip) break;  // i: partly taken
      }
      msghdr msg{};
      msg.msg_iov = iov;
      msg.msg_iovlen = count;
      const bool more = i < out.size();  // hold partial frames
      n = ::sendmsg(socket, &msg, MSG_NOSIGNAL | (more ? MSG_MORE : 0));
      if (n == 0 && gathered > 0) return EAGAIN;
    } else if (const std::uint64_t want = std::min(s.length - at.done, kTransmitStep); want > 0) {
      if (on_loop && !in_page_cache(s.fd, s.offset + at.done, want)) return kDiskWait;
      off_t offset = static_cast<off_t>(s.offset + at.done);
      n = ::sendfile(socket, s.fd, &offset, want);
      if (n == 0) return ENODATA;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno == EWOULDBLOCK ? EAGAIN : errno;
    moved += static_cast<std::uint64_t>(n);
    for (auto left = static_cast<std::uint64_t>(n);;) {  // advance over what went out (and empty segments)
      const std::uint64_t here = std::min(left, out[at.segment].length - at.done);
      at.done += here;
      left -= here;
      if (at.done == out[at.segment].length) at = {at.segment + 1, 0};
      if (left == 0 || at.segment == out.size()) break;
    }
  }
  return 0;
}

bool in_page_cache(int fd, std::uint64_t offset, std::uint64_t length) {
  static const auto page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
  struct Range {
    std::uint64_t off, len;
  } range{offset / page * page, length + offset % page};
  struct {
    std::uint64_t nr_cache, nr_dirty, nr_writeback, nr_evicted, nr_recently_evicted;
  } stat{};
  constexpr long kCachestat = 451;  // x86-64 and arm64 alike (Debian 12's headers predate it)
  static std::atomic<bool> missing{false};
  if (missing.load(std::memory_order_relaxed)) return false;
  if (::syscall(kCachestat, fd, &range, &stat, 0) != 0) {
    if (errno == ENOSYS) missing = true;
    return false;
  }
  return stat.nr_cache * page >= range.len;
}

}  // namespace zarrcoro::server
