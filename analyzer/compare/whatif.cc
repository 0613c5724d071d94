// `stallscope whatif` (see whatif.h).
#include "analyzer/compare/whatif.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include <fnmatch.h>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "analyzer/analyze/replay.h"
#include "analyzer/analyze/steps.h"
#include "analyzer/model/causes_json.h"
#include "analyzer/model/format.h"
#include "nlohmann/json.hpp"

namespace stallscope::analyzer {
namespace {

using Json = nlohmann::ordered_json;

// Whether hotspot `h` is the one `site` names: its fingerprint, or FILE:LINE
// with FILE the end of its site's path (whole path components).
bool Names(const Hotspot& h, const std::string& site) {
  if (site == h.fingerprint) return true;
  const size_t colon = site.rfind(':');
  int line = 0;
  if (colon == std::string::npos || !absl::SimpleAtoi(site.substr(colon + 1), &line)) return false;
  const std::string file = site.substr(0, colon);
  const std::string& path = h.site.file;
  if (file.empty() || line != h.site.line || path.size() < file.size()) return false;
  if (path.compare(path.size() - file.size(), file.size(), file) != 0) return false;
  return path.size() == file.size() || path[path.size() - file.size() - 1] == '/';
}

std::string SiteName(const Hotspot& h) {
  return h.site.file.empty() ? h.fingerprint : absl::StrCat(BaseName(h.site.file), ":", h.site.line);
}

std::string Percent(double x) { return absl::StrFormat("%+.0f%%", 100.0 * x); }

std::string Factor(double x) { return absl::StrFormat("%g", x); }

Json SummaryJson(const StepSummary& s) {
  return Json{{"steps", s.step_ns.size()},
              {"step_source", s.step_source},
              {"mean_step_ns", s.mean_step_ns},
              {"wall_ns", s.wall_ns},
              {"gpu_idle_ns", s.gpu_idle_ns},
              {"idle_by_cause", CausesJson(s.idle_by_cause)},
              {"step_ns", s.step_ns},
              {"step_idle_ns", s.step_idle_ns}};
}

double Relative(int64_t got, int64_t want) {
  return want == 0 ? 0.0 : static_cast<double>(got - want) / static_cast<double>(want);
}

// The thread whose outermost calls wait for the device most often in the
// whole trace (Replay's leader), from the synchronizing calls' marks: on
// each thread, a synchronizing call nested in one counted before is not
// counted again. 0 where no one thread waits most (Replay then chooses by
// the part's own units).
uint32_t WholeLeader(const std::vector<CallMark>& marks) {
  absl::flat_hash_map<uint32_t, std::vector<std::pair<int64_t, int64_t>>> syncs;  // tid → (enter, exit)
  for (const CallMark& m : marks) {
    if (m.sync) syncs[m.key.tid].emplace_back(m.key.enter_ns, m.key.exit_ns);
  }
  uint32_t leader = 0;
  int64_t best = 0;
  bool tie = false;
  for (auto& [tid, calls] : syncs) {
    std::sort(calls.begin(), calls.end());
    int64_t n = 0, outer_exit = std::numeric_limits<int64_t>::min();
    for (const auto& [enter, exit] : calls) {
      if (enter < outer_exit) continue;  // nested in the last one counted
      ++n;
      outer_exit = exit;
    }
    if (n > best) {
      best = n;
      leader = tid;
      tie = false;
    } else if (n == best) {
      tie = true;
    }
  }
  return tie ? 0 : leader;
}

}  // namespace

StepSummary SummarizeSteps(const Report& report, int first, int last) {
  StepSummary s;
  s.step_source = report.step_source;
  const bool all = first > last;
  const auto from = static_cast<size_t>(all ? 0 : std::max(first, 0));
  const size_t to = all ? report.steps.size() : std::min(report.steps.size(), static_cast<size_t>(last) + 1);
  int64_t sum = 0;
  for (size_t k = from; k < to; ++k) {
    const StepStats& st = report.steps[k];
    s.step_ns.push_back(st.end_ns - st.start_ns);
    s.step_idle_ns.push_back(st.gpu_idle_ns);
    sum += st.end_ns - st.start_ns;
    if (all) continue;
    s.gpu_idle_ns += st.gpu_idle_ns;
    for (int i = 0; i < kNumCauses; ++i) s.idle_by_cause[i] += st.idle_by_cause[i];
  }
  if (!s.step_ns.empty()) s.mean_step_ns = sum / static_cast<int64_t>(s.step_ns.size());
  if (all) {
    s.wall_ns = report.totals.wall_ns;
    s.gpu_idle_ns = report.totals.gpu_idle_ns;
    s.idle_by_cause = report.totals.idle_by_cause;
  } else if (from < to) {
    s.wall_ns = report.steps[to - 1].end_ns - report.steps[from].start_ns;
  }
  return s;
}

namespace {

// The request as the whole trace's report resolves it, once: the hotspot
// each --remove-sync names, and each --scale-kernel's pattern and factor.
// A part of the trace (a window, --steps) is replayed with the whole
// trace's: a site none of whose calls blocked in the part changes nothing
// there.
struct Resolved {
  std::vector<std::string> fingerprints;  // per --remove-sync
  std::vector<std::string> site_names;    // per --remove-sync
  std::vector<std::pair<std::string, double>> kernel_scales;
  // The straggler moved to the median (--straggler-to-median), and why it
  // was taken where the report names none.
  int32_t straggler = -1;
  std::string straggler_note;
};

// A distributed run's ranks, as --straggler-to-median reads them: every
// rank's arrivals, the analyzed one's index among them, and the clock they
// share (a part of the analyzed rank's trace finds its collectives'
// instances in its NCCL calls' own records).
struct RankView {
  const std::vector<RankArrivals>* all = nullptr;
  size_t index = 0;
  bool one_host = true;
  static RankView Of(const ProcessAnalysis& a) { return {&a.rank_arrivals, a.rank_index, a.one_host}; }
  static RankView Of(const StreamedProcess& s) { return {&s.rank_arrivals, s.rank_index, s.one_host}; }
};

absl::StatusOr<Resolved> Resolve(const Report& report, const RankView& ranks, const WhatIfRequest& request) {
  Resolved r;
  for (const std::string& site : request.remove_sync) {
    const Hotspot* found = nullptr;
    for (const Hotspot& h : report.hotspots) {
      if (Names(h, site)) {
        found = &h;
        break;
      }
    }
    if (found == nullptr) {
      std::vector<std::string> known;
      for (const Hotspot& h : report.hotspots) known.push_back(SiteName(h));
      return absl::InvalidArgumentError(absl::StrFormat(
          "--remove-sync %s: no hotspot at that site or with that fingerprint (hotspots: %s)", site,
          known.empty() ? "none" : absl::StrJoin(known, ", ")));
    }
    r.fingerprints.push_back(found->fingerprint);
    r.site_names.push_back(SiteName(*found));
  }
  for (const std::string& spec : request.scale_kernel) {
    const size_t eq = spec.rfind('=');
    double x = 0;
    if (eq == std::string::npos || eq == 0 || !absl::SimpleAtod(spec.substr(eq + 1), &x) || !(x >= 0) ||
        !std::isfinite(x)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "--scale-kernel %s: not GLOB=X (a kernel name pattern and a factor of 0 or more)", spec));
    }
    r.kernel_scales.emplace_back(spec.substr(0, eq), x);
  }
  if (request.launch_cost_ns >= 0 && request.launch_first_step <= request.launch_last_step) {
    bool any = false;
    for (const StepStats& st : report.steps) {
      any = any || (st.index >= request.launch_first_step && st.index <= request.launch_last_step);
    }
    if (!any) {
      return absl::InvalidArgumentError(absl::StrFormat("--launch-steps %d-%d: no such step (the trace has %d)",
                                                        request.launch_first_step, request.launch_last_step,
                                                        report.steps.size()));
    }
  }
  if (request.straggler_to_median) {
    if (ranks.all == nullptr || ranks.all->size() < 2) {
      return absl::InvalidArgumentError(
          "--straggler-to-median: not a distributed run (give the folder of every rank's trace)");
    }
    if (!report.stragglers.empty()) {
      r.straggler = report.stragglers.front().rank;
    } else {
      // None beyond the report's rule: the rank that arrived last most often.
      int64_t most = 0;
      r.straggler = MostOftenLast(*ranks.all, ranks.one_host, &most);
      if (r.straggler < 0) {
        return absl::InvalidArgumentError("--straggler-to-median: no collective reached by two ranks");
      }
      r.straggler_note = absl::StrFormat(
          "no rank is a straggler by the report's rule; rank %d, last at %d collectives, is taken as the "
          "slowest",
          r.straggler, most);
    }
    if ((*ranks.all)[ranks.index].rank == r.straggler) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "--straggler-to-median: the straggler is rank %d, the rank analyzed; its extra time is its "
          "own host or device time (try --scale-host-wait or --scale-host-busy)",
          r.straggler));
    }
  }
  return r;
}

