// The analysis pipeline (see analysis.h).
#include "analyzer/analyze/analysis.h"

#include <algorithm>
#include <filesystem>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <atomic>
#include <mutex>
#include <optional>
#include <thread>
#include <tuple>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "analyzer/analyze/hotspots.h"
#include "analyzer/analyze/job_files.h"
#include "analyzer/analyze/parallel.h"
#include "analyzer/analyze/predict.h"
#include "analyzer/analyze/questions.h"
#include "analyzer/analyze/ranks.h"
#include "analyzer/analyze/stream.h"
#include "analyzer/analyze/windows.h"
#include "analyzer/model/format.h"
#include "analyzer/read/symbolizer.h"
#include "analyzer/read/trace_reader.h"

namespace stallscope::analyzer {
namespace {

// STALLSCOPE_TIMING=1 prints each phase's CPU time to stderr (for
// profiling the analyzer; see docs/analyzer.md "Performance").
class PhaseTimer {
 public:
  PhaseTimer() : on_(getenv("STALLSCOPE_TIMING") != nullptr) { last_ = Now(); }
  void Mark(const char* phase) {
    if (!on_) return;
    const int64_t now = Now();
    fprintf(stderr, "stallscope: %-10s %8.1f ms\n", phase, static_cast<double>(now - last_) / 1e6);
    last_ = now;
  }

