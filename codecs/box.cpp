// N-d box copies and fills (see box.hpp).
#include "codecs/box.hpp"

#include <cmath>
#include <cstring>

#include <boost/container/small_vector.hpp>

namespace zarrcoro::codecs {
namespace {

using Dims = boost::container::small_vector<std::uint64_t, 6>;

template <class F>
bool all_nan(const std::byte* p, std::uint64_t n, std::size_t es) {
  for (std::uint64_t i = 0; i < n; ++i) {
    F v;
    std::memcpy(&v, p + i * es, sizeof v);
    if (!std::isnan(v)) return false;
  }
  return true;
}
bool half_is_nan(std::uint16_t h) { return (h & 0x7c00u) == 0x7c00u && (h & 0x03ffu) != 0; }

template <class F>
bool complex_all_equal(const std::byte* p, std::uint64_t n, const std::byte* fill) {
  F fr, fi;
  std::memcpy(&fr, fill, sizeof fr);
  std::memcpy(&fi, fill + sizeof fr, sizeof fi);
  const bool fill_nan = std::isnan(fr) || std::isnan(fi);
  for (std::uint64_t i = 0; i < n; ++i) {
    F r, im;
    std::memcpy(&r, p + i * 2 * sizeof(F), sizeof r);
    std::memcpy(&im, p + i * 2 * sizeof(F) + sizeof r, sizeof im);
    const bool nan = std::isnan(r) || std::isnan(im);
    if (fill_nan ? !nan : (nan || r != fr || im != fi)) return false;
  }
  return true;
}

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

// Calls f(src_offset, dst_offset, run_bytes, rows, src_step, dst_step) for
// each group of `rows` contiguous runs of the box that are `src_step` and
// `dst_step` bytes apart (the box's innermost dimension that is not merged
// into a run); rows is 1 and the steps 0 when the whole box is one run.
template <class F>
void for_each_row_group(std::span<const std::uint64_t> src_shape, std::span<const std::uint64_t> src_start,
                        std::span<const std::uint64_t> dst_shape, std::span<const std::uint64_t> dst_start,
                        std::span<const std::uint64_t> box, std::size_t elem_size, F&& f) {
  const std::size_t r = box.size();
  if (r == 0) return f(std::uint64_t{0}, std::uint64_t{0}, std::uint64_t{elem_size}, std::uint64_t{1},
                       std::uint64_t{0}, std::uint64_t{0});
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
  if (k == 0) return f(src_base, dst_base, run, std::uint64_t{1}, std::uint64_t{0}, std::uint64_t{0});
  // Dimension k-1 is walked by f; idx counts over the dimensions before it.
  const std::size_t outer = k - 1;
  Dims idx(outer, 0);
  while (true) {
    std::uint64_t so = src_base, dof = dst_base;
    for (std::size_t i = 0; i < outer; ++i) {
      so += idx[i] * ss[i];
      dof += idx[i] * ds[i];
    }
    f(so, dof, run, box[outer], ss[outer], ds[outer]);
    std::size_t d = outer;
    while (true) {
      if (d == 0) return;
      --d;
      if (++idx[d] < box[d]) break;
      idx[d] = 0;
    }
  }
}

// `rows` copies of N bytes, `src_step` and `dst_step` apart: a fixed size the
// compiler turns into a few vector moves, where a libc call per short row
// (a 32^3 inner chunk of uint16 is 1024 rows of 64 bytes) would cost more
// than the copy.
template <std::size_t N>
void copy_rows(std::byte* dst, const std::byte* src, std::uint64_t rows, std::uint64_t src_step,
               std::uint64_t dst_step) {
  for (; rows > 0; --rows, src += src_step, dst += dst_step) std::memcpy(dst, src, N);
}

}  // namespace

void copy_box(const std::byte* src, std::span<const std::uint64_t> src_shape,
              std::span<const std::uint64_t> src_start, std::byte* dst,
              std::span<const std::uint64_t> dst_shape, std::span<const std::uint64_t> dst_start,
              std::span<const std::uint64_t> box, std::size_t elem_size) {
  for_each_row_group(src_shape, src_start, dst_shape, dst_start, box, elem_size,
                     [&](std::uint64_t so, std::uint64_t dof, std::uint64_t n, std::uint64_t rows,
                         std::uint64_t src_step, std::uint64_t dst_step) {
                       const std::byte* s = src + so;
                       std::byte* d = dst + dof;
                       switch (n) {
                         case 16: return copy_rows<16>(d, s, rows, src_step, dst_step);
                         case 32: return copy_rows<32>(d, s, rows, src_step, dst_step);
                         case 64: return copy_rows<64>(d, s, rows, src_step, dst_step);
                         case 128: return copy_rows<128>(d, s, rows, src_step, dst_step);
                         default:
                           for (; rows > 0; --rows, s += src_step, d += dst_step) std::memcpy(d, s, n);
                       }
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
  for_each_row_group(dst_shape, dst_start, dst_shape, dst_start, box, elem_size,
                     [&](std::uint64_t, std::uint64_t dof, std::uint64_t n, std::uint64_t rows, std::uint64_t,
                         std::uint64_t dst_step) {
                       for (; rows > 0; --rows, dof += dst_step) fill_elements(dst + dof, n / elem_size, value, elem_size);
                     });
}

bool all_equal(ByteSpan data, const std::byte* value, std::size_t elem_size) {
  if (data.empty()) return true;
  if (std::memcmp(data.data(), value, elem_size) != 0) return false;
  // Every element equals the first iff the buffer equals itself shifted by one element.
  return std::memcmp(data.data(), data.data() + elem_size, data.size() - elem_size) == 0;
}

bool all_equal_as_zarr_python(ByteSpan data, const std::byte* f, DataType dtype) {
  const std::size_t es = dtype.size();
  const std::uint64_t n = data.size() / es;
  const std::byte* p = data.data();
  switch (dtype.kind()) {
    case DataTypeKind::float16: {
      std::uint16_t h;
      std::memcpy(&h, f, 2);
      if (half_is_nan(h)) {
        for (std::uint64_t i = 0; i < n; ++i) {
          std::memcpy(&h, p + i * 2, 2);
          if (!half_is_nan(h)) return false;
        }
        return true;
      }
      break;
    }
    case DataTypeKind::float32: {
      float v;
      std::memcpy(&v, f, 4);
      if (std::isnan(v)) return all_nan<float>(p, n, es);
      break;
    }
    case DataTypeKind::float64: {
      double v;
      std::memcpy(&v, f, 8);
      if (std::isnan(v)) return all_nan<double>(p, n, es);
      break;
    }
    case DataTypeKind::complex64:
      return complex_all_equal<float>(p, n, f);
    case DataTypeKind::complex128:
      return complex_all_equal<double>(p, n, f);
    default:
      break;
  }
  return all_equal(data, f, es);
}

}  // namespace zarrcoro::codecs
