// The timeline export (`report --format perfetto`): Chrome trace JSON in the
// shape PyTorch's Kineto writes, so that ui.perfetto.dev, chrome://tracing and
// Holistic Trace Analysis (HTA) read it: host CUDA calls, device ops per
// stream, launch → op flow arrows, ProfilerStep#N steps, an idle-gap track
// named by cause, and hotspot call sites on the blocking calls. Written by a
// streaming writer (no JSON DOM), into one string or a megabyte at a time to
// a sink: traces reach 10 M events.
// See docs/analyzer.md "Timeline export".
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "analyzer/analyze/analysis.h"
#include "analyzer/model/report.h"

namespace stallscope::analyzer {

// The export's top-level "stallscope" object names this schema.
inline constexpr const char* kPerfettoSchema = "stallscope.perfetto/1";

// The thread id of the idle-gap track, under the analyzed device's pid.
// Stream ids are CUPTI's (small numbers); this one never is one.
inline constexpr int64_t kIdleTrackTid = 0x7ffffff0;

// HTA's idle-time threshold between consecutive kernels (its
// `consecutive_kernel_delay` default, 30), compared in the unit of HTA's
// timestamps: whole microseconds for Kineto-shaped traces.
inline constexpr int64_t kHtaKernelWaitUs = 30;

// Timestamps are written relative to this CLOCK_MONOTONIC instant: the
// earliest call, op or range of the timeline, rounded down to a whole
// microsecond (0 for an empty timeline).
int64_t PerfettoBaseNs(const Timeline& t);

// One row of HTA's idle-time breakdown as HTA computes it from this export
// (HolisticTraceAnalysis 0.5.0, BreakdownAnalysis._analyze_idle_time_for_stream
// after its parser and `include_last_profiler_step=True` filtering), per step
// and stream: each GPU op's gap to the previous op on its stream (timestamps
// rounded to whole µs as HTA's parser rounds them: start up, end down) is
// host wait when the submitting call began after the previous op ended,
// kernel wait when under kHtaKernelWaitUs, other otherwise. Gaps are charged
// to the step of the op after them (the ProfilerStep holding its call); the
// first op of each stream has no gap.
struct HtaIdleRow {
  int step = -1;  // -1: outside every step
  uint32_t stream = 0;
  int64_t ops = 0;  // GPU ops kept (kernels, copies, sets)
  int64_t host_wait_us = 0;
  int64_t kernel_wait_us = 0;
  int64_t other_us = 0;
};

// Rows sorted by step, then stream.
std::vector<HtaIdleRow> HtaIdleBreakdown(const ProcessAnalysis& analysis);

// Renders the export. `report` supplies the hotspots (indexed by
// analysis.hotspot_of_call) and the step source.
absl::StatusOr<std::string> RenderPerfetto(const Report& report, const ProcessAnalysis& analysis);

// The same export, byte for byte, handed to `sink` a megabyte at a time in
// order, so that it is never held whole (a 10 M-event export is over a
// gigabyte). The first error of the sink stops it and is returned.
using PerfettoSink = std::function<absl::Status(std::string_view)>;
absl::Status StreamPerfetto(const Report& report, const ProcessAnalysis& analysis, const PerfettoSink& sink);

// The export of a trace reported by slices (AnalyzePaths' `streamed`, with
// keep_for_export), from its file again by slices, never read whole: the
// events of the whole reading's export (the calls and ops slice by slice,
// so in another order), the rest byte for byte. Two passes over the calls
// and their ops (ForEachCallSlice): Prepare gathers what comes before the
// events (threads, streams, the steps' spans on each stream, HTA's idle
// breakdown), Stream writes. Holds a slice, one mark a synchronizing call
// (StreamedAnalysis::call_marks), a span and a breakdown row a step and
// stream; the idle gaps are read back from the analysis' temporary file
// (StreamedProcess::gaps).
struct ExportHead;
class PerfettoFromFile {
 public:
  // Unimplemented, with nothing read past the first pass, where the export
  // cannot be made so (a whole reading then makes it): device ops no call
  // submitted (they are in no slice of calls), external ids that may name
  // two calls, an op that starts before its call entered (HTA's rows would
  // come out of order).
  // `progress` (optional): slices read in both passes and how many in all
  // (Prepare's the first half, Stream's the second).
  static absl::StatusOr<PerfettoFromFile> Prepare(const Report& report, const StreamedProcess& process,
                                                  const std::function<void(uint64_t, uint64_t)>& progress = nullptr);
  PerfettoFromFile(PerfettoFromFile&&) noexcept;
  ~PerfettoFromFile();
  // To `sink` a megabyte at a time; the first error of the sink stops it.
  absl::Status Stream(const PerfettoSink& sink,
                      const std::function<void(uint64_t, uint64_t)>& progress = nullptr) const;

 private:
  PerfettoFromFile(const Report& report, const StreamedProcess& process, std::unique_ptr<ExportHead> head);
  const Report* report_;
  const StreamedProcess* process_;
  std::unique_ptr<ExportHead> head_;
};

}  // namespace stallscope::analyzer
