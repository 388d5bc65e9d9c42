// Consolidated metadata (zarr-python's v2 `.zmetadata` and v3 inline
// `consolidated_metadata`; zarr-specs PR #309). See consolidated.hpp.
#include "engine/consolidated.hpp"

#include <cmath>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/experimental/parallel_group.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <zarrcoro/error.hpp>
#include <zarrcoro/metadata.hpp>

#include "engine/node.hpp"

namespace zarrcoro::detail {
namespace {

using json = nlohmann::json;
constexpr const char* kZmetadata = ".zmetadata";
constexpr int kAttempts = 8;  // conditional replacements of one copy before giving up

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
    throw_error(e.code(), key, e.field(),
                e.detail() + " (attributes in consolidated metadata must be strict JSON: NaN and Infinity cannot be "
                             "written)");
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

// Replaces `rel`'s entries in the consolidated copy `metadata` (a v3
// group's or a `.zmetadata`'s) by those of `docs` (none if null), and drops
// the entries below `rel`.
void update_entries(json& metadata, bool v2, const std::string& rel, const NodeDocs* docs) {
  json kept = json::object();
  for (auto& [name, value] : metadata.items()) {
    const bool own = v2 ? (name == rel + "/.zarray" || name == rel + "/.zgroup" || name == rel + "/.zattrs") : name == rel;
    if (own || below(name, rel)) continue;
    const bool node_doc = !v2 || name.ends_with(".zarray");
    kept[name] = node_doc ? with_string_fill(std::move(value)) : std::move(value);
  }
  if (docs && v2) add_v2_entries(kept, rel, *docs);
  if (docs && !v2) kept[rel] = v3_entry(*docs);
  metadata = std::move(kept);
}

awaitable<std::optional<NodeDocs>> load_docs_of(std::shared_ptr<Store> store, std::string path) {
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
  return view;
}

awaitable<std::optional<NodeDocs>> load_node_docs(Store& store, std::string path) {
  const std::string prefix = node_prefix(path);
  const std::string v3_key = prefix + "zarr.json";
  if (auto doc = co_await store.get(v3_key)) {
    NodeDocs d;
    d.doc = parse_doc(*doc, v3_key);
    if (!d.doc.is_object()) throw InvalidMetadata(v3_key, "", "expected a JSON object");
    const auto type = d.doc.value("node_type", json());
    if (type != "array" && type != "group") throw InvalidMetadata(v3_key, "node_type", "expected \"array\" or \"group\"");
    d.node_type = type == "array" ? NodeType::array : NodeType::group;
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

awaitable<void> consolidate(std::shared_ptr<Store> store, std::string path, int zarr_format,
                            std::vector<std::string> members) {
  namespace asio = boost::asio;
  const std::string prefix = node_prefix(path);
  const auto ex = co_await asio::this_coro::executor;
  json metadata = json::object();
  if (zarr_format == 2) {
    const auto own = co_await load_node_docs(*store, path);
    if (own) add_v2_entries(metadata, "", *own);
  }
  constexpr std::size_t kBatch = 64;  // documents read at once
  for (std::size_t start = 0; start < members.size(); start += kBatch) {
    using Op = decltype(asio::co_spawn(ex, load_docs_of(store, std::string()), asio::deferred));
    std::vector<Op> ops;
    for (std::size_t i = start; i < std::min(members.size(), start + kBatch); ++i)
      ops.push_back(asio::co_spawn(ex, load_docs_of(store, prefix + members[i]), asio::deferred));
    auto group = asio::experimental::make_parallel_group(std::move(ops));
    auto [order, errors, docs] = co_await group.async_wait(asio::experimental::wait_for_all(), asio::use_awaitable);
    for (std::size_t k = 0; k < docs.size(); ++k) {
      if (errors[k]) std::rethrow_exception(errors[k]);
      if (!docs[k]) continue;  // removed since it was listed
      const std::string& rel = members[start + k];
      if (zarr_format == 2) add_v2_entries(metadata, rel, *docs[k]);
      else metadata[rel] = v3_entry(*docs[k]);
    }
  }
  if (zarr_format == 2) {
    const std::string key = prefix + kZmetadata;
    json doc = {{"zarr_consolidated_format", 1}};
    doc["metadata"] = std::move(metadata);
    Bytes bytes = strict_bytes(doc, key, true);
    co_await store->set(key, std::move(bytes));
    co_return;
  }
  const std::string key = prefix + "zarr.json";
  auto raw = co_await store->get(key);
  if (!raw) throw NotFound(key, "", "no group metadata at '" + key + "'");
  json doc = parse_doc(*raw, key);
  json cm = empty_inline();
  cm["metadata"] = std::move(metadata);
  doc["consolidated_metadata"] = std::move(cm);
  Bytes bytes = strict_bytes(doc, key, false);
  co_await store->set(key, std::move(bytes));
}

awaitable<void> update_consolidated(Store& store, std::string path) {
  std::vector<std::pair<std::string, std::string>> ancestors;  // (ancestor, path relative to it)
  if (!path.empty()) ancestors.emplace_back("", path);
  for (auto s = path.find('/'); s != std::string::npos; s = path.find('/', s + 1))
    ancestors.emplace_back(path.substr(0, s), path.substr(s + 1));
  std::optional<NodeDocs> docs;
  bool loaded = false;  // the node's documents are read once, and only if some copy needs them
  for (const auto& [ancestor, rel] : ancestors) {
    for (const bool v2 : {false, true}) {
      const std::string key = node_prefix(ancestor) + (v2 ? kZmetadata : "zarr.json");
      for (int attempt = 0;; ++attempt) {
        if (attempt == kAttempts)
          throw StoreError(key, "consolidated_metadata",
                           "the consolidated metadata kept changing while '" + rel + "' was being updated in it (" +
                               std::to_string(kAttempts) + " attempts)");
        ReadOptions ro;
        ReadResult r = co_await store.read(key, std::move(ro));
        if (!r.value) break;
        json doc = parse_doc(*r.value, key);
        json* entries = copy_entries(doc, v2);
        if (!entries) break;
        if (!loaded) {
          docs = co_await load_node_docs(store, path);
          loaded = true;
        }
        update_entries(*entries, v2, rel, docs ? &*docs : nullptr);
        Bytes bytes = strict_bytes(doc, key, v2);
        WriteOptions wo;
        wo.if_equal = r.generation;
        const auto written = co_await store.write(key, std::optional<Bytes>(std::move(bytes)), std::move(wo));
        if (written) break;
      }
    }
  }
}

}  // namespace zarrcoro::detail
