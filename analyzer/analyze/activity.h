// A thread's outermost calls, for the idle attribution (attribution.cc).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "analyzer/model/timeline.h"

namespace stallscope::analyzer {

// A thread's outermost CUDA calls, in order: the calls not nested in an
// earlier one. Exits strictly increase along the list; a call that began
// inside the previous one counts from that one's exit, so the activities
// never overlap. Only call indices are kept (4 bytes each).
class Activity {
 public:
  explicit Activity(const std::vector<ApiCall>& calls) : calls_(&calls) {}
  void Reserve(size_t n) { idx_.reserve(n); }
  void Add(int32_t call) {
    const ApiCall& c = (*calls_)[call];
    if (!idx_.empty()) {
      const int64_t prev_exit = exit(idx_.size() - 1);
      if (c.enter_ns < prev_exit && c.exit_ns <= prev_exit) return;  // nested
    }
    idx_.push_back(call);
  }
  size_t size() const { return idx_.size(); }
  bool empty() const { return idx_.empty(); }
  int32_t call(size_t i) const { return idx_[i]; }
  int64_t exit(size_t i) const { return (*calls_)[idx_[i]].exit_ns; }
  int64_t enter(size_t i) const {
    const int64_t e = (*calls_)[idx_[i]].enter_ns;
    return i == 0 ? e : std::max(e, exit(i - 1));
  }
  // The first activity whose exit is after x. The sweep asks in mostly
  // rising x: the last answer is tried first, then the few after it, then
  // a binary search of the side x is on.
  size_t FirstEndingAfter(int64_t x) const {
    const size_t n = idx_.size();
    size_t h = std::min(hint_, n);
    if (h == 0 || exit(h - 1) <= x) {
      for (int step = 0; step < 4 && h < n && exit(h) <= x; ++step) ++h;
      if (h < n && exit(h) <= x) h = UpperBound(h + 1, n, x);
    } else {
      h = UpperBound(0, h - 1, x);
    }
    hint_ = h;
    return h;
  }

 private:
  size_t UpperBound(size_t lo, size_t hi, int64_t x) const {
    return static_cast<size_t>(
        std::upper_bound(idx_.begin() + static_cast<std::ptrdiff_t>(lo),
                         idx_.begin() + static_cast<std::ptrdiff_t>(hi), x,
                         [this](int64_t v, int32_t c) { return v < (*calls_)[c].exit_ns; }) -
        idx_.begin());
  }

  const std::vector<ApiCall>* calls_;
  std::vector<int32_t> idx_;
  mutable size_t hint_ = 0;  // the last answer
};

}  // namespace stallscope::analyzer
