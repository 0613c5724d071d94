// HTML rendering of a Report and its analyzed process (see report_html.h).
#include "analyzer/report/html.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "analyzer/analyze/questions.h"
#include "analyzer/analyze/columns.h"
#include "analyzer/analyze/ranks.h"
#include "analyzer/analyze/stream.h"
#include "analyzer/model/format.h"
#include "analyzer/report/text.h"

namespace stallscope::analyzer {
namespace {

constexpr int64_t kNsPerSec = 1'000'000'000;

// Fixed colours: the busy kinds, the idle causes (Cause order, one each:
// the array's size is checked against kNumCauses), time outside every step.
constexpr std::array<const char*, 3> kBusyColor = {"#2ca02c", "#98df8a", "#17becf"};
constexpr std::array<const char*, 3> kBusyName = {"compute", "copy", "comm (busy)"};
constexpr std::array kCauseColor = {"#d62728", "#ff7f0e", "#8c564b", "#bcbd22",
                                    "#9467bd", "#1f77b4", "#e377c2", "#7f7f7f"};
static_assert(kCauseColor.size() == kNumCauses, "one colour per idle cause");
constexpr const char* kOutsideColor = "#e4e4e4";
constexpr const char* kUtilColor = "#0b5394";

// The viewBox of every chart: 1000 wide, plot area inside the margins.
constexpr double kSvgWidth = 1000;
constexpr double kLeft = 70, kRight = 20;
constexpr double kPlotWidth = kSvgWidth - kLeft - kRight;
static_assert(kPlotWidth == static_cast<double>(kHtmlStripColumns), "one strip column a unit of the plot");

// At most `max_bytes` of `s`, cut at a UTF-8 character boundary, with "…".
std::string Truncate(std::string_view s, size_t max_bytes) {
  if (s.size() <= max_bytes) return std::string(s);
  size_t n = max_bytes;
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  return std::string(s.substr(0, n)) + "\u2026";
}

std::string E(std::string_view s) { return HtmlEscape(s); }

// floor(j * 1e9 / 6) without overflow for any j a span of 2^60 ns needs.
int64_t SixthsToNs(int64_t j) { return j / 6 * kNsPerSec + (j % 6) * kNsPerSec / 6; }
// The largest j with SixthsToNs(j) <= d (d >= 0).
int64_t NsToSixths(int64_t d) {
  return static_cast<int64_t>((static_cast<__int128>(d + 1) * 6 - 1) / kNsPerSec);
}

struct Interval {
  int64_t start, end;
};

bool IsKernel(const DeviceOp& op) {
  return op.kind == trace::DeviceOpKind::kKernel || op.kind == trace::DeviceOpKind::kNccl;
}

// The union of intervals given in order of start. Add gives true, and the
// merged interval in `done`, when `start` begins a new one; Finish gives
// the last.
class Merger {
 public:
  bool Add(int64_t start, int64_t end, Interval* done) {
    if (open_ && start <= cur_.end) {
      cur_.end = std::max(cur_.end, end);
      return false;
    }
    const bool had = open_;
    *done = cur_;
    cur_ = {start, end};
    open_ = true;
    return had;
  }
  bool Finish(Interval* done) {
    *done = cur_;
    const bool had = open_;
    open_ = false;
    return had;
  }

 private:
  Interval cur_{0, 0};
  bool open_ = false;
};

// ---- Chart primitives -------------------------------------------------------

// Data range → viewBox coordinates.
struct Axes {
  double x0 = 0, x1 = 1, y0 = 0, y1 = 1;
  double left = kLeft, top = 10, width = kPlotWidth, height = 200;
  double X(double v) const { return left + (x1 > x0 ? (v - x0) / (x1 - x0) : 0) * width; }
  double Y(double v) const { return top + height - (y1 > y0 ? (v - y0) / (y1 - y0) : 0) * height; }
};

// A 1-2-5 step giving about `target` intervals over `range`.
double NiceStep(double range, int target) {
  if (range <= 0) return 1;
  const double raw = range / target;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double norm = raw / mag;
  return (norm < 1.5 ? 1 : norm < 3 ? 2 : norm < 7 ? 5 : 10) * mag;
}

// A time tick label with a unit chosen from the tick step.
std::string TimeLabel(double ns, double step) {
  double unit = 1;
  const char* name = "ns";
  if (step >= 1e9) {
    unit = 1e9, name = "s";
  } else if (step >= 1e6) {
    unit = 1e6, name = "ms";
  } else if (step >= 1e3) {
    unit = 1e3, name = "us";
  }
  const int decimals = std::clamp(static_cast<int>(std::ceil(-std::log10(step / unit) - 1e-9)), 0, 3);
  return absl::StrFormat("%.*f %s", decimals, ns / unit, name);
}

void XTimeAxis(std::string* out, const Axes& a, double y) {
  // Ticks at round offsets from the axis's start, labelled with the offset.
  const double range = a.x1 - a.x0, step = NiceStep(range, 8);
  for (double o = 0; o <= range + step * 1e-9; o += step) {
    const double x = a.X(a.x0 + o);
    absl::StrAppendFormat(out, "<line class=\"tick\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>",
                          x, y, x, y + 4);
    absl::StrAppendFormat(out, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>", x,
                          y + 16, E(TimeLabel(o, step)));
  }
}

// Horizontal grid lines and labels; `time` labels durations, else percent.
void YAxis(std::string* out, const Axes& a, bool time, int target = 5) {
  const double step = time ? NiceStep(a.y1 - a.y0, target) : 25;
  for (double v = a.y0; v <= a.y1 + step * 1e-9; v += step) {
    const double y = a.Y(v);
    absl::StrAppendFormat(out, "<line class=\"grid\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>",
                          a.left, y, a.left + a.width, y);
    absl::StrAppendFormat(out, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%s</text>",
                          a.left - 6, y + 4,
                          time ? E(TimeLabel(v, step)) : absl::StrFormat("%.0f%%", v));
  }
}

void SvgOpen(std::string* out, double height, std::string_view label) {
  absl::StrAppendFormat(out,
                        "<svg class=\"chart\" viewBox=\"0 0 %.0f %.0f\" role=\"img\" "
                        "aria-label=\"%s\" xmlns=\"http://www.w3.org/2000/svg\">",
                        kSvgWidth, height, E(label));
}

// A legend entry: colour swatch and name.
std::string Swatch(const char* color, std::string_view name) {
  return absl::StrFormat("<span class=\"key\"><i style=\"background:%s\"></i>%s</span>", color,
                         E(name));
}

// What green stands for in a legend: the busy kinds apart, any op, or (the
// scatter) a step that was never idle.
enum class BusyKey { kKinds, kAny, kNeverIdle };

std::string CauseLegend(BusyKey busy, bool outside) {
  std::string s = "<div class=\"legend\">";
  if (busy == BusyKey::kKinds) {
    for (int i = 0; i < 3; ++i) absl::StrAppend(&s, Swatch(kBusyColor[i], kBusyName[i]));
  } else {
    absl::StrAppend(&s, Swatch(kBusyColor[0], busy == BusyKey::kAny ? "busy (any op)" : "never idle"));
  }
  for (int i = 0; i < kNumCauses; ++i) {
    absl::StrAppend(&s, Swatch(kCauseColor[i], absl::StrCat("idle: ", CauseName(CauseAt(i)))));
  }
  if (outside) absl::StrAppend(&s, Swatch(kOutsideColor, "not in a step"));
  absl::StrAppend(&s, "</div>");
  return s;
}

// ---- (a) utilization curve over the busy/idle strip --------------------------

// Strip categories: 0 busy, 1..7 idle causes, 8 outside every step.
constexpr int kStripCats = kHtmlStripCategories;

const char* StripColor(int cat) {
  if (cat == 0) return kBusyColor[0];
  if (cat <= kNumCauses) return kCauseColor[cat - 1];
  return kOutsideColor;
}

void RenderStrip(std::string* out, const HtmlTimeline& ht, double top, double height) {
  const size_t ncols = ht.strip.size();
  // The rest of each column: idle outside the steps (or not attributed).
  // Each column is drawn as stacked rects in category order; runs of columns
  // whose rounded stacks are equal are drawn once.
  std::vector<std::array<int, kStripCats>> heights(ncols);  // tenths of a unit
  for (size_t c = 0; c < ncols; ++c) {
    std::array<double, kStripCats> v = ht.strip[c];
    double known = 0;
    for (int k = 0; k + 1 < kStripCats; ++k) known += v[k];
    v[kStripCats - 1] = std::max(0.0, ht.strip_column_ns - known);
    double total = 0;
    for (double x : v) total += x;
    int used = 0, largest = 0;
    for (int k = 0; k < kStripCats; ++k) {
      heights[c][k] = total > 0 ? static_cast<int>(std::lround(v[k] / total * height * 10)) : 0;
      used += heights[c][k];
      if (v[k] > v[largest]) largest = k;
    }
    // Rounding leaves the column exactly full.
    heights[c][largest] += static_cast<int>(std::lround(height * 10)) - used;
  }
  for (size_t c = 0; c < ncols;) {
    size_t e = c + 1;
    while (e < ncols && heights[e] == heights[c]) ++e;
    double y = top;
    for (int k = 0; k < kStripCats; ++k) {
      if (heights[c][k] == 0) continue;
      const double h = heights[c][k] / 10.0;
      absl::StrAppendFormat(out,
                            "<rect x=\"%.0f\" y=\"%.1f\" width=\"%d\" height=\"%.1f\" fill=\"%s\"/>",
                            kLeft + static_cast<double>(c), y, e - c, h, StripColor(k));
      y += h;
    }
    c = e;
  }
}

std::string WindowName(int64_t sixths) {
  if (sixths == 1) return "1/6 s";
  if (sixths % 6 == 0) return absl::StrFormat("%d s", sixths / 6);
  return absl::StrFormat("%d/6 s", sixths);
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t rank = static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(v.size())));
  return v[std::clamp<size_t>(rank, 1, v.size()) - 1];
}

