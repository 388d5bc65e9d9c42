// The `blosc` bytes -> bytes codec (Zarr v3 codec spec "blosc", version 1.0),
// on Debian's c-blosc 1.x: configuration {"cname": "lz4"|"lz4hc"|"blosclz"|
// "zstd"|"zlib"|"snappy" (as built), "clevel": 0..9, "shuffle": "noshuffle"|
// "shuffle"|"bitshuffle", "typesize": 1.. (required unless noshuffle),
// "blocksize": 0 (automatic) or bytes}. The numcodecs integer form of shuffle
// (0, 1, 2) is accepted too and written back as the name. The Zarr v2
// `blosc` compressor is translated to this codec (codecs/v2.cpp).
//
// Only the context functions (blosc_compress_ctx / blosc_decompress_ctx) are
// used, with one internal thread: no global state, no blosc_init, safe on
// any number of pool threads at once. Decoding validates the frame and reads
// the decoded size from its header before touching the output, so a chunk
// whose header disagrees with the expected chunk size (shared/cases B11: edge
// chunks are stored full-size) is a CorruptChunk, never a short read.
#include <blosc.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include <zarrcoro/error.hpp>

#include "codecs/codec.hpp"

namespace zarrcoro::codecs {
namespace {

[[noreturn]] void corrupt(const std::string& what) { throw CorruptChunk("", "blosc", "blosc: " + what); }

constexpr const char* kShuffleNames[] = {"noshuffle", "shuffle", "bitshuffle"};

class BloscCodec final : public BytesToBytesCodec {
 public:
  BloscCodec(std::string cname, int clevel, int shuffle, std::size_t typesize, std::size_t blocksize)
      : cname_(std::move(cname)), clevel_(clevel), shuffle_(shuffle), typesize_(typesize), blocksize_(blocksize) {}

  std::string name() const override { return "blosc"; }

  nlohmann::json to_json() const override {
    nlohmann::json c{{"cname", cname_}, {"clevel", clevel_}, {"shuffle", kShuffleNames[shuffle_]}};
    if (typesize_) c["typesize"] = typesize_;
    c["blocksize"] = blocksize_;
    return {{"name", "blosc"}, {"configuration", c}};
  }

  void encode(ByteSpan in, Bytes& out) const override {
    if (in.size() > BLOSC_MAX_BUFFERSIZE)
      throw InvalidArgument("", "blosc", "blosc: a chunk of " + std::to_string(in.size()) +
                                             " bytes exceeds c-blosc's limit of " +
                                             std::to_string(BLOSC_MAX_BUFFERSIZE));
    out.resize(in.size() + BLOSC_MAX_OVERHEAD);
    const int n = blosc_compress_ctx(clevel_, shuffle_, typesize_ ? typesize_ : 1, in.size(), in.data(),
                                     out.data(), out.size(), cname_.c_str(), blocksize_, 1);
    if (n <= 0) throw std::runtime_error("blosc: compression failed (" + std::to_string(n) + ")");
    out.resize(static_cast<std::size_t>(n));
  }

  ByteSpan decode(ByteSpan in, Bytes& scratch, std::uint64_t max_size) const override {
    const std::size_t n = decoded_size(in);
    if (n > max_size)
      corrupt("header says " + std::to_string(n) + " decoded bytes, more than the expected " +
              std::to_string(max_size));
    scratch.resize(n);
    decompress(in, scratch);
    return scratch;
  }

  void decode_into(ByteSpan in, MutableByteSpan out) const override {
    const std::size_t n = decoded_size(in);
    if (n != out.size())
      corrupt("header says " + std::to_string(n) + " decoded bytes, expected " + std::to_string(out.size()) +
              " (the full chunk)");
    decompress(in, out);
  }

 private:
  static std::size_t decoded_size(ByteSpan in) {
    if (in.size() < BLOSC_MIN_HEADER_LENGTH)
      corrupt(std::to_string(in.size()) + " bytes are too short for a blosc header");
    std::size_t n = 0;
    if (blosc_cbuffer_validate(in.data(), in.size(), &n) != 0)
      corrupt("invalid frame (bad header, or compressed size beyond the " + std::to_string(in.size()) +
              " bytes given)");
    return n;
  }

  static void decompress(ByteSpan in, MutableByteSpan out) {
    if (out.empty()) return;
    const int n = blosc_decompress_ctx(in.data(), out.data(), out.size(), 1);
    if (n <= 0 || static_cast<std::size_t>(n) != out.size())
      corrupt("decompression failed (" + std::to_string(n) + ")");
  }

  std::string cname_;
  int clevel_, shuffle_;
  std::size_t typesize_, blocksize_;
};

std::int64_t integer(const nlohmann::json& v, const char* key, std::int64_t lo, std::int64_t hi) {
  if (!v.is_number_integer() || v.get<std::int64_t>() < lo || v.get<std::int64_t>() > hi)
    throw InvalidMetadata("", key,
                          std::string("blosc: ") + key + " must be an integer " + std::to_string(lo) + ".." +
                              std::to_string(hi) + ", got " + v.dump());
  return v.get<std::int64_t>();
}

}  // namespace

std::unique_ptr<BytesToBytesCodec> make_blosc_codec(const nlohmann::json& config) {
  if (!config.is_object()) throw InvalidMetadata("", "", "blosc: a configuration object is required");
  for (const char* k : {"cname", "clevel", "shuffle"})
    if (!config.contains(k)) throw InvalidMetadata("", k, std::string("blosc: \"") + k + "\" is required");
  std::string cname;
  int clevel = 5, shuffle = 0;
  std::size_t typesize = 0, blocksize = 0;
  for (const auto& [key, v] : config.items()) {
    if (key == "cname") {
      if (!v.is_string()) throw InvalidMetadata("", "cname", "blosc: cname must be a string, got " + v.dump());
      cname = v.get<std::string>();
      if (blosc_compname_to_compcode(cname.c_str()) < 0)
        throw UnsupportedError("", "cname",
                               "blosc: compressor '" + cname + "' is not available (this c-blosc has " +
                                   blosc_list_compressors() + ")");
    } else if (key == "clevel") {
      clevel = static_cast<int>(integer(v, "clevel", 0, 9));
    } else if (key == "shuffle") {
      if (v.is_number_integer()) {
        shuffle = static_cast<int>(integer(v, "shuffle", 0, 2));
      } else {
        const auto it = std::find(std::begin(kShuffleNames), std::end(kShuffleNames), v.is_string() ? v.get<std::string>() : "");
        if (it == std::end(kShuffleNames))
          throw InvalidMetadata("", "shuffle",
                                "blosc: shuffle must be \"noshuffle\", \"shuffle\" or \"bitshuffle\", got " + v.dump());
        shuffle = static_cast<int>(it - std::begin(kShuffleNames));
      }
    } else if (key == "typesize") {
      if (!v.is_null()) typesize = static_cast<std::size_t>(integer(v, "typesize", 1, INT32_MAX));
    } else if (key == "blocksize") {
      if (!v.is_null()) blocksize = static_cast<std::size_t>(integer(v, "blocksize", 0, INT32_MAX));
    } else {
      throw InvalidMetadata("", key, "blosc: unknown configuration member '" + key + "'");
    }
  }
  if (shuffle != 0 && typesize == 0)
    throw InvalidMetadata("", "typesize", "blosc: typesize is required when shuffle is not \"noshuffle\"");
  return std::make_unique<BloscCodec>(std::move(cname), clevel, shuffle, typesize, blocksize);
}

}  // namespace zarrcoro::codecs