// A trace whose device timing was sampled has no device work to replay in
// most steps.
absl::Status SampledRefusal(const std::string& path, const StepPlan& plan) {
  if (plan.sampled_every == 0) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrFormat(
      "%s: device timing was sampled (one step in %d): whatif replays every step's device work; "
      "record the job without STALLSCOPE_DEVICE_SAMPLE",
      BaseName(path), plan.sampled_every));
}
absl::Status SampledRefusal(const ProcessAnalysis& analysis) {
  return SampledRefusal(analysis.timeline.path, analysis.plan);
}

// What the transformations changed in one replay: the whole trace's, or a
// part's counted over its own steps (CountingSteps), so that parts add up.
struct Tally {
  ReplayStats stats;
  std::vector<int64_t> removed;  // calls, per --remove-sync
  std::vector<int64_t> kernels;  // kernels, per --scale-kernel
  int64_t straggler_moved = 0;

  void Add(const Tally& o) {
    stats.waits_removed += o.stats.waits_removed;
    stats.gaps_scaled += o.stats.gaps_scaled;
    stats.gaps_without_cpu += o.stats.gaps_without_cpu;
    stats.stretches_captured += o.stats.stretches_captured;
    stats.launches_captured += o.stats.launches_captured;
    stats.event_waits += o.stats.event_waits;
    stats.ops_scaled += o.stats.ops_scaled;
    stats.after_host_func += o.stats.after_host_func;
    removed.resize(std::max(removed.size(), o.removed.size()), 0);
    for (size_t k = 0; k < o.removed.size(); ++k) removed[k] += o.removed[k];
    kernels.resize(std::max(kernels.size(), o.kernels.size()), 0);
    for (size_t k = 0; k < o.kernels.size(); ++k) kernels[k] += o.kernels[k];
    straggler_moved += o.straggler_moved;
  }
};

