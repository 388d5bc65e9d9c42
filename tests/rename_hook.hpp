// Runs a test's hook just before the next renameat(2) of this process: what
// lands at a key between a conditional writer's check and its rename.
// Include in one source file of a test binary only: it defines renameat,
// which takes the place of the C library's for the whole binary.
#pragma once

#include <dlfcn.h>

#include <functional>
#include <mutex>
#include <utility>

namespace zarrcoro::test {

// Taken (and run, on the renaming thread) by the next renameat.
inline std::mutex rename_hook_mu;
inline std::function<void()> before_next_rename;

}  // namespace zarrcoro::test

extern "C" int renameat(int olddirfd, const char* oldpath, int newdirfd, const char* newpath) {
  using Fn = int (*)(int, const char*, int, const char*);
  static const auto next = reinterpret_cast<Fn>(::dlsym(RTLD_NEXT, "renameat"));
  std::function<void()> hook;
  {
    std::lock_guard lock(zarrcoro::test::rename_hook_mu);
    hook = std::exchange(zarrcoro::test::before_next_rename, nullptr);
  }
  if (hook) hook();
  return next(olddirfd, oldpath, newdirfd, newpath);
}
