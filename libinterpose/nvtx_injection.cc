// NVTX through injection: NVTX3 dlopens NVTX_INJECTION64_PATH (this library)
// and calls InitializeInjectionNvtx2, where we patch the CORE and CORE2 slots
// for ranges and marks. Also the explicit step API of stallscope.h.
#include <nvtx3/nvToolsExt.h>

#include <atomic>
#include <cstring>

#include "clock.h"
#include "recorder.h"
#include "stallscope/stallscope.h"

namespace stallscope {
namespace {

std::atomic<uint64_t> g_next_range{1};

void Emit(trace::NvtxType type, uint64_t range, uint64_t domain, const char* msg) {
  ThreadState& ts = recorder::Self();
  if (ts.in_hook) return;
  ts.in_hook = true;
  if (recorder::IsOn() || recorder::EnsureStarted()) {
    trace::NvtxRecord r{};
    r.ticks = Ticks();
    r.range_id = range;
    r.domain = domain;
    r.type = uint16_t(type);
    r.name = msg ? recorder::InternString(msg) : 0;
    recorder::AddNvtx(r);
  }
  ts.in_hook = false;
}

const char* Message(const nvtxEventAttributes_t* a) {
  if (a && a->messageType == NVTX_MESSAGE_TYPE_ASCII) return a->message.ascii;
  return nullptr;
}

int PushA(const char* msg) {
  Emit(trace::NvtxType::kPush, 0, 0, msg);
  return recorder::Self().nvtx_depth++;
}
int PushEx(const nvtxEventAttributes_t* a) { return PushA(Message(a)); }
int Pop() {
  Emit(trace::NvtxType::kPop, 0, 0, nullptr);
  int& d = recorder::Self().nvtx_depth;
  return d > 0 ? --d : -1;
}
nvtxRangeId_t StartA(const char* msg) {
  uint64_t id = g_next_range.fetch_add(1);
  Emit(trace::NvtxType::kStart, id, 0, msg);
  return id;
}
nvtxRangeId_t StartEx(const nvtxEventAttributes_t* a) { return StartA(Message(a)); }
void End(nvtxRangeId_t id) { Emit(trace::NvtxType::kEnd, id, 0, nullptr); }
void MarkA(const char* msg) { Emit(trace::NvtxType::kMark, 0, 0, msg); }
void MarkEx(const nvtxEventAttributes_t* a) { MarkA(Message(a)); }

int DomainPushEx(nvtxDomainHandle_t d, const nvtxEventAttributes_t* a) {
  Emit(trace::NvtxType::kPush, 0, reinterpret_cast<uintptr_t>(d), Message(a));
  return recorder::Self().nvtx_depth++;
}
int DomainPop(nvtxDomainHandle_t d) {
  Emit(trace::NvtxType::kPop, 0, reinterpret_cast<uintptr_t>(d), nullptr);
  int& depth = recorder::Self().nvtx_depth;
  return depth > 0 ? --depth : -1;
}
nvtxRangeId_t DomainStartEx(nvtxDomainHandle_t d, const nvtxEventAttributes_t* a) {
  uint64_t id = g_next_range.fetch_add(1);
  Emit(trace::NvtxType::kStart, id, reinterpret_cast<uintptr_t>(d), Message(a));
  return id;
}
void DomainEnd(nvtxDomainHandle_t d, nvtxRangeId_t id) {
  Emit(trace::NvtxType::kEnd, id, reinterpret_cast<uintptr_t>(d), nullptr);
}

template <typename F>
void Patch(NvtxFunctionTable table, unsigned size, unsigned id, F fn) {
  if (table && id <= size && table[id]) *table[id] = reinterpret_cast<NvtxFunctionPointer>(fn);
}

}  // namespace
}  // namespace stallscope

using namespace stallscope;

extern "C" __attribute__((visibility("default"))) int InitializeInjectionNvtx2(
    NvtxGetExportTableFunc_t get_export_table) {
  if (!get_export_table) return 0;
  auto* cb = static_cast<const NvtxExportTableCallbacks*>(get_export_table(NVTX_ETID_CALLBACKS));
  if (!cb || !cb->GetModuleFunctionTable) return 0;
  NvtxFunctionTable table = nullptr;
  unsigned size = 0;
  if (cb->GetModuleFunctionTable(NVTX_CB_MODULE_CORE, &table, &size)) {
    Patch(table, size, NVTX_CBID_CORE_MarkEx, &MarkEx);
    Patch(table, size, NVTX_CBID_CORE_MarkA, &MarkA);
    Patch(table, size, NVTX_CBID_CORE_RangeStartEx, &StartEx);
    Patch(table, size, NVTX_CBID_CORE_RangeStartA, &StartA);
    Patch(table, size, NVTX_CBID_CORE_RangeEnd, &End);
    Patch(table, size, NVTX_CBID_CORE_RangePushEx, &PushEx);
    Patch(table, size, NVTX_CBID_CORE_RangePushA, &PushA);
    Patch(table, size, NVTX_CBID_CORE_RangePop, &Pop);
  }
  table = nullptr;
  size = 0;
  if (cb->GetModuleFunctionTable(NVTX_CB_MODULE_CORE2, &table, &size)) {
    Patch(table, size, NVTX_CBID_CORE2_DomainRangePushEx, &DomainPushEx);
    Patch(table, size, NVTX_CBID_CORE2_DomainRangePop, &DomainPop);
    Patch(table, size, NVTX_CBID_CORE2_DomainRangeStartEx, &DomainStartEx);
    Patch(table, size, NVTX_CBID_CORE2_DomainRangeEnd, &DomainEnd);
  }
  return 1;
}

// An end carries the index of this thread's last begin, so the reader pairs
// them by index.
extern "C" __attribute__((visibility("default"))) void stallscope_step_begin(uint64_t index) {
  recorder::Self().step_index = index;
  Emit(trace::NvtxType::kStepBegin, index, 0, nullptr);
}

extern "C" __attribute__((visibility("default"))) void stallscope_step_end(void) {
  Emit(trace::NvtxType::kStepEnd, recorder::Self().step_index, 0, nullptr);
}

// Ranges of the C API: NVTX start/end ranges with ids from NVTX's counter, so
// the two never collide.
extern "C" __attribute__((visibility("default"))) uint64_t stallscope_range_start(
    const char* name) {
  return StartA(name);
}

extern "C" __attribute__((visibility("default"))) void stallscope_range_end(uint64_t id) {
  if (id != 0) End(id);
}
