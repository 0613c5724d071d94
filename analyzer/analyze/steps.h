// Step finding: NVTX ranges matching the step pattern on the launching
// thread, else explicit step markers, else steps detected from the repeating
// launch sequence ("auto"), else the whole run as one step; then the
// device-timeline span of each step (design.md "A step lives on the device
// timeline").
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <regex>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "analyzer/model/timeline.h"

namespace stallscope::analyzer {

inline constexpr const char* kDefaultStepPattern = "(?i)step|iter|ProfilerStep";

// Compiles a step pattern; a leading "(?i)" makes it case-insensitive.
absl::StatusOr<std::regex> CompileStepPattern(const std::string& pattern);

struct StepSpan {
  int64_t start_ns = 0;  // device timeline: tiles [first.start, last.end)
  int64_t end_ns = 0;
  int64_t host_start_ns = 0;
  int64_t host_end_ns = 0;
  uint32_t name = 0;  // a marked step's range name (Timeline string id); 0 none
};

struct AutoTail {
  int64_t calls = 0;
  int64_t period = 0;
  int64_t calls_after = 0;
  int64_t rule_calls = 0;
};

struct StepPlan {
  std::string source = "none";  // marker | auto | none
  uint32_t main_tid = 0;        // the thread with the most launches
  uint32_t device = 0;          // the device analyzed
  std::vector<StepSpan> steps;
  int64_t ops_outside = 0;  // device ops submitted outside every step
  // Marked steps only: the last marked range submitted no device work and
  // was dropped (the range a profiler opens at the loop's last step()).
  bool dropped_empty_last = false;
  // Device timing in sampled windows (KeepTimedSteps): the recorder's
  // period (0 when timing was continuous), and each kept step's index among
  // all the steps found (`steps[i]` is step `numbers[i]`; empty when
  // continuous). `steps_found`: the steps before any were left out.
  uint32_t sampled_every = 0;
  std::vector<int32_t> numbers;
  size_t steps_found = 0;
  // Steps from the launch sequence (source "auto"): the sequence's calls,
  // the calls of one step (the rule's period), those after the last step's
  // period of calls (no step begins there: another loop, or teardown), and
  // the calls the rule was found in when the sequence was longer (0: the
  // whole sequence).
  AutoTail auto_tail;
};

// Each device with its number of ops (NCCL kernels counted `nccl_weight`
// times), in order of first appearance (Timeline::ops_per_device).
std::vector<std::pair<uint32_t, int64_t>> OpsPerDevice(const Timeline& t, int64_t nccl_weight);
// The device with the most ops (0 when none); `devices`, when given, gets
// the number of devices with ops.
uint32_t BusiestDevice(const Timeline& t, size_t* devices = nullptr);
// The thread with the most launches (most calls when none launched), from
// Timeline::calls_per_thread.
uint32_t MainThread(const Timeline& t);

// Automatic step detection (docs/analyzer.md "Steps without markers").
// An anchor's segments must cover at least this share of the launch sequence.
inline constexpr double kAutoMinScore = 0.5;
// A period is at least this many calls (one kernel launched over and over is
// not a step structure).
inline constexpr uint32_t kAutoMinPeriod = 2;
// At least this many regular segments (full steps) between anchors.
inline constexpr int kAutoMinSteps = 2;
// Anchors of the same period whose score is within this of the best are
// candidates for the step's phase (irregular steps, e.g. warm-up, lower the
// score of some phases more than others).
inline constexpr double kAutoPhaseScoreSlack = 0.25;
// The phase follows the longest host gap only when that gap's median is at
// least this long and twice the next candidate's.
inline constexpr int64_t kAutoMinPhaseGapNs = 50'000;

// The period and phase are found in the sequence's first this many calls
// (thousands of steps of a training loop); the calls after them are cut by
// the same rule, so finding steps holds memory for these calls only, however
// long the run.
inline constexpr size_t kAutoDetectCalls = size_t{1} << 20;

// Host ranges of steps found from the period of the (API, kernel) sequence
// of `main_tid`'s launches, copies, sets, syncs and NCCL calls (of every
// thread's, when they launch in a fixed order); empty when no period is
// found. Host ranges: [enter of the step's first call, enter of the next
// step's first call); the last step ends with the exit of its last call at
// most one period after its start.
std::vector<StepSpan> AutoSteps(const Timeline& t, uint32_t main_tid, AutoTail* tail = nullptr);
// Whether a thread other than `main_tid` launched (AutoSteps then also
// tries the calls of every thread).
bool SeveralLaunch(const std::vector<ThreadCallCount>& calls_per_thread, uint32_t main_tid);

// AutoSteps fed a slice at a time (stream.h): Add the calls entering in
// each slice, in enter order, from a timeline holding their ops and, while
// needs_gaps(), the CPU samples that split the host's gap before each: the
// last at or before busy_until() and the slice's own; then Finish.
class AutoStepFinder {
 public:
  // The period and phase from the first `detect_calls` calls of each
  // sequence (kAutoDetectCalls but in tests).
  AutoStepFinder(uint32_t main_tid, bool several, size_t detect_calls = kAutoDetectCalls);
  ~AutoStepFinder();
  AutoStepFinder(const AutoStepFinder&) = delete;
  AutoStepFinder& operator=(const AutoStepFinder&) = delete;

