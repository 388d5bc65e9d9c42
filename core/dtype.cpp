#include <zarrcoro/dtype.hpp>

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>

#include <zarrcoro/error.hpp>

#include "core/checked.hpp"

namespace zarrcoro {

struct DataType::Layout {
  std::vector<StructField> fields;
  std::size_t size = 0;
};

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

// A subarray's element count; saturates instead of wrapping (callers bound it).
std::uint64_t product(const std::vector<std::uint64_t>& shape) {
  return checked_product(shape).value_or(UINT64_MAX);
}

const char* order_prefix(ByteOrder o) {
  return o == ByteOrder::big ? ">" : o == ByteOrder::little ? "<" : "";
}

// Appends the swap runs of `count` consecutive elements of `t` at `offset`.
void collect_runs(const DataType& t, ByteOrder order, std::size_t offset, std::uint64_t count,
                  std::vector<DataType::SwapRun>& out) {
  if (t.is_structured()) {
    for (std::uint64_t e = 0; e < count; ++e)
      for (const auto& f : t.fields()) {
        const ByteOrder o = f.order != ByteOrder::unspecified ? f.order : order;
        collect_runs(f.type, o, offset + e * t.size() + f.offset, product(f.shape), out);
      }
    return;
  }
  const std::size_t unit = t.swap_unit();
  if (unit == 1 || order != ByteOrder::big) return;
  const auto units = static_cast<std::uint32_t>(count * (t.size() / unit));
  if (!out.empty() && out.back().unit == unit &&
      out.back().offset + out.back().unit * out.back().count == offset) {
    out.back().count += units;  // adjacent values of the same width: one run
    return;
  }
  out.push_back({static_cast<std::uint32_t>(offset), static_cast<std::uint32_t>(unit), units});
}

// Visits every multi-byte value's effective declared order.
template <class F>
void visit_orders(const DataType& t, ByteOrder order, F&& f) {
  if (t.is_structured()) {
    for (const auto& fld : t.fields())
      visit_orders(fld.type, fld.order != ByteOrder::unspecified ? fld.order : order, f);
    return;
  }
  if (t.swap_unit() > 1) f(order);
}

template <std::size_t U>
void reverse_units(std::byte* p, std::size_t count) {
  for (std::size_t i = 0; i < count; ++i, p += U) {
    if constexpr (U == 2) {
      std::uint16_t v;
      std::memcpy(&v, p, 2);
      v = __builtin_bswap16(v);
      std::memcpy(p, &v, 2);
    } else if constexpr (U == 4) {
      std::uint32_t v;
      std::memcpy(&v, p, 4);
      v = __builtin_bswap32(v);
      std::memcpy(p, &v, 4);
    } else if constexpr (U == 8) {
      std::uint64_t v;
      std::memcpy(&v, p, 8);
      v = __builtin_bswap64(v);
      std::memcpy(p, &v, 8);
    }
  }
}

void reverse_run(std::byte* p, std::size_t unit, std::size_t count) {
  switch (unit) {
    case 2: return reverse_units<2>(p, count);
    case 4: return reverse_units<4>(p, count);
    case 8: return reverse_units<8>(p, count);
  }
  for (std::size_t i = 0; i < count; ++i, p += unit) std::reverse(p, p + unit);
}

}  // namespace

// Interned layouts: equal field lists share one immortal object, so a
// DataType compares layouts by pointer.
const DataType::Layout* intern_layout(std::vector<StructField> fields, std::size_t size) {
  static std::mutex m;
  static std::map<std::string, std::unique_ptr<DataType::Layout>> table;
  std::string key;
  for (const auto& f : fields) {
    key += f.name;
    key += '\0';
    key += f.type.describe();
    key += '\0';
    for (auto d : f.shape) key += std::to_string(d) + ",";
    key += static_cast<char>('0' + static_cast<int>(f.order));
    key += '\0';
  }
  std::lock_guard lock(m);
  auto& slot = table[key];
  if (!slot) slot.reset(new DataType::Layout{std::move(fields), size});
  return slot.get();
}

