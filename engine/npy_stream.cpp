// NumPy .npy files read and written a box at a time: NpyReader, NpyWriter.
// See zarrcoro/npy.hpp.
#include <zarrcoro/npy.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <random>
#include <string>

#include <zarrcoro/error.hpp>

#include "engine/npy_detail.hpp"

namespace zarrcoro {
namespace npy_detail {
namespace {

namespace fs = std::filesystem;

// Calls f(file_offset, box_offset, bytes) for each contiguous run of `box`
// in a C-order array of `shape` (offsets in bytes from the data's start and
// the box buffer's start); nothing for an empty box.
template <class F>
void for_each_run(std::span<const std::uint64_t> shape, const Region& box, std::size_t item, F&& f) {
  const std::size_t rank = shape.size();
  for (std::size_t d = 0; d < rank; ++d)
    if (box.start[d] == box.stop[d]) return;
  if (rank == 0) return f(std::uint64_t{0}, std::uint64_t{0}, std::uint64_t{item});
  std::vector<std::uint64_t> stride(rank);  // in bytes
  for (std::size_t d = rank, s = item; d-- > 0; s *= shape[d]) stride[d] = s;
  std::size_t k = rank - 1;  // the run spans dims k.. (those after k whole)
  while (k > 0 && box.start[k] == 0 && box.stop[k] == shape[k]) --k;
  const std::uint64_t run = (box.stop[k] - box.start[k]) * stride[k];
  std::vector<std::uint64_t> idx(box.start.begin(), box.start.begin() + static_cast<std::ptrdiff_t>(k));
  for (std::uint64_t out = 0;; out += run) {
    std::uint64_t off = box.start[k] * stride[k];
    for (std::size_t d = 0; d < k; ++d) off += idx[d] * stride[d];
    f(off, out, run);
    std::size_t d = k;
    for (; d-- > 0;) {
      if (++idx[d] < box.stop[d]) break;
      idx[d] = box.start[d];
    }
    if (d == static_cast<std::size_t>(-1)) return;
  }
}

void check_box(const Region& box, std::span<const std::uint64_t> shape, const std::string& file) {
  bool ok = box.start.size() == shape.size() && box.stop.size() == shape.size();
  for (std::size_t d = 0; ok && d < shape.size(); ++d) ok = box.start[d] <= box.stop[d] && box.stop[d] <= shape[d];
  if (!ok) fail(file, "region", "the box is not inside the array's shape " + py_tuple(shape));
}

std::string errno_text() { return std::strerror(errno); }

}  // namespace
}  // namespace npy_detail

using namespace npy_detail;

// ---- streaming ------------------------------------------------------------------

NpyReader::NpyReader(const fs::path& file) : name_(file.string()) {
  std::error_code ec;
  if (fs::is_directory(file, ec)) fail(name_, "file", "is a directory, not a .npy file");
  fd_ = ::open(file.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);  // a FIFO cannot block the open
  if (fd_ < 0) fail(name_, "file", "cannot open: " + errno_text());
  try {
    struct stat st {};
    if (::fstat(fd_, &st) != 0) fail(name_, "file", "cannot stat: " + errno_text());
    if (!S_ISREG(st.st_mode)) fail(name_, "file", "is not a regular file (a .npy is read by offsets)");
    const auto size = static_cast<std::uint64_t>(st.st_size);
    Bytes head(std::min<std::uint64_t>(size, 12 + kNpyMaxHeaderBytes));
    std::size_t got = 0;
    while (got < head.size()) {
      const ssize_t r = ::pread(fd_, head.data() + got, head.size() - got, static_cast<off_t>(got));
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) fail(name_, "file", "cannot read: " + errno_text());
      if (r == 0) break;
      got += static_cast<std::size_t>(r);
    }
    head.resize(got);
    const Header h = parse_header(head, name_);
    checked_count(h, size - std::min(size, h.data_offset), name_);
    dtype_ = h.dtype;
    stored_ = h.descr.type;
    big_endian_ = h.descr.order == ByteOrder::big;
    fortran_ = h.fortran;
    shape_ = h.shape;
    data_offset_ = h.data_offset;
  } catch (...) {
    ::close(fd_);
    throw;
  }
}

NpyReader::~NpyReader() {
  if (fd_ >= 0) ::close(fd_);
}

