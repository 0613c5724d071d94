// What-if replay (docs/analyzer.md "What if"): the trace's dependency graph
// replayed with transformations, giving the timeline the changed program
// would leave. The graph, from the trace:
// - each host thread's outermost calls in order, with the host time between
//   them (split on-CPU / off-CPU from the thread's CPU samples, as the
//   attribution splits host_busy / host_wait);
// - each device op after its submitting call, after the previous op of its
//   stream, and after the op a cross-stream event wait names (the last op
//   submitted on the event's stream before its latest record), with the
//   delay it showed after whichever bound it (the others take the smallest
//   such delay seen in the trace, or none for the event);
// - each synchronizing call after the device work it waited for: its own
//   ops (a read-back), else the op its event's latest record followed (an
//   event synchronize), else the latest-ending op submitted before it on its
//   stream (a stream synchronize whose stream the launches identify) or on
//   the device, returning as long after that op's end as it did in the
//   trace.
// - the thread that waits for the device most often leads; every other
//   thread's calls follow its clock (after their own previous call).
// - an op after a host function on its stream, after the previous op with
//   the delay the trace showed (the function's time: the trace has no
//   record of the function itself);
// It ignores contention between concurrent kernels, the legacy stream's
// implicit waits, dependencies between host threads other than the leader's clock,
// clocks and memory effects.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"

#include "analyzer/analyze/attribution.h"
#include "analyzer/model/timeline.h"

namespace stallscope::analyzer {

// The default device cost per graph node: NVIDIA's "Getting Started with
// CUDA Graphs" (2019) measured 3.4 us per kernel for a graph of 20 kernels
// that each ran 2.9 us on a V100, about 0.5 us per node.
inline constexpr int64_t kDefaultGraphNodeNs = 500;

// A stretch [from_ns, to_ns) of a trace's host time (all of it by default).
struct HostRange {
  int64_t from_ns = std::numeric_limits<int64_t>::min();
  int64_t to_ns = std::numeric_limits<int64_t>::max();
  bool Holds(int64_t ns) const { return ns >= from_ns && ns < to_ns; }
};

// The delays the replay gives the constraints of an op or a synchronizing
// call that did not bind it in the trace: after its submitting call, the
// median delay of the ops that their submission bound; after the previous
// op of its stream, the least delay between two ops of a stream that their
// stream bound (not after a host function); after the work a synchronizing
// call waited for, the median of those calls' returns.
struct TypicalDelays {
  int64_t host_ns = 0;
  int64_t device_min_ns = 0;
  int64_t post_ns = 0;
};

// The delays those are taken from, as counts of each value: gathered part
// by part of a trace (ReplayDelaySamples), the parts' joined are the whole
// trace's, and so are its typical delays (whatif by windows of steps).
// Memory follows the distinct values, not the ops.
class DelaySamples {
 public:
  void AddHost(int64_t ns, int64_t n = 1) { Add(&host_, &host_count_, ns, n); }
  void AddPost(int64_t ns, int64_t n = 1) { Add(&posts_, &post_count_, ns, n); }
  void AddDevice(int64_t ns) {
    device_min_ = std::min(device_min_, ns);
    device_any_ = true;
  }
  void Add(const DelaySamples& other);
  // As the replay of the timeline holding every sample takes them.
  TypicalDelays Typical() const;
  int64_t host_count() const { return host_count_; }
  int64_t post_count() const { return post_count_; }

