// Step finder (see steps.h).
#include "analyzer/steps.h"

#include <algorithm>
#include <limits>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_format.h"

namespace stallscope::analyzer {

absl::StatusOr<std::regex> CompileStepPattern(const std::string& pattern) {
  std::string body = pattern;
  auto flags = std::regex::ECMAScript | std::regex::optimize;
  if (body.starts_with("(?i)")) {
    body = body.substr(4);
    flags |= std::regex::icase;
  }
  try {
    return std::regex(body, flags);
  } catch (const std::regex_error& e) {
    return absl::InvalidArgumentError(
        absl::StrFormat("invalid --step-pattern '%s': %s", pattern, e.what()));
  }
}

uint32_t BusiestDevice(const Timeline& t) {
  absl::flat_hash_map<uint32_t, int64_t> counts;
  for (const DeviceOp& op : t.ops) ++counts[op.device];
  uint32_t best = 0;
  int64_t best_count = -1;
  for (const auto& [device, count] : counts) {
    if (count > best_count || (count == best_count && device < best)) {
      best = device;
      best_count = count;
    }
  }
  return best;
}

uint32_t MainThread(const Timeline& t) {
  absl::flat_hash_map<uint32_t, std::pair<int64_t, int64_t>> counts;  // launches, calls
  for (const ApiCall& c : t.calls) {
    auto& [launches, calls] = counts[c.tid];
    ++calls;
    if (t.Api(c.api).category == trace::ApiCategory::kLaunch) ++launches;
  }
  uint32_t best = 0;
  std::pair<int64_t, int64_t> best_count{-1, -1};
  for (const auto& [tid, count] : counts) {
    if (count > best_count || (count == best_count && tid < best)) {
      best = tid;
      best_count = count;
    }
  }
  return best;
}

namespace {

// Outermost, non-overlapping ranges among `ranges` (sorted by start, longer
// first on ties).
std::vector<StepSpan> Outermost(const std::vector<const NvtxRange*>& ranges) {
  std::vector<StepSpan> out;
  int64_t last_end = std::numeric_limits<int64_t>::min();
  for (const NvtxRange* r : ranges) {
    if (r->start_ns < last_end) continue;
    out.push_back({0, 0, r->start_ns, r->end_ns});
    last_end = r->end_ns;
  }
  return out;
}

std::vector<StepSpan> MarkerSteps(const Timeline& t, const std::regex& pattern,
                                  uint32_t main_tid) {
  absl::flat_hash_map<uint32_t, std::vector<const NvtxRange*>> by_thread;
  for (const NvtxRange& r : t.ranges) {
    if (r.explicit_step) continue;
    // Long names are matched on their first 1024 bytes (bounds the regex's
    // time and recursion on hostile traces).
    std::string_view name = t.String(r.name).substr(0, 1024);
    if (name.empty()) continue;
    if (std::regex_search(name.begin(), name.end(), pattern)) by_thread[r.tid].push_back(&r);
  }
  if (by_thread.empty()) return {};
  auto it = by_thread.find(main_tid);
  if (it == by_thread.end()) {
    // No step ranges on the launching thread: the thread with the most.
    it = by_thread.begin();
    for (auto j = by_thread.begin(); j != by_thread.end(); ++j) {
      if (j->second.size() > it->second.size() ||
          (j->second.size() == it->second.size() && j->first < it->first)) {
        it = j;
      }
    }
  }
  return Outermost(it->second);
}

std::vector<StepSpan> ExplicitSteps(const Timeline& t) {
  std::vector<const NvtxRange*> ranges;
  for (const NvtxRange& r : t.ranges) {
    if (r.explicit_step) ranges.push_back(&r);
  }
  return Outermost(ranges);
}

}  // namespace

StepPlan FindSteps(const Timeline& t, const std::regex& pattern, uint32_t device) {
  StepPlan plan;
  plan.device = device;
  plan.main_tid = MainThread(t);
  std::vector<StepSpan> steps = MarkerSteps(t, pattern, plan.main_tid);
  if (steps.empty()) steps = ExplicitSteps(t);
  const bool markers = !steps.empty();
  plan.source = markers ? "marker" : "none";

  // Device ops of the analyzed device by their submitting call's enter time.
  struct Submitted {
    int64_t enter, start, end;
  };
  std::vector<Submitted> submitted;
  int64_t first_op = std::numeric_limits<int64_t>::max();
  int64_t last_op = std::numeric_limits<int64_t>::min();
  for (const DeviceOp& op : t.ops) {
    if (op.device != device) continue;
    first_op = std::min(first_op, op.start_ns);
    last_op = std::max(last_op, op.end_ns);
    if (op.call >= 0) submitted.push_back({t.calls[op.call].enter_ns, op.start_ns, op.end_ns});
  }
  std::sort(submitted.begin(), submitted.end(),
            [](const Submitted& a, const Submitted& b) { return a.enter < b.enter; });

  if (!markers) {
    if (t.calls.empty() && submitted.empty() && first_op > last_op) return plan;
    StepSpan s;
    s.host_start_ns = t.calls.empty() ? first_op : t.calls.front().enter_ns;
    s.host_end_ns = s.host_start_ns;
    for (const ApiCall& c : t.calls) s.host_end_ns = std::max(s.host_end_ns, c.exit_ns);
    s.start_ns = std::min(s.host_start_ns, first_op);
    s.end_ns = std::max({s.start_ns, last_op, first_op > last_op ? s.host_end_ns : last_op});
    plan.steps.push_back(s);
    return plan;
  }

  int64_t assigned = 0;
  for (size_t k = 0; k < steps.size(); ++k) {
    StepSpan& s = steps[k];
    auto lo = std::lower_bound(submitted.begin(), submitted.end(), s.host_start_ns,
                               [](const Submitted& x, int64_t v) { return x.enter < v; });
    auto hi = std::lower_bound(lo, submitted.end(), s.host_end_ns,
                               [](const Submitted& x, int64_t v) { return x.enter < v; });
    int64_t op_start = std::numeric_limits<int64_t>::max();
    int64_t op_end = std::numeric_limits<int64_t>::min();
    for (auto it = lo; it != hi; ++it) {
      op_start = std::min(op_start, it->start);
      op_end = std::max(op_end, it->end);
    }
    assigned += hi - lo;
    if (k == 0) {
      auto first_call = std::lower_bound(
          t.calls.begin(), t.calls.end(), s.host_start_ns,
          [](const ApiCall& c, int64_t v) { return c.enter_ns < v; });
      int64_t host_first = (first_call != t.calls.end() && first_call->enter_ns < s.host_end_ns)
                               ? first_call->enter_ns
                               : s.host_start_ns;
      s.start_ns = std::min(host_first, op_start);
    } else {
      s.start_ns = steps[k - 1].end_ns;
    }
    // A step that submitted nothing ends with its host range.
    s.end_ns = std::max(s.start_ns, hi == lo ? s.host_end_ns : op_end);
  }
  plan.ops_outside = static_cast<int64_t>(submitted.size()) - assigned;
  plan.steps = std::move(steps);
  return plan;
}

}  // namespace stallscope::analyzer
