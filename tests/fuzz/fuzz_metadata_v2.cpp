// Zarr v2 metadata: the input is a `.zarray` document, optionally followed
// by a NUL byte and a `.zattrs` document (JSON text holds no raw NUL).
//  - parse_json + ArrayMetadata::from_v2_json + validate, then the v2
//    document and codec chain it writes back (to_v2_json, v2_codecs), which
//    must parse again to the same document;
//  - the same documents in a memory store under "a/" opened with
//    Array::open, and under "g/" as `.zgroup` + `.zattrs` with Group::open.
#include <zarrcoro/array.hpp>
#include <zarrcoro/metadata.hpp>
#include <zarrcoro/store/memory.hpp>

#include "engine/blocking.hpp"
#include "fuzz_common.hpp"

using namespace zarrcoro;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  bool has_attrs = false;
  // (No structured bindings here: clang 14 cannot capture them in lambdas.)
  const auto parts = fuzz::split(fuzz::text(data, size), std::string_view("\0", 1), &has_attrs);
  const std::string_view zarray = parts.first, zattrs = parts.second;

  fuzz::typed([&] {
    const nlohmann::json a = parse_json(zarray, "a/.zarray");
    const nlohmann::json attrs = has_attrs ? parse_json(zattrs, "a/.zattrs") : nlohmann::json();
    const ArrayMetadata m = ArrayMetadata::from_v2_json(a, attrs, "a/.zarray");
    m.validate("a/.zarray");
    (void)m.v2_codecs("a/.zarray");
    std::string first;
    if (!fuzz::typed([&] { first = dump_json(m.to_v2_json("a/.zarray"), true); })) return;
    const ArrayMetadata again =
        ArrayMetadata::from_v2_json(parse_json(first, "a/.zarray"), m.attributes, "a/.zarray");
    fuzz::check(dump_json(again.to_v2_json("a/.zarray"), true) == first,
                "v2 metadata round trip changed the document");
  });

  auto store = std::make_shared<MemoryStore>();
  Runtime& rt = fuzz::runtime();
  detail::wait(rt, store->set("a/.zarray", fuzz::owned(zarray)));
  detail::wait(rt, store->set("g/.zgroup", fuzz::owned(zarray)));
  if (has_attrs) {
    detail::wait(rt, store->set("a/.zattrs", fuzz::owned(zattrs)));
    detail::wait(rt, store->set("g/.zattrs", fuzz::owned(zattrs)));
  }
  fuzz::typed([&] {
    const Array arr = Array::open_blocking(rt, store, "a");
    (void)arr.describe_codecs();
  });
  fuzz::typed([&] {
    const Group g = Group::open_blocking(rt, store, "g");
    (void)g.attributes().dump();
  });
  return 0;
}
