// The caches of blocks behind UninitAllocator (see bytes.hpp).
#include <zarrcoro/bytes.hpp>

#include <algorithm>
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

// ---- small blocks ----
// Size classes: 4 per power of two from 64 bytes, the last one
// kCachedBlockBytes itself (a request just below it rounds up to it).
constexpr unsigned kMinShift = 6;  // log2(kSmallBlockMin)
constexpr std::size_t kClasses = (std::countr_zero(kCachedBlockBytes) - kMinShift) * 4 + 1;
// Per thread and class: at most this many blocks, and this many bytes (but
// always 2 blocks: up to 512 KiB of the largest classes); per thread in
// all: at most kThreadBytes.
constexpr std::size_t kLocalBlocks = 64;
constexpr std::size_t kLocalBytes = std::size_t{128} << 10;
constexpr std::size_t kThreadBytes = std::size_t{2} << 20;
// Process-wide: at most this many bytes of small blocks, and a class at
// most kGlobalClassBytes (so that blocks of a size no longer asked for
// cannot fill the list for all others).
constexpr std::size_t kGlobalBytes = std::size_t{16} << 20;
constexpr std::size_t kGlobalClassBytes = kGlobalBytes / 8;

struct SmallClass {
  std::size_t index, bytes;
};
constexpr SmallClass small_class(std::size_t bytes) {
  const std::size_t step = std::bit_floor(bytes) / 4;  // bytes >= 64: step >= 16
  const std::size_t cls = (bytes + step - 1) / step * step;
  const std::size_t p = std::bit_floor(cls);
  return {(static_cast<std::size_t>(std::countr_zero(p)) - kMinShift) * 4 + (cls - p) / (p / 4), cls};
}
// How many blocks of `cls` bytes a thread keeps; it moves half of them at a time.
std::size_t local_limit(std::size_t cls) { return std::clamp<std::size_t>(kLocalBytes / cls, 2, kLocalBlocks); }

struct SmallGlobal {
  std::mutex mu;
  std::array<std::vector<void*>, kClasses> free;
  std::array<std::size_t, kClasses> held{};  // bytes of each class
  std::size_t bytes = 0;
};
SmallGlobal& small_global() {
  static SmallGlobal* g = new SmallGlobal;  // never destroyed (see cache())
  return *g;
}

constexpr std::size_t class_bytes(std::size_t index) {
  const std::size_t p = std::size_t{1} << (kMinShift + index / 4);
  return p + index % 4 * (p / 4);
}

// Every size maps to a class that holds it, within 1/4 of it, and whose
// size class_bytes gives back: checked at every class edge and below 8 KiB.
constexpr bool classes_hold(std::size_t n) {
  const SmallClass c = small_class(n);
  return c.index < kClasses && c.bytes >= n && c.bytes - n < n / 4 && class_bytes(c.index) == c.bytes;
}
constexpr bool classes_hold_all() {
  for (std::size_t n = kSmallBlockMin; n < 8192; ++n)
    if (!classes_hold(n)) return false;
  for (std::size_t i = 0; i + 1 < kClasses; ++i)
    for (const std::size_t n : {class_bytes(i), class_bytes(i) + 1, class_bytes(i + 1) - 1})
      if (!classes_hold(n)) return false;
  return small_class(kCachedBlockBytes - 1).index == kClasses - 1;
}
static_assert(classes_hold_all());

// A thread's blocks, made at its first small block and handed back at its
// exit (SmallGuard). t_local and t_dead are trivially destructible, so that
// a block freed by a thread_local destroyed after the guard still finds
// them (and then bypasses the cache).
struct SmallLocal {
  std::array<std::array<void*, kLocalBlocks>, kClasses> blocks;
  std::array<unsigned char, kClasses> count{};
  std::size_t bytes = 0;
};
thread_local SmallLocal* t_local = nullptr;
thread_local bool t_dead = false;

// Moves the blocks of class i beyond `keep` to the process-wide list; those
// it has no room for are freed (outside the lock).
void give_back(SmallLocal& l, std::size_t i, std::size_t keep) noexcept {
  if (l.count[i] <= keep) return;
  const std::size_t cls = class_bytes(i);
  std::array<void*, kLocalBlocks> drop;
  std::size_t dropped = 0;
  {
    SmallGlobal& g = small_global();
    std::lock_guard lock(g.mu);
    for (; l.count[i] > keep; --l.count[i]) {
      void* p = l.blocks[i][l.count[i] - 1];
      l.bytes -= cls;
      bool kept = false;
      if (g.bytes + cls <= kGlobalBytes && g.held[i] + cls <= kGlobalClassBytes) try {
          g.free[i].push_back(p);
          g.bytes += cls;
          g.held[i] += cls;
          kept = true;
        } catch (const std::bad_alloc&) {
        }
      if (!kept) drop[dropped++] = p;
    }
  }
  for (std::size_t k = 0; k < dropped; ++k) ::operator delete(drop[k]);
}

struct SmallGuard {
  ~SmallGuard() {
    if (!t_local) return;
    for (std::size_t i = 0; i < kClasses; ++i) give_back(*t_local, i, 0);
    delete t_local;
    t_local = nullptr;
    t_dead = true;
  }
};

// The calling thread's cache; null once the thread is exiting (or if it
// cannot be made).
SmallLocal* small_local() noexcept {
  if (t_local || t_dead) return t_local;
  thread_local SmallGuard guard;  // hands the blocks back at the thread's exit
  (void)guard;
  t_local = new (std::nothrow) SmallLocal();
  return t_local;
}

}  // namespace

void* allocate_small(std::size_t bytes) {
  if (!kCache) return ::operator new(bytes);
  const auto [i, cls] = small_class(bytes);
  SmallLocal* l = small_local();
  if (!l) return ::operator new(cls);
  auto& n = l->count[i];
  if (n == 0) {  // up to half a thread's worth from the process-wide list
    SmallGlobal& g = small_global();
    std::lock_guard lock(g.mu);
    const std::size_t take = std::min(g.free[i].size(), local_limit(cls) / 2);
    for (std::size_t k = 0; k < take; ++k) {
      l->blocks[i][n++] = g.free[i].back();
      g.free[i].pop_back();
    }
    g.bytes -= take * cls;
    g.held[i] -= take * cls;
    l->bytes += take * cls;
  }
  if (n > 0) {
    l->bytes -= cls;
    return l->blocks[i][--n];
  }
  return ::operator new(cls);
}

void deallocate_small(void* p, std::size_t bytes) noexcept {
  if (!kCache) return ::operator delete(p);
  const auto [i, cls] = small_class(bytes);
  SmallLocal* l = small_local();
  if (!l) return ::operator delete(p);
  const std::size_t limit = local_limit(cls);
  if (l->count[i] >= limit) give_back(*l, i, limit / 2);
  // Over the thread's share: the other classes go back (those this thread
  // no longer frees among them); one class alone is always within it.
  if (l->bytes + cls > kThreadBytes)
    for (std::size_t j = 0; j < kClasses; ++j)
      if (j != i) give_back(*l, j, 0);
  l->blocks[i][l->count[i]++] = p;
  l->bytes += cls;
}

bool block_cache_enabled() { return kCache; }

void release_small_blocks() noexcept {
  if (!kCache) return;
  std::array<std::vector<void*>, kClasses> free;
  {
    SmallGlobal& g = small_global();
    std::lock_guard lock(g.mu);
    free.swap(g.free);
    g.held = {};
    g.bytes = 0;
  }
  for (const auto& blocks : free)
    for (void* p : blocks) ::operator delete(p);
}

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
