// Cross-rank analysis (see ranks.h and docs/analyzer.md "Distributed runs").
#include "analyzer/analyze/ranks.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "analyzer/analyze/questions.h"
#include "analyzer/analyze/steps.h"
#include "analyzer/model/format.h"
#include "analyzer/read/symbolizer.h"

namespace stallscope::analyzer {
namespace {

using trace::NcclKind;

bool IsCollective(NcclKind k) {
  switch (k) {
    case NcclKind::kAllReduce:
    case NcclKind::kBroadcast:
    case NcclKind::kReduce:
    case NcclKind::kAllGather:
    case NcclKind::kReduceScatter:
    case NcclKind::kAllToAll:
      return true;
    default:
      return false;
  }
}

// Length of the union of sorted-by-start intervals.
int64_t UnionLength(std::vector<std::pair<int64_t, int64_t>> v) {
  std::sort(v.begin(), v.end());
  int64_t total = 0, cur_lo = 0, cur_hi = std::numeric_limits<int64_t>::min();
  for (const auto& [lo, hi] : v) {
    if (lo > cur_hi) {
      if (cur_hi > cur_lo) total += cur_hi - cur_lo;
      cur_lo = lo;
      cur_hi = hi;
    } else {
      cur_hi = std::max(cur_hi, hi);
    }
  }
  if (cur_hi > cur_lo) total += cur_hi - cur_lo;
  return total;
}

// Merges sorted intervals into disjoint ones.
std::vector<std::pair<int64_t, int64_t>> Disjoint(std::vector<std::pair<int64_t, int64_t>> v) {
  std::sort(v.begin(), v.end());
  std::vector<std::pair<int64_t, int64_t>> out;
  for (const auto& iv : v) {
    if (iv.second <= iv.first) continue;
    if (!out.empty() && iv.first <= out.back().second) {
      out.back().second = std::max(out.back().second, iv.second);
    } else {
      out.push_back(iv);
    }
  }
  return out;
}

// Per step: the length of a disjoint sorted interval list inside each step
// (steps tile [first start, last end) in order).
std::vector<int64_t> PerStep(const std::vector<std::pair<int64_t, int64_t>>& set,
                             const std::vector<StepStats>& steps) {
  std::vector<int64_t> out(steps.size(), 0);
  size_t i = 0;
  for (size_t k = 0; k < steps.size(); ++k) {
    while (i < set.size() && set[i].second <= steps[k].start_ns) ++i;
    for (size_t j = i; j < set.size() && set[j].first < steps[k].end_ns; ++j) {
      const int64_t lo = std::max(set[j].first, steps[k].start_ns);
      const int64_t hi = std::min(set[j].second, steps[k].end_ns);
      if (hi > lo) out[k] += hi - lo;
    }
  }
  return out;
}

int64_t Percentile(std::vector<int64_t> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t rank = static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(v.size())));
  return v[std::min(v.size() - 1, rank > 0 ? rank - 1 : 0)];
}

double Share(int64_t part, int64_t whole) {
  return whole > 0 ? static_cast<double>(part) / static_cast<double>(whole) : 0.0;
}

// The collective a call launched: itself, or for the ncclGroupEnd that
// carries a group's correlation, the group's first collective (the
// simulated and real NCCL launch a group as one kernel per stream). Groups
// of point-to-point calls launch no collective instance. Fed a thread's
// NCCL records in enter order (a reading's order), in one go or by slices.
struct Launched {
  uint64_t comm = 0;
  uint64_t seq = 0;
  NcclKind kind = NcclKind::kOther;
};
class CollectiveLaunches {
 public:
  // What `n`'s call (n.call >= 0) launched, if a collective.
  std::optional<Launched> Add(const NcclCall& n) {
    const bool in_group = (n.flags & trace::kNcclInGroup) != 0;
    if (n.kind == NcclKind::kGroupEnd) {
      std::optional<Launched> out;
      auto it = group_first_.find(n.tid);
      if (n.call >= 0 && it != group_first_.end()) out = it->second;
      if (!in_group && it != group_first_.end()) group_first_.erase(it);  // the outermost end
      return out;
    }
    if (!IsCollective(n.kind) || (n.flags & trace::kNcclCollective) == 0) {
      if (in_group && (n.kind == NcclKind::kSend || n.kind == NcclKind::kRecv)) {
        group_first_.try_emplace(n.tid, std::nullopt);
      }
      return std::nullopt;
    }
    if (in_group) {
      group_first_.try_emplace(n.tid, Launched{n.comm, n.seq, n.kind});
    } else if (n.call >= 0) {
      return Launched{n.comm, n.seq, n.kind};
    }
    return std::nullopt;
  }

 private:
  // Per thread, in a group: its first collective (none: point-to-point).
  absl::flat_hash_map<uint32_t, std::optional<Launched>> group_first_;
};

// The collective each call of `t` launched, by call.
absl::flat_hash_map<int32_t, Launched> LaunchedCollectives(const Timeline& t) {
  absl::flat_hash_map<int32_t, Launched> launched;
  CollectiveLaunches launches;
  for (const NcclCall& n : t.nccl) {
    if (auto l = launches.Add(n)) launched[n.call] = *l;
  }
  return launched;
}

