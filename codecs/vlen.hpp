// Variable-length strings and bytes inside the engine, and the codecs that
// store them (zarr-extensions `vlen-utf8` and `vlen-bytes`, array -> bytes;
// numcodecs VLenUTF8 / VLenBytes, the Zarr v2 object codecs of the same ids).
//
// In memory, a variable-length element is a 16-byte VlenView {data, size}:
// a view of bytes owned elsewhere. So the engine's fixed-size machinery
// (region planning, box copies, transpose, fill, sharding) moves elements
// unchanged. An all-zero view ({nullptr, 0}) is the empty string.
//
// Who owns the bytes:
//  - decoding copies a chunk's encoded bytes once into a VlenHeap that the
//    operation owns and makes the views point into that copy; the heap in
//    use is the calling thread's current one (VlenHeapScope), set by the
//    engine around each task's codec work. A decode with no current heap
//    raises InvalidArgument (field "vlen"): never a dangling view;
//  - writes make views of the caller's strings (kept alive by the caller
//    until the write completes) and of the array's fill value (owned by
//    the array's state).
//
// Encoded form (zarr-extensions codecs/vlen-bytes/README.md, numcodecs
// vlen.pyx): a u32 little-endian item count, then per item in C order a u32
// little-endian byte length and the bytes.
//
// Decoding untrusted bytes: the count must equal the chunk's element count,
// and every length must fit in the bytes that remain (checked before
// anything is allocated); vlen-utf8 items must be valid UTF-8. Otherwise
// CorruptChunk(field "vlen-utf8" / "vlen-bytes") naming the item. Bytes
// after the last item are ignored, as numcodecs does.
//
// Thread-safety: the codecs are immutable; VlenHeap::keep may be called
// from many threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string_view>
#include <vector>

#include "codecs/codec.hpp"

namespace zarrcoro::codecs {

struct VlenView {
  const char* data = nullptr;
  std::uint64_t size = 0;
};
static_assert(sizeof(VlenView) == 16, "DataType::size() of the variable-length kinds");

// The largest decoded byte stream of one vlen chunk (the bound the bytes ->
// bytes decoders get): a hostile compressed chunk cannot expand beyond it.
inline constexpr std::uint64_t kMaxVlenChunkBytes = std::uint64_t{1} << 30;

// Blocks of decoded bytes that views point into, freed with the heap.
class VlenHeap {
 public:
  // A stable copy of `bytes` (nullptr when empty).
  const char* keep(ByteSpan bytes);

 private:
  std::mutex mu_;
  std::vector<std::unique_ptr<char[]>> blocks_;
};

// Makes `heap` the calling thread's current heap for its lifetime (nested
// scopes restore the previous one).
class VlenHeapScope {
 public:
  explicit VlenHeapScope(VlenHeap* heap);
  ~VlenHeapScope();
  VlenHeapScope(const VlenHeapScope&) = delete;
  VlenHeapScope& operator=(const VlenHeapScope&) = delete;

 private:
  VlenHeap* previous_;
};


// True if every element of `views` (VlenViews, as a chunk of a
// variable-length type holds them) has the bytes `value` has: compared by
// content, since equal strings live at different addresses.
bool all_views_equal(ByteSpan views, std::string_view value);

std::unique_ptr<ArrayToBytesCodec> make_vlen_utf8_codec(const nlohmann::json& config, const ArraySpec& spec);
std::unique_ptr<ArrayToBytesCodec> make_vlen_bytes_codec(const nlohmann::json& config, const ArraySpec& spec);

}  // namespace zarrcoro::codecs
