// Data types of array elements (Zarr v3 core spec, "Data types").
//
// Thread-safety: immutable values; all functions are pure and thread-safe.
//
// In memory, elements are always held in the host's native byte order (this
// library supports little-endian hosts only). The byte order on disk belongs
// to the codec pipeline (the v3 `bytes` codec, or the v2 dtype string).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace zarrcoro {

enum class DataTypeKind : std::uint8_t {
  bool_,
  int8,
  int16,
  int32,
  int64,
  uint8,
  uint16,
  uint32,
  uint64,
  float16,
  float32,
  float64,
  complex64,
  complex128,
};

class DataType {
 public:
  constexpr DataType() = default;
  constexpr DataType(DataTypeKind kind) : kind_(kind) {}  // NOLINT: implicit by design

  // Parses a Zarr v3 data type name ("int32", "float16", "complex64", ...).
  // Returns nullopt for a name this library does not know.
  static std::optional<DataType> from_name(std::string_view name);

  constexpr DataTypeKind kind() const { return kind_; }
  // The Zarr v3 name, e.g. "uint16".
  std::string_view name() const;
  // Bytes per element.
  std::size_t size() const;
  // Granularity of byte swapping in bytes: 1 for single-byte types, the
  // component size for complex types (complex64 swaps two 4-byte floats).
  std::size_t swap_unit() const;
  bool is_float() const;    // float16/32/64
  bool is_complex() const;  // complex64/128
  bool is_integer() const;  // int*/uint*
  bool is_signed() const;   // int*

  friend constexpr bool operator==(DataType a, DataType b) { return a.kind_ == b.kind_; }

 private:
  DataTypeKind kind_ = DataTypeKind::uint8;
};

// IEEE 754 binary16 <-> binary32 conversion (round to nearest even; NaN
// payloads and signs are preserved where representable).
float float16_to_float32(std::uint16_t bits);
std::uint16_t float32_to_float16(float value);

}  // namespace zarrcoro
