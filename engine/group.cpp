// Groups (Zarr v3 core spec, "Group metadata"; Zarr v2 spec, "Groups" and
// "Attributes").
#include <algorithm>
#include <map>
#include <optional>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/experimental/parallel_group.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <zarrcoro/array.hpp>
#include <zarrcoro/error.hpp>
#include <zarrcoro/runtime.hpp>

#include "engine/blocking.hpp"
#include "engine/node.hpp"

namespace zarrcoro {
namespace {

std::string group_key(const std::string& path) {
  if (path.empty()) return "zarr.json";
  validate_key(path);
  return path + "/zarr.json";
}

nlohmann::json parse_group(const nlohmann::json& j, const std::string& key) {
  if (!j.is_object()) throw InvalidMetadata(key, "", "expected a JSON object");
  // Compared, not converted: a member of another JSON type is refused, not thrown on.
  if (!j.contains("zarr_format") || j["zarr_format"] != 3) throw InvalidMetadata(key, "zarr_format", "expected 3");
  if (!j.contains("node_type") || j["node_type"] != "group")
    throw InvalidMetadata(key, "node_type", "expected \"group\"");
  for (const auto& [name, value] : j.items()) {
    if (name == "zarr_format" || name == "node_type" || name == "attributes") continue;
    if (!(value.is_object() && value.contains("must_understand") && value["must_understand"] == false))
      throw UnsupportedError(key, name,
                             "unknown field '" + name +
                                 "' must be understood (it is not marked \"must_understand\": false)");
  }
  const auto attrs = j.value("attributes", nlohmann::json::object());
  if (!attrs.is_object()) throw InvalidMetadata(key, "attributes", "expected an object");
  return attrs;
}

// Depth first, siblings by name: '/' sorts before every other byte, so
// "a" < "a/b" < "a-b".
struct TreeOrder {
  bool operator()(const std::string& a, const std::string& b) const {
    auto rank = [](char c) { return c == '/' ? 0 : static_cast<unsigned char>(c) + 1; };
    return std::lexicographical_compare(a.begin(), a.end(), b.begin(), b.end(),
                                        [&](char x, char y) { return rank(x) < rank(y); });
  }
};

// The metadata documents found for one node path in a listing.
struct Docs {
  bool v3 = false, zarray = false, zgroup = false;
};

// The node_type in a v3 `zarr.json`; nullopt if the key vanished since it
// was listed.
awaitable<std::optional<NodeType>> v3_node_type(std::shared_ptr<Store> store, std::string key) {
  const auto doc = co_await store->get(key);
  if (!doc) co_return std::nullopt;
  const auto j = detail::parse_doc(*doc, key);
  if (!j.is_object()) throw InvalidMetadata(key, "", "expected a JSON object");
  if (!j.contains("zarr_format") || j["zarr_format"] != 3) throw InvalidMetadata(key, "zarr_format", "expected 3");
  if (j.contains("node_type") && j["node_type"] == "array") co_return NodeType::array;
  if (j.contains("node_type") && j["node_type"] == "group") co_return NodeType::group;
  throw InvalidMetadata(key, "node_type", "expected \"array\" or \"group\"");
}

// Reads the node types of the v3 documents `keys`, up to 64 at a time;
// each with the error reading it raised (raised by the caller only for a
// document that is a node: not one below an array).
using TypeOrError = std::pair<std::optional<NodeType>, std::exception_ptr>;
awaitable<std::vector<TypeOrError>> v3_node_types(std::shared_ptr<Store> store, std::vector<std::string> keys) {
  namespace asio = boost::asio;
  const auto ex = co_await asio::this_coro::executor;
  std::vector<TypeOrError> out;
  constexpr std::size_t kBatch = 64;
  for (std::size_t start = 0; start < keys.size(); start += kBatch) {
    using Op = decltype(asio::co_spawn(ex, v3_node_type(store, std::string()), asio::deferred));
    std::vector<Op> ops;
    for (std::size_t i = start; i < std::min(keys.size(), start + kBatch); ++i)
      ops.push_back(asio::co_spawn(ex, v3_node_type(store, keys[i]), asio::deferred));
    auto group = asio::experimental::make_parallel_group(std::move(ops));
    auto [order, errors, types] = co_await group.async_wait(asio::experimental::wait_for_all(), asio::use_awaitable);
    for (std::size_t k = 0; k < types.size(); ++k) out.emplace_back(types[k], errors[k]);
  }
  co_return out;
}

awaitable<std::vector<NodeEntry>> list_members(std::shared_ptr<Store> store, std::string path, int zarr_format,
                                               bool recursive) {
  const std::string prefix = detail::node_prefix(path);
  std::vector<std::string> keys;
  try {
    keys = co_await store->list(prefix);
  } catch (const StoreError& e) {
    if (e.field() != "list") throw;
    // The hook for consolidated metadata (a listing stored in the group's
    // metadata), which is what a store that cannot list needs.
    throw UnsupportedError(e.key(), "list",
                           "listing the members of group '" + path + "' needs a store that can list keys (" +
                               e.detail() + "); consolidated metadata is not supported yet");
  }
  // Node paths below the group with the documents they hold, and the
  // directories on the way to them (implicit groups unless they hold one).
  std::map<std::string, Docs, TreeOrder> found;
  for (const auto& key : keys) {
    const std::string_view rel = std::string_view(key).substr(prefix.size());
    const auto slash = rel.rfind('/');
    if (slash == std::string_view::npos) continue;  // the group's own documents, stray keys
    const std::string_view doc = rel.substr(slash + 1);
    if (doc != "zarr.json" && doc != ".zarray" && doc != ".zgroup") continue;
    const std::string node(rel.substr(0, slash));
    if (!recursive && node.find('/') != std::string::npos) {
      found.try_emplace(node.substr(0, node.find('/')));  // a direct child without documents, maybe
      continue;
    }
    for (auto s = node.find('/'); s != std::string::npos; s = node.find('/', s + 1)) found.try_emplace(node.substr(0, s));
    Docs& d = found[node];
    (doc == "zarr.json" ? d.v3 : doc == ".zarray" ? d.zarray : d.zgroup) = true;
  }
  std::vector<std::string> v3_keys;
  for (const auto& [node, d] : found)
    if (d.v3) v3_keys.push_back(prefix + node + "/zarr.json");
  const auto v3_types = co_await v3_node_types(store, std::move(v3_keys));

  std::vector<NodeEntry> out;
  std::map<std::string, int> groups;  // listed groups -> zarr_format (implicit ones inherit it)
  std::size_t next_v3 = 0;
  std::string skip;  // the last array listed: nothing below it is a node
  for (const auto& [node, d] : found) {
    TypeOrError v3;
    if (d.v3) v3 = v3_types[next_v3++];
    if (!skip.empty() && node.starts_with(skip)) continue;
    if (v3.second) std::rethrow_exception(v3.second);
    const std::optional<NodeType>& v3_type = v3.first;
    NodeEntry e{node, NodeType::group, 3, false};
    if (v3_type) e.node_type = *v3_type;
    else if (d.zarray) e = {node, NodeType::array, 2, false};
    else if (d.zgroup) e = {node, NodeType::group, 2, false};
    else {
      const auto slash = node.rfind('/');
      e.zarr_format = slash == std::string::npos ? zarr_format : groups.at(node.substr(0, slash));
      e.implicit = true;
    }
    if (e.node_type == NodeType::array) skip = node + "/";
    else groups[node] = e.zarr_format;
    out.push_back(std::move(e));
  }
  co_return out;
}

}  // namespace

awaitable<Group> Group::open(Runtime& rt, std::shared_ptr<Store> store, std::string path) {
  const std::string key = group_key(path);
  if (auto doc = co_await store->get(key))
    co_return Group(rt, std::move(store), std::move(path), parse_group(detail::parse_doc(*doc, key), key), 3);
  const std::string v2_key = detail::node_prefix(path) + ".zgroup";
  auto v2_doc = co_await store->get(v2_key);
  if (!v2_doc) throw NotFound(key, "", "no group metadata at '" + key + "' (nor a Zarr v2 '" + v2_key + "')");
  const auto j = detail::parse_doc(*v2_doc, v2_key);
  if (!j.is_object()) throw InvalidMetadata(v2_key, "", "expected a JSON object");
  if (!j.contains("zarr_format") || j["zarr_format"] != 2) throw InvalidMetadata(v2_key, "zarr_format", "expected 2");
  auto attrs = co_await detail::load_zattrs(*store, path);
  if (attrs.is_null()) attrs = nlohmann::json::object();
  co_return Group(rt, std::move(store), std::move(path), std::move(attrs), 2);
}

awaitable<Group> Group::create(Runtime& rt, std::shared_ptr<Store> store, std::string path,
                               nlohmann::json attributes, int zarr_format, CreateMode mode) {
  const std::string key = zarr_format == 2 ? detail::node_prefix(path) + ".zgroup" : group_key(path);
  if (attributes.is_null()) attributes = nlohmann::json::object();  // `{}` as an argument is null
  if (!attributes.is_object()) throw InvalidArgument(key, "attributes", "expected a JSON object");
  if (zarr_format != 2 && zarr_format != 3)
    throw InvalidArgument(key, "zarr_format", "expected 2 or 3, got " + std::to_string(zarr_format));
  // (Documents are built outside co_await expressions: GCC 12 mishandles
  // initializer lists inside them.)
  nlohmann::json doc = {{"zarr_format", zarr_format}};
  if (zarr_format == 3) {
    doc["node_type"] = "group";
    doc["attributes"] = attributes;
  }
  Bytes bytes = zarr_format == 2 ? detail::v2_json_bytes(doc) : detail::json_bytes(doc);
  co_await detail::prepare_create(*store, path, mode);
  if (zarr_format == 2) {
    co_await detail::create_v2_parents(*store, path);
    co_await detail::store_zattrs(*store, path, attributes);
  }
  co_await store->set(key, std::move(bytes));
  co_return Group(rt, std::move(store), std::move(path), std::move(attributes), zarr_format);
}

boost::asio::any_io_executor Group::executor_of(Runtime& rt) { return rt.io_executor(); }

Group Group::open_blocking(Runtime& rt, std::shared_ptr<Store> store, std::string path) {
  return detail::wait(rt, open(rt, std::move(store), std::move(path)));
}

Group Group::create_blocking(Runtime& rt, std::shared_ptr<Store> store, std::string path,
                             nlohmann::json attributes, int zarr_format, CreateMode mode) {
  return detail::wait(rt, create(rt, std::move(store), std::move(path), std::move(attributes), zarr_format, mode));
}

awaitable<std::vector<NodeEntry>> Group::members(bool recursive) const {
  return list_members(store_, path_, zarr_format_, recursive);
}

std::vector<NodeEntry> Group::members_blocking(bool recursive) const {
  return detail::wait(*rt_, members(recursive));
}

}  // namespace zarrcoro
