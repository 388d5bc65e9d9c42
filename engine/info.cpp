// The JSON summary of a node (see info.hpp).
#include <zarrcoro/info.hpp>

#include <charconv>
#include <limits>

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

// What the storage statistics of an array need from its metadata.
struct Grid {
  std::vector<std::uint64_t> shape, chunks;  // chunks: the outer grid (shards when sharded)
  ChunkKeyEncoding encoding;
  std::optional<std::size_t> item_size;  // bytes per element; none for variable-length or unknown types
};

Grid grid_of(const ArrayMetadata& m) {
  Grid g{m.shape, m.chunk_shape, m.chunk_key_encoding, std::nullopt};
  if (!m.data_type.is_variable_length()) g.item_size = m.data_type.size();
  return g;
}

// A v2 array whose codecs this build does not support: the grid from the
// document itself (no item size); nullopt when it is malformed.
std::optional<Grid> raw_v2_grid(const nlohmann::json& zarray) {
  auto dims = [](const nlohmann::json& j) -> std::optional<std::vector<std::uint64_t>> {
    if (!j.is_array()) return std::nullopt;
    std::vector<std::uint64_t> v;
    for (const auto& d : j) {
      if (!d.is_number_unsigned()) return std::nullopt;
      v.push_back(d.get<std::uint64_t>());
    }
    return v;
  };
  if (!zarray.is_object()) return std::nullopt;
  auto shape = dims(zarray.value("shape", nlohmann::json())), chunks = dims(zarray.value("chunks", nlohmann::json()));
  if (!shape || !chunks || shape->size() != chunks->size()) return std::nullopt;
  const auto sep = zarray.value("dimension_separator", nlohmann::json("."));
  Grid g{*shape, *chunks, {ChunkKeyEncoding::Kind::v2, sep == "/" ? '/' : '.'}, std::nullopt};
  return g;
}

// The grid coordinates a key relative to the array names, if it is a chunk
// key of this grid ("c/0/1", "c.0.1", "c" for rank 0; v2: "0.1", "0/1",
// "0"), each coordinate canonical (no sign, no leading zero) and inside the
// grid. Metadata documents and anything else are no chunk keys.
bool is_chunk_key(std::string_view rel, const Grid& g, const std::vector<std::uint64_t>& extent) {
  const std::size_t rank = g.shape.size();
  if (g.encoding.kind == ChunkKeyEncoding::Kind::default_) {
    if (rank == 0) return rel == "c";
    if (rel.size() < 2 || rel[0] != 'c' || rel[1] != g.encoding.separator) return false;
    rel.remove_prefix(2);
  } else if (rank == 0) {
    return rel == "0";
  }
  for (std::size_t d = 0; d < rank; ++d) {
    const std::size_t end = d + 1 < rank ? rel.find(g.encoding.separator) : rel.size();
    if (end == std::string_view::npos || end == 0 || (rel[0] == '0' && end > 1)) return false;
    std::uint64_t v = 0;
    const auto [p, ec] = std::from_chars(rel.data(), rel.data() + end, v);
    if (ec != std::errc() || p != rel.data() + end || v >= extent[d]) return false;
    rel.remove_prefix(end == rel.size() ? end : end + 1);
    if (d + 1 < rank && rel.empty()) return false;
  }
  return rel.empty();
}

// chunks_stored, chunks_total, bytes_stored and storage_ratio (info.hpp)
// from the listing of the array's prefix.
void add_storage_stats(ojson& out, const Grid& g, const std::vector<KeySize>& keys, const std::string& prefix) {
  std::vector<std::uint64_t> extent(g.shape.size());
  std::optional<std::uint64_t> total = 1;
  for (std::size_t d = 0; d < g.shape.size(); ++d) {
    extent[d] = g.chunks[d] == 0 ? 0 : g.shape[d] / g.chunks[d] + (g.shape[d] % g.chunks[d] != 0);
    if (total && extent[d] != 0 && *total > std::numeric_limits<std::uint64_t>::max() / extent[d]) total.reset();
    else if (total) *total *= extent[d];
  }
  std::uint64_t stored = 0, bytes = 0;
  for (const auto& k : keys)
    if (k.key.starts_with(prefix) && is_chunk_key(std::string_view(k.key).substr(prefix.size()), g, extent)) {
      ++stored;
      bytes += k.size;
    }
  out["chunks_stored"] = stored;
  out["chunks_total"] = total ? ojson(*total) : ojson(nullptr);
  out["bytes_stored"] = bytes;
  double logical = g.item_size ? static_cast<double>(*g.item_size) : 0;
  for (auto s : g.shape) logical *= static_cast<double>(s);
  out["storage_ratio"] = g.item_size && bytes > 0 ? ojson(logical / static_cast<double>(bytes)) : ojson(nullptr);
}

void add_unknown_storage_stats(ojson& out) {
  for (const char* k : {"chunks_stored", "chunks_total", "bytes_stored", "storage_ratio"}) out[k] = nullptr;
}

void merge(ojson& out, const ojson& more) {
  for (const auto& [k, v] : more.items()) out[k] = v;
}

// The storage statistics of the array at `path`: null when the store
// cannot list keys (HTTP) or the grid is unknown (or not asked for).
awaitable<ojson> storage_stats_of(std::shared_ptr<Store> store, std::string path, std::optional<Grid> grid) {
  const std::string prefix = detail::node_prefix(path);
  ojson out = ojson::object();
  if (!grid) {
    add_unknown_storage_stats(out);
    co_return out;
  }
  std::vector<KeySize> keys;
  bool listed = true;
  try {
    keys = co_await store->list_sizes(prefix);
  } catch (const Error& e) {
    if (e.field() != "list") throw;
    listed = false;  // a store that cannot list keys
  }
  if (listed) add_storage_stats(out, *grid, keys, prefix);
  else add_unknown_storage_stats(out);
  co_return out;
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
                           std::vector<std::string> child_names, bool storage_stats) {
  const std::string key = node_key(path);
  const auto doc = co_await store->get(key);
  if (doc) {
    const auto node = parse_doc(*doc, key);
    const std::string type = node_type_of(node);
    if (type == "array") {
      ojson out = array_info(node, key);
      std::optional<Grid> grid = grid_of(ArrayMetadata::from_json(node, key));
      if (!storage_stats) grid.reset();
      const ojson stats = co_await storage_stats_of(store, path, std::move(grid));
      merge(out, stats);
      co_return out;
    }
    if (type != "group") throw InvalidMetadata(key, "node_type", bad_type_message(type));
  } else {  // Zarr v2: .zarray, else a group (.zgroup, or .zmetadata alone)
    const std::string prefix = path.empty() ? "" : path + "/";
    if (auto zarray = co_await store->get(prefix + ".zarray")) {
      nlohmann::json zattrs;
      if (auto a = co_await store->get(prefix + ".zattrs")) zattrs = parse_doc(*a, prefix + ".zattrs");
      const nlohmann::json doc = parse_doc(*zarray, prefix + ".zarray");
      ojson out = v2_array_info(doc, zattrs, prefix + ".zarray");
      std::optional<Grid> grid;
      try {
        grid = grid_of(ArrayMetadata::from_v2_json(doc, zattrs, prefix + ".zarray"));
      } catch (const UnsupportedError&) {
        grid = raw_v2_grid(doc);
      }
      if (!storage_stats) grid.reset();
      const ojson stats = co_await storage_stats_of(store, path, std::move(grid));
      merge(out, stats);
      co_return out;
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
