// `stallscope run [options] [--] CMD [ARGS...]`: the command line of run
// (run_command.cc runs the job).
#include <memory>
#include <string>

#include "absl/strings/str_format.h"
#include "analyzer/cli/cli.h"
#include "analyzer/cli/commands.h"
#include "analyzer/cli/run_command.h"
#include "ring_spec.h"
#include "step_regression.h"

namespace stallscope::analyzer {

Runner DeclareRun(CLI::App* app) {
  auto o = std::make_shared<RunOptions>();
  // Everything from the first word that is not one of run's options is the
  // command and its arguments.
  app->prefix_command();
  app->add_option("--out", o->out_dir,
                  "trace folder (default: a new stallscope-YYYYMMDD-HHMMSS in the current "
                  "folder, mode 0750); an empty folder left at the end is removed")
      ->type_name("DIR")
      ->check(NonEmpty("a folder"));
  app->add_flag("--sim", o->sim, "use the simulated GPU libraries (machines without a GPU)");
  app->add_option("--ring", o->ring,
                  "flight recorder: keep only the last SECONDS (30, 30s, 2min) or SIZE (64MB, 1GiB) "
                  "of the trace in memory and write it on a trigger: SIGUSR2, stallscope.dump() / "
                  "stallscope_dump(), and the job's exit (docs/robustness.md, \"Flight recorder\")")
      ->type_name("SECONDS|SIZE")
      ->check([](const std::string& v) -> std::string {
        trace::RingSpec spec;
        return trace::ParseRingSpec(v.c_str(), &spec)
                   ? ""
                   : "expected SECONDS (30, 30s, 2min: 1 ms or more) or SIZE (64MB, 1GiB: 64 KiB or more)";
      });
  app->add_option("--ring-regression", o->ring_regression,
                  absl::StrFormat("flight recorder: RULE is K:M[:N]: also dump when M steps in a row each took over K x the "
                                  "median of the (at most 64) steps before them, at most N times (default 8), "
                                  "e.g. %s; off (the default): never. A step's time is the host's, begin to "
                                  "begin, for steps as --step-pattern finds them or the step API",
                                  trace::kSuggestedRegressionSpec))
      ->type_name("RULE")
      ->needs("--ring")
      ->check([](const std::string& v) -> std::string {
        trace::RegressionSpec spec;
        return trace::ParseRegressionSpec(v.c_str(), &spec)
                   ? ""
                   : "expected K:M[:N] (K over 1, e.g. 2:3 or 1.5:5:20) or off";
      });
  app->add_option("--device-sample", o->device_sample,
                  "device timing (CUPTI) on for one step in N only, and the step before it, so that "
                  "CUPTI's cost is paid on those; the report covers the timed steps. Needs steps the "
                  "recorder sees: NVTX ranges matching --step-pattern or the step API "
                  "(docs/analyzer.md, \"Sampled device timing\")")
      ->type_name("N")
      ->check(CLI::Range(1, 1'000'000));
  AddConventions(app, &o->report, ReportFormatNames(),
                 {.format = "after the command, the whole report in this format instead of "
                            "the summary line (as report --format: text, json, html, perfetto or sqlite)",
                  .output = "after the command, the whole report to OUT (a new file, never "
                            "overwritten, mode 0640) instead of the summary line",
                  .quiet = "no summary after the command (errors only)",
                  .color = "colour the text report (as for report)",
                  .jobs = "threads analyzing the traces after the command (as for report)"});
  AddAnalysisArgs(app, &o->analysis, /*predictions=*/true);
  CLI::Option* format = app->get_option("--format");
  CLI::Option* output = app->get_option("--output");
  return [app, o, format, output] {
    std::vector<std::string> rest = app->remaining();
    if (!rest.empty() && rest[0] == "--") {
      rest.erase(rest.begin());
    } else if (!rest.empty() && rest[0].size() > 1 && rest[0][0] == '-') {
      return UsageError("run", absl::StrFormat("unknown option %s", rest[0]));
    }
    if (rest.empty()) return UsageError("run", "no command to run");
    o->command = std::move(rest);
    o->full_report = format->count() > 0 || output->count() > 0;
    return RunUnderStallscope(*o);
  };
}

}  // namespace stallscope::analyzer
