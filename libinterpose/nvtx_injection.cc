// NVTX through injection: NVTX3 dlopens NVTX_INJECTION64_PATH (this library)
// and calls InitializeInjectionNvtx2, where we patch the CORE and CORE2 slots
// for ranges and marks. Also the explicit step API of stallscope.h.
#include <nvtx3/nvToolsExt.h>
#include <regex.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>
#include <strings.h>

#include "clock.h"
#include "recorder.h"
#include "stallscope/stallscope.h"

namespace stallscope {
namespace {

std::atomic<uint64_t> g_next_range{1};

// The tick of the record written; 0 when none was.
uint64_t Emit(trace::NvtxType type, uint64_t range, uint64_t domain, const char* msg) {
  ThreadState& ts = recorder::Self();
  if (ts.in_hook) return 0;
  ts.in_hook = true;
  uint64_t ticks = 0;
  if (recorder::IsOn() || recorder::EnsureStarted()) {
    trace::NvtxRecord r{};
    r.ticks = ticks = Ticks();
    r.range_id = range;
    r.domain = domain;
    r.type = uint16_t(type);
    r.name = msg ? recorder::InternTransientString(msg) : 0;
    recorder::AddNvtx(r);
  }
  ts.in_hook = false;
  return ticks;
}

// Step begins for the flight recorder's regression trigger: the outermost
// open range whose name matches the step pattern (STALLSCOPE_STEP_PATTERN, as
// the analyzer's --step-pattern; by default any name holding "step" or
// "iter", case aside, as the analyzer's default), on the first thread that
// opens one. The range a step range encloses (an optimizer's "step") is not
// a step. Push/pop ranges by depth, start/end ranges by id.
struct StepPattern {
  bool custom = false;
  regex_t re{};  // POSIX extended (the library builds without exceptions)
  StepPattern() {
    const char* p = getenv("STALLSCOPE_STEP_PATTERN");
    if (p == nullptr || *p == '\0') return;
    std::string s(p);
    int flags = REG_EXTENDED | REG_NOSUB;
    if (s.rfind("(?i)", 0) == 0) {
      s = s.substr(4);
      flags |= REG_ICASE;
    }
    // A pattern POSIX cannot compile keeps the default (the analyzer says
    // what is wrong with it).
    custom = regcomp(&re, s.c_str(), flags) == 0;
  }
  bool Match(const char* msg) const {
    if (msg == nullptr) return false;
    if (custom) return regexec(&re, msg, 0, nullptr, 0) == 0;
    return strcasestr(msg, "step") != nullptr || strcasestr(msg, "iter") != nullptr;
  }
};
const StepPattern& Pattern() {
  static const StepPattern* p = new StepPattern;  // never destroyed: NVTX calls at exit
  return *p;
}
thread_local int t_step_push_depth = -1;  // this thread's open step push range's depth
std::atomic<uint64_t> g_step_range{0};  // the open step start/end range's id (it may end on any thread)

// A step range opening on the watched thread (which the first one claims),
// with no step range open.
bool OpensStep(uint64_t ticks, const char* msg) {
  return ticks != 0 && recorder::WatchingSteps() && Pattern().Match(msg) && recorder::ClaimStepThread() &&
         t_step_push_depth < 0 && g_step_range.load(std::memory_order_relaxed) == 0;
}
void PushedRange(uint64_t ticks, const char* msg, int depth) {
  if (!OpensStep(ticks, msg)) return;
  t_step_push_depth = depth;
  recorder::StepBegan(ticks);
}
void Popped(int depth) {
  if (depth == t_step_push_depth) t_step_push_depth = -1;
}
void StartedRange(uint64_t ticks, const char* msg, uint64_t id) {
  if (!OpensStep(ticks, msg)) return;
  g_step_range.store(id, std::memory_order_relaxed);
  recorder::StepBegan(ticks);
}
void EndedRange(uint64_t id) {
  uint64_t open = id;
  g_step_range.compare_exchange_strong(open, 0, std::memory_order_relaxed);
}

const char* Message(const nvtxEventAttributes_t* a) {
  if (a && a->messageType == NVTX_MESSAGE_TYPE_ASCII) return a->message.ascii;
  return nullptr;
}

// Ranges in a domain (0: the default one).
int PushIn(uintptr_t domain, const char* msg) {
  const uint64_t ticks = Emit(trace::NvtxType::kPush, 0, domain, msg);
  const int depth = recorder::Self().nvtx_depth++;
  PushedRange(ticks, msg, depth);
  return depth;
}
int PopIn(uintptr_t domain) {
  Emit(trace::NvtxType::kPop, 0, domain, nullptr);
  int& d = recorder::Self().nvtx_depth;
  if (d > 0) Popped(d - 1);
  return d > 0 ? --d : -1;
}
nvtxRangeId_t StartIn(uintptr_t domain, const char* msg) {
  uint64_t id = g_next_range.fetch_add(1);
  StartedRange(Emit(trace::NvtxType::kStart, id, domain, msg), msg, id);
  return id;
}
void EndIn(uintptr_t domain, nvtxRangeId_t id) {
  Emit(trace::NvtxType::kEnd, id, domain, nullptr);
  EndedRange(id);
}

int PushA(const char* msg) { return PushIn(0, msg); }
int PushEx(const nvtxEventAttributes_t* a) { return PushA(Message(a)); }
int Pop() { return PopIn(0); }
nvtxRangeId_t StartA(const char* msg) { return StartIn(0, msg); }
nvtxRangeId_t StartEx(const nvtxEventAttributes_t* a) { return StartA(Message(a)); }
void End(nvtxRangeId_t id) { EndIn(0, id); }
void MarkA(const char* msg) { Emit(trace::NvtxType::kMark, 0, 0, msg); }
void MarkEx(const nvtxEventAttributes_t* a) { MarkA(Message(a)); }

int DomainPushEx(nvtxDomainHandle_t d, const nvtxEventAttributes_t* a) {
  return PushIn(reinterpret_cast<uintptr_t>(d), Message(a));
}
int DomainPop(nvtxDomainHandle_t d) { return PopIn(reinterpret_cast<uintptr_t>(d)); }
nvtxRangeId_t DomainStartEx(nvtxDomainHandle_t d, const nvtxEventAttributes_t* a) {
  return StartIn(reinterpret_cast<uintptr_t>(d), Message(a));
}
void DomainEnd(nvtxDomainHandle_t d, nvtxRangeId_t id) { EndIn(reinterpret_cast<uintptr_t>(d), id); }

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
  const uint64_t ticks = Emit(trace::NvtxType::kStepBegin, index, 0, nullptr);
  if (ticks != 0 && recorder::WatchingSteps() && recorder::ClaimStepThread()) recorder::StepBegan(ticks);
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
