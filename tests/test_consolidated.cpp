// Consolidated metadata: what Group::consolidate writes (v3 inline, v2
// `.zmetadata`, exact documents), reading a hierarchy through it (no
// requests after the group's), the copies kept up to date by create and
// resize (the B30 class), B02 (no bare NaN), malformed copies, and two-way
// interop with zarr-python 2.13. Over HTTP: test_cli ("ls" of an HTTP group).
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/use_future.hpp>
#include <catch2/catch.hpp>

#include <zarrcoro/array.hpp>
#include <zarrcoro/error.hpp>
#include <zarrcoro/runtime.hpp>
#include <zarrcoro/store/counting.hpp>
#include <zarrcoro/store/filesystem.hpp>
#include <zarrcoro/store/memory.hpp>

#include "support.hpp"

using namespace zarrcoro;
using nlohmann::json;
using test::show;
namespace asio = boost::asio;
namespace fs = std::filesystem;

namespace {

ArrayMetadata meta(DataType t, std::vector<std::uint64_t> shape, int zarr_format = 3) {
  ArrayMetadata m;
  m.zarr_format = zarr_format;
  if (zarr_format == 2) m.chunk_key_encoding = {ChunkKeyEncoding::Kind::v2, '.'};
  m.shape = std::move(shape);
  m.chunk_shape = {2};
  m.data_type = t;
  m.codecs = json::parse(R"([{"name":"bytes","configuration":{"endian":"little"}}])");
  return m;
}

struct Fixture {
  Runtime rt;
  test::TempDir dir{"consolidated"};
  std::shared_ptr<Store> store;
  explicit Fixture(const std::string& kind = "memory") {
    if (kind == "memory") store = std::make_shared<MemoryStore>();
    else store = std::make_shared<FilesystemStore>(rt.io_executor(), dir.path);
  }
  template <class T>
  T run(awaitable<T> a) {
    return asio::co_spawn(rt.io_executor(), std::move(a), asio::use_future).get();
  }
  std::string text(const std::string& key) {
    const auto b = run(store->get(key));
    REQUIRE(b);
    return std::string(reinterpret_cast<const char*>(b->data()), b->size());
  }
  // The document at `key`, parsed strictly (nlohmann refuses bare NaN).
  json doc(const std::string& key) { return json::parse(text(key)); }
  void set(const std::string& key, const std::string& t) {
    Bytes b(t.size());
    std::memcpy(b.data(), t.data(), t.size());
    run(store->set(key, std::move(b)));
  }
  // A hierarchy in one format: root (attrs), a (int16 [5] = 0..4), g
  // (attrs), g/b (float64 [3], fill NaN, unwritten).
  void build(int zarr_format) {
    Group::create_blocking(rt, store, "", json{{"title", "t"}}, zarr_format);
    const Array a = Array::create_blocking(rt, store, "a", meta(DataTypeKind::int16, {5}, zarr_format));
    const std::vector<std::int16_t> v{0, 1, 2, 3, 4};
    a.write_blocking(Region::all(a.shape()), std::as_bytes(std::span(v)));
    Group::create_blocking(rt, store, "g", json{{"level", 1}}, zarr_format);
    auto m = meta(DataTypeKind::float64, {3}, zarr_format);
    m.fill_value = parse_fill_value("NaN", DataTypeKind::float64, "");
    Array::create_blocking(rt, store, "g/b", m);
  }
};

template <class E, class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.key() + " | " + e.field();
  }
  return "<none>";
}

// A memory store whose next `conflicts` conditional writes fail as if
// another writer had replaced the value first.
struct ContendedStore : MemoryStore {
  int conflicts = 0;
  awaitable<std::optional<Generation>> write(std::string key, std::optional<Bytes> value,
                                             WriteOptions options) override {
    if (!options.if_equal.unknown() && conflicts > 0) {
      --conflicts;
      co_return std::nullopt;
    }
    co_return co_await MemoryStore::write(std::move(key), std::move(value), std::move(options));
  }
};

// Every entry of a v3 copy has its parent group's entry (zarr-python 3
// nests each entry under its parent's and fails on a missing one).
void check_parents(const json& metadata) {
  for (const auto& [path, doc] : metadata.items()) {
    const auto slash = path.rfind('/');
    if (slash == std::string::npos) continue;
    INFO(path);
    REQUIRE(metadata.contains(path.substr(0, slash)));
    CHECK(metadata[path.substr(0, slash)]["node_type"] == "group");
  }
}
}  // namespace

