// See cli/reencode.hpp.
#include "cli/reencode.hpp"

#include <algorithm>
#include <future>
#include <iostream>

#include <boost/asio/use_future.hpp>

#include <zarrcoro/array.hpp>
#include <zarrcoro/store/memory.hpp>

#include "cli/common.hpp"

namespace zarrcoro::cli {
namespace {

using json = nlohmann::json;
using Shape = std::vector<std::uint64_t>;

std::string shape_text(const Shape& v) {
  std::string s = "(";
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + (v.size() == 1 ? ",)" : ")");
}

std::string node_name(const std::string& path) { return path.empty() ? "/" : path; }

// A shape option for the array at `path`; nullopt, with a note, for an
// array of another rank (in a group of arrays of several ranks).
std::optional<Shape> shape_option(const std::string& text, const std::string& option, const ArrayMetadata& src,
                                  const std::string& path) {
  Shape v = parse_list(text, option);
  if (v.size() == src.rank()) return v;
  std::cerr << "note: " << option << " '" << text << "' has " << v.size() << " dimensions; array '"
            << node_name(path) << "' has " << src.rank() << " and keeps its own\n";
  return std::nullopt;
}

bool multi_byte(DataType t) { return t.is_structured() ? t.needs_byte_order() : t.swap_unit() > 1; }

// The chain up to its array-to-bytes codec, then `codec`'s compressor.
json with_compressor(const json& chain, const std::string& codec, DataType t) {
  json out = json::array();
  for (const auto& c : chain) {
    out.push_back(c);
    const std::string name = c.value("name", "");
    if (name == "bytes" || name == "vlen-utf8" || name == "vlen-bytes") break;
  }
  if (auto compressor = parse_codec(codec, t.size())) out.push_back(*compressor);
  return out;
}

json with_endian(json chain, const std::string& endian, DataType t) {
  for (auto& c : chain)
    if (c.value("name", "") == "bytes" && multi_byte(t)) c["configuration"] = {{"endian", endian}};
  return chain;
}

// The destination metadata of the array at `path` (see reencode.hpp).
ArrayMetadata target(const ArrayMetadata& s, const std::string& path, const ReencodeOptions& o) {
  const std::string key = path.empty() ? "(root)" : path;
  ArrayMetadata m;
  m.zarr_format = o.zarr_format ? o.zarr_format : s.zarr_format;
  m.shape = s.shape;
  m.data_type = s.data_type;
  m.fill_value = s.fill_value;
  m.attributes = s.attributes;
  m.dimension_names = s.dimension_names;

  // The source's chain, its sharding taken apart.
  json chain = s.zarr_format == 2 ? s.v2_codecs(key) : s.codecs;
  Shape inner = s.chunk_shape;
  std::optional<Shape> shard;
  json index_codecs = json::parse(R"([{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}])");
  std::string index_location = "end";
  if (chain.size() == 1 && chain[0].value("name", "") == "sharding_indexed") {
    const json& cfg = chain[0]["configuration"];
    shard = s.chunk_shape;
    inner = cfg["chunk_shape"].get<Shape>();
    index_codecs = cfg["index_codecs"];
    index_location = cfg.value("index_location", "end");
    chain = cfg["codecs"];
  }
  if (!o.chunks.empty()) inner = shape_option(o.chunks, "--chunks", s, path).value_or(inner);
  if (o.shard == "none") shard.reset();
  else if (!o.shard.empty()) shard = shape_option(o.shard, "--shard", s, path).value_or(shard.value_or(Shape{}));
  if (shard && shard->empty() && s.rank() > 0) shard.reset();  // another rank, and unsharded before
  const bool same_codecs = o.codec.empty() && o.endian.empty();
  if (!o.codec.empty()) chain = with_compressor(chain, o.codec, s.data_type);
  if (!o.endian.empty()) chain = with_endian(std::move(chain), o.endian, s.data_type);

  if (m.zarr_format == 2) {
    if (shard)
      throw Failure("array '" + node_name(path) + "' is sharded" + (o.shard.empty() ? "" : " (--shard)") +
                    ": Zarr v2 has no sharding; reencode it with --shard none");
    m.chunk_key_encoding = {ChunkKeyEncoding::Kind::v2, '.'};
    if (m.dimension_names) {  // xarray's convention for v2
      json names = json::array();
      bool all = true;
      for (const auto& n : *m.dimension_names) {
        all = all && n.has_value();
        names.push_back(n.value_or(""));
      }
      if (all) m.attributes["_ARRAY_DIMENSIONS"] = names;
      m.dimension_names.reset();
    }
    // v2 to v2 with the same codecs keeps the document's exact compressor, filters and order.
    if (s.zarr_format == 2 && same_codecs && !shard && inner == s.chunk_shape) m.v2 = s.v2;
  } else {
    m.chunk_key_encoding = s.zarr_format == 3 ? s.chunk_key_encoding : ChunkKeyEncoding{};
    if (s.zarr_format == 2) {
      m.chunk_key_encoding = ChunkKeyEncoding{};
      const auto it = m.attributes.find("_ARRAY_DIMENSIONS");
      if (it != m.attributes.end() && it->is_array() && it->size() == m.rank() &&
          std::all_of(it->begin(), it->end(), [](const json& n) { return n.is_string(); })) {
        m.dimension_names.emplace();
        for (const auto& n : *it) m.dimension_names->push_back(n.get<std::string>());
        m.attributes.erase(it);
      }
    }
  }
  if (!o.separator.empty()) m.chunk_key_encoding.separator = o.separator[0];
  if (shard) {
    for (std::size_t d = 0; d < inner.size(); ++d)
      if ((*shard)[d] % inner[d] != 0)
        throw Failure("--shard: the shard shape " + shape_text(*shard) + " of array '" + node_name(path) +
                      "' is not a multiple of its chunk shape " + shape_text(inner));
    m.chunk_shape = *shard;
    m.codecs = json::array({{{"name", "sharding_indexed"},
                             {"configuration",
                              {{"chunk_shape", inner},
                               {"codecs", chain},
                               {"index_codecs", index_codecs},
                               {"index_location", index_location}}}}});
  } else {
    m.chunk_shape = inner;
    m.codecs = chain;
  }
  return m;
}

// Whole destination chunks (shards) per block: as many as fit in
// kBlockBytes, growing the last dimension first; at least one.
Shape block_shape(const ArrayMetadata& m) {
  Shape b(m.rank());
  std::uint64_t bytes = m.data_type.size();
  for (std::size_t d = 0; d < m.rank(); ++d) {
    b[d] = std::max<std::uint64_t>(1, std::min(m.chunk_shape[d], m.shape[d]));
    bytes = bytes > kBlockBytes ? bytes : bytes * b[d];
  }
  for (std::size_t d = m.rank(); d-- > 0;) {
    if (b[d] >= m.shape[d]) continue;
    const std::uint64_t units = (m.shape[d] + m.chunk_shape[d] - 1) / m.chunk_shape[d];
    const std::uint64_t k = std::clamp<std::uint64_t>(kBlockBytes / std::max<std::uint64_t>(bytes, 1), 1, units);
    b[d] = std::min(m.shape[d], m.chunk_shape[d] * k);
    bytes *= k;
    if (k < units) break;
  }
  return b;
}

struct Plan {
  std::string path;
  Array src;
  ArrayMetadata meta;
  Shape block;
  std::uint64_t blocks = 0;

