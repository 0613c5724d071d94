// JSON rendering of a Report (see report_json.h). Every cause key is present
// in every idle_by_cause object, zeros included.
#include "analyzer/report/json.h"

#include <string_view>

#include "absl/strings/str_cat.h"
#include "analyzer/model/causes_json.h"

namespace stallscope::analyzer {
namespace {

using Json = nlohmann::ordered_json;

Json Busy(const BusyByKind& b) {
  return Json{{"compute", b.compute}, {"copy", b.copy}, {"comm", b.comm}};
}

Json FrameJson(const Frame& f) {
  return Json{{"function", f.function}, {"file", f.file}, {"line", f.line}, {"module", f.module}};
}

Json PerStepJson(const StepCollectives& sc) {
  return Json{{"index", sc.index},
              {"comm_share", sc.comm_share},
              {"overlap", sc.overlap},
              {"wait_share", sc.wait_share},
              {"wait_mean_ns", sc.wait_mean_ns},
              {"wait_max_ns", sc.wait_max_ns}};
}

Json TotalsJson(const Totals& t) {
  return Json{{"wall_ns", t.wall_ns},
              {"gpu_busy_ns", t.gpu_busy_ns},
              {"gpu_idle_ns", t.gpu_idle_ns},
              {"idle_by_cause", CausesJson(t.idle_by_cause)},
              {"busy_by_kind", Busy(t.busy_by_kind)},
              {"launches", t.launches},
              {"syncs", t.syncs}};
}

// With `with_rows` false the steps array and the collectives' per-step
// array are left empty (StreamJson writes them itself); everything else,
// per-step rates included, is the same.
Json ToJson(const Report& r, bool with_rows) {
  Json j;
  j["schema"] = kReportSchema;
  j["step_source"] = r.step_source;
  if (r.sampled_every != 0) {
    j["device_timing"] = {{"sampled_every", r.sampled_every}, {"steps_found", r.steps_found}};
  }
  Json steps = Json::array();
  for (const StepStats& s : r.steps) {
    if (!with_rows) break;
    steps.push_back(Json{{"index", s.index},
                         {"device", s.device},
                         {"start_ns", s.start_ns},
                         {"end_ns", s.end_ns},
                         {"host_start_ns", s.host_start_ns},
                         {"host_end_ns", s.host_end_ns},
                         {"gpu_busy_ns", s.gpu_busy_ns},
                         {"gpu_idle_ns", s.gpu_idle_ns},
                         {"idle_by_cause", CausesJson(s.idle_by_cause)},
                         {"busy_by_kind", Busy(s.busy_by_kind)},
                         {"sync_count", s.sync_count},
                         {"launches", s.launches}});
  }
  j["steps"] = std::move(steps);
  const double n = r.steps.empty() ? 1.0 : static_cast<double>(r.steps.size());
  Json hotspots = Json::array();
  for (const Hotspot& h : r.hotspots) {
    Json stack = Json::array();
    for (const Frame& f : h.stack) stack.push_back(FrameJson(f));
    hotspots.push_back(Json{
        {"api", h.api},
        {"kind", h.explicit_sync ? "explicit" : "implicit"},
        {"site", Json{{"file", h.site.file}, {"line", h.site.line}, {"function", h.site.function}}},
        {"stack", std::move(stack)},
        {"count", h.count},
        {"steps", h.steps},
        {"blocked_ns", h.blocked_ns},
        {"idle_caused_ns", h.idle_caused_ns},
        {"sites_lost", h.sites_lost},
        {"per_step",
         Json{{"count", static_cast<double>(h.count) / n},
              {"blocked_ns", static_cast<double>(h.blocked_ns) / n},
              {"idle_caused_ns", static_cast<double>(h.idle_caused_ns) / n}}},
        {"fingerprint", h.fingerprint},
        {"suggestion", h.suggestion}});
    if (h.predicted_saving_ns >= 0 || r.predictions.made) {
      hotspots.back()["predicted_saving_ns"] =
          h.predicted_saving_ns >= 0 ? Json(h.predicted_saving_ns) : Json(nullptr);
    }
  }
  j["hotspots"] = std::move(hotspots);
  if (const Predictions& p = r.predictions; p.made || !p.skipped.empty()) {
    Json pj{{"made", p.made}};
    if (!p.skipped.empty()) pj["skipped"] = p.skipped;
    if (p.made) {
      pj["baseline_mean_step_ns"] = p.baseline_mean_step_ns;
      pj["all_hotspots_removed"] =
          p.all_removed_mean_step_ns < 0
              ? Json(nullptr)
              : Json{{"hotspots", p.hotspots_removed},
                     {"mean_step_ns", p.all_removed_mean_step_ns},
                     {"step_ns", p.all_removed_step_ns}};
      pj["cuda_graphs"] = p.graph_mean_step_ns < 0
                              ? Json(nullptr)
                              : Json{{"node_ns", p.graph_node_ns},
                                     {"stretches", p.graph_stretches},
                                     {"launches_folded", p.graph_launches_folded},
                                     {"mean_step_ns", p.graph_mean_step_ns},
                                     {"step_ns", p.graph_step_ns}};
    }
    j["predictions"] = std::move(pj);
  }
  {
    Json kinds = Json::object();
    for (const bool expl : {true, false}) {
      const HotspotKindTotals k = SumHotspotKind(r.hotspots, expl);
      kinds[expl ? "explicit" : "implicit"] = Json{{"sites", k.sites},
                                                   {"count", k.count},
                                                   {"blocked_ns", k.blocked_ns},
                                                   {"idle_caused_ns", k.idle_caused_ns}};
    }
    j["hotspot_kinds"] = std::move(kinds);
  }
  j["totals"] = TotalsJson(r.totals);
  j["totals"]["steps"] = r.steps.size();
  Json questions = Json::array();
  for (const Question& q : r.questions) {
    questions.push_back(Json{{"id", q.id}, {"answer", q.answer}, {"evidence", q.evidence}});
  }
  j["questions"] = std::move(questions);
  Json diagnostics = Json::array();
  for (const Diagnostic& d : r.diagnostics) {
    diagnostics.push_back(Json{{"name", DiagName(d.id)},
                               {"severity", SeverityName(DiagSeverity(d.id))},
                               {"count", d.count},
                               {"message", d.message.empty() ? DiagDescription(d.id) : d.message}});
  }
  j["diagnostics"] = std::move(diagnostics);
  Json processes = Json::array();
  for (const ProcessSummary& p : r.processes) {
    Json pj{{"file", p.file},     {"pid", p.pid},
            {"host", p.host},     {"analyzed", p.analyzed},
            {"steps", p.steps},   {"device_ops", p.device_ops},
            {"api_calls", p.api_calls}};
    const Json totals = TotalsJson(p.totals);
    for (const auto& item : totals.items()) pj[item.key()] = item.value();
    processes.push_back(std::move(pj));
  }
  j["processes"] = std::move(processes);
  if (!r.ranks.empty()) {
    Json ranks = Json::array();
    for (const RankRow& k : r.ranks) {
      ranks.push_back(Json{{"rank", k.rank},
                           {"host", k.host},
                           {"pid", k.pid},
                           {"file", k.file},
                           {"analyzed", k.analyzed},
                           {"steps", k.steps},
                           {"start_ns", k.start_ns},
                           {"end_ns", k.end_ns},
                           {"wall_ns", k.wall_ns},
                           {"gpu_busy_ns", k.gpu_busy_ns},
                           {"gpu_idle_ns", k.gpu_idle_ns},
                           {"comm_ns", k.comm_ns},
                           {"idle_by_cause", CausesJson(k.idle_by_cause)},
                           {"waited_ns", k.waited_ns},
                           {"times_last", k.times_last},
                           {"wait_caused_ns", k.wait_caused_ns}});
    }
    j["ranks"] = std::move(ranks);
    const CollectivesSummary& c = r.collectives;
    Json per_step = Json::array();
    for (const StepCollectives& sc : c.per_step) {
      if (!with_rows) break;
      per_step.push_back(PerStepJson(sc));
    }
    j["collectives"] = Json{{"count", c.count},
                            {"comm_share", c.comm_share},
                            {"overlap", c.overlap},
                            {"wait_share", c.wait_share},
                            {"arrival_skew_ns", Json{{"p50", c.skew_p50_ns},
                                                     {"p95", c.skew_p95_ns},
                                                     {"max", c.skew_max_ns}}},
                            {"per_step", std::move(per_step)}};
    Json stragglers = Json::array();
    for (const Straggler& s : r.stragglers) {
      stragglers.push_back(Json{{"rank", s.rank},
                                {"times_last", s.times_last},
                                {"wait_caused_ns", s.wait_caused_ns},
                                {"before", Json{{"cause", s.before_cause}, {"share", s.before_share}}},
                                {"busy_share", s.busy_share},
                                {"others_busy_share", s.others_busy_share}});
    }
    j["stragglers"] = std::move(stragglers);
    j["clock_alignment"] = Json{{"method", r.clock.method}, {"error_ns", r.clock.error_ns}};
  }
  return j;
}

}  // namespace

Json ReportToJson(const Report& r) { return ToJson(r, true); }

namespace {

constexpr auto kReplace = nlohmann::json::error_handler_t::replace;

// One step of the steps array exactly as nlohmann's dump(2) writes it at
// this depth (integers only, fixed keys), without building a JSON object
// per step: reports of long runs have hundreds of thousands of steps.
void AppendStep(const StepStats& s, bool last, std::string* out) {
  absl::StrAppend(out, "    {\n      \"index\": ", s.index, ",\n      \"device\": ", s.device,
                  ",\n      \"start_ns\": ", s.start_ns, ",\n      \"end_ns\": ", s.end_ns,
                  ",\n      \"host_start_ns\": ", s.host_start_ns,
                  ",\n      \"host_end_ns\": ", s.host_end_ns,
                  ",\n      \"gpu_busy_ns\": ", s.gpu_busy_ns,
                  ",\n      \"gpu_idle_ns\": ", s.gpu_idle_ns,
                  ",\n      \"idle_by_cause\": {\n");
  for (int c = 0; c < kNumCauses; ++c) {
    absl::StrAppend(out, "        \"", CauseName(CauseAt(c)), "\": ", s.idle_by_cause[c],
                    c + 1 < kNumCauses ? ",\n" : "\n");
  }
  absl::StrAppend(out, "      },\n      \"busy_by_kind\": {\n        \"compute\": ",
                  s.busy_by_kind.compute, ",\n        \"copy\": ", s.busy_by_kind.copy,
                  ",\n        \"comm\": ", s.busy_by_kind.comm,
                  "\n      },\n      \"sync_count\": ", s.sync_count,
                  ",\n      \"launches\": ", s.launches, last ? "\n    }\n" : "\n    },\n");
}

// One element of the collectives' per-step array as dump(2) writes it at
// its depth (6 spaces in): the library's rendering of the element alone
// (its doubles written as the library writes them), indented.
void AppendPerStep(const StepCollectives& sc, bool last, std::string* out) {
  const std::string e = PerStepJson(sc).dump(2, ' ', false, kReplace);
  out->append("      ");
  for (const char ch : e) {
    out->push_back(ch);
    if (ch == '\n') out->append("      ");
  }
  out->append(last ? "\n" : ",\n");
}

}  // namespace

absl::Status StreamJson(const Report& report, const JsonSink& sink) {
  // Everything but the rows through the JSON library; the steps array and
  // the collectives' per-step array written into their places
  // (byte-identical to the library's), a megabyte at a time.
  const std::string doc = ToJson(report, false).dump(2, ' ', false, kReplace);
  constexpr std::string_view kEmptySteps = "\n  \"steps\": [],\n";
  const size_t steps_at = doc.find(kEmptySteps);  // the third key: always there
  // The collectives' per-step array: their last key, with ranks only (no
  // string of the document holds it: a string's quotes are escaped).
  constexpr std::string_view kEmptyPerStep = "\"per_step\": []\n";
  const size_t per_step_at = report.collectives.per_step.empty() ? std::string::npos
                                                                  : doc.find(kEmptyPerStep, steps_at);
  std::string buf;
  auto flush = [&](size_t above) -> absl::Status {
    if (buf.size() <= above) return absl::OkStatus();
    absl::Status st = sink(buf);
    buf.clear();
    return st;
  };
  constexpr size_t kPiece = 1 << 20;
  buf.append(doc, 0, steps_at + kEmptySteps.size() - 4);  // up to and including `"steps": `
  if (report.steps.empty()) {
    buf.append("[]");
  } else {
    buf.append("[\n");
    for (size_t k = 0; k < report.steps.size(); ++k) {
      AppendStep(report.steps[k], k + 1 == report.steps.size(), &buf);
      if (absl::Status st = flush(kPiece); !st.ok()) return st;
    }
    buf.append("  ]");
  }
  size_t from = steps_at + kEmptySteps.size() - 2;  // `,\n` onwards
  if (per_step_at != std::string::npos) {
    buf.append(doc, from, per_step_at + kEmptyPerStep.size() - 3 - from);  // up to `"per_step": `
    buf.append("[\n");
    const std::vector<StepCollectives>& rows = report.collectives.per_step;
    for (size_t k = 0; k < rows.size(); ++k) {
      AppendPerStep(rows[k], k + 1 == rows.size(), &buf);
      if (absl::Status st = flush(kPiece); !st.ok()) return st;
    }
    buf.append("    ]");
    from = per_step_at + kEmptyPerStep.size() - 1;  // `\n` onwards
  }
  buf.append(doc, from, std::string::npos);
  buf.append("\n");
  return flush(0);
}

std::string RenderJson(const Report& report) {
  std::string out;
  StreamJson(report, [&](std::string_view piece) {
    out.append(piece);
    return absl::OkStatus();
  }).IgnoreError();  // (appending cannot fail)
  return out;
}

}  // namespace stallscope::analyzer
