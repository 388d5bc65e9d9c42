// Consolidated metadata: the metadata documents of a whole hierarchy held in
// one document of its root group, so that a reader opens (and lists) the
// hierarchy with one request. Two forms, as zarr-python writes them:
// - Zarr v2 `.zmetadata`: {"zarr_consolidated_format": 1, "metadata":
//   {".zgroup": {...}, "a/.zarray": {...}, "a/.zattrs": {...}, ...}};
// - Zarr v3 inline: the group's `zarr.json` holds "consolidated_metadata":
//   {"kind": "inline", "must_understand": false, "metadata": {"a": <a's
//   zarr.json>, "a/b": ...}} (flat paths; a group entry carries an empty
//   consolidated_metadata of its own, which zarr-python needs to nest its
//   members under it).
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include <zarrcoro/array.hpp>
#include <zarrcoro/store.hpp>

namespace zarrcoro::detail {

// One node's metadata: a v3 `zarr.json`, or a v2 `.zarray`/`.zgroup` with
// its `.zattrs` (null when absent).
struct NodeDocs {
  int zarr_format = 3;
  NodeType node_type = NodeType::group;
  nlohmann::json doc;
  nlohmann::json attrs;
};

// The nodes below one group, by path relative to it ("a", "a/b"), as a
// consolidated document describes them. Immutable once built.
struct ConsolidatedView {
  std::string key;  // the document it was read from, for messages
  std::map<std::string, NodeDocs> nodes;

  // The part below `name` (a group in this view), re-keyed relative to it.
  std::shared_ptr<const ConsolidatedView> below(const std::string& name) const;
};

// Parses the "consolidated_metadata" member of a v3 group document read
// from `key`; nullptr when the member is absent or null. Raises
// InvalidMetadata(key, "consolidated_metadata[...]") for a malformed one,
// UnsupportedError for a kind other than "inline".
std::shared_ptr<const ConsolidatedView> parse_consolidated_v3(const nlohmann::json& group_doc,
                                                              const std::string& key);
// Parses a v2 `.zmetadata` document read from `key`; the group's own
// `.zgroup` / `.zattrs` entries come back in `own` (attrs null if absent).
// Raises InvalidMetadata(key, field) for a malformed one.
std::shared_ptr<const ConsolidatedView> parse_consolidated_v2(const nlohmann::json& zmetadata, const std::string& key,
                                                              NodeDocs& own);

// The metadata of the node at `path` as stored, or nullopt if no node is
// there. Raises InvalidMetadata naming a document that is not JSON or
// names no node type.
awaitable<std::optional<NodeDocs>> load_node_docs(Store& store, std::string path);

// Writes the consolidated metadata of the group at `path` in its own format
// (`zarr_format`), holding the nodes at `members` (paths relative to it, as
// a recursive listing found them; ones gone since are left out). Replaces an
// older copy. Raises InvalidMetadata naming a document that cannot be read,
// InvalidArgument naming the document to write when attributes hold NaN or
// Infinity (strict JSON cannot hold them), NotFound if the v3 group
// document is gone, StoreError.
awaitable<void> consolidate(std::shared_ptr<Store> store, std::string path, int zarr_format,
                            std::vector<std::string> members);

// Brings every consolidated copy held by an ancestor group of `path` (the
// root included) up to date with the node now stored at `path`: its entry is
// replaced, entries below it are dropped (a new node has no members yet).
// Each copy is replaced with a write conditional on the generation read,
// retried when another writer got there first. A store without
// consolidated metadata costs one read per ancestor and format.
awaitable<void> update_consolidated(Store& store, std::string path);

// A metadata document with non-finite fill values as the strings "NaN",
// "Infinity", "-Infinity" (Zarr v2 and v3 spec; case B02).
nlohmann::json with_string_fill(nlohmann::json doc);

}  // namespace zarrcoro::detail
