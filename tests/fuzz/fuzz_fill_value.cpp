// Fill values and data types. The first byte picks what the rest (JSON text)
// is parsed as:
//  - 0 .. kTypes-1: a `fill_value` for that data type (parse_fill_value);
//    a value that parses must survive fill_value_to_json -> parse_fill_value
//    with the same bytes (NaN payloads included);
//  - kTypes: a v3 `data_type` (parse_data_type; round trip through
//    data_type_to_json);
//  - kTypes + 1 (and above): a v2 `dtype` (parse_v2_dtype; round trip
//    through v2_dtype_to_json).
#include <vector>

#include <zarrcoro/dtype.hpp>
#include <zarrcoro/metadata.hpp>

#include "fuzz_common.hpp"

using namespace zarrcoro;

namespace {

const std::vector<DataType>& types() {
  static const std::vector<DataType> t = [] {
    std::vector<DataType> v = {
        DataTypeKind::bool_,   DataTypeKind::int8,      DataTypeKind::int16,      DataTypeKind::int32,
        DataTypeKind::int64,   DataTypeKind::uint8,     DataTypeKind::uint16,     DataTypeKind::uint32,
        DataTypeKind::uint64,  DataTypeKind::float16,   DataTypeKind::float32,    DataTypeKind::float64,
        DataTypeKind::complex64, DataTypeKind::complex128,
    };
    v.push_back(DataType::fixed_bytes(5));
    v.push_back(DataType::fixed_unicode(3));
    v.push_back(DataType::structured({
        StructField{"a", DataTypeKind::int16, {}, ByteOrder::big, 0},
        StructField{"f", DataTypeKind::float32, {}, ByteOrder::little, 0},
        StructField{"s", DataType::fixed_bytes(3), {}, ByteOrder::unspecified, 0},
        StructField{"z", DataTypeKind::uint8, {2, 2}, ByteOrder::unspecified, 0},
    }));
    return v;
  }();
  return t;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const std::size_t pick = data[0];
  const std::string key = "a/zarr.json";
  nlohmann::json j;
  if (!fuzz::typed([&] { j = parse_json(fuzz::text(data + 1, size - 1), key); })) return 0;
  const auto& t = types();

  if (pick < t.size()) {
    const DataType dt = t[pick];
    fuzz::typed([&] {
      const FillValue f = parse_fill_value(j, dt, key);
      fuzz::check(f.size() == dt.size(), "fill value of the wrong size");
      const nlohmann::json back = fill_value_to_json(f, dt);
      const FillValue again = parse_fill_value(parse_json(dump_json(back), key), dt, key);
      fuzz::check(again == f, "fill value round trip changed the bytes");
    });
  } else if (pick == t.size()) {
    fuzz::typed([&] {
      const DataType dt = parse_data_type(j, key);
      const DataType again = parse_data_type(parse_json(dump_json(data_type_to_json(dt)), key), key);
      fuzz::check(again == dt, "data type round trip changed the type");
      (void)dt.describe();
    });
  } else {
    fuzz::typed([&] {
      const V2DataType v = parse_v2_dtype(j, key);
      const V2DataType again = parse_v2_dtype(parse_json(dump_json(v2_dtype_to_json(v.type, v.order)), key), key);
      fuzz::check(again.type == v.type && again.order == v.order, "v2 dtype round trip changed the type");
      (void)v.type.describe();
    });
  }
  return 0;
}
