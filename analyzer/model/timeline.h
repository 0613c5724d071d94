// The timeline model of one traced process: its threads' CUDA API calls, the
// device ops they submitted (joined through correlation ids), NVTX ranges,
// strings, call-site stacks and the module map, all on CLOCK_MONOTONIC ns.
// The reader fills the raw fields; FinalizeTimeline converts ticks, sorts and
// joins.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "analyzer/model/diagnostics.h"
#include "analyzer/model/report.h"
#include "trace_format.h"

namespace stallscope::analyzer {

struct ApiInfo {
  std::string name;
  trace::ApiCategory category = trace::ApiCategory::kOther;
  uint16_t flags = 0;  // trace::ApiFlags
};

// One hooked host call: the fields every analysis pass reads (24 bytes, so
// a pass over millions of calls moves little memory). The rest of the call
// is in Timeline::call_info at the same index. Times are ticks until
// FinalizeTimeline, then ns.
struct ApiCall {
  int64_t enter_ns = 0;
  int64_t exit_ns = 0;
  uint32_t tid = 0;
  uint16_t api = 0;
  uint16_t flags = 0;  // trace::RecordFlags
};

// The fields of a call that hotspots, step finding and the exporters read
// for some calls only (Timeline::call_info[i] belongs to Timeline::calls[i]).
struct CallInfo {
  uint64_t correlation = 0;  // external id; 0 none
  uint64_t stream = 0;
  uint64_t object = 0;
  uint64_t bytes = 0;
  // Filled by the join: the device ops this call submitted and when the
  // last of them ended.
  int64_t last_op_end_ns = 0;
  uint32_t stack = 0;         // native call-site stack id; 0 none
  uint32_t python_stack = 0;  // Python call-site stack id; 0 none
  int32_t result = 0;
  int32_t op_count = 0;
};

// One device op: the fields every analysis pass reads (24 bytes). The rest
// is in Timeline::op_info at the same index.
struct DeviceOp {
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  int32_t call = -1;  // index into Timeline::calls of the submitting call
  // The device ordinal (ids past kMaxDevice are clamped to it and counted
  // as invalid records).
  uint16_t device = 0;
  trace::DeviceOpKind kind = trace::DeviceOpKind::kKernel;
  uint8_t copy_kind = 0;
};
inline constexpr uint32_t kMaxDevice = 0xffff;

// The fields of a device op that the exporters and hotspots read for some
// ops only (Timeline::op_info[i] belongs to Timeline::ops[i]).
struct OpInfo {
  uint64_t bytes = 0;
  uint32_t correlation = 0;  // CUPTI id
  uint32_t name = 0;         // string id
  uint32_t stream = 0;
  uint32_t context = 0;
};

struct NvtxEvent {
  int64_t ns = 0;  // ticks until FinalizeTimeline
  uint64_t range_id = 0;
  uint64_t domain = 0;
  uint32_t name = 0;
  trace::NvtxType type = trace::NvtxType::kMark;
  uint32_t tid = 0;
};

// A closed NVTX range (push/pop or start/end) or an explicit step.
struct NvtxRange {
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  uint32_t tid = 0;
  uint32_t name = 0;
  uint32_t depth = 0;  // push/pop nesting depth, 0 outermost
  bool explicit_step = false;
  uint64_t step_index = 0;  // explicit steps only
};

// A reading of a thread's CPU clock and run-queue delay (trace kCpuSched
// chunk; kCpu in older files, without the delay). `ns` is ticks until
// FinalizeTimeline.
struct CpuSample {
  int64_t ns = 0;
  int64_t cpu_ns = 0;  // the thread's CPU time since it started
  // Its time runnable but waiting for a CPU since it started; -1 unknown.
  int64_t run_delay_ns = -1;
};

// The NCCL arguments of one NCCL call (trace kNccl chunk), joined to the
// ApiCall it belongs to. `enter_ns` is ticks until FinalizeTimeline.
struct NcclCall {
  int64_t enter_ns = 0;
  uint64_t correlation = 0;  // the call's external correlation id; 0 none
  uint64_t comm = 0;         // communicator id, the same on every rank
  uint64_t seq = 0;          // collective (or per peer and direction) sequence
  uint64_t count = 0;
  uint32_t tid = 0;
  int32_t rank = -1;
  int32_t nranks = -1;
  int32_t peer = -1;  // send/recv peer, broadcast/reduce root
  int32_t op = -1;    // ncclRedOp_t
  trace::NcclKind kind = trace::NcclKind::kOther;
  uint8_t datatype = 255;  // ncclDataType_t; 255 none
  uint8_t flags = 0;       // trace::NcclFlags
  uint8_t group_depth = 0;
  int32_t call = -1;  // index into Timeline::calls; -1 when not found
};

// Device timing turned on or off (trace kDeviceTiming record).
struct DeviceTimingTurn {
  int64_t ns = 0;
  bool on = false;
  uint32_t every = 0;  // the recorder's sampling period in steps
};

// The process's place in a distributed job (trace kRank chunk).
struct RankInfo {
  bool known = false;
  int32_t rank = -1;
  int32_t local_rank = -1;
  int32_t world_size = -1;
  int32_t local_world_size = -1;
  trace::RankSource source = trace::RankSource::kNone;
  std::string host;
};

// Where a stack's words live in Timeline::stack_words.
struct StackRef {
  uint32_t native_offset = 0;
  uint32_t native_depth = 0;  // u64 return addresses, innermost first
  uint32_t python_offset = 0;
  uint32_t python_depth = 0;  // frames: 2 words (string id, line) each
  // (Ids are unique across kinds in the recorder; one id holding both kinds
  // is accepted and merged.)
};

struct Module {
  uint64_t base = 0;
  uint64_t low = 0;
  uint64_t high = 0;
  std::string path;
  std::string build_id;
  uint32_t generation = 0;  // index of the kModule chunk it came from
};

// CUPTI correlation id → external id (trace kCorrelation records), filled
// as the records are read: a flat vector over the ids below a limit (the
// recorder hands ids out in sequence from 1), a hash map for the rest. A
// later record for the same id replaces the earlier one.
class CorrelationMap {
 public:
  // `expected` records will come: a flat vector holds the ids from the
  // first one set (or a little below it: a later, lower id moves its start
  // down) over at most 4 * expected + 1024 ids; a hash map the others. The
  // ids of a slice of a long file (ReadTraceChunks) start far from 0.
  void Expect(uint64_t expected);
  void Set(uint32_t correlation, uint64_t external) {
    // Inside the vector already (most ids after the first): no base to
    // move, nothing to grow.
    const uint64_t at = uint64_t{correlation} - base_;  // wraps below base_
    if (at < dense_.size()) {
      ++records_;
      dense_[at] = external;
      return;
    }
    SetSlow(correlation, external);
  }
  uint64_t Get(uint32_t correlation) const {  // 0 when unknown
    // An id is in the vector or the map, never both: one that went to the
    // map stays out of the vector's reach (its start only moves down while
    // the whole stays within the limit, and its end never moves down).
    const uint64_t at = uint64_t{correlation} - base_;  // wraps below base_
    if (at < dense_.size()) return dense_[at];
    if (sparse_.empty()) return 0;
    auto it = sparse_.find(correlation);
    return it == sparse_.end() ? 0 : it->second;
  }
  bool empty() const { return records_ == 0; }
  // How many ids the hash map holds (the flat vector could not reach them).
  size_t spilled() const { return sparse_.size(); }
  void Clear();

