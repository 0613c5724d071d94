// Idle-gap attribution (see attribution.h and docs/analyzer.md).
#include "analyzer/analyze/attribution.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "analyzer/analyze/activity.h"
#include "trace_pack.h"

namespace stallscope::analyzer {
namespace {

constexpr int64_t kInf = std::numeric_limits<int64_t>::max() / 4;

using trace::ApiCategory;

Cause CauseOf(CallClass c) {
  switch (c) {
    case CallClass::kSync: return Cause::kSync;
    case CallClass::kNccl: return Cause::kComm;
    case CallClass::kNonBlocking: return Cause::kLaunchOverhead;
  }
  return Cause::kOther;
}

class Attributor {
 public:
  Attributor(const Timeline& t, const StepPlan& plan, const std::vector<CallClass>& classes,
             const AttributionOptions& o, Attribution* out)
      : t_(t), plan_(plan), classes_(classes), o_(o), out_(out) {
    // Sized first (from the reader's counts), so no list grows by copying.
    for (const ThreadCallCount& c : t.calls_per_thread) {
      activity_.try_emplace(c.tid, t.calls).first->second.Reserve(static_cast<size_t>(c.calls));
    }
    // One walk over the calls (sorted by enter) builds the lists and counts
    // launches and synchronizing calls by the host range they entered in.
    auto& steps = out->steps;
    // Host ranges are half-open; the single step of an unmarked run holds
    // every call.
    const bool unmarked = plan.source == "none";
    size_t k = 0;
    uint32_t tid = 0;
    Activity* list = nullptr;
    for (size_t i = 0; i < t.calls.size(); ++i) {
      const ApiCall& c = t.calls[i];
      if (list == nullptr || c.tid != tid) {  // consecutive calls mostly share a thread
        tid = c.tid;
        list = &activity_.find(tid)->second;
      }
      list->Add(static_cast<int32_t>(i));
      while (k < steps.size() && steps[k].host_start_ns <= c.enter_ns) ++k;
      if (k == 0) continue;
      StepStats& step = steps[k - 1];
      if (c.enter_ns >= step.host_end_ns && !unmarked) continue;
      if (t.Api(c.api).category == ApiCategory::kLaunch) ++step.launches;
      if (classes[i] == CallClass::kSync) ++step.sync_count;
    }
  }

  // The sweep's extent, holding the steps and, for a window (windows.h),
  // its neighbourhood; what falls outside the steps is not charged.
  void SweepWithin(int64_t from, int64_t to) {
    sweep_from_ = from;
    sweep_to_ = to;
  }

  void Run() {
    const int64_t w0 = sweep_from_;
    const int64_t w1 = sweep_to_;
    // One sweep over the device's ops in start order; the ends of the ops
    // still running wait in a min-heap (by end, then index: a handful at a
    // time). Starts go before ends at equal times: touching ops leave no
    // gap, and the first op starting at b is the first start event at b.
    // (A heap kept by hand: mostly it holds one op, whose pop and push
    // then need no sifting.)
    using End = std::pair<int64_t, int32_t>;
    std::vector<End> running;
    auto pop = [&running] {
      if (running.size() > 1) std::pop_heap(running.begin(), running.end(), std::greater<End>());
      running.pop_back();
    };
    int64_t active[3] = {0, 0, 0};  // compute, copy, comm
    int64_t cur = w0;
    int32_t last_ended = -1;  // the op whose end drained the device before an idle gap
    auto event = [&](int64_t et, int32_t op, int32_t delta) {  // delta: +1 start, -1 end
      const int64_t tt = std::clamp(et, w0, w1);
      if (tt > cur) {
        if (active[0] + active[1] + active[2] > 0) {
          Busy(cur, tt, active);
        } else {
          ChargeIdle(cur, tt, (delta > 0 && et == tt) ? op : -1, last_ended);
        }
        cur = tt;
      }
      active[KindIndex(t_.ops[op].kind)] += delta;
      if (delta < 0) last_ended = op;
    };
    const auto n = static_cast<int32_t>(t_.ops.size());
    for (int32_t i = 0; i < n; ++i) {
      const DeviceOp& op = t_.ops[i];
      if (op.device != plan_.device) continue;
      while (!running.empty() && running.front().first < op.start_ns) {
        const End e = running.front();
        pop();
        event(e.first, e.second, -1);
      }
      event(op.start_ns, i, +1);
      running.emplace_back(op.end_ns, i);
      if (running.size() > 1) std::push_heap(running.begin(), running.end(), std::greater<End>());
    }
    while (!running.empty()) {
      const End e = running.front();
      pop();
      event(e.first, e.second, -1);
    }
    if (cur < w1) ChargeIdle(cur, w1, -1, last_ended);
  }

