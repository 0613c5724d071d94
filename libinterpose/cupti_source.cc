// CUPTI activity source (see cupti_source.h). CUPTI is found at run time: an
// already-loaded copy first (RTLD_NOLOAD), then by soname, then in the usual
// toolkit places. Every failure leaves host-only recording and a diagnostic.
#include "cupti_source.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <string>
#include <vector>

#include <cupti_activity.h>

#include "clock.h"
#include "recorder.h"

namespace stallscope {
void* RealDlsym(void* handle, const char* name);
}

namespace stallscope::cupti {
namespace {

constexpr auto kExternalKind = CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM2;
constexpr size_t kBufferBytes = 4 << 20;

using EnableFn = CUptiResult (*)(CUpti_ActivityKind);
using RegisterCallbacksFn = CUptiResult (*)(CUpti_BuffersCallbackRequestFunc,
                                            CUpti_BuffersCallbackCompleteFunc);
using FlushAllFn = CUptiResult (*)(uint32_t);
using GetNextRecordFn = CUptiResult (*)(uint8_t*, size_t, CUpti_Activity**);
using PushFn = CUptiResult (*)(CUpti_ExternalCorrelationKind, uint64_t);
using PopFn = CUptiResult (*)(CUpti_ExternalCorrelationKind, uint64_t*);
using TimestampCbFn = CUptiResult (*)(CUpti_TimestampCallbackFunc);
using DroppedFn = CUptiResult (*)(CUcontext, uint32_t, size_t*);

bool g_active = false;
FlushAllFn g_flush = nullptr;
GetNextRecordFn g_next = nullptr;
PushFn g_push = nullptr;
PopFn g_pop = nullptr;
DroppedFn g_dropped = nullptr;

uint64_t CUPTIAPI Timestamp() { return MonoNs(); }

void CUPTIAPI BufferRequested(uint8_t** buffer, size_t* size, size_t* max_records) {
  void* p = nullptr;
  if (posix_memalign(&p, 8, kBufferBytes) != 0) p = nullptr;
  *buffer = static_cast<uint8_t*>(p);
  *size = p ? kBufferBytes : 0;
  *max_records = 0;
}

void CUPTIAPI BufferCompleted(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  std::vector<trace::DeviceRecord> device;
  std::vector<trace::CorrelationRecord> corr;
  CUpti_Activity* rec = nullptr;
  while (g_next && g_next(buffer, valid, &rec) == CUPTI_SUCCESS) {
    switch (rec->kind) {
      case CUPTI_ACTIVITY_KIND_KERNEL:
      case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
        auto* k = reinterpret_cast<CUpti_ActivityKernel10*>(rec);
        trace::DeviceRecord d{};
        d.start_ns = k->start;
        d.end_ns = k->end;
        d.correlation = k->correlationId;
        d.name = recorder::InternString(k->name);
        d.stream = k->streamId;
        d.device = k->deviceId;
        d.context = k->contextId;
        d.kind = uint8_t(k->name && strncmp(k->name, "nccl", 4) == 0 ? trace::DeviceOpKind::kNccl
                                                                      : trace::DeviceOpKind::kKernel);
        device.push_back(d);
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMCPY: {
        auto* m = reinterpret_cast<CUpti_ActivityMemcpy6*>(rec);
        trace::DeviceRecord d{};
        d.start_ns = m->start;
        d.end_ns = m->end;
        d.bytes = m->bytes;
        d.correlation = m->correlationId;
        d.stream = m->streamId;
        d.device = m->deviceId;
        d.context = m->contextId;
        d.kind = uint8_t(trace::DeviceOpKind::kMemcpy);
        d.copy_kind = m->copyKind;
        device.push_back(d);
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMSET: {
        auto* m = reinterpret_cast<CUpti_ActivityMemset4*>(rec);
        trace::DeviceRecord d{};
        d.start_ns = m->start;
        d.end_ns = m->end;
        d.bytes = m->bytes;
        d.correlation = m->correlationId;
        d.stream = m->streamId;
        d.device = m->deviceId;
        d.context = m->contextId;
        d.kind = uint8_t(trace::DeviceOpKind::kMemset);
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
  if (!device.empty()) recorder::AddDeviceRecords(device.data(), device.size());
  if (!corr.empty()) recorder::AddCorrelations(corr.data(), corr.size());
  if (g_dropped) {
    size_t dropped = 0;
    if (g_dropped(nullptr, 0, &dropped) == CUPTI_SUCCESS && dropped)
      recorder::CountDiagnostic(trace::DiagnosticId::kCuptiDropped, dropped);
  }
  free(buffer);
}

void* OpenCupti() {
  if (const char* path = getenv("STALLSCOPE_CUPTI_PATH"); path && *path)
    return dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (void* h = dlopen("libcupti.so.13", RTLD_NOW | RTLD_NOLOAD)) return h;
  if (void* h = dlopen("libcupti.so.13", RTLD_NOW | RTLD_LOCAL)) return h;
  std::vector<std::string> dirs;
  if (const char* home = getenv("CUDA_HOME")) {
    dirs.push_back(std::string(home) + "/extras/CUPTI/lib64");
    dirs.push_back(std::string(home) + "/lib64");
  }
  dirs.push_back("/usr/local/cuda/extras/CUPTI/lib64");
  dirs.push_back("/usr/local/cuda/lib64");
  for (const auto& d : dirs)
    if (void* h = dlopen((d + "/libcupti.so.13").c_str(), RTLD_NOW | RTLD_LOCAL)) return h;
  return nullptr;
}

}  // namespace

bool Start() {
  if (const char* off = getenv("STALLSCOPE_NO_CUPTI"); off && *off && strcmp(off, "0") != 0)
    return false;
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
    recorder::CountDiagnostic(trace::DiagnosticId::kCuptiNoTimestampCallback);
  if (reg(BufferRequested, BufferCompleted) != CUPTI_SUCCESS) return false;
  if (enable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS) return false;
  if (enable(CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION) != CUPTI_SUCCESS) return false;
  enable(CUPTI_ACTIVITY_KIND_MEMCPY);
  enable(CUPTI_ACTIVITY_KIND_MEMSET);
  g_active = true;
  return true;
}

bool Active() { return g_active; }

void Push(uint64_t id) {
  if (g_active) {
    int saved = errno;
    g_push(kExternalKind, id);
    errno = saved;
  }
}

void Pop() {
  if (g_active) {
    int saved = errno;
    uint64_t last;
    g_pop(kExternalKind, &last);
    errno = saved;
  }
}

void Flush() {
  if (g_active) g_flush(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
}

}  // namespace stallscope::cupti