// A rank's arrivals as its NCCL kernels come, in any order: an instance's
// earliest start and latest end, its bytes and kind those of its earliest
// kernel.
class ArrivalsBuilder {
 public:
  void Add(const Launched& l, const DeviceOp& op, uint64_t bytes) {
    auto [slot, fresh] = index_.try_emplace(std::make_pair(l.comm, l.seq), arrivals_.size());
    if (fresh) {
      Arrival a;
      a.comm = l.comm;
      a.seq = l.seq;
      a.arrival_ns = op.start_ns;
      a.end_ns = op.end_ns;
      a.bytes = bytes;
      a.kind = static_cast<uint8_t>(l.kind);
      arrivals_.push_back(a);
      return;
    }
    Arrival& a = arrivals_[slot->second];
    if (op.start_ns < a.arrival_ns) {
      a.arrival_ns = op.start_ns;
      a.bytes = bytes;
      a.kind = static_cast<uint8_t>(l.kind);
    }
    a.end_ns = std::max(a.end_ns, op.end_ns);
  }
  // By (comm, seq).
  std::vector<Arrival> Finish() && {
    std::sort(arrivals_.begin(), arrivals_.end(), [](const Arrival& a, const Arrival& b) {
      return std::tie(a.comm, a.seq) < std::tie(b.comm, b.seq);
    });
    return std::move(arrivals_);
  }

 private:
  std::vector<Arrival> arrivals_;
  absl::flat_hash_map<std::pair<uint64_t, uint64_t>, size_t> index_;
};

// Everything a rank's arrivals say but the arrivals: its identity, the
// analyzed device (the one with the most NCCL kernels, else ops, by
// t.ops_per_device) and its clock offset.
RankArrivals RankOf(const Timeline& t) {
  RankArrivals r;
  r.rank = t.rank.known ? t.rank.rank : -1;
  r.file = BaseName(t.path);
  r.host = !t.rank.host.empty() ? t.rank.host : t.host;
  r.pid = t.header.pid;
  r.trace = IdentityOf(t);
  {
    int64_t best = -1;
    for (const auto& [device, n] : OpsPerDevice(t, 1'000'000)) {
      if (n > best || (n == best && device < r.device)) {
        best = n;
        r.device = device;
      }
    }
  }
  if (!t.clocks.empty()) {
    auto offset = [](const trace::ClockRecord& c) {
      return static_cast<int64_t>(c.realtime_ns) - static_cast<int64_t>(c.mono_ns);
    };
    const auto [lo, hi] = std::minmax_element(
        t.clocks.begin(), t.clocks.end(),
        [](const trace::ClockRecord& a, const trace::ClockRecord& b) { return a.mono_ns < b.mono_ns; });
    r.realtime_offset_ns = offset(*lo);
    r.offset_drift_ns = std::llabs(offset(*hi) - offset(*lo));
  } else {
    r.realtime_offset_ns = static_cast<int64_t>(t.header.start_realtime_ns) -
                           static_cast<int64_t>(t.header.start_mono_ns);
  }
  return r;
}

// The collective instance of the NCCL kernel `op` on `device`, by what its
// call launched (`launched`, by call); nullptr when none.
const Launched* LaunchedBy(const absl::flat_hash_map<int32_t, Launched>& launched, const DeviceOp& op,
                           uint32_t device) {
  if (op.kind != trace::DeviceOpKind::kNccl || op.device != device || op.call < 0) return nullptr;
  auto it = launched.find(op.call);
  return it == launched.end() ? nullptr : &it->second;
}

// Moves the start of each op of `t` for which `last_of(op)` gives a time
// to that time, kept within the op's span; the ops sorted again. Returns
// the ns moved.
int64_t MoveStarts(Timeline* t, const std::function<std::optional<int64_t>(const DeviceOp&)>& last_of) {
  int64_t moved = 0;
  for (DeviceOp& op : t->ops) {
    const std::optional<int64_t> last = last_of(op);
    if (!last) continue;
    const int64_t s = std::clamp(*last, op.start_ns, op.end_ns);
    moved += s - op.start_ns;
    op.start_ns = s;
  }
  if (moved > 0) SortOpsByStart(t);
  return moved;
}

}  // namespace

double BinomialTail(int64_t n, int64_t k, double p) {
  if (k <= 0) return 1.0;
  if (k > n) return 0.0;
  if (p <= 0) return 0.0;
  if (p >= 1) return 1.0;
  if (n > 20'000) {
    // Normal approximation with continuity correction (n p (1-p) is large).
    const double mean = static_cast<double>(n) * p;
    const double sd = std::sqrt(mean * (1 - p));
    return 0.5 * std::erfc((static_cast<double>(k) - 0.5 - mean) / (sd * std::sqrt(2.0)));
  }
  const double lp = std::log(p), lq = std::log1p(-p);
  double sum = 0;
  for (int64_t i = k; i <= n; ++i) {
    const double log_term = std::lgamma(static_cast<double>(n) + 1) -
                            std::lgamma(static_cast<double>(i) + 1) -
                            std::lgamma(static_cast<double>(n - i) + 1) +
                            static_cast<double>(i) * lp + static_cast<double>(n - i) * lq;
    sum += std::exp(log_term);
  }
  return std::min(1.0, sum);
}