TEST_CASE("consolidate (v3) writes every node's zarr.json inline in the group's, flat; a group entry has an empty copy") {
  Fixture f;
  f.build(3);
  const Group root = Group::open_blocking(f.rt, f.store, "", Consolidated::ignore).consolidate_blocking();
  CHECK(root.has_consolidated_metadata());
  const json z = f.doc("zarr.json");
  CHECK(z["attributes"] == json{{"title", "t"}});
  const json& cm = z["consolidated_metadata"];
  CHECK(cm["kind"] == "inline");
  CHECK(cm["must_understand"] == false);
  json g = f.doc("g/zarr.json");
  g["consolidated_metadata"] = {{"kind", "inline"}, {"must_understand", false}, {"metadata", json::object()}};
  const json expected = {{"a", f.doc("a/zarr.json")}, {"g", g}, {"g/b", f.doc("g/b/zarr.json")}};
  CHECK(cm["metadata"] == expected);
  CHECK(cm["metadata"]["g/b"]["fill_value"] == "NaN");  // B02: a string, never a bare token
  check_parents(cm["metadata"]);
}

TEST_CASE("consolidate (v2) writes .zmetadata as zarr-python does: every .zgroup, .zarray and .zattrs by key") {
  Fixture f("filesystem");
  f.build(2);
  Group::open_blocking(f.rt, f.store, "").consolidate_blocking();
  const json expected = {{"zarr_consolidated_format", 1},
                         {"metadata",
                          {{".zgroup", f.doc(".zgroup")},
                           {".zattrs", f.doc(".zattrs")},
                           {"a/.zarray", f.doc("a/.zarray")},
                           {"g/.zgroup", f.doc("g/.zgroup")},
                           {"g/.zattrs", f.doc("g/.zattrs")},
                           {"g/b/.zarray", f.doc("g/b/.zarray")}}}};
  CHECK(f.doc(".zmetadata") == expected);
}

TEST_CASE("B02: a NaN fill written bare by another tool is consolidated as the string \"NaN\"; so are the infinities") {
  Fixture f;
  const char* zarray = R"({"zarr_format": 2, "shape": [12], "chunks": [4], "dtype": "<f8", "compressor": null,
      "fill_value": %s, "filters": null, "order": "C"})";
  Group::create_blocking(f.rt, f.store, "", json::object(), 2);
  for (const auto& [name, token] : std::vector<std::pair<std::string, std::string>>{
           {"nan", "NaN"}, {"inf", "Infinity"}, {"ninf", "-Infinity"}}) {
    char text[512];
    std::snprintf(text, sizeof text, zarray, token.c_str());
    f.set(name + "/.zarray", text);
  }
  Group::open_blocking(f.rt, f.store, "").consolidate_blocking();
  const std::string written = f.text(".zmetadata");
  const json zm = json::parse(written);  // strict: no NaN extension
  CHECK(zm["metadata"]["nan/.zarray"]["fill_value"] == "NaN");
  CHECK(zm["metadata"]["inf/.zarray"]["fill_value"] == "Infinity");
  CHECK(zm["metadata"]["ninf/.zarray"]["fill_value"] == "-Infinity");
  // and the arrays open from the copy with those fills
  const Group g = Group::open_blocking(f.rt, f.store, "");
  const NdArray all = g.open_array_blocking("nan").read_blocking(Region::all({12}));
  double first = 0;
  std::memcpy(&first, all.data.data(), sizeof first);
  CHECK(std::isnan(first));
}

TEST_CASE("a group opened with consolidated metadata lists and opens its members without another request") {
  const int format = GENERATE(2, 3);
  Fixture f;
  f.build(format);
  Group::open_blocking(f.rt, f.store, "").consolidate_blocking();
  auto counting = std::make_shared<CountingStore>(f.store);
  const Group root = Group::open_blocking(f.rt, counting, "");
  REQUIRE(root.has_consolidated_metadata());
  CHECK(root.attributes() == json{{"title", "t"}});
  // v3: zarr.json; v2: zarr.json (absent), then .zmetadata, which holds .zgroup and .zattrs
  CHECK(counting->counts().gets == (format == 3 ? 1u : 2u));
  const auto before = counting->counts().requests();
  const auto all = root.members_blocking(true);
  CHECK(show(all) == "a array v" + std::to_string(format) + "; g group v" + std::to_string(format) + "; g/b array v" +
                         std::to_string(format) + "; ");
  const Array a = root.open_array_blocking("a");
  const Group g = root.open_group_blocking("g");
  CHECK(g.has_consolidated_metadata());
  CHECK(g.attributes() == json{{"level", 1}});
  CHECK(show(g.members_blocking()) == "b array v" + std::to_string(format) + "; ");
  const Array b = g.open_array_blocking("b");
  CHECK(counting->counts().requests() == before);  // all of it from the one document
  CHECK(b.shape() == std::vector<std::uint64_t>{3});
  std::vector<std::int16_t> values(5);
  a.read_blocking(Region::all(a.shape()), std::as_writable_bytes(std::span(values)));
  CHECK(values == std::vector<std::int16_t>{0, 1, 2, 3, 4});
}

