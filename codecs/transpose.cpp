// The `transpose` array -> array codec (Zarr v3 codec spec "transpose",
// version 1.0): `order` is a permutation of 0..n-1 and the encoded array B of
// the decoded array A has B_shape[i] = A_shape[order[i]] and
// B[B_pos] = A[A_pos] with B_pos[i] = A_pos[order[i]]. Decoding applies the
// inverse permutation. The legacy strings "C" (identity) and "F" (reversed
// axes) from earlier drafts of the spec are accepted and written back as given.
//
// The copy walks the destination in C order (contiguous writes) and the
// source with permuted strides; axes that stay adjacent are merged, and when
// the source's contiguous axis is not the destination's last one, the two are
// copied in cache-sized tiles.
#include <algorithm>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include <nlohmann/json.hpp>

#include <zarrcoro/error.hpp>

#include "codecs/codec.hpp"

namespace zarrcoro::codecs {
namespace {

struct Axis {
  std::uint64_t n;  // extent
  std::int64_t s;   // source stride, elements
  std::int64_t t;   // destination stride, elements
};

template <std::size_t ES>
inline void copy_elem(std::byte* d, const std::byte* s, std::size_t es) {
  if constexpr (ES != 0) std::memcpy(d, s, ES);
  else std::memcpy(d, s, es);
}

// Transposes a B x B block of ES-byte elements: source row r (r-th element
// along j) holds B consecutive elements along i at `s + r * ss`; destination
// row k (k-th element along i) receives B consecutive elements along j at
// `d + k * ds`. SSE2 (baseline on x86-64) for 1, 2 and 4-byte elements.
template <std::size_t ES>
constexpr std::size_t kBlock = 1;
#if defined(__SSE2__)
template <>
constexpr std::size_t kBlock<1> = 8;
template <>
constexpr std::size_t kBlock<2> = 8;
template <>
constexpr std::size_t kBlock<4> = 4;

template <std::size_t ES>
inline void block(const std::byte* s, std::ptrdiff_t ss, std::byte* d, std::ptrdiff_t ds) {
  const auto ld = [&](int r) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + r * ss)); };
  const auto st = [&](int k, __m128i v) { _mm_storeu_si128(reinterpret_cast<__m128i*>(d + k * ds), v); };
  if constexpr (ES == 1) {  // 8 x 8 bytes
    const auto l8 = [&](int r) { return _mm_loadl_epi64(reinterpret_cast<const __m128i*>(s + r * ss)); };
    const __m128i t0 = _mm_unpacklo_epi8(l8(0), l8(1)), t1 = _mm_unpacklo_epi8(l8(2), l8(3));
    const __m128i t2 = _mm_unpacklo_epi8(l8(4), l8(5)), t3 = _mm_unpacklo_epi8(l8(6), l8(7));
    const __m128i u0 = _mm_unpacklo_epi16(t0, t1), u1 = _mm_unpackhi_epi16(t0, t1);
    const __m128i u2 = _mm_unpacklo_epi16(t2, t3), u3 = _mm_unpackhi_epi16(t2, t3);
    const __m128i v[4] = {_mm_unpacklo_epi32(u0, u2), _mm_unpackhi_epi32(u0, u2),
                          _mm_unpacklo_epi32(u1, u3), _mm_unpackhi_epi32(u1, u3)};
    for (int k = 0; k < 4; ++k) {
      _mm_storel_epi64(reinterpret_cast<__m128i*>(d + (2 * k) * ds), v[k]);
      _mm_storel_epi64(reinterpret_cast<__m128i*>(d + (2 * k + 1) * ds), _mm_unpackhi_epi64(v[k], v[k]));
    }
  } else if constexpr (ES == 2) {  // 8 x 8 uint16
    const __m128i r0 = ld(0), r1 = ld(1), r2 = ld(2), r3 = ld(3), r4 = ld(4), r5 = ld(5), r6 = ld(6), r7 = ld(7);
    const __m128i t0 = _mm_unpacklo_epi16(r0, r1), t1 = _mm_unpackhi_epi16(r0, r1);
    const __m128i t2 = _mm_unpacklo_epi16(r2, r3), t3 = _mm_unpackhi_epi16(r2, r3);
    const __m128i t4 = _mm_unpacklo_epi16(r4, r5), t5 = _mm_unpackhi_epi16(r4, r5);
    const __m128i t6 = _mm_unpacklo_epi16(r6, r7), t7 = _mm_unpackhi_epi16(r6, r7);
    const __m128i u0 = _mm_unpacklo_epi32(t0, t2), u1 = _mm_unpackhi_epi32(t0, t2);
    const __m128i u2 = _mm_unpacklo_epi32(t1, t3), u3 = _mm_unpackhi_epi32(t1, t3);
    const __m128i u4 = _mm_unpacklo_epi32(t4, t6), u5 = _mm_unpackhi_epi32(t4, t6);
    const __m128i u6 = _mm_unpacklo_epi32(t5, t7), u7 = _mm_unpackhi_epi32(t5, t7);
    st(0, _mm_unpacklo_epi64(u0, u4));
    st(1, _mm_unpackhi_epi64(u0, u4));
    st(2, _mm_unpacklo_epi64(u1, u5));
    st(3, _mm_unpackhi_epi64(u1, u5));
    st(4, _mm_unpacklo_epi64(u2, u6));
    st(5, _mm_unpackhi_epi64(u2, u6));
    st(6, _mm_unpacklo_epi64(u3, u7));
    st(7, _mm_unpackhi_epi64(u3, u7));
  } else if constexpr (ES == 4) {  // 4 x 4 uint32
    const __m128i t0 = _mm_unpacklo_epi32(ld(0), ld(1)), t1 = _mm_unpackhi_epi32(ld(0), ld(1));
    const __m128i t2 = _mm_unpacklo_epi32(ld(2), ld(3)), t3 = _mm_unpackhi_epi32(ld(2), ld(3));
    st(0, _mm_unpacklo_epi64(t0, t2));
    st(1, _mm_unpackhi_epi64(t0, t2));
    st(2, _mm_unpacklo_epi64(t1, t3));
    st(3, _mm_unpackhi_epi64(t1, t3));
  }
}
#endif

