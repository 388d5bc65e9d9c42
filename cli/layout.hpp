// Chunk layouts the `zarrcoro` commands build: the default chunk shape,
// sharding, and dimension names in either format. Pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <zarrcoro/metadata.hpp>

namespace zarrcoro::cli {

// The chunk shape `import` uses when --chunks is absent: a chunk of about
// 1-4 MiB, by zarr-python 2.13's heuristic (zarr.util.guess_chunks, after
// PyTables). The target size is 256 KiB * 2^log10(array bytes / 1 MiB),
// clamped to [128 KiB, 4 MiB] (zarr-python lets it grow to 64 MiB, which
// only arrays beyond about 10 GB reach); then, starting at every dimension's
// full extent (at least 1), dimensions are halved in turn (0, 1, ..., 0,
// ...; rounding up) until the chunk is below the target or within 50% of
// it. So arrays up to about 10 GB get exactly zarr-python's shape; a small
// array is one chunk.
std::vector<std::uint64_t> guess_chunk_shape(const std::vector<std::uint64_t>& shape, std::uint64_t item_size);

// Makes `m` sharded: shards of `shard` (m.chunk_shape becomes it) holding
// inner chunks of `inner` encoded with `chain`, the shard index encoded
// with `index_codecs` at `index_location` ("end" or "start"). A Failure
// naming --shard and `array` (the array's name, for messages) unless every
// shard dimension is a multiple of the inner one.
void make_sharded(ArrayMetadata& m, const std::vector<std::uint64_t>& shard, const std::vector<std::uint64_t>& inner,
                  nlohmann::json chain, nlohmann::json index_codecs, const std::string& index_location,
                  const std::string& array);
// The index codecs zarrcoro writes by default: little-endian bytes and crc32c.
nlohmann::json default_index_codecs();

// For Zarr v2 (no dimension_names): moves m.dimension_names into the
// attribute "_ARRAY_DIMENSIONS", as xarray writes them, when every name is
// set (otherwise they are dropped).
void dimension_names_to_v2(ArrayMetadata& m);

// "(a, b)" as Python writes a tuple: for messages.
std::string shape_text(const std::vector<std::uint64_t>& v);

}  // namespace zarrcoro::cli
