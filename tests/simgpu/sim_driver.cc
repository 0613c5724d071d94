// The exported CUDA driver API of the simulated libcuda.so.1: every entry point
// under its real (versioned, _ptsz/_ptds) name, as thin wrappers around the
// engine in sim_engine.cc. cuGetProcAddress lives in sim_proc_address.cc.
#include "sim_cuda.h"

#include <stdlib.h>
#include <string.h>

#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

#include "sim_engine.h"

using namespace simgpu;

namespace {

std::atomic<bool> g_initialized{false};
std::mutex g_primary_mu;
__attribute__((constructor)) void RegisterPrimaryLock() { RegisterForkLock(&g_primary_mu); }
// The thread's context stack. Trivially destructible, so that it is still
// valid in static destructors and atexit handlers (thread_local objects with
// destructors are gone by then: torch synchronizes the device from one).
class CtxStack {
 public:
  static constexpr int kCapacity = 64;
  bool empty() const { return depth_ == 0; }
  Context*& back() { return items_[depth_ - 1]; }
  bool push_back(Context* c) {
    if (depth_ == kCapacity) return false;
    items_[depth_++] = c;
    return true;
  }
  void pop_back() { --depth_; }
  void erase(Context* c) {
    int kept = 0;
    for (int i = 0; i < depth_; ++i) {
      if (items_[i] != c) items_[kept++] = items_[i];
    }
    depth_ = kept;
  }

