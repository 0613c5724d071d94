// Tick conversion, sorting, correlation join and NVTX range building for the
// timeline model (see timeline.h).
#include "analyzer/model/timeline.h"

#include <malloc.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <utility>

#include "absl/strings/str_format.h"

namespace stallscope::analyzer {

std::string_view Timeline::String(uint32_t id) const {
  if (id == 0) return {};
  auto it = strings.find(id);
  return it == strings.end() ? std::string_view() : std::string_view(it->second);
}

Frame Timeline::PythonFrame(size_t word) const {
  const std::string_view s = String(static_cast<uint32_t>(stack_words[word]));
  const size_t tab = s.find('\t');
  Frame f;
  f.file = std::string(s.substr(0, tab));
  f.function = tab == std::string_view::npos ? "<python>" : std::string(s.substr(tab + 1));
  f.line = static_cast<int>(stack_words[word + 1]);
  f.module = "python";
  return f;
}

const ApiInfo& Timeline::UnknownApi() {
  static const ApiInfo* const kUnknown = new ApiInfo{"<unknown api>", {}, 0};
  return *kUnknown;
}

void KeepFreedMemory() {
  mallopt(M_MMAP_MAX, 0);
  mallopt(M_TRIM_THRESHOLD, INT32_MAX);
}

void PopulatePages(void* data, size_t bytes) {
#ifdef MADV_POPULATE_WRITE
  if (bytes < (size_t{1} << 20)) return;
  static const auto kPage = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  // Whole pages inside the range only: the pages at its edges may hold
  // other allocations (writing is harmless, but they are not ours to map).
  const auto begin = (reinterpret_cast<uintptr_t>(data) + kPage - 1) & ~(kPage - 1);
  const auto end = (reinterpret_cast<uintptr_t>(data) + bytes) & ~(kPage - 1);
  if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_POPULATE_WRITE);
#else
  (void)data;
  (void)bytes;
#endif
}

namespace {

// Makes a flat id vector long enough to hold `index` (below `limit`): to its
// reserved size first (no copy), then doubling, never past `limit`; new
// slots get `fill`.
template <typename T>
void GrowToHold(std::vector<T>* v, uint64_t index, uint64_t limit, T fill) {
  if (index < v->size()) return;
  v->resize(std::min<uint64_t>(std::max<uint64_t>({index + 1, v->capacity(), 2 * v->size()}), limit),
            fill);
}

// A flat vector `v` of ids from `*base` (v[i] is id *base + i), at most
// `limit` long: when `id` is below the base and the vector can reach down
// to it, moves the base down (by at least 1024, as far as 0) and fills the
// new front with `fill`. False when `id` stays below the base (it belongs
// in the hash map beside the vector).
template <typename T>
bool MoveBaseDown(std::vector<T>* v, uint64_t* base, uint64_t id, uint64_t limit, T fill) {
  if (id >= *base) return true;
  const uint64_t need = *base - id;
  if (v->size() + need > limit) return false;
  const uint64_t by = std::min<uint64_t>({*base, std::max<uint64_t>(need, 1024), limit - v->size()});
  v->insert(v->begin(), by, fill);
  *base -= by;
  return true;
}

// Per-key counts in `list`, in order of each key's first appearance: the
// entry of a key is looked up in a hash index only when the key differs
// from the previous one (consecutive records mostly share it).
template <typename Entry>
class CountsByKey {
 public:
  CountsByKey(std::vector<Entry>* list, uint32_t Entry::*key) : list_(list), key_(key) {
    list_->clear();
  }
  Entry& For(uint32_t k) {
    if (current_ >= list_->size() || (*list_)[current_].*key_ != k) {
      current_ = index_.try_emplace(k, list_->size()).first->second;
      if (current_ == list_->size()) {
        Entry e{};
        e.*key_ = k;
        list_->push_back(e);
      }
    }
    return (*list_)[current_];
  }

 private:
  std::vector<Entry>* list_;
  uint32_t Entry::*key_;
  absl::flat_hash_map<uint32_t, size_t> index_;
  size_t current_ = 0;
};

}  // namespace