bool OneHost(const std::vector<RankArrivals>& ranks) {
  for (const RankArrivals& r : ranks) {
    if (r.host != ranks.front().host) return false;
  }
  return true;
}

RankArrivals CollectArrivals(const Timeline& t) {
  RankArrivals r = RankOf(t);
  const auto launched = LaunchedCollectives(t);
  if (launched.empty()) return r;  // no collective launched: no arrival
  ArrivalsBuilder arrivals;
  for (const DeviceOp& op : t.ops) {
    if (const Launched* l = LaunchedBy(launched, op, r.device)) arrivals.Add(*l, op, t.call_info[op.call].bytes);
  }
  r.arrivals = std::move(arrivals).Finish();
  return r;
}

absl::StatusOr<SlicedRank> CollectArrivalsBySlices(SliceReader* reader, const TraceIndex& index,
                                                   size_t chunks_per_slice,
                                                   const std::function<void(uint64_t, uint64_t)>& progress) {
  auto head = reader->Read({});
  if (!head.ok()) return head.status();
  head->ops_per_device = index.ops_per_device;  // the whole file's, as a reading counts them
  SlicedRank out;
  out.arrivals = RankOf(*head);
  bool nccl = false;
  for (const DeviceOpCount& d : index.ops_per_device) nccl = nccl || d.nccl > 0;
  if (!nccl) return out;  // no NCCL kernel: no arrival
  CollectiveLaunches launches;
  ArrivalsBuilder arrivals;
  const uint32_t device = out.arrivals.device;
  absl::Status read = ForEachCallSlice(
      reader, index, chunks_per_slice,
      [&](const Timeline& t, int64_t from, int64_t to) {
        absl::flat_hash_map<int32_t, Launched> launched;
        for (const NcclCall& n : t.nccl) {
          if (n.enter_ns < from || n.enter_ns >= to) continue;
          if (auto l = launches.Add(n)) launched[n.call] = *l;
        }
        for (const DeviceOp& op : t.ops) {
          const Launched* l = LaunchedBy(launched, op, device);
          if (l == nullptr) continue;
          arrivals.Add(*l, op, t.call_info[op.call].bytes);
          out.instance_of[CallKey::Of(t.calls[op.call])] = std::make_pair(l->comm, l->seq);
        }
        return absl::OkStatus();
      },
      progress);
  if (!read.ok()) return read;
  out.arrivals.arrivals = std::move(arrivals).Finish();
  return out;
}

LastArrivals ReduceArrivals(const std::vector<RankArrivals>& ranks) {
  LastArrivals last;
  last.one_host = OneHost(ranks);
  for (const RankArrivals& r : ranks) {
    const int64_t offset = CommonOffset(r, last.one_host);
    for (const Arrival& a : r.arrivals) {
      const int64_t at = a.arrival_ns + offset;
      auto [it, fresh] = last.instances.try_emplace(std::make_pair(a.comm, a.seq), LastArrival{at, 0});
      it->second.last_ns = std::max(it->second.last_ns, at);
      ++it->second.ranks;
    }
  }
  return last;
}

int64_t ApplyLastArrivals(Timeline* t, const RankArrivals& mine, const LastArrivals& last) {
  if (last.instances.empty()) return 0;
  const int64_t offset = CommonOffset(mine, last.one_host);
  const auto launched = LaunchedCollectives(*t);
  return MoveStarts(t, [&](const DeviceOp& op) -> std::optional<int64_t> {
    const Launched* l = LaunchedBy(launched, op, mine.device);
    if (l == nullptr) return std::nullopt;
    auto it = last.instances.find(std::make_pair(l->comm, l->seq));
    if (it == last.instances.end() || it->second.ranks < 2) return std::nullopt;
    return it->second.last_ns - offset;
  });
}

LastByCall LastArrivalsByCall(const RankArrivals& mine, const InstanceOf& instance_of,
                              const LastArrivals& last) {
  LastByCall out;
  out.device = mine.device;
  const int64_t offset = CommonOffset(mine, last.one_host);
  for (const auto& [call, instance] : instance_of) {
    auto it = last.instances.find(instance);
    if (it == last.instances.end() || it->second.ranks < 2) continue;
    out.last_ns.emplace(call, it->second.last_ns - offset);
  }
  return out;
}

int64_t ApplyLastArrivals(Timeline* t, const LastByCall& last) {
  if (last.last_ns.empty()) return 0;
  return MoveStarts(t, [&](const DeviceOp& op) -> std::optional<int64_t> {
    if (op.kind != trace::DeviceOpKind::kNccl || op.device != last.device || op.call < 0) return std::nullopt;
    auto it = last.last_ns.find(CallKey::Of(t->calls[static_cast<size_t>(op.call)]));
    if (it == last.last_ns.end()) return std::nullopt;
    return it->second;
  });
}

