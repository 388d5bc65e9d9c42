// An array handle's state (Array::State): what every operation on the array
// reads: its runtime, store, metadata, codec pipeline and fill value.
//
// Thread-safety: immutable once make_state (array.cpp) has built it; shared
// by the handles and operations that hold it, and read from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include <zarrcoro/array.hpp>
#include <zarrcoro/metadata.hpp>
#include <zarrcoro/runtime.hpp>
#include <zarrcoro/store.hpp>

#include "codecs/pipeline.hpp"
#include "codecs/sharding.hpp"

namespace zarrcoro {

struct Array::State {
  Runtime* rt;
  std::shared_ptr<Store> store;
  std::string path;
  std::string prefix;  // "" or "path/"
  ArrayMetadata meta;
  std::shared_ptr<const codecs::CodecPipeline> pipeline;
  // Set when the chain is sharding_indexed alone: reads and writes then
  // address inner chunks by byte ranges.
  const codecs::ShardingCodec* shard = nullptr;
  Bytes fill;  // one element (variable-length types: a view of fill_text)
  std::string fill_text;  // variable-length types: the fill value's bytes
  // A v2 array whose fill_value is null has no fill: readers (zarr-python 2)
  // leave missing chunks undefined, so every written chunk is stored.
  bool store_fill_chunks = false;

  std::string chunk_key(std::span<const std::uint64_t> coords) const {
    return prefix + meta.chunk_key_encoding.encode(coords);
  }
  std::uint64_t chunk_bytes() const { return pipeline->chunk_spec().num_bytes(); }
  // ReadOptions::size_hint for a whole chunk (or shard) as stored: its
  // decoded size and a margin for what codecs add (headers, checksums, a
  // shard's index, data that does not compress); 0 for variable-length
  // data, whose decoded size says nothing of its stored one.
  std::size_t chunk_size_hint() const {
    if (meta.data_type.is_variable_length()) return 0;
    const std::uint64_t n = chunk_bytes();
    return n + n / 64 + 256;
  }
};

}  // namespace zarrcoro
