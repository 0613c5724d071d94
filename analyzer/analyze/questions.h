// Answers design.md's six questions (q1..q6) from the per-step table and the
// totals, each with a yes / no / unknown and one sentence of evidence.
// Thresholds are the constants below (documented in docs/analyzer.md).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "analyzer/model/report.h"
#include "analyzer/model/timeline.h"

namespace stallscope::analyzer {

// q1: step time "moves with" idle when r >= this (and step time varies).
inline constexpr double kQ1MinCorrelation = 0.7;
inline constexpr double kQ1MinStepTimeCv = 0.02;
// q3: a host-side stall when host_wait + host_busy + host_preempted is this share of idle and
// of wall time.
inline constexpr double kQ3MinIdleShare = 0.2;
inline constexpr double kQ3MinWallShare = 0.05;
// q4: uneven when the per-step host stall above its median, summed over the
// steps, is at least XProf's moderate input share of step time (5%), and the
// longest stall is at least this.
inline constexpr int64_t kQ4MinMaxNs = 1'000'000;
// q6: lacking work when launch_overhead >= this share of wall time, or when
// most kernels are shorter than their launch and idle >= 20% of wall time.
inline constexpr double kQ6MinLaunchShare = 0.1;
inline constexpr int kMinStepsForStatistics = 3;
// q5 (with two or more ranks): communication dominates when NCCL kernels
// take this share of step time, or the ranks wait this share of step time
// for the last rank at collectives.
inline constexpr double kQ5MinCommShare = 0.2;
inline constexpr double kQ5MinWaitShare = 0.1;
// XProf's step-time scale (its input-bound verdict): a category below the
// first share of step time is "not", below the second "moderately", else
// "highly". Input: 5% / 20%; kernel launch and all other time: 3% / 15%.
// q3 reports the host stall and q6 launch_overhead on these scales.
struct XprofScale {
  double moderate;
  double high;
};
inline constexpr XprofScale kXprofInputScale{0.05, 0.20};
inline constexpr XprofScale kXprofLaunchScale{0.03, 0.15};
// "not", "moderately" or "highly" for a share of step time.
const char* XprofLevel(double share, XprofScale scale);

struct QuestionInputs {
  int64_t kernels = 0;        // kernels with a known launch call
  int64_t short_kernels = 0;  // of which shorter than their launch call (<= 50 us)
  int64_t nccl_ops = 0;
  bool cpu_samples = false;  // the trace has thread CPU-time samples (q3's split)
};

// Counts a kernel op joined to its launch call `c` in `qi`: the kernels,
// and the short ones (a launch within `launch_dispatch_ns`, the kernel
// shorter than it).
void CountKernel(const ApiCall& c, const DeviceOp& op, int64_t launch_dispatch_ns, QuestionInputs* qi);

// The question itself ("Does step time move with the utilization dips?") for
// q1..q6; "" for any other id.
const char* QuestionTitle(std::string_view id);

std::vector<Question> AnswerQuestions(const std::vector<StepStats>& steps,
                                      const Totals& totals, const QuestionInputs& in);

}  // namespace stallscope::analyzer
