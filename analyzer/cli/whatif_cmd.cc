// `stallscope whatif DIR`: the step time after a fix, before making it.
#include <memory>

#include "analyzer/cli/cli.h"
#include "analyzer/cli/commands.h"
#include "analyzer/compare/whatif.h"

namespace stallscope::analyzer {
namespace {

struct WhatIfArgs {
  std::vector<std::string> inputs;
  WhatIfRequest request;
  Conventions common;
  AnalysisArgs analysis;
};

int RunWhatIfCmd(const WhatIfArgs& a) {
  if (a.inputs.empty()) return UsageError("whatif", "no trace folder or file given");
  const AnalysisOptions options = OptionsFrom(a.common, a.analysis);
  ProcessAnalysis analysis;
  auto report = AnalyzePaths(a.inputs, options, &analysis);
  if (!report.ok()) return Fail(report.status(), kExitBadTrace);
  auto w = RunWhatIf(*report, analysis, a.request, options);
  if (!w.ok()) return UsageError("whatif", std::string(w.status().message()));
  return Emit(a.common.out, a.common.format == "json" ? RenderWhatIfJson(*w) : RenderWhatIfText(*w));
}

}  // namespace

Runner DeclareWhatIf(CLI::App* app) {
  auto a = std::make_shared<WhatIfArgs>();
  app->add_option("inputs", a->inputs);
  app->add_option("--remove-sync", a->request.remove_sync,
                  "drop the host's wait at this hotspot: FILE:LINE (the end of the site's path) "
                  "or its fingerprint (repeatable); a removed read-back's copy stays, as an async "
                  "copy")
      ->type_name("SITE")
      ->allow_extra_args(false)
      ->check(NonEmpty("a site"));
  app->add_option("--scale-host-wait", a->request.scale_host_wait,
                  "the host's off-CPU time between CUDA calls (host_wait: input pipeline, "
                  "storage) times X, e.g. 0 for synthetic input, 0.5 for twice the workers "
                  "(default 1)")
      ->type_name("X")
      ->check(CLI::Range(0.0, 1e6));
  app->add_option("--scale-host-busy", a->request.scale_host_busy,
                  "the host's on-CPU time between CUDA calls (host_busy) times X (default 1)")
      ->type_name("X")
      ->check(CLI::Range(0.0, 1e6));
  AddConventions(app, &a->common, {"text", "json"},
                 {.format = "text: the prediction in one sentence, then measured against "
                            "predicted; json (schema stallscope.whatif/1): baseline, predicted, "
                            "replayed, replay_error, transformations, assumptions",
                  .color = "accepted (the prediction has no colours yet)"});
  AddAnalysisArgs(app, &a->analysis);
  return [a] { return RunWhatIfCmd(*a); };
}

}  // namespace stallscope::analyzer
