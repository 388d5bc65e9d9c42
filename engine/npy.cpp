// NumPy .npy files (NEP 1): the header (its Python literal, parsed and
// written), the DataType <-> descr mapping and whole files. NpyReader and
// NpyWriter are in npy_stream.cpp. See zarrcoro/npy.hpp for the contract.
#include <zarrcoro/npy.hpp>

#include <algorithm>
#include <array>
#include <bit>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <limits>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include <zarrcoro/error.hpp>

#include "core/text.hpp"
#include "engine/npy_detail.hpp"

namespace zarrcoro {
namespace npy_detail {
namespace {

static_assert(std::endian::native == std::endian::little, "zarrcoro supports little-endian hosts only");

using nlohmann::json;
namespace fs = std::filesystem;
using detail::append_utf8;
using detail::invalid_utf8_at;
using detail::next_utf8;

constexpr std::string_view kMagic = "\x93NUMPY";
constexpr std::size_t kAlign = 64;
constexpr std::size_t kGrowthDigits = 21;  // NumPy's spare header room for a growing first axis
constexpr std::size_t kMaxElementBytes = std::size_t{1} << 31;  // DataType's limit

[[noreturn]] void unsupported(const std::string& field, const std::string& msg) {
  throw UnsupportedError("", field, msg);
}

// ---- text --------------------------------------------------------------------

// `s` as printable ASCII for an error message: other bytes as \xNN, at most
// `max` input bytes (then "...").
std::string printable(std::string_view s, std::size_t max = 60) {
  std::string out;
  for (std::size_t i = 0; i < s.size() && i < max; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out += static_cast<char>(c);
    } else {
      static constexpr char kHex[] = "0123456789abcdef";
      out += c == '\\' ? std::string("\\\\") : std::string{'\\', 'x', kHex[c >> 4], kHex[c & 15]};
    }
  }
  if (s.size() > max) out += "...";
  return out;
}

std::string show(const json& j) { return printable(j.dump(-1, ' ', false, json::error_handler_t::replace)); }

std::string latin1_to_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) append_utf8(out, static_cast<unsigned char>(c));
  return out;
}

// A Python string literal for `s` (UTF-8), quoted and escaped as repr() does
// for characters up to U+00FF; characters beyond go as they are.
std::string py_str(std::string_view s) {
  const char q = s.find('\'') != std::string_view::npos && s.find('"') == std::string_view::npos ? '"' : '\'';
  std::string out(1, q);
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t at = i;
    const auto cp = next_utf8(s, i);
    if (!cp) unsupported("descr", "field name '" + printable(s) + "' is not valid UTF-8");
    if (*cp == '\\' || *cp == static_cast<std::uint32_t>(q)) {
      out += '\\';
      out += static_cast<char>(*cp);
    } else if (*cp == '\t') {
      out += "\\t";
    } else if (*cp == '\n') {
      out += "\\n";
    } else if (*cp == '\r') {
      out += "\\r";
    } else if (*cp < 0x20 || (*cp >= 0x7f && *cp <= 0xa0) || *cp == 0xad) {  // not printable
      static constexpr char kHex[] = "0123456789abcdef";
      out += {'\\', 'x', kHex[*cp >> 4], kHex[*cp & 15]};
    } else {
      out.append(s.substr(at, i - at));
    }
  }
  return out + q;
}

}  // namespace

// Python's repr of a tuple of integers: "()", "(3,)", "(2, 3)".
std::string py_tuple(std::span<const std::uint64_t> v) {
  std::string s = "(";
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + (v.size() == 1 ? ",)" : ")");
}

namespace {

// ---- the header literal ----------------------------------------------------------

// The header is a Python literal; parse the subset NumPy writes (dicts,
// tuples/lists, strings, integers, True/False/None) into JSON values. The
// text is valid UTF-8 (checked or converted before), and every string value
// decodes to valid UTF-8, so the values can be dumped safely.
class Literal {
 public:
  Literal(std::string_view text, const std::string& file) : s_(text), file_(file) {}

