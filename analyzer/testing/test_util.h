// Helpers shared by the analyzer's tests: a standard API table for the trace
// builder, and trace bytes → Timeline / Report in one call.
#pragma once

#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "analyzer/analyze/analysis.h"
#include "analyzer/testing/trace_builder.h"
#include "analyzer/read/trace_reader.h"

namespace stallscope::testing {

struct Apis {
  uint16_t launch, sync, event_sync, memcpy, memcpy_async, memset, free, alloc, nccl, other;
};

inline Apis AddStandardApis(TraceBuilder* b) {
  using C = tf::ApiCategory;
  Apis a;
  a.launch = b->Api("cuLaunchKernel", C::kLaunch, tf::kApiSubmits);
  a.sync = b->Api("cudaStreamSynchronize", C::kSync, tf::kApiMayBlock);
  a.event_sync = b->Api("cuEventSynchronize", C::kSync, tf::kApiMayBlock);
  a.memcpy = b->Api("cudaMemcpy", C::kCopy, tf::kApiSubmits | tf::kApiMayBlock);
  a.memcpy_async = b->Api("cudaMemcpyAsync", C::kCopy, tf::kApiSubmits | tf::kApiAsync);
  a.memset = b->Api("cudaMemset", C::kSet, tf::kApiSubmits | tf::kApiMayBlock);
  a.free = b->Api("cudaFree", C::kFree, tf::kApiMayBlock);
  a.alloc = b->Api("cudaMalloc", C::kAlloc, 0);
  a.nccl = b->Api("ncclAllReduce", C::kNccl, tf::kApiSubmits);
  a.other = b->Api("cuCtxGetLimit", C::kOther, 0);
  return a;
}

inline analyzer::Timeline ReadOrDie(const TraceBuilder& b, const std::string& name = "test.sstrace") {
  auto t = analyzer::ReadTraceBytes(b.Build(), name);
  if (!t.ok()) throw std::runtime_error(std::string(t.status().message()));
  return std::move(*t);
}

inline analyzer::Report AnalyzeOrDie(const TraceBuilder& b,
                                     const analyzer::AnalysisOptions& o = {},
                                     const std::string& name = "test.sstrace") {
  auto r = analyzer::AnalyzeTimeline(ReadOrDie(b, name), o);
  if (!r.ok()) throw std::runtime_error(std::string(r.status().message()));
  return std::move(*r);
}

// Rank `rank` of a torch job of `nranks`, all on `host` (the trace's kRank
// chunk).
inline void AddRank(TraceBuilder* b, int rank, int nranks, const char* host = "node") {
  tf::RankRecord rr{};
  rr.rank = rank;
  rr.local_rank = rank;
  rr.world_size = nranks;
  rr.local_world_size = nranks;
  rr.source = static_cast<uint32_t>(tf::RankSource::kTorch);
  std::strncpy(rr.host, host, sizeof(rr.host) - 1);
  b->Rank(rr);
}

// The NCCL arguments of a call entering at `enter` on `tid` (external id
// `correlation`, 0 none) of rank `rank` of `nranks`: a float sum of `count`
// elements over communicator `comm`, instance `seq`.
inline tf::NcclRecord NcclArgs(uint32_t tid, int64_t enter, uint64_t correlation, tf::NcclKind kind,
                               uint8_t flags, uint64_t comm, uint64_t seq, int rank, int nranks,
                               uint64_t count = 1024) {
  tf::NcclRecord n{};
  n.enter = static_cast<uint64_t>(enter);
  n.correlation = correlation;
  n.comm = comm;
  n.seq = seq;
  n.count = count;
  n.tid = tid;
  n.rank = rank;
  n.nranks = nranks;
  n.peer = -1;
  n.kind = static_cast<uint8_t>(kind);
  n.datatype = 7;
  n.flags = flags;
  n.op = 0;
  return n;
}

// `steps` marked steps ("step") of the benchmarks' synthetic training loop,
// in chunks of 4,096 records: a 200 us input wait, 100 launches of 20 us
// kernels (`kernel_ns`) named `kernel` (6 us apart, 4 us each), and a
// synchronize from train.py:42 until the last kernel ends: 201 calls and
// device ops a step. Kernels under 6 us make the loop launch-bound: the
// device idles between them.
// With `op_ranges`, each launch inside an NVTX range of its own ("op", as
// PyTorch's emit_nvtx gives each operator); without `markers`, no step
// ranges (the steps are then found from the launch sequence).
// With `rank` (0 ≤ rank < nranks), rank `rank` of a data-parallel job: a
// rank record, and at each step's end an all-reduce (its call 5 us, its
// NCCL kernel from 10 us after the call until 50 us after the last rank's
// arrival): rank 1 arrives 100 us late at every one, the others' kernels
// wait for it. 203 calls and device ops a step.
inline TraceBuilder SyntheticSteps(int steps, const std::string& kernel = "kernel", bool op_ranges = false,
                                   bool markers = true, int64_t kernel_ns = 20 * kUs, int rank = -1,
                                   int nranks = 0, int64_t load_jitter_ns = 0) {
  TraceBuilder b;
  b.SetChunkRecords(4096);
  auto api = AddStandardApis(&b);
  const bool ranked = rank >= 0 && rank < nranks;
  if (ranked) AddRank(&b, rank, nranks);
  constexpr int64_t kLate = 100 * kUs;
  const uint32_t site = b.PythonStack({{"train.py", "train_step", 42}});
  int64_t t = 1'000'000'000;
  for (int k = 0; k < steps; ++k) {
    const int64_t step_start = t;
    t += 200 * kUs + (k * k % 11) * load_jitter_ns;  // data loading (steps apart by the jitter)
    int64_t d = t + 10 * kUs;
    for (int i = 0; i < 100; ++i) {
      const int64_t start = std::max(d, t + 10 * kUs);
      if (op_ranges) b.Push(1, static_cast<uint64_t>(t), "op");
      b.Submit(1, api.launch, t, t + 4 * kUs, start, start + kernel_ns, tf::DeviceOpKind::kKernel, kernel);
      if (op_ranges) b.Pop(1, static_cast<uint64_t>(t + 5 * kUs));
      d = start + kernel_ns;
      t += 6 * kUs;
    }
    b.Call(1, api.sync, t, d + 5 * kUs, {.python_stack = site});
    t = d + 20 * kUs;
    if (ranked) {
      const int64_t call = t + (rank == 1 ? kLate : 0);
      const int64_t end = t + kLate + 60 * kUs;
      const uint64_t ext = b.Submit(1, api.nccl, call, call + 5 * kUs, call + 10 * kUs, end,
                                    tf::DeviceOpKind::kNccl, "ncclDevKernel_AllReduce_Sum_f32");
      b.Nccl(NcclArgs(1, call, ext, tf::NcclKind::kAllReduce, tf::kNcclCollective, 0xc0ffee,
                       static_cast<uint64_t>(k), rank, nranks, 1 << 20));
      t = end + 10 * kUs;
    }
    if (markers) b.Range(1, step_start, t, "step");
  }
  return b;
}

// Seven 1 ms steps ("step K") recorded with device timing sampled one step
// in 3 (STALLSCOPE_DEVICE_SAMPLE=3): timing starts on, turns off at step
// 1's begin, on just after step 2's (the lead step), off at step 4's, on
// after step 5's; steps 0, 3 and 6 are fully timed. Each step launches one
// kernel [300, 900) us into it (untimed in steps 1 and 4: flagged, no op);
// steps 1 and 3 read back for 700 us from 200 us in, at train.py:41 and
// train.py:42.
inline TraceBuilder SampledSteps() {
  TraceBuilder b;
  auto api = AddStandardApis(&b);
  const uint32_t late = b.PythonStack({{"train.py", "step", 41}});
  const uint32_t kept = b.PythonStack({{"train.py", "step", 42}});
  for (int k = 0; k < 7; ++k) {
    const int64_t t0 = k * 1000 * kUs;
    b.Range(1, t0, t0 + 1000 * kUs, "step " + std::to_string(k));
    if (k != 1 && k != 4) {
      b.Submit(1, api.launch, t0 + 100 * kUs, t0 + 105 * kUs, t0 + 300 * kUs, t0 + 900 * kUs);
    } else {
      CallOptions o;
      o.flags = tf::kRecordUntimed;
      b.Call(1, api.launch, t0 + 100 * kUs, t0 + 105 * kUs, o);
    }
    if (k == 1 || k == 3) {
      CallOptions o;
      o.python_stack = k == 1 ? late : kept;
      b.Call(1, api.sync, t0 + 200 * kUs, t0 + 900 * kUs, o);
    }
  }
  b.Timing(1000 * kUs, false, 3);
  b.Timing(2000 * kUs + 5 * kUs, true, 3);
  b.Timing(4000 * kUs, false, 3);
  b.Timing(5000 * kUs + 5 * kUs, true, 3);
  return b;
}

inline int64_t CauseOf(const analyzer::CauseNs& c, analyzer::Cause cause) {
  return c[static_cast<int>(cause)];
}

inline int64_t Sum(const analyzer::CauseNs& c) {
  int64_t s = 0;
  for (int64_t v : c) s += v;
  return s;
}

#ifdef STALLSCOPE_TESTDATA_DIR
// The traces a writer from a file by slices is held to its whole reading
// on: each built one written as NAME.sstrace into a new folder under /tmp
// (`prefix`), then the checked-in ones. Remove() deletes the written ones.
struct TracesOnDisk {
  std::string dir;
  std::vector<std::string> paths;
  size_t written = 0;
  void Remove() const {
    for (size_t i = 0; i < written; ++i) unlink(paths[i].c_str());
    rmdir(dir.c_str());
  }
};
inline TracesOnDisk WriteTraces(const std::vector<std::pair<std::string, TraceBuilder>>& built,
                                const std::string& prefix) {
  TracesOnDisk out;
  std::string dir_template = "/tmp/" + prefix + "-XXXXXX";
  if (mkdtemp(dir_template.data()) == nullptr) return out;
  out.dir = dir_template;
  for (const auto& [name, b] : built) {
    out.paths.push_back(out.dir + "/" + name + ".sstrace");
    b.WriteTo(out.paths.back());
  }
  out.written = out.paths.size();
  for (const char* name : {"sync_loop", "format2_sync_loop", "format4_packed_sync_loop"}) {
    out.paths.push_back(std::string(STALLSCOPE_TESTDATA_DIR) + "/" + name + ".sstrace");
  }
  return out;
}
#endif

// The traces a writer from the file by slices (perfetto, sqlite) is held to
// the whole reading's on, `sample` (two streams and threads) among them:
// the calls come in many slices of 16 chunks. The last, "unjoined", holds
// an op that no call submitted: such a writer refuses it. "early op" holds
// an op that starts before its call entered (the Perfetto export refuses
// it). "given up" is to be read in windows of one step.
inline std::vector<std::pair<std::string, TraceBuilder>> FromFileTraces(TraceBuilder sample) {
  std::vector<std::pair<std::string, TraceBuilder>> built;
  built.emplace_back("marked", SyntheticSteps(300).SetPacked(true).SetChunkRecords(64));
  built.emplace_back("unmarked", SyntheticSteps(300, "kernel", false, false).SetChunkRecords(64));
  built.emplace_back("op ranges", SyntheticSteps(60, "gemm", true).SetChunkRecords(50));
  // A data-parallel rank's NCCL calls and kernels.
  built.emplace_back("rank", SyntheticSteps(60, "kernel", false, true, 20 * kUs, 0, 2).SetChunkRecords(32));
  // Besides, an NVTX range on a thread that makes no call, the earliest
  // record (the times' base, rounded down to a whole microsecond).
  sample.Thread(300, "io");
  sample.Range(300, 999'990'000'123, 1'000'500'000'000, "read");
  built.emplace_back("two streams", std::move(sample.SetChunkRecords(3)));
  built.emplace_back("sampled", SampledSteps().SetChunkRecords(16));
  {
    // Another thread's long call while a later step's kernel runs: with
    // windows of one step, the windows' slices give up the steps' spans,
    // and the gaps come again from the start (windows_test: "the steps'
    // spans from the windows' slices, or their own pass").
    TraceBuilder b;
    auto api = AddStandardApis(&b);
    for (int k = 0; k < 12; ++k) {
      const int64_t t0 = 1'000'000'000 + k * 1000 * kUs;
      b.Range(1, t0, t0 + 1000 * kUs, "step " + std::to_string(k));
      b.Submit(1, api.launch, t0 + 100 * kUs, t0 + 110 * kUs, t0 + 200 * kUs, t0 + 900 * kUs);
    }
    b.Call(2, api.other, 1'009'300'000, 1'009'700'000);
    built.emplace_back("given up", std::move(b.SetChunkRecords(3)));
  }
  {
    // Kernels of two threads starting at the same ns on streams 7 and 9,
    // the later call's (stream 9) recorded first, each record in its own
    // chunk: the file's order is not the columns'. Before them, a call
    // whose kernel (stream 11) starts after theirs: where a slice of calls
    // ends after it, its kernel waits for the next slice's.
    TraceBuilder b;
    auto api = AddStandardApis(&b);
    uint32_t cupti = 1;
    uint64_t external = 5000;
    auto launch = [&](uint32_t tid, int64_t enter, uint32_t stream, const std::string& name, int64_t at = 100 * kUs) {
      b.Call(tid, api.launch, enter, enter + 4 * kUs, {.correlation = external});
      const int64_t start = enter - enter % (1000 * kUs) + at;
      b.Device(start, start + 200 * kUs, trace::DeviceOpKind::kKernel, name, cupti, stream);
      b.Correlate(external++, cupti++);
    };
    for (int k = 0; k < 40; ++k) {
      const int64_t t0 = 1'000'000'000 + k * 1000 * kUs;
      b.Range(1, t0, t0 + 1000 * kUs, "step " + std::to_string(k));
      launch(2, t0 + 5 * kUs, 11, "queued", 500 * kUs);
      launch(1, t0 + 30 * kUs, 9, "late");
      launch(2, t0 + 10 * kUs, 7, "early");
      b.Call(1, api.sync, t0 + 50 * kUs, t0 + 310 * kUs);
      // Two kernels starting together at the time the later one's call
      // enters: where a slice of calls ends there, the earlier call's kernel
      // (stream 13) is not settled before the later one's (stream 3).
      launch(2, t0 + 590 * kUs, 13, "wide", 600 * kUs);
      launch(1, t0 + 600 * kUs, 3, "at enter", 600 * kUs);
      b.Call(2, api.other, t0 + 800 * kUs, t0 + 810 * kUs);  // seven calls a step: slices end anywhere in one
    }
    built.emplace_back("starting together", std::move(b.SetChunkRecords(1)));
  }
  for (const bool sync : {false, true}) {
    // The launching thread's long calls, another thread's many short calls
    // meanwhile: idle charged to a call that entered many slices of calls
    // before the gap ends. "long calls": a call that does not synchronize,
    // while the device idles; "long syncs": a synchronize (its rule-1 idle
    // after the kernel it waits for).
    TraceBuilder b;
    auto api = AddStandardApis(&b);
    for (int k = 0; k < 6; ++k) {
      const int64_t t0 = 1'000'000'000 + k * 40'000 * kUs;
      b.Range(1, t0, t0 + 40'000 * kUs, "step " + std::to_string(k));
      b.Submit(1, api.launch, t0 + 10 * kUs, t0 + 20 * kUs, t0 + 30 * kUs, t0 + (sync ? 25'000 : 130) * kUs);
      b.Call(1, sync ? api.sync : api.other, t0 + 200 * kUs, t0 + 30'000 * kUs);
      for (int i = 0; i < 300; ++i) b.Call(2, api.other, t0 + (300 + 90 * i) * kUs, t0 + (310 + 90 * i) * kUs);
      b.Submit(1, api.launch, t0 + 30'100 * kUs, t0 + 30'110 * kUs, t0 + 30'120 * kUs, t0 + 39'000 * kUs);
    }
    built.emplace_back(sync ? "long syncs" : "long calls", std::move(b.SetChunkRecords(4)));
  }
  {
    // A kernel that starts 100 ms before its call entered (two clocks
    // apart), many slices before: a writer that takes the ops as final
    // once their slice of calls is read must not.
    TraceBuilder b = SyntheticSteps(300, "kernel");
    b.SetChunkRecords(64);
    const uint16_t launch = 0;  // AddStandardApis' first
    b.Submit(2, launch, 1'500'000'000, 1'500'005'000, 1'400'000'000, 1'400'010'000, trace::DeviceOpKind::kKernel,
             "early");
    built.emplace_back("early op", std::move(b));
  }
  {
    TraceBuilder b = SyntheticSteps(50, "gemm");
    b.SetChunkRecords(100);
    b.Device(1'000'100'000, 1'000'300'000, trace::DeviceOpKind::kKernel, "no_call", 900001, 7);
    built.emplace_back("unjoined", std::move(b));
  }
  return built;
}

// A trace's report read whole, with its details, and by slices (`sliced`
// as the caller set it up, for a writer from the file; `window_steps` 0:
// the default), both without predictions. Fails unless both reports are
// made, the second by slices with nothing read whole.
inline absl::Status ReportBothWays(const std::string& path, analyzer::Report* whole_report,
                                   analyzer::ProcessAnalysis* whole, analyzer::Report* sliced_report,
                                   analyzer::StreamedProcess* sliced, size_t window_steps = 0) {
  analyzer::AnalysisOptions options;
  options.predict = false;
  auto w = analyzer::AnalyzePaths({path}, options, whole);
  if (!w.ok()) return w.status();
  *whole_report = std::move(*w);
  options.stream = true;
  options.window_steps = window_steps;
  analyzer::ProcessAnalysis unused;
  auto s = analyzer::AnalyzePaths({path}, options, &unused, sliced);
  if (!s.ok()) return s.status();
  if (!sliced->used || !unused.timeline.calls.empty()) return absl::InternalError("not reported by slices");
  *sliced_report = std::move(*s);
  return absl::OkStatus();
}

// Progress calls (slices done, in all) as a writer by slices makes them:
// Ok() when there were some, `done` never fell, `total` never changed,
// and the last call had done == total.
struct ProgressLog {
  std::vector<std::pair<uint64_t, uint64_t>> calls;
  std::function<void(uint64_t, uint64_t)> Callback() {
    return [this](uint64_t done, uint64_t total) { calls.emplace_back(done, total); };
  }
  bool Ok() const {
    if (calls.empty() || calls.back().first != calls.back().second) return false;
    for (size_t i = 1; i < calls.size(); ++i) {
      if (calls[i].first < calls[i - 1].first || calls[i].second != calls[0].second) return false;
    }
    return true;
  }
};

// A trace of FromFileTraces read both ways (ReportBothWays) for a writer
// from the file: the slices keep what an export needs, and "given up" is
// read in windows of one step.
struct ReadForExport {
  explicit ReadForExport(const std::string& path) : given_up(path.find("given up") != std::string::npos) {
    sliced.keep_for_export = true;
    status = ReportBothWays(path, &whole_report, &whole, &sliced_report, &sliced, given_up ? 1 : 0);
  }
  const bool given_up;
  analyzer::Report whole_report, sliced_report;
  analyzer::ProcessAnalysis whole;
  analyzer::StreamedProcess sliced;
  absl::Status status;
};

}  // namespace stallscope::testing
