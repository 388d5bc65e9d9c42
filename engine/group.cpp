// Groups (Zarr v3 core spec, "Group metadata").
#include <zarrcoro/array.hpp>
#include <zarrcoro/error.hpp>
#include <zarrcoro/runtime.hpp>

#include "engine/blocking.hpp"

namespace zarrcoro {
namespace {

std::string group_key(const std::string& path) {
  if (path.empty()) return "zarr.json";
  validate_key(path);
  return path + "/zarr.json";
}

nlohmann::json parse_group(const nlohmann::json& j, const std::string& key) {
  if (!j.is_object()) throw InvalidMetadata(key, "", "expected a JSON object");
  if (j.value("zarr_format", 0) != 3) throw InvalidMetadata(key, "zarr_format", "expected 3");
  if (j.value("node_type", "") != "group")
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
  auto doc = co_await store->get(key);
  if (!doc) throw NotFound(key, "", "no group metadata at '" + key + "'");
  auto j = parse_json({reinterpret_cast<const char*>(doc->data()), doc->size()}, key);
  co_return Group(std::move(path), parse_group(j, key));
}

awaitable<Group> Group::create(Runtime&, std::shared_ptr<Store> store, std::string path,
                               nlohmann::json attributes) {
  const std::string key = group_key(path);
  if (!attributes.is_object()) throw InvalidArgument(key, "attributes", "expected a JSON object");
  const std::string text =
      dump_json({{"zarr_format", 3}, {"node_type", "group"}, {"attributes", attributes}});
  const auto* p = reinterpret_cast<const std::byte*>(text.data());
  co_await store->set(key, Bytes(p, p + text.size()));
  co_return Group(std::move(path), std::move(attributes));
}

Group Group::open_blocking(Runtime& rt, std::shared_ptr<Store> store, std::string path) {
  return detail::wait(rt, open(rt, std::move(store), std::move(path)));
}

Group Group::create_blocking(Runtime& rt, std::shared_ptr<Store> store, std::string path,
                             nlohmann::json attributes) {
  return detail::wait(rt, create(rt, std::move(store), std::move(path), std::move(attributes)));
}

}  // namespace zarrcoro
