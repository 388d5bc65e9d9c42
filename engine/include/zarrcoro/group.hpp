// Zarr groups (Zarr v3 core spec, "Group metadata"; Zarr v2 `.zgroup` +
// `.zattrs`): open, create, list members, open members, consolidate.
//
// Thread-safety: a Group is a copyable handle to immutable values; every
// method may be called concurrently. The blocking forms follow Array's rules
// (not from a runtime thread: InvalidArgument). The awaitables copy what
// they need: none refers to the handle.
//
// Consolidated metadata is a snapshot: a group opened with it sees the
// hierarchy as it was when the copy was last written. zarrcoro keeps the
// copies it finds up to date: creating a node and resizing an array also
// replace that node's entry (an overwrite drops the entries below it) in
// every consolidated copy held by an ancestor group, adding the parent
// groups the copy lacks, with a write conditional on the copy's generation
// (retried). A v3 copy leaves out nodes below a group without a document
// (an implicit group, as other tools may leave): v3 readers nest each
// entry under its parent's.
// A copy that could not take the change (not JSON; other entries that are
// not strict JSON) refuses the operation before anything is written.
// Other writers may not keep copies up to date: Group::consolidate writes
// the copy anew from a listing of the store, and resize refuses an Array
// handle whose metadata is no longer the stored one.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <zarrcoro/array.hpp>
#include <zarrcoro/async.hpp>
#include <zarrcoro/node.hpp>
#include <zarrcoro/store.hpp>

namespace zarrcoro {

class Runtime;

namespace detail {
struct ConsolidatedView;  // engine internal: the nodes a consolidated document describes
}

// Whether Group::open uses the hierarchy's consolidated metadata: the
// metadata documents of every node below a group, held in one document of
// the group (v2: `.zmetadata`, {"zarr_consolidated_format": 1, "metadata":
// {"a/.zarray": ...}}; v3: the group's `zarr.json` member
// "consolidated_metadata": {"kind": "inline", "must_understand": false,
// "metadata": {"a": <a's zarr.json>, ...}}, zarr-python 3's form, proposed
// in zarr-specs PR #309). With it, listing members and opening them needs
// no further request, and works on stores that cannot list (HTTP).
enum class Consolidated {
  use_if_present,  // the default, as in zarr-python and xarray
  ignore,          // read each node's own documents
  require,         // raise NotFound when the group holds none
};
class Group {
 public:
  // An empty handle, to be assigned from open() or create(). Its members,
  // open_*, consolidate and token forms raise InvalidArgument.
  Group() = default;
  // False for an empty handle.
  explicit operator bool() const noexcept { return rt_ != nullptr; }