// Steps [a, b] of `report`'s counted: from the host start of step a (of
// the trace's start for the first step) to the host start of the step
// after b (the trace's end for the last): consecutive parts' counts
// partition the trace's.
HostRange CountingSteps(const Report& report, int a, int b) {
  HostRange c;
  if (a > 0) c.from_ns = report.steps[static_cast<size_t>(a)].host_start_ns;
  if (static_cast<size_t>(b) + 1 < report.steps.size()) c.to_ns = report.steps[static_cast<size_t>(b) + 1].host_start_ns;
  return c;
}

// --scale-kernel's k-th pattern matched no kernel of `what` ("the trace",
// "steps A-B").
absl::Status NoKernelMatches(const WhatIfRequest& request, const Resolved& r, size_t k, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrFormat("--scale-kernel %s: no kernel of %s matches %s",
                                                    request.scale_kernel[k], what, r.kernel_scales[k].first));
}

// Replays `analysis`'s timeline (whose report is `report`) unchanged and
// with the request's transformations, into w->replayed and w->predicted
// (steps request.first_step..last_step), and tallies what changed among
// the calls `counting` holds. A part of the trace (`part`) may hold no
// blocked call of a site and none of the --launch-steps: nothing changes
// there; the whole trace is refused that. `ranks`: a distributed run's,
// for --straggler-to-median. `typical`: the whole trace's typical delays,
// for a part (unset: the timeline's own). The callers refuse a trace
// whose device timing was sampled first (SampledRefusal).
absl::Status ReplayTimeline(const Report& report, const ProcessAnalysis& analysis, const RankView& ranks,
                            const Resolved& r, const WhatIfRequest& request, const AnalysisOptions& options,
                            const HostRange& counting, bool part, const std::optional<TypicalDelays>& typical,
                            WhatIf* w, Tally* tally) {
  const Timeline& t = analysis.timeline;
  const int first = request.first_step, last = request.last_step;
  ReplayOptions ro;
  ro.launch_dispatch_ns = options.attribution.launch_dispatch_ns;
  ro.leader = request.leader;
  ro.counted = counting;
  ro.typical = typical;
  // Whether what changed op o is counted: by its submitting call (as the
  // replay counts), else by its start.
  auto op_counted = [&](size_t o) {
    const DeviceOp& op = t.ops[o];
    return counting.Holds(op.call >= 0 ? t.calls[op.call].enter_ns : op.start_ns);
  };
  tally->removed.assign(r.fingerprints.size(), 0);
  if (!r.fingerprints.empty()) {
    ro.remove_wait.assign(t.calls.size(), false);
    for (size_t k = 0; k < r.fingerprints.size(); ++k) {
      int32_t found = -1;
      for (size_t i = 0; i < report.hotspots.size() && found < 0; ++i) {
        if (report.hotspots[i].fingerprint == r.fingerprints[k]) found = static_cast<int32_t>(i);
      }
      if (found < 0) continue;  // none of its calls blocked in this part
      for (size_t c = 0; c < t.calls.size() && c < analysis.hotspot_of_call.size(); ++c) {
        if (analysis.hotspot_of_call[c] == found) {
          ro.remove_wait[c] = true;
          if (counting.Holds(t.calls[c].enter_ns)) ++tally->removed[k];
        }
      }
    }
  }
  tally->kernels.assign(r.kernel_scales.size(), 0);
  if (!r.kernel_scales.empty()) {
    ro.op_scale.assign(t.ops.size(), 1.0);
    absl::flat_hash_map<uint32_t, int32_t> rule_of_name;  // string id -> rule (-1: none)
    for (size_t o = 0; o < t.ops.size(); ++o) {
      const DeviceOp& op = t.ops[o];
      if (op.kind != trace::DeviceOpKind::kKernel) continue;
      const uint32_t name = t.op_info[o].name;
      auto [it, added] = rule_of_name.try_emplace(name, -1);
      if (added) {
        const std::string n(t.String(name));
        for (size_t k = 0; k < r.kernel_scales.size(); ++k) {
          if (fnmatch(r.kernel_scales[k].first.c_str(), n.c_str(), 0) == 0) {
            it->second = static_cast<int32_t>(k);
            break;
          }
        }
      }
      if (it->second >= 0) {
        ro.op_scale[o] = r.kernel_scales[it->second].second;
        if (op_counted(o)) ++tally->kernels[it->second];
      }
    }
    for (size_t k = 0; k < r.kernel_scales.size() && !part; ++k) {
      if (tally->kernels[k] == 0) return NoKernelMatches(request, r, k, "the trace");
    }
  }
  ro.scale_host_func = request.scale_host_func;
  ro.scale_host_wait = request.scale_host_wait;
  ro.scale_host_busy = request.scale_host_busy;
  ro.graph_node_ns = request.launch_cost_ns;
  if (request.launch_cost_ns >= 0) {
    // Stretches stay inside one step's host range (of the chosen steps).
    const bool all = request.launch_first_step > request.launch_last_step;
    ro.graph_every_stretch = !all;  // the steps the user captures: all their stretches
    for (const StepStats& st : report.steps) {
      if (!all && (st.index < request.launch_first_step || st.index > request.launch_last_step)) continue;
      ro.graph_windows.emplace_back(st.host_start_ns, st.host_end_ns);
    }
    std::sort(ro.graph_windows.begin(), ro.graph_windows.end());
    if (!all && ro.graph_windows.empty()) ro.graph_node_ns = -1;  // a part without those steps
  }
  if (request.straggler_to_median) {
    ro.start_cut = StragglerCuts(t, (*ranks.all)[ranks.index], *ranks.all, r.straggler, ranks.one_host);
    tally->straggler_moved = 0;
    for (size_t o = 0; o < t.ops.size(); ++o) tally->straggler_moved += ro.start_cut[o] > 0 && op_counted(o);
  }

  // Each replayed timeline lives only while it is analyzed (peak memory:
  // the trace's timeline and one replay).
  AnalysisOptions replay_options = options;
  replay_options.stream = false;  // a replayed timeline is not its file's
  {
    auto replayed = AnalyzeTimeline(
        Replay(t, analysis.classes,
               ReplayOptions{.launch_dispatch_ns = ro.launch_dispatch_ns, .leader = ro.leader, .typical = typical}),
        replay_options);
    if (!replayed.ok()) return replayed.status();
    w->replayed = SummarizeSteps(*replayed, first, last);
  }
  auto predicted = AnalyzeTimeline(Replay(t, analysis.classes, ro, &tally->stats), replay_options);
  if (!predicted.ok()) return predicted.status();
  w->predicted = SummarizeSteps(*predicted, first, last);
  return absl::OkStatus();
}