 private:
  static int KindIndex(trace::DeviceOpKind k) {
    switch (k) {
      case trace::DeviceOpKind::kMemcpy:
      case trace::DeviceOpKind::kMemset: return 1;
      case trace::DeviceOpKind::kNccl: return 2;
      default: return 0;
    }
  }

  // Calls fn(step, ns) for the parts of [from, to) inside each step.
  template <typename Fn>
  void ForSteps(int64_t from, int64_t to, const Fn& fn) {  // by reference: no copy of the closure
    auto& steps = out_->steps;
    while (from < to) {
      // The first step ending after `from`: times mostly move forward, so
      // try the last answer and its successor before searching.
      size_t h = hint_;
      auto ends_after = [&](size_t k) { return k < steps.size() && steps[k].end_ns > from; };
      auto first = [&](size_t k) { return ends_after(k) && (k == 0 || steps[k - 1].end_ns <= from); };
      if (!first(h)) {
        if (first(h + 1)) {
          h = h + 1;
        } else {
          h = static_cast<size_t>(
              std::upper_bound(steps.begin(), steps.end(), from,
                               [](int64_t v, const StepStats& s) { return v < s.end_ns; }) -
              steps.begin());
        }
      }
      hint_ = std::min(h, steps.empty() ? 0 : steps.size() - 1);
      auto it = steps.begin() + static_cast<std::ptrdiff_t>(h);
      if (it == steps.end() || it->start_ns >= to) return;
      int64_t lo = std::max(from, it->start_ns);
      int64_t hi = std::min(to, it->end_ns);
      if (hi > lo) fn(*it, hi - lo);
      from = hi;
    }
  }

  void Busy(int64_t from, int64_t to, const int64_t* active) {
    ForSteps(from, to, [&](StepStats& s, int64_t ns) {
      if (active[0] > 0) {
        s.busy_by_kind.compute += ns;
      } else if (active[2] > 0) {
        s.busy_by_kind.comm += ns;
      } else {
        s.busy_by_kind.copy += ns;
      }
      s.gpu_busy_ns += ns;
    });
  }

  // Returns the ns charged: the part of [from, to) inside the steps (all of
  // it, unless device timing was sampled and steps are left out).
  int64_t Add(int64_t from, int64_t to, Cause cause, int32_t call = -1) {
    if (to <= from) return 0;
    int64_t at = from;
    int64_t charged = 0;
    ForSteps(from, to, [&](StepStats& s, int64_t ns) {
      charged += ns;
      s.idle_by_cause[static_cast<int>(cause)] += ns;
      s.gpu_idle_ns += ns;
      if (!o_.list_gaps) return;
      const int64_t lo = std::max(at, s.start_ns);
      auto& gaps = out_->gaps;
      if (!gaps.empty() && gaps.back().end_ns == lo && gaps.back().cause == cause &&
          gaps.back().step == s.index && gaps.back().call == call) {
        gaps.back().end_ns = lo + ns;
      } else {
        gaps.push_back({lo, lo + ns, cause, s.index, call});
      }
      at = lo + ns;
    });
    return charged;
  }

  // (The last answer kept: the gaps of a loop mostly ask for one thread.)
  const Activity* ActivityOf(uint32_t tid) {
    if (last_activity_tid_ == tid && last_activity_ != nullptr) return last_activity_;
    auto it = activity_.find(tid);
    if (it == activity_.end()) return nullptr;
    last_activity_tid_ = tid;
    last_activity_ = &it->second;
    return last_activity_;
  }

  // The synchronizing call the thread was blocked in when the device drained
  // at `a` (the end of op `drained`), and how long before `a` it began
  // waiting for device work: a call entered before `a` and still inside at
  // `a` (waiting since its enter), or the call just before `a` that
  // submitted `drained` itself (a synchronous copy or set that returned
  // once its op started: waiting from its enter until its op started).
  // {-1, 0} when none.
  std::pair<int32_t, int64_t> BlockedAtDrain(const Activity& acts, int64_t a,
                                             int32_t drained) const {
    const size_t i = acts.FirstEndingAfter(a);
    if (i < acts.size() && acts.enter(i) < a) {
      if (classes_[acts.call(i)] != CallClass::kSync) return {-1, 0};
      return {acts.call(i), a - t_.calls[acts.call(i)].enter_ns};
    }
    if (i == 0 || drained < 0) return {-1, 0};
    const int32_t prev = acts.call(i - 1);
    const DeviceOp& op = t_.ops[drained];
    if (classes_[prev] != CallClass::kSync || op.call != prev || op.end_ns < a) return {-1, 0};
    const ApiCall& pc = t_.calls[prev];
    return {prev, std::max<int64_t>(0, std::min(op.start_ns, pc.exit_ns) - pc.enter_ns)};
  }