 private:
  void SetSlow(uint32_t correlation, uint64_t external);
  uint64_t limit_ = 1024;
  uint64_t records_ = 0;
  uint64_t base_ = 0;  // dense_[i] is id base_ + i
  std::vector<uint64_t> dense_;
  absl::flat_hash_map<uint32_t, uint64_t> sparse_;
};

// External correlation id → index into Timeline::calls, filled as the API
// records are read. The recorder's ids are (thread index << 40) | sequence
// from 1: one flat vector per thread index over the sequence, from the
// first one set (a later, lower one moves its start down) over at most
// 4 * the calls expected + 1024, a hash map for the rest. A later record
// for the same id replaces the earlier one.
class ExternalIndex {
 public:
  void Expect(uint64_t calls);
  void Set(uint64_t external, uint32_t call) {
    // Consecutive records mostly come from one thread: its vector first.
    if (last_ < threads_.size() && threads_[last_].high == external >> kSeqBits) {
      std::vector<int32_t>& calls = threads_[last_].calls;
      const uint64_t at = (external & kSeqMask) - threads_[last_].base;  // wraps below base
      if (at < calls.size()) {
        calls[at] = static_cast<int32_t>(call);
        return;
      }
    }
    SetSlow(external, call);
  }
  int32_t Get(uint64_t external) const {  // -1 when unknown
    const uint64_t high = external >> kSeqBits;
    const uint64_t seq = external & kSeqMask;
    for (const Thread& th : threads_) {
      if (th.high == high) {
        // In the vector or the map, never both (CorrelationMap::Get).
        const uint64_t at = seq - th.base;  // wraps below base
        if (at < th.calls.size()) return th.calls[at];
        break;
      }
    }
    if (sparse_.empty()) return -1;
    auto it = sparse_.find(external);
    return it == sparse_.end() ? -1 : it->second;
  }
  // The calls were reordered: call i is now call to[i].
  void Remap(const std::vector<uint32_t>& to);
  // How many ids the hash map holds (no thread's vector could reach them).
  size_t spilled() const { return sparse_.size(); }
  void Clear();

