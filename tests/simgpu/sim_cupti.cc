// The simulated libcupti.so.13: the activity API subset stallscope uses,
// producing the toolkit's record structs (CUpti_ActivityKernel10,
// CUpti_ActivityMemcpy6, CUpti_ActivityMemset4,
// CUpti_ActivityExternalCorrelation) from the simulated device's actual op
// times. It finds the simulated libcuda.so.1 at run time (dlopen RTLD_NOLOAD,
// dlsym simgpu_set_observer); the two libraries never link to each other.
//
// As NVIDIA's CUPTI does, records are written as they are produced straight
// into a buffer the client provides (request callback, called on the thread
// that produced the record): when it is full the next record asks for
// another, and a record that gets none is dropped and counted. Filled buffers
// are handed back (completion callback) by a flusher thread as soon as they
// fill, every ~100 ms (with the one being filled), and on
// cuptiActivityFlushAll. The simulator holds no records of its own: what the
// records take is the client's buffers. Timestamps are CLOCK_MONOTONIC ns
// unless a timestamp callback is registered.
#include <dlfcn.h>
#include <pthread.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <new>
#include <thread>
#include <vector>

#pragma GCC visibility push(default)
#include <cupti_activity.h>
#include <cupti_callbacks.h>
#include <cupti_result.h>
#include <cupti_runtime_cbid.h>
#include <cupti_version.h>
#pragma GCC visibility pop

#include "simgpu_hooks.h"

static_assert(static_cast<int>(SIMGPU_COPY_HTOD) == static_cast<int>(CUPTI_ACTIVITY_MEMCPY_KIND_HTOD));
static_assert(static_cast<int>(SIMGPU_COPY_DTOH) == static_cast<int>(CUPTI_ACTIVITY_MEMCPY_KIND_DTOH));
static_assert(static_cast<int>(SIMGPU_COPY_DTOD) == static_cast<int>(CUPTI_ACTIVITY_MEMCPY_KIND_DTOD));
static_assert(static_cast<int>(SIMGPU_COPY_HTOH) == static_cast<int>(CUPTI_ACTIVITY_MEMCPY_KIND_HTOH));
static_assert(static_cast<int>(SIMGPU_MEM_PAGEABLE) == static_cast<int>(CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE));
static_assert(static_cast<int>(SIMGPU_MEM_PINNED) == static_cast<int>(CUPTI_ACTIVITY_MEMORY_KIND_PINNED));
static_assert(static_cast<int>(SIMGPU_MEM_DEVICE) == static_cast<int>(CUPTI_ACTIVITY_MEMORY_KIND_DEVICE));
static_assert(sizeof(CUpti_ActivityKernel10) % 8 == 0);
static_assert(sizeof(CUpti_ActivityMemcpy6) % 8 == 0);
static_assert(sizeof(CUpti_ActivityMemset4) % 8 == 0);
static_assert(sizeof(CUpti_ActivityExternalCorrelation) % 8 == 0);
static_assert(sizeof(CUpti_ActivityAPI) % 8 == 0);

namespace {

constexpr int kFlushPeriodMs = 100;
constexpr int kKindSlots = 64;
static_assert(CUPTI_ACTIVITY_KIND_COUNT <= kKindSlots);

uint64_t MonoNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ULL + static_cast<uint64_t>(ts.tv_nsec);
}

// One of the client's buffers.
struct Buffer {
  uint8_t* data = nullptr;
  size_t size = 0;
  size_t used = 0;
  size_t max_records = 0;  // 0: as many as fit
  size_t records = 0;
};

struct State {
  std::mutex mu;  // guards cur and full
  Buffer cur;     // being filled
  std::vector<Buffer> full;  // filled, for the flusher to hand back
  // As NVIDIA's CUPTI hands over a buffer once it is full, not only every
  // period: the flusher is woken when one fills.
  std::condition_variable filled;
  std::mutex deliver_mu;  // one delivery at a time
  std::atomic<CUpti_BuffersCallbackRequestFunc> request{nullptr};
  std::atomic<CUpti_BuffersCallbackCompleteFunc> complete{nullptr};
  std::atomic<bool> enabled[kKindSlots];
  std::atomic<CUpti_TimestampCallbackFunc> ts_cb{nullptr};
  // The client's clock as a linear function of CLOCK_MONOTONIC: an anchor
  // pair taken at registration and a rate (callback units per ns), measured
  // again as time passes (see Ts()).
  std::mutex ts_mu;  // guards the five below
  uint64_t ts_mono0 = 0;
  uint64_t ts_cb0 = 0;
  uint64_t ts_width0 = 0;  // the anchor's uncertainty (ns)
  double ts_rate = 1.0;
  uint64_t ts_measured = 0;  // CLOCK_MONOTONIC of the last rate measurement
  std::atomic<size_t> dropped{0};
  std::mutex connect_mu;
  bool connected = false;
  std::atomic<bool> flusher_started{false};
  std::atomic<bool> exiting{false};  // stop periodic deliveries at exit
  std::atomic<int64_t> grid_id{0};
  // The simulated driver's API-call scope (simgpu_api_begin/end), resolved
  // by Connect().
  SimgpuApiBeginFn api_begin = nullptr;
  SimgpuApiEndFn api_end = nullptr;
  // Runtime calls left out by cuptiActivityEnableRuntimeApi(cbid, 0).
  std::atomic<bool> runtime_off[CUPTI_RUNTIME_TRACE_CBID_SIZE];
  // Whether a device kind was on when an op was submitted, as NVIDIA's CUPTI
  // decides (an op submitted while its kind was on is reported even when it
  // completes after the kind was turned off, and one submitted while off is
  // not): each enable or disable, from the correlation id after the newest
  // submission then.
  struct Turn {
    CUpti_ActivityKind kind;
    uint64_t from_correlation;
    bool on;
  };
  std::atomic<uint64_t> newest_submission{0};
  std::mutex turns_mu;
  std::vector<Turn> turns;  // in order
  std::atomic<bool> any_turns{false};
  State() {
    for (auto& e : enabled) e.store(false);
    for (auto& e : runtime_off) e.store(false);
  }
};
// Made on first use and never destroyed (threads may outlive exit). Not a
// function-local static: a fork while another thread holds its
// initialization guard would leave the child waiting on it for ever (its
// fork handler calls S()); a child copied mid-construction makes its own.
std::atomic<State*> g_state{nullptr};
State& S() {
  State* s = g_state.load(std::memory_order_acquire);
  if (s != nullptr) return *s;
  State* fresh = new State();
  if (g_state.compare_exchange_strong(s, fresh, std::memory_order_acq_rel)) return *fresh;
  delete fresh;  // another thread made it first
  return *s;
}

