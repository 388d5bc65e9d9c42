#include "support.hpp"

#include <fcntl.h>
#include <linux/fs.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <iterator>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include <zarrcoro/array.hpp>

namespace zarrcoro::test {

std::optional<std::filesystem::path> shared_dir() {
  if (const char* env = std::getenv("ZARRCORO_SHARED_DIR"); env && *env) {
    if (std::filesystem::is_directory(env)) return std::filesystem::path(env);
  }
  const std::filesystem::path p = ZARRCORO_SHARED_DIR;
  if (std::filesystem::is_directory(p / "fixtures")) return p;
  return std::nullopt;
}

double time_scale() {
  static const double scale = [] {
    if (const char* env = std::getenv("ZARRCORO_TEST_TIME_SCALE"); env && *env) {
      char* end = nullptr;
      const double v = std::strtod(env, &end);
      if (end != env && v >= 1) return v;
    }
    return double{ZARRCORO_TEST_TIME_SCALE};
  }();
  return scale;
}

TempDir::TempDir(const std::string& tag) {
  std::string tmpl = (std::filesystem::temp_directory_path() / ("zarrcoro-" + tag + "-XXXXXX")).string();
  if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("cannot create a directory " + tmpl);
  path = tmpl;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
}

Bytes read_file(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  if (!f) throw std::runtime_error("cannot open " + p.string());
  std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  Bytes b(s.size());
  std::memcpy(b.data(), s.data(), s.size());
  return b;
}

void replace_file(const std::filesystem::path& path, ByteSpan bytes, std::int64_t mtime_ns) {
  const auto temp = path.parent_path() / ("." + path.filename().string() + ".other");
  std::filesystem::create_directories(path.parent_path());
  {
    std::ofstream f(temp, std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    if (!f.flush()) throw std::runtime_error("cannot write " + temp.string());
  }
  std::filesystem::rename(temp, path);
  const timespec times[2] = {{0, UTIME_OMIT}, {mtime_ns / 1'000'000'000, mtime_ns % 1'000'000'000}};
  if (::utimensat(AT_FDCWD, path.c_str(), times, 0) != 0) throw std::runtime_error("cannot set the time of " + path.string());
}

bool inode_versions(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error("cannot open " + path.string());
  long version = 0;  // FUSE writes a long
  const bool has = ::ioctl(fd, FS_IOC_GETVERSION, &version) == 0;
  ::close(fd);
  return has;
}

Bytes hex(const std::string& text) {
  Bytes out;
  int hi = -1;
  for (char c : text) {
    int v;
    if (c >= '0' && c <= '9') v = c - '0';
    else if (c >= 'a' && c <= 'f') v = c - 'a' + 10;
    else if (c >= 'A' && c <= 'F') v = c - 'A' + 10;
    else continue;
    if (hi < 0) hi = v;
    else {
      out.push_back(static_cast<std::byte>(hi * 16 + v));
      hi = -1;
    }
  }
  return out;
}

std::string to_hex(ByteSpan bytes) {
  static const char* d = "0123456789abcdef";
  std::string s;
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    if (i) s += ' ';
    const auto v = static_cast<unsigned>(bytes[i]);
    s += d[v >> 4];
    s += d[v & 15];
  }
  return s;
}

bool port_answers(std::uint16_t port) {
  try {
    boost::asio::io_context io;
    boost::asio::ip::tcp::socket s(io);
    s.connect({boost::asio::ip::make_address("127.0.0.1"), port});
    return true;
  } catch (...) {
    return false;
  }
}

std::string show(const std::vector<NodeEntry>& nodes) {
  std::string s;
  for (const auto& e : nodes)
    s += e.name + (e.node_type == NodeType::array ? " array v" : " group v") + std::to_string(e.zarr_format) +
         (e.implicit ? " implicit" : "") + "; ";
  return s;
}

std::string zarrita_missing(const std::filesystem::path& interop) {
  if (std::system("command -v node >/dev/null 2>&1") != 0) return "node is not on PATH";
  if (!std::filesystem::is_directory(interop / "node_modules" / "zarrita"))
    return "zarrita is not installed (npm ci --prefix " + interop.string() + " --no-audit --no-fund)";
  return "";
}

}  // namespace zarrcoro::test
