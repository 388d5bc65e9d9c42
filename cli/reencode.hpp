// `zarrcoro reencode SRC DST`: copies an array, or a group with everything
// below it, into a new layout: another Zarr format (v2 <-> v3), chunk shape,
// sharding, codec chain or byte order. It streams block by block (a block
// is whole destination chunks or shards, at most kBlockBytes; blocks.hpp), so memory
// stays bounded whatever the array's size; keeps attributes, fill_value
// and dimension names (v2: the xarray attribute `_ARRAY_DIMENSIONS`), and
// stores no chunk that reads as fill_value only, so a chunk missing in the
// source stays missing. A group with consolidated metadata gets it at DST too.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include "cli/blocks.hpp"
#include "cli/progress.hpp"

namespace zarrcoro::cli {

struct ReencodeOptions {
  int zarr_format = 0;    // 0: the source's
  std::string chunks;     // chunk (inner chunk) shape, "a,b"; empty: the source's
  std::string shard;      // shard shape; empty: the source's sharding; "none": unsharded
  std::string codec;      // a --codec spec (common.hpp) replacing the compressors; empty: the source's
  std::string endian;     // "little" or "big"; empty: the source's
  std::string separator;  // chunk key separator; empty: the format's default (v2 ".", v3 "/")
  bool overwrite = false;
  bool dry_run = false;   // print the plan; write nothing
  std::uint64_t block_bytes = kBlockBytes;  // the bound of one block (blocks.hpp)
  ProgressMode progress = ProgressMode::automatic;
};

void cmd_reencode(const std::filesystem::path& src, const std::filesystem::path& dst, const ReencodeOptions& o);

}  // namespace zarrcoro::cli
