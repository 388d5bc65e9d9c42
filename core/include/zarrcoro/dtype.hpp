// Data types of array elements (Zarr v3 core spec, "Data types"; the Zarr v2
// spec's NumPy type strings; zarr-extensions `struct`, `fixed_length_utf32`,
// `null_terminated_bytes`).
//
// Thread-safety: immutable values; all functions are pure and thread-safe.
// Structured layouts are interned for the life of the program, so a DataType
// stays a small trivially copyable value and == compares layouts exactly.
//
// In memory, elements are always held in the host's native byte order (this
// library supports little-endian hosts only). The byte order on disk belongs
// to the codec pipeline (the v3 `bytes` codec, or the v2 dtype string). The
// one exception is a structured type's fields: a field may declare its own
// stored byte order (Zarr v2 `[["flux", ">f4"], ["mask", "<i4"]]`), which the
// `bytes` codec honours field by field; fields that declare none use the
// codec's `endian`.
//
// Variable-length strings and bytes (kinds `string` and `vlen_bytes`;
// zarr-extensions data types `string` and `bytes`, codecs vlen-utf8 and
// vlen-bytes) have no fixed element: inside the engine each element is a
// 16-byte view into bytes the operation owns (codecs/vlen.hpp), and the
// public API exchanges them as std::string only (Array::read_strings /
// write_strings).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

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
  bytes,       // fixed-length byte string, NumPy "S<n>" (v3 null_terminated_bytes)
  unicode,     // fixed-length string of UTF-32 code units, NumPy "U<n>" (v3 fixed_length_utf32)
  structured,  // a packed record of named fields, NumPy structured dtype (v3 struct)
  // Variable-length kinds (zarr-extensions data types `string` and `bytes`;
  // Zarr v2 "|O" with a vlen-utf8 / vlen-bytes object codec). They are read
  // and written through Array::read_strings / write_strings, never as raw
  // element bytes; size() is the 16 bytes of the engine's internal element
  // (a view), which no public buffer exposes.
  string,      // UTF-8 text of any length (codec vlen-utf8)
  vlen_bytes,  // bytes of any length (codec vlen-bytes)
};

// The stored byte order of multi-byte values; `unspecified` leaves it to the
// `bytes` codec's endian (single-byte values have none).
enum class ByteOrder : std::uint8_t { unspecified, little, big };

struct StructField;

// The largest element a data type may have, in bytes (S<n>, U<n>, struct
// records): a document declaring more is refused before anything is
// allocated, so that a few bytes of metadata cannot demand gigabytes.
inline constexpr std::size_t kMaxElementBytes = std::size_t{1} << 20;

class DataType {
 public:
  constexpr DataType() = default;
  constexpr DataType(DataTypeKind kind) : kind_(kind) {}  // NOLINT: implicit by design

  // NumPy "S<length>": `length` bytes, zero-padded. Raises
  // InvalidArgument(field "length") unless 1 <= length <= kMaxElementBytes.
  static DataType fixed_bytes(std::size_t length);
  // NumPy "U<chars>": `chars` UTF-32 code units (4 bytes each), zero-padded.
  // Raises InvalidArgument(field "length") unless 1 <= chars <= kMaxElementBytes / 4.
  static DataType fixed_unicode(std::size_t chars);
  // A packed record of `fields` in order (offsets are computed; no padding).
  // Raises InvalidArgument(field "fields") for no fields, an empty or
  // duplicate name, a field of zero size or of variable length, or a
  // record larger than kMaxElementBytes.
  static DataType structured(std::vector<StructField> fields);

  // Parses a Zarr v3 core data type name ("int32", "float16", "complex64",
  // ...), or "string" / "bytes" (variable length; "variable_length_bytes",
  // zarr-python 3's name, is read as "bytes"). Returns nullopt for any other
  // name (parametrized types are parsed from their JSON form by the metadata
  // layer).
  static std::optional<DataType> from_name(std::string_view name);

