// Byte buffers used across the engine, codecs and stores.
//
// Thread-safety: plain values; no internal synchronization.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <vector>

namespace zarrcoro {

// An allocator whose value-construction leaves bytes uninitialized, so that
// resizing a buffer that a decoder is about to overwrite costs no memset.
template <class T>
struct UninitAllocator : std::allocator<T> {
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
