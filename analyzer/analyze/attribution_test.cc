// Tests of idle-gap attribution on hand-built timelines: each cause, rule 1
// with its remainder, trailing idle, causes summing to idle, busy split, and
// the synchronizing-call classification.
#include "analyzer/analyze/attribution.h"

#include "analyzer/analyze/activity.h"
#include "analyzer/analyze/analysis.h"

#include <catch2/catch.hpp>
#include <random>

#include "analyzer/testing/test_util.h"

namespace stallscope::analyzer {
namespace {

using testing::CauseOf;
using testing::kUs;
using testing::Sum;
using testing::TraceBuilder;
namespace tf = stallscope::trace;

// Guards the last-answer hint of Activity::FirstEndingAfter: rising
// queries (the sweep's order), queries at exactly an exit, and falling or
// random ones give the first activity ending strictly after x, as a binary
// search over the whole list does.
TEST_CASE("an activity list finds the first call ending after x in any order of questions", "[attribution]") {
  std::mt19937_64 rng(17);
  for (int trial = 0; trial < 40; ++trial) {
    std::vector<ApiCall> calls;
    int64_t t = 0;
    for (int i = 0; i < 200; ++i) {
      ApiCall c{};
      t += static_cast<int64_t>(rng() % 50);
      c.enter_ns = t;
      c.exit_ns = t + 1 + static_cast<int64_t>(rng() % (rng() % 4 == 0 ? 400 : 40));  // some nest the next
      calls.push_back(c);
    }
    Activity acts(calls);
    for (size_t i = 0; i < calls.size(); ++i) acts.Add(static_cast<int32_t>(i));
    REQUIRE(acts.size() > 1);
    std::vector<int64_t> exits;
    for (size_t i = 0; i < acts.size(); ++i) exits.push_back(acts.exit(i));
    REQUIRE(std::is_sorted(exits.begin(), exits.end()));
    const auto want = [&](int64_t x) {
      return static_cast<size_t>(std::upper_bound(exits.begin(), exits.end(), x) - exits.begin());
    };
    std::vector<int64_t> xs;
    for (int64_t x = -5; x <= t + 500; x += 1 + static_cast<int64_t>(rng() % 30)) xs.push_back(x);  // rising
    for (int64_t e : exits) xs.push_back(e);                                                       // at each exit
    for (int k = 0; k < 300; ++k) xs.push_back(static_cast<int64_t>(rng() % static_cast<uint64_t>(t + 600)) - 50);
    for (size_t k = exits.size(); k-- > 0;) xs.push_back(exits[k] - static_cast<int64_t>(rng() % 2));  // falling
    for (int64_t x : xs) {
      INFO("trial " << trial << ", x " << x);
      REQUIRE(acts.FirstEndingAfter(x) == want(x));
    }
  }
}

// Every step: causes sum to idle, busy + idle fill the step span.
void CheckInvariants(const Report& r) {
  for (const StepStats& s : r.steps) {
    CHECK(Sum(s.idle_by_cause) == s.gpu_idle_ns);
    CHECK(s.gpu_busy_ns + s.gpu_idle_ns == s.end_ns - s.start_ns);
    CHECK(s.busy_by_kind.compute + s.busy_by_kind.copy + s.busy_by_kind.comm == s.gpu_busy_ns);
  }
  CHECK(Sum(r.totals.idle_by_cause) == r.totals.gpu_idle_ns);
}

// Guards rule 1 (the counterfactual) and the charging of the remainder by
// the thread's activity: a sync entered 110 us before the device drained
// gets 110 us of the 500 us gap; the host's long pause after it is
// host_wait; the next launch and its latency are launch_overhead.
// Guards the memory-kind rule for async copies: with the copies' host
// memory recorded, an async read-back into pinned memory is not
// synchronizing even when the call outlasted its small op (a slow first
// call, the interposer's own cost), and one into pageable memory is, even
// when it returned quickly; without memory kinds the timing rule decides.
// The union of open intervals, however they were added: each point is
// checked against the intervals themselves. Mostly in time order (the
// packed blocks), some earlier (the map), touching, nested and long ones.
TEST_CASE("pending intervals: a point is inside one of them, packed or not", "[attribution]") {
  for (uint32_t seed = 1; seed <= 40; ++seed) {
    CAPTURE(seed);
    std::mt19937_64 rng(seed);
    auto pick = [&](int64_t n) { return static_cast<int64_t>(rng() % static_cast<uint64_t>(n)); };
    PendingIntervals p;
    std::vector<std::pair<int64_t, int64_t>> added;
    int64_t t = 1'000;
    const int n = 200 + static_cast<int>(pick(3'000));
    for (int i = 0; i < n; ++i) {
      t += pick(seed % 4 == 0 ? 3 : 400);  // some runs of equal starts
      int64_t a = t;
      if (pick(10) == 0) a -= pick(5'000);  // an op launched long before
      int64_t b = a + pick(pick(20) == 0 ? 100'000 : 300);  // some empty, some long
      if (pick(25) == 0) b = a;
      p.Add(a, b);
      added.emplace_back(a, b);
    }
    size_t in = 0;
    for (int64_t x = 0; x <= t + 200'000; x += 1 + pick(97)) {
      bool expected = false;
      for (const auto& [a, b] : added) expected = expected || (a < x && x < b);
      in += expected;
      INFO("x " << x);
      REQUIRE(p.At(x) == expected);
    }
    // Both answers were asked (a check that cannot fail is none).
    CHECK(in > 0);
    // Packed: a few bytes each, not a map node.
    if (p.size() > 1'000) CHECK(p.bytes() < 16 * p.size());
  }
}

TEST_CASE("async copies synchronize by their host memory when it is known", "[attribution]") {
  for (const bool kinds : {true, false}) {
    TraceBuilder b;
    auto api = testing::AddStandardApis(&b);
    // Pinned: the call [0, 14) outlasts its op [5, 10).
    b.Call(1, api.memcpy_async, 0, 14 * kUs, {.correlation = 1, .bytes = 4});
    b.Device(5 * kUs, 10 * kUs, tf::DeviceOpKind::kMemcpy, "", 101, 7, 0, 4, 2, kinds ? 3 : 0,
             kinds ? 2 : 0);
    b.Correlate(1, 101);
    // Pageable: the call [100, 103) returns before its op ends at 110.
    b.Call(1, api.memcpy_async, 100 * kUs, 103 * kUs, {.correlation = 2, .bytes = 4});
    b.Device(104 * kUs, 110 * kUs, tf::DeviceOpKind::kMemcpy, "", 102, 7, 0, 4, 2, kinds ? 3 : 0,
             kinds ? 1 : 0);
    b.Correlate(2, 102);
    const Timeline t = testing::ReadOrDie(b);
    const std::vector<CallClass> c = ClassifyCalls(t, 0, AttributionOptions{});
    REQUIRE(c.size() == 2);
    CHECK(c[0] == (kinds ? CallClass::kNonBlocking : CallClass::kSync));
    CHECK(c[1] == (kinds ? CallClass::kSync : CallClass::kNonBlocking));
  }
}

TEST_CASE("sync rule 1 then remainder by thread activity", "[attribution]") {
  TraceBuilder b;
  auto api = testing::AddStandardApis(&b);
  b.Submit(1, api.launch, 0, 5 * kUs, 10 * kUs, 1010 * kUs);
  b.Call(1, api.sync, 900 * kUs, 1012 * kUs);
  b.Submit(1, api.launch, 1500 * kUs, 1505 * kUs, 1510 * kUs, 1600 * kUs);
  Report r = testing::AnalyzeOrDie(b);
  REQUIRE(r.steps.size() == 1);
  CHECK(r.step_source == "none");
  const StepStats& s = r.steps[0];
  CHECK(s.start_ns == 0);
  CHECK(s.end_ns == 1600 * kUs);
  CHECK(s.gpu_busy_ns == 1090 * kUs);
  CHECK(s.gpu_idle_ns == 510 * kUs);
  CHECK(CauseOf(s.idle_by_cause, Cause::kSync) == 110 * kUs);
  CHECK(CauseOf(s.idle_by_cause, Cause::kHostWait) == 380 * kUs);
  CHECK(CauseOf(s.idle_by_cause, Cause::kLaunchOverhead) == 20 * kUs);  // 10 before K1, 10 before K2
  CheckInvariants(r);
  REQUIRE(r.hotspots.size() == 1);
  CHECK(r.hotspots[0].idle_caused_ns == 110 * kUs);
  CHECK(r.hotspots[0].blocked_ns == 112 * kUs);
}

// Guards the idle-gap list the timeline writers draw: the gaps tile each
// step's idle cause by cause, and rule 1's piece points at the sync call.
TEST_CASE("idle gaps sum to the steps' causes and name the sync", "[attribution]") {
  TraceBuilder b;
  auto api = testing::AddStandardApis(&b);
  b.Submit(1, api.launch, 0, 5 * kUs, 10 * kUs, 1010 * kUs);
  b.Call(1, api.sync, 900 * kUs, 1012 * kUs);
  b.Submit(1, api.launch, 1500 * kUs, 1505 * kUs, 1510 * kUs, 1600 * kUs);
  ProcessAnalysis d;
  d.timeline = testing::ReadOrDie(b, "gaps.sstrace");
  auto r = AnalyzeTimeline(d.timeline, {}, &d);
  REQUIRE(r.ok());
  CauseNs sum{};
  int64_t last_end = 0;
  for (const IdleGap& g : d.gaps) {
    CHECK(g.start_ns >= last_end);
    CHECK(g.end_ns > g.start_ns);
    last_end = g.end_ns;
    sum[static_cast<int>(g.cause)] += g.end_ns - g.start_ns;
  }
  CHECK(sum == r->steps[0].idle_by_cause);
  REQUIRE(!d.gaps.empty());
  // [1010, 1120): rule 1, pointing at the sync call.
  const IdleGap* sync = nullptr;
  for (const IdleGap& g : d.gaps) {
    if (g.cause == Cause::kSync) sync = &g;
  }
  REQUIRE(sync != nullptr);
  CHECK(sync->start_ns == 1010 * kUs);
  CHECK(sync->end_ns == 1120 * kUs);
  REQUIRE(sync->call >= 0);
  CHECK(d.timeline.Api(d.timeline.calls[sync->call].api).category == tf::ApiCategory::kSync);
  REQUIRE(d.hotspot_of_call.size() == d.timeline.calls.size());
  CHECK(d.hotspot_of_call[sync->call] == 0);
}

// Guards rule 1's counterfactual for a synchronous copy that returns once
// its copy has started (pageable host-to-device, NVIDIA's staged copy): the
// host waited for the queue, the device drained when the copy ended, and
// the host's work after the call is what it could have overlapped.
TEST_CASE("rule 1 holds a synchronous copy until its own op ends", "[attribution]") {
  TraceBuilder b;
  auto api = testing::AddStandardApis(&b);
  b.Submit(1, api.launch, 0, 5 * kUs, 10 * kUs, 1010 * kUs);
  // Enters at 20 us, returns at 1011 us when its copy starts; the copy ends
  // at 1014 us; the next launch comes 600 us later.
  b.Submit(1, api.memcpy, 20 * kUs, 1011 * kUs, 1010 * kUs, 1014 * kUs,
           tf::DeviceOpKind::kMemcpy, "");
  b.Submit(1, api.launch, 1614 * kUs, 1616 * kUs, 1620 * kUs, 1700 * kUs);
  Report r = testing::AnalyzeOrDie(b);
  const StepStats& s = r.steps[0];
  // [1014, 1620): 606 us; rule 1 gives min(606, 994) to the copy.
  CHECK(CauseOf(s.idle_by_cause, Cause::kSync) == 606 * kUs);
  REQUIRE(r.hotspots.size() == 1);
  CHECK(r.hotspots[0].api == "cudaMemcpy");
  CHECK(r.hotspots[0].idle_caused_ns == 606 * kUs);
  CheckInvariants(r);
}

// Guards the other side: a synchronous copy made when the device was
// already idle waited for nothing, so the idle after it is not its doing.
TEST_CASE("rule 1 gives nothing to a copy into an empty queue", "[attribution]") {
  TraceBuilder b;
  auto api = testing::AddStandardApis(&b);
  b.Submit(1, api.launch, 0, 5 * kUs, 10 * kUs, 500 * kUs);
  b.Submit(1, api.memcpy, 600 * kUs, 605 * kUs, 600 * kUs, 640 * kUs,
           tf::DeviceOpKind::kMemcpy, "");
  b.Submit(1, api.launch, 1500 * kUs, 1505 * kUs, 1510 * kUs, 1600 * kUs);
  Report r = testing::AnalyzeOrDie(b);
  const StepStats& s = r.steps[0];
  CHECK(CauseOf(s.idle_by_cause, Cause::kSync) == 0);
  CHECK(CauseOf(s.idle_by_cause, Cause::kHostWait) > 800 * kUs);
  for (const Hotspot& h : r.hotspots) CHECK(h.idle_caused_ns == 0);
  CheckInvariants(r);
}

// Guards rule 1's precondition: an op submitted before the host entered the
// synchronizing call, and started late by a device-side dependency, is not
// the sync's doing: device_wait, and the sync caused no idle.
TEST_CASE("rule 1 skips ops submitted before the sync", "[attribution]") {
  TraceBuilder b;
  auto api = testing::AddStandardApis(&b);
  b.Submit(1, api.launch, 0, 5 * kUs, 10 * kUs, 100 * kUs);
  // Submitted at 20 us, waits on another device's event until 900 us.
  b.Submit(1, api.launch, 20 * kUs, 25 * kUs, 900 * kUs, 1000 * kUs);
  b.Call(1, api.sync, 30 * kUs, 1002 * kUs);
  Report r = testing::AnalyzeOrDie(b);
  const StepStats& s = r.steps[0];
  CHECK(s.gpu_idle_ns == 810 * kUs);  // 10 us before the first kernel
  CHECK(CauseOf(s.idle_by_cause, Cause::kSync) == 0);
  // [100, 900): launch latency after the second launch returned (25 + 20
  // us) has long passed.
  CHECK(CauseOf(s.idle_by_cause, Cause::kDeviceWait) == 800 * kUs);
  for (const Hotspot& h : r.hotspots) CHECK(h.idle_caused_ns == 0);
  CheckInvariants(r);
}

// Guards rule 1's cap: the sync gets at most the interval, and what remains
// while the thread is still inside the sync is also `sync` (rule 2).
TEST_CASE("sync spanning the whole gap", "[attribution]") {
  TraceBuilder b;
  auto api = testing::AddStandardApis(&b);
  b.Submit(1, api.launch, 0, 5 * kUs, 10 * kUs, 1010 * kUs);
  b.Call(1, api.sync, 20 * kUs, 1012 * kUs);
  b.Submit(1, api.launch, 1013 * kUs, 1015 * kUs, 1020 * kUs, 1100 * kUs);
  Report r = testing::AnalyzeOrDie(b);
  const StepStats& s = r.steps[0];
  // [1010, 1020): rule 1 gives min(10, 990) = 10 us to sync.
  CHECK(CauseOf(s.idle_by_cause, Cause::kSync) == 10 * kUs);
  CHECK(r.hotspots[0].idle_caused_ns == 10 * kUs);
  CheckInvariants(r);
}

// Guards host_wait: a long host pause between launches with no sync.
TEST_CASE("host_wait between launches", "[attribution]") {
  TraceBuilder b;
  auto api = testing::AddStandardApis(&b);
  b.Submit(1, api.launch, 0, 5 * kUs, 10 * kUs, 20 * kUs);
  b.Submit(1, api.launch, 1000 * kUs, 1005 * kUs, 1010 * kUs, 1020 * kUs);
  Report r = testing::AnalyzeOrDie(b);
  const StepStats& s = r.steps[0];
  CHECK(CauseOf(s.idle_by_cause, Cause::kHostWait) == 980 * kUs);
  CHECK(CauseOf(s.idle_by_cause, Cause::kLaunchOverhead) == 20 * kUs);
  CHECK(CauseOf(s.idle_by_cause, Cause::kHostBusy) == 0);
  CHECK(r.hotspots.empty());
  CheckInvariants(r);
}

// Guards launch_overhead: short kernels launched back to back with host
// gaps under the 50 us dispatch threshold.
TEST_CASE("launch_overhead for launch-bound stretches", "[attribution]") {
  TraceBuilder b;
  auto api = testing::AddStandardApis(&b);
  for (int i = 0; i < 10; ++i) {
    const int64_t t0 = i * 15 * kUs;
    b.Submit(1, api.launch, t0, t0 + 5 * kUs, t0 + 8 * kUs, t0 + 10 * kUs);
  }
  Report r = testing::AnalyzeOrDie(b);
  const StepStats& s = r.steps[0];
  CHECK(s.gpu_idle_ns > 0);
  CHECK(CauseOf(s.idle_by_cause, Cause::kLaunchOverhead) == s.gpu_idle_ns);
  CheckInvariants(r);
  // q6: every kernel (2 us) is shorter than its launch call (5 us).
  CHECK(r.questions[5].id == "q6");
  CHECK(r.questions[5].answer == "yes");
}

// Guards device_wait: the op was submitted long before the gap, yet started
// late (a cross-stream dependency).
TEST_CASE("device_wait when the submitted op starts late", "[attribution]") {
  TraceBuilder b;
  auto api = testing::AddStandardApis(&b);
  b.Submit(1, api.launch, 0, 5 * kUs, 10 * kUs, 1000 * kUs);
  b.Submit(1, api.launch, 6 * kUs, 8 * kUs, 2000 * kUs, 2100 * kUs);
  Report r = testing::AnalyzeOrDie(b);
  const StepStats& s = r.steps[0];
  CHECK(CauseOf(s.idle_by_cause, Cause::kDeviceWait) == 1000 * kUs);
  CheckInvariants(r);
}

// Guards the split at the submitting call's return: host time before it by
// activity, launch latency, then device_wait.
TEST_CASE("device_wait after launch latency", "[attribution]") {
  TraceBuilder b;
  auto api = testing::AddStandardApis(&b);
  b.Submit(1, api.launch, 0, 5 * kUs, 10 * kUs, 100 * kUs);
  // Launched during the gap; starts 100 us after its call returned.
  b.Submit(1, api.launch, 200 * kUs, 205 * kUs, 305 * kUs, 400 * kUs);
  Report r = testing::AnalyzeOrDie(b);
  const StepStats& s = r.steps[0];
  // [100, 200) host_wait (gap 195 us), [200, 205) in the launch, [205, 225)
  // latency, [225, 305) device_wait.
  CHECK(CauseOf(s.idle_by_cause, Cause::kHostWait) == 100 * kUs);
  CHECK(CauseOf(s.idle_by_cause, Cause::kLaunchOverhead) == (10 + 5 + 20) * kUs);
  CHECK(CauseOf(s.idle_by_cause, Cause::kDeviceWait) == 80 * kUs);
  CheckInvariants(r);
}

// Guards comm: the launching thread inside an NCCL call during the gap.
TEST_CASE("comm while inside an NCCL call", "[attribution]") {
  TraceBuilder b;
  auto api = testing::AddStandardApis(&b);
  b.Submit(1, api.launch, 0, 5 * kUs, 10 * kUs, 100 * kUs);
  b.Submit(1, api.nccl, 90 * kUs, 300 * kUs, 305 * kUs, 400 * kUs, tf::DeviceOpKind::kNccl,
           "ncclKernel_AllReduce");
  Report r = testing::AnalyzeOrDie(b);
  const StepStats& s = r.steps[0];
  CHECK(CauseOf(s.idle_by_cause, Cause::kComm) == 200 * kUs);
  CHECK(CauseOf(s.idle_by_cause, Cause::kLaunchOverhead) == 15 * kUs);  // 10 before K1, 5 latency
  CHECK(s.busy_by_kind.comm == 95 * kUs);
  CHECK(s.busy_by_kind.compute == 90 * kUs);
  CheckInvariants(r);
}

// Guards trailing idle (no op starts at the end of the gap): charged by the
// launching thread's activity; a step without device ops ends with its host
// range.
TEST_CASE("trailing idle is charged by the host thread", "[attribution][steps]") {
  TraceBuilder b;
  auto api = testing::AddStandardApis(&b);
  b.Range(1, 0, 1000 * kUs, "step 0");
  b.Submit(1, api.launch, 0, 5 * kUs, 10 * kUs, 500 * kUs);
  b.Range(1, 1000 * kUs, 3000 * kUs, "step 1");
  b.Call(1, api.alloc, 1500 * kUs, 1510 * kUs);
  Report r = testing::AnalyzeOrDie(b);
  REQUIRE(r.steps.size() == 2);
  CHECK(r.step_source == "marker");
  CHECK(r.steps[1].start_ns == 500 * kUs);
  CHECK(r.steps[1].end_ns == 3000 * kUs);
  CHECK(CauseOf(r.steps[1].idle_by_cause, Cause::kHostWait) == 2490 * kUs);
  CHECK(CauseOf(r.steps[1].idle_by_cause, Cause::kLaunchOverhead) == 10 * kUs);
  CheckInvariants(r);
}

// Guards the busy split: copies and overlapping kernels.
TEST_CASE("busy split into compute, copy and comm", "[attribution]") {
  TraceBuilder b;
  auto api = testing::AddStandardApis(&b);
  b.Submit(1, api.memcpy_async, 0, 5 * kUs, 10 * kUs, 50 * kUs, tf::DeviceOpKind::kMemcpy, "");
  b.Submit(1, api.launch, 6 * kUs, 8 * kUs, 40 * kUs, 100 * kUs);  // overlaps the copy
  Report r = testing::AnalyzeOrDie(b);
  const StepStats& s = r.steps[0];
  CHECK(s.busy_by_kind.copy == 30 * kUs);
  CHECK(s.busy_by_kind.compute == 60 * kUs);
  CHECK(s.gpu_busy_ns == 90 * kUs);
  CheckInvariants(r);
}

// Guards the sweep's order of ends: a kernel inside a longer copy ends
// first, and the copy alone is busy after it (the ends are taken earliest
// first, not in the order the ops started).
TEST_CASE("an op inside a longer one ends first", "[attribution]") {
  TraceBuilder b;
  auto api = testing::AddStandardApis(&b);
  b.Submit(1, api.memcpy_async, 0, 5 * kUs, 10 * kUs, 100 * kUs, tf::DeviceOpKind::kMemcpy, "");
  b.Submit(1, api.launch, 6 * kUs, 8 * kUs, 20 * kUs, 50 * kUs);   // inside the copy
  b.Submit(1, api.launch, 9 * kUs, 11 * kUs, 30 * kUs, 40 * kUs);  // inside both
  b.Submit(1, api.launch, 140 * kUs, 145 * kUs, 150 * kUs, 160 * kUs);
  Report r = testing::AnalyzeOrDie(b);
  const StepStats& s = r.steps[0];
  CHECK(s.busy_by_kind.copy == 60 * kUs);
  CHECK(s.busy_by_kind.compute == 40 * kUs);
  CHECK(s.gpu_busy_ns == 100 * kUs);
  CheckInvariants(r);
}

// Guards the synchronizing-call rule: categories, the async flag, and
// observed blocking.
TEST_CASE("classification of synchronizing calls", "[attribution]") {
  TraceBuilder b;
  auto api = testing::AddStandardApis(&b);
  b.Submit(1, api.launch, 0, 5 * kUs, 10 * kUs, 1000 * kUs);                 // 0 launch
  b.Call(1, api.sync, 6 * kUs, 7 * kUs);                                       // 1 sync
  b.Call(1, api.free, 8 * kUs, 9 * kUs);                                       // 2 free
  b.Submit(1, api.memcpy, 10 * kUs, 11 * kUs, 1000 * kUs, 1001 * kUs,
           tf::DeviceOpKind::kMemcpy, "");                                     // 3 sync copy
  b.Submit(1, api.memcpy_async, 12 * kUs, 13 * kUs, 1001 * kUs, 1002 * kUs,
           tf::DeviceOpKind::kMemcpy, "");                                     // 4 async, returns early
  b.Submit(1, api.memcpy_async, 14 * kUs, 1010 * kUs, 1002 * kUs, 1003 * kUs,
           tf::DeviceOpKind::kMemcpy, "");                                     // 5 outlived its op
  b.Call(1, api.other, 1011 * kUs, 1012 * kUs);                                // 6 short other
  b.Submit(1, api.launch, 1013 * kUs, 1014 * kUs, 1020 * kUs, 3000 * kUs);   // 7 launch
  b.Call(1, api.other, 1015 * kUs, 1200 * kUs);                                // 8 long while busy
  b.Call(1, api.alloc, 1300 * kUs, 1500 * kUs);                                // 9 alloc
  const uint16_t free_async = b.Api("cuMemFreeAsync", tf::ApiCategory::kFree, tf::kApiAsync);
  const uint16_t dtod = b.Api("cuMemcpyDtoD_v2", tf::ApiCategory::kCopy, tf::kApiSubmits);
  b.Call(1, free_async, 1600 * kUs, 1601 * kUs);                               // 10 async free
  b.Submit(1, dtod, 1602 * kUs, 1603 * kUs, 3000 * kUs, 3010 * kUs,
           tf::DeviceOpKind::kMemcpy, "");                                     // 11 DtoD, returns early
  Timeline t = testing::ReadOrDie(b);
  auto c = ClassifyCalls(t, 0, AttributionOptions{});
  REQUIRE(c.size() == 12);
  CHECK(c[0] == CallClass::kNonBlocking);
  CHECK(c[1] == CallClass::kSync);
  CHECK(c[2] == CallClass::kSync);
  CHECK(c[3] == CallClass::kSync);
  CHECK(c[4] == CallClass::kNonBlocking);
  CHECK(c[5] == CallClass::kSync);
  CHECK(c[6] == CallClass::kNonBlocking);
  CHECK(c[7] == CallClass::kNonBlocking);
  CHECK(c[8] == CallClass::kSync);
  CHECK(c[9] == CallClass::kNonBlocking);
  CHECK(c[10] == CallClass::kNonBlocking);
  CHECK(c[11] == CallClass::kNonBlocking);
}

// Guards that the launching thread, not another thread, is examined: a
// second thread sleeping in a sync does not turn a host pause into `sync`.
TEST_CASE("attribution follows the submitting thread", "[attribution]") {
  TraceBuilder b;
  auto api = testing::AddStandardApis(&b);
  b.Submit(1, api.launch, 0, 5 * kUs, 10 * kUs, 100 * kUs);
  b.Call(2, api.event_sync, 50 * kUs, 900 * kUs);
  b.Submit(1, api.launch, 1000 * kUs, 1005 * kUs, 1010 * kUs, 1100 * kUs);
  Report r = testing::AnalyzeOrDie(b);
  const StepStats& s = r.steps[0];
  CHECK(CauseOf(s.idle_by_cause, Cause::kSync) == 0);
  CHECK(CauseOf(s.idle_by_cause, Cause::kHostWait) == 900 * kUs);
  CheckInvariants(r);
}

bool ReportHasDiag(const Report& r, DiagId id) {
  for (const Diagnostic& d : r.diagnostics) {
    if (d.id == id) return true;
  }
  return false;
}

// The host_wait scenario above ([20, 1000) of GPU idle in thread 1's gap
// [5, 1000) us between two launches) with CPU-time samples at the first
// launch's enter (t = 0) and the second's (t = 1000 us). `on_us`: the thread's
// CPU time in the gap, i.e. the samples differ by the 5 us of the first
// launch (on-CPU before the gap) plus on_us.
Report GapWithCpu(int64_t on_us, bool sample_at_end = true) {
  TraceBuilder b;
  auto api = testing::AddStandardApis(&b);
  b.Submit(1, api.launch, 0, 5 * kUs, 10 * kUs, 20 * kUs);
  b.Submit(1, api.launch, 1000 * kUs, 1005 * kUs, 1010 * kUs, 1020 * kUs);
  b.Cpu(1, 0, 1'000 * kUs);
  if (sample_at_end) b.Cpu(1, 1000 * kUs, (1'000 + 5 + on_us) * kUs);
  return testing::AnalyzeOrDie(b);
}

// Guards the on-CPU/off-CPU split of rule 2: the thread was on-CPU for 80%
// of its gap (796 of 995 us), so 80% of the gap's idle is host_busy.
TEST_CASE("host_busy from the thread's CPU-time samples", "[attribution]") {
  Report r = GapWithCpu(796);
  const StepStats& s = r.steps[0];
  CHECK(CauseOf(s.idle_by_cause, Cause::kHostBusy) == 784 * kUs);  // 980 us x 0.8
  CHECK(CauseOf(s.idle_by_cause, Cause::kHostWait) == 196 * kUs);
  CHECK(CauseOf(s.idle_by_cause, Cause::kLaunchOverhead) == 20 * kUs);
  CHECK_FALSE(ReportHasDiag(r, DiagId::kNoCpuTime));
  CheckInvariants(r);
  REQUIRE(r.questions.size() >= 3);
  CHECK(r.questions[2].id == "q3");
  CHECK(r.questions[2].evidence.find("80.0% on-CPU") != std::string::npos);
  CHECK(r.questions[2].evidence.find("mostly on-CPU") != std::string::npos);
}

// Guards that a sleeping thread stays host_wait when samples exist: the CPU
// clock hardly moved in the gap.
TEST_CASE("off-CPU gap stays host_wait with samples", "[attribution]") {
  Report r = GapWithCpu(0);
  const StepStats& s = r.steps[0];
  CHECK(CauseOf(s.idle_by_cause, Cause::kHostBusy) == 0);
  CHECK(CauseOf(s.idle_by_cause, Cause::kHostWait) == 980 * kUs);
  CHECK(r.questions[2].evidence.find("0.0% on-CPU") != std::string::npos);
  CheckInvariants(r);
}

// Guards the clamp: CPU time beyond the gap's length (another clock's skew,
// a hostile trace) makes the gap all host_busy, never more.
TEST_CASE("on-CPU estimate clamped to the gap", "[attribution]") {
  Report r = GapWithCpu(5000);
  const StepStats& s = r.steps[0];
  CHECK(CauseOf(s.idle_by_cause, Cause::kHostBusy) == 980 * kUs);
  CHECK(CauseOf(s.idle_by_cause, Cause::kHostWait) == 0);
  CheckInvariants(r);
}

// Guards the fallback: no sample at the gap's end means no estimate, so the
// gap stays host_wait; no_cpu_time is only for traces without any sample.
TEST_CASE("gap without a closing sample stays host_wait", "[attribution]") {
  Report r = GapWithCpu(796, /*sample_at_end=*/false);
  const StepStats& s = r.steps[0];
  CHECK(CauseOf(s.idle_by_cause, Cause::kHostBusy) == 0);
  CHECK(CauseOf(s.idle_by_cause, Cause::kHostWait) == 980 * kUs);
  CHECK_FALSE(ReportHasDiag(r, DiagId::kNoCpuTime));
}

// Guards the estimate's subtraction: CPU time spent between the last sample
// and the gap's start (a stretch of launches, taken as on-CPU) is not the
// gap's. Samples at 0 and 1000 us; launches until 300 us; gap [300, 1000).
TEST_CASE("on-CPU estimate subtracts the stretch before the gap", "[attribution]") {
  TraceBuilder b;
  auto api = testing::AddStandardApis(&b);
  for (int k = 0; k < 10; ++k) {  // launches every 30 us (gaps 25 us)
    b.Submit(1, api.launch, k * 30 * kUs, k * 30 * kUs + 5 * kUs, k * 30 * kUs + 6 * kUs,
             k * 30 * kUs + 7 * kUs);
  }
  b.Submit(1, api.launch, 295 * kUs, 300 * kUs, 301 * kUs, 302 * kUs);
  b.Submit(1, api.launch, 1000 * kUs, 1005 * kUs, 1010 * kUs, 1020 * kUs);
  b.Cpu(1, 0, 0);
  b.Cpu(1, 1000 * kUs, (300 + 350) * kUs);  // 300 us before the gap, 350 in it
  Report r = testing::AnalyzeOrDie(b);
  const StepStats& s = r.steps[0];
  // Gap idle [302, 1000) = 698 us, on-CPU share 350/700.
  CHECK(CauseOf(s.idle_by_cause, Cause::kHostBusy) == 349 * kUs);
  CHECK(CauseOf(s.idle_by_cause, Cause::kHostWait) == 349 * kUs);
  CheckInvariants(r);
}

// GapWithCpu's gap (thread 1, [5, 1000) us; GPU idle [20, 1000)) sampled by
// the recorder's kCpuSched: `on_ns` on-CPU and `preempted_ns` runnable but
// waiting for a CPU in the gap.
Report GapWithSched(int64_t on_ns, int64_t preempted_ns) {
  TraceBuilder b;
  auto api = testing::AddStandardApis(&b);
  b.Submit(1, api.launch, 0, 5 * kUs, 10 * kUs, 20 * kUs);
  b.Submit(1, api.launch, 1000 * kUs, 1005 * kUs, 1010 * kUs, 1020 * kUs);
  b.CpuSched(1, 0, 1'000 * kUs, 7 * kUs);
  b.CpuSched(1, 1000 * kUs, 1'005 * kUs + on_ns, 7 * kUs + preempted_ns);
  return testing::AnalyzeOrDie(b);
}

// Guards the three-way split of a long gap: 60% of it on-CPU, 20% runnable
// waiting for a CPU (run-queue delay), 20% asleep; the idle in it (980 us)
// splits the same way.
TEST_CASE("run-queue delay in a gap is host_preempted", "[attribution]") {
  Report r = GapWithSched(597 * kUs, 199 * kUs);
  const StepStats& s = r.steps[0];
  CHECK(CauseOf(s.idle_by_cause, Cause::kHostPreempted) == 196 * kUs);
  CHECK(CauseOf(s.idle_by_cause, Cause::kHostBusy) == 588 * kUs);
  CHECK(CauseOf(s.idle_by_cause, Cause::kHostWait) == 196 * kUs);
  CHECK(CauseOf(s.idle_by_cause, Cause::kLaunchOverhead) == 20 * kUs);
  CHECK_FALSE(ReportHasDiag(r, DiagId::kNoRunDelay));
  CHECK(r.questions[2].evidence.find("20.0% runnable waiting for a CPU") != std::string::npos);
  CheckInvariants(r);
}

// Guards the counterfactual for a short gap stretched by preemption: 955.2
// of its 995 us the thread waited for a CPU, so without the preemption it
// would have been a 39.8 us gap between launches (below the 50 us dispatch
// threshold): the preempted share is host_preempted, the rest
// launch_overhead (not host_busy or host_wait).
TEST_CASE("a short gap stretched by preemption stays launch dispatch", "[attribution]") {
  Report r = GapWithSched(30 * kUs, 955'200);
  const StepStats& s = r.steps[0];
  CHECK(CauseOf(s.idle_by_cause, Cause::kHostPreempted) == 940'800);  // 980 us x 0.96
  CHECK(CauseOf(s.idle_by_cause, Cause::kLaunchOverhead) == 39'200 + 20 * kUs);
  CHECK(CauseOf(s.idle_by_cause, Cause::kHostBusy) == 0);
  CHECK(CauseOf(s.idle_by_cause, Cause::kHostWait) == 0);
  CHECK(r.questions[2].evidence.find("mostly waiting for a CPU") != std::string::npos);
  CheckInvariants(r);
}

// Guards the stretch before a gap: the thread's last sample is 305 us before
// the gap, at the start of eleven launches 30 us apart (no sample: each gap
// under 40 us), in which its CPU clock moved 205 us. The 100 us it was off
// its CPU there, without a call that blocks, was waiting for a CPU: of the
// 300 us of run-queue delay the next sample shows, 200 us are the gap's.
// The gap [305, 1000) us holds no CPU time; its idle [307, 1000) splits by
// the gap's shares.
TEST_CASE("run-queue delay in the launch stretch before a gap stays out of the gap", "[attribution]") {
  TraceBuilder b;
  auto api = testing::AddStandardApis(&b);
  for (int64_t k = 0; k <= 10; ++k) {
    b.Submit(1, api.launch, k * 30 * kUs, k * 30 * kUs + 5 * kUs, k * 30 * kUs + 6 * kUs,
             k * 30 * kUs + 7 * kUs);
  }
  b.Submit(1, api.launch, 1000 * kUs, 1005 * kUs, 1010 * kUs, 1020 * kUs);
  b.CpuSched(1, 0, 1'000 * kUs, 7 * kUs);
  b.CpuSched(1, 1000 * kUs, 1'205 * kUs, 307 * kUs);
  Report r = testing::AnalyzeOrDie(b);
  int64_t preempted = 0, wait = 0, busy = 0;
  for (const StepStats& s : r.steps) {
    preempted += CauseOf(s.idle_by_cause, Cause::kHostPreempted);
    wait += CauseOf(s.idle_by_cause, Cause::kHostWait);
    busy += CauseOf(s.idle_by_cause, Cause::kHostBusy);
  }
  const int64_t idle = 693 * kUs, gap = 695 * kUs;
  CHECK(preempted == idle * (200 * kUs) / gap);  // the old rule gave 300 us of the gap's 695
  CHECK(busy == 0);
  CHECK(wait == idle - preempted);
  CheckInvariants(r);
}

// Guards the clamp: a run-queue delay beyond the gap's off-CPU time (a
// hostile trace) takes at most the off-CPU share, never on-CPU time.
TEST_CASE("run-queue delay clamped to the gap's off-CPU time", "[attribution]") {
  Report r = GapWithSched(597 * kUs, 5000 * kUs);
  const StepStats& s = r.steps[0];
  CHECK(CauseOf(s.idle_by_cause, Cause::kHostBusy) == 588 * kUs);
  CHECK(CauseOf(s.idle_by_cause, Cause::kHostPreempted) == 392 * kUs);
  CHECK(CauseOf(s.idle_by_cause, Cause::kHostWait) == 0);
  CheckInvariants(r);
}

// Guards the fallback: samples whose run-queue delay could not be read
// (kRunDelayUnknown) or that predate it (kCpu) split on/off-CPU only, and
// no_run_delay says so.
TEST_CASE("samples without run-queue delay: no host_preempted, no_run_delay", "[attribution]") {
  for (bool old_chunk : {true, false}) {
    TraceBuilder b;
    auto api = testing::AddStandardApis(&b);
    b.Submit(1, api.launch, 0, 5 * kUs, 10 * kUs, 20 * kUs);
    b.Submit(1, api.launch, 1000 * kUs, 1005 * kUs, 1010 * kUs, 1020 * kUs);
    if (old_chunk) {
      b.Cpu(1, 0, 1'000 * kUs);
      b.Cpu(1, 1000 * kUs, 1'801 * kUs);
    } else {
      b.CpuSched(1, 0, 1'000 * kUs, 7 * kUs);
      b.CpuSched(1, 1000 * kUs, 1'801 * kUs, tf::kRunDelayUnknown);
    }
    Report r = testing::AnalyzeOrDie(b);
    const StepStats& s = r.steps[0];
    CHECK(CauseOf(s.idle_by_cause, Cause::kHostPreempted) == 0);
    CHECK(CauseOf(s.idle_by_cause, Cause::kHostBusy) == 784 * kUs);
    CHECK(CauseOf(s.idle_by_cause, Cause::kHostWait) == 196 * kUs);
    CHECK(ReportHasDiag(r, DiagId::kNoRunDelay));
    CheckInvariants(r);
  }
}

// Guards compatibility: a trace without samples keeps every long gap
// host_wait and says so (no_cpu_time).
TEST_CASE("no samples: host_wait and no_cpu_time", "[attribution]") {
  TraceBuilder b;
  auto api = testing::AddStandardApis(&b);
  b.Submit(1, api.launch, 0, 5 * kUs, 10 * kUs, 20 * kUs);
  b.Submit(1, api.launch, 1000 * kUs, 1005 * kUs, 1010 * kUs, 1020 * kUs);
  Report r = testing::AnalyzeOrDie(b);
  CHECK(CauseOf(r.steps[0].idle_by_cause, Cause::kHostBusy) == 0);
  CHECK(ReportHasDiag(r, DiagId::kNoCpuTime));
  CHECK(r.questions[2].evidence.find("needs CPU-time samples") != std::string::npos);
}

}  // namespace
}  // namespace stallscope::analyzer
