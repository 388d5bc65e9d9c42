// Blocking API: create an array on the filesystem, write it, read a region.
// Safe to call from many threads at once (not from the runtime's own threads).
#include <cstdio>
#include <filesystem>
#include <numeric>
#include <vector>

#include <zarrcoro/array.hpp>
#include <zarrcoro/runtime.hpp>
#include <zarrcoro/store/filesystem.hpp>

int main() {
  using namespace zarrcoro;
  const auto dir = std::filesystem::temp_directory_path() / "zarrcoro-example-blocking";
  std::filesystem::remove_all(dir);

  Runtime rt;  // 1 I/O thread, one codec thread per core
  auto store = std::make_shared<FilesystemStore>(rt.io_executor(), dir);

  ArrayMetadata meta;
  meta.shape = {1000, 1000};
  meta.chunk_shape = {250, 250};
  meta.data_type = DataTypeKind::float32;
  meta.codecs = nlohmann::json::parse(R"([{"name": "bytes", "configuration": {"endian": "little"}},
                                          {"name": "zstd", "configuration": {"level": 3}}])");
  Array a = Array::create_blocking(rt, store, "temperature", meta);

  std::vector<float> data(1000 * 1000);
  std::iota(data.begin(), data.end(), 0.0f);
  a.write_blocking(Region::all(a.shape()), std::as_bytes(std::span(data)));

  NdArray part = a.read_blocking(Region::parse("10:12,0:3", a.shape()));  // rows 10-11, cols 0-2
  for (float v : part.as<float>()) std::printf("%g ", v);
  std::printf("\n");

  // The same data as a Zarr v2 array (.zarray, chunk keys "0.0").
  ArrayMetadata v2 = meta;
  v2.zarr_format = 2;
  v2.chunk_key_encoding = {ChunkKeyEncoding::Kind::v2, '.'};
  Array legacy = Array::create_blocking(rt, store, "legacy", v2);
  legacy.write_blocking(Region::all(legacy.shape()), std::as_bytes(std::span(data)));
  const bool same = legacy.read_blocking(Region::parse("10:12,0:3", legacy.shape())).data == part.data;
  std::filesystem::remove_all(dir);
  return part.as<float>()[0] == 10000.0f && same ? 0 : 1;
}
