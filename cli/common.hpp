// What the `zarrcoro` commands share: failures with complete messages,
// opening PATH as a store, reading the node there, and the option parsers.
// Single-threaded command-line code: none of it is thread-safe.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/use_future.hpp>
#include <nlohmann/json.hpp>

#include <zarrcoro/error.hpp>
#include <zarrcoro/runtime.hpp>
#include <zarrcoro/store.hpp>

namespace zarrcoro::cli {

namespace fs = std::filesystem;

// A user-facing failure whose message is complete as it stands.
struct Failure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

extern bool verbose;  // -v: log at info level

std::string quoted(const fs::path& p);
// "1 dimension", "2 dimensions": `n` and the noun, plural unless n is 1.
std::string count_of(std::uint64_t n, const std::string& noun);

template <class T>
T wait(Runtime& rt, awaitable<T> a) {
  return boost::asio::co_spawn(rt.io_executor(), std::move(a), boost::asio::use_future).get();
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

// PATH is a local directory, or a URL (file://, http(s)://, s3://bucket/prefix).
bool is_remote(const fs::path& dir);
// The store at PATH; a local one must be a directory when `must_exist`.
std::shared_ptr<Store> open_dir(Runtime& rt, const fs::path& dir, bool must_exist);
// Renews the consolidated metadata held by any group above `dir`, a local
// directory where a node was just written (the commands open PATH as a
// store of its own, so the engine, which keeps the copies of the groups
// above a node it creates, sees none there). Walks up to the file system's
// root, through directories that hold no node, and stops at an array.
// Prints a note for each group renewed. Failures as `at`.
void refresh_consolidated_above(Runtime& rt, const fs::path& dir);
// Refuses a local destination that exists and is not an empty directory,
// unless `overwrite` and it holds a Zarr node (never a directory of other
// files given by mistake).
void check_destination(const fs::path& dir, bool overwrite);

// While alive, a SIGINT, SIGTERM or SIGHUP removes `file` (a temporary
// file the command writes) before the signal ends the process as it would
// have; a signal the process ignores (nohup, a background job's SIGINT)
// stays ignored. One at a time.
class RemoveOnSignal {
 public:
  explicit RemoveOnSignal(const fs::path& file);
  ~RemoveOnSignal();
  RemoveOnSignal(const RemoveOnSignal&) = delete;
  RemoveOnSignal& operator=(const RemoveOnSignal&) = delete;
};

// The parsed document under `key`, or null when absent.
nlohmann::json read_doc(Runtime& rt, Store& store, const fs::path& dir, const std::string& key);

// The node at the root of `dir`: its format and type, or a Failure saying what is there.
struct Node {
  int zarr_format;
  std::string type;  // "array" or "group"
};
Node read_node(Runtime& rt, Store& store, const fs::path& dir);

// "a,b,c" -> positive integers ("" -> none); a Failure naming `option` otherwise.
std::vector<std::uint64_t> parse_list(const std::string& text, const std::string& option);

extern const char* const kCodecForms;
// A --codec spec -> the bytes-to-bytes codec, if any. `typesize` is the
// element size (blosc shuffles by it). blosc defaults to lz4:5:shuffle, as
// zarr-python 2 does; SHUFFLE is noshuffle, shuffle or bitshuffle.
std::optional<nlohmann::json> parse_codec(const std::string& spec, std::size_t typesize);

}  // namespace zarrcoro::cli