  // The calls t.calls[i0, i1).
  void Add(const Timeline& t, size_t i0, size_t i1);
  bool needs_gaps() const;
  // After Finish: the chosen sequence's calls after its last step.
  const AutoTail& tail() const { return tail_; }
  // The main thread's first calls were searched and have no period:
  // Finish will find no steps, whatever calls come.
  bool found_none() const;
  // The latest exit of a sequence call so far (INT64_MIN before the first).
  int64_t busy_until() const { return busy_until_; }
  std::vector<StepSpan> Finish();

 private:
  class Sequence;
  uint32_t main_tid_;
  int64_t busy_until_ = std::numeric_limits<int64_t>::min();
  std::unique_ptr<Sequence> main_, all_;
  AutoTail tail_;
  std::vector<uint32_t> op_name_;  // of the calls being added
  std::vector<uint16_t> op_kind_;
};

StepPlan FindSteps(const Timeline& t, const std::regex& pattern, uint32_t device);

// FindSteps in parts, for a reader that sees the trace a slice at a time
// (stream.h):
// - the marked steps' host ranges: NVTX ranges matching `pattern` on
//   `main_tid` (else on the thread with the most), else explicit step
//   markers; empty when there are none. A range's name matches when its
//   first 1,024 bytes do (IsStepName; an empty name never does), so a
//   reader may keep only those ranges and the explicit steps;
std::vector<StepSpan> MarkedSteps(const Timeline& t, const std::regex& pattern, uint32_t main_tid);
bool IsStepName(const Timeline& t, uint32_t name, const std::regex& pattern);
//   (StepNames answers IsStepName once a name: a loop's step ranges mostly
//   share a few names, and a regex search costs thousands of instructions);
class StepNames {
 public:
  StepNames(const Timeline& t, const std::regex& pattern) : t_(t), pattern_(pattern) {}
  bool operator()(uint32_t name) {
    auto [it, fresh] = known_.try_emplace(name, false);
    if (fresh) it->second = IsStepName(t_, name, pattern_);
    return it->second;
  }

 private:
  const Timeline& t_;
  const std::regex& pattern_;
  absl::flat_hash_map<uint32_t, bool> known_;  // by the timeline's string id
};
// - whether a call entering in [from_ns, to_ns) submitted device work
//   (launch, copy, set, NCCL);
bool SubmittedIn(const Timeline& t, int64_t from_ns, int64_t to_ns);
// - the steps' device spans: each op of the analyzed device with a call
//   takes the step whose host range holds its call's enter time, in any
//   order (ops mostly in start order, for speed); Finish tiles the device
//   timeline with the steps' spans.
class StepSpanBuilder {
 public:
  explicit StepSpanBuilder(std::vector<StepSpan> steps);
  void AddOp(int64_t call_enter_ns, int64_t start_ns, int64_t end_ns);
  const std::vector<StepSpan>& steps() const { return steps_; }
  // The latest end of an op a step took so far: no step's span, once
  // final, ends before it (each ends at or after the step before).
  int64_t latest_op_end() const { return latest_op_end_; }
  // The last range is a profiler's closing one (ProfilerStep#, more than
  // one step) and no op took it; it is dropped when, besides, no call in
  // it submitted work (SubmittedIn). `names`: the range names' strings.
  bool LastSubmittedNothing(const Timeline& names) const;
  // Sets plan->steps (without the last when `drop_last`: then
  // dropped_empty_last), and ops_outside.
  void Finish(bool drop_last, StepPlan* plan);
  // The spans of steps [0, k] as Finish sets them, into (*out)[0..k]: final
  // once every op of a call entering before step k's host end was added (a
  // step's span follows from its own ops and the step before's). Called
  // with rising k.
  void SpanThrough(size_t k, std::vector<StepSpan>* out);

 private:
  std::vector<StepSpan> steps_;
  std::vector<int64_t> op_start_;
  std::vector<int64_t> op_count_;
  std::vector<int64_t> op_end_;
  int64_t submitted_ = 0;
  int64_t assigned_ = 0;
  size_t hint_ = 0;
  size_t spanned_ = 0;  // the steps SpanThrough set
  int64_t latest_op_end_ = std::numeric_limits<int64_t>::min();
  // Step k's span from its ops and step k - 1's (Finish, SpanThrough).
  void Span(size_t k);
};

// Device timing in sampled windows (Timeline::device_timing; docs/analyzer.md
// "Sampled device timing"): keeps the steps whose device work was all timed,
// as was the device work of the step before (its end is where the kept
// step's device time begins). A kept step's span is the one continuous
// timing would give, since FindSteps placed every step first. Does nothing
// when timing was continuous.
void KeepTimedSteps(const Timeline& t, StepPlan* plan);

// The intervals [from, to) during which sampled device timing was on, in
// order (open ends: the int64 limits); empty when timing was continuous.
std::vector<std::pair<int64_t, int64_t>> DeviceTimingOn(const Timeline& t);

}  // namespace stallscope::analyzer