 private:
  static constexpr int kSeqBits = 40;
  static constexpr uint64_t kSeqMask = (uint64_t{1} << kSeqBits) - 1;
  static constexpr size_t kMaxThreads = 16;  // flat vectors; ids of more go to the map
  struct Thread {
    uint64_t high = 0;
    uint64_t base = 0;           // calls[i] is sequence base + i
    std::vector<int32_t> calls;  // by sequence; -1 none
  };
  void SetSlow(uint64_t external, uint32_t call);

  uint64_t limit_ = 1024;
  uint64_t expected_ = 0;
  std::vector<Thread> threads_;
  size_t last_ = 0;  // the thread of the last Set
  absl::flat_hash_map<uint64_t, int32_t> sparse_;
};

// How many device ops one device ran (Timeline::ops_per_device).
struct DeviceOpCount {
  uint32_t device = 0;
  int64_t ops = 0;
  int64_t nccl = 0;  // of them NCCL kernels
};

// How many calls one thread made (Timeline::calls_per_thread).
struct ThreadCallCount {
  uint32_t tid = 0;
  int64_t calls = 0;
  int64_t launches = 0;  // of them in the launch category
};

struct Timeline {
  std::string path;
  trace::FileHeader header{};
  std::string host;
  bool ticks_are_ns = false;
  bool ended_cleanly = false;
  uint64_t bytes_used = 0;  // bytes up to the last complete chunk
  // Records the recorder could not write (a full disk), as it counted them.
  uint64_t write_failed_records = 0;
  uint64_t write_failed_calls = 0;
  int write_failed_errno = 0;
  uint64_t file_size = 0;