thread_local std::vector<uint64_t> t_ext_stack[CUPTI_EXTERNAL_CORRELATION_KIND_SIZE];

bool Enabled(CUpti_ActivityKind k) {
  return k >= 0 && k < kKindSlots && S().enabled[k].load(std::memory_order_relaxed);
}

bool IsDeviceKind(CUpti_ActivityKind k) {
  return k == CUPTI_ACTIVITY_KIND_KERNEL || k == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL ||
         k == CUPTI_ACTIVITY_KIND_MEMCPY || k == CUPTI_ACTIVITY_KIND_MEMSET;
}

void RecordTurn(CUpti_ActivityKind k, bool on) {
  State& s = S();
  std::lock_guard<std::mutex> lk(s.turns_mu);
  s.turns.push_back({k, s.newest_submission.load() + 1, on});
  if (!on) s.any_turns.store(true);  // until a kind is turned off, on at completion is on at submission
}

// Whether kind `k` was on when the op with `correlation` was submitted.
bool EnabledAtSubmit(CUpti_ActivityKind k, uint64_t correlation) {
  State& s = S();
  if (correlation == 0 || !s.any_turns.load(std::memory_order_relaxed)) return Enabled(k);
  std::lock_guard<std::mutex> lk(s.turns_mu);
  for (auto t = s.turns.rbegin(); t != s.turns.rend(); ++t)
    if (t->kind == k && t->from_correlation <= correlation) return t->on;
  return false;  // submitted before the kind was first enabled
}

// One (CLOCK_MONOTONIC, callback) pair: the callback's value and the
// midpoint of the two monotonic reads around it, tightest of `tries`;
// returns the pair's width (its uncertainty).
uint64_t ClockPair(CUpti_TimestampCallbackFunc func, int tries, uint64_t* mono, uint64_t* cb) {
  *mono = *cb = 0;
  uint64_t best = UINT64_MAX;
  for (int i = 0; i < tries; ++i) {
    uint64_t a = MonoNs();
    uint64_t c = func();
    uint64_t b = MonoNs();
    if (b - a < best) {
      best = b - a;
      *mono = a + (b - a) / 2;
      *cb = c;
    }
  }
  return best;
}

// Callback units per ns between the anchor and (m, c, width). A rate within
// the measurement's uncertainty of 1 is a nanosecond clock's: it is taken as
// exactly 1, so that durations stay exact.
double ClockRate(const State& s, uint64_t m, uint64_t c, uint64_t width) {
  if (m <= s.ts_mono0) return 1.0;
  double span = static_cast<double>(m - s.ts_mono0);
  double rate = static_cast<double>(static_cast<int64_t>(c - s.ts_cb0)) / span;
  return std::fabs(rate - 1.0) <= static_cast<double>(s.ts_width0 + width) / span ? 1.0 : rate;
}

constexpr uint64_t kRateRemeasureNs = 100ULL * 1000000ULL;

// A CLOCK_MONOTONIC time in the client's clock. NVIDIA's CUPTI converts GPU
// timestamps into the registered callback's timestamps by linear
// interpolation (cupti_activity.h, cuptiActivityRegisterTimestampCallback),
// so records follow the callback's unit as well as its origin: a callback
// may return raw TSC ticks (Kineto's does), not ns. Hence a linear map; its
// rate is measured again (against the registration anchor, so ever more
// precisely) at most every 100 ms.
uint64_t Ts(uint64_t mono) {
  State& s = S();
  if (s.ts_cb.load(std::memory_order_relaxed) == nullptr) return mono;
  std::lock_guard<std::mutex> lk(s.ts_mu);
  CUpti_TimestampCallbackFunc func = s.ts_cb.load();
  if (MonoNs() - s.ts_measured >= kRateRemeasureNs) {
    uint64_t m, c;
    uint64_t width = ClockPair(func, 3, &m, &c);
    s.ts_rate = ClockRate(s, m, c, width);
    s.ts_measured = m;
  }
  double since = static_cast<double>(static_cast<int64_t>(mono - s.ts_mono0));
  return s.ts_cb0 + static_cast<uint64_t>(std::llround(since * s.ts_rate));
}

