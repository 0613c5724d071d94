// Idle attribution by windows of steps (docs/analyzer.md "Windows of
// steps"): the steps are attributed a few at a time, each window from the
// part of the timeline it reads, and the windows' rows, gaps and rule-1
// charges are joined into the whole timeline's. This is the analysis half
// of the analyzer whose memory follows steps: a window's part is what a
// reader streaming the file must hold at once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "analyzer/analyze/attribution.h"
#include "analyzer/analyze/steps.h"
#include "analyzer/model/timeline.h"

namespace stallscope::analyzer {

// The part of a timeline that attributing some steps reads, as a timeline
// of its own (calls and ops in their original order), with each call's and
// op's index in the original.
struct WindowPart {
  Timeline timeline;
  std::vector<int32_t> call;  // timeline.calls[i] is original call call[i]
  std::vector<CallClass> classes;  // indexed like timeline.calls
  // The device timeline to sweep (AttributeIdleWithin): from the drain
  // before the window's first step (the latest op end at or before its
  // start) to the first op starting at or after its last step's end, within
  // the plan's extent.
  int64_t sweep_from = 0;
  int64_t sweep_to = 0;
};

// Cuts timelines into the parts that attributing windows of a plan's steps
// read. Windows must come in order ([k0, k1) with k0 at or after the
// previous window's k1). With w0..w1 the window's device span, E the
// latest end of an op at or before w0 and F the first start at or after
// w1, the sweep runs over [E, F] (within the plan's extent): an idle
// interval crossing w0 or w1 is then seen whole. A window's part holds:
// - the analyzed device's ops ending at or after E and starting by the
//   sweep's end;
// - the calls of its bands, each the calls exiting at or after its start
//   and entering before its end: the window's host range (its launches
//   and synchronizing calls are counted by it) and its device span w0..w1
//   (the host activity its idle is charged by), one band when they meet;
//   what the sweep reads outside w0..w1 is not charged;
// - on each thread, its last outermost call ending before a band and its
//   first call entering at or after it (the host gaps reaching into it),
//   its outermost calls on either side of E (rule 1 at the drain), and the
//   calls that submitted the ops;
// - each thread's CPU samples that bound those calls' gaps;
// - the API table and the per-thread call counts.
class WindowCutter {
 public:
  WindowCutter(const Timeline& t, const StepPlan& plan, const std::vector<CallClass>& classes);
  WindowPart Cut(size_t k0, size_t k1);
  // The same into `part`, reusing its vectors.
  void Cut(size_t k0, size_t k1, WindowPart* part);

 private:
  struct ThreadCalls {
    std::vector<int32_t> calls;  // in enter order
    std::vector<int32_t> outer;  // the outermost ones; their exits rise
  };
  const Timeline& t_;
  const StepPlan& plan_;
  const std::vector<CallClass>& classes_;
  std::vector<uint32_t> tids_;  // the threads, in order of first call
  std::vector<ThreadCalls> threads_;
  absl::flat_hash_map<uint32_t, size_t> slot_;  // tid → index into threads_
  std::vector<uint32_t> slot_of_call_;  // each call's thread's index into threads_
  std::vector<int32_t> fresh_;
  std::vector<int32_t> more_;
  std::vector<int32_t> bounds_;
  // Per thread, in a window: (its index in calls_per_thread, -1 none;
  // (earliest exit, latest time) of its calls there).
  std::vector<std::pair<int64_t, std::pair<int64_t, int64_t>>> span_;
  // The sweep over ops (by start): what earlier windows passed and a later
  // one may still need.
  size_t next_op_ = 0;
  size_t f_scan_ = 0;   // where the last window's search for F stopped
  size_t last_k1_ = 0;  // the last window's end
  std::vector<int32_t> op_carry_;
  int64_t last_end_ = std::numeric_limits<int64_t>::min();  // E
  std::vector<int32_t> band_;  // a window's calls in its bands
  std::vector<int32_t> runs_;
  std::vector<int32_t> open_;
};

// Attributes the steps [k0, k1) of `plan` from `part`, cut for them: rows
// and gaps numbered by the plan's steps, and the gaps' calls and the rule-1
// charges by their index in the timeline the part was cut from.
Attribution AttributeWindow(const WindowPart& part, const StepPlan& plan, size_t k0, size_t k1,
                            const AttributionOptions& options);

// AttributeIdle over windows of `steps_per_window` steps (at least 1): the
// same steps, gaps (step and call indices the whole timeline's) and rule-1
// charges.
Attribution AttributeIdleByWindows(const Timeline& t, const StepPlan& plan,
                                   const std::vector<CallClass>& classes,
                                   const AttributionOptions& options, size_t steps_per_window);

}  // namespace stallscope::analyzer