  std::vector<ApiInfo> apis;  // indexed by api id
  std::vector<ApiCall> calls;  // sorted by enter after FinalizeTimeline
  std::vector<CallInfo> call_info;  // call_info[i] belongs to calls[i]
  // Counted by FinalizeTimeline: each thread with calls, in order of its
  // first record read.
  std::vector<ThreadCallCount> calls_per_thread;
  std::vector<DeviceOp> ops;   // sorted by start after FinalizeTimeline
  std::vector<OpInfo> op_info;  // op_info[i] belongs to ops[i]
  // Counted by FinalizeTimeline: each device with ops, in order of its first
  // op.
  std::vector<DeviceOpCount> ops_per_device;
  // Copies' host memory (trace::DeviceRecord src_kind/dst_kind): whether the
  // recorder wrote memory kinds at all, and the CUPTI correlation ids of the
  // copies that read into (or from) pageable host memory, which NVIDIA's
  // driver performs synchronously even in their async forms; then, after
  // FinalizeTimeline's join, the calls that made them.
  bool copy_memory_kinds = false;
  absl::flat_hash_set<uint32_t> pageable_copy_ops;
  absl::flat_hash_set<int32_t> pageable_copy_calls;
  // Filled by the reader, released by FinalizeTimeline once ops are joined
  // to calls.
  CorrelationMap correlations;
  ExternalIndex by_external;  // likewise
  // A slice of a file (ReadTraceChunks) whose correlations are partly in
  // chunks not read: ops without one stay unjoined, instead of being
  // joined by their CUPTI ids as in a file that has none.
  bool correlations_elsewhere = false;
  std::vector<NvtxEvent> nvtx;
  std::vector<NvtxRange> ranges;  // sorted by start
  absl::flat_hash_map<uint32_t, std::string> strings;
  absl::flat_hash_map<uint32_t, StackRef> stacks;
  std::vector<uint64_t> stack_words;
  // After FinalizeTimeline: the last module map written, plus modules of
  // earlier maps whose ranges it does not overlap (unloaded since).
  std::vector<Module> modules;
  uint32_t module_maps = 0;  // kModule chunks read
  std::vector<trace::ClockRecord> clocks;
  absl::flat_hash_map<uint32_t, std::string> thread_names;
  // CPU-time samples per thread, sorted by time after FinalizeTimeline.
  // Empty for traces written before the recorder took them.
  absl::flat_hash_map<uint32_t, std::vector<CpuSample>> cpu;
  // NCCL calls' arguments, sorted by enter after FinalizeTimeline (a
  // ncclCommInitAll call has one entry per communicator it created).
  std::vector<NcclCall> nccl;
  // Device timing in sampled windows (trace kDeviceTiming): when CUPTI's
  // device kinds were turned on or off, sorted by time after
  // FinalizeTimeline (`ns` is ticks until then). Empty when device timing
  // was continuous.
  std::vector<DeviceTimingTurn> device_timing;
  RankInfo rank;
  std::vector<Diagnostic> diagnostics;

  // "" when unknown.
  std::string_view String(uint32_t id) const;
  // The Python frame whose (string id, line) pair starts at stack_words[word]:
  // the string is "file\tfunction" ("<python>" when it has no function).
  Frame PythonFrame(size_t word) const;
  const ApiInfo& Api(uint16_t id) const {
    return id < apis.size() && !apis[id].name.empty() ? apis[id] : UnknownApi();
  }
  static const ApiInfo& UnknownApi();
};

// The analyzer's allocator settings (the `stallscope` command sets them
// first thing): every block from the heap (no mmap), and freed memory kept
// there (no trim). The analyzer allocates large record vectors, frees them
// and allocates others of similar size phase after phase, and a reader of
// slices does so slice after slice: kept, freed memory is reused instead of
// being unmapped and faulted in (zeroed by the kernel) again. Whole reads:
// 15% fewer page faults and about 7% less time on a large trace, for about
// 6% more peak memory (docs/analyzer.md, Performance); slices: half the
// time (docs/performance.md). A heap allocation that fails in a thread's
// arena is retried in the main one.
void KeepFreedMemory();

// Maps the pages of [data, data + bytes) in one call (MADV_POPULATE_WRITE,
// Linux 5.14), which costs less than a page fault at the first write to each
// 4 KiB page. Does nothing for ranges under 1 MiB or where the kernel does
// not support it (the pages then fault in as usual).
void PopulatePages(void* data, size_t bytes);
template <typename T>
void PopulateCapacity(std::vector<T>* v) {
  PopulatePages(v->data(), v->capacity() * sizeof(T));
}

// "all_reduce", "send", "comm_init" ...
const char* NcclKindName(trace::NcclKind kind);

// Every time in a finalized timeline lies in [0, kMaxTimeNs] (about 36 years
// of CLOCK_MONOTONIC): sums and differences of times never overflow.
inline constexpr int64_t kMaxTimeNs = int64_t{1} << 60;
// Sums of durations stop at kMaxSumNs (2^62) instead of overflowing: a
// hostile or broken trace's many huge ops give a huge total, never a
// negative one.
inline constexpr int64_t kMaxSumNs = kMaxTimeNs * 4;
inline int64_t AddCapped(int64_t sum, int64_t d) {  // both in [0, kMaxSumNs]
  return d > kMaxSumNs - sum ? kMaxSumNs : sum + d;
}

// The split of thread `tid`'s gap [e, s) between two of its outermost calls,
// from its CPU-time samples (docs/analyzer.md "On-CPU estimate"): on-CPU ns,
// and of the rest the ns it was runnable but waiting for a CPU (its
// run-queue delay; -1 when the samples do not carry it). on = -1 when the
// samples do not bound the gap. S1 = T's last sample in (e, s] (the recorder
// takes one at the enter of the call ending a long gap), S0 = its last sample
// at or before e. Between S0 and e (the stretch) the thread made only
// non-blocking calls with short gaps (every long gap and every may-block
// call ends with a sample): on-CPU as far as its CPU clock moved, and the
// rest of its wall time waiting for a CPU, as far as its run-queue delay
// moved. With cpu = S1.cpu - S0.cpu, delay = S1.delay - S0.delay:
//   on = cpu - (e - S0.t), clamped to [0, S1.t - e],
//   preempted = delay - min(delay, max(0, (e - S0.t) - cpu)),
//               clamped to [0, S1.t - e - on].
// preempted_most: the most the samples let the gap hold, the whole delay
// (clamped the same), for a question of what the gap's silence may owe the
// machine (the automatic steps' phase search).
// (docs/analyzer.md "On-CPU estimate" gives the errors.)
struct HostGapSplit {
  int64_t on = -1;
  int64_t preempted = -1;
  int64_t preempted_most = -1;
};
HostGapSplit SplitHostGap(const Timeline& t, uint32_t tid, int64_t e, int64_t s);

// A time outside [0, kMaxTimeNs] is clamped into it and counted (what
// FinalizeTimeline fixes).
inline void ClampTime(int64_t* v, uint64_t* invalid) {
  if (*v < 0 || *v > kMaxTimeNs) {
    *v = *v < 0 ? 0 : kMaxTimeNs;
    ++*invalid;
  }
}

// Converts ticks to ns (piecewise-linear through the kClock pairs, or the
// identity when the file says ticks are ns), sorts calls and ops, joins each
// device op to its submitting call, and builds NVTX ranges.
void FinalizeTimeline(Timeline* t);

// Pairs NVTX events given in time order (stable, as FinalizeTimeline sorts
// them) into ranges: pushes and pops by thread, starts and ends by domain
// and id, explicit steps by id. What FinalizeTimeline builds the ranges
// with, and the streamed analysis over slices of the NVTX chunks.
class NvtxPairer {
 public:
  // Appends the range `e` closes, if any, to `out`.
  void Add(const NvtxEvent& e, std::vector<NvtxRange>* out);
  // Events without their other end: closings of nothing, and what is
  // still open.
  uint64_t Unmatched() const;

