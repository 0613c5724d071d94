// Predicted step times in every report (see predict.h).
#include "analyzer/analyze/predict.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "analyzer/analyze/parallel.h"
#include "analyzer/analyze/replay.h"

namespace stallscope::analyzer {
namespace {

// The mean of end_ns - start_ns over the report's steps (as the report's
// steps[] and `whatif` define a step's time); -1 without steps.
int64_t MeanStep(const Report& r, std::vector<int64_t>* steps = nullptr) {
  if (r.steps.empty()) return -1;
  int64_t sum = 0;
  for (const StepStats& s : r.steps) {
    sum += s.end_ns - s.start_ns;
    if (steps != nullptr) steps->push_back(s.end_ns - s.start_ns);
  }
  return sum / static_cast<int64_t>(r.steps.size());
}

}  // namespace

bool SkipPredictions(uint32_t sampled_every, int64_t events, Report* report) {
  Predictions& p = report->predictions;
  p = Predictions{};
  for (Hotspot& h : report->hotspots) h.predicted_saving_ns = -1;
  if (report->steps.empty()) return true;
  if (sampled_every != 0) {
    p.skipped = absl::StrFormat(
        "not predicted: device timing was sampled (one step in %d); a prediction replays every "
        "step's device work",
        sampled_every);
    return true;
  }
  if (events > kPredictMaxEvents) {
    p.skipped = absl::StrFormat(
        "not predicted: the analyzed process has %d calls and device ops (over %d); "
        "`stallscope whatif` predicts one fix at a time",
        events, kPredictMaxEvents);
    return true;
  }
  return false;
}

void PredictFixes(const Timeline& t, const ProcessAnalysis& details, const AnalysisOptions& options,
                  Report* report) {
  if (SkipPredictions(details.plan.sampled_every, static_cast<int64_t>(t.calls.size() + t.ops.size()),
                      report)) {
    return;
  }
  Predictions& p = report->predictions;
  p.baseline_mean_step_ns = MeanStep(*report);
  AnalysisOptions inner = options;
  inner.predict = false;
  inner.progress = nullptr;
  inner.stream = false;  // a replayed timeline is not its file's
  ReplayOptions base;
  base.launch_dispatch_ns = options.attribution.launch_dispatch_ns;

  // The replays: each top hotspot alone, all of them, the CUDA graphs.
  struct Task {
    ReplayOptions options;
    int hotspot = -1;  // -1: all hotspots; -2: graphs
    int64_t mean = -1;
    std::vector<int64_t> steps;
    ReplayStats stats;
  };
  std::vector<Task> tasks;
  const size_t nh = report->hotspots.size();
  if (nh > 0) {
    std::vector<bool> all(t.calls.size(), false);
    std::vector<std::vector<bool>> alone(std::min(nh, kPredictHotspots));
    for (auto& a : alone) a.assign(t.calls.size(), false);
    for (size_t c = 0; c < t.calls.size() && c < details.hotspot_of_call.size(); ++c) {
      const int32_t h = details.hotspot_of_call[c];
      if (h < 0) continue;
      all[c] = true;
      if (static_cast<size_t>(h) < alone.size()) alone[h][c] = true;
    }
    for (size_t h = 0; h < alone.size(); ++h) {
      Task k{base, static_cast<int>(h)};
      k.options.remove_wait = std::move(alone[h]);
      tasks.push_back(std::move(k));
    }
    if (nh > 1) {
      Task k{base, -1};
      k.options.remove_wait = std::move(all);
      tasks.push_back(std::move(k));
    }
  }
  {
    Task k{base, -2};
    k.options.graph_node_ns = kDefaultGraphNodeNs;
    for (const StepStats& s : report->steps) k.options.graph_windows.emplace_back(s.host_start_ns, s.host_end_ns);
    std::sort(k.options.graph_windows.begin(), k.options.graph_windows.end());
    tasks.push_back(std::move(k));
  }
  // One replay at a time: each holds a copy of the timeline and its
  // analysis, so that the report's peak memory stays about three times
  // what it is without predictions (scripts/bench), not more.
  ParallelFor(tasks.size(), 1, [&](size_t i) {
    Task& k = tasks[i];
    Timeline replayed = Replay(t, details.classes, k.options, &k.stats);
    if (k.hotspot == -2 && k.stats.stretches_captured == 0) return;  // nothing to capture
    auto r = AnalyzeTimeline(replayed, inner);
    if (r.ok()) k.mean = MeanStep(*r, &k.steps);
  });

  for (Task& k : tasks) {
    if (k.mean < 0) continue;
    if (k.hotspot >= 0) {
      report->hotspots[k.hotspot].predicted_saving_ns = p.baseline_mean_step_ns - k.mean;
      if (nh == 1) {  // all of them: this one
        p.hotspots_removed = 1;
        p.all_removed_mean_step_ns = k.mean;
        p.all_removed_step_ns = k.steps;
      }
    } else if (k.hotspot == -1) {
      p.hotspots_removed = static_cast<int>(nh);
      p.all_removed_mean_step_ns = k.mean;
      p.all_removed_step_ns = std::move(k.steps);
    } else {
      p.graph_node_ns = kDefaultGraphNodeNs;
      p.graph_stretches = k.stats.stretches_captured;
      p.graph_launches_folded = k.stats.launches_captured;
      p.graph_mean_step_ns = k.mean;
      p.graph_step_ns = std::move(k.steps);
    }
  }
  p.made = true;
}

}  // namespace stallscope::analyzer
