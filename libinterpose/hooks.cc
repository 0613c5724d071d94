// The hooks: wrappers generated from hooks.def, the real-function slots, and
// symbol resolution through dlsym, cuGetProcAddress and cuGetProcAddress_v2.
//
// How it works. A program reaches the driver three ways: the PLT (our exported
// wrappers win by LD_PRELOAD), dlsym on a handle to libcuda (XLA/JAX), and
// cuGetProcAddress (NVIDIA's runtime, NCCL, PyTorch). For the last two the
// real lookup runs first with the caller's exact (symbol, version, flags); the
// wrapper is chosen by the pointer that comes back, so a caller always ends up
// in the variant the driver would have given it. Unknown names, and lookups the
// driver makes of itself, pass through untouched.
//
// NCCL (nccl_hooks.def): `nccl*` and `pnccl*` wrappers, reached through the
// PLT or through dlsym on a libnccl handle (matched by name); each forwards to
// the real `pnccl*` (else `nccl*`) from the next object or the loaded
// libnccl.so.2, and records the call and its arguments (nccl_state.h).
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>
#include <dlfcn.h>
#include <errno.h>
#include <string.h>

#include <atomic>
#include <type_traits>

#include "clock.h"
#include "cupti_source.h"
#include "hooks.h"
#include "nccl_abi.h"
#include "nccl_state.h"
#include "python_frames.h"
#include "recorder.h"