// dst(i, j) = src(i, j) over an ni x nj block: the source is contiguous along
// i, the destination along j; copied in square tiles to stay in L1, each tile
// in B x B register blocks where the element size has a SIMD kernel.
template <std::size_t ES>
void tiled_2d(const std::byte* src, std::byte* dst, std::uint64_t ni, std::uint64_t nj,
              std::int64_t sj, std::int64_t ti, std::size_t es) {
  constexpr std::uint64_t T = ES == 1 ? 64 : ES == 2 ? 32 : 16;
  constexpr std::uint64_t B = kBlock<ES>;
  const auto scalar = [&](std::uint64_t i, std::uint64_t j0, std::uint64_t j1) {
    std::byte* d = dst + (i * ti + j0) * es;
    const std::byte* s = src + (i + j0 * sj) * es;
    for (std::uint64_t j = j0; j < j1; ++j, d += es, s += sj * es) copy_elem<ES>(d, s, es);
  };
  for (std::uint64_t i0 = 0; i0 < ni; i0 += T) {
    const std::uint64_t i1 = std::min(ni, i0 + T);
    for (std::uint64_t j0 = 0; j0 < nj; j0 += T) {
      const std::uint64_t j1 = std::min(nj, j0 + T);
      std::uint64_t i = i0;
      if constexpr (B > 1) {
        const std::uint64_t jb = j0 + (j1 - j0) / B * B;
        for (; i + B <= i1; i += B) {
          for (std::uint64_t j = j0; j < jb; j += B)
            block<ES>(src + (i + j * sj) * ES, sj * ES, dst + (i * ti + j) * ES, ti * ES);
          for (std::uint64_t k = i; k < i + B; ++k) scalar(k, jb, j1);
        }
      }
      for (; i < i1; ++i) scalar(i, j0, j1);
    }
  }
}

