// A node's info, a group's members and the directory pages (see endpoints.hpp).
#include <algorithm>
#include <filesystem>
#include <optional>

#include <nlohmann/json.hpp>

#include <zarrcoro/info.hpp>

#include "endpoints.hpp"
#include "http_util.hpp"
#include "server_state.hpp"

namespace zarrcoro::server {
namespace {

std::string members_json(const std::vector<NodeEntry>& found) {
  nlohmann::json list = nlohmann::json::array();
  for (const auto& m : found)
    list.push_back({{"name", m.name},
                    {"node_type", m.node_type == NodeType::array ? "array" : "group"},
                    {"zarr_format", m.zarr_format},
                    {"implicit", m.implicit}});
  return nlohmann::json{{"members", std::move(list)}}.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) +
         "\n";
}

struct DirEntry {
  std::string name;
  bool dir;
};

// A directory's page: for people, the members of the group there (with
// links to their pages, info and .npy downloads); for tools (fsspec's HTTP
// listing reads the links of a page), a link to every entry.
std::string index_html(const std::string& dir, const std::optional<std::vector<NodeEntry>>& members,
                       const std::vector<DirEntry>& entries) {
  const std::string title = "/" + (dir.empty() ? "" : dir + "/");
  const std::string prefix = dir.empty() ? "" : dir + "/";
  // Links to the node's info (only where there is a node: a group, or an
  // array's metadata), its members and the directory above.
  const bool node = members || std::any_of(entries.begin(), entries.end(), [](const DirEntry& e) {
                      return !e.dir && (e.name == "zarr.json" || e.name == ".zarray" || e.name == ".zgroup");
                    });
  std::vector<std::string> links;
  if (node) links.push_back("<a href=\"/api/v1/" + url_path(prefix) + "info\">info</a>");
  if (members) links.push_back("<a href=\"/api/v1/" + url_path(prefix) + "members?recursive=1\">members (JSON)</a>");
  if (!dir.empty()) {
    const auto up = dir.rfind('/');
    links.push_back("<a href=\"/" + url_path(up == std::string::npos ? "" : dir.substr(0, up) + "/") + "\">up</a>");
  }
  std::string h = "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>zarrcoro " + html_escape(title) +
                  "</title></head>\n<body>\n<h1>" + html_escape(title) + "</h1>\n";
  for (std::size_t i = 0; i < links.size(); ++i)
    h += (i == 0 ? "<p>" : " &middot; ") + links[i] + (i + 1 == links.size() ? "</p>\n" : "");
  if (members) {
    h += "<h2>Members</h2>\n<ul>\n";
    for (const auto& m : *members) {
      const std::string path = prefix + m.name;
      h += "<li><a href=\"/" + url_path(path) + "/\">" + html_escape(m.name) + "/</a> ";
      if (m.node_type == NodeType::group) h += "group</li>\n";
      else
        h += "array: <a href=\"/api/v1/" + url_path(path) + "/info\">info</a>, <a href=\"/api/v1/" + url_path(path) +
             "?format=npy\">.npy</a>, <a href=\"/view/" + url_path(path) + "\">view</a></li>\n";
    }
    if (members->empty()) h += "<li>(none)</li>\n";
    h += "</ul>\n";
  }
  h += "<h2>Keys</h2>\n<ul>\n";
  for (const auto& e : entries) {
    const std::string name = e.name + (e.dir ? "/" : "");
    h += "<li><a href=\"/" + url_path(prefix + name) + "\">" + html_escape(name) + "</a></li>\n";
  }
  return h + "</ul>\n</body></html>\n";
}

// A query string holding at most the flag `name` (=1|true|0|false), read
// into `value`; a 400 response for anything else.
std::optional<Response> flag_param(const std::string& query, const std::string& name, bool& value) {
  const auto params = parse_query(query);
  if (!params) return text(http::status::bad_request, "malformed query string");
  if (auto twice = repeated_param(*params)) return text(http::status::bad_request, "parameter '" + *twice + "' given twice");
  for (const auto& [k, v] : *params) {
    if (k == name && (v == "1" || v == "true")) value = true;
    else if (k == name && (v == "0" || v == "false")) value = false;
    else {
      std::string what = "unknown parameter '";
      what.append(k).append("=").append(v).append("' (expected ").append(name).append("=1|0)");
      return text(http::status::bad_request, what);
    }
  }
  return std::nullopt;
}

// True if `path` (a valid key or "") resolves, through symlinks, inside `root`.
bool inside(const fs::path& root, const std::string& path) {
  std::error_code ec;
  const fs::path p = fs::weakly_canonical(root / path, ec);
  const auto rel = p.lexically_relative(root);
  return !ec && !rel.empty() && *rel.begin() != "..";
}

// The sorted names of the subdirectories of `path` under `root` (a group's
// candidate children). Blocking, but a group's directory is small.
std::vector<std::string> subdirectories(const fs::path& root, const std::string& path) {
  std::error_code ec;
  const fs::path dir = fs::weakly_canonical(root / path, ec);
  std::vector<std::string> names;
  if (ec || !inside(root, path)) return names;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.is_directory(ec)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

// The entries of the directory `path` under `root`, sorted by name; nullopt
// if it is no directory inside the root. Blocking (a directory of chunks
// may be large): run it off the loop.
std::optional<std::vector<DirEntry>> directory_entries(const fs::path& root, const std::string& path) {
  std::error_code ec;
  const fs::path dir = fs::weakly_canonical(root / path, ec);
  if (ec || !inside(root, path) || !fs::is_directory(dir, ec)) return std::nullopt;
  std::vector<DirEntry> out;
  for (const auto& e : fs::directory_iterator(dir, ec)) out.push_back({e.path().filename().string(), e.is_directory(ec)});
  std::sort(out.begin(), out.end(), [](const DirEntry& a, const DirEntry& b) { return a.name < b.name; });
  return out;
}

}  // namespace

std::string html_escape(std::string_view s) {
  std::string out;
  for (const char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string url_path(std::string_view s) {
  std::string out;
  for (const unsigned char c : s) {
    if (std::isalnum(c) || c == '/' || c == '.' || c == '-' || c == '_' || c == '~') out += static_cast<char>(c);
    else out += fmt::format("%{:02X}", c);
  }
  return out;
}

awaitable<Response> info(std::shared_ptr<ServerState> self, std::string path, std::string query) {
  if (!path.empty())
    if (auto why = key_problem(path)) co_return text(http::status::bad_request, "invalid path: " + *why);
  bool stats = false;
  if (auto bad = flag_param(query, "stats", stats)) co_return std::move(*bad);
  if (!inside(self->store->root(), path)) co_return not_found();  // a symlink out of the root
  std::optional<Response> failure;
  nlohmann::ordered_json j;
  try {
    auto children = subdirectories(self->store->root(), path);
    j = co_await node_info(self->rt, self->store, path, std::move(children), stats);
  } catch (const Error& e) {
    failure = error_response(e);
  }
  if (failure) co_return std::move(*failure);
  Response res = respond(http::status::ok, "application/json");
  set_body(res, j.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n");
  co_return res;
}

awaitable<std::variant<std::vector<NodeEntry>, Response>> group_members(std::shared_ptr<ServerState> self,
                                                                        std::string path, bool recursive) {
  if (!path.empty())
    if (auto why = key_problem(path)) co_return text(http::status::bad_request, "invalid path: " + *why);
  if (!inside(self->store->root(), path)) co_return not_found();  // a symlink out of the root
  std::optional<Response> failure;
  std::vector<NodeEntry> found;
  try {
    const Group g = co_await Group::open(self->rt, self->store, path);
    found = co_await g.members(recursive);
  } catch (const InvalidMetadata& e) {  // an array there: no group, as for a missing one
    failure = e.field() == "node_type" ? text(http::status::not_found, "'" + path + "' is not a group")
                                       : error_response(e);
  } catch (const Error& e) {
    failure = error_response(e);
  }
  if (failure) co_return std::move(*failure);
  co_return found;
}

awaitable<Response> members(std::shared_ptr<ServerState> self, std::string path, std::string query) {
  bool recursive = false;
  if (auto bad = flag_param(query, "recursive", recursive)) co_return std::move(*bad);
  auto found = co_await group_members(self, std::move(path), recursive);
  if (auto* failure = std::get_if<Response>(&found)) co_return std::move(*failure);
  Response res = respond(http::status::ok, "application/json");
  set_body(res, members_json(std::get<std::vector<NodeEntry>>(found)));
  co_return res;
}

awaitable<Response> index_page(std::shared_ptr<ServerState> self, std::string path) {
  if (!path.empty())
    if (auto why = key_problem(path)) co_return text(http::status::bad_request, "invalid path: " + *why);
  auto list = [root = self->store->root(), path] { return directory_entries(root, path); };
  auto entries = co_await self->inbox->run(self->transmit_pool, std::move(list), use_awaitable);
  if (!entries) co_return not_found();
  auto found = co_await group_members(self, path, false);
  std::optional<std::vector<NodeEntry>> members;
  if (auto* list = std::get_if<std::vector<NodeEntry>>(&found)) members = std::move(*list);
  Response res = respond(http::status::ok, "text/html; charset=utf-8");
  set_body(res, index_html(path, members, *entries));
  co_return res;
}

}  // namespace zarrcoro::server