int32_t MostOftenLast(const std::vector<RankArrivals>& ranks, bool one_host, int64_t* times) {
  struct Last {
    int64_t at = INT64_MIN;
    int32_t rank = -1;
    int seen = 0;
  };
  absl::flat_hash_map<std::pair<uint64_t, uint64_t>, Last> last;
  for (const RankArrivals& r : ranks) {
    const int64_t offset = CommonOffset(r, one_host);
    for (const Arrival& a : r.arrivals) {
      Last& l = last[std::make_pair(a.comm, a.seq)];
      ++l.seen;
      if (a.arrival_ns + offset > l.at) l = {a.arrival_ns + offset, r.rank, l.seen};
    }
  }
  absl::flat_hash_map<int32_t, int64_t> count;
  for (const auto& [key, l] : last) {
    if (l.seen >= 2) ++count[l.rank];
  }
  int32_t best = -1;
  int64_t most = 0;
  for (const auto& [rank, n] : count) {
    if (n > most || (n == most && rank < best)) {
      most = n;
      best = rank;
    }
  }
  if (times != nullptr) *times = most;
  return best;
}

std::vector<int64_t> StragglerCuts(const Timeline& t, const RankArrivals& mine,
                                   const std::vector<RankArrivals>& all, int32_t straggler, bool one_host,
                                   int64_t* moved) {
  std::vector<int64_t> cuts(t.ops.size(), 0);
  if (moved != nullptr) *moved = 0;
  // Every instance's arrivals on the common clock, the straggler's apart.
  struct Instance {
    std::vector<int64_t> others;
    int64_t straggler = INT64_MIN;
  };
  absl::flat_hash_map<std::pair<uint64_t, uint64_t>, Instance> instances;
  for (const RankArrivals& r : all) {
    const int64_t offset = CommonOffset(r, one_host);
    for (const Arrival& a : r.arrivals) {
      Instance& in = instances[std::make_pair(a.comm, a.seq)];
      if (r.rank == straggler) {
        in.straggler = a.arrival_ns + offset;
      } else {
        in.others.push_back(a.arrival_ns + offset);
      }
    }
  }
  absl::flat_hash_map<std::pair<uint64_t, uint64_t>, int64_t> own;  // this rank's arrival, own clock
  for (const Arrival& a : mine.arrivals) own[std::make_pair(a.comm, a.seq)] = a.arrival_ns;
  const int64_t offset = CommonOffset(mine, one_host);
  const auto launched = LaunchedCollectives(t);
  for (size_t o = 0; o < t.ops.size(); ++o) {
    const DeviceOp& op = t.ops[o];
    const Launched* l = LaunchedBy(launched, op, mine.device);
    if (l == nullptr) continue;
    const auto key = std::make_pair(l->comm, l->seq);
    auto it = instances.find(key);
    auto mine_at = own.find(key);
    if (it == instances.end() || mine_at == own.end()) continue;
    const Instance& in = it->second;
    if (in.straggler == INT64_MIN || in.others.empty()) continue;
    std::vector<int64_t> every = in.others;
    every.push_back(in.straggler);
    std::sort(every.begin(), every.end());
    const int64_t median = every[(every.size() - 1) / 2];
    const int64_t last = every.back();
    const int64_t others = *std::max_element(in.others.begin(), in.others.end());
    const int64_t new_last = std::max(others, std::min(in.straggler, median));
    // On this rank's clock, and never before its own arrival.
    const int64_t cut = std::min(last - new_last, op.start_ns - std::max(mine_at->second, new_last - offset));
    if (cut > 0) {
      cuts[o] = cut;
      if (moved != nullptr) ++*moved;
    }
  }
  return cuts;
}

namespace {

// SummarizeRank of a rank whose compute kernels on the analyzed device
// `kernels` gives (fn(start, end) for each, in any order).
absl::StatusOr<RankSummary> Summarize(
    const std::string& path, const RankArrivals& arrivals, const LastArrivals& last, const Report& report,
    const std::function<absl::Status(const std::function<void(int64_t, int64_t)>&)>& kernels) {
  RankSummary s;
  s.path = path;
  if (!report.processes.empty()) s.process = report.processes.front();
  s.arrivals = arrivals;
  s.totals = report.totals;
  s.steps = static_cast<int>(report.steps.size());
  for (const StepStats& st : report.steps) s.step_time_ns += st.end_ns - st.start_ns;
  if (!report.steps.empty()) {
    s.start_ns = report.steps.front().start_ns;
    s.end_ns = report.steps.back().end_ns;
  }
  const int64_t w0 = report.steps.empty() ? 0 : report.steps.front().start_ns;
  const int64_t w1 = report.steps.empty() ? 0 : report.steps.back().end_ns;
  const int64_t offset = CommonOffset(arrivals, last.one_host);
  std::vector<std::pair<int64_t, int64_t>> comm, waits;
  for (const Arrival& a : arrivals.arrivals) {
    auto it = last.instances.find(std::make_pair(a.comm, a.seq));
    const int64_t waited =
        it == last.instances.end()
            ? 0
            : std::clamp(it->second.last_ns - offset, a.arrival_ns, a.end_ns) - a.arrival_ns;
    s.waited_ns.push_back(waited);
    const int64_t lo = std::max(a.arrival_ns, w0), hi = std::min(a.end_ns, w1);
    if (hi > lo) {
      comm.emplace_back(lo, hi);
      s.waited_in_steps_ns += std::max<int64_t>(0, std::min(a.arrival_ns + waited, hi) - lo);
      if (waited > 0) waits.emplace_back(lo, std::min(a.arrival_ns + waited, hi));
    }
  }
  const auto comm_set = Disjoint(std::move(comm));
  // The compute kernels' time during communication: each kernel's parts
  // inside the communication's disjoint intervals, merged as they come
  // (the intersection of the two unions, without holding every kernel).
  std::vector<std::pair<int64_t, int64_t>> overlap;
  size_t merged = 0;
  absl::Status read = kernels([&](int64_t start, int64_t end) {
    const int64_t lo = std::max(start, w0);
    const int64_t hi = std::min(end, w1);
    if (hi <= lo) return;
    auto c = std::upper_bound(comm_set.begin(), comm_set.end(), lo,
                              [](int64_t v, const std::pair<int64_t, int64_t>& iv) { return v < iv.second; });
    for (; c != comm_set.end() && c->first < hi; ++c) {
      overlap.emplace_back(std::max(lo, c->first), std::min(hi, c->second));
    }
    if (overlap.size() > 2 * merged + 4096) {
      overlap = Disjoint(std::move(overlap));
      merged = overlap.size();
    }
  });
  if (!read.ok()) return read;
  const auto overlap_set = Disjoint(std::move(overlap));
  s.comm_ns = UnionLength(comm_set);
  s.compute_during_comm_ns = UnionLength(overlap_set);
  s.step_comm_ns = PerStep(comm_set, report.steps);
  s.step_overlap_ns = PerStep(overlap_set, report.steps);
  s.step_waited_ns = PerStep(Disjoint(std::move(waits)), report.steps);
  for (const StepStats& st : report.steps) s.step_time_per_step_ns.push_back(st.end_ns - st.start_ns);
  return s;
}

}  // namespace