  json parse() {
    json v = value(0);
    skip_ws();
    if (i_ != s_.size()) error("unexpected text after the value");
    return v;
  }

 private:
  [[noreturn]] void error(const std::string& what) const {
    const std::size_t from = i_ > 20 ? i_ - 20 : 0;
    fail(file_, "header",
         what + " at offset " + std::to_string(i_) + " of the header, near '" + printable(s_.substr(from), 50) + "'");
  }
  void skip_ws() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
  }
  bool at(char c) {
    skip_ws();
    return i_ < s_.size() && s_[i_] == c;
  }
  bool eat(char c) { return at(c) && (++i_, true); }
  json value(std::size_t depth) {
    skip_ws();
    if (i_ == s_.size()) error("unexpected end");
    const char c = s_[i_];
    if (c == '{' || c == '(' || c == '[') {
      // Bounded: a hostile header must not overflow the stack.
      if (depth >= kNpyMaxNesting) error("nested deeper than " + std::to_string(kNpyMaxNesting) + " levels");
      if (c == '{') return dict(depth + 1);
      return sequence(c == '(' ? ')' : ']', depth + 1);
    }
    if (c == '\'' || c == '"') return string();
    if (c == '-' || std::isdigit(static_cast<unsigned char>(c))) return integer();
    for (auto [word, v] : {std::pair<std::string_view, json>{"True", true}, {"False", false}, {"None", nullptr}})
      if (s_.substr(i_, word.size()) == word) return i_ += word.size(), v;
    error("unexpected character");
  }
  json dict(std::size_t depth) {
    ++i_;
    json out = json::object();
    while (!eat('}')) {
      const json key = value(depth);
      if (!key.is_string()) error("dictionary keys must be strings");
      if (!eat(':')) error("expected ':'");
      if (out.contains(key.get<std::string>())) error("duplicate key '" + printable(key.get<std::string>()) + "'");
      out[key.get<std::string>()] = value(depth);
      if (!eat(',') && !at('}')) error("expected ',' or '}'");
    }
    return out;
  }
  json sequence(char close, std::size_t depth) {
    ++i_;
    json out = json::array();
    while (!eat(close)) {
      out.push_back(value(depth));
      if (!eat(',') && !at(close)) error(std::string("expected ',' or '") + close + "'");
    }
    return out;
  }
  // `digits` hex digits after an escape; their value.
  std::uint32_t hex_escape(std::size_t digits) {
    std::uint32_t v = 0;
    const auto [p, ec] = std::from_chars(s_.data() + i_, s_.data() + std::min(s_.size(), i_ + digits), v, 16);
    if (ec != std::errc() || p != s_.data() + i_ + digits) error("bad \\x, \\u or \\U escape");
    i_ += digits;
    return v;
  }
  json string() {
    const char quote = s_[i_++];
    std::string out;
    for (;;) {
      if (i_ == s_.size()) error("unterminated string");
      const char c = s_[i_];
      if (c == quote) break;
      if (c == '\n' || c == '\r' || c == '\0') error("control character in a string");
      if (c != '\\') {
        out += c;
        ++i_;
        continue;
      }
      if (++i_ == s_.size()) error("unterminated string");
      const char e = s_[i_++];
      std::uint32_t cp;
      switch (e) {
        case 'x': cp = hex_escape(2); break;
        case 'u': cp = hex_escape(4); break;
        case 'U': cp = hex_escape(8); break;
        case 'n': cp = '\n'; break;
        case 't': cp = '\t'; break;
        case 'r': cp = '\r'; break;
        case 'a': cp = '\a'; break;
        case 'b': cp = '\b'; break;
        case 'f': cp = '\f'; break;
        case 'v': cp = '\v'; break;
        case '\\': case '\'': case '"': cp = static_cast<unsigned char>(e); break;
        default:
          if (e >= '0' && e <= '7') {  // octal, up to 3 digits
            cp = static_cast<std::uint32_t>(e - '0');
            for (int k = 0; k < 2 && i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '7'; ++k)
              cp = cp * 8 + static_cast<std::uint32_t>(s_[i_++] - '0');
            break;
          }
          if (e == '\n' || e == 'N') error("unsupported escape in a string");
          out += '\\';  // Python keeps unknown escapes as they are
          --i_;
          continue;
      }
      if (cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) error("escape is not a Unicode scalar value");
      append_utf8(out, cp);
    }
    ++i_;
    return out;
  }
  json integer() {
    const bool neg = s_[i_] == '-';
    const std::size_t begin = i_ + neg;
    std::uint64_t v = 0;
    auto [p, ec] = std::from_chars(s_.data() + begin, s_.data() + s_.size(), v);
    if (ec != std::errc() || p == s_.data() + begin) error("bad or too large integer");
    i_ = static_cast<std::size_t>(p - s_.data());
    if (i_ < s_.size() && s_[i_] == 'L') ++i_;  // Python 2 long suffix
    if (!neg) return v;
    if (v > std::uint64_t{1} << 63) error("integer out of range");
    return static_cast<std::int64_t>(0 - v);
  }

