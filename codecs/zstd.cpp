// The `zstd` bytes -> bytes codec (Zarr v3 extension "zstd", zarr-extensions
// codecs/zstd; format RFC 8878): configuration {"level": int, "checksum":
// bool}. Level 0 is libzstd's default, negative levels are the fast modes and
// out-of-range levels are clamped by libzstd. Frames are written with their
// content size. Decoding accepts frames with or without a content size
// (shared/cases B20: TensorStore's streaming writer omits it) and several
// concatenated frames; output never grows past the caller's bound.
// Compression and decompression contexts are per thread.
#include <algorithm>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>
#include <zstd.h>

#include <zarrcoro/error.hpp>

#include "codecs/codec.hpp"

namespace zarrcoro::codecs {
namespace {

[[noreturn]] void corrupt(const std::string& what) {
  throw CorruptChunk("", "zstd", "zstd: " + what);
}

void check(std::size_t rc) {
  if (ZSTD_isError(rc)) corrupt(ZSTD_getErrorName(rc));
}

ZSTD_CCtx* cctx() {
  thread_local std::unique_ptr<ZSTD_CCtx, decltype(&ZSTD_freeCCtx)> c(ZSTD_createCCtx(), ZSTD_freeCCtx);
  if (!c) throw std::bad_alloc();
  return c.get();
}

ZSTD_DCtx* dctx() {
  thread_local std::unique_ptr<ZSTD_DCtx, decltype(&ZSTD_freeDCtx)> d(ZSTD_createDCtx(), ZSTD_freeDCtx);
  if (!d) throw std::bad_alloc();
  return d.get();
}

// Streams every frame of `in` into `out` (capacity `cap`), growing `grow`
// up to `limit` when given; returns the decoded size.
std::size_t decompress_stream(ByteSpan in, std::byte* out, std::size_t cap, Bytes* grow,
                              std::uint64_t limit) {
  ZSTD_DCtx* d = dctx();
  ZSTD_DCtx_reset(d, ZSTD_reset_session_only);
  ZSTD_inBuffer ib{in.data(), in.size(), 0};
  ZSTD_outBuffer ob{out, cap, 0};
  std::byte probe[1];
  for (;;) {
    ZSTD_outBuffer pb{probe, 1, 0};
    ZSTD_outBuffer* o = &ob;
    if (ob.pos == ob.size) {
      if (grow && ob.size < limit) {
        ob.size = static_cast<std::size_t>(
            std::min<std::uint64_t>(limit, std::max<std::size_t>(ob.size * 2, 1 << 16)));
        grow->resize(ob.size);
        ob.dst = grow->data();
      } else {
        o = &pb;  // full: any further output means the chunk is too large
      }
    }
    const std::size_t in_before = ib.pos, out_before = o->pos;
    const std::size_t rc = ZSTD_decompressStream(d, o, &ib);
    check(rc);
    if (pb.pos) corrupt("decoded data exceeds the expected " + std::to_string(ob.size) + " bytes");
    if (rc == 0 && ib.pos == ib.size) return ob.pos;  // every frame complete and flushed
    if (ib.pos == in_before && o->pos == out_before)
      corrupt(ib.pos == ib.size ? "truncated frame" : "decoder made no progress");
  }
}

class ZstdCodec final : public BytesToBytesCodec {
 public:
  ZstdCodec(int level, bool checksum) : level_(level), checksum_(checksum) {}

  std::string name() const override { return "zstd"; }
  nlohmann::json to_json() const override {
    return {{"name", "zstd"}, {"configuration", {{"level", level_}, {"checksum", checksum_}}}};
  }

  void encode(ByteSpan in, Bytes& out) const override {
    ZSTD_CCtx* c = cctx();
    ZSTD_CCtx_reset(c, ZSTD_reset_session_only);
    ZSTD_CCtx_setParameter(c, ZSTD_c_compressionLevel, level_);
    ZSTD_CCtx_setParameter(c, ZSTD_c_checksumFlag, checksum_ ? 1 : 0);
    ZSTD_CCtx_setParameter(c, ZSTD_c_contentSizeFlag, 1);
    out.resize(ZSTD_compressBound(in.size()));
    const std::size_t n = ZSTD_compress2(c, out.data(), out.size(), in.data(), in.size());
    if (ZSTD_isError(n)) throw std::runtime_error(std::string("zstd: ") + ZSTD_getErrorName(n));
    out.resize(n);
  }