void RenderUtilization(std::string* out, const Report& r, const HtmlTimeline& ht, size_t* curve_points,
                       size_t* windows) {
  const Span& span = ht.span;
  absl::StrAppend(out, "<section id=\"utilization\"><h2>GPU utilization as nvidia-smi sees it</h2>");
  if (span.end_ns <= span.start_ns) {
    absl::StrAppend(out, "<p class=\"empty\">Nothing was recorded: no timeline to draw.</p></section>");
    return;
  }
  const UtilizationCurve& u = ht.utilization;
  *windows = u.percent.size();
  const size_t group = (u.percent.size() + kHtmlMaxCurvePoints - 1) / kHtmlMaxCurvePoints;
  double mean = 0;
  for (double p : u.percent) mean += p;
  mean = u.percent.empty() ? 0 : mean / static_cast<double>(u.percent.size());
  const double p5 = Percentile(u.percent, 5), p95 = Percentile(u.percent, 95);
  const std::string win = WindowName(u.sixths);
  absl::StrAppendFormat(
      out,
      "<p>utilization.gpu is the percent of each sample period during which at least one kernel "
      "was running (copies alone do not count); nvidia-smi's shortest period is 1/6 s. Below: "
      "that percent for each %s window of GPU %d, computed from the recorded kernels, over the "
      "busy/idle strip of the same time axis (idle coloured by cause), which shows what the "
      "curve averages away.</p>",
      win, ht.device);
  absl::StrAppendFormat(out,
                        "<p class=\"figure\" id=\"util-stats\">%d windows of %s: mean %.1f%%, p5 "
                        "%.1f%%, p95 %.1f%%",
                        u.percent.size(), win, mean, p5, p95);
  if (p95 >= 70 && p5 < 10) {
    absl::StrAppend(out, " &mdash; fluctuating (SageMaker Debugger's LowGPUUtilization rule: "
                         "p95 &ge; 70% and p5 &lt; 10%)");
  }
  absl::StrAppend(out, ".</p>");
  const int64_t run_ns = span.end_ns - span.start_ns;
  if (run_ns < kHtmlShortRunNs) {
    absl::StrAppendFormat(out,
                          "<p class=\"note\">A short run (%s): the window is 1/6 s, so the curve "
                          "has only %d point%s; it is shown anyway, as nvidia-smi would sample "
                          "it.</p>",
                          E(FormatDuration(run_ns)), u.percent.size(),
                          u.percent.size() == 1 ? "" : "s");
  }
  if (u.sixths > 1) {
    absl::StrAppendFormat(out,
                          "<p class=\"note\">The run is longer than %d windows of 1/6 s: windows "
                          "are %s.</p>",
                          kMaxUtilizationWindows, win);
  }
  if (group > 1) {
    absl::StrAppendFormat(out,
                          "<p class=\"note\">%d windows: each point of the curve is the mean of "
                          "%d consecutive windows; the band spans their minimum and maximum.</p>",
                          u.percent.size(), group);
  }
  if (ht.no_ops) {
    absl::StrAppend(out, "<p class=\"note\">No device ops were recorded (a host-only trace): the "
                         "GPU ran no kernel.</p>");
  }
  Axes a;
  a.x0 = static_cast<double>(span.start_ns);
  a.x1 = static_cast<double>(span.end_ns);
  a.y0 = 0, a.y1 = 100, a.top = 10, a.height = 180;
  const double strip_top = a.top + a.height + 30, strip_h = 28;
  SvgOpen(out, strip_top + strip_h + 28, "utilization curve and busy/idle strip");
  YAxis(out, a, false);
  // Points: (start, value) of each group, as a step function.
  std::string line, band_top, band_bottom;
  size_t points = 0;
  for (size_t g = 0; g * group < u.percent.size(); ++g) {
    const size_t b = g * group, e = std::min(u.percent.size(), b + group);
    double sum = 0, lo = 100, hi = 0;
    for (size_t k = b; k < e; ++k) {
      sum += u.percent[k];
      lo = std::min(lo, u.percent[k]);
      hi = std::max(hi, u.percent[k]);
    }
    const double v = sum / static_cast<double>(e - b);
    const double x0 = a.X(static_cast<double>(u.WindowStart(b)));
    const double x1 = a.X(static_cast<double>(std::min(u.WindowStart(e), u.end_ns)));
    absl::StrAppendFormat(&line, "%.1f,%.1f %.1f,%.1f ", x0, a.Y(v), x1, a.Y(v));
    absl::StrAppendFormat(&band_top, "%.1f,%.1f %.1f,%.1f ", x0, a.Y(hi), x1, a.Y(hi));
    band_bottom.insert(0, absl::StrFormat("%.1f,%.1f %.1f,%.1f ", x0, a.Y(lo), x1, a.Y(lo)));
    ++points;
  }
  *curve_points = points;
  if (group > 1) {
    absl::StrAppendFormat(out, "<polygon class=\"band\" points=\"%s%s\"/>", band_top, band_bottom);
  }
  absl::StrAppendFormat(out,
                        "<polyline class=\"util\" fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\" "
                        "points=\"%s\"><title>utilization.gpu per %s window</title></polyline>",
                        kUtilColor, line, win);
  absl::StrAppendFormat(out, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">GPU %d</text>",
                        kLeft - 6, strip_top + strip_h / 2 + 4, ht.device);
  RenderStrip(out, ht, strip_top, strip_h);
  XTimeAxis(out, a, strip_top + strip_h);
  absl::StrAppend(out, "</svg>", CauseLegend(BusyKey::kAny, true));
  // The step spans, when few enough to name.
  if (!r.steps.empty()) {
    absl::StrAppendFormat(out,
                          "<p class=\"note\">Time axis: from the first recorded call or op; "
                          "%d step%s on the device timeline from %s to %s.</p>",
                          r.steps.size(), r.steps.size() == 1 ? "" : "s",
                          E(FormatDuration(r.steps.front().start_ns - span.start_ns)),
                          E(FormatDuration(r.steps.back().end_ns - span.start_ns)));
  }
  absl::StrAppend(out, "</section>");
}

