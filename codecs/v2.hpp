// The Zarr v2 compressor/filter adapter: a v2 codec object {"id": ..., ...}
// (v2 spec "compressor" and "filters"; numcodecs configurations) as the
// v3-style codec entry {"name": ..., "configuration": ...} that runs it
// through the one codec pipeline, and back.
//
// Supported ids: zlib, gzip, zstd (with an optional `checksum`), blosc
// (shuffle 0/1/2 and -1 = automatic: bit-wise for 1-byte items, byte-wise
// otherwise; typesize = the item size) and lz4. Everything else (bz2, lzma,
// pcodec, zfpy, adler32, fletcher32, crc32, delta, fixedscaleoffset,
// quantize, ...) raises UnsupportedError "unsupported codec '<id>'".
//
// Thread-safety: pure functions.
#pragma once

#include <cstddef>

#include <nlohmann/json.hpp>

namespace zarrcoro::codecs {

// v2 object -> v3-style entry. `itemsize` is the array's element size in
// bytes. Validates the configuration by building the codec. Raises
// UnsupportedError(field "id") for an unknown id and InvalidMetadata(field =
// the member, e.g. "level") for a bad configuration; the key is empty.
nlohmann::json v2_to_v3_codec(const nlohmann::json& v2, std::size_t itemsize);

// v3-style bytes -> bytes entry -> v2 object, leaving out members that hold
// their numcodecs default where numcodecs itself omits them (zstd
// `checksum: false`). Raises UnsupportedError(field "name") for a codec with
// no v2 form (crc32c, sharding_indexed, ...).
nlohmann::json v3_to_v2_codec(const nlohmann::json& v3);

}  // namespace zarrcoro::codecs
