// Node metadata documents in a store (Zarr v3 core spec, "Storage"; Zarr v2
// spec, "Metadata", "Attributes", "Groups").
#include "engine/node.hpp"

#include "engine/consolidated.hpp"

#include <zarrcoro/error.hpp>

namespace zarrcoro::detail {

std::string node_name_error(std::string_view name, int zarr_format) {
  if (name.empty()) return "a node name is empty";
  const std::string quoted = "node name '" + std::string(name) + "'";
  if (name.find('/') != std::string_view::npos) return quoted + " holds '/'";
  if (name.find_first_not_of('.') == std::string_view::npos) return quoted + " is periods only";
  if (is_node_doc_name(name) || name == ".zmetadata") return quoted + " is the name of a metadata document";
  if (zarr_format == 3 && name.starts_with("__")) return quoted + " starts with the reserved prefix '__'";
  return "";
}

std::string node_path_error(std::string_view path, int zarr_format) {
  for (std::size_t start = 0;;) {
    const std::size_t end = path.find('/', start);
    std::string why = node_name_error(path.substr(start, end == std::string_view::npos ? end : end - start), zarr_format);
    if (!why.empty() || end == std::string_view::npos) return why;
    start = end + 1;
  }
}

void check_node_path(const std::string& path, int zarr_format) {
  if (path.empty()) return;
  validate_key(path);
  if (std::string why = node_path_error(path, zarr_format); !why.empty())
    throw InvalidArgument(path, "path", why + " (Zarr core spec, \"Node names\")");
}

std::string node_prefix(const std::string& path, int zarr_format) {
  check_node_path(path, zarr_format);
  return path.empty() ? "" : path + "/";
}

std::string array_metadata_key(const std::string& path, int zarr_format) {
  return node_prefix(path) + (zarr_format == 2 ? ".zarray" : "zarr.json");
}

Bytes json_bytes(const nlohmann::json& j) {
  const std::string text = dump_json(j);
  const auto* p = reinterpret_cast<const std::byte*>(text.data());
  return Bytes(p, p + text.size());
}

Bytes v2_json_bytes(const nlohmann::json& j) {
  const std::string text = dump_json(j, true);
  const auto* p = reinterpret_cast<const std::byte*>(text.data());
  return Bytes(p, p + text.size());
}

nlohmann::json parse_doc(const Bytes& doc, const std::string& key) {
  return parse_json({reinterpret_cast<const char*>(doc.data()), doc.size()}, key);
}

awaitable<nlohmann::json> load_zattrs(Store& store, std::string path) {
  const std::string key = node_prefix(path) + ".zattrs";
  auto doc = co_await store.get(key);
  if (!doc) co_return nlohmann::json();
  auto j = parse_doc(*doc, key);
  if (!j.is_object()) throw InvalidMetadata(key, "", "expected a JSON object of attributes");
  co_return j;
}

awaitable<void> store_zattrs(Store& store, std::string path, nlohmann::json attributes) {
  const std::string key = node_prefix(path) + ".zattrs";
  if (attributes.empty()) {
    co_await store.erase(key);  // absent means {}
    co_return;
  }
  Bytes doc;
  try {
    doc = v2_json_bytes(attributes);
  } catch (const Error& e) {
    throw_error(e.code(), key, e.field(), e.detail());
  }
  co_await store.set(key, std::move(doc));
}

void check_attributes(const nlohmann::json& attributes, const std::string& key) {
  if (!attributes.is_object())
    throw InvalidArgument(key, "attributes", "expected a JSON object, got " + attributes.dump());
  try {
    (void)dump_json(attributes);
  } catch (const Error& e) {
    throw InvalidArgument(key, "attributes", e.detail());
  }
}

namespace {

// Whether a node's document (.zgroup, .zarray or zarr.json) is stored under
// `prefix` ("" for the root, else "a/b/"), asking first for the one of a
// `zarr_format` group (the likely answer: one request).
awaitable<bool> holds_node(Store& store, std::string prefix, int zarr_format) {
  static constexpr const char* kV2First[] = {".zgroup", ".zarray", "zarr.json"};
  static constexpr const char* kV3First[] = {"zarr.json", ".zgroup", ".zarray"};
  for (const char* doc : zarr_format == 2 ? kV2First : kV3First) {
    const std::string key = prefix + doc;
    const bool there = co_await store.exists(key);
    if (there) co_return true;
  }
  co_return false;
}

}  // namespace

awaitable<void> create_parents(Store& store, std::string path, int zarr_format) {
  std::vector<std::string> prefixes;  // the nearest parent first, the root last
  for (auto slash = path.rfind('/'); slash != std::string::npos && slash > 0; slash = path.rfind('/', slash - 1))
    prefixes.push_back(path.substr(0, slash) + "/");
  if (!path.empty()) prefixes.emplace_back();
  const nlohmann::json v2_group = {{"zarr_format", 2}};
  const nlohmann::json v3_group = {{"zarr_format", 3}, {"node_type", "group"}, {"attributes", nlohmann::json::object()}};
  for (const std::string& prefix : prefixes) {
    const bool there = co_await holds_node(store, prefix, zarr_format);
    if (there) continue;
    std::string key = prefix + (zarr_format == 2 ? ".zgroup" : "zarr.json");
    Bytes doc = zarr_format == 2 ? v2_json_bytes(v2_group) : json_bytes(v3_group);
    co_await store.set(std::move(key), std::move(doc));
  }
}

awaitable<void> prepare_create(Store& store, std::string path, CreateMode mode) {
  const std::string prefix = node_prefix(path);
  if (mode == CreateMode::fail_if_exists) {
    for (const char* doc : kNodeDocs) {
      const std::string key = prefix + doc;
      if (co_await store.exists(key))
        throw AlreadyExists(key, "", "a node exists at '" + path + "' (create with CreateMode::overwrite to replace it)");
    }
    co_return;
  }
  std::vector<std::string> keys = co_await store.list(prefix), docs, rest;
  for (auto& key : keys) {
    const std::string_view name = std::string_view(key).substr(prefix.size());
    (is_node_doc_name(name) ? docs : rest).push_back(std::move(key));
  }
  if (!docs.empty()) co_await store.erase_many(std::move(docs));
  if (!rest.empty()) co_await store.erase_many(std::move(rest));
}

awaitable<ArrayMetadata> load_array_metadata(Store& store, std::string path) {
  const std::string key = array_metadata_key(path, 3);
  if (auto doc = co_await store.get(key)) co_return ArrayMetadata::from_json(parse_doc(*doc, key), key);
  const std::string v2_key = array_metadata_key(path, 2);
  auto v2_doc = co_await store.get(v2_key);
  if (!v2_doc) throw NotFound(key, "", "no array metadata at '" + key + "' (nor a Zarr v2 '" + v2_key + "')");
  const auto zarray = parse_doc(*v2_doc, v2_key);
  const auto zattrs = co_await load_zattrs(store, path);
  co_return ArrayMetadata::from_v2_json(zarray, zattrs, v2_key);
}

awaitable<void> store_array_metadata(Store& store, std::string path, ArrayMetadata metadata, bool replaced,
                                     std::vector<std::string> copies, std::chrono::milliseconds timeout) {
  if (metadata.zarr_format == 2) {
    const std::string key = array_metadata_key(path, 2);
    Bytes zarray = v2_json_bytes(metadata.to_v2_json(key));
    try {
      (void)dump_json(metadata.attributes);  // strict JSON, checked before anything is written
    } catch (const Error& e) {
      throw_error(e.code(), node_prefix(path) + ".zattrs", e.field(), e.detail());
    }
    co_await store_zattrs(store, path, metadata.attributes);
    co_await store.set(key, std::move(zarray));
  } else {
    co_await store.set(array_metadata_key(path, 3), json_bytes(metadata.to_json()));
  }
  co_await update_consolidated(store, path, replaced, std::move(copies), timeout);
}

nlohmann::json pipeline_codecs(const ArrayMetadata& metadata) {
  if (metadata.zarr_format == 2) return metadata.v2_codecs();
  return metadata.codecs;
}

}  // namespace zarrcoro::detail
