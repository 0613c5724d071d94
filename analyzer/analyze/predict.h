// Predicted step times in every report (docs/analyzer.md "Predictions"):
// removing each of the top hotspots alone, removing all of them, and
// capturing the launch-bound stretches in CUDA graphs, each from the
// what-if replay (replay.h) of the analyzed process, analyzed as the report
// is. The same numbers `stallscope whatif` gives for the same change.
#pragma once

#include <cstddef>
#include <cstdint>

#include "analyzer/analyze/analysis.h"
#include "analyzer/model/report.h"
#include "analyzer/model/timeline.h"

namespace stallscope::analyzer {

// Hotspots (in the report's order: by idle caused) predicted one by one.
inline constexpr size_t kPredictHotspots = 5;
// Calls and device ops above which no prediction is made (each replay
// copies the timeline and analyzes it again): `stallscope whatif` still can.
inline constexpr int64_t kPredictMaxEvents = 1'000'000;

// Leaves the predictions out where none is made, before any replay: no
// steps, sampled device timing (`sampled_every`), or more than
// kPredictMaxEvents calls and ops (`events`). Resets report->predictions and
// each hotspot's saving (unknown), says why in Predictions::skipped, and
// returns whether they are left out.
bool SkipPredictions(uint32_t sampled_every, int64_t events, Report* report);

// Fills report->predictions and the top hotspots' predicted_saving_ns.
// `details` is AnalyzeTimeline's for `t` (its classes and hotspot_of_call).
void PredictFixes(const Timeline& t, const ProcessAnalysis& details, const AnalysisOptions& options,
                  Report* report);

}  // namespace stallscope::analyzer