 private:
  static int64_t Now() {
    timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec * int64_t{1'000'000'000} + ts.tv_nsec;
  }
  bool on_;
  int64_t last_;
};

// `stream`: the attribution and hotspots read from the trace's file by
// slices, the attribution's calls found in `t` by key; nullopt where the
// streamed path does not apply (no step markers, a file the index
// refuses). Its plan must be the one found in memory.
struct FromFile {
  Attribution attribution;
  std::vector<Hotspot> hotspots;
  std::vector<std::string> changed_modules;
};
absl::StatusOr<std::optional<FromFile>> AnalyzeFromFile(const Timeline& t, const StepPlan& plan,
                                                        const std::regex& pattern,
                                                        const AttributionOptions& ao,
                                                        size_t window_steps) {
  auto index = IndexTraceFile(t.path);
  if (!index.ok()) return std::nullopt;
  auto reader = SliceReader::OpenFile(t.path, *index);
  if (!reader.ok()) return reader.status();
  StreamOptions so;
  if (window_steps > 0) so.steps_per_window = window_steps;
  auto s = AnalyzeStreamed(&*reader, *index, pattern, ao, so);
  if (s.status().code() == absl::StatusCode::kUnimplemented) return std::nullopt;
  if (!s.ok()) return s.status();
  auto span = [](const StepSpan& x) { return std::tie(x.start_ns, x.end_ns, x.host_start_ns, x.host_end_ns); };
  bool same = s->plan.steps.size() == plan.steps.size();
  for (size_t k = 0; same && k < plan.steps.size(); ++k) same = span(s->plan.steps[k]) == span(plan.steps[k]);
  if (!same) {
    return absl::InternalError(absl::StrFormat("%s: the steps read by slices differ from the whole trace's",
                                               t.path));
  }
  absl::flat_hash_map<CallKey, size_t> call_of;
  for (size_t i = 0; i < t.calls.size(); ++i) call_of.try_emplace(CallKey::Of(t.calls[i]), i);
  auto find = [&](const CallKey& k) -> std::optional<size_t> {
    auto it = call_of.find(k);
    if (it == call_of.end()) return std::nullopt;
    return it->second;
  };
  FromFile out;
  out.hotspots = std::move(s->hotspots);
  out.changed_modules = std::move(s->changed_modules);
  Attribution& a = out.attribution;
  a.steps = std::move(s->steps);
  a.gaps = std::move(s->gaps);
  const absl::Status missing =
      absl::InternalError(absl::StrFormat("%s: a call read by slices is not in the whole trace", t.path));
  for (const auto& [k, key] : s->gap_call) {
    const auto i = find(key);
    if (!i) return missing;
    a.gaps[k].call = static_cast<int32_t>(*i);
  }
  for (const auto& [key, ns] : s->idle_caused) {
    const auto i = find(key);
    if (!i) return missing;
    a.idle_caused.Add(*i, ns);
  }
  return out;
}

// The plan's diagnostics, in the report's order after the reading's: ops
// on several devices, sampled device timing, an empty last step dropped,
// ops outside every step; and the plan's fields.
void AddPlan(const StepPlan& plan, size_t devices, Report* report) {
  if (devices > 1) {
    AddDiagnostic(&report->diagnostics, DiagId::kMultipleDevices, devices,
                  absl::StrFormat("device ops on %d devices: device %d (the busiest) is "
                                  "analyzed",
                                  devices, plan.device));
  }
  if (plan.sampled_every != 0) {
    AddDiagnostic(&report->diagnostics, DiagId::kDeviceSampled, plan.steps.size(),
                  absl::StrFormat("device timing was sampled (one step in %d, and the step before "
                                  "it): %d of %d steps were timed; the steps, totals and hotspots "
                                  "cover those",
                                  plan.sampled_every, plan.steps.size(), plan.steps_found));
  }
  report->step_source = plan.source;
  report->sampled_every = plan.sampled_every;
  report->steps_found = static_cast<int64_t>(plan.steps_found);
  if (plan.dropped_empty_last) AddDiagnostic(&report->diagnostics, DiagId::kEmptyLastStep, 1);
  // More than one step's calls after the last step: the rule stopped
  // matching (the loop changed) or the run went on without steps.
  const AutoTail& tail = plan.auto_tail;
  if (plan.source == "auto" && !plan.steps.empty() && tail.calls_after > tail.period) {
    std::string rule = tail.rule_calls > 0
                           ? absl::StrFormat("; the step rule was found in the sequence's first %d calls",
                                             tail.rule_calls)
                           : "";
    AddDiagnostic(&report->diagnostics, DiagId::kAutoStepsEnd, tail.calls_after,
                  absl::StrFormat("%d of the launch sequence's %d calls come after the last step "
                                  "found (steps of %d calls; the last ends at %.6f s): no step "
                                  "begins there, and their device work is outside every step%s",
                                  tail.calls_after, tail.calls, tail.period,
                                  static_cast<double>(plan.steps.back().host_end_ns) / 1e9, rule));
  }
  if (plan.ops_outside > 0) {
    AddDiagnostic(&report->diagnostics, DiagId::kOpsOutsideSteps, plan.ops_outside,
                  absl::StrFormat("%d device ops were submitted outside every step and "
                                  "count only where they overlap a step",
                                  plan.ops_outside));
  }
}

// The rest of a process's report once its steps and hotspots are in:
// rebuilt modules, the totals, the questions, the diagnostics on idle
// charged to `other` and on the CPU-time samples (`no_delay` of them
// without a run-queue delay), and the process's summary `p`.
void FinishReport(const std::vector<std::string>& changed, const QuestionInputs& qi, uint64_t no_delay,
                  ProcessSummary p, Report* out) {
  Report& report = *out;
  if (!changed.empty()) {
    std::string names;
    for (const std::string& path : changed) {
      absl::StrAppend(&names, names.empty() ? "" : ", ", BaseName(path));
    }
    AddDiagnostic(&report.diagnostics, DiagId::kModuleChanged,
                  changed.size(),
                  absl::StrFormat("%s rebuilt since the trace was recorded (another build id): "
                                  "its frames are shown as module+offset",
                                  names));
  }

  Totals& tot = report.totals;
  for (const StepStats& s : report.steps) {
    tot.gpu_busy_ns += s.gpu_busy_ns;
    tot.gpu_idle_ns += s.gpu_idle_ns;
    for (int c = 0; c < kNumCauses; ++c) tot.idle_by_cause[c] += s.idle_by_cause[c];
    tot.busy_by_kind.compute += s.busy_by_kind.compute;
    tot.busy_by_kind.copy += s.busy_by_kind.copy;
    tot.busy_by_kind.comm += s.busy_by_kind.comm;
    tot.launches += s.launches;
    tot.syncs += s.sync_count;
  }
  // The steps' spans: the run's wall time when the steps tile the device
  // timeline, the timed steps' when device timing was sampled.
  for (const StepStats& s : report.steps) tot.wall_ns += s.end_ns - s.start_ns;

  report.questions = AnswerQuestions(report.steps, tot, qi);

  const int64_t other = tot.idle_by_cause[static_cast<int>(Cause::kOther)];
  AddDiagnostic(&report.diagnostics, DiagId::kOtherIdle, static_cast<uint64_t>(other),
                absl::StrFormat("%s of GPU idle (%.1f%%) is charged to `other`",
                                FormatDuration(other),
                                tot.gpu_idle_ns > 0 ? 100.0 * static_cast<double>(other) /
                                                          static_cast<double>(tot.gpu_idle_ns)
                                                    : 0.0));
  if (no_delay > 0) {
    AddDiagnostic(&report.diagnostics, DiagId::kNoRunDelay, no_delay,
                  absl::StrFormat("%d CPU-time samples carry no run-queue delay (a recorder "
                                  "older than it, or /proc/thread-self/schedstat unreadable): "
                                  "time the launching thread was runnable but waiting for a "
                                  "CPU counts as host_wait there",
                                  no_delay));
  }
  // (A recorder told to take none says so itself: cpu_samples_off.)
  const bool turned_off = std::any_of(report.diagnostics.begin(), report.diagnostics.end(),
                                      [](const Diagnostic& d) { return d.id == DiagId::kCpuSamplesOff; });
  if (!qi.cpu_samples && !turned_off) {
    AddDiagnostic(&report.diagnostics, DiagId::kNoCpuTime, 1,
                  "the trace carries no thread CPU-time samples (a recorder older than "
                  "them): host stalls longer than the dispatch threshold are charged to "
                  "host_wait, never host_busy");
  }

  p.steps = static_cast<int>(report.steps.size());
  p.totals = tot;
  p.analyzed = true;
  report.processes.push_back(std::move(p));
}

// A pass over a file of `size` bytes `share` done, told as a reading tells
// its progress (AnalysisOptions::progress, in the file's bytes).
void ProgressShare(const AnalysisOptions& options, const std::string& path, uint64_t size, double share) {
  if (options.progress) options.progress(path, static_cast<uint64_t>(share * static_cast<double>(size)), size);
}

// Whether a report by slices can be made from the file `index` indexes:
// not where the whole reading fixes records (their times past any sane
// clock), which a slice would not.
bool Sliceable(const TraceIndex& index) {
  for (const Diagnostic& d : index.diagnostics) {
    if (d.id == DiagId::kInvalidRecords) return false;
  }
  return true;
}

// A process's report made from its file by slices (stream.h), nothing held
// whole: the same report as AnalyzeTimeline's (and PredictFixes') on the
// whole reading, where no prediction is made. nullopt where that cannot
// be: predictions asked for a trace small enough to replay, a file the
// index refuses (damage the reader skips), records the reading fixes (their
// times past any sane clock), or no step markers; the file is then read
// whole. `identity` (optional) gets the trace's identity. `index`: the file's
// (IndexTraceFile's answer). `adjust` (optional): what the whole reading
// would have had changed after reading, done to each slice
// (StreamOptions::adjust).
absl::StatusOr<std::optional<Report>> ReportFromIndex(const std::string& path, absl::StatusOr<TraceIndex> index,
                                                      const AnalysisOptions& options,
                                                      TraceIdentity* identity, StreamedProcess* page,
                                                      std::function<void(Timeline*)> adjust = nullptr) {
  auto pattern = CompileStepPattern(options.step_pattern);
  if (!pattern.ok()) return pattern.status();
  if (!index.ok() || !Sliceable(*index)) return std::nullopt;
  // Progress, as a reading's in the file's bytes: the index pass a quarter
  // of the work, the three passes over slices the rest.
  auto progress = [&](double share) { ProgressShare(options, path, index->file_size, share); };
  uint64_t ops = 0, calls = 0;
  for (const DeviceOpCount& d : index->ops_per_device) ops += static_cast<uint64_t>(d.ops);
  for (const ThreadCallCount& c : index->calls_per_thread) calls += static_cast<uint64_t>(c.calls);
  const auto events = static_cast<int64_t>(calls + ops);
  if (options.predict && events <= kPredictMaxEvents) return std::nullopt;
  auto reader = SliceReader::OpenFile(path, *index);
  if (!reader.ok()) return reader.status();
  StreamOptions so;
  if (options.window_steps > 0) so.steps_per_window = options.window_steps;
  so.keep_gaps = false;  // the report's rows are the steps'
  so.keep_call_marks = page != nullptr && page->keep_for_export;
  so.adjust = std::move(adjust);
  if (page != nullptr) {
    // A page draws the gaps into its strip's columns as they come, afresh
    // if the windows are analyzed again (an empty span takes none).
    page->span = SpanOfRecords(*index);
    // An export keeps each gap, with its call, in a temporary file.
    if (page->keep_for_export) {
      page->gaps = std::make_shared<GapSpill>();
      if (absl::Status st = page->gaps->Open(); !st.ok()) return st;
    }
    so.on_gaps_again = [page] {
      page->idle = TimeColumns(page->span.start_ns, page->span.end_ns, page->idle_columns, kNumCauses);
      if (page->gaps) page->gaps->Clear();
    };
    so.on_gaps_again();
    so.on_gap = [page](const IdleGap& g, const ApiCall* call) {
      page->idle.Add(g.start_ns, g.end_ns, static_cast<size_t>(g.cause));
      if (page->gaps) page->gaps->Add(g, call);
    };
  }
  if (options.progress) {
    progress(0.25);
    so.progress = [&](uint64_t done, uint64_t total) {
      progress(0.25 + 0.75 * static_cast<double>(done) / static_cast<double>(std::max<uint64_t>(total, 1)));
    };
  }
  auto s = AnalyzeStreamed(&*reader, *index, *pattern, options.attribution, so);
  if (s.status().code() == absl::StatusCode::kUnimplemented) return std::nullopt;
  if (!s.ok()) return s.status();
  progress(1.0);

  Report report;
  // The whole reading's diagnostics: the index's, then what the slices
  // counted, in the reading's order.
  report.diagnostics = std::move(index->diagnostics);
  Timeline counts;
  counts.ops_per_device = index->ops_per_device;
  AddUncorrelatedOps(&report.diagnostics, s->unjoined_ops, ops);
  if (s->unmatched_nvtx > 0) AddDiagnostic(&report.diagnostics, DiagId::kUnmatchedNvtx, s->unmatched_nvtx);
  if (ops == 0) AddDiagnostic(&report.diagnostics, DiagId::kNoDeviceOps, 1);

  size_t devices = 0;
  BusiestDevice(counts, &devices);
  const StepPlan& plan = s->plan;
  AddPlan(plan, devices, &report);
  report.steps = std::move(s->steps);
  for (size_t i = 0; i < plan.numbers.size() && i < report.steps.size(); ++i)
    report.steps[i].index = plan.numbers[i];
  report.hotspots = std::move(s->hotspots);

  const Timeline& t = s->first_slice;
  ProcessSummary p;
  p.file = BaseName(path);
  p.pid = t.header.pid;
  p.host = t.host;
  p.device_ops = static_cast<int64_t>(ops);
  p.api_calls = static_cast<int64_t>(calls);
  FinishReport(s->changed_modules, s->questions, index->cpu_samples_without_delay, std::move(p), &report);
  if (options.predict && !SkipPredictions(plan.sampled_every, events, &report)) {
    return absl::InternalError("predictions asked of a trace read by slices");  // excluded above
  }
  if (identity != nullptr) *identity = IdentityOf(t);
  if (page != nullptr) {
    page->used = true;
    page->path = path;
    page->plan = plan;
    page->index = std::move(*index);
    if (page->keep_for_export) {
      StreamedAnalysis& kept = page->analysis;
      kept.idle_caused = std::move(s->idle_caused);
      kept.call_marks = std::move(s->call_marks);
      kept.first_range_ns = s->first_range_ns;
      kept.range_tids = std::move(s->range_tids);
      kept.spans_fused_failed = s->spans_fused_failed;
      kept.first_slice = std::move(s->first_slice);
    }
    page->analysis.steps_per_window = s->steps_per_window;
    page->analysis.unjoined_ops = s->unjoined_ops;
  }
  return report;
}

absl::StatusOr<std::optional<Report>> ReportFromFile(const std::string& path, const AnalysisOptions& options,
                                                     TraceIdentity* identity, StreamedProcess* page) {
  return ReportFromIndex(path, IndexTraceFile(path), options, identity, page);
}

}  // namespace

const char* CauseName(Cause c) {
  switch (c) {
    case Cause::kSync: return "sync";
    case Cause::kHostWait: return "host_wait";
    case Cause::kHostBusy: return "host_busy";
    case Cause::kHostPreempted: return "host_preempted";
    case Cause::kLaunchOverhead: return "launch_overhead";
    case Cause::kComm: return "comm";
    case Cause::kDeviceWait: return "device_wait";
    case Cause::kOther: return "other";
  }
  return "other";
}

absl::StatusOr<Report> AnalyzeTimeline(const Timeline& t, const AnalysisOptions& options,
                                       ProcessAnalysis* details) {
  auto pattern = CompileStepPattern(options.step_pattern);
  if (!pattern.ok()) return pattern.status();
  PhaseTimer timer;
  Report report;
  report.diagnostics = t.diagnostics;

  size_t devices = 0;
  const uint32_t device = BusiestDevice(t, &devices);
  StepPlan plan = FindSteps(t, *pattern, device);
  KeepTimedSteps(t, &plan);
  timer.Mark("steps");
  AddPlan(plan, devices, &report);
  const AttributionOptions& ao = options.attribution;
  std::vector<CallClass> classes = ClassifyCalls(t, device, ao);
  timer.Mark("classify");
  std::optional<FromFile> streamed;
  if (options.stream) {
    auto a = AnalyzeFromFile(t, plan, *pattern, ao, options.window_steps);
    if (!a.ok()) return a.status();
    streamed = std::move(*a);
  }
  Attribution attribution = streamed                   ? std::move(streamed->attribution)
                            : options.window_steps > 0 ? AttributeIdleByWindows(t, plan, classes, ao, options.window_steps)
                                                       : AttributeIdle(t, plan, classes, ao);
  timer.Mark("attribute");
  report.steps = std::move(attribution.steps);
  // Sampled: each step keeps its number among all the steps found.
  for (size_t i = 0; i < plan.numbers.size() && i < report.steps.size(); ++i)
    report.steps[i].index = plan.numbers[i];

  // Streamed, the hotspots are the file's; those of the timeline only
  // give each call's hotspot to the writers that draw it.
  Symbolizer symbolizer(t.modules);
  if (!streamed || details != nullptr) {
    report.hotspots = FindHotspots(t, plan, classes, attribution.idle_caused, ao, &symbolizer,
                                   details != nullptr ? &details->hotspot_of_call : nullptr);
  }
  const std::vector<std::string>& changed = streamed ? streamed->changed_modules : symbolizer.ChangedModules();
  if (streamed) report.hotspots = std::move(streamed->hotspots);
  timer.Mark("hotspots");

  QuestionInputs qi;
  for (const DeviceOp& op : t.ops) {
    if (op.device != device) continue;
    if (op.kind == trace::DeviceOpKind::kNccl) ++qi.nccl_ops;
    if (op.kind != trace::DeviceOpKind::kKernel || op.call < 0) continue;
    CountKernel(t.calls[op.call], op, ao.launch_dispatch_ns, &qi);
  }
  qi.cpu_samples = !t.cpu.empty();
  uint64_t no_delay = 0;
  for (const auto& [tid, samples] : t.cpu) {
    for (const CpuSample& c : samples) no_delay += c.run_delay_ns < 0 ? 1 : 0;
  }
  ProcessSummary p;
  p.file = BaseName(t.path);
  p.pid = t.header.pid;
  p.host = t.host;
  p.device_ops = static_cast<int64_t>(t.ops.size());
  p.api_calls = static_cast<int64_t>(t.calls.size());
  FinishReport(changed, qi, no_delay, std::move(p), &report);
  timer.Mark("questions");
  if (details != nullptr) {
    details->plan = std::move(plan);
    details->classes = std::move(classes);
    details->gaps = std::move(attribution.gaps);
    details->idle_caused = std::move(attribution.idle_caused);
  }
  return report;
}

absl::StatusOr<std::vector<std::string>> ExpandTracePaths(const std::vector<std::string>& args) {
  namespace fs = std::filesystem;
  std::vector<std::string> out;
  for (const std::string& arg : args) {
    std::error_code ec;
    const fs::file_status st = fs::status(arg, ec);
    if (ec) return absl::NotFoundError(absl::StrFormat("%s: %s", arg, ec.message()));
    if (!fs::is_directory(st)) {
      out.push_back(arg);
      continue;
    }
    std::vector<std::string> found;
    for (fs::directory_iterator it(arg, ec), end; !ec && it != end; it.increment(ec)) {
      const std::string name = it->path().filename().string();
      if (std::string_view(name).ends_with(trace::kFileSuffix)) {
        found.push_back(std::string_view(arg).ends_with("/") ? arg + name : arg + "/" + name);
      }
    }
    if (ec) return absl::NotFoundError(absl::StrFormat("%s: %s", arg, ec.message()));
    if (found.empty()) {
      return absl::NotFoundError(absl::StrFormat("%s: no %s files in this folder", arg,
                                                 trace::kFileSuffix));
    }
    std::sort(found.begin(), found.end());
    out.insert(out.end(), found.begin(), found.end());
  }
  if (out.empty()) return absl::NotFoundError("no trace given");
  return out;
}

size_t PrimaryProcess(const std::vector<std::pair<int32_t, int64_t>>& candidates) {
  for (size_t i = 0; i < candidates.size(); ++i) {
    if (candidates[i].first == 0) return i;
  }
  size_t best = 0;
  for (size_t i = 1; i < candidates.size(); ++i) {
    if (candidates[i].second > candidates[best].second) best = i;
  }
  return best;
}

Report ComposeProcessesReport(Report primary_report, std::vector<ProcessSummary> processes,
                              size_t primary) {
  Report out = std::move(primary_report);
  for (size_t i = 0; i < processes.size(); ++i) processes[i].analyzed = i == primary;
  if (processes.size() > 1) {
    const ProcessSummary& chosen = processes[primary];
    AddDiagnostic(&out.diagnostics, DiagId::kMultipleProcesses, processes.size(),
                  absl::StrFormat("%d processes traced: steps, hotspots and questions are "
                                  "those of pid %d (%s, the most device ops)",
                                  processes.size(), chosen.pid, chosen.file));
  }
  out.processes = std::move(processes);
  return out;
}

Report ComposeRanksReport(Report primary_report, std::vector<RankSummary> ranks, size_t primary) {
  Report out = std::move(primary_report);
  std::vector<ProcessSummary> processes;
  for (size_t i = 0; i < ranks.size(); ++i) {
    ranks[i].analyzed = i == primary;
    ProcessSummary p = ranks[i].process;
    p.analyzed = i == primary;
    processes.push_back(std::move(p));
  }
  if (processes.size() > 1) {
    const ProcessSummary& chosen = processes[primary];
    AddDiagnostic(&out.diagnostics, DiagId::kMultipleProcesses, processes.size(),
                  absl::StrFormat("%d processes traced: steps, hotspots and questions are "
                                  "those of pid %d (%s, %s)",
                                  processes.size(), chosen.pid, chosen.file,
                                  ranks[primary].arrivals.rank == 0 ? "rank 0"
                                                                    : "the most device ops"));
  }
  out.processes = std::move(processes);
  ReduceRanks(std::move(ranks), &out);
  return out;
}

namespace {

void Widen(RecordsSpan* s, int64_t lo, int64_t hi) {
  s->start_ns = s->any ? std::min(s->start_ns, lo) : lo;
  s->end_ns = s->any ? std::max(s->end_ns, hi) : hi;
  s->any = true;
}

}  // namespace

RecordsSpan SpanOfRecords(const TraceIndex& index) {
  RecordsSpan out;
  for (const ChunkSpan& c : index.chunks) {
    const bool api = c.type == static_cast<uint16_t>(trace::ChunkType::kApi);
    const bool ops = c.type == static_cast<uint16_t>(trace::ChunkType::kDevice);
    if ((api || ops) && c.count > 0) Widen(&out, static_cast<int64_t>(c.lo), static_cast<int64_t>(c.hi));
  }
  return out;
}

RecordsSpan SpanOfRecords(const Timeline& t) {
  // As the index scans a chunk: a call widens by its enter and exit (an
  // exit before its enter does not narrow it), an op by its start and end.
  RecordsSpan out;
  for (const ApiCall& c : t.calls) Widen(&out, c.enter_ns, std::max(c.enter_ns, c.exit_ns));
  for (const DeviceOp& op : t.ops) Widen(&out, op.start_ns, std::max(op.start_ns, op.end_ns));
  return out;
}

absl::Status ExportFromFileRefusal(const StreamedProcess& process) {
  if (!process.used || !process.keep_for_export) {
    return absl::InternalError("the trace was not reported by slices for an export");
  }
  if (process.analysis.unjoined_ops > 0) return absl::UnimplementedError("device ops no call submitted");
  if (ExternalIdsMayRepeat(process.index)) return absl::UnimplementedError("external ids that may repeat");
  return absl::OkStatus();
}

absl::StatusOr<Report> AnalyzePaths(const std::vector<std::string>& args,
                                    const AnalysisOptions& options, ProcessAnalysis* primary_out,
                                    StreamedProcess* streamed_out) {
  auto paths = ExpandTracePaths(args);
  if (!paths.ok()) return paths.status();
  const size_t n = paths->size();
  if (auto re = CompileStepPattern(options.step_pattern); !re.ok()) return re.status();
  // One trace, asked to stream or too large to hold whole: its report
  // drawn from the file by slices where it can be.
  const bool may_stream = primary_out == nullptr || streamed_out != nullptr;
  bool stream = options.stream;
  if (!stream && n == 1 && may_stream) {
    auto counts = CountByHeaders(paths->front());
    stream = counts.ok() && counts->calls_and_ops > options.stream_above_events;
  }
  if (stream && n == 1 && may_stream) {
    TraceIdentity id;
    auto streamed = ReportFromFile(paths->front(), options, &id, streamed_out);
    if (!streamed.ok()) return streamed.status();
    if (*streamed) {
      std::vector<ProcessSummary> processes{(*streamed)->processes.front()};
      Report out = ComposeProcessesReport(std::move(**streamed), std::move(processes), 0);
      NoteJobFiles(DescribeJobFiles({id}, {}, {}), &out);
      return out;
    }
  }

  // Several traces, read in parallel threads (progress reports serialized).
  // Held whole until the report is composed; or, past --stream-above calls
  // and device ops together (or with --stream), one at a time, read twice:
  // the first reading takes what choosing the processes and joining the
  // ranks needs (each trace's identity, collective arrivals and device ops),
  // the second the analysis, and each timeline but the primary's is let go
  // once analyzed. The report is the same.
  // (One trace is read once: it is what would be held.)
  std::vector<uint64_t> events(n, 0);  // calls and device ops, by the chunks' headers
  if (n > 1) {
    ParallelFor(n, options.jobs, [&](size_t i) {
      if (auto c = CountByHeaders((*paths)[i]); c.ok()) events[i] = c->calls_and_ops;
    });
  }
  uint64_t total = 0, largest = 0;
  for (const uint64_t e : events) {
    total += e;
    largest = std::max(largest, e);
  }
  const bool one_at_a_time = n > 1 && (options.stream || total > options.stream_above_events);
  // One at a time, no more traces at once than hold --stream-above calls
  // and ops together (at least one): the limit is what may be held.
  int jobs = options.jobs;
  if (one_at_a_time) {
    const uint64_t fit = std::max<uint64_t>(1, options.stream_above_events / std::max<uint64_t>(largest, 1));
    jobs = static_cast<int>(std::min<uint64_t>(ThreadsOf(options.jobs), fit));
  }
  // The options with progress reports serialized across the threads.
  std::mutex progress_mu;
  AnalysisOptions serial = options;
  if (options.progress) {
    serial.progress = [&](const std::string& path, uint64_t done, uint64_t total) {
      std::lock_guard<std::mutex> lock(progress_mu);
      options.progress(path, done, total);
    };
  }
  auto read = [&](const std::string& path) {
    PhaseTimer timer;
    ReadProgress progress;
    if (serial.progress) progress = [&](uint64_t done, uint64_t total) { serial.progress(path, done, total); };
    absl::StatusOr<Timeline> t = ReadTraceFile(path, progress);
    timer.Mark("read");
    return t;
  };
  std::vector<absl::StatusOr<Timeline>> timelines(n, absl::UnknownError("not read"));
  std::vector<absl::Status> read_status(n);
  std::vector<TraceIdentity> ids(n);
  std::vector<RankArrivals> arrivals(n);
  std::vector<int64_t> device_ops(n, 0);
  // Read one at a time, a trace past --stream-above itself (every trace,
  // with --stream) is read by slices, as one trace would be, and never
  // whole unless a report by slices cannot be made of it (ReportFromIndex)
  // or it is the analyzed process of a caller that draws its timeline. At
  // the first look: its arrivals, by a pass over its calls
  // (CollectArrivalsBySlices; none without NCCL kernels), its index kept;
  // and, without NCCL kernels, its report (nothing of the other traces
  // changes it). A trace with NCCL kernels is reported at the second look,
  // once the ranks' last arrivals are known, each slice with its waits.
  std::vector<std::optional<TraceIndex>> indexes(n);
  std::vector<InstanceOf> instances(n);
  std::vector<std::optional<Report>> streamed(n);
  const size_t per_slice = StreamOptions{}.chunks_per_slice;
  auto slice_it = [&](size_t i) {
    if (!one_at_a_time || !(options.stream || events[i] > options.stream_above_events)) return false;
    const std::string& path = (*paths)[i];
    absl::StatusOr<TraceIndex> index = IndexTraceFile(path);
    if (!index.ok() || !Sliceable(*index)) return false;
    auto reader = SliceReader::OpenFile(path, *index);
    if (!reader.ok()) return false;
    std::function<void(uint64_t, uint64_t)> progress;
    if (serial.progress) {
      progress = [&](uint64_t done, uint64_t total) {
        ProgressShare(serial, path, index->file_size,
                      static_cast<double>(done) / static_cast<double>(std::max<uint64_t>(total, 1)));
      };
    }
    auto rank = CollectArrivalsBySlices(&*reader, *index, per_slice, progress);
    if (!rank.ok()) return false;  // read whole: its reading says what is wrong
    uint64_t ops = 0, nccl = 0;
    for (const DeviceOpCount& d : index->ops_per_device) {
      ops += static_cast<uint64_t>(d.ops);
      nccl += static_cast<uint64_t>(d.nccl);
    }
    if (nccl == 0) {
      auto report = ReportFromIndex(path, *index, serial, nullptr, nullptr);
      if (!report.ok() || !*report) return false;
      streamed[i] = std::move(**report);
    }
    ids[i] = rank->arrivals.trace;
    arrivals[i] = std::move(rank->arrivals);
    instances[i] = std::move(rank->instance_of);
    device_ops[i] = static_cast<int64_t>(ops);
    indexes[i] = std::move(*index);
    return true;
  };
  ParallelFor(n, jobs, [&](size_t i) {
    if (slice_it(i)) return;
    timelines[i] = read((*paths)[i]);
    read_status[i] = timelines[i].status();
    if (!timelines[i].ok()) return;
    ids[i] = IdentityOf(*timelines[i]);
    arrivals[i] = CollectArrivals(*timelines[i]);
    device_ops[i] = static_cast<int64_t>(timelines[i]->ops.size());
    if (one_at_a_time) timelines[i] = absl::UnknownError("let go");
  });
  // A file that cannot be read (not a trace, empty, not a regular file) is
  // left out and named in the report, as long as one trace could be read.
  // Several traces of one process (same host, pid and start): the flight
  // recorder's dumps, one per trigger, each the ring's window at its
  // trigger; or copies of one file. The newest of each (its last clock
  // reading, one per drain) stands for the process; the others are named.
  std::vector<std::string> unreadable;
  std::vector<size_t> readable;
  for (size_t i = 0; i < n; ++i) {
    if (read_status[i].ok()) {  // (a trace reported by slices was read)
      readable.push_back(i);
    } else {
      unreadable.emplace_back(read_status[i].message());
    }
  }
  if (readable.empty()) return read_status.front();
  std::vector<TraceIdentity> readable_ids;
  for (size_t i : readable) readable_ids.push_back(ids[i]);
  const std::vector<bool> newest = NewestOfEachProcess(readable_ids);
  std::vector<std::string> earlier;
  std::vector<size_t> kept;
  for (size_t k = 0; k < readable.size(); ++k) {
    if (newest[k]) {
      kept.push_back(readable[k]);
    } else {
      earlier.push_back(BaseName((*paths)[readable[k]]));
    }
  }
  const size_t n_read = kept.size();
  // Each per-trace vector keeps the kept traces' entries, in order.
  auto keep = [&](auto& v) {
    for (size_t k = 0; k < n_read; ++k) {
      if (kept[k] != k) v[k] = std::move(v[kept[k]]);
    }
    v.erase(v.begin() + static_cast<ptrdiff_t>(n_read), v.end());
  };
  keep(timelines);
  keep(*paths);
  keep(ids);
  keep(arrivals);
  keep(device_ops);
  keep(streamed);
  keep(indexes);
  keep(instances);
  // What the folder says about the job as a whole: files that could not be
  // read, ranks of the job's world with no trace, and traces of other
  // processes that end before their process finished (killed, crashed).
  const JobFiles job_files = DescribeJobFiles(ids, std::move(earlier), std::move(unreadable));
  auto note_job_files = [&](Report* r) { NoteJobFiles(job_files, r); };

  // A distributed run: two or more traces with NCCL collectives. The
  // waiting part of each rank's NCCL kernels becomes idle (ranks.h).
  size_t with_collectives = 0;
  for (const RankArrivals& a : arrivals) with_collectives += !a.arrivals.empty();
  const bool distributed = with_collectives >= 2;
  LastArrivals last;
  if (distributed) last = ReduceArrivals(arrivals);

  // The process whose steps the report shows: rank 0 of a distributed run,
  // else the one with the most device ops (the first of equals).
  std::vector<std::pair<int32_t, int64_t>> candidates;  // (rank, device ops)
  for (size_t i = 0; i < n_read; ++i) candidates.emplace_back(distributed ? arrivals[i].rank : -1, device_ops[i]);
  const size_t primary = PrimaryProcess(candidates);
  std::vector<absl::StatusOr<Report>> reports(n_read, absl::UnknownError("not analyzed"));
  ProcessAnalysis details;
  const bool keep_details = primary_out != nullptr || options.predict;
  // The ranks' timelines were changed after reading (their NCCL waits):
  // the file no longer says what they hold.
  AnalysisOptions analyzed = options;
  if (distributed) analyzed.stream = false;
  // Each rank's summary is made from its timeline and report: the primary's
  // once its report has its predictions, the others' as they are analyzed.
  std::vector<RankSummary> ranks(distributed ? n_read : 0);
  // Reported by slices: the traces read so at the first look, unless the
  // analyzed process's timeline is asked for (the analyzed process keeps a
  // report by slices: its predictions were left out there).
  std::vector<char> by_slices(n_read, false);  // (written by the threads: not vector<bool>)
  auto summarize_by_slices = [&](size_t i) -> absl::StatusOr<RankSummary> {
    auto reader = SliceReader::OpenFile((*paths)[i], *indexes[i]);
    if (!reader.ok()) return reader.status();
    return SummarizeRankBySlices(&*reader, *indexes[i], (*paths)[i], arrivals[i], last, *reports[i], per_slice);
  };
  std::vector<absl::Status> summarized(n_read);
  // The analyzed process last: its report (a row a step) is kept, and is
  // not held while the others are analyzed, where they are one at a time.
  std::vector<size_t> order;
  for (size_t i = 0; i < n_read; ++i) {
    if (i != primary) order.push_back(i);
  }
  order.push_back(primary);
  ParallelFor(n_read, jobs, [&](size_t k) {
    const size_t i = order[k];
    // The analyzed process too where the caller takes a distributed run's
    // rank by slices (reported at the second look).
    const bool may_slice = indexes[i].has_value() &&
                           (i != primary || primary_out == nullptr ||
                            (streamed_out != nullptr && streamed_out->rank_by_slices && distributed && !streamed[i]));
    if (may_slice && streamed[i]) {
      reports[i] = std::move(*streamed[i]);
      by_slices[i] = true;
    } else if (may_slice) {
      // Its NCCL waits applied to each slice as a whole reading has them
      // applied; predictions are made of the analyzed process only.
      AnalysisOptions o = serial;
      o.predict = options.predict && i == primary;
      std::function<void(Timeline*)> adjust;
      if (distributed) {
        auto by_call = std::make_shared<const LastByCall>(LastArrivalsByCall(arrivals[i], instances[i], last));
        adjust = [by_call](Timeline* t) { ApplyLastArrivals(t, *by_call); };
      }
      StreamedProcess* page = i == primary ? streamed_out : nullptr;
      auto report = ReportFromIndex((*paths)[i], *indexes[i], o, nullptr, page, adjust);
      if (!report.ok()) {
        reports[i] = report.status();
        return;
      }
      if (*report) {
        reports[i] = std::move(**report);
        by_slices[i] = true;
        if (page != nullptr) page->adjust = std::move(adjust);
      }
    }
    // A rank's summary holds its arrivals: the folder's copy is let go,
    // unless the analyzed process's details are asked for (they take them).
    auto summarized_rank = [&] {
      reports[i] = Report();  // the summary is what the ranks' report takes of it
      if (primary_out == nullptr) arrivals[i] = RankArrivals();
    };
    if (by_slices[i]) {
      instances[i] = InstanceOf();
      if (distributed && i != primary) {
        auto s = summarize_by_slices(i);
        summarized[i] = s.status();
        if (s.ok()) ranks[i] = std::move(*s);
        summarized_rank();
      }
      return;
    }
    if (!timelines[i].ok()) {  // let go after the first look, or never read whole
      timelines[i] = read((*paths)[i]);
      if (!timelines[i].ok()) {
        reports[i] = timelines[i].status();
        return;
      }
    }
    if (distributed) ApplyLastArrivals(&*timelines[i], arrivals[i], last);
    reports[i] = AnalyzeTimeline(*timelines[i], analyzed, i == primary && keep_details ? &details : nullptr);
    if (i == primary || !reports[i].ok()) return;
    if (distributed) {
      ranks[i] = SummarizeRank(*timelines[i], arrivals[i], last, *reports[i]);
      summarized_rank();
    }
    if (one_at_a_time) timelines[i] = absl::UnknownError("let go");
  });
  for (const auto& r : reports) {
    if (!r.ok()) return r.status();
  }
  for (const absl::Status& st : summarized) {
    if (!st.ok()) return st;
  }
  if (options.predict && !by_slices[primary]) PredictFixes(*timelines[primary], details, options, &*reports[primary]);
  if (distributed) {
    if (by_slices[primary]) {
      auto s = summarize_by_slices(primary);
      if (!s.ok()) return s.status();
      ranks[primary] = std::move(*s);
    } else {
      ranks[primary] = SummarizeRank(*timelines[primary], arrivals[primary], last, *reports[primary]);
    }
    Report out = ComposeRanksReport(std::move(*reports[primary]), std::move(ranks), primary);
    note_job_files(&out);
    if (by_slices[primary] && streamed_out != nullptr && streamed_out->rank_by_slices) {
      streamed_out->rank_arrivals = std::move(arrivals);
      streamed_out->rank_index = primary;
      streamed_out->one_host = last.one_host;
    }
    if (primary_out != nullptr && !by_slices[primary]) {
      *primary_out = std::move(details);
      primary_out->timeline = std::move(*timelines[primary]);
      primary_out->rank_arrivals = std::move(arrivals);
      primary_out->one_host = last.one_host;
      primary_out->rank_index = primary;
    }
    return out;
  }
  std::vector<ProcessSummary> processes;
  for (size_t i = 0; i < n_read; ++i) processes.push_back(reports[i]->processes.front());
  Report out = ComposeProcessesReport(std::move(*reports[primary]), std::move(processes), primary);
  note_job_files(&out);
  if (primary_out != nullptr) {
    *primary_out = std::move(details);
    primary_out->timeline = std::move(*timelines[primary]);
  }
  return out;
}

}  // namespace stallscope::analyzer
