// See cli/common.hpp.
#include "cli/common.hpp"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <csignal>
#include <cstring>
#include <iostream>

#include <spdlog/spdlog.h>

#include <zarrcoro/array.hpp>
#include <zarrcoro/metadata.hpp>
#include <zarrcoro/store/filesystem.hpp>
#include <zarrcoro/store/open.hpp>

namespace zarrcoro::cli {

bool verbose = false;

std::string quoted(const fs::path& p) {
  std::string s(1, '\'');  // (appended, not "'" + ... + "'": g++ 12 warns falsely on that, -Wrestrict)
  s += p.native();
  s += '\'';
  return s;
}

bool is_remote(const fs::path& dir) { return is_url(dir.string()); }

std::string count_of(std::uint64_t n, const std::string& noun) {
  return std::to_string(n) + ' ' + noun + (n == 1 ? "" : "s");
}

std::shared_ptr<Store> open_dir(Runtime& rt, const fs::path& dir, bool must_exist) {
  if (is_remote(dir)) return open_store(dir.string(), rt.io_executor());
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

nlohmann::json read_doc(Runtime& rt, Store& store, const fs::path& dir, const std::string& key) {
  auto doc = at(dir, [&] { return wait(rt, store.get(key)); });
  if (!doc) return nullptr;
  return at(dir, [&] { return parse_json({reinterpret_cast<const char*>(doc->data()), doc->size()}, key); });
}

Node read_node(Runtime& rt, Store& store, const fs::path& dir) {
  const auto j = read_doc(rt, store, dir, "zarr.json");
  if (j.is_null()) {
    if (at(dir, [&] { return wait(rt, store.exists(".zarray")); })) return {2, "array"};
    if (at(dir, [&] { return wait(rt, store.exists(".zgroup")); })) return {2, "group"};
    if (at(dir, [&] { return wait(rt, store.exists(".zmetadata")); })) return {2, "group"};  // consolidated only
    throw Failure(quoted(dir) + " holds no Zarr node (no zarr.json, .zarray or .zgroup)");
  }
  if (!j.is_object() || !j.contains("node_type") || !j["node_type"].is_string())
    throw Failure(quoted(dir) + ": invalid metadata: key 'zarr.json', field 'node_type': expected \"array\" or \"group\"");
  return {3, j["node_type"].get<std::string>()};
}

void refresh_consolidated_above(Runtime& rt, const fs::path& dir) {
  if (is_remote(dir)) return;
  std::error_code ec;
  const fs::path node = fs::weakly_canonical(fs::absolute(dir), ec);
  if (ec) return;
  for (fs::path up = node.parent_path(); up.has_relative_path(); up = up.parent_path()) {
    if (fs::exists(up / ".zarray", ec)) return;  // nothing lives below an array
    if (!fs::exists(up / "zarr.json", ec) && !fs::exists(up / ".zgroup", ec) && !fs::exists(up / ".zmetadata", ec))
      continue;
    auto store = open_dir(rt, up, true);
    if (read_node(rt, *store, up).type != "group") return;
    at(up, [&] {
      if (!Group::open_blocking(rt, store, "").has_consolidated_metadata()) return;
      Group::open_blocking(rt, store, "", Consolidated::ignore).consolidate_blocking();
      std::cerr << "note: renewed the consolidated metadata of " << quoted(up) << '\n';
    });
  }
}

namespace {
char signal_file[4096];  // what RemoveOnSignal removes; empty: nothing
constexpr int kCleanupSignals[] = {SIGINT, SIGTERM, SIGHUP};
struct sigaction previous[std::size(kCleanupSignals)];

extern "C" void remove_and_reraise(int sig) {
  if (signal_file[0]) ::unlink(signal_file);  // async-signal-safe, as are the calls below
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}
}  // namespace

RemoveOnSignal::RemoveOnSignal(const fs::path& file) {
  const std::string& s = file.native();
  if (s.size() >= sizeof signal_file) return;  // not removed on a signal; the destructor's case stands
  std::memcpy(signal_file, s.c_str(), s.size() + 1);
  struct sigaction remove {};
  remove.sa_handler = remove_and_reraise;
  sigemptyset(&remove.sa_mask);
  for (std::size_t i = 0; i < std::size(kCleanupSignals); ++i) {
    ::sigaction(kCleanupSignals[i], nullptr, &previous[i]);
    if (previous[i].sa_handler != SIG_IGN) ::sigaction(kCleanupSignals[i], &remove, nullptr);  // nohup, & stay so
  }
}

RemoveOnSignal::~RemoveOnSignal() {
  for (std::size_t i = 0; i < std::size(kCleanupSignals); ++i) ::sigaction(kCleanupSignals[i], &previous[i], nullptr);
  signal_file[0] = '\0';
}

void check_destination(const fs::path& dir, bool overwrite) {
  std::error_code ec;
  if (is_remote(dir) || !fs::exists(dir, ec) || (fs::is_directory(dir, ec) && fs::is_empty(dir, ec))) return;
  if (!overwrite)
    throw Failure(quoted(dir) + " already exists and is not an empty directory; refusing to overwrite it "
                  "(--overwrite replaces a Zarr node there)");
  if (!fs::exists(dir / "zarr.json", ec) && !fs::exists(dir / ".zarray", ec) && !fs::exists(dir / ".zgroup", ec))
    throw Failure(quoted(dir) + " is not empty and holds no Zarr node (zarr.json, .zarray or .zgroup); "
                  "refusing to overwrite it");
}

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

const char* const kCodecForms =
    "zstd[:LEVEL], gzip[:LEVEL], blosc[:CNAME[:CLEVEL[:SHUFFLE]]], zlib[:LEVEL], lz4[:ACCELERATION] or none";

std::optional<nlohmann::json> parse_codec(const std::string& spec, std::size_t typesize) {
  std::vector<std::string> parts;
  for (std::size_t pos = 0;;) {
    const auto colon = spec.find(':', pos);
    parts.push_back(spec.substr(pos, colon == std::string::npos ? std::string::npos : colon - pos));
    if (colon == std::string::npos) break;
    pos = colon + 1;
  }
  const std::string& name = parts[0];
  auto number = [&](std::size_t i, const char* what, int dflt, int lo, int hi) {
    if (i >= parts.size()) return dflt;
    const std::string& t = parts[i];
    int v = 0;
    auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
    if (ec != std::errc() || p != t.data() + t.size() || t.empty() || v < lo || v > hi)
      throw Failure("--codec: bad " + name + " " + what + " '" + t + "' (expected an integer in " +
                    std::to_string(lo) + ".." + std::to_string(hi) + ")");
    return v;
  };
  auto at_most = [&](std::size_t n) {
    if (parts.size() > n) throw Failure("--codec: too many ':' parts in '" + spec + "' (expected " + kCodecForms + ")");
  };
  if (name == "none") {
    at_most(1);
    return std::nullopt;
  }
  if (name == "zstd") {
    at_most(2);
    return nlohmann::json{{"name", "zstd"}, {"configuration", {{"level", number(1, "level", 3, -131072, 22)}, {"checksum", false}}}};
  }
  // zlib and lz4 under their v3 names (numcodecs.*, as zarr-python 3 writes
  // them); a v2 array stores them as the compressors "zlib" and "lz4".
  if (name == "gzip" || name == "zlib") {
    at_most(2);
    return nlohmann::json{{"name", name == "gzip" ? "gzip" : "numcodecs.zlib"},
                          {"configuration", {{"level", number(1, "level", name == "gzip" ? 5 : 1, 0, 9)}}}};
  }
  if (name == "lz4") {
    at_most(2);
    return nlohmann::json{{"name", "numcodecs.lz4"},
                          {"configuration", {{"acceleration", number(1, "acceleration", 1, 1, 65537)}}}};
  }
  if (name == "blosc") {
    at_most(4);
    const std::string cname = parts.size() > 1 ? parts[1] : "lz4";
    static const char* cnames[] = {"lz4", "lz4hc", "blosclz", "zstd", "zlib", "snappy"};
    if (std::find(std::begin(cnames), std::end(cnames), cname) == std::end(cnames))
      throw Failure("--codec: unknown blosc compressor '" + cname + "' (expected lz4, lz4hc, blosclz, zstd or zlib)");
    const std::string shuffle = parts.size() > 3 ? parts[3] : "shuffle";
    if (shuffle != "noshuffle" && shuffle != "shuffle" && shuffle != "bitshuffle")
      throw Failure("--codec: unknown blosc shuffle '" + shuffle + "' (expected noshuffle, shuffle or bitshuffle)");
    return nlohmann::json{{"name", "blosc"},
                          {"configuration",
                           {{"cname", cname}, {"clevel", number(2, "clevel", 5, 0, 9)}, {"shuffle", shuffle},
                            {"typesize", typesize}, {"blocksize", 0}}}};
  }
  throw Failure("--codec: unknown codec '" + spec + "' (expected " + kCodecForms + ")");
}

}  // namespace zarrcoro::cli
