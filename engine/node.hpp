// Reading and writing node metadata documents: where they live in a store
// and in which format (v3 `zarr.json`; v2 `.zarray`/`.zgroup`/`.zattrs`).
#pragma once

#include <chrono>
#include <string>
#include <string_view>

#include <zarrcoro/array.hpp>
#include <zarrcoro/metadata.hpp>
#include <zarrcoro/store.hpp>

namespace zarrcoro::detail {

// "" for the root, else "path/": `path` validated as a store key and as
// node names (node_name_error), else InvalidArgument naming the path.
// zarr_format 0 (not known yet) checks the rules common to both formats.
std::string node_prefix(const std::string& path, int zarr_format = 0);

// Why `name` cannot name a node of `zarr_format`, or "" if it can (core spec
// v3.1, "Node names"): it is empty, holds '/', is periods only, is a
// metadata document's name (zarr.json, .zarray, .zgroup, .zattrs,
// .zmetadata: either format's, so that neither reads the other's document as
// a node), or, in v3, starts with the reserved "__".
std::string node_name_error(std::string_view name, int zarr_format);
// The first such error of the names in `path` ("a/b"), or "".
std::string node_path_error(std::string_view path, int zarr_format);
// Raises InvalidArgument(path, "path") unless `path` is "" or a valid key of
// valid node names.
void check_node_path(const std::string& path, int zarr_format);
// The key of an array's metadata document in its format.
std::string array_metadata_key(const std::string& path, int zarr_format);

// Loads an array's metadata: v3 `zarr.json` first, else v2 `.zarray` (with
// `.zattrs`). Raises NotFound naming the v3 key if there is neither,
// InvalidMetadata / UnsupportedError naming key and field otherwise.
awaitable<ArrayMetadata> load_array_metadata(Store& store, std::string path);
// Writes an array's metadata document(s) in metadata.zarr_format (v2:
// `.zarray`, and `.zattrs`, erased when there are no attributes). Then
// brings the consolidated copies of ancestor groups up to date
// `copies` (update_consolidated; `replaced`: the node replaced what was
// under its path), which callers find with check_consolidated before they
// change anything.
awaitable<void> store_array_metadata(Store& store, std::string path, ArrayMetadata metadata, bool replaced,
                                     std::vector<std::string> copies, std::chrono::milliseconds timeout);

// The metadata document names that make a node, in the order they are
// looked for: v3 `zarr.json`, v2 `.zarray`, v2 `.zgroup`.
inline constexpr const char* kNodeDocs[] = {"zarr.json", ".zarray", ".zgroup"};
// True if `name` (a key's last segment) names a node's own metadata
// document: zarr.json, .zarray, .zgroup or .zattrs.
inline bool is_node_doc_name(std::string_view name) {
  return name == "zarr.json" || name == ".zarray" || name == ".zgroup" || name == ".zattrs";
}

// Readies `path` for a new node: with fail_if_exists raises AlreadyExists
// naming the first metadata document found there; with overwrite removes
// every key under the node's prefix (its metadata documents first).
awaitable<void> prepare_create(Store& store, std::string path, CreateMode mode);

// The v3-style codec list the codec pipeline is built from (v2: translated
// from the dtype, order, filters and compressor).
nlohmann::json pipeline_codecs(const ArrayMetadata& metadata);

// v2 helpers shared with groups.
nlohmann::json parse_doc(const Bytes& doc, const std::string& key);
// The `.zattrs` object of the node at `path`, or null when absent.
awaitable<nlohmann::json> load_zattrs(Store& store, std::string path);
awaitable<void> store_zattrs(Store& store, std::string path, nlohmann::json attributes);
// Writes a group document at each ancestor of `path` (and the root) that
// holds no `.zgroup`, `.zarray` or `zarr.json`: {"zarr_format": 2} as
// `.zgroup` (v2 spec, "Groups"), or a v3 group `zarr.json` without
// attributes (as zarr-python 3 does: v3 has no implicit groups, and
// consolidated copies nest each node under its parent's entry).
awaitable<void> create_parents(Store& store, std::string path, int zarr_format);

// Raises InvalidArgument naming `key` and field "attributes" unless
// `attributes` is a JSON object that strict JSON can hold (no NaN).
void check_attributes(const nlohmann::json& attributes, const std::string& key);
Bytes json_bytes(const nlohmann::json& j);     // strict JSON text (dump_json) as bytes
Bytes v2_json_bytes(const nlohmann::json& j);  // the same, ASCII only (zarr-python 2 reads ASCII)

}  // namespace zarrcoro::detail
