// The simulated GPU: devices, contexts, streams, events and the device threads
// that run ops in real time. The driver entry points (sim_driver.cc) are thin
// wrappers around this.
#ifndef STALLSCOPE_TESTS_SIMGPU_SIM_ENGINE_H_
#define STALLSCOPE_TESTS_SIMGPU_SIM_ENGINE_H_

#include <stddef.h>
#include <stdint.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "simgpu_hooks.h"

namespace simgpu {

uint64_t NowNs();  // CLOCK_MONOTONIC

// Environment knobs, read once per process.
struct Knobs {
  struct KernelRule {
    std::string glob;
    uint64_t ns;
  };
  std::vector<KernelRule> kernel_rules;  // SIMGPU_KERNEL_US, first match wins
  uint64_t default_kernel_ns = 20000;
  uint64_t launch_latency_ns = 4000;     // SIMGPU_LAUNCH_LATENCY_US
  uint64_t graph_node_ns = 500;          // SIMGPU_GRAPH_NODE_US: a graph node's device cost
  size_t queue_depth = 1024;             // SIMGPU_QUEUE_DEPTH
  double copy_bytes_per_ns = 25.0;       // SIMGPU_COPY_GBPS (1 GB/s = 1 byte/ns)
  int devices = 1;                       // SIMGPU_DEVICES
  std::string trace_path;                // SIMGPU_TRACE, %p expanded
};
const Knobs& GetKnobs();
uint64_t KernelDurationNs(const char* name);
uint64_t CopyDurationNs(uint64_t bytes);    // 2 us + bytes / rate
uint64_t MemsetDurationNs(uint64_t bytes);  // 1 us + bytes / (10 x rate)

enum class OpKind : uint8_t { kKernel, kMemcpy, kMemset, kMarker };

struct Stream;
struct Context;
struct Device;

// One unit of device work. Fields are written by the submitting thread before
// the op is enqueued; started/done/start_ns/end_ns by the device thread under
// the device mutex.
struct Op {
  OpKind kind = OpKind::kMarker;
  bool started = false;
  bool action_pending = false;  // started, data action not yet run
  // finished: the device is past this op (dependants and the stream may
  // proceed). done: it has also been reported to the trace and the observer;
  // host waits return only then, so a CUPTI flush after a sync sees it.
  std::atomic<bool> finished{false};
  std::atomic<bool> done{false};
  bool is_async = false;
  // A host thread waits for this op to start or be done (guarded by the
  // device mutex): only then does its start or end wake the host waiters.
  bool awaited = false;
  const char* name = "";
  Stream* stream = nullptr;
  uint64_t correlation = 0;
  uint64_t enqueue_ns = 0;
  uint32_t host_tid = 0;                  // the enqueuing thread
  uint64_t host_run_delay_ns = ~0ull;     // its run-queue delay then (SIMGPU_TRACE only)
  uint64_t ready_ns = 0;  // enqueue + launch latency
  // A graph node after the first: it starts no sooner than this long after
  // the previous op of its stream ended (SIMGPU_GRAPH_NODE_US).
  uint64_t after_prev_ns = 0;
  uint64_t duration_ns = 0;
  uint64_t start_ns = 0;
  uint64_t target_end_ns = 0;
  uint64_t end_ns = 0;
  uint64_t bytes = 0;
  uint32_t copy_kind = 0, src_kind = 0, dst_kind = 0;
  int32_t grid[3] = {0, 0, 0};
  int32_t block[3] = {0, 0, 0};
  int32_t shared_bytes = 0;
  std::vector<std::shared_ptr<Op>> deps;
  // Data action, run on the device thread when the op starts.
  void* dst = nullptr;
  const void* src = nullptr;
  std::unique_ptr<char[]> staged;  // pageable HtoD source, copied at call time
  uint32_t memset_value = 0;
  uint32_t memset_elem = 0;  // 1, 2 or 4
  size_t memset_count = 0;
  void* free_ptr = nullptr;  // cuMemFreeAsync
  // External end (simgpu_submit_external): see SimgpuExternalOp.
  bool external = false;
  bool external_end_known = false;
  SimgpuExternalOp ext{};
  bool HasAction() const { return dst != nullptr || free_ptr != nullptr; }
  Op() = default;
  Op(const Op&) = delete;
  Op& operator=(const Op&) = delete;
  ~Op() {
    if (external && ext.release != nullptr) ext.release(ext.user);
  }
};
using OpPtr = std::shared_ptr<Op>;

constexpr uint32_t kStreamMagic = 0x5354524d;  // "STRM"
constexpr uint32_t kContextMagic = 0x43545854;
constexpr uint32_t kEventMagic = 0x45564e54;
constexpr uint32_t kFunctionMagic = 0x46554e43;
constexpr uint32_t kModuleMagic = 0x4d4f444c;

struct Stream {
  uint32_t magic = kStreamMagic;
  Context* ctx = nullptr;
  Device* dev = nullptr;
  uint32_t id = 0;
  unsigned flags = 0;
  int priority = 0;
  bool legacy = false;
  bool per_thread = false;
  bool blocking = true;  // false for CU_STREAM_NON_BLOCKING
  bool destroyed = false;
  // Guarded by dev->mu.
  std::deque<OpPtr> queue;  // not yet completed, in order; front may run
  size_t not_started = 0;
  OpPtr tail;  // last op enqueued
  // The graph being captured on this stream (cuStreamBeginCapture), owned by
  // the driver; nullptr when not capturing. Touched by the capturing thread.
  void* capture = nullptr;
};

struct Context {
  uint32_t magic = kContextMagic;
  Device* dev = nullptr;
  uint32_t id = 0;
  unsigned flags = 0;
  bool primary = false;
  bool destroyed = false;
  Stream* legacy = nullptr;
  std::vector<Stream*> streams;  // guarded by dev->mu; includes legacy
};

struct Device {
  int ordinal = 0;
  std::mutex mu;
  std::condition_variable work_cv;  // the device thread waits here
  std::condition_variable host_cv;  // host threads wait here
  int host_waiters = 0;
  // Host waiters woken by every start and end (the drain at exit); the
  // others wait for ops marked `awaited`, or for room in a full queue.
  int any_op_waiters = 0;
  bool kick = false;
  std::atomic<bool> kick_flag{false};
  bool thread_started = false;
  std::vector<Stream*> streams;  // every stream on this device
  Context* primary = nullptr;
  int primary_refs = 0;
  unsigned primary_flags = 0;
  std::atomic<uint64_t> allocated{0};
};

// Locks of objects that live on after a fork: a child has only the forking
// thread, so a lock another thread held at the fork would stay held for
// ever. The engine's fork-child handler re-creates every registered one
// (objects are never freed, so none is stale). Before the first fork, and
// in every process, registration is one append under a lock.
void RegisterForkLock(std::mutex* mu);
void RegisterForkCondition(std::condition_variable* cv);

struct Event {
  Event() { RegisterForkLock(&mu); }
  uint32_t magic = kEventMagic;
  unsigned flags = 0;
  std::mutex mu;  // guards record and dev
  OpPtr record;   // most recent record
  Device* dev = nullptr;
};

struct Module;
struct Function {
  uint32_t magic = kFunctionMagic;
  std::string name;  // never freed: CUPTI records point at it
  // From SIMGPU_KERNEL_US at creation; simgpu_set_function_duration (the
  // simulated cuBLAS) may set it later, from another thread.
  std::atomic<uint64_t> duration_ns{0};
  Module* module = nullptr;
};

struct Module {
  Module() { RegisterForkLock(&mu); }
  uint32_t magic = kModuleMagic;
  std::mutex mu;
  std::map<std::string, Function*> functions;
};

// ---- Engine API ----
int DeviceCount();
void StartDeviceThreads();  // at cuInit, so the first launch does not pay for it
Device* GetDevice(int ordinal);  // nullptr when out of range
Context* NewContext(Device* dev, bool primary, unsigned flags);
Stream* NewStream(Context* ctx, unsigned flags, int priority);
Stream* PerThreadStream(Context* ctx);
uint64_t NextCorrelation();
uint32_t NextStreamId();

// Enqueues op on stream s (blocks while the stream's queue is full), computing
// the implicit legacy-stream dependencies. Calls the observer's on_submit when
// op->correlation != 0.
void Submit(Stream* s, const OpPtr& op);
// Enqueues ops[0..n) on stream s together, under one lock, as one launch
// (a graph launch): the observer's on_submit once, for ops[0]'s correlation.
void SubmitAll(Stream* s, const OpPtr* ops, size_t n);
// Host waits (condition variable, no spin).
void WaitDone(Device* d, const std::vector<OpPtr>& ops);
void WaitStarted(Device* d, const OpPtr& op);
void SyncStream(Stream* s);
void SyncDevice(Device* d);
void SyncAllDevices();
bool StreamIdle(Stream* s);

// Memory ranges: device allocations and pinned host memory.
enum class MemKind : uint8_t { kPageable, kPinned, kRegistered, kDevice };
inline bool IsPinned(MemKind k) { return k == MemKind::kPinned || k == MemKind::kRegistered; }
void AddRange(const void* p, size_t size, MemKind kind);
bool RemoveRange(const void* p, MemKind* kind, size_t* size);
MemKind Classify(const void* p);
// The range holding p: its start, size and kind; false for pageable memory.
bool FindRange(const void* p, uintptr_t* base, size_t* size, MemKind* kind);
// Wakes the device thread (an external op's end became known).
void Kick(Device* d);
uint32_t CuptiMemKind(MemKind k);

void TraceFlush();
// SIMGPU_SYNC_TRACE: a driver call `api` that synchronized with the device
// from start_ns to end_ns (sim_sync_trace.cc).
void SyncTrace(const char* api, uint64_t start_ns, uint64_t end_ns);
void NotifySubmit(uint64_t correlation);

}  // namespace simgpu

#endif  // STALLSCOPE_TESTS_SIMGPU_SIM_ENGINE_H_
