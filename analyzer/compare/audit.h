// `stallscope audit`: checks a run's report against a budget (TOML or JSON:
// max syncs per step, GPU idle share, idle share by cause, step time p95,
// idle caused per hotspot, forbidden / allowed hotspot fingerprints, no new
// hotspot against a baseline run) for nightly jobs, and renders the result as
// a text summary, JUnit XML (one test case per budget check) and a Prometheus
// text-format metrics file. Format and rules: docs/analyzer.md, "Audits".
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "analyzer/model/report.h"

namespace stallscope::analyzer {

inline constexpr const char* kBudgetSchema = "stallscope.budget/1";

struct Budget {
  std::string path;
  std::optional<int64_t> min_steps;
  std::optional<double> max_syncs_per_step;                                 // mean over the steps
  std::optional<double> max_gpu_idle_share;                                 // of the steps' time
  std::array<std::optional<double>, kNumCauses> max_idle_share_by_cause{};  // of the steps' time
  std::optional<double> max_step_time_p95_ms;
  std::optional<double> max_hotspot_idle_caused_ms;  // each hotspot, whole run
  std::optional<std::vector<std::string>> forbidden_fingerprints;
  std::optional<std::vector<std::string>> allowed_fingerprints;
  bool no_new_hotspots = false;  // needs a baseline run
  // Distributed runs (a report over several ranks); a run of one process
  // has no ranks and fails these checks, saying so.
  std::optional<double> max_rank_wait_share;  // waiting for the last rank ÷ step time
  std::optional<int64_t> max_stragglers;      // usually 0
};

enum class BudgetFormat { kToml, kJson };

// Parses a budget; errors are one line starting with "PATH:LINE: " (the line
// is omitted where it is not known), e.g. an unknown key, a value of the
// wrong type or out of range, or a syntax error.
absl::StatusOr<Budget> ParseBudget(std::string_view text, const std::string& path,
                                   BudgetFormat format);
// Reads and parses PATH; the format follows the extension (.toml, .json).
absl::StatusOr<Budget> LoadBudget(const std::string& path);

// The numbers an audit checks and exports.
struct RunMetrics {
  int64_t steps = 0;
  int64_t step_time_ns = 0;  // the steps' device spans, summed
  int64_t gpu_busy_ns = 0;
  int64_t gpu_idle_ns = 0;
  double gpu_idle_ratio = 0;
  CauseNs idle_by_cause{};
  double syncs_per_step = 0;
  double launches_per_step = 0;
  int64_t step_time_p95_ns = 0;  // nearest rank
};
RunMetrics ComputeMetrics(const Report& run);

// One budget check (one key of the budget).
struct AuditCheck {
  std::string name;                     // the budget key, e.g. "max_gpu_idle_share"
  std::string summary;                  // what was measured against what limit
  std::vector<std::string> violations;  // one line each; empty: within budget
};

struct AuditResult {
  std::string run_path;
  std::string budget_path;
  RunMetrics metrics;
  std::vector<AuditCheck> checks;
  std::vector<Hotspot> hotspots;  // the run's
  // Distributed runs: ranks[], collectives and stragglers of the report.
  std::vector<RankRow> ranks;
  CollectivesSummary collectives;
  std::vector<Straggler> stragglers;
  int64_t violations() const;
};

// `baseline` is needed when budget.no_new_hotspots is set (else that check
// reports a violation saying so).
AuditResult RunAudit(const Budget& budget, const Report& run, const std::string& run_path,
                     const Report* baseline);

std::string RenderAuditText(const AuditResult& result);
// The audit as JSON (schema stallscope.audit/1): run, budget, within_budget,
// violations, metrics, checks[] (name, summary, ok, violations[]).
std::string RenderAuditJson(const AuditResult& result);
std::string RenderJunit(const AuditResult& result);
std::string RenderPrometheus(const AuditResult& result);

// "file:line (function)", or the function alone when the file is unknown.
std::string SiteName(const Frame& site);
std::string XmlEscape(std::string_view s);
// A Prometheus label value: backslash, double quote and newline escaped.
std::string PrometheusLabelEscape(std::string_view s);

// Writes a metrics file the way node_exporter's textfile collector expects:
// into a new temporary file beside PATH (never a .prom name), then renamed
// over PATH. An existing PATH is replaced only when it is a regular file
// written by stallscope (it starts with "# HELP stallscope_"); anything else
// is left alone and reported.
absl::Status WriteMetricsFile(const std::string& path, std::string_view text);

}  // namespace stallscope::analyzer
