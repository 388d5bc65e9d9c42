// An eventfd(2) registered with an io_context, for LoopInbox and LoopRound.
// Linux only.
#pragma once

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <system_error>

#include <boost/asio/posix/stream_descriptor.hpp>

namespace zarrcoro::server {

// Makes a non-blocking eventfd holding `initial` and hands it to `d`.
// Raises std::system_error when no eventfd can be made or registered.
inline void assign_eventfd(boost::asio::posix::stream_descriptor& d, unsigned initial) {
  const int fd = ::eventfd(initial, EFD_NONBLOCK | EFD_CLOEXEC);
  if (fd < 0) throw std::system_error(errno, std::generic_category(), "eventfd");
  try {
    d.assign(fd);
  } catch (...) {
    ::close(fd);
    throw;
  }
}

}  // namespace zarrcoro::server
