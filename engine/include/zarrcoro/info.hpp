// A JSON summary of a Zarr node: what `zarrcoro info` prints and what the
// example server returns for `GET /api/v1/<path>/info`.
//
// Thread-safety: a pure function of the store's contents; safe to call
// concurrently.
//
// An array is described from its metadata alone (an array whose codecs this
// build cannot run is still described): zarr_format, node_type, shape,
// data_type, chunk_shape, then chunk_key_encoding, codecs, fill_value,
// attributes and dimension_names when present (objects with "name" first).
// A v2 array: zarr_format, node_type, shape, data_type and codecs (the v3
// forms it means, when supported), chunk_shape, the .zarray members dtype,
// order, dimension_separator, compressor, filters, fill_value, and
// attributes. A group (v3 or v2): zarr_format, node_type, attributes and
// children, the entries of
// `child_names` that hold a node, as {"name", "node_type"} ("invalid" when
// the child's metadata cannot be read); a group with consolidated metadata
// lists the members its copy holds instead (see Group::open).
//
// Arrays (v3 and v2) end with storage statistics, as zarr-python's
// Array.info shows them, from one Store::list_sizes of the array's prefix:
//   "chunks_stored": chunk keys present (shards for a sharded array: the
//     chunk_shape grid), metadata documents and other keys not counted;
//   "chunks_total": the chunk grid's size (null beyond 2^64-1);
//   "bytes_stored": the bytes of those chunks (metadata not counted);
//   "storage_ratio": logical bytes (elements times the element size, the
//     whole array) / bytes_stored; null when nothing is stored or for a
//     variable-length or unsupported data type.
// All four are null over a store that cannot list keys (HTTP), or for a v2
// array whose .zarray is too malformed to give a grid.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <zarrcoro/store.hpp>

namespace zarrcoro {

class Runtime;

// Describes the node at `path` ("" = the store root). `child_names` are the
// candidate children of a group in the order to list them (e.g. the sorted
// names of its subdirectories); they are ignored for an array.
// Raises NotFound if there is no zarr.json, .zarray or .zgroup (or
// .zmetadata) at `path`, InvalidMetadata if a document is not an object
// with node_type "array" or "group" (or is invalid as one),
// StoreError / InvalidArgument as the store does. `storage_stats` false
// leaves the four statistics null without listing (a walk of every chunk
// key can be long: a server answers it only on request).
awaitable<nlohmann::ordered_json> node_info(Runtime& rt, std::shared_ptr<Store> store, std::string path,
                                            std::vector<std::string> child_names, bool storage_stats = true);

// `j` as ordered JSON with each object's "name" first (as the spec writes
// codecs), the other keys in sorted order; invalid UTF-8 is replaced.
nlohmann::ordered_json ordered_json(const nlohmann::json& j);

}  // namespace zarrcoro
