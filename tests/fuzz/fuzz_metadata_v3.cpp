// Zarr v3 metadata: the input is a `zarr.json` document (array or group).
//  - parse_json + ArrayMetadata::from_json + validate; a document that
//    parses must survive to_json -> dump_json -> parse_json -> from_json
//    unchanged (same dump);
//  - the same bytes as "a/zarr.json" in a memory store, opened with
//    Array::open (which also prepares the codec pipeline for the chunk
//    shape) and Group::open.
#include <zarrcoro/array.hpp>
#include <zarrcoro/metadata.hpp>
#include <zarrcoro/store/memory.hpp>

#include "engine/blocking.hpp"
#include "fuzz_common.hpp"

using namespace zarrcoro;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string key = "a/zarr.json";
  const std::string_view doc = fuzz::text(data, size);

  fuzz::typed([&] {
    const nlohmann::json j = parse_json(doc, key);
    ArrayMetadata m = ArrayMetadata::from_json(j, key);
    m.validate(key);
    std::string first;
    if (!fuzz::typed([&] { first = dump_json(m.to_json()); })) return;  // e.g. non-finite attributes
    const ArrayMetadata again = ArrayMetadata::from_json(parse_json(first, key), key);
    fuzz::check(dump_json(again.to_json()) == first, "v3 metadata round trip changed the document");
  });

  auto store = std::make_shared<MemoryStore>();
  Runtime& rt = fuzz::runtime();
  detail::wait(rt, store->set(key, fuzz::owned(doc)));
  fuzz::typed([&] {
    const Array a = Array::open_blocking(rt, store, "a");
    (void)a.describe_codecs();
  });
  fuzz::typed([&] {
    const Group g = Group::open_blocking(rt, store, "a");
    (void)g.attributes().dump();
  });
  return 0;
}
