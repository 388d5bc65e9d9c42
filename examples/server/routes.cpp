// See routes.hpp.
#include "routes.hpp"

#include "endpoints.hpp"
#include "http_util.hpp"
#include "server_state.hpp"

namespace zarrcoro::server {
namespace {

Response preflight(const std::string& request_headers) {
  Response res = respond(http::status::no_content);
  res.set(http::field::access_control_allow_methods, "GET, HEAD, OPTIONS");
  res.set(http::field::access_control_allow_headers, request_headers.empty() ? "Range, If-None-Match" : request_headers);
  res.set(http::field::access_control_max_age, "86400");
  return res;
}

}  // namespace

awaitable<Reply> handle(std::shared_ptr<ServerState> self, http::verb method, std::string target_text,
                        Preconditions pre, std::string cors_request_headers) {
  const auto target = parse_target(target_text);
  if (!target) co_return reply("invalid", text(http::status::bad_request, "bad request target"));
  if (method == http::verb::options) co_return reply("options", preflight(cors_request_headers));
  const std::string& path = target->path;
  if (path == "healthz") {
    Response res = respond(http::status::ok, "text/plain; charset=utf-8");
    set_body(res, "ok\n");
    res.set(http::field::cache_control, "no-store");
    co_return reply("healthz", std::move(res));
  }
  if (path == "metrics") {
    Response res = respond(http::status::ok, "text/plain; version=0.0.4; charset=utf-8");
    const LoopScheduling sched{self->priority && self->priority->realtime(),
                               self->priority ? self->priority->fifo_exits() : 0};
    set_body(res, self->metrics.render(self->rt.stats(), self->rt.loop_lag(), sched));
    res.set(http::field::cache_control, "no-store");
    co_return reply("metrics", std::move(res));
  }
  if (path == "view") {
    Response res = respond(http::status::moved_permanently);
    res.set(http::field::location, "/view/");
    co_return reply("view", std::move(res));
  }
  if (path.starts_with("view/")) {  // the slice viewer
    std::string rest = path.substr(5);
    Response res = co_await view(self, std::move(rest), std::move(pre.if_none_match));
    co_return reply("view", std::move(res));
  }
  if (path.empty() || path.ends_with('/')) {  // a group's page, for people
    std::string group = path.empty() ? "" : path.substr(0, path.size() - 1);
    Response res = co_await index_page(self, std::move(group));
    co_return reply("index", std::move(res));
  }
  if (path == "api/v1" || path.starts_with("api/v1/")) {
    std::string rest = path.size() > 7 ? path.substr(7) : "";
    if (rest == "members" || rest.ends_with("/members")) {
      rest = rest == "members" ? "" : rest.substr(0, rest.size() - 8);
      std::string query = target->query;
      Response res = co_await members(self, std::move(rest), std::move(query));
      co_return reply("members", std::move(res));
    }
    if (rest == "info" || rest.ends_with("/info")) {
      rest = rest == "info" ? "" : rest.substr(0, rest.size() - 5);
      std::string query = target->query;
      Response res = co_await info(self, std::move(rest), std::move(query));
      co_return reply("info", std::move(res));
    }
    std::string query = target->query;
    Reply r = co_await slice(self, std::move(rest), std::move(query), method == http::verb::head);
    co_return r;
  }
  const bool head = method == http::verb::head;
  Reply r = co_await get_key(self, path, head, std::move(pre));
  co_return r;
}

}  // namespace zarrcoro::server
