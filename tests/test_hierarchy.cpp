// Hierarchies: what create does where a node exists (AlreadyExists, or
// CreateMode::overwrite removing the old node first) and Group::members
// (direct and recursive, v2 and v3 mixed) on the memory and filesystem
// stores. S3 (listings of several pages) is in test_s3.cpp, a store that
// cannot list in test_http_store.cpp, `zarrcoro ls` in test_cli.cpp.
#include <cmath>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/use_future.hpp>
#include <catch2/catch.hpp>

#include <zarrcoro/array.hpp>
#include <zarrcoro/error.hpp>
#include <zarrcoro/runtime.hpp>
#include <zarrcoro/store/filesystem.hpp>
#include <zarrcoro/store/memory.hpp>

#include "support.hpp"

using namespace zarrcoro;
using nlohmann::json;
using test::show;
namespace asio = boost::asio;
using Strings = std::vector<std::string>;

namespace {

const char* kBytes = R"([{"name":"bytes","configuration":{"endian":"little"}}])";
const char* kZstd = R"([{"name":"bytes","configuration":{"endian":"little"}},{"name":"zstd","configuration":{"level":1}}])";

ArrayMetadata meta(DataType t, int zarr_format = 3, const std::string& codecs = kBytes) {
  ArrayMetadata m;
  m.zarr_format = zarr_format;
  if (zarr_format == 2) m.chunk_key_encoding = {ChunkKeyEncoding::Kind::v2, '.'};
  m.shape = {4};
  m.chunk_shape = {2};
  m.data_type = t;
  m.codecs = json::parse(codecs);
  return m;
}

// A fresh store of the kind the test case generates.
struct Fixture {
  Runtime rt;
  test::TempDir dir{"hier"};
  std::shared_ptr<Store> store;
  explicit Fixture(const std::string& kind) {
    if (kind == "memory") store = std::make_shared<MemoryStore>();
    else store = std::make_shared<FilesystemStore>(rt.io_executor(), dir.path);
  }
  template <class T>
  T run(awaitable<T> a) {
    return asio::co_spawn(rt.io_executor(), std::move(a), asio::use_future).get();
  }
  Strings keys(const std::string& prefix) { return run(store->list(prefix)); }
  void set(const std::string& key, const std::string& text) {
    Bytes b(text.size());
    std::memcpy(b.data(), text.data(), text.size());
    run(store->set(key, std::move(b)));
  }
  Array array(const std::string& path, ArrayMetadata m, CreateMode mode = CreateMode::fail_if_exists) {
    return Array::create_blocking(rt, store, path, std::move(m), mode);
  }
  template <class T>
  Array filled(const std::string& path, ArrayMetadata m, T value) {
    const Array a = array(path, std::move(m));
    const std::vector<T> data(4, value);
    a.write_blocking(Region::all(a.shape()), std::as_bytes(std::span(data)));
    return a;
  }
};

template <class T>
std::vector<T> read_all(const Array& a) {
  std::vector<T> out(4);
  a.read_blocking(Region::all(a.shape()), std::as_writable_bytes(std::span(out)));
  return out;
}

// The key and field of the AlreadyExists that `f` raises, or {"<none>", ""}.
template <class F>
std::pair<std::string, std::string> already_exists(F&& f) {
  try {
    f();
  } catch (const AlreadyExists& e) {
    return {e.key(), e.field()};
  }
  return {"<none>", ""};
}

using Pair = std::pair<std::string, std::string>;

NodeEntry node(std::string name, NodeType type, int zarr_format, bool implicit = false) {
  return {std::move(name), type, zarr_format, implicit};
}

}  // namespace

TEST_CASE("AlreadyExists is an error kind of its own") {
  const AlreadyExists e("a/zarr.json", "", "a node exists at 'a'");
  CHECK(e.code() == Errc::already_exists);
  CHECK(std::string(e.what()) == "already exists: key 'a/zarr.json': a node exists at 'a'");
  CHECK_THROWS_AS(throw_error(Errc::already_exists, "k", "", "m"), AlreadyExists);
}