TEST_CASE("Consolidated::ignore reads each node's documents; Consolidated::require refuses a group without a copy") {
  Fixture f;
  f.build(3);
  CHECK(error_of<NotFound>([&] { Group::open_blocking(f.rt, f.store, "", Consolidated::require); }) ==
        "zarr.json | consolidated_metadata");
  Group::open_blocking(f.rt, f.store, "").consolidate_blocking();
  // A node another tool adds is not in the copy: the copy is a snapshot.
  f.set("late/zarr.json", R"({"zarr_format": 3, "node_type": "group"})");
  CHECK(show(Group::open_blocking(f.rt, f.store, "").members_blocking()) == "a array v3; g group v3; ");
  const Group plain = Group::open_blocking(f.rt, f.store, "", Consolidated::ignore);
  CHECK_FALSE(plain.has_consolidated_metadata());
  CHECK(show(plain.members_blocking()) == "a array v3; g group v3; late group v3; ");
  // A member missing from the copy is still opened from its own documents.
  f.set("late/zarr.json", R"({"zarr_format": 3, "node_type": "group", "attributes": {"n": 2}})");
  CHECK(Group::open_blocking(f.rt, f.store, "").open_group_blocking("late").attributes() == json{{"n", 2}});
  // Consolidated::ignore holds for the groups opened below too: g's own copy is not used either.
  Group::open_blocking(f.rt, f.store, "g").consolidate_blocking();
  CHECK(Group::open_blocking(f.rt, f.store, "g").has_consolidated_metadata());
  CHECK_FALSE(plain.open_group_blocking("g").has_consolidated_metadata());

  Fixture v2;
  v2.build(2);
  CHECK(error_of<NotFound>([&] { Group::open_blocking(v2.rt, v2.store, "", Consolidated::require); }) ==
        ".zmetadata | ");
}

TEST_CASE("B30: resize and create update the consolidated copy in the same operation; overwrite drops the entries below") {
  const int format = GENERATE(2, 3);
  Fixture f;
  f.build(format);
  const Group root = Group::open_blocking(f.rt, f.store, "").consolidate_blocking();
  Group::open_blocking(f.rt, f.store, "g").open_array_blocking("b").resize_blocking({7});
  Array::create_blocking(f.rt, f.store, "g/c", meta(DataTypeKind::uint8, {2}, format));
  Group::create_blocking(f.rt, f.store, "n", json::object(), format);

  const Group again = Group::open_blocking(f.rt, f.store, "");
  REQUIRE(again.has_consolidated_metadata());
  const std::string v = " v" + std::to_string(format) + "; ";
  CHECK(show(again.members_blocking(true)) ==
        "a array" + v + "g group" + v + "g/b array" + v + "g/c array" + v + "n group" + v);
  CHECK(again.open_group_blocking("g").open_array_blocking("b").shape() == std::vector<std::uint64_t>{7});
  // What consolidate would write now is what the updates wrote.
  const std::string key = format == 3 ? "zarr.json" : ".zmetadata";
  const json updated = f.doc(key);
  Group::open_blocking(f.rt, f.store, "").consolidate_blocking();
  CHECK(f.doc(key) == updated);

  // Overwriting g with an array drops g's members from the copy.
  Array::create_blocking(f.rt, f.store, "g", meta(DataTypeKind::uint8, {2}, format), CreateMode::overwrite);
  CHECK(show(Group::open_blocking(f.rt, f.store, "").members_blocking(true)) == "a array" + v + "g array" + v +
                                                                                     "n group" + v);
  CHECK(show(Group::open_blocking(f.rt, f.store, "", Consolidated::ignore).members_blocking(true)) ==
        "a array" + v + "g array" + v + "n group" + v);
}


TEST_CASE("an update of a contended copy retries its conditional write for write_conflict_timeout; one that never "
          "lands says the node was written") {
  Runtime rt{{.write_conflict_timeout = std::chrono::milliseconds(300)}};
  auto store = std::make_shared<ContendedStore>();
  Group::create_blocking(rt, store, "");
  Group::open_blocking(rt, store, "").consolidate_blocking();
  store->conflicts = 5;
  Array::create_blocking(rt, store, "c", meta(DataTypeKind::uint8, {2}));
  CHECK(store->conflicts == 0);
  CHECK(show(Group::open_blocking(rt, store, "").members_blocking()) == "c array v3; ");
  store->conflicts = 1000;
  try {
    Array::create_blocking(rt, store, "d", meta(DataTypeKind::uint8, {2}));
    FAIL("an update that never landed succeeded");
  } catch (const StoreError& e) {
    CHECK(e.key() == "zarr.json");
    CHECK(e.field() == "generation");
    CHECK(std::string(e.what()).find("'d' was written, but its entry in this consolidated metadata was not") !=
          std::string::npos);
    CHECK(std::string(e.what()).find("another writer kept replacing it") != std::string::npos);
  }
  CHECK(store->conflicts < 1000 - 2);  // it tried again, with waits of about 1 to 100 ms between,
  CHECK(store->conflicts > 0);         // and gave up after 300 ms
  auto written = store->exists("d/zarr.json");
  CHECK(boost::asio::co_spawn(rt.io_executor(), std::move(written), boost::asio::use_future).get());  // as it says
}

