// The cache of large blocks behind UninitAllocator (see bytes.hpp).
#include <zarrcoro/bytes.hpp>

#include <array>
#include <bit>
#include <mutex>
#include <new>
#include <utility>
#include <vector>

namespace zarrcoro::detail {
namespace {

// Sanitizer builds allocate every block afresh, so that a use after free
// is still caught.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kCache = false;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kCache = false;
#else
constexpr bool kCache = true;
#endif
#else
constexpr bool kCache = true;
#endif

constexpr std::size_t kMaxCachedBytes = std::size_t{64} << 20;
constexpr std::size_t kMaxCachedBlocks = 64;

// What a block of `bytes` really allocates: for a block the cache may hold,
// `bytes` rounded up to a multiple of an eighth of its highest power of two
// (its size class); else exactly `bytes` (sanitizers then see every byte).
std::size_t block_size(std::size_t bytes) {
  if (!kCache || bytes > kMaxCachedBytes) return bytes;
  const std::size_t step = std::bit_floor(bytes) / 8;  // bytes >= kCachedBlockBytes: step > 0
  return (bytes + step - 1) / step * step;
}

struct Cache {
  Cache() { blocks.reserve(kMaxCachedBlocks); }
  std::mutex mu;
  std::vector<std::pair<std::size_t, void*>> blocks;  // (size class, block), most recently freed last
  std::size_t bytes = 0;
};

Cache& cache() {
  static Cache* c = new Cache;  // never destroyed: blocks may be freed during static destruction
  return *c;
}

}  // namespace

bool block_cache_enabled() { return kCache; }

std::size_t cached_block_bytes() {
  if (!kCache) return 0;
  Cache& c = cache();
  std::lock_guard lock(c.mu);
  return c.bytes;
}

void* allocate_block(std::size_t bytes) {
  const std::size_t cls = block_size(bytes);
  if (kCache && cls <= kMaxCachedBytes) {
    Cache& c = cache();
    std::lock_guard lock(c.mu);
    for (auto it = c.blocks.rbegin(); it != c.blocks.rend(); ++it)
      if (it->first == cls) {
        void* p = it->second;
        c.blocks.erase(std::next(it).base());
        c.bytes -= cls;
        return p;
      }
  }
  return ::operator new(cls);
}

void deallocate_block(void* p, std::size_t bytes) noexcept {
  const std::size_t cls = block_size(bytes);
  if (!kCache || cls > kMaxCachedBytes) return ::operator delete(p);
  std::array<std::pair<std::size_t, void*>, kMaxCachedBlocks> evicted;  // freed outside the lock
  std::size_t drop = 0;  // the least recently freed go first
  {
    Cache& c = cache();  // made by allocate_block already
    std::lock_guard lock(c.mu);
    while (drop < c.blocks.size() && (c.bytes + cls > kMaxCachedBytes || c.blocks.size() - drop >= kMaxCachedBlocks)) {
      c.bytes -= c.blocks[drop].first;
      evicted[drop] = c.blocks[drop];
      ++drop;
    }
    c.blocks.erase(c.blocks.begin(), c.blocks.begin() + static_cast<std::ptrdiff_t>(drop));
    c.blocks.emplace_back(cls, p);  // within the reserved capacity: no allocation
    c.bytes += cls;
  }
  for (std::size_t i = 0; i < drop; ++i) ::operator delete(evicted[i].second);
}

}  // namespace zarrcoro::detail
