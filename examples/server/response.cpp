// See response.hpp.
#include "response.hpp"

#include <spdlog/spdlog.h>

namespace zarrcoro::server {

Response respond(http::status status, std::string_view content_type) {
  Response res{status, 11};
  if (!content_type.empty()) res.set(http::field::content_type, content_type);
  return res;
}

void set_body(Response& res, std::string_view text) {
  const auto* p = reinterpret_cast<const std::byte*>(text.data());
  res.body().assign(p, p + text.size());
}

Response text(http::status status, std::string_view reason) {
  Response res = respond(status, "text/plain; charset=utf-8");
  set_body(res, std::string(reason) + "\n");
  return res;
}

Response not_found() { return text(http::status::not_found, "not found"); }

Response error_response(const Error& e) {
  switch (e.code()) {
    case Errc::invalid_argument: return text(http::status::bad_request, e.what());
    case Errc::not_found: return text(http::status::not_found, e.what());
    case Errc::already_exists: return text(http::status::conflict, e.what());
    case Errc::unsupported: return text(http::status::unprocessable_entity, e.what());
    case Errc::cancelled: return text(http::status::service_unavailable, "cancelled");
    case Errc::store_io:
      spdlog::warn("store error: {}", e.what());
      return text(http::status::internal_server_error, "store error");
    default:  // invalid metadata, corrupt chunk: the data is at fault, say where
      spdlog::warn("{}", e.what());
      return text(http::status::internal_server_error, e.what());
  }
}

std::optional<std::string> key_problem(const std::string& key) {
  try {
    validate_key(key);
    return std::nullopt;
  } catch (const Error& e) {
    return std::string(e.detail());
  }
}

}  // namespace zarrcoro::server
