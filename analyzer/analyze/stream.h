// The streamed analysis (docs/analyzer.md, "Memory that follows steps"):
// the steps, their idle attribution and the hotspots read from the file a
// slice at a time, so that what is held follows the number of steps, not
// of events. Passes over the file's index (read/trace_reader.h):
// 1. counts and ranges: each thread's calls and launches and each
//    device's ops (the index's counts), and the NVTX events by slices of
//    the NVTX chunks, paired as a whole reading pairs them (NvtxPairer),
//    the ranges a step can be kept: the analyzed device, the main thread
//    and the marked steps' host ranges, as FindSteps finds them; without
//    markers, the steps from the launch sequence (AutoStepFinder), from
//    slices of the calls and their ops by the call chunks' starts, with,
//    until the period is found, the CPU samples from the latest exit of a
//    sequence call on (they split the host's gap before the next);
// 2. spans: each op takes the step of its call's enter time
//    (StepSpanBuilder) and adds to when work was pending on the device
//    (PendingIntervals, for the call classes). Fused (the default, unless
//    device timing was sampled): from the windows' own slices, each adding
//    the ops of the calls entering since the last one, through the next
//    step's host end, before the window is cut (a step's span follows from
//    its ops and the step before's). Where that cannot give the right
//    answer (a window before the last would sweep past the first op after
//    it, which may lie past the plan's extent, not known yet; a call its
//    part holds was classed while work pending then might be unread; a
//    span, once every op is added, differs from the one a window used),
//    everything is done again the other way: slices of the device ops and
//    the calls that submitted them (SliceChunker::OpsAndTheirCalls), each
//    op counted in the slice its start falls in, a pass before the windows;
// 3. windows: each window of steps (about kWindowEvents calls and ops)
//    reads the slice from the drain before it to the first op after it and
//    its host range, widened until it holds both, and is attributed from
//    the part WindowCutter cuts from that slice's timeline, with the call
//    classes computed there. The same slices give the calls that can be
//    hotspots (HotspotFinder::Take: synchronizing calls and copies between
//    host and device), each call from one slice: a window's slice those
//    entering in its time range not taken before, slices of the calls and
//    their ops (SliceChunker::CallsAndTheirOps) those before the first
//    window (set-up) and after the last. Held in time order until the
//    windows have charged every call its rule-1 idle, they are then given
//    to the HotspotFinder.
// Past StreamOptions::max_hotspot_calls such calls, the windows pass drops
// them and a fourth pass finds the hotspots: slices of the calls and their
// ops by the call chunks' starts, each call entering in one given to the
// HotspotFinder in time order.
// Rows, gaps and rule-1 charges come out as AttributeIdle gives them on the
// whole timeline, the calls named by CallKey instead of an index, and the
// hotspots as FindHotspots gives them.
#pragma once

#include <cstddef>
#include <cstdio>
#include <cstdint>
#include <functional>
#include <limits>
#include <regex>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "analyzer/analyze/attribution.h"
#include "analyzer/analyze/questions.h"
#include "analyzer/model/report.h"
#include "analyzer/analyze/steps.h"
#include "analyzer/model/timeline.h"
#include "analyzer/read/trace_reader.h"

