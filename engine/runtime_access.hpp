// The engine's way into a Runtime (engine internal; tests use it too): the
// engine state a Runtime holds (scheduler with its test hooks, limits, key
// locks), which the public Runtime does not show.
//
// Thread-safety: engine() is as safe as Runtime's methods; the state's
// members say what they allow (engine/engine_state.hpp; the scheduler's
// hooks are set while no operation runs).
#pragma once

#include <zarrcoro/runtime.hpp>

#include "engine/engine_state.hpp"

namespace zarrcoro::detail {

struct RuntimeAccess {
  static EngineState& engine(Runtime& rt) { return rt.engine(); }
};

}  // namespace zarrcoro::detail