  std::string_view s_;
  const std::string& file_;
  std::size_t i_ = 0;
};

// ---- descr -> DataType --------------------------------------------------------------

struct Code {
  std::string_view code;
  DataTypeKind kind;
};
constexpr std::array<Code, 14> kCodes{{
    {"b1", DataTypeKind::bool_},     {"i1", DataTypeKind::int8},     {"i2", DataTypeKind::int16},
    {"i4", DataTypeKind::int32},     {"i8", DataTypeKind::int64},    {"u1", DataTypeKind::uint8},
    {"u2", DataTypeKind::uint16},    {"u4", DataTypeKind::uint32},   {"u8", DataTypeKind::uint64},
    {"f2", DataTypeKind::float16},   {"f4", DataTypeKind::float32},  {"f8", DataTypeKind::float64},
    {"c8", DataTypeKind::complex64}, {"c16", DataTypeKind::complex128},
}};

// Runs `f`, turning DataType's InvalidArgument into the file's "descr" error.
template <class F>
auto as_descr(const std::string& file, F&& f) {
  try {
    return f();
  } catch (const InvalidArgument& e) {
    fail(file, "descr", e.detail());
  }
}

Descr parse_typestr(const std::string& text, const std::string& file) {
  std::string_view s = text;
  char mark = '=';
  if (!s.empty() && std::string_view("<>|=").find(s.front()) != std::string_view::npos)
    mark = s.front(), s.remove_prefix(1);
  const ByteOrder order = mark == '>' ? ByteOrder::big : mark == '<' ? ByteOrder::little : ByteOrder::unspecified;
  for (const auto& c : kCodes)
    if (s == c.code) return {DataType(c.kind), order};
  const std::string quoted = "'" + printable(text) + "'";
  if (!s.empty() && (s.front() == 'S' || s.front() == 'U')) {
    std::uint64_t n = 0;
    const auto [p, ec] = std::from_chars(s.data() + 1, s.data() + s.size(), n);
    if (s.size() == 1 || ec != std::errc() || p != s.data() + s.size() || n == 0 || n >= kMaxElementBytes)
      fail(file, "descr", "string dtype " + quoted + " needs a length of 1 to 2^31-1");
    return as_descr(file, [&] {
      return Descr{s.front() == 'S' ? DataType::fixed_bytes(n) : DataType::fixed_unicode(n), order};
    });
  }
  if (!s.empty() && s.front() == 'O')
    fail(file, "descr", "object dtype " + quoted + " (pickled Python objects) is not supported");
  if (!s.empty() && (s.front() == 'M' || s.front() == 'm'))
    fail(file, "descr", "datetime/timedelta dtype " + quoted + " is not supported");
  if (!s.empty() && s.front() == 'V')
    fail(file, "descr", "void dtype " + quoted + " (raw bytes, or padding of an aligned or offset struct) is not supported");
  fail(file, "descr", "unsupported data type " + quoted);
}

