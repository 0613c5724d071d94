// The flight recorder's step-time regression trigger (`stallscope run
// --ring-regression`, STALLSCOPE_RING_REGRESSION; docs/robustness.md,
// "Flight recorder"): parsed once for the command line and the preload
// library, and the detector the library runs at every step begin.
//
//   K:M[:N]   dump when M steps in a row each took more than K times the
//             median of the steps before them (at most the last 64), at most
//             N times in the process (default 8); `off` or 0: never (the
//             default).
//
// A step's time is the host's, from its begin to the next begin on the same
// thread: what the job waits for a step, whether the device or the host
// makes it wait. That is the step's time once the host waits for the device
// every step (a loss read back, a synchronize) or the launch queue is full.
// Before that, a host that runs ahead of the device takes microseconds a
// step, and a scheduler's preemption of a few milliseconds reads as a
// regression: which is why the trigger is off unless asked for.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <strings.h>

namespace stallscope::trace {

struct RegressionSpec {
  double factor = 2.0;  // K: a step over K x the running median is slow
  int steps = 3;        // M: this many slow steps in a row trigger a dump
  int max_dumps = 8;    // N: at most this many dumps from regressions
  bool enabled() const { return max_dumps > 0; }
};

// The default when ring mode is on and nothing says otherwise, and a
// suggestion for when it is asked for.
inline constexpr const char* kDefaultRegressionSpec = "off";
inline constexpr const char* kSuggestedRegressionSpec = "2:3";

// False when `s` is not K:M[:N] (K above 1, M 1 to 1000, N 0 to 100000), `off`
// or 0.
inline bool ParseRegressionSpec(const char* s, RegressionSpec* out) {
  if (strcasecmp(s, "off") == 0 || strcmp(s, "0") == 0) {
    *out = RegressionSpec{.max_dumps = 0};
    return true;
  }
  RegressionSpec r;
  char* end = nullptr;
  r.factor = std::strtod(s, &end);
  if (end == s || *end != ':' || !(r.factor > 1.0) || r.factor > 1e6) return false;
  const char* p = end + 1;
  long m = std::strtol(p, &end, 10);
  if (end == p || m < 1 || m > 1000) return false;
  r.steps = int(m);
  if (*end == ':') {
    p = end + 1;
    long n = std::strtol(p, &end, 10);
    if (end == p || n < 0 || n > 100000) return false;
    r.max_dumps = int(n);
  }
  if (*end != '\0') return false;
  *out = r;
  return true;
}

// Fed one step begin at a time (any monotonic tick: only ratios matter).
// Each step's time is compared with the median of the (at most kHistory)
// steps before it; a dump is due when `steps` slow ones come in a row. After
// a dump, the next needs `steps` steps in a row that are not slow first (the
// regression ended), and the slow steps themselves join the history, so a
// lasting new pace becomes the median instead of dumping forever.
class RegressionDetector {
 public:
  static constexpr int kHistory = 64;
  static constexpr int kMinHistory = 8;  // no judgement before this many steps

  explicit RegressionDetector(const RegressionSpec& spec) : spec_(spec) {}

  // A step began at `tick`. True when this begin ends the `steps`-th slow
  // step in a row and a dump is due.
  bool Begin(uint64_t tick) {
    if (!spec_.enabled()) return false;
    const bool first = !started_;
    const uint64_t prev = last_;
    started_ = true;
    last_ = tick;
    if (first || tick < prev) return false;
    return Step(tick - prev);
  }

  // One step's time; true when a dump is due.
  bool Step(uint64_t t) {
    bool due = false;
    if (count_ >= kMinHistory) {
      last_median_ = Median();
      const bool slow = double(t) > spec_.factor * double(last_median_);
      if (slow) {
        ++slow_run_;
        normal_run_ = 0;
      } else {
        slow_run_ = 0;
        ++normal_run_;
      }
      if (!armed_ && normal_run_ >= spec_.steps) armed_ = true;
      if (armed_ && slow_run_ >= spec_.steps && dumps_ < spec_.max_dumps) {
        due = true;
        armed_ = false;
        ++dumps_;
      }
    }
    history_[size_t(next_)] = t;
    next_ = (next_ + 1) % kHistory;
    count_ = std::min(count_ + 1, kHistory);
    return due;
  }

  int dumps() const { return dumps_; }
  uint64_t last_median() const { return last_median_; }

 private:
  uint64_t Median() const {
    std::array<uint64_t, kHistory> v{};
    std::copy(history_.begin(), history_.begin() + count_, v.begin());
    auto mid = v.begin() + count_ / 2;
    std::nth_element(v.begin(), mid, v.begin() + count_);
    return *mid;
  }

  RegressionSpec spec_;
  std::array<uint64_t, kHistory> history_{};
  int next_ = 0;
  int count_ = 0;
  int slow_run_ = 0;
  int normal_run_ = 0;
  bool armed_ = true;
  bool started_ = false;
  uint64_t last_ = 0;
  uint64_t last_median_ = 0;
  int dumps_ = 0;
};

}  // namespace stallscope::trace