// ---- (b) per-step stacked bars ----------------------------------------------

// Busy kinds then causes, in stack order from the bottom.
std::array<double, 3 + kNumCauses> StackOf(const StepStats& s) {
  std::array<double, 3 + kNumCauses> v{};
  v[0] = static_cast<double>(s.busy_by_kind.compute);
  v[1] = static_cast<double>(s.busy_by_kind.copy);
  v[2] = static_cast<double>(s.busy_by_kind.comm);
  for (int i = 0; i < kNumCauses; ++i) v[3 + i] = static_cast<double>(s.idle_by_cause[i]);
  return v;
}

const char* StackColor(int k) { return k < 3 ? kBusyColor[k] : kCauseColor[k - 3]; }

void RenderStepBars(std::string* out, const Report& r, size_t* bars) {
  const size_t n = r.steps.size();
  const size_t bucket = (n + kHtmlMaxBars - 1) / kHtmlMaxBars;
  if (bucket > 1) {
    absl::StrAppendFormat(out,
                          "<section id=\"step-bars\"><h2>Per step: busy by kind, idle by cause "
                          "(each bar: mean of %d consecutive steps)</h2>",
                          bucket);
  } else {
    absl::StrAppend(out, "<section id=\"step-bars\"><h2>Per step: busy by kind, idle by cause</h2>");
  }
  if (n == 0) {
    absl::StrAppend(out, "<p class=\"empty\">No steps: nothing to draw.</p></section>");
    return;
  }
  // The predicted step times drawn beside the measured ones: all hotspots
  // removed, else the launch-bound stretches in CUDA graphs.
  const Predictions& p = r.predictions;
  const std::vector<int64_t>* predicted = nullptr;
  std::string predicted_what;
  if (p.made && p.all_removed_step_ns.size() == n) {
    predicted = &p.all_removed_step_ns;
    predicted_what = p.hotspots_removed == 1 ? "the hotspot removed"
                                             : absl::StrFormat("all %d hotspots removed", p.hotspots_removed);
  } else if (p.made && p.graph_step_ns.size() == n) {
    predicted = &p.graph_step_ns;
    predicted_what = absl::StrFormat("the %d launch-bound stretches in CUDA graphs", p.graph_stretches);
  }
  struct Bar {
    size_t first, last;  // positions in r.steps
    std::array<double, 3 + kNumCauses> v;
    double total;
    double predicted;
  };
  std::vector<Bar> list;
  double ymax = 0;
  for (size_t b = 0; b < n; b += bucket) {
    const size_t e = std::min(n, b + bucket);
    Bar bar{b, e - 1, {}, 0, 0};
    for (size_t i = b; i < e; ++i) {
      const auto v = StackOf(r.steps[i]);
      for (size_t k = 0; k < v.size(); ++k) bar.v[k] += v[k];
      if (predicted != nullptr) bar.predicted += static_cast<double>((*predicted)[i]);
    }
    for (double& x : bar.v) {
      x /= static_cast<double>(e - b);
      bar.total += x;
    }
    bar.predicted /= static_cast<double>(e - b);
    ymax = std::max({ymax, bar.total, bar.predicted});
    list.push_back(bar);
  }
  *bars = list.size();
  Axes a;
  a.y1 = ymax > 0 ? ymax : 1;
  a.top = 10, a.height = 240;
  SvgOpen(out, a.top + a.height + 34, "per-step stacked bars");
  YAxis(out, a, true);
  const double slot = a.width / static_cast<double>(list.size());
  double w = slot > 3 ? slot * 0.85 : slot;
  const double pw = predicted != nullptr ? w * 0.35 : 0;  // the predicted bar, right of the measured
  w -= pw;
  for (size_t i = 0; i < list.size(); ++i) {
    const Bar& bar = list[i];
    const StepStats& f = r.steps[bar.first];
    const StepStats& l = r.steps[bar.last];
    const double x = a.left + slot * static_cast<double>(i);
    CauseNs causes{};
    for (int k = 0; k < kNumCauses; ++k) causes[k] = static_cast<int64_t>(bar.v[3 + k]);
    const double busy = bar.v[0] + bar.v[1] + bar.v[2];
    const std::string name = bar.first == bar.last
                                 ? absl::StrFormat("step %d", f.index)
                                 : absl::StrFormat("steps %d-%d (mean of %d)", f.index, l.index,
                                                   bar.last - bar.first + 1);
    absl::StrAppendFormat(
        out, "<g><title>%s: %s; busy %s (compute %s, copy %s, comm %s); idle %s%s</title>", E(name),
        E(FormatDuration(static_cast<int64_t>(bar.total))),
        E(FormatDuration(static_cast<int64_t>(busy))), E(FormatDuration(static_cast<int64_t>(bar.v[0]))),
        E(FormatDuration(static_cast<int64_t>(bar.v[1]))),
        E(FormatDuration(static_cast<int64_t>(bar.v[2]))),
        E(FormatDuration(static_cast<int64_t>(bar.total - busy))),
        bar.total - busy > 0 ? absl::StrCat(", top cause ", CauseName(CauseAt(TopCause(causes))))
                             : "");
    double y = a.Y(0);
    for (size_t k = 0; k < bar.v.size(); ++k) {
      if (bar.v[k] <= 0) continue;
      const double h = a.height * bar.v[k] / a.y1;
      y -= h;
      absl::StrAppendFormat(out,
                            "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" fill=\"%s\"/>",
                            x, y, w, h, StackColor(static_cast<int>(k)));
    }
    absl::StrAppend(out, "</g>");
    if (predicted != nullptr && bar.predicted > 0) {
      const double h = a.height * bar.predicted / a.y1;
      absl::StrAppendFormat(out,
                            "<g class=\"predicted\"><title>%s predicted with %s: %s</title><rect x=\"%.2f\" "
                            "y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" fill=\"none\" stroke=\"#333\" "
                            "stroke-width=\"1\"/></g>",
                            E(name), E(predicted_what), E(FormatDuration(static_cast<int64_t>(bar.predicted))),
                            x + w, a.Y(0) - h, pw, h);
    }
  }
  // x labels: a few step indices.
  const size_t label_every = std::max<size_t>(1, list.size() / 10);
  for (size_t i = 0; i < list.size(); i += label_every) {
    absl::StrAppendFormat(out, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%d</text>",
                          a.left + slot * (static_cast<double>(i) + 0.5), a.top + a.height + 16,
                          r.steps[list[i].first].index);
  }
  absl::StrAppendFormat(out, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">step</text>",
                        a.left + a.width / 2, a.top + a.height + 31);
  absl::StrAppend(out, "</svg>", CauseLegend(BusyKey::kKinds, false));
  if (predicted != nullptr) {
    absl::StrAppendFormat(out,
                          "<p>Outlined, right of each bar: the step time predicted with %s "
                          "(what-if replay of this trace: %s a step, against %s measured; "
                          "<code>stallscope whatif</code> for one fix at a time).</p>",
                          E(predicted_what),
                          E(FormatDuration(predicted == &p.all_removed_step_ns ? p.all_removed_mean_step_ns
                                                                                : p.graph_mean_step_ns)),
                          E(FormatDuration(p.baseline_mean_step_ns)));
  }
  absl::StrAppend(out, "</section>");
}

