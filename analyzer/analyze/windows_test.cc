// Attribution by windows of steps gives the whole timeline's attribution:
// the same step rows, gaps and rule-1 charges, for windows of every size,
// on random training loops and on the sampled-timing trace.
#include "analyzer/analyze/windows.h"
#include "analyzer/analyze/hotspots.h"
#include "analyzer/analyze/stream.h"
#include "trace_codec.h"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "analyzer/testing/test_util.h"
#include <catch2/catch.hpp>

namespace stallscope::analyzer {
namespace {

using testing::CallOptions;
using testing::kUs;
using testing::TraceBuilder;
namespace tf = stallscope::trace;

auto Row(const StepStats& s) {
  return std::make_tuple(s.index, s.device, s.start_ns, s.end_ns, s.host_start_ns, s.host_end_ns,
                         s.gpu_busy_ns, s.gpu_idle_ns, s.idle_by_cause, s.busy_by_kind.compute,
                         s.busy_by_kind.copy, s.busy_by_kind.comm, s.sync_count, s.launches);
}

auto GapRow(const IdleGap& g) {
  return std::make_tuple(g.start_ns, g.end_ns, static_cast<int>(g.cause), g.step, g.call);
}

auto HotRow(const Hotspot& h) {
  return std::make_tuple(h.api, h.explicit_sync, h.site.file, h.site.line, h.site.function, h.stack.size(),
                         h.count, h.steps, h.blocked_ns, h.idle_caused_ns, h.sites_lost, h.fingerprint,
                         h.suggestion);
}

std::vector<std::pair<size_t, int64_t>> Caused(const IdleCaused& c) {
  std::vector<std::pair<size_t, int64_t>> out;
  c.ForEach([&](size_t call, int64_t ns) { out.push_back({call, ns}); });
  std::sort(out.begin(), out.end());
  return out;
}

// Every window size gives the whole sweep's rows, gaps and charges.
void CheckWindows(const Timeline& t, size_t max_window) {
  auto pattern = CompileStepPattern(kDefaultStepPattern);
  REQUIRE(pattern.ok());
  StepPlan plan = FindSteps(t, *pattern, BusiestDevice(t));
  KeepTimedSteps(t, &plan);
  const AttributionOptions options;
  const std::vector<CallClass> classes = ClassifyCalls(t, plan.device, options);
  const Attribution whole = AttributeIdle(t, plan, classes, options);
  for (size_t per = 1; per <= max_window; ++per) {
    CAPTURE(per, plan.steps.size());
    const Attribution w = AttributeIdleByWindows(t, plan, classes, options, per);
    REQUIRE(w.steps.size() == whole.steps.size());
    for (size_t k = 0; k < w.steps.size(); ++k) {
      CAPTURE(k);
      CHECK(Row(w.steps[k]) == Row(whole.steps[k]));
    }
    REQUIRE(w.gaps.size() == whole.gaps.size());
    for (size_t k = 0; k < w.gaps.size(); ++k) {
      CAPTURE(k);
      CHECK(GapRow(w.gaps[k]) == GapRow(whole.gaps[k]));
    }
    CHECK(Caused(w.idle_caused) == Caused(whole.idle_caused));
  }
}

// A random training loop: steps marked on thread 1 (some with a host gap
// between them, some submitting nothing), each with an input wait, kernels
// queued behind one another, copies, synchronizing read-backs, a long
// synchronize reaching into the next step, uploads that return before
// their copy ends, kernels the device starts late, kernels launched between
// steps, work from a second thread and CPU-time samples, runs of steps that
// leave the device idle (host calls only) or under one kernel that outlasts
// them, calls holding a launch, calls and ops of no length, ops that start
// together, ops of no call and ops on another device; or, unmarked, the
// same without ranges.
TraceBuilder RandomLoop(uint32_t seed, bool marked) {
  std::mt19937 rng(seed);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  TraceBuilder b;
  auto api = testing::AddStandardApis(&b);
  const uint32_t site = b.PythonStack({{"train.py", "step", 7}});
  int64_t h = 100 * kUs;
  int64_t d = 0;  // when the device is free
  int64_t cpu = 0;
  int64_t delay = 0;
  auto sample = [&](uint32_t tid, int64_t at) {
    cpu += pick(0, static_cast<int>((at - h) / 2 + 1));
    delay += pick(0, 30) * kUs;
    b.CpuSched(tid, static_cast<uint64_t>(at), static_cast<uint64_t>(cpu), static_cast<uint64_t>(delay));
  };
  uint32_t loose = 1'000'000;  // CUPTI ids of ops no call submitted
  uint32_t item = 0;           // the read-backs' ids
  int64_t h2 = 0;    // thread 2's last time
  int64_t cpu2 = 0;  // and its CPU time
  const int steps = pick(3, 14);
  int idle_run = 0;  // steps left in a run of steps without kernels
  for (int k = 0; k < steps; ++k) {
    const int64_t start = h;
    if (pick(0, 3) == 0) {  // an input wait, sampled at its end
      h += pick(20, 600) * kUs;
      sample(1, h);
    }
    if (idle_run == 0 && pick(0, 9) == 0) {
      idle_run = pick(2, 6);
      if (pick(0, 1) == 0) {  // under one kernel that outlasts them (another stream)
        const int64_t op = h + 10 * kUs;
        b.Submit(1, api.launch, h, h + 5 * kUs, op, op + idle_run * pick(300, 900) * kUs);
        h += 5 * kUs;
      }
    }
    const bool idle = idle_run > 0;
    if (idle) {  // host calls only: queries, some of no length
      --idle_run;
      for (int i = pick(1, 4); i > 0; --i) {
        h += pick(1, 100) * kUs;
        const int64_t len = pick(0, 2) == 0 ? 0 : pick(1, 20) * kUs;
        b.Call(1, api.other, static_cast<uint64_t>(h), static_cast<uint64_t>(h + len));
        h += len;
      }
    }
    const bool empty = idle || pick(0, 6) == 0;
    const int kernels = empty ? 0 : pick(1, 6);
    for (int i = 0; i < kernels; ++i) {
      h += pick(1, 80) * kUs;
      const int odd = pick(0, 11);
      if (odd == 0) {  // a call holding a launch (a library call's own)
        const int64_t op = std::max(h + 12 * kUs, d);
        d = op + pick(0, 1) * pick(5, 100) * kUs;  // at times of no length
        b.Call(1, api.other, static_cast<uint64_t>(h), static_cast<uint64_t>(h + 20 * kUs));
        b.Submit(1, api.launch, h + 2 * kUs, h + 6 * kUs, op, d);
        h += 20 * kUs;
        continue;
      }
      if (odd == 1) {  // two kernels starting together, one of no call
        const int64_t op = std::max(h + 8 * kUs, d);
        b.Submit(1, api.launch, h, h + 5 * kUs, op, op + pick(5, 50) * kUs);
        b.Device(op, op + pick(5, 50) * kUs, tf::DeviceOpKind::kKernel, "loose", loose++);
        d = op + 50 * kUs;
        h += 5 * kUs;
        continue;
      }
      if (odd == 2) {  // a kernel on another device
        b.Device(h, h + pick(5, 500) * kUs, tf::DeviceOpKind::kKernel, "other", loose++, 7, 1);
      }
      // At times the device starts it late (waiting on another stream).
      const int64_t late = pick(0, 7) == 0 ? pick(50, 800) * kUs : pick(0, 5) * kUs;
      const int64_t op = std::max(h + 8 * kUs, d) + late;
      d = op + pick(5, 400) * kUs;
      b.Submit(1, api.launch, h, h + 5 * kUs, op, d);
      h += 5 * kUs;
      if (pick(0, 4) == 0) {  // a second thread's kernel, later on the device
        const int64_t at = h + pick(0, 30) * kUs;
        const int64_t o2 = std::max(at + 10 * kUs, d);
        d = o2 + pick(5, 100) * kUs;
        b.Submit(2, api.launch, at, at + 4 * kUs, o2, d);
        if (at > h2 && pick(0, 2) == 0) {  // and waits for it, sampled after
          const int64_t exit = d + pick(1, 30) * kUs;
          CallOptions o;
          o.python_stack = site;
          b.Call(2, api.event_sync, static_cast<uint64_t>(at + 5 * kUs), static_cast<uint64_t>(exit), o);
          cpu2 += pick(0, 50) * kUs;
          b.CpuSched(2, static_cast<uint64_t>(exit), static_cast<uint64_t>(cpu2), 0);
          h2 = exit;
        }
        h2 = std::max(h2, at + 4 * kUs);
      }
      if (pick(0, 9) == 0) {  // a call entering before the last one returned, returning after it
        b.Call(1, api.other, static_cast<uint64_t>(h - 2 * kUs), static_cast<uint64_t>(h + 10 * kUs));
        h += 10 * kUs;
      }
    }
    if (!empty && pick(0, 3) == 0) {
      // An .item()-style read-back: an async copy to the host (its
      // direction only in its op), then a synchronize from the same line
      // and stream, which joins the copy's hotspot.
      h += pick(1, 20) * kUs;
      const int64_t op = std::max(h + 5 * kUs, d);
      d = op + 2 * kUs;
      const uint64_t bytes = static_cast<uint64_t>(pick(1, 2) == 1 ? 4 : 4096);
      CallOptions o;
      o.correlation = 5'000'000 + item;
      o.stream = 7;
      o.python_stack = site;
      o.bytes = bytes;
      b.Call(1, api.memcpy_async, static_cast<uint64_t>(h), static_cast<uint64_t>(h + 3 * kUs), o);
      b.Device(static_cast<uint64_t>(op), static_cast<uint64_t>(d), tf::DeviceOpKind::kMemcpy, "DtoH",
               3'000'000 + item, 7, 0, bytes, /*copy_kind=*/2);
      b.Correlate(5'000'000 + item, 3'000'000 + item);
      ++item;
      CallOptions so;
      so.stream = 7;
      so.python_stack = site;
      b.Call(1, api.sync, static_cast<uint64_t>(h + 4 * kUs), static_cast<uint64_t>(d + 1 * kUs), so);
      h = d + 1 * kUs;
    }
    if (!empty && pick(0, 2) == 0) {  // a synchronizing read-back
      h += pick(1, 20) * kUs;
      const int64_t op = std::max(h + 5 * kUs, d);
      d = op + 3 * kUs;
      CallOptions o;
      o.python_stack = site;
      b.Submit(1, api.memcpy, h, d + 2 * kUs, op, d, tf::DeviceOpKind::kMemcpy, "memcpy", o);
      h = d + 2 * kUs;
      sample(1, h);
    } else if (!empty && pick(0, 2) == 0) {  // an upload that returns once its copy started
      h += pick(1, 20) * kUs;
      const int64_t op = std::max(h + 5 * kUs, d);
      d = op + pick(20, 300) * kUs;
      b.Submit(1, api.memcpy, h, op + 1 * kUs, op, d, tf::DeviceOpKind::kMemcpy, "memcpy");
      h = op + 1 * kUs;
    }
    if (pick(0, 4) == 0) {  // host work after the step's launches
      h += pick(10, 300) * kUs;
    }
    int64_t end = h + pick(1, 20) * kUs;
    if (pick(0, 7) == 0) {  // a long call over the step's end, holding a launch after it
      const int64_t enter = end - 5 * kUs;
      const int64_t exit = end + pick(20, 300) * kUs;
      b.Call(1, api.other, static_cast<uint64_t>(enter), static_cast<uint64_t>(exit));
      const int64_t op = std::max(end + 10 * kUs, d);
      d = op + pick(5, 100) * kUs;
      b.Submit(1, api.launch, end + 2 * kUs, end + 6 * kUs, op, d);
      if (marked) b.Range(1, static_cast<uint64_t>(start), static_cast<uint64_t>(end), "step " + std::to_string(k));
      h = exit;
      continue;
    }
    if (pick(0, 5) == 0) {  // a synchronize that outlives the step's range
      const int64_t enter = end - 2 * kUs;
      const int64_t exit = std::max(end + pick(10, 200) * kUs, d + pick(1, 10) * kUs);
      CallOptions o;
      o.python_stack = site;
      b.Call(1, api.sync, static_cast<uint64_t>(enter), static_cast<uint64_t>(exit), o);
      h = exit;
      sample(1, h);
    } else {
      h = end;
    }
    if (marked) b.Range(1, static_cast<uint64_t>(start), static_cast<uint64_t>(end), "step " + std::to_string(k));
    if (pick(0, 4) == 0) {  // time outside every step, a kernel launched there at times
      h += pick(1, 400) * kUs;
      if (pick(0, 1) == 0) {
        const int64_t op = std::max(h + 8 * kUs, d) + pick(0, 600) * kUs;
        d = op + pick(5, 300) * kUs;
        b.Submit(1, api.launch, h, h + 5 * kUs, op, d);
        h += 5 * kUs + pick(1, 100) * kUs;
      }
    }
  }
  // A final synchronize.
  b.Call(1, api.sync, static_cast<uint64_t>(h), static_cast<uint64_t>(std::max(h, d) + 5 * kUs));
  return b;
}

TEST_CASE("windows: random loops attribute as the whole timeline", "[windows]") {
  for (uint32_t seed = 1; seed <= 300; ++seed) {
    CAPTURE(seed);
    const Timeline t = testing::ReadOrDie(RandomLoop(seed, true));
    CheckWindows(t, 4);
  }
}

TEST_CASE("windows: an unmarked run is one step, one window", "[windows]") {
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    CAPTURE(seed);
    const Timeline t = testing::ReadOrDie(RandomLoop(seed, false));
    auto pattern = CompileStepPattern(kDefaultStepPattern);
    REQUIRE(pattern.ok());
    const StepPlan plan = FindSteps(t, *pattern, BusiestDevice(t));
    // Unless its launches repeat enough to be found as steps.
    if (plan.source == "none") CHECK(plan.steps.size() == 1);
    CheckWindows(t, 2);
  }
}

TEST_CASE("windows: sampled device timing keeps the timed steps' attribution", "[windows][sampled]") {
  const Timeline t = testing::ReadOrDie(testing::SampledSteps());
  CheckWindows(t, 3);
}

TEST_CASE("windows: a window's part holds its neighbourhood, not the whole run", "[windows]") {
  // Twenty 1 ms steps, one kernel each: a one-step window reads four calls
  // (the step before's, its own, the next step's, whose kernel ends the
  // sweep, and the one after, which bounds the host gap) and its
  // neighbours' ops.
  TraceBuilder b;
  auto api = testing::AddStandardApis(&b);
  for (int k = 0; k < 20; ++k) {
    const int64_t t0 = k * 1000 * kUs;
    b.Range(1, t0, t0 + 1000 * kUs, "step " + std::to_string(k));
    b.Submit(1, api.launch, t0 + 100 * kUs, t0 + 105 * kUs, t0 + 300 * kUs, t0 + 900 * kUs);
  }
  const Timeline t = testing::ReadOrDie(b);
  auto pattern = CompileStepPattern(kDefaultStepPattern);
  REQUIRE(pattern.ok());
  const StepPlan plan = FindSteps(t, *pattern, BusiestDevice(t));
  REQUIRE(plan.steps.size() == 20);
  const std::vector<CallClass> classes = ClassifyCalls(t, plan.device, {});
  WindowCutter cutter(t, plan, classes);
  for (size_t k = 0; k < 20; ++k) {
    CAPTURE(k);
    const WindowPart part = cutter.Cut(k, k + 1);
    CHECK(part.timeline.calls.size() <= 4);
    CHECK(part.timeline.ops.size() <= 3);
    CHECK(part.sweep_from <= plan.steps[k].start_ns);
    CHECK(part.sweep_to >= plan.steps[k].end_ns);
  }
}

TEST_CASE("windows: a long stretch without device work is not read by every window in it",
          "[windows]") {
  // Two steps with a kernel, thirty whose host makes three calls each and
  // submits nothing, then a step with a kernel: the device idle through the
  // thirty, or under a kernel launched in step 1 that outlasts them (so
  // their device spans lie far after their host ranges). Each one-step
  // window in the stretch reads only its own step's calls and a few around
  // them: each thread's calls at the drain, the calls bounding its host
  // gaps and the ops' calls.
  for (const bool covered : {false, true}) {
    CAPTURE(covered);
    TraceBuilder b;
    auto api = testing::AddStandardApis(&b);
    auto kernel_step = [&](int k) {
      const int64_t t0 = k * 1000 * kUs;
      b.Range(1, t0, t0 + 1000 * kUs, "step " + std::to_string(k));
      b.Submit(1, api.launch, t0 + 100 * kUs, t0 + 105 * kUs, t0 + 300 * kUs, t0 + 900 * kUs);
    };
    kernel_step(0);
    kernel_step(1);
    if (covered) {  // a kernel from step 1 to step 31
      b.Submit(1, api.launch, 1200 * kUs, 1205 * kUs, 1300 * kUs, 31'500 * kUs);
    }
    for (int k = 2; k < 32; ++k) {
      const int64_t t0 = k * 1000 * kUs;
      b.Range(1, t0, t0 + 1000 * kUs, "step " + std::to_string(k));
      for (int i = 0; i < 3; ++i) {
        b.Call(1, api.other, t0 + (100 + 200 * i) * kUs, t0 + (110 + 200 * i) * kUs);
      }
    }
    kernel_step(32);
    const Timeline t = testing::ReadOrDie(b);
    auto pattern = CompileStepPattern(kDefaultStepPattern);
    REQUIRE(pattern.ok());
    const StepPlan plan = FindSteps(t, *pattern, BusiestDevice(t));
    REQUIRE(plan.steps.size() == 33);
    const std::vector<CallClass> classes = ClassifyCalls(t, plan.device, {});
    WindowCutter cutter(t, plan, classes);
    for (size_t k = 0; k < 33; ++k) {
      CAPTURE(k);
      const WindowPart part = cutter.Cut(k, k + 1);
      CHECK(part.sweep_from <= plan.steps[k].start_ns);
      CHECK(part.sweep_to >= plan.steps[k].end_ns);
      if (k >= 3 && k <= 30) {
        // Idle, the stretch's drain to the next kernel; covered, the steps
        // are of no length where the long kernel ends (they tile the
        // device timeline), far from their host ranges.
        if (!covered) CHECK(part.sweep_from <= 2 * 1000 * kUs);
        CHECK(part.sweep_to == 32'300 * kUs);  // F: step 32's kernel
        // Its three; before and after each band (its host range, and its
        // device span when apart), the calls bounding its host gaps; two at
        // the drain; the kernels' calls.
        CHECK(part.timeline.calls.size() <= 3 + (covered ? 4 : 2) + 2 + 3);
      }
    }
    CheckWindows(t, 4);
  }
}

// An unmarked training loop whose launch sequence repeats: each step an
// input wait (its end sampled, with the thread's CPU time and run-queue
// delay), an upload, forward kernels, backward kernels (from a second
// thread on odd seeds, as PyTorch's autograd engine launches them), an
// optimizer kernel, a free and a read-back synchronize; the first step
// warms up with one kernel more; before the optimizer, the main thread
// waits for a CPU (run-queue delay, sampled mid-way and at its end: no
// silence of the job's making, though longer than the input wait), with a
// call of no device work at its middle. Its CPU clock moves through its
// launch stretches, as a launching thread's does, and by a little in each
// input wait; the read-back's exit is sampled too (the recorder samples
// every call that may block). Before the loop, the model uploaded
// parameter by parameter, and after it, copied back the same way (the upload's symbol, in no step). Unless `regular`:
// input waits of every length or none, a logging kernel in some steps, and
// another thread's host calls. Times random.
TraceBuilder RepeatingLoop(uint32_t seed, bool regular) {
  std::mt19937 rng(seed);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  TraceBuilder b;
  auto api = testing::AddStandardApis(&b);
  const uint32_t site = b.PythonStack({{"train.py", "step", 9}});
  const int forward = pick(1, 5), backward = pick(1, 5), steps = pick(12, 40);
  const uint32_t back_tid = seed % 2 == 1 ? 2 : 1;
  int64_t h = 100 * kUs, d = 0, cpu = 0, delay = 0;
  int64_t on_from = h;  // on-CPU from here up to the next wait
  auto kernel = [&](uint32_t tid, const std::string& name) {
    const int64_t start = std::max(d, h + 8 * kUs);
    d = start + pick(5, 60) * kUs;
    b.Submit(tid, api.launch, h, h + 5 * kUs, start, d, tf::DeviceOpKind::kKernel, name);
    h += pick(6, 30) * kUs;
  };
  auto upload = [&] {
    const int64_t start = std::max(d, h + 5 * kUs);
    d = start + pick(5, 40) * kUs;
    CallOptions o;
    o.object = 0x1000 + static_cast<uint64_t>(pick(0, 999)) * 256;  // another buffer each time
    b.Submit(1, api.memcpy_async, h, h + 4 * kUs, start, d, tf::DeviceOpKind::kMemcpy, "", o);
    h += 6 * kUs;
  };
  const int model = 8 + forward + backward;  // more than a period
  for (int i = 0; i < model; ++i) upload();
  for (int k = 0; k < steps; ++k) {
    const int wait = regular ? pick(150, 400) : pick(0, 2) == 0 ? 0 : pick(1, 500);
    cpu += h - on_from + pick(0, 20) * kUs;
    delay += pick(0, 3) == 0 ? pick(0, wait) * kUs : 0;
    h += wait * kUs;
    b.CpuSched(1, static_cast<uint64_t>(h), static_cast<uint64_t>(cpu), static_cast<uint64_t>(delay));
    on_from = h;
    h += pick(1, 10) * kUs;
    upload();
    if (k == 0) kernel(1, "warm");
    for (int i = 0; i < forward; ++i) kernel(1, "fwd" + std::to_string(i));
    for (int i = 0; i < backward; ++i) kernel(back_tid, "bwd" + std::to_string(i));
    const int stall = pick(500, 900);
    cpu += h - on_from;
    h += stall / 2 * kUs;
    delay += stall / 2 * kUs;
    b.CpuSched(1, static_cast<uint64_t>(h), static_cast<uint64_t>(cpu), static_cast<uint64_t>(delay));
    b.Call(1, api.other, static_cast<uint64_t>(h + 1 * kUs), static_cast<uint64_t>(h + 1 * kUs));
    h += (stall - stall / 2) * kUs;
    delay += (stall - stall / 2) * kUs;
    b.CpuSched(1, static_cast<uint64_t>(h), static_cast<uint64_t>(cpu), static_cast<uint64_t>(delay));
    on_from = h;
    kernel(1, "adam");
    if (!regular && pick(0, 4) == 0) kernel(1, "log");
    if (!regular && pick(0, 2) == 0) {
      b.Call(3, api.other, static_cast<uint64_t>(h - 3 * kUs), static_cast<uint64_t>(h + 2 * kUs));
    }
    CallOptions f;
    f.object = 0x9000 + static_cast<uint64_t>(pick(0, 999)) * 64;
    b.Call(1, api.free, static_cast<uint64_t>(h), static_cast<uint64_t>(h + 3 * kUs), f);
    h += 4 * kUs;
    cpu += h - on_from;
    const int64_t sync_exit = std::max(h, d) + 4 * kUs;
    b.Call(1, api.sync, static_cast<uint64_t>(h), static_cast<uint64_t>(sync_exit), {.python_stack = site});
    b.CpuSched(1, static_cast<uint64_t>(sync_exit), static_cast<uint64_t>(cpu), static_cast<uint64_t>(delay));
    on_from = sync_exit;
    h = sync_exit + 2 * kUs;
  }
  for (int i = 0; i < model; ++i) upload();
  return b;
}

// The streamed attribution of the bytes `b` builds (chunks of
// `chunk_records` records) gives the whole timeline's plan, rows, gaps and
// charges, for windows of 1..max_window steps.
// How the streamed analyses of CheckStreamedBytes found the steps' spans:
// from the windows' slices, or by their own pass after those could not give
// them (runs with sampled device timing take their own pass at once).
struct FuseTally {
  size_t fused = 0;
  size_t gave_up = 0;
};
FuseTally g_fuse;

void CheckStreamedBytes(const std::string& bytes, size_t max_window,
                        const std::string& source = "marker") {
  auto read = ReadTraceBytes(bytes, "t");
  REQUIRE(read.ok());
  const Timeline& t = *read;
  auto pattern = CompileStepPattern(kDefaultStepPattern);
  REQUIRE(pattern.ok());
  StepPlan plan = FindSteps(t, *pattern, BusiestDevice(t));
  KeepTimedSteps(t, &plan);
  REQUIRE(plan.source == source);
  const AttributionOptions options;
  const std::vector<CallClass> classes = ClassifyCalls(t, plan.device, options);
  const Attribution whole = AttributeIdle(t, plan, classes, options);
  std::vector<std::pair<CallKey, int64_t>> caused;
  whole.idle_caused.ForEach([&](size_t call, int64_t ns) { caused.push_back({CallKey::Of(t.calls[call]), ns}); });
  std::sort(caused.begin(), caused.end());
  Symbolizer symbolizer(t.modules);
  const std::vector<Hotspot> hotspots =
      FindHotspots(t, plan, classes, whole.idle_caused, options, &symbolizer);
  // The calls that can be hotspots: the windows pass takes each once.
  std::vector<HotspotFinder::Call> can_count;
  HotspotFinder::Take(t, classes, 0, t.calls.size(), &can_count);
  // The questions' inputs and the reading's last diagnostics, as the
  // whole timeline gives them.
  QuestionInputs qi;
  uint64_t unjoined = 0;
  for (const DeviceOp& op : t.ops) {
    unjoined += op.call < 0;
    if (op.device != plan.device) continue;
    qi.nccl_ops += op.kind == trace::DeviceOpKind::kNccl;
    if (op.kind == trace::DeviceOpKind::kKernel && op.call >= 0) {
      CountKernel(t.calls[static_cast<size_t>(op.call)], op, options.launch_dispatch_ns, &qi);
    }
  }
  uint64_t unmatched = 0;
  for (const Diagnostic& d : t.diagnostics) unmatched += d.id == DiagId::kUnmatchedNvtx ? d.count : 0;
  auto index = IndexTraceBytes(bytes, "t");
  REQUIRE(index.ok());
  auto span_row = [](const StepSpan& s) {
    return std::make_tuple(s.start_ns, s.end_ns, s.host_start_ns, s.host_end_ns, s.name);
  };
  for (size_t per = 1; per <= max_window; ++per) {
    CAPTURE(per, plan.steps.size());
    auto reader = SliceReader::OpenBytes(bytes, "t", *index);
    REQUIRE(reader.ok());
    StreamOptions so;
    so.steps_per_window = per;
    so.chunks_per_slice = 1 + per % 3;
    // Windows of 2 steps hold at most one such call: past it, the hotspots'
    // own pass.
    if (per == 2) so.max_hotspot_calls = 1;
    auto first = AnalyzeStreamed(&*reader, *index, *pattern, options, so);
    REQUIRE(first.ok());
    // Tried from the windows' slices unless timing was sampled; and, for
    // the smallest and largest windows, by their own pass: the same answer.
    const bool own_pass = !DeviceTimingOn(t).empty() || ExternalIdsMayRepeat(*index);
    CHECK(first->spans_fused == (!own_pass && !first->spans_fused_failed));
    CHECK(!(own_pass && first->spans_fused_failed));
    g_fuse.fused += first->spans_fused;
    g_fuse.gave_up += first->spans_fused_failed;
    for (const bool fuse : {true, false}) {
      if (!fuse && per != 1 && per != max_window) continue;
      absl::StatusOr<StreamedAnalysis> own;
      if (!fuse) {
        auto again = SliceReader::OpenBytes(bytes, "t", *index);
        REQUIRE(again.ok());
        so.fuse_spans = false;
        own = AnalyzeStreamed(&*again, *index, *pattern, options, so);
        so.fuse_spans = true;
        REQUIRE(own.ok());
        CHECK(!own->spans_fused);
        CHECK(!own->spans_fused_failed);
      }
      CAPTURE(fuse);
      const absl::StatusOr<StreamedAnalysis>& s = fuse ? first : own;
      CHECK(s->hotspots_pass == (per == 2 && can_count.size() > 1));
      CHECK(s->hotspot_calls == (s->hotspots_pass ? 0 : can_count.size()));
      CHECK(s->plan.source == plan.source);
      CHECK(s->plan.device == plan.device);
      CHECK(s->plan.main_tid == plan.main_tid);
      CHECK(s->plan.ops_outside == plan.ops_outside);
      CHECK(s->plan.dropped_empty_last == plan.dropped_empty_last);
      CHECK(s->plan.numbers == plan.numbers);
      CHECK(s->plan.steps_found == plan.steps_found);
      CHECK(s->plan.auto_tail.calls == plan.auto_tail.calls);
      CHECK(s->plan.auto_tail.period == plan.auto_tail.period);
      CHECK(s->plan.auto_tail.calls_after == plan.auto_tail.calls_after);
      CHECK(s->plan.auto_tail.rule_calls == plan.auto_tail.rule_calls);
      REQUIRE(s->plan.steps.size() == plan.steps.size());
      for (size_t k = 0; k < plan.steps.size(); ++k) CHECK(span_row(s->plan.steps[k]) == span_row(plan.steps[k]));
      REQUIRE(s->steps.size() == whole.steps.size());
      for (size_t k = 0; k < whole.steps.size(); ++k) {
        CAPTURE(k);
        CHECK(Row(s->steps[k]) == Row(whole.steps[k]));
      }
      REQUIRE(s->gaps.size() == whole.gaps.size());
      size_t named = 0;
      for (size_t k = 0; k < whole.gaps.size(); ++k) {
        CAPTURE(k);
        IdleGap g = s->gaps[k];
        const IdleGap& w = whole.gaps[k];
        const bool has_call = named < s->gap_call.size() && s->gap_call[named].first == k;
        CHECK(has_call == (w.call >= 0));
        if (has_call) {
          CHECK(s->gap_call[named].second == CallKey::Of(t.calls[static_cast<size_t>(w.call)]));
          g.call = w.call;
          ++named;
        }
        CHECK(GapRow(g) == GapRow(w));
      }
      CHECK(s->idle_caused == caused);
      REQUIRE(s->hotspots.size() == hotspots.size());
      for (size_t k = 0; k < hotspots.size(); ++k) {
        CAPTURE(k);
        CHECK(HotRow(s->hotspots[k]) == HotRow(hotspots[k]));
      }
      CHECK(s->slices[2] >= (plan.steps.size() + per - 1) / per);
      if (per == 1) {
        // Without the gaps (as `report` reads): none held, the rest the same.
        auto again = SliceReader::OpenBytes(bytes, "t", *index);
        REQUIRE(again.ok());
        // Each gap goes to on_gap as it comes, once (those of a fused try
        // given up are forgotten at on_gaps_again), with its call; a
        // GapSpill so fed gives them back with their calls' keys.
        std::vector<std::tuple<int64_t, int64_t, Cause>> given;
        GapSpill spill;
        REQUIRE(spill.Open().ok());
        so.keep_gaps = false;
        so.on_gap = [&](const IdleGap& g, const ApiCall* call) {
          given.emplace_back(g.start_ns, g.end_ns, g.cause);
          spill.Add(g, call);
        };
        so.on_gaps_again = [&] {
          given.clear();
          spill.Clear();
        };
        auto lean = AnalyzeStreamed(&*again, *index, *pattern, options, so);
        so.keep_gaps = true;
        so.on_gap = nullptr;
        so.on_gaps_again = nullptr;
        REQUIRE(lean.ok());
        std::vector<GapSpill::Gap> spilled;
        REQUIRE(spill.ForEach([&](const GapSpill::Gap& g) { spilled.push_back(g); }).ok());
        REQUIRE(spilled.size() == s->gaps.size());
        CHECK(spill.size() == s->gaps.size());
        size_t with_call = 0;
        for (size_t k = 0; k < spilled.size(); ++k) {
          CAPTURE(k);
          CHECK(GapRow(spilled[k].gap) == GapRow(s->gaps[k]));
          const bool has_call = with_call < s->gap_call.size() && s->gap_call[with_call].first == k;
          CHECK(spilled[k].has_call == has_call);
          if (has_call) CHECK(spilled[k].call == s->gap_call[with_call++].second);
        }
        CHECK(lean->gaps.empty());
        REQUIRE(given.size() == s->gaps.size());
        for (size_t k = 0; k < given.size(); ++k) {
          CHECK(given[k] == std::make_tuple(s->gaps[k].start_ns, s->gaps[k].end_ns, s->gaps[k].cause));
        }
        CHECK(lean->gap_call.empty());
        REQUIRE(lean->steps.size() == s->steps.size());
        for (size_t k = 0; k < s->steps.size(); ++k) CHECK(Row(lean->steps[k]) == Row(s->steps[k]));
        CHECK(lean->idle_caused == s->idle_caused);
        REQUIRE(lean->hotspots.size() == s->hotspots.size());
        for (size_t k = 0; k < s->hotspots.size(); ++k) CHECK(HotRow(lean->hotspots[k]) == HotRow(s->hotspots[k]));
      }
      CHECK(s->questions.kernels == qi.kernels);
      CHECK(s->questions.short_kernels == qi.short_kernels);
      CHECK(s->questions.nccl_ops == qi.nccl_ops);
      CHECK(s->questions.cpu_samples == !t.cpu.empty());
      CHECK(s->unjoined_ops == unjoined);
      CHECK(s->unmatched_nvtx == unmatched);
    }
  }
}

void CheckStreamed(TraceBuilder b, size_t chunk_records, size_t max_window,
                   const std::string& source = "marker") {
  b.SetChunkRecords(chunk_records);
  CheckStreamedBytes(b.Build(), max_window, source);
}

TEST_CASE("streamed: random loops read by slices attribute as the whole timeline",
          "[windows][stream]") {
  g_fuse = {};
  for (uint32_t seed = 1; seed <= 150; ++seed) {
    CAPTURE(seed);
    TraceBuilder b = RandomLoop(seed, true);
    b.SetPacked(seed % 3 > 0, seed % 3 > 1);
    if (seed % 5 == 0) b.Push(3, 150 * kUs, "left open");
    if (seed % 3 == 0) {
      // Ranges that are not steps, nested and across slices (a range around
      // every layer, another thread's start and end, an end of nothing),
      // and one named like a step on a thread that is not the main one.
      for (int k = 0; k < 40; ++k) {
        const uint64_t at = static_cast<uint64_t>(100 + 37 * k) * kUs;
        b.Push(5, at, "layer");
        b.Push(5, at + 3 * kUs, "matmul");
        b.Pop(5, at + 9 * kUs);
        b.Pop(5, at + 20 * kUs);
      }
      b.Nvtx(6, tf::NvtxType::kStart, 400 * kUs, "load", 9, 2);
      b.Nvtx(7, tf::NvtxType::kEnd, 900 * kUs, "", 9, 2);
      b.Nvtx(7, tf::NvtxType::kEnd, 950 * kUs, "", 10, 2);
      b.Range(8, 300 * kUs, 700 * kUs, "iteration on the loader");
    }
    CheckStreamed(std::move(b), 1 + seed % 9, 3);
  }
  // Both ways ran (a loop whose spans come from the windows' slices, and
  // one where they could not, each giving the whole timeline's answer).
  CHECK(g_fuse.fused > 0);
  CHECK(g_fuse.gave_up > 0);
}

TEST_CASE("streamed: the steps' spans from the windows' slices, or their own pass where those cannot give them",
          "[windows][stream]") {
  constexpr int64_t kMs = 1000 * kUs;
  // CheckStreamed over windows of 1 to max_window steps (each as the whole
  // timeline), then how many took the spans from the windows' slices and
  // how many gave up.
  auto ways = [](TraceBuilder b, size_t max_window) {
    g_fuse = {};
    CheckStreamed(std::move(b), 3, max_window);
    return std::make_pair(g_fuse.fused, g_fuse.gave_up);
  };
  using Ways = std::pair<size_t, size_t>;
  // A plain loop: a launch and a synchronize a step. Fused, for every
  // window size.
  {
    TraceBuilder b;
    auto api = testing::AddStandardApis(&b);
    for (int k = 0; k < 12; ++k) {
      const int64_t t0 = k * kMs;
      b.Range(1, t0, t0 + kMs, "step " + std::to_string(k));
      b.Submit(1, api.launch, t0 + 100 * kUs, t0 + 110 * kUs, t0 + 200 * kUs, t0 + 600 * kUs);
      b.Call(1, api.sync, t0 + 700 * kUs, t0 + 800 * kUs);
    }
    CHECK(ways(std::move(b), 3) == Ways{3, 0});
  }
  // Steps 6 to 11 submit nothing, and a launch after the last step (no
  // step takes it) runs long after: the first op after the window of step 5
  // starts past every span known by then, and past the plan's extent (the
  // last step's host end), where the sweep stops; that extent is not known
  // yet: their own pass.
  {
    TraceBuilder b;
    auto api = testing::AddStandardApis(&b);
    for (int k = 0; k < 12; ++k) {
      const int64_t t0 = k * kMs;
      b.Range(1, t0, t0 + 500 * kUs, "step " + std::to_string(k));
      if (k < 6) b.Submit(1, api.launch, t0 + 100 * kUs, t0 + 110 * kUs, t0 + 200 * kUs, t0 + 300 * kUs);
    }
    b.Submit(1, api.launch, 12 * kMs + 200 * kUs, 12 * kMs + 210 * kUs, 20 * kMs, 21 * kMs);
    CHECK(ways(std::move(b), 1) == Ways{0, 1});
  }
  // Another thread's long call (cuCtxGetLimit, 400 us, no op) two steps
  // after the window of step 3, while step 5's kernel runs: the first call
  // of that thread after the window, so its part holds it, and when it is
  // classed the ops of step 5 are not yet read, so that it might be taken
  // as not waiting: their own pass.
  {
    TraceBuilder b;
    auto api = testing::AddStandardApis(&b);
    for (int k = 0; k < 12; ++k) {
      const int64_t t0 = k * kMs;
      b.Range(1, t0, t0 + kMs, "step " + std::to_string(k));
      b.Submit(1, api.launch, t0 + 100 * kUs, t0 + 110 * kUs, t0 + 200 * kUs, t0 + 900 * kUs);
    }
    b.Call(2, api.other, 5 * kMs + 300 * kUs, 5 * kMs + 700 * kUs);
    CHECK(ways(std::move(b), 1) == Ways{0, 1});
  }
  // Two threads' calls with the same external id (as a recorder gives
  // threads' calls before they register): a copy before the first step and
  // a set in step 7, each with its op. Such a trace takes the spans' own
  // pass, and gives the whole timeline's answer. (Here the windows' slices
  // would give it too; the frameworks case torch_auto_dataloader, where the
  // slice of the calls before the first window joined a later thread's op
  // to the main thread's first copy, is the one that showed the need.)
  {
    TraceBuilder b;
    auto api = testing::AddStandardApis(&b);
    for (int k = 0; k < 12; ++k) {
      const int64_t t0 = 2 * kMs + k * kMs;
      b.Range(1, t0, t0 + kMs, "step " + std::to_string(k));
      b.Submit(1, api.launch, t0 + 100 * kUs, t0 + 110 * kUs, t0 + 200 * kUs, t0 + 300 * kUs);
    }
    b.Call(1, api.memcpy_async, 400 * kUs, 410 * kUs, {.correlation = 1, .bytes = 4096});
    b.Device(420 * kUs, 500 * kUs, tf::DeviceOpKind::kMemcpy, "copy", 900'001, 7, 0, 4096, 1);
    b.Correlate(900'001, 1);
    b.Call(2, api.memset, 9 * kMs + 400 * kUs, 9 * kMs + 440 * kUs, {.correlation = 1, .bytes = 64});
    b.Device(9 * kMs + 420 * kUs, 9 * kMs + 430 * kUs, tf::DeviceOpKind::kMemset, "set", 900'002, 7, 0, 64);
    b.Correlate(900'002, 1);
    CHECK(ways(std::move(b), 3) == Ways{0, 0});
  }
}

TEST_CASE("streamed: sampled device timing and long idle stretches", "[windows][stream]") {
  CheckStreamed(testing::SampledSteps(), 4, 3);
  TraceBuilder b;
  auto api = testing::AddStandardApis(&b);
  for (int k = 0; k < 40; ++k) {
    const int64_t t0 = k * 1000 * kUs;
    b.Range(1, t0, t0 + 1000 * kUs, "step " + std::to_string(k));
    if (k < 2 || k > 36) b.Submit(1, api.launch, t0 + 100 * kUs, t0 + 105 * kUs, t0 + 300 * kUs, t0 + 900 * kUs);
    if (k == 1) b.Submit(1, api.launch, t0 + 200 * kUs, t0 + 205 * kUs, t0 + 950 * kUs, 20'000 * kUs);
    b.Call(1, api.other, t0 + 500 * kUs, t0 + 510 * kUs);
  }
  CheckStreamed(std::move(b), 2, 2);
}

TEST_CASE("streamed: the calls before the first window's slice count toward the hotspots",
          "[windows][stream]") {
  // Set-up before the first step: a copy and synchronizes (one waiting for
  // a long kernel), ending well before the first window's drain (the op
  // ending at 45 ms), so that the first window's slice starts after them;
  // teardown synchronizes after the last step. Chunks of 2 and of 40 calls.
  constexpr uint64_t kMs = 1000 * kUs;
  for (const size_t records : {2, 40}) {
    CAPTURE(records);
    TraceBuilder b;
    auto api = testing::AddStandardApis(&b);
    const uint32_t line = b.PythonStack({{"train.py", "setup", 3}});
    // A host-to-device copy (CUPTI copy kind 1) its next synchronize does
    // not complete (another line).
    b.Call(1, api.memcpy, 1 * kMs, 3 * kMs, {.correlation = 10'000, .python_stack = line, .bytes = 4096});
    b.Device(2 * kMs, 2900 * kUs, tf::DeviceOpKind::kMemcpy, "copy", 10'000, 7, 0, 4096, 1);
    b.Correlate(10'000, 10'000);
    b.Submit(1, api.launch, 4 * kMs, 4010 * kUs, 4100 * kUs, 9900 * kUs);
    b.Call(1, api.sync, 4100 * kUs, 10 * kMs, {.python_stack = line});
    b.Submit(1, api.launch, 40 * kMs, 40010 * kUs, 41 * kMs, 45 * kMs);
    b.Call(1, api.sync, 41 * kMs, 45500 * kUs, {.python_stack = line});
    const uint32_t step_line = b.PythonStack({{"train.py", "step", 9}});
    for (int k = 0; k < 12; ++k) {
      const int64_t t0 = 50 * kMs + k * kMs;
      b.Range(1, t0, t0 + kMs, "step " + std::to_string(k));
      b.Submit(1, api.launch, t0 + 100 * kUs, t0 + 110 * kUs, t0 + 200 * kUs, t0 + 600 * kUs);
      b.Call(1, api.sync, t0 + 700 * kUs, t0 + 800 * kUs, {.python_stack = step_line});
    }
    b.Submit(1, api.launch, 70 * kMs, 70010 * kUs, 70100 * kUs, 75 * kMs);
    b.Call(1, api.sync, 70100 * kUs, 75100 * kUs, {.python_stack = line});
    b.Call(1, api.memcpy, 80 * kMs, 81 * kMs, {.correlation = 10'001, .python_stack = line, .bytes = 4096});
    b.Device(80100 * kUs, 80900 * kUs, tf::DeviceOpKind::kMemcpy, "copy", 10'001, 7, 0, 4096, 2);
    b.Correlate(10'001, 10'001);
    CheckStreamed(std::move(b), records, 3);
  }
}

TEST_CASE("streamed: the golden traces attribute as the whole timeline", "[windows][stream][golden]") {
  for (const char* name : {"sync_loop.sstrace", "format4_packed_sync_loop.sstrace"}) {
    CAPTURE(name);
    std::ifstream in(std::string(STALLSCOPE_TESTDATA_DIR) + "/" + name, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    REQUIRE(!bytes.empty());
    CheckStreamedBytes(bytes, 3);
  }
}

// The steps AutoStepFinder finds in `t`'s launch sequence, its period
// found in the first `detect_calls` calls.
std::vector<std::pair<int64_t, int64_t>> AutoHostRanges(const Timeline& t, size_t detect_calls) {
  const uint32_t main_tid = MainThread(t);
  AutoStepFinder finder(main_tid, SeveralLaunch(t.calls_per_thread, main_tid), detect_calls);
  finder.Add(t, 0, t.calls.size());
  std::vector<std::pair<int64_t, int64_t>> out;
  for (const StepSpan& s : finder.Finish()) out.push_back({s.host_start_ns, s.host_end_ns});
  return out;
}

TEST_CASE("streamed: steps from the launch sequence, by slices, as the whole timeline's",
          "[windows][stream][auto]") {
  int found = 0;
  for (uint32_t seed = 1; seed <= 80; ++seed) {
    CAPTURE(seed);
    TraceBuilder b = RepeatingLoop(seed, seed % 4 == 0);
    b.SetPacked(seed % 3 > 0, seed % 3 > 1);
    const Timeline t = testing::ReadOrDie(b);
    // Every one of these loops repeats: its steps are found, one a step
    // (the last one's end: at most a period after its start).
    const auto whole = AutoHostRanges(t, kAutoDetectCalls);
    REQUIRE(whole.size() >= 5);
    ++found;
    CheckStreamed(b, 1 + seed % 7, 2, "auto");
  }
  CHECK(found == 80);
  // Random loops without markers: where the whole timeline finds steps,
  // the slices find the same; where it finds none (one step of the whole
  // run), the streamed analysis refuses, to be read whole.
  int refused = 0;
  for (uint32_t seed = 1; seed <= 60; ++seed) {
    CAPTURE(seed);
    TraceBuilder b = RandomLoop(seed, false);
    b.SetChunkRecords(1 + seed % 5);
    const std::string bytes = b.Build();
    auto read = ReadTraceBytes(bytes, "t");
    REQUIRE(read.ok());
    auto pattern = CompileStepPattern(kDefaultStepPattern);
    const StepPlan plan = FindSteps(*read, *pattern, BusiestDevice(*read));
    if (plan.source == "auto") {
      CheckStreamedBytes(bytes, 2, "auto");
      continue;
    }
    REQUIRE(plan.source == "none");
    ++refused;
    auto index = IndexTraceBytes(bytes, "t");
    REQUIRE(index.ok());
    auto reader = SliceReader::OpenBytes(bytes, "t", *index);
    REQUIRE(reader.ok());
    auto s = AnalyzeStreamed(&*reader, *index, *pattern, {});
    CHECK(s.status().code() == absl::StatusCode::kUnimplemented);
    // Its period searched for in its first 3 calls (none in so few): the
    // pass stops there, after fewer chunks than the whole pass decodes.
    auto early = SliceReader::OpenBytes(bytes, "t", *index);
    REQUIRE(early.ok());
    StreamOptions so;
    so.chunks_per_slice = 1;
    so.auto_detect_calls = 3;
    s = AnalyzeStreamed(&*early, *index, *pattern, {}, so);
    CHECK(s.status().code() == absl::StatusCode::kUnimplemented);
    CHECK(early->chunks_decoded() < reader->chunks_decoded());
  }
  CHECK(refused > 0);
}

TEST_CASE("auto steps: the period found in the first calls cuts the rest as the whole sequence's",
          "[steps][auto]") {
  for (uint32_t seed = 1; seed <= 60; ++seed) {
    CAPTURE(seed);
    const bool regular = seed % 2 == 0;
    TraceBuilder b = RepeatingLoop(seed, regular);
    b.SetChunkRecords(1 + seed % 6);
    const std::string bytes = b.Build();
    const Timeline t = testing::ReadOrDie(b);
    const auto whole = AutoHostRanges(t, kAutoDetectCalls);
    REQUIRE(whole.size() >= 5);
    auto index = IndexTraceBytes(bytes, "t");
    REQUIRE(index.ok());
    auto pattern = CompileStepPattern(kDefaultStepPattern);
    // A strictly repeating loop: a prefix of the set-up and several steps
    // finds the whole sequence's rule, and the calls after it are cut the same.
    // Else the prefix's rule may differ: the slices must cut as the whole
    // timeline does with the same prefix.
    const size_t per_step = t.calls.size() / whole.size();
    for (const size_t detect : {8 * per_step, 8 * per_step + 3, 10 * per_step + 1}) {
      CAPTURE(detect);
      const auto prefix = AutoHostRanges(t, detect);
      if (regular) CHECK(prefix == whole);
      auto reader = SliceReader::OpenBytes(bytes, "t", *index);
      REQUIRE(reader.ok());
      StreamOptions so;
      so.chunks_per_slice = 1 + seed % 3;
      so.auto_detect_calls = detect;
      auto s = AnalyzeStreamed(&*reader, *index, *pattern, {}, so);
      if (prefix.empty()) {
        CHECK(s.status().code() == absl::StatusCode::kUnimplemented);
        continue;
      }
      REQUIRE(s.ok());
      std::vector<std::pair<int64_t, int64_t>> sliced;
      for (const StepSpan& x : s->plan.steps) sliced.push_back({x.host_start_ns, x.host_end_ns});
      CHECK(sliced == prefix);
      // The rule came from the first `detect` calls, and says so.
      CHECK(s->plan.auto_tail.rule_calls == static_cast<int64_t>(detect));
    }
  }
}

// A training loop, then another (an evaluation: other kernels, no upload)
// longer than a step: no step begins in it, which the report says
// (auto_steps_end), whether the rule came from the whole sequence or from
// its first calls; the training loop alone, with a teardown shorter than a
// step, says nothing.
TEST_CASE("auto steps: calls after the last step found are named", "[steps][auto]") {
  for (const int eval : {0, 25}) {
    CAPTURE(eval);
    TraceBuilder b;
    auto api = testing::AddStandardApis(&b);
    int64_t h = 100 * kUs, d = 0;
    auto kernel = [&](const std::string& name) {
      const int64_t start = std::max(d, h + 8 * kUs);
      d = start + 20 * kUs;
      b.Submit(1, api.launch, h, h + 5 * kUs, start, d, tf::DeviceOpKind::kKernel, name);
      h += 10 * kUs;
    };
    auto sync = [&] {
      b.Call(1, api.sync, static_cast<uint64_t>(h), static_cast<uint64_t>(std::max(h, d) + 4 * kUs));
      h = std::max(h, d) + 6 * kUs;
    };
    for (int k = 0; k < 30; ++k) {
      h += 300 * kUs;  // the input wait
      for (const char* name : {"fwd", "bwd", "adam"}) kernel(name);
      sync();
    }
    for (int k = 0; k < eval; ++k) {
      h += 50 * kUs;
      kernel("eval_a");
      kernel("eval_b");
      sync();
    }
    const std::string bytes = b.Build();
    const Timeline t = testing::ReadOrDie(b);
    auto pattern = CompileStepPattern(kDefaultStepPattern);
    const StepPlan plan = FindSteps(t, *pattern, BusiestDevice(t));
    REQUIRE(plan.source == "auto");
    CHECK(plan.steps.size() == 30);
    const AutoTail& tail = plan.auto_tail;
    CHECK(tail.calls == 30 * 4 + eval * 3);
    CHECK(tail.period == 4);
    CHECK(tail.calls_after == eval * 3);
    CHECK(tail.rule_calls == 0);
    auto report = AnalyzeTimeline(t, {});
    REQUIRE(report.ok());
    const Diagnostic* said = nullptr;
    for (const Diagnostic& x : report->diagnostics) said = x.id == DiagId::kAutoStepsEnd ? &x : said;
    CHECK((said != nullptr) == (eval > 0));
    if (said != nullptr) {
      CHECK(said->count == static_cast<uint64_t>(eval * 3));
      CHECK(said->message.find("75 of the launch sequence's 195 calls") != std::string::npos);
    }
    // The rule from the first 40 calls (10 steps), by slices: the same.
    auto index = IndexTraceBytes(bytes, "t");
    REQUIRE(index.ok());
    auto reader = SliceReader::OpenBytes(bytes, "t", *index);
    REQUIRE(reader.ok());
    StreamOptions so;
    so.auto_detect_calls = 40;
    auto s = AnalyzeStreamed(&*reader, *index, *pattern, {}, so);
    REQUIRE(s.ok());
    CHECK(s->plan.steps.size() == 30);
    CHECK(s->plan.auto_tail.calls_after == eval * 3);
    CHECK(s->plan.auto_tail.rule_calls == 40);
  }
}

// STALLSCOPE_STREAM_BENCH=FILE[:STEPS_PER_WINDOW]: the streamed analysis
// (steps, attribution, hotspots) of FILE (scripts/bench, at 100 M events): time, events a second, the
// slices each pass read, and the peak memory.
TEST_CASE("streamed: what analyzing a trace by slices costs", "[.][stream-bench]") {
  const char* spec = std::getenv("STALLSCOPE_STREAM_BENCH");
  if (spec == nullptr) return;
  KeepFreedMemory();  // as the `stallscope` command reads
  std::string path = spec;
  StreamOptions so;
  so.keep_gaps = false;  // as `report` reads
  if (auto colon = path.rfind(':'); colon != std::string::npos) {
    so.steps_per_window = std::stoul(path.substr(colon + 1));
    path = path.substr(0, colon);
  }
  const auto t0 = std::chrono::steady_clock::now();
  auto index = IndexTraceFile(path);
  REQUIRE(index.ok());
  uint64_t events = 0;  // the records of the chunks slices choose among
  for (const ChunkSpan& c : index->chunks) {
    const tf::ChunkTypeInfo* info = tf::FindChunkType(c.type);
    if (info != nullptr && info->reading == tf::ChunkReading::kSliced) events += c.count;
  }
  auto reader = SliceReader::OpenFile(path, *index);
  REQUIRE(reader.ok());
  auto pattern = CompileStepPattern(kDefaultStepPattern);
  REQUIRE(pattern.ok());
  const auto t1 = std::chrono::steady_clock::now();
  auto s = AnalyzeStreamed(&*reader, *index, *pattern, {}, so);
  REQUIRE(s.ok());
  const auto t2 = std::chrono::steady_clock::now();
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  const double index_s = std::chrono::duration<double>(t1 - t0).count();
  const double total_s = std::chrono::duration<double>(t2 - t0).count();
  int64_t idle = 0;
  for (const StepStats& st : s->steps) idle += st.gpu_idle_ns;
  std::printf("streamed: %s: %zu steps, %llu events; index %.2f s, analysis %.2f s "
              "(%.1f M events a second in all; the passes %.2f, %.2f, %.2f, %.2f s, the steps from the "
              "launch sequence %.2f s); slices read: %zu for the NVTX ranges, %zu for the launch "
              "sequence, %zu for the steps' spans (%s), %zu for %zu windows of %zu steps, %zu for "
              "the hotspots (%s; %zu calls that can be hotspots held); %llu chunks decoded, "
              "%llu kept; the largest slice %zu calls, %zu ops; GPU idle %.3f s, %zu hotspots; "
              "peak %ld MB\n",
              path.c_str(), s->steps.size(), static_cast<unsigned long long>(events), index_s,
              total_s - index_s, static_cast<double>(events) / total_s / 1e6, s->seconds[0], s->seconds[1],
              s->seconds[2], s->seconds[3], s->seconds[4], s->slices[0], s->slices[4],
              s->slices[1],
              s->spans_fused          ? "none: from the windows' slices"
              : s->spans_fused_failed ? "their own pass, after the windows' slices could not give them"
                                      : "their own pass",
              s->slices[2], (s->steps.size() + s->steps_per_window - 1) / s->steps_per_window,
              s->steps_per_window, s->slices[3],
              s->hotspots_pass ? "a pass of their own" : "the calls outside the windows' slices",
              s->hotspot_calls, static_cast<unsigned long long>(s->chunks_decoded),
              static_cast<unsigned long long>(s->chunks_kept), s->max_slice_calls, s->max_slice_ops,
              static_cast<double>(idle) / 1e9, s->hotspots.size(), ru.ru_maxrss / 1024);
}

}  // namespace
}  // namespace stallscope::analyzer