std::vector<std::uint64_t> parse_dims(const json& s, const std::string& file, const std::string& field,
                                      const std::string& what) {
  if (!s.is_array()) fail(file, field, what + ": expected a tuple, got " + show(s));
  if (s.size() > kNpyMaxDims)
    fail(file, field, what + ": " + std::to_string(s.size()) + " dimensions, at most " +
                          std::to_string(kNpyMaxDims) + " are supported");
  std::vector<std::uint64_t> shape;
  for (const auto& d : s) {
    if (!d.is_number_unsigned()) fail(file, field, what + ": expected non-negative integers, got " + show(s));
    shape.push_back(d.get<std::uint64_t>());
  }
  return shape;
}

Descr parse_descr(const json& d, const std::string& file, std::size_t depth) {
  if (d.is_string()) return parse_typestr(d.get<std::string>(), file);
  if (!d.is_array()) fail(file, "descr", "expected a type string or a list of fields, got " + show(d));
  if (depth >= kNpyMaxStructDepth)
    fail(file, "descr", "structs nested deeper than " + std::to_string(kNpyMaxStructDepth) + " levels");
  if (d.empty()) fail(file, "descr", "a structured dtype needs at least one field");
  std::vector<StructField> fields;
  for (std::size_t i = 0; i < d.size(); ++i) {
    const json& f = d[i];
    const std::string at = "field " + std::to_string(i);
    if (!f.is_array() || f.size() < 2 || f.size() > 3)
      fail(file, "descr", at + ": expected (name, type) or (name, type, shape), got " + show(f));
    if (f[0].is_array()) fail(file, "descr", at + ": fields with titles are not supported");
    if (!f[0].is_string()) fail(file, "descr", at + ": the name must be a string, got " + show(f[0]));
    StructField sf;
    sf.name = f[0].get<std::string>();
    const Descr t = parse_descr(f[1], file, depth + 1);
    sf.type = t.type;
    sf.order = t.type.is_structured() ? ByteOrder::unspecified : t.order;
    if (f.size() == 3) {
      const std::string what = at + " ('" + printable(sf.name) + "') shape";
      if (f[2].is_number_unsigned()) sf.shape = {f[2].get<std::uint64_t>()};  // NumPy accepts an int
      else sf.shape = parse_dims(f[2], file, "descr", what);
      // Checked here: the element count must not wrap before DataType sees it.
      std::uint64_t n = 1;
      for (auto dim : sf.shape) {
        if (dim == 0 || dim > kMaxElementBytes / n || n * dim >= kMaxElementBytes)
          fail(file, "descr", what + " " + show(f[2]) + " must have 1 to 2^31-1 elements");
        n *= dim;
      }
    }
    fields.push_back(std::move(sf));
  }
  return {as_descr(file, [&] { return DataType::structured(std::move(fields)); }), ByteOrder::unspecified};
}

// `t` with no declared byte orders (its data is native now).
DataType without_orders(DataType t) {
  if (!t.is_structured()) return t;
  std::vector<StructField> fields;
  for (const auto& f : t.fields()) {
    StructField g;
    g.name = f.name;
    g.type = without_orders(f.type);
    g.shape = f.shape;
    fields.push_back(std::move(g));
  }
  return DataType::structured(std::move(fields));
}

// ---- DataType -> descr ---------------------------------------------------------------

void put_descr(std::string& out, DataType t, std::size_t depth, bool quoted) {
  const auto q = quoted ? "'" : "";
  switch (t.kind()) {
    case DataTypeKind::bytes: out += q + ("|S" + std::to_string(t.length())) + q; return;
    case DataTypeKind::unicode: out += q + ("<U" + std::to_string(t.length())) + q; return;
    case DataTypeKind::structured: break;
    case DataTypeKind::string:
    case DataTypeKind::vlen_bytes:
      unsupported("descr", "variable-length " + t.describe() +
                               " elements cannot be written as .npy (NumPy keeps them only as pickled objects)");
    default:
      for (const auto& c : kCodes)
        if (c.kind == t.kind()) out += q + ((t.size() == 1 ? "|" : "<") + std::string(c.code)) + q;
      return;
  }
  if (depth >= kNpyMaxStructDepth)
    unsupported("descr", "structs nested deeper than " + std::to_string(kNpyMaxStructDepth) +
                             " levels cannot be written as .npy");
  out += '[';
  bool first = true;
  for (const auto& f : t.fields()) {
    out += first ? "(" : ", (";
    first = false;
    out += py_str(f.name) + ", ";
    put_descr(out, f.type, depth + 1, true);
    if (!f.shape.empty()) {
      if (f.shape.size() > kNpyMaxDims)
        unsupported("descr", "field '" + printable(f.name) + "' has a subarray of " + std::to_string(f.shape.size()) +
                                 " dimensions; a .npy allows " + std::to_string(kNpyMaxDims));
      out += ", " + py_tuple(f.shape);
    }
    out += ')';
  }
  out += ']';
}

}  // namespace

