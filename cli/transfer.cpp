// See cli/transfer.hpp.
#include "cli/transfer.hpp"

#include <future>
#include <limits>
#include <optional>

#include <boost/asio/use_future.hpp>
#include <nlohmann/json.hpp>

#include <zarrcoro/array.hpp>
#include <zarrcoro/error.hpp>
#include <zarrcoro/metadata.hpp>
#include <zarrcoro/npy.hpp>

#include "cli/common.hpp"
#include "cli/layout.hpp"

namespace zarrcoro::cli {
namespace {

using json = nlohmann::json;
using Shape = std::vector<std::uint64_t>;

// The dimension names of --dimension-names, one per dimension.
std::vector<std::optional<std::string>> parse_names(const std::string& text, std::size_t rank, const fs::path& in) {
  std::vector<std::optional<std::string>> names;
  for (std::size_t pos = 0; rank > 0;) {
    const auto comma = text.find(',', pos);
    names.emplace_back(text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos));
    if (names.back()->empty())
      throw Failure("--dimension-names: name " + std::to_string(names.size()) + " in '" + text + "' is empty");
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  if (names.size() != rank || (rank == 0 && !text.empty()))
    throw Failure("--dimension-names: '" + text + "' has " + count_of(rank == 0 ? 1 : names.size(), "name") +
                  ", the array in " + quoted(in) + " has " + count_of(rank, "dimension"));
  return names;
}

json parse_attrs(const std::string& text) {
  auto j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    throw Failure("--attrs: expected a JSON object such as '{\"units\": \"m\"}', got '" + text + "'");
  return j;
}

// The metadata of the array `import` creates for data of `dtype` and `shape`.
ArrayMetadata import_metadata(DataType dtype, const Shape& shape, const fs::path& in, const fs::path& dir,
                              const ImportOptions& o) {
  const std::string codec = !o.codec.empty() ? o.codec : o.zarr_format == 2 ? "blosc:lz4:5:shuffle" : "zstd:3";
  const auto compressor = parse_codec(codec, dtype.size());

  ArrayMetadata m;
  m.zarr_format = o.zarr_format;
  if (o.zarr_format == 2) m.chunk_key_encoding = {ChunkKeyEncoding::Kind::v2, '.'};
  if (!o.separator.empty()) m.chunk_key_encoding.separator = o.separator[0];
  m.shape = shape;
  m.data_type = dtype;
  auto rank_checked = [&](const std::string& text, const char* option) {
    Shape v = parse_list(text, option);
    if (v.size() != m.shape.size())
      throw Failure(std::string(option) + ": '" + text + "' has " + count_of(v.size(), "dimension") +
                    ", the array in " + quoted(in) + " has " + std::to_string(m.shape.size()));
    return v;
  };
  Shape inner;
  if (o.chunks_given) inner = rank_checked(o.chunks, "--chunks");
  else if (!o.shard.empty()) throw Failure("--shard needs --chunks, the shape of the chunks inside a shard");
  else inner = guess_chunk_shape(m.shape, dtype.size());

  json chain = json::array();
  if (o.order == "F" && m.shape.size() > 1) {  // column-major chunks (v2: "order": "F")
    json axes = json::array();
    for (std::size_t d = m.shape.size(); d-- > 0;) axes.push_back(d);
    chain.push_back({{"name", "transpose"}, {"configuration", {{"order", axes}}}});
  }
  json bytes{{"name", "bytes"}};
  // Structured fields from a .npy declare no order: the codec's endian covers them.
  const bool multi_byte = dtype.is_structured() ? dtype.needs_byte_order() : dtype.swap_unit() > 1;
  if (multi_byte) bytes["configuration"] = {{"endian", o.endian}};
  chain.push_back(bytes);
  if (compressor) chain.push_back(*compressor);

  if (!o.shard.empty()) {
    if (o.zarr_format == 2) throw Failure("--shard: Zarr v2 has no sharding (use --zarr-format 3)");
    make_sharded(m, rank_checked(o.shard, "--shard"), inner, chain, default_index_codecs(), "end", dir.string());
  } else {
    m.chunk_shape = inner;
    m.codecs = chain;
  }
  if (!o.fill_value.empty()) {
    // JSON, read as metadata is (NaN and Infinity tokens; an integer below
    // int64's range stays out of it), or a bare word taken as a JSON string.
    json j;
    try {
      j = parse_json(o.fill_value, "--fill-value");
    } catch (const InvalidMetadata&) {
      j = o.fill_value;
    }
    m.fill_value = parse_fill_value(j, m.data_type, "--fill-value");
  }
  if (o.attrs_given) m.attributes = parse_attrs(o.attrs);
  if (o.dimension_names_given) m.dimension_names = parse_names(o.dimension_names, m.shape.size(), in);
  if (o.zarr_format == 2) dimension_names_to_v2(m);  // xarray's convention
  return m;
}

}  // namespace

void cmd_import(const fs::path& in, const fs::path& dir, const ImportOptions& o) {
  const NpyReader reader(in);  // the header: the data is read block by block
  ArrayMetadata m = import_metadata(reader.dtype(), reader.shape(), in, dir, o);

  check_destination(dir, o.overwrite);
  Runtime rt;
  auto store = open_dir(rt, dir, false);
  const CreateMode mode = o.overwrite ? CreateMode::overwrite : CreateMode::fail_if_exists;
  const Array a = at(dir, [&] {
    try {
      return Array::create_blocking(rt, store, "", std::move(m), mode);
    } catch (const AlreadyExists& e) {
      throw Failure(quoted(dir) + " already holds a Zarr node ('" + e.key() +
                    "'); refusing to overwrite it (--overwrite replaces it)");
    }
  });
  const Blocks blocks(Region::all(a.shape()), a.metadata().chunk_shape, a.dtype().size(), o.block_bytes);
  Progress progress("import", "blocks", blocks.count(), o.progress);
  pipelined(
      blocks.count(),
      [&](std::uint64_t i) {
        return std::async(std::launch::async, [&reader, r = blocks.region(i)] { return reader.read(r); });
      },
      [&](std::uint64_t i, const NdArray& v) {
        at(dir, [&] { a.write_blocking(blocks.region(i), v.data); });
        progress.add(1, v.data.size());
      });
  progress.finish();
  refresh_consolidated_above(rt, dir);
}

void cmd_export(const fs::path& dir, const fs::path& out, const ExportOptions& o) {
  Runtime rt;
  auto store = open_dir(rt, dir, true);
  if (const auto type = read_node(rt, *store, dir).type; type != "array")
    throw Failure(quoted(dir) + " is a " + type + ", not an array");
  const Array a = at(dir, [&] { return Array::open_blocking(rt, store, ""); });
  const Region r = at(dir, [&] { return Region::parse(o.region, a.shape()); });
  // Refused before reading anything if a .npy cannot hold it (npy_descr names
  // every dtype the engine has), or if it cannot be addressed in 64 bits.
  at(dir, [&] {
    npy_header(a.dtype(), r.shape());
    if (r.num_elements() > std::numeric_limits<std::uint64_t>::max() / a.dtype().size())
      throw InvalidArgument("", "region", "the region's byte size does not fit in 64 bits");
  });
  NpyWriter writer(out, a.dtype(), r.shape());
  const RemoveOnSignal interrupted(writer.temp_path());  // Ctrl-C leaves no temporary file
  const Blocks blocks(r, a.metadata().chunk_shape, a.dtype().size(), o.block_bytes);
  Progress progress("export", "blocks", blocks.count(), o.progress);
  pipelined(
      blocks.count(),
      [&](std::uint64_t i) { return at_dir(dir, a.async_read(blocks.region(i), boost::asio::use_future)); },
      [&](std::uint64_t i, const NdArray& v) {
        Region local = blocks.region(i);  // in the output's coordinates
        for (std::size_t d = 0; d < local.start.size(); ++d) {
          local.start[d] -= r.start[d];
          local.stop[d] -= r.start[d];
        }
        writer.write(local, v.data);
        progress.add(1, v.data.size());
      });
  writer.commit();
  progress.finish();
}

}  // namespace zarrcoro::cli
