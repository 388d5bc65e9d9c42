// Zarr v3 array metadata: parsing, validation and serialization
// (Zarr v3 core spec, "Array metadata", "Chunk key encoding", "Fill value";
// zarr-extensions data types struct, fixed_length_utf32,
// null_terminated_bytes). The v2 form is in metadata_v2.cpp.
#include <zarrcoro/metadata.hpp>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>

#include <spdlog/spdlog.h>

#include <zarrcoro/error.hpp>

#include "engine/metadata_detail.hpp"

namespace zarrcoro {

namespace detail {

std::vector<std::uint64_t> parse_shape(const nlohmann::json& j, const std::string& key,
                                       const std::string& field) {
  if (!j.is_array()) throw InvalidMetadata(key, field, "expected an array of non-negative integers");
  std::vector<std::uint64_t> out;
  for (const auto& v : j) {
    if (!v.is_number_integer() || (v.is_number_integer() && !v.is_number_unsigned() &&
                                   v.get<std::int64_t>() < 0))
      throw InvalidMetadata(key, field, "expected an array of non-negative integers, got " + j.dump());
    out.push_back(v.get<std::uint64_t>());
  }
  return out;
}

}  // namespace detail

namespace {

using json = nlohmann::json;
using detail::parse_shape;

// An extension definition in its object form (core spec v3.1, "Extension
// definition"): a short-hand name stands for {"name": name}.
json extension_object(const json& j) { return j.is_string() ? json{{"name", j}} : j; }

[[noreturn]] void bad(const std::string& key, const std::string& field, const std::string& msg) {
  throw InvalidMetadata(key, field, msg);
}

// ---- fill values ---------------------------------------------------------

template <class T>
void put(FillValue& out, T v) {
  out.resize(sizeof(T));
  std::memcpy(out.data(), &v, sizeof(T));
}

// A float-typed fill component as float64 bits or exact hex bits of `size`.
// Returns the raw bits of a `size`-byte float.
std::uint64_t parse_float_bits(const json& j, std::size_t size, const std::string& key) {
  auto from_double = [size](double d) -> std::uint64_t {
    if (size == 8) return std::bit_cast<std::uint64_t>(d);
    if (size == 4) return std::bit_cast<std::uint32_t>(static_cast<float>(d));
    return float64_to_float16(d);
  };
  if (j.is_number_unsigned() && size == 4)  // one rounding from the integer, as from a decimal
    return std::bit_cast<std::uint32_t>(static_cast<float>(j.get<std::uint64_t>()));
  if (j.is_number_integer() && size == 4)
    return std::bit_cast<std::uint32_t>(static_cast<float>(j.get<std::int64_t>()));
  if (j.is_number()) return from_double(j.get<double>());
  if (j.is_string()) {
    const auto s = j.get<std::string>();
    if (s == "NaN") {
      // The canonical quiet NaN of each width.
      return size == 8 ? 0x7ff8000000000000ull : size == 4 ? 0x7fc00000ull : 0x7e00ull;
    }
    if (s == "Infinity") return from_double(std::numeric_limits<double>::infinity());
    if (s == "-Infinity") return from_double(-std::numeric_limits<double>::infinity());
    if (s.size() == 2 + 2 * size && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
      std::uint64_t bits = 0;
      for (std::size_t i = 2; i < s.size(); ++i) {
        const char c = s[i];
        int v = (c >= '0' && c <= '9')   ? c - '0'
                : (c >= 'a' && c <= 'f') ? c - 'a' + 10
                : (c >= 'A' && c <= 'F') ? c - 'A' + 10
                                         : -1;
        if (v < 0) bad(key, "fill_value", "invalid hex digit in '" + s + "'");
        bits = bits << 4 | static_cast<std::uint64_t>(v);
      }
      return bits;
    }
    bad(key, "fill_value",
        "expected a number, \"NaN\", \"Infinity\", \"-Infinity\" or " +
            std::to_string(2 * size) + " hex digits as \"0x...\", got \"" + s + "\"");
  }
  bad(key, "fill_value", "expected a number or a string for a floating-point type, got " +
                             std::string(j.is_null() ? "null" : j.dump()));
}

void put_float_bits(FillValue& out, std::size_t offset, std::uint64_t bits, std::size_t size) {
  std::memcpy(out.data() + offset, &bits, size);  // little-endian host
}

template <class T>
T parse_integer(const json& j, const std::string& key) {
  const auto range_error = [&] {
    bad(key, "fill_value", j.dump() + " is out of range for the data type");
  };
  if (j.is_number_unsigned()) {
    const auto v = j.get<std::uint64_t>();
    if (v > static_cast<std::uint64_t>(std::numeric_limits<T>::max())) range_error();
    return static_cast<T>(v);
  }
  if (j.is_number_integer()) {
    const auto v = j.get<std::int64_t>();
    if constexpr (std::is_unsigned_v<T>) {
      if (v < 0) range_error();
      if (static_cast<std::uint64_t>(v) > std::numeric_limits<T>::max()) range_error();
    } else {
      if (v < std::numeric_limits<T>::min() || v > std::numeric_limits<T>::max()) range_error();
    }
    return static_cast<T>(v);
  }
  if (j.is_number_float()) {  // legacy writers emit 0.0 for integer fills (zarr-python #3447)
    const double d = j.get<double>();
    if (!std::isfinite(d) || std::floor(d) != d)
      bad(key, "fill_value", "non-integral value " + j.dump() + " for an integer data type");
    // Exact bounds: [min, 2^digits). `max` itself rounds up to 2^digits as
    // a double (int64: 2^63), and converting that is undefined.
    const double below = std::ldexp(1.0, std::numeric_limits<T>::digits);
    if (d < static_cast<double>(std::numeric_limits<T>::min()) || d >= below) range_error();
    return static_cast<T>(d);
  }
  bad(key, "fill_value", "expected an integer, got " + std::string(j.is_null() ? "null" : j.dump()));
}

// Walks a parsed document and turns the sentinels left by parse_json back
// into numbers: non-finite ones, and integers just below -2^63.
constexpr std::string_view kSentinel = "\x01zarrcoro-token:";

void restore_tokens(json& j) {
  if (j.is_string()) {
    const auto& s = j.get_ref<const std::string&>();
    if (s.starts_with(kSentinel)) {
      const auto tok = s.substr(kSentinel.size());
      j = tok == "NaN"         ? std::numeric_limits<double>::quiet_NaN()
          : tok == "Infinity"  ? std::numeric_limits<double>::infinity()
          : tok == "-Infinity" ? -std::numeric_limits<double>::infinity()
                               : std::nextafter(-0x1p63, -std::numeric_limits<double>::infinity());
    }
  } else if (j.is_structured()) {
    for (auto& v : j) restore_tokens(v);
  }
}

void check_finite(const json& j, const std::string& path) {
  if (j.is_number_float() && !std::isfinite(j.get<double>()))
    throw InvalidArgument("", path,
                          "non-finite number cannot be written as strict JSON; store it as "
                          "the string \"NaN\", \"Infinity\" or \"-Infinity\"");
  if (j.is_object())
    for (const auto& [k, v] : j.items()) check_finite(v, path + "." + k);
  else if (j.is_array())
    for (std::size_t i = 0; i < j.size(); ++i) check_finite(j[i], path + "[" + std::to_string(i) + "]");
}

}  // namespace

FillValue parse_fill_value(const json& j, DataType dtype, const std::string& key) {
  FillValue out;
  using K = DataTypeKind;
  switch (dtype.kind()) {
    // Variable length: the FillValue holds the value's bytes, of any length
    // ("" = empty). string: the text (zarr-python 3); bytes: base64
    // (zarr-python 3's VariableLengthBytes).
    case K::string: {
      if (!j.is_string()) bad(key, "fill_value", "expected a string for the data type string, got " + j.dump());
      const std::string& text = j.get_ref<const std::string&>();
      if (!detail::valid_utf8(text)) bad(key, "fill_value", "is not valid UTF-8");
      out.assign(reinterpret_cast<const std::byte*>(text.data()), reinterpret_cast<const std::byte*>(text.data()) + text.size());
      break;
    }
    case K::vlen_bytes: {  // base64 (zarr-python 3), or the registered `bytes` type's array of byte values
      if (j.is_array()) {
        for (const auto& b : j) {
          if (!b.is_number_integer() || b.get<std::int64_t>() < 0 || b.get<std::int64_t>() > 255)
            bad(key, "fill_value", "expected an array of integers 0..255 for the data type bytes, got " + j.dump());
          out.push_back(static_cast<std::byte>(b.get<std::int64_t>()));
        }
        break;
      }
      const auto raw = j.is_string() ? detail::base64_decode(j.get<std::string>()) : std::nullopt;
      if (!raw) bad(key, "fill_value", "expected base64 text or an array of byte values for the data type bytes, got " + j.dump());
      out = std::move(*raw);
      break;
    }
    case K::bool_:
      // Some writers (zarrita, older TensorStore) stored 0 or 1 for a bool
      // array: read as false / true, with one warning per process; never written.
      if (j.is_number_integer() && (j == 0 || j == 1)) {
        static std::atomic<bool> warned{false};
        if (!warned.exchange(true))
          spdlog::warn("zarrcoro: {}: fill_value {} for a bool array read as {} (the spec asks for true or false)",
                       key, j.dump(), j == 1 ? "true" : "false");
        put<std::uint8_t>(out, j == 1 ? 1 : 0);
        break;
      }
      if (!j.is_boolean()) bad(key, "fill_value", "expected true or false for bool, got " + j.dump());
      put<std::uint8_t>(out, j.get<bool>() ? 1 : 0);
      break;
    case K::int8: put(out, parse_integer<std::int8_t>(j, key)); break;
    case K::int16: put(out, parse_integer<std::int16_t>(j, key)); break;
    case K::int32: put(out, parse_integer<std::int32_t>(j, key)); break;
    case K::int64: put(out, parse_integer<std::int64_t>(j, key)); break;
    case K::uint8: put(out, parse_integer<std::uint8_t>(j, key)); break;
    case K::uint16: put(out, parse_integer<std::uint16_t>(j, key)); break;
    case K::uint32: put(out, parse_integer<std::uint32_t>(j, key)); break;
    case K::uint64: put(out, parse_integer<std::uint64_t>(j, key)); break;
    case K::float16:
    case K::float32:
    case K::float64:
      out.resize(dtype.size());
      put_float_bits(out, 0, parse_float_bits(j, dtype.size(), key), dtype.size());
      break;
    case K::complex64:
    case K::complex128: {
      if (!j.is_array() || j.size() != 2)
        bad(key, "fill_value", "expected [real, imaginary] for a complex type, got " + j.dump());
      const std::size_t half = dtype.swap_unit();
      out.resize(dtype.size());
      put_float_bits(out, 0, parse_float_bits(j[0], half, key), half);
      put_float_bits(out, half, parse_float_bits(j[1], half, key), half);
      break;
    }
    case K::bytes: {
      const auto raw = j.is_string() ? detail::base64_decode(j.get<std::string>()) : std::nullopt;
      if (!raw || raw->size() > dtype.size())
        bad(key, "fill_value", "expected base64 of at most " + std::to_string(dtype.size()) +
                                   " bytes for " + dtype.describe() + ", got " + j.dump());
      out.assign(dtype.size(), std::byte{0});
      std::copy(raw->begin(), raw->end(), out.begin());
      break;
    }
    case K::unicode: {
      const auto text = j.is_string() ? detail::utf8_decode(j.get<std::string>()) : std::nullopt;
      if (!text || text->size() > dtype.length())
        bad(key, "fill_value", "expected a string of at most " + std::to_string(dtype.length()) +
                                   " characters for " + dtype.describe() + ", got " + j.dump());
      out.assign(dtype.size(), std::byte{0});
      std::memcpy(out.data(), text->data(), text->size() * 4);  // native UTF-32
      break;
    }
    case K::structured: {
      out.assign(dtype.size(), std::byte{0});
      if (j.is_string()) {  // legacy: the record's bytes
        const auto raw = detail::base64_decode(j.get<std::string>());
        if (!raw || raw->size() != dtype.size())
          bad(key, "fill_value", "expected base64 of " + std::to_string(dtype.size()) + " bytes, got " + j.dump());
        std::copy(raw->begin(), raw->end(), out.begin());
        break;
      }
      if (!j.is_object()) bad(key, "fill_value", "expected an object {\"field\": value, ...} for a struct, got " + j.dump());
      for (const auto& f : dtype.fields()) {
        if (!j.contains(f.name)) bad(key, "fill_value", "no value for struct field '" + f.name + "'");
        const json& v = j[f.name];
        const std::size_t n = f.size() / f.type.size();
        json flat = json::array();
        if (!f.shape.empty() && v.is_array()) {
          std::function<void(const json&)> walk = [&](const json& x) {
            if (x.is_array() && !(f.type.is_complex() && x.size() == 2 && !x[0].is_array())) {
              for (const auto& y : x) walk(y);
            } else {
              flat.push_back(x);
            }
          };
          walk(v);
          if (flat.size() != n)
            bad(key, "fill_value", "field '" + f.name + "' needs " + std::to_string(n) + " values, got " + v.dump());
        } else {
          for (std::size_t i = 0; i < n; ++i) flat.push_back(v);  // one value for every element
        }
        for (std::size_t i = 0; i < n; ++i) {
          const FillValue fv = parse_fill_value(flat[i], f.type, key);
          std::copy(fv.begin(), fv.end(), out.begin() + static_cast<std::ptrdiff_t>(f.offset + i * f.type.size()));
        }
      }
      for (const auto& item : j.items()) {
        const std::string& name = item.key();  // not a structured binding: clang 14 cannot capture those
        if (std::none_of(dtype.fields().begin(), dtype.fields().end(), [&](const StructField& f) { return f.name == name; }))
          bad(key, "fill_value", "'" + name + "' is not a field of the struct");
      }
      break;
    }
  }
  return out;
}

namespace {
json float_to_json(const std::byte* p, std::size_t size) {
  std::uint64_t bits = 0;
  std::memcpy(&bits, p, size);
  double d;
  std::uint64_t canonical_nan;
  if (size == 8) {
    d = std::bit_cast<double>(bits);
    canonical_nan = 0x7ff8000000000000ull;
  } else if (size == 4) {
    d = std::bit_cast<float>(static_cast<std::uint32_t>(bits));
    canonical_nan = 0x7fc00000ull;
  } else {
    d = float16_to_float32(static_cast<std::uint16_t>(bits));
    canonical_nan = 0x7e00ull;
  }
  if (std::isnan(d)) {
    if (bits == canonical_nan) return "NaN";
    static const char* digits = "0123456789abcdef";
    std::string s = "0x";
    for (int i = static_cast<int>(2 * size) - 1; i >= 0; --i) s += digits[(bits >> (4 * i)) & 15];
    return s;
  }
  if (std::isinf(d)) return d > 0 ? "Infinity" : "-Infinity";
  return d;
}
}  // namespace

json fill_value_to_json(const FillValue& fill, DataType dtype) {
  if (dtype.kind() == DataTypeKind::string) return std::string(reinterpret_cast<const char*>(fill.data()), fill.size());
  if (dtype.kind() == DataTypeKind::vlen_bytes) return detail::base64_encode(fill);
  FillValue f = fill;
  if (f.empty()) f.assign(dtype.size(), std::byte{0});
  auto load = [&]<class T>(T) {
    T v;
    std::memcpy(&v, f.data(), sizeof(T));
    return json(v);
  };
  using K = DataTypeKind;
  switch (dtype.kind()) {
    case K::bool_: return f[0] != std::byte{0};
    case K::int8: return load(std::int8_t{});
    case K::int16: return load(std::int16_t{});
    case K::int32: return load(std::int32_t{});
    case K::int64: return load(std::int64_t{});
    case K::uint8: return load(std::uint8_t{});
    case K::uint16: return load(std::uint16_t{});
    case K::uint32: return load(std::uint32_t{});
    case K::uint64: return load(std::uint64_t{});
    case K::float16:
    case K::float32:
    case K::float64: return float_to_json(f.data(), dtype.size());
    case K::bytes: {  // trailing NULs are padding (null_terminated_bytes, NumPy "S")
      std::size_t n = f.size();
      while (n > 0 && f[n - 1] == std::byte{0}) --n;
      return detail::base64_encode(ByteSpan(f.data(), n));
    }
    case K::unicode: {
      std::u32string text(dtype.length(), U'\0');
      std::memcpy(text.data(), f.data(), f.size());
      while (!text.empty() && text.back() == U'\0') text.pop_back();
      auto utf8 = detail::utf8_encode(text);
      if (!utf8) throw InvalidArgument("", "fill_value", "the fill value is not valid Unicode");
      return *utf8;
    }
    case K::structured: {
      json out = json::object();
      for (const auto& fld : dtype.fields()) {
        const std::size_t n = fld.size() / fld.type.size();
        auto one = [&](std::size_t i) {
          return fill_value_to_json(Bytes(f.begin() + static_cast<std::ptrdiff_t>(fld.offset + i * fld.type.size()),
                                          f.begin() + static_cast<std::ptrdiff_t>(fld.offset + (i + 1) * fld.type.size())),
                                    fld.type);
        };
        if (fld.shape.empty()) {
          out[fld.name] = one(0);
        } else {
          json flat = json::array();
          for (std::size_t i = 0; i < n; ++i) flat.push_back(one(i));
          out[fld.name] = flat;
        }
      }
      return out;
    }
    case K::complex64:
    case K::complex128: {
      const std::size_t half = dtype.swap_unit();
      return json::array({float_to_json(f.data(), half), float_to_json(f.data() + half, half)});
    }
    case K::string:
    case K::vlen_bytes: break;  // handled above
  }
  return nullptr;
}

// ---- chunk key encoding ----------------------------------------------------

std::string ChunkKeyEncoding::encode(std::span<const std::uint64_t> coords) const {
  std::string key = kind == Kind::default_ ? "c" : "";
  if (coords.empty()) return kind == Kind::default_ ? key : "0";
  for (std::size_t i = 0; i < coords.size(); ++i) {
    if (i > 0 || kind == Kind::default_) key += separator;
    key += std::to_string(coords[i]);
  }
  return key;
}

json ChunkKeyEncoding::to_json() const {
  return {{"name", kind == Kind::default_ ? "default" : "v2"},
          {"configuration", {{"separator", std::string(1, separator)}}}};
}

ChunkKeyEncoding ChunkKeyEncoding::from_json(const json& given, const std::string& key) {
  const std::string field = "chunk_key_encoding";
  const json j = extension_object(given);
  if (!j.is_object() || !j.contains("name") || !j["name"].is_string())
    bad(key, field, "expected {\"name\": \"default\"|\"v2\", ...}");
  ChunkKeyEncoding e;
  const auto name = j["name"].get<std::string>();
  if (name == "default") {
    e.kind = Kind::default_;
    e.separator = '/';
  } else if (name == "v2") {
    e.kind = Kind::v2;
    e.separator = '.';
  } else {
    throw UnsupportedError(key, field, "unsupported chunk key encoding '" + name + "'");
  }
  if (j.contains("configuration")) {
    const auto& c = j["configuration"];
    if (!c.is_object()) bad(key, field + ".configuration", "expected an object");
    if (c.contains("separator")) {
      const auto& s = c["separator"];
      if (!s.is_string() || (s != "/" && s != "."))
        bad(key, field + ".configuration.separator", "expected \"/\" or \".\", got " + s.dump());
      e.separator = s.get<std::string>()[0];
    }
  }
  return e;
}

// ---- data types ------------------------------------------------------------

json data_type_to_json(DataType dtype) {
  switch (dtype.kind()) {
    case DataTypeKind::bytes:
      return {{"name", "null_terminated_bytes"}, {"configuration", {{"length_bytes", dtype.size()}}}};
    case DataTypeKind::unicode:
      return {{"name", "fixed_length_utf32"}, {"configuration", {{"length_bytes", dtype.size()}}}};
    case DataTypeKind::structured: {
      json fields = json::array();
      for (const auto& f : dtype.fields()) {
        if (!f.shape.empty())
          throw UnsupportedError("", "data_type", "struct field '" + f.name +
                                                      "' is a subarray: Zarr v3 struct fields are scalars (use Zarr v2)");
        fields.push_back({{"name", f.name}, {"data_type", data_type_to_json(f.type)}});
      }
      return {{"name", "struct"}, {"configuration", {{"fields", fields}}}};
    }
    default: return std::string(dtype.name());
  }
}

DataType parse_data_type(const json& j, const std::string& key, const std::string& field) {
  if (j.is_string()) {
    const auto parsed = DataType::from_name(j.get<std::string>());
    if (!parsed) throw UnsupportedError(key, field, "unsupported data type '" + j.get<std::string>() + "'");
    return *parsed;
  }
  if (!j.is_object() || !j.contains("name") || !j["name"].is_string())
    throw UnsupportedError(key, field, "unsupported data type " + j.dump());
  const std::string name = j["name"].get<std::string>();
  const json config = j.value("configuration", json::object());
  if (!config.is_object()) bad(key, field + ".configuration", "expected an object");
  if (const auto simple = DataType::from_name(name)) {  // {"name": "int32"}: the object form of a short-hand name
    if (!config.empty()) bad(key, field + ".configuration", "data type '" + name + "' takes no configuration");
    return *simple;
  }
  const auto length_bytes = [&](std::size_t unit) {
    const auto it = config.find("length_bytes");
    if (it == config.end() || !it->is_number_unsigned() || it->get<std::uint64_t>() == 0 ||
        it->get<std::uint64_t>() % unit != 0 || it->get<std::uint64_t>() > kMaxElementBytes)
      bad(key, field + ".configuration.length_bytes",
          name + ": expected a positive integer" + (unit > 1 ? " divisible by " + std::to_string(unit) : "") +
              " of at most " + std::to_string(kMaxElementBytes) + ", got " +
              (it == config.end() ? "nothing" : it->dump()));
    return it->get<std::size_t>();
  };
  if (name == "null_terminated_bytes") return DataType::fixed_bytes(length_bytes(1));
  if (name == "fixed_length_utf32") return DataType::fixed_unicode(length_bytes(4) / 4);
  if (name == "struct" || name == "structured") {
    const auto it = config.find("fields");
    if (it == config.end() || !it->is_array() || it->empty())
      bad(key, field + ".configuration.fields", "expected a non-empty array of fields");
    std::vector<StructField> fields;
    for (std::size_t i = 0; i < it->size(); ++i) {
      const json& f = (*it)[i];
      const std::string at = field + ".configuration.fields[" + std::to_string(i) + "]";
      StructField sf;
      if (f.is_object() && f.contains("name") && f["name"].is_string() && f.contains("data_type")) {
        sf.name = f["name"].get<std::string>();
        sf.type = parse_data_type(f["data_type"], key, at + ".data_type");
      } else if (f.is_array() && f.size() == 2 && f[0].is_string()) {  // legacy "structured": [name, type]
        sf.name = f[0].get<std::string>();
        sf.type = parse_data_type(f[1], key, at + "[1]");
      } else {
        bad(key, at, "expected {\"name\": ..., \"data_type\": ...}, got " + f.dump());
      }
      fields.push_back(std::move(sf));
    }
    try {
      return DataType::structured(std::move(fields));
    } catch (const InvalidArgument& e) {
      bad(key, field + ".configuration.fields", e.detail());
    }
  }
  throw UnsupportedError(key, field, "unsupported data type \"" + name + "\"");
}

// ---- array metadata --------------------------------------------------------

std::vector<std::uint64_t> ArrayMetadata::grid_shape() const {
  std::vector<std::uint64_t> g(shape.size());
  for (std::size_t i = 0; i < shape.size(); ++i)  // ceil(shape / chunk) without shape + chunk - 1 wrapping
    g[i] = shape[i] / chunk_shape[i] + (shape[i] % chunk_shape[i] != 0);
  return g;
}

void ArrayMetadata::validate(const std::string& key) const {
  if (chunk_shape.size() != shape.size())
    bad(key, "chunk_grid.configuration.chunk_shape",
        "rank " + std::to_string(chunk_shape.size()) + " does not match the rank " +
            std::to_string(shape.size()) + " of shape");
  for (auto c : chunk_shape)
    if (c == 0) bad(key, "chunk_grid.configuration.chunk_shape", "chunk dimensions must be > 0");
  if (data_type.is_variable_length()) {
    if (data_type.kind() == DataTypeKind::string &&
        !detail::valid_utf8({reinterpret_cast<const char*>(fill_value.data()), fill_value.size()}))
      bad(key, "fill_value", "is not valid UTF-8");
  } else if (!fill_value.empty() && fill_value.size() != data_type.size())
    bad(key, "fill_value", "has the wrong size for the data type");
  if (dimension_names && dimension_names->size() != shape.size())
    bad(key, "dimension_names", "length does not match the rank of shape");
  if (!codecs.is_array()) bad(key, "codecs", "expected an array");
  if (zarr_format == 2) {
    validate_v2(key);
    return;
  }
  if (zarr_format != 3) bad(key, "zarr_format", "expected 2 or 3, got " + std::to_string(zarr_format));
  // Parametrized data types must have a v3 form.
  try {
    (void)data_type_to_json(data_type);
  } catch (const Error& e) {
    throw_error(e.code(), key, e.field(), e.detail());
  }
  // One bytes codec cannot store struct fields of different byte orders
  // (shared/cases B01): refuse rather than guess.
  const unsigned declared = data_type.declared_byte_orders();
  if (declared == 3)
    throw UnsupportedError(key, "data_type",
                           "struct fields declare different byte orders (" + data_type.describe() +
                               "); a Zarr v3 array has one bytes codec endian: store it as Zarr v2");
  for (std::size_t i = 0; i < codecs.size(); ++i) {
    const json& c = codecs[i];
    const std::string name = c.is_object() ? c.value("name", "") : c.is_string() ? c.get<std::string>() : "";
    if (name == "zlib" || name == "lz4")
      throw UnsupportedError(key, "codecs[" + std::to_string(i) + "]",
                             "unsupported codec '" + name + "' (a Zarr v2 compressor; in Zarr v3 it is 'numcodecs." +
                                 name + "')");
    if (name == "bytes" && declared != 0 && c.is_object() && c.contains("configuration")) {
      const json endian = c["configuration"].value("endian", json());
      const std::string want = declared == 1 ? "little" : "big";
      if (endian.is_string() && endian != want)
        bad(key, "codecs[" + std::to_string(i) + "].configuration.endian",
            "the struct fields declare " + want + "-endian values (" + data_type.describe() + ") but the bytes codec says " +
                endian.dump());
    }
  }
}

namespace {

// The body of ArrayMetadata::from_json; `field` tracks the member being read
// so that a JSON type error names it.
ArrayMetadata parse_v3_array(const json& j, const std::string& key, std::string& field) {
  if (!j.is_object()) bad(key, "", "expected a JSON object");
  if (!j.contains("zarr_format") || j["zarr_format"] != 3)
    bad(key, "zarr_format", "expected 3");
  if (!j.contains("node_type") || j["node_type"] != "array")
    bad(key, "node_type", "expected \"array\"");
  for (const char* f : {"shape", "data_type", "chunk_grid", "chunk_key_encoding", "fill_value", "codecs"})
    if (!j.contains(f)) bad(key, f, "required field is missing");

  ArrayMetadata m;
  field = "shape";
  m.shape = parse_shape(j["shape"], key, "shape");

  field = "data_type";
  m.data_type = parse_data_type(j["data_type"], key);

  field = "chunk_grid";
  const json grid = extension_object(j["chunk_grid"]);
  if (!grid.is_object() || grid.value("name", "") != "regular") {
    const std::string name = grid.is_object() ? grid.value("name", std::string("?")) : grid.dump();
    throw UnsupportedError(key, "chunk_grid", "unsupported chunk grid '" + name + "'");
  }
  if (!grid.contains("configuration") || !grid["configuration"].contains("chunk_shape"))
    bad(key, "chunk_grid.configuration.chunk_shape", "required field is missing");
  m.chunk_shape = parse_shape(grid["configuration"]["chunk_shape"], key,
                              "chunk_grid.configuration.chunk_shape");

  field = "chunk_key_encoding";
  m.chunk_key_encoding = ChunkKeyEncoding::from_json(j["chunk_key_encoding"], key);
  field = "fill_value";
  m.fill_value = parse_fill_value(j["fill_value"], m.data_type, key);
  field = "codecs";
  m.codecs = j["codecs"];
  if (!m.codecs.is_array() || m.codecs.empty()) bad(key, "codecs", "expected a non-empty array");

  field = "attributes";
  if (j.contains("attributes")) {
    if (!j["attributes"].is_object()) bad(key, "attributes", "expected an object");
    m.attributes = j["attributes"];
  }
  field = "dimension_names";
  if (j.contains("dimension_names") && !j["dimension_names"].is_null()) {
    const auto& d = j["dimension_names"];
    if (!d.is_array()) bad(key, "dimension_names", "expected an array of strings or nulls");
    std::vector<std::optional<std::string>> names;
    for (const auto& n : d) {
      if (n.is_null()) names.emplace_back();
      else if (n.is_string()) names.emplace_back(n.get<std::string>());
      else bad(key, "dimension_names", "expected strings or nulls, got " + n.dump());
    }
    m.dimension_names = std::move(names);
  }
  if (j.contains("storage_transformers") && !j["storage_transformers"].empty())
    throw UnsupportedError(key, "storage_transformers", "storage transformers are not supported");

  static const char* known[] = {"zarr_format", "node_type", "shape", "data_type", "chunk_grid",
                                "chunk_key_encoding", "fill_value", "codecs", "attributes",
                                "dimension_names", "storage_transformers"};
  for (const auto& [name, value] : j.items()) {
    field = name;
    if (std::find(std::begin(known), std::end(known), name) != std::end(known)) continue;
    const bool optional_ext = value.is_object() && value.contains("must_understand") &&
                              value["must_understand"] == false;
    if (!optional_ext)
      throw UnsupportedError(key, name,
                             "unknown field '" + name +
                                 "' must be understood (it is not marked \"must_understand\": false)");
  }
  field = "";
  m.validate(key);
  return m;
}

}  // namespace

ArrayMetadata ArrayMetadata::from_json(const json& j, const std::string& key) {
  std::string field;
  return detail::json_guard(key, field, [&] { return parse_v3_array(j, key, field); });
}

json ArrayMetadata::to_json() const {
  json j = {
      {"zarr_format", 3},
      {"node_type", "array"},
      {"shape", shape},
      {"data_type", data_type_to_json(data_type)},
      {"chunk_grid", {{"name", "regular"}, {"configuration", {{"chunk_shape", chunk_shape}}}}},
      {"chunk_key_encoding", chunk_key_encoding.to_json()},
      {"fill_value", fill_value_to_json(fill_value, data_type)},
      {"codecs", codecs},
      {"attributes", attributes},
  };
  if (dimension_names) {
    json names = json::array();
    for (const auto& n : *dimension_names) names.push_back(n ? json(*n) : json(nullptr));
    j["dimension_names"] = names;
  }
  return j;
}

std::string dump_json(const json& j, bool ascii) {
  check_finite(j, "attributes");
  return j.dump(2, ' ', ascii);
}

json parse_json(std::string_view text, const std::string& key) {
  // Replace bare NaN / Infinity / -Infinity tokens outside strings by
  // sentinel strings, parse strictly, then restore them as numbers.
  // The same pass measures the nesting depth, bounded before the recursive
  // parts of JSON handling (copies, dumps, our own walks) see the document.
  // nlohmann's parser takes a NUL byte for the end of the input: refused
  // here, or whatever follows it would be ignored.
  if (text.find('\0') != std::string_view::npos) bad(key, "", "malformed JSON: a NUL byte in the document");
  std::string fixed;
  bool in_string = false, escaped = false, changed = false;
  std::size_t depth = 0, max_depth = 0;
  fixed.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    const char c = text[i];
    if (in_string) {
      fixed += c;
      ++i;
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
      continue;
    }
    bool matched = false;
    for (std::string_view tok : {"-Infinity", "Infinity", "NaN"}) {
      if (text.substr(i, tok.size()) == tok) {
        fixed += "\"\\u0001zarrcoro-token:";  // JSON escape of kSentinel's first byte
        fixed += tok;
        fixed += '"';
        i += tok.size();
        matched = changed = true;
        break;
      }
    }
    if (matched) continue;
    if (c == '-' && i + 1 < text.size() && text[i + 1] >= '0' && text[i + 1] <= '9') {
      // An integer below -2^63 becomes a double, and one just below rounds
      // to -2^63 itself, which an int64 holds: the range checks of integer
      // fill values would pass it. Such a one is read as the next double down.
      std::size_t end = i + 1;
      while (end < text.size() && text[end] >= '0' && text[end] <= '9') ++end;
      const std::string_view digits = text.substr(i + 1, end - i - 1);
      const bool integral = end == text.size() || (text[end] != '.' && text[end] != 'e' && text[end] != 'E');
      constexpr std::string_view kTwo63 = "9223372036854775808";
      if (integral && digits[0] != '0' &&
          (digits.size() > kTwo63.size() || (digits.size() == kTwo63.size() && digits > kTwo63)) &&
          std::strtod(std::string(text.substr(i, end - i)).c_str(), nullptr) == -0x1p63) {
        fixed += "\"\\u0001zarrcoro-token:below-int64\"";
        i = end;
        changed = true;
        continue;
      }
    }
    if (c == '"') in_string = true;
    else if (c == '[' || c == '{') max_depth = std::max(max_depth, ++depth);
    else if ((c == ']' || c == '}') && depth > 0) --depth;
    fixed += c;
    ++i;
  }
  if (max_depth > kMaxJsonDepth)
    bad(key, "", "JSON nested deeper than " + std::to_string(kMaxJsonDepth) + " levels");
  json j;
  try {
    j = json::parse(changed ? std::string_view(fixed) : text);
  } catch (const json::exception& e) {  // syntax, invalid UTF-8, a number out of range (7E777)
    bad(key, "", std::string("malformed JSON: ") + e.what());
  }
  if (changed) restore_tokens(j);
  return j;
}

}  // namespace zarrcoro
