// The analysis result that every report writer renders: steps, idle by cause,
// hotspots, totals, the six questions and diagnostics (design.md's
// `stallscope.report/1`).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "analyzer/model/diagnostics.h"

namespace stallscope::analyzer {

// A source location: a symbolized native frame or a Python frame.
struct Frame {
  std::string function;
  std::string file;
  int line = 0;
  std::string module;  // basename of the object; "python" for Python frames
};

// Idle causes, in design.md's order; names are a contract.
enum class Cause : int {
  kSync,
  kHostWait,
  kHostBusy,
  kHostPreempted,  // runnable but waiting for a CPU (an extension of design.md)
  kLaunchOverhead,
  kComm,
  kDeviceWait,
  kOther,
};
inline constexpr int kNumCauses = 8;
const char* CauseName(Cause c);
inline Cause CauseAt(int i) { return static_cast<Cause>(i); }

using CauseNs = std::array<int64_t, kNumCauses>;

// The index of the largest cause (the first of equals).
inline int TopCause(const CauseNs& c) {
  int best = 0;
  for (int i = 1; i < kNumCauses; ++i) {
    if (c[i] > c[best]) best = i;
  }
  return best;
}

// part ÷ whole in percent; 0 when whole is 0.
inline double Pct(int64_t part, int64_t whole) {
  return whole > 0 ? 100.0 * static_cast<double>(part) / static_cast<double>(whole) : 0.0;
}

struct BusyByKind {
  int64_t compute = 0;  // non-NCCL kernels
  int64_t copy = 0;     // memcpy / memset
  int64_t comm = 0;     // NCCL kernels
};

struct StepStats {
  int index = 0;
  uint32_t device = 0;
  int64_t start_ns = 0;  // device timeline
  int64_t end_ns = 0;
  int64_t host_start_ns = 0;
  int64_t host_end_ns = 0;
  int64_t gpu_busy_ns = 0;
  int64_t gpu_idle_ns = 0;
  CauseNs idle_by_cause{};
  BusyByKind busy_by_kind;
  int64_t sync_count = 0;
  int64_t launches = 0;
};

struct Hotspot {
  std::string api;
  bool explicit_sync = false;  // kind: explicit | implicit
  Frame site;
  std::vector<Frame> stack;  // innermost first (outermost last)
  int64_t count = 0;
  int64_t steps = 0;  // steps (host ranges) in which it was called at least once
  int64_t blocked_ns = 0;
  int64_t idle_caused_ns = 0;
  // Of `count`, calls whose Python site could not be read (the recorder's
  // python_sites_lost): their site is the native one.
  int64_t sites_lost = 0;
  // Stable across runs of the same code: hex FNV-1a of api, kind and the
  // site's file:line:function (never addresses).
  std::string fingerprint;
  std::string suggestion;  // one line: how to remove this synchronization
  // The mean step time removing this hotspot alone saves, predicted by the
  // what-if replay (analyze/predict.h); -1: not predicted.
  int64_t predicted_saving_ns = -1;
};

// Step times predicted by the what-if replay for the fixes every report
// offers (analyze/predict.h): all hotspots removed, the launch-bound
// stretches captured in CUDA graphs. Means are over the report's steps.
struct Predictions {
  bool made = false;
  std::string skipped;  // why none were made (a trace too large), or empty
  int64_t baseline_mean_step_ns = 0;
  int hotspots_removed = 0;
  int64_t all_removed_mean_step_ns = -1;  // -1: no hotspot
  std::vector<int64_t> all_removed_step_ns;
  int64_t graph_node_ns = 0;
  int64_t graph_stretches = 0;  // 0: no launch-bound stretch
  int64_t graph_launches_folded = 0;
  int64_t graph_mean_step_ns = -1;
  std::vector<int64_t> graph_step_ns;
};

// The explicit or the implicit hotspots summed: every report's split of the
// forced synchronizations by kind (JSON hotspot_kinds, the text report).
struct HotspotKindTotals {
  int64_t sites = 0;
  int64_t count = 0;
  int64_t blocked_ns = 0;
  int64_t idle_caused_ns = 0;
};
inline HotspotKindTotals SumHotspotKind(const std::vector<Hotspot>& hotspots, bool explicit_sync) {
  HotspotKindTotals t;
  for (const Hotspot& h : hotspots) {
    if (h.explicit_sync != explicit_sync) continue;
    ++t.sites;
    t.count += h.count;
    t.blocked_ns += h.blocked_ns;
    t.idle_caused_ns += h.idle_caused_ns;
  }
  return t;
}

struct Totals {
  int64_t wall_ns = 0;
  int64_t gpu_busy_ns = 0;
  int64_t gpu_idle_ns = 0;
  CauseNs idle_by_cause{};
  BusyByKind busy_by_kind;
  int64_t launches = 0;
  int64_t syncs = 0;
};

struct Question {
  std::string id;
  std::string answer;  // yes | no | unknown
  std::string evidence;
};

// One traced process (one file) of a report over a folder.
struct ProcessSummary {
  std::string file;  // basename
  uint32_t pid = 0;
  std::string host;
  int steps = 0;
  int64_t device_ops = 0;
  int64_t api_calls = 0;  // the trace's API call records, of every kind
  Totals totals;
  bool analyzed = false;  // the process whose steps the report shows
};

// One rank of a distributed run (design.md `ranks[]`).
struct RankRow {
  int32_t rank = -1;
  std::string host;
  uint32_t pid = 0;
  std::string file;
  int steps = 0;
  int64_t start_ns = 0;  // its first step's start, last step's end (its own clock)
  int64_t end_ns = 0;
  int64_t wall_ns = 0;
  int64_t gpu_busy_ns = 0;
  int64_t gpu_idle_ns = 0;
  int64_t comm_ns = 0;  // NCCL kernel time inside the steps, waits included
  CauseNs idle_by_cause{};
  int64_t waited_ns = 0;   // waiting at collectives for the last rank (in steps)
  int64_t times_last = 0;  // late arrivals (beyond kStragglerMinLateNs)
  int64_t wait_caused_ns = 0;
  bool analyzed = false;
};

// One step of a distributed run, over every rank's step of that index.
struct StepCollectives {
  int index = 0;
  double comm_share = 0;   // NCCL kernel time ÷ step time (summed over ranks)
  double overlap = 0;      // compute during communication ÷ communication
  double wait_share = 0;   // waiting for the last rank ÷ step time
  int64_t wait_mean_ns = 0;  // per rank
  int64_t wait_max_ns = 0;
};

struct CollectivesSummary {
  int64_t count = 0;        // instances reached by every rank
  double comm_share = 0;    // communication time ÷ step time (mean over ranks)
  double overlap = 0;       // compute during communication ÷ communication
  int64_t skew_p50_ns = 0;  // last − first arrival per instance
  int64_t skew_p95_ns = 0;
  int64_t skew_max_ns = 0;
  double wait_share = 0;    // time waiting for the last rank ÷ step time (mean)
  // Per step, when every rank has the same number of steps.
  std::vector<StepCollectives> per_step;
};

struct Straggler {
  int32_t rank = -1;
  int64_t times_last = 0;
  int64_t wait_caused_ns = 0;
  // What it was doing while the others waited: its own largest idle cause
  // and that cause's share of its idle.
  std::string before_cause;
  double before_share = 0;
  // Its GPU busy time ÷ wall time, and the other ranks' mean: extra work on
  // the straggler shows as a busier GPU.
  double busy_share = 0;
  double others_busy_share = 0;
};

struct ClockAlignment {
  std::string method;  // "monotonic" (one host) | "realtime"
  int64_t error_ns = 0;  // estimated bound (0 on one host)
};

struct Report {
  std::string step_source = "none";  // marker | auto | none
  // Device timing sampled one step in `sampled_every` (0: continuous): the
  // steps are the timed ones, of `steps_found`.
  uint32_t sampled_every = 0;
  int64_t steps_found = 0;
  std::vector<StepStats> steps;
  std::vector<Hotspot> hotspots;
  Totals totals;
  std::vector<Question> questions;
  std::vector<Diagnostic> diagnostics;
  std::vector<ProcessSummary> processes;
  // Distributed runs (two or more ranks with NCCL records); empty otherwise.
  std::vector<RankRow> ranks;
  CollectivesSummary collectives;
  std::vector<Straggler> stragglers;  // by wait_caused_ns, descending
  ClockAlignment clock;
  Predictions predictions;
};

}  // namespace stallscope::analyzer