// Calls f(src_offset, dst_offset) (bytes) for every index of `outer`.
template <class F>
void for_each_outer(const std::vector<Axis>& outer, std::size_t es, F&& f) {
  std::vector<std::uint64_t> idx(outer.size(), 0);
  std::int64_t so = 0, to = 0;
  for (;;) {
    f(so, to);
    std::size_t k = outer.size();
    for (; k-- > 0;) {
      if (++idx[k] < outer[k].n) {
        so += outer[k].s * static_cast<std::int64_t>(es);
        to += outer[k].t * static_cast<std::int64_t>(es);
        break;
      }
      idx[k] = 0;
      so -= static_cast<std::int64_t>(outer[k].n - 1) * outer[k].s * static_cast<std::int64_t>(es);
      to -= static_cast<std::int64_t>(outer[k].n - 1) * outer[k].t * static_cast<std::int64_t>(es);
    }
    if (k == static_cast<std::size_t>(-1)) return;
  }
}

template <std::size_t ES>
void copy_axes(const std::byte* src, std::byte* dst, std::vector<Axis> axes, std::size_t es) {
  const Axis last = axes.back();
  axes.pop_back();
  if (last.s == 1) {  // contiguous rows on both sides
    const std::size_t row = last.n * es;
    for_each_outer(axes, es, [&](std::int64_t so, std::int64_t to) {
      std::memcpy(dst + to, src + so, row);
    });
    return;
  }
  const auto p = std::find_if(axes.begin(), axes.end(), [](const Axis& a) { return a.s == 1; });
  if (p == axes.end()) {  // not reached for a permutation; plain strided rows
    for_each_outer(axes, es, [&](std::int64_t so, std::int64_t to) {
      for (std::uint64_t j = 0; j < last.n; ++j)
        copy_elem<ES>(dst + to + j * es, src + so + j * last.s * es, es);
    });
    return;
  }
  const Axis inner = *p;
  axes.erase(p);
  for_each_outer(axes, es, [&](std::int64_t so, std::int64_t to) {
    tiled_2d<ES>(src + so, dst + to, inner.n, last.n, last.s, inner.t, es);
  });
}

// Writes the C-order array of extents `dst_shape` into `dst`, element k of
// axis i being read at source stride `src_strides[i]` (elements).
void permute_copy(const std::byte* src, std::byte* dst, const std::vector<std::uint64_t>& dst_shape,
                  const std::vector<std::int64_t>& src_strides, std::size_t es) {
  std::uint64_t total = 1;
  for (auto n : dst_shape) total *= n;
  if (total == 0) return;
  std::vector<Axis> axes;
  std::int64_t t = 1;
  for (std::size_t i = dst_shape.size(); i-- > 0;) {
    if (dst_shape[i] != 1) axes.push_back({dst_shape[i], src_strides[i], t});
    t *= static_cast<std::int64_t>(dst_shape[i]);
  }
  std::reverse(axes.begin(), axes.end());
  // Merge axis k+1 into k when the source also walks them as one.
  std::vector<Axis> merged;
  for (const Axis& a : axes) {
    if (!merged.empty() && merged.back().s == a.s * static_cast<std::int64_t>(a.n)) {
      merged.back() = {merged.back().n * a.n, a.s, a.t};
    } else {
      merged.push_back(a);
    }
  }
  if (merged.empty() || (merged.size() == 1 && merged[0].s == 1)) {
    std::memcpy(dst, src, total * es);
    return;
  }
  switch (es) {
    case 1: return copy_axes<1>(src, dst, std::move(merged), es);
    case 2: return copy_axes<2>(src, dst, std::move(merged), es);
    case 4: return copy_axes<4>(src, dst, std::move(merged), es);
    case 8: return copy_axes<8>(src, dst, std::move(merged), es);
    case 16: return copy_axes<16>(src, dst, std::move(merged), es);
    default: return copy_axes<0>(src, dst, std::move(merged), es);
  }
}

std::vector<std::int64_t> c_strides(const std::vector<std::uint64_t>& shape) {
  std::vector<std::int64_t> s(shape.size());
  std::int64_t t = 1;
  for (std::size_t i = shape.size(); i-- > 0;) {
    s[i] = t;
    t *= static_cast<std::int64_t>(shape[i]);
  }
  return s;
}

class TransposeCodec final : public ArrayToArrayCodec {
 public:
  // `order` empty with `legacy` set means "C" or "F" (rank from the spec).
  TransposeCodec(std::vector<std::size_t> order, char legacy) : order_(std::move(order)), legacy_(legacy) {}

  std::string name() const override { return "transpose"; }

