// Text rendering of a Report (see report_text.h).
#include "analyzer/report/text.h"

#include <algorithm>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "analyzer/analyze/questions.h"
#include "analyzer/analyze/ranks.h"
#include "analyzer/model/format.h"

namespace stallscope::analyzer {
namespace {

std::string Site(const Frame& f) {
  if (f.file.empty()) return f.function;
  return absl::StrFormat("%s:%d (%s)", f.file, f.line, f.function);
}

// Wraps already padded text in an SGR colour when colouring.
class Painter {
 public:
  explicit Painter(bool on) : on_(on) {}
  std::string Paint(const std::string& text, const char* sgr) const {
    if (!on_) return text;
    return absl::StrCat("\033[", sgr, "m", text, "\033[0m");
  }
  std::string Heading(const std::string& text) const { return Paint(text, "1"); }
  // yes: yellow (a problem found), no: green, unknown: dim.
  std::string Answer(const std::string& answer) const {
    const std::string padded = absl::StrFormat("%-7s", answer);
    if (answer == "yes") return Paint(padded, "1;33");
    if (answer == "no") return Paint(padded, "32");
    return Paint(padded, "2");
  }
  std::string Sev(Severity s) const {
    const std::string padded = absl::StrFormat("%-7s", SeverityName(s));
    switch (s) {
      case Severity::kError: return Paint(padded, "1;31");
      case Severity::kWarning: return Paint(padded, "33");
      default: return padded;
    }
  }