size_t RecordSize(CUpti_ActivityKind kind) {
  switch (kind) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: return sizeof(CUpti_ActivityKernel10);
    case CUPTI_ACTIVITY_KIND_MEMCPY: return sizeof(CUpti_ActivityMemcpy6);
    case CUPTI_ACTIVITY_KIND_MEMSET: return sizeof(CUpti_ActivityMemset4);
    case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION:
      return sizeof(CUpti_ActivityExternalCorrelation);
    case CUPTI_ACTIVITY_KIND_RUNTIME: return sizeof(CUpti_ActivityAPI);
    default: return 0;
  }
}

bool Fits(const Buffer& b, size_t size) {
  return b.data != nullptr && b.used + size <= b.size &&
         (b.max_records == 0 || b.records < b.max_records);
}

void Append(const void* rec, size_t size) {
  State& s = S();
  std::lock_guard<std::mutex> lk(s.mu);
  if (!Fits(s.cur, size)) {
    if (s.cur.data != nullptr) {
      s.full.push_back(s.cur);
      s.cur = Buffer{};
      s.filled.notify_one();
    }
    CUpti_BuffersCallbackRequestFunc request = s.request.load();
    if (request != nullptr) {
      Buffer b;
      request(&b.data, &b.size, &b.max_records);
      if (b.data != nullptr) {
        if (Fits(b, size)) {
          s.cur = b;
        } else {
          s.full.push_back(b);  // too small for one record: handed back empty
          s.filled.notify_one();
        }
      }
    }
    if (s.cur.data == nullptr) {  // no client, or it declined
      s.dropped.fetch_add(1);
      return;
    }
  }
  memcpy(s.cur.data + s.cur.used, rec, size);
  s.cur.used += size;
  s.cur.records++;
}

// Hands the filled buffers and the one being filled back to the client.
// Periodic deliveries stop once the process has started to exit (the
// client's state may be going away); explicit flushes always deliver.
void Deliver(bool periodic) {
  State& s = S();
  std::lock_guard<std::mutex> dl(s.deliver_mu);
  if (periodic && s.exiting.load()) return;
  CUpti_BuffersCallbackCompleteFunc complete = s.complete.load();
  if (complete == nullptr) return;
  std::vector<Buffer> out;
  {
    std::lock_guard<std::mutex> lk(s.mu);
    out.swap(s.full);
    if (s.cur.data != nullptr && s.cur.used > 0) {
      out.push_back(s.cur);
      s.cur = Buffer{};
    }
  }
  for (const Buffer& b : out) complete(nullptr, 0, b.data, b.size, b.used);
}

void FlusherLoop() {
  pthread_setname_np(pthread_self(), "simcupti-flush");
  for (;;) {
    State& s = S();
    bool any;
    {
      std::unique_lock<std::mutex> lk(s.mu);
      // Once the process exits, periodic deliveries stop: then only the
      // period wakes the flusher (no spinning on filled buffers).
      s.filled.wait_for(lk, std::chrono::milliseconds(kFlushPeriodMs),
                        [&s] { return !s.exiting.load() && !s.full.empty(); });
      any = !s.full.empty() || s.cur.used > 0;
    }
    if (any) Deliver(/*periodic=*/true);
  }
}

// ---- observer callbacks, called by the simulated driver ----
void OnSubmit(uint64_t correlation, void*) {
  std::atomic<uint64_t>& newest = S().newest_submission;
  for (uint64_t seen = newest.load(std::memory_order_relaxed);
       correlation > seen && !newest.compare_exchange_weak(seen, correlation);) {
  }
  if (!Enabled(CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION)) return;
  for (int k = 0; k < CUPTI_EXTERNAL_CORRELATION_KIND_SIZE; ++k) {
    const std::vector<uint64_t>& st = t_ext_stack[k];
    if (st.empty()) continue;
    CUpti_ActivityExternalCorrelation r;
    memset(&r, 0, sizeof r);
    r.kind = CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION;
    r.externalKind = static_cast<CUpti_ExternalCorrelationKind>(k);
    r.externalId = st.back();
    r.correlationId = static_cast<uint32_t>(correlation);
    Append(&r, sizeof r);
  }
}

