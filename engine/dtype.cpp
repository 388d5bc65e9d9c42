#include <zarrcoro/dtype.hpp>

#include <array>
#include <bit>
#include <cstring>

namespace zarrcoro {
namespace {

struct Info {
  std::string_view name;
  std::uint8_t size;
  std::uint8_t swap_unit;
};

constexpr std::array<Info, 14> kInfo{{
    {"bool", 1, 1},
    {"int8", 1, 1},
    {"int16", 2, 2},
    {"int32", 4, 4},
    {"int64", 8, 8},
    {"uint8", 1, 1},
    {"uint16", 2, 2},
    {"uint32", 4, 4},
    {"uint64", 8, 8},
    {"float16", 2, 2},
    {"float32", 4, 4},
    {"float64", 8, 8},
    {"complex64", 8, 4},
    {"complex128", 16, 8},
}};

const Info& info(DataTypeKind k) { return kInfo[static_cast<std::size_t>(k)]; }

}  // namespace

std::optional<DataType> DataType::from_name(std::string_view name) {
  for (std::size_t i = 0; i < kInfo.size(); ++i)
    if (kInfo[i].name == name) return DataType(static_cast<DataTypeKind>(i));
  return std::nullopt;
}

std::string_view DataType::name() const { return info(kind_).name; }
std::size_t DataType::size() const { return info(kind_).size; }
std::size_t DataType::swap_unit() const { return info(kind_).swap_unit; }
bool DataType::is_float() const {
  return kind_ == DataTypeKind::float16 || kind_ == DataTypeKind::float32 ||
         kind_ == DataTypeKind::float64;
}
bool DataType::is_complex() const {
  return kind_ == DataTypeKind::complex64 || kind_ == DataTypeKind::complex128;
}
bool DataType::is_integer() const {
  return kind_ >= DataTypeKind::int8 && kind_ <= DataTypeKind::uint64;
}
bool DataType::is_signed() const {
  return kind_ >= DataTypeKind::int8 && kind_ <= DataTypeKind::int64;
}

float float16_to_float32(std::uint16_t h) {
  const std::uint32_t sign = (h & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1f;
  std::uint32_t mant = h & 0x3ffu;
  std::uint32_t bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);  // inf / NaN (payload kept)
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  } else if (mant == 0) {
    bits = sign;
  } else {  // subnormal: normalize
    int e = -1;
    do {
      ++e;
      mant <<= 1;
    } while ((mant & 0x400u) == 0);
    bits = sign | (static_cast<std::uint32_t>(112 - e) << 23) | ((mant & 0x3ffu) << 13);
  }
  return std::bit_cast<float>(bits);
}

std::uint16_t float32_to_float16(float value) {
  const std::uint32_t f = std::bit_cast<std::uint32_t>(value);
  const std::uint16_t sign = static_cast<std::uint16_t>((f >> 16) & 0x8000u);
  const std::uint32_t exp = (f >> 23) & 0xff;
  const std::uint32_t mant = f & 0x7fffffu;
  if (exp == 0xff) {  // inf or NaN; keep a quiet NaN non-zero
    std::uint16_t m = static_cast<std::uint16_t>(mant >> 13);
    if (mant != 0 && m == 0) m = 0x200;
    return sign | 0x7c00u | m;
  }
  const int e = static_cast<int>(exp) - 127 + 15;
  if (e >= 0x1f) return sign | 0x7c00u;  // overflow -> inf
  if (e <= 0) {                           // subnormal or zero
    if (e < -10) return sign;
    const std::uint32_t m = mant | 0x800000u;
    const int shift = 14 - e;
    std::uint32_t half = m >> shift;
    const std::uint32_t rem = m & ((1u << shift) - 1);
    const std::uint32_t mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1))) ++half;
    return sign | static_cast<std::uint16_t>(half);
  }
  std::uint32_t half = (static_cast<std::uint32_t>(e) << 10) | (mant >> 13);
  const std::uint32_t rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (half & 1))) ++half;  // may carry into inf: correct
  return sign | static_cast<std::uint16_t>(half);
}

}  // namespace zarrcoro
