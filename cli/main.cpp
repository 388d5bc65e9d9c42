// zarrcoro: inspect, copy, export and import Zarr v3 and v2 arrays in a
// local directory (or a file://, s3:// or, read-only, http(s):// URL).
//
//   zarrcoro info PATH
//   zarrcoro ls PATH [--recursive]
//   zarrcoro consolidate PATH
//   zarrcoro reencode SRC DST [--zarr-format 3|2] [--chunks ...] [--shard ...|none]
//                   [--codec ...] [--endian little|big] [--separator /|.]
//                   [--overwrite] [--dry-run] [--progress | --quiet]
//   zarrcoro export PATH OUT.npy [--region 0:10,5:20] [--progress | --quiet]
//   zarrcoro import IN.npy PATH [--chunks 100,100] [--shard 1000,1000] [--zarr-format 3|2]
//                   [--codec zstd:3|gzip:5|blosc:lz4:5:shuffle|zlib:1|lz4|none]
//                   [--endian little|big] [--order C|F] [--separator /|.]
//                   [--fill-value JSON] [--attrs JSON] [--dimension-names a,b]
//                   [--overwrite] [--progress | --quiet]
// (reencode, import and export also take --block-bytes N, for testing and
// tuning: the bound of one block.)
//
// info prints a JSON summary (zarrcoro/info.hpp); an array's ends with its
// storage statistics: chunks_stored, chunks_total, bytes_stored and
// storage_ratio (null over http(s)://, which cannot list keys).
//
// ls prints the hierarchy at PATH as a tree (as zarr-python's Group.tree()):
// "/" for the node at PATH, then one line per member, arrays with their
// shape and data type; --recursive descends into groups. It needs a store
// that can list keys (a directory, file://, s3://; not http(s)://).
//
// reencode (reencode.hpp), import and export (transfer.hpp) stream block by
// block (blocks.hpp): memory stays bounded whatever the array's size. On a
// terminal they show a progress line on stderr (--progress: elsewhere too).
// import without --chunks picks about 1-4 MiB chunks as zarr-python does
// (layout.hpp, guess_chunk_shape).
//
// export writes every data type the engine reads, byte strings (S<n>),
// unicode (U<n>) and structured types too, with the descr NumPy writes
// (zarrcoro/npy.hpp), to a temporary file renamed over OUT.npy at the end;
// import reads such files back, also big-endian and Fortran-order ones.
//
// PATH is a directory holding a node at its root: zarr.json (v3), or .zarray
// / .zgroup (v2, attributes in .zattrs). Exit status 0 on success; 2 on any
// error, reported as one line "zarrcoro: error: <message>" on stderr. Logs go
// to stderr at warn level (-v: info).
#include <algorithm>
#include <charconv>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/use_future.hpp>
#include <nlohmann/json.hpp>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <zarrcoro/array.hpp>
#include <zarrcoro/error.hpp>
#include <zarrcoro/info.hpp>
#include <zarrcoro/metadata.hpp>
#include <zarrcoro/npy.hpp>
#include <zarrcoro/runtime.hpp>
#include <zarrcoro/store/filesystem.hpp>
#include <zarrcoro/store/open.hpp>

#include "cli/common.hpp"
#include "cli/reencode.hpp"
#include "cli/transfer.hpp"

namespace fs = std::filesystem;
namespace asio = boost::asio;
using namespace zarrcoro;
using ojson = nlohmann::ordered_json;
using namespace zarrcoro::cli;

