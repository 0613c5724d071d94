// Cross-rank analysis of a distributed job (design.md: ranks[], collectives,
// stragglers): every collective instance (communicator, sequence number)
// joined across the ranks' traces, each rank's arrival (its part's NCCL
// kernel start), the last arriver and the wait it caused; the waiting part
// of the other ranks' NCCL kernels becomes GPU idle charged to `comm`.
//
// It is a map and a reduce, twice, over small per-rank records, so the same
// steps run in threads here and on a Dask cluster (python/stallscope/fleet.py):
//   1. map:    CollectArrivals(timeline)       → RankArrivals (one per rank)
//   2. reduce: ReduceArrivals(all RankArrivals) → LastArrivals
//   3. map:    ApplyLastArrivals + AnalyzeTimeline + SummarizeRank → RankSummary
//   4. reduce: ReduceRanks(all RankSummary)    → RanksSection (+ q5)
// See docs/analyzer.md "Distributed runs".
#pragma once

#include <cstdint>
#include <functional>
#include <utility>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "analyzer/model/report.h"
#include "analyzer/analyze/job_files.h"
#include "analyzer/analyze/stream.h"
#include "analyzer/model/timeline.h"
#include "nlohmann/json.hpp"

namespace stallscope::analyzer {

// One rank's part of one collective instance, on the common clock.
struct Arrival {
  uint64_t comm = 0;
  uint64_t seq = 0;
  int64_t arrival_ns = 0;  // its NCCL kernel's start (the earliest, when several)
  int64_t end_ns = 0;      // its NCCL kernel's end (the latest)
  uint64_t bytes = 0;
  uint8_t kind = 0;  // trace::NcclKind
};

struct RankArrivals {
  int32_t rank = -1;  // -1: unknown (no rank variable); then the file order
  std::string file;   // basename
  std::string host;
  uint32_t pid = 0;
  uint32_t device = 0;  // the analyzed device
  // CLOCK_REALTIME − CLOCK_MONOTONIC at the trace's first clock pair, and
  // how much it moved by the last pair (a bound on the alignment error).
  // The common clock is CLOCK_MONOTONIC when every rank ran on one host,
  // else CLOCK_REALTIME: common = own + CommonOffset().
  int64_t realtime_offset_ns = 0;
  int64_t offset_drift_ns = 0;
  std::vector<Arrival> arrivals;  // collectives only (not point-to-point), by
                                  // (comm, seq); times on this rank's monotonic clock
  // The trace's identity, for what a report says of the job's files
  // (job_files.h): the reduces of `stallscope fleet` see no trace.
  TraceIdentity trace;
};

// Map 1: needs this rank's trace only.
RankArrivals CollectArrivals(const Timeline& t);

// Map 1 on a trace read by slices (stream.h), nothing held whole: the
// arrivals CollectArrivals gives on the whole reading, and what applying
// the last arrivals to a slice needs (ApplyLastArrivals(Timeline*, const
// LastByCall&)): for each call that launched a collective instance's NCCL
// kernel on the analyzed device, the instance. One pass over the calls
// (ForEachCallSlice); `progress` (optional) as StreamOptions::progress.
using InstanceOf = absl::flat_hash_map<CallKey, std::pair<uint64_t, uint64_t>>;  // (comm, seq)
struct SlicedRank {
  RankArrivals arrivals;
  InstanceOf instance_of;
};
absl::StatusOr<SlicedRank> CollectArrivalsBySlices(
    SliceReader* reader, const TraceIndex& index, size_t chunks_per_slice,
    const std::function<void(uint64_t, uint64_t)>& progress = nullptr);

// True when every rank ran on one host (one monotonic clock).
bool OneHost(const std::vector<RankArrivals>& ranks);
inline int64_t CommonOffset(const RankArrivals& r, bool one_host) {
  return one_host ? 0 : r.realtime_offset_ns;
}

// (comm, seq) → the last arrival on the common clock, and the number of
// ranks that reached the instance.
struct LastArrival {
  int64_t last_ns = 0;
  int32_t ranks = 0;
};
struct LastArrivals {
  bool one_host = true;  // the common clock: monotonic (true) or realtime
  absl::flat_hash_map<std::pair<uint64_t, uint64_t>, LastArrival> instances;
};

// Reduce 1.
LastArrivals ReduceArrivals(const std::vector<RankArrivals>& ranks);

// Moves the start of this rank's NCCL kernels of every instance reached by
// more than one rank to the instance's last arrival (on this rank's clock):
// before it the kernel only waited for the other ranks, and the attribution
// then charges that wait to `comm` as GPU idle (design.md: the device waiting
// for a collective that another rank reached late). Returns the ns moved.
int64_t ApplyLastArrivals(Timeline* t, const RankArrivals& mine, const LastArrivals& last);

// The same, a slice at a time: each launching call of an instance reached
// by more than one rank → the instance's last arrival on this rank's
// clock. ApplyLastArrivals(slice, by_call) moves the slice's NCCL kernels
// joined to their calls as the whole timeline's are moved (a slice's op is
// joined to its call but where the slice holds it only as another call's
// chunk-mate, and the analysis by slices reads no such op); an op's start
// moves within its own span, so the chunks that hold it are those a slice
// of its new start reads.
struct LastByCall {
  uint32_t device = 0;
  absl::flat_hash_map<CallKey, int64_t> last_ns;
};
LastByCall LastArrivalsByCall(const RankArrivals& mine, const InstanceOf& instance_of,
                              const LastArrivals& last);
int64_t ApplyLastArrivals(Timeline* t, const LastByCall& last);

// The rank that arrived last at the most collective instances reached by
// two or more ranks (the lowest of equals); -1 when there is none. `times`
// (optional): how many.
int32_t MostOftenLast(const std::vector<RankArrivals>& ranks, bool one_host, int64_t* times = nullptr);

// What `whatif --straggler-to-median` changes on one rank: for each of its
// NCCL kernels (indexed like t.ops; 0 for any other op), how much earlier
// it could start if rank `straggler` reached every collective instance no
// later than the median of the instance's arrivals: the instance's last
// arrival less the new last one (the latest of the other ranks' arrivals,
// or the median), never before this rank's own arrival. `t` is this rank's
// timeline after ApplyLastArrivals; `mine` is its entry of `all`.
// `moved` (optional) counts the kernels that move.
std::vector<int64_t> StragglerCuts(const Timeline& t, const RankArrivals& mine,
                                   const std::vector<RankArrivals>& all, int32_t straggler, bool one_host,
                                   int64_t* moved = nullptr);

// An instance has a late rank when its last arrival came this long after
// the second-to-last: only such instances count for `times_last`. A rank is
// a straggler when it is late significantly more often than chance (with N
// ranks each would be last at 1/N of the late instances if lateness were
// noise: one-sided binomial test, p below kStragglerMaxP) and the wait it
// caused is at least kStragglerMinShare of the mean rank's wall time.
inline constexpr int64_t kStragglerMinLateNs = 100'000;
inline constexpr double kStragglerMaxP = 0.01;
inline constexpr double kStragglerMinShare = 0.05;

// P(X >= k) for X ~ Binomial(n, p).
double BinomialTail(int64_t n, int64_t k, double p);

// Map 2's result: what the reduce needs of one rank.
struct RankSummary {
  std::string path;        // the trace (for the reduce that re-reads rank 0's)
  ProcessSummary process;  // for the report's processes[]
  RankArrivals arrivals;
  Totals totals;  // after ApplyLastArrivals (wait for the last rank is idle `comm`)
  int steps = 0;
  int64_t step_time_ns = 0;  // sum of step durations
  int64_t start_ns = 0;      // first step's start, last step's end (own clock)
  int64_t end_ns = 0;
  // Per instance (same order as arrivals.arrivals): how long this rank waited
  // for the last one.
  std::vector<int64_t> waited_ns;
  int64_t waited_in_steps_ns = 0;  // of which inside this rank's steps
  // Inside the steps: device time of the NCCL kernels (union, their wait for
  // other ranks included) and of compute kernels while they ran.
  int64_t comm_ns = 0;
  int64_t compute_during_comm_ns = 0;
  // The same per step of this rank, and each step's time and its waiting
  // for the last rank.
  std::vector<int64_t> step_time_per_step_ns, step_comm_ns, step_overlap_ns, step_waited_ns;
  bool analyzed = false;  // the rank whose steps the report shows
};

// `t` is the rank's timeline (before or after ApplyLastArrivals: compute
// kernels are the same), `report` its analysis after ApplyLastArrivals.
RankSummary SummarizeRank(const Timeline& t, const RankArrivals& arrivals,
                          const LastArrivals& last, const Report& report);
// The same from the file by slices (its compute kernels from a pass over
// the device chunks), for a rank analyzed by slices (`path` names it).
absl::StatusOr<RankSummary> SummarizeRankBySlices(SliceReader* reader, const TraceIndex& index,
                                                  const std::string& path, const RankArrivals& arrivals,
                                                  const LastArrivals& last, const Report& report,
                                                  size_t chunks_per_slice);

// What a straggler was doing while the others waited, for every writer:
// "its GPU was busy 44% of the time (the others 27%) and its own idle is
// mostly host_wait (59%)".
std::string StragglerActivity(const Straggler& s);

// Reduce 2: fills report->ranks, collectives, stragglers, clock alignment,
// and answers q5.
void ReduceRanks(std::vector<RankSummary> ranks, Report* report);

// JSON forms of the per-rank records, for the Dask path and `stallscope
// fleet` (schema names in docs/analyzer.md).
nlohmann::ordered_json ArrivalsToJson(const RankArrivals& a);
absl::StatusOr<RankArrivals> ArrivalsFromJson(const nlohmann::json& j);
nlohmann::ordered_json LastArrivalsToJson(const LastArrivals& last);
absl::StatusOr<LastArrivals> LastArrivalsFromJson(const nlohmann::json& j);
nlohmann::ordered_json RankSummaryToJson(const RankSummary& s);
absl::StatusOr<RankSummary> RankSummaryFromJson(const nlohmann::json& j);

}  // namespace stallscope::analyzer
