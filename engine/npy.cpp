// NumPy .npy reader and writer (NEP 1) and the DataType <-> descr mapping.
// See zarrcoro/npy.hpp for the contract.
#include <zarrcoro/npy.hpp>

#include <algorithm>
#include <array>
#include <bit>
#include <cctype>
#include <cerrno>
#include <fcntl.h>
#include <random>
#include <sys/stat.h>
#include <unistd.h>
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

namespace zarrcoro {
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

[[noreturn]] void fail(const std::string& file, const std::string& field, const std::string& msg) {
  throw InvalidArgument(file, field, msg);
}

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

// Python's repr of a tuple of integers: "()", "(3,)", "(2, 3)".
std::string py_tuple(std::span<const std::uint64_t> v) {
  std::string s = "(";
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + (v.size() == 1 ? ",)" : ")");
}

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

// A parsed descr: the type, whose structured fields carry the byte order the
// file stores them in, and that order for a scalar type.
struct Descr {
  DataType type;
  ByteOrder order = ByteOrder::unspecified;
};

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

// What a .npy header says, and where the data starts.
struct Header {
  Descr descr;  // as stored (structured fields with their byte orders)
  DataType dtype;  // as returned: native, no declared orders
  std::vector<std::uint64_t> shape;
  json shape_json;
  bool fortran = false;
  std::uint64_t data_offset = 0;
};

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

NdArray parse(ByteSpan b, const std::string& file) {
  const Header h = parse_header(b, file);
  const ByteSpan data = b.subspan(h.data_offset);
  const std::uint64_t n = checked_count(h, data.size(), file);
  NdArray a{h.dtype, h.shape, to_bytes(data)};
  to_native(h.descr, a.data.data(), n);
  if (h.fortran) a.data = fortran_to_c(a.data, a.shape, h.dtype.size());
  return a;
}

// Calls f(file_offset, box_offset, bytes) for each contiguous run of `box`
// in a C-order array of `shape` (offsets in bytes from the data's start and
// the box buffer's start); nothing for an empty box.
template <class F>
void for_each_run(std::span<const std::uint64_t> shape, const Region& box, std::size_t item, F&& f) {
  const std::size_t rank = shape.size();
  for (std::size_t d = 0; d < rank; ++d)
    if (box.start[d] == box.stop[d]) return;
  if (rank == 0) return f(std::uint64_t{0}, std::uint64_t{0}, std::uint64_t{item});
  std::vector<std::uint64_t> stride(rank);  // in bytes
  for (std::size_t d = rank, s = item; d-- > 0; s *= shape[d]) stride[d] = s;
  std::size_t k = rank - 1;  // the run spans dims k.. (those after k whole)
  while (k > 0 && box.start[k] == 0 && box.stop[k] == shape[k]) --k;
  const std::uint64_t run = (box.stop[k] - box.start[k]) * stride[k];
  std::vector<std::uint64_t> idx(box.start.begin(), box.start.begin() + static_cast<std::ptrdiff_t>(k));
  for (std::uint64_t out = 0;; out += run) {
    std::uint64_t off = box.start[k] * stride[k];
    for (std::size_t d = 0; d < k; ++d) off += idx[d] * stride[d];
    f(off, out, run);
    std::size_t d = k;
    for (; d-- > 0;) {
      if (++idx[d] < box.stop[d]) break;
      idx[d] = box.start[d];
    }
    if (d == static_cast<std::size_t>(-1)) return;
  }
}

void check_box(const Region& box, std::span<const std::uint64_t> shape, const std::string& file) {
  bool ok = box.start.size() == shape.size() && box.stop.size() == shape.size();
  for (std::size_t d = 0; ok && d < shape.size(); ++d) ok = box.start[d] <= box.stop[d] && box.stop[d] <= shape[d];
  if (!ok) fail(file, "region", "the box is not inside the array's shape " + py_tuple(shape));
}

std::string errno_text() { return std::strerror(errno); }

}  // namespace

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

// ---- streaming ------------------------------------------------------------------

NpyReader::NpyReader(const fs::path& file) : name_(file.string()) {
  std::error_code ec;
  if (fs::is_directory(file, ec)) fail(name_, "file", "is a directory, not a .npy file");
  fd_ = ::open(file.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);  // a FIFO cannot block the open
  if (fd_ < 0) fail(name_, "file", "cannot open: " + errno_text());
  try {
    struct stat st {};
    if (::fstat(fd_, &st) != 0) fail(name_, "file", "cannot stat: " + errno_text());
    if (!S_ISREG(st.st_mode)) fail(name_, "file", "is not a regular file (a .npy is read by offsets)");
    const auto size = static_cast<std::uint64_t>(st.st_size);
    Bytes head(std::min<std::uint64_t>(size, 12 + kNpyMaxHeaderBytes));
    std::size_t got = 0;
    while (got < head.size()) {
      const ssize_t r = ::pread(fd_, head.data() + got, head.size() - got, static_cast<off_t>(got));
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) fail(name_, "file", "cannot read: " + errno_text());
      if (r == 0) break;
      got += static_cast<std::size_t>(r);
    }
    head.resize(got);
    const Header h = parse_header(head, name_);
    checked_count(h, size - std::min(size, h.data_offset), name_);
    dtype_ = h.dtype;
    stored_ = h.descr.type;
    big_endian_ = h.descr.order == ByteOrder::big;
    fortran_ = h.fortran;
    shape_ = h.shape;
    data_offset_ = h.data_offset;
  } catch (...) {
    ::close(fd_);
    throw;
  }
}

NpyReader::~NpyReader() {
  if (fd_ >= 0) ::close(fd_);
}