TEST_CASE("create where a node exists raises AlreadyExists naming its metadata key (v2 and v3)") {
  Fixture f(GENERATE("memory", "filesystem"));
  f.filled<std::int32_t>("a", meta(DataTypeKind::int32), 7);
  f.array("v2a", meta(DataTypeKind::int32, 2));  // the root holds a node already (a's parent): no .zgroup
  Group::create_blocking(f.rt, f.store, "g");
  Group::create_blocking(f.rt, f.store, "v2g", json::object(), 2);

  const auto float32 = meta(DataTypeKind::float32);
  const auto v2_float32 = meta(DataTypeKind::float32, 2);
  CHECK(already_exists([&] { f.array("a", float32); }) == Pair{"a/zarr.json", ""});
  CHECK(already_exists([&] { f.array("a", v2_float32); }) == Pair{"a/zarr.json", ""});
  CHECK(already_exists([&] { f.array("v2a", float32); }) == Pair{"v2a/.zarray", ""});
  CHECK(already_exists([&] { Group::create_blocking(f.rt, f.store, "a"); }) == Pair{"a/zarr.json", ""});
  CHECK(already_exists([&] { Group::create_blocking(f.rt, f.store, "v2a", json::object(), 2); }) ==
        Pair{"v2a/.zarray", ""});
  CHECK(already_exists([&] { f.array("g", float32); }) == Pair{"g/zarr.json", ""});
  CHECK(already_exists([&] { f.array("v2g", v2_float32); }) == Pair{"v2g/.zgroup", ""});
  CHECK(already_exists([&] { Group::create_blocking(f.rt, f.store, "g"); }) == Pair{"g/zarr.json", ""});
  CHECK(already_exists([&] { Group::create_blocking(f.rt, f.store, ""); }) == Pair{"zarr.json", ""});  // a's parent
  // Nothing was touched: the old array reads as before.
  const Array a = Array::open_blocking(f.rt, f.store, "a");
  CHECK(a.dtype() == DataTypeKind::int32);
  CHECK(read_all<std::int32_t>(a) == std::vector<std::int32_t>(4, 7));
  // A path holding keys but no metadata document is no node.
  f.set("stray/c/0", "x");
  CHECK(already_exists([&] { f.array("stray", float32); }) == Pair{"<none>", ""});
}

TEST_CASE("create with overwrite removes the old chunks: int32 over float32 data reads the fill value (issue 13)") {
  Fixture f(GENERATE("memory", "filesystem"));
  const std::string codecs = GENERATE(as<std::string>{}, kBytes, kZstd);
  f.filled<float>("x", meta(DataTypeKind::float32), 1.5f);  // 1.5f has the bits of int32 1069547520
  f.filled<std::int32_t>("xa", meta(DataTypeKind::int32), 5);  // a sibling sharing the prefix "x"
  REQUIRE(f.keys("x/") == Strings{"x/c/0", "x/c/1", "x/zarr.json"});

  auto m = meta(DataTypeKind::int32, 3, codecs);
  m.fill_value = {std::byte{0xf9}, std::byte{0xff}, std::byte{0xff}, std::byte{0xff}};  // -7
  const Array a = f.array("x", m, CreateMode::overwrite);
  CHECK(f.keys("x/") == Strings{"x/zarr.json"});
  CHECK(read_all<std::int32_t>(a) == std::vector<std::int32_t>(4, -7));
  CHECK(read_all<std::int32_t>(Array::open_blocking(f.rt, f.store, "x")) == std::vector<std::int32_t>(4, -7));
  CHECK(read_all<std::int32_t>(Array::open_blocking(f.rt, f.store, "xa")) == std::vector<std::int32_t>(4, 5));
}

TEST_CASE("create with overwrite replaces a node of the other format and type, children included") {
  Fixture f(GENERATE("memory", "filesystem"));
  SECTION("a v2 array over a v3 array: the zarr.json goes, open finds the v2 array") {
    f.filled<float>("y", meta(DataTypeKind::float32), 2.5f);
    auto m = meta(DataTypeKind::int16, 2);
    m.attributes = {{"units", "m"}};
    f.array("y", m, CreateMode::overwrite);
    CHECK(f.keys("y/") == Strings{"y/.zarray", "y/.zattrs"});
    const Array a = Array::open_blocking(f.rt, f.store, "y");
    CHECK(a.metadata().zarr_format == 2);
    CHECK(a.dtype() == DataTypeKind::int16);
  }
  SECTION("a v3 group over a v2 array") {
    f.filled<float>("y", meta(DataTypeKind::float32, 2), 2.5f);
    Group::create_blocking(f.rt, f.store, "y", json{{"k", 1}}, 3, CreateMode::overwrite);
    CHECK(f.keys("y/") == Strings{"y/zarr.json"});
    CHECK(Group::open_blocking(f.rt, f.store, "y").zarr_format() == 3);
  }
  SECTION("a group over a group removes its members") {
    Group::create_blocking(f.rt, f.store, "g");
    f.filled<float>("g/a", meta(DataTypeKind::float32), 1.0f);
    Group::create_blocking(f.rt, f.store, "g/h", json::object(), 2);
    f.array("g/h/b", meta(DataTypeKind::uint8, 2));
    const Group g = Group::create_blocking(f.rt, f.store, "g", json::object(), 3, CreateMode::overwrite);
    CHECK(f.keys("g/") == Strings{"g/zarr.json"});
    CHECK(g.members_blocking(true).empty());
  }
  SECTION("an array over a group that holds an array") {
    Group::create_blocking(f.rt, f.store, "g");
    f.filled<float>("g/a", meta(DataTypeKind::float32), 1.0f);
    f.array("g", meta(DataTypeKind::int32), CreateMode::overwrite);
    CHECK(f.keys("g/") == Strings{"g/zarr.json"});
  }
  SECTION("overwrite where there is no node creates one") {
    f.set("n/c/0", "junk");
    f.array("n", meta(DataTypeKind::int32), CreateMode::overwrite);
    CHECK(f.keys("n/") == Strings{"n/zarr.json"});
  }
}

