// Helpers shared by the test suites.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <zarrcoro/bytes.hpp>

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

Bytes read_file(const std::filesystem::path& p);
// "01 0a ff" or "010aff" -> bytes.
Bytes hex(const std::string& text);
std::string to_hex(ByteSpan bytes);

// True if something accepts TCP connections on 127.0.0.1:port.
bool port_answers(std::uint16_t port);

}  // namespace zarrcoro::test
