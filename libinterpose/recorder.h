// The recording side: per-thread single-writer buffers of ApiRecords, a writer
// that turns full buffers, CUPTI device records, strings, stacks, the module
// map and clock pairs into chunks of the trace format (common/trace_format.h).
//
// Hot path contract (Record*): no lock, no malloc, no syscall while a thread's
// current buffer has room. A full buffer is handed to the writer under a mutex;
// when the memory budget is spent, records are dropped and counted.
//
// The writer thread starts at the first blocking call or the first full
// buffer, whichever comes first, and then drains every 200 ms: full buffers,
// the published part of every live thread's buffer (a per-buffer watermark
// keeps each record written once), pending strings/stacks/device records and
// the diagnostics counted since the previous drain. A job killed at any point
// leaves a file that is readable up to its last drain. fork/exit/signal
// behaviour: docs/robustness.md.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "trace_format.h"

namespace stallscope {

namespace recorder {
struct UnwindRules;  // fast_unwind.h
}  // namespace recorder

inline constexpr uint32_t kRecordsPerBuffer = 1024;  // 64 KiB of ApiRecords

struct ThreadBuffer {
  std::atomic<uint32_t> count{0};  // published records (release store)
  uint32_t tid = 0;
  uint32_t flushed = 0;  // records already written; touched by the writer only
  ThreadBuffer* next = nullptr;  // free list / full queue link
  trace::ApiRecord records[kRecordsPerBuffer];
};

struct ThreadState {
  ThreadBuffer* buffer = nullptr;
  uint32_t tid = 0;
  uint32_t index = 0;      // dense thread index, for correlation ids
  uint64_t next_corr = 0;  // per-thread correlation sequence
  int nvtx_depth = 0;
  uint64_t step_index = 0;  // the explicit step API's current step
  // Exit tick of this thread's previous recorded call (0 before the first):
  // a call entering more than g_cpu_gap_ticks later samples the CPU clock.
  uint64_t last_exit = 0;
  bool in_hook = false;
  bool registered = false;
  // This thread's /proc/thread-self/schedstat, opened at its first CPU
  // sample and read with pread (-1: not open; -2: unreadable, not retried).
  // A fork child closes the inherited ones and reopens its own.
  int sched_fd = -1;
  // The rules its native stacks are walked by (fast_unwind.h), from its
  // first blocking call on.
  recorder::UnwindRules* unwind = nullptr;
  ThreadState* next_live = nullptr;
};

// Process-wide recorder state. All functions are safe to call from any thread.
namespace recorder {

enum class State : int { kOff = 0, kStarting = 1, kOn = 2, kDisabled = 3 };

// Starts recording on first use (opens the trace file, calibrates the clock,
// loads CUPTI). Returns true when records may be written.
// The memory budget (STALLSCOPE_BUFFER_MB) in bytes: the per-thread record
// buffers, CUPTI's activity buffers and the device records waiting for the
// writer all come out of it.
size_t BudgetBytes();

bool EnsureStarted();

extern std::atomic<int> g_state;
inline bool IsOn() { return g_state.load(std::memory_order_acquire) == int(State::kOn); }

// This thread's state: constant-initialized, initial-exec TLS, so reaching it
// from a hook is a single %fs-relative access.
extern constinit thread_local ThreadState t_self __attribute__((tls_model("initial-exec")));
inline ThreadState& Self() { return t_self; }

// A dense index for this thread, the high bits of its correlation ids. Taken
// at its first submission, before the thread registers (which happens when
// its first record is reserved, as that call returns): two threads' first
// calls must not share an id. Lock-free; registration keeps the index.
uint32_t TakeThreadIndex();

// Reserves the next record slot of this thread's buffer; nullptr when the
// record must be dropped. Commit() publishes it. The slow path registers the
// thread, hands a full buffer to the writer and takes a fresh one.
trace::ApiRecord* ReserveSlow(ThreadState& ts);
inline trace::ApiRecord* Reserve(ThreadState& ts) {
  ThreadBuffer* b = ts.buffer;
  if (__builtin_expect(b != nullptr, 1)) {
    uint32_t c = b->count.load(std::memory_order_relaxed);
    if (__builtin_expect(c < kRecordsPerBuffer, 1)) return &b->records[c];
  }
  return ReserveSlow(ts);
}
inline void Commit(ThreadState& ts) {
  ThreadBuffer* b = ts.buffer;
  b->count.store(b->count.load(std::memory_order_relaxed) + 1, std::memory_order_release);
}

// CPU-time samples (kCpuSched): the launching thread's on/off-CPU split and
// its run-queue delay, read off the hot path. A call whose enter is more than
// kCpuGapNs after the thread's previous exit (ThreadState::last_exit) takes
// one, and so does the exit of every may-block call and of every call longer
// than kCpuGapNs (a launch preempted inside keeps its run-queue delay, which
// would otherwise land in the next long gap). kCpuGapNs is below the
// analyzer's 50 us dispatch threshold, so every gap the analyzer calls long
// ends with a sample.
inline constexpr uint64_t kCpuGapNs = 40'000;
extern uint64_t g_cpu_gap_ticks;  // kCpuGapNs in ticks, set at start-up
inline bool LongGap(const ThreadState& ts, uint64_t now) {
  return now - ts.last_exit > g_cpu_gap_ticks;
}
inline bool LongCall(uint64_t enter, uint64_t exit) { return exit - enter > g_cpu_gap_ticks; }
// Reads this thread's CPU clock (a system call, ~1.3 us), queues a sample and
// returns the tick at which the reading completed (the caller's enter tick).
uint64_t SampleCpuAtEnter(ThreadState& ts);
// Reads this thread's CPU clock and queues a sample at tick `exit`.
void SampleCpuAtExit(ThreadState& ts, uint64_t exit);

// Interns a string (kernel names, NVTX messages, Python files); 0 for null.
uint32_t InternString(const char* s, size_t len);
uint32_t InternString(const char* s);
// A string that may stop being named (an NVTX message): in ring mode it is
// forgotten once no chunk the ring holds can name it, and gets a new id if
// it comes again.
uint32_t InternTransientString(const char* s);

// Captures this thread's native call stack and returns its id (0 on failure).
uint32_t CaptureStack();
// Interns a Python stack: `frames` pairs of (string id of "file\tfunction",
// line), innermost first. Returns its stack id.
uint32_t InternPythonStack(const uint64_t* pairs, size_t frames);

// Called by the CUPTI source from its buffer-completed callback: one
// buffer's correlation and device records, queued together (a drain never
// sees a device record without the acknowledgement that came before it).
void AddActivity(const trace::CorrelationRecord* corr, size_t nc, const trace::DeviceRecord* dev,
                 size_t nd);
// The flight recorder's step-time regression trigger (common/step_regression.h):
// true in ring mode with the trigger on. The first thread to begin a step is
// the one watched: ClaimStepThread() is true on it. StepBegan() takes its
// step begins and asks the writer for a dump when the steps regressed.
bool WatchingSteps();
bool ClaimStepThread();
void StepBegan(uint64_t ticks);
void AddNvtx(const trace::NvtxRecord& rec);
// Queues the NCCL arguments of a hooked NCCL call (nccl_state.cc).
void AddNccl(const trace::NcclRecord& rec);
void CountDiagnostic(trace::DiagnosticId id, uint64_t n = 1);

// Final flush: CUPTI, every thread's buffer, the module map, an end marker.
void Shutdown();

}  // namespace recorder
}  // namespace stallscope
