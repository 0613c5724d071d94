// Tests of the step finder: NVTX step ranges (outermost, on the launching
// thread), explicit step markers, no markers, the pattern option, and the
// tiling of the device timeline.
#include "analyzer/analyze/steps.h"

#include <map>

#include <catch2/catch.hpp>

#include "analyzer/testing/test_util.h"

namespace stallscope::analyzer {
namespace {

using testing::kUs;
using testing::TraceBuilder;
namespace tf = stallscope::trace;

// Three 1 ms steps; each launches one kernel that runs past the step's host
// range.
TraceBuilder ThreeSteps(const std::string& name = "step") {
  TraceBuilder b;
  auto api = testing::AddStandardApis(&b);
  for (int k = 0; k < 3; ++k) {
    const int64_t t0 = k * 1000 * kUs;
    b.Range(1, t0, t0 + 1000 * kUs, name + " " + std::to_string(k));
    b.Range(1, t0 + 100 * kUs, t0 + 200 * kUs, "iter inner");  // nested: ignored
    b.Submit(1, api.launch, t0 + 100 * kUs, t0 + 105 * kUs, t0 + 300 * kUs, t0 + 1200 * kUs);
  }
  return b;
}

// Guards step semantics: step k spans from the end of step k-1 to the end
// of the last op submitted in its host range; the first starts at the
// earlier of its range's push and its first op (so the 100 us before its
// first call, an input wait right after the push, is step 0's idle); steps
// tile.
TEST_CASE("NVTX step ranges tile the device timeline", "[steps]") {
  Report r = testing::AnalyzeOrDie(ThreeSteps());
  CHECK(r.step_source == "marker");
  REQUIRE(r.steps.size() == 3);
  CHECK(r.steps[0].start_ns == 0);
  CHECK(r.steps[0].gpu_idle_ns == 300 * kUs);  // [0, 300): the push to the first op
  CHECK(testing::CauseOf(r.steps[0].idle_by_cause, Cause::kHostWait) >= 100 * kUs);
  CHECK(r.steps[0].end_ns == 1200 * kUs);
  CHECK(r.steps[0].host_start_ns == 0);
  CHECK(r.steps[0].host_end_ns == 1000 * kUs);
  for (size_t k = 1; k < 3; ++k) {
    CHECK(r.steps[k].start_ns == r.steps[k - 1].end_ns);
    CHECK(r.steps[k].end_ns == static_cast<int64_t>(k * 1000 + 1200) * kUs);
    CHECK(r.steps[k].launches == 1);
  }
  CHECK(r.totals.wall_ns == r.steps.back().end_ns - r.steps.front().start_ns);
  int64_t idle = 0;
  for (const StepStats& s : r.steps) idle += s.gpu_idle_ns;
  CHECK(idle == r.totals.gpu_idle_ns);
}

// Guards the open tail of step()-style markers: torch.profiler's step()
// closes ProfilerStep#k and opens #k+1, so after the loop one more range runs
// to the profiler's stop. With nothing submitted in it (a synchronize only)
// it is not a step, and the report says so; a last range that submitted
// work, or a lone range, stays a step.
TEST_CASE("an empty last marked range is not a step", "[steps]") {
  auto has_diag = [](const Report& r) {
    for (const Diagnostic& d : r.diagnostics) {
      if (d.id == DiagId::kEmptyLastStep) return true;
    }
    return false;
  };
  TraceBuilder b = ThreeSteps("ProfilerStep#");
  auto api = testing::AddStandardApis(&b);
  b.Range(1, 3000 * kUs, 3500 * kUs, "ProfilerStep#3");
  b.Call(1, api.sync, 3100 * kUs, 3300 * kUs);
  Report r = testing::AnalyzeOrDie(b);
  CHECK(r.step_source == "marker");
  CHECK(r.steps.size() == 3);
  CHECK(has_diag(r));

  TraceBuilder kept = ThreeSteps("ProfilerStep#");
  auto api2 = testing::AddStandardApis(&kept);
  kept.Range(1, 3000 * kUs, 3500 * kUs, "ProfilerStep#3");
  kept.Submit(1, api2.launch, 3100 * kUs, 3105 * kUs, 3300 * kUs, 3400 * kUs);
  Report r2 = testing::AnalyzeOrDie(kept);
  CHECK(r2.steps.size() == 4);
  CHECK_FALSE(has_diag(r2));

  TraceBuilder lone;
  auto api3 = testing::AddStandardApis(&lone);
  lone.Range(1, 0, 500 * kUs, "step 0");
  lone.Call(1, api3.sync, 100 * kUs, 300 * kUs);
  Report r3 = testing::AnalyzeOrDie(lone);
  CHECK(r3.steps.size() == 1);
  CHECK_FALSE(has_diag(r3));
}

// Guards the pattern: case-insensitive default, --step-pattern override,
// and no match → one step with step_source "none".
TEST_CASE("step pattern", "[steps]") {
  CHECK(testing::AnalyzeOrDie(ThreeSteps("ProfilerStep#")).steps.size() == 3);
  CHECK(testing::AnalyzeOrDie(ThreeSteps("STEP")).steps.size() == 3);
  AnalysisOptions o;
  o.step_pattern = "^batch";
  Report r = testing::AnalyzeOrDie(ThreeSteps("batch"), o);
  CHECK(r.steps.size() == 3);
  Report none = testing::AnalyzeOrDie(ThreeSteps("forward"));
  // "iter inner" still matches the default pattern.
  CHECK(none.steps.size() == 3);
  o.step_pattern = "nomatch";
  // One launch per step is no period (a step has at least two calls): the
  // whole run is one step.
  Report whole = testing::AnalyzeOrDie(ThreeSteps(), o);
  CHECK(whole.step_source == "none");
  REQUIRE(whole.steps.size() == 1);
  CHECK(whole.steps[0].start_ns == 100 * kUs);
  CHECK(whole.steps[0].end_ns == 3200 * kUs);
  CHECK_FALSE(CompileStepPattern("(unclosed").ok());
}

// Guards StepNames: a name's answer, remembered, is IsStepName's, asked
// again and in any order.
TEST_CASE("step names are matched once each, with IsStepName's answer", "[steps]") {
  Timeline t;
  t.strings[1] = "ProfilerStep#7";
  t.strings[2] = "forward";
  t.strings[3] = "";
  t.strings[4] = std::string(2000, 'x') + "step";  // past the 1,024 bytes matched
  const std::regex pattern("step", std::regex::icase);
  StepNames names(t, pattern);
  for (int round = 0; round < 2; ++round) {
    for (uint32_t id : {2u, 1u, 4u, 3u, 9u, 1u}) {
      CAPTURE(round, id);
      CHECK(names(id) == IsStepName(t, id, pattern));
    }
  }
  CHECK(names(1));
  CHECK_FALSE(names(2));
  CHECK_FALSE(names(4));
}

// Guards the explicit step API (kStepBegin/kStepEnd) as a step source.
TEST_CASE("explicit step markers", "[steps]") {
  TraceBuilder b;
  auto api = testing::AddStandardApis(&b);
  for (int k = 0; k < 2; ++k) {
    const int64_t t0 = k * 1000 * kUs;
    b.Nvtx(1, tf::NvtxType::kStepBegin, t0, "", k);
    b.Submit(1, api.launch, t0 + 10 * kUs, t0 + 15 * kUs, t0 + 20 * kUs, t0 + 500 * kUs);
    b.Nvtx(1, tf::NvtxType::kStepEnd, t0 + 900 * kUs, "", k);
  }
  Report r = testing::AnalyzeOrDie(b);
  CHECK(r.step_source == "marker");
  REQUIRE(r.steps.size() == 2);
  CHECK(r.steps[1].start_ns == 500 * kUs);
  CHECK(r.steps[1].end_ns == 1500 * kUs);
}

// Guards the choice of thread: ranges on the thread with the most launches
// win over ranges on another thread.
TEST_CASE("step ranges come from the launching thread", "[steps]") {
  TraceBuilder b = ThreeSteps();
  b.Range(9, 0, 3000 * kUs, "dataloader step");
  Report r = testing::AnalyzeOrDie(b);
  CHECK(r.steps.size() == 3);
}


// ---- Steps without markers: the period of the launch sequence ----

// One step of a loop without markers on thread 1: `input_us` of host wait,
// a batch copy, the kernels in `kernels` (each 100 us, back to back on the
// device) and, with `readback`, a blocking 4-byte copy back. Returns the
// time after the step; `first_enter` gets the enter of its first call.
int64_t LoopStep(TraceBuilder* b, const testing::Apis& api, int64_t t, int64_t input_us,
                 const std::vector<std::string>& kernels, bool readback,
                 int64_t* first_enter = nullptr) {
  t += input_us * kUs;
  if (first_enter != nullptr) *first_enter = t;
  int64_t dev = t + 10 * kUs;
  b->Submit(1, api.memcpy_async, t, t + 5 * kUs, dev, dev + 50 * kUs, tf::DeviceOpKind::kMemcpy,
            "HtoD");
  dev += 50 * kUs;
  t += 10 * kUs;
  for (const std::string& k : kernels) {
    b->Submit(1, api.launch, t, t + 5 * kUs, std::max(dev, t + 10 * kUs),
              std::max(dev, t + 10 * kUs) + 100 * kUs, tf::DeviceOpKind::kKernel, k);
    dev = std::max(dev, t + 10 * kUs) + 100 * kUs;
    t += 10 * kUs;
  }
  if (readback) {
    b->Submit(1, api.memcpy, t, dev + 10 * kUs, dev, dev + 5 * kUs, tf::DeviceOpKind::kMemcpy,
              "DtoH", {.bytes = 4});
    t = dev + 20 * kUs;
  }
  return std::max(t, readback ? t : t);
}

// Steps found without markers, beginning at `starts`, each with `launches`
// launches.
void CheckAutoSteps(const Report& r, const std::vector<int64_t>& starts, int64_t launches) {
  CHECK(r.step_source == "auto");
  REQUIRE(r.steps.size() == starts.size());
  for (size_t k = 0; k < starts.size(); ++k) {
    CHECK(r.steps[k].host_start_ns == starts[k]);
    CHECK(r.steps[k].launches == launches);
  }
}

const std::vector<std::string> kMix = {"load", "gemm_fwd", "relu", "gemm_bwd", "sgd", "loss"};

// Guards exact periodicity: every step starts at its batch copy (the call
// after the longest host gap), step_source "auto", 6 steps.
TEST_CASE("auto steps: exact period", "[steps][auto]") {
  TraceBuilder b;
  auto api = testing::AddStandardApis(&b);
  int64_t t = 0;
  std::vector<int64_t> starts;
  for (int k = 0; k < 6; ++k) {
    int64_t first;
    t = LoopStep(&b, api, t, 1000, kMix, false, &first);
    starts.push_back(first);
  }
  Report r = testing::AnalyzeOrDie(b);
  CHECK(r.step_source == "auto");
  REQUIRE(r.steps.size() == 6);
  for (size_t k = 0; k < 6; ++k) {
    CHECK(r.steps[k].host_start_ns == starts[k]);
    CHECK(r.steps[k].launches == 6);  // the batch copy is not a launch
  }
}

// Guards a loop launched from two threads (PyTorch: forward and optimizer
// from the Python thread, backward from the autograd engine's): the
// backward thread launches the most, yet steps begin at the Python thread's
// first upload after the input wait (the host's longest silence, across
// threads); the upload of x and of y are one symbol (two copies a step);
// the copies' pointers differ from step to step (a caching allocator) and
// do not break the period; every launch of both threads is in its step.
TEST_CASE("auto steps: two launching threads, two uploads a step", "[steps][auto]") {
  TraceBuilder b;
  auto api = testing::AddStandardApis(&b);
  int64_t t = 0;
  std::vector<int64_t> starts;
  for (int k = 0; k < 6; ++k) {
    t += 2000 * kUs;  // the input wait
    starts.push_back(t);
    for (int c = 0; c < 2; ++c) {  // x and y, into new buffers each step
      b.Submit(1, api.memcpy_async, t, t + 5 * kUs, t + 10 * kUs, t + 20 * kUs,
               tf::DeviceOpKind::kMemcpy, "", {.object = uint64_t(0x1000 + 64 * k + c)});
      t += 10 * kUs;
    }
    for (const char* f : {"fwd_a", "fwd_b", "loss"}) {
      b.Submit(1, api.launch, t, t + 5 * kUs, t + 10 * kUs, t + 100 * kUs, tf::DeviceOpKind::kKernel, f);
      t += 10 * kUs;
    }
    // The autograd thread: more launches than the Python thread's 5.
    for (const char* g : {"bwd_loss", "bwd_b", "bwd_b_w", "bwd_a", "bwd_a_w", "bwd_acc"}) {
      b.Submit(2, api.launch, t, t + 5 * kUs, t + 10 * kUs, t + 100 * kUs, tf::DeviceOpKind::kKernel, g);
      t += 10 * kUs;
    }
    for (const char* o : {"sgd_a", "sgd_b"}) {
      b.Submit(1, api.launch, t, t + 5 * kUs, t + 10 * kUs, t + 100 * kUs, tf::DeviceOpKind::kKernel, o);
      t += 10 * kUs;
    }
  }
  Report r = testing::AnalyzeOrDie(b);
  CheckAutoSteps(r, starts, 11);
}

// Guards set-up that repeats the step's first symbol: the model's upload,
// parameter by parameter (a copy and a synchronize each, as PyTorch's
// `.to(device)` from pageable memory does), before a loop whose steps begin
// with the upload of x and y after the input wait. The set-up copies are
// outside every step: the steps are the loop's, beginning at its x uploads.
TEST_CASE("auto steps: set-up uploads with the step's copy symbol", "[steps][auto]") {
  TraceBuilder b;
  auto api = testing::AddStandardApis(&b);
  int64_t t = 0;
  for (int p = 0; p < 10; ++p) {  // the parameters, one copy and a wait each
    b.Submit(1, api.memcpy_async, t, t + 5 * kUs, t + 10 * kUs, t + 200 * kUs, tf::DeviceOpKind::kMemcpy, "",
             {.object = uint64_t(0x9000 + 64 * p)});
    b.Call(1, api.sync, t + 6 * kUs, t + 210 * kUs);
    t += 3000 * kUs;
  }
  std::vector<int64_t> starts;
  for (int k = 0; k < 6; ++k) {
    t += 2000 * kUs;  // the input wait
    starts.push_back(t);
    for (int c = 0; c < 2; ++c) {  // x and y
      b.Submit(1, api.memcpy_async, t, t + 5 * kUs, t + 10 * kUs, t + 20 * kUs, tf::DeviceOpKind::kMemcpy, "",
               {.object = uint64_t(0x1000 + 64 * k + c)});
      t += 10 * kUs;
    }
    for (const char* f : {"fwd_a", "fwd_b", "loss", "bwd_a", "bwd_b", "sgd"}) {
      b.Submit(1, api.launch, t, t + 5 * kUs, t + 10 * kUs, t + 100 * kUs, tf::DeviceOpKind::kKernel, f);
      t += 10 * kUs;
    }
  }
  Report r = testing::AnalyzeOrDie(b);
  CheckAutoSteps(r, starts, 6);
  uint64_t outside = 0;
  for (const Diagnostic& d : r.diagnostics) {
    if (d.id == DiagId::kOpsOutsideSteps) outside = d.count;
  }
  CHECK(outside == 10);  // the set-up's uploads
}

// Guards frees in the launch sequence: a temporary freed every step (each
// time a different pointer) belongs to its step, the last one included, and
// the teardown free after the loop does not.
TEST_CASE("auto steps: a free every step", "[steps][auto]") {
  TraceBuilder b;
  auto api = testing::AddStandardApis(&b);
  int64_t t = 0;
  std::vector<int64_t> starts;
  for (int k = 0; k < 5; ++k) {
    starts.push_back(t);
    for (int j = 0; j < 3; ++j) {
      b.Submit(1, api.launch, t, t + 5 * kUs, t + 10 * kUs, t + 300 * kUs, tf::DeviceOpKind::kKernel,
               "k" + std::to_string(j));
      t += 10 * kUs;
    }
    testing::CallOptions o;
    o.object = 0x7f0000000000 + 0x100000 * static_cast<uint64_t>(k);
    b.Call(1, api.free, t, t + 1000 * kUs, o);  // waits for the queue
    t += 1100 * kUs;
  }
  b.Call(1, api.sync, t, t + 10 * kUs);
  b.Call(1, api.free, t + 20 * kUs, t + 30 * kUs);
  Report r = testing::AnalyzeOrDie(b);
  CHECK(r.step_source == "auto");
  REQUIRE(r.steps.size() == 5);
  for (size_t k = 0; k < 5; ++k) {
    CHECK(r.steps[k].host_start_ns == starts[k]);
    CHECK(r.steps[k].sync_count == 1);
  }
  CHECK(r.steps[4].host_end_ns == starts[4] + 1030 * kUs);
}

// Guards the phase with a blocking read-back and no input wait: the step
// starts with the call after the read-back, not mid-step.
TEST_CASE("auto steps: phase after the read-back", "[steps][auto]") {
  TraceBuilder b;
  auto api = testing::AddStandardApis(&b);
  // Set-up before the loop: allocations are not part of the sequence.
  b.Call(1, api.alloc, 0, 50 * kUs);
  int64_t t = 100 * kUs;
  std::vector<int64_t> starts;
  for (int k = 0; k < 5; ++k) {
    int64_t first;
    t = LoopStep(&b, api, t, 0, kMix, true, &first);
    starts.push_back(first);
  }
  Report r = testing::AnalyzeOrDie(b);
  CHECK(r.step_source == "auto");
  REQUIRE(r.steps.size() == 5);
  for (size_t k = 0; k < 5; ++k) CHECK(r.steps[k].host_start_ns == starts[k]);
  // The read-back is a hotspot once per step.
  REQUIRE(r.hotspots.size() == 1);
  CHECK(r.hotspots[0].count == 5);
}

// Guards the phase against the machine's silences: each step, after a
// 100 us input wait, a batch copy and 40 launches 10 us apart in which the
// thread's CPU clock moves 100 us (it sleeps between launches, as a Python
// thread waiting for the GIL does), then a 500 us gap in which its
// run-queue delay moves 480 us, then one launch. The best estimate of the
// gap's preemption holds the stretch's 300 us off its CPU clock as waiting
// (175 us left to the gap: 325 us of silence, more than twice the input
// wait's); the samples allow all 480 us there, so no more than 20 us of
// that gap is surely the job's: the steps begin at the copies.
TEST_CASE("auto steps: a silence the samples allow to be preemption decides no phase", "[steps][auto]") {
  TraceBuilder b;
  auto api = testing::AddStandardApis(&b);
  int64_t t = 0, cpu = 0, delay = 0;
  std::vector<int64_t> starts;
  for (int k = 0; k < 6; ++k) {
    t += 100 * kUs;
    starts.push_back(t);
    b.CpuSched(1, t, cpu, delay);  // the enter after the input wait
    b.Submit(1, api.memcpy_async, t, t + 5 * kUs, t + 8 * kUs, t + 20 * kUs, tf::DeviceOpKind::kMemcpy, "HtoD");
    t += 10 * kUs;
    for (int i = 0; i < 40; ++i) {
      b.Submit(1, api.launch, t, t + 5 * kUs, t + 8 * kUs, t + 13 * kUs, tf::DeviceOpKind::kKernel,
               "k" + std::to_string(i));
      t += 10 * kUs;
    }
    cpu += 100 * kUs;
    t += 495 * kUs;  // the gap: 500 us from the last launch's exit
    delay += 480 * kUs;
    b.CpuSched(1, t, cpu, delay);
    b.Submit(1, api.launch, t, t + 5 * kUs, t + 8 * kUs, t + 13 * kUs, tf::DeviceOpKind::kKernel, "after");
    t += 5 * kUs;
    cpu += 5 * kUs;
  }
  CheckAutoSteps(testing::AnalyzeOrDie(b), starts, 41);
}

// Guards robustness: two warm-up steps with extra kernels (autotuning), an
// occasional extra kernel in the steady state, and a last partial step.
TEST_CASE("auto steps: warm-up, varying mix, partial last step", "[steps][auto]") {
  TraceBuilder b;
  auto api = testing::AddStandardApis(&b);
  std::vector<std::string> mix = {"load", "conv_a", "conv_b", "gemm_fwd", "relu",
                                  "gemm_bwd", "relu_bwd", "sgd", "loss"};
  int64_t t = 0;
  std::vector<int64_t> starts;
  for (int k = 0; k < 10; ++k) {
    std::vector<std::string> ks = mix;
    if (k < 2) ks.insert(ks.begin() + 1, {"autotune_1", "autotune_2", "autotune_3"});
    if (k == 5 || k == 8) ks.insert(ks.begin() + 4, "extra_norm");
    int64_t first;
    t = LoopStep(&b, api, t, 800, ks, false, &first);
    starts.push_back(first);
  }
  // A partial step: input wait, the batch copy and two kernels.
  int64_t first;
  LoopStep(&b, api, t, 800, {"load", "conv_a"}, false, &first);
  starts.push_back(first);
  Report r = testing::AnalyzeOrDie(b);
  CHECK(r.step_source == "auto");
  REQUIRE(r.steps.size() == 11);
  for (size_t k = 0; k < 11; ++k) CHECK(r.steps[k].host_start_ns == starts[k]);
  CHECK(r.steps[0].launches == 12);
  CHECK(r.steps[5].launches == 10);
  CHECK(r.steps[10].launches == 2);
}

// Guards the phase without any host gap: the first launch of the first full
// period (the batch copy), and a structure of repeated layers inside each step
// does not make the layer the step.
TEST_CASE("auto steps: repeated layers, no host gaps", "[steps][auto]") {
  TraceBuilder b;
  auto api = testing::AddStandardApis(&b);
  std::vector<std::string> mix = {"load"};
  for (int l = 0; l < 12; ++l) {
    mix.push_back("attn");
    mix.push_back("mlp");
  }
  mix.push_back("sgd");
  int64_t t = 0;
  std::vector<int64_t> starts;
  for (int k = 0; k < 4; ++k) {
    int64_t first;
    t = LoopStep(&b, api, t, 0, mix, false, &first);
    starts.push_back(first);
  }
  Report r = testing::AnalyzeOrDie(b);
  CHECK(r.step_source == "auto");
  REQUIRE(r.steps.size() == 4);
  for (size_t k = 0; k < 4; ++k) CHECK(r.steps[k].host_start_ns == starts[k]);
}

// Guards "none": launches without repetition, and too few repetitions.
TEST_CASE("auto steps: no repetition", "[steps][auto]") {
  TraceBuilder b;
  auto api = testing::AddStandardApis(&b);
  int64_t t = 0;
  for (int k = 0; k < 40; ++k) {
    b.Submit(1, api.launch, t, t + 5 * kUs, t + 10 * kUs, t + 50 * kUs, tf::DeviceOpKind::kKernel,
             "k" + std::to_string(k));
    t += 100 * kUs;
  }
  Report r = testing::AnalyzeOrDie(b);
  CHECK(r.step_source == "none");
  CHECK(r.steps.size() == 1);

  TraceBuilder two;
  api = testing::AddStandardApis(&two);
  t = 0;
  for (int k = 0; k < 2; ++k) t = LoopStep(&two, api, t, 1000, kMix, false);
  Report r2 = testing::AnalyzeOrDie(two);
  CHECK(r2.step_source == "none");
}

// Guards precedence: NVTX step ranges win over the detected period.
TEST_CASE("auto steps: markers win", "[steps][auto]") {
  TraceBuilder b;
  auto api = testing::AddStandardApis(&b);
  int64_t t = 0;
  for (int k = 0; k < 4; ++k) t = LoopStep(&b, api, t, 1000, kMix, false);
  b.Range(1, 0, t / 2, "step 0");
  b.Range(1, t / 2, t, "step 1");
  Report r = testing::AnalyzeOrDie(b);
  CHECK(r.step_source == "marker");
  CHECK(r.steps.size() == 2);
}

// Guards the counts the reader keeps: ops per device (NCCL kernels weighted
// on request, in order of first op, interleaved devices merged) and calls
// and launches per thread (the main thread launches most, whatever its
// number of calls; ties to the lower id).
TEST_CASE("ops are counted per device and calls per thread", "[steps]") {
  TraceBuilder b;
  auto api = testing::AddStandardApis(&b);
  const uint32_t devices[] = {3, 3, 1, 3, 1, 1, 1, 5};
  uint32_t cupti = 1;
  for (uint32_t i = 0; i < 8; ++i) {
    const uint64_t start = (10 + i * 10) * kUs;
    const auto kind = i % 3 == 0 ? tf::DeviceOpKind::kNccl : tf::DeviceOpKind::kKernel;
    b.Device(start, start + 5 * kUs, kind, "k", cupti++, 7, devices[i]);
  }
  // Thread 9: 5 calls, 1 launch; thread 4: 2 launches, interleaved with 9.
  for (int i = 0; i < 5; ++i) b.Call(9, i == 0 ? api.launch : api.other, i * 2 * kUs, (i * 2 + 1) * kUs);
  b.Call(4, api.launch, 1 * kUs, 2 * kUs);
  b.Call(4, api.launch, 5 * kUs, 6 * kUs);
  Timeline t = testing::ReadOrDie(b);
  CHECK(MainThread(t) == 4);
  std::map<uint32_t, std::pair<int64_t, int64_t>> per_thread;
  for (const ThreadCallCount& c : t.calls_per_thread) per_thread[c.tid] = {c.calls, c.launches};
  CHECK(per_thread == std::map<uint32_t, std::pair<int64_t, int64_t>>{{4, {2, 2}}, {9, {5, 1}}});
  b.Call(7, api.launch, 20 * kUs, 21 * kUs);
  b.Call(7, api.launch, 22 * kUs, 23 * kUs);  // as many launches as 4, more calls
  b.Call(7, api.other, 24 * kUs, 25 * kUs);
  CHECK(MainThread(testing::ReadOrDie(b)) == 7);
  b.Call(4, api.other, 30 * kUs, 31 * kUs);  // now a tie: the lower id
  CHECK(MainThread(testing::ReadOrDie(b)) == 4);
  // Device 3: ops 0, 1, 3 (NCCL 0, 3); device 1: 2, 4, 5, 6 (NCCL 6); 5: op 7.
  using Counts = std::vector<std::pair<uint32_t, int64_t>>;
  CHECK(OpsPerDevice(t, 1) == Counts{{3, 3}, {1, 4}, {5, 1}});
  CHECK(OpsPerDevice(t, 100) == Counts{{3, 201}, {1, 103}, {5, 1}});
  size_t n = 0;
  CHECK(BusiestDevice(t, &n) == 1);
  CHECK(n == 3);
}

// Guards sampled device timing (STALLSCOPE_DEVICE_SAMPLE=3): timing starts
// on, the recorder turns it off at step 1's begin, on again just after step
// 2's (the lead step, so step 3's start is timed), off at step 4's, on after
// step 5's. Only steps whose whole span was timed are reported, under their
// original numbers: 0, 3 and 6. A synchronize in an untimed step is no
// hotspot (its cost cannot be seen); the one in step 3 is.
TEST_CASE("sampled device timing keeps the fully timed steps", "[steps][sampled]") {
  Report r = testing::AnalyzeOrDie(testing::SampledSteps());
  REQUIRE(r.steps.size() == 3);
  CHECK(r.sampled_every == 3);
  CHECK(r.steps_found == 7);
  CHECK(r.steps[0].index == 0);
  CHECK(r.steps[1].index == 3);
  CHECK(r.steps[2].index == 6);
  // Step 3 starts where step 2's (timed) kernel ended.
  CHECK(r.steps[1].start_ns == 2900 * kUs);
  CHECK(r.steps[1].end_ns == 3900 * kUs);
  int64_t spans = 0;
  for (const StepStats& s : r.steps) spans += s.end_ns - s.start_ns;
  CHECK(r.totals.wall_ns == spans);
  bool said = false;
  for (const Diagnostic& d : r.diagnostics) said |= d.id == DiagId::kDeviceSampled;
  CHECK(said);
  REQUIRE(r.hotspots.size() == 1);
  CHECK(r.hotspots[0].site.line == 42);
  CHECK(r.hotspots[0].count == 1);

  // The same trace without its timing turns is an ordinary one: all seven
  // steps, both synchronizations.
  TraceBuilder plain;
  auto papi = testing::AddStandardApis(&plain);
  for (int k = 0; k < 7; ++k) {
    const int64_t t0 = k * 1000 * kUs;
    plain.Range(1, t0, t0 + 1000 * kUs, "step " + std::to_string(k));
    plain.Submit(1, papi.launch, t0 + 100 * kUs, t0 + 105 * kUs, t0 + 300 * kUs, t0 + 900 * kUs);
  }
  CHECK(testing::AnalyzeOrDie(plain).steps.size() == 7);
}

}  // namespace
}  // namespace stallscope::analyzer
