// The partial shard read planner (engine/shard_plan.hpp) on its own: from a
// decoded shard index, the inner chunks wanted and the coalescing options to
// the exact byte ranges to fetch and the inner chunks each range feeds.
#include <catch2/catch.hpp>

#include <cstdint>
#include <ostream>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "codecs/sharding.hpp"
#include "engine/shard_plan.hpp"

using namespace zarrcoro;
using namespace zarrcoro::detail;
using Index = codecs::ShardingCodec::Index;

namespace {

constexpr std::uint64_t kMissing = codecs::ShardingCodec::kMissing;
constexpr std::uint64_t kNoLimit = std::uint64_t{1} << 40;

// An index of (offset, nbytes) per inner chunk, in the inner chunks' order.
Index index_of(const std::vector<std::pair<std::uint64_t, std::uint64_t>>& entries) {
  Index index;
  for (const auto& [offset, nbytes] : entries) {
    index.entries.push_back(offset);
    index.entries.push_back(nbytes);
  }
  return index;
}

// The pieces wanted: inner chunks by number, in the reader's order.
std::vector<InnerPiece> wanted(const std::vector<std::size_t>& numbers) {
  std::vector<InnerPiece> pieces(numbers.size());
  for (std::size_t k = 0; k < numbers.size(); ++k) pieces[k].number = numbers[k];
  return pieces;
}

// A range as the tests state it: its bytes, and the numbers of the inner
// chunks it feeds, in the plan's order.
struct Range {
  std::uint64_t begin, end;
  std::vector<std::size_t> numbers;
  bool operator==(const Range& o) const { return begin == o.begin && end == o.end && numbers == o.numbers; }
};
std::ostream& operator<<(std::ostream& os, const Range& r) {
  os << "[" << r.begin << ", " << r.end << ") feeds {";
  for (std::size_t k = 0; k < r.numbers.size(); ++k) os << (k ? ", " : "") << r.numbers[k];
  return os << "}";
}

std::vector<Range> ranges(const ShardReadPlan& plan, const std::vector<InnerPiece>& pieces) {
  std::vector<Range> out;
  for (const ShardRange& r : plan.ranges) {
    Range x{r.begin, r.end, {}};
    for (std::size_t j = r.first; j < r.last; ++j) x.numbers.push_back(pieces[plan.order[j]].number);
    out.push_back(std::move(x));
  }
  return out;
}

// Four inner chunks of 10, 20, 30 and 40 bytes back to back from offset 0.
const Index kFour = index_of({{0, 10}, {10, 20}, {30, 30}, {60, 40}});

}  // namespace

TEST_CASE("every inner chunk wanted: one range over the shard's data, each piece located", "[shard_plan]") {
  auto pieces = wanted({0, 1, 2, 3});
  const ShardReadPlan plan = plan_shard_reads(kFour, pieces, {0, kNoLimit});
  CHECK(ranges(plan, pieces) == std::vector<Range>{{0, 100, {0, 1, 2, 3}}});
  CHECK(plan.order == std::vector<std::size_t>{0, 1, 2, 3});
  const std::vector<std::pair<std::uint64_t, std::uint64_t>> located = {{0, 10}, {10, 20}, {30, 30}, {60, 40}};
  for (std::size_t k = 0; k < pieces.size(); ++k) {
    CHECK(pieces[k].buffer == 0);
    CHECK(pieces[k].offset == located[k].first);
    CHECK(pieces[k].size == located[k].second);
  }
}

TEST_CASE("some inner chunks wanted, stored out of order: ranges by offset", "[shard_plan]") {
  // Inner chunk 3 is stored before 2 and 1; 0 is not wanted.
  const Index index = index_of({{0, 10}, {100, 10}, {50, 10}, {20, 10}});
  auto pieces = wanted({1, 3});
  SECTION("gaps of 70 bytes apart with a 0-byte threshold: two requests") {
    const ShardReadPlan plan = plan_shard_reads(index, pieces, {0, kNoLimit});
    CHECK(ranges(plan, pieces) == std::vector<Range>{{20, 30, {3}}, {100, 110, {1}}});
    CHECK(plan.order == std::vector<std::size_t>{1, 0});  // indices into `pieces`
  }
  SECTION("a threshold that spans the gap: one request across it") {
    const ShardReadPlan plan = plan_shard_reads(index, pieces, {70, kNoLimit});
    CHECK(ranges(plan, pieces) == std::vector<Range>{{20, 110, {3, 1}}});
  }
}

TEST_CASE("no wanted inner chunk present in the index: no ranges at all", "[shard_plan]") {
  const Index index = index_of({{kMissing, kMissing}, {kMissing, kMissing}, {kMissing, kMissing}});
  auto pieces = wanted({2, 0, 1});
  const ShardReadPlan plan = plan_shard_reads(index, pieces, {kNoLimit, kNoLimit});
  CHECK(plan.ranges.empty());
  CHECK(plan.order.empty());
  for (const InnerPiece& p : pieces) {
    CHECK(p.buffer == InnerPiece::kAbsent);
    CHECK(p.offset == 0);
    CHECK(p.size == 0);
  }
}

