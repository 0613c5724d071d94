// The six questions (see questions.h).
#include "analyzer/analyze/questions.h"
#include "analyzer/model/format.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_format.h"

namespace stallscope::analyzer {
namespace {

double Mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / static_cast<double>(v.size());
}

double Stdev(const std::vector<double>& v) {
  if (v.size() < 2) return 0;
  double m = Mean(v), s = 0;
  for (double x : v) s += (x - m) * (x - m);
  return std::sqrt(s / static_cast<double>(v.size()));
}

double Pearson(const std::vector<double>& x, const std::vector<double>& y) {
  double mx = Mean(x), my = Mean(y), sxy = 0, sxx = 0, syy = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    sxy += (x[i] - mx) * (y[i] - my);
    sxx += (x[i] - mx) * (x[i] - mx);
    syy += (y[i] - my) * (y[i] - my);
  }
  if (sxx <= 0 || syy <= 0) return 0;
  return sxy / std::sqrt(sxx * syy);
}

// Nearest-rank percentile of sorted values.
double Percentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  size_t rank = static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(sorted.size())));
  return sorted[std::clamp<size_t>(rank, 1, sorted.size()) - 1];
}

double Share(int64_t part, int64_t whole) {
  return whole > 0 ? static_cast<double>(part) / static_cast<double>(whole) : 0.0;
}

int64_t At(const CauseNs& c, Cause cause) { return c[static_cast<int>(cause)]; }

Question Q1(const std::vector<StepStats>& steps) {
  const size_t n = steps.size();
  if (n < kMinStepsForStatistics) {
    return {"q1", "unknown",
            absl::StrFormat("needs at least %d steps to correlate idle with step time; "
                            "this run has %d",
                            kMinStepsForStatistics, n)};
  }
  // The first step pays one-time costs (module loads, first launches, the
  // allocator's and the recorder's set-up): a lone long first step with its
  // idle would make any run "move with idle". With more steps than the
  // minimum it is left out, as HTA and most trainers' timers do.
  const size_t skip = n > static_cast<size_t>(kMinStepsForStatistics) ? 1 : 0;
  std::vector<double> time, idle;
  for (size_t k = skip; k < n; ++k) {
    const StepStats& s = steps[k];
    time.push_back(static_cast<double>(s.end_ns - s.start_ns));
    idle.push_back(static_cast<double>(s.gpu_idle_ns));
  }
  const double cv = Mean(time) > 0 ? Stdev(time) / Mean(time) : 0;
  const double r = Pearson(time, idle);
  const std::string numbers = absl::StrFormat(
      "over %d steps%s, step time averages %s (CV %.1f%%) and GPU idle %s per step "
      "(%.1f%% of step time); correlation of idle with step time r=%.2f",
      time.size(), skip ? " (the first, a warm-up, left out)" : "", FormatDuration(static_cast<int64_t>(Mean(time))), 100 * cv,
      FormatDuration(static_cast<int64_t>(Mean(idle))),
      100 * (Mean(time) > 0 ? Mean(idle) / Mean(time) : 0), r);
  if (cv < kQ1MinStepTimeCv) return {"q1", "no", "Step time is steady: " + numbers};
  return {"q1", r >= kQ1MinCorrelation ? "yes" : "no", "Per-step: " + numbers};
}

Question Q3(const Totals& t, bool cpu_samples) {
  const int64_t wait = At(t.idle_by_cause, Cause::kHostWait);
  const int64_t busy = At(t.idle_by_cause, Cause::kHostBusy);
  const int64_t preempted = At(t.idle_by_cause, Cause::kHostPreempted);
  const int64_t host = wait + busy + preempted;
  if (t.gpu_idle_ns == 0) return {"q3", "no", "The GPU was never idle inside the steps."};
  const double idle_share = Share(host, t.gpu_idle_ns);
  const double wall_share = Share(host, t.wall_ns);
  const bool yes = idle_share >= kQ3MinIdleShare && wall_share >= kQ3MinWallShare;
  const std::string head = absl::StrFormat(
      "GPU idle charged to host_wait + host_busy + host_preempted is %s: %.1f%% of GPU idle "
      "time and %.1f%% of wall time (%s host-bound on XProf's input scale: 5%%/20%% of step "
      "time)",
      FormatDuration(host), 100 * idle_share, 100 * wall_share,
      XprofLevel(wall_share, kXprofInputScale));
  if (!cpu_samples) {
    return {"q3", yes ? "yes" : "no",
            head + absl::StrFormat(" (host_wait %s, host_busy %s; the on/off-CPU split needs "
                                   "CPU-time samples)",
                                   FormatDuration(wait), FormatDuration(busy))};
  }
  const double on = Share(busy, host);
  const double pre = Share(preempted, host);
  std::string what;
  if (host > 0) {
    if (pre >= 0.5) {
      what = "; mostly waiting for a CPU: the launching thread was runnable but other threads "
             "or processes held the cores (DataLoader workers, CPU-bound neighbours); leave it "
             "a core";
    } else if (on >= 0.5) {
      what = "; mostly on-CPU work on the launching thread (preprocessing, Python or "
             "framework overhead)";
    } else {
      what = "; mostly off-CPU waiting on the launching thread (input queue, I/O, locks, "
             "sleeps)";
    }
  }
  return {"q3", yes ? "yes" : "no",
          head + absl::StrFormat(". The launching thread's CPU-time and run-queue samples split "
                                 "it into %.1f%% on-CPU (host_busy %s), %.1f%% runnable waiting "
                                 "for a CPU (host_preempted %s) and %.1f%% off-CPU (host_wait "
                                 "%s)%s",
                                 100 * on, FormatDuration(busy), 100 * pre,
                                 FormatDuration(preempted),
                                 host > 0 ? 100 * (1 - on - pre) : 0.0, FormatDuration(wait),
                                 what)};
}

