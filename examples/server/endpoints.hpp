// The example server's handlers, one per kind of resource (routes.cpp
// dispatches to them):
//   endpoints_key.cpp   a store key's bytes: conditional requests, ranges,
//                       multipart/byteranges; small bodies in memory
//   endpoints_data.cpp  decoded regions of an array (the slice API), the
//                       slice gate, the cache of opened arrays
//   endpoints_meta.cpp  a node's info, a group's members, directory pages
//   endpoints_view.cpp  the slice viewer's pages and files
// Each takes its request's parts by value and answers a Response (or a
// Reply, whose body the session sends); engine errors become error
// responses (error_response), never exceptions.
//
// Thread-safety: a handler runs on its connection's strand; the handlers
// of many connections run at once and share only ServerState (see
// server_state.hpp). Blocking work (a directory's listing) runs on the
// transmit pool, decoding in the runtime's codec pool. html_escape and
// url_path are pure.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <boost/asio/awaitable.hpp>

#include <zarrcoro/array.hpp>

#include "response.hpp"

namespace zarrcoro::server {

struct ServerState;

// ---- endpoints_key.cpp

// A store key: GET or HEAD, with Range (one or several), If-Range,
// If-None-Match and If-Modified-Since (RFC 9110 13.2.2: the latter only
// without the former). The file is opened once; its descriptor gives the
// validators and the bytes, so they always agree. Small bodies are read
// into memory where the page cache has them; others leave by sendfile.
awaitable<Reply> get_key(std::shared_ptr<ServerState> self, std::string key, bool head, Preconditions pre);

// ---- endpoints_meta.cpp

// GET /api/v1/<node>/info[?stats=1]: an array's storage statistics (a
// walk of its chunk keys) only when asked for, else null.
awaitable<Response> info(std::shared_ptr<ServerState> self, std::string path, std::string query);

// The group at `path` (consolidated metadata used when present) and its
// members, or the error response.
awaitable<std::variant<std::vector<NodeEntry>, Response>> group_members(std::shared_ptr<ServerState> self,
                                                                        std::string path, bool recursive);

// GET /api/v1/<group>/members[?recursive=1]: {"members": [{"name",
// "node_type", "zarr_format", "implicit"}, ...]} as Group::members lists them.
awaitable<Response> members(std::shared_ptr<ServerState> self, std::string path, std::string query);

// GET / and GET /<dir>/: an HTML page of the directory (index_html).
awaitable<Response> index_page(std::shared_ptr<ServerState> self, std::string path);

// `s` with HTML's special characters (& < > " ') escaped.
std::string html_escape(std::string_view s);

// A path as a URL path: every byte but unreserved ones and '/' percent-encoded.
std::string url_path(std::string_view s);

// ---- endpoints_view.cpp

// GET /view/<array>: the viewer (the same page for every array; it reads
// the array's path from its URL); /view/__static/<file>: its script and
// style sheet; /view/: the arrays of the root group. Anything that is not
// an array is a 404 page saying so (with a group's arrays, if a group).
// "__" starts no Zarr v3 node name (the prefix is reserved), so no array
// is shadowed by the files.
awaitable<Response> view(std::shared_ptr<ServerState> self, std::string path, std::string if_none_match);

// ---- endpoints_data.cpp

// GET /api/v1/<array>?region=...&format=npy|raw
awaitable<Reply> slice(std::shared_ptr<ServerState> self, std::string path, std::string query, bool head);

// The array at `path`, opened at most opt.metadata_max_age ago.
awaitable<Array> open_array(std::shared_ptr<ServerState> self, std::string path);

}  // namespace zarrcoro::server
