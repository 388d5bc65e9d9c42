// Array metadata (Zarr v3 core spec, "Array metadata"; `zarr.json`) and its
// Zarr v2 form (v2 spec, "Metadata"; `.zarray` + `.zattrs`).
//
// Thread-safety: plain values; const methods are safe to call concurrently.
//
// Parsing is strict where the spec is strict and names the key and the field
// in every error: e.g. a float array whose `fill_value` is null raises
// InvalidMetadata(key "a/zarr.json", field "fill_value"). Unknown top-level
// fields are an error unless they are objects carrying
// `"must_understand": false`, which are ignored (v3); in a `.zarray` they
// are ignored, as the v2 spec asks.
//
// One engine path for both formats: a v2 document becomes the same
// ArrayMetadata (chunk key encoding `v2`, attributes from `.zattrs`) plus a
// V2Info holding what only v2 says, and `codecs` holds the equivalent
// v3-style chain: [transpose (order F)] + bytes (endian from the dtype) +
// filters + compressor; the compressor decodes first, then the filters in
// reverse order, exactly as the v2 spec asks.
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

// One element's bytes in native byte order, `data_type.size()` long; for
// the variable-length types (string, bytes) the value's own bytes, of any
// length (UTF-8 text for string; empty = the empty value).
using FillValue = Bytes;

// Parses a `fill_value` for `dtype` (numbers, "NaN", "Infinity", "-Infinity",
// hex-encoded float bits such as "0x7fc00001", [re, im] for complex, true or
// false for bool). An integral float is accepted for an integer type; 0.5
// is not. Raises InvalidMetadata(key, "fill_value").
FillValue parse_fill_value(const nlohmann::json& j, DataType dtype, const std::string& key);
// The spec's JSON form of a fill value: never a bare NaN; a NaN other than
// the canonical quiet NaN is written as hex bits so its payload survives.
// Parametrized kinds: null_terminated_bytes as base64, fixed_length_utf32 as
// a string, struct as {"field": value, ...} (a base64 string of the record's
// bytes in native order is accepted too); variable-length string as the
// text, bytes as base64 (zarr-python 3's forms; "variable_length_bytes" is
// read as "bytes").
nlohmann::json fill_value_to_json(const FillValue& fill, DataType dtype);

// The Zarr v3 JSON form of a data type: a name for the core types, an object
// {"name", "configuration"} for null_terminated_bytes, fixed_length_utf32 and
// struct. Parsing raises UnsupportedError(key, field) for unknown types.
nlohmann::json data_type_to_json(DataType dtype);
DataType parse_data_type(const nlohmann::json& j, const std::string& key,
                         const std::string& field = "data_type");

// Zarr v2 type strings (NumPy typestr/descr): "<i4", ">f8", "|b1", "|S5",
// "<U4", and structured lists [["flux", ">f4"], ["z", "<i2", [2, 2]],
// ["nested", [...]]]. The byte order of a scalar type is returned apart (the
// DataType is native); structured fields keep theirs in StructField::order.
// Raises InvalidMetadata / UnsupportedError(key, field).
struct V2DataType {
  DataType type;
  ByteOrder order = ByteOrder::unspecified;  // scalar types; structured: unspecified
};
// "|O" (NumPy object) needs `filters`, the array's filter list: its first
// filter names the object codec, vlen-utf8 (DataTypeKind::string) or
// vlen-bytes (vlen_bytes). No filter, or another object codec (vlen-array,
// json2, pickle, msgpack2, ...), raises UnsupportedError naming "filters"
// or "filters[0]"; "O" inside a structured type is refused too.
V2DataType parse_v2_dtype(const nlohmann::json& j, const std::string& key,
                          const std::string& field = "dtype", const nlohmann::json& filters = nullptr);
nlohmann::json v2_dtype_to_json(DataType dtype, ByteOrder order);

// What a Zarr v2 `.zarray` says beyond ArrayMetadata, kept so that writing
// the array back reproduces its document. The dimension separator lives in
// ArrayMetadata::chunk_key_encoding.
struct V2Info {
  nlohmann::json dtype;          // the `dtype` member, with byte order(s)
  char order = 'C';              // 'C' or 'F': element order inside a chunk
  nlohmann::json compressor;     // null or {"id": ...}
  nlohmann::json filters;        // null or [{"id": ...}, ...]
  bool fill_value_null = false;  // `fill_value` was null: the v2 spec leaves
                                 // missing chunks undefined; they read as
                                 // zeros here, and null is written back
};

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
  // zarr_format 2 only. When set it is authoritative for the v2 document and
  // the codec chain; when absent (an array being created) it is derived from
  // `codecs` (a transpose must be C or F order; the last bytes -> bytes codec
  // becomes the compressor, earlier ones the filters).
  std::optional<V2Info> v2;

  std::size_t rank() const { return shape.size(); }
  // Number of chunks along each dimension (ceil(shape / chunk_shape)).
  std::vector<std::uint64_t> grid_shape() const;

  // Parses a v3 `zarr.json` document of node_type "array". `key` names the
  // document in errors. Raises InvalidMetadata or UnsupportedError.
  static ArrayMetadata from_json(const nlohmann::json& j, const std::string& key);
  // Parses a v2 `.zarray` document and its `.zattrs` (null when absent).
  // Errors name the key and the v2 member: "dtype", "compressor.id",
  // "filters[0].level", "fill_value", ... Unsupported codecs raise
  // UnsupportedError "unsupported codec '<id>'".
  static ArrayMetadata from_v2_json(const nlohmann::json& zarray, const nlohmann::json& zattrs,
                                    const std::string& key);
  // Checks invariants (ranks agree, chunk dims > 0, fill size; v3: the data
  // type and codecs can be written as v3; v2: the v2 chunk key encoding, no
  // dimension_names, V2Info consistent with data_type); raises
  // InvalidMetadata / UnsupportedError(key, field).
  void validate(const std::string& key) const;
  // The v3 `zarr.json` document.
  nlohmann::json to_json() const;
  // The effective V2Info: `v2`, or derived from `codecs`. Raises
  // UnsupportedError(key, "codecs[i]") for a chain with no v2 form.
  V2Info v2_info(const std::string& key = "") const;
  // The v2 `.zarray` document (attributes go to `.zattrs`): optional members
  // holding their default are left out (dimension_separator "."), and a
  // non-finite float fill is the string "NaN", "Infinity" or "-Infinity".
  nlohmann::json to_v2_json(const std::string& key = "") const;
  // The v3-style codec chain a v2 array runs (see above), from v2_info().
  nlohmann::json v2_codecs(const std::string& key = "") const;

 private:
  void validate_v2(const std::string& key) const;
};

// Serializes metadata as strict RFC 8259 JSON (no NaN tokens), indented.
// Raises InvalidArgument(field "attributes") if an attribute is non-finite.
// `ascii`: non-ASCII characters as \u escapes (zarr-python 2 reads v2
// documents as ASCII).
std::string dump_json(const nlohmann::json& j, bool ascii = false);
// The deepest nesting of arrays and objects parse_json accepts: metadata and
// attributes from untrusted stores cannot exhaust the stack.
inline constexpr std::size_t kMaxJsonDepth = 128;

// Parses a metadata document; accepts the bare NaN/Infinity/-Infinity tokens
// that some writers emit. Raises InvalidMetadata(key, "") on a syntax error,
// invalid UTF-8, a number out of range, or nesting deeper than kMaxJsonDepth.
nlohmann::json parse_json(std::string_view text, const std::string& key);

}  // namespace zarrcoro