// Element count, or nullopt on overflow of `limit`.
std::optional<std::uint64_t> count(std::span<const std::uint64_t> shape, std::uint64_t limit) {
  if (std::ranges::find(shape, std::uint64_t{0}) != shape.end()) return 0;
  std::uint64_t n = 1;
  for (auto d : shape) {
    if (n > limit / d) return std::nullopt;
    n *= d;
  }
  return n;
}

// Fortran-order elements -> C order (same shape).
Bytes fortran_to_c(const Bytes& in, const std::vector<std::uint64_t>& shape, std::size_t item) {
  const std::size_t rank = shape.size();
  if (rank < 2 || in.empty()) return in;
  std::vector<std::uint64_t> stride(rank), idx(rank, 0);
  for (std::uint64_t k = 0, s = item; k < rank; s *= shape[k], ++k) stride[k] = s;
  Bytes out(in.size());
  std::byte* o = out.data();
  std::uint64_t base = 0;  // input offset of idx with the last index 0
  // Advances idx over dimensions 0..rank-2 in C order; false when done.
  auto advance = [&] {
    for (std::size_t d = rank - 1; d-- > 0;) {
      if (++idx[d] < shape[d]) return base += stride[d], true;
      base -= stride[d] * (shape[d] - 1);
      idx[d] = 0;
    }
    return false;
  };
  do {
    for (std::uint64_t j = 0; j < shape[rank - 1]; ++j, o += item)
      std::memcpy(o, in.data() + base + j * stride[rank - 1], item);
  } while (advance());
  return out;
}