// What the jitter costs, not how spread it is: the host stall above the
// median, summed over the steps, is the time the steps would not have
// taken had every step waited the typical time.
Question Q4(const std::vector<StepStats>& steps) {
  const size_t n = steps.size();
  if (n < kMinStepsForStatistics) {
    return {"q4", "unknown",
            absl::StrFormat("needs at least %d steps to measure jitter of the pre-launch "
                            "host wait; this run has %d",
                            kMinStepsForStatistics, n)};
  }
  std::vector<double> wait;
  double wall = 0;
  for (const StepStats& s : steps) {
    wait.push_back(static_cast<double>(At(s.idle_by_cause, Cause::kHostWait) +
                                       At(s.idle_by_cause, Cause::kHostBusy) +
                                       At(s.idle_by_cause, Cause::kHostPreempted)));
    wall += static_cast<double>(s.end_ns - s.start_ns);
  }
  std::vector<double> sorted = wait;
  std::sort(sorted.begin(), sorted.end());
  const double mean = Mean(wait);
  const double cv = mean > 0 ? Stdev(wait) / mean : 0;
  const double max = sorted.back();
  const double median = Percentile(sorted, 50);
  double above = 0;
  for (double w : wait) above += std::max(0.0, w - median);
  const double share = wall > 0 ? above / wall : 0;
  const bool yes = share >= kXprofInputScale.moderate && max >= static_cast<double>(kQ4MinMaxNs);
  return {"q4", yes ? "yes" : "no",
          absl::StrFormat("Pre-launch host wait per step over %d steps: p50 %s, p95 %s, "
                          "max %s, CV %.2f; the waits above the median cost %s, %.1f%% of "
                          "step time (%s uneven on XProf's input scale: 5%%/20%%)",
                          n, FormatDuration(static_cast<int64_t>(median)),
                          FormatDuration(static_cast<int64_t>(Percentile(sorted, 95))),
                          FormatDuration(static_cast<int64_t>(max)), cv,
                          FormatDuration(static_cast<int64_t>(above)), 100 * share,
                          XprofLevel(share, kXprofInputScale))};
}

Question Q5(const Totals& t, const QuestionInputs& in) {
  return {"q5", "unknown",
          absl::StrFormat("Communication kernels are %.1f%% of GPU busy time (%d NCCL ops) "
                          "and comm idle is %s; per-rank arrival skew needs a report over "
                          "all ranks' traces (stallscope report on their folders)",
                          100 * Share(t.busy_by_kind.comm, t.gpu_busy_ns), in.nccl_ops,
                          FormatDuration(At(t.idle_by_cause, Cause::kComm)))};
}

Question Q6(const Totals& t, const QuestionInputs& in) {
  if (in.kernels == 0) {
    return {"q6", "unknown", "No kernel with a known launch call was recorded."};
  }
  const double short_share = Share(in.short_kernels, in.kernels);
  const int64_t launch = At(t.idle_by_cause, Cause::kLaunchOverhead);
  const double launch_share = Share(launch, t.wall_ns);
  const bool yes = launch_share >= kQ6MinLaunchShare ||
                   (short_share >= 0.5 && Share(t.gpu_idle_ns, t.wall_ns) >= 0.2);
  return {"q6", yes ? "yes" : "no",
          absl::StrFormat("%d of %d kernels (%.1f%%) ran shorter than their launch call; "
                          "launch_overhead idle is %s (%.1f%% of wall time, %.1f%% of GPU "
                          "idle; %s launch-bound on XProf's kernel-launch scale: 3%%/15%%)",
                          in.short_kernels, in.kernels, 100 * short_share,
                          FormatDuration(launch), 100 * launch_share,
                          100 * Share(launch, t.gpu_idle_ns),
                          XprofLevel(launch_share, kXprofLaunchScale))};
}

}  // namespace

const char* XprofLevel(double share, XprofScale scale) {
  if (share >= scale.high) return "highly";
  if (share >= scale.moderate) return "moderately";
  return "not";
}


const char* QuestionTitle(std::string_view id) {
  static constexpr const char* kTitles[][2] = {
      {"q1", "Does step time move with the utilization dips?"},
      {"q2", "Do idle gaps shrink with synthetic or cached input?"},
      {"q3", "Is there a host-side stall before kernel launches?"},
      {"q4", "Is input access uneven from step to step?"},
      {"q5", "Does distributed synchronization dominate?"},
      {"q6", "Does the workload lack work per step?"}};
  for (const auto& [qid, title] : kTitles) {
    if (id == qid) return title;
  }
  return "";
}

std::vector<Question> AnswerQuestions(const std::vector<StepStats>& steps,
                                      const Totals& totals, const QuestionInputs& in) {
  return {Q1(steps),
          {"q2", "unknown",
           "Needs two runs: run `stallscope compare BASE OTHER` with real input as BASE and "
           "synthetic or cached batches as OTHER (compare answers q2)."},
          Q3(totals, in.cpu_samples),
          Q4(steps),
          Q5(totals, in),
          Q6(totals, in)};
}

void CountKernel(const ApiCall& c, const DeviceOp& op, int64_t launch_dispatch_ns, QuestionInputs* qi) {
  ++qi->kernels;
  const int64_t launch = c.exit_ns - c.enter_ns;
  if (launch <= launch_dispatch_ns && op.end_ns - op.start_ns < launch) ++qi->short_kernels;
}

}  // namespace stallscope::analyzer
