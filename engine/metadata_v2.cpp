// Zarr v2 array metadata (v2 spec, "Metadata", "Data type encoding", "Fill
// value encoding"): `.zarray` <-> ArrayMetadata + V2Info, the v2 type
// strings, fill values, and the v3-style codec chain a v2 array runs.
//
// Fill values follow what zarr-python 2 reads and writes: numbers, "NaN",
// "Infinity" and "-Infinity" for floats (a bare NaN token is read, never
// written), [re, im] for complex, true/false (or 0/1) for bool, base64 of the
// stored bytes for byte strings and structured types, the string itself for
// unicode; a number given for a fixed-length string type means its decimal
// text (NumPy converts 0 to "0"), but 0 for a "|O" vlen-utf8 or vlen-bytes
// array is zarr-python 2's default and means "" (as zarrs reads it; any other
// number is refused there); null means "no fill value" (missing chunks read
// as zeros here; null is kept when the document is written back).
#include <zarrcoro/metadata.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>

#include <zarrcoro/error.hpp>

#include "codecs/v2.hpp"
#include "engine/metadata_detail.hpp"

namespace zarrcoro {
namespace {

using json = nlohmann::json;

[[noreturn]] void bad(const std::string& key, const std::string& field, const std::string& msg) {
  throw InvalidMetadata(key, field, msg);
}

struct Code {
  std::string_view code;
  DataTypeKind kind;
};
constexpr Code kCodes[] = {
    {"b1", DataTypeKind::bool_},     {"i1", DataTypeKind::int8},     {"i2", DataTypeKind::int16},
    {"i4", DataTypeKind::int32},     {"i8", DataTypeKind::int64},    {"u1", DataTypeKind::uint8},
    {"u2", DataTypeKind::uint16},    {"u4", DataTypeKind::uint32},   {"u8", DataTypeKind::uint64},
    {"f2", DataTypeKind::float16},   {"f4", DataTypeKind::float32},  {"f8", DataTypeKind::float64},
    {"c8", DataTypeKind::complex64}, {"c16", DataTypeKind::complex128},
};

// The kind an object dtype "|O" takes from its first filter (numcodecs' object codec).
DataTypeKind object_kind(const json& filters, const std::string& key) {
  if (!filters.is_array() || filters.empty())
    throw UnsupportedError(key, "filters",
                           "the object dtype \"|O\" needs an object codec as its first filter (vlen-utf8 or "
                           "vlen-bytes); there is none");
  const json& f = filters[0];
  const std::string id = f.is_object() && f.contains("id") && f["id"].is_string() ? f["id"].get<std::string>() : "";
  if (id == "vlen-utf8") return DataTypeKind::string;
  if (id == "vlen-bytes") return DataTypeKind::vlen_bytes;
  throw UnsupportedError(key, "filters[0]",
                         "unsupported object codec '" + (id.empty() ? f.dump() : id) +
                             "' for the object dtype \"|O\" (supported: vlen-utf8, vlen-bytes)");
}

V2DataType parse_typestr(const std::string& s, const std::string& key, const std::string& field,
                         const json* filters) {
  if (s.size() == 2 && s[1] == 'O' && (s[0] == '|' || s[0] == '<' || s[0] == '>' || s[0] == '=')) {
    if (!filters)
      throw UnsupportedError(key, field, "the object dtype \"" + s + "\" cannot be a field of a structured type");
    return {DataType(object_kind(*filters, key)), ByteOrder::unspecified};
  }
  if (s.size() < 3 || (s[0] != '<' && s[0] != '>' && s[0] != '|' && s[0] != '='))
    bad(key, field, "expected a NumPy type string such as \"<f8\" or \"|u1\", got \"" + s + "\"");
  const std::string body = s.substr(1);
  V2DataType out;
  bool found = false;
  for (const auto& c : kCodes)
    if (body == c.code) {
      out.type = DataType(c.kind);
      found = true;
    }
  if (!found && (body[0] == 'S' || body[0] == 'U')) {
    std::size_t n = 0;
    const bool digits = body.size() > 1 && std::all_of(body.begin() + 1, body.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (digits && body.size() < 12) n = std::stoull(body.substr(1));
    if (n == 0) bad(key, field, "\"" + s + "\" needs a positive length");
    try {
      out.type = body[0] == 'S' ? DataType::fixed_bytes(n) : DataType::fixed_unicode(n);
    } catch (const InvalidArgument& e) {
      bad(key, field, "\"" + s + "\": " + e.detail());
    }
    found = true;
  }
  if (!found) throw UnsupportedError(key, field, "unsupported data type '" + s + "'");
  if (out.type.swap_unit() > 1) {
    if (s[0] == '|') bad(key, field, "\"" + s + "\" needs a byte order ('<' or '>'), not '|'");
    out.order = s[0] == '>' ? ByteOrder::big : ByteOrder::little;  // '=' is native: little
  }
  return out;
}

std::string typestr(DataType t, ByteOrder order) {
  std::string code;
  if (t.is_variable_length()) code = "O";
  else if (t.kind() == DataTypeKind::bytes) code = "S" + std::to_string(t.length());
  else if (t.kind() == DataTypeKind::unicode) code = "U" + std::to_string(t.length());
  else
    for (const auto& c : kCodes)
      if (c.kind == t.kind()) code = c.code;
  const char prefix = t.swap_unit() == 1 ? '|' : order == ByteOrder::big ? '>' : '<';
  return prefix + code;
}

// ---- fill values -------------------------------------------------------------

// NumPy's conversion of a number to a string type: its decimal text.
std::string number_text(const json& j, const std::string& key) {
  if (j.is_number_integer()) return j.dump();
  if (j.is_number_float() && std::isfinite(j.get<double>()) && std::floor(j.get<double>()) == j.get<double>())
    return j.dump();  // "0.0", as Python prints it
  bad(key, "fill_value", "expected a string, got " + j.dump());
}

std::optional<FillValue> parse_v2_fill(const json& j, const V2DataType& t, const std::string& key) {
  if (j.is_null()) return std::nullopt;
  const DataType dt = t.type;
  if (dt.kind() == DataTypeKind::string) {  // the text; zarr-python 2's default 0 stands for "" (shared/cases B46)
    if (j.is_number() && j.get<double>() == 0) return FillValue{};
    if (!j.is_string()) bad(key, "fill_value", "expected a string (or 0 for \"\") for \"|O\" vlen-utf8, got " + j.dump());
    const std::string text = j.get<std::string>();
    if (!detail::valid_utf8(text)) bad(key, "fill_value", "is not valid UTF-8");
    return FillValue(reinterpret_cast<const std::byte*>(text.data()), reinterpret_cast<const std::byte*>(text.data()) + text.size());
  }
  if (dt.kind() == DataTypeKind::vlen_bytes) {  // base64 (zarr-python 3); zarr-python 2 writes null, or 0 by default
    if (j.is_number() && j.get<double>() == 0) return FillValue{};  // b"", as missing chunks read there
    auto raw = j.is_string() ? detail::base64_decode(j.get<std::string>()) : std::nullopt;
    if (!raw) bad(key, "fill_value", "expected null or base64 text for \"|O\" vlen-bytes, got " + j.dump());
    return std::move(*raw);
  }
  FillValue out(dt.size(), std::byte{0});
  switch (dt.kind()) {
    case DataTypeKind::bool_:
      if (j.is_boolean()) out[0] = std::byte{j.get<bool>()};
      else if (j.is_number()) out[0] = std::byte{j.get<double>() != 0};
      else bad(key, "fill_value", "expected true, false or a number for bool, got " + j.dump());
      return out;
    case DataTypeKind::bytes: {
      std::optional<Bytes> raw;
      if (j.is_string()) raw = detail::base64_decode(j.get<std::string>());
      else if (j.is_number()) {
        const std::string text = number_text(j, key);
        raw = Bytes(reinterpret_cast<const std::byte*>(text.data()), reinterpret_cast<const std::byte*>(text.data()) + text.size());
      }
      if (!raw) bad(key, "fill_value", "expected base64 text for " + dt.describe() + ", got " + j.dump());
      std::copy_n(raw->begin(), std::min(raw->size(), out.size()), out.begin());  // NumPy truncates
      return out;
    }
    case DataTypeKind::unicode: {
      std::optional<std::u32string> text;
      if (j.is_string()) text = detail::utf8_decode(j.get<std::string>());
      else if (j.is_number()) text = detail::utf8_decode(number_text(j, key));
      if (!text) bad(key, "fill_value", "expected a string for " + dt.describe() + ", got " + j.dump());
      std::memcpy(out.data(), text->data(), std::min(text->size(), dt.length()) * 4);
      return out;
    }
    case DataTypeKind::structured: {
      if (j.is_number() && j.get<double>() == 0) return out;  // legacy writers: 0
      const auto raw = j.is_string() ? detail::base64_decode(j.get<std::string>()) : std::nullopt;
      if (!raw || raw->size() != dt.size())
        bad(key, "fill_value", "expected base64 of the " + std::to_string(dt.size()) + "-byte record " +
                                   dt.describe() + ", got " + j.dump());
      const auto runs = dt.swap_runs(ByteOrder::unspecified);  // stored field orders -> native
      apply_swap_runs(runs, dt.size(), raw->data(), out.data(), 1);
      return out;
    }
    default:
      return parse_fill_value(j, dt, key);  // numbers, "NaN", integral floats for ints, [re, im]
  }
}

json v2_float(const json& v3) {  // v3 writes NaN payloads as hex; v2 knows only "NaN"
  return v3.is_string() && v3.get<std::string>().starts_with("0x") ? json("NaN") : v3;
}

json v2_fill_to_json(const FillValue& fill, const V2Info& info, DataType dt) {
  if (info.fill_value_null) return nullptr;
  if (dt.kind() == DataTypeKind::string) return std::string(reinterpret_cast<const char*>(fill.data()), fill.size());
  if (dt.kind() == DataTypeKind::vlen_bytes)  // empty: null, which zarr-python 2 reads too
    return fill.empty() ? json(nullptr) : json(detail::base64_encode(fill));
  FillValue f = fill;
  if (f.empty()) f.assign(dt.size(), std::byte{0});
  switch (dt.kind()) {
    case DataTypeKind::bytes: {
      std::size_t n = f.size();
      while (n > 0 && f[n - 1] == std::byte{0}) --n;  // as NumPy's bytes scalar
      return detail::base64_encode(ByteSpan(f.data(), n));
    }
    case DataTypeKind::structured: {
      Bytes stored(f.size());
      apply_swap_runs(dt.swap_runs(ByteOrder::unspecified), dt.size(), f.data(), stored.data(), 1);
      return detail::base64_encode(stored);
    }
    case DataTypeKind::float16:
    case DataTypeKind::float32:
    case DataTypeKind::float64: return v2_float(fill_value_to_json(f, dt));
    case DataTypeKind::complex64:
    case DataTypeKind::complex128: {
      json j = fill_value_to_json(f, dt);
      return json::array({v2_float(j[0]), v2_float(j[1])});
    }
    default: return fill_value_to_json(f, dt);  // bool, integers, unicode
  }
}

// ---- codecs ------------------------------------------------------------------

template <class F>
auto prefixed(const std::string& key, const std::string& where, F&& f) {
  try {
    return f();
  } catch (const Error& e) {
    throw_error(e.code(), key, where + (e.field().empty() ? "" : "." + e.field()), e.detail());
  }
}

json chain(const V2Info& info, DataType dt, ByteOrder order, std::size_t rank, const std::string& key) {
  json codecs = json::array();
  if (info.order == 'F' && rank > 1) {
    json axes = json::array();
    for (std::size_t i = rank; i-- > 0;) axes.push_back(i);
    codecs.push_back({{"name", "transpose"}, {"configuration", {{"order", axes}}}});
  }
  // Structured fields read from a v2 dtype carry their own orders; the
  // codec's endian names them when uniform, and covers fields without one.
  if (dt.is_structured() && order == ByteOrder::unspecified) {
    const unsigned declared = dt.declared_byte_orders();
    order = declared == 1 ? ByteOrder::little : declared == 2 ? ByteOrder::big : ByteOrder::unspecified;
  }
  std::size_t first_filter = 0;
  // Compressors see the encoded bytes: item size 1 after an object codec.
  const std::size_t itemsize = dt.is_variable_length() ? 1 : dt.size();
  if (dt.is_variable_length()) {  // the object codec (filters[0], checked by the dtype) is the array -> bytes codec
    codecs.push_back({{"name", dt.kind() == DataTypeKind::string ? "vlen-utf8" : "vlen-bytes"}});
    first_filter = 1;
  } else {
    json bytes{{"name", "bytes"}};
    if (dt.is_structured() ? order != ByteOrder::unspecified : dt.swap_unit() > 1)
      bytes["configuration"] = {{"endian", order == ByteOrder::big ? "big" : "little"}};
    codecs.push_back(bytes);
  }
  if (info.filters.is_array())
    for (std::size_t i = first_filter; i < info.filters.size(); ++i)
      codecs.push_back(prefixed(key, "filters[" + std::to_string(i) + "]",
                                [&] { return codecs::v2_to_v3_codec(info.filters[i], itemsize); }));
  if (!info.compressor.is_null())
    codecs.push_back(prefixed(key, "compressor", [&] { return codecs::v2_to_v3_codec(info.compressor, itemsize); }));
  return codecs;
}

}  // namespace

// ---- data types ----------------------------------------------------------------

V2DataType parse_v2_dtype(const json& j, const std::string& key, const std::string& field, const json& filters) {
  if (j.is_string()) return parse_typestr(j.get<std::string>(), key, field, &filters);
  if (!j.is_array() || j.empty())
    bad(key, field, "expected a type string or a list of [name, type(, shape)] fields, got " + j.dump());
  std::vector<StructField> fields;
  for (std::size_t i = 0; i < j.size(); ++i) {
    const json& f = j[i];
    const std::string at = field + "[" + std::to_string(i) + "]";
    if (!f.is_array() || f.size() < 2 || f.size() > 3 || !f[0].is_string())
      bad(key, at, "expected [name, type] or [name, type, shape], got " + f.dump());
    StructField sf;
    sf.name = f[0].get<std::string>();
    if (f[1].is_string()) {  // an object field has no object codec of its own
      const std::string ts = f[1].get<std::string>();
      if (ts.size() == 2 && ts[1] == 'O') (void)parse_typestr(ts, key, at + "[1]", nullptr);
    }
    const V2DataType t = parse_v2_dtype(f[1], key, at + "[1]");
    sf.type = t.type;
    sf.order = t.order;
    if (f.size() == 3) sf.shape = detail::parse_shape(f[2], key, at + "[2]");
    fields.push_back(std::move(sf));
  }
  try {
    return {DataType::structured(std::move(fields)), ByteOrder::unspecified};
  } catch (const InvalidArgument& e) {
    bad(key, field, e.detail());
  }
}

json v2_dtype_to_json(DataType dtype, ByteOrder order) {
  if (!dtype.is_structured()) return typestr(dtype, order);
  json fields = json::array();
  for (const auto& f : dtype.fields()) {
    json entry{f.name, v2_dtype_to_json(f.type, f.order != ByteOrder::unspecified ? f.order : order)};
    if (!f.shape.empty()) entry.push_back(f.shape);
    fields.push_back(entry);
  }
  return fields;
}

// ---- array metadata ------------------------------------------------------------

namespace {

// The body of ArrayMetadata::from_v2_json; `field` tracks the member being
// read so that a JSON type error names it.
ArrayMetadata parse_v2_array(const json& j, const json& zattrs, const std::string& key, std::string& field) {
  if (!j.is_object()) bad(key, "", "expected a JSON object");
  if (!j.contains("zarr_format") || j["zarr_format"] != 2) bad(key, "zarr_format", "expected 2");
  for (const char* f : {"shape", "chunks", "dtype", "compressor", "fill_value", "order"})
    if (!j.contains(f)) bad(key, f, "required member is missing");

  ArrayMetadata m;
  m.zarr_format = 2;
  m.shape = detail::parse_shape(j["shape"], key, "shape");
  m.chunk_shape = detail::parse_shape(j["chunks"], key, "chunks");
  if (m.chunk_shape.size() != m.shape.size())
    bad(key, "chunks", "rank " + std::to_string(m.chunk_shape.size()) + " does not match the rank " +
                           std::to_string(m.shape.size()) + " of shape");
  for (auto c : m.chunk_shape)
    if (c == 0) bad(key, "chunks", "chunk dimensions must be > 0");

  V2Info info;
  field = "filters";
  info.filters = j.value("filters", json());
  field = "dtype";
  info.dtype = j["dtype"];
  const V2DataType t = parse_v2_dtype(info.dtype, key, "dtype", info.filters);
  m.data_type = t.type;

  field = "order";
  const json& order = j["order"];
  if (order != "C" && order != "F") bad(key, "order", "expected \"C\" or \"F\", got " + order.dump());
  info.order = order.get<std::string>()[0];

  m.chunk_key_encoding = {ChunkKeyEncoding::Kind::v2, '.'};
  if (const auto sep = j.find("dimension_separator"); sep != j.end() && !sep->is_null()) {
    if (*sep != "." && *sep != "/") bad(key, "dimension_separator", "expected \".\" or \"/\", got " + sep->dump());
    m.chunk_key_encoding.separator = sep->get<std::string>()[0];
  }

  field = "compressor";
  info.compressor = j["compressor"];
  if (!info.compressor.is_null() && !info.compressor.is_object())
    bad(key, "compressor", "expected null or a codec object {\"id\": ...}, got " + info.compressor.dump());
  if (!info.filters.is_null() && !info.filters.is_array())
    bad(key, "filters", "expected null or a list of codec objects, got " + info.filters.dump());

  field = "fill_value";
  const auto fill = parse_v2_fill(j["fill_value"], t, key);
  info.fill_value_null = !fill;
  if (fill) m.fill_value = *fill;

  if (!zattrs.is_null()) {
    const std::string attrs_key = key.size() >= 7 ? key.substr(0, key.size() - 7) + ".zattrs" : ".zattrs";
    if (!zattrs.is_object()) bad(attrs_key, "", "expected a JSON object of attributes");
    m.attributes = zattrs;
  }
  field = "compressor";
  m.codecs = chain(info, t.type, t.order, m.shape.size(), key);
  m.v2 = std::move(info);
  field = "";
  m.validate(key);
  return m;
}

}  // namespace

ArrayMetadata ArrayMetadata::from_v2_json(const json& j, const json& zattrs, const std::string& key) {
  std::string field;
  return detail::json_guard(key, field, [&] { return parse_v2_array(j, zattrs, key, field); });
}

void ArrayMetadata::validate_v2(const std::string& key) const {
  if (chunk_key_encoding.kind != ChunkKeyEncoding::Kind::v2)
    bad(key, "dimension_separator",
        "a Zarr v2 array needs the v2 chunk key encoding (ChunkKeyEncoding::Kind::v2, '.' or '/')");
  if (dimension_names)
    bad(key, "dimension_names", "Zarr v2 has no dimension names (xarray keeps them in the attribute _ARRAY_DIMENSIONS)");
  if (!v2) {
    (void)v2_info(key);  // the codec chain must have a v2 form
    return;
  }
  if (v2->order != 'C' && v2->order != 'F') bad(key, "order", "expected 'C' or 'F'");
  const V2DataType t = parse_v2_dtype(v2->dtype, key, "dtype", v2->filters);
  if (!(t.type == data_type))
    bad(key, "dtype", v2->dtype.dump() + " does not describe the data type " + data_type.describe());
  if (!v2->compressor.is_null() && !v2->compressor.is_object()) bad(key, "compressor", "expected null or an object");
  if (!v2->filters.is_null() && !v2->filters.is_array()) bad(key, "filters", "expected null or a list");
}

V2Info ArrayMetadata::v2_info(const std::string& key) const {
  if (v2) return *v2;
  V2Info info;
  ByteOrder order = ByteOrder::unspecified;
  std::vector<json> b2b;
  json object_codec;  // vlen-utf8 / vlen-bytes: the first v2 filter
  bool seen_bytes = false;
  for (std::size_t i = 0; i < codecs.size(); ++i) {
    const json& c = codecs[i];
    const std::string at = "codecs[" + std::to_string(i) + "]";
    const std::string name = c.is_object() ? c.value("name", "") : c.is_string() ? c.get<std::string>() : "";
    const json config = c.is_object() ? c.value("configuration", json::object()) : json::object();
    if (name == "transpose" && !seen_bytes) {
      const json axes = config.value("order", json());
      json identity = json::array(), reversed = json::array();
      for (std::size_t d = 0; d < rank(); ++d) {
        identity.push_back(d);
        reversed.push_back(rank() - 1 - d);
      }
      if (i != 0 || !(axes == identity || axes == "C" || axes == reversed || axes == "F"))
        throw UnsupportedError(key, at, "transpose order " + axes.dump() + " has no Zarr v2 form (only C or F order)");
      info.order = axes == identity || axes == "C" ? 'C' : 'F';
    } else if ((name == "vlen-utf8" || name == "vlen-bytes") && !seen_bytes) {
      seen_bytes = true;
      object_codec = json{{"id", name}};
    } else if (name == "bytes" && !seen_bytes) {
      seen_bytes = true;
      const json endian = config.is_object() ? config.value("endian", json()) : json();
      order = endian == "big" ? ByteOrder::big : endian == "little" ? ByteOrder::little : ByteOrder::unspecified;
    } else if (seen_bytes) {
      b2b.push_back(prefixed(key, at, [&] { return codecs::v3_to_v2_codec(c); }));
    } else {
      throw UnsupportedError(key, at, "codec '" + name + "' has no Zarr v2 form");
    }
  }
  if (!seen_bytes) throw UnsupportedError(key, "codecs", "a Zarr v2 array needs the bytes codec (or vlen-utf8 / vlen-bytes)");
  info.dtype = v2_dtype_to_json(data_type, order);
  if (!b2b.empty()) {
    info.compressor = b2b.back();
    b2b.pop_back();
  }
  if (!object_codec.is_null()) b2b.insert(b2b.begin(), object_codec);
  if (!b2b.empty()) info.filters = json(b2b);
  return info;
}

json ArrayMetadata::v2_codecs(const std::string& key) const {
  const V2Info info = v2_info(key);
  const V2DataType t = parse_v2_dtype(info.dtype, key, "dtype", info.filters);
  ByteOrder order = t.order;
  if (!v2 && data_type.is_structured())  // derived: fields without an order use the bytes codec's
    for (const auto& c : codecs)
      if (c.is_object() && c.value("name", "") == "bytes") {
        const json endian = c.value("configuration", json::object()).value("endian", json());
        order = endian == "big" ? ByteOrder::big : endian == "little" ? ByteOrder::little : order;
      }
  return chain(info, data_type, order, rank(), key);
}

namespace {
// A codec object as written: members holding a default that strict readers
// refuse are left out (zstd `checksum: false`; shared/cases B25).
json written_codec(json c) {
  if (c.is_object() && c.value("id", "") == "zstd" && c.contains("checksum") && c["checksum"] == false)
    c.erase("checksum");
  return c;
}
}  // namespace

json ArrayMetadata::to_v2_json(const std::string& key) const {
  V2Info info = v2_info(key);
  info.compressor = written_codec(info.compressor);
  if (info.filters.is_array())
    for (auto& f : info.filters) f = written_codec(f);
  json j{{"zarr_format", 2},
         {"shape", shape},
         {"chunks", chunk_shape},
         {"dtype", info.dtype},
         {"compressor", info.compressor},
         {"fill_value", v2_fill_to_json(fill_value, info, data_type)},
         {"order", std::string(1, info.order)},
         {"filters", info.filters}};
  if (chunk_key_encoding.separator != '.') j["dimension_separator"] = std::string(1, chunk_key_encoding.separator);
  return j;
}

}  // namespace zarrcoro
