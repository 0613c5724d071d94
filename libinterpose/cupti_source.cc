// CUPTI activity source (see cupti_source.h). CUPTI is found at run time: an
// already-loaded copy first (RTLD_NOLOAD), then by soname, then in the usual
// toolkit places and Python wheels. Every failure leaves host-only recording
// and a diagnostic.
#include "cupti_source.h"

#include <dlfcn.h>
#include <errno.h>
#include <glob.h>
#include <link.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <string>
#include <string_view>
#include <vector>

#include <cupti_activity.h>

#include "clock.h"
#include "fast_unwind.h"
#include "recorder.h"

namespace stallscope {
void* RealDlsym(void* handle, const char* name);
}

namespace stallscope::cupti {

std::atomic<uint8_t> g_mode{kNotTimed};

namespace {

bool g_active = false;

constexpr auto kExternalKind = CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM2;
// CUPTI's activity buffers: 4 MiB, or a sixteenth of the memory budget
// (STALLSCOPE_BUFFER_MB) when that is smaller, at least 64 KiB; at most 4
// of them held at once (a request past that gets none: CUPTI then drops
// records and says how many, counted as cupti_dropped).
constexpr size_t kMaxBufferBytes = 4 << 20;
constexpr size_t kMinBufferBytes = 64 << 10;
constexpr int kMaxBuffersHeld = 4;
size_t g_buffer_bytes = kMaxBufferBytes;
std::atomic<int> g_buffers_held{0};

using EnableFn = CUptiResult (*)(CUpti_ActivityKind);
using RegisterCallbacksFn = CUptiResult (*)(CUpti_BuffersCallbackRequestFunc,
                                            CUpti_BuffersCallbackCompleteFunc);
using FlushAllFn = CUptiResult (*)(uint32_t);
using GetNextRecordFn = CUptiResult (*)(uint8_t*, size_t, CUpti_Activity**);
using PushFn = CUptiResult (*)(CUpti_ExternalCorrelationKind, uint64_t);
using PopFn = CUptiResult (*)(CUpti_ExternalCorrelationKind, uint64_t*);
using TimestampCbFn = CUptiResult (*)(CUpti_TimestampCallbackFunc);
using DroppedFn = CUptiResult (*)(CUcontext, uint32_t, size_t*);

FlushAllFn g_flush = nullptr;
GetNextRecordFn g_next = nullptr;
PushFn g_push = nullptr;
PopFn g_pop = nullptr;
DroppedFn g_dropped = nullptr;
EnableFn g_enable = nullptr;
EnableFn g_disable = nullptr;
// The kinds that time device work (turned off between sampled windows).
constexpr CUpti_ActivityKind kDeviceKinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
                                               CUPTI_ACTIVITY_KIND_MEMCPY,
                                               CUPTI_ACTIVITY_KIND_MEMSET};

uint64_t CUPTIAPI Timestamp() { return MonoNs(); }

// Buffers handed back are kept for the next request, up to kMaxBuffersHeld:
// CUPTI may ask from any thread (the simulated one asks on the thread whose
// record found the last buffer full), and a buffer freed by one thread and
// allocated anew by another would leave its memory behind in another
// malloc arena each time.
std::atomic<void*> g_spare[kMaxBuffersHeld];

void* TakeBuffer() {
  for (auto& slot : g_spare) {
    if (void* p = slot.exchange(nullptr, std::memory_order_acquire)) return p;
  }
  void* p = nullptr;
  return posix_memalign(&p, 8, g_buffer_bytes) == 0 ? p : nullptr;
}

void ReturnBuffer(void* p) {
  for (auto& slot : g_spare) {
    void* empty = nullptr;
    if (slot.compare_exchange_strong(empty, p, std::memory_order_release)) return;
  }
  free(p);
}

void CUPTIAPI BufferRequested(uint8_t** buffer, size_t* size, size_t* max_records) {
  void* p = nullptr;
  if (g_buffers_held.fetch_add(1) >= kMaxBuffersHeld || (p = TakeBuffer()) == nullptr) {
    g_buffers_held.fetch_sub(1);
    p = nullptr;
  }
  *buffer = static_cast<uint8_t*>(p);
  *size = p ? g_buffer_bytes : 0;
  *max_records = 0;
}

// The fields every device-op record shares (kernel, memcpy, memset structs).
template <typename Activity>
trace::DeviceRecord FromActivity(const Activity& a, trace::DeviceOpKind kind) {
  trace::DeviceRecord d{};
  d.start_ns = a.start;
  d.end_ns = a.end;
  d.correlation = a.correlationId;
  d.stream = a.streamId;
  d.device = a.deviceId;
  d.context = a.contextId;
  d.kind = uint8_t(kind);
  return d;
}

void CUPTIAPI BufferCompleted(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  std::vector<trace::DeviceRecord> device;
  std::vector<trace::CorrelationRecord> corr;
  KernelNames names;
  CUpti_Activity* rec = nullptr;
  while (g_next && g_next(buffer, valid, &rec) == CUPTI_SUCCESS) {
    switch (rec->kind) {
      case CUPTI_ACTIVITY_KIND_KERNEL:
      case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
        auto* k = reinterpret_cast<CUpti_ActivityKernel10*>(rec);
        trace::DeviceRecord d = FromActivity(*k, k->name && strncmp(k->name, "nccl", 4) == 0
                                                     ? trace::DeviceOpKind::kNccl
                                                     : trace::DeviceOpKind::kKernel);
        d.name = names.Intern(k->name);
        device.push_back(d);
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMCPY: {
        auto* m = reinterpret_cast<CUpti_ActivityMemcpy6*>(rec);
        trace::DeviceRecord d = FromActivity(*m, trace::DeviceOpKind::kMemcpy);
        d.bytes = m->bytes;
        d.copy_kind = m->copyKind;
        d.src_kind = m->srcKind;
        d.dst_kind = m->dstKind;
        device.push_back(d);
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMSET: {
        auto* m = reinterpret_cast<CUpti_ActivityMemset4*>(rec);
        trace::DeviceRecord d = FromActivity(*m, trace::DeviceOpKind::kMemset);
        d.bytes = m->bytes;
        device.push_back(d);
        break;
      }
      case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: {
        auto* e = reinterpret_cast<CUpti_ActivityExternalCorrelation*>(rec);
        if (e->externalKind == kExternalKind) corr.push_back({e->externalId, e->correlationId, 0});
        break;
      }
      default:
        break;
    }
  }
  if (!device.empty() || !corr.empty())
    recorder::AddActivity(corr.data(), corr.size(), device.data(), device.size());
  if (g_dropped) {
    size_t dropped = 0;
    if (g_dropped(nullptr, 0, &dropped) == CUPTI_SUCCESS && dropped)
      recorder::CountDiagnostic(trace::DiagnosticId::kCuptiDropped, dropped);
  }
  if (buffer != nullptr) {
    ReturnBuffer(buffer);
    g_buffers_held.fetch_sub(1);
  }
}

constexpr const char* kSoname = "libcupti.so.13";
constexpr const char* kWheelLib = "/nvidia/cuda_cupti/lib";

void AddUnique(std::vector<std::string>* v, std::string s) {
  for (const auto& x : *v)
    if (x == s) return;
  v->push_back(std::move(s));
}

// site-packages (or dist-packages) directories implied by a path: the prefix
// up to and including the component, e.g. .../site-packages/torch/lib/x.so.
void AddSitePackagesOf(std::vector<std::string>* sites, std::string_view path) {
  for (const char* marker : {"/site-packages/", "/dist-packages/"}) {
    size_t pos = path.find(marker);
    if (pos != std::string_view::npos)
      AddUnique(sites, std::string(path.substr(0, pos + strlen(marker) - 1)));
  }
}

int LoadedModuleCallback(dl_phdr_info* info, size_t, void* arg) {
  if (info->dlpi_name && *info->dlpi_name)
    AddSitePackagesOf(static_cast<std::vector<std::string>*>(arg), info->dlpi_name);
  return 0;
}

// Every `prefix/lib*/python3*/site-packages` of an environment root.
void AddEnvRoot(std::vector<std::string>* sites, const char* root) {
  if (!root || !*root) return;
  for (const char* pattern : {"/lib/python3*/site-packages", "/lib64/python3*/site-packages"}) {
    glob_t g{};
    std::string p = std::string(root) + pattern;
    if (glob(p.c_str(), GLOB_NOSORT, nullptr, &g) == 0)
      for (size_t i = 0; i < g.gl_pathc; ++i) AddUnique(sites, g.gl_pathv[i]);
    globfree(&g);
  }
}

// Candidate CUPTI files, most specific first: LD_LIBRARY_PATH (what the user
// put first, e.g. `stallscope run --sim`), the toolkit the user named
// (CUDA_HOME), the wheel that belongs to the framework already loaded in this
// process (a loaded .../site-packages/torch/lib/libtorch_cuda.so implies
// .../site-packages/nvidia/cuda_cupti/lib), then the interpreter's
// environment (the executable's venv, VIRTUAL_ENV, CONDA_PREFIX, PYTHONPATH).
// The loader's default search (ld.so.cache) and /usr/local/cuda come after,
// in OpenCupti.
void AddPathList(std::vector<std::string>* dirs, const char* list) {
  if (!list || !*list) return;
  std::string_view rest(list);
  while (!rest.empty()) {
    size_t colon = rest.find(':');
    std::string_view entry = rest.substr(0, colon);
    if (!entry.empty()) AddUnique(dirs, std::string(entry));
    if (colon == std::string_view::npos) break;
    rest.remove_prefix(colon + 1);
  }
}

std::vector<std::string> CandidatePaths() {
  std::vector<std::string> dirs;
  AddPathList(&dirs, getenv("LD_LIBRARY_PATH"));
  if (const char* home = getenv("CUDA_HOME"); home && *home) {
    AddUnique(&dirs, std::string(home) + "/extras/CUPTI/lib64");
    AddUnique(&dirs, std::string(home) + "/lib64");
  }
  std::vector<std::string> sites;
  recorder::WalkModules(LoadedModuleCallback, &sites);
  char exe[4096];
  if (ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1); n > 0) {
    // .../venv/bin/python3 -> .../venv
    std::string e(exe, size_t(n));
    size_t slash = e.rfind('/');
    if (slash != std::string::npos && slash >= 4 && e.compare(slash - 4, 4, "/bin") == 0)
      AddEnvRoot(&sites, e.substr(0, slash - 4).c_str());
  }
  AddEnvRoot(&sites, getenv("VIRTUAL_ENV"));
  AddEnvRoot(&sites, getenv("CONDA_PREFIX"));
  AddPathList(&sites, getenv("PYTHONPATH"));
  for (const auto& site : sites) AddUnique(&dirs, site + kWheelLib);
  if (const char* conda = getenv("CONDA_PREFIX"); conda && *conda)
    AddUnique(&dirs, std::string(conda) + "/lib");
  std::vector<std::string> files;
  for (const auto& d : dirs) files.push_back(d + "/" + kSoname);
  return files;
}

void* OpenCupti() {
  // An explicit path is the only place looked at: a wrong one means host-only.
  if (const char* path = getenv("STALLSCOPE_CUPTI_PATH"); path && *path)
    return dlopen(path, RTLD_NOW | RTLD_LOCAL);
  // The job's own CUPTI (PyTorch's Kineto loads one): share it, never load a
  // second copy beside it.
  if (void* h = dlopen(kSoname, RTLD_NOW | RTLD_NOLOAD)) return h;
  for (const auto& f : CandidatePaths()) {
    if (access(f.c_str(), R_OK) != 0) continue;
    if (void* h = dlopen(f.c_str(), RTLD_NOW | RTLD_LOCAL)) return h;
  }
  // The loader's own search (RUNPATH, ld.so.cache), then the default toolkit.
  if (void* h = dlopen(kSoname, RTLD_NOW | RTLD_LOCAL)) return h;
  for (const char* d : {"/usr/local/cuda/extras/CUPTI/lib64", "/usr/local/cuda/lib64"})
    if (void* h = dlopen((std::string(d) + "/" + kSoname).c_str(), RTLD_NOW | RTLD_LOCAL)) return h;
  return nullptr;
}

}  // namespace