void CorrelationMap::Expect(uint64_t expected) {
  limit_ = std::min<uint64_t>(4 * expected + 1024, uint64_t{1} << 32);
  dense_.reserve(std::min<uint64_t>(expected + 1024, limit_));
  PopulateCapacity(&dense_);
}

void CorrelationMap::SetSlow(uint32_t correlation, uint64_t external) {
  ++records_;
  // From the first id set, or 0 when that is inside the vector's reach (a
  // whole file's, from 1), as ExternalIndex's threads.
  if (records_ == 1 && dense_.empty()) base_ = correlation < limit_ ? 0 : correlation;
  if (!MoveBaseDown(&dense_, &base_, correlation, limit_, uint64_t{0})) {
    sparse_[correlation] = external;
    return;
  }
  const uint64_t at = correlation - base_;
  if (at < dense_.size()) {
    dense_[at] = external;
  } else if (at < limit_) {
    GrowToHold(&dense_, at, limit_, uint64_t{0});
    dense_[at] = external;
  } else {
    sparse_[correlation] = external;
  }
}

void CorrelationMap::Clear() {
  records_ = 0;
  base_ = 0;
  std::vector<uint64_t>().swap(dense_);
  absl::flat_hash_map<uint32_t, uint64_t>().swap(sparse_);
}

void ExternalIndex::Expect(uint64_t calls) {
  limit_ = std::min<uint64_t>(4 * calls + 1024, uint64_t{1} << 31);
  expected_ = calls;
}

void ExternalIndex::SetSlow(uint64_t external, uint32_t call) {
  const uint64_t high = external >> kSeqBits;
  const uint64_t seq = external & kSeqMask;
  Thread* th = nullptr;
  for (Thread& x : threads_) {
    if (x.high == high) {
      th = &x;
      break;
    }
  }
  if (th == nullptr && threads_.size() < kMaxThreads) {
    th = &threads_.emplace_back();
    th->high = high;
    // From the first sequence set, or 0 when that is inside the vector's
    // reach (a whole file's, from 1).
    th->base = seq < limit_ ? 0 : seq;
    // Most calls come from one thread: room for all of them there.
    if (threads_.size() == 1) th->calls.reserve(std::min(expected_ + 1, limit_));
  }
  if (th == nullptr || !MoveBaseDown(&th->calls, &th->base, seq, limit_, -1) || seq - th->base >= limit_) {
    sparse_[external] = static_cast<int32_t>(call);
    return;
  }
  GrowToHold(&th->calls, seq - th->base, limit_, -1);
  th->calls[seq - th->base] = static_cast<int32_t>(call);
  last_ = static_cast<size_t>(th - threads_.data());
}

void ExternalIndex::Remap(const std::vector<uint32_t>& to) {
  for (Thread& th : threads_) {
    for (int32_t& c : th.calls) {
      if (c >= 0) c = static_cast<int32_t>(to[static_cast<size_t>(c)]);
    }
  }
  for (auto& [external, c] : sparse_) c = static_cast<int32_t>(to[static_cast<size_t>(c)]);
}

void ExternalIndex::Clear() {
  std::vector<Thread>().swap(threads_);
  last_ = 0;
  absl::flat_hash_map<uint64_t, int32_t>().swap(sparse_);
}

TickConverter::TickConverter(std::vector<trace::ClockRecord> pairs,
                             std::vector<Diagnostic>* diags) {
  std::sort(pairs.begin(), pairs.end(),
            [](const auto& a, const auto& b) { return a.ticks < b.ticks; });
  pairs.erase(std::unique(pairs.begin(), pairs.end(),
                          [](const auto& a, const auto& b) {
                            return a.ticks == b.ticks;
                          }),
              pairs.end());
  if (pairs.empty()) {
    AddDiagnostic(diags, DiagId::kClockMissing, 1);
    segments_.push_back({0, 0, 1.0});
    return;
  }
  if (pairs.size() == 1) {
    AddDiagnostic(diags, DiagId::kClockSinglePair, 1,
                  "only one tick/clock pair: ticks assumed to be nanoseconds "
                  "offset to CLOCK_MONOTONIC at that pair");
    segments_.push_back({pairs[0].ticks, static_cast<int64_t>(pairs[0].mono_ns), 1.0});
    return;
  }
  for (size_t i = 0; i + 1 < pairs.size(); ++i) {
    double dt = static_cast<double>(pairs[i + 1].ticks - pairs[i].ticks);
    double dn = static_cast<double>(static_cast<int64_t>(pairs[i + 1].mono_ns -
                                                         pairs[i].mono_ns));
    segments_.push_back({pairs[i].ticks, static_cast<int64_t>(pairs[i].mono_ns),
                         dn / dt});
  }
}