TEST_CASE("create with overwrite at the root path removes every key of the store") {
  Fixture f(GENERATE("memory", "filesystem"));
  const int zarr_format = GENERATE(2, 3);
  Group::create_blocking(f.rt, f.store, "");
  f.filled<float>("a", meta(DataTypeKind::float32), 1.0f);
  f.filled<float>("b/c", meta(DataTypeKind::float32, 2), 1.0f);
  f.set("notes.txt", "x");
  const Array a = f.array("", meta(DataTypeKind::int32, zarr_format), CreateMode::overwrite);
  CHECK(f.keys("") == Strings{zarr_format == 2 ? ".zarray" : "zarr.json"});
  CHECK(read_all<std::int32_t>(a) == std::vector<std::int32_t>(4, 0));
  Group::create_blocking(f.rt, f.store, "", json::object(), zarr_format, CreateMode::overwrite);
  CHECK(f.keys("") == Strings{zarr_format == 2 ? ".zgroup" : "zarr.json"});
}

TEST_CASE("create with overwrite checks the new metadata before removing anything") {
  Fixture f(GENERATE("memory", "filesystem"));
  f.filled<float>("x", meta(DataTypeKind::float32), 1.5f);
  auto bad = meta(DataTypeKind::int32);
  bad.chunk_shape = {2, 2};  // rank 2 for a 1-d array
  CHECK_THROWS_AS(f.array("x", bad, CreateMode::overwrite), InvalidMetadata);
  CHECK_THROWS_AS(Group::create_blocking(f.rt, f.store, "x", json::array(), 3, CreateMode::overwrite),
                  InvalidArgument);
  CHECK(f.keys("x/") == Strings{"x/c/0", "x/c/1", "x/zarr.json"});
}

TEST_CASE("set_attributes replaces an array's or a group's attributes, v2 and v3, and keeps the consolidated copy "
          "up to date") {
  Fixture f(GENERATE("memory", "filesystem"));
  const int format = GENERATE(2, 3);
  INFO("zarr_format " << format);
  const Group root = Group::create_blocking(f.rt, f.store, "", json::object(), format);
  const Group g = Group::create_blocking(f.rt, f.store, "g", {{"title", "old"}}, format);
  const Array a = f.filled<std::int32_t>("g/a", meta(DataTypeKind::int32, format), 5);
  root.consolidate_blocking();

  const Array a2 = a.set_attributes_blocking({{"units", "m"}, {"scale", 2}});
  CHECK(a2.metadata().attributes == json{{"units", "m"}, {"scale", 2}});
  CHECK(a.metadata().attributes == json::object());  // the old handle keeps its own
  CHECK(Array::open_blocking(f.rt, f.store, "g/a").metadata().attributes == a2.metadata().attributes);
  CHECK(read_all<std::int32_t>(a2) == std::vector<std::int32_t>(4, 5));  // the data stays
  const Group g2 = g.set_attributes_blocking({{"title", "new"}});
  CHECK(g2.attributes() == json{{"title", "new"}});
  CHECK(Group::open_blocking(f.rt, f.store, "g", Consolidated::ignore).attributes() == json{{"title", "new"}});
  // The root's consolidated copy has both changes.
  const Group via_copy = Group::open_blocking(f.rt, f.store, "", Consolidated::require);
  CHECK(via_copy.open_group_blocking("g").attributes() == json{{"title", "new"}});
  CHECK(via_copy.open_array_blocking("g/a").metadata().attributes == json{{"units", "m"}, {"scale", 2}});
  // Setting the root's own attributes keeps its consolidated metadata.
  const Group root2 = root.set_attributes_blocking({{"project", "x"}});
  CHECK(root2.attributes() == json{{"project", "x"}});
  CHECK(Group::open_blocking(f.rt, f.store, "", Consolidated::require).open_group_blocking("g").attributes() ==
        json{{"title", "new"}});
  // Emptied: v2 erases .zattrs.
  CHECK(g2.set_attributes_blocking(json::object()).attributes() == json::object());
  if (format == 2) CHECK_FALSE(f.run(f.store->exists("g/.zattrs")));

  // Errors: not an object, NaN, a stale handle, an empty handle.
  try {
    a2.set_attributes_blocking(json::array());
    FAIL("an array of attributes was taken");
  } catch (const InvalidArgument& e) {
    CHECK(e.field() == "attributes");
    CHECK(e.key() == (format == 2 ? "g/a/.zarray" : "g/a/zarr.json"));
  }
  CHECK_THROWS_AS(g2.set_attributes_blocking({{"x", std::nan("")}}), InvalidArgument);
  CHECK_THROWS_WITH(a.set_attributes_blocking({{"units", "km"}}), Catch::Contains("changed since this handle"));
  CHECK(Array::open_blocking(f.rt, f.store, "g/a").metadata().attributes == json{{"units", "m"}, {"scale", 2}});
  CHECK_THROWS_AS(Group().set_attributes_blocking(json::object()), InvalidArgument);
}