// w's transformations (from what `tally` counted), next limit,
// assumptions and headline, once its summaries are in.
// `what`: what was replayed, for the errors ("the trace", "steps A-B").
absl::Status Finish(const Resolved& r, const Tally& tally, const WhatIfRequest& request,
                    const AnalysisOptions& options, const std::string& what, WhatIf* w) {
  for (size_t k = 0; k < r.kernel_scales.size(); ++k) {
    if (k >= tally.kernels.size() || tally.kernels[k] == 0) return NoKernelMatches(request, r, k, what);
  }
  const bool graph_every_stretch = request.launch_first_step <= request.launch_last_step;
  w->transformations.clear();
  for (size_t k = 0; k < r.fingerprints.size(); ++k) {
    w->transformations.push_back(
        {"remove_sync", r.site_names[k] + " (" + r.fingerprints[k] + ")", tally.removed[k]});
  }
  for (size_t k = 0; k < r.kernel_scales.size(); ++k) {
    w->transformations.push_back(
        {"scale_kernel", absl::StrCat(r.kernel_scales[k].first, " × ", Factor(r.kernel_scales[k].second)),
         tally.kernels[k]});
  }
  const ReplayStats& stats = tally.stats;
  if (request.scale_host_wait != 1.0) {
    w->transformations.push_back({"scale_host_wait", Factor(request.scale_host_wait), stats.gaps_scaled});
  }
  if (request.scale_host_busy != 1.0) {
    w->transformations.push_back({"scale_host_busy", Factor(request.scale_host_busy), stats.gaps_scaled});
  }
  if (request.scale_host_func != 1.0) {
    w->transformations.push_back({"scale_host_func", Factor(request.scale_host_func), stats.after_host_func});
  }
  if (request.straggler_to_median) {
    w->transformations.push_back({"straggler_to_median",
                                  absl::StrFormat("rank %d at the median arrival", r.straggler),
                                  tally.straggler_moved});
  }
  if (request.launch_cost_ns >= 0) {
    w->transformations.push_back(
        {"launch_cost",
         absl::StrFormat("%s per graph node, %d %sstretches captured%s", FormatDuration(request.launch_cost_ns),
                         stats.stretches_captured, graph_every_stretch ? "" : "launch-bound ",
                         graph_every_stretch ? absl::StrFormat(" in steps %d-%d", request.launch_first_step,
                                                               request.launch_last_step)
                                             : ""),
         stats.launches_captured});
  }

  // The next limit: the predicted run's largest idle cause, unless the GPU
  // is busy nearly all the time.
  int best = 0;
  for (int i = 1; i < kNumCauses; ++i) {
    if (w->predicted.idle_by_cause[i] > w->predicted.idle_by_cause[best]) best = i;
  }
  const bool busy = w->predicted.wall_ns > 0 && w->predicted.gpu_idle_ns * 20 < w->predicted.wall_ns;
  w->next_limit = busy || w->predicted.idle_by_cause[best] == 0 ? "gpu_busy" : CauseName(CauseAt(best));

  w->assumptions = {
      "the analyzed process only; other processes and ranks keep their times",
      "device ops keep their durations; ops on different streams do not contend",
      "an op starts after its submitting call, the previous op of its stream and the op a "
      "cross-stream event wait names, with the delay the trace showed after whichever bound it",
      "a synchronizing call waits for its own ops, or the op its event's latest record followed, or "
      "the latest-ending op submitted before it on its stream or device, and returns as long after "
      "it as in the trace",
      "the thread that waits for the device most often leads; other threads' calls follow its "
      "clock (helpers woken by the work it hands them), and its waits for them keep their length",
      absl::StrFormat("host gaps of at least %s are host time (scaled); shorter ones are launch "
                      "dispatch (kept)",
                      FormatDuration(options.attribution.launch_dispatch_ns)),
  };
  if (request.straggler_to_median) {
    w->assumptions.push_back(
        "the straggler reaches each collective at the median of that collective's arrivals (or "
        "as early as it did); the collective starts at the latest arrival left; the analyzed "
        "rank's own work keeps its times otherwise");
    if (!r.straggler_note.empty()) w->assumptions.push_back(r.straggler_note);
  }
  if (request.launch_cost_ns >= 0) {
    w->assumptions.push_back(
        "a captured stretch is one graph launch costing its first launch call; the host time "
        "between its launches is the framework's launch path, which a graph's replay skips; its "
        "kernels keep their durations");
  }
  if (!r.kernel_scales.empty()) {
    w->assumptions.push_back(
        "a scaled kernel's duration is its traced duration times the factor; what follows it moves "
        "with it");
  }
  if (request.scale_host_func != 1.0) {
    w->assumptions.push_back(
        "an op after a host function on its stream waited the function's time: its delay beyond the "
        "least delay between two ops of a stream is scaled");
  }
  if (stats.gaps_without_cpu > 0) {
    w->assumptions.push_back(absl::StrFormat(
        "%d host gaps had no CPU samples: taken as off-CPU (host_wait)", stats.gaps_without_cpu));
  }

  std::vector<std::string> change;
  if (!r.site_names.empty()) {
    change.push_back(absl::StrCat("removing the sync", r.site_names.size() > 1 ? "s" : "", " at ",
                                  absl::StrJoin(r.site_names, ", ")));
  }
  if (request.scale_host_wait != 1.0) {
    change.push_back(absl::StrCat("host waits × ", Factor(request.scale_host_wait)));
  }
  if (request.scale_host_busy != 1.0) {
    change.push_back(absl::StrCat("host work × ", Factor(request.scale_host_busy)));
  }
  for (const auto& [glob, x] : r.kernel_scales) {
    change.push_back(absl::StrCat("kernels ", glob, " × ", Factor(x)));
  }
  if (request.scale_host_func != 1.0) {
    change.push_back(absl::StrCat("host functions × ", Factor(request.scale_host_func)));
  }
  if (request.straggler_to_median) {
    change.push_back(absl::StrFormat("rank %d arriving at the median rank's time", r.straggler));
  }
  if (request.launch_cost_ns >= 0) {
    change.push_back(absl::StrFormat("capturing %d %sstretch%s of kernel launches in CUDA graphs",
                                     stats.stretches_captured, graph_every_stretch ? "" : "launch-bound ",
                                     stats.stretches_captured == 1 ? "" : "es"));
  }
  const std::string changed = change.empty() ? "the trace replayed unchanged" : absl::StrJoin(change, " and ");
  w->headline = absl::StrFormat("%s takes the step from %s to %s (%s); the next limit is %s", changed,
                                FormatDuration(w->baseline.mean_step_ns), FormatDuration(w->predicted.mean_step_ns),
                                Percent(Relative(w->predicted.mean_step_ns, w->baseline.mean_step_ns)),
                                w->next_limit);
  return absl::OkStatus();
}