TEST_CASE("a copy that cannot take the change refuses append and create before anything is written") {
  Fixture f;
  Group::create_blocking(f.rt, f.store, "", json::object(), 2);
  const Array a = Array::create_blocking(f.rt, f.store, "a", meta(DataTypeKind::uint8, {4}, 2));
  Group::open_blocking(f.rt, f.store, "").consolidate_blocking();
  // Another tool (zarr-python writes attributes with allow_nan) put a bare NaN into the copy.
  f.set(".zattrs", R"({"x": NaN})");
  f.set(".zmetadata", R"({"zarr_consolidated_format": 1, "metadata": {".zgroup": {"zarr_format": 2},
      ".zattrs": {"x": NaN}, "a/.zarray": )" + f.text("a/.zarray") + "}}");
  const std::vector<std::uint8_t> more{1, 2};
  CHECK(error_of<InvalidArgument>([&] { a.append_blocking(std::as_bytes(std::span(more)), {2}, 0); }) ==
        ".zmetadata | metadata..zattrs.x");
  CHECK(Array::open_blocking(f.rt, f.store, "a").shape() == std::vector<std::uint64_t>{4});
  CHECK(f.run(f.store->list("a/")) == std::vector<std::string>{"a/.zarray"});  // no chunk written
  CHECK(error_of<InvalidArgument>([&] { Array::create_blocking(f.rt, f.store, "b", meta(DataTypeKind::uint8, {4}, 2)); }) ==
        ".zmetadata | metadata..zattrs.x");
  CHECK_FALSE(f.run(f.store->exists("b/.zarray")));
}

TEST_CASE("resize refuses a handle whose metadata is no longer the stored one (e.g. an old consolidated copy)") {
  Fixture f;
  Group::create_blocking(f.rt, f.store, "");
  Array::create_blocking(f.rt, f.store, "a", meta(DataTypeKind::uint8, {4}));
  Group::open_blocking(f.rt, f.store, "").consolidate_blocking();
  const Array old = Group::open_blocking(f.rt, f.store, "").open_array_blocking("a");
  Array::open_blocking(f.rt, f.store, "a").resize_blocking({8});
  CHECK(error_of<InvalidArgument>([&] { old.resize_blocking({2}); }) == "a/zarr.json | ");
  CHECK(Array::open_blocking(f.rt, f.store, "a").shape() == std::vector<std::uint64_t>{8});
}

// A memory store that, once, runs `after` right after a write of `key`
// lands (before the writer goes on).
struct AfterWriteStore final : MemoryStore {
  std::string key;
  std::function<awaitable<void>()> after;
  awaitable<std::optional<Generation>> write(std::string k, std::optional<Bytes> v, WriteOptions o) override {
    auto stored = co_await MemoryStore::write(k, std::move(v), std::move(o));
    co_await run_hook(std::move(k));
    co_return stored;
  }
  awaitable<void> run_hook(std::string k) {
    if (k != key || !after) co_return;
    auto hook = std::exchange(after, nullptr);
    co_await hook();
  }
};

awaitable<void> set_attributes_of(Runtime* rt, std::shared_ptr<Store> store, std::string path, json attributes) {
  const Array a = co_await Array::open(*rt, std::move(store), std::move(path));
  co_await a.set_attributes(std::move(attributes));
}

awaitable<void> resize_of(Runtime* rt, std::shared_ptr<Store> store, std::string path, std::vector<std::uint64_t> shape) {
  const Array a = co_await Array::open(*rt, std::move(store), std::move(path));
  co_await a.resize(std::move(shape));
}

