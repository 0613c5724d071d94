// The analysis pipeline: read → timeline → steps → attribution → hotspots →
// questions, for one process or for every trace in a folder.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "analyzer/analyze/attribution.h"
#include "analyzer/analyze/columns.h"
#include "analyzer/analyze/ranks.h"
#include "analyzer/model/report.h"
#include "analyzer/analyze/steps.h"
#include "analyzer/analyze/stream.h"
#include "analyzer/model/timeline.h"
#include "analyzer/read/trace_reader.h"

namespace stallscope::analyzer {

struct AnalysisOptions {
  std::string step_pattern = kDefaultStepPattern;
  AttributionOptions attribution;
  // Called while each file is read (see ReadTraceFile): path, bytes read,
  // file size.
  std::function<void(const std::string& path, uint64_t done, uint64_t total)> progress;
  // Threads for reading and analyzing the traces of a folder (0: one per
  // core).
  int jobs = 0;
  // The primary process's report gets predicted step times (predict.h):
  // `report` and `run` ask for them, unless --no-predict.
  bool predict = false;
  // Idle attribution by windows of this many steps (windows.h), 0: over
  // the whole timeline at once. The report is the same either way.
  size_t window_steps = 0;
  // Idle attribution and hotspots read from the trace's file by slices
  // (stream.h; `report --stream`), windows of `window_steps` steps (its
  // default when 0); the report is the same. A trace without step markers, a timeline
  // changed after reading (the ranks of a distributed run) or a file that
  // cannot be indexed is attributed in memory. Several traces are read
  // one at a time (AnalyzePaths).
  bool stream = false;
  // One trace holding more calls and device ops than this is reported
  // from its file by slices (as `stream`, where the report can be made so:
  // its predictions are left out at that size anyway), not read whole:
  // 20 M events are about 1 GB read whole (47 bytes an event,
  // docs/performance.md). Several traces holding more together are read one
  // at a time, twice each, or by slices (AnalyzePaths).
  uint64_t stream_above_events = 20'000'000;
};

// What the report is made from, kept for the writers that draw the
// timeline itself (perfetto, sqlite, html): the analyzed process's timeline,
// its steps, the class of each call, the idle gaps and the hotspot of each
// call.
struct ProcessAnalysis {
  Timeline timeline;
  StepPlan plan;
  std::vector<CallClass> classes;        // indexed like timeline.calls
  std::vector<IdleGap> gaps;             // in time order
  IdleCaused idle_caused;                // rule-1 ns per call
  std::vector<int32_t> hotspot_of_call;  // index into Report::hotspots, -1 none
  // A distributed run (AnalyzePaths): every rank's collective arrivals, the
  // common clock, and this process's entry; empty otherwise.
  std::vector<RankArrivals> rank_arrivals;
  bool one_host = true;
  size_t rank_index = 0;
};

// Analyzes one process. Fails only on an invalid step pattern. With
// `details`, everything but its timeline is filled.
absl::StatusOr<Report> AnalyzeTimeline(const Timeline& t, const AnalysisOptions& options,
                                       ProcessAnalysis* details = nullptr);

// Expands folders into their *.sstrace files (sorted by name); files are kept
// as given. NotFound when a path is missing or a folder holds no trace.
absl::StatusOr<std::vector<std::string>> ExpandTracePaths(const std::vector<std::string>& args);

// The process a report over several shows: the one of rank 0 when there is
// one, else the one with the most device ops (the first of equals).
// `candidates`: (rank or -1, device ops) per process.
size_t PrimaryProcess(const std::vector<std::pair<int32_t, int64_t>>& candidates);

// The report over several processes that are not ranks of one distributed
// run: process `primary`'s report with processes[] and the
// multiple_processes diagnostic.
Report ComposeProcessesReport(Report primary_report, std::vector<ProcessSummary> processes,
                              size_t primary);

// The report of a distributed run from rank `primary`'s report (analyzed
// after ApplyLastArrivals) and every rank's summary: processes[], the
// multiple_processes diagnostic, ranks[], collectives, stragglers, q5. The
// serial, threaded and Dask paths all end here.
Report ComposeRanksReport(Report primary_report, std::vector<RankSummary> ranks, size_t primary);

// The calls' and device ops' span: the earliest enter or start to the
// latest exit or end; `any` false with no record. The same from a file's
// index (ChunkSpan's lo and hi) as from the whole reading's timeline.
struct RecordsSpan {
  bool any = false;
  int64_t start_ns = 0;
  int64_t end_ns = 0;
};
RecordsSpan SpanOfRecords(const TraceIndex& index);
RecordsSpan SpanOfRecords(const Timeline& t);

// A process whose report was made from its file by slices, with what a
// writer that draws its timeline needs to read the file again by slices
// (report --format html): the file, its index, the steps' plan, the
// records' span, and the idle gaps' ns by cause in `idle_columns` equal
// columns of that span (TimeColumns, the gaps added in time order as the
// analysis gives them: none is kept).
struct StreamedProcess {
  size_t idle_columns = 0;  // asked by the caller
  // Asked by the caller (report --format perfetto): besides, every idle
  // gap with its call's key, the calls' marks and what the whole
  // reading's timeline says of its NVTX ranges, and the chunks every slice
  // reads (StreamOptions::keep_gaps, keep_call_marks).
  bool keep_for_export = false;
  // Asked by the caller (whatif; report's Perfetto and SQLite exports):
  // the analyzed rank of a distributed run read by slices too, its NCCL
  // waits applied to each slice and kept in `adjust` for the parts the
  // caller reads; else it is read whole.
  bool rank_by_slices = false;
  StreamedAnalysis analysis;  // (with keep_for_export) what the slices gave
  std::shared_ptr<GapSpill> gaps;  // (with keep_for_export) every idle gap
  bool used = false;        // the report came from slices; else `primary` was filled
  std::string path;
  TraceIndex index;
  StepPlan plan;
  // What the whole reading changes in the timeline after reading, done to
  // each slice and to be done to any part of the file a caller reads (a
  // rank of a distributed run: its NCCL waits, ApplyLastArrivals by call);
  // none for a trace of its own.
  std::function<void(Timeline*)> adjust;
  // With `rank_by_slices`, a distributed run's ranks (as ProcessAnalysis
  // holds them for a whole reading): every rank's arrivals, the analyzed
  // one's index among them and their clock.
  std::vector<RankArrivals> rank_arrivals;
  size_t rank_index = 0;
  bool one_host = true;
  RecordsSpan span;
  TimeColumns idle;
};

// Reads and analyzes every trace (in parallel threads, `jobs` at a time).
// Two or more traces with NCCL collectives are the ranks of one distributed
// run (ranks.h): the report gets ranks[], collectives, stragglers and q5
// over all of them, and its steps, hotspots and questions are those of rank
// 0. Otherwise they are those of the process with the most device ops;
// `processes` summarizes each. With `primary`, that process's timeline and
// analysis are kept there.
// The traces are held whole until the report is composed, unless they hold
// more than stream_above_events calls and device ops together (or with
// `stream`): then each is read twice, once for what choosing the primary
// process and joining the ranks needs (its identity, collective arrivals
// and device ops), once to be analyzed, and let go after (all but the
// primary's). The report is the same. No more traces are read at once
// than hold stream_above_events together (at least one; `jobs` caps it
// too), besides the primary's. A file that changes between the two
// readings is reported as the second finds it, its identity, device ops
// and collectives as the first did; one that can no longer be read fails
// the report. Read so, a trace past stream_above_events itself (every
// trace, with `stream`) is read by slices, never whole unless no report by
// slices can be made of it or it is the primary process and `primary` is
// given (but for a distributed run's rank with `streamed->rank_by_slices`):
// its arrivals at the first look (ranks.h, CollectArrivalsBySlices),
// and its report then too if it launched no NCCL kernel, else at the
// second look with its NCCL waits applied to each slice (a file that
// changes between the looks is reported as far as the first look's index
// reaches).
// `streamed`: for a writer that can draw one trace from its file by slices.
// Where AnalyzePaths would report it by slices (--stream, --stream-above),
// it does so with `streamed` filled (`used`), even with `primary` given;
// `primary` is then left empty. So too for the analyzed rank of a
// distributed run with `streamed->rank_by_slices`, its NCCL waits in
// `streamed->adjust`.
// Why a writer cannot draw the trace of `process` (reported by slices with
// keep_for_export) from its file by slices: OK where it can; Unimplemented
// where the trace must be read whole for it (device ops that no call
// submitted, which are in no slice of calls; external ids that may name
// two calls, which a slice joins as it finds them); Internal where the
// trace was not reported so.
absl::Status ExportFromFileRefusal(const StreamedProcess& process);

absl::StatusOr<Report> AnalyzePaths(const std::vector<std::string>& args,
                                    const AnalysisOptions& options,
                                    ProcessAnalysis* primary = nullptr,
                                    StreamedProcess* streamed = nullptr);

}  // namespace stallscope::analyzer
