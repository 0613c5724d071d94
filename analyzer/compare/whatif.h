// `stallscope whatif`: the step time after a fix, predicted by replaying the
// trace's dependency graph with the fix applied (analyze/replay.h), and the
// replay's own error (the graph replayed unchanged against the trace).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "analyzer/analyze/analysis.h"
#include "analyzer/model/report.h"

namespace stallscope::analyzer {

struct WhatIfRequest {
  // Hotspots whose waits are dropped: FILE:LINE (FILE matches the end of the
  // site's path at a '/') or a fingerprint.
  std::vector<std::string> remove_sync;
  double scale_host_wait = 1.0;
  double scale_host_busy = 1.0;
  // CUDA-graph capture of the launch-bound stretches (ReplayOptions::
  // graph_node_ns): the device's cost per graph node; negative: off.
  int64_t launch_cost_ns = -1;
  // The steps (by index, inclusive) whose stretches are captured; all when
  // first > last.
  int launch_first_step = 0, launch_last_step = -1;
  // A distributed run: the report's first straggler reaches every
  // collective no later than the median rank (StragglerCuts).
  bool straggler_to_median = false;
  // Kernels whose duration changes: GLOB=X (GLOB an fnmatch pattern on the
  // kernel's name as the trace has it, X the factor), repeatable; a kernel
  // takes the first that matches.
  std::vector<std::string> scale_kernel;
  // Host functions enqueued on streams: their time times X.
  double scale_host_func = 1.0;
  // The steps summarized (by index in the report, inclusive): the
  // baseline, the replay and the prediction over these steps only; all
  // when first > last.
  int first_step = 0, last_step = -1;
  // The replay's leading thread (ReplayOptions::leader; 0: chosen by the
  // timeline replayed).
  uint32_t leader = 0;
};


// The steps of one timeline as the report measures them.
struct StepSummary {
  int64_t mean_step_ns = 0;  // mean of end_ns - start_ns over steps[]
  std::vector<int64_t> step_ns;
  std::vector<int64_t> step_idle_ns;
  int64_t wall_ns = 0;
  int64_t gpu_idle_ns = 0;
  CauseNs idle_by_cause{};
  std::string step_source;
};
// Steps [first, last] of `report` (all when first > last): their times,
// idle and idle by cause, and wall time from the first's start to the
// last's end; for all, the report's totals.
StepSummary SummarizeSteps(const Report& report, int first = 0, int last = -1);

struct WhatIf {
  std::string trace;  // the analyzed process's file
  StepSummary baseline;   // the trace
  StepSummary replayed;   // the graph replayed unchanged (the replay's own error)
  StepSummary predicted;  // the graph replayed with the transformations
  std::string next_limit;  // the predicted run's largest idle cause, or "gpu_busy"
  struct Transformation {
    std::string kind;    // remove_sync | scale_host_wait | scale_host_busy | launch_cost | straggler_to_median
                         // | scale_kernel | scale_host_func
    std::string target;  // the site (FILE:LINE) or fingerprint; the factor; the node cost; GLOB × X
    int64_t calls = 0;   // calls (or host gaps) it changed
  };
  std::vector<Transformation> transformations;
  std::vector<std::string> assumptions;
  std::string headline;  // one sentence: the change, the step times, the next limit
  // RunWhatIfOnSteps: the steps predicted, by index in the trace's report
  // (of: its steps; 0 for the whole trace), and the calls and device ops
  // read for them, of the trace's.
  struct Steps {
    int first = 0, last = -1, of = 0;
    int64_t events_read = 0, events = 0;
  } steps;
  // RunWhatIfByWindows: the windows (0: the trace replayed whole), the
  // steps of each (the last may hold fewer), and the most calls and device
  // ops one window read (steps.events_read: all of them together).
  struct Windows {
    int count = 0, steps = 0;
    int64_t largest_read = 0;
  } windows;
};

// The baseline `report` of `analysis` (its primary process, with details),
// replayed. InvalidArgument when a --remove-sync site names no hotspot.
absl::StatusOr<WhatIf> RunWhatIf(const Report& report, const ProcessAnalysis& analysis,
                                 const WhatIfRequest& request, const AnalysisOptions& options);

// The prediction for steps [first, last] (by index in the report) of the
// analyzed process of `paths`, from those steps alone: the trace is
// reported by slices (as `report --stream`) for its steps' times, then only
// the part of its file that those steps and one step on either side cover
// is read, analyzed as a trace of its own and replayed, its summaries over
// the steps asked for (`request`'s launch steps are the trace's). Memory
// follows the steps asked for, not the trace. The analyzed rank of a
// distributed run is read so too, each part with its NCCL waits for the
// other ranks (StreamedProcess::adjust: from every rank's arrivals, taken
// from each rank's file once). A trace that cannot be read by slices is
// read whole, and the whole replay's steps summarized. InvalidArgument
// for steps the trace does not have and steps that the part's own
// analysis does not find at the trace's times.
absl::StatusOr<WhatIf> RunWhatIfOnSteps(const std::vector<std::string>& paths, int first, int last,
                                        WhatIfRequest request, const AnalysisOptions& options);

// The prediction for every step of the analyzed process of `paths`, by
// windows of steps where AnalyzePaths reports the trace by slices (past
// options.stream_above_events, or options.stream): the report by slices for
// its steps' times, then each window of options.window_steps steps (by
// default those of the report's windows: about kWindowEvents calls and
// device ops) predicted in turn as RunWhatIfOnSteps predicts its steps,
// but with the whole trace's typical delays (gathered from the windows'
// parts in a first pass over them, each over its own steps), and their
// steps joined. Memory follows a window, not the trace. The
// summaries cover the steps (the baseline too: the trace's time before the
// first step and after the last is not replayed); each transformation's
// count adds up its windows' (each over its own steps). A distributed
// run's analyzed rank is predicted so too, each part with its NCCL waits
// (as RunWhatIfOnSteps), its collectives moved by every rank's arrivals
// with --straggler-to-median. A trace under the limit, several traces
// that are not a distributed run's ranks and a trace that cannot be read
// by slices are read whole and replayed as RunWhatIf does.
// `progress` (optional): before the first window and after each window
// of either pass, the windows done and twice their number
// (options.progress says how the report by slices goes).
absl::StatusOr<WhatIf> RunWhatIfByWindows(const std::vector<std::string>& paths, const WhatIfRequest& request,
                                          const AnalysisOptions& options,
                                          const std::function<void(uint64_t done, uint64_t total)>& progress = nullptr);

std::string RenderWhatIfText(const WhatIf& w);
// JSON, schema stallscope.whatif/1: baseline, predicted, replayed,
// replay_error, next_limit, transformations, assumptions, headline.
std::string RenderWhatIfJson(const WhatIf& w);

}  // namespace stallscope::analyzer