RankSummary SummarizeRank(const Timeline& t, const RankArrivals& arrivals,
                          const LastArrivals& last, const Report& report) {
  auto s = Summarize(t.path, arrivals, last, report, [&](const std::function<void(int64_t, int64_t)>& fn) {
    for (const DeviceOp& op : t.ops) {
      if (op.device == arrivals.device && op.kind == trace::DeviceOpKind::kKernel) fn(op.start_ns, op.end_ns);
    }
    return absl::OkStatus();
  });
  return std::move(*s);  // (nothing to read)
}

absl::StatusOr<RankSummary> SummarizeRankBySlices(SliceReader* reader, const TraceIndex& index,
                                                  const std::string& path, const RankArrivals& arrivals,
                                                  const LastArrivals& last, const Report& report,
                                                  size_t chunks_per_slice) {
  return Summarize(path, arrivals, last, report, [&](const std::function<void(int64_t, int64_t)>& fn) {
    return ForEachOpSlice(reader, index, chunks_per_slice, [&](const Timeline& t, int64_t from, int64_t to) {
      for (const DeviceOp& op : t.ops) {
        if (op.start_ns < from || op.start_ns >= to) continue;
        if (op.device == arrivals.device && op.kind == trace::DeviceOpKind::kKernel) fn(op.start_ns, op.end_ns);
      }
      return absl::OkStatus();
    });
  });
}

std::string StragglerActivity(const Straggler& s) {
  return absl::StrFormat(
      "its GPU was busy %.0f%% of the time (the others %.0f%%) and its own idle is mostly %s "
      "(%.0f%%)",
      100 * s.busy_share, 100 * s.others_busy_share, s.before_cause, 100 * s.before_share);
}

