#include "child.hpp"

#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <filesystem>
#include <fstream>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "support.hpp"

namespace zarrcoro::test {
namespace {

// The threads of this process other than the caller's, leaving out the
// kernel's io_uring workers (which hold no lock of ours) and, under TSan,
// the sanitizer's own background thread (started with the first thread).
int other_threads() {
#ifdef ZARRCORO_TEST_TSAN
  std::thread([] {}).join();
  int n = -2;
#else
  int n = -1;  // the caller
#endif
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream comm(task.path() / "comm");
    std::string name;
    if (!std::getline(comm, name)) continue;  // it ended meanwhile
    if (name.rfind("iou-", 0) != 0) ++n;
  }
  return n;
}

// Installs `filter` on every thread of this process, for good.
bool install(std::span<const sock_filter> filter) {
  const sock_fprog prog{static_cast<unsigned short>(filter.size()), const_cast<sock_filter*>(filter.data())};
  return ::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 &&
         ::syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, &prog) == 0;
}

}  // namespace

bool refuse_syscalls(std::initializer_list<int> refused, int error) {
  // Load the call number; a match jumps to the last instruction (the refusal); else allow.
  const auto n = static_cast<unsigned char>(refused.size());
  std::vector<sock_filter> filter{BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr))};
  unsigned char i = 0;
  for (int nr : refused) {
    const auto to_refusal = static_cast<unsigned char>(n - i++);
    filter.push_back(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, static_cast<unsigned>(nr), to_refusal, 0));
  }
  filter.push_back(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW));
  filter.push_back(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (static_cast<unsigned>(error) & SECCOMP_RET_DATA)));
  return install(filter);
}

bool refuse_ioctl(unsigned long request, int error) {
  // Not ioctl: allow. Else compare the request's low word (the kernel takes an unsigned int).
  const sock_filter filter[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_ioctl, 0, 2),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, args[1])),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, static_cast<unsigned>(request), 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (static_cast<unsigned>(error) & SECCOMP_RET_DATA)),
  };
  return install(filter);
}

std::optional<int> in_child(const std::function<int()>& body) {
  // A joined thread may linger in /proc for a moment.
  for (int i = 0; i < 200 && other_threads() != 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  REQUIRE(other_threads() == 0);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    int code = 1;
    try {
      code = body();
    } catch (...) {
    }
    ::_exit(code);
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFEXITED(status));
  if (WEXITSTATUS(status) != kChildSkipped) return WEXITSTATUS(status);
  WARN("SKIPPED: cannot install a seccomp filter here");
  return std::nullopt;
}

}  // namespace zarrcoro::test
