// Device-side times from CUPTI's activity API: kernels, copies and sets, joined
// to host calls by external correlation ids, on CLOCK_MONOTONIC through the
// timestamp callback. Resolved at run time; never linked.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

namespace stallscope::cupti {

// Loads CUPTI (reusing an already-loaded one; else STALLSCOPE_CUPTI_PATH, the
// soname, CUDA_HOME, Python wheels next to loaded modules and under
// VIRTUAL_ENV/CONDA_PREFIX/PYTHONPATH, /usr/local/cuda) and enables the
// activity kinds. Returns false (the caller records a diagnostic) when device
// times are unavailable: CUPTI absent, a symbol missing, or any enable refused.
bool Start();
bool Active();
// What Push did for a submitting call, for its Pop and its record.
enum PushResult : uint8_t {
  kNotTimed = 0,    // CUPTI is off
  kPushed = 1,      // device timing on: the id went to CUPTI
  kSampledOut = 2,  // CUPTI is on, device timing sampled off (no push)
};
// Per-thread external correlation around a submitting call: inline, so that
// a hook pays one load and a branch when it does not push. g_mode is a
// PushResult: kNotTimed until Start() succeeds, then kPushed or kSampledOut
// as SetDeviceTiming() says.
extern std::atomic<uint8_t> g_mode;
void PushActive(uint64_t id);
void PopActive();
inline PushResult Push(uint64_t id) {
  const uint8_t m = g_mode.load(std::memory_order_relaxed);
  if (m == kPushed) PushActive(id);
  return PushResult(m);
}
// `pushed`: what this call's Push returned (timing may have changed since).
inline void Pop(PushResult pushed) {
  if (pushed == kPushed) PopActive();
}
// Device timing in sampled windows (STALLSCOPE_DEVICE_SAMPLE): turns CUPTI's
// device kinds (kernels, copies, sets) on or off. Ops submitted while off get
// no device record and no external correlation. False when CUPTI is not
// active or refused; the state is then unchanged.
bool SetDeviceTiming(bool on);
// Delivers every buffered record (forced flush).
void Flush();
// In a fork child: never call CUPTI again (its state is the parent's).
void ForgetAfterFork();

// The kernel names of one activity buffer's records, interned
// (recorder::InternString), remembered by the pointer CUPTI hands (it shares
// one name string among a kernel's records) and checked by their text before
// an id is reused: a loop repeats a few kernels, and interning each record's
// name (a string built, the recorder's lock, a hash lookup) was most of the
// buffer thread's time. Kept for one buffer only, so no id outlives the
// string table it came from (a fork child clears the table). Kernel names
// are never transient, so the recorder never forgets them and a use needs
// no marking.
class KernelNames {
 public:
  uint32_t Intern(const char* name);

 private:
  static constexpr size_t kSlots = 64;
  struct Slot {
    const char* pointer = nullptr;
    uint32_t id = 0;
    std::string text;
  };
  Slot slots_[kSlots];
};

}  // namespace stallscope::cupti