TEST_CASE("Group::members lists v2 and v3 nodes, directly and recursively, depth first by name") {
  Fixture f(GENERATE("memory", "filesystem"));
  const Group root = Group::create_blocking(f.rt, f.store, "");
  f.filled<std::int32_t>("a", meta(DataTypeKind::int32), 1);
  f.set("a/sub/zarr.json", R"({"zarr_format": 3, "node_type": "group"})");  // inside an array: no node
  f.set("a/bad/zarr.json", "not JSON");  // inside an array: never read as a node
  Group::create_blocking(f.rt, f.store, "g");
  f.filled<std::int32_t>("g/b", meta(DataTypeKind::int32, 2), 1);
  Group::create_blocking(f.rt, f.store, "g/h", json::object(), 2);
  f.array("g/h/d", meta(DataTypeKind::uint8));
  Group::create_blocking(f.rt, f.store, "g-x");  // after all of g/: '/' sorts first
  f.array("imp/e", meta(DataTypeKind::uint8, 2));
  f.run(f.store->erase("imp/.zgroup"));  // imp: an implicit group
  f.set("notes/readme.txt", "not a node");

  const std::vector<NodeEntry> direct{node("a", NodeType::array, 3), node("g", NodeType::group, 3),
                                      node("g-x", NodeType::group, 3), node("imp", NodeType::group, 3, true)};
  const auto got = root.members_blocking();
  INFO(show(got));
  CHECK(got == direct);
  const std::vector<NodeEntry> all{node("a", NodeType::array, 3),     node("g", NodeType::group, 3),
                                   node("g/b", NodeType::array, 2),   node("g/h", NodeType::group, 2),
                                   node("g/h/d", NodeType::array, 3), node("g-x", NodeType::group, 3),
                                   node("imp", NodeType::group, 3, true), node("imp/e", NodeType::array, 2)};
  const auto got_all = root.members_blocking(true);
  INFO(show(got_all));
  CHECK(got_all == all);

  const Group g = Group::open_blocking(f.rt, f.store, "g");
  CHECK(g.members_blocking() == std::vector<NodeEntry>{node("b", NodeType::array, 2), node("h", NodeType::group, 2)});
  CHECK(g.members_blocking(true) == std::vector<NodeEntry>{node("b", NodeType::array, 2),
                                                           node("h", NodeType::group, 2),
                                                           node("h/d", NodeType::array, 3)});
  CHECK(Group::open_blocking(f.rt, f.store, "g/h").members_blocking() ==
        std::vector<NodeEntry>{node("d", NodeType::array, 3)});
  CHECK(Group::open_blocking(f.rt, f.store, "g-x").members_blocking(true).empty());
}

TEST_CASE("Group::members: an implicit group takes its parent's format; a v2 hierarchy lists as v2") {
  Fixture f(GENERATE("memory", "filesystem"));
  const Group root = Group::create_blocking(f.rt, f.store, "", json::object(), 2);
  f.array("p/q/r", meta(DataTypeKind::uint8, 2));
  f.run(f.store->erase("p/.zgroup"));
  f.run(f.store->erase("p/q/.zgroup"));
  CHECK(root.members_blocking(true) == std::vector<NodeEntry>{node("p", NodeType::group, 2, true),
                                                              node("p/q", NodeType::group, 2, true),
                                                              node("p/q/r", NodeType::array, 2)});
}