DataType DataType::fixed_bytes(std::size_t length) {
  if (length == 0 || length > kMaxElementBytes)
    throw InvalidArgument("", "length", "fixed-length bytes need a length of 1 to " +
                                            std::to_string(kMaxElementBytes) + ", got " + std::to_string(length));
  DataType t(DataTypeKind::bytes);
  t.length_ = static_cast<std::uint32_t>(length);
  return t;
}

DataType DataType::fixed_unicode(std::size_t chars) {
  if (chars == 0 || chars > kMaxElementBytes / 4)
    throw InvalidArgument("", "length", "fixed-length unicode needs a length of 1 to " +
                                            std::to_string(kMaxElementBytes / 4) + ", got " + std::to_string(chars));
  DataType t(DataTypeKind::unicode);
  t.length_ = static_cast<std::uint32_t>(chars);
  return t;
}

DataType DataType::structured(std::vector<StructField> fields) {
  if (fields.empty()) throw InvalidArgument("", "fields", "a structured type needs at least one field");
  std::size_t offset = 0;
  for (std::size_t i = 0; i < fields.size(); ++i) {
    auto& f = fields[i];
    if (f.name.empty()) throw InvalidArgument("", "fields", "field " + std::to_string(i) + " has an empty name");
    if (f.type.is_variable_length())
      throw InvalidArgument("", "fields", "field '" + f.name + "' has the variable-length type " + f.type.describe());
    const std::uint64_t n = product(f.shape);
    if (n == 0 || n > kMaxElementBytes / f.type.size())
      throw InvalidArgument("", "fields", "field '" + f.name + "' has no elements or is too large");
    f.offset = offset;
    offset += f.size();
    if (offset > kMaxElementBytes)
      throw InvalidArgument("", "fields",
                            "the record is larger than " + std::to_string(kMaxElementBytes) + " bytes");
  }
  std::vector<std::string_view> names;  // sorted: duplicates in O(n log n), whatever the field count
  for (const auto& f : fields) names.push_back(f.name);
  std::sort(names.begin(), names.end());
  if (const auto dup = std::adjacent_find(names.begin(), names.end()); dup != names.end())
    throw InvalidArgument("", "fields", "duplicate field name '" + std::string(*dup) + "'");
  DataType t(DataTypeKind::structured);
  t.layout_ = intern_layout(std::move(fields), offset);
  return t;
}

std::optional<DataType> DataType::from_name(std::string_view name) {
  for (std::size_t i = 0; i < kInfo.size(); ++i)
    if (kInfo[i].name == name) return DataType(static_cast<DataTypeKind>(i));
  if (name == "string") return DataType(DataTypeKind::string);
  if (name == "bytes" || name == "variable_length_bytes") return DataType(DataTypeKind::vlen_bytes);
  return std::nullopt;
}

std::string_view DataType::name() const {
  switch (kind_) {
    case DataTypeKind::bytes: return "null_terminated_bytes";
    case DataTypeKind::unicode: return "fixed_length_utf32";
    case DataTypeKind::structured: return "struct";
    case DataTypeKind::string: return "string";
    case DataTypeKind::vlen_bytes: return "bytes";
    default: return info(kind_).name;
  }
}

std::string DataType::describe() const {
  switch (kind_) {
    case DataTypeKind::bytes: return "S" + std::to_string(length_);
    case DataTypeKind::unicode: return "U" + std::to_string(length_);
    case DataTypeKind::structured: {
      std::string s = "{";
      for (const auto& f : fields()) {
        if (s.size() > 1) s += ", ";
        s += f.name + ": " + order_prefix(f.order) + f.type.describe();
        if (!f.shape.empty()) {
          s += "[";
          for (std::size_t i = 0; i < f.shape.size(); ++i) s += (i ? "," : "") + std::to_string(f.shape[i]);
          s += "]";
        }
      }
      return s + "}";
    }
    case DataTypeKind::string:
    case DataTypeKind::vlen_bytes: return std::string(name());
    default: return std::string(info(kind_).name);
  }
}

std::size_t DataType::size() const {
  switch (kind_) {
    case DataTypeKind::bytes: return length_;
    case DataTypeKind::unicode: return std::size_t{4} * length_;
    case DataTypeKind::structured: return layout_->size;
    case DataTypeKind::string:
    case DataTypeKind::vlen_bytes: return 16;  // the engine's view {const char*, uint64}
    default: return info(kind_).size;
  }
}

