// The `gzip` bytes -> bytes codec (Zarr v3 codec spec "gzip", version 1.0):
// DEFLATE (RFC 1951) in gzip file framing (RFC 1952), `level` 0..9. Decoding
// accepts gzip framing only (concatenated members and trailing zero padding
// are allowed, as gzip(1) does); a zlib (RFC 1950) stream labelled gzip is a
// corrupt chunk, never silently accepted (shared/cases B21).
//
// The same code serves `zlib` (RFC 1950 framing), which is not a v3 codec but
// the v2 `zlib` compressor. Deflate/inflate states are per thread and reset
// between chunks.
#include <algorithm>
#include <climits>
#include <cstring>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>
#include <zlib.h>

#include <zarrcoro/error.hpp>

#include "codecs/codec.hpp"

namespace zarrcoro::codecs {
namespace {

enum class Framing { gzip, zlib };

constexpr int window_bits(Framing f) { return f == Framing::gzip ? 15 + 16 : 15; }
const char* codec_name(Framing f) { return f == Framing::gzip ? "gzip" : "zlib"; }

[[noreturn]] void corrupt(Framing f, const std::string& what) {
  throw CorruptChunk("", codec_name(f), std::string(codec_name(f)) + ": " + what);
}

// One per thread and framing; a level change on a freshly reset stream is cheap.
struct Deflater {
  z_stream zs{};
  int level = INT_MIN;  // INT_MIN: not initialised
  ~Deflater() {
    if (level != INT_MIN) deflateEnd(&zs);
  }
  z_stream& get(Framing f, int lvl) {
    if (level == INT_MIN) {
      zs = z_stream{};
      if (deflateInit2(&zs, lvl, Z_DEFLATED, window_bits(f), 8, Z_DEFAULT_STRATEGY) != Z_OK)
        throw std::bad_alloc();
    } else {
      deflateReset(&zs);
      if (lvl != level && deflateParams(&zs, lvl, Z_DEFAULT_STRATEGY) != Z_OK) {
        deflateEnd(&zs);
        level = INT_MIN;
        return get(f, lvl);
      }
    }
    level = lvl;
    return zs;
  }
};

struct Inflater {
  z_stream zs{};
  bool ready = false;
  ~Inflater() {
    if (ready) inflateEnd(&zs);
  }
  z_stream& get(Framing f) {
    if (ready) {
      inflateReset(&zs);
      return zs;
    }
    zs = z_stream{};
    if (inflateInit2(&zs, window_bits(f)) != Z_OK) throw std::bad_alloc();
    ready = true;
    return zs;
  }
};

Deflater& deflater(Framing f) {
  thread_local Deflater gz, zl;
  return f == Framing::gzip ? gz : zl;
}
Inflater& inflater(Framing f) {
  thread_local Inflater gz, zl;
  return f == Framing::gzip ? gz : zl;
}

// zlib counts in uInt; feed at most this much per call.
constexpr std::size_t kStep = UINT_MAX;

void deflate_all(Framing f, int level, ByteSpan in, Bytes& out) {
  z_stream& zs = deflater(f).get(f, level);
  out.resize(std::max<std::size_t>(deflateBound(&zs, static_cast<uLong>(in.size())), 64));
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<std::byte*>(in.data()));
  std::size_t in_left = in.size(), done = 0;
  for (;;) {
    if (done == out.size()) out.resize(out.size() * 2);
    const std::size_t in_step = std::min(in_left, kStep), out_step = std::min(out.size() - done, kStep);
    zs.avail_in = static_cast<uInt>(in_step);
    zs.next_out = reinterpret_cast<Bytef*>(out.data() + done);
    zs.avail_out = static_cast<uInt>(out_step);
    const int rc = deflate(&zs, in_left == in_step ? Z_FINISH : Z_NO_FLUSH);
    in_left -= in_step - zs.avail_in;
    done += out_step - zs.avail_out;
    if (rc == Z_STREAM_END) break;
    if (rc != Z_OK && rc != Z_BUF_ERROR)
      throw std::runtime_error(std::string(codec_name(f)) + ": deflate failed");
  }
  out.resize(done);
}

// Where inflate writes: a fixed span (decode_into) or a buffer that may grow
// up to `limit` (decode).
struct Sink {
  std::byte* data;
  std::size_t cap;
  Bytes* grow;
  std::uint64_t limit;
};

// Inflates every member of `in` into `sink`; returns the decoded size.
std::size_t inflate_all(Framing f, ByteSpan in, Sink& sink) {
  if (f == Framing::gzip && in.size() >= 2 && static_cast<unsigned>(in[0]) == 0x78 &&
      ((static_cast<unsigned>(in[0]) << 8) | static_cast<unsigned>(in[1])) % 31 == 0)
    corrupt(f, "data is zlib (RFC 1950) framed, not gzip (RFC 1952)");
  if (f == Framing::gzip && (in.size() < 2 || static_cast<unsigned>(in[0]) != 0x1f ||
                             static_cast<unsigned>(in[1]) != 0x8b))
    corrupt(f, "not gzip (RFC 1952) data: bad magic bytes");
  z_stream& zs = inflater(f).get(f);
  const std::byte* ip = in.data();
  std::size_t in_left = in.size(), done = 0;
  unsigned char probe[1];
  for (;;) {
    bool probing = false;
    if (done == sink.cap) {
      if (sink.grow && sink.cap < sink.limit) {
        sink.cap = static_cast<std::size_t>(
            std::min<std::uint64_t>(sink.limit, std::max<std::size_t>(sink.cap * 2, 1 << 16)));
        sink.grow->resize(sink.cap);
        sink.data = sink.grow->data();
      } else {
        probing = true;  // full: any further output means the chunk is too large
      }
    }
    const std::size_t in_step = std::min(in_left, kStep);
    const std::size_t out_step = probing ? 1 : std::min(sink.cap - done, kStep);
    zs.next_in = reinterpret_cast<Bytef*>(const_cast<std::byte*>(ip));
    zs.avail_in = static_cast<uInt>(in_step);
    zs.next_out = probing ? probe : reinterpret_cast<Bytef*>(sink.data + done);
    zs.avail_out = static_cast<uInt>(out_step);
    const int rc = inflate(&zs, Z_NO_FLUSH);
    const std::size_t used = in_step - zs.avail_in, produced = out_step - zs.avail_out;
    ip += used;
    in_left -= used;
    if (probing && produced)
      corrupt(f, "decoded data exceeds the expected " + std::to_string(sink.cap) + " bytes");
    done += produced;
    if (rc == Z_STREAM_END) {
      if (f == Framing::zlib) {
        if (in_left) corrupt(f, std::to_string(in_left) + " trailing bytes after the zlib stream");
        return done;
      }
      // gzip: another member may follow; zero padding is ignored.
      if (std::all_of(ip, ip + in_left, [](std::byte b) { return b == std::byte{0}; })) return done;
      if (in_left < 2 || static_cast<unsigned>(ip[0]) != 0x1f || static_cast<unsigned>(ip[1]) != 0x8b)
        corrupt(f, std::to_string(in_left) + " trailing bytes after the gzip member");
      inflateReset(&zs);
      continue;
    }
    if (rc == Z_DATA_ERROR)
      corrupt(f, std::string("invalid compressed data: ") + (zs.msg ? zs.msg : "data error"));
    if (rc == Z_MEM_ERROR) throw std::bad_alloc();
    if (rc == Z_NEED_DICT) corrupt(f, "stream needs a preset dictionary");
    if (used == 0 && produced == 0)
      corrupt(f, in_left == 0 ? "truncated stream" : "decoder made no progress");
  }
}

class DeflateCodec final : public BytesToBytesCodec {
 public:
  DeflateCodec(Framing f, int level, std::string_view name) : f_(f), level_(level), name_(name) {}

