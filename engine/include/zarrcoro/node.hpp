// Nodes of a Zarr hierarchy (arrays and groups): what create does where a
// node exists (CreateMode), and a node as a group's listing reports it
// (NodeType, NodeEntry).
//
// Thread-safety: plain values; safe to read concurrently.
#pragma once

#include <string>

namespace zarrcoro {

// What create does where a node already exists (zarr-python's modes "w-"
// and "w"). A node exists at `path` when one of its metadata documents does:
// `zarr.json`, `.zarray` or `.zgroup` (keys without one, e.g. stray chunks,
// are no node). The check and the write are separate requests: two creators
// racing for one path may both succeed, the last metadata written winning.
enum class CreateMode {
  fail_if_exists,  // raise AlreadyExists(key of the existing document, field "")
  // Remove every key under the node's prefix first ("path/"; for the root
  // "", the whole store): old metadata, chunks and child nodes. Needs a store
  // that can list keys. The old node's metadata goes first, so a failure
  // part way leaves no node, at worst unreferenced chunks.
  overwrite,
};

enum class NodeType { array, group };

// A node below a group, as Group::members reports it.
struct NodeEntry {
  // The path relative to the group: a member's name ("a"), or "a/b" for a
  // deeper node in a recursive listing.
  std::string name;
  NodeType node_type = NodeType::group;
  int zarr_format = 3;
  // A group without a metadata document: a directory holding nodes below it
  // (v2 stores written by other tools; Group::open cannot open one). It
  // takes the zarr_format of its parent.
  bool implicit = false;

  bool operator==(const NodeEntry&) const = default;
};

}  // namespace zarrcoro