TEST_CASE("a consolidated copy takes the node as it is, not as this writer left it, when another writer replaced "
          "it in between (was: the copy kept the older document for good)",
          "[regression]") {
  const int zarr_format = GENERATE(3, 2);
  const std::string change = GENERATE("attributes", "resize");
  CAPTURE(zarr_format, change);
  Runtime rt;
  auto store = std::make_shared<AfterWriteStore>();
  Group::create_blocking(rt, store, "", json::object(), zarr_format);
  Array::create_blocking(rt, store, "x", meta(DataTypeKind::int32, {8}, zarr_format));
  Group::open_blocking(rt, store, "").consolidate_blocking();
  const Array mine = Array::open_blocking(rt, store, "x");
  // Right after this writer's node document lands, another writer changes
  // the same node and updates the copy; then this writer updates the copy.
  store->key = zarr_format == 3 ? "x/zarr.json" : change == "resize" ? "x/.zarray" : "x/.zattrs";
  const std::shared_ptr<Store> shared = store;
  if (change == "attributes") {
    store->after = [&rt, shared] { return set_attributes_of(&rt, shared, "x", json{{"v", 2}}); };
    mine.set_attributes_blocking(json{{"v", 1}});
  } else {
    store->after = [&rt, shared] { return resize_of(&rt, shared, "x", {32}); };
    mine.resize_blocking({16});
  }
  REQUIRE_FALSE(store->after);  // the other writer ran
  const Array node = Array::open_blocking(rt, store, "x");
  const Array copy = Group::open_blocking(rt, store, "", Consolidated::require).open_array_blocking("x");
  CHECK(node.metadata().attributes == (change == "attributes" ? json{{"v", 2}} : json::object()));
  CHECK(node.shape() == std::vector<std::uint64_t>{change == "resize" ? 32u : 8u});
  CHECK(copy.metadata().attributes == node.metadata().attributes);
  CHECK(copy.shape() == node.shape());
}

awaitable<void> set_group_attributes_of(Runtime* rt, std::shared_ptr<Store> store, json attributes) {
  const Group g = co_await Group::open(*rt, std::move(store), "");
  co_await g.set_attributes(std::move(attributes));
}

TEST_CASE("a v2 group's own consolidated copy takes its attributes as they are, not as this writer left them, "
          "when another writer replaced them in between (was: the copy kept the older ones)",
          "[regression]") {
  Runtime rt;
  auto store = std::make_shared<AfterWriteStore>();
  Group::create_blocking(rt, store, "", json::object(), 2);
  Group::open_blocking(rt, store, "").consolidate_blocking();
  const Group mine = Group::open_blocking(rt, store, "");
  store->key = ".zattrs";
  const std::shared_ptr<Store> shared = store;
  store->after = [&rt, shared] { return set_group_attributes_of(&rt, shared, json{{"v", 2}}); };
  mine.set_attributes_blocking(json{{"v", 1}});
  REQUIRE_FALSE(store->after);  // the other writer ran
  const auto read = [&](const std::string& key) {
    const auto b = asio::co_spawn(rt.io_executor(), store->get(key), asio::use_future).get();
    REQUIRE(b);
    return json::parse(std::string(reinterpret_cast<const char*>(b->data()), b->size()));
  };
  CHECK(read(".zattrs") == json{{"v", 2}});
  CHECK(read(".zmetadata")["metadata"][".zattrs"] == json{{"v", 2}});
}

awaitable<void> create_array_at(Runtime* rt, std::shared_ptr<Store> store, std::string path, ArrayMetadata m) {
  co_await Array::create(*rt, std::move(store), std::move(path), std::move(m));
}

TEST_CASE("a create with overwrite drops from the copy only the nodes it erased, not one another writer made "
          "below it since (was: that node's entry was dropped for good)",
          "[regression]") {
  const int zarr_format = GENERATE(3, 2);
  CAPTURE(zarr_format);
  Runtime rt;
  auto store = std::make_shared<AfterWriteStore>();
  Group::create_blocking(rt, store, "", json::object(), zarr_format);
  Group::create_blocking(rt, store, "g", json::object(), zarr_format);
  Array::create_blocking(rt, store, "g/old", meta(DataTypeKind::int32, {8}, zarr_format));
  Group::open_blocking(rt, store, "").consolidate_blocking();
  // Right after the overwrite's group document lands, another writer makes g/new.
  store->key = zarr_format == 3 ? "g/zarr.json" : "g/.zgroup";
  const std::shared_ptr<Store> shared = store;
  store->after = [&rt, shared, zarr_format] {
    return create_array_at(&rt, shared, "g/new", meta(DataTypeKind::int32, {4}, zarr_format));
  };
  Group::create_blocking(rt, store, "g", json::object(), zarr_format, CreateMode::overwrite);
  REQUIRE_FALSE(store->after);  // the other writer ran
  CHECK(show(Group::open_blocking(rt, store, "", Consolidated::require).members_blocking(true)) ==
        "g group v" + std::to_string(zarr_format) + "; g/new array v" + std::to_string(zarr_format) + "; ");
}

TEST_CASE("creating a group where an implicit group holds nodes keeps their entries in the copy") {
  Fixture f;
  Group::create_blocking(f.rt, f.store, "", json::object(), 2);
  Array::create_blocking(f.rt, f.store, "x/y", meta(DataTypeKind::uint8, {2}, 2));
  f.run(f.store->erase("x/.zgroup"));  // x: implicit, as some v2 writers leave it
  Group::open_blocking(f.rt, f.store, "").consolidate_blocking();
  CHECK(show(Group::open_blocking(f.rt, f.store, "").members_blocking(true)) == "x group v2 implicit; x/y array v2; ");
  Group::create_blocking(f.rt, f.store, "x", json::object(), 2);
  CHECK(show(Group::open_blocking(f.rt, f.store, "").members_blocking(true)) == "x group v2; x/y array v2; ");
}

