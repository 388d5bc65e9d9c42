// The slice viewer (/view/): its pages and embedded files (see endpoints.hpp).
#include "endpoints.hpp"
#include "http_util.hpp"
#include "server_state.hpp"
#include "viewer_assets.hpp"

namespace zarrcoro::server {
namespace {

// What the viewer's pages may load: their own scripts, styles and API only.
constexpr std::string_view kViewerPolicy =
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

// A small page of the viewer's (a list of arrays, or why there is nothing to
// view); `body` is HTML whose names are escaped already.
std::string viewer_page(std::string_view title, std::string_view body) {
  return "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>" + html_escape(title) +
         "</title><link rel=\"icon\" href=\"data:,\"><link rel=\"stylesheet\" href=\"/view/__static/viewer.css\">"
         "</head>\n<body class=\"page\">\n<header><a href=\"/view/\">arrays</a> <a href=\"/\">directory</a></header>\n"
         "<div class=\"page-body\">\n<h1>" +
         html_escape(title) + "</h1>\n" + std::string(body) + "</div>\n</body></html>\n";
}

// A viewer page as a response (never cached: it says what is there now).
Response viewer_page_response(http::status status, std::string_view title, std::string_view body) {
  Response res = respond(status, "text/html; charset=utf-8");
  set_body(res, viewer_page(title, body));
  res.set(http::field::cache_control, "no-store");
  res.set("Content-Security-Policy", kViewerPolicy);
  return res;
}

// The arrays among `members` (paths relative to `group`) as a list of links to their viewers.
std::string array_links(const std::string& group, const std::vector<NodeEntry>& members) {
  std::string h;
  for (const auto& m : members) {
    if (m.node_type != NodeType::array) continue;
    const std::string path = group.empty() ? m.name : group + "/" + m.name;
    h += "<li><a href=\"/view/" + url_path(path) + "\">" + html_escape(path) + "</a></li>\n";
  }
  return h.empty() ? std::string() : "<ul>\n" + h + "</ul>\n";
}

// An embedded file of the viewer, validated by its ETag (If-None-Match: 304).
Response viewer_asset(const ViewerAsset& a, const std::string& if_none_match) {
  Response res = respond(http::status::ok, a.content_type);
  res.set(http::field::etag, a.etag);
  res.set(http::field::cache_control, "no-cache");  // revalidated: a new server may bring new files
  res.set("X-Content-Type-Options", "nosniff");
  if (a.name.ends_with(".html")) res.set("Content-Security-Policy", kViewerPolicy);
  if (!if_none_match.empty() && etag_matches(if_none_match, a.etag)) {
    res.result(http::status::not_modified);
    res.erase(http::field::content_type);
    return res;
  }
  set_body(res, a.body);
  return res;
}

}  // namespace

awaitable<Response> view(std::shared_ptr<ServerState> self, std::string path, std::string if_none_match) {
  if (path.starts_with("__static/")) {
    const auto* asset = find_viewer_asset(std::string_view(path).substr(9));
    if (!asset || asset->name.ends_with(".html"))  // the page itself is served at /view/<array> only
      co_return viewer_page_response(http::status::not_found, "not found", "");
    co_return viewer_asset(*asset, if_none_match);
  }
  if (path.ends_with('/')) path.pop_back();
  const std::string shown = path.empty() ? "/" : path;
  if (!path.empty())
    if (auto why = key_problem(path))
      co_return viewer_page_response(http::status::not_found, "no array at " + shown,
                                     "<p>This is not a valid array path: " + html_escape(*why) + "</p>\n");
  std::optional<Response> failure;
  bool group = false;
  try {
    co_await open_array(self, path);
  } catch (const InvalidMetadata& e) {  // a group there, or an invalid array
    group = e.field() == "node_type";
    if (!group) failure = error_response(e);
  } catch (const StoreError&) {  // a symlink out of the root, an unreadable file
    failure = not_found();
  } catch (const Error& e) {
    failure = error_response(e);
  }
  if (!failure && !group) {
    const auto* page = find_viewer_asset("viewer.html");
    co_return viewer_asset(*page, if_none_match);
  }
  // Not an array: what is there instead (a group's arrays are listed; a
  // v2 group is no array's NotFound).
  std::string arrays;
  if (group || path.empty() || failure->result() == http::status::not_found) {
    auto found = co_await group_members(self, path, true);
    if (auto* list = std::get_if<std::vector<NodeEntry>>(&found)) {
      group = true;
      arrays = array_links(path, *list);
    }
  }
  if (path.empty()) {  // /view/: the arrays of the root group
    std::string body = group ? (arrays.empty() ? "<p>The root group holds no array.</p>\n" : arrays)
                             : "<p>There is no Zarr group at the root. Browse the <a href=\"/\">directories</a>: "
                               "each group's page links its arrays' viewers.</p>\n";
    co_return viewer_page_response(http::status::ok, "arrays", body);
  }
  const auto status = failure && failure->result() != http::status::not_found ? failure->result()
                                                                             : http::status::not_found;
  std::string body;
  if (group) {
    body = "<p>" + html_escape(shown) + " is a group, not an array." +
           (arrays.empty() ? " It holds no array.</p>\n" : " Its arrays:</p>\n" + arrays);
  } else if (status == http::status::not_found) {
    body = "<p>There is no array at " + html_escape(shown) + ".</p>\n";
  } else {  // an array that cannot be opened: say why
    const auto& b = failure->body();
    body = "<p>The array at " + html_escape(shown) + " cannot be opened: " +
           html_escape(std::string_view(reinterpret_cast<const char*>(b.data()), b.size())) + "</p>\n";
  }
  body += "<p>Browse the <a href=\"/\">directories</a> for arrays to view.</p>\n";
  co_return viewer_page_response(status, group ? shown + " is not an array" : "no array at " + shown, body);
}

}  // namespace zarrcoro::server
