// `stallscope fleet`: the multi-rank analysis one step at a time (per-rank
// maps and their reduces, exchanging small JSON documents), for running it
// on a cluster (python/stallscope/fleet.py).
#include <cerrno>
#include <cstring>
#include <memory>

#include "absl/strings/str_format.h"
#include "analyzer/analyze/predict.h"
#include "analyzer/analyze/ranks.h"
#include "analyzer/cli/cli.h"
#include "analyzer/cli/commands.h"
#include "analyzer/read/trace_reader.h"
#include "analyzer/report/json.h"
#include "analyzer/report/text.h"

namespace stallscope::analyzer {
namespace {

// Reads a JSON document; an error message on failure.
absl::StatusOr<nlohmann::json> ReadJsonFile(const std::string& path) {
  FILE* f = fopen(path.c_str(), "rb");
  if (f == nullptr) return absl::NotFoundError(absl::StrFormat("%s: %s", path, strerror(errno)));
  std::string text;
  char buf[65536];
  size_t got;
  while ((got = fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, got);
  fclose(f);
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded()) return absl::InvalidArgumentError(absl::StrFormat("%s: not JSON", path));
  return j;
}

struct FleetArgs {
  std::vector<std::string> inputs;
  std::string last_path;
  Conventions common;
  AnalysisArgs analysis;
};

absl::StatusOr<LastArrivals> LoadLast(const std::string& path) {
  auto j = ReadJsonFile(path);
  if (!j.ok()) return j.status();
  return LastArrivalsFromJson(*j);
}

// As `report` reads a folder: of several traces of one process (the flight
// recorder's dumps) only the newest is the process's; returns the base
// names of the others, removed from `v`.
template <typename T, typename Identity>
std::vector<std::string> KeepNewest(std::vector<T>* v, Identity identity) {
  std::vector<TraceIdentity> ids;
  for (const T& x : *v) ids.push_back(identity(x));
  const std::vector<bool> keep = NewestOfEachProcess(ids);
  std::vector<std::string> earlier;
  std::vector<T> kept;
  for (size_t i = 0; i < v->size(); ++i) {
    if (keep[i]) {
      kept.push_back(std::move((*v)[i]));
    } else {
      earlier.push_back(ids[i].file);
    }
  }
  *v = std::move(kept);
  return earlier;
}

int Arrivals(const FleetArgs& a) {
  auto t = ReadTraceFile(a.inputs[0]);
  if (!t.ok()) return Fail(t.status(), kExitBadTrace);
  return Emit(a.common.out, ArrivalsToJson(CollectArrivals(*t)).dump() + "\n");
}

int Last(const FleetArgs& a) {
  std::vector<RankArrivals> all;
  for (const std::string& path : a.inputs) {
    auto j = ReadJsonFile(path);
    if (!j.ok()) return Fail(j.status(), kExitBadTrace);
    auto arrivals = ArrivalsFromJson(*j);
    if (!arrivals.ok()) return Fail(arrivals.status(), kExitBadTrace);
    all.push_back(std::move(*arrivals));
  }
  KeepNewest(&all, [](const RankArrivals& r) { return r.trace; });
  return Emit(a.common.out, LastArrivalsToJson(ReduceArrivals(all)).dump() + "\n");
}

int Rank(const FleetArgs& a) {
  auto last = LoadLast(a.last_path);
  if (!last.ok()) return Fail(last.status(), kExitBadTrace);
  auto t = ReadTraceFile(a.inputs[0]);
  if (!t.ok()) return Fail(t.status(), kExitBadTrace);
  const RankArrivals arrivals = CollectArrivals(*t);
  ApplyLastArrivals(&*t, arrivals, *last);
  AnalysisOptions options = OptionsFrom(a.common, a.analysis);
  options.stream = false;  // the timeline was changed after reading
  auto report = AnalyzeTimeline(*t, options);
  if (!report.ok()) return Fail(report.status(), kExitUsage);
  return Emit(a.common.out,
              RankSummaryToJson(SummarizeRank(*t, arrivals, *last, *report)).dump() + "\n");
}

int ReportStep(const FleetArgs& a) {
  auto last = LoadLast(a.last_path);
  if (!last.ok()) return Fail(last.status(), kExitBadTrace);
  std::vector<RankSummary> ranks;
  size_t with_collectives = 0;
  for (const std::string& path : a.inputs) {
    auto j = ReadJsonFile(path);
    if (!j.ok()) return Fail(j.status(), kExitBadTrace);
    auto s = RankSummaryFromJson(*j);
    if (!s.ok()) return Fail(s.status(), kExitBadTrace);
    ranks.push_back(std::move(*s));
  }
  std::vector<std::string> earlier = KeepNewest(&ranks, [](const RankSummary& r) { return r.arrivals.trace; });
  std::vector<TraceIdentity> kept_ids;
  for (const RankSummary& r : ranks) {
    kept_ids.push_back(r.arrivals.trace);
    with_collectives += !r.arrivals.arrivals.empty();
  }
  // The traces a map could not read failed the run (FleetError): none here.
  const JobFiles job_files = DescribeJobFiles(kept_ids, std::move(earlier), {});
  const bool distributed = with_collectives >= 2;
  std::vector<std::pair<int32_t, int64_t>> candidates;
  for (const RankSummary& r : ranks) {
    candidates.emplace_back(distributed ? r.arrivals.rank : -1, r.process.device_ops);
  }
  const size_t primary = PrimaryProcess(candidates);
  auto t = ReadTraceFile(ranks[primary].path);
  if (!t.ok()) return Fail(t.status(), kExitBadTrace);
  if (distributed) ApplyLastArrivals(&*t, ranks[primary].arrivals, *last);
  AnalysisOptions options = OptionsFrom(a.common, a.analysis);
  if (distributed) options.stream = false;  // the rank's timeline was changed after reading
  ProcessAnalysis details;
  auto report = AnalyzeTimeline(*t, options, &details);
  if (!report.ok()) return Fail(report.status(), kExitUsage);
  if (options.predict) PredictFixes(*t, details, options, &*report);  // as `report` does
  Report composed;
  if (distributed) {
    composed = ComposeRanksReport(std::move(*report), std::move(ranks), primary);
  } else {
    std::vector<ProcessSummary> processes;
    for (const RankSummary& r : ranks) processes.push_back(r.process);
    composed = ComposeProcessesReport(std::move(*report), std::move(processes), primary);
  }
  NoteJobFiles(job_files, &composed);
  return Emit(a.common.out, a.common.format == "json" ? RenderJson(composed)
                                                      : RenderText(composed, {.color = UseColor(a.common)}));
}

// One step of the analysis: its operands, whether it reads --last, its
// formats and what it runs.
struct Step {
  const char* name;
  const char* summary;
  const char* operand;  // the positional's name in help
  bool one;             // exactly one operand (else one or more)
  bool needs_last;
  std::vector<std::string> formats;
  int (*run)(const FleetArgs&);
};

}  // namespace

Runner DeclareFleet(CLI::App* app) {
  static const Step kSteps[] = {
      {"arrivals", "map 1: the rank's collective arrivals (stallscope.arrivals/1)", "TRACE", true,
       false, {"json"}, Arrivals},
      {"last", "reduce 1: each collective's last arrival (stallscope.last-arrivals/1)",
       "ARRIVALS", false, false, {"json"}, Last},
      {"rank", "map 2: the rank analyzed with the others' arrivals (stallscope.rank-summary/1)",
       "TRACE", true, true, {"json"}, Rank},
      {"report",
       "reduce 2: the report over every rank (re-reads the shown rank's trace, named in its "
       "summary), as `stallscope report` gives over all the ranks' traces",
       "SUMMARY", false, true, {"json", "text"}, ReportStep},
  };
  app->require_subcommand(1);
  auto chosen = std::make_shared<Runner>();
  for (const Step& step : kSteps) {
    CLI::App* sub = app->add_subcommand(step.name, step.summary);
    auto a = std::make_shared<FleetArgs>();
    auto* operands = sub->add_option(step.operand, a->inputs)->required();
    if (step.one) operands->expected(1);
    if (step.needs_last) {
      sub->add_option("--last", a->last_path, "the last arrivals (the output of `fleet last`)")
          ->type_name("LAST")
          ->required();
    }
    AddConventions(sub, &a->common, step.formats,
                   {.format = step.formats.size() > 1 ? "json (stallscope.report/1) or text, as "
                                                        "`stallscope report` writes them"
                                                      : "the step's JSON document",
                    .quiet = "accepted (the steps print no progress)",
                    .color = "colours `report --format text` as for report",
                    .jobs = "accepted (each step reads one trace)"});
    if (step.needs_last) {
      AddAnalysisArgs(sub, &a->analysis, /*predictions=*/step.run == ReportStep);
    }
    sub->callback([chosen, a, run = step.run] { *chosen = [a, run] { return run(*a); }; });
  }
  return [chosen] { return (*chosen)(); };
}

}  // namespace stallscope::analyzer