void ReduceRanks(std::vector<RankSummary> ranks, Report* report) {
  if (ranks.size() < 2) return;
  std::sort(ranks.begin(), ranks.end(), [](const RankSummary& a, const RankSummary& b) {
    return std::tie(a.arrivals.rank, a.arrivals.file) < std::tie(b.arrivals.rank, b.arrivals.file);
  });
  // Every instance: who arrived when.
  struct Instance {
    std::vector<std::pair<int64_t, size_t>> arrivals;  // (arrival, rank index)
  };
  absl::flat_hash_map<std::pair<uint64_t, uint64_t>, Instance> instances;
  bool one_host = true;
  for (const RankSummary& s : ranks) one_host &= s.arrivals.host == ranks.front().arrivals.host;
  // Instances inside the steps only: set-up collectives (the initial
  // broadcast of the weights) wait for ranks that are still starting.
  absl::flat_hash_map<std::pair<uint64_t, uint64_t>, bool> outside;
  for (size_t r = 0; r < ranks.size(); ++r) {
    const int64_t offset = CommonOffset(ranks[r].arrivals, one_host);
    for (const Arrival& a : ranks[r].arrivals.arrivals) {
      const auto key = std::make_pair(a.comm, a.seq);
      instances[key].arrivals.emplace_back(a.arrival_ns + offset, r);
      if (a.arrival_ns < ranks[r].start_ns || a.arrival_ns >= ranks[r].end_ns) outside[key] = true;
    }
  }
  for (const auto& [key, out] : outside) instances.erase(key);
  std::vector<int64_t> times_last(ranks.size(), 0), caused(ranks.size(), 0), skews;
  int64_t complete = 0;
  for (auto& [key, inst] : instances) {
    auto& v = inst.arrivals;
    if (v.size() < 2) continue;
    if (v.size() == ranks.size()) ++complete;
    std::sort(v.begin(), v.end());
    const int64_t last = v.back().first;
    skews.push_back(last - v.front().first);
    int64_t wait = 0;
    for (const auto& [arrival, r] : v) wait += last - arrival;
    if (last - v[v.size() - 2].first >= kStragglerMinLateNs) {
      ++times_last[v.back().second];
      caused[v.back().second] += wait;
    }
  }
  int64_t drift = 0;
  for (const RankSummary& s : ranks) drift = std::max(drift, s.arrivals.offset_drift_ns);
  report->clock.method = one_host ? "monotonic" : "realtime";
  report->clock.error_ns = one_host ? 0 : drift;

  int64_t comm = 0, compute_during = 0, step_time = 0, waited = 0, wall = 0;
  report->ranks.clear();
  for (size_t r = 0; r < ranks.size(); ++r) {
    const RankSummary& s = ranks[r];
    RankRow row;
    row.rank = s.arrivals.rank;
    row.host = s.arrivals.host;
    row.pid = s.arrivals.pid;
    row.file = s.arrivals.file;
    row.steps = s.steps;
    row.start_ns = s.start_ns;
    row.end_ns = s.end_ns;
    row.wall_ns = s.totals.wall_ns;
    row.gpu_busy_ns = s.totals.gpu_busy_ns;
    row.gpu_idle_ns = s.totals.gpu_idle_ns;
    row.comm_ns = s.comm_ns;
    row.idle_by_cause = s.totals.idle_by_cause;
    row.waited_ns = s.waited_in_steps_ns;
    row.times_last = times_last[r];
    row.wait_caused_ns = caused[r];
    row.analyzed = s.analyzed;
    report->ranks.push_back(row);
    comm += s.comm_ns;
    compute_during += s.compute_during_comm_ns;
    step_time += s.step_time_ns;
    waited += s.waited_in_steps_ns;
    wall += s.totals.wall_ns;
  }
  CollectivesSummary& c = report->collectives;
  c.per_step.clear();
  bool same_steps = true;
  for (const RankSummary& s : ranks) {
    same_steps &= s.steps == ranks.front().steps &&
                  s.step_comm_ns.size() == static_cast<size_t>(s.steps) &&
                  s.step_time_per_step_ns.size() == static_cast<size_t>(s.steps);
  }
  for (int k = 0; same_steps && k < ranks.front().steps; ++k) {
    int64_t comm_k = 0, overlap_k = 0, time_k = 0, wait_k = 0, wait_max = 0;
    for (const RankSummary& s : ranks) {
      comm_k += s.step_comm_ns[k];
      overlap_k += s.step_overlap_ns[k];
      time_k += s.step_time_per_step_ns[k];
      wait_k += s.step_waited_ns[k];
      wait_max = std::max(wait_max, s.step_waited_ns[k]);
    }
    StepCollectives sc;
    sc.index = k;
    sc.comm_share = Share(comm_k, time_k);
    sc.overlap = Share(overlap_k, comm_k);
    sc.wait_mean_ns = wait_k / static_cast<int64_t>(ranks.size());
    sc.wait_max_ns = wait_max;
    sc.wait_share = Share(wait_k, time_k);
    c.per_step.push_back(sc);
  }
  c.count = complete;
  c.comm_share = Share(comm, step_time);
  c.overlap = Share(compute_during, comm);
  c.skew_p50_ns = Percentile(skews, 50);
  c.skew_p95_ns = Percentile(skews, 95);
  c.skew_max_ns = skews.empty() ? 0 : *std::max_element(skews.begin(), skews.end());
  c.wait_share = Share(waited, step_time);

  report->stragglers.clear();
  int64_t late_total = 0;
  for (int64_t t : times_last) late_total += t;
  const int64_t mean_wall = wall / static_cast<int64_t>(ranks.size());
  for (size_t r = 0; r < ranks.size(); ++r) {
    if (times_last[r] == 0 ||
        BinomialTail(late_total, times_last[r], 1.0 / static_cast<double>(ranks.size())) >=
            kStragglerMaxP ||
        Share(caused[r], mean_wall) < kStragglerMinShare) {
      continue;
    }
    Straggler st;
    st.rank = ranks[r].arrivals.rank;
    st.times_last = times_last[r];
    st.wait_caused_ns = caused[r];
    const CauseNs& idle = ranks[r].totals.idle_by_cause;
    const int top = TopCause(idle);
    st.before_cause = CauseName(CauseAt(top));
    st.before_share = Share(idle[top], ranks[r].totals.gpu_idle_ns);
    st.busy_share = Share(ranks[r].totals.gpu_busy_ns, ranks[r].totals.wall_ns);
    double others = 0;
    for (size_t o = 0; o < ranks.size(); ++o) {
      if (o != r) others += Share(ranks[o].totals.gpu_busy_ns, ranks[o].totals.wall_ns);
    }
    st.others_busy_share = others / static_cast<double>(ranks.size() - 1);
    report->stragglers.push_back(st);
  }
  std::sort(report->stragglers.begin(), report->stragglers.end(),
            [](const Straggler& a, const Straggler& b) { return a.wait_caused_ns > b.wait_caused_ns; });

  // q5 with every rank's numbers.
  for (Question& q : report->questions) {
    if (q.id != "q5") continue;
    const bool yes = c.comm_share >= kQ5MinCommShare || c.wait_share >= kQ5MinWaitShare;
    std::string evidence = absl::StrFormat(
        "Over %d ranks and %d collectives: communication is %.1f%% of step time, %.1f%% of it "
        "overlapped with compute; ranks wait %.1f%% of step time for the last arrival (arrival "
        "skew p50 %s, p95 %s, max %s)",
        ranks.size(), c.count, 100 * c.comm_share, 100 * c.overlap, 100 * c.wait_share,
        FormatDuration(c.skew_p50_ns), FormatDuration(c.skew_p95_ns),
        FormatDuration(c.skew_max_ns));
    if (!report->stragglers.empty()) {
      const Straggler& s = report->stragglers.front();
      absl::StrAppendFormat(&evidence, "; rank %d arrives last at %d of them, causing %s of "
                            "waiting; %s",
                            s.rank, s.times_last, FormatDuration(s.wait_caused_ns),
                            StragglerActivity(s));
    } else {
      absl::StrAppend(&evidence, "; no rank is a straggler");
    }
    if (report->clock.method == "realtime") {
      absl::StrAppendFormat(&evidence, " (hosts aligned by realtime offsets, error up to %s)",
                            FormatDuration(report->clock.error_ns));
    }
    q = {"q5", yes ? "yes" : "no", evidence};
  }
}

