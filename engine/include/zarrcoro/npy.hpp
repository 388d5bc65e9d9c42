// NumPy .npy files (format 1.0 written, or 2.0/3.0 when needed; 1.0, 2.0
// and 3.0 read), as described in NumPy's NEP 1 "A simple file format for
// NumPy arrays", and the mapping between DataType and NumPy's `descr`.
//
// Thread-safety: pure functions of their arguments; safe to call concurrently
// (two calls writing the same file race like any two writers).
//
// Data types, as npy_descr() names them for data the engine holds (native =
// little-endian byte order, records packed with fields in order, exactly the
// DataType's offsets and size):
//   bool '|b1'; int8..64 '|i1' '<i2' '<i4' '<i8'; uint8..64 '|u1' '<u2' '<u4'
//   '<u8'; float16/32/64 '<f2' '<f4' '<f8'; complex64/128 '<c8' '<c16';
//   S<n> (null_terminated_bytes) '|S<n>'; U<n> (fixed_length_utf32) '<U<n>';
//   structured: the list NumPy writes, e.g.
//     [('a', '|S3'), ('n', '<i2'), ('u', '<U2'), ('b', '|S2')]
//   with subarray fields ('z', '<i2', (2, 2)) and nested structs
//   ('s', [('x', '|u1'), ('y', '<f8', (3,))]).
// A structured field's declared stored byte order (StructField::order) does
// not show: the buffer is native. Field names are written as Python string
// literals, quoted and escaped as Python's repr() does for names in the
// Latin-1 range (other characters as UTF-8).
//
// On read, any byte-order mark is accepted ('<', '>', '|', '=') for every
// type and every structured field; big-endian values are byte-swapped to
// native order and fortran_order True is converted to C order, so the result
// is always an NdArray in C order and native byte order. Structured fields of
// the result declare no byte order (ByteOrder::unspecified), like a scalar
// type: where the data goes next decides its stored order. Object (pickled),
// datetime/timedelta, void/padding (aligned or offset structs), titled
// fields and zero-length string dtypes are refused.
//
// Limits (hostile input): a header of at most kNpyMaxHeaderBytes, nested at
// most kNpyMaxNesting containers deep; structs nested at most
// kNpyMaxStructDepth deep; at most kNpyMaxDims dimensions for the array and
// for a subarray field; element sizes below 2^31 bytes (DataType's limit).
// A declared shape whose byte size overflows or exceeds the data present is
// an error before anything is allocated. Header text in error messages is
// escaped to printable ASCII and shortened.
//
// Writing produces format 1.0 (2.0 if the header would not fit in 1.0; 3.0,
// UTF-8, if a field name has a character beyond Latin-1, as NumPy does),
// fortran_order False, with the header padded by spaces so that the data
// starts at a multiple of 64 bytes (the header ends with '\n').
//
// Errors: the key is the file name ("" for parse_npy / encode_npy /
// npy_header / npy_descr / parse_npy_descr) and the field is the part at
// fault: "magic", "version", "header", "descr", "fortran_order", "shape",
// "data" or "file" (open, read or write failures).
//  - reading: InvalidArgument for anything malformed or unsupported;
//  - writing: UnsupportedError(field "descr" or "shape") for a type or shape
//    a .npy cannot hold (struct nesting, dimensions, header size);
//    InvalidArgument(field "data") for a buffer that does not match.
// No other exception escapes (bar std::bad_alloc).
//
// Streaming (NpyReader, NpyWriter): files larger than memory are read and
// written a box (Region) at a time, with the checks and conversions above.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <zarrcoro/array.hpp>
#include <zarrcoro/bytes.hpp>
#include <zarrcoro/dtype.hpp>

