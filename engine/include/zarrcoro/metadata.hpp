// Array metadata (Zarr v3 core spec, "Array metadata"; `zarr.json`).
//
// Thread-safety: plain values; const methods are safe to call concurrently.
//
// Parsing is strict where the spec is strict and names the key and the field
// in every error: e.g. a float array whose `fill_value` is null raises
// InvalidMetadata(key "a/zarr.json", field "fill_value"). Unknown top-level
// fields are an error unless they are objects carrying
// `"must_understand": false`, which are ignored.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <zarrcoro/bytes.hpp>
#include <zarrcoro/dtype.hpp>

namespace zarrcoro {

// How chunk grid coordinates become store keys (Zarr v3 core spec,
// "Chunk key encoding"). `default`: "c/1/2" (0-d: "c"); `v2`: "1.2" (0-d: "0").
struct ChunkKeyEncoding {
  enum class Kind : std::uint8_t { default_, v2 };
  Kind kind = Kind::default_;
  char separator = '/';

  // The key of the chunk at grid coordinates `coords`, relative to the array.
  std::string encode(std::span<const std::uint64_t> coords) const;
  nlohmann::json to_json() const;
  // Raises InvalidMetadata(key, "chunk_key_encoding").
  static ChunkKeyEncoding from_json(const nlohmann::json& j, const std::string& key);
};

// One element's bytes in native byte order, `data_type.size()` long.
using FillValue = Bytes;

// Parses a `fill_value` for `dtype` (numbers, "NaN", "Infinity", "-Infinity",
// hex-encoded float bits such as "0x7fc00001", [re, im] for complex, true or
// false for bool). An integral float is accepted for an integer type; 0.5
// is not. Raises InvalidMetadata(key, "fill_value").
FillValue parse_fill_value(const nlohmann::json& j, DataType dtype, const std::string& key);
// The spec's JSON form of a fill value: never a bare NaN; a NaN other than
// the canonical quiet NaN is written as hex bits so its payload survives.
nlohmann::json fill_value_to_json(const FillValue& fill, DataType dtype);

struct ArrayMetadata {
  int zarr_format = 3;
  std::vector<std::uint64_t> shape;        // elements per dimension (C order)
  DataType data_type;
  std::vector<std::uint64_t> chunk_shape;  // regular chunk grid, elements; all > 0
  ChunkKeyEncoding chunk_key_encoding;
  FillValue fill_value;                    // empty = zero bytes
  nlohmann::json codecs = nlohmann::json::array({{{"name", "bytes"},
                                                   {"configuration", {{"endian", "little"}}}}});
  nlohmann::json attributes = nlohmann::json::object();
  std::optional<std::vector<std::optional<std::string>>> dimension_names;

  std::size_t rank() const { return shape.size(); }
  // Number of chunks along each dimension (ceil(shape / chunk_shape)).
  std::vector<std::uint64_t> grid_shape() const;

  // Parses a v3 `zarr.json` document of node_type "array". `key` names the
  // document in errors. Raises InvalidMetadata or UnsupportedError.
  static ArrayMetadata from_json(const nlohmann::json& j, const std::string& key);
  // Checks invariants (ranks agree, chunk dims > 0, fill size); raises
  // InvalidMetadata(key, field).
  void validate(const std::string& key) const;
  nlohmann::json to_json() const;
};

// Serializes metadata as strict RFC 8259 JSON (no NaN tokens), indented.
// Raises InvalidArgument(field "attributes") if an attribute is non-finite.
std::string dump_json(const nlohmann::json& j);
// Parses a metadata document; accepts the bare NaN/Infinity/-Infinity tokens
// that some writers emit. Raises InvalidMetadata(key, "") on a syntax error.
nlohmann::json parse_json(std::string_view text, const std::string& key);

}  // namespace zarrcoro
