// Groups (Zarr v3 core spec, "Group metadata"; Zarr v2 spec, "Groups" and
// "Attributes").
#include <zarrcoro/array.hpp>
#include <zarrcoro/error.hpp>
#include <zarrcoro/runtime.hpp>

#include "engine/blocking.hpp"
#include "engine/node.hpp"

namespace zarrcoro {
namespace {

std::string group_key(const std::string& path) {
  if (path.empty()) return "zarr.json";
  validate_key(path);
  return path + "/zarr.json";
}

nlohmann::json parse_group(const nlohmann::json& j, const std::string& key) {
  if (!j.is_object()) throw InvalidMetadata(key, "", "expected a JSON object");
  // Compared, not converted: a member of another JSON type is refused, not thrown on.
  if (!j.contains("zarr_format") || j["zarr_format"] != 3) throw InvalidMetadata(key, "zarr_format", "expected 3");
  if (!j.contains("node_type") || j["node_type"] != "group")
    throw InvalidMetadata(key, "node_type", "expected \"group\"");
  for (const auto& [name, value] : j.items()) {
    if (name == "zarr_format" || name == "node_type" || name == "attributes") continue;
    if (!(value.is_object() && value.contains("must_understand") && value["must_understand"] == false))
      throw UnsupportedError(key, name,
                             "unknown field '" + name +
                                 "' must be understood (it is not marked \"must_understand\": false)");
  }
  const auto attrs = j.value("attributes", nlohmann::json::object());
  if (!attrs.is_object()) throw InvalidMetadata(key, "attributes", "expected an object");
  return attrs;
}

}  // namespace

awaitable<Group> Group::open(Runtime&, std::shared_ptr<Store> store, std::string path) {
  const std::string key = group_key(path);
  if (auto doc = co_await store->get(key)) co_return Group(std::move(path), parse_group(detail::parse_doc(*doc, key), key), 3);
  const std::string v2_key = detail::node_prefix(path) + ".zgroup";
  auto v2_doc = co_await store->get(v2_key);
  if (!v2_doc) throw NotFound(key, "", "no group metadata at '" + key + "' (nor a Zarr v2 '" + v2_key + "')");
  const auto j = detail::parse_doc(*v2_doc, v2_key);
  if (!j.is_object()) throw InvalidMetadata(v2_key, "", "expected a JSON object");
  if (!j.contains("zarr_format") || j["zarr_format"] != 2) throw InvalidMetadata(v2_key, "zarr_format", "expected 2");
  auto attrs = co_await detail::load_zattrs(*store, path);
  co_return Group(std::move(path), attrs.is_null() ? nlohmann::json::object() : std::move(attrs), 2);
}

awaitable<Group> Group::create(Runtime&, std::shared_ptr<Store> store, std::string path,
                               nlohmann::json attributes, int zarr_format) {
  const std::string key = zarr_format == 2 ? detail::node_prefix(path) + ".zgroup" : group_key(path);
  if (attributes.is_null()) attributes = nlohmann::json::object();  // `{}` as an argument is null
  if (!attributes.is_object()) throw InvalidArgument(key, "attributes", "expected a JSON object");
  if (zarr_format != 2 && zarr_format != 3)
    throw InvalidArgument(key, "zarr_format", "expected 2 or 3, got " + std::to_string(zarr_format));
  // (Documents are built outside co_await expressions: GCC 12 mishandles
  // initializer lists inside them.)
  nlohmann::json doc = {{"zarr_format", zarr_format}};
  if (zarr_format == 3) {
    doc["node_type"] = "group";
    doc["attributes"] = attributes;
  }
  Bytes bytes = zarr_format == 2 ? detail::v2_json_bytes(doc) : detail::json_bytes(doc);
  if (zarr_format == 2) {
    co_await detail::create_v2_parents(*store, path);
    co_await detail::store_zattrs(*store, path, attributes);
  }
  co_await store->set(key, std::move(bytes));
  co_return Group(std::move(path), std::move(attributes), zarr_format);
}

boost::asio::any_io_executor Group::executor_of(Runtime& rt) { return rt.io_executor(); }

Group Group::open_blocking(Runtime& rt, std::shared_ptr<Store> store, std::string path) {
  return detail::wait(rt, open(rt, std::move(store), std::move(path)));
}

Group Group::create_blocking(Runtime& rt, std::shared_ptr<Store> store, std::string path,
                             nlohmann::json attributes, int zarr_format) {
  return detail::wait(rt, create(rt, std::move(store), std::move(path), std::move(attributes), zarr_format));
}

}  // namespace zarrcoro
