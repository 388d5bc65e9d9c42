// sharding_indexed (Zarr v3 sharding_indexed codec spec; see sharding.hpp).
#include "codecs/sharding.hpp"

#include <algorithm>
#include <cstring>

#include <zarrcoro/error.hpp>

#include "codecs/box.hpp"
#include "codecs/vlen.hpp"

namespace zarrcoro::codecs {
namespace {

using json = nlohmann::json;

[[noreturn]] void corrupt(const std::string& msg) { throw CorruptChunk("", "sharding_indexed", msg); }

std::vector<std::uint64_t> parse_chunk_shape(const json& j) {
  if (!j.is_array()) throw InvalidMetadata("", "chunk_shape", "expected an array of positive integers");
  std::vector<std::uint64_t> out;
  for (const auto& v : j) {
    // Signed JSON integers count too: {8, 8} built in C++ is signed.
    if (!v.is_number_integer() || (!v.is_number_unsigned() && v.get<std::int64_t>() <= 0) ||
        v.get<std::uint64_t>() == 0)
      throw InvalidMetadata("", "chunk_shape", "expected positive integers, got " + j.dump());
    out.push_back(v.get<std::uint64_t>());
  }
  return out;
}

// Calls f(coords, number) for each inner chunk in C order.
template <class F>
void for_each_inner(const std::vector<std::uint64_t>& per_shard, F&& f) {
  std::vector<std::uint64_t> c(per_shard.size(), 0);
  std::size_t n = 0;
  while (true) {
    f(std::span<const std::uint64_t>(c), n++);
    std::size_t d = c.size();
    while (d > 0) {
      --d;
      if (++c[d] < per_shard[d]) break;
      c[d] = 0;
      if (d == 0) return;
    }
    if (c.empty()) return;
  }
}

}  // namespace

ShardingCodec::ShardingCodec(const json& config, const ArraySpec& shard) {
  if (!config.is_object()) throw InvalidMetadata("", "", "sharding_indexed needs a configuration object");
  for (const auto& [k, v] : config.items())
    if (k != "chunk_shape" && k != "codecs" && k != "index_codecs" && k != "index_location")
      throw InvalidMetadata("", k, "unknown configuration member '" + k + "'");
  if (!config.contains("chunk_shape")) throw InvalidMetadata("", "chunk_shape", "required");
  if (!config.contains("codecs")) throw InvalidMetadata("", "codecs", "required");
  chunk_shape_ = parse_chunk_shape(config["chunk_shape"]);
  inner_json_ = config["codecs"];
  index_json_ = config.value("index_codecs", json::array({{{"name", "bytes"},
                                                           {"configuration", {{"endian", "little"}}}},
                                                          {{"name", "crc32c"}}}));
  const std::string location = config.value("index_location", std::string("end"));
  if (location != "start" && location != "end")
    throw InvalidMetadata("", "index_location", "expected \"start\" or \"end\", got \"" + location + "\"");
  index_at_start_ = location == "start";
  validate(shard);

  per_shard_.resize(chunk_shape_.size());
  for (std::size_t d = 0; d < chunk_shape_.size(); ++d) {
    per_shard_[d] = shard.shape[d] / chunk_shape_[d];
    num_inner_ *= per_shard_[d];
  }
  inner_ = CodecPipeline::from_json(inner_json_, {shard.dtype, chunk_shape_, shard.fill});
  std::vector<std::uint64_t> index_shape = per_shard_;
  index_shape.push_back(2);
  try {
    index_ = CodecPipeline::from_json(index_json_, {DataTypeKind::uint64, index_shape, {}});
  } catch (const Error& e) {  // "codecs[1]" of the index list -> "index_codecs[1]"
    const std::string f = e.field().rfind("codecs", 0) == 0 ? e.field().substr(6) : "";
    throw_error(e.code(), "", "index_codecs" + f, e.detail());
  }
  const auto size = index_->encoded_size();
  if (size < 0)
    throw InvalidMetadata("", "index_codecs",
                          "the index must have a fixed size: only bytes and crc32c are allowed, not "
                          "compressors");
  index_bytes_ = static_cast<std::uint64_t>(size);
  index_layout_ = json{{"chunks_per_shard", per_shard_},
                       {"index_codecs", index_->to_json()},
                       {"index_location", index_at_start_ ? "start" : "end"}}
                      .dump();
}

json ShardingCodec::to_json() const {
  return {{"name", "sharding_indexed"},
          {"configuration",
           {{"chunk_shape", chunk_shape_},
            {"codecs", inner_->to_json()},
            {"index_codecs", index_->to_json()},
            {"index_location", index_at_start_ ? "start" : "end"}}}};
}

void ShardingCodec::validate(const ArraySpec& spec) const {
  if (spec.shape.size() != chunk_shape_.size())
    throw InvalidMetadata("", "chunk_shape",
                          "rank " + std::to_string(chunk_shape_.size()) + " does not match the shard rank " +
                              std::to_string(spec.shape.size()));
  for (std::size_t d = 0; d < chunk_shape_.size(); ++d)
    if (spec.shape[d] % chunk_shape_[d] != 0)
      throw InvalidMetadata("", "chunk_shape",
                            "the shard shape must be divisible by the inner chunk shape (dimension " +
                                std::to_string(d) + ": " + std::to_string(spec.shape[d]) + " vs " +
                                std::to_string(chunk_shape_[d]) + ")");
}

std::size_t ShardingCodec::inner_number(std::span<const std::uint64_t> coords) const {
  std::size_t n = 0;
  for (std::size_t d = 0; d < coords.size(); ++d) n = n * per_shard_[d] + coords[d];
  return n;
}

void ShardingCodec::inner_coords(std::size_t number, std::span<std::uint64_t> coords) const {
  for (std::size_t d = per_shard_.size(); d-- > 0; number /= per_shard_[d]) coords[d] = number % per_shard_[d];
}

ShardingCodec::Index ShardingCodec::decode_index(ByteSpan encoded, std::optional<std::uint64_t> shard_size) const {
  if (encoded.size() != index_bytes_)
    corrupt("shard index is " + std::to_string(encoded.size()) + " bytes, expected " +
            std::to_string(index_bytes_));
  Index idx;
  idx.entries.resize(2 * num_inner_);
  index_->decode(encoded, std::as_writable_bytes(std::span(idx.entries)));
  for (std::size_t i = 0; i < num_inner_; ++i) {
    if (idx.missing(i)) continue;
    const std::uint64_t off = idx.offset(i), n = idx.nbytes(i);
    if (off == kMissing || n == kMissing || off + n < off ||
        (shard_size && off + n > *shard_size))
      corrupt("index entry " + std::to_string(i) + " (offset " + std::to_string(off) + ", nbytes " +
              std::to_string(n) + ") lies outside the shard");
  }
  return idx;
}

ShardingCodec::Index ShardingCodec::shard_index(ByteSpan shard) const {
  if (shard.size() < index_bytes_)
    corrupt("shard is " + std::to_string(shard.size()) + " bytes, shorter than its index (" +
            std::to_string(index_bytes_) + ")");
  return decode_index(index_at_start_ ? shard.first(index_bytes_) : shard.last(index_bytes_), shard.size());
}

void ShardingCodec::decode(const ArraySpec& spec, ByteSpan in, MutableByteSpan out) const {
  const Index idx = shard_index(in);
  const std::size_t es = spec.dtype.size();
  const std::vector<std::uint64_t> zero(chunk_shape_.size(), 0);
  std::vector<std::uint64_t> start(chunk_shape_.size());
  Bytes fill = spec.fill.empty() ? Bytes(es, std::byte{0}) : spec.fill;
  Bytes chunk(inner_->chunk_spec().num_bytes());  // not thread_local: sharding may nest
  for_each_inner(per_shard_, [&](std::span<const std::uint64_t> c, std::size_t i) {
    for (std::size_t d = 0; d < c.size(); ++d) start[d] = c[d] * chunk_shape_[d];
    if (idx.missing(i)) {
      fill_box(out.data(), spec.shape, start, chunk_shape_, fill.data(), es);
      return;
    }
    inner_->decode(in.subspan(idx.offset(i), idx.nbytes(i)), chunk);
    copy_box(chunk.data(), chunk_shape_, zero, out.data(), spec.shape, start, chunk_shape_, es);
  });
}

void ShardingCodec::encode(const ArraySpec& spec, ByteSpan in, Bytes& out) const {
  const std::vector<std::uint64_t> zero(spec.shape.size(), 0);
  if (!update(spec, std::nullopt, in.data(), spec.shape, zero, zero, spec.shape, out)) encode_empty(out);
}

void ShardingCodec::encode_empty(Bytes& out) const {
  std::vector<std::uint64_t> entries(2 * num_inner_, kMissing);
  index_->encode(std::as_bytes(std::span(entries)), out);
}

ShardingCodec::Layout ShardingCodec::layout(InnerOrder order, bool keep_empty) const {
  Layout out;
  out.keep_empty = keep_empty;
  if (order == InnerOrder::lexicographic) return out;
  const std::size_t r = per_shard_.size();
  // Per dimension, the bits of a coordinate (0 for a single inner chunk).
  std::vector<unsigned> bits(r, 0);
  unsigned total = 0;
  for (std::size_t d = 0; d < r; ++d) {
    for (std::uint64_t v = per_shard_[d] - 1; v; v >>= 1) ++bits[d];
    total += bits[d];
  }
  if (order == InnerOrder::morton && total > 64)
    throw InvalidArgument("", "layout", "Morton order needs " + std::to_string(total) + " bits, more than 64");
  std::vector<std::pair<std::uint64_t, std::size_t>> keyed;  // (sort key, C-order number)
  keyed.reserve(num_inner_);
  for_each_inner(per_shard_, [&](std::span<const std::uint64_t> c, std::size_t i) {
    std::uint64_t key = 0;
    if (order == InnerOrder::colexicographic) {
      for (std::size_t d = r; d-- > 0;) key = key * per_shard_[d] + c[d];
    } else {
      unsigned out_bit = 0;
      for (unsigned b = 0; out_bit < total; ++b)
        for (std::size_t d = 0; d < r; ++d)
          if (b < bits[d]) key |= ((c[d] >> b) & 1) << out_bit++;
    }
    keyed.emplace_back(key, i);
  });
  std::sort(keyed.begin(), keyed.end());
  out.order.reserve(num_inner_);
  for (const auto& k : keyed) out.order.push_back(k.second);
  return out;
}

bool ShardingCodec::update(const ArraySpec& spec, std::optional<ByteSpan> existing, const std::byte* src,
                           std::span<const std::uint64_t> src_shape, std::span<const std::uint64_t> src_start,
                           std::span<const std::uint64_t> shard_start, std::span<const std::uint64_t> box,
                           Bytes& out, const Layout* layout, std::span<const std::uint8_t> only) const {
  const std::size_t r = chunk_shape_.size(), es = spec.dtype.size();
  Index old;
  if (existing) old = shard_index(*existing);
  Bytes fill = spec.fill.empty() ? Bytes(es, std::byte{0}) : spec.fill;
  // Variable-length elements by content (`fill` then holds a view of the fill value's bytes).
  std::string_view fill_text;
  if (spec.dtype.is_variable_length() && fill.size() == sizeof(VlenView)) {
    VlenView v;
    std::memcpy(&v, fill.data(), sizeof v);
    if (v.size) fill_text = {v.data, static_cast<std::size_t>(v.size)};
  }
  const bool as_zarr_python = layout && layout->fill_as_zarr_python;
  auto is_fill = [&](ByteSpan c) {
    if (spec.dtype.is_variable_length()) return all_views_equal(c, fill_text);
    return as_zarr_python ? all_equal_as_zarr_python(c, fill.data(), spec.dtype) : all_equal(c, fill.data(), es);
  };
  // The shard is assembled in its final buffer: the index's room first (at
  // the start) or last (at the end), each stored inner chunk memcpy'd once
  // at its offset. Its size is bounded before the first piece (the kept
  // bytes of `existing` plus the touched inner chunks at their fixed
  // encoded size), so it never reallocates then; a compressing inner
  // pipeline grows it by hand (memcpy, not Bytes' per-element moves). A
  // trivial inner pipeline (a plain copy) gathers each inner chunk straight
  // into the shard.
  const std::uint64_t inner_bytes = inner_->chunk_spec().num_bytes();
  const bool direct = inner_->is_trivial() && inner_->encoded_size() == static_cast<std::int64_t>(inner_bytes);
  const std::int64_t fixed = inner_->encoded_size();
  std::uint64_t touched_chunks = 1;
  for (std::size_t d = 0; d < r; ++d) {
    const std::uint64_t first = shard_start[d] / chunk_shape_[d];
    const std::uint64_t last = box[d] == 0 ? first : (shard_start[d] + box[d] - 1) / chunk_shape_[d] + 1;
    touched_chunks *= last - first;
  }
  std::uint64_t bound = index_bytes_ + (existing ? existing->size() : 0);
  bound += touched_chunks * (fixed >= 0 ? static_cast<std::uint64_t>(fixed) : inner_bytes);
  Bytes shard;
  shard.reserve(bound);
  shard.resize(index_at_start_ ? index_bytes_ : 0);
  // Room for `n` more bytes at the end of `shard`; returns where it starts.
  auto grow = [&](std::size_t n) -> std::size_t {
    const std::size_t at = shard.size();
    if (at + n > shard.capacity()) {
      Bytes bigger;
      bigger.reserve(std::max(at + n, 2 * shard.capacity()));
      bigger.resize(at);
      if (at) std::memcpy(bigger.data(), shard.data(), at);
      shard.swap(bigger);
    }
    shard.resize(at + n);
    return at;
  };
  auto append = [&](ByteSpan piece) {
    const std::size_t at = grow(piece.size());
    if (!piece.empty()) std::memcpy(shard.data() + at, piece.data(), piece.size());
  };

  std::vector<std::uint64_t> entries(2 * num_inner_, kMissing);
  Bytes encoded, chunk_buf(direct ? 0 : inner_bytes);
  std::vector<std::uint64_t> lo(r), hi(r), in_chunk(r), in_src(r), ext(r);
  bool any = false;
  const bool keep_empty = layout && layout->keep_empty;
  auto store_inner = [&](std::span<const std::uint64_t> c, std::size_t i) {
    // The part of the box inside this inner chunk, if any.
    bool touched = true, whole = true;
    for (std::size_t d = 0; d < r; ++d) {
      const std::uint64_t c0 = c[d] * chunk_shape_[d], c1 = c0 + chunk_shape_[d];
      lo[d] = std::max(c0, shard_start[d]);
      hi[d] = std::min(c1, shard_start[d] + box[d]);
      if (lo[d] >= hi[d]) touched = false;
      whole = whole && lo[d] == c0 && hi[d] == c1;
    }
    if (!only.empty() && !only[i]) touched = false;
    const bool had = existing && !old.missing(i);
    const std::size_t at = shard.size();
    if (!touched) {
      if (!had) return;
      append(existing->subspan(old.offset(i), old.nbytes(i)));  // kept as encoded
    } else {
      // The decoded inner chunk: in place in the shard when encoding is a copy.
      const MutableByteSpan chunk =
          direct ? MutableByteSpan(shard.data() + grow(inner_bytes), inner_bytes) : MutableByteSpan(chunk_buf);
      if (!whole) {
        if (had) inner_->decode(existing->subspan(old.offset(i), old.nbytes(i)), chunk);
        else fill_elements(chunk.data(), inner_->chunk_spec().num_elements(), fill.data(), es);
      }
      for (std::size_t d = 0; d < r; ++d) {
        in_chunk[d] = lo[d] - c[d] * chunk_shape_[d];
        in_src[d] = src_start[d] + (lo[d] - shard_start[d]);
        ext[d] = hi[d] - lo[d];
      }
      copy_box(src, src_shape, in_src, chunk.data(), chunk_shape_, in_chunk, ext, es);
      if (!keep_empty && is_fill(chunk)) {  // an empty inner chunk is not stored
        shard.resize(at);
        return;
      }
      if (!direct) {
        inner_->encode(chunk, encoded);
        append(encoded);
      }
    }
    entries[2 * i] = at;
    entries[2 * i + 1] = shard.size() - at;
    any = true;
  };
  if (!layout || layout->order.empty()) {
    for_each_inner(per_shard_, store_inner);
  } else {
    std::vector<std::uint64_t> c(r);
    for (const std::size_t i : layout->order) {
      inner_coords(i, c);
      store_inner(c, i);
    }
  }
  out.clear();
  if (!any) return false;
  Bytes index;
  index_->encode(std::as_bytes(std::span(entries)), index);
  if (index_at_start_) std::memcpy(shard.data(), index.data(), index.size());
  else append(index);
  if (shard.capacity() / 2 > shard.size()) {  // compressed well below the bound: hold only what it needs
    Bytes exact;
    exact.reserve(shard.size());
    exact.resize(shard.size());
    std::memcpy(exact.data(), shard.data(), shard.size());
    shard.swap(exact);
  }
  out = std::move(shard);
  return true;
}

std::unique_ptr<ArrayToBytesCodec> make_sharding_codec(const nlohmann::json& config, const ArraySpec& shard) {
  return std::make_unique<ShardingCodec>(config, shard);
}

}  // namespace zarrcoro::codecs