namespace zarrcoro {

inline constexpr std::size_t kNpyMaxHeaderBytes = std::size_t{1} << 20;
inline constexpr std::size_t kNpyMaxNesting = 64;      // containers in the header literal
inline constexpr std::size_t kNpyMaxStructDepth = 16;  // a struct in a struct in ... counts 2, 3, ...
inline constexpr std::size_t kNpyMaxDims = 64;         // NumPy 2's limit (NumPy 1.x loads at most 32)

// Reads and parses a .npy file.
NdArray read_npy(const std::filesystem::path& file);
// Parses the bytes of a whole .npy file. Trailing bytes after the data are an
// error (field "data").
NdArray parse_npy(ByteSpan npy);
// The .npy bytes of `array`. Raises InvalidArgument(field "data") if the
// buffer size does not match shape and dtype.
Bytes encode_npy(const NdArray& array);
// Writes encode_npy(array) to `file` (replacing it).
void write_npy(const std::filesystem::path& file, const NdArray& array);

// The NumPy descr of `dtype` for native-order data, as it appears in a .npy
// header without the quotes of a string: "|S4", "<U2", "<i4", or for a
// structured type the Python literal of its field list (see above). Raises
// UnsupportedError(field "descr") for a type NumPy cannot be given (structs
// nested deeper than kNpyMaxStructDepth, a subarray of more than kNpyMaxDims
// dimensions).
std::string npy_descr(DataType dtype);
// The bytes of a .npy file before the data, for C-order native-order data of
// `dtype` and `shape` (what encode_npy writes before the data). Raises as
// npy_descr, and UnsupportedError(field "shape") for more than kNpyMaxDims
// dimensions or field "header" beyond kNpyMaxHeaderBytes.
std::string npy_header(DataType dtype, std::span<const std::uint64_t> shape);
// Parses a descr given as its Python literal ("'<i4'", "[('a', '|S3')]"),
// with the limits and the result type of parse_npy. InvalidArgument(field
// "descr", or "header" for a malformed literal) otherwise.
DataType parse_npy_descr(std::string_view literal);

// Reads a .npy file a box at a time. The constructor reads and checks the
// header as read_npy does (and the file's size against it, so a truncated
// file fails here); read() returns a box's elements in C order and native
// byte order, whatever the file's byte order and fortran_order. A box reads
// with one pread per contiguous run of the file (a C-order box of whole
// trailing dimensions is one run; a Fortran-order file is read as its
// transpose and the box transposed back), so a box costs its own size in
// memory (twice, briefly, for a Fortran-order file). Thread-safety: read() may be called concurrently (pread).
class NpyReader {
 public:
  explicit NpyReader(const std::filesystem::path& file);
  ~NpyReader();
  NpyReader(const NpyReader&) = delete;
  NpyReader& operator=(const NpyReader&) = delete;

  DataType dtype() const { return dtype_; }  // as read_npy's result: native, no declared byte orders
  const std::vector<std::uint64_t>& shape() const { return shape_; }
  bool fortran_order() const { return fortran_; }
  // The elements of `box`. InvalidArgument(field "region") for a box outside
  // the shape, (field "file") for a failed or short read.
  NdArray read(const Region& box) const;

 private:
  std::string name_;
  int fd_ = -1;
  DataType dtype_, stored_;
  bool big_endian_ = false;  // a scalar type stored big-endian
  bool fortran_ = false;
  std::vector<std::uint64_t> shape_;
  std::uint64_t data_offset_ = 0;
};

// Writes a .npy file a box at a time: npy_header(dtype, shape) first, then
// the boxes (C order, native byte order) in any order. The data goes to a
// temporary file beside `file` ("<name>.tmp-<random>"), renamed over `file`
// by commit(); a writer destroyed without commit() removes it, so a failed
// write never leaves a partial `file` (nor replaces an existing one).
// Errors: InvalidArgument(key = the file's name, field "file") when the
// temporary file cannot be created, written or renamed; as npy_header for a
// type or shape a .npy cannot hold; InvalidArgument(field "region" or
// "data") for a box outside the shape or a buffer of the wrong size.
// Thread-safety: write() may be called concurrently for disjoint boxes.
class NpyWriter {
 public:
  NpyWriter(const std::filesystem::path& file, DataType dtype, std::vector<std::uint64_t> shape);
  ~NpyWriter();
  NpyWriter(const NpyWriter&) = delete;
  NpyWriter& operator=(const NpyWriter&) = delete;

  void write(const Region& box, ByteSpan data) const;
  // Flushes and renames the temporary file over the target.
  void commit();
  // The temporary file, until commit() (e.g. for a program to remove it
  // when a signal ends it before the destructor can).
  const std::filesystem::path& temp_path() const { return temp_; }

 private:
  std::filesystem::path file_, temp_;
  int fd_ = -1;
  DataType dtype_;
  std::vector<std::uint64_t> shape_;
  std::uint64_t data_offset_ = 0;
};

}  // namespace zarrcoro
