// Idle attribution by windows of steps (see windows.h).
#include "analyzer/analyze/windows.h"

#include <algorithm>
#include <functional>
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

}  // namespace

WindowCutter::WindowCutter(const Timeline& t, const StepPlan& plan,
                           const std::vector<CallClass>& classes)
    : t_(t), plan_(plan), classes_(classes) {
  absl::flat_hash_map<uint32_t, size_t> slot;
  for (size_t i = 0; i < t.calls.size(); ++i) {
    const ApiCall& c = t.calls[i];
    auto [it, fresh] = slot.try_emplace(c.tid, threads_.size());
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
  const std::vector<StepSpan>& steps = plan_.steps;
  const std::vector<DeviceOp>& ops = t_.ops;
  const int64_t w0 = steps[k0].start_ns;
  const int64_t w1 = steps[k1 - 1].end_ns;
  const int64_t all_from = steps.front().start_ns;
  const int64_t all_to = steps.back().end_ns;
  const uint32_t device = plan_.device;

  // Ops, by start: every device op is passed once; those still needed stay
  // in op_carry_.
  std::vector<int32_t> fresh;
  using End = std::pair<int64_t, int32_t>;
  auto heap_less = std::greater<End>();
  auto pass = [&](int64_t limit) {
    for (; next_op_ < ops.size() && ops[next_op_].start_ns <= limit; ++next_op_) {
      if (ops[next_op_].device != device) continue;
      fresh.push_back(static_cast<int32_t>(next_op_));
      op_ends_.push_back({ops[next_op_].end_ns, static_cast<int32_t>(next_op_)});
      std::push_heap(op_ends_.begin(), op_ends_.end(), heap_less);
    }
  };
  // E: the latest end at or before w0 (every op ending by then started by
  // then).
  pass(w0);
  while (!op_ends_.empty() && op_ends_.front().first <= w0) {
    last_end_ = op_ends_.front().first;
    std::pop_heap(op_ends_.begin(), op_ends_.end(), heap_less);
    op_ends_.pop_back();
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
  std::vector<int32_t> op_keep;
  for (const std::vector<int32_t>* list : {&op_carry_, &fresh}) {
    for (int32_t j : *list) {
      if (ops[j].end_ns >= sweep.op_low) op_keep.push_back(j);
    }
  }
  op_carry_ = op_keep;

  // Calls, by enter: those exiting at or after the earlier of the sweep's
  // start and the window's host start, and entering before the later of the
  // sweep's end and the window's host end.
  const int64_t call_lo = std::min(sweep.from, steps[k0].host_start_ns);
  const int64_t call_hi = std::max(sweep.to, steps[k1 - 1].host_end_ns);
  std::vector<int32_t> calls;
  for (int32_t i : call_carry_) {
    if (t_.calls[i].exit_ns >= call_lo) calls.push_back(i);
  }
  for (; next_call_ < t_.calls.size() && t_.calls[next_call_].enter_ns < call_hi; ++next_call_) {
    if (t_.calls[next_call_].exit_ns >= call_lo) calls.push_back(static_cast<int32_t>(next_call_));
  }
  call_carry_ = calls;
  // Each thread's last outermost call ending before call_lo, and first call
  // entering at or after call_hi.
  for (const ThreadCalls& th : threads_) {
    auto p = std::lower_bound(th.outer.begin(), th.outer.end(), call_lo,
                              [this](int32_t c, int64_t v) { return t_.calls[c].exit_ns < v; });
    if (p != th.outer.begin()) calls.push_back(*std::prev(p));
    auto n = std::lower_bound(th.calls.begin(), th.calls.end(), call_hi,
                              [this](int32_t c, int64_t v) { return t_.calls[c].enter_ns < v; });
    if (n != th.calls.end()) calls.push_back(*n);
  }
  for (int32_t j : op_keep) {
    if (ops[j].call >= 0) calls.push_back(ops[j].call);
  }
  std::sort(calls.begin(), calls.end());
  calls.erase(std::unique(calls.begin(), calls.end()), calls.end());

  WindowPart part;
  Timeline& w = part.timeline;
  w.apis = t_.apis;
  w.calls.reserve(calls.size());
  part.classes.reserve(calls.size());
  absl::flat_hash_map<int32_t, int32_t> index;
  absl::flat_hash_map<uint32_t, size_t> counted;
  absl::flat_hash_map<uint32_t, std::pair<int64_t, int64_t>> span;  // per thread: exits' min, times' max
  for (int32_t i : calls) {
    const ApiCall& c = t_.calls[i];
    index[i] = static_cast<int32_t>(w.calls.size());
    w.calls.push_back(c);
    part.classes.push_back(classes_[i]);
    auto [it, fresh_thread] = counted.try_emplace(c.tid, w.calls_per_thread.size());
    if (fresh_thread) w.calls_per_thread.push_back({c.tid, 0, 0});
    ++w.calls_per_thread[it->second].calls;
    auto [s, first] = span.try_emplace(c.tid, c.exit_ns, std::max(c.enter_ns, c.exit_ns));
    if (!first) {
      s->second.first = std::min(s->second.first, c.exit_ns);
      s->second.second = std::max({s->second.second, c.enter_ns, c.exit_ns});
    }
  }
  part.call = std::move(calls);
  w.ops.reserve(op_keep.size());
  for (int32_t j : op_keep) {
    DeviceOp op = ops[j];
    if (op.call >= 0) op.call = index.at(op.call);
    w.ops.push_back(op);
  }
  // The CPU samples bounding each thread's gaps: from its last sample at or
  // before its earliest exit to its last at or before its latest time.
  for (const auto& [tid, s] : span) {
    auto it = t_.cpu.find(tid);
    if (it == t_.cpu.end()) continue;
    const std::vector<CpuSample>& v = it->second;
    auto later = [](int64_t x, const CpuSample& c) { return x < c.ns; };
    auto i0 = std::upper_bound(v.begin(), v.end(), s.first, later);
    if (i0 != v.begin()) --i0;
    auto i1 = std::upper_bound(v.begin(), v.end(), s.second, later);
    w.cpu[tid].assign(i0, std::max(i0, i1));
  }
  part.sweep_from = sweep.from;
  part.sweep_to = sweep.to;
  return part;
}

Attribution AttributeIdleByWindows(const Timeline& t, const StepPlan& plan,
                                   const std::vector<CallClass>& classes,
                                   const AttributionOptions& options, size_t steps_per_window) {
  Attribution out;
  const size_t n = plan.steps.size();
  if (n == 0) return out;
  const size_t per = std::max<size_t>(1, steps_per_window);
  WindowCutter cutter(t, plan, classes);
  for (size_t k0 = 0; k0 < n; k0 += per) {
    const size_t k1 = std::min(n, k0 + per);
    WindowPart part = cutter.Cut(k0, k1);
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
