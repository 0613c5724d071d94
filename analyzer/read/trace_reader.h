// Reads one .sstrace file (format: common/trace_format.h) into a Timeline.
// Validates the header, each chunk's magic, bounds and checksum; keeps what
// precedes a truncated or torn tail with a warning; skips a damaged chunk
// in the middle, resuming at the next chunk that verifies, with a warning
// naming the bytes lost and the first byte offset (corrupt_chunks). What it
// allocates is bounded by the file's size.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "analyzer/model/timeline.h"

namespace stallscope::analyzer {

// Largest chunk payload accepted; larger sizes are treated as corruption.
inline constexpr uint32_t kMaxChunkPayload = 1u << 30;

// Called now and then while a file is read: bytes read so far, file size.
using ReadProgress = std::function<void(uint64_t done, uint64_t total)>;

// Reads `path` with one read per chunk (no whole-file buffer) and finalizes
// the timeline (ticks → ns, join, NVTX ranges). `progress`, when set, is
// called about every 32 MB and once at the end.
absl::StatusOr<Timeline> ReadTraceFile(const std::string& path,
                                       const ReadProgress& progress = nullptr);

// The same over bytes in memory; `name` names the input in messages.
absl::StatusOr<Timeline> ReadTraceBytes(std::string_view bytes,
                                        const std::string& name);

// The first pass of the streamed analysis (docs/analyzer.md, "Not yet"):
// every chunk's place, type, thread and the span of its records, without
// keeping the records (64 bytes a chunk, and 16 for each thread whose
// launches a correlation chunk holds; a chunk holds about 64 KiB of
// records).
struct ChunkSpan {
  uint64_t offset = 0;  // of its header
  uint32_t payload_bytes = 0;
  uint32_t count = 0;  // records or entries
  uint32_t tid = 0;    // the writing thread (kApi, kNvtx); 0 otherwise
  uint16_t type = 0;   // trace::ChunkType
  uint16_t encoding = 0;
  // Its records' span, lo..hi (both 0 for chunks without records), in ns
  // as the reader converts ticks (by the file's clock pairs): kApi, the
  // earliest enter and latest exit; kDevice, the earliest start and latest
  // end; the others with fixed records, their time; kCorrelation, the
  // lowest and highest CUPTI id instead.
  uint64_t lo = 0;
  uint64_t hi = 0;
  // The ids its records carry, id_lo..id_hi (id_lo > id_hi: none): kApi,
  // the external correlation ids (0, none, left out); kDevice, the CUPTI
  // ids; kCorrelation, the external ids.
  uint64_t id_lo = ~uint64_t{0};
  uint64_t id_hi = 0;
  // kCorrelation: its external ids as one range per thread that gave them,
  // TraceIndex::external_ranges[ranges_at, ranges_at + ranges).
  uint32_t ranges_at = 0;
  uint32_t ranges = 0;
};

struct TraceIndex {
  trace::FileHeader header;
  uint64_t file_size = 0;
  std::vector<ChunkSpan> chunks;  // in file order
  std::vector<std::pair<uint64_t, uint64_t>> external_ranges;  // see ChunkSpan::ranges
  bool truncated = false;  // the last chunk was cut short (a torn tail)
  // Every call's and op's count, as a whole reading counts them
  // (Timeline::calls_per_thread, by thread; ops_per_device, in order of
  // first appearance): what MainThread and BusiestDevice choose by.
  std::vector<ThreadCallCount> calls_per_thread;
  std::vector<DeviceOpCount> ops_per_device;
  // What a whole reading (ReadTraceFile) says of the file, for a report made
  // from slices: its diagnostics in the reading's order up to its join (the
  // chunks', the end of the file's, the clocks', the records it fixed, a
  // join by CUPTI ids for want of correlations). The reading's last ones,
  // ops without a call (AddUncorrelatedOps), unmatched NVTX ranges and no
  // device ops, come from what the slices hold.
  std::vector<Diagnostic> diagnostics;
  // Whether the file holds CPU-time samples (a CPU-time chunk, as
  // Timeline::cpu has an entry), and how many carry no run-queue delay.
  bool cpu_samples = false;
  uint64_t cpu_samples_without_delay = 0;
};

// Indexes `path`, one read per chunk (a packed or compressed chunk decoded
// in passing). A damaged chunk in the middle is an error (the reader skips
// it; an index would not say what was lost); a torn tail ends the index.
absl::StatusOr<TraceIndex> IndexTraceFile(const std::string& path);
absl::StatusOr<TraceIndex> IndexTraceBytes(std::string_view bytes, const std::string& name);

// What `path` holds, as its chunks' headers count it (up to the first
// header that does not verify; no payload is read): what chooses between
// reading a trace whole and by slices.
struct HeaderCounts {
  uint64_t calls_and_ops = 0;
};
absl::StatusOr<HeaderCounts> CountByHeaders(const std::string& path);

// A slice of the timeline from the file (the streamed analysis' second
// pass): the record chunks holding the calls, ranges, CPU samples, NCCL
// arguments and device ops whose times meet [lo_ns, hi_ns]; on each
// thread, the chunks holding its last call before the slice and its first
// call after, and likewise its CPU samples; through the correlations (by
// CUPTI and external id), the calls that submitted the slice's ops and the
// ops of its calls, so each call of the slice has its op count and last op
// end, and each op its call; and the NCCL arguments of every call read.
// Indices into index.chunks, in file order. (One SliceChunker's answer:
// build one to ask for many slices.)
std::vector<size_t> SliceChunks(const TraceIndex& index, uint64_t lo_ns, uint64_t hi_ns);

// Closed ranges of ids (or times), merged once all are added; Meets by
// binary search.
class IdRanges {
 public:
  void Add(uint64_t lo, uint64_t hi);  // nothing when lo > hi
  void Merge();
  bool Meets(uint64_t lo, uint64_t hi) const;
  // Sorted and apart, once merged.
  const std::vector<std::pair<uint64_t, uint64_t>>& ranges() const { return r_; }

