// `stallscope compare BASE OTHER`: two runs' reports side by side.
#include <memory>

#include "analyzer/cli/cli.h"
#include "analyzer/cli/commands.h"
#include "analyzer/compare/compare.h"

namespace stallscope::analyzer {
namespace {

struct CompareArgs {
  std::vector<std::string> runs;
  Conventions common;
  AnalysisArgs analysis;
};

int Compare(const CompareArgs& a) {
  if (a.runs.size() != 2) return UsageError("compare", "two runs: BASE and OTHER (folders or files)");
  const AnalysisOptions options = OptionsFrom(a.common, a.analysis);
  auto base = AnalyzePaths({a.runs[0]}, options);
  if (!base.ok()) return Fail(base.status(), kExitBadTrace);
  auto other = AnalyzePaths({a.runs[1]}, options);
  if (!other.ok()) return Fail(other.status(), kExitBadTrace);
  const Comparison c = CompareReports(*base, a.runs[0], *other, a.runs[1]);
  return Emit(a.common.out, a.common.format == "json" ? RenderCompareJson(c) : RenderCompareText(c));
}

}  // namespace

Runner DeclareCompare(CLI::App* app) {
  auto a = std::make_shared<CompareArgs>();
  app->add_option("runs", a->runs);
  AddConventions(app, &a->common, {"text", "json"},
                 {.format = "text, or json (schema stallscope.compare/1)",
                  .color = "accepted as for report (the comparison has no colours yet)",
                  .jobs = "threads reading and analyzing each run's traces (default 0: one per "
                          "core)"});
  AddAnalysisArgs(app, &a->analysis);
  return [a] { return Compare(*a); };
}

}  // namespace stallscope::analyzer
