// Byte buffers used across the engine, codecs and stores.
//
// Thread-safety: buffers are plain values, without internal
// synchronization; the caches behind their allocator are thread-safe.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <vector>

namespace zarrcoro {

namespace detail {
// Blocks of at least this many bytes come from a process-wide cache of
// recently freed ones (up to 64 MiB in all), so that reads which allocate
// the same large buffers again and again (shards, encoded and decoded
// chunks, an operation's per-chunk tables) do not fault fresh pages in
// each time: on a virtual machine a page fault costs microseconds, and 32
// MiB of fresh pages cost more than decoding them. Thread-safe.
inline constexpr std::size_t kCachedBlockBytes = std::size_t{256} << 10;
// A block of at least `bytes` (rounded up to a size class within 1/8 of
// it); throws std::bad_alloc.
void* allocate_block(std::size_t bytes);
// Returns a block from allocate_block(bytes), with the same `bytes`.
void deallocate_block(void* p, std::size_t bytes) noexcept;
// Smaller blocks (64 bytes up to kCachedBlockBytes) are recycled too, the
// way a thread-caching malloc does it: each thread keeps a few freed blocks
// of each size class (at most 128 KiB of a class, or 2 blocks; 2 MiB in
// all) and moves them in groups to and from a process-wide list (at most
// 2 MiB of a class, 16 MiB in all), so that a block allocated on one
// thread and freed on another (an encoded chunk read on an I/O thread and
// decoded on a codec thread) costs neither thread a trip through the
// allocator's locks: with glibc's malloc that trip was 0.3-0.4 µs a chunk.
// A block of `bytes` (64 <= bytes < kCachedBlockBytes), rounded up to a
// size class less than 1/4 above it (so a buffer in this range may hold
// up to a quarter more memory than it asked for); throws std::bad_alloc.
void* allocate_small(std::size_t bytes);
// Returns a block from allocate_small(bytes), with the same `bytes`; from
// any thread.
void deallocate_small(void* p, std::size_t bytes) noexcept;
inline constexpr std::size_t kSmallBlockMin = 64;
// Frees the small blocks of the process-wide list (not those threads keep).
void release_small_blocks() noexcept;
// False in AddressSanitizer builds, which allocate every block afresh.
bool block_cache_enabled();
// Bytes of freed large blocks (kCachedBlockBytes and up) the cache holds now.
std::size_t cached_block_bytes();

// An allocator whose blocks of 64 bytes and up come from the caches above:
// for buffers and for an operation's per-chunk tables, which a repeated
// read of many chunks would otherwise fault in afresh each time, or free
// on another thread than the one that allocated them.
template <class T>
struct CachedAllocator : std::allocator<T> {
  template <class U>
  struct rebind {
    using other = CachedAllocator<U>;
  };
  CachedAllocator() = default;
  template <class U>
  CachedAllocator(const CachedAllocator<U>&) noexcept {}
  static_assert(sizeof(T) <= kCachedBlockBytes && alignof(T) <= __STDCPP_DEFAULT_NEW_ALIGNMENT__);
  T* allocate(std::size_t n) {
    if (n < kCachedBlockBytes / sizeof(T))
      return n * sizeof(T) < kSmallBlockMin ? std::allocator<T>::allocate(n)
                                            : static_cast<T*>(allocate_small(n * sizeof(T)));
    if (n > std::allocator_traits<std::allocator<T>>::max_size(*this)) throw std::bad_array_new_length();
    return static_cast<T*>(allocate_block(n * sizeof(T)));
  }
  void deallocate(T* p, std::size_t n) noexcept {
    if (n < kCachedBlockBytes / sizeof(T))
      return n * sizeof(T) < kSmallBlockMin ? std::allocator<T>::deallocate(p, n) : deallocate_small(p, n * sizeof(T));
    deallocate_block(p, n * sizeof(T));
  }
};
}  // namespace detail

// An allocator whose value-construction leaves bytes uninitialized, so that
// resizing a buffer that a decoder is about to overwrite costs no memset;
// blocks are cached (detail::allocate_block, allocate_small). (C++20:
// nothing else of std::allocator allocates; C++23's allocate_at_least
// would need hiding.)
template <class T>
struct UninitAllocator : detail::CachedAllocator<T> {
  template <class U>
  struct rebind {
    using other = UninitAllocator<U>;
  };
  UninitAllocator() = default;
  template <class U>
  UninitAllocator(const UninitAllocator<U>&) noexcept {}
  template <class U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;
  }
  template <class U, class... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};

// An owned byte buffer. `resize` does not zero new bytes.
using Bytes = std::vector<std::byte, UninitAllocator<std::byte>>;
using ByteSpan = std::span<const std::byte>;
using MutableByteSpan = std::span<std::byte>;

inline Bytes to_bytes(ByteSpan s) { return Bytes(s.begin(), s.end()); }

}  // namespace zarrcoro