  // Opens v3 `zarr.json`, else v2 `.zgroup` (attributes from `.zattrs`);
  // with consolidated metadata (unless Consolidated::ignore), reads it too:
  // v3 from the same document, v2 from `.zmetadata` (read first; its
  // `.zgroup` and `.zattrs` entries then stand for the group's own
  // documents, which need not exist). Raises NotFound / InvalidMetadata
  // like Array::open; InvalidMetadata naming the key and the entry of a
  // malformed consolidated document; with Consolidated::require, NotFound
  // when there is none.
  static awaitable<Group> open(Runtime& rt, std::shared_ptr<Store> store, std::string path,
                               Consolidated consolidated = Consolidated::use_if_present);
  // zarr_format 2 writes `.zgroup` and `.zattrs` (when there are
  // attributes), zarr_format 3 `zarr.json`; each ancestor holding no node
  // yet gets a group document as Array::create writes them (so a group
  // created after its children exists already: AlreadyExists).
  // Where a node exists at `path`: AlreadyExists, or with
  // CreateMode::overwrite, removed first with everything under it (see
  // CreateMode). InvalidArgument for attributes that are not an object or a
  // zarr_format other than 2 or 3 (before the store is touched). Updates
  // the consolidated copies of ancestor groups (see above).
  static awaitable<Group> create(Runtime& rt, std::shared_ptr<Store> store, std::string path,
                                 nlohmann::json attributes = nlohmann::json::object(), int zarr_format = 3,
                                 CreateMode mode = CreateMode::fail_if_exists);
  static Group open_blocking(Runtime& rt, std::shared_ptr<Store> store, std::string path,
                             Consolidated consolidated = Consolidated::use_if_present);
  static Group create_blocking(Runtime& rt, std::shared_ptr<Store> store, std::string path,
                               nlohmann::json attributes = nlohmann::json::object(), int zarr_format = 3,
                               CreateMode mode = CreateMode::fail_if_exists);
  // Token forms: complete with void(std::exception_ptr, Group); see Array.
  template <class Token>
  static auto async_open(Runtime& rt, std::shared_ptr<Store> store, std::string path, Token&& token) {
    return detail::async_spawn(executor_of(rt), open(rt, std::move(store), std::move(path)),
                               std::forward<Token>(token));
  }
  template <class Token>
  static auto async_open(Runtime& rt, std::shared_ptr<Store> store, std::string path, Consolidated consolidated,
                         Token&& token) {
    return detail::async_spawn(executor_of(rt), open(rt, std::move(store), std::move(path), consolidated),
                               std::forward<Token>(token));
  }
  template <class Token>
  static auto async_create(Runtime& rt, std::shared_ptr<Store> store, std::string path, nlohmann::json attributes,
                           int zarr_format, CreateMode mode, Token&& token) {
    return detail::async_spawn(executor_of(rt),
                               create(rt, std::move(store), std::move(path), std::move(attributes), zarr_format, mode),
                               std::forward<Token>(token));
  }

  const std::string& path() const { return path_; }
  const nlohmann::json& attributes() const { return attributes_; }
  int zarr_format() const { return zarr_format_; }
  const std::shared_ptr<Store>& store() const { return store_; }
  // True if the group was opened with consolidated metadata.
  bool has_consolidated_metadata() const { return consolidated_ != nullptr; }

  // The nodes in this group: from its consolidated metadata if it was
  // opened with some (no request), else from one Store::list of its
  // prefix, where a child holds `zarr.json` (v3; read for its node_type),
  // else `.zarray` or `.zgroup` (v2), or is an implicit group (see
  // NodeEntry). v2 and v3 nodes are listed alike. `recursive`: every node
  // below, descending through groups (never into an array); else the
  // direct children. Order: depth first, siblings sorted by name (byte
  // order), a group before its members.
  // Raises UnsupportedError(field "list") on a store that cannot list keys
  // (HTTP) for a group without consolidated metadata, InvalidMetadata
  // naming the key of a child `zarr.json` that is not JSON or lacks
  // zarr_format 3 and node_type "array" or "group", StoreError.
  awaitable<std::vector<NodeEntry>> members(bool recursive = false) const;
  std::vector<NodeEntry> members_blocking(bool recursive = false) const;
  // Token form: completes with void(std::exception_ptr, std::vector<NodeEntry>).
  template <class Token>
  auto async_members(bool recursive, Token&& token) const {
    return detail::async_spawn(executor_of(runtime()), members(recursive), std::forward<Token>(token));
  }

  // Opens the array or group at `name` below this group ("a" or "a/b"):
  // from the consolidated metadata when it describes `name` (no request),
  // else as Array::open / Group::open do (a group with the Consolidated
  // mode this one was opened with). Raises InvalidArgument for a bad name,
  // NotFound where there is no such node (with a copy: naming the document
  // of the node of the other type there), and what Array::open /
  // Group::open raise.
  awaitable<Array> open_array(std::string name) const;
  awaitable<Group> open_group(std::string name) const;
  Array open_array_blocking(std::string name) const;
  Group open_group_blocking(std::string name) const;
  // Token forms: complete with void(std::exception_ptr, Array) / (..., Group).
  template <class Token>
  auto async_open_array(std::string name, Token&& token) const {
    return detail::async_spawn(executor_of(runtime()), open_array(std::move(name)), std::forward<Token>(token));
  }
  template <class Token>
  auto async_open_group(std::string name, Token&& token) const {
    return detail::async_spawn(executor_of(runtime()), open_group(std::move(name)), std::forward<Token>(token));
  }