// ---- JSON forms ----

namespace {

nlohmann::ordered_json TotalsToJson(const Totals& t) {
  return {{"wall_ns", t.wall_ns},       {"gpu_busy_ns", t.gpu_busy_ns},
          {"gpu_idle_ns", t.gpu_idle_ns}, {"idle_by_cause", t.idle_by_cause},
          {"launches", t.launches},     {"syncs", t.syncs},
          {"busy_by_kind", {t.busy_by_kind.compute, t.busy_by_kind.copy, t.busy_by_kind.comm}}};
}

// Throws nlohmann::json::exception on a malformed object.
Totals TotalsFromJson(const nlohmann::json& t) {
  Totals out;
  out.wall_ns = t.at("wall_ns").get<int64_t>();
  out.gpu_busy_ns = t.at("gpu_busy_ns").get<int64_t>();
  out.gpu_idle_ns = t.at("gpu_idle_ns").get<int64_t>();
  out.idle_by_cause = t.at("idle_by_cause").get<CauseNs>();
  out.launches = t.at("launches").get<int64_t>();
  out.syncs = t.at("syncs").get<int64_t>();
  const auto& b = t.at("busy_by_kind");
  out.busy_by_kind = {b.at(0).get<int64_t>(), b.at(1).get<int64_t>(), b.at(2).get<int64_t>()};
  return out;
}

}  // namespace

nlohmann::ordered_json ArrivalsToJson(const RankArrivals& a) {
  nlohmann::ordered_json j;
  j["schema"] = "stallscope.arrivals/1";
  j["rank"] = a.rank;
  j["file"] = a.file;
  j["host"] = a.host;
  j["pid"] = a.pid;
  j["device"] = a.device;
  j["realtime_offset_ns"] = a.realtime_offset_ns;
  j["offset_drift_ns"] = a.offset_drift_ns;
  const TraceIdentity& t = a.trace;
  j["trace"] = {{"host", t.host},
                {"pid", t.pid},
                {"start_mono_ns", t.start_mono_ns},
                {"last_clock_ns", t.last_clock_ns},
                {"ended_cleanly", t.ended_cleanly},
                {"rank_known", t.rank_known},
                {"rank", t.rank},
                {"world_size", t.world_size}};
  auto& v = j["arrivals"] = nlohmann::ordered_json::array();
  for (const Arrival& x : a.arrivals) {
    v.push_back({x.comm, x.seq, x.arrival_ns, x.end_ns, x.bytes, x.kind});
  }
  return j;
}

absl::StatusOr<RankArrivals> ArrivalsFromJson(const nlohmann::json& j) {
  try {
    if (j.at("schema") != "stallscope.arrivals/1") {
      return absl::InvalidArgumentError("not a stallscope.arrivals/1 document");
    }
    RankArrivals a;
    a.rank = j.at("rank").get<int32_t>();
    a.file = j.at("file").get<std::string>();
    a.host = j.at("host").get<std::string>();
    a.pid = j.at("pid").get<uint32_t>();
    a.device = j.at("device").get<uint32_t>();
    a.realtime_offset_ns = j.at("realtime_offset_ns").get<int64_t>();
    a.offset_drift_ns = j.at("offset_drift_ns").get<int64_t>();
    const auto& t = j.at("trace");
    a.trace.file = a.file;
    a.trace.host = t.at("host").get<std::string>();
    a.trace.pid = t.at("pid").get<uint32_t>();
    a.trace.start_mono_ns = t.at("start_mono_ns").get<uint64_t>();
    a.trace.last_clock_ns = t.at("last_clock_ns").get<uint64_t>();
    a.trace.ended_cleanly = t.at("ended_cleanly").get<bool>();
    a.trace.rank_known = t.at("rank_known").get<bool>();
    a.trace.rank = t.at("rank").get<int32_t>();
    a.trace.world_size = t.at("world_size").get<int32_t>();
    for (const auto& x : j.at("arrivals")) {
      a.arrivals.push_back({x.at(0).get<uint64_t>(), x.at(1).get<uint64_t>(),
                            x.at(2).get<int64_t>(), x.at(3).get<int64_t>(),
                            x.at(4).get<uint64_t>(), x.at(5).get<uint8_t>()});
    }
    return a;
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrFormat("bad arrivals document: %s", e.what()));
  }
}