namespace stallscope::analyzer {

// A call named across slices (an index names it within one timeline only).
struct CallKey {
  uint32_t tid = 0;
  uint16_t api = 0;
  int64_t enter_ns = 0;
  int64_t exit_ns = 0;
  static CallKey Of(const ApiCall& c) { return {c.tid, c.api, c.enter_ns, c.exit_ns}; }
  auto Tie() const { return std::tie(tid, api, enter_ns, exit_ns); }
  bool operator==(const CallKey& o) const { return Tie() == o.Tie(); }
  bool operator<(const CallKey& o) const { return Tie() < o.Tie(); }
  template <typename H>
  friend H AbslHashValue(H h, const CallKey& k) {
    return H::combine(std::move(h), k.tid, k.api, k.enter_ns, k.exit_ns);
  }
};

// A window's steps when not given: about this many calls and device ops
// (the trace's mean a step), so that what a window holds follows its
// events, whatever a step holds (1,000 steps of the benchmarks' 201-event
// loop; 20 of a model launching 5,000 kernels a step).
inline constexpr uint64_t kWindowEvents = 200'000;

struct StreamOptions {
  // Steps a window; 0: about kWindowEvents calls and ops a window.
  size_t steps_per_window = 0;
  // Record chunks a slice of the first two passes reads (about).
  size_t chunks_per_slice = 16;
  // Without step markers: the launch sequence's calls its period is found
  // in (AutoStepFinder; kAutoDetectCalls but in tests).
  size_t auto_detect_calls = kAutoDetectCalls;
  // The calls that can be hotspots (synchronizing calls and copies between
  // host and device) the windows pass holds until the end; past it, the
  // hotspots have a pass of their own (80 bytes a call: 80 MB, twice that
  // while the vector grows).
  size_t max_hotspot_calls = 1'000'000;
  // The idle gaps (StreamedAnalysis::gaps, gap_call): one a stretch of
  // idle, so as many as the device ops where the device idles between
  // kernels; a report needs only the steps' rows.
  bool keep_gaps = true;
  // Each idle gap as a window's attribution gives it (in time order, its
  // `call` an index into that window's slice, and that call, null for
  // none), kept or not; and, before they come again from the start (the
  // fused way given up for this trace), on_gaps_again.
  std::function<void(const IdleGap&, const ApiCall* call)> on_gap;
  std::function<void()> on_gaps_again;
  // The steps' spans from the windows' slices (one pass over the record
  // chunks after the index) where the trace allows (device timing not
  // sampled, no external id that may name two calls), instead of a pass of
  // their own first; false in tests, to compare.
  bool fuse_spans = true;
  // Each call classed kSync or counted in a hotspot, by key
  // (StreamedAnalysis::call_marks): what a writer of every call's event
  // needs (the Perfetto export by slices). One mark a synchronizing call.
  bool keep_call_marks = false;
  // Called after each slice read: record chunks read so far, and about how
  // many the passes read in all (each pass about every one once).
  std::function<void(uint64_t done, uint64_t total)> progress;
  // Called on each slice once read, before anything of it is used: what
  // changes a timeline after reading changes each slice the same way (a
  // rank's NCCL waits, ranks.h's ApplyLastArrivals by call).
  std::function<void(Timeline*)> adjust;
};

// A call as the whole reading's analysis classes it and counts it in the
// hotspots (ProcessAnalysis::classes, hotspot_of_call).
struct CallMark {
  CallKey key;
  int32_t hotspot = -1;  // index into StreamedAnalysis::hotspots, -1 none
  bool sync = false;     // classed kSync
};

struct StreamedAnalysis {
  StepPlan plan;
  std::vector<StepStats> steps;
  std::vector<IdleGap> gaps;                         // `call` left -1; none without keep_gaps
  std::vector<std::pair<size_t, CallKey>> gap_call;  // (index into gaps, its call)
  std::vector<std::pair<CallKey, int64_t>> idle_caused;  // rule-1 ns per call, by key
  // The forced-sync hotspots (hotspots.h), as FindHotspots gives them on
  // the whole timeline; and the modules rebuilt since the trace was
  // recorded (Symbolizer::ChangedModules).
  std::vector<Hotspot> hotspots;
  std::vector<std::string> changed_modules;
  // With StreamOptions::keep_call_marks, sorted by key: every call classed
  // kSync or counted in a hotspot.
  std::vector<CallMark> call_marks;
  // Of every NVTX range paired (Timeline::ranges of a whole reading): the
  // earliest start (INT64_MAX: none), and the threads, sorted.
  int64_t first_range_ns = std::numeric_limits<int64_t>::max();
  std::vector<uint32_t> range_tids;
  // What the rest of a report needs (analysis.h, ReportFromFile): the
  // questions' inputs; the ops no call submitted, on every device, and the
  // NVTX ranges left open or closed twice, as a whole reading counts them;
  // and the chunks every slice reads (the host, clocks, rank, modules, API
  // names), with the NVTX ranges a step can be.
  QuestionInputs questions;
  uint64_t unjoined_ops = 0;
  uint64_t unmatched_nvtx = 0;
  Timeline first_slice;
  // What the reading cost: slices read in each pass, record chunks decoded
  // and kept from the slice before, and the most calls and ops one slice
  // held.
  size_t steps_per_window = 0;  // as chosen
  // The calls that can be hotspots the windows pass took; 0 with a pass of
  // the hotspots' own (past StreamOptions::max_hotspot_calls).
  size_t hotspot_calls = 0;
  bool hotspots_pass = false;
  // Whether the steps' spans came from the windows' slices; and whether
  // that was tried and given up for this trace (then done again with a
  // pass of their own: a window's sweep would have needed the plan's
  // extent, a call's class work pending past the calls read, or a span an
  // op added later).
  bool spans_fused = false;
  bool spans_fused_failed = false;
  // The passes: counts and NVTX ranges, the steps' spans, windows (with
  // the slices before the first window and after the last), the hotspots
  // (their own pass, or only the finder's work), and (without markers) the
  // steps from the launch sequence.
  size_t slices[5] = {0, 0, 0, 0, 0};
  double seconds[5] = {0, 0, 0, 0, 0};  // each pass's (wall clock)
  uint64_t chunks_decoded = 0;
  uint64_t chunks_kept = 0;
  size_t max_slice_calls = 0;
  size_t max_slice_ops = 0;
};

// Whether two call chunks' external ids overlap, so that one id may name
// two calls (recorders before 2026-12-06 gave a thread's calls before it
// registered ids of thread index 0, which another such thread gave too;
// docs/trace-format.md "Joining host and device"). A whole reading
// joins such an id's ops to the call read last; a slice, to the last one it
// holds: the steps' spans then take their own pass, which joins an op as
// the whole reading does, not the windows' slices (StreamOptions::
// fuse_spans).
bool ExternalIdsMayRepeat(const TraceIndex& index);

// The steps, attribution and hotspots of a trace with steps, marked or
// found from the launch sequence, read by `reader` over `index`.
// Unimplemented when it has neither (the whole run is then one step, which
// the in-memory analysis attributes); a chunk that does not verify is an
// error.
absl::StatusOr<StreamedAnalysis> AnalyzeStreamed(SliceReader* reader, const TraceIndex& index,
                                                 const std::regex& pattern,
                                                 const AttributionOptions& options,
                                                 const StreamOptions& stream = {});

// Every device op of the file once, by slices tiling the device chunks by
// their starts (`chunks_per_slice` chunks apart): fn(t, from, to) in rising
// `from`, the ops of `t` starting in [from, to) being that slice's (ops and
// strings only: no calls). A writer that draws the whole run's device
// timeline reads it this way.
absl::Status ForEachOpSlice(SliceReader* reader, const TraceIndex& index, size_t chunks_per_slice,
                            const std::function<absl::Status(const Timeline&, int64_t, int64_t)>& fn);

// The idle gaps of a trace analyzed by slices, for a writer that draws
// each one after the analysis (the Perfetto export by slices): in a
// temporary file (created in $TMPDIR, else /tmp, and unlinked at once), 64
// bytes a gap, not in memory (a launch-bound run idles between every two
// kernels).
class GapSpill {
 public:
  struct Gap {
    IdleGap gap;    // its `call` unused
    CallKey call;   // with has_call
    bool has_call = false;
  };
  GapSpill() = default;
  GapSpill(const GapSpill&) = delete;
  GapSpill& operator=(const GapSpill&) = delete;
  ~GapSpill();
  absl::Status Open();
  // In time order; `call` the gap's call, null for none.
  void Add(const IdleGap& gap, const ApiCall* call);
  // Forgets every gap (they come again from the start).
  void Clear();
  uint64_t size() const { return count_; }
  // Each gap in the order added; the first error writing or reading.
  absl::Status ForEach(const std::function<void(const Gap&)>& fn);
  // The same, one at a time: Rewind(), then Next() until it gives null
  // (the end, or an error: status() says which). Adding a gap ends it.
  absl::Status Rewind();
  const Gap* Next();
  const absl::Status& status() const { return read_status_; }

