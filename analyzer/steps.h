// Step finding: NVTX ranges matching the step pattern on the launching
// thread, else explicit step markers, else the whole run as one step; then the
// device-timeline span of each step (design.md "A step lives on the device
// timeline").
#pragma once

#include <cstdint>
#include <regex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "analyzer/timeline.h"

namespace stallscope::analyzer {

inline constexpr const char* kDefaultStepPattern = "(?i)step|iter|ProfilerStep";

// Compiles a step pattern; a leading "(?i)" makes it case-insensitive.
absl::StatusOr<std::regex> CompileStepPattern(const std::string& pattern);

struct StepSpan {
  int64_t start_ns = 0;  // device timeline: tiles [first.start, last.end)
  int64_t end_ns = 0;
  int64_t host_start_ns = 0;
  int64_t host_end_ns = 0;
};

struct StepPlan {
  std::string source = "none";  // marker | none
  uint32_t main_tid = 0;        // the thread with the most launches
  uint32_t device = 0;          // the device analyzed
  std::vector<StepSpan> steps;
  int64_t ops_outside = 0;  // device ops submitted outside every step
};

// The device with the most ops (0 when none).
uint32_t BusiestDevice(const Timeline& t);
// The thread with the most launches (most calls when none launched).
uint32_t MainThread(const Timeline& t);

StepPlan FindSteps(const Timeline& t, const std::regex& pattern, uint32_t device);

}  // namespace stallscope::analyzer