int64_t TickConverter::ToNs(uint64_t ticks) const {
  // Last segment starting at or before `ticks`; the first one extrapolates
  // backwards, the last one forwards.
  auto it = std::upper_bound(
      segments_.begin(), segments_.end(), ticks,
      [](uint64_t t, const Segment& s) { return t < s.ticks; });
  return Convert(it == segments_.begin() ? *it : *(it - 1), ticks);
}

int64_t TickConverter::ToNsNear(uint64_t ticks, size_t* hint) const {
  size_t h = *hint < segments_.size() ? *hint : 0;
  // Segment h covers [start of h, start of h + 1); the first extends down,
  // the last up.
  auto covers = [&](size_t k) {
    return (k == 0 || segments_[k].ticks <= ticks) &&
           (k + 1 == segments_.size() || ticks < segments_[k + 1].ticks);
  };
  if (!covers(h)) {
    if (h + 1 < segments_.size() && covers(h + 1)) {
      ++h;
    } else {
      auto it = std::upper_bound(segments_.begin(), segments_.end(), ticks,
                                 [](uint64_t t, const Segment& s) { return t < s.ticks; });
      h = it == segments_.begin() ? 0 : static_cast<size_t>(it - segments_.begin()) - 1;
    }
  }
  *hint = h;
  return Convert(segments_[h], ticks);
}

int64_t TickConverter::Convert(const Segment& s, uint64_t ticks) const {
  auto delta = static_cast<int64_t>(ticks - s.ticks);
  const double ns = static_cast<double>(s.ns) + static_cast<double>(delta) * s.slope;
  if (!(ns > 0)) return 0;  // also NaN
  if (ns >= static_cast<double>(kMaxTimeNs)) return kMaxTimeNs;
  // std::llround (half away from zero) without its library call, twice per
  // call read: the truncation is a double's value, so the fraction is
  // exact.
  const auto whole = static_cast<int64_t>(ns);
  return ns - static_cast<double>(whole) >= 0.5 ? whole + 1 : whole;
}

