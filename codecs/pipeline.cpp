// The codec pipeline (Zarr v3 core spec, "Codecs" and "Extension
// definitions"): the `codecs` list holds array -> array codecs, then exactly
// one array -> bytes codec, then bytes -> bytes codecs. Each entry is an
// object {"name", "configuration"?, "must_understand"?} or a bare name; an
// unknown codec is an error unless it says "must_understand": false, in which
// case it is skipped. Decoding runs the list backwards.
//
// Buffers: intermediate results live in per-thread scratch buffers that keep
// their capacity across chunks (one set per nesting level, so a sharding
// codec may run an inner pipeline on the same thread). The last step writes
// straight into the caller's output whenever the array side is a plain copy.
#include "codecs/pipeline.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <string_view>

#include <nlohmann/json.hpp>

#include "codecs/vlen.hpp"
#include "core/checked.hpp"
#include <spdlog/spdlog.h>

#include <zarrcoro/error.hpp>

namespace zarrcoro::codecs {
namespace {

using json = nlohmann::json;

enum class Kind { a2a, a2b, b2b };

struct Registered {
  std::string_view name;
  Kind kind;
  std::unique_ptr<ArrayToArrayCodec> (*a2a)(const json&) = nullptr;
  std::unique_ptr<ArrayToBytesCodec> (*a2b)(const json&, const ArraySpec&) = nullptr;
  std::unique_ptr<BytesToBytesCodec> (*b2b)(const json&) = nullptr;
};

// The v3 codecs this library knows. To add one, write its factory in
// codec.hpp and list it here; "sharding_indexed" (a2b) and "blosc" (b2b) go
// here when they exist (until then they are unsupported codecs).
const Registered kRegistry[] = {
    {"transpose", Kind::a2a, make_transpose_codec},
    {"bytes", Kind::a2b, nullptr, [](const json& c, const ArraySpec&) { return make_bytes_codec(c); }},
    {"sharding_indexed", Kind::a2b, nullptr, make_sharding_codec},
    {"vlen-utf8", Kind::a2b, nullptr, make_vlen_utf8_codec},
    {"vlen-bytes", Kind::a2b, nullptr, make_vlen_bytes_codec},
    {"gzip", Kind::b2b, nullptr, nullptr, make_gzip_codec},
    {"zstd", Kind::b2b, nullptr, nullptr, make_zstd_codec},
    {"crc32c", Kind::b2b, nullptr, nullptr, make_crc32c_codec},
    {"blosc", Kind::b2b, nullptr, nullptr, make_blosc_codec},
    // Zarr v2 compressors run through the v2 adapter (codecs/v2.hpp); v3
    // metadata naming them is rejected by ArrayMetadata::validate.
    {"zlib", Kind::b2b, nullptr, nullptr, [](const json& c) { return make_zlib_codec(c); }},
    {"lz4", Kind::b2b, nullptr, nullptr, [](const json& c) { return make_lz4_codec(c); }},
    // The same numcodecs codecs under the names zarr-python 3 writes them
    // with in v3 metadata (configuration {"level"}, {"acceleration"}).
    {"numcodecs.zlib", Kind::b2b, nullptr, nullptr, [](const json& c) { return make_zlib_codec(c, "numcodecs.zlib"); }},
    {"numcodecs.lz4", Kind::b2b, nullptr, nullptr, [](const json& c) { return make_lz4_codec(c, "numcodecs.lz4"); }},
};

const Registered* find_codec(std::string_view name) {
  for (const auto& r : kRegistry)
    if (r.name == name) return &r;
  return nullptr;
}

std::string at(std::size_t i) { return "codecs[" + std::to_string(i) + "]"; }

// Runs `f`, re-raising its InvalidMetadata with the codec's position prefixed
// to the field ("level" -> "codecs[2].configuration.level").
template <class F>
auto configured(std::size_t i, F&& f) {
  try {
    return f();
  } catch (const InvalidMetadata& e) {
    std::string field = at(i) + ".configuration";
    if (!e.field().empty()) field += "." + e.field();
    throw InvalidMetadata(e.key(), field, e.detail());
  } catch (const json::exception& e) {  // a member of another type than the codec expects
    throw InvalidMetadata("", at(i) + ".configuration", std::string("unexpected JSON value: ") + e.what());
  }
}

// Per-thread scratch buffers, one set per nesting depth.
constexpr std::size_t kKeepCapacity = std::size_t{64} << 20;  // release larger buffers after use

class Scratch {
 public:
  Scratch() {
    auto& p = pool();
    if (depth() == p.size()) p.push_back(std::make_unique<std::array<Bytes, 3>>());
    bufs_ = p[depth()++].get();
  }
  ~Scratch() {
    for (auto& b : *bufs_)
      if (b.capacity() > kKeepCapacity) Bytes().swap(b);
    --depth();
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  Bytes& operator[](std::size_t i) { return (*bufs_)[i]; }

 private:
  static std::vector<std::unique_ptr<std::array<Bytes, 3>>>& pool() {
    thread_local std::vector<std::unique_ptr<std::array<Bytes, 3>>> p;
    return p;
  }
  static std::size_t& depth() {
    thread_local std::size_t d = 0;
    return d;
  }
  std::array<Bytes, 3>* bufs_;
};

bool within(ByteSpan part, const Bytes& buf) {
  const auto p = reinterpret_cast<std::uintptr_t>(part.data());
  const auto b = reinterpret_cast<std::uintptr_t>(buf.data());
  return !part.empty() && p >= b && p + part.size() <= b + buf.size();
}

// "bytes(little)", "zstd(3,checksum)", "transpose": scalar settings in parentheses.
std::string short_form(const json& j) {
  std::string s = j.value("name", "?"), args, flags;
  if (auto c = j.find("configuration"); c != j.end() && c->is_object()) {
    for (const auto& [key, v] : c->items()) {
      if (v.is_string()) args += (args.empty() ? "" : ",") + v.get<std::string>();
      else if (v.is_number()) args += (args.empty() ? "" : ",") + v.dump();
      else if (v.is_boolean() && v.get<bool>()) flags += "," + key;
    }
  }
  if (!args.empty() || !flags.empty()) s += "(" + (args.empty() ? flags.substr(1) : args + flags) + ")";
  return s;
}

}  // namespace

std::shared_ptr<const CodecPipeline> CodecPipeline::from_json(const json& codecs,
                                                              const ArraySpec& chunk_spec) {
  if (!codecs.is_array())
    throw InvalidMetadata("", "codecs", "codecs must be a JSON array, got " + codecs.dump());
  // Every codec sizes its buffers from the chunk's byte count: it must fit.
  if (!checked_product(chunk_spec.shape, chunk_spec.dtype.size()))
    throw InvalidMetadata("", "chunk_shape", "a chunk of this shape holds more bytes than fit in 64 bits");
  std::vector<std::unique_ptr<ArrayToArrayCodec>> a2a;
  std::unique_ptr<ArrayToBytesCodec> a2b;
  std::vector<std::unique_ptr<BytesToBytesCodec>> b2b;
  std::size_t a2b_at = 0;
  ArraySpec spec = chunk_spec;  // the representation the next array codec sees
  for (std::size_t i = 0; i < codecs.size(); ++i) {
    const json& entry = codecs[i];
    std::string name;
    json config;  // null when absent
    bool must_understand = true;
    if (entry.is_string()) {
      name = entry.get<std::string>();
    } else if (entry.is_object()) {
      const auto n = entry.find("name");
      if (n == entry.end() || !n->is_string())
        throw InvalidMetadata("", at(i) + ".name", "a codec needs a string \"name\"");
      name = n->get<std::string>();
      if (const auto c = entry.find("configuration"); c != entry.end()) {
        if (!c->is_object() && !c->is_null())
          throw InvalidMetadata("", at(i) + ".configuration",
                                "codec '" + name + "': configuration must be a JSON object");
        config = *c;
      }
      if (const auto m = entry.find("must_understand"); m != entry.end()) {
        if (!m->is_boolean())
          throw InvalidMetadata("", at(i) + ".must_understand", "must_understand must be a boolean");
        must_understand = m->get<bool>();
      }
    } else {
      throw InvalidMetadata("", at(i), "expected a codec object or name, got " + entry.dump());
    }

    const Registered* reg = find_codec(name);
    if (!reg) {
      if (!must_understand) {
        spdlog::warn("zarrcoro: ignoring unsupported codec '{}' at {} (must_understand: false)",
                     name, at(i));
        continue;
      }
      throw UnsupportedError("", at(i), "unsupported codec '" + name + "'");
    }
    switch (reg->kind) {
      case Kind::a2a:
        if (a2b)
          throw InvalidMetadata("", "codecs",
                                "array-to-array codec '" + name + "' (" + at(i) +
                                    ") must come before the array-to-bytes codec");
        a2a.push_back(configured(i, [&] { return reg->a2a(config); }));
        spec = configured(i, [&] { return a2a.back()->encoded_spec(spec); });
        break;
      case Kind::a2b:
        if (a2b)
          throw InvalidMetadata("", "codecs",
                                "more than one array-to-bytes codec ('" + a2b->name() + "' at " +
                                    at(a2b_at) + ", '" + name + "' at " + at(i) + ")");
        a2b = configured(i, [&] { return reg->a2b(config, spec); });
        configured(i, [&] { a2b->validate(spec); });
        a2b_at = i;
        break;
      case Kind::b2b:
        if (!a2b)
          throw InvalidMetadata("", "codecs",
                                "bytes-to-bytes codec '" + name + "' (" + at(i) +
                                    ") must come after an array-to-bytes codec");
        b2b.push_back(configured(i, [&] { return reg->b2b(config); }));
        break;
    }
  }
  if (!a2b)
    throw InvalidMetadata("", "codecs", "no array-to-bytes codec (such as \"bytes\") in the list");
  return std::make_shared<const CodecPipeline>(std::move(a2a), std::move(a2b), std::move(b2b),
                                               chunk_spec);
}

CodecPipeline::CodecPipeline(std::vector<std::unique_ptr<ArrayToArrayCodec>> a2a,
                             std::unique_ptr<ArrayToBytesCodec> a2b,
                             std::vector<std::unique_ptr<BytesToBytesCodec>> b2b, ArraySpec chunk_spec)
    : a2a_(std::move(a2a)), a2b_(std::move(a2b)), b2b_(std::move(b2b)), chunk_spec_(std::move(chunk_spec)) {
  if (!a2b_) throw InvalidMetadata("", "codecs", "no array-to-bytes codec (such as \"bytes\") in the list");
  ArraySpec spec = chunk_spec_;
  for (std::size_t i = 0; i < a2a_.size(); ++i) {
    a2a_specs_.push_back(spec);
    spec = configured(i, [&] { return a2a_[i]->encoded_spec(spec); });
  }
  configured(a2a_.size(), [&] { a2b_->validate(spec); });
  a2b_spec_ = std::move(spec);
  trivial_ = a2a_.empty() && a2b_->is_identity(a2b_spec_) && b2b_.empty();
}

CodecPipeline::~CodecPipeline() = default;

json CodecPipeline::to_json() const {
  json j = json::array();
  for (const auto& c : a2a_) j.push_back(c->to_json());
  j.push_back(a2b_->to_json());
  for (const auto& c : b2b_) j.push_back(c->to_json());
  return j;
}

std::string CodecPipeline::describe() const {
  std::string s;
  for (const auto& c : to_json()) s += (s.empty() ? "" : ",") + short_form(c);
  return s;
}

std::int64_t CodecPipeline::encoded_size() const {
  std::int64_t size = a2b_->encoded_size(a2b_spec_);
  for (const auto& c : b2b_) {
    if (size < 0) return -1;
    size = c->encoded_size(static_cast<std::uint64_t>(size));
  }
  return size;
}

void CodecPipeline::decode(ByteSpan encoded, MutableByteSpan out) const {
  const std::uint64_t n = chunk_spec_.num_bytes();
  if (out.size() != n)
    throw InvalidArgument("", "out",
                          "decode: output buffer is " + std::to_string(out.size()) +
                              " bytes, the chunk is " + std::to_string(n));
  Scratch s;  // [0], [1]: bytes-to-bytes steps; [2]: array side
  const bool direct = a2a_.empty();  // the array-to-bytes codec writes straight to `out`
  const std::int64_t a2b_size = a2b_->encoded_size(a2b_spec_);
  const bool a2b_copy = a2b_->is_identity(a2b_spec_) && a2b_size == static_cast<std::int64_t>(n);
  // Variable-length elements have no fixed encoded size: their byte stream
  // is bounded by kMaxVlenChunkBytes instead.
  const std::uint64_t bound = chunk_spec_.dtype.is_variable_length()
                                  ? kMaxVlenChunkBytes
                                  : 2 * std::max<std::uint64_t>(n, a2b_size < 0 ? 0 : a2b_size) + (1 << 20);
  MutableByteSpan a2b_out = out;
  if (!direct) {
    s[2].resize(n);
    a2b_out = s[2];
  }

  ByteSpan cur = encoded;
  int cur_buf = -1;  // the scratch buffer `cur` lies in, -1 for `encoded`
  bool a2b_done = false;
  for (std::size_t k = b2b_.size(); k-- > 0;) {
    const int t = cur_buf == 0 ? 1 : 0;
    if (k == 0 && a2b_copy) {  // last step lands where the array side wants it
      b2b_[0]->decode_into(cur, a2b_out);
      a2b_done = true;
    } else if (k == 0 && a2b_size >= 0) {
      s[t].resize(static_cast<std::size_t>(a2b_size));
      b2b_[0]->decode_into(cur, s[t]);
      cur = s[t];
      cur_buf = t;
    } else {
      const ByteSpan r = b2b_[k]->decode(cur, s[t], bound);
      if (within(r, s[t])) cur_buf = t;
      cur = r;
    }
  }
  if (!a2b_done) a2b_->decode(a2b_spec_, cur, a2b_out);
  if (direct) return;

  // Array-to-array codecs in reverse, ping-ponging between [2] and [0]; the
  // first codec writes into `out`.
  Bytes* src = &s[2];
  for (std::size_t i = a2a_.size(); i-- > 0;) {
    Bytes* next = src == &s[2] ? &s[0] : &s[2];
    MutableByteSpan dst = out;
    if (i != 0) {
      next->resize(n);
      dst = *next;
    }
    a2a_[i]->decode(a2a_specs_[i], *src, dst);
    src = next;
  }
}

void CodecPipeline::encode(ByteSpan decoded, Bytes& out) const {
  const std::uint64_t n = chunk_spec_.num_bytes();
  if (decoded.size() != n)
    throw InvalidArgument("", "decoded",
                          "encode: input is " + std::to_string(decoded.size()) +
                              " bytes, the chunk is " + std::to_string(n));
  Scratch s;
  ByteSpan cur = decoded;
  int cur_buf = -1;
  for (std::size_t i = 0; i < a2a_.size(); ++i) {
    const int t = cur_buf == 0 ? 1 : 0;
    s[t].resize(n);
    a2a_[i]->encode(a2a_specs_[i], cur, s[t]);
    cur = s[t];
    cur_buf = t;
  }
  const bool a2b_copy = a2b_->is_identity(a2b_spec_) &&
                        a2b_->encoded_size(a2b_spec_) == static_cast<std::int64_t>(n);
  if (b2b_.empty()) {
    a2b_->encode(a2b_spec_, cur, out);
    return;
  }
  if (!a2b_copy) {
    a2b_->encode(a2b_spec_, cur, s[2]);
    cur = s[2];
    cur_buf = 2;
  }
  for (std::size_t k = 0; k < b2b_.size(); ++k) {
    if (k + 1 == b2b_.size()) {
      b2b_[k]->encode(cur, out);
      return;
    }
    const int t = cur_buf == 0 ? 1 : 0;
    b2b_[k]->encode(cur, s[t]);
    cur = s[t];
    cur_buf = t;
  }
}

}  // namespace zarrcoro::codecs
