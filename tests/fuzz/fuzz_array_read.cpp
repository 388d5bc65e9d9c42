// End to end through the engine on a memory store: the input is an array's
// metadata document, a NUL byte, and the stored bytes of its first chunk
// (or shard). A document starting with '2' is a v2 `.zarray` (the '2'
// dropped), anything else a v3 `zarr.json`. The array is opened
// (Array::open), the first chunk's region (at most 1 MiB) is read, written
// back unchanged, read again, then its first element written back alone
// (read-modify-write, partial shard writes) and read again: the reads must
// agree. String and bytes arrays take the same steps through read_strings /
// write_strings.
#include <algorithm>
#include <vector>

#include <zarrcoro/array.hpp>
#include <zarrcoro/store/memory.hpp>

#include "engine/blocking.hpp"
#include "fuzz_common.hpp"

using namespace zarrcoro;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  bool has_chunk = false;
  const auto parts = fuzz::split(fuzz::text(data, size), std::string_view("\0", 1), &has_chunk);
  std::string_view doc = parts.first;
  const std::string_view chunk = parts.second;
  const bool v2 = doc.starts_with("2");
  if (v2) doc.remove_prefix(1);

  auto store = std::make_shared<MemoryStore>();
  Runtime& rt = fuzz::runtime();
  detail::wait(rt, store->set(v2 ? "a/.zarray" : "a/zarr.json", fuzz::owned(doc)));
  Array a;
  if (!fuzz::typed([&] { a = Array::open_blocking(rt, store, "a"); })) return 0;

  const auto& m = a.metadata();
  const std::vector<std::uint64_t> zero(m.rank(), 0);
  std::string key;
  if (!fuzz::typed([&] { key = a.chunk_key(zero); })) return 0;
  if (has_chunk) detail::wait(rt, store->set(key, fuzz::owned(chunk)));

  // The first chunk's region, clipped to the shape and to 1 MiB.
  Region r{zero, zero};
  std::uint64_t bytes = m.data_type.size();
  for (std::size_t d = 0; d < m.rank(); ++d) {
    r.stop[d] = std::min(m.shape[d], m.chunk_shape[d]);
    if (r.stop[d] != 0 && bytes > (std::uint64_t{1} << 20) / r.stop[d]) r.stop[d] = 1;
    bytes *= std::max<std::uint64_t>(r.stop[d], 1);
  }
  if (bytes > (std::uint64_t{1} << 20)) return 0;

  if (m.data_type.is_variable_length()) {  // strings: the same round trips through read_strings / write_strings
    std::vector<std::string> first, second, third;
    if (!fuzz::typed([&] { first = a.read_strings_blocking(r); })) return 0;
    if (!fuzz::typed([&] { a.write_strings_blocking(r, first); })) return 0;
    fuzz::typed([&] { second = a.read_strings_blocking(r); });
    fuzz::check(second == first, "writing back the strings that were read changed the array");
    if (first.empty()) return 0;
    const Region one{zero, std::vector<std::uint64_t>(m.rank(), 1)};
    if (!fuzz::typed([&] { a.write_strings_blocking(one, std::span(first).first(1)); })) return 0;
    fuzz::typed([&] { third = a.read_strings_blocking(r); });
    fuzz::check(third == first, "writing back one string that was read changed the array");
    return 0;
  }

  NdArray first;
  if (!fuzz::typed([&] { first = a.read_blocking(r); })) return 0;
  if (!fuzz::typed([&] { a.write_blocking(r, first.data); })) return 0;
  NdArray second;
  fuzz::typed([&] { second = a.read_blocking(r); });
  fuzz::check(second.data == first.data, "writing back what was read changed the array");

  // A partial write (read-modify-write of a chunk, or one inner chunk of a
  // shard): the first element, unchanged.
  if (first.data.empty()) return 0;
  Region one{zero, std::vector<std::uint64_t>(m.rank(), 1)};
  const std::size_t es = m.data_type.size();
  if (!fuzz::typed([&] { a.write_blocking(one, ByteSpan(first.data).first(es)); })) return 0;
  NdArray third;
  fuzz::typed([&] { third = a.read_blocking(r); });
  fuzz::check(third.data == first.data, "writing back one element that was read changed the array");
  return 0;
}
