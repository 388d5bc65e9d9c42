// The numcodecs `lz4` codec, a Zarr v2 compressor/filter (not a Zarr v3 core
// codec): a 4-byte little-endian decoded size, then one LZ4 block (liblz4).
// Configuration {"acceleration": int >= 1 (default 1)}. Decoding checks the
// stated size against the expected one before decompressing.
#include <climits>
#include <cstring>
#include <string>

#include <lz4.h>
#include <nlohmann/json.hpp>

#include <zarrcoro/error.hpp>

#include "codecs/codec.hpp"

namespace zarrcoro::codecs {
namespace {

[[noreturn]] void corrupt(const std::string& what) { throw CorruptChunk("", "lz4", "lz4: " + what); }

class Lz4Codec final : public BytesToBytesCodec {
 public:
  Lz4Codec(int acceleration, std::string_view name) : acceleration_(acceleration), name_(name) {}

  std::string name() const override { return name_; }
  nlohmann::json to_json() const override {
    return {{"name", name_}, {"configuration", {{"acceleration", acceleration_}}}};
  }

  void encode(ByteSpan in, Bytes& out) const override {
    if (in.size() > LZ4_MAX_INPUT_SIZE)
      throw InvalidArgument("", "lz4", "lz4: a chunk of " + std::to_string(in.size()) + " bytes is too large");
    const int n = static_cast<int>(in.size());
    out.resize(4 + static_cast<std::size_t>(LZ4_compressBound(n)));
    const auto size = static_cast<std::uint32_t>(n);
    std::memcpy(out.data(), &size, 4);  // little-endian host
    const int c = LZ4_compress_fast(reinterpret_cast<const char*>(in.data()), reinterpret_cast<char*>(out.data() + 4),
                                    n, static_cast<int>(out.size() - 4), acceleration_);
    if (c <= 0 && n > 0) throw std::runtime_error("lz4: compression failed");
    out.resize(4 + static_cast<std::size_t>(c));
  }

  ByteSpan decode(ByteSpan in, Bytes& scratch, std::uint64_t max_size) const override {
    const std::uint32_t n = stated_size(in);
    if (n > max_size)
      corrupt("header says " + std::to_string(n) + " decoded bytes, more than the expected " + std::to_string(max_size));
    scratch.resize(n);
    decompress(in, scratch);
    return scratch;
  }

  void decode_into(ByteSpan in, MutableByteSpan out) const override {
    const std::uint32_t n = stated_size(in);
    if (n != out.size())
      corrupt("header says " + std::to_string(n) + " decoded bytes, expected " + std::to_string(out.size()));
    decompress(in, out);
  }

 private:
  static std::uint32_t stated_size(ByteSpan in) {
    if (in.size() < 4) corrupt("missing the 4-byte size header");
    std::uint32_t n;
    std::memcpy(&n, in.data(), 4);
    if (n > static_cast<std::uint32_t>(INT_MAX)) corrupt("stated size " + std::to_string(n) + " is too large");
    return n;
  }

  static void decompress(ByteSpan in, MutableByteSpan out) {
    const int n = LZ4_decompress_safe(reinterpret_cast<const char*>(in.data() + 4), reinterpret_cast<char*>(out.data()),
                                      static_cast<int>(in.size() - 4), static_cast<int>(out.size()));
    if (n < 0 || static_cast<std::size_t>(n) != out.size())
      corrupt(n < 0 ? "invalid LZ4 block" : "decoded " + std::to_string(n) + " bytes, header says " +
                                                std::to_string(out.size()));
  }

  int acceleration_;
  std::string name_;
};

}  // namespace

std::unique_ptr<BytesToBytesCodec> make_lz4_codec(const nlohmann::json& config, std::string_view name) {
  int acceleration = 1;
  if (!config.is_null() && !config.is_object())
    throw InvalidMetadata("", "", "lz4: configuration must be a JSON object");
  if (config.is_object())
    for (const auto& [key, v] : config.items()) {
      if (key != "acceleration") throw InvalidMetadata("", key, "lz4: unknown configuration member '" + key + "'");
      if (!v.is_number_integer() || v.get<std::int64_t>() < 1 || v.get<std::int64_t>() > 65537)
        throw InvalidMetadata("", "acceleration", "lz4: acceleration must be an integer >= 1, got " + v.dump());
      acceleration = v.get<int>();
    }
  return std::make_unique<Lz4Codec>(acceleration, name);
}

}  // namespace zarrcoro::codecs