namespace {

template <class T>
T read_le(const std::byte* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// The header text as UTF-8: format 3.0 is UTF-8 (checked), 1.0 and 2.0 are
// Latin-1 (as NumPy reads them).
std::string header_text(std::string_view raw, unsigned major, const std::string& file) {
  if (major < 3) return latin1_to_utf8(raw);
  if (const auto bad = invalid_utf8_at(raw))
    fail(file, "header", "not valid UTF-8 at byte " + std::to_string(*bad) + " (format 3.0 headers are UTF-8), near '" +
                             printable(raw.substr(*bad > 10 ? *bad - 10 : 0), 30) + "'");
  return std::string(raw);
}

}  // namespace

// Parses the header at the start of `b`, which holds at least the whole
// header (else a "truncated" error).
Header parse_header(ByteSpan b, const std::string& file) {
  if (b.size() < kMagic.size() + 2 || std::memcmp(b.data(), kMagic.data(), kMagic.size()) != 0)
    fail(file, "magic", "not a .npy file (expected the magic string \\x93NUMPY)");
  const auto major = static_cast<unsigned>(b[6]), minor = static_cast<unsigned>(b[7]);
  if (major < 1 || major > 3 || minor != 0)
    fail(file, "version", "unsupported .npy format version " + std::to_string(major) + "." + std::to_string(minor));
  const std::size_t len_size = major == 1 ? 2 : 4;
  const std::size_t prefix = 8 + len_size;
  if (b.size() < prefix) fail(file, "header", "truncated before the header length");
  const std::uint64_t hlen = major == 1 ? read_le<std::uint16_t>(b.data() + 8) : read_le<std::uint32_t>(b.data() + 8);
  if (hlen > kNpyMaxHeaderBytes)
    fail(file, "header", "header length " + std::to_string(hlen) + " exceeds the limit of " +
                             std::to_string(kNpyMaxHeaderBytes) + " bytes");
  if (b.size() - prefix < hlen)
    fail(file, "header", "truncated: header length is " + std::to_string(hlen) + " bytes, the file has " +
                             std::to_string(b.size() - prefix) + " after the prefix");
  const std::string text =
      header_text(std::string_view(reinterpret_cast<const char*>(b.data() + prefix), hlen), major, file);
  const json h = Literal(text, file).parse();
  if (!h.is_object()) fail(file, "header", "expected a dictionary");
  for (const char* k : {"descr", "fortran_order", "shape"})
    if (!h.contains(k)) fail(file, k, "missing from the header");
  for (const auto& [k, v] : h.items())
    if (k != "descr" && k != "fortran_order" && k != "shape")
      fail(file, "header", "unexpected key '" + printable(k) + "'");
  Header out;
  out.descr = parse_descr(h["descr"], file, 0);
  if (!h["fortran_order"].is_boolean()) fail(file, "fortran_order", "expected True or False");
  out.fortran = h["fortran_order"].get<bool>();
  out.shape = parse_dims(h["shape"], file, "shape", "shape");
  out.shape_json = h["shape"];
  out.data_offset = prefix + hlen;
  const DataType stored = out.descr.type;
  out.dtype = stored.is_structured() ? as_descr(file, [&] { return without_orders(stored); }) : stored;
  return out;
}

// The element count of the header's shape, checked against the `present`
// data bytes: they must be exactly the declared size.
std::uint64_t checked_count(const Header& h, std::uint64_t present, const std::string& file) {
  const std::size_t item = h.descr.type.size();
  const auto n = count(h.shape, present / item + 1);
  if (!n || *n * item > present)
    fail(file, "data", "truncated: shape " + show(h.shape_json) + " of " + h.descr.type.describe() +
                           " needs more than the " + std::to_string(present) + " data bytes present");
  if (*n * item != present)
    fail(file, "data", std::to_string(present - *n * item) + " unexpected bytes after the array data");
  return *n;
}

// Stored byte order -> native, in place, for `n` elements.
void to_native(const Descr& d, std::byte* data, std::uint64_t n) {
  const DataType& stored = d.type;
  if (stored.is_structured()) {
    const auto runs = stored.swap_runs(ByteOrder::little);  // swaps just the fields stored big-endian
    if (!runs.empty()) apply_swap_runs(runs, stored.size(), data, data, n);
  } else if (d.order == ByteOrder::big && stored.swap_unit() > 1) {
    const std::size_t unit = stored.swap_unit();
    for (std::uint64_t i = 0; i < n * stored.size(); i += unit) std::reverse(data + i, data + i + unit);
  }
}

namespace {

NdArray parse(ByteSpan b, const std::string& file) {
  const Header h = parse_header(b, file);
  const ByteSpan data = b.subspan(h.data_offset);
  const std::uint64_t n = checked_count(h, data.size(), file);
  NdArray a{h.dtype, h.shape, to_bytes(data)};
  to_native(h.descr, a.data.data(), n);
  if (h.fortran) a.data = fortran_to_c(a.data, a.shape, h.dtype.size());
  return a;
}

}  // namespace
}  // namespace npy_detail

using namespace npy_detail;

std::string npy_descr(DataType dtype) {
  std::string out;
  put_descr(out, dtype, 0, false);
  return out;
}

