// `stallscope whatif` (see whatif.h).
#include "analyzer/compare/whatif.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <utility>
#include <vector>

#include <fnmatch.h>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "analyzer/analyze/replay.h"
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

absl::StatusOr<WhatIf> RunWhatIf(const Report& report, const ProcessAnalysis& analysis,
                                 const WhatIfRequest& request, const AnalysisOptions& options) {
  const Timeline& t = analysis.timeline;
  if (analysis.plan.sampled_every != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: device timing was sampled (one step in %d): whatif replays every step's device work; "
        "record the job without STALLSCOPE_DEVICE_SAMPLE",
        BaseName(t.path), analysis.plan.sampled_every));
  }
  WhatIf w;
  w.trace = BaseName(t.path);
  const int first = request.first_step, last = request.last_step;
  w.baseline = SummarizeSteps(report, first, last);

  ReplayOptions ro;
  ro.launch_dispatch_ns = options.attribution.launch_dispatch_ns;
  ro.leader = request.leader;
  std::vector<std::string> removed_sites;
  if (!request.remove_sync.empty()) {
    ro.remove_wait.assign(t.calls.size(), false);
    for (const std::string& site : request.remove_sync) {
      int32_t found = -1;
      for (size_t i = 0; i < report.hotspots.size(); ++i) {
        if (Names(report.hotspots[i], site)) {
          found = static_cast<int32_t>(i);
          break;
        }
      }
      if (found < 0) {
        std::vector<std::string> known;
        for (const Hotspot& h : report.hotspots) known.push_back(SiteName(h));
        return absl::InvalidArgumentError(absl::StrFormat(
            "--remove-sync %s: no hotspot at that site or with that fingerprint (hotspots: %s)",
            site, known.empty() ? "none" : absl::StrJoin(known, ", ")));
      }
      int64_t calls = 0;
      for (size_t c = 0; c < t.calls.size() && c < analysis.hotspot_of_call.size(); ++c) {
        if (analysis.hotspot_of_call[c] == found) {
          ro.remove_wait[c] = true;
          ++calls;
        }
      }
      const Hotspot& h = report.hotspots[found];
      removed_sites.push_back(SiteName(h));
      w.transformations.push_back({"remove_sync", SiteName(h) + " (" + h.fingerprint + ")", calls});
    }
  }
  std::vector<std::pair<std::string, double>> kernel_scales;
  for (const std::string& spec : request.scale_kernel) {
    const size_t eq = spec.rfind('=');
    double x = 0;
    if (eq == std::string::npos || eq == 0 || !absl::SimpleAtod(spec.substr(eq + 1), &x) || !(x >= 0) ||
        !std::isfinite(x)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "--scale-kernel %s: not GLOB=X (a kernel name pattern and a factor of 0 or more)", spec));
    }
    kernel_scales.emplace_back(spec.substr(0, eq), x);
  }
  if (!kernel_scales.empty()) {
    ro.op_scale.assign(t.ops.size(), 1.0);
    std::vector<int64_t> matched(kernel_scales.size(), 0);
    absl::flat_hash_map<uint32_t, int32_t> rule_of_name;  // string id -> rule (-1: none)
    for (size_t o = 0; o < t.ops.size(); ++o) {
      if (t.ops[o].kind != trace::DeviceOpKind::kKernel) continue;
      const uint32_t name = t.op_info[o].name;
      auto [it, added] = rule_of_name.try_emplace(name, -1);
      if (added) {
        const std::string n(t.String(name));
        for (size_t k = 0; k < kernel_scales.size(); ++k) {
          if (fnmatch(kernel_scales[k].first.c_str(), n.c_str(), 0) == 0) {
            it->second = static_cast<int32_t>(k);
            break;
          }
        }
      }
      if (it->second >= 0) {
        ro.op_scale[o] = kernel_scales[it->second].second;
        ++matched[it->second];
      }
    }
    for (size_t k = 0; k < kernel_scales.size(); ++k) {
      if (matched[k] == 0) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "--scale-kernel %s: no kernel of the trace matches %s", request.scale_kernel[k],
            kernel_scales[k].first));
      }
    }
    for (size_t k = 0; k < kernel_scales.size(); ++k) {
      w.transformations.push_back({"scale_kernel",
                                   absl::StrCat(kernel_scales[k].first, " × ", Factor(kernel_scales[k].second)),
                                   matched[k]});
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
    if (!all && ro.graph_windows.empty()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "--launch-steps %d-%d: no such step (the trace has %d)", request.launch_first_step,
          request.launch_last_step, report.steps.size()));
    }
  }

  int32_t straggler = -1;
  int64_t straggler_moved = 0;
  if (request.straggler_to_median) {
    if (analysis.rank_arrivals.size() < 2) {
      return absl::InvalidArgumentError(
          "--straggler-to-median: not a distributed run (give the folder of every rank's trace)");
    }
    if (!report.stragglers.empty()) {
      straggler = report.stragglers.front().rank;
    } else {
      // None beyond the report's rule: the rank that arrived last most often.
      int64_t most = 0;
      straggler = MostOftenLast(analysis.rank_arrivals, analysis.one_host, &most);
      if (straggler < 0) {
        return absl::InvalidArgumentError("--straggler-to-median: no collective reached by two ranks");
      }
      w.assumptions.push_back(absl::StrFormat(
          "no rank is a straggler by the report's rule; rank %d, last at %d collectives, is taken as the "
          "slowest",
          straggler, most));
    }
    const RankArrivals& mine = analysis.rank_arrivals[analysis.rank_index];
    if (mine.rank == straggler) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "--straggler-to-median: the straggler is rank %d, the rank analyzed; its extra time is its "
          "own host or device time (try --scale-host-wait or --scale-host-busy)",
          straggler));
    }
    ro.start_cut = StragglerCuts(t, mine, analysis.rank_arrivals, straggler, analysis.one_host, &straggler_moved);
  }

  // Each replayed timeline lives only while it is analyzed (peak memory:
  // the trace's timeline and one replay).
  ReplayStats stats;
  AnalysisOptions replay_options = options;
  replay_options.stream = false;  // a replayed timeline is not its file's
  {
    auto replayed = AnalyzeTimeline(
        Replay(t, analysis.classes, ReplayOptions{.launch_dispatch_ns = ro.launch_dispatch_ns, .leader = ro.leader}),
        replay_options);
    if (!replayed.ok()) return replayed.status();
    w.replayed = SummarizeSteps(*replayed, first, last);
  }
  {
    auto predicted = AnalyzeTimeline(Replay(t, analysis.classes, ro, &stats), replay_options);
    if (!predicted.ok()) return predicted.status();
    w.predicted = SummarizeSteps(*predicted, first, last);
  }
  if (request.scale_host_wait != 1.0) {
    w.transformations.push_back({"scale_host_wait", Factor(request.scale_host_wait), stats.gaps_scaled});
  }
  if (request.scale_host_busy != 1.0) {
    w.transformations.push_back({"scale_host_busy", Factor(request.scale_host_busy), stats.gaps_scaled});
  }
  if (request.scale_host_func != 1.0) {
    w.transformations.push_back({"scale_host_func", Factor(request.scale_host_func), stats.after_host_func});
  }
  if (request.straggler_to_median) {
    w.transformations.push_back({"straggler_to_median",
                                 absl::StrFormat("rank %d at the median arrival", straggler),
                                 straggler_moved});
  }
  if (request.launch_cost_ns >= 0) {
    w.transformations.push_back(
        {"launch_cost",
         absl::StrFormat("%s per graph node, %d %sstretches captured%s", FormatDuration(request.launch_cost_ns),
                         stats.stretches_captured, ro.graph_every_stretch ? "" : "launch-bound ",
                         ro.graph_every_stretch ? absl::StrFormat(" in steps %d-%d", request.launch_first_step,
                                                                  request.launch_last_step)
                                                : ""),
         stats.launches_captured});
  }

  // The next limit: the predicted run's largest idle cause, unless the GPU
  // is busy nearly all the time.
  int best = 0;
  for (int i = 1; i < kNumCauses; ++i) {
    if (w.predicted.idle_by_cause[i] > w.predicted.idle_by_cause[best]) best = i;
  }
  const bool busy = w.predicted.wall_ns > 0 && w.predicted.gpu_idle_ns * 20 < w.predicted.wall_ns;
  w.next_limit = busy || w.predicted.idle_by_cause[best] == 0 ? "gpu_busy" : CauseName(CauseAt(best));

  w.assumptions = {
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
                      FormatDuration(ro.launch_dispatch_ns)),
  };
  if (request.straggler_to_median) {
    w.assumptions.push_back(
        "the straggler reaches each collective at the median of that collective's arrivals (or "
        "as early as it did); the collective starts at the latest arrival left; the analyzed "
        "rank's own work keeps its times otherwise");
  }
  if (request.launch_cost_ns >= 0) {
    w.assumptions.push_back(
        "a captured stretch is one graph launch costing its first launch call; the host time "
        "between its launches is the framework's launch path, which a graph's replay skips; its "
        "kernels keep their durations");
  }
  if (!kernel_scales.empty()) {
    w.assumptions.push_back(
        "a scaled kernel's duration is its traced duration times the factor; what follows it moves "
        "with it");
  }
  if (request.scale_host_func != 1.0) {
    w.assumptions.push_back(
        "an op after a host function on its stream waited the function's time: its delay beyond the "
        "least delay between two ops of a stream is scaled");
  }
  if (stats.gaps_without_cpu > 0) {
    w.assumptions.push_back(absl::StrFormat(
        "%d host gaps had no CPU samples: taken as off-CPU (host_wait)", stats.gaps_without_cpu));
  }

  std::vector<std::string> change;
  if (!removed_sites.empty()) {
    change.push_back(absl::StrCat("removing the sync", removed_sites.size() > 1 ? "s" : "", " at ",
                                  absl::StrJoin(removed_sites, ", ")));
  }
  if (request.scale_host_wait != 1.0) {
    change.push_back(absl::StrCat("host waits × ", Factor(request.scale_host_wait)));
  }
  if (request.scale_host_busy != 1.0) {
    change.push_back(absl::StrCat("host work × ", Factor(request.scale_host_busy)));
  }
  for (const auto& [glob, x] : kernel_scales) {
    change.push_back(absl::StrCat("kernels ", glob, " × ", Factor(x)));
  }
  if (request.scale_host_func != 1.0) {
    change.push_back(absl::StrCat("host functions × ", Factor(request.scale_host_func)));
  }
  if (request.straggler_to_median) {
    change.push_back(absl::StrFormat("rank %d arriving at the median rank's time", straggler));
  }
  if (request.launch_cost_ns >= 0) {
    change.push_back(absl::StrFormat("capturing %d %sstretch%s of kernel launches in CUDA graphs",
                                     stats.stretches_captured, ro.graph_every_stretch ? "" : "launch-bound ",
                                     stats.stretches_captured == 1 ? "" : "es"));
  }
  const std::string what = change.empty() ? "the trace replayed unchanged" : absl::StrJoin(change, " and ");
  w.headline = absl::StrFormat("%s takes the step from %s to %s (%s); the next limit is %s", what,
                               FormatDuration(w.baseline.mean_step_ns),
                               FormatDuration(w.predicted.mean_step_ns),
                               Percent(Relative(w.predicted.mean_step_ns, w.baseline.mean_step_ns)),
                               w.next_limit);
  return w;
}