  ByteSpan decode(ByteSpan in, Bytes& scratch, std::uint64_t max_size) const override {
    const auto size = content_size(in);
    if (size == ZSTD_CONTENTSIZE_UNKNOWN) {
      scratch.resize(static_cast<std::size_t>(
          std::min<std::uint64_t>(max_size, std::max<std::size_t>(in.size() * 4, 1 << 16))));
      scratch.resize(decompress_stream(in, scratch.data(), scratch.size(), &scratch, max_size));
      return scratch;
    }
    if (size > max_size)
      corrupt("frame content size " + std::to_string(size) + " exceeds the expected " +
              std::to_string(max_size) + " bytes");
    scratch.resize(size);
    decompress_known(in, scratch);
    return scratch;
  }

  void decode_into(ByteSpan in, MutableByteSpan out) const override {
    const auto size = content_size(in);
    if (size == ZSTD_CONTENTSIZE_UNKNOWN) {
      const std::size_t n = decompress_stream(in, out.data(), out.size(), nullptr, out.size());
      if (n != out.size())
        corrupt("decoded " + std::to_string(n) + " bytes, expected " + std::to_string(out.size()));
      return;
    }
    if (size != out.size())
      corrupt("frame content size is " + std::to_string(size) + " bytes, expected " +
              std::to_string(out.size()));
    decompress_known(in, out);
  }

 private:
  // Total decoded size of all frames, or ZSTD_CONTENTSIZE_UNKNOWN if a frame
  // header leaves it out. Only frame and block headers are read.
  static unsigned long long content_size(ByteSpan in) {
    if (in.empty()) corrupt("empty input is not a zstd frame");
    unsigned long long total = 0;
    for (std::size_t pos = 0; pos < in.size();) {
      const auto size = ZSTD_getFrameContentSize(in.data() + pos, in.size() - pos);
      if (size == ZSTD_CONTENTSIZE_ERROR)
        corrupt(pos ? std::to_string(in.size() - pos) + " trailing bytes are not a zstd frame"
                    : "not a zstd frame (bad magic number or frame header)");
      if (size == ZSTD_CONTENTSIZE_UNKNOWN) return size;
      const std::size_t frame = ZSTD_findFrameCompressedSize(in.data() + pos, in.size() - pos);
      check(frame);
      if (total + size < total) corrupt("content size overflows");
      total += size;
      pos += frame;
    }
    return total;
  }

  static void decompress_known(ByteSpan in, MutableByteSpan out) {
    const std::size_t n = ZSTD_decompressDCtx(dctx(), out.data(), out.size(), in.data(), in.size());
    check(n);
    if (n != out.size())
      corrupt("decoded " + std::to_string(n) + " bytes, frame header says " + std::to_string(out.size()));
  }

  int level_;
  bool checksum_;
};

}  // namespace

std::unique_ptr<BytesToBytesCodec> make_zstd_codec(const nlohmann::json& config) {
  if (!config.is_null() && !config.is_object())
    throw InvalidMetadata("", "", "zstd: configuration must be a JSON object");
  int level = 0;
  bool checksum = false;
  if (config.is_object()) {
    for (const auto& [key, value] : config.items()) {
      if (key == "level") {
        if (!value.is_number_integer() || value.get<std::int64_t>() < -(1 << 24) ||
            value.get<std::int64_t>() > (1 << 24))
          throw InvalidMetadata("", "level", "zstd: level must be an integer, got " + value.dump());
        level = value.get<int>();
      } else if (key == "checksum") {
        if (!value.is_boolean())
          throw InvalidMetadata("", "checksum", "zstd: checksum must be a boolean, got " + value.dump());
        checksum = value.get<bool>();
      } else {
        throw InvalidMetadata("", key, "zstd: unknown configuration member '" + key + "'");
      }
    }
  }
  return std::make_unique<ZstdCodec>(level, checksum);
}

}  // namespace zarrcoro::codecs
