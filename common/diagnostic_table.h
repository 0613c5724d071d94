// Every diagnostic stallscope reports about a trace, declared once:
// X(id, wire id, source, name, severity, description).
//
// - id: the recorder's trace::DiagnosticId and the analyzer's DiagId.
// - wire id: the DiagnosticRecord id a recorder row is written with
//   (docs/trace-format.md, chunk type 11); never reused. 0 for the rows the
//   reader or the analyzer raise themselves.
// - source: who finds it: kRecorder (counted in the traced process and
//   written to the trace), kReader (reading a trace file), kAnalyzer (building
//   the timeline, the steps and the report).
// - name: the `name` in every report's diagnostics (a contract: keep names).
// - severity: kInfo or kWarning.
// - description: what a report prints when it has no message of its own.
//
// The recorder's enum and counter slots, the reader's wire mapping and the
// analyzer's ids, names and descriptions are all generated from the two
// lists below (STALLSCOPE_DIAGNOSTICS is both).
#pragma once

#include <cstdint>

namespace stallscope::trace {

// Counted in the traced process and written in kDiagnostic chunks.
#define STALLSCOPE_RECORDER_DIAGNOSTICS(X)                                             \
  X(kDroppedRecords, 1, kRecorder, "dropped_records", kWarning,                        \
    "the recorder dropped records because its memory budget was full")                 \
  X(kCuptiUnavailable, 2, kRecorder, "cupti_unavailable", kWarning,                    \
    "no device timestamps: host-only inference")                                       \
  X(kCuptiDropped, 3, kRecorder, "cupti_dropped", kWarning,                            \
    "CUPTI reported dropped activity records")                                         \
  X(kCuptiOwnClock, 4, kRecorder, "cupti_own_clock", kWarning,                         \
    "device times are on CUPTI's own clock, not aligned by a callback")                \
  X(kInternalErrors, 5, kRecorder, "internal_errors", kWarning,                        \
    "errors inside the recorder (never the job's)")                                    \
  X(kStacksDropped, 6, kRecorder, "stacks_dropped", kInfo,                             \
    "call-site stacks the recorder could not capture")                                 \
  X(kCuptiRecordsStopped, 7, kRecorder, "cupti_records_stopped", kWarning,             \
    "CUPTI stopped acknowledging submissions (another profiler took the "              \
    "activity buffers): device times are missing for these calls")                     \
  X(kTraceWriteFailed, 8, kRecorder, "trace_write_failed", kWarning,                   \
    "the recorder could not write some records (a full disk): they are "               \
    "missing, the rest of the trace is whole")                                         \
  X(kTraceWriteFailedCalls, 9, kRecorder, "trace_write_failed_calls", kInfo,           \
    "of the records trace_write_failed counts, API call records (the "                 \
    "reader folds this count into trace_write_failed's message)")                      \
  X(kNoDeviceRecordsAtExit, 10, kRecorder, "device_records_missing_at_exit", kWarning, \
    "submissions had no device record when the process exited: work still "            \
    "queued on the GPU (the job ended without a final synchronize), or "               \
    "another profiler disabled an activity kind")                                      \
  X(kDroppedCalls, 11, kRecorder, "dropped_calls", kWarning,                           \
    "of the records dropped, API calls (launches, copies, "                            \
    "synchronizations): the report's counts and steps miss them")                      \
  X(kPythonSitesLost, 12, kRecorder, "python_sites_lost", kWarning,                    \
    "blocking calls from Python whose frames could not be read: their "                \
    "hotspots count them (sites_lost) at the native site")                            \
  X(kRingRegressionDumps, 13, kRecorder, "ring_regression_dumps", kInfo,               \
    "flight recorder: dumps the step-time regression trigger asked for (steps "        \
    "over K x the running median, STALLSCOPE_RING_REGRESSION)")                       \
  X(kDeviceTimingRefused, 14, kRecorder, "device_timing_refused", kWarning,            \
    "device timing in sampled windows (STALLSCOPE_DEVICE_SAMPLE): CUPTI refused "      \
    "to turn its device kinds on or off; the state was left as it was")          \
  X(kDeviceTimingNoSteps, 15, kRecorder, "device_timing_not_sampled", kWarning,      \
    "STALLSCOPE_DEVICE_SAMPLE was set, but the job began no step the recorder "      \
    "sees (an NVTX range matching the step pattern, the step API): device timing "   \
    "stayed on throughout")                                                          \
  X(kNativeStacksChecked, 16, kRecorder, "native_stacks_checked", kInfo,             \
    "STALLSCOPE_UNWIND=check: native stacks walked both by the cached rules and "    \
    "by libgcc's unwinder, and compared")                                            \
  X(kNativeStacksDiffer, 17, kRecorder, "native_stacks_differ", kWarning,            \
    "STALLSCOPE_UNWIND=check: of the stacks compared, those the cached rules "       \
    "walked differently from libgcc's unwinder (the trace holds libgcc's)")          \
  X(kCpuSamplesOff, 18, kRecorder, "cpu_samples_off", kInfo,                         \
    "STALLSCOPE_CPU_SAMPLES=0: the recorder read no thread CPU time or run-queue "   \
    "delay; host stalls longer than the dispatch threshold are charged to "          \
    "host_wait, never host_busy or host_preempted")

// Raised by the reader and the analyzer; never on the wire.
#define STALLSCOPE_ANALYZER_DIAGNOSTICS(X)                                        \
  X(kTruncatedTrace, 0, kReader, "truncated_trace", kWarning,                     \
    "the trace ends mid-chunk; records up to the last complete chunk are "        \
    "used")                                                                       \
  X(kCorruptChunks, 0, kReader, "corrupt_chunks", kWarning,                       \
    "damaged chunks were skipped: reading resumed at the next chunk that "        \
    "verifies, and the rest of the trace is used")                                \
  X(kUnreadableTraces, 0, kAnalyzer, "unreadable_traces", kWarning,               \
    "trace files that could not be read (not a trace, empty, not a "              \
    "regular file) were left out; the report covers the others")                  \
  X(kMissingRanks, 0, kAnalyzer, "missing_ranks", kWarning,                       \
    "ranks of the job's world have no trace (a rank killed before it "            \
    "wrote one, or its file is elsewhere): the report covers the others")         \
  X(kIncompleteTraces, 0, kAnalyzer, "incomplete_traces", kWarning,               \
    "traces of other processes end before their process finished (killed "        \
    "or crashed): their records stop at their last write")                        \
  X(kEarlierDumps, 0, kAnalyzer, "earlier_dumps", kInfo,                           \
    "several traces of one process (flight-recorder dumps, or copies): the "      \
    "newest of each is analyzed")                                                 \
  X(kDeviceSampled, 0, kAnalyzer, "device_timing_sampled", kInfo,                  \
    "device timing was on in sampled windows (STALLSCOPE_DEVICE_SAMPLE): the "     \
    "steps, totals and hotspots cover the timed steps only")                      \
  X(kNoEndChunk, 0, kReader, "no_end_chunk", kWarning,                            \
    "the process did not finish writing its trace (no end chunk)")                \
  X(kUnknownRecorderDiagnostic, 0, kReader, "unknown_recorder_diagnostic", kInfo, \
    "a diagnostic id this analyzer does not know")                                \
  X(kClockSinglePair, 0, kAnalyzer, "clock_single_pair", kWarning,                \
    "only one tick/clock pair: ticks assumed to be nanoseconds plus an "          \
    "offset")                                                                     \
  X(kClockMissing, 0, kAnalyzer, "clock_missing", kWarning,                       \
    "no tick/clock pair: ticks assumed to be CLOCK_MONOTONIC nanoseconds")        \
  X(kUnknownChunk, 0, kReader, "unknown_chunk", kInfo,                            \
    "chunks of a type this analyzer does not know were skipped")                  \
  X(kUncorrelatedDeviceOps, 0, kAnalyzer, "uncorrelated_device_ops", kInfo,       \
    "device ops whose submitting host call was not found")                        \
  X(kCorrelationFallback, 0, kAnalyzer, "correlation_fallback", kWarning,         \
    "no correlation records: device ops joined to calls by equal ids")            \
  X(kUnmatchedNvtx, 0, kAnalyzer, "unmatched_nvtx", kInfo,                        \
    "NVTX pops/ends without a push/start, or ranges never closed")                \
  X(kMultipleDevices, 0, kAnalyzer, "multiple_devices", kInfo,                    \
    "device ops on several devices: only the busiest device is analyzed")         \
  X(kMultipleProcesses, 0, kAnalyzer, "multiple_processes", kInfo,                \
    "several processes traced: steps and hotspots are the busiest one's")         \
  X(kNoDeviceOps, 0, kAnalyzer, "no_device_ops", kWarning,                        \
    "the trace has no device ops: nothing ran on the GPU")                        \
  X(kOpsOutsideSteps, 0, kAnalyzer, "ops_outside_steps", kInfo,                   \
    "device ops before the first or after the last step are not in any "          \
    "step")                                                                       \
  X(kAutoStepsEnd, 0, kAnalyzer, "auto_steps_end", kInfo,                         \
    "steps found from the launch sequence end before it does: more than a "      \
    "step's calls come after the last step (another loop, or a long "            \
    "teardown), and their device work is outside every step")                    \
  X(kEmptyLastStep, 0, kAnalyzer, "empty_last_step", kInfo,                       \
    "the last marked step submitted no device work (a marker opened at "          \
    "each iteration's end, as torch.profiler's ProfilerStep#N, leaves one "       \
    "open after the loop): it is not a step")                                     \
  X(kOtherIdle, 0, kAnalyzer, "other_idle", kInfo,                                \
    "share of GPU idle time charged to no specific cause")                        \
  X(kNoCpuTime, 0, kAnalyzer, "no_cpu_time", kInfo,                               \
    "no thread CPU-time samples: off-CPU and on-CPU host time are not "           \
    "split")                                                                      \
  X(kNoRunDelay, 0, kAnalyzer, "no_run_delay", kInfo,                             \
    "CPU-time samples without the thread's run-queue delay: time runnable "       \
    "but waiting for a CPU is not told from off-CPU waiting (host_wait)")         \
  X(kModuleChanged, 0, kAnalyzer, "module_changed", kWarning,                     \
    "a module's build id differs from the recorded one: its frames are "          \
    "shown as module+offset")                                                     \
  X(kInvalidRecords, 0, kReader, "invalid_records", kWarning,                     \
    "records with impossible values (end before start, unknown api) "             \
    "ignored")

#define STALLSCOPE_DIAGNOSTICS(X) \
  STALLSCOPE_RECORDER_DIAGNOSTICS(X) STALLSCOPE_ANALYZER_DIAGNOSTICS(X)

enum class DiagnosticSource { kRecorder, kReader, kAnalyzer };

// The recorder's counted problems, by wire id.
enum class DiagnosticId : uint32_t {
#define STALLSCOPE_DIAG_WIRE_ENUM(id, wire, source, name, severity, desc) id = wire,
  STALLSCOPE_RECORDER_DIAGNOSTICS(STALLSCOPE_DIAG_WIRE_ENUM)
#undef STALLSCOPE_DIAG_WIRE_ENUM
};

// One past the largest wire id: the recorder's counter slots.
inline constexpr uint32_t kDiagnosticSlots = [] {
  uint32_t most = 0;
#define STALLSCOPE_DIAG_WIRE_MAX(id, wire, source, name, severity, desc) \
  most = most > (wire) ? most : (wire);
  STALLSCOPE_RECORDER_DIAGNOSTICS(STALLSCOPE_DIAG_WIRE_MAX)
#undef STALLSCOPE_DIAG_WIRE_MAX
  return most + 1;
}();

// The table's rules, checked at build time: a recorder row has a wire id
// above 0 that no other row has; every other row has none.
inline constexpr bool kDiagnosticTableValid = [] {
  bool seen[kDiagnosticSlots] = {};
  bool ok = true;
#define STALLSCOPE_DIAG_CHECK_WIRE(id, wire, source, name, severity, desc)      \
  ok = ok && (wire) > 0 && !seen[wire] &&                                        \
       DiagnosticSource::source == DiagnosticSource::kRecorder;                  \
  seen[wire] = true;
  STALLSCOPE_RECORDER_DIAGNOSTICS(STALLSCOPE_DIAG_CHECK_WIRE)
#undef STALLSCOPE_DIAG_CHECK_WIRE
#define STALLSCOPE_DIAG_CHECK_LOCAL(id, wire, source, name, severity, desc) \
  ok = ok && (wire) == 0 && DiagnosticSource::source != DiagnosticSource::kRecorder;
  STALLSCOPE_ANALYZER_DIAGNOSTICS(STALLSCOPE_DIAG_CHECK_LOCAL)
#undef STALLSCOPE_DIAG_CHECK_LOCAL
  return ok;
}();
static_assert(kDiagnosticTableValid,
              "common/diagnostic_table.h: a wire id is 0, repeated, or on the wrong list");

}  // namespace stallscope::trace