namespace {

// Converts the ticks of NVTX events, NCCL records and CPU samples (calls
// are converted in FinalizeTimeline's pass over them).
void ConvertOtherTicks(Timeline* t, const TickConverter& conv) {
  size_t hint = 0;
  for (NvtxEvent& e : t->nvtx) e.ns = conv.ToNsNear(static_cast<uint64_t>(e.ns), &hint);
  for (NcclCall& n : t->nccl) n.enter_ns = conv.ToNsNear(static_cast<uint64_t>(n.enter_ns), &hint);
  for (DeviceTimingTurn& d : t->device_timing) d.ns = conv.ToNsNear(static_cast<uint64_t>(d.ns), &hint);
  for (auto& [tid, samples] : t->cpu)
    for (CpuSample& c : samples) c.ns = conv.ToNsNear(static_cast<uint64_t>(c.ns), &hint);
}

void Join(Timeline* t) {
  const CorrelationMap& to_external = t->correlations;
  const ExternalIndex& by_external = t->by_external;
  const bool fallback = t->correlations.empty() && !t->ops.empty() && !t->correlations_elsewhere;
  uint64_t unjoined = 0;
  // Ops are counted per device in the same pass.
  CountsByKey<DeviceOpCount> per_device(&t->ops_per_device, &DeviceOpCount::device);
  for (size_t i = 0; i < t->ops.size(); ++i) {
    DeviceOp& op = t->ops[i];
    DeviceOpCount& count = per_device.For(op.device);
    ++count.ops;
    count.nccl += op.kind == trace::DeviceOpKind::kNccl;
    const uint32_t correlation = t->op_info[i].correlation;
    const uint64_t external = fallback ? correlation : to_external.Get(correlation);
    const int32_t call = external != 0 ? by_external.Get(external) : -1;
    if (call < 0) {
      ++unjoined;
      continue;
    }
    op.call = call;
    CallInfo& c = t->call_info[call];
    ++c.op_count;
    c.last_op_end_ns = std::max(c.last_op_end_ns, op.end_ns);
    if (!t->pageable_copy_ops.empty() && op.kind == trace::DeviceOpKind::kMemcpy &&
        t->pageable_copy_ops.contains(correlation)) {
      t->pageable_copy_calls.insert(call);
    }
  }
  t->pageable_copy_ops.clear();
  if (fallback) {
    AddDiagnostic(&t->diagnostics, DiagId::kCorrelationFallback, 1);
  }
  // Joined: the maps are not needed any more.
  t->correlations.Clear();
  t->by_external.Clear();
  AddUncorrelatedOps(&t->diagnostics, unjoined, t->ops.size());
}

void BuildRanges(Timeline* t) {
  std::stable_sort(t->nvtx.begin(), t->nvtx.end(),
                   [](const NvtxEvent& a, const NvtxEvent& b) { return a.ns < b.ns; });
  NvtxPairer pairer;
  for (const NvtxEvent& e : t->nvtx) pairer.Add(e, &t->ranges);
  const uint64_t unmatched = pairer.Unmatched();
  if (unmatched > 0) AddDiagnostic(&t->diagnostics, DiagId::kUnmatchedNvtx, unmatched);
  SortRanges(&t->ranges);
}

// Sorts a vector made of sorted runs (one per chunk: each thread's records
// are in order) by merging neighbouring runs: O(n log runs), stable.
// `bounds` holds the index where each run starts (0 first).
template <typename T, typename Less>
void MergeRuns(std::vector<T>* v, std::vector<size_t> bounds, Less less) {
  if (bounds.size() <= 1) return;
  bounds.push_back(v->size());
  while (bounds.size() > 2) {
    std::vector<size_t> next{0};
    for (size_t i = 0; i + 2 < bounds.size(); i += 2) {
      std::inplace_merge(v->begin() + static_cast<std::ptrdiff_t>(bounds[i]),
                         v->begin() + static_cast<std::ptrdiff_t>(bounds[i + 1]),
                         v->begin() + static_cast<std::ptrdiff_t>(bounds[i + 2]), less);
      next.push_back(bounds[i + 2]);
    }
    if (next.back() != v->size()) next.push_back(v->size());
    bounds = std::move(next);
  }
}

// Puts v in the order `from` gives (v[k] becomes the old v[from[k]]), in
// place: each cycle of the permutation is walked once.
template <typename T>
void Permute(std::vector<T>* v, const std::vector<uint32_t>& from) {
  std::vector<bool> done(from.size(), false);
  for (size_t k = 0; k < from.size(); ++k) {
    if (done[k] || from[k] == k) continue;
    T first = std::move((*v)[k]);
    size_t j = k;
    while (from[j] != k) {
      (*v)[j] = std::move((*v)[from[j]]);
      done[j] = true;
      j = from[j];
    }
    (*v)[j] = std::move(first);
    done[j] = true;
  }
}

// The order that sorts `v` by `key` (stable) when v is sorted runs
// starting at `runs`: from[k] is the index of the record that goes to k.
// Empty when already sorted (one run, the common case, costs nothing).
template <typename T>
std::vector<uint32_t> SortOrder(const std::vector<T>& v, int64_t T::*key,
                                const std::vector<size_t>& runs) {
  if (runs.size() <= 1) return {};
  std::vector<std::pair<int64_t, uint32_t>> keys(v.size());
  for (size_t i = 0; i < keys.size(); ++i) keys[i] = {v[i].*key, static_cast<uint32_t>(i)};
  MergeRuns(&keys, runs, [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<uint32_t> from(keys.size());
  for (size_t k = 0; k < keys.size(); ++k) from[k] = keys[k].second;
  return from;
}

// Sorts the calls by enter (stable), their CallInfo alongside; `runs` as
// for SortOrder.
void SortCalls(Timeline* t, const std::vector<size_t>& runs) {
  const std::vector<uint32_t> from = SortOrder(t->calls, &ApiCall::enter_ns, runs);
  if (from.empty()) return;
  Permute(&t->calls, from);
  Permute(&t->call_info, from);
  std::vector<uint32_t> to(from.size());  // call i is now call to[i]
  for (size_t k = 0; k < from.size(); ++k) to[from[k]] = static_cast<uint32_t>(k);
  t->by_external.Remap(to);
}

// Sorts the ops by start (stable), their OpInfo alongside; `runs` as for
// SortOrder.
void SortOps(Timeline* t, const std::vector<size_t>& runs) {
  const std::vector<uint32_t> from = SortOrder(t->ops, &DeviceOp::start_ns, runs);
  if (from.empty()) return;
  Permute(&t->ops, from);
  Permute(&t->op_info, from);
}

// The recorder rewrites the whole module map when modules change: the last
// map wins; modules of earlier maps are kept where nothing newer overlaps
// them, so pcs captured before a dlclose still symbolize.
void MergeModuleMaps(Timeline* t) {
  if (t->module_maps <= 1) return;
  std::vector<Module> all = std::move(t->modules);
  std::stable_sort(all.begin(), all.end(), [](const Module& a, const Module& b) {
    return a.generation > b.generation;
  });
  // Union of the ranges of newer maps: disjoint [low, high) keyed by low.
  std::map<uint64_t, uint64_t> covered;
  auto overlaps = [&covered](uint64_t low, uint64_t high) {
    auto it = covered.upper_bound(low);
    if (it != covered.begin() && std::prev(it)->second > low) return true;
    return it != covered.end() && it->first < high;
  };
  auto cover = [&covered](uint64_t low, uint64_t high) {
    auto it = covered.upper_bound(low);
    if (it != covered.begin() && std::prev(it)->second >= low) --it;
    while (it != covered.end() && it->first <= high) {
      low = std::min(low, it->first);
      high = std::max(high, it->second);
      it = covered.erase(it);
    }
    covered.emplace(low, high);
  };
  std::vector<Module> kept;
  for (size_t i = 0; i < all.size();) {
    size_t j = i;
    const size_t first_kept = kept.size();
    for (; j < all.size() && all[j].generation == all[i].generation; ++j) {
      if (!overlaps(all[j].low, all[j].high)) kept.push_back(std::move(all[j]));
    }
    for (size_t k = first_kept; k < kept.size(); ++k) {
      if (kept[k].low < kept[k].high) cover(kept[k].low, kept[k].high);
    }
    i = j;
  }
  std::sort(kept.begin(), kept.end(),
            [](const Module& a, const Module& b) { return a.low < b.low; });
  t->modules = std::move(kept);
}

// Each NCCL record to its call: same thread, same enter time.
void JoinNccl(Timeline* t) {
  if (t->nccl.empty()) return;
  std::stable_sort(t->nccl.begin(), t->nccl.end(),
                   [](const NcclCall& a, const NcclCall& b) { return a.enter_ns < b.enter_ns; });
  absl::flat_hash_map<std::pair<uint32_t, int64_t>, int32_t> by_key;
  for (size_t i = 0; i < t->calls.size(); ++i) {
    const ApiCall& c = t->calls[i];
    if (t->Api(c.api).category == trace::ApiCategory::kNccl)
      by_key.try_emplace({c.tid, c.enter_ns}, static_cast<int32_t>(i));
  }
  for (NcclCall& n : t->nccl) {
    auto it = by_key.find({n.tid, n.enter_ns});
    n.call = it == by_key.end() ? -1 : it->second;
  }
}

}  // namespace

const char* NcclKindName(trace::NcclKind kind) {
  using K = trace::NcclKind;
  switch (kind) {
    case K::kOther: break;
    case K::kAllReduce: return "all_reduce";
    case K::kBroadcast: return "broadcast";
    case K::kReduce: return "reduce";
    case K::kAllGather: return "all_gather";
    case K::kReduceScatter: return "reduce_scatter";
    case K::kAllToAll: return "all_to_all";
    case K::kSend: return "send";
    case K::kRecv: return "recv";
    case K::kGroupStart: return "group_start";
    case K::kGroupEnd: return "group_end";
    case K::kCommInit: return "comm_init";
    case K::kCommSplit: return "comm_split";
    case K::kCommDestroy: return "comm_destroy";
    case K::kCommAbort: return "comm_abort";
    case K::kCommFinalize: return "comm_finalize";
  }
  return "other";
}

namespace {

// Converts each record's start and end (`convert`), clamps them into
// [0, kMaxTimeNs] with the end at least the start (counting each fix in
// `invalid`), and returns where the runs sorted by start begin (0 first).
template <typename T, typename Convert, typename Visit>
std::vector<size_t> ClampAndFindRuns(std::vector<T>* v, int64_t T::*start, int64_t T::*end,
                                     uint64_t* invalid, Convert convert, Visit visit) {
  std::vector<size_t> runs{0};
  int64_t prev = 0;
  for (size_t i = 0; i < v->size(); ++i) {
    T& r = (*v)[i];
    visit(r);
    convert(&(r.*start));
    convert(&(r.*end));
    ClampTime(&(r.*start), invalid);
    ClampTime(&(r.*end), invalid);
    if (r.*end < r.*start) {
      r.*end = r.*start;
      ++*invalid;
    }
    if (i > 0 && r.*start < prev) runs.push_back(i);
    prev = r.*start;
  }
  return runs;
}

}  // namespace

void NvtxPairer::Add(const NvtxEvent& e, std::vector<NvtxRange>* out) {
  switch (e.type) {
    case trace::NvtxType::kPush:
      pushed_[e.tid].push_back(e);
      break;
    case trace::NvtxType::kPop: {
      auto& stack = pushed_[e.tid];
      if (stack.empty()) {
        ++unmatched_;
        break;
      }
      const NvtxEvent b = stack.back();
      stack.pop_back();
      out->push_back({b.ns, std::max(e.ns, b.ns), e.tid, b.name, static_cast<uint32_t>(stack.size()), false, 0});
      break;
    }
    case trace::NvtxType::kStart:
      started_[{e.domain, e.range_id}] = e;
      break;
    case trace::NvtxType::kEnd: {
      auto it = started_.find(std::make_pair(e.domain, e.range_id));
      if (it == started_.end()) {
        ++unmatched_;
        break;
      }
      const NvtxEvent b = it->second;
      started_.erase(it);
      out->push_back({b.ns, std::max(e.ns, b.ns), b.tid, b.name, 0, false, 0});
      break;
    }
    case trace::NvtxType::kStepBegin:
      steps_[e.range_id] = e;
      break;
    case trace::NvtxType::kStepEnd: {
      auto it = steps_.find(e.range_id);
      if (it == steps_.end()) {
        ++unmatched_;
        break;
      }
      const NvtxEvent b = it->second;
      steps_.erase(it);
      out->push_back({b.ns, std::max(e.ns, b.ns), b.tid, b.name, 0, true, e.range_id});
      break;
    }
    default:
      break;  // marks carry no range
  }
}

uint64_t NvtxPairer::Unmatched() const {
  uint64_t n = unmatched_ + started_.size() + steps_.size();
  for (const auto& [tid, stack] : pushed_) n += stack.size();
  return n;
}

void SortRanges(std::vector<NvtxRange>* ranges) {
  std::stable_sort(ranges->begin(), ranges->end(), [](const NvtxRange& a, const NvtxRange& b) {
    return a.start_ns != b.start_ns ? a.start_ns < b.start_ns : a.end_ns > b.end_ns;
  });
}

void AddUncorrelatedOps(std::vector<Diagnostic>* diags, uint64_t unjoined, uint64_t ops) {
  if (unjoined == 0) return;
  AddDiagnostic(diags, DiagId::kUncorrelatedDeviceOps, unjoined,
                absl::StrFormat("%d of %d device ops have no submitting host call (no matching "
                                "correlation)",
                                unjoined, ops));
}

void SortOpsByStart(Timeline* t) {
  std::vector<size_t> runs{0};
  for (size_t i = 1; i < t->ops.size(); ++i) {
    if (t->ops[i].start_ns < t->ops[i - 1].start_ns) runs.push_back(i);
  }
  SortOps(t, runs);
}

void FinalizeTimeline(Timeline* t) {
  MergeModuleMaps(t);
  std::optional<TickConverter> conv;
  if (!t->ticks_are_ns) {
    conv.emplace(t->clocks, &t->diagnostics);
    ConvertOtherTicks(t, *conv);
  }
  uint64_t invalid = 0;
  // Times outside [0, kMaxTimeNs] and ends before starts are clamped.
  auto clamp = [&invalid](int64_t* v) { ClampTime(v, &invalid); };
  // One pass over the calls (and one over the ops) converts, clamps and
  // finds the sorted runs.
  size_t hint = 0;
  // The same pass counts each thread's calls and launches.
  CountsByKey<ThreadCallCount> per_thread(&t->calls_per_thread, &ThreadCallCount::tid);
  auto count = [&](const ApiCall& c) {
    ThreadCallCount& n = per_thread.For(c.tid);
    ++n.calls;
    n.launches += t->Api(c.api).category == trace::ApiCategory::kLaunch;
  };
  std::vector<size_t> call_runs = ClampAndFindRuns(
      &t->calls, &ApiCall::enter_ns, &ApiCall::exit_ns, &invalid,
      [&](int64_t* v) {
        if (conv) *v = conv->ToNsNear(static_cast<uint64_t>(*v), &hint);
      },
      count);
  std::vector<size_t> op_runs = ClampAndFindRuns(&t->ops, &DeviceOp::start_ns, &DeviceOp::end_ns,
                                                 &invalid, [](int64_t*) {}, [](const DeviceOp&) {});
  for (NvtxEvent& e : t->nvtx) clamp(&e.ns);
  for (NcclCall& n : t->nccl) clamp(&n.enter_ns);
  for (DeviceTimingTurn& d : t->device_timing) clamp(&d.ns);
  std::stable_sort(t->device_timing.begin(), t->device_timing.end(),
                   [](const DeviceTimingTurn& a, const DeviceTimingTurn& b) { return a.ns < b.ns; });
  for (auto& [tid, samples] : t->cpu) {
    for (CpuSample& c : samples) {
      clamp(&c.ns);
      clamp(&c.cpu_ns);
    }
    std::stable_sort(samples.begin(), samples.end(),
                     [](const CpuSample& a, const CpuSample& b) { return a.ns < b.ns; });
  }
  if (invalid > 0) AddDiagnostic(&t->diagnostics, DiagId::kInvalidRecords, invalid);
  SortCalls(t, call_runs);
  SortOps(t, op_runs);
  Join(t);
  JoinNccl(t);
  BuildRanges(t);
  if (t->ops.empty()) AddDiagnostic(&t->diagnostics, DiagId::kNoDeviceOps, 1);
}

HostGapSplit SplitHostGap(const Timeline& t, uint32_t tid, int64_t e, int64_t s) {
  auto it = t.cpu.find(tid);
  if (it == t.cpu.end() || e < 0) return {};
  const std::vector<CpuSample>& v = it->second;
  auto later = [](int64_t x, const CpuSample& c) { return x < c.ns; };
  auto i1 = std::upper_bound(v.begin(), v.end(), s, later);  // first after s
  auto i0 = std::upper_bound(v.begin(), v.end(), e, later);  // first after e
  if (i1 == i0 || i0 == v.begin()) return {};  // no sample in (e, s] or none before
  const CpuSample& s1 = *std::prev(i1);
  const CpuSample& s0 = *std::prev(i0);
  const int64_t cpu = std::max<int64_t>(0, s1.cpu_ns - s0.cpu_ns);
  const int64_t stretch = e - s0.ns;  // S0 is at or before e
  HostGapSplit g;
  g.on = std::clamp(cpu - stretch, int64_t{0}, s1.ns - e);
  if (s0.run_delay_ns >= 0 && s1.run_delay_ns >= 0) {
    // The stretch's wall time the CPU clock did not cover was spent
    // waiting for a CPU first: that much of the delay stays before e.
    const int64_t delay = std::max<int64_t>(0, s1.run_delay_ns - s0.run_delay_ns);
    const int64_t before = std::min(delay, std::max<int64_t>(0, stretch - cpu));
    g.preempted = std::clamp(delay - before, int64_t{0}, s1.ns - e - g.on);
    g.preempted_most = std::clamp(delay, int64_t{0}, s1.ns - e - g.on);
  }
  return g;
}

}  // namespace stallscope::analyzer
