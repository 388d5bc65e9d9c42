// Node metadata documents in a store (Zarr v3 core spec, "Storage"; v2 spec).
#include "engine/node.hpp"

#include <zarrcoro/error.hpp>

namespace zarrcoro::detail {

std::string node_prefix(const std::string& path) {
  if (path.empty()) return "";
  validate_key(path);
  return path + "/";
}

std::string array_metadata_key(const std::string& path, int zarr_format) {
  return node_prefix(path) + (zarr_format == 2 ? ".zarray" : "zarr.json");
}

Bytes json_bytes(const nlohmann::json& j) {
  const std::string text = dump_json(j);
  const auto* p = reinterpret_cast<const std::byte*>(text.data());
  return Bytes(p, p + text.size());
}

awaitable<ArrayMetadata> load_array_metadata(Store& store, std::string path) {
  const std::string key = array_metadata_key(path, 3);
  auto doc = co_await store.get(key);
  if (!doc) throw NotFound(key, "", "no array metadata at '" + key + "'");
  const auto j = parse_json({reinterpret_cast<const char*>(doc->data()), doc->size()}, key);
  co_return ArrayMetadata::from_json(j, key);
}

awaitable<void> store_array_metadata(Store& store, std::string path, ArrayMetadata metadata) {
  if (metadata.zarr_format != 3)
    throw UnsupportedError(array_metadata_key(path, metadata.zarr_format), "zarr_format",
                           "writing Zarr v2 is not supported yet");
  co_await store.set(array_metadata_key(path, 3), json_bytes(metadata.to_json()));
}

nlohmann::json pipeline_codecs(const ArrayMetadata& metadata) { return metadata.codecs; }

}  // namespace zarrcoro::detail
