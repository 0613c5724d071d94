// `stallscope audit`: a run checked against a budget, for nightly jobs.
#include <memory>
#include <optional>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "analyzer/cli/cli.h"
#include "analyzer/cli/commands.h"
#include "analyzer/compare/audit.h"
#include "analyzer/model/output_file.h"

namespace stallscope::analyzer {
namespace {

struct AuditArgs {
  std::vector<std::string> inputs;
  std::string budget, baseline, junit, prometheus;
  Conventions common;
  AnalysisArgs analysis;
};

int Audit(const AuditArgs& a) {
  if (a.inputs.empty()) return UsageError("audit", "no trace folder or file given");
  auto budget = LoadBudget(a.budget);
  if (!budget.ok()) {
    fprintf(stderr, "stallscope audit: %s\n", std::string(budget.status().message()).c_str());
    return kExitUsage;
  }
  if (budget->no_new_hotspots && a.baseline.empty()) {
    return UsageError("audit", absl::StrFormat("%s sets no_new_hotspots: give --baseline DIR",
                                               a.budget));
  }
  const AnalysisOptions options = OptionsFrom(a.common, a.analysis);
  auto run = AnalyzePaths(a.inputs, options);
  if (!run.ok()) return Fail(run.status(), kExitBadTrace);
  std::optional<Report> base;
  if (!a.baseline.empty()) {
    auto b = AnalyzePaths({a.baseline}, options);
    if (!b.ok()) return Fail(b.status(), kExitBadTrace);
    base = std::move(*b);
  }
  const AuditResult result =
      RunAudit(*budget, *run, absl::StrJoin(a.inputs, " "), base ? &*base : nullptr);
  if (!a.junit.empty()) {
    if (auto st = WriteNewFile(a.junit, RenderJunit(result)); !st.ok()) return Fail(st, kExitUsage);
  }
  if (!a.prometheus.empty()) {
    if (auto st = WriteMetricsFile(a.prometheus, RenderPrometheus(result)); !st.ok()) {
      return Fail(st, kExitUsage);
    }
  }
  const int wrote = Emit(a.common.out, a.common.format == "json" ? RenderAuditJson(result)
                                                                 : RenderAuditText(result));
  if (wrote != kExitOk) return wrote;
  for (const AuditCheck& c : result.checks) {
    for (const std::string& v : c.violations) {
      fprintf(stderr, "stallscope audit: budget exceeded: %s: %s\n", c.name.c_str(), v.c_str());
    }
  }
  return result.violations() > 0 ? kExitBudget : kExitOk;
}

}  // namespace

Runner DeclareAudit(CLI::App* app) {
  auto a = std::make_shared<AuditArgs>();
  app->add_option("inputs", a->inputs);
  app->add_option("--budget", a->budget,
                  "the limits: TOML (.toml) or JSON (.json); see docs/analyzer.md \"Audits\" "
                  "(unknown keys are an error)")
      ->type_name("FILE")
      ->required()
      ->check(NonEmpty("a file"));
  app->add_option("--baseline", a->baseline,
                  "an earlier run, for no_new_hotspots (hotspots by fingerprint)")
      ->type_name("DIR")
      ->check(NonEmpty("a trace folder or file"));
  app->add_option("--junit", a->junit, "JUnit XML: one test case per budget check (a new file)")
      ->type_name("OUT.xml")
      ->check(NonEmpty("a file"));
  app->add_option("--prometheus", a->prometheus,
                  "Prometheus text-format metrics, written atomically for node_exporter's "
                  "textfile collector (replaces only an earlier stallscope metrics file)")
      ->type_name("OUT.prom")
      ->check(NonEmpty("a file"));
  AddConventions(app, &a->common, {"text", "json"},
                 {.format = "text: one line per check; json (schema stallscope.audit/1): the "
                            "checks, their violations and the run's metrics",
                  .color = "accepted as for report (the audit has no colours yet)"});
  AddAnalysisArgs(app, &a->analysis);
  return [a] { return Audit(*a); };
}

}  // namespace stallscope::analyzer