NdArray NpyReader::read(const Region& box) const {
  check_box(box, shape_, name_);
  const std::size_t item = dtype_.size();
  NdArray out{dtype_, box.shape(), {}};
  out.data.resize(box.num_elements() * item);
  auto pread_run = [&](std::uint64_t off, std::uint64_t at, std::uint64_t n) {
    for (std::uint64_t done = 0; done < n;) {
      const ssize_t r = ::pread(fd_, out.data.data() + at + done, n - done,
                                static_cast<off_t>(data_offset_ + off + done));
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) fail(name_, "file", "cannot read: " + errno_text());
      if (r == 0) fail(name_, "file", "unexpected end of file (was it truncated while being read?)");
      done += static_cast<std::uint64_t>(r);
    }
  };
  if (fortran_ && shape_.size() > 1) {  // the file is the C-order transpose
    const std::vector<std::uint64_t> shape(shape_.rbegin(), shape_.rend());
    const Region rbox{{box.start.rbegin(), box.start.rend()}, {box.stop.rbegin(), box.stop.rend()}};
    for_each_run(shape, rbox, item, pread_run);
    out.data = fortran_to_c(out.data, out.shape, item);
  } else {
    for_each_run(shape_, box, item, pread_run);
  }
  to_native(Descr{stored_, big_endian_ ? ByteOrder::big : ByteOrder::unspecified}, out.data.data(),
            out.data.size() / std::max<std::size_t>(item, 1));
  return out;
}

NpyWriter::NpyWriter(const fs::path& file, DataType dtype, std::vector<std::uint64_t> shape)
    : file_(file), dtype_(dtype), shape_(std::move(shape)) {
  const std::string name = file.string();
  std::string header;
  try {
    header = npy_header(dtype_, shape_);
  } catch (const Error& e) {
    throw_error(e.code(), name, e.field(), e.detail());
  }
  data_offset_ = header.size();
  // A symlink is written through (its target replaced); an existing file
  // keeps its permissions; anything else (a device, a pipe) is refused: the
  // boxes are written by offset into a temporary file renamed over it.
  std::error_code ec;
  if (fs::is_symlink(file, ec)) file_ = fs::weakly_canonical(file, ec);
  struct stat old {};
  const bool exists = ::stat(file_.c_str(), &old) == 0;
  if (exists && !S_ISREG(old.st_mode))
    fail(name, "file", "is not a regular file (a .npy is written by offsets into a temporary file, then renamed)");
  std::random_device rd;
  for (int attempt = 0; fd_ < 0; ++attempt) {
    temp_ = file_;
    temp_ += ".tmp-" + std::to_string(rd());
    fd_ = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd_ < 0 && (errno != EEXIST || attempt > 8))
      fail(name, "file", "cannot create a temporary file beside it (in " + file_.parent_path().string() + "): " +
                             errno_text());
  }
  if (exists) ::fchmod(fd_, old.st_mode & 07777);  // best effort, as cp does
  for (std::size_t done = 0; done < header.size();) {
    const ssize_t r = ::pwrite(fd_, header.data() + done, header.size() - done, static_cast<off_t>(done));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      const std::string why = r < 0 ? errno_text() : "no progress";
      ::close(fd_);
      ::unlink(temp_.c_str());
      fd_ = -1;
      fail(name, "file", "cannot write: " + why);
    }
    done += static_cast<std::size_t>(r);
  }
}

NpyWriter::~NpyWriter() {
  if (fd_ < 0) return;
  ::close(fd_);
  ::unlink(temp_.c_str());
}

void NpyWriter::write(const Region& box, ByteSpan data) const {
  const std::string name = file_.string();
  if (fd_ < 0) fail(name, "file", "the file was already committed");
  check_box(box, shape_, name);
  const std::size_t item = dtype_.size();
  if (box.num_elements() * item != data.size())
    fail(name, "data", std::to_string(data.size()) + " bytes do not match the box of " +
                           std::to_string(box.num_elements()) + " elements of " + dtype_.describe());
  for_each_run(shape_, box, item, [&](std::uint64_t off, std::uint64_t at, std::uint64_t n) {
    for (std::uint64_t done = 0; done < n;) {
      const ssize_t r = ::pwrite(fd_, data.data() + at + done, n - done, static_cast<off_t>(data_offset_ + off + done));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) fail(name, "file", "cannot write: " + (r < 0 ? errno_text() : std::string("no progress")));
      done += static_cast<std::uint64_t>(r);
    }
  });
}

void NpyWriter::commit() {
  const std::string name = file_.string();
  if (fd_ < 0) fail(name, "file", "the file was already committed");
  const auto n = count(shape_, std::numeric_limits<std::uint64_t>::max() / dtype_.size());
  const std::uint64_t size = data_offset_ + (n ? *n * dtype_.size() : 0);
  if (::ftruncate(fd_, static_cast<off_t>(size)) != 0) fail(name, "file", "cannot write: " + errno_text());
  const int fd = fd_;
  fd_ = -1;
  // Flushed before the rename: a crash then leaves the old file or the new one.
  const bool synced = ::fdatasync(fd) == 0;
  const int sync_errno = errno;
  if (::close(fd) != 0 || !synced) {
    if (!synced) errno = sync_errno;
    const std::string why = errno_text();
    ::unlink(temp_.c_str());
    fail(name, "file", "cannot write: " + why);
  }
  if (::rename(temp_.c_str(), file_.c_str()) != 0) {
    const std::string why = errno_text();
    ::unlink(temp_.c_str());
    fail(name, "file", "cannot rename " + temp_.string() + " to it: " + why);
  }
}

}  // namespace zarrcoro
