// N-d box copies and fills (see box.hpp).
#include "codecs/box.hpp"

#include <cstring>

#include <boost/container/small_vector.hpp>

namespace zarrcoro::codecs {
namespace {

using Dims = boost::container::small_vector<std::uint64_t, 6>;

// Strides in bytes of a C-order array.
Dims strides_of(std::span<const std::uint64_t> shape, std::size_t elem_size) {
  Dims s(shape.size());
  std::uint64_t acc = elem_size;
  for (std::size_t i = shape.size(); i-- > 0;) {
    s[i] = acc;
    acc *= shape[i];
  }
  return s;
}

// Calls f(src_offset, dst_offset, run_bytes) for each contiguous run of the box.
template <class F>
void for_each_run(std::span<const std::uint64_t> src_shape, std::span<const std::uint64_t> src_start,
                  std::span<const std::uint64_t> dst_shape, std::span<const std::uint64_t> dst_start,
                  std::span<const std::uint64_t> box, std::size_t elem_size, F&& f) {
  const std::size_t r = box.size();
  if (r == 0) return f(std::uint64_t{0}, std::uint64_t{0}, std::uint64_t{elem_size});
  for (auto b : box)
    if (b == 0) return;
  const Dims ss = strides_of(src_shape, elem_size), ds = strides_of(dst_shape, elem_size);
  // Merge trailing dimensions that the box covers fully in both arrays.
  std::size_t k = r - 1;
  while (k > 0 && box[k] == src_shape[k] && box[k] == dst_shape[k]) --k;
  const std::uint64_t run = box[k] * ss[k];
  std::uint64_t src_base = 0, dst_base = 0;
  for (std::size_t i = 0; i < r; ++i) {
    src_base += src_start[i] * ss[i];
    dst_base += dst_start[i] * ds[i];
  }
  Dims idx(k, 0);
  while (true) {
    std::uint64_t so = src_base, dof = dst_base;
    for (std::size_t i = 0; i < k; ++i) {
      so += idx[i] * ss[i];
      dof += idx[i] * ds[i];
    }
    f(so, dof, run);
    std::size_t d = k;
    while (d > 0) {
      --d;
      if (++idx[d] < box[d]) break;
      idx[d] = 0;
      if (d == 0) return;
    }
    if (k == 0) return;
  }
}

}  // namespace

void copy_box(const std::byte* src, std::span<const std::uint64_t> src_shape,
              std::span<const std::uint64_t> src_start, std::byte* dst,
              std::span<const std::uint64_t> dst_shape, std::span<const std::uint64_t> dst_start,
              std::span<const std::uint64_t> box, std::size_t elem_size) {
  for_each_run(src_shape, src_start, dst_shape, dst_start, box, elem_size,
               [&](std::uint64_t so, std::uint64_t dof, std::uint64_t n) {
                 std::memcpy(dst + dof, src + so, n);
               });
}

void fill_elements(std::byte* dst, std::uint64_t n, const std::byte* value, std::size_t elem_size) {
  if (n == 0) return;
  bool uniform = true;
  for (std::size_t i = 1; i < elem_size; ++i) uniform = uniform && value[i] == value[0];
  if (uniform) {
    std::memset(dst, static_cast<int>(value[0]), n * elem_size);
    return;
  }
  std::memcpy(dst, value, elem_size);
  std::uint64_t done = elem_size;
  const std::uint64_t total = n * elem_size;
  while (done < total) {  // doubling copies
    const std::uint64_t k = std::min(done, total - done);
    std::memcpy(dst + done, dst, k);
    done += k;
  }
}

void fill_box(std::byte* dst, std::span<const std::uint64_t> dst_shape,
              std::span<const std::uint64_t> dst_start, std::span<const std::uint64_t> box,
              const std::byte* value, std::size_t elem_size) {
  for_each_run(dst_shape, dst_start, dst_shape, dst_start, box, elem_size,
               [&](std::uint64_t, std::uint64_t dof, std::uint64_t n) {
                 fill_elements(dst + dof, n / elem_size, value, elem_size);
               });
}

bool all_equal(ByteSpan data, const std::byte* value, std::size_t elem_size) {
  if (data.empty()) return true;
  if (std::memcmp(data.data(), value, elem_size) != 0) return false;
  // Every element equals the first iff the buffer equals itself shifted by one element.
  return std::memcmp(data.data(), data.data() + elem_size, data.size() - elem_size) == 0;
}

}  // namespace zarrcoro::codecs