absl::StatusOr<WhatIf> RunWhatIfOnSteps(const std::vector<std::string>& paths, int first, int last,
                                        WhatIfRequest request, const AnalysisOptions& options) {
  AnalysisOptions by_slices = options;
  by_slices.stream = true;
  ProcessAnalysis whole;
  StreamedProcess streamed;
  streamed.keep_for_export = true;  // the synchronizing calls' marks, for the leader
  auto report = AnalyzePaths(paths, by_slices, &whole, &streamed);
  if (!report.ok()) return report.status();
  const int n = static_cast<int>(report->steps.size());
  if (first < 0 || last < first || last >= n) {
    return absl::InvalidArgumentError(
        n == 0 ? absl::StrFormat("--steps %d-%d: the trace has no steps", first, last)
               : absl::StrFormat("--steps %d-%d: the trace has steps 0-%d", first, last, n - 1));
  }
  if (!report->ranks.empty()) {
    return absl::InvalidArgumentError(
        "--steps: a rank of a distributed run waits for the others: it is predicted from the whole run "
        "(leave out --steps)");
  }
  const WhatIf::Steps asked{first, last, n, 0, 0};
  if (!streamed.used) {  // read whole
    request.first_step = first;
    request.last_step = last;
    auto w = RunWhatIf(*report, whole, request, options);
    if (!w.ok()) return w.status();
    const auto events = static_cast<int64_t>(whole.timeline.calls.size() + whole.timeline.ops.size());
    w->steps = asked;
    w->steps.events_read = w->steps.events = events;
    return w;
  }
  // One step on either side: the device work queued before the first and
  // the host's run-up to it are replayed as the trace had them.
  const StepStats& a = report->steps[static_cast<size_t>(std::max(first - 1, 0))];
  const StepStats& b = report->steps[static_cast<size_t>(std::min(last + 1, n - 1))];
  const int64_t lo = std::max<int64_t>(0, std::min(a.host_start_ns, a.start_ns));
  const int64_t hi = std::max(b.host_end_ns, b.end_ns);
  const SliceChunker chunker(streamed.index);
  auto part = ReadTraceFileChunks(streamed.path, streamed.index,
                                  chunker.Chunks(static_cast<uint64_t>(lo), static_cast<uint64_t>(hi)));
  if (!part.ok()) return part.status();
  ProcessAnalysis analysis;
  AnalysisOptions in_memory = options;
  in_memory.stream = false;
  auto part_report = AnalyzeTimeline(*part, in_memory, &analysis);
  if (!part_report.ok()) return part_report.status();
  analysis.timeline = *std::move(part);
  // The steps asked for, among the part's.
  int j0 = -1, j1 = -1;
  for (size_t j = 0; j < part_report->steps.size(); ++j) {
    const StepStats& st = part_report->steps[j];
    if (st.host_start_ns == report->steps[first].host_start_ns && st.start_ns == report->steps[first].start_ns) {
      j0 = static_cast<int>(j);
    }
    if (st.host_end_ns == report->steps[last].host_end_ns && st.end_ns == report->steps[last].end_ns) {
      j1 = static_cast<int>(j);
    }
  }
  if (j0 < 0 || j1 < j0 || j1 - j0 != last - first) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--steps %d-%d: the part of the trace read for these steps does not give the trace's steps (%s); "
        "leave out --steps",
        first, last, report->step_source));
  }
  request.first_step = j0;
  request.last_step = j1;
  request.leader = WholeLeader(streamed.analysis.call_marks);
  if (request.launch_first_step <= request.launch_last_step) {
    request.launch_first_step += j0 - first;
    request.launch_last_step += j0 - first;
  }
  auto w = RunWhatIf(*part_report, analysis, request, in_memory);
  if (!w.ok()) return w.status();
  w->steps = asked;
  w->steps.events_read = static_cast<int64_t>(analysis.timeline.calls.size() + analysis.timeline.ops.size());
  for (const ThreadCallCount& c : streamed.index.calls_per_thread) w->steps.events += c.calls;
  for (const DeviceOpCount& d : streamed.index.ops_per_device) w->steps.events += d.ops;
  return w;
}

std::string RenderWhatIfText(const WhatIf& w) {
  std::string s = absl::StrCat(w.headline, ".\n\n");
  if (w.steps.of > 0) {
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
  Json xs = Json::array();
  for (const auto& x : w.transformations) {
    xs.push_back(Json{{"kind", x.kind}, {"target", x.target}, {"changed", x.calls}});
  }
  j["transformations"] = xs;
  j["assumptions"] = w.assumptions;
  return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

}  // namespace stallscope::analyzer
