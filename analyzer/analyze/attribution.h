// Idle-gap attribution (design.md "Idle-gap attribution"): cuts the analyzed
// device's timeline inside the steps into busy stretches (split compute /
// copy / comm) and idle intervals, and charges every idle nanosecond to one
// cause: rule 1 (the counterfactual: the submitting thread was blocked in a
// synchronizing call when the device drained), then rule 2 (what that thread
// was doing). See docs/analyzer.md for the rules as implemented.
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "analyzer/model/report.h"
#include "analyzer/analyze/steps.h"
#include "analyzer/model/timeline.h"

namespace stallscope::analyzer {

// Which frames are user code, for a hotspot's site (hotspots.h): fnmatch
// globs over a Python frame's file, or a native frame's source file or module
// path. A frame matching `user_code` is user code; else one matching
// `not_user_code` is not; else the default rule decides.
struct SiteRule {
  std::vector<std::string> user_code;
  std::vector<std::string> not_user_code;
};

struct AttributionOptions {
  // Host gaps between CUDA calls shorter than this are launch dispatch
  // (launch_overhead); longer ones are host_wait / host_busy.
  int64_t launch_dispatch_ns = 50'000;
  // After the submitting call returns, this long is launch latency
  // (launch_overhead); beyond it a late op is device_wait.
  int64_t launch_latency_ns = 20'000;
  // A copy/set/other call longer than this that entered while the device was
  // busy observably blocked: it counts as synchronizing.
  int64_t observed_block_ns = 50'000;
  // Synchronizing calls shorter than this that caused no idle are not
  // hotspots.
  int64_t hotspot_min_blocked_ns = 5'000;
  // A hotspot's site: the innermost frame of user code.
  SiteRule site;
  // Each stretch of idle listed (Attribution::gaps); without, only the
  // steps' sums and the idle each call caused: what a report by slices
  // that keeps no gap needs (about a tenth of its time on a launch-bound
  // trace, whose idle comes in many short gaps).
  bool list_gaps = true;
};

enum class CallClass : uint8_t {
  kNonBlocking,  // launch, async copy, query, event record ...
  kSync,         // explicit or implicit synchronization
  kNccl,
};

// When device work was pending on a device: the union of the open
// intervals (enter of an op's submitting call, end of the op), added in
// any order. A call entering at x found work pending iff x lies inside
// one. ClassifyCalls builds it from a timeline's ops; a reader that sees a
// trace a slice at a time (stream.h) builds it from every slice, since an
// op queued long after its launch may lie beyond the slice of a call it
// kept waiting.
// Memory: an interval starting at or after the latest one's start (ops
// mostly come in time order) extends it or closes it and opens the next;
// closed ones are packed as two varints each (the gap since the one
// before, the length: 4–6 bytes, where a loop whose kernels end before
// the next launch leaves one per kernel), 128 to a block, a block found by
// its first start. An interval
// starting before the latest one's start goes to a map of its own (one
// entry per stretch of such intervals): the union is the same.
class PendingIntervals {
 public:
  void Add(int64_t enter_ns, int64_t end_ns);
  bool At(int64_t x) const;
  // The ops of every call entering before `ns` have been added (by default
  // every op; the notes cleared): At a time at or after it that answers no
  // might have answered yes with the ops still to come, and the time is
  // noted (Unsure, rising when asked in rising order), so that a caller
  // adding ops as it goes can tell which answers to distrust.
  void KnownUntil(int64_t ns) {
    known_until_ = ns;
    unsure_.clear();
  }
  const std::vector<int64_t>& Unsure() const { return unsure_; }
  // Intervals held: packed, the open one, and in the map.
  size_t size() const { return packed_ + (open_end_ > open_start_ ? 1 : 0) + late_.size(); }
  size_t bytes() const { return bytes_.capacity() + blocks_.capacity() * sizeof(Block); }

 private:
  struct Block {
    int64_t first_start = 0;  // of its first interval
    size_t offset = 0;        // into bytes_
    uint32_t count = 0;
  };
  static constexpr uint32_t kPerBlock = 128;
  void Close();  // packs the open interval
  bool Holds(int64_t x) const;  // At, without the notes
  std::vector<uint8_t> bytes_;
  std::vector<Block> blocks_;
  size_t packed_ = 0;
  int64_t last_end_ = 0;  // the latest packed interval's end
  int64_t open_start_ = 0, open_end_ = 0;  // [start, end); empty when equal
  std::map<int64_t, int64_t> late_;  // start → end, disjoint
  int64_t known_until_ = std::numeric_limits<int64_t>::max();
  mutable std::vector<int64_t> unsure_;
};

// Classifies each call of `t` (indexed like t.calls). See docs/analyzer.md
// "Synchronizing calls". Work pending at a call's entry is found among
// t's ops, or in `pending` when given.
std::vector<CallClass> ClassifyCalls(const Timeline& t, uint32_t device,
                                     const AttributionOptions& options,
                                     const PendingIntervals* pending = nullptr);

// One stretch of an idle interval charged to one cause, inside one step.
// Consecutive pieces with the same cause, step and call are merged.
struct IdleGap {
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  Cause cause = Cause::kOther;
  int32_t step = 0;   // index into Attribution::steps
  int32_t call = -1;  // the call the cause points at: the synchronizing call
                      // of rule 1, the thread's call during the piece, or
                      // (launch latency, device waits) the call that
                      // submitted the op ending the gap; -1 for host time
                      // outside calls

};

// Rule-1 ns per call (design.md rule 1), kept only for the few calls that
// caused idle: 0 for every other call.
class IdleCaused {
 public:
  int64_t Get(size_t call) const {
    auto it = ns_.find(call);
    return it == ns_.end() ? 0 : it->second;
  }
  void Add(size_t call, int64_t ns) { ns_[call] += ns; }
  // fn(call, ns) for each call that caused idle, in no set order.
  template <typename Fn>
  void ForEach(Fn fn) const {
    for (const auto& [call, ns] : ns_) fn(call, ns);
  }

 private:
  absl::flat_hash_map<size_t, int64_t> ns_;
};

struct Attribution {
  std::vector<StepStats> steps;       // busy, idle, causes, counts per step
  IdleCaused idle_caused;             // rule-1 ns per call (by index into t.calls)
  std::vector<IdleGap> gaps;          // in time order; they sum to the steps' idle
};

Attribution AttributeIdle(const Timeline& t, const StepPlan& plan,
                          const std::vector<CallClass>& classes,
                          const AttributionOptions& options);

// The same, sweeping the device timeline over [sweep_from, sweep_to],
// widened to hold the plan's steps, and charging only what falls inside the
// steps: with the sweep reaching the drain before the first step and the op
// after the last, an idle interval that crosses them is charged as the
// sweep over every step would (windows.h).
Attribution AttributeIdleWithin(const Timeline& t, const StepPlan& plan,
                                const std::vector<CallClass>& classes,
                                const AttributionOptions& options, int64_t sweep_from,
                                int64_t sweep_to);

}  // namespace stallscope::analyzer
