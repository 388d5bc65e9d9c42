// Helpers shared by the test suites.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <zarrcoro/bytes.hpp>

namespace zarrcoro {
struct NodeEntry;
}

// ZARRCORO_TEST_TSAN: defined in ThreadSanitizer builds (g++ or clang).
#if defined(__SANITIZE_THREAD__)
#define ZARRCORO_TEST_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define ZARRCORO_TEST_TSAN 1
#endif
#endif

namespace zarrcoro::test {

// The read-only `shared/` folder beside the checkout (fixtures, cases), or
// nullopt when it is absent (a user's clone): tests then SKIP with a message.
std::optional<std::filesystem::path> shared_dir();

// Evaluates to the shared dir, or WARNs and returns from the test case.
#define ZARRCORO_REQUIRE_SHARED(var)                                                  \
  auto var##_opt = ::zarrcoro::test::shared_dir();                                    \
  if (!var##_opt) {                                                                   \
    WARN("SKIPPED: ../shared (fixtures and cases) is absent beside the checkout");    \
    return;                                                                           \
  }                                                                                   \
  const std::filesystem::path var = *var##_opt

// A fresh directory under $TMPDIR ("zarrcoro-<tag>-XXXXXX"), removed with
// its contents on destruction.
struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& tag = "test");
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
};

Bytes read_file(const std::filesystem::path& p);
// Writes `bytes` to a new file beside `path` (its directory made if need
// be) and renames it over `path`, as
// another program (zarr-python's LocalStore) replaces a value, then sets its
// modification time to `mtime_ns` (ns since the epoch), as a coarse file
// clock stamps every write within one tick. Throws on failure.
void replace_file(const std::filesystem::path& path, ByteSpan bytes, std::int64_t mtime_ns);
// Whether the file system of the file at `path` gives inodes a version
// (FS_IOC_GETVERSION: ext4, XFS, btrfs; not tmpfs, overlayfs, NFS, FAT).
bool inode_versions(const std::filesystem::path& path);
// "01 0a ff" or "010aff" -> bytes.
Bytes hex(const std::string& text);
std::string to_hex(ByteSpan bytes);

// How many times slower than a plain Release build this test build runs:
// the factor the build set (ZARRCORO_TEST_TIME_SCALE: 3 under
// AddressSanitizer, 10 under ThreadSanitizer, else 1), or the environment
// variable ZARRCORO_TEST_TIME_SCALE when set (e.g. on a loaded machine).
double time_scale();
// A time budget that a healthy operation must beat, scaled by time_scale().
// Only budgets are scaled: a fault that must trip a timeout is made longer
// than the scaled timeout by construction (a stall that never ends, a delay
// far above it).
inline std::chrono::milliseconds scaled(std::chrono::milliseconds budget) {
  return std::chrono::milliseconds(static_cast<std::int64_t>(static_cast<double>(budget.count()) * time_scale()));
}

#ifdef ZARRCORO_TEST_TSAN
inline constexpr bool kThreadSanitizer = true;
#else
inline constexpr bool kThreadSanitizer = false;
#endif

// True if something accepts TCP connections on 127.0.0.1:port.
bool port_answers(std::uint16_t port);

// Group members as one line: "a array v3; g group v2 implicit; ".
std::string show(const std::vector<NodeEntry>& nodes);

// Why the zarrita interop peer cannot run (node not on PATH, or zarrita not
// installed under `interop`), or "" when it can.
std::string zarrita_missing(const std::filesystem::path& interop);

}  // namespace zarrcoro::test
