// Device-side times from CUPTI's activity API: kernels, copies and sets, joined
// to host calls by external correlation ids, on CLOCK_MONOTONIC through the
// timestamp callback. Resolved at run time; never linked.
#pragma once

#include <cstdint>

namespace stallscope::cupti {

// Loads CUPTI (reusing an already-loaded one) and enables the activity kinds.
// Returns false, and records a diagnostic, when device times are unavailable.
bool Start();
bool Active();
// Per-thread external correlation around a submitting call.
void Push(uint64_t id);
void Pop();
// Delivers every buffered record (forced flush).
void Flush();

}  // namespace stallscope::cupti