// ---- (c) step time versus idle ----------------------------------------------

void RenderScatter(std::string* out, const Report& r, size_t* points) {
  const size_t n = r.steps.size();
  absl::StrAppend(out, "<section id=\"scatter\"><h2>Step time versus GPU idle</h2>");
  if (n == 0) {
    absl::StrAppend(out, "<p class=\"empty\">No steps: nothing to draw.</p></section>");
    return;
  }
  std::vector<size_t> pick;
  size_t slowest = 0, idlest = 0;
  double xmax = 0, ymax = 0;
  for (size_t i = 0; i < n; ++i) {
    const StepStats& s = r.steps[i];
    xmax = std::max(xmax, static_cast<double>(s.gpu_idle_ns));
    ymax = std::max(ymax, static_cast<double>(s.end_ns - s.start_ns));
    if (s.end_ns - s.start_ns > r.steps[slowest].end_ns - r.steps[slowest].start_ns) slowest = i;
    if (s.gpu_idle_ns > r.steps[idlest].gpu_idle_ns) idlest = i;
  }
  if (n <= kHtmlMaxScatterPoints) {
    for (size_t i = 0; i < n; ++i) pick.push_back(i);
  } else {
    for (size_t i = 0; i + 2 < kHtmlMaxScatterPoints; ++i) pick.push_back(i * n / (kHtmlMaxScatterPoints - 2));
    pick.push_back(slowest);
    pick.push_back(idlest);
    std::sort(pick.begin(), pick.end());
    pick.erase(std::unique(pick.begin(), pick.end()), pick.end());
  }
  *points = pick.size();
  absl::StrAppendFormat(out,
                        "<p>One point per step%s; colour: the step's largest idle cause (green: "
                        "never idle). Points on a rising line mean idle sets the step time "
                        "(q1).</p>",
                        pick.size() < n ? absl::StrFormat(": %d of %d steps, sampled evenly, "
                                                          "with the slowest and the idlest",
                                                          pick.size(), n)
                                        : "");
  Axes a;
  a.x1 = xmax > 0 ? xmax * 1.02 : 1;
  a.y1 = ymax > 0 ? ymax * 1.02 : 1;
  a.top = 10, a.height = 260;
  SvgOpen(out, a.top + a.height + 36, "step time versus idle");
  YAxis(out, a, true);
  {
    const double step = NiceStep(a.x1, 8);
    for (double v = 0; v <= a.x1 + step * 1e-9; v += step) {
      absl::StrAppendFormat(out, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>",
                            a.X(v), a.top + a.height + 16, E(TimeLabel(v, step)));
    }
  }
  absl::StrAppendFormat(out,
                        "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">GPU idle in the "
                        "step</text>",
                        a.left + a.width / 2, a.top + a.height + 32);
  for (size_t i : pick) {
    const StepStats& s = r.steps[i];
    const char* color =
        s.gpu_idle_ns > 0 ? kCauseColor[TopCause(s.idle_by_cause)] : kBusyColor[0];
    absl::StrAppendFormat(out,
                          "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"><title>step %d: %s, "
                          "idle %s</title></circle>",
                          a.X(static_cast<double>(s.gpu_idle_ns)),
                          a.Y(static_cast<double>(s.end_ns - s.start_ns)), color, s.index,
                          E(FormatDuration(s.end_ns - s.start_ns)), E(FormatDuration(s.gpu_idle_ns)));
  }
  absl::StrAppend(out, "</svg>", CauseLegend(BusyKey::kNeverIdle, false), "</section>");
}

// ---- Tables -----------------------------------------------------------------

std::string SiteText(const Frame& f) {
  if (f.file.empty()) return f.function.empty() ? "?" : f.function;
  return absl::StrFormat("%s:%d (%s)", f.file, f.line, f.function);
}

std::string NativeFrameText(const Frame& f) {
  std::string s = f.function.empty() ? "?" : f.function;
  if (!f.file.empty()) absl::StrAppendFormat(&s, " (%s:%d)", f.file, f.line);
  if (!f.module.empty()) absl::StrAppendFormat(&s, " [%s]", f.module);
  return s;
}

void RenderHotspots(std::string* out, const Report& r) {
  absl::StrAppend(out, "<section id=\"hotspots\"><h2>Forced-sync hotspots</h2>");
  if (r.hotspots.empty()) {
    absl::StrAppend(out, "<p class=\"empty\">None: no synchronizing call blocked the host.</p></section>");
    return;
  }
  const bool saves = r.predictions.made;
  absl::StrAppend(out,
                  "<table><thead><tr><th>#</th><th>api</th><th>kind</th><th>count</th>"
                  "<th>blocked</th><th>GPU idle caused</th>",
                  saves ? "<th>step time saved (predicted)</th>" : "",
                  "<th>site and stacks</th><th>suggestion</th><th>fingerprint</th></tr></thead><tbody>");
  const size_t shown = std::min(r.hotspots.size(), kHtmlMaxHotspots);
  for (size_t i = 0; i < shown; ++i) {
    const Hotspot& h = r.hotspots[i];
    std::vector<const Frame*> py, native;
    for (const Frame& f : h.stack) (f.module == "python" ? py : native).push_back(&f);
    absl::StrAppendFormat(out,
                          "<tr><td>%d</td><td class=\"api\"><code>%s</code></td><td>%s</td><td class=\"num\">%d"
                          "</td><td class=\"num\">%s</td><td class=\"num\">%s</td>%s<td>"
                          "<code>%s</code><details><summary>stacks: %d Python, %d native frame%s"
                          "</summary>",
                          i + 1, E(h.api), h.explicit_sync ? "explicit" : "implicit", h.count,
                          E(FormatDuration(h.blocked_ns)), E(FormatDuration(h.idle_caused_ns)),
                          !saves ? std::string()
                                 : absl::StrCat("<td class=\"num\">",
                                                h.predicted_saving_ns < 0 ? "-" : E(FormatDuration(h.predicted_saving_ns)),
                                                "</td>"),
                          E(SiteText(h.site)), py.size(), native.size(),
                          native.size() == 1 ? "" : "s");
    absl::StrAppend(out, "<div class=\"stack\"><b>Python</b> (innermost first)");
    if (py.empty()) absl::StrAppend(out, "<p class=\"empty\">none recorded</p>");
    else {
      absl::StrAppend(out, "<ol>");
      for (const Frame* f : py) absl::StrAppend(out, "<li><code>", E(SiteText(*f)), "</code></li>");
      absl::StrAppend(out, "</ol>");
    }
    absl::StrAppend(out, "<b>Native</b> (innermost first)");
    if (native.empty()) absl::StrAppend(out, "<p class=\"empty\">none recorded</p>");
    else {
      absl::StrAppend(out, "<ol>");
      for (const Frame* f : native) {
        absl::StrAppend(out, "<li><code>", E(NativeFrameText(*f)), "</code></li>");
      }
      absl::StrAppend(out, "</ol>");
    }
    absl::StrAppendFormat(out, "</div></details></td><td>%s</td><td><code>%s</code></td></tr>",
                          E(h.suggestion), E(h.fingerprint));
  }
  absl::StrAppend(out, "</tbody></table>");
  if (shown < r.hotspots.size()) {
    absl::StrAppendFormat(out, "<p class=\"note\">%d more hotspots (--format json lists all).</p>",
                          r.hotspots.size() - shown);
  }
  absl::StrAppend(out, "</section>");
}

