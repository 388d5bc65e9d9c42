// See cli/layout.hpp.
#include "cli/layout.hpp"

#include <algorithm>
#include <cmath>

#include "cli/common.hpp"

namespace zarrcoro::cli {

std::vector<std::uint64_t> guess_chunk_shape(const std::vector<std::uint64_t>& shape, std::uint64_t item_size) {
  constexpr double kMiB = 1024.0 * 1024.0;
  constexpr double kMinTarget = 128 * 1024, kMaxTarget = 4 * kMiB, kHardMax = 64 * kMiB;
  std::vector<double> c(shape.size());
  for (std::size_t d = 0; d < shape.size(); ++d) c[d] = std::max<double>(static_cast<double>(shape[d]), 1);
  auto elements = [&] {
    double n = 1;
    for (double v : c) n *= v;
    return n;
  };
  const double item = static_cast<double>(item_size);
  const double target = std::clamp(256 * 1024 * std::pow(2.0, std::log10(elements() * item / kMiB)), kMinTarget, kMaxTarget);
  for (std::size_t i = 0;; ++i) {
    const double n = elements(), bytes = n * item;
    if ((bytes < target || std::abs(bytes - target) / target < 0.5) && bytes < kHardMax) break;
    if (n == 1) break;  // one element is above the target
    double& v = c[i % c.size()];
    v = std::ceil(v / 2);
  }
  return {c.begin(), c.end()};
}

void make_sharded(ArrayMetadata& m, const std::vector<std::uint64_t>& shard, const std::vector<std::uint64_t>& inner,
                  nlohmann::json chain, nlohmann::json index_codecs, const std::string& index_location,
                  const std::string& array) {
  for (std::size_t d = 0; d < inner.size(); ++d)
    if (shard[d] % inner[d] != 0)
      throw Failure("--shard: the shard shape " + shape_text(shard) + " of array '" + array +
                    "' is not a multiple of its chunk shape " + shape_text(inner));
  m.chunk_shape = shard;
  m.codecs = nlohmann::json::array({{{"name", "sharding_indexed"},
                                     {"configuration",
                                      {{"chunk_shape", inner},
                                       {"codecs", std::move(chain)},
                                       {"index_codecs", std::move(index_codecs)},
                                       {"index_location", index_location}}}}});
}

nlohmann::json default_index_codecs() {
  return nlohmann::json::parse(R"([{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}])");
}

void dimension_names_to_v2(ArrayMetadata& m) {
  if (!m.dimension_names) return;
  nlohmann::json names = nlohmann::json::array();
  bool all = true;
  for (const auto& n : *m.dimension_names) {
    all = all && n.has_value();
    names.push_back(n.value_or(""));
  }
  if (all) m.attributes["_ARRAY_DIMENSIONS"] = names;
  m.dimension_names.reset();
}

std::string shape_text(const std::vector<std::uint64_t>& v) {
  std::string s = "(";
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + (v.size() == 1 ? ",)" : ")");
}

}  // namespace zarrcoro::cli
