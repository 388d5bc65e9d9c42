// The vlen-utf8 and vlen-bytes array -> bytes codecs; see codecs/vlen.hpp.
#include "codecs/vlen.hpp"

#include <cstring>
#include <string>

#include <nlohmann/json.hpp>

#include <zarrcoro/error.hpp>

#include "core/text.hpp"

namespace zarrcoro::codecs {

namespace {
thread_local VlenHeap* current_heap = nullptr;

std::uint32_t load_u32(const std::byte* p) {
  std::uint32_t v;
  std::memcpy(&v, p, 4);
  return v;  // little-endian host
}

void store_u32(std::byte* p, std::uint32_t v) { std::memcpy(p, &v, 4); }

class VlenCodec final : public ArrayToBytesCodec {
 public:
  explicit VlenCodec(bool utf8) : utf8_(utf8) {}

  std::string name() const override { return utf8_ ? "vlen-utf8" : "vlen-bytes"; }

  nlohmann::json to_json() const override {
    return {{"name", name()}, {"configuration", nlohmann::json::object()}};
  }

  void validate(const ArraySpec& spec) const override {
    const DataTypeKind want = utf8_ ? DataTypeKind::string : DataTypeKind::vlen_bytes;
    if (spec.dtype.kind() != want)
      throw InvalidMetadata("", "", name() + ": needs the data type " +
                                        std::string(DataType(want).name()) + ", not " + spec.dtype.describe());
  }

  bool is_identity(const ArraySpec&) const override { return false; }

  void encode(const ArraySpec& spec, ByteSpan in, Bytes& out) const override {
    const std::uint64_t n = spec.num_elements();
    if (in.size() != n * sizeof(VlenView))
      throw InvalidArgument("", "in", name() + ": input is " + std::to_string(in.size()) + " bytes, expected " +
                                          std::to_string(n * sizeof(VlenView)));
    if (n > UINT32_MAX) throw InvalidArgument("", "", name() + ": more than 2^32 - 1 items in one chunk");
    std::uint64_t total = 4;
    for (std::uint64_t i = 0; i < n; ++i) {
      VlenView v;
      std::memcpy(&v, in.data() + i * sizeof(VlenView), sizeof v);
      if (v.size > UINT32_MAX)
        throw InvalidArgument("", "", name() + ": item " + std::to_string(i) + " is longer than 2^32 - 1 bytes");
      if (utf8_ && !detail::valid_utf8({v.data ? v.data : "", v.size}))
        throw InvalidArgument("", "", name() + ": item " + std::to_string(i) + " of the chunk is not valid UTF-8");
      total += 4 + v.size;
    }
    if (total > kMaxVlenChunkBytes)  // else written, then unreadable: decoders stop there
      throw InvalidArgument("", "", name() + ": the chunk's encoded stream would be " + std::to_string(total) +
                                        " bytes, more than the " + std::to_string(kMaxVlenChunkBytes) +
                                        " a chunk may hold (use smaller chunks)");
    out.resize(total);
    std::byte* p = out.data();
    store_u32(p, static_cast<std::uint32_t>(n));
    p += 4;
    for (std::uint64_t i = 0; i < n; ++i) {
      VlenView v;
      std::memcpy(&v, in.data() + i * sizeof(VlenView), sizeof v);
      store_u32(p, static_cast<std::uint32_t>(v.size));
      p += 4;
      if (v.size) std::memcpy(p, v.data, v.size);
      p += v.size;
    }
  }

  void decode(const ArraySpec& spec, ByteSpan in, MutableByteSpan out) const override {
    const std::uint64_t n = spec.num_elements();
    if (out.size() != n * sizeof(VlenView))
      throw InvalidArgument("", "out", name() + ": output buffer is " + std::to_string(out.size()) +
                                           " bytes, expected " + std::to_string(n * sizeof(VlenView)));
    if (in.size() < 4)
      throw CorruptChunk("", name(), "the chunk is " + std::to_string(in.size()) +
                                         " bytes, too short for its 4-byte item count");
    const std::uint32_t count = load_u32(in.data());
    if (count != n)
      throw CorruptChunk("", name(), "the chunk holds " + std::to_string(count) + " items, its shape " +
                                         std::to_string(n) + " elements");
    // First pass: every length within the bytes, before anything is kept.
    std::size_t pos = 4;
    for (std::uint64_t i = 0; i < n; ++i) {
      if (in.size() - pos < 4)
        throw CorruptChunk("", name(), "item " + std::to_string(i) + ": the chunk ends inside its length");
      const std::uint32_t len = load_u32(in.data() + pos);
      pos += 4;
      if (len > in.size() - pos)
        throw CorruptChunk("", name(), "item " + std::to_string(i) + ": length " + std::to_string(len) + " but only " +
                                           std::to_string(in.size() - pos) + " bytes remain");
      if (utf8_ && !detail::valid_utf8({reinterpret_cast<const char*>(in.data() + pos), len}))
        throw CorruptChunk("", name(), "item " + std::to_string(i) + " is not valid UTF-8");
      pos += len;
    }
    if (!current_heap)
      throw InvalidArgument("", "vlen", name() + ": decoded outside an operation that owns the strings");
    const char* base = current_heap->keep(in.first(pos));
    pos = 4;
    for (std::uint64_t i = 0; i < n; ++i) {
      const std::uint32_t len = load_u32(in.data() + pos);
      pos += 4;
      const VlenView v{len ? base + pos : nullptr, len};
      std::memcpy(out.data() + i * sizeof(VlenView), &v, sizeof v);
      pos += len;
    }
  }

 private:
  bool utf8_;
};

void no_configuration(const nlohmann::json& config, const char* name) {
  if (config.is_object() && !config.empty())
    throw InvalidMetadata("", "", std::string(name) + " takes no configuration, got " + config.dump());
}

}  // namespace

bool all_views_equal(ByteSpan views, std::string_view value) {
  for (std::size_t off = 0; off + sizeof(VlenView) <= views.size(); off += sizeof(VlenView)) {
    VlenView v;
    std::memcpy(&v, views.data() + off, sizeof v);
    if (v.size != value.size() || (v.size && std::memcmp(v.data, value.data(), v.size) != 0)) return false;
  }
  return true;
}

const char* VlenHeap::keep(ByteSpan bytes) {
  if (bytes.empty()) return nullptr;
  auto block = std::make_unique<char[]>(bytes.size());
  std::memcpy(block.get(), bytes.data(), bytes.size());
  const char* p = block.get();
  std::lock_guard lock(mu_);
  blocks_.push_back(std::move(block));
  return p;
}

VlenHeapScope::VlenHeapScope(VlenHeap* heap) : previous_(current_heap) { current_heap = heap; }
VlenHeapScope::~VlenHeapScope() { current_heap = previous_; }

std::unique_ptr<ArrayToBytesCodec> make_vlen_utf8_codec(const nlohmann::json& config, const ArraySpec&) {
  no_configuration(config, "vlen-utf8");
  return std::make_unique<VlenCodec>(true);
}

std::unique_ptr<ArrayToBytesCodec> make_vlen_bytes_codec(const nlohmann::json& config, const ArraySpec&) {
  no_configuration(config, "vlen-bytes");
  return std::make_unique<VlenCodec>(false);
}

}  // namespace zarrcoro::codecs