void RenderKernels(std::string* out, const HtmlTimeline& ht) {
  absl::StrAppendFormat(out, "<section id=\"kernels\"><h2>Kernels by device time (GPU %d)</h2>",
                        ht.device);
  if (ht.kernels.empty()) {
    absl::StrAppend(out, "<p class=\"empty\">No kernels were recorded on this device.</p></section>");
    return;
  }
  const std::vector<HtmlKernel>& aggs = ht.kernels;
  const int64_t all = ht.kernels_ns;
  absl::StrAppend(out,
                  "<table><thead><tr><th>kernel</th><th>kind</th><th>count</th><th>total</th>"
                  "<th>mean</th><th>share</th></tr></thead><tbody>");
  for (size_t i = 0; i < aggs.size() && i < kHtmlMaxKernels; ++i) {
    const HtmlKernel& a = aggs[i];
    const std::string_view name = a.name;
    absl::StrAppendFormat(out,
                          "<tr><td><code title=\"%s\">%s</code></td><td>%s</td><td class=\"num\">%d"
                          "</td><td class=\"num\">%s</td><td class=\"num\">%s</td><td "
                          "class=\"num\">%.1f%%</td></tr>",
                          E(Truncate(name, 2000)), name.empty() ? "?" : E(Truncate(name, 160)),
                          a.nccl ? "nccl" : "kernel", a.count, E(FormatDuration(a.total_ns)),
                          E(FormatDuration(a.total_ns / a.count)), Pct(a.total_ns, all));
  }
  absl::StrAppend(out, "</tbody></table>");
  if (aggs.size() > kHtmlMaxKernels) {
    absl::StrAppendFormat(out, "<p class=\"note\">%d more kernels not listed.</p>",
                          aggs.size() - kHtmlMaxKernels);
  }
  absl::StrAppend(out, "</section>");
}

void RenderStepTable(std::string* out, const Report& r) {
  const size_t n = r.steps.size();
  absl::StrAppend(out, "<section id=\"steps\"><h2>Steps</h2>");
  if (n == 0) {
    absl::StrAppend(out, "<p class=\"empty\">No steps.</p></section>");
    return;
  }
  // Rows: all steps, or the first ones and the slowest of the rest.
  std::vector<size_t> rows;
  if (n <= kHtmlMaxTableSteps) {
    for (size_t i = 0; i < n; ++i) rows.push_back(i);
  } else {
    const size_t first = kHtmlMaxTableSteps - kHtmlSlowestSteps;
    for (size_t i = 0; i < first; ++i) rows.push_back(i);
    std::vector<size_t> rest;
    for (size_t i = first; i < n; ++i) rest.push_back(i);
    auto dur = [&](size_t i) { return r.steps[i].end_ns - r.steps[i].start_ns; };
    std::partial_sort(rest.begin(), rest.begin() + kHtmlSlowestSteps, rest.end(),
                      [&](size_t x, size_t y) { return dur(x) != dur(y) ? dur(x) > dur(y) : x < y; });
    rest.resize(kHtmlSlowestSteps);
    std::sort(rest.begin(), rest.end());
    rows.insert(rows.end(), rest.begin(), rest.end());
    absl::StrAppendFormat(out,
                          "<p class=\"note\">%d steps: the first %d and the %d slowest of the "
                          "rest are listed (--format json lists all).</p>",
                          n, first, kHtmlSlowestSteps);
  }
  absl::StrAppend(out,
                  "<table><thead><tr><th>step</th><th>start</th><th>time</th><th>busy</th>"
                  "<th>idle</th><th>idle %</th><th>syncs</th><th>launches</th><th>top cause</th>"
                  "</tr></thead><tbody>");
  const int64_t origin = r.steps.front().start_ns;
  size_t prev = 0;
  for (size_t k = 0; k < rows.size(); ++k) {
    const size_t i = rows[k];
    if (k > 0 && i > prev + 1) {
      absl::StrAppendFormat(out, "<tr class=\"skip\"><td colspan=\"9\">&hellip; %d steps not "
                                 "listed &hellip;</td></tr>",
                            i - prev - 1);
    }
    prev = i;
    const StepStats& s = r.steps[i];
    const int64_t dur = s.end_ns - s.start_ns;
    const int top = TopCause(s.idle_by_cause);
    absl::StrAppendFormat(
        out,
        "<tr><td class=\"num\">%d</td><td class=\"num\">%s</td><td class=\"num\">%s</td><td "
        "class=\"num\">%s</td><td class=\"num\">%s</td><td class=\"num\">%.1f%%</td><td "
        "class=\"num\">%d</td><td class=\"num\">%d</td><td>%s</td></tr>",
        s.index, E(FormatDuration(s.start_ns - origin)), E(FormatDuration(dur)),
        E(FormatDuration(s.gpu_busy_ns)), E(FormatDuration(s.gpu_idle_ns)), Pct(s.gpu_idle_ns, dur),
        s.sync_count, s.launches,
        s.gpu_idle_ns > 0 ? Swatch(kCauseColor[top], CauseName(CauseAt(top))) : "-");
  }
  absl::StrAppend(out, "</tbody></table></section>");
}

void RenderCauses(std::string* out, const Report& r) {
  const Totals& t = r.totals;
  absl::StrAppend(out,
                  "<section id=\"idle-causes\"><h2>GPU idle by cause</h2><table><thead><tr>"
                  "<th>cause</th><th>idle</th><th>share of idle</th></tr></thead><tbody>");
  for (int i = 0; i < kNumCauses; ++i) {
    absl::StrAppendFormat(out,
                          "<tr><td>%s</td><td class=\"num\">%s</td><td class=\"num\">%.1f%%</td>"
                          "</tr>",
                          Swatch(kCauseColor[i], CauseName(CauseAt(i))),
                          E(FormatDuration(t.idle_by_cause[i])),
                          Pct(t.idle_by_cause[i], t.gpu_idle_ns));
  }
  absl::StrAppend(out, "</tbody></table></section>");
}

