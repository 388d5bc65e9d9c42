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
#include <zarrcoro/group.hpp>
#include <zarrcoro/runtime.hpp>

#include "engine/blocking.hpp"
#include "engine/conditional_update.hpp"
#include "engine/consolidated.hpp"
#include "engine/node.hpp"

namespace zarrcoro {
namespace {

std::string group_key(const std::string& path) { return detail::node_prefix(path) + "zarr.json"; }

nlohmann::json parse_group(const nlohmann::json& j, const std::string& key) {
  if (!j.is_object()) throw InvalidMetadata(key, "", "expected a JSON object");
  // Compared, not converted: a member of another JSON type is refused, not thrown on.
  if (!j.contains("zarr_format") || j["zarr_format"] != 3) throw InvalidMetadata(key, "zarr_format", "expected 3");
  if (!j.contains("node_type") || j["node_type"] != "group")
    throw InvalidMetadata(key, "node_type", "expected \"group\"");
  for (const auto& [name, value] : j.items()) {
    // consolidated_metadata is read by Group::open (null: none, as some writers put it).
    if (name == "zarr_format" || name == "node_type" || name == "attributes" || name == "consolidated_metadata")
      continue;
    if (!(value.is_object() && value.contains("must_understand") && value["must_understand"] == false))
      throw UnsupportedError(key, name,
                             "unknown field '" + name +
                                 "' must be understood (it is not marked \"must_understand\": false)");
  }
  const auto attrs = j.value("attributes", nlohmann::json::object());
  if (!attrs.is_object()) throw InvalidMetadata(key, "attributes", "expected an object");
  return attrs;
}

// The v3 group document `current` with only its attributes replaced (its
// consolidated metadata stays).
awaitable<detail::Update> with_group_attributes(std::string key, nlohmann::json attributes,
                                                std::optional<Bytes> current) {
  if (!current) throw NotFound(key, "", "no group metadata at '" + key + "'");
  nlohmann::json stored = detail::parse_doc(*current, key);
  if (!stored.is_object() || stored.value("node_type", nlohmann::json()) != "group")
    throw InvalidMetadata(key, "node_type", "expected a Zarr v3 group document");
  stored["attributes"] = std::move(attributes);
  co_return detail::Update::store(detail::json_bytes(stored));
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

// The node types of the v3 documents `keys` (each "<node>/zarr.json"); nullopt
// for one that vanished since it was listed; each with the error reading it
// raised (raised by the caller only for a document that is a node: not one
// below an array).
using TypeOrError = std::pair<std::optional<NodeType>, std::exception_ptr>;
awaitable<std::vector<TypeOrError>> v3_node_types(std::shared_ptr<Store> store, std::vector<std::string> keys) {
  std::vector<std::string> paths;
  for (const auto& key : keys) paths.push_back(key.substr(0, key.size() - std::string("/zarr.json").size()));
  const auto loaded = co_await detail::load_nodes_docs(std::move(store), std::move(paths));
  std::vector<TypeOrError> out;
  for (const auto& [docs, error] : loaded) {
    std::optional<NodeType> type;
    if (docs && docs->zarr_format == 3) type = docs->node_type;
    out.emplace_back(type, error);
  }
  co_return out;
}

// The node types of the v3 documents `keys` (below `prefix`) as `view` has them.
std::vector<TypeOrError> v3_node_types(const detail::ConsolidatedView& view, const std::string& prefix,
                                       const std::vector<std::string>& keys) {
  std::vector<TypeOrError> out;
  for (const auto& key : keys) {
    const std::string node = key.substr(prefix.size(), key.size() - prefix.size() - std::string("/zarr.json").size());
    out.emplace_back(view.nodes.at(node).node_type, nullptr);
  }
  return out;
}

// The metadata document keys `view` describes, as a listing would find them.
std::vector<std::string> keys_of(const detail::ConsolidatedView& view, const std::string& prefix) {
  std::vector<std::string> keys;
  for (const auto& [node, docs] : view.nodes)
    keys.push_back(prefix + node + "/" +
                   (docs.zarr_format == 3 ? "zarr.json" : docs.node_type == NodeType::array ? ".zarray" : ".zgroup"));
  return keys;
}

// The members of the group at `path`: from `view` if there is one, else
// from a listing of the store.
awaitable<std::vector<NodeEntry>> list_members(std::shared_ptr<Store> store, std::string path, int zarr_format,
                                               bool recursive, std::shared_ptr<const detail::ConsolidatedView> view) {
  const std::string prefix = detail::node_prefix(path);
  std::vector<std::string> keys;
  if (view) {
    keys = keys_of(*view, prefix);
  } else {
    try {
      keys = co_await store->list(prefix);
    } catch (const StoreError& e) {
      if (e.field() != "list") throw;
      throw UnsupportedError(e.key(), "list",
                             "listing the members of group '" + path + "' needs a store that can list keys (" +
                                 e.detail() + ") or consolidated metadata in the group (none was found)");
    }
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
    if (!detail::node_path_error(node, doc == "zarr.json" ? 3 : 2).empty()) continue;  // no node of the spec's
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
  std::vector<TypeOrError> v3_types;
  if (view) v3_types = v3_node_types(*view, prefix, v3_keys);
  else v3_types = co_await v3_node_types(store, v3_keys);

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

awaitable<Group> Group::open(Runtime& rt, std::shared_ptr<Store> store, std::string path, Consolidated consolidated) {
  const std::string key = group_key(path);
  if (auto doc = co_await store->get(key)) {
    detail::check_node_path(path, 3);
    const auto j = detail::parse_doc(*doc, key);
    auto attrs = parse_group(j, key);
    std::shared_ptr<const detail::ConsolidatedView> view;
    if (consolidated != Consolidated::ignore) view = detail::parse_consolidated_v3(j, key);
    if (consolidated == Consolidated::require && !view)
      throw NotFound(key, "consolidated_metadata", "group '" + path + "' holds no consolidated metadata");
    co_return Group(rt, std::move(store), std::move(path), std::move(attrs), 3, std::move(view), consolidated);
  }
  const std::string prefix = detail::node_prefix(path);
  std::shared_ptr<const detail::ConsolidatedView> view;
  detail::NodeDocs own;
  if (consolidated != Consolidated::ignore) {
    const std::string zm_key = prefix + ".zmetadata";
    if (auto zm = co_await store->get(zm_key)) view = detail::parse_consolidated_v2(detail::parse_doc(*zm, zm_key), zm_key, own);
    else if (consolidated == Consolidated::require)
      throw NotFound(zm_key, "", "group '" + path + "' holds no consolidated metadata (no '" + key + "', no '" + zm_key + "')");
  }
  const std::string v2_key = prefix + ".zgroup";
  nlohmann::json j = own.doc;  // the consolidated copy of .zgroup and .zattrs when there is one
  nlohmann::json attrs = own.attrs;
  if (j.is_null()) {
    auto v2_doc = co_await store->get(v2_key);
    if (!v2_doc) throw NotFound(key, "", "no group metadata at '" + key + "' (nor a Zarr v2 '" + v2_key + "')");
    j = detail::parse_doc(*v2_doc, v2_key);
    attrs = co_await detail::load_zattrs(*store, path);
  }
  if (!j.is_object()) throw InvalidMetadata(v2_key, "", "expected a JSON object");
  if (!j.contains("zarr_format") || j["zarr_format"] != 2) throw InvalidMetadata(v2_key, "zarr_format", "expected 2");
  if (attrs.is_null()) attrs = nlohmann::json::object();
  if (!attrs.is_object()) throw InvalidMetadata(prefix + ".zattrs", "", "expected a JSON object of attributes");
  co_return Group(rt, std::move(store), std::move(path), std::move(attrs), 2, std::move(view), consolidated);
}

awaitable<Group> Group::create(Runtime& rt, std::shared_ptr<Store> store, std::string path,
                               nlohmann::json attributes, int zarr_format, CreateMode mode) {
  const std::string key = detail::node_prefix(path, zarr_format) + (zarr_format == 2 ? ".zgroup" : "zarr.json");
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
  auto copies = co_await detail::check_consolidated(*store, path);
  co_await detail::prepare_create(*store, path, mode);
  co_await detail::create_parents(*store, path, zarr_format);
  if (zarr_format == 2) co_await detail::store_zattrs(*store, path, attributes);
  co_await store->set(key, std::move(bytes));
  co_await detail::update_consolidated(*store, path, mode == CreateMode::overwrite, std::move(copies),
                                       rt.options().write_conflict_timeout);
  co_return Group(rt, std::move(store), std::move(path), std::move(attributes), zarr_format, nullptr,
                  Consolidated::use_if_present);
}

boost::asio::any_io_executor Group::executor_of(Runtime& rt) { return rt.io_executor(); }

Group Group::open_blocking(Runtime& rt, std::shared_ptr<Store> store, std::string path, Consolidated consolidated) {
  return detail::wait(rt, open(rt, std::move(store), std::move(path), consolidated));
}

Group Group::create_blocking(Runtime& rt, std::shared_ptr<Store> store, std::string path,
                             nlohmann::json attributes, int zarr_format, CreateMode mode) {
  return detail::wait(rt, create(rt, std::move(store), std::move(path), std::move(attributes), zarr_format, mode));
}

Runtime& Group::runtime() const {
  if (!rt_) throw InvalidArgument("", "", "an empty Group handle (default-constructed): assign it from open() or create()");
  return *rt_;
}

awaitable<std::vector<NodeEntry>> Group::members(bool recursive) const {
  (void)runtime();  // an empty handle has no store
  return list_members(store_, path_, zarr_format_, recursive, consolidated_);
}

std::vector<NodeEntry> Group::members_blocking(bool recursive) const {
  return detail::wait(runtime(), members(recursive));
}

namespace {
std::string member_path(const std::string& group, const std::string& name) {
  std::string path = detail::node_prefix(group) + name;
  detail::check_node_path(path, 0);
  return path;
}

const detail::NodeDocs* find_member(const std::shared_ptr<const detail::ConsolidatedView>& view,
                                    const std::string& name) {
  if (!view) return nullptr;
  const auto it = view->nodes.find(name);
  return it == view->nodes.end() ? nullptr : &it->second;
}
}  // namespace

// (Static, with every value copied: the awaitable does not refer to the handle.)
awaitable<Array> Group::open_array_in(Runtime* rt, std::shared_ptr<Store> store, std::string group,
                                      std::shared_ptr<const detail::ConsolidatedView> view, std::string name) {
  std::string path = member_path(group, name);
  const detail::NodeDocs* docs = find_member(view, name);
  if (!docs) co_return co_await Array::open(*rt, std::move(store), std::move(path));
  const std::string key = detail::array_metadata_key(path, docs->zarr_format);
  if (docs->node_type != NodeType::array)
    throw NotFound(key, "", "'" + path + "' is a group, not an array (" + view->key + ")");
  ArrayMetadata meta = docs->zarr_format == 3 ? ArrayMetadata::from_json(docs->doc, key)
                                              : ArrayMetadata::from_v2_json(docs->doc, docs->attrs, key);
  co_return Array::from_metadata(*rt, std::move(store), std::move(path), std::move(meta));
}

awaitable<Group> Group::open_group_in(Runtime* rt, std::shared_ptr<Store> store, std::string group,
                                      std::shared_ptr<const detail::ConsolidatedView> view, std::string name,
                                      Consolidated mode) {
  std::string path = member_path(group, name);
  const detail::NodeDocs* docs = find_member(view, name);
  if (!docs) co_return co_await open(*rt, std::move(store), std::move(path), mode);
  const std::string key = docs->zarr_format == 3 ? group_key(path) : detail::node_prefix(path) + ".zgroup";
  if (docs->node_type != NodeType::group)
    throw NotFound(key, "", "'" + path + "' is an array, not a group (" + view->key + ")");
  detail::check_node_path(path, docs->zarr_format);
  nlohmann::json attrs;
  if (docs->zarr_format == 3) attrs = parse_group(docs->doc, key);
  else attrs = docs->attrs.is_null() ? nlohmann::json::object() : docs->attrs;
  co_return Group(*rt, std::move(store), std::move(path), std::move(attrs), docs->zarr_format, view->below(name),
                  mode);
}

awaitable<Array> Group::open_array(std::string name) const {
  return open_array_in(&runtime(), store_, path_, consolidated_, std::move(name));
}

awaitable<Group> Group::open_group(std::string name) const {
  return open_group_in(&runtime(), store_, path_, consolidated_, std::move(name), mode_);
}

awaitable<Group> Group::consolidate() const { return consolidate_group(runtime(), store_, path_, zarr_format_); }

awaitable<Group> Group::set_attributes(nlohmann::json attributes) const {
  return set_group_attributes(runtime(), store_, path_, zarr_format_, std::move(attributes), mode_);
}

Group Group::set_attributes_blocking(nlohmann::json attributes) const {
  return detail::wait(runtime(), set_attributes(std::move(attributes)));
}

awaitable<Group> Group::set_group_attributes(Runtime& rt, std::shared_ptr<Store> store, std::string path,
                                             int zarr_format, nlohmann::json attributes, Consolidated mode) {
  const std::string key = detail::node_prefix(path) + (zarr_format == 2 ? ".zgroup" : "zarr.json");
  detail::check_attributes(attributes, key);
  auto copies = co_await detail::check_consolidated(*store, path);
  if (zarr_format == 2) {
    const bool there = co_await store->exists(key);
    if (!there) throw NotFound(key, "", "no group metadata at '" + key + "'");
    co_await detail::store_zattrs(*store, path, attributes);
    co_await detail::update_own_v2_copy(*store, path, rt.options().write_conflict_timeout);
  } else {
    detail::Modify replace = [key, attributes](std::optional<Bytes> current) {
      return with_group_attributes(key, attributes, std::move(current));
    };
    co_await detail::conditional_update(*store, key, std::move(replace), rt.options().write_conflict_timeout);
  }
  co_await detail::update_consolidated(*store, path, false, std::move(copies), rt.options().write_conflict_timeout);
  co_return co_await open(rt, std::move(store), std::move(path), mode);
}


namespace {
// The group's consolidated document `current` rebuilt from a listing made
// after it was read.
awaitable<detail::Update> consolidation(std::shared_ptr<Store> store, std::string path, int zarr_format,
                                        std::optional<Bytes> current) {
  const auto found = co_await list_members(store, path, zarr_format, true, nullptr);
  // Implicit groups have no document to hold. v3 readers nest each entry
  // under its parent's, so a v3 copy leaves out what lies below one.
  std::vector<std::string> members, implicit;
  for (const auto& m : found) {
    const bool under_implicit = std::any_of(implicit.begin(), implicit.end(),
                                            [&](const std::string& g) { return m.name.starts_with(g + "/"); });
    if (m.implicit) implicit.push_back(m.name);
    else if (zarr_format == 2 || !under_implicit) members.push_back(m.name);
  }
  co_return detail::Update::store(
      co_await detail::consolidated_document(store, path, zarr_format, std::move(members), std::move(current)));
}
}  // namespace

awaitable<Group> Group::consolidate_group(Runtime& rt, std::shared_ptr<Store> store, std::string path, int zarr_format) {
  const std::string key = detail::consolidated_key(path, zarr_format);
  detail::Modify rebuild = [store, path, zarr_format](std::optional<Bytes> current) {
    return consolidation(store, path, zarr_format, std::move(current));
  };
  co_await detail::conditional_update(*store, key, std::move(rebuild), rt.options().write_conflict_timeout);
  co_return co_await open(rt, std::move(store), std::move(path), Consolidated::require);
}

Array Group::open_array_blocking(std::string name) const { return detail::wait(runtime(), open_array(std::move(name))); }
Group Group::open_group_blocking(std::string name) const { return detail::wait(runtime(), open_group(std::move(name))); }
Group Group::consolidate_blocking() const { return detail::wait(runtime(), consolidate()); }

}  // namespace zarrcoro
