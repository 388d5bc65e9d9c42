// Helpers shared by the .npy sources (engine internal): npy.cpp (the
// format: header, descr, whole files) and npy_stream.cpp (NpyReader,
// NpyWriter). See zarrcoro/npy.hpp for the contract; each helper is
// described where it is defined, in npy.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <zarrcoro/error.hpp>
#include <zarrcoro/npy.hpp>

namespace zarrcoro::npy_detail {

using nlohmann::json;

[[noreturn]] inline void fail(const std::string& file, const std::string& field, const std::string& msg) {
  throw InvalidArgument(file, field, msg);
}

std::string py_tuple(std::span<const std::uint64_t> v);
std::optional<std::uint64_t> count(std::span<const std::uint64_t> shape, std::uint64_t limit);
Bytes fortran_to_c(const Bytes& in, const std::vector<std::uint64_t>& shape, std::size_t item);

// A parsed descr: the type, whose structured fields carry the byte order the
// file stores them in, and that order for a scalar type.
struct Descr {
  DataType type;
  ByteOrder order = ByteOrder::unspecified;
};

// What a .npy header says, and where the data starts.
struct Header {
  Descr descr;  // as stored (structured fields with their byte orders)
  DataType dtype;  // as returned: native, no declared orders
  std::vector<std::uint64_t> shape;
  json shape_json;
  bool fortran = false;
  std::uint64_t data_offset = 0;
};
Header parse_header(ByteSpan b, const std::string& file);
std::uint64_t checked_count(const Header& h, std::uint64_t present, const std::string& file);
void to_native(const Descr& d, std::byte* data, std::uint64_t n);

}  // namespace zarrcoro::npy_detail