TEST_CASE("gaps at, below and above the coalescing threshold", "[shard_plan]") {
  // Gaps of 10 bytes (between 0 and 1) and 15 bytes (between 1 and 2).
  const Index index = index_of({{0, 10}, {20, 10}, {45, 10}});
  auto pieces = wanted({0, 1, 2});
  SECTION("threshold 9: both gaps above it") {
    CHECK(ranges(plan_shard_reads(index, pieces, {9, kNoLimit}), pieces) ==
          std::vector<Range>{{0, 10, {0}}, {20, 30, {1}}, {45, 55, {2}}});
  }
  SECTION("threshold 10: the first gap at it merges, the second is above") {
    CHECK(ranges(plan_shard_reads(index, pieces, {10, kNoLimit}), pieces) ==
          std::vector<Range>{{0, 30, {0, 1}}, {45, 55, {2}}});
  }
  SECTION("threshold 15: both gaps merge") {
    CHECK(ranges(plan_shard_reads(index, pieces, {15, kNoLimit}), pieces) == std::vector<Range>{{0, 55, {0, 1, 2}}});
  }
}

TEST_CASE("ranges stay within coalesce_max; a larger inner chunk is a range of its own", "[shard_plan]") {
  auto pieces = wanted({0, 1, 2, 3});
  SECTION("max 50") {
    CHECK(ranges(plan_shard_reads(kFour, pieces, {0, 50}), pieces) ==
          std::vector<Range>{{0, 30, {0, 1}}, {30, 60, {2}}, {60, 100, {3}}});
  }
  SECTION("max 30: a range of exactly max bytes still takes the piece that fills it") {
    CHECK(ranges(plan_shard_reads(kFour, pieces, {0, 30}), pieces) ==
          std::vector<Range>{{0, 30, {0, 1}}, {30, 60, {2}}, {60, 100, {3}}});
  }
  SECTION("max 25: chunks 2 and 3 are larger") {
    CHECK(ranges(plan_shard_reads(kFour, pieces, {0, 25}), pieces) ==
          std::vector<Range>{{0, 10, {0}}, {10, 30, {1}}, {30, 60, {2}}, {60, 100, {3}}});
  }
}

TEST_CASE("empty inner chunks (offset and nbytes 2^64-1) are absent, and the ranges skip them", "[shard_plan]") {
  const Index index = index_of({{0, 8}, {kMissing, kMissing}, {8, 8}, {kMissing, kMissing}});
  auto pieces = wanted({0, 1, 2, 3});
  const ShardReadPlan plan = plan_shard_reads(index, pieces, {0, kNoLimit});
  CHECK(ranges(plan, pieces) == std::vector<Range>{{0, 16, {0, 2}}});
  CHECK(plan.order == std::vector<std::size_t>{0, 2});
  for (std::size_t k : {1, 3}) {
    CHECK(pieces[k].buffer == InnerPiece::kAbsent);
    CHECK(pieces[k].offset == 0);
    CHECK(pieces[k].size == 0);
  }
  CHECK(pieces[2].buffer == 0);
  CHECK(pieces[2].offset == 8);
  CHECK(pieces[2].size == 8);
}

TEST_CASE("index at the start or the end of a shard the codec wrote: ranges at its absolute offsets",
          "[shard_plan]") {
  // A shard of 8 uint8 in 4 inner chunks of 2, stored plainly; the index (4
  // entries of 16 bytes, no checksum) is 64 bytes. Inner chunk 1 is all
  // fill_value (0): the codec leaves it out.
  const std::vector<std::uint8_t> data = {1, 2, 0, 0, 5, 6, 7, 8};
  const codecs::ArraySpec spec{DataTypeKind::uint8, {8}};
  auto shard_codec = [&](const char* location) {
    const nlohmann::json config = {
        {"chunk_shape", {2}},
        {"codecs", {{{"name", "bytes"}}}},
        {"index_codecs", {{{"name", "bytes"}, {"configuration", {{"endian", "little"}}}}}},
        {"index_location", location}};
    return codecs::ShardingCodec(config, spec);
  };
  for (const char* location : {"start", "end"}) {
    DYNAMIC_SECTION("index at the " << location) {
      const auto codec = shard_codec(location);
      REQUIRE(codec.index_bytes() == 64);
      Bytes shard;
      codec.encode(spec, std::as_bytes(std::span(data)), shard);
      REQUIRE(shard.size() == 64 + 6);
      const bool at_start = std::string(location) == "start";
      const ByteSpan bytes = shard;
      const Index index = codec.decode_index(at_start ? bytes.first(64) : bytes.last(64), shard.size());
      auto pieces = wanted({0, 1, 2, 3});
      const ShardReadPlan plan = plan_shard_reads(index, pieces, {0, kNoLimit});
      const std::uint64_t first = at_start ? 64 : 0;
      CHECK(ranges(plan, pieces) == std::vector<Range>{{first, first + 6, {0, 2, 3}}});
      CHECK(pieces[1].buffer == InnerPiece::kAbsent);
      // The range holds the wanted inner chunks' bytes.
      const auto r = plan.ranges.at(0);
      const std::vector<std::uint8_t> fetched(reinterpret_cast<const std::uint8_t*>(shard.data()) + r.begin,
                                              reinterpret_cast<const std::uint8_t*>(shard.data()) + r.end);
      CHECK(fetched == std::vector<std::uint8_t>{1, 2, 5, 6, 7, 8});
    }
  }
}
