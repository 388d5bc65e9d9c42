// zarrcoro's side of the interop matrix (tests/interop/peers/matrix.py):
// writes and reads arrays in a directory store from a JSON list of jobs, all
// in one process (one Runtime), so that the matrix pays for one start only.
//
//   zarrcoro_interop_io write ROOT JOBS.json RESULTS.json
//   zarrcoro_interop_io read ROOT JOBS.json RESULTS.json
//
// write: JOBS.json is a list; each job has an "id" and is one of
//   {"op": "group", "path": "g", "zarr_format": 2|3}
//   {"op": "array", "path": "g/a", "zarr_format": 2|3,
//    "metadata": <the zarr.json document, or the .zarray document>,
//    "region": [[start, stop], ...] (optional; default: the whole array),
//    "values": "FILE" (raw element bytes of the region: C order, little
//              endian, as the engine holds them in memory; relative to
//              JOBS.json's directory) or "strings": [...] (variable-length
//              strings, C order)}
//   {"op": "consolidate", "path": "g"}
// Jobs run in order. RESULTS.json gets {"id": {}} per job done, or
// {"id": {"error": "..."}}.
//
// read: JOBS.json is a list of {"id": "...", "path": "a" or "g/a",
// "consolidated": "g" (optional: open the array through group g's
// consolidated metadata only)}. Each job gets an entry in RESULTS.json,
// {"id": {"shape", "data_type" (v3 JSON form; v2: the .zarray dtype),
// "fill_value" (hex of its bytes, native order), "values": "FILE" (written
// beside RESULTS.json) or "strings": [...]}} or {"id": {"error": "..."}}.
// Both exit 0 unless the jobs themselves cannot be read (then 1).
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <zarrcoro/array.hpp>
#include <zarrcoro/metadata.hpp>
#include <zarrcoro/runtime.hpp>
#include <zarrcoro/store/filesystem.hpp>

using namespace zarrcoro;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

Bytes read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + p.string());
  const std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  Bytes b(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) b[i] = static_cast<std::byte>(s[i]);
  return b;
}

void write_file(const fs::path& p, ByteSpan data) {
  std::ofstream out(p, std::ios::binary);
  out.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
  if (!out) throw std::runtime_error("cannot write " + p.string());
}

std::string hex(ByteSpan b) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (const std::byte c : b) {
    s += digits[static_cast<unsigned>(c) >> 4];
    s += digits[static_cast<unsigned>(c) & 15];
  }
  return s;
}

Region region_of(const json& job, const std::vector<std::uint64_t>& shape) {
  if (!job.contains("region")) return Region::all(shape);
  Region r;
  for (const auto& d : job["region"]) {
    r.start.push_back(d[0].get<std::uint64_t>());
    r.stop.push_back(d[1].get<std::uint64_t>());
  }
  return r;
}

json write_job(Runtime& rt, const std::shared_ptr<Store>& store, const json& job, const fs::path& base) {
  const std::string op = job.at("op"), path = job.at("path");
  if (op == "group") {
    Group::create_blocking(rt, store, path, json::object(), job.at("zarr_format").get<int>());
  } else if (op == "consolidate") {
    Group::open_blocking(rt, store, path, Consolidated::ignore).consolidate_blocking();
  } else if (op == "array") {
    const json& doc = job.at("metadata");
    const ArrayMetadata meta = job.at("zarr_format") == 2
                                   ? ArrayMetadata::from_v2_json(doc, nullptr, path + "/.zarray")
                                   : ArrayMetadata::from_json(doc, path + "/zarr.json");
    const Array a = Array::create_blocking(rt, store, path, meta);
    const Region region = region_of(job, a.shape());
    if (job.contains("strings")) {
      const auto values = job["strings"].get<std::vector<std::string>>();
      a.write_strings_blocking(region, values);
    } else {
      const Bytes values = read_file(base / job.at("values").get<std::string>());
      a.write_blocking(region, values);
    }
  } else {
    throw std::runtime_error("unknown op '" + op + "'");
  }
  return json::object();
}

json read_job(Runtime& rt, const std::shared_ptr<Store>& store, const json& job, const fs::path& out_dir) {
  const std::string path = job.at("path");
  Array a;
  if (job.contains("consolidated")) {
    const std::string group = job["consolidated"];
    const Group g = Group::open_blocking(rt, store, group, Consolidated::require);
    a = g.open_array_blocking(path.substr(group.size() + 1));
  } else {
    a = Array::open_blocking(rt, store, path);
  }
  const ArrayMetadata& m = a.metadata();
  json r = {{"shape", m.shape},
            {"data_type", m.zarr_format == 2 ? m.v2_info(path).dtype : data_type_to_json(m.data_type)},
            {"fill_value", hex(m.fill_value)}};
  const Region all = Region::all(a.shape());
  if (m.data_type.is_variable_length()) {
    // Text for string arrays; a byte string is not valid JSON text: hex.
    const auto values = a.read_strings_blocking(all);
    json list = json::array();
    for (const auto& v : values)
      list.push_back(m.data_type.kind() == DataTypeKind::string ? v : hex(std::as_bytes(std::span(v))));
    r["strings"] = std::move(list);
  } else {
    const NdArray got = a.read_blocking(all);
    const std::string file = job.at("id").get<std::string>() + ".bin";
    write_file(out_dir / file, got.data);
    r["values"] = file;
  }
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string cmd = argc > 1 ? argv[1] : "";
  if ((cmd != "write" && cmd != "read") || argc != 5) {
    std::fprintf(stderr, "usage: %s write|read ROOT JOBS.json RESULTS.json\n", argv[0]);
    return 2;
  }
  try {
    const fs::path root = argv[2], jobs_file = argv[3];
    const json jobs = json::parse(std::ifstream(jobs_file));
    Runtime rt({.codec_threads = 2});
    fs::create_directories(root);
    auto store = std::make_shared<FilesystemStore>(rt.io_executor(), root);
    const fs::path results_file = argv[4];
    json results = json::object();
    for (const auto& job : jobs) {
      try {
        results[job.at("id").get<std::string>()] =
            cmd == "write" ? write_job(rt, store, job, jobs_file.parent_path())
                           : read_job(rt, store, job, results_file.parent_path());
      } catch (const std::exception& e) {
        results[job.at("id").get<std::string>()] = {{"error", e.what()}};
      }
    }
    std::ofstream(results_file) << results.dump(1);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "zarrcoro_interop_io: %s\n", e.what());
    return 1;
  }
}
