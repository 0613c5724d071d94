// The HTML report (`report --format html`): one self-contained page, opened
// from disk, that loads nothing and runs no script (inline CSS, charts drawn
// here as inline SVG, a Content-Security-Policy that forbids both). It shows
// the verdict and the six questions, the utilization curve as nvidia-smi
// defines it over a busy/idle strip coloured by idle cause, per-step stacked
// bars, step time versus idle, hotspots with their stacks, kernels, the
// per-step table and diagnostics. Sizes stay bounded for any number of steps.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "analyzer/analyze/analysis.h"
#include "analyzer/analyze/columns.h"
#include "analyzer/model/report.h"

namespace stallscope::analyzer {

// Above this many steps the stacked bars show means of buckets of
// consecutive steps, at most this many bars.
inline constexpr size_t kHtmlMaxBars = 600;
// At most this many points in the scatter (steps sampled evenly, plus the
// slowest and the idlest step).
inline constexpr size_t kHtmlMaxScatterPoints = 2000;
// At most this many points on the utilization curve: beyond, consecutive
// windows are merged (mean drawn, min-max band).
inline constexpr size_t kHtmlMaxCurvePoints = 1200;
// At most this many rows in the per-step table: the first ones and the
// slowest kHtmlSlowestSteps of the rest.
inline constexpr size_t kHtmlMaxTableSteps = 500;
inline constexpr size_t kHtmlSlowestSteps = 20;
inline constexpr size_t kHtmlMaxHotspots = 100;
inline constexpr size_t kHtmlMaxKernels = 30;
// Runs shorter than this get a note that the curve has few windows.
inline constexpr int64_t kHtmlShortRunNs = 2'000'000'000;
// Utilization windows computed at most; longer runs get wider windows (a
// multiple of 1/6 s).
inline constexpr int64_t kMaxUtilizationWindows = 1'000'000;

// nvidia-smi's utilization.gpu over a span: for each window, the percent of
// it during which at least one kernel (compute or NCCL; copies do not count)
// ran on the device. Window k is [WindowStart(k), WindowStart(k + 1)) clipped
// to end_ns; windows are `sixths` sixths of a second (1 unless the run is
// longer than kMaxUtilizationWindows / 6 s), with boundaries at
// start_ns + floor(j * 1e9 / 6) ns. A clipped last window's percent is of its
// own length.
struct UtilizationCurve {
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  int64_t sixths = 1;
  std::vector<double> percent;

  int64_t WindowStart(size_t k) const;
};

UtilizationCurve ComputeUtilization(const Timeline& t, uint32_t device, int64_t start_ns,
                                    int64_t end_ns);

// The span the timeline charts cover: from the first call's enter or op's
// start (any device) to the latest exit or end (SpanOfRecords). {0, 0} when
// nothing was recorded.
struct Span {
  int64_t start_ns = 0;
  int64_t end_ns = 0;
};

// The busy/idle strip's columns (its plot's width in the viewBox).
inline constexpr size_t kHtmlStripColumns = 910;

// The busy/idle strip's categories: 0 busy, 1..kNumCauses the idle causes,
// the last one outside every step.
inline constexpr int kHtmlStripCategories = 2 + kNumCauses;

struct HtmlKernel {
  std::string name;
  bool nccl = false;
  int64_t count = 0;
  int64_t total_ns = 0;
};

// What the page draws from the analyzed process's timeline besides its
// report: the charts' span, the utilization curve, the strip's columns and
// the device's kernels. Built from the ops a slice at a time
// (HtmlTimelineBuilder): from a whole timeline (HtmlTimelineOf) or from a
// trace file read by slices, the same page.
struct HtmlTimeline {
  uint32_t device = 0;
  Span span;
  bool no_ops = true;  // no device op on any device
  UtilizationCurve utilization;
  // Per column of the strip (kPlotWidth of them), the ns of each category
  // but the last; a column is strip_column_ns wide.
  std::vector<std::array<double, kHtmlStripCategories>> strip;
  double strip_column_ns = 0;
  std::vector<HtmlKernel> kernels;  // by total time, then name
  int64_t kernels_ns = 0;
};

class HtmlTimelineBuilder {
 public:
  // `span`: the charts' span.
  HtmlTimelineBuilder(uint32_t device, Span span);
  ~HtmlTimelineBuilder();
  HtmlTimelineBuilder(const HtmlTimelineBuilder&) = delete;
  HtmlTimelineBuilder& operator=(const HtmlTimelineBuilder&) = delete;
  // The ops of `t` (sorted by start) starting in [from, to): called with
  // rising, disjoint ranges that give every op of the run once.
  void AddOps(const Timeline& t, int64_t from, int64_t to);
  // Or, from slices of calls (ForEachCallSlice: a distributed run's rank,
  // each slice with its NCCL waits applied): the ops the calls [i0, i1) of
  // `t` submitted, in any order; those starting before `settled` (no op
  // to come starts before it: an op starts after its call entered) are
  // drawn, the rest held until a later call settles them. False (and the
  // page is not to be used) where an op starts before an op drawn before
  // it. Ops no call submitted are in no such slice: the caller refuses a
  // run that has them.
  bool AddSubmittedOps(const Timeline& t, size_t i0, size_t i1, int64_t settled);
  // After the ops, with the idle gaps' ns by cause in each of the strip's
  // kHtmlStripColumns columns over the span (TimeColumns of kNumCauses
  // categories, the gaps added in time order).
  HtmlTimeline Finish(const TimeColumns& idle);

 private:
  struct State;
  std::unique_ptr<State> s_;
};

HtmlTimeline HtmlTimelineOf(const ProcessAnalysis& pa);

// Escapes &, <, >, " and ' for HTML text and attribute values; control
// characters other than tab and newline become U+FFFD.
std::string HtmlEscape(std::string_view s);

std::string RenderHtml(const Report& report, const ProcessAnalysis& analysis);
std::string RenderHtml(const Report& report, const HtmlTimeline& timeline);
// The page of a process analyzed by slices (AnalyzePaths' `streamed`): its
// ops read from the file again by slices, the same page as RenderHtml's on
// the whole reading.
absl::StatusOr<std::string> RenderHtmlFromFile(const Report& report, const StreamedProcess& process);

}  // namespace stallscope::analyzer