// The trace analyzed, by slices where AnalyzePaths reports it so (with
// `forced`: as `report --stream`; a distributed run's analyzed rank too),
// with the synchronizing calls' marks kept for the replay's leader;
// `whole` filled where it was read whole instead.
struct BySlices {
  ProcessAnalysis whole;
  StreamedProcess streamed;
  absl::StatusOr<Report> report = absl::UnknownError("not analyzed");
};

std::unique_ptr<BySlices> AnalyzeBySlices(const std::vector<std::string>& paths, const AnalysisOptions& options,
                                          bool forced) {
  auto s = std::make_unique<BySlices>();
  AnalysisOptions by_slices = options;
  by_slices.stream = by_slices.stream || forced;
  s->streamed.keep_for_export = true;  // the synchronizing calls' marks, for the leader
  s->streamed.rank_by_slices = true;
  s->report = AnalyzePaths(paths, by_slices, &s->whole, &s->streamed);
  return s;
}

// The part of a trace read by slices that steps [a, b] and one step on
// either side cover (the device work queued before the first and the
// host's run-up to it, as the trace had them; for the first step, from
// the trace's start where that is not more than a window), changed as the
// whole reading was (a rank's NCCL waits for the other ranks). The chunks
// read reach past that span: their device ops outside it whose calls were
// not read (no call of the part submitted them) are dropped, as a replay
// would leave them at their trace times, among the replayed steps.
absl::StatusOr<Timeline> ReadPart(const BySlices& s, int a, int b) {
  const Report& report = *s.report;
  const int n = static_cast<int>(report.steps.size());
  const StepStats& before = report.steps[static_cast<size_t>(std::max(a - 1, 0))];
  const StepStats& after = report.steps[static_cast<size_t>(std::min(b + 1, n - 1))];
  int64_t lo = std::max<int64_t>(0, std::min(before.host_start_ns, before.start_ns));
  const int64_t hi = std::max(after.host_end_ns, after.end_ns);
  const SliceChunker chunker(s.streamed.index);
  if (a == 0) {
    // From the trace's start (the job's start-up, its first collectives
    // among them), as the whole replay has it, where that holds no more
    // calls and ops than a window does by default.
    uint64_t before_first = 0;
    for (const size_t k : chunker.Chunks(0, static_cast<uint64_t>(lo))) {
      const ChunkSpan& c = s.streamed.index.chunks[k];
      if (c.type == static_cast<uint16_t>(trace::ChunkType::kApi) ||
          c.type == static_cast<uint16_t>(trace::ChunkType::kDevice)) {
        before_first += c.count;
      }
    }
    if (before_first <= kWindowEvents) lo = 0;
  }
  auto t = ReadTraceFileChunks(s.streamed.path, s.streamed.index,
                               chunker.Chunks(static_cast<uint64_t>(lo), static_cast<uint64_t>(hi)));
  if (!t.ok()) return t;
  if (s.streamed.adjust) s.streamed.adjust(&*t);  // a rank's NCCL waits, as each slice had them
  size_t kept = 0;
  for (size_t o = 0; o < t->ops.size(); ++o) {
    const DeviceOp& op = t->ops[o];
    if (op.call < 0 && (op.end_ns <= lo || op.start_ns >= hi)) {
      for (DeviceOpCount& d : t->ops_per_device) {
        if (d.device != op.device) continue;
        --d.ops;
        d.nccl -= op.kind == trace::DeviceOpKind::kNccl;
      }
      continue;
    }
    t->ops[kept] = op;
    t->op_info[kept] = t->op_info[o];
    ++kept;
  }
  t->ops.resize(kept);
  t->op_info.resize(kept);
  return t;
}

