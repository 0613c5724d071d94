// The timeline's id maps (CorrelationMap, ExternalIndex) against a plain
// map, on ids as a slice of a long file gives them: far from 0, mostly
// rising, some lower ones after (the base moves down), some out of the
// flat vector's reach, some set twice (the later one counts).
#include <catch2/catch.hpp>

#include <cstdint>
#include <map>
#include <random>

#include "analyzer/model/timeline.h"

namespace stallscope::analyzer {
namespace {

// `n` ids from `start`: rising by 1-3, every 16th one up to 1,000 lower
// than the last, every 50th one far above or below (a hash-map id). The
// others span at most 3n + 1,000 ids, inside the flat vector's reach for
// n expected (4n + 1,024) with the base moved down by 1,024 at least.
std::vector<uint64_t> SliceIds(std::mt19937_64& rng, uint64_t start, int n) {
  std::vector<uint64_t> ids;
  uint64_t at = start;
  for (int i = 0; i < n; ++i) {
    at += 1 + rng() % 3;
    uint64_t id = at;
    if (i % 16 == 15) id = at - std::min<uint64_t>(at, rng() % 1000);
    if (i % 50 == 49) id = rng() % 2 == 0 ? at + 1'000'000 + rng() % 1000 : start / 2 + rng() % 1000;
    ids.push_back(id);
    if (i % 37 == 36) ids.push_back(ids[rng() % ids.size()]);  // set again
  }
  return ids;
}

TEST_CASE("id maps: ids far from 0, lower ones later, some out of reach", "[timeline][ids]") {
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    CAPTURE(seed);
    std::mt19937_64 rng(seed);
    const int n = 1000 + static_cast<int>(rng() % 3000);
    // Correlation ids: CUPTI's, u32, from 0 (a whole file) or far on.
    const uint64_t start = seed % 4 == 0 ? 0 : 1'000'000 + rng() % 3'000'000'000u;
    CorrelationMap corr;
    corr.Expect(static_cast<uint64_t>(n));
    std::map<uint32_t, uint64_t> corr_want;
    uint64_t value = 1;
    for (uint64_t id : SliceIds(rng, start, n)) {
      const auto c = static_cast<uint32_t>(id);
      corr.Set(c, value);
      corr_want[c] = value++;
    }
    for (const auto& [c, v] : corr_want) REQUIRE(corr.Get(c) == v);
    // Only the far ids (one in 50) are in the hash map.
    CHECK(corr.spilled() <= static_cast<size_t>(n / 50 + 1));
    for (int k = 0; k < 200; ++k) {
      const auto c = static_cast<uint32_t>(start + rng() % (4 * static_cast<uint64_t>(n) + 2'000'000));
      CHECK(corr.Get(c) == (corr_want.count(c) ? corr_want[c] : 0));
    }
    // External ids: the recorder's, a thread's index above bit 40, three
    // threads interleaved, their sequences from 1 or far on.
    ExternalIndex ext;
    ext.Expect(static_cast<uint64_t>(3 * n));
    std::map<uint64_t, int32_t> ext_want;
    std::vector<std::vector<uint64_t>> seqs;
    for (uint64_t th = 1; th <= 3; ++th) {
      seqs.push_back(SliceIds(rng, seed % 4 == 1 ? 1 : 5'000'000 * th + rng() % 100'000'000, n));
    }
    uint32_t call = 0;
    for (size_t i = 0; i < seqs[0].size() || i < seqs[1].size() || i < seqs[2].size(); ++i) {
      for (uint64_t th = 0; th < 3; ++th) {
        if (i >= seqs[th].size()) continue;
        const uint64_t external = ((th + 1) << 40) | seqs[th][i];
        ext.Set(external, call);
        ext_want[external] = static_cast<int32_t>(call++);
      }
    }
    for (const auto& [e, c] : ext_want) REQUIRE(ext.Get(e) == c);
    CHECK(ext.spilled() <= static_cast<size_t>(3 * (n / 50 + 1)));
    for (int k = 0; k < 200; ++k) {
      const uint64_t e = ((1 + rng() % 3) << 40) | (rng() % 200'000'000);
      CHECK(ext.Get(e) == (ext_want.count(e) ? ext_want[e] : -1));
    }
  }
}

}  // namespace
}  // namespace stallscope::analyzer
