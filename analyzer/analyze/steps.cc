// Step finder (see steps.h).
#include "analyzer/analyze/steps.h"

#include <algorithm>
#include <limits>
#include <tuple>
#include <utility>

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

std::vector<std::pair<uint32_t, int64_t>> OpsPerDevice(const Timeline& t, int64_t nccl_weight) {
  std::vector<std::pair<uint32_t, int64_t>> counts;
  for (const DeviceOpCount& d : t.ops_per_device) {  // counted by FinalizeTimeline
    counts.push_back({d.device, d.ops + d.nccl * (nccl_weight - 1)});
  }
  return counts;
}

uint32_t BusiestDevice(const Timeline& t, size_t* devices) {
  const auto counts = OpsPerDevice(t, 1);
  if (devices != nullptr) *devices = counts.size();
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
  uint32_t best = 0;
  std::pair<int64_t, int64_t> best_count{-1, -1};
  for (const ThreadCallCount& c : t.calls_per_thread) {  // counted by FinalizeTimeline
    const std::pair<int64_t, int64_t> count{c.launches, c.calls};
    if (count > best_count || (count == best_count && c.tid < best)) {
      best = c.tid;
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
    out.push_back({0, 0, r->start_ns, r->end_ns, r->name});
    last_end = r->end_ns;
  }
  return out;
}

}  // namespace

bool IsStepName(const Timeline& t, uint32_t name, const std::regex& pattern) {
  // Long names are matched on their first 1024 bytes (bounds the regex's
  // time and recursion on hostile traces).
  const std::string_view s = t.String(name).substr(0, 1024);
  return !s.empty() && std::regex_search(s.begin(), s.end(), pattern);
}