void OnComplete(const SimgpuOpRecord* op, void*) {
  if (op == nullptr || op->size < sizeof(SimgpuOpRecord)) return;
  switch (op->kind) {
    case SIMGPU_OP_KERNEL: {
      CUpti_ActivityKind kind;
      if (EnabledAtSubmit(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, op->correlation)) {
        kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
      } else if (EnabledAtSubmit(CUPTI_ACTIVITY_KIND_KERNEL, op->correlation)) {
        kind = CUPTI_ACTIVITY_KIND_KERNEL;
      } else {
        return;
      }
      CUpti_ActivityKernel10 r;
      memset(&r, 0, sizeof r);
      r.kind = kind;
      r.registersPerThread = 32;
      r.start = Ts(op->start_ns);
      r.end = Ts(op->end_ns);
      r.completed = r.end;
      r.deviceId = op->device;
      r.contextId = op->context_id;
      r.streamId = op->stream_id;
      r.gridX = op->grid[0];
      r.gridY = op->grid[1];
      r.gridZ = op->grid[2];
      r.blockX = op->block[0];
      r.blockY = op->block[1];
      r.blockZ = op->block[2];
      r.dynamicSharedMemory = op->dynamic_shared_bytes;
      r.correlationId = static_cast<uint32_t>(op->correlation);
      r.gridId = S().grid_id.fetch_add(1) + 1;
      r.name = op->name;  // valid for the process lifetime
      r.queued = Ts(op->queued_ns);
      r.submitted = Ts(op->queued_ns);
      r.launchType = CUPTI_ACTIVITY_LAUNCH_TYPE_REGULAR;
      r.channelType = CUPTI_CHANNEL_TYPE_COMPUTE;
      r.clusterX = r.clusterY = r.clusterZ = 1;
      Append(&r, sizeof r);
      break;
    }
    case SIMGPU_OP_MEMCPY: {
      if (!EnabledAtSubmit(CUPTI_ACTIVITY_KIND_MEMCPY, op->correlation)) return;
      CUpti_ActivityMemcpy6 r;
      memset(&r, 0, sizeof r);
      r.kind = CUPTI_ACTIVITY_KIND_MEMCPY;
      r.copyKind = static_cast<uint8_t>(op->copy_kind);
      r.srcKind = static_cast<uint8_t>(op->src_kind);
      r.dstKind = static_cast<uint8_t>(op->dst_kind);
      r.flags = op->is_async ? CUPTI_ACTIVITY_FLAG_MEMCPY_ASYNC : 0;
      r.bytes = op->bytes;
      r.start = Ts(op->start_ns);
      r.end = Ts(op->end_ns);
      r.deviceId = op->device;
      r.contextId = op->context_id;
      r.streamId = op->stream_id;
      r.correlationId = static_cast<uint32_t>(op->correlation);
      r.channelType = CUPTI_CHANNEL_TYPE_ASYNC_MEMCPY;
      r.copyCount = 1;
      Append(&r, sizeof r);
      break;
    }
    case SIMGPU_OP_MEMSET: {
      if (!EnabledAtSubmit(CUPTI_ACTIVITY_KIND_MEMSET, op->correlation)) return;
      CUpti_ActivityMemset4 r;
      memset(&r, 0, sizeof r);
      r.kind = CUPTI_ACTIVITY_KIND_MEMSET;
      r.value = op->memset_value;
      r.bytes = op->bytes;
      r.start = Ts(op->start_ns);
      r.end = Ts(op->end_ns);
      r.deviceId = op->device;
      r.contextId = op->context_id;
      r.streamId = op->stream_id;
      r.correlationId = static_cast<uint32_t>(op->correlation);
      r.flags = op->is_async ? CUPTI_ACTIVITY_FLAG_MEMSET_ASYNC : 0;
      r.memoryKind = static_cast<uint16_t>(op->dst_kind);
      r.channelType = CUPTI_CHANNEL_TYPE_ASYNC_MEMCPY;
      Append(&r, sizeof r);
      break;
    }
    default: break;
  }
}

// ---- runtime API calls, reported by the simulated libcudart.so.13 ----
// As NVIDIA's CUPTI: each runtime call gets a correlation id of its own,
// which the kernel/memcpy/memset records of the work it submits carry
// (cupti_activity.h, CUpti_ActivityAPI::correlationId), and an external
// correlation record per pushed id is made for the call.
uint64_t OnApiEnter(uint32_t cbid) {
  State& s = S();
  const uint64_t correlation = s.api_begin();
  OnSubmit(correlation, nullptr);
  return correlation;
}

void OnApiExit(uint32_t cbid, uint64_t correlation, uint64_t start_ns, uint64_t end_ns,
               uint32_t result) {
  State& s = S();
  s.api_end(correlation);
  if (!Enabled(CUPTI_ACTIVITY_KIND_RUNTIME)) return;
  if (cbid < CUPTI_RUNTIME_TRACE_CBID_SIZE && s.runtime_off[cbid].load(std::memory_order_relaxed)) {
    return;
  }
  CUpti_ActivityAPI r;
  memset(&r, 0, sizeof r);
  r.kind = CUPTI_ACTIVITY_KIND_RUNTIME;
  r.cbid = cbid;
  r.start = Ts(start_ns);
  r.end = Ts(end_ns);
  r.processId = static_cast<uint32_t>(getpid());
  // NVIDIA's CUPTI reports the pthread id, truncated to 32 bits.
  r.threadId = static_cast<uint32_t>(pthread_self());
  r.correlationId = static_cast<uint32_t>(correlation);
  r.returnValue = result;
  Append(&r, sizeof r);
}

const SimgpuApiObserver kApiObserver = {sizeof(SimgpuApiObserver), OnApiEnter, OnApiExit};

