// The calling thread's CPU time and run-queue delay, sampled by the recorder
// around blocking calls and long gaps (docs/trace-format.md, kCpuSched).
#pragma once

#include <cstdint>

#include "recorder.h"

namespace stallscope::recorder {

// kCpuGapNs in ticks, measured against CLOCK_MONOTONIC at start-up.
uint64_t CalibrateCpuGapTicks();

// CLOCK_THREAD_CPUTIME_ID in ns; 0 when it cannot be read.
uint64_t ThreadCpuNs();

// Parses "<sum_exec_runtime> <run_delay> <pcount>\n"; false unless the text
// is exactly that.
bool ParseSchedstat(const char* p, const char* end, uint64_t* run_delay);

// The thread's run-queue delay so far (ns), or trace::kRunDelayUnknown.
uint64_t ThreadRunDelayNs(ThreadState& ts);

}  // namespace stallscope::recorder