  nlohmann::json to_json() const override {
    nlohmann::json order = legacy_ ? nlohmann::json(std::string(1, legacy_)) : nlohmann::json(order_);
    return {{"name", "transpose"}, {"configuration", {{"order", order}}}};
  }

  ArraySpec encoded_spec(const ArraySpec& decoded) const override {
    const auto order = resolve(decoded.shape.size());
    ArraySpec enc{decoded.dtype, std::vector<std::uint64_t>(order.size()), decoded.fill};
    for (std::size_t i = 0; i < order.size(); ++i) enc.shape[i] = decoded.shape[order[i]];
    return enc;
  }

  void encode(const ArraySpec& decoded, ByteSpan in, MutableByteSpan out) const override {
    check(decoded, in, out);
    const auto order = resolve(decoded.shape.size());
    const auto a_strides = c_strides(decoded.shape);
    std::vector<std::uint64_t> b_shape(order.size());
    std::vector<std::int64_t> strides(order.size());
    for (std::size_t i = 0; i < order.size(); ++i) {
      b_shape[i] = decoded.shape[order[i]];
      strides[i] = a_strides[order[i]];
    }
    permute_copy(in.data(), out.data(), b_shape, strides, decoded.dtype.size());
  }

  void decode(const ArraySpec& decoded, ByteSpan in, MutableByteSpan out) const override {
    check(decoded, in, out);
    const auto order = resolve(decoded.shape.size());
    std::vector<std::uint64_t> b_shape(order.size());
    for (std::size_t i = 0; i < order.size(); ++i) b_shape[i] = decoded.shape[order[i]];
    const auto b_strides = c_strides(b_shape);
    std::vector<std::int64_t> strides(order.size());  // per decoded axis j = order[i]
    for (std::size_t i = 0; i < order.size(); ++i) strides[order[i]] = b_strides[i];
    permute_copy(in.data(), out.data(), decoded.shape, strides, decoded.dtype.size());
  }

 private:
  std::vector<std::size_t> resolve(std::size_t rank) const {
    if (legacy_) {
      std::vector<std::size_t> o(rank);
      for (std::size_t i = 0; i < rank; ++i) o[i] = legacy_ == 'C' ? i : rank - 1 - i;
      return o;
    }
    if (order_.size() != rank)
      throw InvalidMetadata("", "order",
                            "transpose: order has " + std::to_string(order_.size()) +
                                " entries but the chunk has " + std::to_string(rank) + " dimensions");
    return order_;
  }

  static void check(const ArraySpec& spec, ByteSpan in, MutableByteSpan out) {
    if (in.size() != spec.num_bytes() || out.size() != spec.num_bytes())
      throw InvalidArgument("", "transpose",
                            "transpose: buffers are " + std::to_string(in.size()) + " and " +
                                std::to_string(out.size()) + " bytes, expected " +
                                std::to_string(spec.num_bytes()));
  }

  std::vector<std::size_t> order_;
  char legacy_;
};

}  // namespace

std::unique_ptr<ArrayToArrayCodec> make_transpose_codec(const nlohmann::json& config) {
  if (!config.is_object() || !config.contains("order"))
    throw InvalidMetadata("", "order", "transpose: configuration with \"order\" is required");
  for (const auto& [key, value] : config.items())
    if (key != "order")
      throw InvalidMetadata("", key, "transpose: unknown configuration member '" + key + "'");
  const auto& j = config["order"];
  if (j == "C" || j == "F") return std::make_unique<TransposeCodec>(std::vector<std::size_t>{}, j.get<std::string>()[0]);
  const auto bad = [&] {
    return InvalidMetadata("", "order",
                           "transpose: order must be a permutation of 0..n-1, got " + j.dump());
  };
  if (!j.is_array()) throw bad();
  std::vector<std::size_t> order;
  std::vector<bool> seen(j.size(), false);
  for (const auto& v : j) {
    if (!v.is_number_integer() || v.get<std::int64_t>() < 0 ||
        v.get<std::uint64_t>() >= j.size() || seen[v.get<std::size_t>()])
      throw bad();
    seen[v.get<std::size_t>()] = true;
    order.push_back(v.get<std::size_t>());
  }
  return std::make_unique<TransposeCodec>(std::move(order), '\0');
}

}  // namespace zarrcoro::codecs