// Installs (on) or removes the runtime observer in the simulated runtime,
// when the process has loaded it; returns whether it is there.
bool SetRuntimeObserver(bool on) {
  void* h = dlopen("libcudart.so.13", RTLD_NOLOAD | RTLD_NOW);
  if (h == nullptr) return false;
  auto set = reinterpret_cast<SimgpuSetApiObserverFn>(
      dlsym(h, "simgpu_cudart_set_api_observer"));
  dlclose(h);  // balances the NOLOAD open; the runtime stays loaded
  if (set == nullptr) return false;  // not the simulated runtime
  return set(on ? &kApiObserver : nullptr) == 0;
}

// Registers with the simulated driver (once it is loaded).
bool Connect() {
  State& s = S();
  std::lock_guard<std::mutex> lk(s.connect_mu);
  if (s.connected) return true;
  void* h = dlopen("libcuda.so.1", RTLD_NOLOAD | RTLD_NOW);
  if (h == nullptr) h = dlopen("libcuda.so.1", RTLD_NOW);
  if (h == nullptr) return false;
  auto set = reinterpret_cast<SimgpuSetObserverFn>(dlsym(h, "simgpu_set_observer"));
  if (set == nullptr) return false;  // not the simulated driver
  s.api_begin = reinterpret_cast<SimgpuApiBeginFn>(dlsym(h, "simgpu_api_begin"));
  s.api_end = reinterpret_cast<SimgpuApiEndFn>(dlsym(h, "simgpu_api_end"));
  if (s.api_begin == nullptr || s.api_end == nullptr) return false;
  SimgpuObserver o;
  o.size = sizeof o;
  o.on_submit = OnSubmit;
  o.on_complete = OnComplete;
  o.user = nullptr;
  if (set(&o) != 0) return false;
  s.connected = true;
  return true;
}

void StartFlusher() {
  if (!S().flusher_started.exchange(true)) std::thread(FlusherLoop).detach();
}

void OnExit() {
  State& s = S();
  std::lock_guard<std::mutex> dl(s.deliver_mu);  // wait for a delivery in flight
  s.exiting.store(true);
}

// A fork child has only the forking thread: a lock another thread held at
// the fork (the flusher delivering, a launching thread writing a record)
// would stay held for ever, and the child's exit waits on deliver_mu. The
// child gets fresh locks, no flusher (started again on demand) and none of
// the parent's buffers (the parent hands them back; the old vector,
// possibly half-way through a push, is left as it is).
void ResetAfterFork() {
  if (g_state.load() == nullptr) return;  // nothing made yet: nothing inherited
  State& s = S();
  new (&s.mu) std::mutex();
  new (&s.deliver_mu) std::mutex();
  new (&s.connect_mu) std::mutex();
  new (&s.ts_mu) std::mutex();
  new (&s.cur) Buffer();
  new (&s.full) std::vector<Buffer>();
  new (&s.filled) std::condition_variable();
  s.flusher_started.store(false);
  s.exiting.store(false);
}

__attribute__((constructor)) void CuptiInit() {
  atexit(OnExit);
  pthread_atfork(nullptr, nullptr, ResetAfterFork);
}

bool SupportedKind(CUpti_ActivityKind kind) { return RecordSize(kind) != 0; }

struct ResultName {
  CUptiResult code;
  const char* name;
};
const ResultName kResults[] = {
    {CUPTI_SUCCESS, "CUPTI_SUCCESS"},
    {CUPTI_ERROR_INVALID_PARAMETER, "CUPTI_ERROR_INVALID_PARAMETER"},
    {CUPTI_ERROR_INVALID_DEVICE, "CUPTI_ERROR_INVALID_DEVICE"},
    {CUPTI_ERROR_INVALID_CONTEXT, "CUPTI_ERROR_INVALID_CONTEXT"},
    {CUPTI_ERROR_INVALID_OPERATION, "CUPTI_ERROR_INVALID_OPERATION"},
    {CUPTI_ERROR_OUT_OF_MEMORY, "CUPTI_ERROR_OUT_OF_MEMORY"},
    {CUPTI_ERROR_API_NOT_IMPLEMENTED, "CUPTI_ERROR_API_NOT_IMPLEMENTED"},
    {CUPTI_ERROR_MAX_LIMIT_REACHED, "CUPTI_ERROR_MAX_LIMIT_REACHED"},
    {CUPTI_ERROR_NOT_READY, "CUPTI_ERROR_NOT_READY"},
    {CUPTI_ERROR_NOT_COMPATIBLE, "CUPTI_ERROR_NOT_COMPATIBLE"},
    {CUPTI_ERROR_NOT_INITIALIZED, "CUPTI_ERROR_NOT_INITIALIZED"},
    {CUPTI_ERROR_QUEUE_EMPTY, "CUPTI_ERROR_QUEUE_EMPTY"},
    {CUPTI_ERROR_INVALID_HANDLE, "CUPTI_ERROR_INVALID_HANDLE"},
    {CUPTI_ERROR_INVALID_KIND, "CUPTI_ERROR_INVALID_KIND"},
    {CUPTI_ERROR_NOT_SUPPORTED, "CUPTI_ERROR_NOT_SUPPORTED"},
    {CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED,
     "CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED"},
    {CUPTI_ERROR_UNKNOWN, "CUPTI_ERROR_UNKNOWN"},
};

}  // namespace