// Steps [a, b] of a trace read by slices, predicted from their part of its
// file (ReadPart), analyzed as a trace of its own and replayed, led by the
// whole trace's leading thread and with `typical` delays (unset: the
// part's own); its steps summarized into `w`'s replayed and predicted,
// what changed tallied over steps a..b.
// Where the part's own analysis does not give the trace's steps, the
// error names the steps as `label` A-B and says `refusal` (what to do).
absl::Status PredictPart(const BySlices& s, int a, int b, const Resolved& r, const WhatIfRequest& request,
                         const AnalysisOptions& options, const std::optional<TypicalDelays>& typical,
                         const std::string& label, const std::string& refusal, WhatIf* w, Tally* tally,
                         int64_t* events_read) {
  const Report& report = *s.report;
  auto part = ReadPart(s, a, b);
  if (!part.ok()) return part.status();
  ProcessAnalysis analysis;
  AnalysisOptions in_memory = options;
  in_memory.stream = false;
  auto part_report = AnalyzeTimeline(*part, in_memory, &analysis);
  if (!part_report.ok()) return part_report.status();
  analysis.timeline = *std::move(part);
  *events_read = static_cast<int64_t>(analysis.timeline.calls.size() + analysis.timeline.ops.size());
  // Steps a and b among the part's.
  int j0 = -1, j1 = -1;
  for (size_t j = 0; j < part_report->steps.size(); ++j) {
    const StepStats& st = part_report->steps[j];
    if (st.host_start_ns == report.steps[a].host_start_ns && st.start_ns == report.steps[a].start_ns) {
      j0 = static_cast<int>(j);
    }
    if (st.host_end_ns == report.steps[b].host_end_ns && st.end_ns == report.steps[b].end_ns) {
      j1 = static_cast<int>(j);
    }
  }
  if (j0 < 0 || j1 < j0 || j1 - j0 != b - a) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s %d-%d: the part of the trace read for these steps does not give the trace's steps (%s); %s", label, a,
        b, report.step_source, refusal));
  }
  WhatIfRequest rq = request;
  rq.first_step = j0;
  rq.last_step = j1;
  rq.leader = WholeLeader(s.streamed.analysis.call_marks);
  if (rq.launch_first_step <= rq.launch_last_step) {
    rq.launch_first_step += j0 - a;
    rq.launch_last_step += j0 - a;
  }
  return ReplayTimeline(*part_report, analysis, RankView::Of(s.streamed), r, rq, in_memory,
                        CountingSteps(report, a, b), true, typical, w, tally);
}

// Adds the steps of `s` (a window's) to `all`, after the windows' before
// it. Steps tile the device timeline (steps.h): the windows' walls add up
// to the wall from the first step's start to the last one's end.
void AppendSteps(const StepSummary& s, StepSummary* all) {
  if (all->step_ns.empty()) all->step_source = s.step_source;
  all->step_ns.insert(all->step_ns.end(), s.step_ns.begin(), s.step_ns.end());
  all->step_idle_ns.insert(all->step_idle_ns.end(), s.step_idle_ns.begin(), s.step_idle_ns.end());
  all->gpu_idle_ns += s.gpu_idle_ns;
  for (int i = 0; i < kNumCauses; ++i) all->idle_by_cause[i] += s.idle_by_cause[i];
  all->wall_ns += s.wall_ns;
  int64_t sum = 0;
  for (int64_t x : all->step_ns) sum += x;
  all->mean_step_ns = all->step_ns.empty() ? 0 : sum / static_cast<int64_t>(all->step_ns.size());
}

// The trace's calls and device ops, from its index.
int64_t IndexedEvents(const TraceIndex& index) {
  int64_t n = 0;
  for (const ThreadCallCount& c : index.calls_per_thread) n += c.calls;
  for (const DeviceOpCount& d : index.ops_per_device) n += d.ops;
  return n;
}

}  // namespace

