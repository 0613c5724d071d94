// The analysis pipeline: read → timeline → steps → attribution → hotspots →
// questions, for one process or for every trace in a folder.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "analyzer/attribution.h"
#include "analyzer/report.h"
#include "analyzer/steps.h"
#include "analyzer/timeline.h"

namespace stallscope::analyzer {

struct AnalysisOptions {
  std::string step_pattern = kDefaultStepPattern;
  AttributionOptions attribution;
};

// Analyzes one process. Fails only on an invalid step pattern.
absl::StatusOr<Report> AnalyzeTimeline(const Timeline& t, const AnalysisOptions& options);

// Expands folders into their *.sstrace files (sorted by name); files are kept
// as given. NotFound when a path is missing or a folder holds no trace.
absl::StatusOr<std::vector<std::string>> ExpandTracePaths(const std::vector<std::string>& args);

// Reads and analyzes every trace. With several processes the report's steps,
// hotspots and questions are those of the process with the most device ops;
// `processes` summarizes each.
absl::StatusOr<Report> AnalyzePaths(const std::vector<std::string>& args,
                                    const AnalysisOptions& options);

}  // namespace stallscope::analyzer
