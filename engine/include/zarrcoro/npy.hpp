// NumPy .npy files (format 1.0 written; 1.0, 2.0 and 3.0 read), as described
// in NumPy's NEP 1 "A simple file format for NumPy arrays".
//
// Thread-safety: pure functions of their arguments; safe to call concurrently
// (two calls writing the same file race like any two writers).
//
// Data types: the descr strings '|b1' (bool), '|i1' '<i2' '<i4' '<i8',
// '|u1' '<u2' '<u4' '<u8', '<f2' '<f4' '<f8', '<c8' '<c16'. On read, any
// byte-order mark is accepted ('<', '>', '|', '='); big-endian data is
// byte-swapped to native order and fortran_order True is converted to C
// order, so the result is always an NdArray (C order, native byte order).
// Structured, object (pickled), string and datetime dtypes are refused.
//
// Writing produces format 1.0 (2.0 only if the header would not fit in 1.0),
// little-endian, fortran_order False, with the header padded by spaces so
// that the data starts at a multiple of 64 bytes (the header ends with '\n').
//
// Errors: InvalidArgument whose key is the file name ("" for parse_npy /
// encode_npy) and whose field is the part at fault: "magic", "version",
// "header", "descr", "fortran_order", "shape", "data" or "file" (open, read
// or write failures).
#pragma once

#include <filesystem>

#include <zarrcoro/array.hpp>
#include <zarrcoro/bytes.hpp>

namespace zarrcoro {

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

}  // namespace zarrcoro
