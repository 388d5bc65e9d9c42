// Shared codec helpers: the element count of a chunk representation (Zarr v3
// core spec, "Chunk grids": a 0-d chunk holds one element) and CRC-32C, the
// Castagnoli CRC (reflected polynomial 0x82F63B78, initial value and final
// xor 0xFFFFFFFF) used by the `crc32c` codec (Zarr v3 codec spec "crc32c")
// and by shard indexes. On x86-64 with SSE4.2 the hardware instruction is
// used; elsewhere a slicing-by-8 table does the work.
#include "codecs/codec.hpp"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace zarrcoro::codecs {

std::uint64_t ArraySpec::num_elements() const {
  std::uint64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

namespace {

constexpr std::uint32_t kPoly = 0x82F63B78u;

// kTable[k][b]: the CRC state after byte b followed by k zero bytes.
constexpr auto kTable = [] {
  std::array<std::array<std::uint32_t, 256>, 8> t{};
  for (std::uint32_t b = 0; b < 256; ++b) {
    std::uint32_t c = b;
    for (int i = 0; i < 8; ++i) c = (c >> 1) ^ (kPoly & (0u - (c & 1u)));
    t[0][b] = c;
  }
  for (std::size_t k = 1; k < 8; ++k)
    for (std::size_t b = 0; b < 256; ++b) t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xff];
  return t;
}();

// Both kernels take and return the raw (un-inverted) CRC state.
std::uint32_t crc_table(const unsigned char* p, std::size_t n, std::uint32_t c) {
  for (; n >= 8; n -= 8, p += 8) {
    std::uint64_t w;
    std::memcpy(&w, p, 8);  // little-endian host
    w ^= c;
    c = kTable[7][w & 0xff] ^ kTable[6][(w >> 8) & 0xff] ^ kTable[5][(w >> 16) & 0xff] ^
        kTable[4][(w >> 24) & 0xff] ^ kTable[3][(w >> 32) & 0xff] ^ kTable[2][(w >> 40) & 0xff] ^
        kTable[1][(w >> 48) & 0xff] ^ kTable[0][w >> 56];
  }
  for (; n; --n) c = (c >> 8) ^ kTable[0][(c ^ *p++) & 0xff];
  return c;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) std::uint32_t crc_sse42(const unsigned char* p, std::size_t n,
                                                         std::uint32_t c) {
  std::uint64_t c64 = c;
  for (; n >= 32; n -= 32, p += 32) {
    std::uint64_t w[4];
    std::memcpy(w, p, 32);
    c64 = _mm_crc32_u64(c64, w[0]);
    c64 = _mm_crc32_u64(c64, w[1]);
    c64 = _mm_crc32_u64(c64, w[2]);
    c64 = _mm_crc32_u64(c64, w[3]);
  }
  for (; n >= 8; n -= 8, p += 8) {
    std::uint64_t w;
    std::memcpy(&w, p, 8);
    c64 = _mm_crc32_u64(c64, w);
  }
  auto c32 = static_cast<std::uint32_t>(c64);
  for (; n; --n) c32 = _mm_crc32_u8(c32, *p++);
  return c32;
}
#endif

using Kernel = std::uint32_t (*)(const unsigned char*, std::size_t, std::uint32_t);

Kernel pick_kernel() {
#if defined(__x86_64__)
  if (__builtin_cpu_supports("sse4.2")) return crc_sse42;
#endif
  return crc_table;
}

}  // namespace

std::uint32_t crc32c(ByteSpan data, std::uint32_t seed) {
  static const Kernel kernel = pick_kernel();  // function-local: safe during static init
  return ~kernel(reinterpret_cast<const unsigned char*>(data.data()), data.size(), ~seed);
}

namespace detail {
// Exposed for tests: the portable kernel, to check it against the hardware one.
std::uint32_t crc32c_portable(ByteSpan data, std::uint32_t seed) {
  return ~crc_table(reinterpret_cast<const unsigned char*>(data.data()), data.size(), ~seed);
}
}  // namespace detail

}  // namespace zarrcoro::codecs
