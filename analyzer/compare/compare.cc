// Comparison of two runs (see compare.h).
#include "analyzer/compare/compare.h"

#include <cmath>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "analyzer/analyze/questions.h"
#include "analyzer/model/causes_json.h"
#include "analyzer/model/format.h"

namespace stallscope::analyzer {
namespace {

using Json = nlohmann::ordered_json;

RunSummary Summarize(const Report& r, const std::string& path) {
  RunSummary s;
  s.path = path;
  s.step_source = r.step_source;
  s.steps = static_cast<int>(r.steps.size());
  s.totals = r.totals;
  if (r.steps.empty()) return s;
  const double n = static_cast<double>(r.steps.size());
  for (const StepStats& st : r.steps) {
    s.mean_step_ns += static_cast<double>(st.end_ns - st.start_ns) / n;
    s.mean_busy_ns += static_cast<double>(st.gpu_busy_ns) / n;
    s.mean_idle_ns += static_cast<double>(st.gpu_idle_ns) / n;
    for (int c = 0; c < kNumCauses; ++c) {
      s.idle_by_cause[c] += static_cast<double>(st.idle_by_cause[c]) / n;
    }
  }
  return s;
}

std::string Dur(double ns) { return FormatDuration(static_cast<int64_t>(std::llround(ns))); }

std::string SignedDur(double ns) {
  return absl::StrCat(ns < 0 ? "-" : "+", Dur(std::fabs(ns)));
}

std::string Change(const Delta& d) {
  double rel;
  if (!d.relative(&rel)) return d.other == 0 ? "0%" : "new";
  return absl::StrFormat("%+.1f%%", 100 * rel);
}

// What a cause that made the difference says about the job.
const char* Conclusion(Cause c) {
  switch (c) {
    case Cause::kHostWait: return "the job is input-bound";
    case Cause::kHostBusy: return "the job is host-bound (CPU work on the launching thread)";
    case Cause::kHostPreempted:
      return "the launching thread is starved of CPU (runnable, waiting for a core)";
    case Cause::kSync: return "the job is sync-bound (blocking synchronizations drain the GPU)";
    case Cause::kLaunchOverhead: return "the job is launch-bound";
    case Cause::kComm: return "the job is communication-bound";
    case Cause::kDeviceWait: return "device-side waits (cross-stream dependencies) set the pace";
    case Cause::kOther: return "the difference is in idle stallscope cannot explain";
  }
  return "";
}

std::string Verdict(const Comparison& c) {
  const double floor = kCompareMinStepShare * c.base.mean_step_ns;
  int best = -1;
  double best_abs = 0, largest_rel = 0;
  int largest = -1;
  for (int i = 0; i < kNumCauses; ++i) {
    const Delta& d = c.causes[i];
    const double larger = std::max(d.base, d.other);
    if (larger <= 0) continue;
    const double rel = std::fabs(d.delta()) / larger;
    if (std::fabs(d.delta()) >= floor && rel > largest_rel) {
      largest_rel = rel;
      largest = i;
    }
    if (rel >= kCompareMinChange && std::fabs(d.delta()) >= floor &&
        std::fabs(d.delta()) > best_abs) {
      best_abs = std::fabs(d.delta());
      best = i;
    }
  }
  if (best < 0) {
    std::string s = absl::StrFormat("no idle cause changed by more than %.0f%% per step",
                                    100 * (largest >= 0 ? largest_rel : 0.0));
    if (largest >= 0) {
      absl::StrAppendFormat(&s, " (largest: %s %s)", CauseName(CauseAt(largest)),
                            Change(c.causes[largest]));
    }
    absl::StrAppendFormat(&s, "; mean step time %s → %s", Dur(c.step.base), Dur(c.step.other));
    return s;
  }
  const Delta& d = c.causes[best];
  const char* name = CauseName(CauseAt(best));
  if (d.delta() < 0) {
    return absl::StrFormat(
        "the other run removed %.0f%% of %s (%s → %s per step; mean step time %s → %s): %s",
        100 * (-d.delta() / d.base), name, Dur(d.base), Dur(d.other), Dur(c.step.base),
        Dur(c.step.other), Conclusion(CauseAt(best)));
  }
  return absl::StrFormat(
      "the other run added %s of %s per step (%s → %s; mean step time %s → %s): %s",
      Dur(d.delta()), name, Dur(d.base), Dur(d.other), Dur(c.step.base), Dur(c.step.other),
      Conclusion(CauseAt(best)));
}

Question Q2(const Comparison& c) {
  if (c.base.steps == 0 || c.other.steps == 0) {
    return {"q2", "unknown", "One of the runs has no steps."};
  }
  const Delta& hw = c.causes[static_cast<int>(Cause::kHostWait)];
  std::string numbers = absl::StrFormat(
      "GPU idle per step %s → %s (%s), host_wait per step %s → %s, mean step time %s → %s "
      "(BASE → OTHER)",
      Dur(c.idle.base), Dur(c.idle.other), Change(c.idle), Dur(hw.base), Dur(hw.other),
      Dur(c.step.base), Dur(c.step.other));
  const double drop = c.idle.base - c.idle.other;
  const bool yes = c.idle.base > 0 && drop >= kQ2MinIdleDrop * c.idle.base &&
                   drop >= kCompareMinStepShare * c.base.mean_step_ns;
  return {"q2", yes ? "yes" : "no",
          absl::StrCat(yes ? "Idle gaps shrink with the other run's input: "
                           : "Idle gaps do not shrink by 25% with the other run's input: ",
                       numbers, ".")};
}

HotspotChange FromHotspot(const Hotspot& h) {
  HotspotChange x;
  x.fingerprint = h.fingerprint;
  x.api = h.api;
  x.explicit_sync = h.explicit_sync;
  x.site = h.site;
  x.suggestion = h.suggestion;
  return x;
}

}  // namespace

Comparison CompareReports(const Report& base, const std::string& base_path, const Report& other,
                          const std::string& other_path) {
  Comparison c;
  c.base = Summarize(base, base_path);
  c.other = Summarize(other, other_path);
  c.step = {c.base.mean_step_ns, c.other.mean_step_ns};
  c.busy = {c.base.mean_busy_ns, c.other.mean_busy_ns};
  c.idle = {c.base.mean_idle_ns, c.other.mean_idle_ns};
  for (int i = 0; i < kNumCauses; ++i) {
    c.causes[i] = {c.base.idle_by_cause[i], c.other.idle_by_cause[i]};
  }
  const double nb = std::max(1, c.base.steps), no = std::max(1, c.other.steps);
  absl::flat_hash_map<std::string, const Hotspot*> in_base, in_other;
  for (const Hotspot& h : base.hotspots) in_base.emplace(h.fingerprint, &h);
  for (const Hotspot& h : other.hotspots) in_other.emplace(h.fingerprint, &h);
  for (const Hotspot& h : base.hotspots) {
    auto it = in_other.find(h.fingerprint);
    HotspotChange x = FromHotspot(h);
    x.base_count = h.count;
    x.base_per_step = static_cast<double>(h.count) / nb;
    x.base_idle_caused_ns = h.idle_caused_ns;
    if (it == in_other.end()) {
      c.vanished.push_back(std::move(x));
    } else if (it->second->count != h.count) {
      x.other_count = it->second->count;
      x.other_per_step = static_cast<double>(x.other_count) / no;
      x.other_idle_caused_ns = it->second->idle_caused_ns;
      c.changed.push_back(std::move(x));
    }
  }
  for (const Hotspot& h : other.hotspots) {
    if (in_base.contains(h.fingerprint)) continue;
    HotspotChange x = FromHotspot(h);
    x.other_count = h.count;
    x.other_per_step = static_cast<double>(h.count) / no;
    x.other_idle_caused_ns = h.idle_caused_ns;
    c.appeared.push_back(std::move(x));
  }
  c.verdict = Verdict(c);
  c.q2 = Q2(c);
  return c;
}

namespace {

Json DeltaJson(const Delta& d) {
  double rel;
  Json j{{"base", d.base}, {"other", d.other}, {"delta", d.delta()}};
  j["change"] = d.relative(&rel) ? Json(rel) : Json(nullptr);
  return j;
}

Json SummaryJson(const RunSummary& s) {
  const Json causes = CausesJson(s.idle_by_cause);
  const Json totals_causes = CausesJson(s.totals.idle_by_cause);
  return Json{{"path", s.path},
              {"step_source", s.step_source},
              {"steps", s.steps},
              {"mean_step_ns", s.mean_step_ns},
              {"mean_gpu_busy_ns", s.mean_busy_ns},
              {"mean_gpu_idle_ns", s.mean_idle_ns},
              {"idle_by_cause_per_step", std::move(causes)},
              {"totals", Json{{"wall_ns", s.totals.wall_ns},
                              {"gpu_busy_ns", s.totals.gpu_busy_ns},
                              {"gpu_idle_ns", s.totals.gpu_idle_ns},
                              {"idle_by_cause", std::move(totals_causes)},
                              {"launches", s.totals.launches},
                              {"syncs", s.totals.syncs}}}};
}

Json ChangeJson(const HotspotChange& h) {
  return Json{{"fingerprint", h.fingerprint},
              {"api", h.api},
              {"kind", h.explicit_sync ? "explicit" : "implicit"},
              {"site", Json{{"file", h.site.file}, {"line", h.site.line},
                            {"function", h.site.function}}},
              {"base_count", h.base_count},
              {"other_count", h.other_count},
              {"base_per_step", h.base_per_step},
              {"other_per_step", h.other_per_step},
              {"base_idle_caused_ns", h.base_idle_caused_ns},
              {"other_idle_caused_ns", h.other_idle_caused_ns},
              {"suggestion", h.suggestion}};
}

std::string Site(const Frame& f) {
  if (f.file.empty()) return f.function;
  return absl::StrFormat("%s:%d (%s)", f.file, f.line, f.function);
}

}  // namespace

Json ComparisonToJson(const Comparison& c) {
  Json j;
  j["schema"] = kCompareSchema;
  j["base"] = SummaryJson(c.base);
  j["other"] = SummaryJson(c.other);
  Json causes = Json::object();
  for (int i = 0; i < kNumCauses; ++i) causes[CauseName(CauseAt(i))] = DeltaJson(c.causes[i]);
  j["deltas"] = Json{{"mean_step_ns", DeltaJson(c.step)},
                     {"mean_gpu_busy_ns", DeltaJson(c.busy)},
                     {"mean_gpu_idle_ns", DeltaJson(c.idle)},
                     {"idle_by_cause", std::move(causes)}};
  for (const auto& [key, list] : {std::pair{"appeared", &c.appeared},
                                  std::pair{"vanished", &c.vanished},
                                  std::pair{"changed", &c.changed}}) {
    Json a = Json::array();
    for (const HotspotChange& h : *list) a.push_back(ChangeJson(h));
    j[key] = std::move(a);
  }
  j["verdict"] = c.verdict;
  j["q2"] = Json{{"id", c.q2.id}, {"answer", c.q2.answer}, {"evidence", c.q2.evidence}};
  return j;
}

std::string RenderCompareJson(const Comparison& c) {
  return ComparisonToJson(c).dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

std::string RenderCompareText(const Comparison& c) {
  std::string out = "stallscope compare\n==================\n";
  absl::StrAppendFormat(&out, "base:  %s (%d steps, %s)\nother: %s (%d steps, %s)\n\n",
                        c.base.path, c.base.steps, c.base.step_source, c.other.path,
                        c.other.steps, c.other.step_source);
  absl::StrAppendFormat(&out, "Verdict: %s.\n\n", c.verdict);
  absl::StrAppendFormat(&out, "  %-22s %12s %12s %12s %9s\n", "per step (mean)", "base", "other",
                        "delta", "change");
  auto row = [&out](const std::string& name, const Delta& d) {
    absl::StrAppendFormat(&out, "  %-22s %12s %12s %12s %9s\n", name, Dur(d.base), Dur(d.other),
                          SignedDur(d.delta()), Change(d));
  };
  row("step time", c.step);
  row("GPU busy", c.busy);
  row("GPU idle", c.idle);
  for (int i = 0; i < kNumCauses; ++i) {
    row(absl::StrCat("  idle ", CauseName(CauseAt(i))), c.causes[i]);
  }
  absl::StrAppend(&out, "\nHotspots (by fingerprint)\n");
  if (c.appeared.empty() && c.vanished.empty() && c.changed.empty()) {
    absl::StrAppend(&out, "  no change\n");
  }
  for (const HotspotChange& h : c.vanished) {
    absl::StrAppendFormat(&out, "  vanished  %-26s %-8s %5d calls (%.2f/step)  %s  [%s]\n", h.api,
                          h.explicit_sync ? "explicit" : "implicit", h.base_count,
                          h.base_per_step, Site(h.site), h.fingerprint);
  }
  for (const HotspotChange& h : c.appeared) {
    absl::StrAppendFormat(&out, "  appeared  %-26s %-8s %5d calls (%.2f/step)  %s  [%s]\n", h.api,
                          h.explicit_sync ? "explicit" : "implicit", h.other_count,
                          h.other_per_step, Site(h.site), h.fingerprint);
    absl::StrAppendFormat(&out, "            fix: %s\n", h.suggestion);
  }
  for (const HotspotChange& h : c.changed) {
    absl::StrAppendFormat(&out, "  changed   %-26s %-8s %5d → %d calls (%.2f → %.2f/step)  %s  [%s]\n",
                          h.api, h.explicit_sync ? "explicit" : "implicit", h.base_count,
                          h.other_count, h.base_per_step, h.other_per_step, Site(h.site),
                          h.fingerprint);
  }
  absl::StrAppendFormat(&out,
                        "\nq2 %-7s Do idle gaps shrink with synthetic or cached input?\n"
                        "           %s\n",
                        c.q2.answer, c.q2.evidence);
  return out;
}

}  // namespace stallscope::analyzer
