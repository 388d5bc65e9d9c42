// zarrcoro: inspect, export and import Zarr v3 arrays in a local directory.
//
//   zarrcoro info PATH
//   zarrcoro export PATH OUT.npy [--region 0:10,5:20]
//   zarrcoro import IN.npy PATH [--chunks 100,100] [--codec zstd:3|gzip:5|none]
//                   [--zarr-format 3] [--endian little|big] [--fill-value JSON]
//
// PATH is a directory holding a node at its root (zarr.json). Exit status 0 on
// success; 2 on any error, reported as one line "zarrcoro: error: <message>"
// on stderr. Logs go to stderr at warn level (-v: info).
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

namespace fs = std::filesystem;
namespace asio = boost::asio;
using namespace zarrcoro;
using ojson = nlohmann::ordered_json;

namespace {

// A user-facing failure whose message is complete as it stands.
struct Failure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

bool verbose = false;

std::string quoted(const fs::path& p) { return "'" + p.string() + "'"; }

template <class T>
T wait(Runtime& rt, awaitable<T> a) {
  return asio::co_spawn(rt.io_executor(), std::move(a), asio::use_future).get();
}

// Runs `f`, prefixing engine errors with the directory they concern.
template <class F>
auto at(const fs::path& dir, F&& f) {
  try {
    return f();
  } catch (const Error& e) {
    throw Failure(quoted(dir) + ": " + e.what());
  }
}

std::shared_ptr<FilesystemStore> open_dir(Runtime& rt, const fs::path& dir, bool must_exist) {
  std::error_code ec;
  if (must_exist && !fs::is_directory(dir, ec))
    throw Failure(quoted(dir) + (fs::exists(dir, ec) ? " is not a directory" : " does not exist"));
  // Without io_uring the store falls back to blocking I/O and says so once;
  // for a one-shot command that note is noise unless asked for (-v).
  const auto level = spdlog::get_level();
  if (!verbose) spdlog::set_level(spdlog::level::err);
  struct Restore {
    spdlog::level::level_enum level;
    ~Restore() { spdlog::set_level(level); }
  } restore{level};
  return std::make_shared<FilesystemStore>(rt.io_executor(), dir);
}

// The parsed zarr.json at the root of `dir`, or a Failure saying what is there.
nlohmann::json read_node(Runtime& rt, Store& store, const fs::path& dir) {
  auto doc = at(dir, [&] { return wait(rt, store.get("zarr.json")); });
  if (!doc) {
    const bool v2 = fs::exists(dir / ".zarray") || fs::exists(dir / ".zgroup");
    throw Failure(quoted(dir) + " holds no Zarr v3 node (no zarr.json)" +
                  (v2 ? "; Zarr v2 input is not supported by this tool" : ""));
  }
  auto j = at(dir, [&] { return parse_json({reinterpret_cast<const char*>(doc->data()), doc->size()}, "zarr.json"); });
  if (!j.is_object() || !j.contains("node_type") || !j["node_type"].is_string())
    throw Failure(quoted(dir) + ": invalid metadata: key 'zarr.json', field 'node_type': expected \"array\" or \"group\"");
  return j;
}

Array open_array(Runtime& rt, const std::shared_ptr<FilesystemStore>& store, const fs::path& dir) {
  const auto type = read_node(rt, *store, dir)["node_type"].get<std::string>();
  if (type != "array") throw Failure(quoted(dir) + " is a " + type + ", not an array");
  return at(dir, [&] { return Array::open_blocking(rt, store, ""); });
}

void print(const ojson& j) { std::cout << j.dump(2, ' ', false, ojson::error_handler_t::replace) << '\n'; }

// "a,b,c" -> positive integers ("" -> none).
std::vector<std::uint64_t> parse_list(const std::string& text, const std::string& option) {
  std::vector<std::uint64_t> out;
  if (text.empty()) return out;
  for (std::size_t pos = 0;;) {
    const auto comma = text.find(',', pos);
    const std::string item = text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    std::uint64_t v = 0;
    auto [p, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    if (ec != std::errc() || p != item.data() + item.size() || v == 0)
      throw Failure(option + ": '" + item + "' is not a positive integer (in '" + text + "')");
    out.push_back(v);
    if (comma == std::string::npos) return out;
    pos = comma + 1;
  }
}

// "zstd[:LEVEL]", "gzip[:LEVEL]" or "none" -> the bytes-to-bytes codec, if any.
std::optional<nlohmann::json> parse_codec(const std::string& spec) {
  const auto colon = spec.find(':');
  const std::string name = spec.substr(0, colon);
  const std::string level_text = colon == std::string::npos ? "" : spec.substr(colon + 1);
  auto level = [&](int dflt, int lo, int hi) {
    if (colon == std::string::npos) return dflt;
    int v = 0;
    auto [p, ec] = std::from_chars(level_text.data(), level_text.data() + level_text.size(), v);
    if (ec != std::errc() || p != level_text.data() + level_text.size() || level_text.empty() || v < lo || v > hi)
      throw Failure("--codec: bad " + name + " level '" + level_text + "' (expected an integer in " +
                    std::to_string(lo) + ".." + std::to_string(hi) + ")");
    return v;
  };
  if (name == "none" && colon == std::string::npos) return std::nullopt;
  if (name == "zstd")
    return nlohmann::json{{"name", "zstd"}, {"configuration", {{"level", level(3, -131072, 22)}, {"checksum", false}}}};
  if (name == "gzip") return nlohmann::json{{"name", "gzip"}, {"configuration", {{"level", level(5, 0, 9)}}}};
  throw Failure("--codec: unknown codec '" + spec + "' (expected zstd[:LEVEL], gzip[:LEVEL] or none)");
}

// ---- commands ----------------------------------------------------------

void cmd_info(const fs::path& dir) {
  Runtime rt;
  auto store = open_dir(rt, dir, true);
  read_node(rt, *store, dir);  // this tool's own messages for a missing or untyped node
  std::vector<std::string> subdirs;  // a group's candidate children
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_directory()) subdirs.push_back(e.path().filename().string());
  std::sort(subdirs.begin(), subdirs.end());
  print(at(dir, [&] { return wait(rt, node_info(rt, store, "", subdirs)); }));
}

void cmd_export(const fs::path& dir, const fs::path& out, const std::string& region) {
  Runtime rt;
  auto store = open_dir(rt, dir, true);
  const Array a = open_array(rt, store, dir);
  const Region r = Region::parse(region, a.shape());
  const NdArray data = at(dir, [&] { return a.read_blocking(r); });
  write_npy(out, data);
}

struct ImportOptions {
  std::string chunks;
  bool chunks_given = false;
  std::string codec = "zstd:3";
  int zarr_format = 3;
  std::string endian = "little";
  std::string fill_value;
};

void cmd_import(const fs::path& in, const fs::path& dir, const ImportOptions& o) {
  if (o.zarr_format == 2) throw Failure("--zarr-format 2: v2 output is not supported yet");
  const auto compressor = parse_codec(o.codec);
  NdArray data = read_npy(in);

  ArrayMetadata m;
  m.shape = data.shape;
  m.data_type = data.dtype;
  if (o.chunks_given) {
    m.chunk_shape = parse_list(o.chunks, "--chunks");
    if (m.chunk_shape.size() != m.shape.size())
      throw Failure("--chunks: '" + o.chunks + "' has " + std::to_string(m.chunk_shape.size()) +
                    " dimensions, the array in " + quoted(in) + " has " + std::to_string(m.shape.size()));
  } else {
    for (auto s : m.shape) m.chunk_shape.push_back(std::max<std::uint64_t>(s, 1));  // one chunk
  }
  nlohmann::json bytes{{"name", "bytes"}};
  if (data.dtype.size() > 1) bytes["configuration"] = {{"endian", o.endian}};
  m.codecs = nlohmann::json::array({bytes});
  if (compressor) m.codecs.push_back(*compressor);
  if (!o.fill_value.empty()) {
    // JSON, or a bare word such as NaN taken as the JSON string "NaN".
    auto j = nlohmann::json::parse(o.fill_value, nullptr, false);
    if (j.is_discarded()) j = o.fill_value;
    m.fill_value = parse_fill_value(j, m.data_type, "--fill-value");
  }

  std::error_code ec;
  if (fs::exists(dir, ec) && !(fs::is_directory(dir, ec) && fs::is_empty(dir, ec)))
    throw Failure(quoted(dir) + " already exists and is not an empty directory; refusing to overwrite it");
  Runtime rt;
  auto store = open_dir(rt, dir, false);
  at(dir, [&] {
    const Array a = Array::create_blocking(rt, store, "", std::move(m));
    a.write_blocking(Region::all(a.shape()), data.data);
  });
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

  CLI::App app{"zarrcoro: inspect, export and import Zarr v3 arrays"};
  app.set_version_flag("--version", ZARRCORO_VERSION);
  app.require_subcommand(1);
  app.fallthrough();  // -v may follow the subcommand
  app.add_flag("-v,--verbose", verbose, "Log at info level (e.g. the io_uring fallback)");

  fs::path path, npy;
  std::string region;
  ImportOptions imp;

  auto* info = app.add_subcommand("info", "Print a JSON summary of the array or group at PATH");
  info->add_option("PATH", path, "Directory holding zarr.json")->required();

  auto* exp = app.add_subcommand("export", "Write (a region of) the array at PATH to a .npy file");
  exp->add_option("PATH", path, "Directory holding the array's zarr.json")->required();
  exp->add_option("OUT", npy, "The .npy file to write")->required();
  exp->add_option("--region", region, "Box to read, e.g. 0:10,5:20 (':' or empty = whole dimension)");

  auto* imp_cmd = app.add_subcommand("import", "Create a Zarr v3 array at PATH from a .npy file");
  imp_cmd->add_option("IN", npy, "The .npy file to read")->required();
  imp_cmd->add_option("PATH", path, "Directory to create (absent or empty)")->required();
  auto* chunks = imp_cmd->add_option("--chunks", imp.chunks, "Chunk shape, e.g. 100,100 (default: one chunk)");
  imp_cmd->add_option("--codec", imp.codec, "zstd[:LEVEL], gzip[:LEVEL] or none")->capture_default_str();
  imp_cmd->add_option("--zarr-format", imp.zarr_format, "Zarr format of the output")
      ->check(CLI::IsMember({2, 3}))
      ->capture_default_str();
  imp_cmd->add_option("--endian", imp.endian, "Byte order of the bytes codec")
      ->check(CLI::IsMember({"little", "big"}))
      ->capture_default_str();
  imp_cmd->add_option("--fill-value", imp.fill_value, "Fill value as JSON, e.g. 0, -1.5, \"NaN\", [1, 0]");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) return app.exit(e);
    if (app.get_subcommands().empty() && !app.remaining().empty())
      return fail("unknown command '" + app.remaining().front() + "' (expected info, export or import)");
    return fail(e.what());
  }
  imp.chunks_given = chunks->count() > 0;

  try {
    if (*info) cmd_info(path);
    else if (*exp) cmd_export(path, npy, region);
    else if (*imp_cmd) cmd_import(npy, path, imp);
    return 0;
  } catch (const std::exception& e) {
    return fail(e.what());
  } catch (...) {
    return fail("unknown error");
  }
}
