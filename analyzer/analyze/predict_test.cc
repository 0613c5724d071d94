// Tests of the predictions every report carries, on hand-built loops: each
// is the what-if replay of the same change (replay_test.cc checks the
// replay's numbers by hand), a single hotspot is also "all of them", and a
// trace without launch-bound stretches has no CUDA-graph estimate.
#include "analyzer/analyze/predict.h"

#include <catch2/catch.hpp>

#include "analyzer/analyze/replay.h"
#include "analyzer/testing/test_util.h"

namespace stallscope::analyzer {
namespace {

using testing::kUs;
using testing::TraceBuilder;

constexpr int kSteps = 6;

// Each step: 100 us of host time, a launch whose 1 ms kernel a stream
// synchronize waits for; then (with `tiny`) 10 launches 20 us apart whose
// 2 us kernels the host cannot keep busy.
TraceBuilder Loop(bool tiny) {
  TraceBuilder b;
  auto api = testing::AddStandardApis(&b);
  const int64_t period = 1115 * kUs + (tiny ? 220 * kUs : 0);
  for (int k = 0; k < kSteps; ++k) {
    const int64_t step = 1'000'000 + k * period;
    b.Range(1, step, step + period, "step");
    int64_t t = step + 100 * kUs;
    b.Submit(1, api.launch, t, t + 5 * kUs, t + 10 * kUs, t + 1010 * kUs);
    b.Call(1, api.sync, t + 6 * kUs, t + 1015 * kUs);
    t += 1015 * kUs;
    for (int i = 0; tiny && i < 10; ++i, t += 20 * kUs) {
      b.Submit(1, api.launch, t, t + 5 * kUs, t + 10 * kUs, t + 12 * kUs);
    }
  }
  return b;
}

int64_t Mean(const Report& r) {
  int64_t sum = 0;
  for (const StepStats& s : r.steps) sum += s.end_ns - s.start_ns;
  return sum / static_cast<int64_t>(r.steps.size());
}

struct Analyzed {
  Timeline t;
  ProcessAnalysis details;
  Report report;
};

Analyzed Analyze(TraceBuilder b) {
  Analyzed a{testing::ReadOrDie(b)};
  auto r = AnalyzeTimeline(a.t, AnalysisOptions{}, &a.details);
  REQUIRE(r.ok());
  a.report = std::move(*r);
  PredictFixes(a.t, a.details, AnalysisOptions{}, &a.report);
  return a;
}

// Guards: a hotspot's saving is the baseline's mean step less the mean step
// of the replay without its waits (what `whatif --remove-sync` predicts);
// alone, it is also "all hotspots removed"; no launch-bound stretch, no
// CUDA-graph estimate.
TEST_CASE("a hotspot's predicted saving is the replay without its waits", "[predict]") {
  Analyzed a = Analyze(Loop(false));
  const Predictions& p = a.report.predictions;
  REQUIRE(p.made);
  REQUIRE(a.report.hotspots.size() == 1);
  CHECK(p.baseline_mean_step_ns == Mean(a.report));
  ReplayOptions o;
  o.remove_wait.assign(a.t.calls.size(), false);
  for (size_t c = 0; c < a.t.calls.size(); ++c) o.remove_wait[c] = a.details.hotspot_of_call[c] == 0;
  auto without = AnalyzeTimeline(Replay(a.t, a.details.classes, o), AnalysisOptions{});
  REQUIRE(without.ok());
  CHECK(a.report.hotspots[0].predicted_saving_ns == Mean(a.report) - Mean(*without));
  CHECK(a.report.hotspots[0].predicted_saving_ns > 0);
  CHECK(p.hotspots_removed == 1);
  CHECK(p.all_removed_mean_step_ns == Mean(*without));
  CHECK(p.all_removed_step_ns.size() == kSteps);
  CHECK(p.graph_mean_step_ns == -1);
  CHECK(p.graph_stretches == 0);
}

// Guards the CUDA-graph estimate: the 10 short launches after the sync are
// a launch-bound stretch in every step; captured at the default node cost
// the step is shorter, and the estimate is the replay's.
TEST_CASE("launch-bound stretches get the CUDA-graph estimate", "[predict]") {
  Analyzed a = Analyze(Loop(true));
  const Predictions& p = a.report.predictions;
  REQUIRE(p.made);
  CHECK(p.graph_stretches == kSteps);
  CHECK(p.graph_launches_folded == 9 * kSteps);
  CHECK(p.graph_node_ns == kDefaultGraphNodeNs);
  ReplayOptions o;
  o.graph_node_ns = kDefaultGraphNodeNs;
  for (const StepStats& s : a.report.steps) o.graph_windows.emplace_back(s.host_start_ns, s.host_end_ns);
  auto graphs = AnalyzeTimeline(Replay(a.t, a.details.classes, o), AnalysisOptions{});
  REQUIRE(graphs.ok());
  CHECK(p.graph_mean_step_ns == Mean(*graphs));
  CHECK(p.graph_mean_step_ns < p.baseline_mean_step_ns);
}

// Guards the size limit: over kPredictMaxEvents, nothing is predicted and
// the report says why.
TEST_CASE("a trace too large for predictions says so", "[predict]") {
  Analyzed a = Analyze(Loop(false));
  Timeline big = a.t;
  big.calls.resize(kPredictMaxEvents + 1, big.calls.back());
  Report r = a.report;
  PredictFixes(big, a.details, AnalysisOptions{}, &r);
  CHECK_FALSE(r.predictions.made);
  CHECK(r.predictions.skipped.find("not predicted") != std::string::npos);
  CHECK(r.hotspots[0].predicted_saving_ns == -1);
}

}  // namespace
}  // namespace stallscope::analyzer