nlohmann::ordered_json LastArrivalsToJson(const LastArrivals& last) {
  std::vector<std::tuple<uint64_t, uint64_t, int64_t, int32_t>> rows;
  for (const auto& [key, v] : last.instances) rows.emplace_back(key.first, key.second, v.last_ns, v.ranks);
  std::sort(rows.begin(), rows.end());
  nlohmann::ordered_json j;
  j["schema"] = "stallscope.last-arrivals/1";
  j["one_host"] = last.one_host;
  auto& v = j["instances"] = nlohmann::ordered_json::array();
  for (const auto& [comm, seq, ns, n] : rows) v.push_back({comm, seq, ns, n});
  return j;
}

absl::StatusOr<LastArrivals> LastArrivalsFromJson(const nlohmann::json& j) {
  try {
    if (j.at("schema") != "stallscope.last-arrivals/1") {
      return absl::InvalidArgumentError("not a stallscope.last-arrivals/1 document");
    }
    LastArrivals last;
    last.one_host = j.at("one_host").get<bool>();
    for (const auto& x : j.at("instances")) {
      last.instances[std::make_pair(x.at(0).get<uint64_t>(), x.at(1).get<uint64_t>())] = {
          x.at(2).get<int64_t>(), x.at(3).get<int32_t>()};
    }
    return last;
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrFormat("bad last-arrivals document: %s", e.what()));
  }
}

nlohmann::ordered_json RankSummaryToJson(const RankSummary& s) {
  nlohmann::ordered_json j;
  j["schema"] = "stallscope.rank-summary/1";
  j["path"] = s.path;
  j["arrivals"] = ArrivalsToJson(s.arrivals);
  j["totals"] = TotalsToJson(s.totals);
  const ProcessSummary& p = s.process;
  j["process"] = {{"file", p.file}, {"pid", p.pid}, {"host", p.host}, {"steps", p.steps},
                  {"device_ops", p.device_ops}, {"api_calls", p.api_calls},
                  {"totals", TotalsToJson(p.totals)}};
  j["steps"] = s.steps;
  j["step_time_ns"] = s.step_time_ns;
  j["start_ns"] = s.start_ns;
  j["end_ns"] = s.end_ns;
  j["waited_ns"] = s.waited_ns;
  j["waited_in_steps_ns"] = s.waited_in_steps_ns;
  j["comm_ns"] = s.comm_ns;
  j["compute_during_comm_ns"] = s.compute_during_comm_ns;
  j["per_step"] = {{"time_ns", s.step_time_per_step_ns},
                   {"comm_ns", s.step_comm_ns},
                   {"overlap_ns", s.step_overlap_ns},
                   {"waited_ns", s.step_waited_ns}};
  j["analyzed"] = s.analyzed;
  return j;
}

absl::StatusOr<RankSummary> RankSummaryFromJson(const nlohmann::json& j) {
  try {
    if (j.at("schema") != "stallscope.rank-summary/1") {
      return absl::InvalidArgumentError("not a stallscope.rank-summary/1 document");
    }
    RankSummary s;
    s.path = j.at("path").get<std::string>();
    auto a = ArrivalsFromJson(j.at("arrivals"));
    if (!a.ok()) return a.status();
    s.arrivals = std::move(*a);
    s.totals = TotalsFromJson(j.at("totals"));
    const auto& p = j.at("process");
    s.process.file = p.at("file").get<std::string>();
    s.process.pid = p.at("pid").get<uint32_t>();
    s.process.host = p.at("host").get<std::string>();
    s.process.steps = p.at("steps").get<int>();
    s.process.device_ops = p.at("device_ops").get<int64_t>();
    s.process.api_calls = p.value("api_calls", int64_t{0});
    s.process.totals = TotalsFromJson(p.at("totals"));
    s.steps = j.at("steps").get<int>();
    s.step_time_ns = j.at("step_time_ns").get<int64_t>();
    s.start_ns = j.at("start_ns").get<int64_t>();
    s.end_ns = j.at("end_ns").get<int64_t>();
    s.waited_ns = j.at("waited_ns").get<std::vector<int64_t>>();
    s.waited_in_steps_ns = j.at("waited_in_steps_ns").get<int64_t>();
    s.comm_ns = j.at("comm_ns").get<int64_t>();
    s.compute_during_comm_ns = j.at("compute_during_comm_ns").get<int64_t>();
    const auto& ps = j.at("per_step");
    s.step_time_per_step_ns = ps.at("time_ns").get<std::vector<int64_t>>();
    s.step_comm_ns = ps.at("comm_ns").get<std::vector<int64_t>>();
    s.step_overlap_ns = ps.at("overlap_ns").get<std::vector<int64_t>>();
    s.step_waited_ns = ps.at("waited_ns").get<std::vector<int64_t>>();
    s.analyzed = j.at("analyzed").get<bool>();
    return s;
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrFormat("bad rank-summary document: %s", e.what()));
  }
}

}  // namespace stallscope::analyzer
