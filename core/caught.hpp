// What a call throws, as a value. An operation that fails completes with a
// std::exception_ptr, and must do so outside any catch block: the block keeps
// the exception alive until it ends, behind the thread the completion may
// resume (docs/design.md, Errors across threads). `caught` runs the call and
// leaves the block before the caller completes.
//
// Thread-safety: as the call's.
#pragma once

#include <exception>
#include <utility>

namespace zarrcoro {

// What `f()` threw, or null when it returned.
template <class F>
std::exception_ptr caught(F&& f) noexcept {
  try {
    std::forward<F>(f)();
  } catch (...) {
    return std::current_exception();
  }
  return nullptr;
}

}  // namespace zarrcoro
