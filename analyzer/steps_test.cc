// Tests of the step finder: NVTX step ranges (outermost, on the launching
// thread), explicit step markers, no markers, the pattern option, and the
// tiling of the device timeline.
#include "analyzer/steps.h"

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
// earlier of its first host call and first op; steps tile.
TEST_CASE("NVTX step ranges tile the device timeline", "[steps]") {
  Report r = testing::AnalyzeOrDie(ThreeSteps());
  CHECK(r.step_source == "marker");
  REQUIRE(r.steps.size() == 3);
  CHECK(r.steps[0].start_ns == 100 * kUs);
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
  Report whole = testing::AnalyzeOrDie(ThreeSteps(), o);
  CHECK(whole.step_source == "none");
  REQUIRE(whole.steps.size() == 1);
  CHECK(whole.steps[0].start_ns == 100 * kUs);
  CHECK(whole.steps[0].end_ns == 3200 * kUs);
  CHECK_FALSE(CompileStepPattern("(unclosed").ok());
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

}  // namespace
}  // namespace stallscope::analyzer