std::string npy_header(DataType dtype, std::span<const std::uint64_t> shape) {
  if (shape.size() > kNpyMaxDims)
    unsupported("shape", std::to_string(shape.size()) + " dimensions; a .npy allows " + std::to_string(kNpyMaxDims));
  std::string descr;
  put_descr(descr, dtype, 0, true);
  // As NumPy writes it: keys sorted, spare room for the first axis to grow.
  std::string dict = "{'descr': " + descr + ", 'fortran_order': False, 'shape': " + py_tuple(shape) + ", }";
  if (!shape.empty()) dict += std::string(kGrowthDigits - std::min(kGrowthDigits, std::to_string(shape[0]).size()), ' ');
  // Latin-1 (formats 1.0/2.0) when every character fits, else UTF-8 (3.0).
  std::string encoded;
  bool latin1 = true;
  for (std::size_t i = 0; i < dict.size() && latin1;) {
    const auto cp = next_utf8(dict, i);  // valid: names were checked by py_str
    if (*cp > 0xff) latin1 = false;
    else encoded += static_cast<char>(*cp);
  }
  if (!latin1) encoded = dict;
  // NumPy pads with 1 to 64 spaces and '\n' so the data starts at a multiple of 64.
  auto padded = [&](std::size_t prefix) {
    const std::size_t hlen = encoded.size() + 1;
    return encoded + std::string(kAlign - (prefix + hlen) % kAlign, ' ') + '\n';
  };
  unsigned major = latin1 ? 1 : 3;
  std::string h = padded(major == 1 ? 10 : 12);
  if (major == 1 && h.size() > std::numeric_limits<std::uint16_t>::max()) h = padded(12), major = 2;
  if (h.size() > kNpyMaxHeaderBytes)
    unsupported("header", "the .npy header of " + dtype.describe().substr(0, 60) + " would be " +
                              std::to_string(h.size()) + " bytes, over the limit of " +
                              std::to_string(kNpyMaxHeaderBytes));
  std::string out(kMagic);
  out.push_back(static_cast<char>(major));
  out.push_back('\0');
  for (std::size_t i = 0; i < (major == 1 ? 2u : 4u); ++i) out.push_back(static_cast<char>((h.size() >> (8 * i)) & 0xff));
  return out + h;
}

DataType parse_npy_descr(std::string_view literal) {
  const std::string file;
  if (literal.size() > kNpyMaxHeaderBytes) fail(file, "header", "descr longer than the header limit");
  if (const auto bad = invalid_utf8_at(literal))
    fail(file, "header", "not valid UTF-8 at byte " + std::to_string(*bad));
  const json d = Literal(literal, file).parse();
  return as_descr(file, [&] { return without_orders(parse_descr(d, file, 0).type); });
}

NdArray parse_npy(ByteSpan npy) { return parse(npy, ""); }

NdArray read_npy(const fs::path& file) {
  const std::string name = file.string();
  std::error_code ec;
  if (fs::is_directory(file, ec)) fail(name, "file", "is a directory, not a .npy file");
  std::ifstream in(file, std::ios::binary);
  if (!in) fail(name, "file", std::string("cannot open: ") + std::strerror(errno));
  Bytes bytes;
  char buf[1 << 16];
  while (in.read(buf, sizeof buf) || in.gcount() > 0) {
    const auto* p = reinterpret_cast<const std::byte*>(buf);
    bytes.insert(bytes.end(), p, p + in.gcount());
  }
  if (in.bad()) fail(name, "file", std::string("cannot read: ") + std::strerror(errno));
  return parse(bytes, name);
}

Bytes encode_npy(const NdArray& a) {
  const auto n = count(a.shape, std::numeric_limits<std::uint64_t>::max() / a.dtype.size());
  if (!n || *n * a.dtype.size() != a.data.size())
    fail("", "data",
         std::to_string(a.data.size()) + " bytes do not match the shape and data type " + a.dtype.describe());
  const std::string h = npy_header(a.dtype, a.shape);
  Bytes out;
  out.reserve(h.size() + a.data.size());
  const auto* p = reinterpret_cast<const std::byte*>(h.data());
  out.insert(out.end(), p, p + h.size());
  out.insert(out.end(), a.data.begin(), a.data.end());
  return out;
}

void write_npy(const fs::path& file, const NdArray& a) {
  const std::string name = file.string();
  Bytes bytes;
  try {
    bytes = encode_npy(a);
  } catch (const Error& e) {
    throw_error(e.code(), name, e.field(), e.detail());
  }
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  if (!out) fail(name, "file", std::string("cannot open for writing: ") + std::strerror(errno));
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) fail(name, "file", std::string("cannot write: ") + std::strerror(errno));
}

}  // namespace zarrcoro
