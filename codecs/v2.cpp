// The Zarr v2 compressor/filter adapter (see codecs/v2.hpp). Configuration
// members and defaults follow numcodecs: Zlib(level=1), GZip(level=1),
// Zstd(level=1, checksum=False), Blosc(cname="lz4", clevel=5, shuffle=1,
// blocksize=0), LZ4(acceleration=1).
#include "codecs/v2.hpp"

#include <initializer_list>
#include <memory>
#include <string>

#include <zarrcoro/error.hpp>

#include "codecs/codec.hpp"

namespace zarrcoro::codecs {
namespace {

using json = nlohmann::json;

// Copies the members of `v2` named in `known` (others are an error) over `defaults`.
json members(const json& v2, const std::string& id, const json& defaults, std::initializer_list<const char*> known) {
  json c = defaults;
  for (const auto& [key, value] : v2.items()) {
    if (key == "id") continue;
    bool ok = false;
    for (const char* k : known) ok |= key == k;
    if (!ok) throw InvalidMetadata("", key, id + ": unknown member '" + key + "'");
    c[key] = value;
  }
  return c;
}

json blosc_config(const json& v2, std::size_t itemsize) {
  json c = members(v2, "blosc", {{"cname", "lz4"}, {"clevel", 5}, {"shuffle", 1}, {"blocksize", 0}},
                   {"cname", "clevel", "shuffle", "blocksize", "typesize"});
  const json& s = c["shuffle"];
  if (!s.is_number_integer() || s.get<std::int64_t>() < -1 || s.get<std::int64_t>() > 2)
    throw InvalidMetadata("", "shuffle", "blosc: shuffle must be -1, 0, 1 or 2, got " + s.dump());
  static const char* names[] = {"noshuffle", "shuffle", "bitshuffle"};
  int mode = s.get<int>();
  if (mode == -1) mode = itemsize == 1 ? 2 : 1;  // numcodecs AUTOSHUFFLE
  c["shuffle"] = names[mode];
  if (!c.contains("typesize") || c["typesize"].is_null()) c["typesize"] = itemsize;
  return c;
}

}  // namespace

json v2_to_v3_codec(const json& v2, std::size_t itemsize) {
  if (!v2.is_object()) throw InvalidMetadata("", "", "expected a codec object {\"id\": ...}, got " + v2.dump());
  const auto id_it = v2.find("id");
  if (id_it == v2.end() || !id_it->is_string())
    throw InvalidMetadata("", "id", "a codec object needs a string \"id\", got " + v2.dump());
  const std::string id = id_it->get<std::string>();
  json config;
  std::unique_ptr<BytesToBytesCodec> (*make)(const json&) = nullptr;
  if (id == "zlib") {
    config = members(v2, id, {{"level", 1}}, {"level"});
    make = [](const json& c) { return make_zlib_codec(c); };
  } else if (id == "gzip") {
    config = members(v2, id, {{"level", 1}}, {"level"});
    make = make_gzip_codec;
  } else if (id == "zstd") {
    config = members(v2, id, {{"level", 1}, {"checksum", false}}, {"level", "checksum"});
    make = make_zstd_codec;
  } else if (id == "blosc") {
    config = blosc_config(v2, itemsize);
    make = make_blosc_codec;
  } else if (id == "lz4") {
    config = members(v2, id, {{"acceleration", 1}}, {"acceleration"});
    make = [](const json& c) { return make_lz4_codec(c); };
  } else {
    throw UnsupportedError("", "id", "unsupported codec '" + id + "'");
  }
  make(config);  // validates; raises InvalidMetadata naming the member
  return {{"name", id}, {"configuration", config}};
}

json v3_to_v2_codec(const json& v3) {
  std::string name = v3.is_object() ? v3.value("name", "") : v3.is_string() ? v3.get<std::string>() : "";
  if (name == "numcodecs.zlib" || name == "numcodecs.lz4") name = name.substr(10);  // v3's names for them
  const json c = v3.is_object() ? v3.value("configuration", json::object()) : json::object();
  if (name == "zlib" || name == "gzip") return {{"id", name}, {"level", c.value("level", 1)}};
  if (name == "zstd") {
    json j{{"id", "zstd"}, {"level", c.value("level", 0)}};
    if (c.value("checksum", false)) j["checksum"] = true;
    return j;
  }
  if (name == "lz4") return {{"id", "lz4"}, {"acceleration", c.value("acceleration", 1)}};
  if (name == "blosc") {
    static const char* names[] = {"noshuffle", "shuffle", "bitshuffle"};
    int shuffle = 0;
    const json& s = c.contains("shuffle") ? c["shuffle"] : json("noshuffle");
    if (s.is_number_integer()) shuffle = s.get<int>();
    else
      for (int i = 0; i < 3; ++i)
        if (s == names[i]) shuffle = i;
    return {{"id", "blosc"},
            {"cname", c.value("cname", "lz4")},
            {"clevel", c.value("clevel", 5)},
            {"shuffle", shuffle},
            {"blocksize", c.value("blocksize", 0)}};
  }
  throw UnsupportedError("", "name", "codec '" + name + "' has no Zarr v2 form");
}

}  // namespace zarrcoro::codecs
