// NumPy .npy parsing (engine/include/zarrcoro/npy.hpp).
//  - input starting with the .npy magic: parse_npy; an array that parses
//    must survive encode_npy -> parse_npy with the same type, shape and
//    bytes;
//  - anything else: the text is a descr literal for parse_npy_descr; a type
//    that parses must survive npy_descr -> parse_npy_descr, and npy_header
//    of it must parse as the header of an empty array.
#include <vector>

#include <zarrcoro/npy.hpp>

#include "fuzz_common.hpp"

using namespace zarrcoro;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view magic("\x93NUMPY", 6);
  const std::string_view s = fuzz::text(data, size);
  if (s.starts_with(magic)) {
    fuzz::typed([&] {
      const NdArray a = parse_npy(fuzz::bytes(data, size));
      Bytes again;
      if (!fuzz::typed([&] { again = encode_npy(a); })) return;  // e.g. a type no .npy can be written for
      const NdArray b = parse_npy(again);
      fuzz::check(b.dtype == a.dtype && b.shape == a.shape && b.data == a.data, ".npy round trip changed the array");
    });
  } else {
    fuzz::typed([&] {
      const DataType t = parse_npy_descr(s);
      std::string descr;
      if (!fuzz::typed([&] { descr = npy_descr(t); })) return;
      const bool quoted = !descr.empty() && descr.front() != '[';
      const DataType again = parse_npy_descr(quoted ? "'" + descr + "'" : descr);
      fuzz::check(again == t, "npy descr round trip changed the type");
      const std::vector<std::uint64_t> shape = {0};
      const std::string header = npy_header(t, shape);
      const NdArray empty = parse_npy(fuzz::bytes(reinterpret_cast<const std::uint8_t*>(header.data()), header.size()));
      fuzz::check(empty.dtype == t && empty.shape == shape, "npy_header does not parse back");
    });
  }
  return 0;
}
