// Idle attribution by windows of steps (see windows.h).
#include "analyzer/analyze/windows.h"

#include <algorithm>
#include <functional>
#include <iterator>
#include <limits>
#include <queue>
#include <utility>

#include "absl/container/flat_hash_map.h"

namespace stallscope::analyzer {
namespace {

constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

// Where a window's sweep runs (WindowPart::sweep_from, sweep_to), and the
// earliest op end it reads.
struct Sweep {
  int64_t from = 0;
  int64_t to = 0;
  int64_t op_low = kMin;
};

// The position of the first element not less than `x` in sorted `v`;
// `hint` (the last answer) makes a walk in rising order mostly O(1).
size_t LowerBoundNear(const std::vector<int32_t>& v, int32_t x, size_t* hint) {
  size_t h = *hint;
  if (h < v.size() && v[h] < x) {
    ++h;  // the next element, then a search in the rest
    if (!(h == v.size() || v[h] >= x)) {
      h = static_cast<size_t>(std::lower_bound(v.begin() + static_cast<std::ptrdiff_t>(h), v.end(), x) - v.begin());
    }
  } else if (h > 0 && (h >= v.size() || v[h - 1] >= x)) {
    h = static_cast<size_t>(std::lower_bound(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(std::min(h, v.size())), x) -
                            v.begin());
  }
  *hint = h;
  return h;
}

}  // namespace

WindowCutter::WindowCutter(const Timeline& t, const StepPlan& plan,
                           const std::vector<CallClass>& classes)
    : t_(t), plan_(plan), classes_(classes) {
  for (size_t i = 0; i < t.calls.size(); ++i) {
    const ApiCall& c = t.calls[i];
    auto [it, fresh] = slot_.try_emplace(c.tid, threads_.size());
    if (fresh) {
      tids_.push_back(c.tid);
      threads_.emplace_back();
    }
    ThreadCalls& th = threads_[it->second];
    th.calls.push_back(static_cast<int32_t>(i));
    // Outermost: not inside the last outermost call (as Activity keeps them).
    if (!th.outer.empty()) {
      const ApiCall& prev = t.calls[th.outer.back()];
      if (c.enter_ns < prev.exit_ns && c.exit_ns <= prev.exit_ns) continue;
    }
    th.outer.push_back(static_cast<int32_t>(i));
  }
}

WindowPart WindowCutter::Cut(size_t k0, size_t k1) {
  WindowPart part;
  Cut(k0, k1, &part);
  return part;
}

void WindowCutter::Cut(size_t k0, size_t k1, WindowPart* out) {
  const std::vector<StepSpan>& steps = plan_.steps;
  const std::vector<DeviceOp>& ops = t_.ops;
  const int64_t w0 = steps[k0].start_ns;
  const int64_t w1 = steps[k1 - 1].end_ns;
  const int64_t all_from = steps.front().start_ns;
  const int64_t all_to = steps.back().end_ns;
  const uint32_t device = plan_.device;

  // Ops, by start: every device op is passed once; those still needed stay
  // in op_carry_.
  std::vector<int32_t>& fresh = fresh_;
  fresh.clear();
  auto pass = [&](int64_t limit) {
    for (; next_op_ < ops.size() && ops[next_op_].start_ns <= limit; ++next_op_) {
      if (ops[next_op_].device == device) fresh.push_back(static_cast<int32_t>(next_op_));
    }
  };
  // E: the latest end at or before w0. Every op ending by then started by
  // then; one ending after the last window's E was carried from it or is
  // fresh.
  pass(w0);
  for (const std::vector<int32_t>* list : {&op_carry_, &fresh}) {
    for (int32_t j : *list) {
      if (ops[j].end_ns <= w0) last_end_ = std::max(last_end_, ops[j].end_ns);
    }
  }
  Sweep sweep;
  sweep.from = std::max(all_from, last_end_ == kMin ? all_from : last_end_);
  sweep.op_low = last_end_;
  // F: the first start at or after w1.
  int64_t first_after = kMax;
  for (size_t j = next_op_; j < ops.size(); ++j) {
    if (ops[j].device == device && ops[j].start_ns >= w1) {
      first_after = ops[j].start_ns;
      break;
    }
  }
  sweep.to = std::min(all_to, std::max(first_after == kMax ? all_to : first_after, w1));
  pass(sweep.to);
  // Kept in place: the carried ops, then the fresh ones (both by start).
  std::vector<int32_t>& op_keep = op_carry_;
  op_keep.erase(std::remove_if(op_keep.begin(), op_keep.end(),
                               [&](int32_t j) { return ops[j].end_ns < sweep.op_low; }),
                op_keep.end());
  for (int32_t j : fresh) {
    if (ops[j].end_ns >= sweep.op_low) op_keep.push_back(j);
  }

  // Calls, by enter: those exiting at or after the earlier of the sweep's
  // start and the window's host start, and entering before the later of the
  // sweep's end and the window's host end.
  const int64_t call_lo = std::min(sweep.from, steps[k0].host_start_ns);
  const int64_t call_hi = std::max(sweep.to, steps[k1 - 1].host_end_ns);
  call_carry_.erase(std::remove_if(call_carry_.begin(), call_carry_.end(),
                                   [&](int32_t i) { return t_.calls[i].exit_ns < call_lo; }),
                    call_carry_.end());
  for (; next_call_ < t_.calls.size() && t_.calls[next_call_].enter_ns < call_hi; ++next_call_) {
    if (t_.calls[next_call_].exit_ns >= call_lo) call_carry_.push_back(static_cast<int32_t>(next_call_));
  }
  // Besides them (mostly none): each thread's last outermost call ending
  // before call_lo and first call entering at or after call_hi, and the
  // calls that submitted the ops.
  std::vector<int32_t>& more = more_;
  more.clear();
  for (const ThreadCalls& th : threads_) {
    auto p = std::lower_bound(th.outer.begin(), th.outer.end(), call_lo,
                              [this](int32_t c, int64_t v) { return t_.calls[c].exit_ns < v; });
    if (p != th.outer.begin()) more.push_back(*std::prev(p));
    auto n = std::lower_bound(th.calls.begin(), th.calls.end(), call_hi,
                              [this](int32_t c, int64_t v) { return t_.calls[c].enter_ns < v; });
    if (n != th.calls.end()) more.push_back(*n);
  }
  size_t hint = 0;
  for (int32_t j : op_keep) {
    const int32_t c = ops[j].call;
    if (c < 0) continue;
    const size_t at = LowerBoundNear(call_carry_, c, &hint);
    if (at == call_carry_.size() || call_carry_[at] != c) more.push_back(c);
  }
  std::sort(more.begin(), more.end());
  more.erase(std::unique(more.begin(), more.end()), more.end());
  std::vector<int32_t>& calls = out->call;
  calls.clear();
  std::set_union(call_carry_.begin(), call_carry_.end(), more.begin(), more.end(),
                 std::back_inserter(calls));

  // The part, in vectors reused from the last window (the API table copied
  // once).
  Timeline& w = out->timeline;
  if (w.apis.size() != t_.apis.size()) w.apis = t_.apis;
  w.calls.clear();
  w.ops.clear();
  w.calls_per_thread.clear();
  w.cpu.clear();
  out->classes.clear();
  // Per thread (by slot): its count in calls_per_thread, and its calls'
  // earliest exit and latest time (-1: none).
  span_.assign(threads_.size(), {-1, {0, 0}});
  for (int32_t i : calls) {
    const ApiCall& c = t_.calls[i];
    w.calls.push_back(c);
    out->classes.push_back(classes_[i]);
    auto& [at, s] = span_[slot_.find(c.tid)->second];
    if (at < 0) {
      at = static_cast<int64_t>(w.calls_per_thread.size());
      w.calls_per_thread.push_back({c.tid, 0, 0});
      s = {c.exit_ns, std::max(c.enter_ns, c.exit_ns)};
    }
    ++w.calls_per_thread[static_cast<size_t>(at)].calls;
    s.first = std::min(s.first, c.exit_ns);
    s.second = std::max({s.second, c.enter_ns, c.exit_ns});
  }
  hint = 0;
  for (int32_t j : op_keep) {
    DeviceOp op = ops[j];
    if (op.call >= 0) op.call = static_cast<int32_t>(LowerBoundNear(calls, op.call, &hint));
    w.ops.push_back(op);
  }
  // The CPU samples bounding each thread's gaps: from its last sample at or
  // before its earliest exit to its last at or before its latest time.
  for (size_t k = 0; k < threads_.size(); ++k) {
    if (span_[k].first < 0) continue;
    auto it = t_.cpu.find(tids_[k]);
    if (it == t_.cpu.end()) continue;
    const std::pair<int64_t, int64_t>& s = span_[k].second;
    const std::vector<CpuSample>& v = it->second;
    auto later = [](int64_t x, const CpuSample& c) { return x < c.ns; };
    auto i0 = std::upper_bound(v.begin(), v.end(), s.first, later);
    if (i0 != v.begin()) --i0;
    auto i1 = std::upper_bound(v.begin(), v.end(), s.second, later);
    w.cpu[tids_[k]].assign(i0, std::max(i0, i1));
  }
  out->sweep_from = sweep.from;
  out->sweep_to = sweep.to;
}

Attribution AttributeIdleByWindows(const Timeline& t, const StepPlan& plan,
                                   const std::vector<CallClass>& classes,
                                   const AttributionOptions& options, size_t steps_per_window) {
  Attribution out;
  const size_t n = plan.steps.size();
  if (n == 0) return out;
  const size_t per = std::max<size_t>(1, steps_per_window);
  WindowCutter cutter(t, plan, classes);
  WindowPart part;
  for (size_t k0 = 0; k0 < n; k0 += per) {
    const size_t k1 = std::min(n, k0 + per);
    cutter.Cut(k0, k1, &part);
    StepPlan window;
    window.source = plan.source;
    window.main_tid = plan.main_tid;
    window.device = plan.device;
    window.steps.assign(plan.steps.begin() + static_cast<std::ptrdiff_t>(k0),
                        plan.steps.begin() + static_cast<std::ptrdiff_t>(k1));
    Attribution a = AttributeIdleWithin(part.timeline, window, part.classes, options,
                                        part.sweep_from, part.sweep_to);
    for (StepStats& s : a.steps) {
      s.index += static_cast<int>(k0);
      out.steps.push_back(s);
    }
    for (IdleGap& g : a.gaps) {
      g.step += static_cast<int32_t>(k0);
      if (g.call >= 0) g.call = part.call[static_cast<size_t>(g.call)];
      out.gaps.push_back(g);
    }
    a.idle_caused.ForEach(
        [&](size_t call, int64_t ns) { out.idle_caused.Add(static_cast<size_t>(part.call[call]), ns); });
  }
  return out;
}

}  // namespace stallscope::analyzer