bool Start() {
  if (const char* off = getenv("STALLSCOPE_NO_CUPTI"); off && *off && strcmp(off, "0") != 0)
    return false;
  g_buffer_bytes = std::clamp(recorder::BudgetBytes() / 16, kMinBufferBytes, kMaxBufferBytes);
  void* h = OpenCupti();
  if (!h) return false;
  auto sym = [h](const char* name) { return RealDlsym(h, name); };
  auto enable = reinterpret_cast<EnableFn>(sym("cuptiActivityEnable"));
  auto reg = reinterpret_cast<RegisterCallbacksFn>(sym("cuptiActivityRegisterCallbacks"));
  auto ts = reinterpret_cast<TimestampCbFn>(sym("cuptiActivityRegisterTimestampCallback"));
  g_flush = reinterpret_cast<FlushAllFn>(sym("cuptiActivityFlushAll"));
  g_next = reinterpret_cast<GetNextRecordFn>(sym("cuptiActivityGetNextRecord"));
  g_push = reinterpret_cast<PushFn>(sym("cuptiActivityPushExternalCorrelationId"));
  g_pop = reinterpret_cast<PopFn>(sym("cuptiActivityPopExternalCorrelationId"));
  g_dropped = reinterpret_cast<DroppedFn>(sym("cuptiActivityGetNumDroppedRecords"));
  if (!enable || !reg || !g_flush || !g_next || !g_push || !g_pop) return false;
  // The timestamp callback must be registered before any kind is enabled.
  if (!ts || ts(Timestamp) != CUPTI_SUCCESS)
    recorder::CountDiagnostic(trace::DiagnosticId::kCuptiOwnClock);
  if (reg(BufferRequested, BufferCompleted) != CUPTI_SUCCESS) return false;
  // All or nothing: a refused kind (another subscriber, an unsupported
  // device) means host-only, with the kinds already enabled turned off again.
  auto disable = reinterpret_cast<EnableFn>(sym("cuptiActivityDisable"));
  const CUpti_ActivityKind kinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
                                      CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION,
                                      CUPTI_ACTIVITY_KIND_MEMCPY, CUPTI_ACTIVITY_KIND_MEMSET};
  for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; ++i) {
    if (enable(kinds[i]) != CUPTI_SUCCESS) {
      for (size_t j = 0; j < i && disable; ++j) disable(kinds[j]);
      return false;
    }
  }
  g_enable = enable;
  g_disable = disable;
  g_active = true;
  g_mode.store(kPushed, std::memory_order_relaxed);
  return true;
}

