// Reading and writing node metadata documents: where they live in a store
// and in which format (v3 `zarr.json`; v2 `.zarray`/`.zgroup`/`.zattrs`).
#pragma once

#include <string>

#include <zarrcoro/metadata.hpp>
#include <zarrcoro/store.hpp>

namespace zarrcoro::detail {

// "" for the root, else "path/" (validated as a store key).
std::string node_prefix(const std::string& path);
// The key of an array's metadata document in its format.
std::string array_metadata_key(const std::string& path, int zarr_format);

// Loads an array's metadata. Raises NotFound naming the v3 key if there is
// none, InvalidMetadata / UnsupportedError naming key and field otherwise.
awaitable<ArrayMetadata> load_array_metadata(Store& store, std::string path);
// Writes an array's metadata document(s) in metadata.zarr_format.
awaitable<void> store_array_metadata(Store& store, std::string path, ArrayMetadata metadata);

// The v3 codec list the codec pipeline is built from.
nlohmann::json pipeline_codecs(const ArrayMetadata& metadata);

Bytes json_bytes(const nlohmann::json& j);  // strict JSON text (dump_json) as bytes

}  // namespace zarrcoro::detail