namespace {

void print(const ojson& j) { std::cout << j.dump(2, ' ', false, ojson::error_handler_t::replace) << '\n'; }

// ---- commands ----------------------------------------------------------

void cmd_info(const fs::path& dir) {
  Runtime rt;
  auto store = open_dir(rt, dir, true);
  const Node node = read_node(rt, *store, dir);  // this tool's own messages for a missing or untyped node
  std::vector<std::string> subdirs;  // a group's candidate children (an array lists nothing: HTTP cannot)
  bool listed = true;                // false: a remote group whose children cannot be known (HTTP)
  if (node.type == "group" && is_remote(dir)) {  // (a group with consolidated metadata lists its copy's members)
    const bool consolidated = at(dir, [&] { return Group::open_blocking(rt, store, "").has_consolidated_metadata(); });
    std::vector<std::string> keys;
    try {
      if (!consolidated) keys = wait(rt, store->list(""));
    } catch (const Error& e) {
      if (e.field() != "list") throw Failure(quoted(dir) + ": " + e.what());
      listed = false;
    }
    for (const auto& key : keys)
      if (auto slash = key.find('/'); slash != std::string::npos) subdirs.push_back(key.substr(0, slash));
    subdirs.erase(std::unique(subdirs.begin(), subdirs.end()), subdirs.end());
  } else if (node.type == "group") {
    for (const auto& e : fs::directory_iterator(dir))
      if (e.is_directory()) subdirs.push_back(e.path().filename().string());
  }
  std::sort(subdirs.begin(), subdirs.end());
  ojson j = at(dir, [&] { return wait(rt, node_info(rt, store, "", subdirs)); });
  if (!listed) j["children"] = nullptr;
  print(j);
}

// " (10, 5) int32": an array's shape and data type.
std::string summary(const std::vector<std::uint64_t>& dims, const std::string& dtype) {
  std::string shape = "(";
  for (std::size_t i = 0; i < dims.size(); ++i) shape += (i ? ", " : "") + std::to_string(dims[i]);
  return " " + shape + (dims.size() == 1 ? ",)" : ")") + " " + dtype;
}

// The summary of the array at `path` below the store root, from its
// metadata document alone; the raw dtype when this build cannot parse it.
std::string array_summary(Runtime& rt, Store& store, const fs::path& dir, const std::string& path, int zarr_format) {
  const std::string prefix = path.empty() ? "" : path + "/";
  const std::string key = prefix + (zarr_format == 2 ? ".zarray" : "zarr.json");
  const auto j = read_doc(rt, store, dir, key);
  if (!j.is_object()) throw Failure(quoted(dir) + ": invalid metadata: key '" + key + "': expected a JSON object");
  std::string dtype;
  try {
    dtype = (zarr_format == 2 ? ArrayMetadata::from_v2_json(j, nullptr, key) : ArrayMetadata::from_json(j, key))
                .data_type.describe();
  } catch (const Error&) {
    const auto& raw = j.value(zarr_format == 2 ? "dtype" : "data_type", nlohmann::json());
    dtype = raw.is_string() ? raw.get<std::string>() : raw.dump();
  }
  std::string shape = "(";  // as the document has it, whatever it holds
  const auto dims = j.contains("shape") && j["shape"].is_array() ? j["shape"] : nlohmann::json::array();
  for (std::size_t i = 0; i < dims.size(); ++i) shape += (i ? ", " : "") + dims[i].dump();
  return " " + shape + (dims.size() == 1 ? ",)" : ")") + " " + dtype;
}

// The same for a member of `g`: from its consolidated metadata when it has
// some (no request), else from the member's document.
std::string member_summary(Runtime& rt, const Group& g, const fs::path& dir, const NodeEntry& m) {
  if (g.has_consolidated_metadata()) {
    try {
      const Array a = g.open_array_blocking(m.name);
      return summary(a.shape(), a.dtype().describe());
    } catch (const Error&) {
      // an array this build cannot open: its raw dtype, as below
    }
  }
  return array_summary(rt, *g.store(), dir, m.name, m.zarr_format);
}

void cmd_ls(const fs::path& dir, bool recursive) {
  Runtime rt;
  auto store = open_dir(rt, dir, true);
  const Node node = read_node(rt, *store, dir);
  if (node.type != "group") {
    std::cout << "/" << array_summary(rt, *store, dir, "", node.zarr_format) << '\n';
    return;
  }
  const Group g = at(dir, [&] { return Group::open_blocking(rt, store, ""); });
  const auto members = at(dir, [&] { return g.members_blocking(recursive); });
  // A member is its parent's last when no later member has the same parent.
  auto parent = [](const std::string& p) { return p.substr(0, p.rfind('/') == std::string::npos ? 0 : p.rfind('/')); };
  std::vector<bool> last(members.size());
  std::vector<std::string> seen;
  for (std::size_t i = members.size(); i-- > 0;) {
    const std::string pa = parent(members[i].name);
    last[i] = std::find(seen.begin(), seen.end(), pa) == seen.end();
    if (last[i]) seen.push_back(pa);
  }
  std::string out = "/\n";
  std::vector<bool> open;  // per depth: the ancestor at that depth has siblings after it
  for (std::size_t i = 0; i < members.size(); ++i) {
    const NodeEntry& m = members[i];
    const auto depth = static_cast<std::size_t>(std::count(m.name.begin(), m.name.end(), '/'));
    open.resize(depth + 1);
    open[depth] = !last[i];
    for (std::size_t d = 0; d < depth; ++d) out += open[d] ? "│   " : "    ";
    out += last[i] ? "└── " : "├── ";
    out += m.name.substr(m.name.rfind('/') == std::string::npos ? 0 : m.name.rfind('/') + 1);
    if (m.node_type == NodeType::array) out += member_summary(rt, g, dir, m);
    out += '\n';
  }
  std::cout << out;
}

void cmd_consolidate(const fs::path& dir) {
  Runtime rt;
  auto store = open_dir(rt, dir, true);
  const Node node = read_node(rt, *store, dir);
  if (node.type != "group") throw Failure(quoted(dir) + " is an array; consolidated metadata belongs to a group");
  const Group g = at(dir, [&] {
    return Group::open_blocking(rt, store, "", Consolidated::ignore).consolidate_blocking();
  });
  const auto n = at(dir, [&] { return g.members_blocking(true); }).size();
  std::cout << "consolidated the metadata of " << n << (n == 1 ? " node" : " nodes") << " into "
            << (g.zarr_format() == 2 ? ".zmetadata" : "zarr.json") << '\n';
}

int fail(std::string message) {
  for (auto& c : message)
    if (c == '\n' || c == '\r') c = ' ';
  std::cerr << "zarrcoro: error: " << message << std::endl;
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  auto logger = spdlog::stderr_color_mt("zarrcoro");
  spdlog::set_default_logger(logger);
  spdlog::set_level(spdlog::level::warn);

  CLI::App app{"zarrcoro: inspect, export and import Zarr v3 and v2 arrays"};
  app.set_version_flag("--version", ZARRCORO_VERSION);
  app.require_subcommand(1);
  app.fallthrough();  // -v may follow the subcommand
  app.add_flag("-v,--verbose", verbose, "Log at info level (e.g. the io_uring fallback)");

  fs::path path, npy;

  auto* info = app.add_subcommand("info", "Print a JSON summary of the array or group at PATH");
  info->add_option("PATH", path, "Directory (or file://, http(s)://, s3:// URL) holding zarr.json, .zarray or .zgroup")->required();

  bool recursive = false;
  auto* ls = app.add_subcommand("ls", "Print the hierarchy at PATH as a tree (arrays with shape and data type)");
  ls->add_option("PATH", path,
                 "Directory (or file://, s3:// URL; an http(s):// group needs consolidated metadata) holding the "
                 "root node")
      ->required();
  ls->add_flag("-r,--recursive", recursive, "Descend into groups (default: the direct members only)");

  auto* cons = app.add_subcommand("consolidate",
                                  "Write the consolidated metadata of the group at PATH (v2 .zmetadata; v3 inline in "
                                  "zarr.json) from the nodes below it");
  cons->add_option("PATH", path, "Directory (or file://, s3:// URL) holding the group")->required();

  ReencodeOptions re;
  fs::path dst;
  bool progress = false, quiet = false;
  auto* reenc = app.add_subcommand("reencode",
                                   "Copy the array or group at SRC to DST in a new layout (format, chunks, shards, "
                                   "codecs), streaming with bounded memory");
  reenc->add_option("SRC", path, "Directory or URL holding the array or group")->required();
  reenc->add_option("DST", dst, "Directory or URL to create (absent or empty; see --overwrite)")->required();
  reenc->add_option("--zarr-format", re.zarr_format, "Zarr format of the output (default: the source's)")
      ->check(CLI::IsMember({2, 3}));
  reenc->add_option("--chunks", re.chunks, "Chunk shape (sharded: the inner chunks), e.g. 100,100");
  reenc->add_option("--shard", re.shard, "Shard shape, a multiple of the chunk shape (v3), or none");
  reenc->add_option("--codec", re.codec, std::string(kCodecForms) + " (default: the source's)");
  reenc->add_option("--endian", re.endian, "Stored byte order (default: the source's)")
      ->check(CLI::IsMember({"little", "big"}));
  reenc->add_option("--separator", re.separator, "Chunk key separator (default: / for v3, . for v2)")
      ->check(CLI::IsMember({"/", "."}));
  reenc->add_flag("--overwrite", re.overwrite, "Replace a Zarr node at DST, removing everything under it");
  reenc->add_flag("--dry-run", re.dry_run, "Print the plan (one line per node) and write nothing");
  reenc->add_flag("--progress", progress, "Show progress on stderr even when it is not a terminal");
  reenc->add_flag("-q,--quiet", quiet, "No progress line");

  reenc->add_option("--block-bytes", re.block_bytes,
                    "Bytes per block copied at once, in whole chunks (for testing and tuning)")
      ->check(CLI::Range(std::uint64_t{1}, std::uint64_t{1} << 40));

  ExportOptions ex;
  auto* exp = app.add_subcommand("export", "Write (a region of) the array at PATH to a .npy file, block by block");
  exp->add_option("PATH", path, "Directory or URL holding the array's zarr.json or .zarray")->required();
  exp->add_option("OUT", npy, "The .npy file to write (replaced only when the export succeeds)")->required();
  exp->add_option("--region", ex.region, "Box to read, e.g. 0:10,5:20 (':' or empty = whole dimension)");
  exp->add_option("--block-bytes", ex.block_bytes, "Bytes per block read at once, in whole chunks (for testing and tuning)")
      ->check(CLI::Range(std::uint64_t{1}, std::uint64_t{1} << 40));
  exp->add_flag("--progress", progress, "Show progress on stderr even when it is not a terminal");
  exp->add_flag("-q,--quiet", quiet, "No progress line");

  ImportOptions imp;
  auto* imp_cmd = app.add_subcommand("import", "Create a Zarr v3 or v2 array at PATH from a .npy file, block by block");
  imp_cmd->add_option("IN", npy, "The .npy file to read")->required();
  imp_cmd->add_option("PATH", path, "Directory to create (absent or empty; see --overwrite)")->required();
  auto* chunks = imp_cmd->add_option("--chunks", imp.chunks,
                                     "Chunk shape (sharded: the inner chunks), e.g. 100,100 (default: about 1-4 MiB "
                                     "per chunk, as zarr-python's guess_chunks)");
  imp_cmd->add_option("--shard", imp.shard, "Shard shape, a multiple of --chunks (v3 only)");
  imp_cmd->add_option("--codec", imp.codec,
                      std::string(kCodecForms) + " (default: zstd:3; v2: blosc:lz4:5:shuffle)");
  imp_cmd->add_option("--zarr-format", imp.zarr_format, "Zarr format of the output")
      ->check(CLI::IsMember({2, 3}))
      ->capture_default_str();
  imp_cmd->add_option("--endian", imp.endian, "Stored byte order (v3 bytes codec; v2 dtype)")
      ->check(CLI::IsMember({"little", "big"}))
      ->capture_default_str();
  imp_cmd->add_option("--order", imp.order, "Element order inside chunks (F: a transpose codec; v2 \"order\")")
      ->check(CLI::IsMember({"C", "F"}))
      ->capture_default_str();
  imp_cmd->add_option("--separator", imp.separator, "Chunk key separator (default: / for v3, . for v2)")
      ->check(CLI::IsMember({"/", "."}));
  imp_cmd->add_option("--fill-value", imp.fill_value, "Fill value as JSON, e.g. 0, -1.5, \"NaN\", [1, 0]");
  auto* attrs = imp_cmd->add_option("--attrs", imp.attrs, "Attributes, a JSON object, e.g. '{\"units\": \"m\"}'");
  auto* names = imp_cmd->add_option("--dimension-names", imp.dimension_names,
                                    "Dimension names, one per dimension, e.g. time,y,x (v2: _ARRAY_DIMENSIONS)");
  imp_cmd->add_flag("--overwrite", imp.overwrite,
                    "Replace a Zarr node at PATH, removing everything under it (a local PATH must hold "
                    "zarr.json, .zarray or .zgroup)");
  imp_cmd->add_option("--block-bytes", imp.block_bytes,
                      "Bytes per block read and written at once, in whole chunks (for testing and tuning)")
      ->check(CLI::Range(std::uint64_t{1}, std::uint64_t{1} << 40));
  imp_cmd->add_flag("--progress", progress, "Show progress on stderr even when it is not a terminal");
  imp_cmd->add_flag("-q,--quiet", quiet, "No progress line");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) return app.exit(e);
    if (app.get_subcommands().empty() && !app.remaining().empty())
      return fail("unknown command '" + app.remaining().front() + "' (expected info, ls, consolidate, reencode, export or import)");
    return fail(e.what());
  }
  imp.chunks_given = chunks->count() > 0;
  imp.attrs_given = attrs->count() > 0;
  imp.dimension_names_given = names->count() > 0;
  const ProgressMode progress_mode = quiet ? ProgressMode::never : progress ? ProgressMode::always : ProgressMode::automatic;
  re.progress = ex.progress = imp.progress = progress_mode;

  try {
    if (*info) cmd_info(path);
    else if (*ls) cmd_ls(path, recursive);
    else if (*cons) cmd_consolidate(path);
    else if (*reenc) cmd_reencode(path, dst, re);
    else if (*exp) cmd_export(path, npy, ex);
    else if (*imp_cmd) cmd_import(npy, path, imp);
    return 0;
  } catch (const std::exception& e) {
    return fail(e.what());
  } catch (...) {
    return fail("unknown error");
  }
}
