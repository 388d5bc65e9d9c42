// Completions that call into Python from an engine thread (an asyncio
// future's result), and the interpreter's exit.
//
// Python ends a thread that takes the GIL once the interpreter finalizes,
// and the unwinding of that thread's GIL scope aborts the process ("Fatal
// Python error: PyGILState_Release"). A completion that released the GIL
// inside Python code (loop.call_soon_threadsafe writes to a socket) just as
// the program ended met that. So zarrcoro's atexit hook, which runs before
// finalization, calls drain_completions() to wait for the completions under
// way, and a completion that starts once the interpreter finalizes leaves
// Python alone.
//
// Thread-safety: PythonCompletion on any thread; drain_completions under
// the GIL.
#pragma once

#include <atomic>

#include <nanobind/nanobind.h>

namespace zarrcoro_python {

namespace detail {
inline std::atomic<long>& completions_running() {
  static std::atomic<long> n{0};
  return n;
}
inline bool interpreter_finalizing() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsFinalizing();
#else
  return _Py_IsFinalizing();
#endif
}
}  // namespace detail

// One completion, counted while it lives: make it before taking the GIL and
// let it end after the GIL scope. python() is false once the interpreter
// finalizes: then touch no Python object, not even to let go of one.
class PythonCompletion {
 public:
  PythonCompletion() : python_(!detail::interpreter_finalizing()) {
    if (python_) detail::completions_running().fetch_add(1);
  }
  ~PythonCompletion() {
    if (python_ && detail::completions_running().fetch_sub(1) == 1) detail::completions_running().notify_all();
  }
  PythonCompletion(const PythonCompletion&) = delete;
  PythonCompletion& operator=(const PythonCompletion&) = delete;
  bool python() const { return python_; }

 private:
  bool python_;
};

// Waits, without the GIL, until no completion is under way.
inline void drain_completions() {
  nanobind::gil_scoped_release release;
  auto& running = detail::completions_running();
  for (long n = running.load(); n != 0; n = running.load()) running.wait(n);
}

}  // namespace zarrcoro_python
