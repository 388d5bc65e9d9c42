// Helpers shared by the v3 and v2 metadata code (engine internal).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include <zarrcoro/bytes.hpp>
#include <zarrcoro/error.hpp>

#include "core/text.hpp"

namespace zarrcoro::detail {

// Runs `f`, turning an exception of the JSON library (a member of another
// type than expected, a number out of range) into InvalidMetadata(key,
// field): only the zarrcoro::Error family leaves the library. `field` is
// read when the exception is caught, so `f` may update it as it goes.
template <class F>
auto json_guard(const std::string& key, const std::string& field, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const nlohmann::json::exception& e) {
    throw InvalidMetadata(key, field, std::string("unexpected JSON value: ") + e.what());
  }
}

// Parses a list of non-negative integers; InvalidMetadata(key, field).
std::vector<std::uint64_t> parse_shape(const nlohmann::json& j, const std::string& key,
                                       const std::string& field);

}  // namespace zarrcoro::detail