namespace {

std::vector<StepSpan> MarkerSteps(const Timeline& t, const std::regex& pattern,
                                  uint32_t main_tid) {
  absl::flat_hash_map<uint32_t, std::vector<const NvtxRange*>> by_thread;
  StepNames is_step(t, pattern);
  for (const NvtxRange& r : t.ranges) {
    if (!r.explicit_step && is_step(r.name)) by_thread[r.tid].push_back(&r);
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

namespace {

bool InLaunchSequence(trace::ApiCategory c) {
  using C = trace::ApiCategory;
  return c == C::kLaunch || c == C::kCopy || c == C::kSet || c == C::kSync || c == C::kNccl ||
         c == C::kGraph || c == C::kFree;
}

uint64_t Mix64(uint64_t x) {  // splitmix64 finalizer
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

struct Anchor {
  uint32_t symbol = 0;
  uint32_t period = 0;  // modal segment length, in calls
  double score = 0;     // share of the sequence in regular segments
  int matched = 0;      // regular segments
  uint32_t first = 0;   // position of the first occurrence
  uint64_t mode_hash = 0;  // the modal segment's content
};

}  // namespace

namespace {

// How far from the period L a regular segment's length may be: L/8 for a
// period of 8 calls or more, else none (docs/analyzer.md, "Anchors").
uint32_t RegularSlack(uint32_t period) { return period >= 8 ? period / 8 : 0; }

// How a launch sequence is cut into steps, found in its first calls
// (DetectRule): steps begin at the occurrences of one symbol, every
// `every`-th of them counted from occurrence number `first`; with `reach`,
// only from `reach_lo` (a sequence position) to a period after the last
// occurrence of `anchor_symbol`.
struct AutoRule {
  bool found = false;
  double score = 0;     // the best anchor's (0: none found)
  uint32_t period = 0;  // in calls
  uint32_t start_symbol = 0;
  uint32_t every = 1;
  uint32_t first = 0;
  bool reach = false;
  int64_t reach_lo = 0;
  uint32_t anchor_symbol = 0;
};

// The period and phase of `seq` (symbols numbered in order of first
// occurrence, `nsym` of them), given the host's gap before each call.
AutoRule DetectRule(const std::vector<uint32_t>& seq, const std::vector<int64_t>& gap_before,
                    size_t nsym) {
  AutoRule rule;
  const size_t n = seq.size();
  if (n < 3) return rule;

  // Occurrences of each symbol (CSR) and prefix sums of a random weight per
  // symbol: P[j] - P[i] hashes the multiset of seq[i, j).
  std::vector<uint32_t> offset(nsym + 1, 0);
  for (uint32_t x : seq) ++offset[x + 1];
  for (size_t x = 0; x < nsym; ++x) offset[x + 1] += offset[x];
  std::vector<uint32_t> pos(n);
  {
    std::vector<uint32_t> fill(offset.begin(), offset.end() - 1);
    for (size_t i = 0; i < n; ++i) pos[fill[seq[i]]++] = static_cast<uint32_t>(i);
  }
  std::vector<uint64_t> prefix(n + 1, 0);
  for (size_t i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + Mix64(seq[i] + 1);

  // Every symbol occurring at least three times is an anchor candidate: cut
  // the sequence at its occurrences; the modal segment (length, content) is
  // the period; segments equal to it (or, for periods of 8 calls or more,
  // within 1/8 of its length) are regular.
  std::vector<Anchor> anchors;
  std::vector<std::pair<uint64_t, uint32_t>> segs, sorted;  // (content hash, length)
  for (size_t x = 0; x < nsym; ++x) {
    const uint32_t* p = pos.data() + offset[x];
    const uint32_t count = offset[x + 1] - offset[x];
    if (count < 3) continue;
    segs.clear();
    for (uint32_t j = 0; j + 1 < count; ++j) {
      segs.emplace_back(prefix[p[j + 1]] - prefix[p[j]], p[j + 1] - p[j]);
    }
    sorted.assign(segs.begin(), segs.end());
    std::sort(sorted.begin(), sorted.end());
    std::pair<uint64_t, uint32_t> mode = sorted[0];
    size_t best_run = 0;
    for (size_t a = 0; a < sorted.size();) {
      size_t b = a;
      while (b < sorted.size() && sorted[b] == sorted[a]) ++b;
      if (b - a > best_run) {
        best_run = b - a;
        mode = sorted[a];
      }
      a = b;
    }
    const uint32_t period = mode.second;
    if (period < kAutoMinPeriod) continue;
    const uint32_t slack = RegularSlack(period);
    uint64_t covered = 0;
    int matched = 0;
    for (const auto& sgm : segs) {
      const uint32_t len = sgm.second;
      if (sgm == mode || (slack > 0 && len + slack >= period && len <= period + slack)) {
        covered += len;
        ++matched;
      }
    }
    // Up to one period before the first and after the last occurrence is
    // expected (the phase of the anchor); more counts against it.
    const uint64_t head = std::min<uint64_t>(p[0], period);
    const uint64_t tail = std::min<uint64_t>(n - p[count - 1], period);
    const double denom = static_cast<double>(n - head - tail);
    Anchor a;
    a.symbol = static_cast<uint32_t>(x);
    a.period = period;
    a.score = denom > 0 ? static_cast<double>(covered) / denom : 0.0;
    a.matched = matched;
    a.first = p[0];
    a.mode_hash = mode.first;
    anchors.push_back(a);
  }
  if (anchors.empty()) return rule;
  // The best anchor: highest score; ties to the shorter period, then the
  // earlier first occurrence.
  const Anchor* best = &anchors[0];
  for (const Anchor& a : anchors) {
    if (std::tie(a.score, best->period, best->first) >
        std::tie(best->score, a.period, a.first)) {
      best = &a;
    }
  }
  if (best->score < kAutoMinScore || best->matched < kAutoMinSteps) return rule;
  rule.found = true;
  rule.score = best->score;

  // The phase: among anchors of the same period and nearly the same score,
  // the one that follows the longest host gap (median of gap_before: after a
  // blocking read-back or an input wait), when that
  // gap stands out; else the one that occurs first (the first launch of the
  // first full period).
  const uint32_t period = best->period;
  const uint32_t slack = RegularSlack(period);
  const Anchor* by_gap = nullptr;
  const Anchor* by_first = nullptr;
  int64_t gap1 = -1, gap2 = -1;
  std::vector<int64_t> gaps;
  for (const Anchor& a : anchors) {
    if (a.score < best->score - kAutoPhaseScoreSlack || a.period + slack < period ||
        a.period > period + slack) {
      continue;
    }
    if (by_first == nullptr || a.first < by_first->first) by_first = &a;
    gaps.clear();
    for (uint32_t j = offset[a.symbol]; j < offset[a.symbol + 1]; ++j) {
      const uint32_t i = pos[j];
      if (i == 0) continue;
      gaps.push_back(gap_before[i]);
    }
    if (gaps.empty()) continue;
    std::nth_element(gaps.begin(), gaps.begin() + gaps.size() / 2, gaps.end());
    const int64_t g = gaps[gaps.size() / 2];
    if (g > gap1) {
      gap2 = gap1;
      gap1 = g;
      by_gap = &a;
    } else if (g > gap2) {
      gap2 = g;
    }
  }
  const Anchor* phase = by_first;
  if (by_gap != nullptr && gap1 >= kAutoMinPhaseGapNs && gap1 >= 2 * std::max<int64_t>(gap2, 0)) {
    phase = by_gap;
  }

  // The phase at any call of the period: the host's longest wait need not
  // be before a call that occurs once per step (torch uploads x and y, two
  // copies of one symbol, right after its input wait). For each offset o
  // into the best anchor's modal segments, the median host gap before the
  // call at (occurrence + o). When one offset's stands out (>= 50 us and at
  // least twice any other's), steps begin at the calls of that call's symbol
  // S: if S occurs c times in a modal segment, at every c-th occurrence of
  // S, counted from the one at that offset (insertions of other calls, a
  // warm-up's extra kernels, do not shift it).
  const uint32_t* bp = pos.data() + offset[best->symbol];
  const uint32_t bcount = offset[best->symbol + 1] - offset[best->symbol];
  std::vector<uint32_t> modal;  // occurrences j whose segment [bp[j], bp[j+1]) is the modal one
  for (uint32_t j = 0; j + 1 < bcount; ++j) {
    if (bp[j + 1] - bp[j] == period && prefix[bp[j + 1]] - prefix[bp[j]] == best->mode_hash) {
      modal.push_back(j);
    }
  }
  int64_t off_gap1 = -1, off_gap2 = -1;
  uint32_t off_best = 0;
  if (modal.size() >= 2) {
    std::vector<int64_t> g;
    for (uint32_t o = 0; o < period; ++o) {
      g.clear();
      for (uint32_t j : modal) {
        const uint32_t i = bp[j] + o;
        if (i == 0) continue;
        g.push_back(gap_before[i]);
      }
      if (g.empty()) continue;
      std::nth_element(g.begin(), g.begin() + g.size() / 2, g.end());
      const int64_t med = g[g.size() / 2];
      if (med > off_gap1) {
        off_gap2 = off_gap1;
        off_gap1 = med;
        off_best = o;
      } else if (med > off_gap2) {
        off_gap2 = med;
      }
    }
  }
  rule.period = period;
  if (off_gap1 >= kAutoMinPhaseGapNs && off_gap1 >= 2 * std::max<int64_t>(off_gap2, 0)) {
    const uint32_t at = bp[modal[0]] + off_best;
    const uint32_t sym = seq[at];
    const uint32_t* q = pos.data() + offset[sym];
    const uint32_t qn = offset[sym + 1] - offset[sym];
    uint32_t per = 0;  // occurrences of sym in one modal segment
    for (uint32_t i = bp[modal[0]]; i < bp[modal[0]] + period; ++i) per += seq[i] == sym;
    const uint32_t q0 = static_cast<uint32_t>(std::lower_bound(q, q + qn, at) - q);
    // Within the anchor's reach: a period before its first occurrence to a
    // period after its last (the same symbol in set-up, e.g. the model's
    // upload parameter by parameter, is no step).
    rule.start_symbol = sym;
    rule.every = per;
    rule.first = q0 % per;
    rule.reach = true;
    rule.reach_lo = int64_t{bp[0]} - period;
    rule.anchor_symbol = best->symbol;
  } else {
    rule.start_symbol = phase->symbol;
  }
  return rule;
}

}  // namespace

// One launch sequence (the main thread's, or every thread's): its first
// kAutoDetectCalls calls kept for DetectRule, the rest only followed.
class AutoStepFinder::Sequence {
 public:
  explicit Sequence(size_t detect_calls) : detect_calls_(detect_calls) {}
  bool detecting() const { return !detected_; }
  bool found_none() const { return detected_ && !rule_.found; }

  void Add(uint16_t api, uint64_t what, int64_t gap, int64_t enter_ns, int64_t exit_ns) {
    const std::pair<uint64_t, uint64_t> key(uint64_t{api}, what);
    if (detected_) {
      if (!rule_.found) return;
      const int64_t symbol = key == start_key_    ? int64_t{rule_.start_symbol}
                             : key == anchor_key_ ? int64_t{rule_.anchor_symbol}
                                                  : -1;
      Follow(symbol, enter_ns, exit_ns);
      return;
    }
    auto [it, fresh] = symbols_.try_emplace(key, static_cast<uint32_t>(symbols_.size()));
    seq_.push_back(it->second);
    gap_.push_back(gap);
    enter_.push_back(enter_ns);
    exit_.push_back(exit_ns);
    if (seq_.size() >= detect_calls_) Detect();
  }

  // The steps; `score` gets the rule's score (0: none found), `tail` the
  // calls after the last step.
  std::vector<StepSpan> Finish(double* score, AutoTail* tail) {
    if (!detected_) Detect();
    *score = rule_.score;
    std::vector<StepSpan> steps;
    *tail = {};
    if (!rule_.found) return steps;
    size_t m = starts_.size();
    if (rule_.reach) {
      const uint64_t hi = anchor_last_ + rule_.period;
      while (m > 0 && starts_[m - 1].pos >= hi) --m;
    }
    // Before the first step of about a period of calls (within the slack
    // of a regular segment), a shorter one is set-up that repeats the start
    // symbol (the model's upload, parameter by parameter): no step.
    const uint64_t slack = RegularSlack(rule_.period);
    size_t j0 = 0;
    while (j0 + 1 < m && starts_[j0 + 1].pos - starts_[j0].pos + slack < rule_.period) ++j0;
    tail->calls = static_cast<int64_t>(followed_);
    tail->period = static_cast<int64_t>(rule_.period);
    tail->rule_calls = followed_ > rule_calls_ ? static_cast<int64_t>(rule_calls_) : 0;
    if (m > 0) {
      const uint64_t last = starts_[m - 1].pos + rule_.period;
      tail->calls_after = static_cast<int64_t>(followed_ > last ? followed_ - last : 0);
    }
    for (size_t j = j0; j < m; ++j) {
      StepSpan s;
      s.host_start_ns = starts_[j].enter_ns;
      // The last step: at most one period of calls (a partial step is kept;
      // teardown after it is not).
      s.host_end_ns = j + 1 < m ? starts_[j + 1].enter_ns : starts_[j].end_ns;
      steps.push_back(s);
    }
    return steps;
  }

 private:
  struct Start {
    uint64_t pos = 0;  // in the sequence
    int64_t enter_ns = 0;
    int64_t end_ns = 0;  // the latest exit of the period of calls from it
  };

  void Detect() {
    detected_ = true;
    if (seq_.size() >= detect_calls_) rule_calls_ = seq_.size();
    rule_ = DetectRule(seq_, gap_, symbols_.size());
    if (rule_.found) {
      for (const auto& [key, symbol] : symbols_) {
        if (symbol == rule_.start_symbol) start_key_ = key;
        if (symbol == rule_.anchor_symbol) anchor_key_ = key;
      }
      for (size_t i = 0; i < seq_.size(); ++i) Follow(seq_[i], enter_[i], exit_[i]);
    }
    // The rest of the sequence is only followed.
    symbols_ = {};
    seq_ = {};
    gap_ = {};
    enter_ = {};
    exit_ = {};
  }

  // The next call of the sequence, `symbol` its symbol when it is one of
  // the rule's (else -1).
  void Follow(int64_t symbol, int64_t enter_ns, int64_t exit_ns) {
    const uint64_t pos = followed_++;
    size_t w = 0;
    for (const size_t j : open_) {
      Start& s = starts_[j];
      s.end_ns = std::max(s.end_ns, exit_ns);
      if (pos + 1 < s.pos + rule_.period) open_[w++] = j;
    }
    open_.resize(w);
    if (rule_.reach && symbol == int64_t{rule_.anchor_symbol}) anchor_last_ = pos;
    if (symbol != int64_t{rule_.start_symbol}) return;
    const uint64_t k = occurrences_++;
    if (k % rule_.every != rule_.first) return;
    if (rule_.reach && static_cast<int64_t>(pos) < rule_.reach_lo) return;
    starts_.push_back({pos, enter_ns, std::max(enter_ns, exit_ns)});
    if (rule_.period > 1) open_.push_back(starts_.size() - 1);
  }

  size_t detect_calls_;
  bool detected_ = false;
  absl::flat_hash_map<std::pair<uint64_t, uint64_t>, uint32_t> symbols_;
  std::vector<uint32_t> seq_;
  std::vector<int64_t> gap_, enter_, exit_;
  AutoRule rule_;
  std::pair<uint64_t, uint64_t> start_key_, anchor_key_;
  uint64_t followed_ = 0;     // calls followed
  uint64_t rule_calls_ = 0;   // the calls the rule was found in, when not all
  uint64_t occurrences_ = 0;  // of the start symbol
  uint64_t anchor_last_ = 0;
  std::vector<Start> starts_;
  std::vector<size_t> open_;  // starts whose period of calls is not yet past
};

AutoStepFinder::AutoStepFinder(uint32_t main_tid, bool several, size_t detect_calls)
    : main_tid_(main_tid),
      main_(std::make_unique<Sequence>(detect_calls)),
      all_(several ? std::make_unique<Sequence>(detect_calls) : nullptr) {}

AutoStepFinder::~AutoStepFinder() = default;

bool AutoStepFinder::needs_gaps() const {
  return main_->detecting() || (all_ != nullptr && all_->detecting());
}

bool AutoStepFinder::found_none() const { return main_->found_none(); }

void AutoStepFinder::Add(const Timeline& t, size_t i0, size_t i1) {
  // The launch sequence: (API, kernel name) of the calls that submit or
  // wait for device work; without a joined op, (API, object). A copy's or
  // set's op has no name (CUPTI gives none): its kind and copy direction
  // stand in, never the pointers (a caching allocator hands out other
  // buffers from step to step).
  op_name_.assign(i1 - i0, 0);
  op_kind_.assign(i1 - i0, 0);  // (kind << 8 | copy kind) + 1
  for (size_t i = 0; i < t.ops.size(); ++i) {
    const int64_t call = t.ops[i].call;
    if (call < static_cast<int64_t>(i0) || call >= static_cast<int64_t>(i1)) continue;
    const size_t c = static_cast<size_t>(call) - i0;
    if (op_name_[c] == 0) op_name_[c] = t.op_info[i].name;
    if (op_kind_[c] == 0) {
      op_kind_[c] = static_cast<uint16_t>(
          ((static_cast<unsigned>(t.ops[i].kind) << 8) | t.ops[i].copy_kind) + 1);
    }
  }
  const bool gaps = needs_gaps();
  for (size_t i = i0; i < i1; ++i) {
    const ApiCall& c = t.calls[i];
    const trace::ApiCategory category = t.Api(c.api).category;
    if (!InLaunchSequence(category)) continue;
    // The host's gap before each sequence call: since the latest exit of
    // any thread's launch-sequence call that entered before it. A framework
    // that launches the backward pass from another thread (PyTorch's
    // autograd engine) keeps the process busy while its main thread waits
    // in backward(); only an input wait or a blocking read-back leaves the
    // host silent. Time the calling thread was runnable but waiting for a
    // CPU (its run-queue delay, from its samples) is not silence of the
    // job's making: a loaded machine preempts it anywhere in the step. The
    // most of it the samples let the gap hold is left out, so that no
    // silence the machine may have made decides the phase.
    int64_t gap = 0;
    if (gaps && busy_until_ != std::numeric_limits<int64_t>::min()) {
      gap = std::max<int64_t>(0, c.enter_ns - busy_until_);
      if (gap > 0) {
        const HostGapSplit g = SplitHostGap(t, c.tid, busy_until_, c.enter_ns);
        if (g.preempted_most > 0) gap -= std::min(gap, g.preempted_most);
      }
    }
    busy_until_ = std::max(busy_until_, c.exit_ns);
    const bool main = c.tid == main_tid_;
    if (!main && all_ == nullptr) continue;
    // A free's, copy's or set's object is a pointer, another one from step
    // to step: not part of the symbol.
    const bool pointer = category == trace::ApiCategory::kFree ||
                         category == trace::ApiCategory::kCopy ||
                         category == trace::ApiCategory::kSet;
    const size_t k = i - i0;
    const uint64_t what = op_name_[k] != 0 ? (uint64_t{1} << 63) | op_name_[k]
                          : op_kind_[k] != 0 ? (uint64_t{1} << 62) | op_kind_[k]
                          : pointer          ? 0
                                             : t.call_info[i].object;
    if (main) main_->Add(c.api, what, gap, c.enter_ns, c.exit_ns);
    if (all_ != nullptr) all_->Add(c.api, what, gap, c.enter_ns, c.exit_ns);
  }
}

std::vector<StepSpan> AutoStepFinder::Finish() {
  double main_score = 0, all_score = 0;
  std::vector<StepSpan> main = main_->Finish(&main_score, &tail_);
  if (all_ == nullptr || main.empty()) return main;
  // The merged sequence has the other threads' calls too, and their own
  // variation (a first-step allocation): nearly as regular is regular.
  AutoTail all_tail;
  std::vector<StepSpan> merged = all_->Finish(&all_score, &all_tail);
  if (all_score >= kAutoMinScore && all_score >= main_score - kAutoPhaseScoreSlack) {
    tail_ = all_tail;
    return merged;
  }
  return main;
}

std::vector<StepSpan> AutoSteps(const Timeline& t, uint32_t main_tid, AutoTail* tail) {
  // Frameworks that launch from several threads in a fixed order (PyTorch:
  // forward and optimizer from the Python thread, backward from the autograd
  // engine's) repeat only in the calls of all threads together; threads
  // that launch independently (one per GPU) do not, and their merged
  // sequence scores lower.
  // The merged sequence refines a structure the main thread has; it does
  // not make one (phases of different threads' work, each ending in a
  // synchronize, are no training steps).
  AutoStepFinder finder(main_tid, SeveralLaunch(t.calls_per_thread, main_tid));
  finder.Add(t, 0, t.calls.size());
  std::vector<StepSpan> steps = finder.Finish();
  if (tail != nullptr) *tail = finder.tail();
  return steps;
}

bool SeveralLaunch(const std::vector<ThreadCallCount>& calls_per_thread, uint32_t main_tid) {
  bool several = false;
  for (const ThreadCallCount& c : calls_per_thread) several |= c.tid != main_tid && c.launches > 0;
  return several;
}

std::vector<StepSpan> MarkedSteps(const Timeline& t, const std::regex& pattern, uint32_t main_tid) {
  std::vector<StepSpan> steps = MarkerSteps(t, pattern, main_tid);
  if (steps.empty()) steps = ExplicitSteps(t);
  return steps;
}

StepSpanBuilder::StepSpanBuilder(std::vector<StepSpan> steps)
    : steps_(std::move(steps)),
      op_start_(steps_.size(), std::numeric_limits<int64_t>::max()),
      op_count_(steps_.size(), 0),
      op_end_(steps_.size(), std::numeric_limits<int64_t>::min()) {}

void StepSpanBuilder::AddOp(int64_t call_enter_ns, int64_t start_ns, int64_t end_ns) {
  ++submitted_;
  // Each op takes the step whose host range holds its submitting call's
  // enter time (host ranges are sorted and disjoint): the first range that
  // ends after it, if it has begun by then. Ops come in start order, so
  // their calls mostly do too: the previous op's step is tried first.
  size_t k = hint_;
  if (!(k < steps_.size() && steps_[k].host_end_ns > call_enter_ns &&
        (k == 0 || steps_[k - 1].host_end_ns <= call_enter_ns))) {
    k = static_cast<size_t>(
        std::upper_bound(steps_.begin(), steps_.end(), call_enter_ns,
                         [](int64_t v, const StepSpan& s) { return v < s.host_end_ns; }) -
        steps_.begin());
    hint_ = k;
  }
  if (!(k < steps_.size() && call_enter_ns >= steps_[k].host_start_ns)) return;
  ++assigned_;
  ++op_count_[k];
  op_start_[k] = std::min(op_start_[k], start_ns);
  op_end_[k] = std::max(op_end_[k], end_ns);
  latest_op_end_ = std::max(latest_op_end_, end_ns);
}

bool StepSpanBuilder::LastSubmittedNothing(const Timeline& names) const {
  // torch.profiler's step() closes ProfilerStep#k and opens #k+1, so one
  // last range runs after the loop up to the profiler's stop: when it
  // submitted nothing on any device, it is that range, not a training step.
  // (Other markers keep an empty last step: an input-starved step is one.)
  return steps_.size() > 1 && op_count_.back() == 0 &&
         names.String(steps_.back().name).starts_with("ProfilerStep#");
}

void StepSpanBuilder::Finish(bool drop_last, StepPlan* plan) {
  if (drop_last) {
    steps_.pop_back();
    plan->dropped_empty_last = true;
  }
  for (size_t k = 0; k < steps_.size(); ++k) Span(k);
  plan->ops_outside = submitted_ - assigned_;
  plan->steps = std::move(steps_);
}

void StepSpanBuilder::Span(size_t k) {
  StepSpan& s = steps_[k];
  const bool none = op_end_[k] == std::numeric_limits<int64_t>::min();
  if (k == 0) {
    // The host range's start: a marker's push (an input wait right after
    // it is the step's), an automatic step's first call.
    s.start_ns = std::min(s.host_start_ns, op_start_[k]);
  } else {
    s.start_ns = steps_[k - 1].end_ns;
  }
  // A step that submitted nothing ends with its host range.
  s.end_ns = std::max(s.start_ns, none ? s.host_end_ns : op_end_[k]);
}

void StepSpanBuilder::SpanThrough(size_t k, std::vector<StepSpan>* out) {
  for (; spanned_ <= k && spanned_ < steps_.size(); ++spanned_) {
    Span(spanned_);
    (*out)[spanned_] = steps_[spanned_];
  }
}

bool SubmittedIn(const Timeline& t, int64_t from_ns, int64_t to_ns) {
  using C = trace::ApiCategory;
  for (auto c = t.calls.rbegin(); c != t.calls.rend() && c->enter_ns >= from_ns; ++c) {
    const C cat = t.Api(c->api).category;
    if (c->enter_ns < to_ns && (cat == C::kLaunch || cat == C::kCopy || cat == C::kSet || cat == C::kNccl)) {
      return true;
    }
  }
  return false;
}

StepPlan FindSteps(const Timeline& t, const std::regex& pattern, uint32_t device) {
  StepPlan plan;
  plan.device = device;
  plan.main_tid = MainThread(t);
  std::vector<StepSpan> steps = MarkedSteps(t, pattern, plan.main_tid);
  plan.source = steps.empty() ? "none" : "marker";
  if (steps.empty()) {
    steps = AutoSteps(t, plan.main_tid, &plan.auto_tail);
    if (!steps.empty()) plan.source = "auto";
  }
  const bool markers = !steps.empty();

  if (!markers) {
    // One step: the extent of the analyzed device's ops and of the calls.
    int64_t first_op = std::numeric_limits<int64_t>::max();
    int64_t last_op = std::numeric_limits<int64_t>::min();
    int64_t submitted = 0;
    for (const DeviceOp& op : t.ops) {
      if (op.device != device) continue;
      first_op = std::min(first_op, op.start_ns);
      last_op = std::max(last_op, op.end_ns);
      submitted += op.call >= 0;
    }
    if (t.calls.empty() && submitted == 0 && first_op > last_op) return plan;
    StepSpan s;
    s.host_start_ns = t.calls.empty() ? first_op : t.calls.front().enter_ns;
    s.host_end_ns = s.host_start_ns;
    for (const ApiCall& c : t.calls) s.host_end_ns = std::max(s.host_end_ns, c.exit_ns);
    s.start_ns = std::min(s.host_start_ns, first_op);
    s.end_ns = std::max({s.start_ns, last_op, first_op > last_op ? s.host_end_ns : last_op});
    plan.steps.push_back(s);
    return plan;
  }

  StepSpanBuilder spans(std::move(steps));
  for (const DeviceOp& op : t.ops) {
    if (op.device != device || op.call < 0) continue;
    spans.AddOp(t.calls[op.call].enter_ns, op.start_ns, op.end_ns);
  }
  const StepSpan* last = spans.steps().empty() ? nullptr : &spans.steps().back();
  const bool drop = plan.source == "marker" && spans.LastSubmittedNothing(t) &&
                    !SubmittedIn(t, last->host_start_ns, last->host_end_ns);
  spans.Finish(drop, &plan);
  return plan;
}

std::vector<std::pair<int64_t, int64_t>> DeviceTimingOn(const Timeline& t) {
  // Before the first turn, timing was the opposite of what it turned to.
  std::vector<std::pair<int64_t, int64_t>> on;
  if (t.device_timing.empty()) return on;
  bool state = !t.device_timing.front().on;
  int64_t since = std::numeric_limits<int64_t>::min();
  for (const DeviceTimingTurn& d : t.device_timing) {
    if (d.on == state) continue;
    if (state) on.push_back({since, d.ns});
    state = d.on;
    since = d.ns;
  }
  if (state) on.push_back({since, std::numeric_limits<int64_t>::max()});
  return on;
}

void KeepTimedSteps(const Timeline& t, StepPlan* plan) {
  plan->steps_found = plan->steps.size();
  if (t.device_timing.empty()) return;
  const std::vector<std::pair<int64_t, int64_t>> on = DeviceTimingOn(t);
  for (const DeviceTimingTurn& d : t.device_timing) plan->sampled_every = std::max(plan->sampled_every, d.every);
  if (plan->sampled_every == 0) plan->sampled_every = 1;
  std::vector<StepSpan> kept;
  plan->numbers.clear();
  size_t w = 0;
  for (size_t k = 0; k < plan->steps.size(); ++k) {
    const StepSpan& s = plan->steps[k];
    // Timing must have been on since before the step before ended (since
    // before this step began, for the first) until this step's host end.
    const int64_t need_from = k == 0 ? s.host_start_ns : plan->steps[k - 1].host_end_ns;
    while (w < on.size() && on[w].second < s.host_end_ns) ++w;
    if (w < on.size() && on[w].first < need_from && on[w].second >= s.host_end_ns) {
      kept.push_back(s);
      plan->numbers.push_back(static_cast<int32_t>(k));
    }
  }
  plan->steps = std::move(kept);
}

}  // namespace stallscope::analyzer