absl::StatusOr<WhatIf> RunWhatIf(const Report& report, const ProcessAnalysis& analysis,
                                 const WhatIfRequest& request, const AnalysisOptions& options) {
  if (absl::Status s = SampledRefusal(analysis); !s.ok()) return s;  // first, whatever else is asked
  auto r = Resolve(report, RankView::Of(analysis), request);
  if (!r.ok()) return r.status();
  WhatIf w;
  w.trace = BaseName(analysis.timeline.path);
  w.baseline = SummarizeSteps(report, request.first_step, request.last_step);
  Tally tally;
  if (absl::Status s = ReplayTimeline(report, analysis, RankView::Of(analysis), *r, request, options,
                                      HostRange{}, false, std::nullopt, &w, &tally);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = Finish(*r, tally, request, options, "the trace", &w); !s.ok()) return s;
  return w;
}

absl::StatusOr<WhatIf> RunWhatIfOnSteps(const std::vector<std::string>& paths, int first, int last,
                                        WhatIfRequest request, const AnalysisOptions& options) {
  const auto s = AnalyzeBySlices(paths, options, /*forced=*/true);
  if (!s->report.ok()) return s->report.status();
  const Report& report = *s->report;
  const int n = static_cast<int>(report.steps.size());
  if (first < 0 || last < first || last >= n) {
    return absl::InvalidArgumentError(
        n == 0 ? absl::StrFormat("--steps %d-%d: the trace has no steps", first, last)
               : absl::StrFormat("--steps %d-%d: the trace has steps 0-%d", first, last, n - 1));
  }
  const WhatIf::Steps asked{first, last, n, 0, 0};
  if (!s->streamed.used) {  // read whole
    request.first_step = first;
    request.last_step = last;
    auto w = RunWhatIf(report, s->whole, request, options);
    if (!w.ok()) return w.status();
    const auto events = static_cast<int64_t>(s->whole.timeline.calls.size() + s->whole.timeline.ops.size());
    w->steps = asked;
    w->steps.events_read = w->steps.events = events;
    return w;
  }
  if (absl::Status st = SampledRefusal(s->streamed.path, s->streamed.plan); !st.ok()) return st;
  auto r = Resolve(report, RankView::Of(s->streamed), request);
  if (!r.ok()) return r.status();
  WhatIf w;
  w.trace = BaseName(s->streamed.path);
  w.baseline = SummarizeSteps(report, first, last);
  Tally tally;
  w.steps = asked;
  w.steps.events = IndexedEvents(s->streamed.index);
  if (absl::Status p = PredictPart(*s, first, last, *r, request, options, std::nullopt, "--steps",
                                   "leave out --steps", &w, &tally, &w.steps.events_read);
      !p.ok()) {
    return p;
  }
  if (absl::Status f = Finish(*r, tally, request, options, absl::StrFormat("steps %d-%d", first, last), &w); !f.ok()) {
    return f;
  }
  return w;
}

absl::StatusOr<WhatIf> RunWhatIfByWindows(const std::vector<std::string>& paths, const WhatIfRequest& request,
                                          const AnalysisOptions& options,
                                          const std::function<void(uint64_t, uint64_t)>& progress) {
  const auto s = AnalyzeBySlices(paths, options, /*forced=*/false);
  if (!s->report.ok()) return s->report.status();
  const Report& report = *s->report;
  const int n = static_cast<int>(report.steps.size());
  // Read whole: a trace under --stream-above (without --stream), several
  // traces that are not a distributed run's ranks, or a trace that cannot
  // be read by slices.
  if (!s->streamed.used || n == 0) return RunWhatIf(report, s->whole, request, options);
  if (absl::Status st = SampledRefusal(s->streamed.path, s->streamed.plan); !st.ok()) return st;
  auto r = Resolve(report, RankView::Of(s->streamed), request);
  if (!r.ok()) return r.status();
  const int per = static_cast<int>(std::max<size_t>(
      1, options.window_steps > 0 ? options.window_steps : s->streamed.analysis.steps_per_window));
  WhatIf w;
  w.trace = BaseName(s->streamed.path);
  w.baseline = SummarizeSteps(report, 0, n - 1);
  w.steps = {0, n - 1, n, 0, IndexedEvents(s->streamed.index)};
  w.windows.steps = per;
  Tally tally;
  const auto windows = static_cast<uint64_t>((n + per - 1) / per);
  uint64_t done = 0;
  if (progress) progress(done, 2 * windows);
  // First the whole trace's typical delays (the replay's, for the
  // constraints that did not bind), from each window's part over its own
  // steps, so that every window replays with them as the whole replay
  // does; then each window predicted.
  DelaySamples samples;
  for (int a = 0; a < n; a += per) {
    const int b = std::min(n, a + per) - 1;
    auto part = ReadPart(*s, a, b);
    if (!part.ok()) return part.status();
    const std::vector<CallClass> classes =
        ClassifyCalls(*part, BusiestDevice(*part, nullptr), options.attribution);
    samples.Add(ReplayDelaySamples(*part, classes, ReplayOptions{.counted = CountingSteps(report, a, b)}));
    if (progress) progress(++done, 2 * windows);
  }
  const TypicalDelays typical = samples.Typical();
  for (int a = 0; a < n; a += per) {
    const int b = std::min(n, a + per) - 1;
    WhatIf part;
    Tally part_tally;
    int64_t read = 0;
    absl::Status p = PredictPart(*s, a, b, *r, request, options, typical, "steps",
                                 "read it whole (--stream-above past its calls and device ops)", &part,
                                 &part_tally, &read);
    if (!p.ok()) return p;
    AppendSteps(part.replayed, &w.replayed);
    AppendSteps(part.predicted, &w.predicted);
    tally.Add(part_tally);
    w.steps.events_read += read;
    w.windows.largest_read = std::max(w.windows.largest_read, read);
    ++w.windows.count;
    if (progress) progress(++done, 2 * windows);
  }
  if (absl::Status f = Finish(*r, tally, request, options, "the trace", &w); !f.ok()) return f;
  return w;
}

