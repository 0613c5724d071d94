// The HTML report (`report --format html`): one self-contained page, opened
// from disk, that loads nothing and runs no script (inline CSS, charts drawn
// here as inline SVG, a Content-Security-Policy that forbids both). It shows
// the verdict and the six questions, the utilization curve as nvidia-smi
// defines it over a busy/idle strip coloured by idle cause, per-step stacked
// bars, step time versus idle, hotspots with their stacks, kernels, the
// per-step table and diagnostics. Sizes stay bounded for any number of steps.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "analyzer/analyze/analysis.h"
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

// The span the timeline charts cover: from the first call or op (any device)
// to the last one's end, and over every step. {0, 0} when nothing was
// recorded.
struct Span {
  int64_t start_ns = 0;
  int64_t end_ns = 0;
};
Span TimelineSpan(const Timeline& t, const Report& r);

// Escapes &, <, >, " and ' for HTML text and attribute values; control
// characters other than tab and newline become U+FFFD.
std::string HtmlEscape(std::string_view s);

std::string RenderHtml(const Report& report, const ProcessAnalysis& analysis);

}  // namespace stallscope::analyzer
