// The JSON summary of a node (see info.hpp).
#include <zarrcoro/info.hpp>

#include <zarrcoro/array.hpp>
#include <zarrcoro/error.hpp>
#include <zarrcoro/metadata.hpp>
#include <zarrcoro/runtime.hpp>

#include "engine/node.hpp"

namespace zarrcoro {
namespace {

using ojson = nlohmann::ordered_json;

std::string node_key(const std::string& path) { return detail::node_prefix(path) + "zarr.json"; }

using detail::parse_doc;

std::string node_type_of(const nlohmann::json& j) {
  return j.is_object() && j.contains("node_type") && j["node_type"].is_string() ? j["node_type"].get<std::string>()
                                                                                  : "";
}

// "array", "group", other text as found, or "invalid" for a document
// without a string node_type (or not JSON).
std::string doc_type(const Bytes& doc, const std::string& key) {
  try {
    const std::string t = node_type_of(parse_doc(doc, key));
    return t.empty() ? "invalid" : t;
  } catch (const Error&) {
    return "invalid";
  }
}

// The metadata key of child `name` of `path`; nullopt if not a valid key.
std::optional<std::string> child_key(const std::string& path, const std::string& name) {
  try {
    return node_key(path.empty() ? name : path + "/" + name);
  } catch (const Error&) {
    return std::nullopt;
  }
}

}  // namespace

ojson ordered_json(const nlohmann::json& j) {
  if (j.is_array()) {
    ojson out = ojson::array();
    for (const auto& v : j) out.push_back(ordered_json(v));
    return out;
  }
  if (!j.is_object()) return ojson::parse(j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  ojson out = ojson::object();
  if (j.contains("name")) out["name"] = ordered_json(j["name"]);
  for (const auto& [k, v] : j.items()) out[k] = ordered_json(v);
  return out;
}

namespace {

// JSON building stays out of the coroutine below: gcc 12 mishandles braced
// initializer lists inside coroutines.
ojson array_info(const nlohmann::json& node, const std::string& key) {
  const ArrayMetadata m = ArrayMetadata::from_json(node, key);
  const auto j = m.to_json();
  ojson out{{"zarr_format", m.zarr_format}, {"node_type", "array"}, {"shape", m.shape},
            {"data_type", m.data_type.name()}};
  out["chunk_shape"] = m.chunk_shape;
  for (const char* k : {"chunk_key_encoding", "codecs", "fill_value", "attributes", "dimension_names"})
    if (j.contains(k)) out[k] = ordered_json(j[k]);
  return out;
}

// A v2 array: the .zarray members, the v3 data type and codec chain they
// mean (left out when this build does not support them: still described),
// and the .zattrs.
ojson v2_array_info(const nlohmann::json& zarray, const nlohmann::json& zattrs, const std::string& key) {
  if (!zarray.is_object()) throw InvalidMetadata(key, "", "expected a JSON object");
  std::optional<ArrayMetadata> m;
  try {
    m = ArrayMetadata::from_v2_json(zarray, zattrs, key);
  } catch (const UnsupportedError&) {
    // described from the document alone
  }
  ojson out{{"zarr_format", 2}, {"node_type", "array"}, {"shape", ordered_json(zarray.value("shape", nlohmann::json()))}};
  if (m) {
    try {
      out["data_type"] = ordered_json(data_type_to_json(m->data_type));
    } catch (const Error&) {
      out["data_type"] = m->data_type.describe();  // e.g. a struct with subarray fields
    }
  }
  out["chunk_shape"] = ordered_json(zarray.value("chunks", nlohmann::json()));
  for (const char* k : {"dtype", "order", "dimension_separator", "compressor", "filters", "fill_value"})
    if (zarray.contains(k)) out[k] = ordered_json(zarray[k]);
  if (m) out["codecs"] = ordered_json(m->codecs);
  out["attributes"] = ordered_json(zattrs.is_object() ? zattrs : nlohmann::json::object());
  return out;
}

ojson child_entry(const std::string& name, const std::string& node_type) {
  return ojson{{"name", name}, {"node_type", node_type}};
}

ojson group_info(const Group& g, ojson children) {
  return ojson{{"zarr_format", g.zarr_format()},
               {"node_type", "group"},
               {"attributes", ordered_json(g.attributes())},
               {"children", std::move(children)}};
}

std::string bad_type_message(const std::string& type) {
  if (type.empty()) return "expected \"array\" or \"group\"";
  return "expected \"array\" or \"group\", got \"" + type + "\"";
}

// The node_type in a child's metadata document: "" if there is none,
// "invalid" if it cannot be read. Never throws.
awaitable<std::string> child_type(std::shared_ptr<Store> store, std::string key) {
  std::optional<Bytes> doc;
  bool failed = false;
  try {
    doc = co_await store->get(key);
  } catch (const Error&) {
    failed = true;  // unreadable metadata: listed, not fatal for the parent
  }
  if (failed) co_return std::string("invalid");
  if (doc) co_return doc_type(*doc, key);
  const std::string prefix = key.substr(0, key.size() - std::string("zarr.json").size());  // v2 documents beside it
  try {
    if (co_await store->exists(prefix + ".zarray")) co_return std::string("array");
    if (co_await store->exists(prefix + ".zgroup")) co_return std::string("group");
  } catch (const Error&) {
    failed = true;
  }
  co_return std::string(failed ? "invalid" : "");
}

}  // namespace

awaitable<ojson> node_info(Runtime& rt, std::shared_ptr<Store> store, std::string path,
                           std::vector<std::string> child_names) {
  const std::string key = node_key(path);
  const auto doc = co_await store->get(key);
  if (doc) {
    const auto node = parse_doc(*doc, key);
    const std::string type = node_type_of(node);
    if (type == "array") co_return array_info(node, key);
    if (type != "group") throw InvalidMetadata(key, "node_type", bad_type_message(type));
  } else {  // Zarr v2: .zarray, else a group (.zgroup, or .zmetadata alone)
    const std::string prefix = path.empty() ? "" : path + "/";
    if (auto zarray = co_await store->get(prefix + ".zarray")) {
      nlohmann::json zattrs;
      if (auto a = co_await store->get(prefix + ".zattrs")) zattrs = parse_doc(*a, prefix + ".zattrs");
      co_return v2_array_info(parse_doc(*zarray, prefix + ".zarray"), zattrs, prefix + ".zarray");
    }
    bool group = co_await store->exists(prefix + ".zgroup");
    if (!group) group = co_await store->exists(prefix + ".zmetadata");
    if (!group)
      throw NotFound(key, "", "no node metadata at '" + key + "' (nor a Zarr v2 .zarray or .zgroup)");
  }
  const Group g = co_await Group::open(rt, store, path);
  ojson children = ojson::array();
  if (g.has_consolidated_metadata()) {  // its members as the copy has them, no request
    const auto members = co_await g.members();
    for (const auto& m : members) children.push_back(child_entry(m.name, m.node_type == NodeType::array ? "array" : "group"));
    co_return group_info(g, std::move(children));
  }
  for (const auto& name : child_names) {
    const auto ckey = child_key(path, name);
    std::string child = "invalid";
    if (ckey) child = co_await child_type(store, *ckey);
    if (!child.empty()) children.push_back(child_entry(name, child));
  }
  co_return group_info(g, std::move(children));
}

}  // namespace zarrcoro