 private:
  Context* items_[kCapacity];
  int depth_;
};
static_assert(std::is_trivially_destructible_v<CtxStack>);
thread_local CtxStack t_ctx_stack;

constexpr uint64_t kTotalMem = 80ULL << 30;  // 80 GiB, an H100
constexpr const char* kDeviceName = "NVIDIA H100 80GB HBM3 (simgpu)";

#define SIM_CHECK_INIT() \
  if (!g_initialized.load(std::memory_order_relaxed)) return CUDA_ERROR_NOT_INITIALIZED

#define SIM_RETURN_IF_ERROR(expr) \
  do {                            \
    CUresult r_ = (expr);         \
    if (r_ != CUDA_SUCCESS) return r_; \
  } while (0)

Context* Current() { return t_ctx_stack.empty() ? nullptr : t_ctx_stack.back(); }

CUresult CurrentContext(Context** out) {
  Context* c = Current();
  if (c == nullptr || c->destroyed) return CUDA_ERROR_INVALID_CONTEXT;
  *out = c;
  return CUDA_SUCCESS;
}

bool ValidContext(CUcontext h) {
  Context* c = reinterpret_cast<Context*>(h);
  return c != nullptr && c->magic == kContextMagic && !c->destroyed;
}

// NULL means the legacy stream, or the per-thread stream when called through a
// _ptsz/_ptds entry point; CU_STREAM_LEGACY / CU_STREAM_PER_THREAD are explicit.
CUresult ResolveStream(CUstream h, bool per_thread_entry, Stream** out) {
  if (h == nullptr || h == CU_STREAM_LEGACY || h == CU_STREAM_PER_THREAD) {
    Context* c;
    SIM_RETURN_IF_ERROR(CurrentContext(&c));
    if (h == CU_STREAM_PER_THREAD || (h == nullptr && per_thread_entry)) {
      *out = PerThreadStream(c);
    } else {
      *out = c->legacy;
    }
    return CUDA_SUCCESS;
  }
  Stream* s = reinterpret_cast<Stream*>(h);
  if (s->magic != kStreamMagic || s->destroyed) return CUDA_ERROR_INVALID_HANDLE;
  *out = s;
  return CUDA_SUCCESS;
}

CUresult ValidEvent(CUevent h, Event** out) {
  Event* e = reinterpret_cast<Event*>(h);
  if (e == nullptr || e->magic != kEventMagic) return CUDA_ERROR_INVALID_HANDLE;
  *out = e;
  return CUDA_SUCCESS;
}

Function* AsFunction(const void* h) {
  const Function* f = static_cast<const Function*>(h);
  if (f == nullptr || f->magic != kFunctionMagic) return nullptr;
  return const_cast<Function*>(f);
}

// ---- launches ----
// ---- graphs (stream capture of kernel launches) ----
// A graph is the kernels launched on a stream between cuStreamBeginCapture
// and cuStreamEndCapture, in order (a straight line). cuGraphLaunch enqueues
// them together as one launch: one correlation id, as CUPTI gives a graph's
// kernels their launch call's; the first node starts like a kernel launched
// then, each later one SIMGPU_GRAPH_NODE_US after the previous ended.
constexpr uint32_t kGraphMagic = 0x47524150;      // "GRAP"
constexpr uint32_t kGraphExecMagic = 0x47455843;  // "GEXC"
struct GraphNode {
  Function* fn;
  int32_t grid[3], block[3], shared_bytes;
};
struct Graph {
  uint32_t magic = kGraphMagic;
  std::vector<GraphNode> nodes;
  bool invalidated = false;
};
struct GraphExec {
  uint32_t magic = kGraphExecMagic;
  std::vector<GraphNode> nodes;
};

CUresult CaptureLaunch(Stream* s, Function* fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                       unsigned by, unsigned bz, unsigned shmem) {
  GraphNode n{fn,
              {static_cast<int32_t>(gx), static_cast<int32_t>(gy), static_cast<int32_t>(gz)},
              {static_cast<int32_t>(bx), static_cast<int32_t>(by), static_cast<int32_t>(bz)},
              static_cast<int32_t>(shmem)};
  static_cast<Graph*>(s->capture)->nodes.push_back(n);
  return CUDA_SUCCESS;
}

CUresult LaunchImpl(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                    unsigned bz, unsigned shmem, CUstream h, bool ptsz) {
  SIM_CHECK_INIT();
  Function* fn = AsFunction(f);
  if (fn == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (gx == 0 || gy == 0 || gz == 0 || bx == 0 || by == 0 || bz == 0) return CUDA_ERROR_INVALID_VALUE;
  Stream* s;
  SIM_RETURN_IF_ERROR(ResolveStream(h, ptsz, &s));
  if (s->capture != nullptr) return CaptureLaunch(s, fn, gx, gy, gz, bx, by, bz, shmem);
  auto op = std::make_shared<Op>();
  op->kind = OpKind::kKernel;
  op->name = fn->name.c_str();
  op->duration_ns = fn->duration_ns.load(std::memory_order_relaxed);
  op->is_async = true;
  op->grid[0] = static_cast<int32_t>(gx);
  op->grid[1] = static_cast<int32_t>(gy);
  op->grid[2] = static_cast<int32_t>(gz);
  op->block[0] = static_cast<int32_t>(bx);
  op->block[1] = static_cast<int32_t>(by);
  op->block[2] = static_cast<int32_t>(bz);
  op->shared_bytes = static_cast<int32_t>(shmem);
  op->correlation = NextCorrelation();
  Submit(s, op);
  return CUDA_SUCCESS;
}

CUresult LaunchExImpl(const CUlaunchConfig* config, CUfunction f, bool ptsz) {
  if (config == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return LaunchImpl(f, config->gridDimX, config->gridDimY, config->gridDimZ, config->blockDimX,
                    config->blockDimY, config->blockDimZ, config->sharedMemBytes, config->hStream,
                    ptsz);
}

// ---- copies ----
// How a copy's host side is classified: explicit HtoD/DtoH/DtoD entry points
// fix the device side; cuMemcpy/cuMemcpyAsync infer both sides.
enum class Dir { kHtoD, kDtoH, kDtoD, kInfer };

const char* CopyName(uint32_t kind) {
  switch (kind) {
    case SIMGPU_COPY_HTOD: return "HtoD";
    case SIMGPU_COPY_DTOH: return "DtoH";
    case SIMGPU_COPY_DTOD: return "DtoD";
    default: return "HtoH";
  }
}

CUresult CopyImpl(void* dst, const void* src, size_t n, Dir dir, CUstream h, bool async,
                  bool per_thread) {
  SIM_CHECK_INIT();
  if ((dst == nullptr || src == nullptr) && n > 0) return CUDA_ERROR_INVALID_VALUE;
  Stream* s;
  SIM_RETURN_IF_ERROR(ResolveStream(h, per_thread, &s));
  if (s->capture != nullptr) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;  // kernels only
  MemKind dk, sk;
  switch (dir) {
    case Dir::kHtoD: dk = MemKind::kDevice; sk = Classify(src); break;
    case Dir::kDtoH: dk = Classify(dst); sk = MemKind::kDevice; break;
    case Dir::kDtoD: dk = sk = MemKind::kDevice; break;
    default: dk = Classify(dst); sk = Classify(src); break;
  }
  // A host pointer that happens to lie in device memory counts as device.
  if (dir == Dir::kHtoD && sk == MemKind::kDevice) sk = MemKind::kDevice;
  uint32_t kind;
  if (dk == MemKind::kDevice && sk == MemKind::kDevice) {
    kind = SIMGPU_COPY_DTOD;
  } else if (dk == MemKind::kDevice) {
    kind = SIMGPU_COPY_HTOD;
  } else if (sk == MemKind::kDevice) {
    kind = SIMGPU_COPY_DTOH;
  } else {
    kind = SIMGPU_COPY_HTOH;
  }
  if (n == 0) return CUDA_SUCCESS;
  auto op = std::make_shared<Op>();
  op->kind = OpKind::kMemcpy;
  op->name = CopyName(kind);
  op->is_async = async;
  op->bytes = n;
  op->duration_ns = CopyDurationNs(n);
  op->copy_kind = kind;
  op->src_kind = CuptiMemKind(sk);
  op->dst_kind = CuptiMemKind(dk);
  op->dst = dst;
  op->src = src;
  // Blocking behaviour (NVIDIA, "API synchronization behavior").
  enum { kNoWait, kWaitStart, kWaitDone } wait = kNoWait;
  switch (kind) {
    case SIMGPU_COPY_HTOD:
      if (!IsPinned(sk)) {
        op->staged.reset(new char[n]);  // staged now: the caller may reuse src
        memcpy(op->staged.get(), src, n);
        wait = async ? kNoWait : kWaitStart;
      } else {
        wait = async ? kNoWait : kWaitDone;
      }
      break;
    case SIMGPU_COPY_DTOH:
      wait = (!async || !IsPinned(dk)) ? kWaitDone : kNoWait;
      break;
    case SIMGPU_COPY_DTOD:
      wait = kNoWait;
      break;
    default:  // host to host
      wait = (!async || !IsPinned(dk) || !IsPinned(sk)) ? kWaitDone : kNoWait;
      break;
  }
  op->correlation = NextCorrelation();
  const uint64_t t0 = wait != kNoWait ? NowNs() : 0;
  Submit(s, op);
  if (wait == kWaitStart) WaitStarted(s->dev, op);
  if (wait == kWaitDone) WaitDone(s->dev, {op});
  if (wait != kNoWait) SyncTrace(async ? "cuMemcpyAsync" : "cuMemcpy", t0, NowNs());
  return CUDA_SUCCESS;
}

// ---- sets ----
CUresult MemsetImpl(CUdeviceptr dst, uint32_t value, uint32_t elem, size_t count, CUstream h,
                    bool async, bool per_thread) {
  SIM_CHECK_INIT();
  if (dst == 0) return CUDA_ERROR_INVALID_VALUE;
  if (elem > 1 && dst % elem != 0) return CUDA_ERROR_INVALID_VALUE;
  Stream* s;
  SIM_RETURN_IF_ERROR(ResolveStream(h, per_thread, &s));
  if (s->capture != nullptr) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;  // kernels only
  if (count == 0) return CUDA_SUCCESS;
  void* p = reinterpret_cast<void*>(dst);
  MemKind k = Classify(p);
  auto op = std::make_shared<Op>();
  op->kind = OpKind::kMemset;
  op->name = "memset";
  op->is_async = async;
  op->bytes = count * elem;
  op->duration_ns = MemsetDurationNs(op->bytes);
  op->dst_kind = CuptiMemKind(k);
  op->dst = p;
  op->memset_value = value;
  op->memset_elem = elem;
  op->memset_count = count;
  op->correlation = NextCorrelation();
  Submit(s, op);
  // Synchronous sets are asynchronous for device memory, synchronous for
  // pinned (and any other host) memory.
  if (!async && k != MemKind::kDevice) {
    const uint64_t t0 = NowNs();
    WaitDone(s->dev, {op});
    SyncTrace("cuMemset", t0, NowNs());
  }
  return CUDA_SUCCESS;
}

// ---- events ----
CUresult EventRecordImpl(CUevent h, CUstream hs, bool ptsz) {
  SIM_CHECK_INIT();
  Event* e;
  SIM_RETURN_IF_ERROR(ValidEvent(h, &e));
  Stream* s;
  SIM_RETURN_IF_ERROR(ResolveStream(hs, ptsz, &s));
  auto op = std::make_shared<Op>();
  op->kind = OpKind::kMarker;
  op->name = "event";
  Submit(s, op);
  std::lock_guard<std::mutex> lk(e->mu);
  e->record = op;
  e->dev = s->dev;
  return CUDA_SUCCESS;
}

OpPtr EventRecordOf(Event* e, Device** dev) {
  std::lock_guard<std::mutex> lk(e->mu);
  *dev = e->dev;
  return e->record;
}

CUresult StreamWaitEventImpl(CUstream hs, CUevent h, bool ptsz) {
  SIM_CHECK_INIT();
  Stream* s;
  SIM_RETURN_IF_ERROR(ResolveStream(hs, ptsz, &s));
  Event* e;
  SIM_RETURN_IF_ERROR(ValidEvent(h, &e));
  Device* ed;
  OpPtr rec = EventRecordOf(e, &ed);
  if (!rec || rec->finished.load()) return CUDA_SUCCESS;
  auto op = std::make_shared<Op>();
  op->kind = OpKind::kMarker;
  op->name = "wait";
  op->deps.push_back(rec);
  Submit(s, op);
  return CUDA_SUCCESS;
}

CUresult StreamSyncImpl(CUstream h, bool ptsz) {
  SIM_CHECK_INIT();
  Stream* s;
  SIM_RETURN_IF_ERROR(ResolveStream(h, ptsz, &s));
  if (s->capture != nullptr) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  const uint64_t t0 = NowNs();
  SyncStream(s);
  SyncTrace("cuStreamSynchronize", t0, NowNs());
  return CUDA_SUCCESS;
}

CUresult StreamQueryImpl(CUstream h, bool ptsz) {
  SIM_CHECK_INIT();
  Stream* s;
  SIM_RETURN_IF_ERROR(ResolveStream(h, ptsz, &s));
  return StreamIdle(s) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

// The stream property getters: resolve the stream, copy one field out.
template <typename T, typename Get>
CUresult StreamGetImpl(CUstream h, T* out, bool ptsz, Get get) {
  SIM_CHECK_INIT();
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Stream* s;
  SIM_RETURN_IF_ERROR(ResolveStream(h, ptsz, &s));
  *out = get(s);
  return CUDA_SUCCESS;
}

CUresult StreamGetIdImpl(CUstream h, unsigned long long* id, bool ptsz) {
  return StreamGetImpl(h, id, ptsz, [](Stream* s) { return s->id; });
}

CUresult StreamGetFlagsImpl(CUstream h, unsigned* flags, bool ptsz) {
  return StreamGetImpl(h, flags, ptsz, [](Stream* s) { return s->flags; });
}

CUresult StreamGetPriorityImpl(CUstream h, int* prio, bool ptsz) {
  return StreamGetImpl(h, prio, ptsz, [](Stream* s) { return s->priority; });
}

CUresult StreamGetCtxImpl(CUstream h, CUcontext* pctx, bool ptsz) {
  return StreamGetImpl(h, pctx, ptsz, [](Stream* s) { return reinterpret_cast<CUcontext>(s->ctx); });
}

CUresult StreamDestroyImpl(CUstream h) {
  SIM_CHECK_INIT();
  if (h == nullptr || h == CU_STREAM_LEGACY || h == CU_STREAM_PER_THREAD) {
    return CUDA_ERROR_INVALID_HANDLE;
  }
  Stream* s;
  SIM_RETURN_IF_ERROR(ResolveStream(h, false, &s));
  if (s->legacy || s->per_thread) return CUDA_ERROR_INVALID_HANDLE;
  std::lock_guard<std::mutex> lk(s->dev->mu);
  s->destroyed = true;  // pending work still runs; the device thread drops it after
  return CUDA_SUCCESS;
}

// ---- contexts ----
CUresult CtxCreateImpl(CUcontext* pctx, unsigned flags, CUdevice dev) {
  SIM_CHECK_INIT();
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Device* d = GetDevice(dev);
  if (d == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  Context* c = NewContext(d, false, flags);
  if (!t_ctx_stack.push_back(c)) return CUDA_ERROR_OUT_OF_MEMORY;
  *pctx = reinterpret_cast<CUcontext>(c);
  return CUDA_SUCCESS;
}

CUresult CtxDestroyImpl(CUcontext h) {
  SIM_CHECK_INIT();
  if (!ValidContext(h)) return CUDA_ERROR_INVALID_CONTEXT;
  Context* c = reinterpret_cast<Context*>(h);
  if (c->primary) return CUDA_ERROR_INVALID_CONTEXT;
  SyncDevice(c->dev);
  {
    std::lock_guard<std::mutex> lk(c->dev->mu);
    c->destroyed = true;
    for (Stream* s : c->streams) s->destroyed = true;
  }
  t_ctx_stack.erase(c);
  return CUDA_SUCCESS;
}

CUresult CtxPushImpl(CUcontext h) {
  SIM_CHECK_INIT();
  if (!ValidContext(h)) return CUDA_ERROR_INVALID_CONTEXT;
  if (!t_ctx_stack.push_back(reinterpret_cast<Context*>(h))) return CUDA_ERROR_OUT_OF_MEMORY;
  return CUDA_SUCCESS;
}

CUresult CtxPopImpl(CUcontext* pctx) {
  SIM_CHECK_INIT();
  if (t_ctx_stack.empty()) return CUDA_ERROR_INVALID_CONTEXT;
  if (pctx != nullptr) *pctx = reinterpret_cast<CUcontext>(t_ctx_stack.back());
  t_ctx_stack.pop_back();
  return CUDA_SUCCESS;
}

CUresult CtxGetDeviceImpl(CUdevice* dev, CUcontext h) {
  SIM_CHECK_INIT();
  if (dev == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Context* c;
  if (h == nullptr) {
    SIM_RETURN_IF_ERROR(CurrentContext(&c));
  } else {
    if (!ValidContext(h)) return CUDA_ERROR_INVALID_CONTEXT;
    c = reinterpret_cast<Context*>(h);
  }
  *dev = c->dev->ordinal;
  return CUDA_SUCCESS;
}

CUresult CtxSyncImpl(CUcontext h) {
  SIM_CHECK_INIT();
  Context* c;
  if (h == nullptr) {
    SIM_RETURN_IF_ERROR(CurrentContext(&c));
  } else {
    if (!ValidContext(h)) return CUDA_ERROR_INVALID_CONTEXT;
    c = reinterpret_cast<Context*>(h);
  }
  const uint64_t t0 = NowNs();
  SyncDevice(c->dev);
  SyncTrace("cuCtxSynchronize", t0, NowNs());
  return CUDA_SUCCESS;
}

CUresult PrimaryRetainImpl(CUcontext* pctx, CUdevice dev) {
  SIM_CHECK_INIT();
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Device* d = GetDevice(dev);
  if (d == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard<std::mutex> lk(g_primary_mu);
  if (d->primary == nullptr) d->primary = NewContext(d, true, d->primary_flags);
  d->primary_refs++;
  *pctx = reinterpret_cast<CUcontext>(d->primary);
  return CUDA_SUCCESS;
}

CUresult PrimaryReleaseImpl(CUdevice dev) {
  SIM_CHECK_INIT();
  Device* d = GetDevice(dev);
  if (d == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard<std::mutex> lk(g_primary_mu);
  if (d->primary_refs <= 0) return CUDA_ERROR_INVALID_CONTEXT;
  // The context object stays valid (the simulator never frees contexts).
  d->primary_refs--;
  return CUDA_SUCCESS;
}

CUresult PrimarySetFlagsImpl(CUdevice dev, unsigned flags) {
  SIM_CHECK_INIT();
  Device* d = GetDevice(dev);
  if (d == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard<std::mutex> lk(g_primary_mu);
  d->primary_flags = flags;
  if (d->primary != nullptr) d->primary->flags = flags;
  return CUDA_SUCCESS;
}

CUresult PrimaryResetImpl(CUdevice dev) {
  SIM_CHECK_INIT();
  Device* d = GetDevice(dev);
  if (d == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  SyncDevice(d);
  std::lock_guard<std::mutex> lk(g_primary_mu);
  d->primary_refs = 0;
  return CUDA_SUCCESS;
}

// ---- modules ----
CUresult NewModule(Module** out) {
  SIM_CHECK_INIT();
  if (Current() == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  *out = new Module();
  return CUDA_SUCCESS;
}

Function* GetOrMakeFunction(Module* m, const char* name) {
  std::lock_guard<std::mutex> lk(m->mu);
  auto it = m->functions.find(name);
  if (it != m->functions.end()) return it->second;
  Function* f = new Function();
  f->name = name;
  f->duration_ns = KernelDurationNs(name);
  f->module = m;
  m->functions.emplace(name, f);
  return f;
}

Module* AsModule(const void* h) {
  const Module* m = static_cast<const Module*>(h);
  if (m == nullptr || m->magic != kModuleMagic) return nullptr;
  return const_cast<Module*>(m);
}

// ---- memory ----
CUresult HostAllocImpl(void** pp, size_t size, MemKind kind) {
  SIM_CHECK_INIT();
  if (pp == nullptr) return CUDA_ERROR_INVALID_VALUE;
  size_t rounded = ((size == 0 ? 1 : size) + 255) / 256 * 256;
  void* p = aligned_alloc(256, rounded);
  if (p == nullptr) return CUDA_ERROR_OUT_OF_MEMORY;
  // Pinned memory is resident once allocated (the real driver pins and maps
  // it); touching it here keeps page faults out of later copies.
  memset(p, 0, rounded);
  AddRange(p, size, kind);
  *pp = p;
  return CUDA_SUCCESS;
}

CUresult DeviceAllocImpl(CUdeviceptr* dptr, size_t size, Device* d) {
  if (dptr == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (size == 0) return CUDA_ERROR_INVALID_VALUE;
  if (d->allocated.load() + size > kTotalMem) return CUDA_ERROR_OUT_OF_MEMORY;
  size_t rounded = (size + 255) / 256 * 256;
  void* p = aligned_alloc(256, rounded);
  if (p == nullptr) return CUDA_ERROR_OUT_OF_MEMORY;
  // Device memory is backed from the start: no page faults inside device ops.
  memset(p, 0, rounded);
  d->allocated.fetch_add(size);
  AddRange(p, size, MemKind::kDevice);
  *dptr = reinterpret_cast<CUdeviceptr>(p);
  return CUDA_SUCCESS;
}

CUresult MemAllocAsyncImpl(CUdeviceptr* dptr, size_t size, CUstream h, bool ptsz) {
  SIM_CHECK_INIT();
  Stream* s;
  SIM_RETURN_IF_ERROR(ResolveStream(h, ptsz, &s));
  return DeviceAllocImpl(dptr, size, s->dev);
}

CUresult MemFreeAsyncImpl(CUdeviceptr dptr, CUstream h, bool ptsz) {
  SIM_CHECK_INIT();
  Stream* s;
  SIM_RETURN_IF_ERROR(ResolveStream(h, ptsz, &s));
  if (dptr == 0) return CUDA_ERROR_INVALID_VALUE;
  if (Classify(reinterpret_cast<void*>(dptr)) != MemKind::kDevice) return CUDA_ERROR_INVALID_VALUE;
  // Freed when the stream reaches this point; the host does not wait.
  auto op = std::make_shared<Op>();
  op->kind = OpKind::kMarker;
  op->name = "free";
  op->free_ptr = reinterpret_cast<void*>(dptr);
  Submit(s, op);
  return CUDA_SUCCESS;
}

struct ErrorName {
  CUresult code;
  const char* name;
  const char* text;
};
const ErrorName kErrors[] = {
    {CUDA_SUCCESS, "CUDA_SUCCESS", "no error"},
    {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {CUDA_ERROR_DEINITIALIZED, "CUDA_ERROR_DEINITIALIZED", "driver shutting down"},
    {CUDA_ERROR_PROFILER_DISABLED, "CUDA_ERROR_PROFILER_DISABLED", "profiler disabled while using external profiling tool"},
    {CUDA_ERROR_STUB_LIBRARY, "CUDA_ERROR_STUB_LIBRARY", "CUDA driver is a stub library"},
    {CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {CUDA_ERROR_INVALID_IMAGE, "CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid"},
    {CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {CUDA_ERROR_CONTEXT_ALREADY_CURRENT, "CUDA_ERROR_CONTEXT_ALREADY_CURRENT", "context already current"},
    {CUDA_ERROR_MAP_FAILED, "CUDA_ERROR_MAP_FAILED", "mapping of buffer object failed"},
    {CUDA_ERROR_NO_BINARY_FOR_GPU, "CUDA_ERROR_NO_BINARY_FOR_GPU", "no kernel image is available for execution on the device"},
    {CUDA_ERROR_INVALID_SOURCE, "CUDA_ERROR_INVALID_SOURCE", "device kernel image is invalid"},
    {CUDA_ERROR_FILE_NOT_FOUND, "CUDA_ERROR_FILE_NOT_FOUND", "file not found"},
    {CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY", "device not ready"},
    {CUDA_ERROR_ILLEGAL_ADDRESS, "CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered"},
    {CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES", "too many resources requested for launch"},
    {CUDA_ERROR_LAUNCH_TIMEOUT, "CUDA_ERROR_LAUNCH_TIMEOUT", "the launch timed out and was terminated"},
    {CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED", "part or all of the requested memory range is already mapped"},
    {CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED", "pointer does not correspond to a registered memory region"},
    {CUDA_ERROR_LAUNCH_FAILED, "CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure"},
    {CUDA_ERROR_NOT_PERMITTED, "CUDA_ERROR_NOT_PERMITTED", "operation not permitted"},
    {CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
    {CUDA_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

const ErrorName* FindError(CUresult r) {
  for (const ErrorName& e : kErrors) {
    if (e.code == r) return &e;
  }
  return nullptr;
}

// ---- 2D copies and sets, as rows of the 1D forms ----
// A side's address and whether it is host memory (arrays are not simulated).
CUresult Side2D(CUmemorytype type, const void* host, CUdeviceptr dev, size_t x, size_t y,
                size_t pitch, const char** at, bool* is_host) {
  const char* base;
  switch (type) {
    case CU_MEMORYTYPE_HOST: base = static_cast<const char*>(host); *is_host = true; break;
    case CU_MEMORYTYPE_DEVICE: base = reinterpret_cast<const char*>(dev); *is_host = false; break;
    case CU_MEMORYTYPE_UNIFIED:
      base = reinterpret_cast<const char*>(dev);
      *is_host = Classify(base) != MemKind::kDevice;
      break;
    default: return CUDA_ERROR_NOT_SUPPORTED;  // CU_MEMORYTYPE_ARRAY
  }
  if (base == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *at = base + y * pitch + x;
  return CUDA_SUCCESS;
}

// One copy when both sides are contiguous rows, else one per row (in stream
// order), each with the 1D form's blocking rules.
CUresult Copy2DImpl(const CUDA_MEMCPY2D* p, CUstream h, bool async, bool ptsz) {
  SIM_CHECK_INIT();
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const char *src, *dst;
  bool src_host, dst_host;
  SIM_RETURN_IF_ERROR(Side2D(p->srcMemoryType, p->srcHost, p->srcDevice, p->srcXInBytes, p->srcY,
                             p->srcPitch, &src, &src_host));
  SIM_RETURN_IF_ERROR(Side2D(p->dstMemoryType, p->dstHost, p->dstDevice, p->dstXInBytes, p->dstY,
                             p->dstPitch, &dst, &dst_host));
  if (p->Height > 1 && (p->srcPitch < p->WidthInBytes || p->dstPitch < p->WidthInBytes)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  const Dir dir = src_host && !dst_host   ? Dir::kHtoD
                  : !src_host && dst_host ? Dir::kDtoH
                  : !src_host && !dst_host ? Dir::kDtoD
                                           : Dir::kInfer;
  if (p->Height <= 1 || (p->srcPitch == p->WidthInBytes && p->dstPitch == p->WidthInBytes)) {
    return CopyImpl(const_cast<char*>(dst), src, p->WidthInBytes * std::max<size_t>(p->Height, 1),
                    dir, h, async, ptsz);
  }
  for (size_t row = 0; row < p->Height; ++row) {
    SIM_RETURN_IF_ERROR(CopyImpl(const_cast<char*>(dst + row * p->dstPitch), src + row * p->srcPitch,
                                 p->WidthInBytes, dir, h, async, ptsz));
  }
  return CUDA_SUCCESS;
}

CUresult Memset2DImpl(CUdeviceptr dst, size_t pitch, uint32_t value, uint32_t elem, size_t width,
                      size_t height, CUstream h, bool async, bool ptsz) {
  SIM_CHECK_INIT();
  if (height > 1 && pitch < width * elem) return CUDA_ERROR_INVALID_VALUE;
  if (height <= 1 || pitch == width * elem) {
    return MemsetImpl(dst, value, elem, width * std::max<size_t>(height, 1), h, async, ptsz);
  }
  for (size_t row = 0; row < height; ++row) {
    SIM_RETURN_IF_ERROR(MemsetImpl(dst + row * pitch, value, elem, width, h, async, ptsz));
  }
  return CUDA_SUCCESS;
}

// ---- host functions (cuLaunchHostFunc, cuStreamAddCallback) ----
// A host function is a marker op on its stream. When the stream reaches it,
// the device thread hands it to the process's host-function thread (NVIDIA's
// driver also calls them from a thread of its own), which calls it; the op
// ends when the call returns, so later work on the stream waits for it.
struct HostCall {
  CUhostFn fn = nullptr;
  void* data = nullptr;
  Device* dev = nullptr;
  std::atomic<uint64_t> end_ns{0};
};

class HostFuncThread {
 public:
  HostFuncThread() {
    RegisterForkLock(&mu_);
    RegisterForkCondition(&cv_);
  }
  void Push(HostCall* c) {
    std::lock_guard<std::mutex> lk(mu_);
    if (pid_ != getpid()) {  // first use, or a forked child (threads are not inherited)
      pid_ = getpid();
      queue_.clear();
      std::thread([this] { Loop(); }).detach();
    }
    queue_.push_back(c);
    cv_.notify_one();
  }

 private:
  void Loop() {
    pthread_setname_np(pthread_self(), "simgpu-hostfn");
    for (;;) {
      HostCall* c;
      {
        std::unique_lock<std::mutex> lk(mu_);
        cv_.wait(lk, [this] { return !queue_.empty(); });
        c = queue_.front();
        queue_.pop_front();
      }
      c->fn(c->data);
      Device* d = c->dev;  // c may be released once its end is published
      c->end_ns.store(std::max<uint64_t>(NowNs(), 1), std::memory_order_release);
      Kick(d);
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<HostCall*> queue_;
  pid_t pid_ = 0;
};

HostFuncThread& HostFuncs() {
  static HostFuncThread* h = new HostFuncThread;  // never destroyed: it may run at exit
  return *h;
}

CUresult LaunchHostFuncImpl(CUstream hs, CUhostFn fn, void* data, bool ptsz) {
  SIM_CHECK_INIT();
  if (fn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Stream* s;
  SIM_RETURN_IF_ERROR(ResolveStream(hs, ptsz, &s));
  auto* call = new HostCall;
  call->fn = fn;
  call->data = data;
  call->dev = s->dev;
  auto op = std::make_shared<Op>();
  op->kind = OpKind::kMarker;  // not a kernel: no trace line, no CUPTI record
  op->name = "host_function";
  op->external = true;
  op->ext.size = sizeof op->ext;
  op->ext.name = op->name;
  op->ext.poll_ns = 20000;
  op->ext.user = call;
  op->ext.on_start = [](void* u, uint64_t) { HostFuncs().Push(static_cast<HostCall*>(u)); };
  op->ext.poll_end = [](void* u, uint64_t) {
    return static_cast<HostCall*>(u)->end_ns.load(std::memory_order_acquire);
  };
  op->ext.release = [](void* u) { delete static_cast<HostCall*>(u); };
  Submit(s, op);
  return CUDA_SUCCESS;
}

struct StreamCallback {
  CUstreamCallback fn;
  CUstream stream;
  void* data;
};

CUresult StreamAddCallbackImpl(CUstream hs, CUstreamCallback fn, void* data, unsigned flags,
                               bool ptsz) {
  if (fn == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  auto* cb = new StreamCallback{fn, hs, data};
  CUresult r = LaunchHostFuncImpl(
      hs,
      [](void* u) {
        auto* c = static_cast<StreamCallback*>(u);
        c->fn(c->stream, CUDA_SUCCESS, c->data);
        delete c;
      },
      cb, ptsz);
  if (r != CUDA_SUCCESS) delete cb;
  return r;
}

// ---- function and kernel attributes: plausible values of an sm_90 kernel ----
CUresult FuncAttributeImpl(int* pi, CUfunction_attribute attrib, const void* h) {
  SIM_CHECK_INIT();
  if (pi == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (AsFunction(h) == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  switch (attrib) {
    case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *pi = 1024; break;
    case CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES: *pi = 0; break;
    case CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES: *pi = 0; break;
    case CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES: *pi = 0; break;
    case CU_FUNC_ATTRIBUTE_NUM_REGS: *pi = 32; break;
    case CU_FUNC_ATTRIBUTE_PTX_VERSION: *pi = 90; break;
    case CU_FUNC_ATTRIBUTE_BINARY_VERSION: *pi = 90; break;
    case CU_FUNC_ATTRIBUTE_CACHE_MODE_CA: *pi = 0; break;
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: *pi = 49152; break;
    case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT: *pi = -1; break;
    case CU_FUNC_ATTRIBUTE_CLUSTER_SIZE_MUST_BE_SET: *pi = 0; break;
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH:
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT:
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH: *pi = 0; break;
    case CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED: *pi = 1; break;
    case CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE: *pi = 0; break;
    default: return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

// Resident blocks per SM for a block size: 2048 threads per SM, 32 blocks at
// most, registers at 32 per thread (64 K per SM) never the limit first.
int ActiveBlocksPerSm(int block_size) {
  if (block_size <= 0 || block_size > 1024) return 0;
  const int warps = (block_size + 31) / 32;
  return std::min(32, 64 / warps);
}

// ---- pointer attributes, from the simulator's memory map ----
CUresult PointerAttributeImpl(void* data, CUpointer_attribute attribute, CUdeviceptr ptr) {
  if (data == nullptr) return CUDA_ERROR_INVALID_VALUE;
  uintptr_t base = 0;
  size_t size = 0;
  MemKind kind = MemKind::kPageable;
  const bool known = FindRange(reinterpret_cast<const void*>(ptr), &base, &size, &kind);
  Context* ctx = Current();
  if (ctx == nullptr) ctx = GetDevice(0) != nullptr ? GetDevice(0)->primary : nullptr;
  switch (attribute) {
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
      if (!known) return CUDA_ERROR_INVALID_VALUE;
      *static_cast<unsigned*>(data) = kind == MemKind::kDevice ? CU_MEMORYTYPE_DEVICE
                                                                : CU_MEMORYTYPE_HOST;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_CONTEXT:
      if (!known) return CUDA_ERROR_INVALID_VALUE;
      *static_cast<CUcontext*>(data) = reinterpret_cast<CUcontext>(ctx);
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:  // unified addressing: the same address
      if (!known) return CUDA_ERROR_INVALID_VALUE;
      *static_cast<CUdeviceptr*>(data) = ptr;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
      if (!known || kind == MemKind::kDevice) return CUDA_ERROR_INVALID_VALUE;
      *static_cast<void**>(data) = reinterpret_cast<void*>(ptr);
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED:
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
      *static_cast<int*>(data) = 0;
      return known ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    case CU_POINTER_ATTRIBUTE_MAPPED:
      *static_cast<int*>(data) = known ? 1 : 0;
      return known ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
      if (!known) return CUDA_ERROR_INVALID_VALUE;
      *static_cast<int*>(data) = ctx != nullptr ? ctx->dev->ordinal : 0;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
      if (!known) return CUDA_ERROR_INVALID_VALUE;
      *static_cast<CUdeviceptr*>(data) = base;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
      if (!known) return CUDA_ERROR_INVALID_VALUE;
      *static_cast<size_t*>(data) = size;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
      if (!known) return CUDA_ERROR_INVALID_VALUE;
      *static_cast<unsigned long long*>(data) = base;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:
      *static_cast<int*>(data) = 1;
      return known ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

// ---- graphs ----
CUresult BeginCaptureImpl(CUstream h, bool ptsz) {
  SIM_CHECK_INIT();
  Stream* s;
  SIM_RETURN_IF_ERROR(ResolveStream(h, ptsz, &s));
  if (s->legacy) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;  // the NULL stream cannot capture
  if (s->capture != nullptr) return CUDA_ERROR_ILLEGAL_STATE;
  s->capture = new Graph();
  return CUDA_SUCCESS;
}
CUresult EndCaptureImpl(CUstream h, CUgraph* out, bool ptsz) {
  SIM_CHECK_INIT();
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Stream* s;
  SIM_RETURN_IF_ERROR(ResolveStream(h, ptsz, &s));
  if (s->capture == nullptr) return CUDA_ERROR_ILLEGAL_STATE;
  *out = reinterpret_cast<CUgraph>(s->capture);
  s->capture = nullptr;
  return CUDA_SUCCESS;
}
CUresult IsCapturingImpl(CUstream h, CUstreamCaptureStatus* status, bool ptsz) {
  SIM_CHECK_INIT();
  if (status == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Stream* s;
  SIM_RETURN_IF_ERROR(ResolveStream(h, ptsz, &s));
  *status = s->capture != nullptr ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
  return CUDA_SUCCESS;
}
CUresult GraphLaunchImpl(CUgraphExec h, CUstream hs, bool ptsz) {
  SIM_CHECK_INIT();
  const GraphExec* g = reinterpret_cast<const GraphExec*>(h);
  if (g == nullptr || g->magic != kGraphExecMagic) return CUDA_ERROR_INVALID_HANDLE;
  Stream* s;
  SIM_RETURN_IF_ERROR(ResolveStream(hs, ptsz, &s));
  if (s->capture != nullptr) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  if (g->nodes.empty()) return CUDA_SUCCESS;
  const uint64_t correlation = NextCorrelation();
  const uint64_t node_ns = GetKnobs().graph_node_ns;
  std::vector<OpPtr> ops;
  ops.reserve(g->nodes.size());
  for (const GraphNode& n : g->nodes) {
    auto op = std::make_shared<Op>();
    op->kind = OpKind::kKernel;
    op->name = n.fn->name.c_str();
    op->duration_ns = n.fn->duration_ns.load(std::memory_order_relaxed);
    op->is_async = true;
    std::copy(n.grid, n.grid + 3, op->grid);
    std::copy(n.block, n.block + 3, op->block);
    op->shared_bytes = n.shared_bytes;
    op->correlation = correlation;
    if (!ops.empty()) op->after_prev_ns = node_ns;
    ops.push_back(std::move(op));
  }
  SubmitAll(s, ops.data(), ops.size());
  return CUDA_SUCCESS;
}


}  // namespace

extern "C" {

// ---- init, version, errors ----
CUresult CUDAAPI cuInit(unsigned int flags) {
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  StartDeviceThreads();
  g_initialized.store(true);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDriverGetVersion(int* v) {
  if (v == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *v = 13000;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGetErrorString(CUresult error, const char** pStr) {
  if (pStr == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const ErrorName* e = FindError(error);
  *pStr = e ? e->text : nullptr;
  return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult CUDAAPI cuGetErrorName(CUresult error, const char** pStr) {
  if (pStr == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const ErrorName* e = FindError(error);
  *pStr = e ? e->name : nullptr;
  return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

// ---- devices ----
CUresult CUDAAPI cuDeviceGet(CUdevice* device, int ordinal) {
  SIM_CHECK_INIT();
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (ordinal < 0 || ordinal >= DeviceCount()) return CUDA_ERROR_INVALID_DEVICE;
  *device = ordinal;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetCount(int* count) {
  SIM_CHECK_INIT();
  if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *count = DeviceCount();
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetName(char* name, int len, CUdevice dev) {
  SIM_CHECK_INIT();
  if (name == nullptr || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  if (GetDevice(dev) == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  strncpy(name, kDeviceName, static_cast<size_t>(len) - 1);
  name[len - 1] = '\0';
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceTotalMem_v2(size_t* bytes, CUdevice dev) {
  SIM_CHECK_INIT();
  if (bytes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (GetDevice(dev) == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  *bytes = kTotalMem;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetUuid_v2(CUuuid* uuid, CUdevice dev) {
  SIM_CHECK_INIT();
  if (uuid == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (GetDevice(dev) == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  static const char kBase[16] = {'s', 'i', 'm', 'g', 'p', 'u', 0x13, 0x00,
                                 0x5a, 0x17, 0x11, 0x5c, 0x0b, 0x00, 0x00, 0x00};
  memcpy(uuid->bytes, kBase, 16);
  uuid->bytes[15] = static_cast<char>(dev);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetUuid(CUuuid* uuid, CUdevice dev) { return cuDeviceGetUuid_v2(uuid, dev); }

CUresult CUDAAPI cuDeviceGetAttribute(int* pi, CUdevice_attribute attrib, CUdevice dev) {
  SIM_CHECK_INIT();
  if (pi == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (GetDevice(dev) == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  if (attrib <= 0 || attrib >= CU_DEVICE_ATTRIBUTE_MAX) return CUDA_ERROR_INVALID_VALUE;
  int v = 0;
  switch (attrib) {
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: v = 1024; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X: v = 1024; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y: v = 1024; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z: v = 64; break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X: v = 2147483647; break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y: v = 65535; break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z: v = 65535; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: v = 49152; break;
    case CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY: v = 65536; break;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE: v = 32; break;
    case CU_DEVICE_ATTRIBUTE_MAX_PITCH: v = 2147483647; break;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK: v = 65536; break;
    case CU_DEVICE_ATTRIBUTE_CLOCK_RATE: v = 1980000; break;
    case CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT: v = 512; break;
    case CU_DEVICE_ATTRIBUTE_GPU_OVERLAP: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: v = 132; break;
    case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_ECC_ENABLED: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: v = 0x18 + dev; break;
    case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE: v = 2619000; break;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH: v = 5120; break;
    case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE: v = 52428800; break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR: v = 2048; break;
    case CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT: v = 3; break;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: v = 9; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: v = 0; break;
    case CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_L1_CACHE_SUPPORTED: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_LOCAL_L1_CACHE_SUPPORTED: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR: v = 233472; break;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR: v = 65536; break;
    case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: v = 232448; break;
    case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR: v = 32; break;
    case CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED: v = 1; break;
    default: v = 0; break;
  }
  *pi = v;
  return CUDA_SUCCESS;
}

// ---- primary context ----
CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext* pctx, CUdevice dev) {
  return PrimaryRetainImpl(pctx, dev);
}
CUresult CUDAAPI cuDevicePrimaryCtxRelease_v2(CUdevice dev) { return PrimaryReleaseImpl(dev); }
CUresult CUDAAPI cuDevicePrimaryCtxRelease(CUdevice dev) { return PrimaryReleaseImpl(dev); }
CUresult CUDAAPI cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags) {
  return PrimarySetFlagsImpl(dev, flags);
}
CUresult CUDAAPI cuDevicePrimaryCtxSetFlags(CUdevice dev, unsigned int flags) {
  return PrimarySetFlagsImpl(dev, flags);
}
CUresult CUDAAPI cuDevicePrimaryCtxReset_v2(CUdevice dev) { return PrimaryResetImpl(dev); }
CUresult CUDAAPI cuDevicePrimaryCtxReset(CUdevice dev) { return PrimaryResetImpl(dev); }
CUresult CUDAAPI cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int* flags, int* active) {
  SIM_CHECK_INIT();
  if (flags == nullptr || active == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Device* d = GetDevice(dev);
  if (d == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard<std::mutex> lk(g_primary_mu);
  *flags = d->primary_flags;
  *active = d->primary_refs > 0 ? 1 : 0;
  return CUDA_SUCCESS;
}

// ---- contexts ----
CUresult CUDAAPI cuCtxCreate_v4(CUcontext* pctx, CUctxCreateParams* params, unsigned int flags,
                                CUdevice dev) {
  return CtxCreateImpl(pctx, flags, dev);
}
CUresult CUDAAPI cuCtxCreate_v3(CUcontext* pctx, CUexecAffinityParam* params, int n,
                                unsigned int flags, CUdevice dev) {
  return CtxCreateImpl(pctx, flags, dev);
}
CUresult CUDAAPI cuCtxCreate_v2(CUcontext* pctx, unsigned int flags, CUdevice dev) {
  return CtxCreateImpl(pctx, flags, dev);
}
CUresult CUDAAPI cuCtxCreate(CUcontext* pctx, unsigned int flags, CUdevice dev) {
  return CtxCreateImpl(pctx, flags, dev);
}
CUresult CUDAAPI cuCtxDestroy_v2(CUcontext ctx) { return CtxDestroyImpl(ctx); }
CUresult CUDAAPI cuCtxDestroy(CUcontext ctx) { return CtxDestroyImpl(ctx); }
CUresult CUDAAPI cuCtxPushCurrent_v2(CUcontext ctx) { return CtxPushImpl(ctx); }
CUresult CUDAAPI cuCtxPushCurrent(CUcontext ctx) { return CtxPushImpl(ctx); }
CUresult CUDAAPI cuCtxPopCurrent_v2(CUcontext* pctx) { return CtxPopImpl(pctx); }
CUresult CUDAAPI cuCtxPopCurrent(CUcontext* pctx) { return CtxPopImpl(pctx); }

CUresult CUDAAPI cuCtxSetCurrent(CUcontext ctx) {
  SIM_CHECK_INIT();
  if (ctx == nullptr) {
    if (!t_ctx_stack.empty()) t_ctx_stack.pop_back();
    return CUDA_SUCCESS;
  }
  if (!ValidContext(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
  if (t_ctx_stack.empty()) {
    t_ctx_stack.push_back(reinterpret_cast<Context*>(ctx));
  } else {
    t_ctx_stack.back() = reinterpret_cast<Context*>(ctx);
  }
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxGetCurrent(CUcontext* pctx) {
  SIM_CHECK_INIT();
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *pctx = reinterpret_cast<CUcontext>(Current());
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxGetDevice(CUdevice* device) { return CtxGetDeviceImpl(device, nullptr); }
CUresult CUDAAPI cuCtxGetDevice_v2(CUdevice* device, CUcontext ctx) {
  return CtxGetDeviceImpl(device, ctx);
}
CUresult CUDAAPI cuCtxSynchronize(void) { return CtxSyncImpl(nullptr); }
CUresult CUDAAPI cuCtxSynchronize_v2(CUcontext ctx) { return CtxSyncImpl(ctx); }

CUresult CUDAAPI cuCtxGetFlags(unsigned int* flags) {
  SIM_CHECK_INIT();
  if (flags == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Context* c;
  SIM_RETURN_IF_ERROR(CurrentContext(&c));
  *flags = c->flags;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxGetApiVersion(CUcontext ctx, unsigned int* version) {
  SIM_CHECK_INIT();
  if (version == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (ctx == nullptr && Current() == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (ctx != nullptr && !ValidContext(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
  *version = 13000;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxGetStreamPriorityRange(int* least, int* greatest) {
  SIM_CHECK_INIT();
  if (least != nullptr) *least = 0;
  if (greatest != nullptr) *greatest = -5;
  return CUDA_SUCCESS;
}

// ---- modules and libraries (any image is accepted) ----
CUresult CUDAAPI cuModuleLoad(CUmodule* module, const char* fname) {
  if (module == nullptr || fname == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Module* m;
  SIM_RETURN_IF_ERROR(NewModule(&m));
  *module = reinterpret_cast<CUmodule>(m);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuModuleLoadData(CUmodule* module, const void* image) {
  if (module == nullptr || image == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Module* m;
  SIM_RETURN_IF_ERROR(NewModule(&m));
  *module = reinterpret_cast<CUmodule>(m);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuModuleLoadDataEx(CUmodule* module, const void* image, unsigned int n,
                                    CUjit_option* options, void** values) {
  return cuModuleLoadData(module, image);
}
CUresult CUDAAPI cuModuleLoadFatBinary(CUmodule* module, const void* fatCubin) {
  return cuModuleLoadData(module, fatCubin);
}
CUresult CUDAAPI cuModuleUnload(CUmodule hmod) {
  SIM_CHECK_INIT();
  if (AsModule(hmod) == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  return CUDA_SUCCESS;  // functions stay valid: CUPTI records point at their names
}
CUresult CUDAAPI cuModuleGetFunction(CUfunction* hfunc, CUmodule hmod, const char* name) {
  SIM_CHECK_INIT();
  if (hfunc == nullptr || name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Module* m = AsModule(hmod);
  if (m == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  *hfunc = reinterpret_cast<CUfunction>(GetOrMakeFunction(m, name));
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuLibraryLoadData(CUlibrary* library, const void* code, CUjit_option* jo,
                                   void** jv, unsigned int nj, CUlibraryOption* lo, void** lv,
                                   unsigned int nl) {
  SIM_CHECK_INIT();
  if (library == nullptr || code == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *library = reinterpret_cast<CUlibrary>(new Module());
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuLibraryLoadFromFile(CUlibrary* library, const char* fileName, CUjit_option* jo,
                                       void** jv, unsigned int nj, CUlibraryOption* lo, void** lv,
                                       unsigned int nl) {
  SIM_CHECK_INIT();
  if (library == nullptr || fileName == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *library = reinterpret_cast<CUlibrary>(new Module());
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuLibraryUnload(CUlibrary library) {
  SIM_CHECK_INIT();
  if (AsModule(library) == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuLibraryGetKernel(CUkernel* pKernel, CUlibrary library, const char* name) {
  SIM_CHECK_INIT();
  if (pKernel == nullptr || name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Module* m = AsModule(library);
  if (m == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  // A CUkernel is the same object as a CUfunction: it may be launched directly.
  *pKernel = reinterpret_cast<CUkernel>(GetOrMakeFunction(m, name));
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuKernelGetFunction(CUfunction* pFunc, CUkernel kernel) {
  SIM_CHECK_INIT();
  if (pFunc == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (AsFunction(kernel) == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (Current() == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  *pFunc = reinterpret_cast<CUfunction>(kernel);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuFuncGetName(const char** name, CUfunction hfunc) {
  SIM_CHECK_INIT();
  if (name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Function* f = AsFunction(hfunc);
  if (f == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  *name = f->name.c_str();
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuKernelGetName(const char** name, CUkernel hfunc) {
  return cuFuncGetName(name, reinterpret_cast<CUfunction>(hfunc));
}

// ---- memory ----
CUresult CUDAAPI cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytesize) {
  SIM_CHECK_INIT();
  Context* c;
  SIM_RETURN_IF_ERROR(CurrentContext(&c));
  return DeviceAllocImpl(dptr, bytesize, c->dev);
}

CUresult CUDAAPI cuMemFree_v2(CUdeviceptr dptr) {
  SIM_CHECK_INIT();
  if (dptr == 0) return CUDA_SUCCESS;
  void* p = reinterpret_cast<void*>(dptr);
  if (Classify(p) != MemKind::kDevice) return CUDA_ERROR_INVALID_VALUE;
  const uint64_t t0 = NowNs();
  SyncAllDevices();  // cuMemFree synchronizes the device
  SyncTrace("cuMemFree", t0, NowNs());
  MemKind kind;
  size_t size;
  if (!RemoveRange(p, &kind, &size)) return CUDA_ERROR_INVALID_VALUE;
  Context* c = Current();
  Device* d = c ? c->dev : GetDevice(0);
  d->allocated.fetch_sub(size);
  free(p);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemAllocAsync(CUdeviceptr* dptr, size_t bytesize, CUstream h) {
  return MemAllocAsyncImpl(dptr, bytesize, h, false);
}
CUresult CUDAAPI cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t bytesize, CUstream h) {
  return MemAllocAsyncImpl(dptr, bytesize, h, true);
}
CUresult CUDAAPI cuMemFreeAsync(CUdeviceptr dptr, CUstream h) {
  return MemFreeAsyncImpl(dptr, h, false);
}
CUresult CUDAAPI cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream h) {
  return MemFreeAsyncImpl(dptr, h, true);
}

CUresult CUDAAPI cuMemAllocHost_v2(void** pp, size_t bytesize) {
  return HostAllocImpl(pp, bytesize, MemKind::kPinned);
}
CUresult CUDAAPI cuMemHostAlloc(void** pp, size_t bytesize, unsigned int flags) {
  return HostAllocImpl(pp, bytesize, MemKind::kPinned);
}
CUresult CUDAAPI cuMemFreeHost(void* p) {
  SIM_CHECK_INIT();
  if (p == nullptr) return CUDA_SUCCESS;
  if (Classify(p) != MemKind::kPinned) return CUDA_ERROR_INVALID_VALUE;
  const uint64_t t0 = NowNs();
  SyncAllDevices();  // like the real driver, freeing pinned memory synchronizes
  SyncTrace("cuMemFreeHost", t0, NowNs());
  MemKind kind;
  size_t size;
  if (!RemoveRange(p, &kind, &size)) return CUDA_ERROR_INVALID_VALUE;
  free(p);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuMemHostRegister_v2(void* p, size_t bytesize, unsigned int flags) {
  SIM_CHECK_INIT();
  if (p == nullptr || bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
  if (Classify(p) != MemKind::kPageable) return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
  AddRange(p, bytesize, MemKind::kRegistered);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuMemHostRegister(void* p, size_t bytesize, unsigned int flags) {
  return cuMemHostRegister_v2(p, bytesize, flags);
}
CUresult CUDAAPI cuMemHostUnregister(void* p) {
  SIM_CHECK_INIT();
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  MemKind kind;
  size_t size;
  if (Classify(p) != MemKind::kRegistered || !RemoveRange(p, &kind, &size)) {
    return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
  }
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuMemHostGetDevicePointer_v2(CUdeviceptr* pdptr, void* p, unsigned int flags) {
  SIM_CHECK_INIT();
  if (pdptr == nullptr || p == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (!IsPinned(Classify(p))) return CUDA_ERROR_INVALID_VALUE;
  *pdptr = reinterpret_cast<CUdeviceptr>(p);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuMemGetInfo_v2(size_t* free_bytes, size_t* total) {
  SIM_CHECK_INIT();
  Context* c;
  SIM_RETURN_IF_ERROR(CurrentContext(&c));
  uint64_t used = c->dev->allocated.load();
  if (free_bytes != nullptr) *free_bytes = used > kTotalMem ? 0 : kTotalMem - used;
  if (total != nullptr) *total = kTotalMem;
  return CUDA_SUCCESS;
}

// ---- copies ----
#define SIM_PTR(x) reinterpret_cast<void*>(x)
#define SIM_CPTR(x) reinterpret_cast<const void*>(x)

CUresult CUDAAPI cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  return CopyImpl(SIM_PTR(dst), SIM_CPTR(src), n, Dir::kInfer, nullptr, false, false);
}
CUresult CUDAAPI cuMemcpy_ptds(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  return CopyImpl(SIM_PTR(dst), SIM_CPTR(src), n, Dir::kInfer, nullptr, false, true);
}
CUresult CUDAAPI cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream h) {
  return CopyImpl(SIM_PTR(dst), SIM_CPTR(src), n, Dir::kInfer, h, true, false);
}
CUresult CUDAAPI cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream h) {
  return CopyImpl(SIM_PTR(dst), SIM_CPTR(src), n, Dir::kInfer, h, true, true);
}
CUresult CUDAAPI cuMemcpyHtoD_v2(CUdeviceptr dst, const void* src, size_t n) {
  return CopyImpl(SIM_PTR(dst), src, n, Dir::kHtoD, nullptr, false, false);
}
CUresult CUDAAPI cuMemcpyHtoD_v2_ptds(CUdeviceptr dst, const void* src, size_t n) {
  return CopyImpl(SIM_PTR(dst), src, n, Dir::kHtoD, nullptr, false, true);
}
CUresult CUDAAPI cuMemcpyDtoH_v2(void* dst, CUdeviceptr src, size_t n) {
  return CopyImpl(dst, SIM_CPTR(src), n, Dir::kDtoH, nullptr, false, false);
}
CUresult CUDAAPI cuMemcpyDtoH_v2_ptds(void* dst, CUdeviceptr src, size_t n) {
  return CopyImpl(dst, SIM_CPTR(src), n, Dir::kDtoH, nullptr, false, true);
}
CUresult CUDAAPI cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  return CopyImpl(SIM_PTR(dst), SIM_CPTR(src), n, Dir::kDtoD, nullptr, false, false);
}
CUresult CUDAAPI cuMemcpyDtoD_v2_ptds(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  return CopyImpl(SIM_PTR(dst), SIM_CPTR(src), n, Dir::kDtoD, nullptr, false, true);
}
CUresult CUDAAPI cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void* src, size_t n, CUstream h) {
  return CopyImpl(SIM_PTR(dst), src, n, Dir::kHtoD, h, true, false);
}
CUresult CUDAAPI cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dst, const void* src, size_t n,
                                           CUstream h) {
  return CopyImpl(SIM_PTR(dst), src, n, Dir::kHtoD, h, true, true);
}
CUresult CUDAAPI cuMemcpyDtoHAsync_v2(void* dst, CUdeviceptr src, size_t n, CUstream h) {
  return CopyImpl(dst, SIM_CPTR(src), n, Dir::kDtoH, h, true, false);
}
CUresult CUDAAPI cuMemcpyDtoHAsync_v2_ptsz(void* dst, CUdeviceptr src, size_t n, CUstream h) {
  return CopyImpl(dst, SIM_CPTR(src), n, Dir::kDtoH, h, true, true);
}
CUresult CUDAAPI cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream h) {
  return CopyImpl(SIM_PTR(dst), SIM_CPTR(src), n, Dir::kDtoD, h, true, false);
}
CUresult CUDAAPI cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t n,
                                           CUstream h) {
  return CopyImpl(SIM_PTR(dst), SIM_CPTR(src), n, Dir::kDtoD, h, true, true);
}

// ---- sets ----
CUresult CUDAAPI cuMemsetD8_v2(CUdeviceptr d, unsigned char v, size_t n) {
  return MemsetImpl(d, v, 1, n, nullptr, false, false);
}
CUresult CUDAAPI cuMemsetD8_v2_ptds(CUdeviceptr d, unsigned char v, size_t n) {
  return MemsetImpl(d, v, 1, n, nullptr, false, true);
}
CUresult CUDAAPI cuMemsetD16_v2(CUdeviceptr d, unsigned short v, size_t n) {
  return MemsetImpl(d, v, 2, n, nullptr, false, false);
}
CUresult CUDAAPI cuMemsetD16_v2_ptds(CUdeviceptr d, unsigned short v, size_t n) {
  return MemsetImpl(d, v, 2, n, nullptr, false, true);
}
CUresult CUDAAPI cuMemsetD32_v2(CUdeviceptr d, unsigned int v, size_t n) {
  return MemsetImpl(d, v, 4, n, nullptr, false, false);
}
CUresult CUDAAPI cuMemsetD32_v2_ptds(CUdeviceptr d, unsigned int v, size_t n) {
  return MemsetImpl(d, v, 4, n, nullptr, false, true);
}
CUresult CUDAAPI cuMemsetD8Async(CUdeviceptr d, unsigned char v, size_t n, CUstream h) {
  return MemsetImpl(d, v, 1, n, h, true, false);
}
CUresult CUDAAPI cuMemsetD8Async_ptsz(CUdeviceptr d, unsigned char v, size_t n, CUstream h) {
  return MemsetImpl(d, v, 1, n, h, true, true);
}
CUresult CUDAAPI cuMemsetD16Async(CUdeviceptr d, unsigned short v, size_t n, CUstream h) {
  return MemsetImpl(d, v, 2, n, h, true, false);
}
CUresult CUDAAPI cuMemsetD16Async_ptsz(CUdeviceptr d, unsigned short v, size_t n, CUstream h) {
  return MemsetImpl(d, v, 2, n, h, true, true);
}
CUresult CUDAAPI cuMemsetD32Async(CUdeviceptr d, unsigned int v, size_t n, CUstream h) {
  return MemsetImpl(d, v, 4, n, h, true, false);
}
CUresult CUDAAPI cuMemsetD32Async_ptsz(CUdeviceptr d, unsigned int v, size_t n, CUstream h) {
  return MemsetImpl(d, v, 4, n, h, true, true);
}

// ---- launches ----
CUresult CUDAAPI cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                unsigned int bx, unsigned int by, unsigned int bz,
                                unsigned int shmem, CUstream h, void** params, void** extra) {
  return LaunchImpl(f, gx, gy, gz, bx, by, bz, shmem, h, false);
}
CUresult CUDAAPI cuLaunchKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy,
                                     unsigned int gz, unsigned int bx, unsigned int by,
                                     unsigned int bz, unsigned int shmem, CUstream h,
                                     void** params, void** extra) {
  return LaunchImpl(f, gx, gy, gz, bx, by, bz, shmem, h, true);
}
CUresult CUDAAPI cuLaunchKernelEx(const CUlaunchConfig* config, CUfunction f, void** params,
                                  void** extra) {
  return LaunchExImpl(config, f, false);
}
CUresult CUDAAPI cuLaunchKernelEx_ptsz(const CUlaunchConfig* config, CUfunction f, void** params,
                                       void** extra) {
  return LaunchExImpl(config, f, true);
}

// ---- streams ----
CUresult CUDAAPI cuStreamCreateWithPriority(CUstream* ph, unsigned int flags, int priority) {
  SIM_CHECK_INIT();
  if (ph == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (flags & ~static_cast<unsigned>(CU_STREAM_NON_BLOCKING)) return CUDA_ERROR_INVALID_VALUE;
  Context* c;
  SIM_RETURN_IF_ERROR(CurrentContext(&c));
  if (priority > 0) priority = 0;
  if (priority < -5) priority = -5;
  *ph = reinterpret_cast<CUstream>(NewStream(c, flags, priority));
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuStreamCreate(CUstream* ph, unsigned int flags) {
  return cuStreamCreateWithPriority(ph, flags, 0);
}
CUresult CUDAAPI cuStreamDestroy_v2(CUstream h) { return StreamDestroyImpl(h); }
CUresult CUDAAPI cuStreamDestroy(CUstream h) { return StreamDestroyImpl(h); }
CUresult CUDAAPI cuStreamSynchronize(CUstream h) { return StreamSyncImpl(h, false); }
CUresult CUDAAPI cuStreamSynchronize_ptsz(CUstream h) { return StreamSyncImpl(h, true); }
CUresult CUDAAPI cuStreamQuery(CUstream h) { return StreamQueryImpl(h, false); }
CUresult CUDAAPI cuStreamQuery_ptsz(CUstream h) { return StreamQueryImpl(h, true); }
CUresult CUDAAPI cuStreamWaitEvent(CUstream h, CUevent e, unsigned int flags) {
  return StreamWaitEventImpl(h, e, false);
}
CUresult CUDAAPI cuStreamWaitEvent_ptsz(CUstream h, CUevent e, unsigned int flags) {
  return StreamWaitEventImpl(h, e, true);
}
CUresult CUDAAPI cuStreamGetId(CUstream h, unsigned long long* id) {
  return StreamGetIdImpl(h, id, false);
}
CUresult CUDAAPI cuStreamGetId_ptsz(CUstream h, unsigned long long* id) {
  return StreamGetIdImpl(h, id, true);
}
CUresult CUDAAPI cuStreamGetFlags(CUstream h, unsigned int* flags) {
  return StreamGetFlagsImpl(h, flags, false);
}
CUresult CUDAAPI cuStreamGetFlags_ptsz(CUstream h, unsigned int* flags) {
  return StreamGetFlagsImpl(h, flags, true);
}
CUresult CUDAAPI cuStreamGetPriority(CUstream h, int* priority) {
  return StreamGetPriorityImpl(h, priority, false);
}
CUresult CUDAAPI cuStreamGetPriority_ptsz(CUstream h, int* priority) {
  return StreamGetPriorityImpl(h, priority, true);
}
CUresult CUDAAPI cuStreamGetCtx(CUstream h, CUcontext* pctx) {
  return StreamGetCtxImpl(h, pctx, false);
}
CUresult CUDAAPI cuStreamGetCtx_ptsz(CUstream h, CUcontext* pctx) {
  return StreamGetCtxImpl(h, pctx, true);
}

// ---- events ----
CUresult CUDAAPI cuEventCreate(CUevent* ph, unsigned int flags) {
  SIM_CHECK_INIT();
  if (ph == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (Current() == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  Event* e = new Event();
  e->flags = flags;
  *ph = reinterpret_cast<CUevent>(e);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuEventDestroy_v2(CUevent h) {
  SIM_CHECK_INIT();
  Event* e;
  SIM_RETURN_IF_ERROR(ValidEvent(h, &e));
  e->magic = 0;  // the object is kept: a stream may still wait on its record
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuEventDestroy(CUevent h) { return cuEventDestroy_v2(h); }
CUresult CUDAAPI cuEventRecord(CUevent h, CUstream s) { return EventRecordImpl(h, s, false); }
CUresult CUDAAPI cuEventRecord_ptsz(CUevent h, CUstream s) { return EventRecordImpl(h, s, true); }
CUresult CUDAAPI cuEventRecordWithFlags(CUevent h, CUstream s, unsigned int flags) {
  return EventRecordImpl(h, s, false);
}
CUresult CUDAAPI cuEventRecordWithFlags_ptsz(CUevent h, CUstream s, unsigned int flags) {
  return EventRecordImpl(h, s, true);
}
CUresult CUDAAPI cuEventQuery(CUevent h) {
  SIM_CHECK_INIT();
  Event* e;
  SIM_RETURN_IF_ERROR(ValidEvent(h, &e));
  Device* d;
  OpPtr rec = EventRecordOf(e, &d);
  if (!rec) return CUDA_SUCCESS;
  return rec->done.load() ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}
CUresult CUDAAPI cuEventSynchronize(CUevent h) {
  SIM_CHECK_INIT();
  Event* e;
  SIM_RETURN_IF_ERROR(ValidEvent(h, &e));
  Device* d;
  OpPtr rec = EventRecordOf(e, &d);
  const uint64_t t0 = NowNs();
  if (rec) WaitDone(d, {rec});
  SyncTrace("cuEventSynchronize", t0, NowNs());
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuEventElapsedTime_v2(float* ms, CUevent hStart, CUevent hEnd) {
  SIM_CHECK_INIT();
  if (ms == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Event *a, *b;
  SIM_RETURN_IF_ERROR(ValidEvent(hStart, &a));
  SIM_RETURN_IF_ERROR(ValidEvent(hEnd, &b));
  if ((a->flags | b->flags) & CU_EVENT_DISABLE_TIMING) return CUDA_ERROR_INVALID_HANDLE;
  Device *da, *db;
  OpPtr ra = EventRecordOf(a, &da);
  OpPtr rb = EventRecordOf(b, &db);
  if (!ra || !rb) return CUDA_ERROR_INVALID_HANDLE;
  if (!ra->done.load() || !rb->done.load()) return CUDA_ERROR_NOT_READY;
  // end_ns is written before done is set (device mutex, then the atomic).
  double diff = static_cast<double>(static_cast<int64_t>(rb->end_ns - ra->end_ns));
  *ms = static_cast<float>(diff / 1e6);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuEventElapsedTime(float* ms, CUevent hStart, CUevent hEnd) {
  return cuEventElapsedTime_v2(ms, hStart, hEnd);
}



// ---- cooperative launches, peer copies (one address space), 2D copies and sets ----
CUresult CUDAAPI cuLaunchCooperativeKernel(CUfunction f, unsigned int gx, unsigned int gy,
                                           unsigned int gz, unsigned int bx, unsigned int by,
                                           unsigned int bz, unsigned int shmem, CUstream h,
                                           void** params) {
  return LaunchImpl(f, gx, gy, gz, bx, by, bz, shmem, h, false);
}
CUresult CUDAAPI cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy,
                                                unsigned int gz, unsigned int bx, unsigned int by,
                                                unsigned int bz, unsigned int shmem, CUstream h,
                                                void** params) {
  return LaunchImpl(f, gx, gy, gz, bx, by, bz, shmem, h, true);
}
CUresult CUDAAPI cuMemcpyPeer(CUdeviceptr dst, CUcontext, CUdeviceptr src, CUcontext, size_t n) {
  return CopyImpl(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), n, Dir::kDtoD,
                  nullptr, false, false);
}
CUresult CUDAAPI cuMemcpyPeer_ptds(CUdeviceptr dst, CUcontext, CUdeviceptr src, CUcontext,
                                   size_t n) {
  return CopyImpl(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), n, Dir::kDtoD,
                  nullptr, false, true);
}
CUresult CUDAAPI cuMemcpyPeerAsync(CUdeviceptr dst, CUcontext, CUdeviceptr src, CUcontext,
                                   size_t n, CUstream h) {
  return CopyImpl(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), n, Dir::kDtoD,
                  h, true, false);
}
CUresult CUDAAPI cuMemcpyPeerAsync_ptsz(CUdeviceptr dst, CUcontext, CUdeviceptr src, CUcontext,
                                        size_t n, CUstream h) {
  return CopyImpl(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), n, Dir::kDtoD,
                  h, true, true);
}
CUresult CUDAAPI cuMemcpy2D_v2(const CUDA_MEMCPY2D* p) { return Copy2DImpl(p, nullptr, false, false); }
CUresult CUDAAPI cuMemcpy2D_v2_ptds(const CUDA_MEMCPY2D* p) { return Copy2DImpl(p, nullptr, false, true); }
CUresult CUDAAPI cuMemcpy2DUnaligned_v2(const CUDA_MEMCPY2D* p) {
  return Copy2DImpl(p, nullptr, false, false);
}
CUresult CUDAAPI cuMemcpy2DUnaligned_v2_ptds(const CUDA_MEMCPY2D* p) {
  return Copy2DImpl(p, nullptr, false, true);
}
CUresult CUDAAPI cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D* p, CUstream h) {
  return Copy2DImpl(p, h, true, false);
}
CUresult CUDAAPI cuMemcpy2DAsync_v2_ptsz(const CUDA_MEMCPY2D* p, CUstream h) {
  return Copy2DImpl(p, h, true, true);
}
#define SIM_MEMSET2D(bits, T, elem)                                                              \
  CUresult CUDAAPI cuMemsetD2D##bits##_v2(CUdeviceptr d, size_t pitch, T v, size_t w, size_t ht) { \
    return Memset2DImpl(d, pitch, v, elem, w, ht, nullptr, false, false);                          \
  }                                                                                                \
  CUresult CUDAAPI cuMemsetD2D##bits##_v2_ptds(CUdeviceptr d, size_t pitch, T v, size_t w,         \
                                               size_t ht) {                                        \
    return Memset2DImpl(d, pitch, v, elem, w, ht, nullptr, false, true);                           \
  }                                                                                                \
  CUresult CUDAAPI cuMemsetD2D##bits##Async(CUdeviceptr d, size_t pitch, T v, size_t w, size_t ht, \
                                            CUstream h) {                                          \
    return Memset2DImpl(d, pitch, v, elem, w, ht, h, true, false);                                 \
  }                                                                                                \
  CUresult CUDAAPI cuMemsetD2D##bits##Async_ptsz(CUdeviceptr d, size_t pitch, T v, size_t w,       \
                                                 size_t ht, CUstream h) {                          \
    return Memset2DImpl(d, pitch, v, elem, w, ht, h, true, true);                                  \
  }
SIM_MEMSET2D(8, unsigned char, 1)
SIM_MEMSET2D(16, unsigned short, 2)
SIM_MEMSET2D(32, unsigned int, 4)
#undef SIM_MEMSET2D

// ---- host functions ----
CUresult CUDAAPI cuLaunchHostFunc(CUstream h, CUhostFn fn, void* data) {
  return LaunchHostFuncImpl(h, fn, data, false);
}
CUresult CUDAAPI cuLaunchHostFunc_ptsz(CUstream h, CUhostFn fn, void* data) {
  return LaunchHostFuncImpl(h, fn, data, true);
}
CUresult CUDAAPI cuStreamAddCallback(CUstream h, CUstreamCallback fn, void* data,
                                     unsigned int flags) {
  return StreamAddCallbackImpl(h, fn, data, flags, false);
}
CUresult CUDAAPI cuStreamAddCallback_ptsz(CUstream h, CUstreamCallback fn, void* data,
                                          unsigned int flags) {
  return StreamAddCallbackImpl(h, fn, data, flags, true);
}

// ---- function, kernel and library attributes ----
CUresult CUDAAPI cuFuncGetAttribute(int* pi, CUfunction_attribute attrib, CUfunction f) {
  return FuncAttributeImpl(pi, attrib, f);
}
CUresult CUDAAPI cuFuncSetAttribute(CUfunction f, CUfunction_attribute attrib, int value) {
  SIM_CHECK_INIT();
  return AsFunction(f) != nullptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}
CUresult CUDAAPI cuFuncSetCacheConfig(CUfunction f, CUfunc_cache config) {
  SIM_CHECK_INIT();
  return AsFunction(f) != nullptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}
CUresult CUDAAPI cuFuncGetModule(CUmodule* mod, CUfunction f) {
  SIM_CHECK_INIT();
  Function* fn = AsFunction(f);
  if (mod == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (fn == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  *mod = reinterpret_cast<CUmodule>(fn->module);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuKernelGetAttribute(int* pi, CUfunction_attribute attrib, CUkernel k,
                                      CUdevice dev) {
  if (GetDevice(dev) == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  return FuncAttributeImpl(pi, attrib, k);
}
CUresult CUDAAPI cuKernelSetAttribute(CUfunction_attribute attrib, int value, CUkernel k,
                                      CUdevice dev) {
  SIM_CHECK_INIT();
  if (GetDevice(dev) == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  return AsFunction(k) != nullptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}
CUresult CUDAAPI cuKernelSetCacheConfig(CUkernel k, CUfunc_cache config, CUdevice dev) {
  SIM_CHECK_INIT();
  return AsFunction(k) != nullptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}
CUresult CUDAAPI cuKernelGetLibrary(CUlibrary* lib, CUkernel k) {
  SIM_CHECK_INIT();
  Function* fn = AsFunction(k);
  if (lib == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (fn == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  *lib = reinterpret_cast<CUlibrary>(fn->module);
  return CUDA_SUCCESS;
}
// A library is loaded as one module (any image is accepted; kernels are made
// by name on lookup), so its module is itself.
CUresult CUDAAPI cuLibraryGetModule(CUmodule* mod, CUlibrary lib) {
  SIM_CHECK_INIT();
  if (mod == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (AsModule(lib) == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  *mod = reinterpret_cast<CUmodule>(lib);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuLibraryGetKernelCount(unsigned int* count, CUlibrary lib) {
  SIM_CHECK_INIT();
  Module* m = AsModule(lib);
  if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (m == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  std::lock_guard<std::mutex> lk(m->mu);
  *count = static_cast<unsigned>(m->functions.size());  // those looked up so far
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuLibraryEnumerateKernels(CUkernel* kernels, unsigned int n, CUlibrary lib) {
  SIM_CHECK_INIT();
  Module* m = AsModule(lib);
  if (kernels == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (m == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  std::lock_guard<std::mutex> lk(m->mu);
  unsigned i = 0;
  for (const auto& [name, f] : m->functions) {
    if (i == n) break;
    kernels[i++] = reinterpret_cast<CUkernel>(f);
  }
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuOccupancyMaxActiveBlocksPerMultiprocessor(int* n, CUfunction f, int block,
                                                             size_t smem) {
  SIM_CHECK_INIT();
  if (n == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (AsFunction(f) == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  *n = ActiveBlocksPerSm(block);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int* n, CUfunction f,
                                                                      int block, size_t smem,
                                                                      unsigned int flags) {
  return cuOccupancyMaxActiveBlocksPerMultiprocessor(n, f, block, smem);
}

// ---- pointers ----
CUresult CUDAAPI cuPointerGetAttribute(void* data, CUpointer_attribute attribute, CUdeviceptr p) {
  SIM_CHECK_INIT();
  return PointerAttributeImpl(data, attribute, p);
}
// As NVIDIA's driver: unknown memory is not an error here; each attribute it
// has no value for reads as zero (the memory type 0 is "unregistered").
CUresult CUDAAPI cuPointerGetAttributes(unsigned int n, CUpointer_attribute* attributes,
                                        void** data, CUdeviceptr p) {
  SIM_CHECK_INIT();
  if (attributes == nullptr || data == nullptr) return CUDA_ERROR_INVALID_VALUE;
  for (unsigned i = 0; i < n; ++i) {
    if (data[i] == nullptr) continue;
    if (PointerAttributeImpl(data[i], attributes[i], p) == CUDA_SUCCESS) continue;
    switch (attributes[i]) {
      case CU_POINTER_ATTRIBUTE_CONTEXT: *static_cast<CUcontext*>(data[i]) = nullptr; break;
      case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
      case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
        *static_cast<CUdeviceptr*>(data[i]) = 0;
        break;
      case CU_POINTER_ATTRIBUTE_HOST_POINTER: *static_cast<void**>(data[i]) = nullptr; break;
      case CU_POINTER_ATTRIBUTE_RANGE_SIZE: *static_cast<size_t*>(data[i]) = 0; break;
      case CU_POINTER_ATTRIBUTE_BUFFER_ID: *static_cast<unsigned long long*>(data[i]) = 0; break;
      case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: *static_cast<int*>(data[i]) = -1; break;
      default: *static_cast<unsigned*>(data[i]) = 0; break;
    }
  }
  return CUDA_SUCCESS;
}

// ---- the runtime's private interface ----
// NVIDIA's runtime (and NVRTC, cuBLAS, cuDNN, which carry it) ask the driver
// for undocumented export tables by UUID. The simulator has none: a null
// table and "not supported", which callers that check take as "absent".
CUresult CUDAAPI cuGetExportTable(const void** table, const CUuuid* id) {
  if (table == nullptr || id == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *table = nullptr;
  return CUDA_ERROR_NOT_SUPPORTED;
}

}  // extern "C"

// The simulated cuBLAS's GEMM time (simgpu_hooks.h): later launches of the
// function take this long.
extern "C" __attribute__((visibility("default"))) int simgpu_set_function_duration(
    void* function, uint64_t ns) {
  Function* f = AsFunction(function);
  if (f == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  f->duration_ns.store(ns, std::memory_order_relaxed);
  return CUDA_SUCCESS;
}

// The simulated NCCL's way onto a stream (simgpu_hooks.h): an op like a kernel
// launch whose end the caller decides.
extern "C" __attribute__((visibility("default"))) int simgpu_submit_external(
    void* stream, const SimgpuExternalOp* ext) {
  SIM_CHECK_INIT();
  if (ext == nullptr || ext->size < sizeof(SimgpuExternalOp) || ext->poll_end == nullptr) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  Stream* s;
  SIM_RETURN_IF_ERROR(ResolveStream(static_cast<CUstream>(stream), false, &s));
  auto op = std::make_shared<Op>();
  op->kind = OpKind::kKernel;
  op->name = ext->name;
  op->is_async = true;
  op->bytes = 0;
  for (int i = 0; i < 3; ++i) op->grid[i] = op->block[i] = 1;
  op->external = true;
  op->ext = *ext;
  op->correlation = NextCorrelation();
  Submit(s, op);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamBeginCapture_v2(CUstream h, CUstreamCaptureMode mode) {
  return BeginCaptureImpl(h, false);
}
CUresult CUDAAPI cuStreamBeginCapture_v2_ptsz(CUstream h, CUstreamCaptureMode mode) {
  return BeginCaptureImpl(h, true);
}
CUresult CUDAAPI cuStreamEndCapture(CUstream h, CUgraph* out) { return EndCaptureImpl(h, out, false); }
CUresult CUDAAPI cuStreamEndCapture_ptsz(CUstream h, CUgraph* out) {
  return EndCaptureImpl(h, out, true);
}
CUresult CUDAAPI cuStreamIsCapturing(CUstream h, CUstreamCaptureStatus* status) {
  return IsCapturingImpl(h, status, false);
}
CUresult CUDAAPI cuStreamIsCapturing_ptsz(CUstream h, CUstreamCaptureStatus* status) {
  return IsCapturingImpl(h, status, true);
}
CUresult CUDAAPI cuGraphInstantiateWithFlags(CUgraphExec* out, CUgraph h, unsigned long long flags) {
  SIM_CHECK_INIT();
  const Graph* g = reinterpret_cast<const Graph*>(h);
  if (out == nullptr || g == nullptr || g->magic != kGraphMagic) return CUDA_ERROR_INVALID_VALUE;
  GraphExec* e = new GraphExec();
  e->nodes = g->nodes;
  *out = reinterpret_cast<CUgraphExec>(e);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuGraphLaunch(CUgraphExec h, CUstream s) { return GraphLaunchImpl(h, s, false); }
CUresult CUDAAPI cuGraphLaunch_ptsz(CUgraphExec h, CUstream s) { return GraphLaunchImpl(h, s, true); }
CUresult CUDAAPI cuGraphDestroy(CUgraph h) {
  Graph* g = reinterpret_cast<Graph*>(h);
  if (g == nullptr || g->magic != kGraphMagic) return CUDA_ERROR_INVALID_VALUE;
  g->magic = 0;
  delete g;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuGraphExecDestroy(CUgraphExec h) {
  GraphExec* e = reinterpret_cast<GraphExec*>(h);
  if (e == nullptr || e->magic != kGraphExecMagic) return CUDA_ERROR_INVALID_VALUE;
  e->magic = 0;
  delete e;  // a launch in flight holds its own ops
  return CUDA_SUCCESS;
}