  Region region(std::uint64_t i) const {
    Region r = Region::all(meta.shape);
    for (std::size_t d = meta.rank(); d-- > 0;) {
      const std::uint64_t n = (meta.shape[d] + block[d] - 1) / block[d], at = i % n;
      i /= n;
      r.start[d] = at * block[d];
      r.stop[d] = std::min(meta.shape[d], r.start[d] + block[d]);
    }
    return r;
  }
};

Plan plan(const Array& src, const std::string& path, const ReencodeOptions& o) {
  Plan p{path, src, target(src.metadata(), path, o), {}, 1};
  p.block = block_shape(p.meta);
  for (std::size_t d = 0; d < p.meta.rank(); ++d)
    p.blocks *= p.meta.shape[d] == 0 ? 0 : (p.meta.shape[d] + p.block[d] - 1) / p.block[d];
  return p;
}

// Copies the array block by block, reading the next block while writing
// one: as bytes, or as strings for variable-length types.
template <class Value, class Read, class Write>
void copy_blocks(const Plan& p, Read read, Write write, const std::filesystem::path& src_dir,
                 const std::filesystem::path& dst_dir, Progress& progress) {
  if (p.blocks == 0) return;
  std::future<Value> next = read(p.region(0));
  for (std::uint64_t i = 0; i < p.blocks; ++i) {
    Value data = at(src_dir, [&] { return next.get(); });
    if (i + 1 < p.blocks) next = read(p.region(i + 1));
    progress.add(1, at(dst_dir, [&] { return write(p.region(i), data); }));
  }
}

void copy(const Plan& p, const Array& dst, const std::filesystem::path& src_dir, const std::filesystem::path& dst_dir,
          Progress& progress) {
  using Strings = std::vector<std::string>;
  if (p.meta.data_type.is_variable_length()) {
    copy_blocks<Strings>(
        p, [&](Region r) { return p.src.async_read_strings(std::move(r), boost::asio::use_future); },
        [&](const Region& r, const Strings& v) {
          dst.write_strings_blocking(r, v);
          std::uint64_t bytes = 0;
          for (const auto& s : v) bytes += s.size();
          return bytes;
        },
        src_dir, dst_dir, progress);
    return;
  }
  copy_blocks<NdArray>(
      p, [&](Region r) { return p.src.async_read(std::move(r), boost::asio::use_future); },
      [&](const Region& r, const NdArray& v) {
        dst.write_blocking(r, v.data);
        return static_cast<std::uint64_t>(v.data.size());
      },
      src_dir, dst_dir, progress);
}

}  // namespace

void cmd_reencode(const std::filesystem::path& src_dir, const std::filesystem::path& dst_dir,
                  const ReencodeOptions& o) {
  if (!o.dry_run) check_destination(dst_dir, o.overwrite);
  Runtime rt;
  auto src = open_dir(rt, src_dir, true);
  const Node node = read_node(rt, *src, src_dir);

  // What to create, in order: groups (path, attributes, format) and arrays.
  struct GroupNode {
    std::string path;
    json attributes;
    int zarr_format;
  };
  std::vector<GroupNode> groups;
  std::vector<Plan> plans;
  bool consolidated = false;
  at(src_dir, [&] {
    if (node.type == "array") {
      plans.push_back(plan(Array::open_blocking(rt, src, ""), "", o));
      return;
    }
    const Group g = Group::open_blocking(rt, src, "");
    consolidated = g.has_consolidated_metadata();
    auto format = [&](int own) { return o.zarr_format ? o.zarr_format : own; };
    groups.push_back({"", g.attributes(), format(g.zarr_format())});
    for (const NodeEntry& m : g.members_blocking(true)) {
      if (m.node_type == NodeType::array) plans.push_back(plan(g.open_array_blocking(m.name), m.name, o));
      else groups.push_back({m.name, m.implicit ? json::object() : g.open_group_blocking(m.name).attributes(),
                             format(m.zarr_format)});
    }
  });

  if (o.dry_run) {
    auto scratch = std::make_shared<MemoryStore>();  // validates each destination and names its codecs
    for (const auto& gr : groups) std::cout << node_name(gr.path) << ": group -> v" << gr.zarr_format << '\n';
    for (const auto& p : plans) {
      const Array d = at(dst_dir, [&] { return Array::create_blocking(rt, scratch, p.path, p.meta); });
      const auto& sm = p.src.metadata();
      const bool sharded = p.meta.codecs.size() == 1 && p.meta.codecs[0].value("name", "") == "sharding_indexed";
      std::cout << node_name(p.path) << ": array " << sm.data_type.describe() << ' ' << shape_text(sm.shape)
                << ", v" << sm.zarr_format << " chunks " << shape_text(sm.chunk_shape) << ' '
                << p.src.describe_codecs() << " -> v" << p.meta.zarr_format << (sharded ? " shards " : " chunks ")
                << shape_text(p.meta.chunk_shape) << ' ' << d.describe_codecs() << "; " << p.blocks
                << (p.blocks == 1 ? " block of " : " blocks of ") << shape_text(p.block) << '\n';
    }
    return;
  }

  auto dst = open_dir(rt, dst_dir, false);
  const CreateMode root_mode = o.overwrite ? CreateMode::overwrite : CreateMode::fail_if_exists;
  for (const auto& gr : groups)
    at(dst_dir, [&] {
      Group::create_blocking(rt, dst, gr.path, gr.attributes, gr.zarr_format,
                             gr.path.empty() ? root_mode : CreateMode::fail_if_exists);
    });
  std::uint64_t total = 0;
  for (const auto& p : plans) total += p.blocks;
  Progress progress("reencode", "blocks", total, o.progress);
  for (const auto& p : plans) {
    const Array d = at(dst_dir, [&] {
      return Array::create_blocking(rt, dst, p.path, p.meta, p.path.empty() ? root_mode : CreateMode::fail_if_exists);
    });
    copy(p, d, src_dir, dst_dir, progress);
  }
  progress.finish();
  if (consolidated)
    at(dst_dir, [&] { Group::open_blocking(rt, dst, "", Consolidated::ignore).consolidate_blocking(); });
}

}  // namespace zarrcoro::cli