  // Rule 2: charges [from, to) by the thread's activity.
  void ByThread(uint32_t tid, const Activity* acts, int64_t from, int64_t to) {
    if (from >= to) return;
    if (acts == nullptr || acts->empty()) {
      Add(from, to, Cause::kOther);
      return;
    }
    const size_t n = acts->size();
    size_t i = acts->FirstEndingAfter(from);
    int64_t cur = from;
    while (cur < to) {
      if (i < n && acts->enter(i) <= cur) {
        int64_t end = std::min(acts->exit(i), to);
        Add(cur, end, CauseOf(classes_[acts->call(i)]), acts->call(i));
        cur = std::max(cur, end);
        ++i;
      } else {
        const int64_t next = i < n ? acts->enter(i) : kInf;
        const int64_t gap = (i < n && i > 0) ? next - acts->exit(i - 1) : kInf;
        const int64_t end = std::min(next, to);
        if (gap < o_.launch_dispatch_ns) {
          Add(cur, end, Cause::kLaunchOverhead);
        } else {
          // A long stretch outside CUDA calls, split by T's CPU-time and
          // run-queue samples: runnable but waiting for a CPU is
          // host_preempted; of the rest, a gap that would have been short
          // without the preemption is launch dispatch, else its on-CPU
          // share is host_busy and the rest host_wait. Without an estimate
          // (no samples, or an unbounded gap) all host_wait.
          const int64_t prev_exit = i > 0 ? acts->exit(i - 1) : -1;
          const HostGapSplit g = gap < kInf ? SplitHostGap(t_, tid, prev_exit, next) : HostGapSplit{};
          auto share = [&](int64_t part) {
            return part > 0 ? static_cast<int64_t>(static_cast<__int128>(end - cur) * part / gap)
                            : int64_t{0};
          };
          const int64_t pre = share(g.preempted);
          Add(cur, cur + pre, Cause::kHostPreempted);
          const int64_t rest = cur + pre;
          if (g.preempted > 0 && gap - g.preempted < o_.launch_dispatch_ns) {
            Add(rest, end, Cause::kLaunchOverhead);
          } else {
            const int64_t busy = std::min(share(g.on), end - rest);
            Add(rest, rest + busy, Cause::kHostBusy);
            Add(rest + busy, end, Cause::kHostWait);
          }
        }
        cur = end;
      }
    }
  }

  void ChargeIdle(int64_t a, int64_t b, int32_t next_op, int32_t drained) {
    const int32_t c = next_op >= 0 ? t_.ops[next_op].call : -1;
    const uint32_t tid = c >= 0 ? t_.calls[c].tid : plan_.main_tid;
    const Activity* acts = ActivityOf(tid);
    int64_t cur = a;
    // Rule 1: the thread was blocked in a synchronizing call B when the
    // device drained, and the op ending the gap was not already submitted
    // before B (then removing B would not have started it earlier: a
    // cross-stream or other device-side wait). The first min(b - a, the
    // time B waited for earlier work) ns are B's. A synchronous copy from
    // pageable memory returns once its copy has started, after waiting for
    // the queue: it counts when its own op drained the device.
    if (acts != nullptr) {
      const auto [blocker, waited] = BlockedAtDrain(*acts, a, drained);
      if (blocker >= 0 && waited > 0 &&
          !(c >= 0 && t_.calls[c].enter_ns < t_.calls[blocker].enter_ns)) {
        const int64_t x = std::min(b - a, waited);
        const int64_t charged = Add(a, a + x, Cause::kSync, blocker);
        if (charged > 0) out_->idle_caused.Add(static_cast<size_t>(blocker), charged);
        cur = a + x;
      }
    }
    // The op was submitted before the end of the interval: after its call
    // returned, launch latency, then a device-side wait.
    if (c >= 0 && t_.calls[c].exit_ns < b) {
      const int64_t returned = std::clamp(t_.calls[c].exit_ns, cur, b);
      const int64_t latency_end =
          std::clamp(t_.calls[c].exit_ns + o_.launch_latency_ns, cur, b);
      ByThread(tid, acts, cur, returned);
      Add(returned, latency_end, Cause::kLaunchOverhead, c);
      Add(latency_end, b,
          t_.ops[next_op].kind == trace::DeviceOpKind::kNccl ? Cause::kComm
                                                              : Cause::kDeviceWait,
          c);
      return;
    }
    ByThread(tid, acts, cur, b);
  }

