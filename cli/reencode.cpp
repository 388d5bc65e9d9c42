// See cli/reencode.hpp.
#include "cli/reencode.hpp"

#include <algorithm>
#include <future>
#include <iostream>

#include <boost/asio/use_future.hpp>

#include <zarrcoro/array.hpp>
#include <zarrcoro/store/memory.hpp>

#include "cli/blocks.hpp"
#include "cli/common.hpp"
#include "cli/layout.hpp"

namespace zarrcoro::cli {
namespace {

using json = nlohmann::json;
using Shape = std::vector<std::uint64_t>;

std::string node_name(const std::string& path) { return path.empty() ? "/" : path; }

// A shape option for the array at `path`: a Failure for SRC itself (an
// array) of another rank; nullopt, with a note, for an array of another
// rank in a group (whose arrays may have several ranks).
std::optional<Shape> shape_option(const std::string& text, const std::string& option, const ArrayMetadata& src,
                                  const std::string& path) {
  Shape v = parse_list(text, option);
  if (v.size() == src.rank()) return v;
  if (path.empty())
    throw Failure(option + " '" + text + "' has " + count_of(v.size(), "dimension") + "; the array has " +
                  count_of(src.rank(), "dimension"));
  std::cerr << "note: " << option << " '" << text << "' has " << count_of(v.size(), "dimension") << "; array '"
            << node_name(path) << "' has " << src.rank() << " and keeps its own\n";
  return std::nullopt;
}

// Refuses SRC and DST that are one directory or where one holds the other
// (also through symbolic links; URLs compared as written): the copy would
// read what it is replacing, and --overwrite would remove SRC before it is
// read.
void check_apart(const std::filesystem::path& src, const std::filesystem::path& dst) {
  namespace fs = std::filesystem;
  auto inside = [](const std::string& a, const std::string& b) {  // a == b or a below b
    return a == b || (a.size() > b.size() && a.compare(0, b.size(), b) == 0 && (b.back() == '/' || a[b.size()] == '/'));
  };
  auto norm = [](const fs::path& p) {
    std::error_code ec;
    std::string s = is_remote(p) ? p.string() : fs::weakly_canonical(fs::absolute(p), ec).lexically_normal().string();
    while (s.size() > 1 && s.back() == '/') s.pop_back();
    return s;
  };
  if (is_remote(src) != is_remote(dst)) return;
  const std::string a = norm(src), b = norm(dst);
  if (inside(a, b) || inside(b, a))
    throw Failure(quoted(src) + " and " + quoted(dst) + (a == b ? " are the same place" : " hold one another") +
                  "; reencode into a new place, then move it");
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
  json index_codecs = default_index_codecs();
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
    dimension_names_to_v2(m);  // xarray's convention for v2
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
    make_sharded(m, *shard, inner, chain, index_codecs, index_location, node_name(path));
  } else {
    m.chunk_shape = inner;
    m.codecs = chain;
  }
  return m;
}

struct Plan {
  std::string path;
  Array src;
  ArrayMetadata meta;
  Blocks blocks;
};

Plan plan(const Array& src, const std::string& path, const ReencodeOptions& o) {
  ArrayMetadata meta = target(src.metadata(), path, o);
  Blocks blocks(Region::all(meta.shape), meta.chunk_shape, meta.data_type.size(), o.block_bytes);
  return Plan{path, src, std::move(meta), std::move(blocks)};
}

// Copies the array block by block, reading the next block while writing
// one: as bytes, or as strings for variable-length types.
template <class Read, class Write>
void copy_blocks(const Plan& p, Read read, Write write, const std::filesystem::path& src_dir,
                 const std::filesystem::path& dst_dir, Progress& progress) {
  pipelined(
      p.blocks.count(), [&](std::uint64_t i) { return at_dir(src_dir, read(p.blocks.region(i))); },
      [&](std::uint64_t i, const auto& data) {
        progress.add(1, at(dst_dir, [&] { return write(p.blocks.region(i), data); }));
      });
}

void copy(const Plan& p, const Array& dst, const std::filesystem::path& src_dir, const std::filesystem::path& dst_dir,
          Progress& progress) {
  using Strings = std::vector<std::string>;
  if (p.meta.data_type.is_variable_length()) {
    copy_blocks(
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
  copy_blocks(
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
  check_apart(src_dir, dst_dir);
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
                << shape_text(p.meta.chunk_shape) << ' ' << d.describe_codecs() << "; " << p.blocks.count()
                << (p.blocks.count() == 1 ? " block of " : " blocks of ") << shape_text(p.blocks.block_shape()) << '\n';
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
  for (const auto& p : plans) total += p.blocks.count();
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
  refresh_consolidated_above(rt, dst_dir);
}

}  // namespace zarrcoro::cli