TEST_CASE("creating below a consolidated group adds the parent groups the copy lacks; v3 leaves out what an implicit group holds") {
  Fixture v2;
  Group::create_blocking(v2.rt, v2.store, "", json::object(), 2);
  Group::open_blocking(v2.rt, v2.store, "").consolidate_blocking();
  Array::create_blocking(v2.rt, v2.store, "new/x", meta(DataTypeKind::uint8, {2}, 2));  // writes new/.zgroup too
  const json updated = v2.doc(".zmetadata");
  CHECK(updated["metadata"].contains("new/.zgroup"));
  Group::open_blocking(v2.rt, v2.store, "").consolidate_blocking();
  CHECK(v2.doc(".zmetadata") == updated);

  Fixture v3;
  Group::create_blocking(v3.rt, v3.store, "");
  Group::open_blocking(v3.rt, v3.store, "").consolidate_blocking();
  v3.set("p/zarr.json", R"({"zarr_format": 3, "node_type": "group", "attributes": {"by": "another tool"}})");
  Array::create_blocking(v3.rt, v3.store, "p/x", meta(DataTypeKind::uint8, {2}));
  Array::create_blocking(v3.rt, v3.store, "q/x", meta(DataTypeKind::uint8, {2}));  // writes q/zarr.json too
  // Another tool's array below a group without a document (an implicit group):
  v3.set("r/x/zarr.json", v3.doc("q/x/zarr.json").dump());
  const json metadata = v3.doc("zarr.json")["consolidated_metadata"]["metadata"];
  check_parents(metadata);
  CHECK(metadata["p"]["attributes"] == json{{"by", "another tool"}});
  CHECK(metadata.contains("p/x"));
  CHECK(metadata["q"]["node_type"] == "group");
  CHECK(metadata.contains("q/x"));
  const json updated3 = v3.doc("zarr.json");
  Group::open_blocking(v3.rt, v3.store, "").consolidate_blocking();  // the same: r/x left out there
  CHECK(v3.doc("zarr.json") == updated3);
  CHECK_FALSE(updated3["consolidated_metadata"]["metadata"].contains("r/x"));
}

TEST_CASE("a v3 hierarchy made by create consolidates whole: create writes the parent groups "
          "(was: nodes below parents without documents left out of the copy)",
          "[regression]") {
  Fixture f;
  Group::create_blocking(f.rt, f.store, "runs/2024/jan");  // writes zarr.json at runs/2024, runs and the root
  Array::create_blocking(f.rt, f.store, "runs/2024/jan/temp", meta(DataTypeKind::uint8, {4}));
  CHECK(f.doc("runs/zarr.json") == json{{"zarr_format", 3}, {"node_type", "group"}, {"attributes", json::object()}});
  Group::open_blocking(f.rt, f.store, "").consolidate_blocking();
  Array::create_blocking(f.rt, f.store, "other/deep/arr", meta(DataTypeKind::uint8, {4}));  // after: the copy follows
  const std::string all =
      "other group v3; other/deep group v3; other/deep/arr array v3; runs group v3; runs/2024 group v3; "
      "runs/2024/jan group v3; runs/2024/jan/temp array v3; ";
  CHECK(show(Group::open_blocking(f.rt, f.store, "", Consolidated::require).members_blocking(true)) == all);
  CHECK(show(Group::open_blocking(f.rt, f.store, "", Consolidated::ignore).members_blocking(true)) == all);
  CHECK(Group::open_blocking(f.rt, f.store, "runs/2024").attributes() == json::object());
}

TEST_CASE("a deeper group's copy is updated too, relative to that group") {
  Fixture f;
  Group::create_blocking(f.rt, f.store, "");
  Group::create_blocking(f.rt, f.store, "p");
  Group::create_blocking(f.rt, f.store, "p/q");
  Group::open_blocking(f.rt, f.store, "p").consolidate_blocking();
  Array::create_blocking(f.rt, f.store, "p/q/x", meta(DataTypeKind::uint8, {2}));
  CHECK(show(Group::open_blocking(f.rt, f.store, "p").members_blocking(true)) ==
        "q group v3; q/x array v3; ");
  CHECK_FALSE(Group::open_blocking(f.rt, f.store, "").has_consolidated_metadata());  // the root had none
}