 private:
  bool on_;
};

}  // namespace

std::string RenderSummary(const Report& r) {
  const Totals& t = r.totals;
  const char* source = r.step_source == "marker" ? "from step markers"
                       : r.step_source == "auto" ? "detected"
                                                 : "no markers";
  // Sampled device timing: the steps are the timed ones of those found.
  const std::string steps =
      r.sampled_every != 0
          ? absl::StrFormat("%d of %d steps timed (%s; device timing one step in %d)", r.steps.size(),
                            r.steps_found, source, r.sampled_every)
          : absl::StrFormat("%d step%s (%s)", r.steps.size(), r.steps.size() == 1 ? "" : "s", source);
  std::string s = absl::StrFormat("%s, GPU idle %.1f%% of %s", steps, Pct(t.gpu_idle_ns, t.wall_ns),
                                  FormatDuration(t.wall_ns));
  if (t.gpu_idle_ns > 0) {
    int top = TopCause(t.idle_by_cause);
    absl::StrAppendFormat(&s, ", top cause %s (%.1f%% of idle)", CauseName(CauseAt(top)),
                          Pct(t.idle_by_cause[top], t.gpu_idle_ns));
  }
  if (!r.hotspots.empty()) {
    const Hotspot& h = r.hotspots.front();
    absl::StrAppendFormat(&s, "; top hotspot %s at %s: %d calls, %s idle caused", h.api,
                          Site(h.site), h.count, FormatDuration(h.idle_caused_ns));
  } else {
    absl::StrAppend(&s, "; no blocking synchronization hotspots");
  }
  return s;
}

std::string RenderText(const Report& r, const TextStyle& style) {
  const Painter paint(style.color);
  const Totals& t = r.totals;
  std::string out = paint.Heading("stallscope report") + "\n=================\n";
  for (const ProcessSummary& p : r.processes) {
    absl::StrAppendFormat(&out, "%s pid %d on %s: %d device ops%s\n", p.file, p.pid,
                          p.host.empty() ? "?" : p.host, p.device_ops,
                          r.processes.size() > 1 && p.analyzed ? "  (analyzed below)" : "");
  }
  absl::StrAppendFormat(&out, "\n%s\n", RenderSummary(r));
  absl::StrAppendFormat(&out,
                        "GPU busy %s (%.1f%%): compute %s, copy %s, comm %s; %d launches, %d "
                        "synchronizing calls\n",
                        FormatDuration(t.gpu_busy_ns), Pct(t.gpu_busy_ns, t.wall_ns),
                        FormatDuration(t.busy_by_kind.compute), FormatDuration(t.busy_by_kind.copy),
                        FormatDuration(t.busy_by_kind.comm), t.launches, t.syncs);

  absl::StrAppend(&out, "\n",
                  paint.Heading("Steps (device timeline; times relative to the first step)"), "\n");
  absl::StrAppendFormat(&out, "  %5s %12s %12s %12s %12s %6s %5s %8s  %s\n", "step", "start",
                        "time", "busy", "idle", "idle%", "syncs", "launches", "top cause");
  const int64_t origin = r.steps.empty() ? 0 : r.steps.front().start_ns;
  for (size_t i = 0; i < r.steps.size() && i < kTextMaxSteps; ++i) {
    const StepStats& s = r.steps[i];
    const int64_t dur = s.end_ns - s.start_ns;
    absl::StrAppendFormat(&out, "  %5d %12s %12s %12s %12s %5.1f%% %5d %8d  %s\n", s.index,
                          FormatDuration(s.start_ns - origin), FormatDuration(dur),
                          FormatDuration(s.gpu_busy_ns), FormatDuration(s.gpu_idle_ns),
                          Pct(s.gpu_idle_ns, dur), s.sync_count, s.launches,
                          s.gpu_idle_ns > 0 ? CauseName(CauseAt(TopCause(s.idle_by_cause))) : "-");
  }
  if (r.steps.size() > kTextMaxSteps) {
    absl::StrAppendFormat(&out, "  ... %d more steps (--format json lists all)\n",
                          r.steps.size() - kTextMaxSteps);
  }

  absl::StrAppend(&out, "\n", paint.Heading("GPU idle by cause"), "\n");
  for (int i = 0; i < kNumCauses; ++i) {
    absl::StrAppendFormat(&out, "  %-16s %12s %6.1f%%\n", CauseName(CauseAt(i)),
                          FormatDuration(t.idle_by_cause[i]), Pct(t.idle_by_cause[i], t.gpu_idle_ns));
  }

  absl::StrAppend(&out, "\n", paint.Heading("Forced-sync hotspots"), "\n");
  if (r.hotspots.empty()) {
    absl::StrAppend(&out, "  none: no synchronizing call blocked the host\n");
  } else {
    for (const bool expl : {true, false}) {
      const HotspotKindTotals k = SumHotspotKind(r.hotspots, expl);
      absl::StrAppendFormat(&out, "  %-8s %d site%s, %d calls, %s blocked, %s idle caused\n",
                            expl ? "explicit" : "implicit", k.sites, k.sites == 1 ? "" : "s",
                            k.count, FormatDuration(k.blocked_ns),
                            FormatDuration(k.idle_caused_ns));
    }
    const bool saves = r.predictions.made;
    absl::StrAppendFormat(&out, "  %3s %-28s %-8s %7s %12s %12s%s  %s\n", "#", "api", "kind",
                          "count", "blocked", "idle caused", saves ? "   saves/step" : "", "site");
    for (size_t i = 0; i < r.hotspots.size(); ++i) {
      const Hotspot& h = r.hotspots[i];
      std::string saving;
      if (saves) {
        saving = absl::StrFormat(" %12s", h.predicted_saving_ns < 0 ? "-" : FormatDuration(h.predicted_saving_ns));
      }
      absl::StrAppendFormat(&out, "  %3d %-28s %-8s %7d %12s %12s%s  %s\n", i + 1, h.api,
                            h.explicit_sync ? "explicit" : "implicit", h.count,
                            FormatDuration(h.blocked_ns), FormatDuration(h.idle_caused_ns), saving,
                            Site(h.site));
      absl::StrAppendFormat(&out, "      fix: %s  [%s]\n", h.suggestion, h.fingerprint);
      if (h.sites_lost > 0) {
        absl::StrAppendFormat(&out,
                              "      %d of its calls came from Python frames that could not be "
                              "read: the site shown is the native one\n",
                              h.sites_lost);
      }
    }
  }

  if (const Predictions& p = r.predictions; p.made || !p.skipped.empty()) {
    absl::StrAppend(&out, "\n", paint.Heading("Predicted fixes (what-if replay of this trace)"), "\n");
    if (!p.made) {
      absl::StrAppend(&out, "  ", p.skipped, "\n");
    } else {
      const auto change = [&](int64_t to) {
        return absl::StrFormat("step %s -> %s (%+.0f%%)", FormatDuration(p.baseline_mean_step_ns),
                               FormatDuration(to),
                               p.baseline_mean_step_ns > 0
                                   ? 100.0 * static_cast<double>(to - p.baseline_mean_step_ns) /
                                         static_cast<double>(p.baseline_mean_step_ns)
                                   : 0.0);
      };
      if (p.all_removed_mean_step_ns >= 0) {
        absl::StrAppendFormat(&out, "  removing %s: %s\n",
                              p.hotspots_removed == 1 ? std::string("the hotspot")
                                                      : absl::StrFormat("all %d hotspots", p.hotspots_removed),
                              change(p.all_removed_mean_step_ns));
      }
      if (p.graph_mean_step_ns >= 0) {
        absl::StrAppendFormat(&out, "  capturing %d launch-bound stretch%s in CUDA graphs (%s a node): %s\n",
                              p.graph_stretches, p.graph_stretches == 1 ? "" : "es",
                              FormatDuration(p.graph_node_ns), change(p.graph_mean_step_ns));
      }
      if (p.all_removed_mean_step_ns < 0 && p.graph_mean_step_ns < 0) {
        absl::StrAppend(&out, "  nothing to predict: no hotspot, no launch-bound stretch\n");
      }
      absl::StrAppend(&out, "  (`stallscope whatif` for one fix at a time, with its assumptions)\n");
    }
  }

  if (!r.ranks.empty()) {
    const CollectivesSummary& c = r.collectives;
    absl::StrAppend(&out, "\n", paint.Heading("Ranks"), "\n");
    absl::StrAppendFormat(&out,
                          "  %d collectives on every rank: communication %.1f%% of step time "
                          "(%.1f%% overlapped with compute), waiting for the last rank %.1f%%; "
                          "arrival skew p50 %s, p95 %s, max %s; clocks: %s\n",
                          c.count, 100 * c.comm_share, 100 * c.overlap, 100 * c.wait_share,
                          FormatDuration(c.skew_p50_ns), FormatDuration(c.skew_p95_ns),
                          FormatDuration(c.skew_max_ns),
                          r.clock.method == "monotonic"
                              ? std::string("one host, one monotonic clock")
                              : absl::StrFormat("realtime offsets, error up to %s",
                                                FormatDuration(r.clock.error_ns)));
    absl::StrAppendFormat(&out, "  %5s %-12s %6s %12s %12s %12s %12s %6s %12s  %s\n", "rank",
                          "host", "steps", "busy", "idle", "comm", "waited", "last", "caused",
                          "top idle cause");
    for (const RankRow& k : r.ranks) {
      absl::StrAppendFormat(&out, "  %5d %-12s %6d %12s %12s %12s %12s %6d %12s  %s%s\n", k.rank,
                            k.host.substr(0, 12), k.steps, FormatDuration(k.gpu_busy_ns),
                            FormatDuration(k.gpu_idle_ns), FormatDuration(k.comm_ns),
                            FormatDuration(k.waited_ns), k.times_last,
                            FormatDuration(k.wait_caused_ns),
                            k.gpu_idle_ns > 0 ? CauseName(CauseAt(TopCause(k.idle_by_cause))) : "-",
                            k.analyzed ? "  (analyzed above)" : "");
    }
    if (!c.per_step.empty()) {
      absl::StrAppendFormat(&out, "  %5s %8s %8s %12s %12s  (per step, over the ranks)\n", "step",
                            "comm%", "overlap%", "wait mean", "wait max");
      for (size_t i = 0; i < c.per_step.size() && i < kTextMaxSteps; ++i) {
        const StepCollectives& sc = c.per_step[i];
        absl::StrAppendFormat(&out, "  %5d %7.1f%% %7.1f%% %12s %12s\n", sc.index,
                              100 * sc.comm_share, 100 * sc.overlap,
                              FormatDuration(sc.wait_mean_ns), FormatDuration(sc.wait_max_ns));
      }
      if (c.per_step.size() > kTextMaxSteps) {
        absl::StrAppendFormat(&out, "  ... %d more steps (--format json lists all)\n",
                              c.per_step.size() - kTextMaxSteps);
      }
    }
    if (r.stragglers.empty()) {
      absl::StrAppend(&out, "  stragglers: none\n");
    }
    for (const Straggler& st : r.stragglers) {
      absl::StrAppendFormat(&out,
                            "  straggler: rank %d arrived last at %d collectives, %s of waiting "
                            "caused; %s\n",
                            st.rank, st.times_last, FormatDuration(st.wait_caused_ns),
                            StragglerActivity(st));
    }
  }

  absl::StrAppend(&out, "\n", paint.Heading("Questions"), "\n");
  for (const Question& q : r.questions) {
    absl::StrAppendFormat(&out, "  %s %s %s\n         %s\n", q.id, paint.Answer(q.answer),
                          QuestionTitle(q.id), q.evidence);
  }

  absl::StrAppend(&out, "\n", paint.Heading("Diagnostics"), "\n");
  for (const Diagnostic& d : r.diagnostics) {
    if (d.message.empty()) {
      absl::StrAppendFormat(&out, "  %s %-26s %s (count %d)\n",
                            paint.Sev(DiagSeverity(d.id)), DiagName(d.id), DiagDescription(d.id),
                            d.count);
    } else {
      absl::StrAppendFormat(&out, "  %s %-26s %s\n", paint.Sev(DiagSeverity(d.id)),
                            DiagName(d.id), d.message);
    }
  }
  return out;
}

}  // namespace stallscope::analyzer