void RenderQuestions(std::string* out, const Report& r) {
  absl::StrAppend(out,
                  "<section id=\"questions\"><h2>Questions</h2><table><thead><tr><th></th>"
                  "<th>question</th><th>answer</th><th>evidence</th></tr></thead><tbody>");
  for (const Question& q : r.questions) {
    const std::string cls = q.answer == "yes" || q.answer == "no" ? q.answer : "unknown";
    absl::StrAppendFormat(out,
                          "<tr><td>%s</td><td>%s</td><td><span class=\"ans %s\">%s</span></td>"
                          "<td>%s</td></tr>",
                          E(q.id), E(QuestionTitle(q.id)), cls, E(q.answer), E(q.evidence));
  }
  absl::StrAppend(out, "</tbody></table></section>");
}

void RenderDiagnostics(std::string* out, const Report& r) {
  absl::StrAppend(out, "<section id=\"diagnostics\"><h2>Diagnostics</h2>");
  if (r.diagnostics.empty()) {
    absl::StrAppend(out, "<p class=\"empty\">None.</p></section>");
    return;
  }
  absl::StrAppend(out,
                  "<table><thead><tr><th>severity</th><th>name</th><th>message</th></tr></thead>"
                  "<tbody>");
  for (const Diagnostic& d : r.diagnostics) {
    const std::string msg = d.message.empty()
                                ? absl::StrFormat("%s (count %d)", DiagDescription(d.id), d.count)
                                : d.message;
    absl::StrAppendFormat(out, "<tr><td class=\"sev-%s\">%s</td><td><code>%s</code></td><td>%s</td></tr>",
                          E(SeverityName(DiagSeverity(d.id))), E(SeverityName(DiagSeverity(d.id))),
                          E(DiagName(d.id)), E(msg));
  }
  absl::StrAppend(out, "</tbody></table></section>");
}

void RenderVerdict(std::string* out, const Report& r) {
  const Totals& t = r.totals;
  absl::StrAppendFormat(out,
                        "<section id=\"verdict\"><h1>stallscope report</h1><p class=\"verdict\">%s"
                        "</p>",
                        E(RenderSummary(r)));
  absl::StrAppendFormat(out,
                        "<p>GPU busy %s (%.1f%% of %s): compute %s, copy %s, comm %s; %d launches, "
                        "%d synchronizing calls.</p>",
                        E(FormatDuration(t.gpu_busy_ns)), Pct(t.gpu_busy_ns, t.wall_ns),
                        E(FormatDuration(t.wall_ns)), E(FormatDuration(t.busy_by_kind.compute)),
                        E(FormatDuration(t.busy_by_kind.copy)), E(FormatDuration(t.busy_by_kind.comm)),
                        t.launches, t.syncs);
  if (!r.processes.empty()) {
    absl::StrAppend(out, "<ul class=\"procs\">");
    for (const ProcessSummary& p : r.processes) {
      absl::StrAppendFormat(out, "<li><code>%s</code> pid %d on %s: %d device ops%s</li>", E(p.file),
                            p.pid, E(p.host.empty() ? "?" : p.host), p.device_ops,
                            r.processes.size() > 1 && p.analyzed ? " (analyzed below)" : "");
    }
    absl::StrAppend(out, "</ul>");
  }
  absl::StrAppend(out, "</section>");
}