TEST_CASE("Group::members names a child zarr.json it cannot read as a node") {
  Fixture f(GENERATE("memory", "filesystem"));
  const Group root = Group::create_blocking(f.rt, f.store, "");
  const std::string doc = GENERATE(as<std::string>{}, R"({"zarr_format": 3, "node_type": "folder"})", R"({"zarr_format": 2})", "not json");
  f.set("bad/zarr.json", doc);
  try {
    root.members_blocking();
    FAIL("listed a group holding an unreadable child");
  } catch (const InvalidMetadata& e) {
    CHECK(e.key() == "bad/zarr.json");
  }
}

TEST_CASE("Group::members async: awaitable from a coroutine, independent of the handle") {
  Fixture f("memory");
  Group::create_blocking(f.rt, f.store, "g");
  f.array("g/a", meta(DataTypeKind::uint8));
  auto list = [](Runtime& rt, std::shared_ptr<Store> store) -> awaitable<std::vector<NodeEntry>> {
    auto pending = (co_await Group::open(rt, store, "g")).members(true);  // the handle is gone
    co_return co_await std::move(pending);
  };
  CHECK(f.run(list(f.rt, f.store)) == std::vector<NodeEntry>{node("a", NodeType::array, 3)});
}

namespace {
// The key and field of the InvalidArgument that `f` raises, or {"<none>", ""}.
template <class F>
Pair invalid_argument(F&& f) {
  try {
    f();
  } catch (const InvalidArgument& e) {
    return {e.key(), e.field()};
  }
  return {"<none>", ""};
}
}  // namespace

TEST_CASE("node names the spec forbids are refused on create and open and never listed (was created and listed)",
          "[regression]") {
  Fixture f(GENERATE("memory", "filesystem"));
  const Group root = Group::create_blocking(f.rt, f.store, "");
  // Periods only, a metadata document's name (either format's), and in v3 the reserved "__".
  for (const std::string path : {"...", "g/....", "zarr.json", "g/zarr.json", ".zarray", ".zgroup", ".zattrs",
                                 ".zmetadata", "__x", "g/__zarr"}) {
    CAPTURE(path);
    CHECK(invalid_argument([&] { f.array(path, meta(DataTypeKind::uint8)); }) == Pair{path, "path"});
    CHECK(invalid_argument([&] { Group::create_blocking(f.rt, f.store, path); }) == Pair{path, "path"});
  }
  CHECK(f.keys("").size() == 1);  // nothing written but the root's zarr.json
  // "__" is reserved in v3 only: a v2 node may have such a name, as zarr-python 2 writes.
  f.array("__v2", meta(DataTypeKind::uint8, 2));
  Group::create_blocking(f.rt, f.store, "__v2g", json::object(), 2);
  CHECK(invalid_argument([&] { f.array("..", meta(DataTypeKind::uint8, 2)); }).second == "key");
  CHECK(invalid_argument([&] { f.array(".zgroup", meta(DataTypeKind::uint8, 2)); }) == Pair{".zgroup", "path"});

  // Written by another program: opening them is refused, listing passes them over.
  f.array("ok", meta(DataTypeKind::uint8));
  const auto stored = f.run(f.store->get("ok/zarr.json"));
  REQUIRE(stored);
  const std::string doc(reinterpret_cast<const char*>(stored->data()), stored->size());
  f.set("__hidden/zarr.json", doc);
  f.set(".../zarr.json", doc);
  f.set("g2/__meta/zarr.json", R"({"zarr_format": 3, "node_type": "group"})");
  f.set("g2/__meta/a/zarr.json", doc);
  f.set("g2/b/zarr.json", doc);
  CHECK(invalid_argument([&] { Array::open_blocking(f.rt, f.store, "__hidden"); }) == Pair{"__hidden", "path"});
  CHECK(invalid_argument([&] { Array::open_blocking(f.rt, f.store, "..."); }) == Pair{"...", "path"});
  CHECK(invalid_argument([&] { Group::open_blocking(f.rt, f.store, "g2/__meta"); }) == Pair{"g2/__meta", "path"});
  CHECK(invalid_argument([&] { root.open_array_blocking("__hidden"); }) == Pair{"__hidden", "path"});
  const auto all = root.members_blocking(true);
  INFO(show(all));
  CHECK(all == std::vector<NodeEntry>{node("__v2", NodeType::array, 2), node("__v2g", NodeType::group, 2),
                                      node("g2", NodeType::group, 3, true), node("g2/b", NodeType::array, 3),
                                      node("ok", NodeType::array, 3)});
}
