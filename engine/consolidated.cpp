// Consolidated metadata (zarr-python's v2 `.zmetadata` and v3 inline
// `consolidated_metadata`; zarr-specs PR #309). See consolidated.hpp.
#include "engine/consolidated.hpp"

#include <algorithm>
#include <cmath>
#include <set>

#include <boost/asio/deferred.hpp>
#include <boost/asio/experimental/parallel_group.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <zarrcoro/error.hpp>
#include <zarrcoro/metadata.hpp>
#include <zarrcoro/spawn.hpp>

#include "engine/conditional_update.hpp"
#include "engine/node.hpp"

namespace zarrcoro::detail {
namespace {

using json = nlohmann::json;
constexpr const char* kZmetadata = ".zmetadata";

json empty_inline() { return {{"kind", "inline"}, {"must_understand", false}, {"metadata", json::object()}}; }

// A relative node path from a consolidated document: a valid store key.
void check_path(const std::string& path, const std::string& key, const std::string& field) {
  try {
    validate_key(path);
  } catch (const InvalidArgument&) {
    throw InvalidMetadata(key, field, "'" + path + "' is not a node path below the group");
  }
}

json nonfinite_as_string(const json& v) {
  if (v.is_number_float() && !std::isfinite(v.get<double>()))
    return std::isnan(v.get<double>()) ? "NaN" : v.get<double>() > 0 ? "Infinity" : "-Infinity";
  if (v.is_array()) {
    json out = json::array();
    for (const auto& e : v) out.push_back(nonfinite_as_string(e));
    return out;
  }
  return v;
}

// The entry for `docs` in a v3 consolidated copy: the node's zarr.json; a v2
// node's document with its attributes inside (zarr-python's form).
json v3_entry(const NodeDocs& docs) {
  json e = with_string_fill(docs.doc);
  if (docs.zarr_format == 2) e["attributes"] = docs.attrs.is_null() ? json::object() : docs.attrs;
  if (docs.node_type == NodeType::group) e["consolidated_metadata"] = empty_inline();
  return e;
}

// The entries for `docs` at `rel` in a v2 `.zmetadata` (v3 nodes have none).
void add_v2_entries(json& metadata, const std::string& rel, const NodeDocs& docs) {
  if (docs.zarr_format != 2) return;
  const std::string prefix = rel.empty() ? "" : rel + "/";
  metadata[prefix + (docs.node_type == NodeType::array ? ".zarray" : ".zgroup")] = with_string_fill(docs.doc);
  if (!docs.attrs.is_null()) metadata[prefix + ".zattrs"] = docs.attrs;
}

// Strict JSON text of a consolidated document written to `key`; a
// non-finite attribute is refused naming `key`.
Bytes strict_bytes(const json& doc, const std::string& key, bool v2) {
  try {
    return v2 ? v2_json_bytes(doc) : json_bytes(doc);
  } catch (const Error& e) {
    std::string field = e.field();  // dump_json names its root "attributes": the path inside the document
    if (field.starts_with("attributes.")) field.erase(0, std::string("attributes.").size());
    throw_error(e.code(), key, field,
                e.detail() + " (consolidated metadata is strict JSON: NaN and Infinity cannot be written)");
  }
}

bool below(const std::string& name, const std::string& rel) {
  return name.size() > rel.size() && name.compare(0, rel.size(), rel) == 0 && name[rel.size()] == '/';
}

json* copy_entries(json& doc, bool v2) {
  if (!doc.is_object()) return nullptr;
  if (v2) {
    if (doc.value("zarr_consolidated_format", json()) != 1 || !doc.contains("metadata") || !doc["metadata"].is_object())
      return nullptr;
    return &doc["metadata"];
  }
  if (!doc.contains("consolidated_metadata") || !doc["consolidated_metadata"].is_object()) return nullptr;
  auto& cm = doc["consolidated_metadata"];
  return cm.contains("metadata") && cm["metadata"].is_object() ? &cm["metadata"] : nullptr;
}

// True if the copy `metadata` describes a node at `rel`.
bool has_entry(const json& metadata, bool v2, const std::string& rel) {
  return v2 ? metadata.contains(rel + "/.zarray") || metadata.contains(rel + "/.zgroup") : metadata.contains(rel);
}

// Replaces `rel`'s entries in the consolidated copy `metadata` (a v3
// group's or a `.zmetadata`'s) by those of `docs` (none if null); with
// `drop_below`, also drops the entries below `rel` whose documents are not
// among `stored` (the metadata keys below the node, relative to the copy's
// group, as listed now): the nodes the replacement erased go, and a node
// another writer made there since stays.
void update_entries(json& metadata, bool v2, const std::string& rel, const NodeDocs* docs, bool drop_below,
                    const std::set<std::string>& stored = {}) {
  json kept = json::object();
  for (auto& [name, value] : metadata.items()) {
    const bool own = v2 ? (name == rel + "/.zarray" || name == rel + "/.zgroup" || name == rel + "/.zattrs") : name == rel;
    const bool gone = drop_below && below(name, rel) && !stored.contains(v2 ? name : name + "/zarr.json");
    if (own || gone) continue;
    const bool node_doc = !v2 || name.ends_with(".zarray");
    kept[name] = node_doc ? with_string_fill(std::move(value)) : std::move(value);
  }
  if (docs && v2) add_v2_entries(kept, rel, *docs);
  if (docs && !v2) kept[rel] = v3_entry(*docs);
  metadata = std::move(kept);
}

// Visits every consolidated copy held by an ancestor group of `path`.
// Where a copy and the node it is updated for are: the copy `key` held by
// the group `ancestor`, for the node at `path`, `rel` below that group.
struct CopySite {
  std::string key, ancestor, rel, path;
  bool v2 = false;
};

// The copy `current` with the node's entries replaced by those the node has
// now (see update_entries), its parent groups between the copy's group and
// it added where missing (`parents`: their documents, read once per
// visit); nullopt when there is no copy. Without `update` the node's
// entries are only dropped: a check that the copy parses and can be
// written back as strict JSON.
awaitable<std::optional<Bytes>> updated_copy(Store* store, CopySite site, bool update, bool drop_below,
                                             std::map<std::string, std::optional<NodeDocs>>* parents,
                                             std::optional<Bytes> current) {
  if (!current) co_return std::nullopt;
  const auto& [key, ancestor, rel, path, v2] = site;
  json doc = parse_doc(*current, key);
  json* entries = copy_entries(doc, v2);
  if (!entries) co_return std::nullopt;
  // The node as it is now, read after this version of the copy: a writer
  // that replaced it since this operation wrote it may have updated the
  // copy already, and must not be undone.
  std::optional<NodeDocs> node;
  if (update) node = co_await load_node_docs(*store, path);
  std::set<std::string> stored;  // metadata keys below the node now, relative to the copy's group
  if (update && drop_below) {
    const std::string from = node_prefix(ancestor);
    const std::vector<std::string> keys_below = co_await store->list(node_prefix(path));
    for (const auto& k : keys_below)
      if (is_node_doc_name(std::string_view(k).substr(k.rfind('/') + 1))) stored.insert(k.substr(from.size()));
  }
  // A reader nests each entry under its parent group's entry (zarr-python 3
  // fails on a missing one): add the parents, or leave a v3 node below an
  // implicit group out.
  bool placed = update;
  for (auto s = rel.find('/'); update && s != std::string::npos; s = rel.find('/', s + 1)) {
    const std::string parent = rel.substr(0, s);
    if (has_entry(*entries, v2, parent)) continue;
    const std::string from_root = node_prefix(ancestor) + parent;
    if (!parents->contains(from_root)) (*parents)[from_root] = co_await load_node_docs(*store, from_root);
    const auto& found = (*parents)[from_root];
    if (found && found->node_type == NodeType::group) update_entries(*entries, v2, parent, &*found, false);
    else if (!v2) placed = false;
  }
  update_entries(*entries, v2, rel, placed && node ? &*node : nullptr, drop_below, stored);
  co_return strict_bytes(doc, key, v2);
}

awaitable<Update> copy_update(Store* store, CopySite site, bool drop_below,
                              std::map<std::string, std::optional<NodeDocs>>* parents, std::optional<Bytes> current) {
  auto bytes = co_await updated_copy(store, std::move(site), true, drop_below, parents, std::move(current));
  co_return bytes ? Update::store(std::move(*bytes)) : Update::keep();
}

// With `update`: writes each copy back as updated_copy makes it, through
// conditional_update (for up to `timeout`). Without: only checks each copy
// (updated_copy), and adds the keys of those found to `keys`. `keys`: with update, the copies
// to update (the others are not read).
awaitable<void> visit_copies(Store& store, std::string path, bool update, bool drop_below,
                             std::vector<std::string>* keys, std::chrono::milliseconds timeout) {
  std::vector<std::pair<std::string, std::string>> ancestors;  // (ancestor, path relative to it)
  if (!path.empty()) ancestors.emplace_back("", path);
  for (auto s = path.find('/'); s != std::string::npos; s = path.find('/', s + 1))
    ancestors.emplace_back(path.substr(0, s), path.substr(s + 1));
  std::map<std::string, std::optional<NodeDocs>> parents;  // by path from the store root; read once
  for (const auto& [ancestor, rel] : ancestors) {
    for (const bool v2 : {false, true}) {
      CopySite site{node_prefix(ancestor) + (v2 ? kZmetadata : "zarr.json"), ancestor, rel, path, v2};
      if (update) {
        if (std::find(keys->begin(), keys->end(), site.key) == keys->end()) continue;
        const std::string key = site.key;
        Modify rewrite = [&store, site, drop_below, &parents](std::optional<Bytes> current) {
          return copy_update(&store, site, drop_below, &parents, std::move(current));
        };
        co_await conditional_update(store, key, std::move(rewrite), timeout);
      } else {
        auto current = co_await store.get(site.key);
        const std::string key = site.key;
        auto checked = co_await updated_copy(&store, std::move(site), false, drop_below, &parents, std::move(current));
        if (checked) keys->push_back(key);
      }
    }
  }
}

// One node's documents, as an operation of load_nodes_docs' parallel group.
// A cancellation of the group reaches this coroutine's store reads; it must
// not also make co_spawn's own frame throw when the reads completed without
// suspending (Boost 1.81: std::terminate; see store/offload.hpp).
awaitable<std::optional<NodeDocs>> load_docs_of(std::shared_ptr<Store> store, std::string path) {
  co_await boost::asio::this_coro::throw_if_cancelled(false);
  co_return co_await load_node_docs(*store, std::move(path));
}

}  // namespace

json with_string_fill(json doc) {
  if (doc.is_object() && doc.contains("fill_value")) doc["fill_value"] = nonfinite_as_string(doc["fill_value"]);
  return doc;
}

std::shared_ptr<const ConsolidatedView> ConsolidatedView::below(const std::string& name) const {
  auto out = std::make_shared<ConsolidatedView>();
  out->key = key;
  const std::string prefix = name + "/";
  for (const auto& [path, docs] : nodes)
    if (path.starts_with(prefix)) out->nodes.emplace(path.substr(prefix.size()), docs);
  return out;
}

std::shared_ptr<const ConsolidatedView> parse_consolidated_v3(const json& group_doc, const std::string& key) {
  if (!group_doc.contains("consolidated_metadata") || group_doc["consolidated_metadata"].is_null()) return nullptr;
  const auto& cm = group_doc["consolidated_metadata"];
  if (!cm.is_object()) throw InvalidMetadata(key, "consolidated_metadata", "expected an object");
  if (cm.value("kind", json()) != "inline")
    throw UnsupportedError(key, "consolidated_metadata.kind", "expected \"inline\", the only kind there is");
  if (!cm.contains("metadata") || !cm["metadata"].is_object())
    throw InvalidMetadata(key, "consolidated_metadata.metadata", "expected an object of node paths to documents");
  auto view = std::make_shared<ConsolidatedView>();
  view->key = key;
  for (const auto& [path, doc] : cm["metadata"].items()) {
    const std::string field = "consolidated_metadata.metadata[\"" + path + "\"]";
    check_path(path, key, field);
    if (!doc.is_object()) throw InvalidMetadata(key, field, "expected a node's metadata document");
    NodeDocs d;
    d.doc = doc;
    const auto format = doc.value("zarr_format", json());
    if (format == 3) {
      const auto type = doc.value("node_type", json());
      if (type != "array" && type != "group") throw InvalidMetadata(key, field + ".node_type", "expected \"array\" or \"group\"");
      d.node_type = type == "array" ? NodeType::array : NodeType::group;
    } else if (format == 2) {
      d.zarr_format = 2;
      d.node_type = doc.contains("shape") ? NodeType::array : NodeType::group;
      d.attrs = doc.value("attributes", json::object());
      if (!d.attrs.is_object()) throw InvalidMetadata(key, field + ".attributes", "expected an object");
      d.doc.erase("attributes");
    } else {
      throw InvalidMetadata(key, field + ".zarr_format", "expected 2 or 3");
    }
    view->nodes.emplace(path, std::move(d));
  }
  return view;
}

std::shared_ptr<const ConsolidatedView> parse_consolidated_v2(const json& zmetadata, const std::string& key,
                                                              NodeDocs& own) {
  if (!zmetadata.is_object()) throw InvalidMetadata(key, "", "expected a JSON object");
  if (zmetadata.value("zarr_consolidated_format", json()) != 1)
    throw InvalidMetadata(key, "zarr_consolidated_format", "expected 1");
  if (!zmetadata.contains("metadata") || !zmetadata["metadata"].is_object())
    throw InvalidMetadata(key, "metadata", "expected an object of keys to documents");
  auto view = std::make_shared<ConsolidatedView>();
  view->key = key;
  own = NodeDocs{2, NodeType::group, json(), json()};
  std::map<std::string, json> attrs;
  for (const auto& [name, doc] : zmetadata["metadata"].items()) {
    const std::string field = "metadata[\"" + name + "\"]";
    const auto slash = name.rfind('/');
    if (slash == 0) throw InvalidMetadata(key, field, "a key must not start with '/'");
    const std::string rel = slash == std::string::npos ? "" : name.substr(0, slash);
    const std::string leaf = slash == std::string::npos ? name : name.substr(slash + 1);
    if (leaf != ".zarray" && leaf != ".zgroup" && leaf != ".zattrs") continue;  // not a node document
    if (!rel.empty()) check_path(rel, key, field);
    if (!doc.is_object()) throw InvalidMetadata(key, field, "expected a JSON object");
    if (leaf == ".zattrs") {
      attrs[rel] = doc;
      continue;
    }
    NodeDocs& d = rel.empty() ? own : view->nodes[rel];
    if (leaf == ".zarray" || d.doc.is_null()) {  // an array's .zarray wins over a stray .zgroup beside it
      d.zarr_format = 2;
      d.node_type = leaf == ".zarray" ? NodeType::array : NodeType::group;
      d.doc = doc;
    }
  }
  for (auto& [rel, a] : attrs) {
    if (rel.empty()) own.attrs = std::move(a);
    else if (auto it = view->nodes.find(rel); it != view->nodes.end()) it->second.attrs = std::move(a);
  }
  if (!own.doc.is_null() && own.node_type != NodeType::group)
    throw InvalidMetadata(key, "metadata[\".zarray\"]", "the group's own consolidated metadata describes an array");
  return view;
}

NodeType v3_node_type(const json& doc, const std::string& key) {
  if (!doc.is_object()) throw InvalidMetadata(key, "", "expected a JSON object");
  if (doc.value("zarr_format", json()) != 3) throw InvalidMetadata(key, "zarr_format", "expected 3");
  const auto type = doc.value("node_type", json());
  if (type == "array") return NodeType::array;
  if (type == "group") return NodeType::group;
  throw InvalidMetadata(key, "node_type", "expected \"array\" or \"group\"");
}

awaitable<std::optional<NodeDocs>> load_node_docs(Store& store, std::string path) {
  const std::string prefix = node_prefix(path);
  const std::string v3_key = prefix + "zarr.json";
  if (auto doc = co_await store.get(v3_key)) {
    NodeDocs d;
    d.doc = parse_doc(*doc, v3_key);
    d.node_type = v3_node_type(d.doc, v3_key);
    d.doc.erase("consolidated_metadata");  // a nested copy is not carried into another
    co_return d;
  }
  for (const char* name : {".zarray", ".zgroup"}) {
    const std::string key = prefix + name;
    auto doc = co_await store.get(key);
    if (!doc) continue;
    NodeDocs d{2, name == std::string(".zarray") ? NodeType::array : NodeType::group, parse_doc(*doc, key), json()};
    if (!d.doc.is_object()) throw InvalidMetadata(key, "", "expected a JSON object");
    d.attrs = co_await load_zattrs(store, path);
    co_return d;
  }
  co_return std::nullopt;
}

std::string consolidated_key(const std::string& path, int zarr_format) {
  return node_prefix(path) + (zarr_format == 2 ? kZmetadata : "zarr.json");
}

awaitable<Bytes> consolidated_document(std::shared_ptr<Store> store, std::string path, int zarr_format,
                                       std::vector<std::string> members, std::optional<Bytes> current) {
  const std::string key = consolidated_key(path, zarr_format);
  json doc;
  if (zarr_format == 3) {
    if (!current) throw NotFound(key, "", "no group metadata at '" + key + "'");
    doc = parse_doc(*current, key);
    if (!doc.is_object() || doc.value("zarr_format", json()) != 3 || doc.value("node_type", json()) != "group")
      throw InvalidMetadata(key, "", "expected a Zarr v3 group document");
  }
  const std::string prefix = node_prefix(path);
  json metadata = json::object();
  if (zarr_format == 2) {
    const auto own = co_await load_node_docs(*store, path);
    if (own) add_v2_entries(metadata, "", *own);
  }
  std::vector<std::string> paths;
  for (const auto& rel : members) paths.push_back(prefix + rel);
  const auto loaded = co_await load_nodes_docs(store, std::move(paths));
  for (std::size_t i = 0; i < loaded.size(); ++i) {
    const auto& [docs, error] = loaded[i];
    if (error) std::rethrow_exception(error);
    if (!docs) continue;  // removed since it was listed
    if (zarr_format == 2) add_v2_entries(metadata, members[i], *docs);
    else metadata[members[i]] = v3_entry(*docs);
  }
  if (zarr_format == 2) {
    doc = {{"zarr_consolidated_format", 1}};
    doc["metadata"] = std::move(metadata);
  } else {
    json cm = empty_inline();
    cm["metadata"] = std::move(metadata);
    doc["consolidated_metadata"] = std::move(cm);
  }
  co_return strict_bytes(doc, key, zarr_format == 2);
}

awaitable<std::vector<DocsOrError>> load_nodes_docs(std::shared_ptr<Store> store, std::vector<std::string> paths) {
  namespace asio = boost::asio;
  const auto ex = co_await asio::this_coro::executor;
  std::vector<DocsOrError> out;
  constexpr std::size_t kBatch = 64;  // requests at once
  for (std::size_t start = 0; start < paths.size(); start += kBatch) {
    using Op = decltype(co_spawn_safe(ex, load_docs_of(store, std::string()), asio::deferred));
    std::vector<Op> ops;
    for (std::size_t i = start; i < std::min(paths.size(), start + kBatch); ++i)
      ops.push_back(co_spawn_safe(ex, load_docs_of(store, paths[i]), asio::deferred));
    auto group = asio::experimental::make_parallel_group(std::move(ops));
    auto [order, errors, docs] = co_await group.async_wait(asio::experimental::wait_for_all(), asio::use_awaitable);
    for (std::size_t k = 0; k < docs.size(); ++k) out.emplace_back(std::move(docs[k]), errors[k]);
  }
  co_return out;
}

awaitable<std::vector<std::string>> check_consolidated(Store& store, std::string path) {
  std::vector<std::string> keys;
  co_await visit_copies(store, std::move(path), false, false, &keys, kDefaultConflictTimeout);
  co_return keys;
}

awaitable<void> update_consolidated(Store& store, std::string path, bool drop_below, std::vector<std::string> copies,
                                    std::chrono::milliseconds timeout) {
  if (copies.empty()) co_return;
  std::string failed_key, failed_field, detail;
  Errc code{};
  try {
    co_await visit_copies(store, path, true, drop_below, &copies, timeout);
    co_return;
  } catch (const Error& e) {
    code = e.code();
    failed_key = e.key();
    failed_field = e.field();
    detail = e.detail();
  }
  throw_error(code, failed_key, failed_field,
              "'" + path + "' was written, but its entry in this consolidated metadata was not (" + detail +
                  "); Group::consolidate writes the copy anew");
}

namespace {
// The group's own `.zmetadata` `current` with the group's attributes as they
// are now, read after this version of the copy (as updated_copy reads a node).
awaitable<Update> own_copy_update(Store* store, std::string path, std::string key, std::optional<Bytes> current) {
  if (!current) co_return Update::keep();
  json doc = parse_doc(*current, key);
  json* entries = copy_entries(doc, true);
  if (!entries) co_return Update::keep();
  const std::optional<NodeDocs> group = co_await load_node_docs(*store, path);
  const json attributes = group ? group->attrs : json();
  if (attributes.is_null() || attributes.empty()) entries->erase(".zattrs");
  else (*entries)[".zattrs"] = attributes;
  co_return Update::store(strict_bytes(doc, key, true));
}
}  // namespace

awaitable<void> update_own_v2_copy(Store& store, std::string path, std::chrono::milliseconds timeout) {
  const std::string key = node_prefix(path) + kZmetadata;
  Modify rewrite = [&store, path, key](std::optional<Bytes> current) {
    return own_copy_update(&store, path, key, std::move(current));
  };
  co_await conditional_update(store, key, std::move(rewrite), timeout);
}

}  // namespace zarrcoro::detail