  const Timeline& t_;
  const StepPlan& plan_;
  const std::vector<CallClass>& classes_;
  const AttributionOptions& o_;
  Attribution* out_;
  absl::flat_hash_map<uint32_t, Activity> activity_;  // complete once built
  uint32_t last_activity_tid_ = 0;
  const Activity* last_activity_ = nullptr;
  size_t hint_ = 0;  // ForSteps' last step
  int64_t sweep_from_ = 0;
  int64_t sweep_to_ = 0;
};

}  // namespace

void PendingIntervals::Add(int64_t a, int64_t b) {
  if (b <= a) return;
  // Mostly ops come in time order: at or after the open interval's start.
  const bool open = open_end_ > open_start_;
  if (!open || a >= open_start_) {
    if (open && a < open_end_) {
      open_end_ = std::max(open_end_, b);
      return;
    }
    Close();
    open_start_ = a;
    open_end_ = b;
    return;
  }
  // Earlier: into the map, the intervals it meets there (an open interval
  // ending at a does not) merged into one.
  auto it = late_.lower_bound(a);
  if (it != late_.begin() && std::prev(it)->second > a) --it;
  while (it != late_.end() && it->first < b) {
    a = std::min(a, it->first);
    b = std::max(b, it->second);
    it = late_.erase(it);
  }
  late_.emplace(a, b);
}

void PendingIntervals::Close() {
  if (open_end_ <= open_start_) return;
  if (blocks_.empty() || blocks_.back().count == kPerBlock) {
    blocks_.push_back({open_start_, bytes_.size(), 0});
  } else {
    // The gap since the last packed one (starts only grow, and the open
    // interval closes only when one starts at or after its end).
    trace::VarintOut v;
    v.Put(static_cast<uint64_t>(open_start_ - last_end_));
    v.AppendTo(&bytes_);
  }
  trace::VarintOut v;
  v.Put(static_cast<uint64_t>(open_end_ - open_start_));
  v.AppendTo(&bytes_);
  ++blocks_.back().count;
  ++packed_;
  last_end_ = open_end_;
  open_start_ = open_end_ = 0;
}

bool PendingIntervals::At(int64_t x) const {
  const bool pending = Holds(x);
  if (!pending && x >= known_until_) unsure_.push_back(x);
  return pending;
}

bool PendingIntervals::Holds(int64_t x) const {
  if (open_end_ > open_start_ && open_start_ < x && x < open_end_) return true;
  auto it = late_.lower_bound(x);  // the first starting at or after x
  if (it != late_.begin() && std::prev(it)->second > x) return true;
  // The packed intervals are sorted and disjoint: the last starting before
  // x holds it or none does. Its block: the last whose first starts before x.
  auto block = std::lower_bound(blocks_.begin(), blocks_.end(), x,
                                [](const Block& k, int64_t v) { return k.first_start < v; });
  if (block == blocks_.begin()) return false;
  --block;
  const size_t end = block + 1 == blocks_.end() ? bytes_.size() : (block + 1)->offset;
  trace::VarintIn in(bytes_.data() + block->offset, end - block->offset);
  int64_t start = block->first_start;
  int64_t last_end = 0;  // of the last one starting before x
  for (uint32_t i = 0; i < block->count; ++i) {
    uint64_t gap = 0, length = 0;
    if (i > 0 && !in.Get(&gap)) break;
    if (!in.Get(&length)) break;
    if (i > 0) start = last_end + static_cast<int64_t>(gap);
    if (start >= x) break;
    last_end = start + static_cast<int64_t>(length);
  }
  return last_end > x;
}

std::vector<CallClass> ClassifyCalls(const Timeline& t, uint32_t device,
                                     const AttributionOptions& o,
                                     const PendingIntervals* given) {
  // Was device work pending when a call entered at x? Built from t's ops
  // on first use, unless given: only calls without a joined op need it.
  PendingIntervals own;
  const PendingIntervals* pending = given;
  auto pending_at = [&](int64_t x) {
    if (pending == nullptr) {
      for (const DeviceOp& op : t.ops) {
        if (op.device == device && op.call >= 0) own.Add(t.calls[op.call].enter_ns, op.end_ns);
      }
      pending = &own;
    }
    return pending->At(x);
  };
  std::vector<CallClass> out(t.calls.size(), CallClass::kNonBlocking);
  for (size_t i = 0; i < t.calls.size(); ++i) {
    const ApiCall& c = t.calls[i];
    const ApiInfo& api = t.Api(c.api);
    bool observed_check = false;
    const bool async = (api.flags & trace::kApiAsync) != 0;
    const bool may_block = (api.flags & trace::kApiMayBlock) != 0;
    switch (api.category) {
      case ApiCategory::kSync:
        out[i] = CallClass::kSync;
        break;
      case ApiCategory::kFree:  // cuMemFree synchronizes; cuMemFreeAsync does not
        if (async) {
          observed_check = true;
        } else {
          out[i] = CallClass::kSync;
        }
        break;
      case ApiCategory::kNccl:
        out[i] = CallClass::kNccl;
        break;
      case ApiCategory::kCopy:
      case ApiCategory::kSet:
        // Synchronous forms block; device-to-device copies (no "may block"
        // flag) and async forms only when they observably did — except
        // async host-to-device copies and async sets, which never wait for
        // device work (NVIDIA, "API synchronization behavior": pageable
        // sources are staged, pinned ones are asynchronous).
        if (!async && may_block) {
          out[i] = CallClass::kSync;
        } else if (async && (api.category == ApiCategory::kSet ||
                             (api.flags & trace::kApiHostToDev) != 0)) {
          out[i] = CallClass::kNonBlocking;
        } else {
          observed_check = true;
        }
        break;
      case ApiCategory::kOther:
        observed_check = true;
        break;
      default:
        break;
    }
    if (observed_check) {
      // An async copy whose op's host memory is known is synchronizing iff
      // it reads into (or from) pageable host memory: NVIDIA's driver then
      // copies synchronously ("API synchronization behavior"); into pinned
      // memory it never waits, however long the call took. Otherwise, with
      // its device op known, a call synchronized iff it returned only after
      // that op ended; without one (no CUPTI), a long call made while the
      // device was busy is taken as having waited for it.
      const CallInfo& info = t.call_info[i];
      bool synchronized;
      if (api.category == ApiCategory::kCopy && async && info.op_count > 0 &&
          t.copy_memory_kinds) {
        synchronized = t.pageable_copy_calls.contains(static_cast<int32_t>(i));
      } else {
        synchronized = info.op_count > 0
                           ? c.exit_ns > info.last_op_end_ns
                           : c.exit_ns - c.enter_ns > o.observed_block_ns && pending_at(c.enter_ns);
      }
      if (synchronized) out[i] = CallClass::kSync;
    }
  }
  return out;
}

Attribution AttributeIdle(const Timeline& t, const StepPlan& plan,
                          const std::vector<CallClass>& classes,
                          const AttributionOptions& options) {
  // The steps' own extent (AttributeIdleWithin widens the sweep to hold them).
  return AttributeIdleWithin(t, plan, classes, options, std::numeric_limits<int64_t>::max(),
                             std::numeric_limits<int64_t>::min());
}

Attribution AttributeIdleWithin(const Timeline& t, const StepPlan& plan,
                                const std::vector<CallClass>& classes,
                                const AttributionOptions& options, int64_t sweep_from,
                                int64_t sweep_to) {
  Attribution out;
  for (size_t k = 0; k < plan.steps.size(); ++k) {
    StepStats s;
    s.index = static_cast<int>(k);
    s.device = plan.device;
    s.start_ns = plan.steps[k].start_ns;
    s.end_ns = plan.steps[k].end_ns;
    s.host_start_ns = plan.steps[k].host_start_ns;
    s.host_end_ns = plan.steps[k].host_end_ns;
    out.steps.push_back(s);
  }
  if (out.steps.empty()) return out;
  Attributor a(t, plan, classes, options, &out);
  a.SweepWithin(std::min(sweep_from, out.steps.front().start_ns),
                std::max(sweep_to, out.steps.back().end_ns));
  a.Run();
  return out;
}

}  // namespace stallscope::analyzer