extern "C" {

CUptiResult CUPTIAPI cuptiGetVersion(uint32_t* version) {
  if (version == nullptr) return CUPTI_ERROR_INVALID_PARAMETER;
  *version = CUPTI_API_VERSION;
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiGetResultString(CUptiResult result, const char** str) {
  if (str == nullptr) return CUPTI_ERROR_INVALID_PARAMETER;
  for (const ResultName& r : kResults) {
    if (r.code == result) {
      *str = r.name;
      return CUPTI_SUCCESS;
    }
  }
  *str = "CUPTI_ERROR_UNKNOWN";
  return CUPTI_ERROR_INVALID_PARAMETER;
}

CUptiResult CUPTIAPI cuptiGetTimestamp(uint64_t* timestamp) {
  if (timestamp == nullptr) return CUPTI_ERROR_INVALID_PARAMETER;
  CUpti_TimestampCallbackFunc cb = S().ts_cb.load();
  *timestamp = cb != nullptr ? cb() : MonoNs();
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityRegisterTimestampCallback(CUpti_TimestampCallbackFunc func) {
  if (func == nullptr) return CUPTI_ERROR_INVALID_PARAMETER;
  // Anchor pair now, and a first rate from a second pair 1 ms later (Ts()
  // refines it as the session goes on).
  State& s = S();
  std::lock_guard<std::mutex> lk(s.ts_mu);
  uint64_t m1, c1;
  s.ts_width0 = ClockPair(func, 5, &s.ts_mono0, &s.ts_cb0);
  std::this_thread::sleep_for(std::chrono::milliseconds(1));
  uint64_t width1 = ClockPair(func, 5, &m1, &c1);
  s.ts_rate = ClockRate(s, m1, c1, width1);
  s.ts_measured = m1;
  s.ts_cb.store(func);
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityRegisterCallbacks(CUpti_BuffersCallbackRequestFunc req,
                                                    CUpti_BuffersCallbackCompleteFunc done) {
  if (req == nullptr || done == nullptr) return CUPTI_ERROR_INVALID_PARAMETER;
  S().request.store(req);
  S().complete.store(done);
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityEnable(CUpti_ActivityKind kind) {
  if (kind <= CUPTI_ACTIVITY_KIND_INVALID || kind >= CUPTI_ACTIVITY_KIND_COUNT) {
    return CUPTI_ERROR_INVALID_KIND;
  }
  if (!SupportedKind(kind)) return CUPTI_ERROR_NOT_COMPATIBLE;
  if (!Connect()) return CUPTI_ERROR_NOT_INITIALIZED;
  S().enabled[kind].store(true);
  if (IsDeviceKind(kind)) RecordTurn(kind, true);
  // Runtime calls are reported only while RUNTIME is enabled: otherwise the
  // runtime does not call out at all. A runtime loaded after this call is
  // not observed.
  if (kind == CUPTI_ACTIVITY_KIND_RUNTIME) SetRuntimeObserver(true);
  StartFlusher();
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityDisable(CUpti_ActivityKind kind) {
  if (kind <= CUPTI_ACTIVITY_KIND_INVALID || kind >= CUPTI_ACTIVITY_KIND_COUNT) {
    return CUPTI_ERROR_INVALID_KIND;
  }
  if (!SupportedKind(kind)) return CUPTI_ERROR_NOT_COMPATIBLE;
  S().enabled[kind].store(false);
  if (IsDeviceKind(kind)) RecordTurn(kind, false);
  if (kind == CUPTI_ACTIVITY_KIND_RUNTIME) SetRuntimeObserver(false);
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityFlushAll(uint32_t flag) {
  if (S().request.load() == nullptr) return CUPTI_ERROR_INVALID_OPERATION;
  Deliver(/*periodic=*/false);
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityGetNextRecord(uint8_t* buffer, size_t valid,
                                                CUpti_Activity** record) {
  if (buffer == nullptr || record == nullptr) return CUPTI_ERROR_INVALID_PARAMETER;
  size_t off;
  if (*record == nullptr) {
    off = 0;
  } else {
    uint8_t* cur = reinterpret_cast<uint8_t*>(*record);
    if (cur < buffer || cur >= buffer + valid) return CUPTI_ERROR_INVALID_PARAMETER;
    CUpti_ActivityKind k;
    memcpy(&k, cur, sizeof k);
    size_t rs = RecordSize(k);
    if (rs == 0) return CUPTI_ERROR_INVALID_KIND;
    off = static_cast<size_t>(cur - buffer) + rs;
  }
  if (off >= valid) return CUPTI_ERROR_MAX_LIMIT_REACHED;
  CUpti_ActivityKind k;
  if (off + sizeof k > valid) return CUPTI_ERROR_INVALID_KIND;
  memcpy(&k, buffer + off, sizeof k);
  size_t rs = RecordSize(k);
  if (rs == 0 || off + rs > valid) return CUPTI_ERROR_INVALID_KIND;
  *record = reinterpret_cast<CUpti_Activity*>(buffer + off);
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityGetNumDroppedRecords(CUcontext context, uint32_t streamId,
                                                       size_t* dropped) {
  if (dropped == nullptr) return CUPTI_ERROR_INVALID_PARAMETER;
  *dropped = S().dropped.exchange(0);
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityPushExternalCorrelationId(CUpti_ExternalCorrelationKind kind,
                                                            uint64_t id) {
  if (kind <= CUPTI_EXTERNAL_CORRELATION_KIND_INVALID ||
      kind >= CUPTI_EXTERNAL_CORRELATION_KIND_SIZE) {
    return CUPTI_ERROR_INVALID_PARAMETER;
  }
  t_ext_stack[kind].push_back(id);
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityPopExternalCorrelationId(CUpti_ExternalCorrelationKind kind,
                                                           uint64_t* lastId) {
  if (kind <= CUPTI_EXTERNAL_CORRELATION_KIND_INVALID ||
      kind >= CUPTI_EXTERNAL_CORRELATION_KIND_SIZE) {
    return CUPTI_ERROR_INVALID_PARAMETER;
  }
  std::vector<uint64_t>& st = t_ext_stack[kind];
  if (st.empty()) return CUPTI_ERROR_QUEUE_EMPTY;
  if (lastId != nullptr) *lastId = st.back();
  st.pop_back();
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityEnableLatencyTimestamps(uint8_t enable) {
  return CUPTI_SUCCESS;  // queued/submitted are always filled in
}

// Device-side event timestamps: CUDA events carry the simulated device's
// times already.
CUptiResult CUPTIAPI cuptiActivityEnableCudaEventDeviceTimestamps(uint8_t enable) {
  return CUPTI_SUCCESS;
}

// Driver API records are not produced (README.md lists the kinds that are).
CUptiResult CUPTIAPI cuptiActivityEnableDriverApi(CUpti_CallbackId cbid, uint8_t enable) {
  return CUPTI_ERROR_NOT_SUPPORTED;
}
// Leaves one runtime function's records out (enable 0) or back in; torch's
// Kineto leaves cudaGetDevice out this way.
CUptiResult CUPTIAPI cuptiActivityEnableRuntimeApi(CUpti_CallbackId cbid, uint8_t enable) {
  if (cbid == CUPTI_RUNTIME_TRACE_CBID_INVALID) return CUPTI_SUCCESS;
  if (cbid >= CUPTI_RUNTIME_TRACE_CBID_SIZE) return CUPTI_ERROR_INVALID_PARAMETER;
  S().runtime_off[cbid].store(enable == 0);
  return CUPTI_SUCCESS;
}

// Buffer and pool sizes: accepted and ignored (records are written straight
// into the client's buffers; the simulator has no device buffers).
CUptiResult CUPTIAPI cuptiActivitySetAttribute(CUpti_ActivityAttribute attr, size_t* valueSize,
                                               void* value) {
  if (valueSize == nullptr || value == nullptr) return CUPTI_ERROR_INVALID_PARAMETER;
  switch (attr) {
    case CUPTI_ACTIVITY_ATTR_DEVICE_BUFFER_SIZE:
    case CUPTI_ACTIVITY_ATTR_DEVICE_BUFFER_SIZE_CDP:
    case CUPTI_ACTIVITY_ATTR_DEVICE_BUFFER_POOL_LIMIT:
    case CUPTI_ACTIVITY_ATTR_PROFILING_SEMAPHORE_POOL_SIZE:
    case CUPTI_ACTIVITY_ATTR_PROFILING_SEMAPHORE_POOL_LIMIT:
    case CUPTI_ACTIVITY_ATTR_DEVICE_BUFFER_PRE_ALLOCATE_VALUE:
      return *valueSize == sizeof(size_t) ? CUPTI_SUCCESS : CUPTI_ERROR_PARAMETER_SIZE_NOT_SUFFICIENT;
    default:
      return CUPTI_SUCCESS;  // flags (zeroed buffers, pinned host buffers): nothing to change
  }
}

// The callback API is not simulated: a subscriber cannot be made, so every
// call that needs one is "not supported" (Kineto then records activities
// only). stallscope itself uses the activity API alone.
CUptiResult CUPTIAPI cuptiSubscribe(CUpti_SubscriberHandle* subscriber, CUpti_CallbackFunc callback,
                                    void* userdata) {
  if (subscriber != nullptr) *subscriber = nullptr;
  return CUPTI_ERROR_NOT_SUPPORTED;
}
CUptiResult CUPTIAPI cuptiUnsubscribe(CUpti_SubscriberHandle subscriber) {
  return CUPTI_ERROR_INVALID_PARAMETER;
}
CUptiResult CUPTIAPI cuptiEnableCallback(uint32_t enable, CUpti_SubscriberHandle subscriber,
                                         CUpti_CallbackDomain domain, CUpti_CallbackId cbid) {
  return CUPTI_ERROR_NOT_SUPPORTED;
}
CUptiResult CUPTIAPI cuptiEnableDomain(uint32_t enable, CUpti_SubscriberHandle subscriber,
                                       CUpti_CallbackDomain domain) {
  return CUPTI_ERROR_NOT_SUPPORTED;
}
// The names of the runtime calls the simulated runtime reports (RUNTIME
// records), in the versioned spelling NVIDIA's CUPTI gives
// (cudaLaunchKernel_v7000: the cupti_runtime_cbid.h enumerator without its
// prefix). Other ids and domains: not supported.
#define SIMGPU_RUNTIME_NAME(x) {CUPTI_RUNTIME_TRACE_CBID_##x, #x}
constexpr struct {
  uint32_t cbid;
  const char* name;
} kRuntimeNames[] = {
    SIMGPU_RUNTIME_NAME(cudaDeviceSynchronize_v3020),
    SIMGPU_RUNTIME_NAME(cudaEventQuery_v3020),
    SIMGPU_RUNTIME_NAME(cudaEventRecordWithFlags_ptsz_v11010),
    SIMGPU_RUNTIME_NAME(cudaEventRecordWithFlags_v11010),
    SIMGPU_RUNTIME_NAME(cudaEventRecord_ptsz_v7000),
    SIMGPU_RUNTIME_NAME(cudaEventRecord_v3020),
    SIMGPU_RUNTIME_NAME(cudaEventSynchronize_v3020),
    SIMGPU_RUNTIME_NAME(cudaFreeAsync_ptsz_v11020),
    SIMGPU_RUNTIME_NAME(cudaFreeAsync_v11020),
    SIMGPU_RUNTIME_NAME(cudaFreeHost_v3020),
    SIMGPU_RUNTIME_NAME(cudaFree_v3020),
    SIMGPU_RUNTIME_NAME(cudaHostAlloc_v3020),
    SIMGPU_RUNTIME_NAME(cudaLaunchCooperativeKernel_ptsz_v9000),
    SIMGPU_RUNTIME_NAME(cudaLaunchCooperativeKernel_v9000),
    SIMGPU_RUNTIME_NAME(cudaLaunchHostFunc_ptsz_v10000),
    SIMGPU_RUNTIME_NAME(cudaLaunchHostFunc_v10000),
    SIMGPU_RUNTIME_NAME(cudaLaunchKernelExC_ptsz_v11060),
    SIMGPU_RUNTIME_NAME(cudaLaunchKernelExC_v11060),
    SIMGPU_RUNTIME_NAME(cudaLaunchKernel_ptsz_v7000),
    SIMGPU_RUNTIME_NAME(cudaLaunchKernel_v7000),
    SIMGPU_RUNTIME_NAME(cudaMallocAsync_ptsz_v11020),
    SIMGPU_RUNTIME_NAME(cudaMallocAsync_v11020),
    SIMGPU_RUNTIME_NAME(cudaMallocHost_v3020),
    SIMGPU_RUNTIME_NAME(cudaMallocManaged_v6000),
    SIMGPU_RUNTIME_NAME(cudaMalloc_v3020),
    SIMGPU_RUNTIME_NAME(cudaMemcpy2DAsync_ptsz_v7000),
    SIMGPU_RUNTIME_NAME(cudaMemcpy2DAsync_v3020),
    SIMGPU_RUNTIME_NAME(cudaMemcpyAsync_ptsz_v7000),
    SIMGPU_RUNTIME_NAME(cudaMemcpyAsync_v3020),
    SIMGPU_RUNTIME_NAME(cudaMemcpyPeerAsync_v4000),
    SIMGPU_RUNTIME_NAME(cudaMemcpy_ptds_v7000),
    SIMGPU_RUNTIME_NAME(cudaMemcpy_v3020),
    SIMGPU_RUNTIME_NAME(cudaMemsetAsync_ptsz_v7000),
    SIMGPU_RUNTIME_NAME(cudaMemsetAsync_v3020),
    SIMGPU_RUNTIME_NAME(cudaMemset_ptds_v7000),
    SIMGPU_RUNTIME_NAME(cudaMemset_v3020),
    SIMGPU_RUNTIME_NAME(cudaStreamQuery_ptsz_v7000),
    SIMGPU_RUNTIME_NAME(cudaStreamQuery_v3020),
    SIMGPU_RUNTIME_NAME(cudaStreamSynchronize_ptsz_v7000),
    SIMGPU_RUNTIME_NAME(cudaStreamSynchronize_v3020),
    SIMGPU_RUNTIME_NAME(cudaStreamWaitEvent_ptsz_v7000),
    SIMGPU_RUNTIME_NAME(cudaStreamWaitEvent_v3020),
};
#undef SIMGPU_RUNTIME_NAME

CUptiResult CUPTIAPI cuptiGetCallbackName(CUpti_CallbackDomain domain, uint32_t cbid,
                                          const char** name) {
  if (name == nullptr) return CUPTI_ERROR_INVALID_PARAMETER;
  *name = nullptr;
  if (domain == CUPTI_CB_DOMAIN_RUNTIME_API) {
    for (const auto& n : kRuntimeNames) {
      if (n.cbid == cbid) {
        *name = n.name;
        return CUPTI_SUCCESS;
      }
    }
  }
  return CUPTI_ERROR_NOT_SUPPORTED;
}

CUptiResult CUPTIAPI cuptiFinalize(void) {
  State& s = S();
  for (auto& e : s.enabled) e.store(false);
  SetRuntimeObserver(false);
  Deliver(/*periodic=*/false);
  return CUPTI_SUCCESS;
}

}  // extern "C"