NdArray NpyReader::read(const Region& box) const {
  check_box(box, shape_, name_);
  const std::size_t item = dtype_.size();
  NdArray out{dtype_, box.shape(), {}};
  out.data.resize(box.num_elements() * item);
  auto pread_run = [&](std::uint64_t off, std::uint64_t at, std::uint64_t n) {
    for (std::uint64_t done = 0; done < n;) {
      const ssize_t r = ::pread(fd_, out.data.data() + at + done, n - done,
                                static_cast<off_t>(data_offset_ + off + done));
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) fail(name_, "file", "cannot read: " + errno_text());
      if (r == 0) fail(name_, "file", "unexpected end of file (was it truncated while being read?)");
      done += static_cast<std::uint64_t>(r);
    }
  };
  if (fortran_ && shape_.size() > 1) {  // the file is the C-order transpose
    const std::vector<std::uint64_t> shape(shape_.rbegin(), shape_.rend());
    const Region rbox{{box.start.rbegin(), box.start.rend()}, {box.stop.rbegin(), box.stop.rend()}};
    for_each_run(shape, rbox, item, pread_run);
    out.data = fortran_to_c(out.data, out.shape, item);
  } else {
    for_each_run(shape_, box, item, pread_run);
  }
  to_native(Descr{stored_, big_endian_ ? ByteOrder::big : ByteOrder::unspecified}, out.data.data(),
            out.data.size() / std::max<std::size_t>(item, 1));
  return out;
}

NpyWriter::NpyWriter(const fs::path& file, DataType dtype, std::vector<std::uint64_t> shape)
    : file_(file), dtype_(dtype), shape_(std::move(shape)) {
  const std::string name = file.string();
  std::string header;
  try {
    header = npy_header(dtype_, shape_);
  } catch (const Error& e) {
    throw_error(e.code(), name, e.field(), e.detail());
  }
  data_offset_ = header.size();
  // A symlink is written through (its target replaced); an existing file
  // keeps its permissions; anything else (a device, a pipe) is refused: the
  // boxes are written by offset into a temporary file renamed over it.
  std::error_code ec;
  if (fs::is_symlink(file, ec)) file_ = fs::weakly_canonical(file, ec);
  struct stat old {};
  const bool exists = ::stat(file_.c_str(), &old) == 0;
  if (exists && !S_ISREG(old.st_mode))
    fail(name, "file", "is not a regular file (a .npy is written by offsets into a temporary file, then renamed)");
  std::random_device rd;
  for (int attempt = 0; fd_ < 0; ++attempt) {
    temp_ = file_;
    temp_ += ".tmp-" + std::to_string(rd());
    fd_ = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd_ < 0 && (errno != EEXIST || attempt > 8))
      fail(name, "file", "cannot create a temporary file beside it (in " + file_.parent_path().string() + "): " +
                             errno_text());
  }
  if (exists) ::fchmod(fd_, old.st_mode & 07777);  // best effort, as cp does
  for (std::size_t done = 0; done < header.size();) {
    const ssize_t r = ::pwrite(fd_, header.data() + done, header.size() - done, static_cast<off_t>(done));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      const std::string why = r < 0 ? errno_text() : "no progress";
      ::close(fd_);
      ::unlink(temp_.c_str());
      fd_ = -1;
      fail(name, "file", "cannot write: " + why);
    }
    done += static_cast<std::size_t>(r);
  }
}

NpyWriter::~NpyWriter() {
  if (fd_ < 0) return;
  ::close(fd_);
  ::unlink(temp_.c_str());
}

void NpyWriter::write(const Region& box, ByteSpan data) const {
  const std::string name = file_.string();
  if (fd_ < 0) fail(name, "file", "the file was already committed");
  check_box(box, shape_, name);
  const std::size_t item = dtype_.size();
  if (box.num_elements() * item != data.size())
    fail(name, "data", std::to_string(data.size()) + " bytes do not match the box of " +
                           std::to_string(box.num_elements()) + " elements of " + dtype_.describe());
  for_each_run(shape_, box, item, [&](std::uint64_t off, std::uint64_t at, std::uint64_t n) {
    for (std::uint64_t done = 0; done < n;) {
      const ssize_t r = ::pwrite(fd_, data.data() + at + done, n - done, static_cast<off_t>(data_offset_ + off + done));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) fail(name, "file", "cannot write: " + (r < 0 ? errno_text() : std::string("no progress")));
      done += static_cast<std::uint64_t>(r);
    }
  });
}

void NpyWriter::commit() {
  const std::string name = file_.string();
  if (fd_ < 0) fail(name, "file", "the file was already committed");
  const auto n = count(shape_, std::numeric_limits<std::uint64_t>::max() / dtype_.size());
  const std::uint64_t size = data_offset_ + (n ? *n * dtype_.size() : 0);
  if (::ftruncate(fd_, static_cast<off_t>(size)) != 0) fail(name, "file", "cannot write: " + errno_text());
  const int fd = fd_;
  fd_ = -1;
  // Flushed before the rename: a crash then leaves the old file or the new one.
  const bool synced = ::fdatasync(fd) == 0;
  const int sync_errno = errno;
  if (::close(fd) != 0 || !synced) {
    if (!synced) errno = sync_errno;
    const std::string why = errno_text();
    ::unlink(temp_.c_str());
    fail(name, "file", "cannot write: " + why);
  }
  if (::rename(temp_.c_str(), file_.c_str()) != 0) {
    const std::string why = errno_text();
    ::unlink(temp_.c_str());
    fail(name, "file", "cannot rename " + temp_.string() + " to it: " + why);
  }
}

}  // namespace zarrcoro
