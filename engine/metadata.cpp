// Zarr v3 array metadata: parsing, validation and serialization
// (Zarr v3 core spec, "Array metadata", "Chunk key encoding", "Fill value").
#include <zarrcoro/metadata.hpp>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include <zarrcoro/error.hpp>

namespace zarrcoro {
namespace {

using json = nlohmann::json;

[[noreturn]] void bad(const std::string& key, const std::string& field, const std::string& msg) {
  throw InvalidMetadata(key, field, msg);
}

std::vector<std::uint64_t> parse_shape(const json& j, const std::string& key,
                                       const std::string& field) {
  if (!j.is_array()) bad(key, field, "expected an array of non-negative integers");
  std::vector<std::uint64_t> out;
  for (const auto& v : j) {
    if (!v.is_number_integer() || (v.is_number_integer() && !v.is_number_unsigned() &&
                                   v.get<std::int64_t>() < 0))
      bad(key, field, "expected an array of non-negative integers, got " + j.dump());
    out.push_back(v.get<std::uint64_t>());
  }
  return out;
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
    return float32_to_float16(static_cast<float>(d));
  };
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
    if (d < static_cast<double>(std::numeric_limits<T>::min()) ||
        d > static_cast<double>(std::numeric_limits<T>::max()))
      range_error();
    return static_cast<T>(d);
  }
  bad(key, "fill_value", "expected an integer, got " + std::string(j.is_null() ? "null" : j.dump()));
}

// Walks a parsed document and turns the sentinels left by parse_json back
// into non-finite numbers.
constexpr std::string_view kSentinel = "\x01zarrcoro-nonfinite:";

void restore_nonfinite(json& j) {
  if (j.is_string()) {
    const auto& s = j.get_ref<const std::string&>();
    if (s.starts_with(kSentinel)) {
      const auto tok = s.substr(kSentinel.size());
      j = tok == "NaN"        ? std::numeric_limits<double>::quiet_NaN()
          : tok == "Infinity" ? std::numeric_limits<double>::infinity()
                              : -std::numeric_limits<double>::infinity();
    }
  } else if (j.is_structured()) {
    for (auto& v : j) restore_nonfinite(v);
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
    case K::bool_:
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
    case K::complex64:
    case K::complex128: {
      const std::size_t half = dtype.swap_unit();
      return json::array({float_to_json(f.data(), half), float_to_json(f.data() + half, half)});
    }
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

ChunkKeyEncoding ChunkKeyEncoding::from_json(const json& j, const std::string& key) {
  const std::string field = "chunk_key_encoding";
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

// ---- array metadata --------------------------------------------------------

std::vector<std::uint64_t> ArrayMetadata::grid_shape() const {
  std::vector<std::uint64_t> g(shape.size());
  for (std::size_t i = 0; i < shape.size(); ++i)
    g[i] = (shape[i] + chunk_shape[i] - 1) / chunk_shape[i];
  return g;
}

void ArrayMetadata::validate(const std::string& key) const {
  if (chunk_shape.size() != shape.size())
    bad(key, "chunk_grid.configuration.chunk_shape",
        "rank " + std::to_string(chunk_shape.size()) + " does not match the rank " +
            std::to_string(shape.size()) + " of shape");
  for (auto c : chunk_shape)
    if (c == 0) bad(key, "chunk_grid.configuration.chunk_shape", "chunk dimensions must be > 0");
  if (!fill_value.empty() && fill_value.size() != data_type.size())
    bad(key, "fill_value", "has the wrong size for the data type");
  if (dimension_names && dimension_names->size() != shape.size())
    bad(key, "dimension_names", "length does not match the rank of shape");
  if (!codecs.is_array()) bad(key, "codecs", "expected an array");
}

ArrayMetadata ArrayMetadata::from_json(const json& j, const std::string& key) {
  if (!j.is_object()) bad(key, "", "expected a JSON object");
  if (!j.contains("zarr_format") || j["zarr_format"] != 3)
    bad(key, "zarr_format", "expected 3");
  if (!j.contains("node_type") || j["node_type"] != "array")
    bad(key, "node_type", "expected \"array\"");
  for (const char* f : {"shape", "data_type", "chunk_grid", "chunk_key_encoding", "fill_value", "codecs"})
    if (!j.contains(f)) bad(key, f, "required field is missing");

  ArrayMetadata m;
  m.shape = parse_shape(j["shape"], key, "shape");

  const auto& dt = j["data_type"];
  if (!dt.is_string()) {
    const std::string name = dt.is_object() && dt.contains("name") ? dt["name"].dump() : dt.dump();
    throw UnsupportedError(key, "data_type", "unsupported data type " + name);
  }
  const auto parsed = DataType::from_name(dt.get<std::string>());
  if (!parsed)
    throw UnsupportedError(key, "data_type", "unsupported data type '" + dt.get<std::string>() + "'");
  m.data_type = *parsed;

  const auto& grid = j["chunk_grid"];
  if (!grid.is_object() || grid.value("name", "") != "regular") {
    const std::string name = grid.is_object() ? grid.value("name", std::string("?")) : grid.dump();
    throw UnsupportedError(key, "chunk_grid", "unsupported chunk grid '" + name + "'");
  }
  if (!grid.contains("configuration") || !grid["configuration"].contains("chunk_shape"))
    bad(key, "chunk_grid.configuration.chunk_shape", "required field is missing");
  m.chunk_shape = parse_shape(grid["configuration"]["chunk_shape"], key,
                              "chunk_grid.configuration.chunk_shape");

  m.chunk_key_encoding = ChunkKeyEncoding::from_json(j["chunk_key_encoding"], key);
  m.fill_value = parse_fill_value(j["fill_value"], m.data_type, key);
  m.codecs = j["codecs"];
  if (!m.codecs.is_array() || m.codecs.empty()) bad(key, "codecs", "expected a non-empty array");

  if (j.contains("attributes")) {
    if (!j["attributes"].is_object()) bad(key, "attributes", "expected an object");
    m.attributes = j["attributes"];
  }
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
    if (std::find(std::begin(known), std::end(known), name) != std::end(known)) continue;
    const bool optional_ext = value.is_object() && value.contains("must_understand") &&
                              value["must_understand"] == false;
    if (!optional_ext)
      throw UnsupportedError(key, name,
                             "unknown field '" + name +
                                 "' must be understood (it is not marked \"must_understand\": false)");
  }
  m.validate(key);
  return m;
}

json ArrayMetadata::to_json() const {
  json j = {
      {"zarr_format", 3},
      {"node_type", "array"},
      {"shape", shape},
      {"data_type", std::string(data_type.name())},
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

std::string dump_json(const json& j) {
  check_finite(j, "attributes");
  return j.dump(2);
}

json parse_json(std::string_view text, const std::string& key) {
  // Replace bare NaN / Infinity / -Infinity tokens outside strings by
  // sentinel strings, parse strictly, then restore them as numbers.
  std::string fixed;
  bool in_string = false, escaped = false, changed = false;
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
        fixed += "\"\\u0001zarrcoro-nonfinite:";  // JSON escape of kSentinel's first byte
        fixed += tok;
        fixed += '"';
        i += tok.size();
        matched = changed = true;
        break;
      }
    }
    if (matched) continue;
    if (c == '"') in_string = true;
    fixed += c;
    ++i;
  }
  json j;
  try {
    j = json::parse(changed ? std::string_view(fixed) : text);
  } catch (const json::parse_error& e) {
    bad(key, "", std::string("malformed JSON: ") + e.what());
  }
  if (changed) restore_nonfinite(j);
  return j;
}

}  // namespace zarrcoro