  // Writes this group's consolidated metadata anew, in its format (v2
  // `.zmetadata`; v3 in its `zarr.json`), from a recursive listing of the
  // store (not from a copy it was opened with), and returns the group
  // opened with it. The write is conditional on the document read before
  // the listing: when another writer replaced it meanwhile, it lists again
  // (up to 8 times, then StoreError). Implicit groups have no entry; a v3
  // copy also leaves out the nodes below one (readers nest every entry
  // under its parent group's). Fill values NaN and ±Infinity are written as the
  // strings the specs give (B02); attributes holding NaN or Infinity raise
  // InvalidArgument naming the document (strict JSON cannot hold them).
  // Needs a store that can list and write. Raises what members() raises,
  // InvalidMetadata naming a node document that cannot be read, StoreError.
  awaitable<Group> consolidate() const;
  Group consolidate_blocking() const;
  template <class Token>
  auto async_consolidate(Token&& token) const {
    return detail::async_spawn(executor_of(runtime()), consolidate(), std::forward<Token>(token));
  }

  // Replaces the group's attributes (v3 `attributes` in its zarr.json, the
  // rest of the document, consolidated metadata included, kept; v2
  // `.zattrs`, erased when empty) and returns the group opened anew; this
  // handle keeps the old ones. To merge, pass attributes() with the
  // changes applied. v3: one write conditional on the document read
  // (retried while other writers replace it, up to 8 times, then
  // StoreError). Consolidated copies held by ancestors are updated (see
  // above). Raises InvalidArgument(field "attributes") for a value that is
  // not an object or not strict JSON (NaN), NotFound where the group's
  // document is gone, InvalidMetadata where it is no group's, StoreError.
  awaitable<Group> set_attributes(nlohmann::json attributes) const;
  Group set_attributes_blocking(nlohmann::json attributes) const;
  template <class Token>
  auto async_set_attributes(nlohmann::json attributes, Token&& token) const {
    return detail::async_spawn(executor_of(runtime()), set_attributes(std::move(attributes)),
                               std::forward<Token>(token));
  }

 private:
  static boost::asio::any_io_executor executor_of(Runtime& rt);
  static awaitable<Array> open_array_in(Runtime* rt, std::shared_ptr<Store> store, std::string group,
                                        std::shared_ptr<const detail::ConsolidatedView> view, std::string name);
  static awaitable<Group> open_group_in(Runtime* rt, std::shared_ptr<Store> store, std::string group,
                                        std::shared_ptr<const detail::ConsolidatedView> view, std::string name,
                                        Consolidated mode);
  static awaitable<Group> consolidate_group(Runtime& rt, std::shared_ptr<Store> store, std::string path,
                                            int zarr_format);
  static awaitable<Group> set_group_attributes(Runtime& rt, std::shared_ptr<Store> store, std::string path,
                                               int zarr_format, nlohmann::json attributes, Consolidated mode);
  Group(Runtime& rt, std::shared_ptr<Store> store, std::string path, nlohmann::json attrs, int zarr_format,
        std::shared_ptr<const detail::ConsolidatedView> consolidated, Consolidated mode)
      : rt_(&rt), store_(std::move(store)), path_(std::move(path)), attributes_(std::move(attrs)),
        zarr_format_(zarr_format), consolidated_(std::move(consolidated)), mode_(mode) {}
  Runtime& runtime() const;  // InvalidArgument for an empty handle
  Runtime* rt_ = nullptr;
  std::shared_ptr<Store> store_;
  std::string path_;
  nlohmann::json attributes_;
  int zarr_format_ = 3;
  std::shared_ptr<const detail::ConsolidatedView> consolidated_;
  Consolidated mode_ = Consolidated::use_if_present;  // how members found without the copy are opened
};

}  // namespace zarrcoro
