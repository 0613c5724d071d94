// Device-side times from CUPTI's activity API: kernels, copies and sets, joined
// to host calls by external correlation ids, on CLOCK_MONOTONIC through the
// timestamp callback. Resolved at run time; never linked.
#pragma once

#include <cstdint>

namespace stallscope::cupti {

// Loads CUPTI (reusing an already-loaded one; else STALLSCOPE_CUPTI_PATH, the
// soname, CUDA_HOME, Python wheels next to loaded modules and under
// VIRTUAL_ENV/CONDA_PREFIX/PYTHONPATH, /usr/local/cuda) and enables the
// activity kinds. Returns false (the caller records a diagnostic) when device
// times are unavailable: CUPTI absent, a symbol missing, or any enable refused.
bool Start();
bool Active();
// Per-thread external correlation around a submitting call: inline, so that
// a hook with CUPTI off pays one load and a branch.
extern bool g_active;
void PushActive(uint64_t id);
void PopActive();
inline void Push(uint64_t id) {
  if (g_active) PushActive(id);
}
inline void Pop() {
  if (g_active) PopActive();
}
// Delivers every buffered record (forced flush).
void Flush();
// In a fork child: never call CUPTI again (its state is the parent's).
void ForgetAfterFork();

}  // namespace stallscope::cupti
