// Byte buffers used across the engine, codecs and stores.
//
// Thread-safety: buffers are plain values, without internal
// synchronization; the cache behind their allocator (large blocks) is
// thread-safe.
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
// False in AddressSanitizer builds, which allocate every block afresh.
bool block_cache_enabled();
// Bytes of freed blocks the cache holds now.
std::size_t cached_block_bytes();

// An allocator whose large blocks (kCachedBlockBytes and up) come from the
// cache above: for buffers and for an operation's per-chunk tables, which a
// repeated read of many chunks would otherwise fault in afresh each time.
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
    if (n < kCachedBlockBytes / sizeof(T)) return std::allocator<T>::allocate(n);
    if (n > std::allocator_traits<std::allocator<T>>::max_size(*this)) throw std::bad_array_new_length();
    return static_cast<T*>(allocate_block(n * sizeof(T)));
  }
  void deallocate(T* p, std::size_t n) noexcept {
    if (n < kCachedBlockBytes / sizeof(T)) return std::allocator<T>::deallocate(p, n);
    deallocate_block(p, n * sizeof(T));
  }
};
}  // namespace detail

// An allocator whose value-construction leaves bytes uninitialized, so that
// resizing a buffer that a decoder is about to overwrite costs no memset;
// large blocks are cached (detail::allocate_block). (C++20: nothing else of
// std::allocator allocates; C++23's allocate_at_least would need hiding.)
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
