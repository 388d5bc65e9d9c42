// The `crc32c` bytes -> bytes codec (Zarr v3 codec spec "crc32c", version
// 1.0): encoding appends the CRC-32C of the input as 4 little-endian bytes;
// decoding checks and strips it. There is no configuration (an absent or
// empty object). Decoding returns a view of its input: no copy.
#include <cstdio>
#include <cstring>
#include <string>

#include <nlohmann/json.hpp>

#include <zarrcoro/error.hpp>

#include "codecs/codec.hpp"

namespace zarrcoro::codecs {
namespace {

std::string hex32(std::uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

class Crc32cCodec final : public BytesToBytesCodec {
 public:
  std::string name() const override { return "crc32c"; }
  nlohmann::json to_json() const override { return {{"name", "crc32c"}}; }
  std::int64_t encoded_size(std::uint64_t decoded_size) const override {
    return static_cast<std::int64_t>(decoded_size + 4);
  }

  void encode(ByteSpan in, Bytes& out) const override {
    const std::uint32_t crc = crc32c(in);  // little-endian host
    out.resize(in.size() + 4);
    if (!in.empty()) std::memcpy(out.data(), in.data(), in.size());
    std::memcpy(out.data() + in.size(), &crc, 4);
  }

  ByteSpan decode(ByteSpan in, Bytes&, std::uint64_t max_size) const override {
    const ByteSpan payload = verify(in);
    if (payload.size() > max_size)
      throw CorruptChunk("", "crc32c",
                         "crc32c: payload is " + std::to_string(payload.size()) +
                             " bytes, more than the expected " + std::to_string(max_size));
    return payload;
  }

  void decode_into(ByteSpan in, MutableByteSpan out) const override {
    const ByteSpan payload = verify(in);
    if (payload.size() != out.size())
      throw CorruptChunk("", "crc32c",
                         "crc32c: payload is " + std::to_string(payload.size()) +
                             " bytes, expected " + std::to_string(out.size()));
    if (!payload.empty()) std::memcpy(out.data(), payload.data(), payload.size());
  }

 private:
  static ByteSpan verify(ByteSpan in) {
    if (in.size() < 4)
      throw CorruptChunk("", "crc32c",
                         "crc32c: chunk is " + std::to_string(in.size()) +
                             " bytes, too short for a checksum");
    const ByteSpan payload = in.first(in.size() - 4);
    std::uint32_t stored;
    std::memcpy(&stored, in.data() + payload.size(), 4);
    const std::uint32_t computed = crc32c(payload);
    if (stored != computed)
      throw CorruptChunk("", "crc32c",
                         "crc32c: checksum mismatch (stored " + hex32(stored) + ", computed " +
                             hex32(computed) + ")");
    return payload;
  }
};

}  // namespace

std::unique_ptr<BytesToBytesCodec> make_crc32c_codec(const nlohmann::json& config) {
  if (!config.is_null() && !(config.is_object() && config.empty()))
    throw InvalidMetadata("", "", "crc32c: takes no configuration, got " + config.dump());
  return std::make_unique<Crc32cCodec>();
}

}  // namespace zarrcoro::codecs
