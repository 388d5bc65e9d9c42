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

#include <chrono>
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

// The node type of the v3 node document `doc` read from `key`. Raises
// InvalidMetadata(key, field) unless it is an object with zarr_format 3
// and node_type "array" or "group".
NodeType v3_node_type(const nlohmann::json& doc, const std::string& key);

// The metadata of the node at `path` as stored, or nullopt if no node is
// there. Raises InvalidMetadata naming a document that is not JSON or
// names no node type.
awaitable<std::optional<NodeDocs>> load_node_docs(Store& store, std::string path);

// load_node_docs for each of `paths`, up to 64 requests at a time; each
// with the error reading it raised (nullptr if none), in order.
using DocsOrError = std::pair<std::optional<NodeDocs>, std::exception_ptr>;
awaitable<std::vector<DocsOrError>> load_nodes_docs(std::shared_ptr<Store> store, std::vector<std::string> paths);

// The key of the document that holds the consolidated metadata of the
// group at `path` in `zarr_format`: v3 the group's zarr.json, v2 `.zmetadata`.
std::string consolidated_key(const std::string& path, int zarr_format);

// That document, `current` as stored (v3: the group's document, which must
// be a v3 group; v2: maybe absent), rewritten to hold the nodes at `members`
// (paths relative to the group, as a listing found them after `current` was
// read; ones gone since are left out). Raises NotFound or InvalidMetadata
// naming a document that is absent or cannot be read, InvalidArgument
// naming the document when attributes hold NaN or Infinity (strict JSON
// cannot hold them), StoreError.
awaitable<Bytes> consolidated_document(std::shared_ptr<Store> store, std::string path, int zarr_format,
                                       std::vector<std::string> members, std::optional<Bytes> current);

// Before a node at `path` is written: the keys of the consolidated copies
// held by its ancestor groups (one read per ancestor and format). Raises
// (naming the copy's key) if one could not be updated for the node: a
// document that is not JSON, or other entries that cannot be written as
// strict JSON; so that a write is refused before it starts, not split.
awaitable<std::vector<std::string>> check_consolidated(Store& store, std::string path);

// After the node at `path` was written: brings the consolidated copies
// `copies` (check_consolidated's result; nothing to do when empty) up to
// date. Its entries are replaced by the node's documents as they are when
// each copy is read (another writer may have replaced the node since this
// one wrote it, and updated the copy already); with `drop_below` (the node
// replaced what was under it) the entries below it are dropped. Parent groups
// between the copy's group and the node that the copy lacks are added; a
// v3 node below an implicit group is left out (readers nest each entry
// under its parent's). Each copy is replaced with a write conditional on
// the generation read, retried while other writers replace it for up to
// `timeout` (conditional_update).
// Raises the error that stopped it, naming the copy's key and
// saying that the node was written but the copy was not.
awaitable<void> update_consolidated(Store& store, std::string path, bool drop_below, std::vector<std::string> copies,
                                    std::chrono::milliseconds timeout);

// A v2 group's own `.zmetadata` at `path`, when there is one: its `.zattrs`
// entry replaced by the group's attributes as they are when the copy is
// read (dropped when there are none), with a write conditional on the
// generation read (retried as above, up to `timeout`).
awaitable<void> update_own_v2_copy(Store& store, std::string path, std::chrono::milliseconds timeout);

// A metadata document with non-finite fill values as the strings "NaN",
// "Infinity", "-Infinity" (Zarr v2 and v3 spec; case B02).
nlohmann::json with_string_fill(nlohmann::json doc);

}  // namespace zarrcoro::detail