  constexpr DataTypeKind kind() const { return kind_; }
  // The Zarr v3 name, e.g. "uint16"; "null_terminated_bytes",
  // "fixed_length_utf32" and "struct" for the parametrized kinds; "string"
  // and "bytes" for the variable-length ones.
  std::string_view name() const;
  // A short readable form: "int32", "S5", "U4", "{flux: >float32, mask: >int32}".
  std::string describe() const;
  // Bytes per element.
  std::size_t size() const;
  // Granularity of byte swapping in bytes: 1 for single-byte types and byte
  // strings, the component size for complex types (complex64 swaps two
  // 4-byte floats), 4 for unicode. Structured types return 1: use swap_runs.
  std::size_t swap_unit() const;
  // Bytes (S) or code units (U) per element; 0 for the other kinds.
  std::size_t length() const { return length_; }
  // The fields of a structured type (empty otherwise).
  std::span<const StructField> fields() const;

  bool is_float() const;    // float16/32/64
  bool is_complex() const;  // complex64/128
  bool is_integer() const;  // int*/uint*
  bool is_signed() const;   // int*
  bool is_structured() const { return kind_ == DataTypeKind::structured; }
  // string or vlen_bytes: elements of variable length.
  bool is_variable_length() const { return kind_ == DataTypeKind::string || kind_ == DataTypeKind::vlen_bytes; }

  // One element's byte-reversal plan between native order and the stored
  // order: `count` consecutive `unit`-byte values starting at `offset` are
  // reversed. Fields with a declared ByteOrder use it; everything else uses
  // `order` (unspecified and little: no swap on this little-endian host).
  // Empty when encoding is a plain copy.
  struct SwapRun {
    std::uint32_t offset, unit, count;
  };
  std::vector<SwapRun> swap_runs(ByteOrder order) const;
  // True if some multi-byte value has no declared order, so the `bytes`
  // codec needs an `endian`.
  bool needs_byte_order() const;
  // The byte orders declared by structured fields for multi-byte values, as
  // a bit set: 1 = little, 2 = big (3 = mixed).
  unsigned declared_byte_orders() const;

  friend bool operator==(const DataType& a, const DataType& b) {
    return a.kind_ == b.kind_ && a.length_ == b.length_ && a.layout_ == b.layout_;
  }

 private:
  struct Layout;  // a structured type's fields and size
  friend const Layout* intern_layout(std::vector<StructField> fields, std::size_t size);

  DataTypeKind kind_ = DataTypeKind::uint8;
  std::uint32_t length_ = 0;
  const Layout* layout_ = nullptr;  // structured: interned, never freed
};

struct StructField {
  std::string name;
  DataType type;
  std::vector<std::uint64_t> shape;          // subarray shape; empty for a scalar field
  ByteOrder order = ByteOrder::unspecified;  // declared stored order of its multi-byte values
  std::size_t offset = 0;                    // from the start of the record (set by structured())

  std::size_t size() const;  // type.size() times the subarray's element count
  friend bool operator==(const StructField& a, const StructField& b) {
    return a.name == b.name && a.type == b.type && a.shape == b.shape && a.order == b.order &&
           a.offset == b.offset;
  }
};

// IEEE 754 binary16 <-> binary32/64 conversion, each one rounding to nearest
// even (never through an intermediate width); NaN payloads and signs are
// preserved where representable.
float float16_to_float32(std::uint16_t bits);
std::uint16_t float32_to_float16(float value);
std::uint16_t float64_to_float16(double value);

// Applies `runs` (DataType::swap_runs) to `n` consecutive elements of
// `elem_size` bytes, copying `in` to `out` (which may be equal).
void apply_swap_runs(std::span<const DataType::SwapRun> runs, std::size_t elem_size,
                     const std::byte* in, std::byte* out, std::size_t n);

}  // namespace zarrcoro
