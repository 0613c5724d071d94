// Idle attribution by windows of steps (see windows.h).
#include "analyzer/analyze/windows.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <limits>
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
  slot_of_call_.reserve(t.calls.size());
  size_t slot = 0;  // the last call's thread's, looked up only when the thread changes
  for (size_t i = 0; i < t.calls.size(); ++i) {
    const ApiCall& c = t.calls[i];
    if (i == 0 || c.tid != t.calls[i - 1].tid) {
      auto [it, fresh] = slot_.try_emplace(c.tid, threads_.size());
      if (fresh) {
        tids_.push_back(c.tid);
        threads_.emplace_back();
      }
      slot = it->second;
    }
    slot_of_call_.push_back(static_cast<uint32_t>(slot));
    ThreadCalls& th = threads_[slot];
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
  // Windows come in order, each of at least one step (a caller's bug
  // otherwise: the carried state would be wrong).
  if (!(k0 < k1 && k1 <= steps.size() && k0 >= last_k1_)) {
    std::fprintf(stderr, "stallscope: internal error: window [%zu, %zu) after %zu of %zu steps\n", k0,
                 k1, last_k1_, steps.size());
    std::abort();
  }
  last_k1_ = k1;
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
  // F: the first start at or after w1. The search goes on from the last
  // window's answer: every op before it started before that window's w1.
  int64_t first_after = kMax;
  size_t j = f_scan_;
  for (; j < ops.size(); ++j) {
    if (ops[j].device == device && ops[j].start_ns >= w1) {
      first_after = ops[j].start_ns;
      break;
    }
  }
  f_scan_ = j;
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

  // Calls: those of the window's host range (the steps' launches and
  // synchronizing calls are counted by it) and those of its device span
  // (the host activity its idle is charged by), each band the calls
  // exiting at or after its start and entering before its end; one band
  // when they meet, two when the device runs far behind the host. An
  // unmarked run's one step counts every call after its start. What lies
  // outside the bands is not charged (the sweep's stretches to the drain
  // before the window and to the op after it), so a long idle stretch or a
  // kernel outlasting many steps is not read again by every window in it.
  const int64_t host_lo = steps[k0].host_start_ns;
  const int64_t host_hi = plan_.source == "none" ? kMax : steps[k1 - 1].host_end_ns;
  std::pair<int64_t, int64_t> bands[2] = {{host_lo, host_hi}, {w0, w1}};
  size_t nbands = 2;
  if (host_lo <= w1 && w0 <= host_hi) {
    bands[0] = {std::min(host_lo, w0), std::max(host_hi, w1)};
    nbands = 1;
  } else if (w1 < host_lo) {
    std::swap(bands[0], bands[1]);
  }
  // The bands' runs of calls (in order), and the calls entering before a
  // band and still inside at its start (a handful).
  std::vector<int32_t>& runs = runs_;
  runs.clear();
  std::vector<int32_t>& open = open_;
  open.clear();
  // Besides them (mostly none): on each thread, the last outermost call
  // ending before a band and the first call entering at or after it (they
  // bound the host gaps that reach into it); its outermost calls on either
  // side of the drain where the sweep starts (rule 1 there); and the calls
  // that submitted the ops.
  std::vector<int32_t>& more = more_;
  more.clear();
  std::vector<int32_t>& bounds = bounds_;
  bounds.clear();
  auto by_enter = [this](int32_t c, int64_t v) { return t_.calls[c].enter_ns < v; };
  auto by_exit = [this](int32_t c, int64_t v) { return t_.calls[c].exit_ns < v; };
  for (size_t k = 0; k < nbands; ++k) {
    const auto [lo, hi] = bands[k];
    // The calls entering in [lo, hi): a run of the calls (sorted by enter).
    auto first = std::lower_bound(t_.calls.begin(), t_.calls.end(), lo,
                                  [](const ApiCall& c, int64_t v) { return c.enter_ns < v; });
    for (auto it = first; it != t_.calls.end() && it->enter_ns < hi; ++it) {
      if (it->exit_ns >= lo) runs.push_back(static_cast<int32_t>(it - t_.calls.begin()));
    }
    for (const ThreadCalls& th : threads_) {
      // Those entering before lo and still inside at lo: the outermost call
      // around lo and the calls nested in it that are.
      auto p = std::lower_bound(th.outer.begin(), th.outer.end(), lo, by_exit);
      if (p != th.outer.end() && t_.calls[*p].enter_ns < lo) {
        auto q = std::lower_bound(th.calls.begin(), th.calls.end(), *p);
        for (; q != th.calls.end() && t_.calls[*q].enter_ns < lo; ++q) {
          if (t_.calls[*q].exit_ns >= lo) open.push_back(*q);
        }
      }
      if (p != th.outer.begin()) bounds.push_back(*std::prev(p));
      auto n = std::lower_bound(th.calls.begin(), th.calls.end(), hi, by_enter);
      if (n != th.calls.end()) bounds.push_back(*n);
    }
  }
  std::sort(open.begin(), open.end());
  open.erase(std::unique(open.begin(), open.end()), open.end());
  std::vector<int32_t>& band = band_;
  // (Unions written in place: a push_back per call checked the capacity.)
  band.resize(runs.size() + open.size());
  band.erase(std::set_union(runs.begin(), runs.end(), open.begin(), open.end(), band.begin()), band.end());
  for (const ThreadCalls& th : threads_) {
    auto d = std::upper_bound(th.outer.begin(), th.outer.end(), sweep.from,
                              [this](int64_t v, int32_t c) { return v < t_.calls[c].exit_ns; });
    if (d != th.outer.end()) more.push_back(*d);
    if (d != th.outer.begin()) more.push_back(*std::prev(d));
  }
  more.insert(more.end(), bounds.begin(), bounds.end());
  size_t hint = 0;
  for (int32_t j : op_keep) {
    const int32_t c = ops[j].call;
    if (c < 0) continue;
    const size_t at = LowerBoundNear(band, c, &hint);
    if (at == band.size() || band[at] != c) more.push_back(c);
  }
  std::sort(more.begin(), more.end());
  more.erase(std::unique(more.begin(), more.end()), more.end());
  std::vector<int32_t>& calls = out->call;
  calls.resize(band.size() + more.size());
  calls.erase(std::set_union(band.begin(), band.end(), more.begin(), more.end(), calls.begin()), calls.end());

  // The part, in vectors reused from the last window (the API table copied
  // once).
  Timeline& w = out->timeline;
  if (w.apis.size() != t_.apis.size()) w.apis = t_.apis;
  w.calls.clear();
  w.ops.clear();
  w.calls_per_thread.clear();
  w.cpu.clear();
  out->classes.clear();
  // Per thread (by slot): its count in calls_per_thread (-1: none yet).
  span_.assign(threads_.size(), {-1, {kMax, kMin}});
  for (int32_t i : calls) {
    const ApiCall& c = t_.calls[i];
    w.calls.push_back(c);
    out->classes.push_back(classes_[i]);
    int64_t& at = span_[slot_of_call_[static_cast<size_t>(i)]].first;
    if (at < 0) {
      at = static_cast<int64_t>(w.calls_per_thread.size());
      w.calls_per_thread.push_back({c.tid, 0, 0});
    }
    ++w.calls_per_thread[static_cast<size_t>(at)].calls;
  }
  // And the earliest exit and latest time of its calls in the bands and its
  // bounding calls: the host gaps charged lie between them.
  for (const std::vector<int32_t>* list : {&band, &bounds}) {
    for (int32_t i : *list) {
      const ApiCall& c = t_.calls[i];
      std::pair<int64_t, int64_t>& s = span_[slot_of_call_[static_cast<size_t>(i)]].second;
      s.first = std::min(s.first, c.exit_ns);
      s.second = std::max({s.second, c.enter_ns, c.exit_ns});
    }
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
    if (span_[k].first < 0 || span_[k].second.first > span_[k].second.second) continue;
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

Attribution AttributeWindow(const WindowPart& part, const StepPlan& plan, size_t k0, size_t k1,
                            const AttributionOptions& options) {
  StepPlan window;
  window.source = plan.source;
  window.main_tid = plan.main_tid;
  window.device = plan.device;
  window.steps.assign(plan.steps.begin() + static_cast<std::ptrdiff_t>(k0),
                      plan.steps.begin() + static_cast<std::ptrdiff_t>(k1));
  Attribution a = AttributeIdleWithin(part.timeline, window, part.classes, options, part.sweep_from,
                                      part.sweep_to);
  Attribution out;
  out.steps = std::move(a.steps);
  for (StepStats& s : out.steps) s.index += static_cast<int>(k0);
  out.gaps = std::move(a.gaps);
  for (IdleGap& g : out.gaps) {
    g.step += static_cast<int32_t>(k0);
    if (g.call >= 0) g.call = part.call[static_cast<size_t>(g.call)];
  }
  a.idle_caused.ForEach(
      [&](size_t call, int64_t ns) { out.idle_caused.Add(static_cast<size_t>(part.call[call]), ns); });
  return out;
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
    Attribution a = AttributeWindow(part, plan, k0, k1, options);
    out.steps.insert(out.steps.end(), a.steps.begin(), a.steps.end());
    out.gaps.insert(out.gaps.end(), a.gaps.begin(), a.gaps.end());
    a.idle_caused.ForEach([&](size_t call, int64_t ns) { out.idle_caused.Add(call, ns); });
  }
  return out;
}

}  // namespace stallscope::analyzer