 private:
  absl::flat_hash_map<uint32_t, std::vector<NvtxEvent>> pushed_;
  absl::flat_hash_map<std::pair<uint64_t, uint64_t>, NvtxEvent> started_;
  absl::flat_hash_map<uint64_t, NvtxEvent> steps_;
  uint64_t unmatched_ = 0;
};

// Ranges in the timeline's order: by start, the longer first among equal
// starts (stable).
void SortRanges(std::vector<NvtxRange>* ranges);

// What FinalizeTimeline's join says of `unjoined` of `ops` device ops that
// no call submitted (the streamed analysis counts them slice by slice).
void AddUncorrelatedOps(std::vector<Diagnostic>* diags, uint64_t unjoined, uint64_t ops);

// Sorts the ops by start (stable), their OpInfo alongside (after op start
// times change).
void SortOpsByStart(Timeline* t);

// Tick → ns conversion through (ticks, mono_ns) pairs: linear interpolation
// between neighbouring pairs, extrapolation with the nearest segment's slope.
class TickConverter {
 public:
  // `pairs` need not be sorted. Adds clock diagnostics to `diags`.
  TickConverter(std::vector<trace::ClockRecord> pairs,
                std::vector<Diagnostic>* diags);
  int64_t ToNs(uint64_t ticks) const;
  // The same conversion, faster for ticks that mostly rise: the segment of
  // the previous call is tried first.
  int64_t ToNsNear(uint64_t ticks, size_t* hint) const;

 private:
  struct Segment {
    uint64_t ticks;  // start of the segment
    int64_t ns;
    double slope;  // ns per tick
  };
  int64_t Convert(const Segment& s, uint64_t ticks) const;
  std::vector<Segment> segments_;
};

}  // namespace stallscope::analyzer
