// The `bytes` array -> bytes codec (Zarr v3 codec spec "bytes", version 1.0):
// elements in lexicographical (C) order, each in the configured byte order.
// `endian` ("little" or "big") is required unless no multi-byte value needs
// it. Complex numbers are two floats, each swapped on its own
// (DataType::swap_unit); unicode strings are 4-byte code units. A structured
// element is swapped field by field: a field that declares its own byte
// order (Zarr v2 dtypes such as [["a", ">f4"], ["b", "<i2"]]) keeps it, the
// others use `endian` (zarr-extensions `struct`; shared/cases B01). The host
// is little-endian, so "little" is a copy.
#include <cstring>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include <zarrcoro/error.hpp>

#include "codecs/codec.hpp"

namespace zarrcoro::codecs {
namespace {

template <class U, U (*Swap)(U)>
void swap_units(const std::byte* in, std::byte* out, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    U v;
    std::memcpy(&v, in + i * sizeof(U), sizeof(U));
    v = Swap(v);
    std::memcpy(out + i * sizeof(U), &v, sizeof(U));
  }
}

std::uint16_t bswap16(std::uint16_t v) { return __builtin_bswap16(v); }
std::uint32_t bswap32(std::uint32_t v) { return __builtin_bswap32(v); }
std::uint64_t bswap64(std::uint64_t v) { return __builtin_bswap64(v); }

// Copies `n` bytes, reversing each `unit`-byte group (`in` and `out` may be equal).
void swap_copy(const std::byte* in, std::byte* out, std::size_t n, std::size_t unit) {
  switch (unit) {
    case 1: if (in != out) std::memcpy(out, in, n); return;
    case 2: return swap_units<std::uint16_t, bswap16>(in, out, n / 2);
    case 4: return swap_units<std::uint32_t, bswap32>(in, out, n / 4);
    case 8: return swap_units<std::uint64_t, bswap64>(in, out, n / 8);
  }
  for (std::size_t i = 0; i < n; i += unit)  // generic; safe in place too
    for (std::size_t a = 0, b = unit - 1; a < b; ++a, --b) {
      const std::byte x = in[i + a], y = in[i + b];
      out[i + a] = y;
      out[i + b] = x;
    }
}

enum class Endian { little, big };

class BytesCodec final : public ArrayToBytesCodec {
 public:
  explicit BytesCodec(std::optional<Endian> endian) : endian_(endian) {}

  std::string name() const override { return "bytes"; }

  nlohmann::json to_json() const override {
    nlohmann::json j{{"name", "bytes"}};
    if (endian_) j["configuration"] = {{"endian", *endian_ == Endian::little ? "little" : "big"}};
    return j;
  }

  void validate(const ArraySpec& spec) const override {
    if (spec.dtype.is_variable_length())
      throw InvalidMetadata("", "", "bytes: the variable-length data type " + spec.dtype.describe() + " needs the " +
                                        (spec.dtype.kind() == DataTypeKind::string ? "vlen-utf8" : "vlen-bytes") +
                                        " codec");
    if (!endian_ && spec.dtype.needs_byte_order())
      throw InvalidMetadata("", "endian",
                            "bytes: \"endian\" is required for data type " + spec.dtype.describe());
  }

  bool is_identity(const ArraySpec& spec) const override {
    if (spec.dtype.is_structured()) return spec.dtype.swap_runs(order()).empty();
    return spec.dtype.swap_unit() == 1 || endian_ == Endian::little;
  }

  std::int64_t encoded_size(const ArraySpec& spec) const override {
    return static_cast<std::int64_t>(spec.num_bytes());
  }

  void encode(const ArraySpec& spec, ByteSpan in, Bytes& out) const override {
    out.resize(in.size());
    convert(spec, in.data(), out.data(), in.size());
  }

  void decode(const ArraySpec& spec, ByteSpan in, MutableByteSpan out) const override {
    const auto expected = spec.num_bytes();
    if (out.size() != expected)
      throw InvalidArgument("", "out", "bytes: output buffer is " + std::to_string(out.size()) +
                                           " bytes, expected " + std::to_string(expected));
    if (in.size() != expected)
      throw CorruptChunk("", "bytes",
                         "bytes: chunk is " + std::to_string(in.size()) + " bytes, expected " +
                             std::to_string(expected));
    convert(spec, in.data(), out.data(), in.size());
  }

 private:
  ByteOrder order() const {
    return !endian_ ? ByteOrder::unspecified : *endian_ == Endian::big ? ByteOrder::big : ByteOrder::little;
  }

  // Native <-> stored order (the same reversal both ways).
  void convert(const ArraySpec& spec, const std::byte* in, std::byte* out, std::size_t n) const {
    if (spec.dtype.is_structured()) {
      const auto runs = spec.dtype.swap_runs(order());
      apply_swap_runs(runs, spec.dtype.size(), in, out, n / spec.dtype.size());
      return;
    }
    swap_copy(in, out, n, is_identity(spec) ? 1 : spec.dtype.swap_unit());
  }

  std::optional<Endian> endian_;
};

}  // namespace

std::unique_ptr<ArrayToBytesCodec> make_bytes_codec(const nlohmann::json& config) {
  if (config.is_null()) return std::make_unique<BytesCodec>(std::nullopt);
  if (!config.is_object())
    throw InvalidMetadata("", "", "bytes: configuration must be a JSON object");
  std::optional<Endian> endian;
  for (const auto& [key, value] : config.items()) {
    if (key != "endian")
      throw InvalidMetadata("", key, "bytes: unknown configuration member '" + key + "'");
    if (value == "little") endian = Endian::little;
    else if (value == "big") endian = Endian::big;
    else throw InvalidMetadata("", "endian", "bytes: \"endian\" must be \"little\" or \"big\", got " + value.dump());
  }
  return std::make_unique<BytesCodec>(endian);
}

}  // namespace zarrcoro::codecs
