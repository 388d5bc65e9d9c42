// Tests that must change the whole process for good (a seccomp filter that
// refuses system calls) run their body in a forked child.
#pragma once

#include <cerrno>
#include <functional>
#include <initializer_list>
#include <optional>

namespace zarrcoro::test {

// The exit status of a child that cannot run here (no seccomp filter).
inline constexpr int kChildSkipped = 77;

// Makes each system call in `refused` fail with `error` on every thread of
// this process, for good (a seccomp filter cannot be removed): call it only
// in the body of in_child. False where no filter can be installed here.
bool refuse_syscalls(std::initializer_list<int> refused, int error = EPERM);
// The same for ioctl(2) with the one `request` (e.g. FS_IOC_GETVERSION,
// which overlayfs and NFS refuse), leaving others (FIONBIO) to work.
bool refuse_ioctl(unsigned long request, int error);

// Runs `body` in a child process forked from this one; returns body's result
// as the child's exit status, or nullopt (with a warning) if it was
// kChildSkipped. Fails the test unless this process runs no other thread:
// the child would get a copy of each lock, and one that another thread held
// at the fork would stay held for good (a store's pool mutex did, in CI).
std::optional<int> in_child(const std::function<int()>& body);

}  // namespace zarrcoro::test