 private:
  std::vector<std::pair<uint64_t, uint64_t>> r_;
};

// Closed intervals, each with an item; Find gives the items of those
// meeting [a, b] in O((found + 1) log n): sorted by start, a tree of their
// latest ends leads to them.
class IntervalFinder {
 public:
  void Add(uint64_t lo, uint64_t hi, uint32_t item);  // nothing when lo > hi
  void Build();  // after the last Add, before the first Find
  // Appends to `out` (in no set order).
  void Find(uint64_t a, uint64_t b, std::vector<uint32_t>* out) const;

 private:
  struct Entry {
    uint64_t lo, hi;
    uint32_t item;
  };
  std::vector<Entry> e_;
  std::vector<uint64_t> max_;  // the tree: node n's children 2n, 2n + 1; leaves from leaves_
  size_t leaves_ = 0;
};

// SliceChunks for one index, asked many times: tables built once, by time
// and by id, are searched instead of every chunk scanned, so that a slice
// costs what it takes, not what the trace holds. Holds `index` by
// reference.
class SliceChunker {
 public:
  explicit SliceChunker(const TraceIndex& index);
  std::vector<size_t> Chunks(uint64_t lo_ns, uint64_t hi_ns) const;
  // Less: the device ops whose times meet [lo_ns, hi_ns] and, through the
  // correlations, the calls that submitted them (each op its call, as in
  // Chunks' answer); no other calls, ranges, samples or NCCL arguments.
  // What the steps' device spans need.
  std::vector<size_t> OpsAndTheirCalls(uint64_t lo_ns, uint64_t hi_ns) const;
  // The calls whose times meet [lo_ns, hi_ns] and, through the
  // correlations, their ops (each call its op count and last op end, as in
  // Chunks' answer); no other ops, ranges, samples or NCCL arguments. What
  // the hotspots need.
  std::vector<size_t> CallsAndTheirOps(uint64_t lo_ns, uint64_t hi_ns) const;
  // Every thread's CPU-sample chunks meeting [lo_ns, hi_ns], and the ones
  // just before and after it: what splits the host gaps of that time.
  std::vector<size_t> CpuSamples(uint64_t lo_ns, uint64_t hi_ns) const;

