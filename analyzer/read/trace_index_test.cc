// Tests of the index pass (IndexTraceBytes): every chunk's place, thread,
// count and exact span, in raw, packed and compressed traces; a torn tail
// ends it, a damaged chunk in the middle is refused.
#include <catch2/catch.hpp>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstddef>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "analyzer/read/trace_reader.h"
#include "analyzer/testing/test_util.h"

namespace stallscope::analyzer {
namespace {

using testing::kUs;
using testing::TraceBuilder;
namespace tf = stallscope::trace;

using Span = std::tuple<uint16_t, uint32_t, uint32_t, uint64_t, uint64_t>;  // type, tid, count, lo, hi

// The host's times as a trace writes them: in ns, or (`ticks`) in ticks,
// two a nanosecond from 1000, with the clock pairs that convert them.
struct HostTime {
  bool ticks = false;
  uint64_t operator()(int64_t ns) const { return static_cast<uint64_t>(ticks ? 2 * ns + 1000 : ns); }
};
HostTime HostTimes(TraceBuilder* b, bool ticks) {
  const HostTime t{ticks};
  if (ticks) {
    b->SetTicksAreNs(false);
    b->Clock(t(0), 0);
    b->Clock(t(1'000'000'000), 1'000'000'000);
  }
  return t;
}

// Random calls on three threads, ops, correlations and ranges, in chunks
// of `per` records; `expected` gets the spans the index must give (in ns:
// with `ticks`, the host's times are written in ticks, two a nanosecond
// from 1000, with the clock pairs that convert them).
TraceBuilder Random(uint32_t seed, size_t per, bool ticks, std::vector<Span>* expected) {
  std::mt19937 rng(seed);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  TraceBuilder b;
  b.SetChunkRecords(per);
  auto api = testing::AddStandardApis(&b);
  const HostTime T = HostTimes(&b, ticks);
  struct Rec {
    uint64_t lo, hi;
  };
  std::vector<Rec> calls[3], ops, corr;
  std::vector<Rec> nvtx;
  int64_t h[3] = {1000, 1000, 1000};
  const int n = pick(1, 60);
  for (int i = 0; i < n; ++i) {
    const int k = pick(0, 2);
    const uint32_t tid = 10 + static_cast<uint32_t>(k);
    h[k] += pick(1, 50) * kUs;
    const int64_t exit = h[k] + pick(0, 30) * kUs;
    if (pick(0, 1) == 0) {
      const int64_t start = h[k] + pick(1, 100) * kUs;
      const int64_t end = start + pick(0, 200) * kUs;
      b.Submit(tid, api.launch, T(h[k]), T(exit), start, end);
      ops.push_back({static_cast<uint64_t>(start), static_cast<uint64_t>(end)});
      const uint64_t cupti = ops.size();  // the builder's ids count from 1
      corr.push_back({cupti, cupti});
    } else {
      b.Call(tid, api.other, T(h[k]), T(exit));
    }
    calls[k].push_back({static_cast<uint64_t>(h[k]), static_cast<uint64_t>(exit)});
    h[k] = exit;
  }
  for (int i = pick(0, 5); i > 0; --i) {
    h[0] += 10 * kUs;
    b.Range(10, T(h[0]), T(h[0] + 5 * kUs), "step");
    nvtx.push_back({static_cast<uint64_t>(h[0]), static_cast<uint64_t>(h[0])});
    nvtx.push_back({static_cast<uint64_t>(h[0] + 5 * kUs), static_cast<uint64_t>(h[0] + 5 * kUs)});
    h[0] += 5 * kUs;
  }
  auto chunks = [&](uint16_t type, uint32_t tid, const std::vector<Rec>& v) {
    for (size_t i = 0; i < v.size(); i += per) {
      uint64_t lo = ~uint64_t{0}, hi = 0;
      const size_t e = std::min(v.size(), i + per);
      for (size_t j = i; j < e; ++j) {
        lo = std::min(lo, v[j].lo);
        hi = std::max({hi, v[j].lo, v[j].hi});
      }
      expected->push_back({type, tid, static_cast<uint32_t>(e - i), lo, hi});
    }
  };
  for (int k = 0; k < 3; ++k) chunks(static_cast<uint16_t>(tf::ChunkType::kApi), 10 + k, calls[k]);
  chunks(static_cast<uint16_t>(tf::ChunkType::kDevice), 0, ops);
  chunks(static_cast<uint16_t>(tf::ChunkType::kCorrelation), 0, corr);
  chunks(static_cast<uint16_t>(tf::ChunkType::kNvtx), 10, nvtx);
  return b;
}

std::vector<Span> RecordSpans(const TraceIndex& index) {
  std::vector<Span> out;
  for (const ChunkSpan& c : index.chunks) {
    switch (static_cast<tf::ChunkType>(c.type)) {
      case tf::ChunkType::kApi:
      case tf::ChunkType::kDevice:
      case tf::ChunkType::kCorrelation:
      case tf::ChunkType::kNvtx:
        out.push_back({c.type, c.tid, c.count, c.lo, c.hi});
        break;
      default:
        break;
    }
  }
  return out;
}

TEST_CASE("index: every chunk's place and exact span", "[index]") {
  for (uint32_t seed = 1; seed <= 60; ++seed) {
    for (int encoding = 0; encoding < 3; ++encoding) {
      CAPTURE(seed, encoding);
      std::vector<Span> expected;
      TraceBuilder b = Random(seed, 1 + seed % 5, seed % 2 == 1, &expected);
      b.SetPacked(encoding > 0, encoding > 1);
      const std::string bytes = b.Build();
      auto index = IndexTraceBytes(bytes, "t");
      REQUIRE(index.ok());
      CHECK_FALSE(index->truncated);
      std::vector<uint64_t> offsets;
      for (const ChunkSpan& c : index->chunks) offsets.push_back(c.offset);
      const std::vector<size_t> want = TraceBuilder::ChunkOffsets(bytes);
      CHECK(offsets == std::vector<uint64_t>(want.begin(), want.end()));
      std::vector<Span> got = RecordSpans(*index);
      std::sort(got.begin(), got.end());
      std::sort(expected.begin(), expected.end());
      CHECK(got == expected);
      // The counts the streamed analysis chooses its thread and device by
      // are the whole reading's.
      auto whole = ReadTraceBytes(bytes, "t");
      REQUIRE(whole.ok());
      auto threads = [](std::vector<ThreadCallCount> v) {
        std::vector<std::tuple<uint32_t, int64_t, int64_t>> out;
        for (const ThreadCallCount& c : v) out.emplace_back(c.tid, c.calls, c.launches);
        std::sort(out.begin(), out.end());
        return out;
      };
      auto devices = [](std::vector<DeviceOpCount> v) {
        std::vector<std::tuple<uint32_t, int64_t, int64_t>> out;
        for (const DeviceOpCount& d : v) out.emplace_back(d.device, d.ops, d.nccl);
        std::sort(out.begin(), out.end());
        return out;
      };
      CHECK(threads(index->calls_per_thread) == threads(whole->calls_per_thread));
      CHECK(devices(index->ops_per_device) == devices(whole->ops_per_device));
      CHECK(!whole->calls_per_thread.empty());
    }
  }
}

// The whole reading's diagnostics but those the slices count (ops without
// a call, unmatched NVTX ranges, no device ops): the index's, in order.
std::vector<std::tuple<std::string, uint64_t, std::string>> ReadingDiagnostics(const std::vector<Diagnostic>& v) {
  std::vector<std::tuple<std::string, uint64_t, std::string>> out;
  for (const Diagnostic& d : v) {
    if (d.id == DiagId::kUncorrelatedDeviceOps || d.id == DiagId::kUnmatchedNvtx || d.id == DiagId::kNoDeviceOps) {
      continue;
    }
    out.emplace_back(DiagName(d.id), d.count, d.message);
  }
  return out;
}

TEST_CASE("index: the whole reading's diagnostics, in its order", "[index]") {
  // Each odd thing a trace can hold that a reading reports, alone and
  // together, in ns and in ticks.
  constexpr int kOdd = 11;
  std::vector<int> masks{0};
  for (int k = 0; k < kOdd; ++k) masks.push_back(1 << k);
  std::mt19937 rng(17);
  for (int i = 0; i < 150; ++i) masks.push_back(static_cast<int>(rng() % (1u << kOdd)));
  size_t seen = 0, cases = 0;
  for (const int mask : masks) {
    for (const bool ticks : {false, true}) {
      auto on = [&](int k) { return (mask >> k & 1) != 0; };
      std::vector<Span> expected;
      TraceBuilder b = Random(static_cast<uint32_t>(mask), 1 + mask % 4, ticks, &expected);
      const HostTime T{ticks};
      if (on(0)) b.Device(5000, 4000, tf::DeviceOpKind::kKernel, "back", 999);  // ends first; no call
      if (on(1)) b.Device(uint64_t{1} << 61, (uint64_t{1} << 61) + 5, tf::DeviceOpKind::kKernel, "far", 998);
      if (on(2)) b.Device(7000, 8000, tf::DeviceOpKind::kKernel, "dev", 997, 7, 0x12345);  // past kMaxDevice
      if (on(3)) b.Call(11, 0, T(9000), T(8000));  // exits before it enters
      if (on(4)) b.Diag(tf::DiagnosticId::kCuptiDropped, 3);
      if (on(5)) b.Diag(tf::DiagnosticId::kCuptiRecordsStopped, 2);
      if (on(6)) {
        b.Diag(tf::DiagnosticId::kTraceWriteFailed, 5);
        b.Diag(tf::DiagnosticId::kTraceWriteFailedCalls, 4);
      }
      if (on(7)) b.SetEnd(false);
      if (on(8)) b.Cpu(10, T(2000), uint64_t{1} << 62);  // a CPU time past kMaxTimeNs
      if (on(9)) b.CpuSched(11, T(3000), 100, tf::kRunDelayUnknown);
      if (on(10)) b.Push(12, T(4000), "open");
      std::string bytes = b.Build();
      if (on(7) && on(3)) bytes += "torn";  // neither a chunk nor the end
      if (on(5) && on(2)) {  // a chunk type this reader does not know, between two
        std::string unknown;
        tf::EncodeChunk(&unknown, tf::kVersion, static_cast<tf::ChunkType>(0x7777), 0, 0, std::string());
        const std::vector<size_t> at = TraceBuilder::ChunkOffsets(bytes);
        bytes.insert(at[at.size() / 2], unknown);
      }
      auto index = IndexTraceBytes(bytes, "t");
      REQUIRE(index.ok());
      auto whole = ReadTraceBytes(bytes, "t");
      REQUIRE(whole.ok());
      INFO("mask " << mask << (ticks ? " ticks" : " ns"));
      CHECK(ReadingDiagnostics(index->diagnostics) == ReadingDiagnostics(whole->diagnostics));
      CHECK(index->diagnostics.size() <= whole->diagnostics.size());
      CHECK(index->cpu_samples == !whole->cpu.empty());
      uint64_t without = 0;
      for (const auto& [tid, v] : whole->cpu) {
        for (const CpuSample& c : v) without += c.run_delay_ns < 0;
      }
      CHECK(index->cpu_samples_without_delay == without);
      seen += !index->diagnostics.empty();
      ++cases;
    }
  }
  CHECK(2 * seen > cases);
}

TEST_CASE("index: a torn tail ends it, a damaged chunk is refused", "[index]") {
  std::vector<Span> expected;
  TraceBuilder b = Random(7, 2, false, &expected);
  const std::string bytes = b.Build();
  const std::vector<size_t> offsets = TraceBuilder::ChunkOffsets(bytes);
  REQUIRE(offsets.size() > 4);
  // Cut inside the last chunk: the chunks before it.
  auto torn = IndexTraceBytes(bytes.substr(0, bytes.size() - 8), "t");
  REQUIRE(torn.ok());
  CHECK(torn->truncated);
  CHECK(torn->chunks.size() == offsets.size() - 1);
  // A payload byte flipped in the middle: an error naming its offset.
  auto whole = IndexTraceBytes(bytes, "t");
  REQUIRE(whole.ok());
  std::vector<uint64_t> api;
  for (const ChunkSpan& c : whole->chunks) {
    if (c.type == static_cast<uint16_t>(tf::ChunkType::kApi)) api.push_back(c.offset);
  }
  REQUIRE(api.size() > 2);
  std::string bad = bytes;
  const size_t at = api[1];
  bad[at + sizeof(tf::ChunkHeader)] ^= 0x5a;
  auto damaged = IndexTraceBytes(bad, "t");
  REQUIRE_FALSE(damaged.ok());
  CHECK(std::string(damaged.status().message()).find("byte offset " + std::to_string(at)) !=
        std::string::npos);
  // A chunk in the middle claiming more bytes than the file holds (its
  // header's size damaged): not a torn tail, as chunks follow it.
  std::string long_claim = bytes;
  const uint32_t huge = static_cast<uint32_t>((bytes.size() + 8) & ~size_t{7});  // a multiple of 8
  std::memcpy(&long_claim[at + offsetof(tf::ChunkHeader, payload_bytes)], &huge, sizeof huge);
  auto claimed = IndexTraceBytes(long_claim, "t");
  CHECK_FALSE(claimed.ok());
  // Not a trace.
  CHECK_FALSE(IndexTraceBytes("hello", "t").ok());
}

// A random run for slicing: three threads' calls, some submitting ops that
// the device runs at once or long after (queued behind others), ops of no
// call, ranges and CPU samples, in small chunks; with `ticks`, the host's
// times in ticks (two a nanosecond, from 1000) and the clock pairs that
// convert them. The ids (`ids`): kShaped, external ids as the recorder
// gives them (the thread's index above bit 40, its count below), so a
// correlation chunk holds ids of threads far apart; kSmall, one count from
// 1000, with the ops of no call carrying CUPTI ids equal to calls'
// external ids (joined by their ids, as in a file without correlations,
// they would find a call); kPlain, no correlations at all (the reader
// joins an op to the call whose external id is its CUPTI id).
enum class Ids { kShaped, kSmall, kPlain };
TraceBuilder SliceRun(uint32_t seed, bool ticks, Ids ids) {
  std::mt19937 rng(seed);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  TraceBuilder b;
  b.SetChunkRecords(1 + seed % 4);
  auto api = testing::AddStandardApis(&b);
  const HostTime T = HostTimes(&b, ticks);
  int64_t h[3] = {1000, 1000, 1000};
  uint64_t count[3] = {0, 0, 0};
  uint32_t cupti = 1;
  int64_t device = 0;
  // The CUPTI ids of ops of no call: none a correlation names.
  uint32_t loose = ids == Ids::kSmall ? 1001 : 900'000;
  int others = 0;
  for (int i = pick(5, 80); i > 0; --i) {
    const int k = pick(0, 2);
    const uint32_t tid = 10 + static_cast<uint32_t>(k);
    h[k] += pick(1, 50) * kUs;
    const int64_t exit = h[k] + pick(0, 30) * kUs;
    if (pick(0, 6) == 0) {
      // A call holding nested calls, written as the recorder writes them
      // (each as it returns, the outer one last), so the outer call may
      // come chunks after the calls it holds.
      int64_t x = h[k];
      for (int n = pick(1, 4); n > 0; --n) {
        x += pick(0, 10) * kUs;
        const int64_t e = x + pick(0, 10) * kUs;
        b.Call(tid, api.other, T(x), T(e));
        x = e;
      }
      const int64_t outer_exit = x + pick(0, 10) * kUs;
      b.Call(tid, api.other, T(h[k]), T(outer_exit));
      h[k] = outer_exit;
      continue;
    }
    switch (pick(0, 5)) {
      case 0:
      case 1: {  // a launch; its kernel behind the device's queue, at times long after
        const int64_t start = std::max(h[k] + 5 * kUs, device) + (pick(0, 5) == 0 ? pick(100, 3000) * kUs : 0);
        device = start + pick(0, 200) * kUs;
        const uint64_t external = ids == Ids::kPlain   ? cupti
                                  : ids == Ids::kSmall ? 1000 + cupti
                                                       : (uint64_t(k + 1) << 40) | ++count[k];
        testing::CallOptions o;
        o.correlation = external;
        b.Call(tid, api.launch, T(h[k]), T(exit), o);
        b.Device(start, device, tf::DeviceOpKind::kKernel, "kernel", cupti);
        if (ids != Ids::kPlain) b.Correlate(external, cupti);
        ++cupti;
        break;
      }
      case 2:  // an op of no call
        b.Device(h[k], h[k] + pick(1, 100) * kUs, tf::DeviceOpKind::kKernel, "loose", loose++);
        break;
      case 3:
        b.CpuSched(tid, T(h[k]), h[k] / 2, 0);
        break;
      case 4:
        b.Range(tid, T(h[k]), T(exit), "r");
        break;
      default:
        // Every other one an NCCL call with its arguments (a kNccl record,
        // joined to the call by thread and enter time).
        if (++others % 2 == 0) {
          b.Call(tid, api.nccl, T(h[k]), T(exit));
          tf::NcclRecord r{};
          r.enter = static_cast<uint64_t>(T(h[k]));
          r.tid = tid;
          r.kind = static_cast<uint8_t>(tf::NcclKind::kAllReduce);
          b.Nccl(r);
        } else {
          b.Call(tid, api.other, T(h[k]), T(exit));
        }
        break;
    }
    h[k] = exit;
  }
  return b;
}

// SliceChunks as a scan of every chunk (what it was before SliceChunker):
// the oracle the searched answer is held to.
std::vector<size_t> SliceChunksByScan(const TraceIndex& index, uint64_t lo_ns, uint64_t hi_ns) {
  auto IsSliced = [](uint16_t type) {
    const trace::ChunkTypeInfo* info = trace::FindChunkType(type);
    return info != nullptr && info->reading == trace::ChunkReading::kSliced;
  };
  using T = trace::ChunkType;
  auto is = [](const ChunkSpan& c, T type) { return c.type == static_cast<uint16_t>(type); };
  auto meets = [](const ChunkSpan& c, uint64_t a, uint64_t b) { return c.lo <= b && a <= c.hi; };
  const std::vector<ChunkSpan>& chunks = index.chunks;
  std::vector<bool> take(chunks.size(), false);
  // By time: the calls, ranges, CPU samples, NCCL arguments and device ops
  // of the slice. On each thread, the chunk holding its last call ending
  // before the slice and the one holding its first call entering after
  // (the host gaps at its edges are bounded by them): of its chunks wholly
  // before the slice, the one ending last, and of those wholly after, the
  // one starting first, whatever order the calls were written in (the
  // recorder writes a call as it returns, so an outer call comes after the
  // calls nested in it, maybe chunks later).
  IdRanges cupti, external;
  struct Edges {
    int64_t before = -1, after = -1;
    // Those chunks' latest end and earliest start.
    uint64_t before_hi = 0, after_lo = 0;
    // Over the wholly-before chunk ending last, the wholly-after one
    // starting first: `c` is one of the thread's chunks.
    void See(const ChunkSpan& c, size_t k, uint64_t lo, uint64_t hi) {
      if (c.hi < lo && (before < 0 || c.hi >= before_hi)) {
        before = static_cast<int64_t>(k);
        before_hi = c.hi;
      }
      if (c.lo > hi && (after < 0 || c.lo < after_lo)) {
        after = static_cast<int64_t>(k);
        after_lo = c.lo;
      }
    }
  };
  absl::flat_hash_map<uint32_t, Edges> edges;
  absl::flat_hash_map<std::pair<uint32_t, uint16_t>, Edges> sample_edges;  // by thread and chunk type
  for (size_t k = 0; k < chunks.size(); ++k) {
    const ChunkSpan& c = chunks[k];
    if (!IsSliced(c.type) || is(c, T::kCorrelation) || c.count == 0) continue;
    if (is(c, T::kCpu) || is(c, T::kCpuSched)) continue;  // below
    if (meets(c, lo_ns, hi_ns)) {
      take[k] = true;
      if (is(c, T::kDevice)) cupti.Add(c.id_lo, c.id_hi);
      if (is(c, T::kApi)) external.Add(c.id_lo, c.id_hi);
    }
    if (is(c, T::kApi)) edges[c.tid].See(c, k, lo_ns, hi_ns);
  }
  // A thread's CPU samples (a gap is split on-CPU and off by the samples
  // around it), over the times of its calls read, from its edge chunk
  // before the slice to the one after, and the samples just outside them.
  for (size_t k = 0; k < chunks.size(); ++k) {
    const ChunkSpan& c = chunks[k];
    if (!(is(c, T::kCpu) || is(c, T::kCpuSched)) || c.count == 0) continue;
    uint64_t a = lo_ns;
    uint64_t b = hi_ns;
    if (auto it = edges.find(c.tid); it != edges.end()) {
      const Edges& e = it->second;
      if (e.before >= 0) a = std::min(a, chunks[static_cast<size_t>(e.before)].lo);
      if (e.after >= 0) b = std::max(b, chunks[static_cast<size_t>(e.after)].hi);
    }
    if (meets(c, a, b)) take[k] = true;
    sample_edges[{c.tid, c.type}].See(c, k, a, b);
  }
  for (const auto& [tid, e] : edges) {
    for (const int64_t k : {e.before, e.after}) {
      if (k >= 0) take[static_cast<size_t>(k)] = true;
    }
  }
  for (const auto& [key, e] : sample_edges) {
    for (const int64_t k : {e.before, e.after}) {
      if (k >= 0) take[static_cast<size_t>(k)] = true;
    }
  }
  cupti.Merge();
  external.Merge();
  // The joins, both ways, through the correlations: the calls that
  // submitted the slice's ops (an op queued long after its launch), and the
  // ops of the slice's calls (a call's op count and last op end).
  IdRanges to_cupti, to_external;
  bool correlations = false;
  for (size_t k = 0; k < chunks.size(); ++k) {
    const ChunkSpan& c = chunks[k];
    if (!is(c, T::kCorrelation) || c.count == 0) continue;
    correlations = true;
    // Its external ids, a range per thread that gave them.
    const auto* r = index.external_ranges.data() + c.ranges_at;
    const bool of_ops = cupti.Meets(c.lo, c.hi);
    bool of_calls = false;
    for (uint32_t i = 0; i < c.ranges && !of_calls; ++i) of_calls = external.Meets(r[i].first, r[i].second);
    if (!of_ops && !of_calls) continue;
    take[k] = true;
    if (of_ops) {
      for (uint32_t i = 0; i < c.ranges; ++i) to_external.Add(r[i].first, r[i].second);
    }
    if (of_calls) to_cupti.Add(c.lo, c.hi);
  }
  // A file without correlations joins an op to the call whose external id
  // is its CUPTI id (the reader's fallback).
  if (!correlations) {
    to_external = cupti;
    to_cupti = external;
  }
  to_external.Merge();
  to_cupti.Merge();
  for (size_t k = 0; k < chunks.size(); ++k) {
    const ChunkSpan& c = chunks[k];
    if (!take[k] && c.count > 0) {
      if (is(c, T::kApi)) take[k] = to_external.Meets(c.id_lo, c.id_hi);
      if (is(c, T::kDevice)) take[k] = to_cupti.Meets(c.id_lo, c.id_hi);
    }
  }
  // The NCCL arguments of every call read (joined to it by thread and enter
  // time): the argument chunks meeting the time of a call chunk read (its
  // edge calls may have entered long before the slice).
  IdRanges read_calls;  // as time ranges
  for (size_t k = 0; k < chunks.size(); ++k) {
    if (take[k] && is(chunks[k], T::kApi) && chunks[k].count > 0) read_calls.Add(chunks[k].lo, chunks[k].hi);
  }
  read_calls.Merge();
  std::vector<size_t> out;
  for (size_t k = 0; k < chunks.size(); ++k) {
    const ChunkSpan& c = chunks[k];
    if (!take[k] && is(c, T::kNccl) && c.count > 0) take[k] = read_calls.Meets(c.lo, c.hi);
    if (take[k]) out.push_back(k);
  }
  return out;
}


// Two readings of one slice hold the same records, joined alike.
void CheckSameSlice(const Timeline& a, const Timeline& b) {
  REQUIRE(a.calls.size() == b.calls.size());
  REQUIRE(a.ops.size() == b.ops.size());
  for (size_t i = 0; i < a.calls.size(); ++i) {
    CHECK(std::tie(a.calls[i].tid, a.calls[i].api, a.calls[i].enter_ns, a.calls[i].exit_ns) ==
          std::tie(b.calls[i].tid, b.calls[i].api, b.calls[i].enter_ns, b.calls[i].exit_ns));
    CHECK(std::tie(a.call_info[i].correlation, a.call_info[i].op_count, a.call_info[i].last_op_end_ns) ==
          std::tie(b.call_info[i].correlation, b.call_info[i].op_count, b.call_info[i].last_op_end_ns));
  }
  for (size_t i = 0; i < a.ops.size(); ++i) {
    CHECK(std::tie(a.ops[i].start_ns, a.ops[i].end_ns, a.ops[i].device, a.ops[i].call) ==
          std::tie(b.ops[i].start_ns, b.ops[i].end_ns, b.ops[i].device, b.ops[i].call));
  }
  CHECK(a.ranges.size() == b.ranges.size());
  CHECK(a.cpu.size() == b.cpu.size());
  for (const auto& [tid, samples] : a.cpu) {
    auto it = b.cpu.find(tid);
    REQUIRE(it != b.cpu.end());
    CHECK(samples.size() == it->second.size());
  }
  CHECK(a.bytes_used == b.bytes_used);
  CHECK(a.diagnostics.size() == b.diagnostics.size());
}

TEST_CASE("slices: each call and op of a slice is as the whole file gives it", "[index][slice]") {
  uint64_t kept_total = 0;
  for (uint32_t seed = 1; seed <= 60; ++seed) {
    for (int encoding = 0; encoding < 3; ++encoding) {
      CAPTURE(seed, encoding);
      TraceBuilder b = SliceRun(seed, seed % 2 == 1, static_cast<Ids>(seed % 3));
      b.SetPacked(encoding > 0, encoding > 1);
      const std::string bytes = b.Build();
      const Timeline whole = testing::ReadOrDie(b);
      auto index = IndexTraceBytes(bytes, "t");
      REQUIRE(index.ok());
      int64_t last = 0;
      for (const ApiCall& c : whole.calls) last = std::max(last, c.exit_ns);
      for (const DeviceOp& op : whole.ops) last = std::max(last, op.end_ns);
      std::mt19937_64 rng(seed);
      // One reader for every slice of the run: what it keeps from the
      // slice before changes nothing.
      auto reader = SliceReader::OpenBytes(bytes, "t", *index);
      REQUIRE(reader.ok());
      for (int k = 0; k < 6; ++k) {
        int64_t lo = static_cast<int64_t>(rng() % static_cast<uint64_t>(last + 1));
        int64_t hi = static_cast<int64_t>(rng() % static_cast<uint64_t>(last + 1));
        if (lo > hi) std::swap(lo, hi);
        CAPTURE(lo, hi);
        const std::vector<size_t> chosen =
            SliceChunks(*index, static_cast<uint64_t>(lo), static_cast<uint64_t>(hi));
        auto slice = ReadTraceChunks(bytes, "t", *index, chosen);
        REQUIRE(slice.ok());
        auto again = reader->Read(chosen);
        REQUIRE(again.ok());
        CheckSameSlice(*slice, *again);
        // A call: its thread, API, times and ids.
        auto key = [](const Timeline& t, int32_t i) {
          const ApiCall& c = t.calls[static_cast<size_t>(i)];
          const CallInfo& n = t.call_info[static_cast<size_t>(i)];
          return std::make_tuple(c.tid, c.api, c.enter_ns, c.exit_ns, n.correlation);
        };
        std::vector<decltype(key(whole, 0))> calls;
        for (size_t i = 0; i < slice->calls.size(); ++i) calls.push_back(key(*slice, static_cast<int32_t>(i)));
        std::sort(calls.begin(), calls.end());
        // Each call inside, with its ops' count and last end (its ops may
        // run long after the slice).
        for (size_t i = 0; i < whole.calls.size(); ++i) {
          const ApiCall& c = whole.calls[i];
          if (c.enter_ns < lo || c.exit_ns > hi) continue;
          const auto k = key(whole, static_cast<int32_t>(i));
          REQUIRE(std::binary_search(calls.begin(), calls.end(), k));
          for (size_t j = 0; j < slice->calls.size(); ++j) {
            if (key(*slice, static_cast<int32_t>(j)) != k) continue;
            CHECK(slice->call_info[j].op_count == whole.call_info[i].op_count);
            CHECK(slice->call_info[j].last_op_end_ns == whole.call_info[i].last_op_end_ns);
          }
        }
        // On each thread, its last call ending before the slice (of equal
        // ends, the outer one) and its first entering after it.
        absl::flat_hash_map<uint32_t, std::pair<int32_t, int32_t>> edge;
        for (size_t i = 0; i < whole.calls.size(); ++i) {
          const ApiCall& c = whole.calls[i];
          auto& [before, after] = edge.try_emplace(c.tid, -1, -1).first->second;
          if (c.exit_ns < lo && (before < 0 || c.exit_ns > whole.calls[static_cast<size_t>(before)].exit_ns)) {
            before = static_cast<int32_t>(i);
          }
          if (c.enter_ns > hi && after < 0) after = static_cast<int32_t>(i);
        }
        for (const auto& [tid, e] : edge) {
          CAPTURE(tid);
          if (e.first >= 0) CHECK(std::binary_search(calls.begin(), calls.end(), key(whole, e.first)));
          if (e.second >= 0) CHECK(std::binary_search(calls.begin(), calls.end(), key(whole, e.second)));
        }
        // Each NCCL call read has its arguments joined to it (the call may
        // have entered long before the slice: a thread's edge call).
        for (const NcclCall& n : whole.nccl) {
          if (n.call < 0) continue;
          const auto k = key(whole, n.call);
          if (!std::binary_search(calls.begin(), calls.end(), k)) continue;
          bool joined = false;
          for (const NcclCall& m : slice->nccl) joined |= m.call >= 0 && key(*slice, m.call) == k;
          CHECK(joined);
        }
        // On each thread, its CPU samples in the slice, its last one before
        // and its first one after (a gap at the slice's edge is split
        // on-CPU and off by the samples around it).
        for (const auto& [tid, samples] : whole.cpu) {
          CAPTURE(tid);
          std::vector<int64_t> want;
          const CpuSample* before = nullptr;
          const CpuSample* after = nullptr;
          for (const CpuSample& x : samples) {
            if (x.ns < lo) before = &x;
            if (x.ns >= lo && x.ns <= hi) want.push_back(x.ns);
            if (x.ns > hi && after == nullptr) after = &x;
          }
          if (before != nullptr) want.push_back(before->ns);
          if (after != nullptr) want.push_back(after->ns);
          auto it = slice->cpu.find(tid);
          std::vector<int64_t> got;
          if (it != slice->cpu.end()) {
            for (const CpuSample& x : it->second) got.push_back(x.ns);
          }
          std::sort(got.begin(), got.end());
          for (int64_t ns : want) CHECK(std::binary_search(got.begin(), got.end(), ns));
        }
        // An op: its times, device, kind and the call that submitted it.
        using OpKey = std::tuple<int64_t, int64_t, uint16_t, int, bool, decltype(key(whole, 0))>;
        auto op_key = [&](const Timeline& t, const DeviceOp& op) {
          return OpKey{op.start_ns, op.end_ns, op.device, static_cast<int>(op.kind), op.call >= 0,
                       op.call >= 0 ? key(t, op.call) : decltype(key(t, 0)){}};
        };
        std::vector<OpKey> ops;
        for (const DeviceOp& op : slice->ops) ops.push_back(op_key(*slice, op));
        std::sort(ops.begin(), ops.end());
        size_t inside = 0;
        for (const DeviceOp& op : whole.ops) {
          if (op.start_ns < lo || op.end_ns > hi) continue;
          ++inside;
          CHECK(std::binary_search(ops.begin(), ops.end(), op_key(whole, op)));
        }
        // What was read is bounded by what was chosen: no more ops than
        // the chosen device chunks hold.
        size_t chosen_ops = 0;
        for (size_t c : chosen) {
          if (index->chunks[c].type == static_cast<uint16_t>(tf::ChunkType::kDevice)) chosen_ops += index->chunks[c].count;
        }
        CHECK(slice->ops.size() == chosen_ops);
        CHECK(inside <= chosen_ops);
      }
      // Neighbouring slices, in order, as the streamed analysis reads them:
      // the chunks at their edges are kept, not decoded again.
      const uint64_t kept_before = reader->chunks_kept();
      for (int k = 0; k < 5; ++k) {
        const auto lo = static_cast<uint64_t>(last / 5 * k);
        const auto hi = k == 4 ? static_cast<uint64_t>(last) : static_cast<uint64_t>(last / 5 * (k + 1));
        const std::vector<size_t> chosen = SliceChunks(*index, lo, hi);
        auto fresh = ReadTraceChunks(bytes, "t", *index, chosen);
        auto kept = reader->Read(chosen);
        REQUIRE(fresh.ok());
        REQUIRE(kept.ok());
        CheckSameSlice(*fresh, *kept);
      }
      kept_total += reader->chunks_kept() - kept_before;
    }
  }
  CHECK(kept_total > 0);
}

TEST_CASE("slices: the chunks a slice takes, searched, are those a scan finds", "[index][slice]") {
  size_t compared = 0, taken = 0, lean_ops = 0, joined = 0, lean_calls = 0, with_ops = 0;
  // And chunks of one thread ending (or starting) together, a chunk apart:
  // the one a slice takes beside it is the scan's. Calls nested in an outer
  // one, written before it, one a chunk; CPU samples at one time.
  TraceBuilder ties;
  {
    ties.SetChunkRecords(1);
    auto api = testing::AddStandardApis(&ties);
    for (int64_t at = 1000; at < 9000; at += 1000) {
      ties.Call(10, api.other, at, at + 100);
      ties.Call(10, api.other, at + 50, at + 200);
      ties.Call(10, api.other, at, at + 200);
      ties.CpuSched(10, at + 200, at, 0);
      ties.CpuSched(10, at + 200, at, 0);
    }
  }
  for (uint32_t seed = 0; seed <= 90; ++seed) {
    CAPTURE(seed);
    TraceBuilder b = seed == 0 ? ties : SliceRun(seed, seed % 2 == 1, static_cast<Ids>(seed % 3));
    b.SetPacked(seed % 3 > 0, seed % 3 > 1);
    const std::string bytes = b.Build();
    auto index = IndexTraceBytes(bytes, "t");
    REQUIRE(index.ok());
    const SliceChunker chunker(*index);
    // The slices: random ones, each chunk's edges and one past them (where
    // "before", "meets" and "after" change), a point, and everything.
    std::vector<std::pair<uint64_t, uint64_t>> ranges = {{0, ~uint64_t{0}}, {0, 0}};
    uint64_t last = 0;
    for (const ChunkSpan& c : index->chunks) {
      last = std::max(last, c.hi);
      for (const uint64_t x : {c.lo, c.hi}) {
        ranges.push_back({x, x});
        ranges.push_back({x + 1, x + 1000});
        if (x > 0) ranges.push_back({x / 2, x - 1});
      }
    }
    std::mt19937_64 rng(seed);
    for (int k = 0; k < 40; ++k) {
      uint64_t lo = rng() % (last + 2), hi = rng() % (last + 2);
      if (lo > hi) std::swap(lo, hi);
      ranges.push_back({lo, hi});
    }
    for (size_t r = 0; r < ranges.size(); ++r) {
      const auto [lo, hi] = ranges[r];
      CAPTURE(lo, hi);
      const std::vector<size_t> want = SliceChunksByScan(*index, lo, hi);
      REQUIRE(chunker.Chunks(lo, hi) == want);
      ++compared;
      taken += want.size();
      // The ops and their calls alone: each op meeting the range has the
      // call the whole slice gives it (the last 40 ranges, the random ones).
      if (r + 40 < ranges.size()) continue;
      auto full = ReadTraceChunks(bytes, "t", *index, want);
      auto lean = ReadTraceChunks(bytes, "t", *index, chunker.OpsAndTheirCalls(lo, hi));
      REQUIRE(full.ok());
      REQUIRE(lean.ok());
      auto call_of = [](const Timeline& t, const DeviceOp& op) {
        if (op.call < 0) return std::make_tuple(uint32_t{0}, uint16_t{0}, int64_t{-1}, int64_t{-1});
        const ApiCall& c = t.calls[static_cast<size_t>(op.call)];
        return std::make_tuple(c.tid, c.api, c.enter_ns, c.exit_ns);
      };
      std::map<std::tuple<int64_t, int64_t, uint32_t>, decltype(call_of(*full, full->ops[0]))> by_op;
      for (size_t i = 0; i < full->ops.size(); ++i) {
        by_op[{full->ops[i].start_ns, full->ops[i].end_ns, full->op_info[i].correlation}] = call_of(*full, full->ops[i]);
      }
      for (size_t i = 0; i < lean->ops.size(); ++i) {
        const DeviceOp& op = lean->ops[i];
        if (op.end_ns < static_cast<int64_t>(lo) || op.start_ns > static_cast<int64_t>(hi)) continue;
        auto it = by_op.find({op.start_ns, op.end_ns, lean->op_info[i].correlation});
        REQUIRE(it != by_op.end());
        CHECK(it->second == call_of(*lean, op));
        ++lean_ops;
        joined += op.call >= 0;
      }
      // The calls and their ops alone: each call meeting the range has the
      // op count and last op end the whole slice gives it.
      auto calls = ReadTraceChunks(bytes, "t", *index, chunker.CallsAndTheirOps(lo, hi));
      REQUIRE(calls.ok());
      std::map<std::tuple<uint32_t, uint16_t, int64_t, int64_t>, std::pair<int32_t, int64_t>> by_call;
      for (size_t i = 0; i < full->calls.size(); ++i) {
        const ApiCall& c = full->calls[i];
        by_call[{c.tid, c.api, c.enter_ns, c.exit_ns}] = {full->call_info[i].op_count, full->call_info[i].last_op_end_ns};
      }
      for (size_t i = 0; i < calls->calls.size(); ++i) {
        const ApiCall& c = calls->calls[i];
        if (c.exit_ns < static_cast<int64_t>(lo) || c.enter_ns > static_cast<int64_t>(hi)) continue;
        auto it = by_call.find({c.tid, c.api, c.enter_ns, c.exit_ns});
        REQUIRE(it != by_call.end());
        CHECK(it->second == std::make_pair(calls->call_info[i].op_count, calls->call_info[i].last_op_end_ns));
        ++lean_calls;
        with_ops += calls->call_info[i].op_count > 0;
      }
    }
  }
  CHECK(compared > 5000);
  CHECK(taken > 10 * compared);  // the slices took chunks, not mostly none
  CHECK(joined > 1000);
  CHECK(lean_ops > joined);  // ops of no call among them
  CHECK(with_ops > 1000);
  CHECK(lean_calls > with_ops);
}

TEST_CASE("slices: a slice that fails part-way leaves the reader whole", "[index][slice]") {
  TraceBuilder b = SliceRun(7, false, Ids::kShaped);
  std::string bytes = b.Build();
  auto index = IndexTraceBytes(bytes, "t");
  REQUIRE(index.ok());
  // A call chunk, and a device chunk after it in the file.
  size_t a = index->chunks.size(), d = index->chunks.size();
  for (size_t k = 0; k < index->chunks.size(); ++k) {
    const ChunkSpan& c = index->chunks[k];
    if (c.count == 0) continue;
    if (a == index->chunks.size() && c.type == static_cast<uint16_t>(tf::ChunkType::kApi)) a = k;
    if (a < k && c.type == static_cast<uint16_t>(tf::ChunkType::kDevice)) d = k;
  }
  REQUIRE(d < index->chunks.size());
  auto reader = SliceReader::OpenBytes(bytes, "t", *index);
  REQUIRE(reader.ok());
  REQUIRE(reader->Read({a}).ok());  // the call chunk, kept
  // The device chunk damaged after indexing: the slice holding both fails
  // at it, after taking the kept call chunk.
  bytes[index->chunks[d].offset + sizeof(tf::ChunkHeader)] ^= 0x5a;
  CHECK_FALSE(reader->Read({a, d}).ok());
  // The call chunk again: read whole, as a fresh reader reads it.
  auto again = reader->Read({a});
  REQUIRE(again.ok());
  auto fresh = ReadTraceChunks(bytes, "t", *index, {a});
  REQUIRE(fresh.ok());
  CHECK(again->calls.size() == index->chunks[a].count);
  CheckSameSlice(*fresh, *again);
}

// Not a test (hidden, "[.]"): what reading a trace by slices costs, for
// scripts/bench. STALLSCOPE_SLICE_BENCH=FILE[:SLICES] cuts FILE's device
// time into SLICES equal slices (default 350) and reads them in order from
// the file with one SliceReader (SliceChunks, SliceReader::Read); prints
// the time, the events read against the events in the file, the chunks
// decoded and kept from the slice before, and the largest slice.
TEST_CASE("slices: what reading a trace by slices costs", "[.][slice-bench]") {
  const char* spec = std::getenv("STALLSCOPE_SLICE_BENCH");
  if (spec == nullptr) return;
  KeepFreedMemory();  // as the `stallscope` command reads
  std::string path = spec;
  size_t slices = 350;
  if (auto colon = path.rfind(':'); colon != std::string::npos) {
    slices = std::stoul(path.substr(colon + 1));
    path = path.substr(0, colon);
  }
  const auto t0 = std::chrono::steady_clock::now();
  auto index = IndexTraceFile(path);
  REQUIRE(index.ok());
  const auto t1 = std::chrono::steady_clock::now();
  uint64_t lo = ~uint64_t{0}, hi = 0, in_file = 0;
  for (const ChunkSpan& c : index->chunks) {
    if (c.type == static_cast<uint16_t>(tf::ChunkType::kDevice) && c.count > 0) {
      lo = std::min(lo, c.lo);
      hi = std::max(hi, c.hi);
    }
    if (c.type == static_cast<uint16_t>(tf::ChunkType::kApi) ||
        c.type == static_cast<uint16_t>(tf::ChunkType::kDevice)) {
      in_file += c.count;
    }
  }
  REQUIRE(lo < hi);
  uint64_t read = 0, most = 0, chunks = 0;
  auto reader = SliceReader::OpenFile(path, *index);
  REQUIRE(reader.ok());
  for (size_t k = 0; k < slices; ++k) {
    const uint64_t a = lo + (hi - lo) / slices * k;
    const uint64_t b = k + 1 == slices ? hi : lo + (hi - lo) / slices * (k + 1);
    const std::vector<size_t> chosen = SliceChunks(*index, a, b);
    chunks += chosen.size();
    auto t = reader->Read(chosen);
    REQUIRE(t.ok());
    const uint64_t n = t->calls.size() + t->ops.size();
    read += n;
    most = std::max(most, n);
  }
  const auto t2 = std::chrono::steady_clock::now();
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  const double index_s = std::chrono::duration<double>(t1 - t0).count();
  const double slices_s = std::chrono::duration<double>(t2 - t1).count();
  std::printf("slices: %s: index %.2f s; %zu slices read in %.2f s (%.1f ms each, %.1f chunks each, "
              "%.1f of them decoded, the others kept from the slice before); "
              "calls and ops read %.2f x those in the file (%llu; %.1f M of them a second, index pass "
              "included), the largest slice %llu; peak %ld MB\n",
              path.c_str(), index_s, slices, slices_s, 1e3 * slices_s / static_cast<double>(slices),
              static_cast<double>(chunks) / static_cast<double>(slices),
              static_cast<double>(reader->chunks_decoded()) / static_cast<double>(slices),
              static_cast<double>(read) / static_cast<double>(in_file),
              static_cast<unsigned long long>(in_file),
              static_cast<double>(in_file) / (index_s + slices_s) / 1e6, static_cast<unsigned long long>(most),
              ru.ru_maxrss / 1024);
}

}  // namespace
}  // namespace stallscope::analyzer
