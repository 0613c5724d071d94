// Tests of the what-if replay on a hand-built loop whose answers are worked
// out by hand: the graph replayed unchanged gives the trace back, a removed
// stream synchronize lets the device run back to back, scaled host waits
// shorten the loop by what they scaled.
#include "analyzer/analyze/replay.h"

#include <algorithm>
#include <limits>
#include <random>
#include <utility>

#include <catch2/catch.hpp>

#include "analyzer/analyze/analysis.h"
#include "analyzer/testing/test_util.h"

namespace stallscope::analyzer {
namespace {

using testing::kUs;
using testing::TraceBuilder;
namespace tf = stallscope::trace;

constexpr int kSteps = 6;
constexpr int64_t kGap = 100 * kUs;     // host time before each launch (no CPU samples: off-CPU)
constexpr int64_t kKernel = 1000 * kUs;  // the step's one kernel
constexpr int64_t kPeriod = kGap + 1015 * kUs;

// Each step: kGap of host time, a launch [T, T+5us) whose kernel runs
// [T+10us, T+1010us), a stream synchronize [T+6us, T+1015us), all inside a
// marked step range.
TraceBuilder SyncLoop() {
  TraceBuilder b;
  auto api = testing::AddStandardApis(&b);
  for (int k = 0; k < kSteps; ++k) {
    const int64_t step = 1'000'000 + k * kPeriod;
    const int64_t t = step + kGap;
    b.Range(1, step, step + kPeriod, "step");
    b.Submit(1, api.launch, t, t + 5 * kUs, t + 10 * kUs, t + 10 * kUs + kKernel);
    b.Call(1, api.sync, t + 6 * kUs, t + 1015 * kUs);
  }
  return b;
}

struct Replayed {
  Timeline timeline;
  Report report;
  ReplayStats stats;
};

Replayed Run(const Timeline& t, ReplayOptions o) {
  const std::vector<CallClass> classes = ClassifyCalls(t, 0, AttributionOptions{});
  Replayed r;
  r.timeline = Replay(t, classes, o, &r.stats);
  auto report = AnalyzeTimeline(r.timeline, AnalysisOptions{});
  REQUIRE(report.ok());
  r.report = std::move(*report);
  return r;
}

int64_t MeanStep(const Report& r) {
  REQUIRE(!r.steps.empty());
  int64_t sum = 0;
  for (const StepStats& s : r.steps) sum += s.end_ns - s.start_ns;
  return sum / static_cast<int64_t>(r.steps.size());
}

// Guards the replay's own error: unchanged, every call, op and range comes
// back at its time, and so does the report.
TEST_CASE("the graph replayed unchanged gives the trace back", "[replay]") {
  const Timeline t = testing::ReadOrDie(SyncLoop());
  Replayed r = Run(t, ReplayOptions{});
  REQUIRE(r.timeline.calls.size() == t.calls.size());
  for (size_t i = 0; i < t.calls.size(); ++i) {
    CHECK(r.timeline.calls[i].enter_ns == t.calls[i].enter_ns);
    CHECK(r.timeline.calls[i].exit_ns == t.calls[i].exit_ns);
  }
  REQUIRE(r.timeline.ops.size() == t.ops.size());
  for (size_t i = 0; i < t.ops.size(); ++i) {
    CHECK(r.timeline.ops[i].start_ns == t.ops[i].start_ns);
    CHECK(r.timeline.ops[i].end_ns == t.ops[i].end_ns);
    CHECK(r.timeline.ops[i].call == t.ops[i].call);
  }
  auto base = AnalyzeTimeline(t, AnalysisOptions{});
  REQUIRE(base.ok());
  CHECK(MeanStep(r.report) == MeanStep(*base));
  CHECK(r.report.totals.gpu_idle_ns == base->totals.gpu_idle_ns);
  CHECK(r.stats.waits_removed == 0);
}

// Guards removing a sync: without the wait, the host (110 us a step) runs
// ahead and the kernels run back to back, so a step is one kernel.
TEST_CASE("a removed synchronize lets the device run back to back", "[replay]") {
  const Timeline t = testing::ReadOrDie(SyncLoop());
  ReplayOptions o;
  o.remove_wait.assign(t.calls.size(), false);
  int removed = 0;
  for (size_t i = 0; i < t.calls.size(); ++i) {
    if (t.Api(t.calls[i].api).name == "cudaStreamSynchronize") {
      o.remove_wait[i] = true;
      ++removed;
    }
  }
  REQUIRE(removed == kSteps);
  Replayed r = Run(t, o);
  CHECK(r.stats.waits_removed == kSteps);
  REQUIRE(r.report.steps.size() == kSteps);
  // The ops follow one another with no gap after the first.
  for (size_t i = 1; i < r.timeline.ops.size(); ++i) {
    CHECK(r.timeline.ops[i].start_ns == r.timeline.ops[i - 1].end_ns);
  }
  // The first step opens at its range's start, 110 us before its kernel;
  // every later one is one kernel.
  for (size_t k = 1; k < r.report.steps.size(); ++k) {
    CHECK(r.report.steps[k].end_ns - r.report.steps[k].start_ns == kKernel);
  }
  // The syncs now return at once: each lasts what it lasted after the
  // kernel's end (5 us).
  for (size_t i = 0; i < r.timeline.calls.size(); ++i) {
    if (r.timeline.Api(r.timeline.calls[i].api).name == "cudaStreamSynchronize") {
      CHECK(r.timeline.calls[i].exit_ns - r.timeline.calls[i].enter_ns == 5 * kUs);
    }
  }
}

// Guards scaling host waits: the off-CPU gaps (no CPU samples) halve, the
// first one from its step range's start, and the loop stays bound by its
// sync, so each step is shorter by half a gap.
TEST_CASE("scaled host waits shorten the loop by what they scaled", "[replay]") {
  const Timeline t = testing::ReadOrDie(SyncLoop());
  ReplayOptions o;
  o.scale_host_wait = 0.5;
  Replayed r = Run(t, o);
  // Every step's gap, the first one's from its range's start.
  CHECK(r.stats.gaps_scaled == kSteps);
  CHECK(r.stats.gaps_without_cpu == kSteps);
  auto base = AnalyzeTimeline(t, AnalysisOptions{});
  REQUIRE(base.ok());
  REQUIRE(r.report.steps.size() == base->steps.size());
  // Marked steps tile the device timeline from one step's last op's end to
  // the next one's (the first from its range's start): every step is
  // shorter by half a gap, and so is its idle.
  for (size_t k = 0; k < r.report.steps.size(); ++k) {
    const StepStats& s = r.report.steps[k];
    const StepStats& b = base->steps[k];
    CHECK((b.end_ns - b.start_ns) - (s.end_ns - s.start_ns) == kGap / 2);
    CHECK(b.gpu_idle_ns - s.gpu_idle_ns == kGap / 2);
  }
  // Scaled to 1: the trace back.
  o.scale_host_wait = 1.0;
  Replayed same = Run(t, o);
  CHECK(MeanStep(same.report) == MeanStep(*base));
}

// Each step (220 us): 10 launches 20 us apart, each call 5 us, its kernel
// `kernel` long from 10 us after the call's entry; then a stream synchronize
// [S+200us, S+201us) that waits for nothing.
TraceBuilder LaunchLoop(int64_t kernel) {
  TraceBuilder b;
  auto api = testing::AddStandardApis(&b);
  for (int k = 0; k < kSteps; ++k) {
    const int64_t step = 1'000'000 + k * 220 * kUs;
    b.Range(1, step, step + 220 * kUs, "step");
    for (int i = 0; i < 10; ++i) {
      const int64_t t = step + i * 20 * kUs;
      b.Submit(1, api.launch, t, t + 5 * kUs, t + 10 * kUs, t + 10 * kUs + kernel);
    }
    b.Call(1, api.sync, step + 200 * kUs, step + 201 * kUs);
  }
  return b;
}

// Guards CUDA-graph capture: a launch-bound stretch (10 launches in 185 us
// for 20 us of kernels) becomes one launch, its kernels 1 us apart on the
// device; the host time between the folded launches goes, so a step is its
// first launch's kernel start (10 us), 10 kernels and 9 node gaps (29 us),
// and the 19 us of host time from the sync to the next step's first
// launch: 58 us.
TEST_CASE("a captured launch-bound stretch runs as one graph launch", "[replay]") {
  const Timeline t = testing::ReadOrDie(LaunchLoop(2 * kUs));
  ReplayOptions o;
  o.graph_node_ns = 1 * kUs;
  Replayed r = Run(t, o);
  CHECK(r.stats.stretches_captured == kSteps);
  CHECK(r.stats.launches_captured == 9 * kSteps);
  REQUIRE(r.timeline.ops.size() == 10 * kSteps);
  for (size_t i = 0; i < r.timeline.ops.size(); ++i) {
    if (i % 10 != 0) CHECK(r.timeline.ops[i].start_ns == r.timeline.ops[i - 1].end_ns + 1 * kUs);
  }
  REQUIRE(r.report.steps.size() == kSteps);
  for (size_t k = 1; k < r.report.steps.size(); ++k) {
    CHECK(r.report.steps[k].end_ns - r.report.steps[k].start_ns == 58 * kUs);
  }
  // A step range outside the trace's steps captures nothing.
  o.graph_windows = {{0, 1000}};
  CHECK(Run(t, o).stats.stretches_captured == 0);
}

// Guards the launch-bound rule: 30 us kernels (300 us of device work for
// 185 us of launching) are not captured, unless every stretch is asked
// for; and an off-CPU wait (no CPU samples) of 50 us or more between two
// launches splits a stretch.
TEST_CASE("only launch-bound stretches are captured by default", "[replay]") {
  const Timeline device_bound = testing::ReadOrDie(LaunchLoop(30 * kUs));
  ReplayOptions o;
  o.graph_node_ns = 1 * kUs;
  CHECK(Run(device_bound, o).stats.stretches_captured == 0);
  o.graph_every_stretch = true;
  CHECK(Run(device_bound, o).stats.stretches_captured == kSteps);

  TraceBuilder b;
  auto api = testing::AddStandardApis(&b);
  const int64_t s = 1'000'000;
  b.Range(1, s, s + 400 * kUs, "step");
  for (int64_t at : {0, 20, 40, 160, 180, 200}) {  // 115 us without a call between 45 and 160
    const int64_t t = s + at * kUs;
    b.Submit(1, api.launch, t, t + 5 * kUs, t + 10 * kUs, t + 12 * kUs);
  }
  ReplayOptions one;
  one.graph_node_ns = 1 * kUs;
  Replayed r = Run(testing::ReadOrDie(b), one);
  CHECK(r.stats.stretches_captured == 2);
  CHECK(r.stats.launches_captured == 4);
}

// Each step (2 ms): a 1 ms producer kernel on stream A, an event recorded
// after it, 500 us of host wait, a short kernel on stream B, B waiting for
// the event, and a consumer on B that starts 2 us after the producer ends;
// a synchronize of B, and host time to the next step.
TraceBuilder EventLoop() {
  TraceBuilder b;
  auto api = testing::AddStandardApis(&b);
  const uint16_t record = b.Api("cuEventRecord", tf::ApiCategory::kEvent, 0);
  const uint16_t wait = b.Api("cuStreamWaitEvent", tf::ApiCategory::kWait, 0);
  constexpr uint64_t kA = 0xa0, kB = 0xb0, kEvent = 0xe0;
  uint64_t external = 1;
  uint32_t cupti = 1;
  auto submit = [&](uint64_t handle, uint32_t stream, int64_t enter, int64_t start, int64_t end, const char* name) {
    b.Call(1, api.launch, enter, enter + 5 * kUs, {.correlation = external, .stream = handle});
    b.Device(start, end, tf::DeviceOpKind::kKernel, name, cupti, stream);
    b.Correlate(external++, cupti++);
  };
  for (int k = 0; k < kSteps; ++k) {
    const int64_t s = 1'000'000 + k * 2000 * kUs;
    b.Range(1, s, s + 2000 * kUs, "step");
    submit(kA, 7, s, s + 10 * kUs, s + 1010 * kUs, "producer");
    b.Call(1, record, s + 6 * kUs, s + 8 * kUs, {.stream = kA, .object = kEvent});
    submit(kB, 8, s + 508 * kUs, s + 520 * kUs, s + 620 * kUs, "batch");
    b.Call(1, wait, s + 514 * kUs, s + 515 * kUs, {.stream = kB, .object = kEvent});
    submit(kB, 8, s + 516 * kUs, s + 1012 * kUs, s + 1112 * kUs, "consumer");
    b.Call(1, api.sync, s + 522 * kUs, s + 1117 * kUs, {.stream = kB});
  }
  return b;
}

// Guards cross-stream event waits: without the host's waits, the short
// kernel on B runs early, and the consumer still starts 2 us after the
// producer it waits for (a replay keeping the measured delay after B's
// previous kernel would start it 500 us early); unchanged, the trace back.
TEST_CASE("an event wait keeps a consumer after its producer", "[replay]") {
  const Timeline t = testing::ReadOrDie(EventLoop());
  Replayed same = Run(t, ReplayOptions{});
  CHECK(same.stats.event_waits == kSteps);
  for (size_t i = 0; i < t.ops.size(); ++i) {
    CHECK(same.timeline.ops[i].start_ns == t.ops[i].start_ns);
    CHECK(same.timeline.ops[i].end_ns == t.ops[i].end_ns);
  }
  ReplayOptions o;
  o.scale_host_wait = 0;
  Replayed r = Run(t, o);
  const Timeline& x = r.timeline;
  auto named = [&](size_t i, std::string_view name) {
    auto it = x.strings.find(x.op_info[i].name);
    return it != x.strings.end() && it->second == name;
  };
  int checked = 0;
  for (size_t i = 0; i < x.ops.size(); ++i) {
    if (!named(i, "consumer")) continue;
    const DeviceOp* producer = nullptr;
    const DeviceOp* batch = nullptr;
    for (size_t j = 0; j < x.ops.size(); ++j) {
      if (x.ops[j].end_ns > x.ops[i].start_ns) continue;
      if (named(j, "producer") && (producer == nullptr || x.ops[j].end_ns > producer->end_ns)) producer = &x.ops[j];
      if (named(j, "batch") && (batch == nullptr || x.ops[j].end_ns > batch->end_ns)) batch = &x.ops[j];
    }
    REQUIRE(producer != nullptr);
    REQUIRE(batch != nullptr);
    CHECK(x.ops[i].start_ns == producer->end_ns + 2 * kUs);
    CHECK(x.ops[i].start_ns - batch->end_ns > 300 * kUs);  // the batch kernel ran early
    ++checked;
  }
  CHECK(checked == kSteps);
}

// Guards --scale-kernel: the loop's one kernel at half its time, and the
// synchronize after it returns that much sooner.
TEST_CASE("a scaled kernel moves what waits for it", "[replay]") {
  const Timeline t = testing::ReadOrDie(SyncLoop());
  ReplayOptions o;
  o.op_scale.assign(t.ops.size(), 0.5);
  Replayed r = Run(t, o);
  CHECK(r.stats.ops_scaled == kSteps);
  for (const DeviceOp& op : r.timeline.ops) CHECK(op.end_ns - op.start_ns == kKernel / 2);
  // Every step ends with its kernel's end, kKernel / 2 sooner.
  auto base = AnalyzeTimeline(t, AnalysisOptions{});
  REQUIRE(base.ok());
  CHECK(MeanStep(r.report) == MeanStep(*base) - kKernel / 2);
}

// Each step (4 ms): a 100 us kernel, a host function on its stream, a
// consumer that starts 3 ms after the kernel ends (the function's time) and
// a second one 2 us after it, then a synchronize.
TraceBuilder HostFuncLoop() {
  TraceBuilder b;
  auto api = testing::AddStandardApis(&b);
  const uint16_t host_func = b.Api("cuLaunchHostFunc", tf::ApiCategory::kHostFunc, tf::kApiSubmits);
  constexpr uint64_t kStream = 0xa0;
  uint64_t external = 1;
  uint32_t cupti = 1;
  auto submit = [&](int64_t enter, int64_t start, int64_t end, const char* name) {
    b.Call(1, api.launch, enter, enter + 5 * kUs, {.correlation = external, .stream = kStream});
    b.Device(start, end, tf::DeviceOpKind::kKernel, name, cupti, 7);
    b.Correlate(external++, cupti++);
  };
  for (int k = 0; k < kSteps; ++k) {
    const int64_t s = 1'000'000 + k * 4000 * kUs;
    b.Range(1, s, s + 4000 * kUs, "step");
    submit(s, s + 10 * kUs, s + 110 * kUs, "batch");
    b.Call(1, host_func, s + 6 * kUs, s + 8 * kUs, {.stream = kStream});
    submit(s + 9 * kUs, s + 3110 * kUs, s + 3310 * kUs, "consume_a");
    submit(s + 15 * kUs, s + 3312 * kUs, s + 3512 * kUs, "consume_b");
    b.Call(1, api.sync, s + 21 * kUs, s + 3515 * kUs, {.stream = kStream});
  }
  return b;
}

// Guards --scale-host-func: the consumer after the host function waits
// half the function's time (its delay beyond the least delay between two
// ops of the stream, 2 us), the second consumer follows it as before; the
// delay after a host function is not taken as the stream's least delay.
TEST_CASE("a scaled host function shortens the wait of the work behind it", "[replay]") {
  const Timeline t = testing::ReadOrDie(HostFuncLoop());
  Replayed same = Run(t, ReplayOptions{});
  CHECK(same.stats.after_host_func == kSteps);
  for (size_t i = 0; i < t.ops.size(); ++i) CHECK(same.timeline.ops[i].start_ns == t.ops[i].start_ns);
  ReplayOptions o;
  o.scale_host_func = 0.5;
  Replayed r = Run(t, o);
  const Timeline& x = r.timeline;
  REQUIRE(x.ops.size() == 3 * kSteps);
  for (int k = 0; k < kSteps; ++k) {
    const DeviceOp& batch = x.ops[3 * k];
    const DeviceOp& a = x.ops[3 * k + 1];
    const DeviceOp& b = x.ops[3 * k + 2];
    CHECK(a.start_ns - batch.end_ns == 2 * kUs + (3000 - 2) * kUs / 2);
    CHECK(b.start_ns - a.end_ns == 2 * kUs);
  }
  CHECK(MeanStep(r.report) < MeanStep(same.report) - 1000 * kUs);
}

// Guards the typical delays' counts: the median at index n / 2 of the
// sorted samples, as the replay takes it, clamped at 0; the least device
// delay; joined from parts in any split.
TEST_CASE("delay samples give the median and the least delay of what they hold", "[replay]") {
  std::mt19937_64 rng(20261207);
  for (const size_t n : {size_t{1}, size_t{2}, size_t{7}, size_t{1000}, size_t{1001}}) {
    CAPTURE(n);
    std::vector<int64_t> host, posts, device;
    DelaySamples whole, left, right;
    for (size_t i = 0; i < n; ++i) {
      host.push_back(static_cast<int64_t>(rng() % 40) - 5);  // repeats, and a few below 0
      posts.push_back(static_cast<int64_t>(rng() % 100000));
      device.push_back(static_cast<int64_t>(rng() % 3000) + 7);
      whole.AddHost(host.back());
      whole.AddPost(posts.back());
      whole.AddDevice(device.back());
      DelaySamples& half = i % 3 == 0 ? left : right;
      half.AddHost(host.back());
      half.AddPost(posts.back());
      half.AddDevice(device.back());
    }
    auto median = [](std::vector<int64_t> v) {
      std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
      return std::max<int64_t>(0, v[v.size() / 2]);
    };
    const TypicalDelays d = whole.Typical();
    CHECK(d.host_ns == median(host));
    CHECK(d.post_ns == median(posts));
    CHECK(d.device_min_ns == *std::min_element(device.begin(), device.end()));
    DelaySamples joined = left;
    joined.Add(right);
    CHECK(joined.host_count() == static_cast<int64_t>(n));
    const TypicalDelays j = joined.Typical();
    CHECK(j.host_ns == d.host_ns);
    CHECK(j.post_ns == d.post_ns);
    CHECK(j.device_min_ns == d.device_min_ns);
  }
  const TypicalDelays none = DelaySamples{}.Typical();
  CHECK(none.host_ns == 0);
  CHECK(none.device_min_ns == 0);
  CHECK(none.post_ns == 0);
}

// Guards the typical delays a part of a trace is replayed with (whatif by
// windows of steps): the samples of the calls entering in each of three
// host ranges, joined, are the whole timeline's; replayed with them given,
// the timeline is what its own give; given others, it moves.
TEST_CASE("a replay takes the typical delays it is given", "[replay]") {
  // Steps of 8 queued launches whose first waits a jittered launch latency
  // (host delay), the others their stream (device delay), then a
  // synchronize (its return after the last kernel).
  TraceBuilder b;
  auto api = testing::AddStandardApis(&b);
  std::mt19937_64 rng(7);
  int64_t t = 1'000'000;
  std::vector<int64_t> step_starts;
  for (int k = 0; k < 30; ++k) {
    const int64_t step = t;
    step_starts.push_back(step);
    t += 100 * kUs;
    int64_t d = 0;
    for (int i = 0; i < 8; ++i, t += 6 * kUs) {
      const auto jitter = static_cast<int64_t>(rng() % 5000);
      const int64_t start = i == 0 ? t + (k < 15 ? 5 : 14) * kUs + jitter : d + 1000 + jitter;
      d = start + 20 * kUs;
      b.Submit(1, api.launch, t, t + 4 * kUs, start, d);
    }
    b.Call(1, api.sync, t, d + 3 * kUs + static_cast<int64_t>(rng() % 4000));
    t = d + 20 * kUs;
    b.Range(1, step, t, "step");
  }
  const Timeline tl = testing::ReadOrDie(b);
  const std::vector<CallClass> classes = ClassifyCalls(tl, 0, AttributionOptions{});
  const DelaySamples own = ReplayDelaySamples(tl, classes, ReplayOptions{});
  CHECK(own.host_count() == 30);
  CHECK(own.post_count() == 30);
  const TypicalDelays typical = own.Typical();
  CHECK(typical.host_ns >= 5 * kUs);
  CHECK(typical.device_min_ns >= 1000);
  CHECK(typical.post_ns >= 3 * kUs);
  DelaySamples parts;
  for (const auto& [from, to] : {std::pair{int64_t{0}, step_starts[10]}, std::pair{step_starts[10], step_starts[21]},
                                 std::pair{step_starts[21], std::numeric_limits<int64_t>::max()}}) {
    parts.Add(ReplayDelaySamples(tl, classes, ReplayOptions{.counted = HostRange{from, to}}));
  }
  CHECK(parts.host_count() == 30);
  const TypicalDelays joined = parts.Typical();
  CHECK(joined.host_ns == typical.host_ns);
  CHECK(joined.device_min_ns == typical.device_min_ns);
  CHECK(joined.post_ns == typical.post_ns);
  // Kernels ten times faster: every launch starts the host delay after its
  // call, the typical one where its stream had bound it.
  ReplayOptions faster;
  faster.op_scale.assign(tl.ops.size(), 0.1);
  const Timeline a = Replay(tl, classes, faster);
  faster.typical = typical;
  const Timeline given = Replay(tl, classes, faster);
  faster.typical->host_ns += 7 * kUs;
  const Timeline later = Replay(tl, classes, faster);
  REQUIRE(a.ops.size() == tl.ops.size());
  REQUIRE(given.ops.size() == tl.ops.size());
  REQUIRE(later.ops.size() == tl.ops.size());
  int moved = 0;
  for (size_t o = 0; o < tl.ops.size(); ++o) {
    CHECK(given.ops[o].start_ns == a.ops[o].start_ns);
    CHECK(given.ops[o].end_ns == a.ops[o].end_ns);
    moved += later.ops[o].start_ns > a.ops[o].start_ns;
  }
  CHECK(moved >= 30 * 7);  // at least the launches their stream had bound
}

}  // namespace
}  // namespace stallscope::analyzer