 private:
  static void Add(absl::flat_hash_map<int64_t, int64_t>* to, int64_t* count, int64_t ns, int64_t n) {
    (*to)[ns] += n;
    *count += n;
  }
  absl::flat_hash_map<int64_t, int64_t> host_, posts_;  // value -> how many
  int64_t host_count_ = 0, post_count_ = 0;
  int64_t device_min_ = std::numeric_limits<int64_t>::max();
  bool device_any_ = false;
};

struct ReplayOptions {
  // Calls whose wait for the device is dropped (indexed like t.calls; empty:
  // none). A removed read-back's copy stays, as an async copy.
  std::vector<bool> remove_wait;
  // Host gaps of at least `launch_dispatch_ns` (host_wait / host_busy in
  // the attribution): their off-CPU part times scale_host_wait, their
  // on-CPU part times scale_host_busy. Shorter gaps are launch dispatch and
  // stay.
  double scale_host_wait = 1.0;
  double scale_host_busy = 1.0;
  int64_t launch_dispatch_ns = 50'000;
  // CUDA-graph capture of the launch-bound stretches (negative: off). A
  // stretch is a run of at least two consecutive calls of one thread that
  // only launch kernels, all on one stream, with no wait (off-CPU time not
  // spent waiting for a CPU) of launch_dispatch_ns or more between them,
  // inside one window, where the
  // host took longer to launch the kernels than the device to run them
  // (unless graph_every_stretch).
  // Replayed as one graph launch: the first call keeps its time, the later
  // calls and the host time between them go (a graph's replay skips the
  // code that launched its kernels), and each kernel after the first starts
  // graph_node_ns after the previous one ended.
  int64_t graph_node_ns = -1;
  // Host-time windows [first, second] (sorted, disjoint) that a stretch
  // must lie in, one window each (the steps' host ranges); empty: anywhere.
  std::vector<std::pair<int64_t, int64_t>> graph_windows;
  // Every such stretch, launch-bound or not (the user captures these steps).
  bool graph_every_stretch = false;
  // Per op (indexed like t.ops; empty: none): how much less than in the
  // trace it waits after whichever constraint bound it (an NCCL kernel no
  // longer waiting for a straggler: StragglerCuts).
  std::vector<int64_t> start_cut;
  // Per op (indexed like t.ops; empty: none): its duration times this (a
  // kernel made faster or slower).
  std::vector<double> op_scale;
  // Host functions (cuLaunchHostFunc, cuStreamAddCallback): an op that
  // follows one on its stream, and that its stream bound, waits its delay
  // beyond the least delay between two ops of a stream times this (the
  // host function's time; the trace has no record of the function itself).
  double scale_host_func = 1.0;
  // The leading thread (0: the one the timeline's units choose, in
  // Replay): a part of a trace replayed alone (whatif --steps) leads with
  // the whole trace's, where that thread has units in the part.
  uint32_t leader = 0;
  // ReplayStats counts only what calls entering in this range changed (an
  // op: its submitting call's; a stretch: its first call's): a part of a
  // trace replayed with one step on either side (whatif by windows of
  // steps) counts its own steps, so the parts' counts add up to the
  // trace's.
  HostRange counted;
  // The typical delays (TypicalDelays) to give the constraints that did not
  // bind: a part of a trace replayed alone (whatif by windows of steps)
  // takes the whole trace's, as the whole replay does. Unset: the
  // timeline's own.
  std::optional<TypicalDelays> typical;
};

struct ReplayStats {
  int64_t waits_removed = 0;  // calls whose wait was dropped
  int64_t gaps_scaled = 0;    // host gaps of at least launch_dispatch_ns
  int64_t gaps_without_cpu = 0;  // of them, without CPU samples (all off-CPU)
  int64_t stretches_captured = 0;  // launch-bound stretches replayed as graphs
  int64_t launches_captured = 0;   // calls of them folded into the graph launch
  int64_t event_waits = 0;         // ops after a cross-stream event wait
  int64_t ops_scaled = 0;          // ops whose duration op_scale changed
  int64_t after_host_func = 0;     // ops after a host function that their stream bound
};

// The timeline of `t` replayed with `options`: every call's, op's, NVTX
// range's and CPU sample's time moved as the graph says (calls re-sorted by
// enter, ops by start). `classes` is ClassifyCalls' answer for `t`.
Timeline Replay(const Timeline& t, const std::vector<CallClass>& classes,
                const ReplayOptions& options, ReplayStats* stats = nullptr);

// The delays that Replay of `t` would take its typical delays from, of the
// ops and synchronizing calls whose call enters in options.counted: a part
// of a trace read with a step on either side gives its own steps' (the
// parts' together, the trace's). Nothing is replayed.
DelaySamples ReplayDelaySamples(const Timeline& t, const std::vector<CallClass>& classes,
                                const ReplayOptions& options);

}  // namespace stallscope::analyzer