std::string RenderWhatIfText(const WhatIf& w) {
  std::string s = absl::StrCat(w.headline, ".\n\n");
  if (w.windows.count > 0) {
    absl::StrAppendFormat(&s,
                          "Every step of the trace's %d, by %d window%s of %d steps, each from its part of the file "
                          "(at most %d of its %d calls and device ops at once, %d in all).\n\n",
                          w.steps.of, w.windows.count, w.windows.count == 1 ? "" : "s", w.windows.steps,
                          w.windows.largest_read, w.steps.events, w.steps.events_read);
  } else if (w.steps.of > 0) {
    absl::StrAppendFormat(&s, "Steps %d-%d of the trace's %d, from %d of its %d calls and device ops.\n\n",
                          w.steps.first, w.steps.last, w.steps.of, w.steps.events_read, w.steps.events);
  }
  absl::StrAppendFormat(&s, "  %-22s %12s %12s\n", "", "measured", "predicted");
  absl::StrAppendFormat(&s, "  %-22s %12d %12d\n", "steps", w.baseline.step_ns.size(),
                        w.predicted.step_ns.size());
  absl::StrAppendFormat(&s, "  %-22s %12s %12s\n", "step time (mean)", FormatDuration(w.baseline.mean_step_ns),
                        FormatDuration(w.predicted.mean_step_ns));
  absl::StrAppendFormat(&s, "  %-22s %12s %12s\n", "GPU idle", FormatDuration(w.baseline.gpu_idle_ns),
                        FormatDuration(w.predicted.gpu_idle_ns));
  for (int i = 0; i < kNumCauses; ++i) {
    if (w.baseline.idle_by_cause[i] == 0 && w.predicted.idle_by_cause[i] == 0) continue;
    absl::StrAppendFormat(&s, "    %-20s %12s %12s\n", CauseName(CauseAt(i)),
                          FormatDuration(w.baseline.idle_by_cause[i]),
                          FormatDuration(w.predicted.idle_by_cause[i]));
  }
  absl::StrAppendFormat(&s, "\nThe replay's own error (the trace replayed unchanged): mean step %s (%s).\n",
                        FormatDuration(w.replayed.mean_step_ns),
                        absl::StrFormat("%+.2f%%", 100.0 * Relative(w.replayed.mean_step_ns,
                                                                     w.baseline.mean_step_ns)));
  s += "\nTransformations:\n";
  for (const auto& x : w.transformations) {
    absl::StrAppendFormat(&s, "  %s %s (%d %s)\n", x.kind, x.target, x.calls,
                          x.kind == "remove_sync"           ? "calls"
                          : x.kind == "launch_cost"         ? "launch calls folded"
                          : x.kind == "straggler_to_median" ? "collective kernels moved"
                          : x.kind == "scale_kernel"        ? "kernels"
                          : x.kind == "scale_host_func"     ? "ops after a host function"
                                                            : "host gaps");
  }
  if (w.transformations.empty()) s += "  none\n";
  s += "\nAssumptions:\n";
  for (const std::string& a : w.assumptions) absl::StrAppend(&s, "  - ", a, "\n");
  return s;
}

std::string RenderWhatIfJson(const WhatIf& w) {
  Json j;
  j["schema"] = "stallscope.whatif/1";
  j["trace"] = w.trace;
  j["headline"] = w.headline;
  j["baseline"] = SummaryJson(w.baseline);
  j["predicted"] = SummaryJson(w.predicted);
  j["predicted"]["next_limit"] = w.next_limit;
  j["replayed"] = SummaryJson(w.replayed);
  j["replay_error"] = Relative(w.replayed.mean_step_ns, w.baseline.mean_step_ns);
  if (w.steps.of > 0) {
    j["steps"] = Json{{"first", w.steps.first},
                      {"last", w.steps.last},
                      {"of", w.steps.of},
                      {"calls_and_ops_read", w.steps.events_read},
                      {"calls_and_ops", w.steps.events}};
  }
  if (w.windows.count > 0) {
    j["windows"] = Json{{"count", w.windows.count},
                        {"steps", w.windows.steps},
                        {"largest_calls_and_ops_read", w.windows.largest_read}};
  }
  Json xs = Json::array();
  for (const auto& x : w.transformations) {
    xs.push_back(Json{{"kind", x.kind}, {"target", x.target}, {"changed", x.calls}});
  }
  j["transformations"] = xs;
  j["assumptions"] = w.assumptions;
  return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

}  // namespace stallscope::analyzer