constexpr const char* kStyle = R"(
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;
margin:0 auto;max-width:1200px;padding:16px 24px;color:#1d1d1f;background:#fff}
h1{font-size:22px;margin:0 0 8px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #ddd}
.verdict{font-size:16px;font-weight:600;background:#f3f6fb;border-left:4px solid #0b5394;
padding:8px 12px}
table{border-collapse:collapse;margin:6px 0}th,td{border-bottom:1px solid #e5e5e5;padding:3px 8px;
text-align:left;vertical-align:top}th{background:#fafafa}td.num{text-align:right;
font-variant-numeric:tabular-nums;white-space:nowrap}
code{font-family:ui-monospace,"DejaVu Sans Mono",monospace;font-size:12.5px;overflow-wrap:anywhere}
.ans{font-weight:700;padding:1px 6px;border-radius:3px}.ans.yes{background:#fde2e1;color:#9b1c1c}
.ans.no{background:#e3f4e3;color:#1e6b1e}.ans.unknown{background:#eee;color:#555}
svg.chart{width:100%;height:auto;display:block;font-size:11px;fill:#333}
svg .grid{stroke:#e6e6e6}svg .tick{stroke:#999}svg .band{fill:#0b5394;fill-opacity:.15}
.legend{margin:4px 0 8px}.key{display:inline-block;margin-right:12px;white-space:nowrap}
.key i{display:inline-block;width:11px;height:11px;margin-right:4px;vertical-align:-1px;
border:1px solid #0002}.note,.empty{color:#555}.figure{font-weight:600}
details summary{cursor:pointer;color:#0b5394}.stack ol{margin:2px 0 6px;padding-left:22px}
tr.skip td{color:#777;text-align:center}.sev-error{color:#9b1c1c}.sev-warning{color:#8a5a00}
td.api code{overflow-wrap:normal}footer{margin-top:28px;color:#666;font-size:12px}
)";

}  // namespace

int64_t UtilizationCurve::WindowStart(size_t k) const {
  return start_ns + SixthsToNs(static_cast<int64_t>(k) * sixths);
}

UtilizationCurve ComputeUtilization(const Timeline& t, uint32_t device, int64_t start_ns,
                                    int64_t end_ns) {
  HtmlTimelineBuilder b(device, {start_ns, end_ns});
  b.AddOps(t, std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max());
  return b.Finish({}).utilization;
}

struct HtmlTimelineBuilder::State {
  HtmlTimeline page;
  std::vector<int64_t> busy;  // each utilization window's kernel ns
  TimeColumns columns;        // the strip's busy ns
  Merger ops, kernels;        // of the device: every op, and kernels only
  absl::flat_hash_map<std::string, size_t> kernel_at;
  // AddSubmittedOps: the device's ops not settled yet, (start, end,
  // kernel), a min-heap by start; and the latest start merged.
  struct Held {
    int64_t start, end;
    bool kernel;
    bool operator>(const Held& o) const { return start > o.start; }
  };
  std::vector<Held> held;
  int64_t merged_to = std::numeric_limits<int64_t>::min();
  bool in_order = true;

  // Counts op i of `t` (any device) and, on the page's device, its
  // kernel's time by name (`at_id`: `t`'s name ids already looked up);
  // false for an op of another device.
  bool CountOp(const Timeline& t, size_t i, absl::flat_hash_map<uint32_t, size_t>* at_id);
  // Merges the held ops starting before `settled`, in start order.
  void MergeHeld(int64_t settled);

  State(uint32_t device, Span span) : columns(span.start_ns, span.end_ns, kHtmlStripColumns, 1) {
    page.device = device;
    page.span = span;
    UtilizationCurve& u = page.utilization;
    u.start_ns = span.start_ns;
    u.end_ns = span.end_ns;
    if (span.end_ns > span.start_ns) {
      const int64_t total_sixths = NsToSixths(span.end_ns - 1 - span.start_ns) + 1;
      u.sixths = std::max<int64_t>(1, (total_sixths + kMaxUtilizationWindows - 1) / kMaxUtilizationWindows);
      busy.assign(static_cast<size_t>((total_sixths + u.sixths - 1) / u.sixths), 0);
    }
  }

  // A merged interval of kernels, each once, into the windows' busy ns.
  void AddBusy(const Interval& iv) {
    const UtilizationCurve& u = page.utilization;
    const int64_t a = std::max(iv.start, u.start_ns), b = std::min(iv.end, u.end_ns);
    if (b <= a) return;
    for (size_t k = static_cast<size_t>(NsToSixths(a - u.start_ns) / u.sixths); k < busy.size(); ++k) {
      const int64_t ws = u.WindowStart(k), we = std::min(u.WindowStart(k + 1), u.end_ns);
      if (ws >= b) break;
      busy[k] += std::min(b, we) - std::max(a, ws);
    }
  }
};

HtmlTimelineBuilder::HtmlTimelineBuilder(uint32_t device, Span span)
    : s_(std::make_unique<State>(device, span)) {}

HtmlTimelineBuilder::~HtmlTimelineBuilder() = default;

void HtmlTimelineBuilder::AddOps(const Timeline& t, int64_t from, int64_t to) {
  State& s = *s_;
  Interval done{0, 0};
  absl::flat_hash_map<uint32_t, size_t> at_id;  // this timeline's name ids: an entry of kernels
  for (size_t i = 0; i < t.ops.size(); ++i) {
    const DeviceOp& op = t.ops[i];
    if (op.start_ns < from || op.start_ns >= to) continue;
    if (!s.CountOp(t, i, &at_id)) continue;
    if (op.end_ns <= op.start_ns) continue;
    if (s.ops.Add(op.start_ns, op.end_ns, &done)) s.columns.Add(done.start, done.end, 0);
    if (IsKernel(op) && s.kernels.Add(op.start_ns, op.end_ns, &done)) s.AddBusy(done);
  }
}

bool HtmlTimelineBuilder::AddSubmittedOps(const Timeline& t, size_t i0, size_t i1, int64_t settled) {
  State& s = *s_;
  absl::flat_hash_map<uint32_t, size_t> at_id;
  const auto later = std::greater<State::Held>();
  for (size_t i = 0; i < t.ops.size(); ++i) {
    const DeviceOp& op = t.ops[i];
    if (!SubmittedBy(op, i0, i1) || !s.CountOp(t, i, &at_id) || op.end_ns <= op.start_ns) continue;
    s.in_order = s.in_order && op.start_ns >= s.merged_to;
    s.held.push_back({op.start_ns, op.end_ns, IsKernel(op)});
    std::push_heap(s.held.begin(), s.held.end(), later);
  }
  s.MergeHeld(settled);
  return s.in_order;
}

void HtmlTimelineBuilder::State::MergeHeld(int64_t settled) {
  const auto later = std::greater<Held>();
  Interval done{0, 0};
  while (!held.empty() && held.front().start < settled) {
    std::pop_heap(held.begin(), held.end(), later);
    const Held h = held.back();
    held.pop_back();
    merged_to = h.start;
    if (ops.Add(h.start, h.end, &done)) columns.Add(done.start, done.end, 0);
    if (h.kernel && kernels.Add(h.start, h.end, &done)) AddBusy(done);
  }
}

bool HtmlTimelineBuilder::State::CountOp(const Timeline& t, size_t i, absl::flat_hash_map<uint32_t, size_t>* at_id) {
  const DeviceOp& op = t.ops[i];
  page.no_ops = false;
  if (op.device != page.device) return false;
  if (IsKernel(op)) {
    auto [id, fresh] = at_id->try_emplace(t.op_info[i].name, 0);
    if (fresh) {
      std::string name(t.String(t.op_info[i].name));
      auto [it, added] = kernel_at.try_emplace(name, page.kernels.size());
      if (added) page.kernels.push_back({std::move(name), op.kind == trace::DeviceOpKind::kNccl});
      id->second = it->second;
    }
    HtmlKernel& k = page.kernels[id->second];
    ++k.count;
    const int64_t d = std::max<int64_t>(0, op.end_ns - op.start_ns);
    k.total_ns = AddCapped(k.total_ns, d);
    page.kernels_ns = AddCapped(page.kernels_ns, d);
  }
  return true;
}

HtmlTimeline HtmlTimelineBuilder::Finish(const TimeColumns& idle) {
  State& s = *s_;
  Interval done{0, 0};
  s.MergeHeld(std::numeric_limits<int64_t>::max());  // the ops still held
  if (s.ops.Finish(&done)) s.columns.Add(done.start, done.end, 0);
  if (s.kernels.Finish(&done)) s.AddBusy(done);
  s.page.strip.assign(kHtmlStripColumns, {});
  for (size_t c = 0; c < kHtmlStripColumns; ++c) {
    s.page.strip[c][0] = s.columns.At(c, 0);
    for (size_t k = 0; k < static_cast<size_t>(kNumCauses) && c < idle.columns(); ++k) {
      s.page.strip[c][1 + k] = idle.At(c, k);
    }
  }
  s.page.strip_column_ns = s.columns.width_ns();
  UtilizationCurve& u = s.page.utilization;
  u.percent.resize(s.busy.size());
  for (size_t k = 0; k < s.busy.size(); ++k) {
    const int64_t len = std::min(u.WindowStart(k + 1), u.end_ns) - u.WindowStart(k);
    u.percent[k] = len > 0 ? 100.0 * static_cast<double>(s.busy[k]) / static_cast<double>(len) : 0;
  }
  std::sort(s.page.kernels.begin(), s.page.kernels.end(), [](const HtmlKernel& a, const HtmlKernel& b) {
    return a.total_ns != b.total_ns ? a.total_ns > b.total_ns : a.name < b.name;
  });
  return std::move(s.page);
}

namespace {

Span ChartSpan(const RecordsSpan& records) {
  if (!records.any || records.end_ns <= records.start_ns) return {};
  return {records.start_ns, records.end_ns};
}

TimeColumns StripIdle(const Span& span, const std::vector<IdleGap>& gaps) {
  TimeColumns idle(span.start_ns, span.end_ns, kHtmlStripColumns, kNumCauses);
  for (const IdleGap& g : gaps) idle.Add(g.start_ns, g.end_ns, static_cast<size_t>(g.cause));
  return idle;
}

}  // namespace

HtmlTimeline HtmlTimelineOf(const ProcessAnalysis& pa) {
  const Span span = ChartSpan(SpanOfRecords(pa.timeline));
  HtmlTimelineBuilder b(pa.plan.device, span);
  b.AddOps(pa.timeline, std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max());
  return b.Finish(StripIdle(span, pa.gaps));
}

std::string HtmlEscape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      case '\t':
      case '\n': out += c; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7F) {
          out += "&#xFFFD;";
        } else {
          out += c;
        }
    }
  }
  return out;
}

// Distributed runs: one row per rank with a bar of its step time split into
// busy, waiting for the last rank, and other idle; the stragglers.
void RenderRanks(std::string* out, const Report& r) {
  if (r.ranks.empty()) return;
  const CollectivesSummary& c = r.collectives;
  absl::StrAppendFormat(
      out,
      "<section id=\"ranks\"><h2>Ranks</h2><p>%d ranks, %d collectives reached by every rank "
      "inside the steps: communication %.1f%% of step time (%.1f%% of it overlapped with "
      "compute); ranks wait %.1f%% of step time for the last arrival; arrival skew p50 %s, p95 "
      "%s, max %s. Clocks: %s.</p>",
      r.ranks.size(), c.count, 100 * c.comm_share, 100 * c.overlap, 100 * c.wait_share,
      E(FormatDuration(c.skew_p50_ns)), E(FormatDuration(c.skew_p95_ns)),
      E(FormatDuration(c.skew_max_ns)),
      r.clock.method == "monotonic"
          ? std::string("one host, one monotonic clock")
          : E(absl::StrFormat("realtime offsets across hosts, error up to %s",
                              FormatDuration(r.clock.error_ns))));
  if (r.stragglers.empty()) {
    absl::StrAppend(out, "<p>No straggler: no rank arrives last more often than chance.</p>");
  }
  for (const Straggler& st : r.stragglers) {
    absl::StrAppend(
        out, "<p class=\"verdict\">",
        E(absl::StrFormat("Straggler: rank %d arrived last at %d collectives, causing %s of "
                          "waiting on the other ranks; %s.",
                          st.rank, st.times_last, FormatDuration(st.wait_caused_ns),
                          StragglerActivity(st))),
        "</p>");
  }
  absl::StrAppend(out,
                  "<table><thead><tr><th>rank</th><th>host</th><th>steps</th><th>busy</th>"
                  "<th>idle</th><th>comm</th><th>waited for the last</th><th>last at</th>"
                  "<th>wait caused</th><th>top idle cause</th><th>step time</th></tr></thead>"
                  "<tbody>");
  for (const RankRow& k : r.ranks) {
    const int64_t span = std::max<int64_t>(1, k.gpu_busy_ns + k.gpu_idle_ns);
    const double busy = 100.0 * static_cast<double>(k.gpu_busy_ns) / static_cast<double>(span);
    const double waited =
        100.0 * static_cast<double>(std::min(k.waited_ns, k.gpu_idle_ns)) / static_cast<double>(span);
    const int top = TopCause(k.idle_by_cause);
    absl::StrAppendFormat(
        out,
        "<tr><td class=\"num\">%d%s</td><td>%s</td><td class=\"num\">%d</td>"
        "<td class=\"num\">%s</td><td class=\"num\">%s</td><td class=\"num\">%s</td>"
        "<td class=\"num\">%s</td><td class=\"num\">%d</td><td class=\"num\">%s</td><td>%s</td>"
        "<td><svg width=\"200\" height=\"12\" role=\"img\" aria-label=\"busy %.0f%%, waiting "
        "%.0f%%\"><rect x=\"0\" y=\"0\" width=\"%.1f\" height=\"12\" fill=\"%s\"/>"
        "<rect x=\"%.1f\" y=\"0\" width=\"%.1f\" height=\"12\" fill=\"%s\"/>"
        "<rect x=\"%.1f\" y=\"0\" width=\"%.1f\" height=\"12\" fill=\"#bbb\"/></svg></td></tr>",
        k.rank, k.analyzed ? " (shown)" : "", E(k.host), k.steps, E(FormatDuration(k.gpu_busy_ns)),
        E(FormatDuration(k.gpu_idle_ns)), E(FormatDuration(k.comm_ns)),
        E(FormatDuration(k.waited_ns)), k.times_last, E(FormatDuration(k.wait_caused_ns)),
        k.gpu_idle_ns > 0 ? Swatch(kCauseColor[top], CauseName(CauseAt(top))) : std::string("-"),
        busy, waited, 2 * busy, kBusyColor[0], 2 * busy, 2 * waited,
        kCauseColor[static_cast<int>(Cause::kComm)], 2 * (busy + waited),
        std::max(0.0, 200 - 2 * (busy + waited)));
  }
  absl::StrAppend(out,
                  "</tbody></table><p class=\"note\">Bar: the rank's step time, busy (green), "
                  "waiting for the last rank at collectives (comm idle, blue), other idle (grey).</p>"
                  "</section>");
}

std::string RenderHtml(const Report& r, const ProcessAnalysis& pa) { return RenderHtml(r, HtmlTimelineOf(pa)); }

absl::StatusOr<std::string> RenderHtmlFromFile(const Report& r, const StreamedProcess& process) {
  // The span from the index, as the whole reading's records give it.
  const Span span = ChartSpan(process.span);
  HtmlTimelineBuilder b(process.plan.device, span);
  auto reader = SliceReader::OpenFile(process.path, process.index);
  if (!reader.ok()) return reader.status();
  absl::Status read;
  if (process.adjust) {
    // A distributed run's rank: its NCCL waits are found by the ops'
    // calls, so by slices of calls.
    if (process.analysis.unjoined_ops > 0) return absl::UnimplementedError("device ops no call submitted");
    read = ForEachCallSlice(
        &*reader, process.index, StreamOptions{}.chunks_per_slice,
        [&](const Timeline& t, int64_t from, int64_t to) {
          const auto [i0, i1] = EnteringIn(t.calls, from, to);
          if (!b.AddSubmittedOps(t, i0, i1, to)) return absl::UnimplementedError("a device op that starts before its call");
          return absl::OkStatus();
        },
        nullptr, process.adjust);
  } else {
    read = ForEachOpSlice(&*reader, process.index, StreamOptions{}.chunks_per_slice,
                          [&](const Timeline& t, int64_t from, int64_t to) {
                            b.AddOps(t, from, to);
                            return absl::OkStatus();
                          });
  }
  if (!read.ok()) return read;
  if (process.idle.columns() != kHtmlStripColumns) {
    return absl::InternalError("the idle gaps were not drawn into the strip's columns");
  }
  return RenderHtml(r, b.Finish(process.idle));
}

std::string RenderHtml(const Report& r, const HtmlTimeline& ht) {
  std::string out =
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
      "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
      "style-src 'unsafe-inline'\">"
      "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
      "<title>stallscope report</title><style>";
  absl::StrAppend(&out, kStyle, "</style></head><body>\n");
  RenderVerdict(&out, r);
  RenderQuestions(&out, r);
  size_t curve_points = 0, windows = 0, bars = 0, scatter = 0;
  RenderUtilization(&out, r, ht, &curve_points, &windows);
  RenderStepBars(&out, r, &bars);
  RenderScatter(&out, r, &scatter);
  RenderHotspots(&out, r);
  RenderRanks(&out, r);
  RenderCauses(&out, r);
  RenderKernels(&out, ht);
  RenderStepTable(&out, r);
  RenderDiagnostics(&out, r);
  // The footer states the file's own size: iterate until the digits settle.
  std::string footer;
  size_t size = out.size();
  for (int i = 0; i < 4; ++i) {
    footer = absl::StrFormat(
        "<footer id=\"about\">Written by <code>stallscope report --format html</code>; this page "
        "loads nothing and runs no script. Size <span id=\"size\">%d</span> bytes; %d step%s "
        "drawn as %d bar%s and %d scatter point%s; %d utilization window%s drawn as %d curve "
        "point%s.</footer></body></html>\n",
        size, r.steps.size(), r.steps.size() == 1 ? "" : "s", bars, bars == 1 ? "" : "s", scatter,
        scatter == 1 ? "" : "s", windows, windows == 1 ? "" : "s", curve_points,
        curve_points == 1 ? "" : "s");
    if (out.size() + footer.size() == size) break;
    size = out.size() + footer.size();
  }
  absl::StrAppend(&out, footer);
  return out;
}

}  // namespace stallscope::analyzer
