// The native half of zarrcoro.pipeline (zarr-python's codec pipeline on the
// engine): zarrcoro._zarrcoro.ChunkCodec, registered by module.cpp.
#pragma once

#include <exception>
#include <functional>

#include <nanobind/nanobind.h>

namespace zarrcoro {
class Runtime;
}

namespace zarrcoro_python {

// What pipeline.cpp needs of module.cpp.
struct PipelineHooks {
  // The engine Runtime of a zarrcoro._zarrcoro.Runtime object (raises
  // InvalidArgument once it is closed). The Python object keeps it alive.
  std::function<zarrcoro::Runtime&(nanobind::handle)> runtime;
  // The Python exception object for an engine exception; under the GIL.
  std::function<nanobind::object(std::exception_ptr)> exception;
};

void register_pipeline(nanobind::module_& m, PipelineHooks hooks);

}  // namespace zarrcoro_python
