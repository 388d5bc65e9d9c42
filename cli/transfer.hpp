// `zarrcoro import IN.npy PATH` and `zarrcoro export PATH OUT.npy`: a .npy
// file to a new array and (a region of) an array to a .npy file, streamed
// block by block (blocks.hpp) so that memory stays bounded whatever the
// array's size; the next block is read while the last is written.
//
// import reads the file a block at a time (zarrcoro::NpyReader: big-endian,
// Fortran-order and structured files too) and writes each block with
// Array::write. Without --chunks the chunk shape is guess_chunk_shape()'s
// (layout.hpp); --shard makes shards of that shape holding the --chunks
// (v3 only); --attrs sets the attributes, --dimension-names the dimension
// names (v2: the attribute _ARRAY_DIMENSIONS, as xarray writes them).
//
// export writes the header, then each block as it is read, to a temporary
// file renamed over OUT.npy at the end (zarrcoro::NpyWriter): a failed
// export leaves no partial OUT.npy (nor replaces an existing one).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include "cli/blocks.hpp"
#include "cli/progress.hpp"

namespace zarrcoro::cli {

struct ImportOptions {
  std::string chunks;  // chunk (sharded: inner chunk) shape, "a,b"
  bool chunks_given = false;
  std::string shard;  // shard shape; empty: unsharded
  std::string codec;  // default: zstd:3 (v3), blosc:lz4:5:shuffle (v2, as zarr-python 2)
  int zarr_format = 3;
  std::string endian = "little";
  std::string order = "C";
  std::string separator;  // default: "/" (v3), "." (v2)
  std::string fill_value;
  std::string attrs;  // a JSON object
  bool attrs_given = false;
  std::string dimension_names;  // "a,b,c"
  bool dimension_names_given = false;
  bool overwrite = false;  // replace a Zarr node at PATH (and everything under it)
  std::uint64_t block_bytes = kBlockBytes;
  ProgressMode progress = ProgressMode::automatic;
};

struct ExportOptions {
  std::string region;  // "0:10,5:20"; empty: the whole array
  std::uint64_t block_bytes = kBlockBytes;
  ProgressMode progress = ProgressMode::automatic;
};

void cmd_import(const std::filesystem::path& in, const std::filesystem::path& dir, const ImportOptions& o);
void cmd_export(const std::filesystem::path& dir, const std::filesystem::path& out, const ExportOptions& o);

}  // namespace zarrcoro::cli