 private:
  void Write();
  std::FILE* file_ = nullptr;
  std::vector<Gap> buffer_;
  uint64_t count_ = 0;
  int error_ = 0;  // errno of the first failed write
  // Reading: the block read, the next gap in it, the gaps left to read.
  std::vector<Gap> block_;
  size_t next_ = 0;
  uint64_t left_ = 0;
  absl::Status read_status_;
};

// The calls (sorted by enter time, as a timeline's) entering in [from, to):
// their indices [first, second).
std::pair<size_t, size_t> EnteringIn(const std::vector<ApiCall>& calls, int64_t from, int64_t to);

// Whether the op's call is one of the calls [i0, i1) of its timeline (a
// slice's own ops: ForEachCallSlice).
inline bool SubmittedBy(const DeviceOp& op, size_t i0, size_t i1) {
  return op.call >= 0 && static_cast<size_t>(op.call) >= i0 && static_cast<size_t>(op.call) < i1;
}

// What the analysis says of a call: synchronizing (classed kSync), its
// rule-1 idle, its hotspot.
struct CallMarkView {
  bool sync = false;
  int64_t idle = 0;
  int32_t hotspot = -1;  // index into Report::hotspots
};

// Each call's mark, by key, from an analysis by slices (its call_marks and
// idle_caused): for a writer of every call that reads the file again by
// slices. Held: one entry a synchronizing call, hotspot call or call
// charged idle.
class CallMarks {
 public:
  explicit CallMarks(const StreamedAnalysis& s);
  CallMarkView Of(const CallKey& key) const {
    auto it = marks_.find(key);
    return it == marks_.end() ? CallMarkView{} : it->second;
  }

 private:
  absl::flat_hash_map<CallKey, CallMarkView> marks_;
};

// Every call of the file once, by slices tiling the call chunks by their
// enter times (`chunks_per_slice` chunks apart): fn(t, from, to) in rising
// `from`, the calls of `t` entering in [from, to) being that slice's, with
// their ops (each op its call) and the NCCL arguments of that time (the
// first slice's `from` and the last's `to` the farthest times, so that
// every NCCL argument is some slice's).
// `progress` (optional): slices read and how many in all, first with none.
// `adjust` (optional): done to each slice before fn sees it, what the whole
// reading changes after reading (StreamedProcess::adjust: a distributed
// run's rank, its NCCL waits).
absl::Status ForEachCallSlice(SliceReader* reader, const TraceIndex& index, size_t chunks_per_slice,
                              const std::function<absl::Status(const Timeline&, int64_t, int64_t)>& fn,
                              const std::function<void(uint64_t, uint64_t)>& progress = nullptr,
                              const std::function<void(Timeline*)>& adjust = nullptr);

}  // namespace stallscope::analyzer
