// `stallscope compare BASE OTHER`: two runs of the same job side by side
// (e.g. real input as BASE, synthetic or cached input as OTHER): per-step and
// per-cause deltas, hotspots that appeared or vanished (by fingerprint), a
// one-sentence verdict, and q2 ("do idle gaps shrink with synthetic or
// cached input?") answered from the two runs. Rules: docs/analyzer.md.
#pragma once

#include <array>
#include <string>
#include <vector>

#include "analyzer/model/report.h"
#include "nlohmann/json.hpp"

namespace stallscope::analyzer {

inline constexpr const char* kCompareSchema = "stallscope.compare/1";
// A cause changed when |other − base| per step is at least this share of the
// larger of the two ...
inline constexpr double kCompareMinChange = 0.5;
// ... and at least this share of BASE's mean step time.
inline constexpr double kCompareMinStepShare = 0.02;
// q2: idle "shrinks" when OTHER's GPU idle per step is at least this much
// lower than BASE's (and by the step share above).
inline constexpr double kQ2MinIdleDrop = 0.25;

struct RunSummary {
  std::string path;
  std::string step_source;
  int steps = 0;
  double mean_step_ns = 0;
  double mean_busy_ns = 0;
  double mean_idle_ns = 0;
  std::array<double, kNumCauses> idle_by_cause{};  // mean per step
  Totals totals;
};

struct Delta {
  double base = 0;
  double other = 0;
  double delta() const { return other - base; }
  // (other − base) / base; false when base is 0.
  bool relative(double* out) const {
    if (base == 0) return false;
    *out = (other - base) / base;
    return true;
  }
};

struct HotspotChange {
  std::string fingerprint;
  std::string api;
  bool explicit_sync = false;
  Frame site;
  std::string suggestion;
  int64_t base_count = 0;
  int64_t other_count = 0;
  double base_per_step = 0;
  double other_per_step = 0;
  int64_t base_idle_caused_ns = 0;
  int64_t other_idle_caused_ns = 0;
};

struct Comparison {
  RunSummary base, other;
  Delta step, busy, idle;
  std::array<Delta, kNumCauses> causes{};
  std::vector<HotspotChange> appeared;  // in OTHER only
  std::vector<HotspotChange> vanished;  // in BASE only
  std::vector<HotspotChange> changed;   // in both, with another count
  std::string verdict;
  Question q2;
};

Comparison CompareReports(const Report& base, const std::string& base_path, const Report& other,
                          const std::string& other_path);

nlohmann::ordered_json ComparisonToJson(const Comparison& c);
std::string RenderCompareJson(const Comparison& c);
std::string RenderCompareText(const Comparison& c);

}  // namespace stallscope::analyzer