 private:
  // One thread's chunks (of one kind), to find those just outside a range.
  struct Edges {
    std::vector<std::pair<uint64_t, uint32_t>> by_hi, by_lo;  // (end or start, chunk)
    void Add(const ChunkSpan& c, uint32_t k);
    void Sort();
    // (the chunk ending last wholly before [lo, hi], the one starting first
    // wholly after it); -1: none.
    std::pair<int64_t, int64_t> Around(uint64_t lo, uint64_t hi) const;
  };
  struct Samples {  // one thread's CPU samples of one chunk type
    uint32_t tid = 0;
    IntervalFinder by_time;
    Edges edges;
    // Appends its chunks meeting [lo_ns, hi_ns] and those just outside.
    void Add(uint64_t lo_ns, uint64_t hi_ns, std::vector<uint32_t>* take) const;
  };
  // The joins through the correlations, adding to `take`: the correlation
  // and call chunks of the calls that submitted ops of CUPTI ids `cupti`,
  // and the correlation and device chunks of the ops of calls of external
  // ids `external` (both merged).
  void AddCallsOfOps(const IdRanges& cupti, std::vector<uint32_t>* take) const;
  void AddOpsOfCalls(const IdRanges& external, std::vector<uint32_t>* take) const;
  const TraceIndex& index_;
  IntervalFinder by_time_;  // every record chunk but correlations and samples
  std::vector<Edges> calls_;  // by thread
  absl::flat_hash_map<uint32_t, size_t> thread_slot_;  // tid → index into calls_
  std::vector<Samples> samples_;
  IntervalFinder by_cupti_of_correlations_;     // their CUPTI ids
  IntervalFinder by_external_of_correlations_;  // their external ids, a range per thread
  IntervalFinder calls_by_id_;                  // external ids
  IntervalFinder ops_by_id_;                    // CUPTI ids
  IntervalFinder ops_by_time_;
  IntervalFinder calls_by_time_;
  IntervalFinder nccl_by_time_;
  bool correlations_ = false;
};

// Reads the record chunks `chunks` (indices into index.chunks) and every
// chunk that is not a record chunk a slice chooses among (tables, clocks,
// threads, diagnostics ...) into a finalized timeline: each call, op and
// sample of the slice as the whole file's reading gives it, its ops joined
// to their calls. A chunk that does not verify is an error. The whole
// file's diagnostics (an end chunk missing, damage skipped) are not made.
absl::StatusOr<Timeline> ReadTraceChunks(std::string_view bytes, const std::string& name,
                                         const TraceIndex& index,
                                         const std::vector<size_t>& chunks);
absl::StatusOr<Timeline> ReadTraceFileChunks(const std::string& path, const TraceIndex& index,
                                             const std::vector<size_t>& chunks);

// Reads slices of one file one after another, each as ReadTraceChunks
// reads it: the chunks that are not record chunks are read and parsed once,
// when the reader opens, and the record chunks one slice decoded are kept
// for the next, which mostly needs many of them again (neighbouring slices
// share the chunks at their edges). Holds `index`, which must outlive it.
class SliceReader {
 public:
  static absl::StatusOr<SliceReader> OpenFile(const std::string& path, const TraceIndex& index);
  static absl::StatusOr<SliceReader> OpenBytes(std::string_view bytes, const std::string& name,
                                               const TraceIndex& index);
  SliceReader(SliceReader&&) noexcept;
  SliceReader& operator=(SliceReader&&) noexcept;
  ~SliceReader();

  // The timeline of the record chunks `chunks` (indices into the index's
  // chunks, SliceChunks' answer) and the others.
  absl::StatusOr<Timeline> Read(const std::vector<size_t>& chunks);
  // Record chunks read from the file and decoded so far; and those taken
  // from the slice before instead.
  uint64_t chunks_decoded() const;
  uint64_t chunks_kept() const;

 private:
  struct State;
  explicit SliceReader(std::unique_ptr<State> s);
  static absl::StatusOr<SliceReader> Open(std::unique_ptr<State> s, const std::string& name);
  std::unique_ptr<State> s_;
};

}  // namespace stallscope::analyzer
