// Consolidated metadata: the input is one document, stored both as a v3
// root `zarr.json` (a group with "consolidated_metadata") and as a v2
// `.zmetadata`. Each root is opened with Group::open, listed recursively,
// and every member is opened from the copy (arrays and groups); then an
// array is created below it, which updates the copy in place; then the
// copy is written anew with Group::consolidate. Only typed zarrcoro errors
// may come out.
#include <zarrcoro/array.hpp>
#include <zarrcoro/store/memory.hpp>

#include "engine/blocking.hpp"
#include "fuzz_common.hpp"

using namespace zarrcoro;

namespace {
void walk(Runtime& rt, const std::shared_ptr<Store>& store, const char* root_path) {
  fuzz::typed([&] {
    const Group g = Group::open_blocking(rt, store, root_path);
    for (const NodeEntry& m : g.members_blocking(true)) {
      fuzz::typed([&] {
        if (m.node_type == NodeType::array) (void)g.open_array_blocking(m.name).describe_codecs();
        else (void)g.open_group_blocking(m.name).members_blocking().size();
      });
    }
  });
  fuzz::typed([&] {
    ArrayMetadata m;
    m.shape = {2};
    m.chunk_shape = {2};
    m.data_type = DataTypeKind::uint8;
    m.codecs = nlohmann::json::parse(R"([{"name":"bytes"}])");
    const std::string path = std::string(root_path) + (*root_path ? "/" : "") + "new/x";
    Array::create_blocking(rt, store, path, m, CreateMode::overwrite);
    (void)Group::open_blocking(rt, store, root_path).members_blocking(true).size();
  });
  fuzz::typed([&] {
    const Group g = Group::open_blocking(rt, store, root_path, Consolidated::ignore).consolidate_blocking();
    (void)g.members_blocking(true).size();
  });
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view doc = fuzz::text(data, size);
  Runtime& rt = fuzz::runtime();
  auto store = std::make_shared<MemoryStore>();
  detail::wait(rt, store->set("v3/zarr.json", fuzz::owned(doc)));
  detail::wait(rt, store->set("v2/.zmetadata", fuzz::owned(doc)));
  detail::wait(rt, store->set("v2/.zgroup", fuzz::owned(R"({"zarr_format": 2})")));
  walk(rt, store, "v3");
  walk(rt, store, "v2");
  return 0;
}
