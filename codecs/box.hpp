// N-d box copies and fills over C-order arrays, shared by the engine (placing
// chunk parts in a region) and codecs that split arrays (sharding_indexed).
// Pure functions; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include <zarrcoro/bytes.hpp>
#include <zarrcoro/dtype.hpp>

namespace zarrcoro::codecs {

// Copies the box `box` (C order) from an array `src` of shape `src_shape`
// starting at `src_start` to `dst` of shape `dst_shape` at `dst_start`.
void copy_box(const std::byte* src, std::span<const std::uint64_t> src_shape,
              std::span<const std::uint64_t> src_start, std::byte* dst,
              std::span<const std::uint64_t> dst_shape, std::span<const std::uint64_t> dst_start,
              std::span<const std::uint64_t> box, std::size_t elem_size);

// Sets every element of the box to `value` (elem_size bytes).
void fill_box(std::byte* dst, std::span<const std::uint64_t> dst_shape,
              std::span<const std::uint64_t> dst_start, std::span<const std::uint64_t> box,
              const std::byte* value, std::size_t elem_size);

// Fills `n` elements with `value`.
void fill_elements(std::byte* dst, std::uint64_t n, const std::byte* value, std::size_t elem_size);

// True if every element of `data` equals `value` bitwise.
bool all_equal(ByteSpan data, const std::byte* value, std::size_t elem_size);

// True if every element of `data` (of fixed-size `dtype`) equals `fill` as
// zarr-python's all_equal compares a chunk with its fill value
// (core/buffer/core.py _array_all_equal): bitwise, except that a NaN fill
// matches any NaN, and complex elements compare part by part as numbers
// (NaN in either part of both counts as equal).
bool all_equal_as_zarr_python(ByteSpan data, const std::byte* fill, DataType dtype);

}  // namespace zarrcoro::codecs
