// Diagnostics as data: every condition the analyzer can report about a trace
// (dropped records, truncation, clock problems ...) is declared once here as
// (name, severity, description) and printed in every report.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace stallscope::analyzer {

// X(id, name, severity, description)
#define STALLSCOPE_DIAGNOSTICS(X)                                              \
  X(kTruncatedTrace, "truncated_trace", kWarning,                              \
    "the trace ends mid-chunk; records up to the last complete chunk are used") \
  X(kTraceWriteFailed, "trace_write_failed", kWarning,                         \
    "the recorder could not write some records (a full disk): they are "        \
    "missing, the rest of the trace is whole")                                 \
  X(kCorruptChunks, "corrupt_chunks", kWarning,                               \
    "damaged chunks were skipped: reading resumed at the next chunk that "     \
    "verifies, and the rest of the trace is used")                             \
  X(kUnreadableTraces, "unreadable_traces", kWarning,                         \
    "trace files that could not be read (not a trace, empty, not a regular "   \
    "file) were left out; the report covers the others")                       \
  X(kMissingRanks, "missing_ranks", kWarning,                                 \
    "ranks of the job's world have no trace (a rank killed before it wrote "   \
    "one, or its file is elsewhere): the report covers the others")            \
  X(kIncompleteTraces, "incomplete_traces", kWarning,                          \
    "traces of other processes end before their process finished (killed "     \
    "or crashed): their records stop at their last write")                     \
  X(kNoEndChunk, "no_end_chunk", kWarning,                                     \
    "the process did not finish writing its trace (no end chunk)")            \
  X(kDroppedRecords, "dropped_records", kWarning,                              \
    "the recorder dropped records because its memory budget was full")        \
  X(kDroppedCalls, "dropped_calls", kWarning,                                  \
    "of the records dropped, API calls (launches, copies, synchronizations): " \
    "the report's counts and steps miss them")                                \
  X(kPythonSitesLost, "python_sites_lost", kWarning,                           \
    "blocking calls from Python whose frames could not be read: their "        \
    "hotspots count them (sites_lost) at the native site")                    \
  X(kCuptiUnavailable, "cupti_unavailable", kWarning,                          \
    "no device timestamps: host-only inference")                              \
  X(kCuptiDropped, "cupti_dropped", kWarning,                                  \
    "CUPTI reported dropped activity records")                                \
  X(kCuptiOwnClock, "cupti_own_clock", kWarning,                               \
    "device times are on CUPTI's own clock, not aligned by a callback")       \
  X(kInternalErrors, "internal_errors", kWarning,                              \
    "errors inside the recorder (never the job's)")                           \
  X(kStacksDropped, "stacks_dropped", kInfo,                                   \
    "call-site stacks the recorder could not capture")                        \
  X(kCuptiRecordsStopped, "cupti_records_stopped", kWarning,                   \
    "CUPTI stopped acknowledging submissions (another profiler took the "      \
    "activity buffers): device times are missing for these calls")             \
  X(kNoDeviceRecordsAtExit, "device_records_missing_at_exit", kWarning,       \
    "submissions had no device record when the process exited: work still "   \
    "queued on the GPU (the job ended without a final synchronize), or "      \
    "another profiler disabled an activity kind")                              \
  X(kUnknownRecorderDiagnostic, "unknown_recorder_diagnostic", kInfo,          \
    "a diagnostic id this analyzer does not know")                            \
  X(kClockSinglePair, "clock_single_pair", kWarning,                           \
    "only one tick/clock pair: ticks assumed to be nanoseconds plus an offset") \
  X(kClockMissing, "clock_missing", kWarning,                                  \
    "no tick/clock pair: ticks assumed to be CLOCK_MONOTONIC nanoseconds")    \
  X(kUnknownChunk, "unknown_chunk", kInfo,                                     \
    "chunks of a type this analyzer does not know were skipped")              \
  X(kUncorrelatedDeviceOps, "uncorrelated_device_ops", kInfo,                  \
    "device ops whose submitting host call was not found")                    \
  X(kCorrelationFallback, "correlation_fallback", kWarning,                    \
    "no correlation records: device ops joined to calls by equal ids")        \
  X(kUnmatchedNvtx, "unmatched_nvtx", kInfo,                                   \
    "NVTX pops/ends without a push/start, or ranges never closed")            \
  X(kMultipleDevices, "multiple_devices", kInfo,                               \
    "device ops on several devices: only the busiest device is analyzed")     \
  X(kMultipleProcesses, "multiple_processes", kInfo,                           \
    "several processes traced: steps and hotspots are the busiest one's")     \
  X(kNoDeviceOps, "no_device_ops", kWarning,                                   \
    "the trace has no device ops: nothing ran on the GPU")                    \
  X(kOpsOutsideSteps, "ops_outside_steps", kInfo,                              \
    "device ops before the first or after the last step are not in any step") \
  X(kEmptyLastStep, "empty_last_step", kInfo,                                 \
    "the last marked step submitted no device work (a marker opened at each "  \
    "iteration's end, as torch.profiler's ProfilerStep#N, leaves one open "    \
    "after the loop): it is not a step")                                       \
  X(kOtherIdle, "other_idle", kInfo,                                           \
    "share of GPU idle time charged to no specific cause")                    \
  X(kNoCpuTime, "no_cpu_time", kInfo,                                          \
    "no thread CPU-time samples: off-CPU and on-CPU host time are not split") \
  X(kNoRunDelay, "no_run_delay", kInfo,                                        \
    "CPU-time samples without the thread's run-queue delay: time runnable "    \
    "but waiting for a CPU is not told from off-CPU waiting (host_wait)")      \
  X(kModuleChanged, "module_changed", kWarning,                                \
    "a module's build id differs from the recorded one: its frames are "       \
    "shown as module+offset")                                                  \
  X(kInvalidRecords, "invalid_records", kWarning,                              \
    "records with impossible values (end before start, unknown api) ignored")

enum class Severity { kInfo, kWarning, kError };

enum class DiagId {
#define STALLSCOPE_DIAG_ENUM(id, name, sev, desc) id,
  STALLSCOPE_DIAGNOSTICS(STALLSCOPE_DIAG_ENUM)
#undef STALLSCOPE_DIAG_ENUM
};

struct Diagnostic {
  DiagId id;
  uint64_t count = 0;
  std::string message;  // one sentence with the numbers; description if empty
};

const char* DiagName(DiagId id);
Severity DiagSeverity(DiagId id);
const char* DiagDescription(DiagId id);
const char* SeverityName(Severity s);

// Adds `count` to the diagnostic `id` in `list` (creating it), replacing its
// message when `message` is not empty.
void AddDiagnostic(std::vector<Diagnostic>* list, DiagId id, uint64_t count,
                   std::string message = {});

}  // namespace stallscope::analyzer
