// NumPy .npy reader and writer (NEP 1). See zarrcoro/npy.hpp for the contract.
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

namespace zarrcoro {
namespace {

static_assert(std::endian::native == std::endian::little, "zarrcoro supports little-endian hosts only");

using nlohmann::json;
namespace fs = std::filesystem;

constexpr std::string_view kMagic = "\x93NUMPY";
constexpr std::size_t kAlign = 64;

[[noreturn]] void fail(const std::string& file, const std::string& field, const std::string& msg) {
  throw InvalidArgument(file, field, msg);
}

// The header is a Python literal; parse the subset NumPy writes (dicts,
// tuples/lists, strings, integers, True/False/None) into JSON values.
class Literal {
 public:
  Literal(std::string_view text, const std::string& file) : s_(text), file_(file) {}

  json parse() {
    json v = value();
    skip_ws();
    if (i_ != s_.size()) error("unexpected text after the dictionary");
    return v;
  }

 private:
  [[noreturn]] void error(const std::string& what) const {
    fail(file_, "header", what + " at offset " + std::to_string(i_) + " of '" + std::string(s_) + "'");
  }
  void skip_ws() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
  }
  bool at(char c) {
    skip_ws();
    return i_ < s_.size() && s_[i_] == c;
  }
  bool eat(char c) { return at(c) && (++i_, true); }
  json value() {
    skip_ws();
    if (i_ == s_.size()) error("unexpected end");
    const char c = s_[i_];
    if (c == '{') return dict();
    if (c == '(') return sequence(')');
    if (c == '[') return sequence(']');
    if (c == '\'' || c == '"') return string();
    if (c == '-' || std::isdigit(static_cast<unsigned char>(c))) return integer();
    for (auto [word, v] : {std::pair<std::string_view, json>{"True", true}, {"False", false}, {"None", nullptr}})
      if (s_.substr(i_, word.size()) == word) return i_ += word.size(), v;
    error("unexpected character");
  }
  json dict() {
    ++i_;
    json out = json::object();
    while (!eat('}')) {
      const json key = value();
      if (!key.is_string()) error("dictionary keys must be strings");
      if (!eat(':')) error("expected ':'");
      if (out.contains(key.get<std::string>())) error("duplicate key '" + key.get<std::string>() + "'");
      out[key.get<std::string>()] = value();
      if (!eat(',') && !at('}')) error("expected ',' or '}'");
    }
    return out;
  }
  json sequence(char close) {
    ++i_;
    json out = json::array();
    while (!eat(close)) {
      out.push_back(value());
      if (!eat(',') && !at(close))
        error(std::string("expected ',' or '") + close + "'");
    }
    return out;
  }
  json string() {
    const char quote = s_[i_++];
    std::string out;
    while (i_ < s_.size() && s_[i_] != quote) {
      if (s_[i_] == '\\' && i_ + 1 < s_.size()) ++i_;
      out += s_[i_++];
    }
    if (i_ == s_.size()) error("unterminated string");
    ++i_;
    return out;
  }
  json integer() {
    const bool neg = s_[i_] == '-';
    const std::size_t begin = i_ + neg;
    std::uint64_t v = 0;
    auto [p, ec] = std::from_chars(s_.data() + begin, s_.data() + s_.size(), v);
    if (ec != std::errc() || p == s_.data() + begin) error("bad integer");
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

struct Descr {
  DataType dtype;
  bool big_endian = false;
};

Descr parse_descr(const json& d, const std::string& file) {
  if (d.is_array()) fail(file, "descr", "structured dtypes are not supported");
  if (!d.is_string()) fail(file, "descr", "expected a string, got " + d.dump());
  const std::string text = d.get<std::string>();
  std::string_view s = text;
  char order = '=';
  if (!s.empty() && std::string_view("<>|=").find(s.front()) != std::string_view::npos)
    order = s.front(), s.remove_prefix(1);
  static constexpr std::array<std::pair<std::string_view, DataTypeKind>, 14> kTypes{{
      {"b1", DataTypeKind::bool_},   {"i1", DataTypeKind::int8},      {"i2", DataTypeKind::int16},
      {"i4", DataTypeKind::int32},   {"i8", DataTypeKind::int64},     {"u1", DataTypeKind::uint8},
      {"u2", DataTypeKind::uint16},  {"u4", DataTypeKind::uint32},    {"u8", DataTypeKind::uint64},
      {"f2", DataTypeKind::float16}, {"f4", DataTypeKind::float32},   {"f8", DataTypeKind::float64},
      {"c8", DataTypeKind::complex64}, {"c16", DataTypeKind::complex128},
  }};
  for (auto [code, kind] : kTypes)
    if (s == code) return {kind, order == '>' && DataType(kind).size() > 1};
  if (!s.empty() && s.front() == 'O')
    fail(file, "descr", "object dtype '" + text + "' (pickled Python objects) is not supported");
  fail(file, "descr", "unsupported data type '" + text + "'");
}

std::vector<std::uint64_t> parse_shape(const json& s, const std::string& file) {
  if (!s.is_array()) fail(file, "shape", "expected a tuple, got " + s.dump());
  std::vector<std::uint64_t> shape;
  for (const auto& d : s) {
    if (!d.is_number_unsigned()) fail(file, "shape", "expected non-negative integers, got " + s.dump());
    shape.push_back(d.get<std::uint64_t>());
  }
  return shape;
}

// Element count, or nullopt on overflow of `limit`.
std::optional<std::uint64_t> count(const std::vector<std::uint64_t>& shape, std::uint64_t limit) {
  if (std::ranges::find(shape, std::uint64_t{0}) != shape.end()) return 0;
  std::uint64_t n = 1;
  for (auto d : shape) {
    if (n > limit / d) return std::nullopt;
    n *= d;
  }
  return n;
}

void byteswap(Bytes& data, std::size_t unit) {
  for (std::size_t i = 0; i + unit <= data.size(); i += unit)
    std::reverse(data.begin() + static_cast<std::ptrdiff_t>(i), data.begin() + static_cast<std::ptrdiff_t>(i + unit));
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

NdArray parse(ByteSpan b, const std::string& file) {
  if (b.size() < kMagic.size() + 2 || std::memcmp(b.data(), kMagic.data(), kMagic.size()) != 0)
    fail(file, "magic", "not a .npy file (expected the magic string \\x93NUMPY)");
  const auto major = static_cast<unsigned>(b[6]), minor = static_cast<unsigned>(b[7]);
  if (major < 1 || major > 3 || minor != 0)
    fail(file, "version", "unsupported .npy format version " + std::to_string(major) + "." + std::to_string(minor));
  const std::size_t len_size = major == 1 ? 2 : 4;
  const std::size_t prefix = 8 + len_size;
  if (b.size() < prefix) fail(file, "header", "truncated before the header length");
  const std::uint64_t hlen = major == 1 ? read_le<std::uint16_t>(b.data() + 8) : read_le<std::uint32_t>(b.data() + 8);
  if (b.size() - prefix < hlen)
    fail(file, "header", "truncated: header length is " + std::to_string(hlen) + " bytes, the file has " +
                             std::to_string(b.size() - prefix) + " after the prefix");
  const std::string_view text(reinterpret_cast<const char*>(b.data() + prefix), hlen);
  const json h = Literal(text, file).parse();
  if (!h.is_object()) fail(file, "header", "expected a dictionary");
  for (const char* k : {"descr", "fortran_order", "shape"})
    if (!h.contains(k)) fail(file, k, "missing from the header");
  for (const auto& [k, v] : h.items())
    if (k != "descr" && k != "fortran_order" && k != "shape") fail(file, "header", "unexpected key '" + k + "'");
  const Descr descr = parse_descr(h["descr"], file);
  if (!h["fortran_order"].is_boolean()) fail(file, "fortran_order", "expected True or False");
  const bool fortran = h["fortran_order"].get<bool>();

  NdArray a{descr.dtype, parse_shape(h["shape"], file), {}};
  const std::size_t item = a.dtype.size();
  const ByteSpan data = b.subspan(prefix + hlen);
  const auto n = count(a.shape, data.size() / item + 1);
  if (!n || *n * item > data.size())
    fail(file, "data", "truncated: shape " + h["shape"].dump() + " of " + std::string(a.dtype.name()) +
                           " needs more than the " + std::to_string(data.size()) + " data bytes present");
  if (*n * item != data.size())
    fail(file, "data", std::to_string(data.size() - *n * item) + " unexpected bytes after the array data");
  a.data = to_bytes(data);
  if (descr.big_endian) byteswap(a.data, a.dtype.swap_unit());
  if (fortran) a.data = fortran_to_c(a.data, a.shape, item);
  return a;
}

std::string descr_of(DataType t) {
  static constexpr std::array<std::string_view, 14> kCodes{"b1", "i1", "i2", "i4", "i8", "u1", "u2",
                                                           "u4", "u8", "f2", "f4", "f8", "c8", "c16"};
  return (t.size() == 1 ? "|" : "<") + std::string(kCodes[static_cast<std::size_t>(t.kind())]);
}

}  // namespace

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
         std::to_string(a.data.size()) + " bytes do not match the shape and data type " + std::string(a.dtype.name()));
  std::string shape = "(";
  for (std::size_t i = 0; i < a.shape.size(); ++i) shape += (i ? ", " : "") + std::to_string(a.shape[i]);
  shape += a.shape.size() == 1 ? ",)" : ")";
  std::string header = "{'descr': '" + descr_of(a.dtype) + "', 'fortran_order': False, 'shape': " + shape + ", }";
  // Pad with spaces so that magic + version + length + header + '\n' is a multiple of 64.
  auto padded = [&](std::size_t prefix) {
    const std::size_t total = prefix + header.size() + 1;
    return header + std::string((kAlign - total % kAlign) % kAlign, ' ') + '\n';
  };
  std::string h = padded(10);
  const bool v2 = h.size() > std::numeric_limits<std::uint16_t>::max();
  if (v2) h = padded(12);

  Bytes out;
  out.reserve((v2 ? 12 : 10) + h.size() + a.data.size());
  auto put = [&](const void* p, std::size_t size) {
    const auto* s = static_cast<const std::byte*>(p);
    out.insert(out.end(), s, s + size);
  };
  put(kMagic.data(), kMagic.size());
  const std::array<unsigned char, 2> version{static_cast<unsigned char>(v2 ? 2 : 1), 0};
  put(version.data(), 2);
  if (v2) {
    const auto len = static_cast<std::uint32_t>(h.size());
    put(&len, 4);
  } else {
    const auto len = static_cast<std::uint16_t>(h.size());
    put(&len, 2);
  }
  put(h.data(), h.size());
  put(a.data.data(), a.data.size());
  return out;
}

void write_npy(const fs::path& file, const NdArray& a) {
  const std::string name = file.string();
  Bytes bytes;
  try {
    bytes = encode_npy(a);
  } catch (const InvalidArgument& e) {
    fail(name, e.field(), e.detail());
  }
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  if (!out) fail(name, "file", std::string("cannot open for writing: ") + std::strerror(errno));
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) fail(name, "file", std::string("cannot write: ") + std::strerror(errno));
}

}  // namespace zarrcoro