std::size_t DataType::swap_unit() const {
  switch (kind_) {
    case DataTypeKind::bytes:
    case DataTypeKind::string:
    case DataTypeKind::vlen_bytes:
    case DataTypeKind::structured: return 1;
    case DataTypeKind::unicode: return 4;
    default: return info(kind_).swap_unit;
  }
}

std::span<const StructField> DataType::fields() const {
  if (!layout_) return {};
  return layout_->fields;
}

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

std::vector<DataType::SwapRun> DataType::swap_runs(ByteOrder order) const {
  std::vector<SwapRun> runs;
  collect_runs(*this, order, 0, 1, runs);
  return runs;
}

bool DataType::needs_byte_order() const {
  bool needs = false;
  visit_orders(*this, ByteOrder::unspecified, [&](ByteOrder o) { needs |= o == ByteOrder::unspecified; });
  return needs;
}

unsigned DataType::declared_byte_orders() const {
  unsigned bits = 0;
  visit_orders(*this, ByteOrder::unspecified, [&](ByteOrder o) {
    bits |= o == ByteOrder::little ? 1u : o == ByteOrder::big ? 2u : 0u;
  });
  return bits;
}

std::size_t StructField::size() const { return type.size() * static_cast<std::size_t>(product(shape)); }

void apply_swap_runs(std::span<const DataType::SwapRun> runs, std::size_t elem_size, const std::byte* in,
                     std::byte* out, std::size_t n) {
  if (in != out) std::memcpy(out, in, n * elem_size);
  if (runs.empty()) return;
  if (runs.size() == 1 && runs[0].offset == 0 && runs[0].unit * runs[0].count == elem_size) {
    reverse_run(out, runs[0].unit, n * runs[0].count);  // every value in the buffer
    return;
  }
  for (std::size_t e = 0; e < n; ++e, out += elem_size)
    for (const auto& r : runs) reverse_run(out + r.offset, r.unit, r.count);
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

std::uint16_t float64_to_float16(double value) {
  const std::uint64_t f = std::bit_cast<std::uint64_t>(value);
  const std::uint16_t sign = static_cast<std::uint16_t>((f >> 48) & 0x8000u);
  const std::uint64_t exp = (f >> 52) & 0x7ff;
  const std::uint64_t mant = f & ((std::uint64_t{1} << 52) - 1);
  if (exp == 0x7ff) {  // inf or NaN; keep a quiet NaN non-zero
    std::uint16_t m = static_cast<std::uint16_t>(mant >> 42);
    if (mant != 0 && m == 0) m = 0x200;
    return sign | 0x7c00u | m;
  }
  // One rounding from the double's exact value (round half to even): the
  // dropped bits decide, never an intermediate float32 (shared/cases B49).
  const auto round = [](std::uint64_t kept, std::uint64_t rem, std::uint64_t mid) {
    return rem > mid || (rem == mid && (kept & 1)) ? kept + 1 : kept;
  };
  const int e = static_cast<int>(exp) - 1023 + 15;
  if (e >= 0x1f) return sign | 0x7c00u;  // overflow -> inf
  if (e <= 0) {                           // subnormal or zero (a double subnormal is far below 2^-25)
    if (e < -10) return sign;
    const std::uint64_t m = mant | (std::uint64_t{1} << 52);
    const int shift = 43 - e;  // 53 at most
    const std::uint64_t half = round(m >> shift, m & ((std::uint64_t{1} << shift) - 1), std::uint64_t{1} << (shift - 1));
    return sign | static_cast<std::uint16_t>(half);
  }
  const std::uint64_t kept = (static_cast<std::uint64_t>(e) << 10) | (mant >> 42);
  const std::uint64_t half = round(kept, mant & ((std::uint64_t{1} << 42) - 1), std::uint64_t{1} << 41);
  return sign | static_cast<std::uint16_t>(half);  // a carry into the exponent is correct, also into inf
}

std::uint16_t float32_to_float16(float value) { return float64_to_float16(value); }  // float -> double is exact

}  // namespace zarrcoro