  std::string name() const override { return name_; }
  nlohmann::json to_json() const override {
    return {{"name", name_}, {"configuration", {{"level", level_}}}};
  }

  void encode(ByteSpan in, Bytes& out) const override { deflate_all(f_, level_, in, out); }

  ByteSpan decode(ByteSpan in, Bytes& scratch, std::uint64_t max_size) const override {
    // The gzip trailer's ISIZE (size mod 2^32 of the last member) is a good first guess.
    std::uint64_t guess = std::max<std::uint64_t>(in.size() * 4, 1 << 16);
    if (f_ == Framing::gzip && in.size() >= 18) {
      std::uint32_t isize;
      std::memcpy(&isize, in.data() + in.size() - 4, 4);
      guess = isize;
    }
    guess = std::min(guess, max_size);
    scratch.resize(guess);
    Sink sink{scratch.data(), scratch.size(), &scratch, max_size};
    const std::size_t n = inflate_all(f_, in, sink);
    scratch.resize(n);
    return scratch;
  }

  void decode_into(ByteSpan in, MutableByteSpan out) const override {
    Sink sink{out.data(), out.size(), nullptr, out.size()};
    const std::size_t n = inflate_all(f_, in, sink);
    if (n != out.size())
      corrupt(f_, "decoded " + std::to_string(n) + " bytes, expected " + std::to_string(out.size()));
  }

 private:
  Framing f_;
  int level_;
  std::string name_;
};

std::unique_ptr<BytesToBytesCodec> make(Framing f, const nlohmann::json& config, int min_level,
                                        std::string_view registered) {
  const std::string name(registered);
  if (!config.is_object() || !config.contains("level"))
    throw InvalidMetadata("", "level", name + ": configuration with \"level\" is required");
  for (const auto& [key, value] : config.items())
    if (key != "level")
      throw InvalidMetadata("", key, name + ": unknown configuration member '" + key + "'");
  const auto& l = config["level"];
  if (!l.is_number_integer() || l.get<std::int64_t>() < min_level || l.get<std::int64_t>() > 9)
    throw InvalidMetadata("", "level",
                          name + ": level must be an integer " + std::to_string(min_level) +
                              "..9, got " + l.dump());
  return std::make_unique<DeflateCodec>(f, l.get<int>(), registered);
}

}  // namespace

std::unique_ptr<BytesToBytesCodec> make_gzip_codec(const nlohmann::json& config) {
  return make(Framing::gzip, config, 0, "gzip");
}

std::unique_ptr<BytesToBytesCodec> make_zlib_codec(const nlohmann::json& config, std::string_view name) {
  return make(Framing::zlib, config, -1, name);
}

}  // namespace zarrcoro::codecs