bool SetDeviceTiming(bool on) {
  if (!g_active || g_disable == nullptr) return false;
  const int saved = errno;
  bool ok = true;
  if (on) {
    // Kinds first, then the pushes: a submission pushed is timed.
    for (CUpti_ActivityKind k : kDeviceKinds) ok = g_enable(k) == CUPTI_SUCCESS && ok;
    if (ok) g_mode.store(kPushed, std::memory_order_relaxed);
  } else {
    g_mode.store(kSampledOut, std::memory_order_relaxed);
    for (CUpti_ActivityKind k : kDeviceKinds) ok = g_disable(k) == CUPTI_SUCCESS && ok;
  }
  errno = saved;
  return ok;
}

bool Active() { return g_active; }

void PushActive(uint64_t id) {
  int saved = errno;
  g_push(kExternalKind, id);
  errno = saved;
}

void PopActive() {
  int saved = errno;
  uint64_t last;
  g_pop(kExternalKind, &last);
  errno = saved;
}

void Flush() {
  if (g_active) {
    int saved = errno;
    g_flush(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    errno = saved;
  }
}

uint32_t KernelNames::Intern(const char* name) {
  if (name == nullptr) return 0;
  Slot& s = slots_[(reinterpret_cast<uintptr_t>(name) >> 4) % kSlots];
  if (s.pointer == name && s.text == name) return s.id;
  s.pointer = name;
  s.text = name;
  s.id = recorder::InternString(name);
  return s.id;
}

void ForgetAfterFork() {
  g_active = false;
  g_mode.store(kNotTimed, std::memory_order_relaxed);
}

}  // namespace stallscope::cupti
