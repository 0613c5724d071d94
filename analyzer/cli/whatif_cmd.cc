// `stallscope whatif DIR`: the step time after a fix, before making it.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"

#include "analyzer/analyze/replay.h"
#include "analyzer/cli/cli.h"
#include "analyzer/cli/commands.h"
#include "analyzer/compare/whatif.h"

namespace stallscope::analyzer {
namespace {

struct WhatIfArgs {
  std::vector<std::string> inputs;
  WhatIfRequest request;
  CLI::Option* launch_cost = nullptr;
  std::string launch_cost_ns;
  std::string launch_steps;
  std::string steps;
  Conventions common;
  AnalysisArgs analysis;
};

// "A-B" (or "A") into first and last: 0 <= A <= B.
bool StepRange(const std::string& text, int* first, int* last) {
  const std::vector<std::string> ab = absl::StrSplit(text, absl::MaxSplits('-', 1));
  return absl::SimpleAtoi(ab[0], first) && absl::SimpleAtoi(ab.size() > 1 ? ab[1] : ab[0], last) && *first >= 0 &&
         *last >= *first;
}

// The prediction written, or its error: a request the trace cannot meet
// as a usage error, a trace that cannot be read as a bad trace.
int Emitted(const Conventions& common, const absl::StatusOr<WhatIf>& w) {
  if (!w.ok()) {
    const bool usage = w.status().code() == absl::StatusCode::kInvalidArgument;
    return usage ? UsageError("whatif", std::string(w.status().message())) : Fail(w.status(), kExitBadTrace);
  }
  return Emit(common.out, common.format == "json" ? RenderWhatIfJson(*w) : RenderWhatIfText(*w));
}

int RunWhatIfCmd(const WhatIfArgs& a) {
  if (a.inputs.empty()) return UsageError("whatif", "no trace folder or file given");
  WhatIfRequest request = a.request;
  if (a.launch_cost->count() > 0) {
    request.launch_cost_ns = kDefaultGraphNodeNs;
    if (!a.launch_cost_ns.empty() && (!absl::SimpleAtoi(a.launch_cost_ns, &request.launch_cost_ns) ||
                                      request.launch_cost_ns < 0)) {
      return UsageError("whatif", "--launch-cost " + a.launch_cost_ns + ": not a number of ns (0 or more)");
    }
  }
  if (!a.launch_steps.empty()) {
    if (request.launch_cost_ns < 0) return UsageError("whatif", "--launch-steps needs --launch-cost");
    if (!StepRange(a.launch_steps, &request.launch_first_step, &request.launch_last_step)) {
      return UsageError("whatif", "--launch-steps " + a.launch_steps + ": not a step range A-B (0 <= A <= B)");
    }
  }
  const AnalysisOptions options = OptionsFrom(a.common, a.analysis);
  if (!a.steps.empty()) {
    int first = 0, last = 0;
    if (!StepRange(a.steps, &first, &last)) {
      return UsageError("whatif", "--steps " + a.steps + ": not a step range A-B (0 <= A <= B)");
    }
    return Emitted(a.common, RunWhatIfOnSteps(a.inputs, first, last, request, options));
  }
  // Every step: by windows of steps where the trace is reported by slices
  // (past --stream-above, or --stream), else read whole.
  // Two passes over the windows: the typical delays, then the predictions.
  auto progress = ProgressLine(a.common, [](uint64_t done, uint64_t total) {
    const uint64_t windows = std::max<uint64_t>(total / 2, 1);
    return absl::StrFormat("predicting %3d%% (%s, window %d of %d)",
                           static_cast<int>(100 * done / std::max<uint64_t>(total, 1)),
                           done < windows ? "typical delays" : "replays",
                           std::min((done < windows ? done : done - windows) + 1, windows), windows);
  });
  return Emitted(a.common, RunWhatIfByWindows(a.inputs, request, options, progress));
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
  app->add_option("--scale-kernel", a->request.scale_kernel,
                  "kernels whose name matches GLOB (fnmatch, as the report names them) take X times "
                  "as long (repeatable; a kernel takes the first that matches), e.g. '*gemm*=0.5'")
      ->type_name("GLOB=X")
      ->allow_extra_args(false)
      ->check(NonEmpty("GLOB=X"));
  app->add_option("--scale-host-func", a->request.scale_host_func,
                  "host functions enqueued on streams (cudaLaunchHostFunc, stream callbacks) take X "
                  "times as long; the work queued after them waits that much (default 1)")
      ->type_name("X")
      ->check(CLI::Range(0.0, 1e6));
  a->launch_cost =
      app->add_option("--launch-cost", a->launch_cost_ns,
                      "capture the launch-bound stretches in CUDA graphs: one launch per stretch, "
                      "each kernel NS after the previous one on the device (default 500, NVIDIA's "
                      "figure of about 0.5 us per graph node)")
          ->type_name("[NS]")
          ->expected(0, 1);
  app->add_flag("--straggler-to-median", a->request.straggler_to_median,
                "a folder of ranks' traces: the report's first straggler reaches every collective "
                "no later than the median rank; the analyzed rank (rank 0) no longer waits for it");
  app->add_option("--launch-steps", a->launch_steps,
                  "with --launch-cost: capture every stretch of kernel launches in steps A to B (by "
                  "index), launch-bound or not (default: the launch-bound stretches of every step)")
      ->type_name("A-B");
  app->add_option("--steps", a->steps,
                  "predict steps A to B (by index) from those steps alone: the trace reported by slices "
                  "for its steps' times, then only the part of its file they and a step on either side "
                  "cover read and replayed (memory follows the steps, not the trace)")
      ->type_name("A-B");
  AddConventions(app, &a->common, {"text", "json"},
                 {.format = "text: the prediction in one sentence, then measured against "
                            "predicted; json (schema stallscope.whatif/1): baseline, predicted, "
                            "replayed, replay_error, transformations, assumptions",
                  .quiet = "no progress on stderr (errors only)",
                  .color = "accepted (the prediction has no colours yet)"});
  AddAnalysisArgs(app, &a->analysis);
  return [a] { return RunWhatIfCmd(*a); };
}

}  // namespace stallscope::analyzer