TEST_CASE("consolidate refuses NaN in attributes, naming the document it would write") {
  Fixture f;
  Group::create_blocking(f.rt, f.store, "");
  f.set("g/zarr.json", R"({"zarr_format": 3, "node_type": "group", "attributes": {"x": NaN}})");
  CHECK(error_of<InvalidArgument>([&] { Group::open_blocking(f.rt, f.store, "").consolidate_blocking(); }) ==
        "zarr.json | consolidated_metadata.metadata.g.attributes.x");
  CHECK_FALSE(f.doc("zarr.json").contains("consolidated_metadata"));  // nothing written
}

TEST_CASE("malformed consolidated metadata raises InvalidMetadata naming the key and the entry") {
  Fixture f;
  auto group_with = [&](const std::string& cm) {
    f.set("zarr.json", R"({"zarr_format": 3, "node_type": "group", "consolidated_metadata": )" + cm + "}");
    return error_of<Error>([&] { Group::open_blocking(f.rt, f.store, ""); });
  };
  CHECK(group_with("[]") == "zarr.json | consolidated_metadata");
  CHECK(group_with(R"({"kind": "remote", "metadata": {}})") == "zarr.json | consolidated_metadata.kind");
  CHECK(group_with(R"({"kind": "inline", "metadata": 3})") == "zarr.json | consolidated_metadata.metadata");
  CHECK(group_with(R"({"kind": "inline", "metadata": {"../x": {"zarr_format": 3, "node_type": "group"}}})") ==
        R"(zarr.json | consolidated_metadata.metadata["../x"])");
  CHECK(group_with(R"({"kind": "inline", "metadata": {"a": 1}})") == R"(zarr.json | consolidated_metadata.metadata["a"])");
  CHECK(group_with(R"({"kind": "inline", "metadata": {"a": {"zarr_format": 4}}})") ==
        R"(zarr.json | consolidated_metadata.metadata["a"].zarr_format)");
  CHECK(group_with(R"({"kind": "inline", "metadata": {"a": {"zarr_format": 3, "node_type": "x"}}})") ==
        R"(zarr.json | consolidated_metadata.metadata["a"].node_type)");
  CHECK(group_with("null") == "<none>");  // null: no copy, as some writers put it

  Fixture v2;
  v2.set(".zgroup", R"({"zarr_format": 2})");
  auto zmetadata = [&](const std::string& text) {
    v2.set(".zmetadata", text);
    return error_of<InvalidMetadata>([&] { Group::open_blocking(v2.rt, v2.store, ""); });
  };
  CHECK(zmetadata("[]") == ".zmetadata | ");
  CHECK(zmetadata(R"({"zarr_consolidated_format": 2, "metadata": {}})") == ".zmetadata | zarr_consolidated_format");
  CHECK(zmetadata(R"({"zarr_consolidated_format": 1})") == ".zmetadata | metadata");
  CHECK(zmetadata(R"({"zarr_consolidated_format": 1, "metadata": {"a//.zarray": {}}})") ==
        R"(.zmetadata | metadata["a//.zarray"])");
  CHECK(zmetadata(R"({"zarr_consolidated_format": 1, "metadata": {"a/.zarray": []}})") ==
        R"(.zmetadata | metadata["a/.zarray"])");
  // A bad array document in the copy is named when the array is opened.
  zmetadata(R"({"zarr_consolidated_format": 1, "metadata": {"a/.zarray": {"zarr_format": 2}}})");
  const Group g = Group::open_blocking(v2.rt, v2.store, "");
  CHECK(error_of<InvalidMetadata>([&] { g.open_array_blocking("a"); }).starts_with("a/.zarray | "));
  CHECK(error_of<NotFound>([&] { g.open_group_blocking("a"); }) == "a/.zgroup | ");
  CHECK(zmetadata(R"({"zarr_consolidated_format": 1, "metadata": {".zarray": {"zarr_format": 2}}})") ==
        R"(.zmetadata | metadata[".zarray"])");  // the group itself described as an array
  CHECK(zmetadata(R"({"zarr_consolidated_format": 1, "metadata": {"/.zarray": {}}})") == R"(.zmetadata | metadata["/.zarray"])");
  CHECK(group_with(R"({"kind": "inline", "metadata": {"a": {"zarr_format": 2, "attributes": 5}}})") ==
        R"(zarr.json | consolidated_metadata.metadata["a"].attributes)");
}

// ---- zarr-python 2.13 ------------------------------------------------------

namespace {
const char* kPython = "/usr/bin/python3";
const fs::path kScript = fs::path(ZARRCORO_INTEROP_DIR) / "zarr_python_consolidated.py";

bool have_zarr_python() {
  return std::system((std::string(kPython) + " -c 'import zarr' >/dev/null 2>&1").c_str()) == 0;
}

std::pair<int, std::string> python(const std::string& args, const fs::path& log) {
  const int rc = std::system((std::string(kPython) + " " + kScript.string() + " " + args + " >" + log.string() +
                              " 2>&1")
                                 .c_str());
  std::ifstream in(log);
  std::stringstream out;
  out << in.rdbuf();
  return {WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, out.str()};
}

#define REQUIRE_ZARR_PYTHON()                                                                    \
  do {                                                                                           \
    if (!have_zarr_python()) {                                                                   \
      if (std::getenv("CI")) FAIL("CI is set but /usr/bin/python3 cannot import zarr");          \
      WARN("skipped: /usr/bin/python3 with zarr (Debian python3-zarr) is not installed");        \
      return;                                                                                    \
    }                                                                                            \
  } while (0)
}  // namespace

TEST_CASE("zarr-python 2 consolidates; zarrcoro reads the hierarchy from .zmetadata alone", "[interop]") {
  REQUIRE_ZARR_PYTHON();
  Fixture f("filesystem");
  const fs::path dir = f.dir.path / "h";  // zarr-python replaces the directory it writes: a store made after
  const auto [rc, out] = python("generate " + dir.string(), f.dir.path / "gen.log");
  INFO(out);
  REQUIRE(rc == 0);
  auto store = std::make_shared<FilesystemStore>(f.rt.io_executor(), dir);
  const Group root = Group::open_blocking(f.rt, store, "");  // only .zmetadata and chunks are there
  REQUIRE(root.has_consolidated_metadata());
  CHECK(root.attributes() == json{{"title", "consolidated"}});
  CHECK(show(root.members_blocking(true)) == "a array v2; sub group v2; sub/b array v2; ");
  std::vector<std::int16_t> a(5);
  root.open_array_blocking("a").read_blocking(Region::all({5}), std::as_writable_bytes(std::span(a)));
  CHECK(a == std::vector<std::int16_t>{0, 1, 2, 3, 4});
  const Group sub = root.open_group_blocking("sub");
  CHECK(sub.attributes() == json{{"level", 1}});
  const NdArray b = sub.open_array_blocking("b").read_blocking(Region::all({3}));
  REQUIRE(b.data.size() == 24);
  double v[3];
  std::memcpy(v, b.data.data(), sizeof v);
  CHECK((std::isnan(v[0]) && std::isnan(v[1]) && std::isnan(v[2])));
}

TEST_CASE("zarrcoro consolidates; zarr-python 2 opens the hierarchy with open_consolidated from .zmetadata alone",
          "[interop]") {
  REQUIRE_ZARR_PYTHON();
  Fixture f("filesystem");
  f.build(2);
  Group::open_blocking(f.rt, f.store, "").consolidate_blocking();
  const auto [rc, out] = python("verify " + f.dir.path.string(), f.dir.path / "verify.log");
  INFO(out);
  REQUIRE(rc == 0);
  const json tree = json::parse(out);
  const json expected = {
      {"", {{"attrs", {{"title", "t"}}}}},
      {"a", {{"attrs", json::object()}, {"dtype", "<i2"}, {"fill_value", 0}, {"shape", {5}}, {"values", {0, 1, 2, 3, 4}}}},
      {"g", {{"attrs", {{"level", 1}}}}},
      {"g/b",
       {{"attrs", json::object()}, {"dtype", "<f8"}, {"fill_value", "NaN"}, {"shape", {3}}, {"values", {"NaN", "NaN", "NaN"}}}}};
  CHECK(tree == expected);
}

// ---- zarrita (JavaScript) --------------------------------------------------

TEST_CASE("zarrita opens a v3 hierarchy zarrcoro consolidated from the root zarr.json alone", "[interop][zarrita]") {
  const fs::path interop = ZARRCORO_INTEROP_DIR;
  const std::string missing = test::zarrita_missing(interop);
  if (!missing.empty()) {
    if (std::getenv("CI")) FAIL("CI must run the zarrita interop test, but " << missing);
    WARN("SKIPPED: " << missing);
    return;
  }
  Fixture f("filesystem");
  f.build(3);
  Group::open_blocking(f.rt, f.store, "").consolidate_blocking();
  for (const char* doc : {"a/zarr.json", "g/zarr.json", "g/b/zarr.json"}) fs::remove(f.dir.path / doc);
  const fs::path log = f.dir.path.parent_path() / (f.dir.path.filename().string() + ".zarrita.log");
  const std::string command = "node " + (interop / "consolidated_with_zarrita.mjs").string() + " " +
                              f.dir.path.string() + " >" + log.string() + " 2>&1";
  const int rc = std::system(command.c_str());
  std::ifstream in(log);
  std::stringstream out;
  out << in.rdbuf();
  fs::remove(log);
  INFO(out.str());
  REQUIRE(rc == 0);
  const json seen = json::parse(out.str());
  CHECK(seen["contents"] == json::parse(R"([["/", "group"], ["/a", "array"], ["/g", "group"], ["/g/b", "array"]])"));
  CHECK(seen["a"] == json::array({0, 1, 2, 3, 4}));
  CHECK(seen["g"] == json{{"level", 1}});
}