namespace stallscope {
namespace {

using trace::ApiCategory;
constexpr uint16_t SUBMITS = trace::kApiSubmits, MAY_BLOCK = trace::kApiMayBlock,
                   ASYNC = trace::kApiAsync, PER_THREAD = trace::kApiPerThread,
                   H2D = trace::kApiHostToDev, D2H = trace::kApiDevToHost, D2D = trace::kApiDevToDev;
constexpr uint8_t kLaunch = uint8_t(ApiCategory::kLaunch), kCopy = uint8_t(ApiCategory::kCopy),
                  kSet = uint8_t(ApiCategory::kSet), kSync = uint8_t(ApiCategory::kSync),
                  kQuery = uint8_t(ApiCategory::kQuery), kFree = uint8_t(ApiCategory::kFree),
                  kWait = uint8_t(ApiCategory::kWait), kEvent = uint8_t(ApiCategory::kEvent),
                  kGraph = uint8_t(ApiCategory::kGraph), kHostFunc = uint8_t(ApiCategory::kHostFunc),
                  kNcclCategory = uint8_t(ApiCategory::kNccl);

// CUDA hooks first, then the NCCL ones (each as `nccl*` and `pnccl*`).
enum HookId : uint16_t {
#define HOOK(name, ...) k_##name,
#include "hooks.def"
#undef HOOK
#define NCCL_HOOK(name, ...) k_##name, k_p##name,
#include "nccl_hooks.def"
#undef NCCL_HOOK
  kHookCount
};

constexpr HookInfo kHooks[] = {
#define HOOK(name, base, version, per_thread, category, flags, ...) \
  {#name, #base, version, per_thread != 0, category, uint16_t(flags)},
#include "hooks.def"
#undef HOOK
#define NCCL_HOOK(name, ...)                          \
  {#name, #name, 0, false, kNcclCategory, 0},         \
  {"p" #name, #name, 0, false, kNcclCategory, 0},
#include "nccl_hooks.def"
#undef NCCL_HOOK
};
static_assert(sizeof(kHooks) / sizeof(kHooks[0]) == kHookCount);

std::atomic<void*> g_real[kHookCount];
void* g_wrappers[kHookCount];

template <typename T>
uint64_t ToU64(T v) {
  if constexpr (std::is_pointer_v<T> || std::is_null_pointer_v<T>)
    return reinterpret_cast<uintptr_t>(v);
  else
    return static_cast<uint64_t>(v);
}

using DlsymFn = void* (*)(void*, const char*);

// Code that runs inside a sanitizer runtime's own start-up (its dlsym calls).
#define STALLSCOPE_NO_SANITIZE __attribute__((no_sanitize("address", "undefined", "thread")))

}  // namespace

// The real dlsym (glibc's), also used by the resolution code below.
extern "C" {
DlsymFn stallscope_real_dlsym = nullptr;
}

extern "C" __attribute__((visibility("hidden"))) STALLSCOPE_NO_SANITIZE DlsymFn
stallscope_resolve_real_dlsym() {
  if (!stallscope_real_dlsym) {
    void* p = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
    if (!p) p = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
    stallscope_real_dlsym = reinterpret_cast<DlsymFn>(p);
  }
  return stallscope_real_dlsym;
}

void* RealDlsym(void* handle, const char* name) {
  return stallscope_resolve_real_dlsym()(handle, name);
}

const HookInfo* Hooks(size_t* count) {
  *count = kHookCount;
  return kHooks;
}

namespace {

void* LibcudaHandle() {
  static std::atomic<void*> handle{nullptr};
  void* h = handle.load(std::memory_order_acquire);
  if (!h) {
    h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
    if (h) handle.store(h, std::memory_order_release);
  }
  return h;
}

bool IsOurs(void* p) {
  for (void* w : g_wrappers)
    if (w == p) return true;
  return false;
}

// The real function for a hook called through the PLT (or a wrapper handed
// out before its slot was filled): the next definition after ours, else
// libcuda's own (a libcuda opened RTLD_LOCAL is not in the global scope).
__attribute__((noinline)) void* ResolveReal(HookId id) {
  void* p = RealDlsym(RTLD_NEXT, kHooks[id].name);
  if ((!p || IsOurs(p)) && LibcudaHandle()) p = RealDlsym(LibcudaHandle(), kHooks[id].name);
  if (p && IsOurs(p)) p = nullptr;
  if (p) {
    void* expected = nullptr;
    g_real[id].compare_exchange_strong(expected, p);
    return g_real[id].load();
  }
  return nullptr;
}

inline void* Real(HookId id) {
  void* p = g_real[id].load(std::memory_order_acquire);
  return __builtin_expect(p != nullptr, 1) ? p : ResolveReal(id);
}

// The real NCCL function for hook `id` (`nccl*` or `pnccl*`): `pnccl*` first
// (the strong definition), then `nccl*`, from the next object, else from an
// already loaded libnccl.so.2 (one opened RTLD_LOCAL is not in the global
// scope).
__attribute__((noinline)) void* ResolveRealNccl(HookId id) {
  const char* base = kHooks[id].base;  // ncclX
  char pname[96];
  size_t len = strlen(base);
  if (len + 2 > sizeof pname) return nullptr;
  pname[0] = 'p';
  memcpy(pname + 1, base, len + 1);
  void* lib = nullptr;
  void* p = nullptr;
  for (int pass = 0; pass < 2 && !p; ++pass) {
    void* h = RTLD_NEXT;
    if (pass == 1) {
      lib = dlopen("libnccl.so.2", RTLD_LAZY | RTLD_NOLOAD);
      if (!lib) break;
      h = lib;
    }
    for (const char* n : {static_cast<const char*>(pname), base}) {
      p = RealDlsym(h, n);
      if (p && IsOurs(p)) p = nullptr;
      if (p) break;
    }
  }
  if (!p) return nullptr;
  void* expected = nullptr;
  g_real[id].compare_exchange_strong(expected, p);
  return g_real[id].load();
}

inline void* RealNccl(HookId id) {
  void* p = g_real[id].load(std::memory_order_acquire);
  return __builtin_expect(p != nullptr, 1) ? p : ResolveRealNccl(id);
}

// One hooked call: the guard, the timestamps, the record. Nothing in here
// allocates, locks or makes a system call unless a buffer is full.
class CallScope {
 public:
  explicit CallScope(HookId id) : id_(id), ts_(recorder::Self()) {
    if (ts_.in_hook) return;
    ts_.in_hook = true;
    entered_ = true;
    recording_ = recorder::IsOn() || recorder::EnsureStarted();
  }
  ~CallScope() {
    if (entered_) ts_.in_hook = false;
  }
  bool recording() const { return recording_; }

  // Inlined into each wrapper (a call to each cost the launch a few ns).
  __attribute__((always_inline)) void Enter(uint64_t stream, uint64_t object, uint64_t bytes) {
    Enter(stream, object, bytes, (kHooks[id_].flags & trace::kApiSubmits) != 0);
  }
  // `submits`: the call launches device work now (gets a correlation id).
  __attribute__((always_inline)) void Enter(uint64_t stream, uint64_t object, uint64_t bytes, bool submits) {
    stream_ = stream;
    object_ = object;
    bytes_ = bytes;
    if (submits) {
      if (__builtin_expect(ts_.index == 0, 0)) ts_.index = recorder::TakeThreadIndex();
      corr_ = (uint64_t(ts_.index) << 40) | ++ts_.next_corr;
      pushed_ = cupti::Push(corr_);
    }
    uint64_t now = Ticks();
    // A long gap since this thread's previous call: read its CPU clock once
    // (off the fast path; the enter tick is taken after the system call).
    if (__builtin_expect(recorder::LongGap(ts_, now), 0)) now = recorder::SampleCpuAtEnter(ts_);
    enter_ = now;
  }

  // errno is the real call's: the recorder's slow paths (CUPTI, stack
  // capture, buffer hand-off) save and restore it themselves.
  __attribute__((always_inline)) void Exit(CUresult result) {
    uint64_t exit = Ticks();
    cupti::Pop(pushed_);
    uint32_t stack = 0, python_stack = 0;
    if (kHooks[id_].flags & trace::kApiMayBlock) {
      recorder::SampleCpuAtExit(ts_, exit);  // before the capture: its CPU time is the gap's
      stack = recorder::CaptureStack();
      python_stack = python::CaptureStack();
    } else if (__builtin_expect(recorder::LongCall(enter_, exit), 0)) {
      recorder::SampleCpuAtExit(ts_, exit);
    }
    if (trace::ApiRecord* r = recorder::Reserve(ts_)) {
      r->enter = enter_;
      r->exit = exit;
      r->correlation = corr_;
      r->stream = stream_;
      r->object = object_;
      r->bytes = bytes_;
      r->stack = stack;
      r->api = id_;
      r->flags = uint16_t((python_stack ? trace::kRecordPythonStack : 0) |
                          (pushed_ == cupti::kSampledOut ? trace::kRecordUntimed : 0));
      r->result = int32_t(result);
      r->python_stack = python_stack;
      recorder::Commit(ts_);
    }
    ts_.last_exit = exit;
  }

  uint64_t enter() const { return enter_; }
  uint64_t correlation() const { return corr_; }
  uint32_t tid() const { return ts_.tid; }
  void set_object(uint64_t object) { object_ = object; }

 private:
  HookId id_;
  ThreadState& ts_;
  bool entered_ = false;
  bool recording_ = false;
  uint64_t enter_ = 0, corr_ = 0, stream_ = 0, object_ = 0, bytes_ = 0;
  cupti::PushResult pushed_ = cupti::kNotTimed;
};

}  // namespace
}  // namespace stallscope

using namespace stallscope;

#define STALLSCOPE_EXPORT extern "C" __attribute__((visibility("default")))

#include "hooks_check.h"

#define HOOK(name, base, version, per_thread, category, flags, params, args, stream, object, bytes) \
  STALLSCOPE_EXPORT CUresult name params {                                                         \
    using Fn = CUresult(*) params;                                                                 \
    auto real = reinterpret_cast<Fn>(Real(k_##name));                                              \
    if (__builtin_expect(real == nullptr, 0)) return CUDA_ERROR_NOT_INITIALIZED;                   \
    CallScope scope(k_##name);                                                                     \
    if (!scope.recording()) return real args;                                                      \
    scope.Enter(ToU64(stream), ToU64(object), ToU64(bytes));                                       \
    CUresult r = real args;                                                                        \
    scope.Exit(r);                                                                                 \
    return r;                                                                                      \
  }
#include "hooks.def"
#undef HOOK

// NCCL wrappers: the call is described (nccl::Call), recorded as an API
// record of category kNccl (stream, communicator, bytes; a correlation id
// only when it launches device work now, i.e. outside a group, and for the
// outermost ncclGroupEnd) plus a trace::NcclRecord with its arguments,
// communicator id, rank and sequence number.
#define NCCL_WRAPPER(wname, nkind, params, args, setup)                                \
  STALLSCOPE_EXPORT ncclResult_t wname params {                                      \
    using Fn = ncclResult_t(*) params;                                               \
    auto real = reinterpret_cast<Fn>(RealNccl(k_##wname));                           \
    if (__builtin_expect(real == nullptr, 0)) return ncclSystemError;                \
    CallScope scope(k_##wname);                                                      \
    if (!scope.recording()) return real args;                                        \
    nccl::Call c;                                                                    \
    c.kind = trace::NcclKind::nkind;                                                 \
    setup                                                                            \
    nccl::Before(&c);                                                                \
    scope.Enter(ToU64(c.stream), ToU64(c.comm), c.Bytes(), c.submits);               \
    ncclResult_t r = real args;                                                      \
    if (c.out && c.out_count > 0 && r == ncclSuccess) scope.set_object(ToU64(*c.out)); \
    scope.Exit(CUresult(r));                                                         \
    nccl::After(c, int(r), scope.tid(), scope.enter(), scope.correlation());          \
    return r;                                                                        \
  }
#define NCCL_HOOK(name, nkind, params, args, setup) \
  NCCL_WRAPPER(name, nkind, params, args, setup)    \
  NCCL_WRAPPER(p##name, nkind, params, args, setup)
#include "nccl_hooks.def"
#undef NCCL_HOOK
#undef NCCL_WRAPPER

namespace stallscope {
namespace {

__attribute__((constructor)) void FillWrapperTable() {
#define HOOK(name, ...) g_wrappers[k_##name] = reinterpret_cast<void*>(&::name);
#include "hooks.def"
#undef HOOK
#define NCCL_HOOK(name, ...)                                        \
  g_wrappers[k_##name] = reinterpret_cast<void*>(&::name);          \
  g_wrappers[k_p##name] = reinterpret_cast<void*>(&::p##name);
#include "nccl_hooks.def"
#undef NCCL_HOOK
  stallscope_resolve_real_dlsym();
}

int FindHook(const char* name) {
  for (int i = 0; i < kHookCount; ++i)
    if (strcmp(kHooks[i].name, name) == 0) return i;
  return -1;
}

// The wrapper to hand out for a pointer `p` the driver returned when asked for
// base name `symbol` at (version, flags); `p` itself when we do not hook it.
void* WrapResolved(const char* symbol, void* p, int version, cuuint64_t flags) {
  if (!p || IsOurs(p)) return p;
  void* lib = LibcudaHandle();
  int fallback = -1;
  int fallback_version = -1;
  bool want_pt = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
  for (int i = 0; i < kHookCount; ++i) {
    if (strcmp(kHooks[i].base, symbol) != 0) continue;
    void* exported = lib ? RealDlsym(lib, kHooks[i].name) : nullptr;
    if (exported == p) {
      void* expected = nullptr;
      g_real[i].compare_exchange_strong(expected, p);
      return g_real[i].load() == p ? g_wrappers[i] : p;
    }
    if (kHooks[i].per_thread == want_pt && kHooks[i].version <= version &&
        kHooks[i].version > fallback_version) {
      fallback = i;
      fallback_version = kHooks[i].version;
    }
  }
  if (fallback < 0) return p;
  // The driver returned an internal pointer: the variant is the one its
  // (version, flags) select. Hand out the wrapper only if its slot agrees.
  void* expected = nullptr;
  g_real[fallback].compare_exchange_strong(expected, p);
  return g_real[fallback].load() == p ? g_wrappers[fallback] : p;
}

using GetProcV1 = CUresult (*)(const char*, void**, int, cuuint64_t);
using GetProcV2 = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
std::atomic<void*> g_real_getproc_v1{nullptr};
std::atomic<void*> g_real_getproc_v2{nullptr};

void* RealGetProc(std::atomic<void*>& slot, const char* name) {
  void* p = slot.load();
  if (!p) {
    p = RealDlsym(RTLD_NEXT, name);
    if ((!p) && LibcudaHandle()) p = RealDlsym(LibcudaHandle(), name);
    slot.store(p);
  }
  return p;
}

}  // namespace
}  // namespace stallscope

STALLSCOPE_EXPORT CUresult cuGetProcAddress(const char*, void**, int, cuuint64_t);
STALLSCOPE_EXPORT CUresult cuGetProcAddress_v2(const char*, void**, int, cuuint64_t,
                                               CUdriverProcAddressQueryResult*);

namespace stallscope {
namespace {

void* AnswerLookup(const char* symbol, void* p, int version, cuuint64_t flags) {
  if (!symbol || !p) return p;
  if (strcmp(symbol, "cuGetProcAddress") == 0) {
    // The runtime's self-lookup: hand back our resolver of the same form so
    // that every later lookup also passes through it.
    // (First wins, as in the dlsym hook: a driver layer's own resolver
    // stays its own.)
    void* lib = LibcudaHandle();
    auto claim = [p](std::atomic<void*>& slot) {
      void* expected = nullptr;
      slot.compare_exchange_strong(expected, p);
      return slot.load() == p;
    };
    if (lib && p == RealDlsym(lib, "cuGetProcAddress_v2")) {
      return claim(g_real_getproc_v2) ? reinterpret_cast<void*>(&::cuGetProcAddress_v2) : p;
    }
    if (lib && p == RealDlsym(lib, "cuGetProcAddress")) {
      return claim(g_real_getproc_v1) ? reinterpret_cast<void*>(&::cuGetProcAddress) : p;
    }
    return p;
  }
  return WrapResolved(symbol, p, version, flags);
}

}  // namespace
}  // namespace stallscope

STALLSCOPE_EXPORT CUresult cuGetProcAddress(const char* symbol, void** pfn, int version,
                                            cuuint64_t flags) {
  auto real = reinterpret_cast<GetProcV1>(RealGetProc(g_real_getproc_v1, "cuGetProcAddress"));
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  CUresult r = real(symbol, pfn, version, flags);
  if (r == CUDA_SUCCESS && pfn) {
    int saved = errno;
    *pfn = AnswerLookup(symbol, *pfn, version, flags);
    errno = saved;
  }
  return r;
}

STALLSCOPE_EXPORT CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int version,
                                               cuuint64_t flags,
                                               CUdriverProcAddressQueryResult* status) {
  auto real = reinterpret_cast<GetProcV2>(RealGetProc(g_real_getproc_v2, "cuGetProcAddress_v2"));
  if (!real) return CUDA_ERROR_NOT_INITIALIZED;
  CUresult r = real(symbol, pfn, version, flags, status);
  if (r == CUDA_SUCCESS && pfn) {
    int saved = errno;
    *pfn = AnswerLookup(symbol, *pfn, version, flags);
    errno = saved;
  }
  return r;
}

// dlsym. The entry point is assembly: RTLD_NEXT lookups jump straight to
// glibc's dlsym so that "next" stays relative to the real caller; every other
// lookup goes through stallscope_dlsym_impl, tail-jumped so that its return
// address is the caller's.
//
// A sanitizer's runtime resolves its interceptors with dlsym while it
// initializes, before its shadow memory exists: the path to the early return
// for names that are neither CUDA's nor NCCL's is left uninstrumented and
// calls nothing a sanitizer intercepts; hooked names go on to DlsymOfHooked.
namespace {
STALLSCOPE_NO_SANITIZE bool HasPrefix(const char* s, const char* prefix) {
  for (; *prefix; ++s, ++prefix) {
    if (*s != *prefix) return false;
  }
  return true;
}
}  // namespace

static void* DlsymOfHooked(void* caller, void* p, const char* name);

extern "C" __attribute__((visibility("hidden"))) STALLSCOPE_NO_SANITIZE void* stallscope_dlsym_impl(
    void* handle, const char* name) {
  void* caller = __builtin_return_address(0);
  DlsymFn real = stallscope_resolve_real_dlsym();
  void* p = real(handle, name);
  if (!p || !name) return p;
  if (!HasPrefix(name, "cu") && !HasPrefix(name, "nccl") && !HasPrefix(name, "pnccl")) return p;
  return DlsymOfHooked(caller, p, name);
}

static void* DlsymOfHooked(void* caller, void* p, const char* name) {
  int saved = errno;
  void* result = p;
  if (strcmp(name, "cuGetProcAddress") == 0 || strcmp(name, "cuGetProcAddress_v2") == 0) {
    if (!IsOurs(p) && p != reinterpret_cast<void*>(&::cuGetProcAddress) &&
        p != reinterpret_cast<void*>(&::cuGetProcAddress_v2)) {
      // Never redirect a lookup that the library holding `p` makes of itself.
      Dl_info a{}, b{};
      if (!(dladdr(caller, &a) && dladdr(p, &b) && a.dli_fbase == b.dli_fbase)) {
        // The first resolver found is the driver as the process sees it. A
        // later lookup that finds another one is a driver layer (a shim, a
        // forward-compatibility library) asking for the layer below: it
        // gets that layer itself, and the first stays the one our wrappers
        // call, so no layer is bypassed.
        bool v2 = name[16] == '_';
        std::atomic<void*>& slot = v2 ? g_real_getproc_v2 : g_real_getproc_v1;
        void* expected = nullptr;
        slot.compare_exchange_strong(expected, p);
        if (slot.load() == p) {
          result = v2 ? reinterpret_cast<void*>(&::cuGetProcAddress_v2)
                      : reinterpret_cast<void*>(&::cuGetProcAddress);
        }
      }
    }
  } else if (int id = FindHook(name); id >= 0 && !IsOurs(p)) {
    Dl_info a{}, b{};
    if (!(dladdr(caller, &a) && dladdr(p, &b) && a.dli_fbase == b.dli_fbase)) {
      void* expected = nullptr;
      g_real[id].compare_exchange_strong(expected, p);
      if (g_real[id].load() == p) result = g_wrappers[id];
    }
  }
  errno = saved;
  return result;
}

asm(R"(
    .text
    .globl dlsym
    .type dlsym, @function
dlsym:
    .cfi_startproc
    cmpq $-1, %rdi
    jne 2f
    movq stallscope_real_dlsym(%rip), %rax
    testq %rax, %rax
    jz 1f
    jmp *%rax
1:  pushq %rdi
    .cfi_adjust_cfa_offset 8
    pushq %rsi
    .cfi_adjust_cfa_offset 8
    subq $8, %rsp
    .cfi_adjust_cfa_offset 8
    call stallscope_resolve_real_dlsym
    addq $8, %rsp
    .cfi_adjust_cfa_offset -8
    popq %rsi
    .cfi_adjust_cfa_offset -8
    popq %rdi
    .cfi_adjust_cfa_offset -8
    jmp *%rax
2:  jmp stallscope_dlsym_impl
    .cfi_endproc
    .size dlsym, .-dlsym
)");
