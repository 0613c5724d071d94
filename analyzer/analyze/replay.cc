// What-if replay (see replay.h).
#include "analyzer/analyze/replay.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string_view>

#include "absl/container/flat_hash_map.h"

namespace stallscope::analyzer {
namespace {

constexpr int64_t kNone = INT64_MIN;

// One outermost call of a thread with the calls nested in it (a runtime
// call and the driver calls it made).
struct Unit {
  uint32_t tid = 0;
  int64_t enter = 0, exit = 0;
  int32_t prev = -1;  // the thread's previous unit
  int32_t next = -1;  // the thread's next unit
  bool sync = false;     // it (or a call in it) waits for the device
  bool removed = false;  // that wait is dropped
  bool own_ops = false;  // it submitted ops itself (a read-back waits for those)
  int32_t stream = -1;   // a stream synchronize's stream (index into streams), -1: the device
  // An event synchronize's op: the last op submitted on the event's stream
  // before the event's latest record (-1: not an event synchronize, or its
  // event's record is not in the trace: the device's work instead).
  int32_t event_op = -1;
};

// Items grouped by a key in [0, groups), in item order: group g's items are
// items[begin[g], begin[g + 1]). Items whose key is -1 are left out.
struct Groups {
  std::vector<uint32_t> begin, items;
  template <typename KeyOf>
  Groups(size_t groups, size_t n, KeyOf key_of) : begin(groups + 1, 0) {
    for (size_t i = 0; i < n; ++i) {
      if (const int64_t k = key_of(i); k >= 0) ++begin[k + 1];
    }
    std::partial_sum(begin.begin(), begin.end(), begin.begin());
    items.resize(begin.back());
    std::vector<uint32_t> fill(begin.begin(), begin.end() - 1);
    for (size_t i = 0; i < n; ++i) {
      if (const int64_t k = key_of(i); k >= 0) items[fill[k]++] = static_cast<uint32_t>(i);
    }
  }
};

// The latest end among the ops submitted so far, per stream and over the
// device: what a synchronizing call entered now would wait for.
struct SubmittedEnds {
  std::vector<int64_t> stream;
  int64_t device = INT64_MIN;
  explicit SubmittedEnds(size_t streams) : stream(streams, INT64_MIN) {}
  int64_t Before(int32_t s) const { return s >= 0 ? stream[s] : device; }
  void Add(int32_t s, int64_t end) {
    stream[s] = std::max(stream[s], end);
    device = std::max(device, end);
  }
};

int64_t Median(std::vector<int64_t> v, int64_t fallback) {
  if (v.empty()) return fallback;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

int64_t Scale(int64_t ns, double x) { return static_cast<int64_t>(std::llround(static_cast<double>(ns) * x)); }

// A thread's host times, old → replayed: its units' spans, and the gaps
// between them stretched as the gaps were.
class Warp {
 public:
  Warp(const std::vector<Unit>& units, const std::vector<int32_t>& first_unit,
       const std::vector<int64_t>& thread_start, const std::vector<int64_t>& enter2,
       const std::vector<int64_t>& exit2, const absl::flat_hash_map<uint32_t, int32_t>& thread_index)
      : units_(units), first_unit_(first_unit), thread_start_(thread_start), enter2_(enter2),
        exit2_(exit2), thread_index_(thread_index) {}

  int64_t Map(uint32_t tid, int64_t x) const {
    auto it = thread_index_.find(tid);
    if (it == thread_index_.end()) return x;
    // The thread's last unit that entered at or before x (units of a thread
    // are chained by `next`, in enter order; found by walking from a hint).
    int32_t u = first_unit_[it->second];
    if (u < 0) return x;
    if (x < units_[u].enter) {
      // Before the thread's first call: from its first NVTX event on, in
      // proportion to that gap's change.
      const int64_t s = thread_start_[it->second];
      if (s == INT64_MIN || x < s || units_[u].enter <= s) return x;
      return s + static_cast<int64_t>(static_cast<double>(x - s) * static_cast<double>(enter2_[u] - s) /
                                      static_cast<double>(units_[u].enter - s));
    }
    int32_t& hint = hints_[it->second];
    if (hint >= 0 && units_[hint].enter <= x) u = hint;
    while (units_[u].next >= 0 && units_[units_[u].next].enter <= x) u = units_[u].next;
    hint = u;
    const Unit& a = units_[u];
    if (x <= a.exit) return std::clamp(enter2_[u] + (x - a.enter), enter2_[u], exit2_[u]);
    if (a.next < 0) return exit2_[u] + (x - a.exit);
    const Unit& b = units_[a.next];
    const int64_t gap = b.enter - a.exit, gap2 = enter2_[a.next] - exit2_[u];
    if (gap <= 0) return exit2_[u];
    return exit2_[u] + static_cast<int64_t>(static_cast<double>(x - a.exit) * static_cast<double>(gap2) /
                                            static_cast<double>(gap));
  }
  void ResetHints() { hints_.assign(first_unit_.size(), -1); }

 private:
  const std::vector<Unit>& units_;
  const std::vector<int32_t>& first_unit_;
  const std::vector<int64_t>& thread_start_;
  const std::vector<int64_t>& enter2_;
  const std::vector<int64_t>& exit2_;
  const absl::flat_hash_map<uint32_t, int32_t>& thread_index_;
  mutable std::vector<int32_t> hints_;
};

}  // namespace

void DelaySamples::Add(const DelaySamples& other) {
  for (const auto& [ns, n] : other.host_) AddHost(ns, n);
  for (const auto& [ns, n] : other.posts_) AddPost(ns, n);
  if (other.device_any_) AddDevice(other.device_min_);
}

TypicalDelays DelaySamples::Typical() const {
  // The value at index count / 2 of the sorted samples (Median's).
  auto median = [](const absl::flat_hash_map<int64_t, int64_t>& counts, int64_t count) -> int64_t {
    if (count == 0) return 0;
    std::vector<std::pair<int64_t, int64_t>> sorted(counts.begin(), counts.end());
    std::sort(sorted.begin(), sorted.end());
    int64_t below = 0;
    for (const auto& [ns, n] : sorted) {
      below += n;
      if (below > count / 2) return ns;
    }
    return sorted.back().first;
  };
  TypicalDelays d;
  d.host_ns = std::max<int64_t>(0, median(host_, host_count_));
  d.device_min_ns = device_any_ ? std::max<int64_t>(0, device_min_) : 0;
  d.post_ns = std::max<int64_t>(0, median(posts_, post_count_));
  return d;
}

namespace {

// Replay, or with `gather` only the samples of its typical delays (of the
// counted calls) into *gather, and an empty timeline.
Timeline ReplayOrGather(const Timeline& t, const std::vector<CallClass>& classes,
                        const ReplayOptions& options, ReplayStats* stats, DelaySamples* gather) {
  ReplayStats local;
  ReplayStats& st = stats != nullptr ? *stats : local;
  st = ReplayStats{};
  // Whether what a call entering at `enter` changed is counted.
  auto counted = [&](int64_t enter) { return options.counted.Holds(enter); };
  const size_t nc = t.calls.size(), no = t.ops.size();

  // The ops of each call, in start order.
  const Groups ops_of(nc, no, [&](size_t o) -> int64_t {
    const int32_t c = t.ops[o].call;
    return c >= 0 && static_cast<size_t>(c) < nc ? c : -1;
  });
  const std::vector<uint32_t>& op_begin = ops_of.begin;
  const std::vector<uint32_t>& op_list = ops_of.items;

  // Streams: (device, CUPTI stream id) of the ops; a call's stream handle
  // (per thread for the per-thread default stream) → the stream its
  // launches' ops ran on.
  absl::flat_hash_map<uint64_t, int32_t> stream_of_op_key;
  std::vector<int32_t> op_stream(no);
  for (uint32_t o = 0; o < no; ++o) {
    const uint64_t key = (uint64_t{t.ops[o].device} << 32) | t.op_info[o].stream;
    auto [it, added] = stream_of_op_key.try_emplace(key, static_cast<int32_t>(stream_of_op_key.size()));
    op_stream[o] = it->second;
  }
  const size_t nstreams = stream_of_op_key.size();
  auto handle_key = [&](size_t c) {
    const bool per_thread = (t.Api(t.calls[c].api).flags & trace::kApiPerThread) != 0;
    const uint64_t handle = t.call_info[c].stream;
    return std::pair<uint64_t, uint32_t>(handle, handle == 0 || per_thread ? t.calls[c].tid : 0);
  };
  absl::flat_hash_map<std::pair<uint64_t, uint32_t>, int32_t> stream_of_handle;
  for (size_t c = 0; c < nc; ++c) {
    if (op_begin[c + 1] > op_begin[c]) stream_of_handle.try_emplace(handle_key(c), op_stream[op_list[op_begin[c]]]);
  }

  // Units, per thread in enter order (calls are sorted by enter).
  std::vector<Unit> units;
  std::vector<int32_t> unit_of_call(nc, -1);
  absl::flat_hash_map<uint32_t, int32_t> thread_index;  // tid → index into first/last unit
  std::vector<int32_t> first_unit, last_unit;
  for (size_t c = 0; c < nc; ++c) {
    const ApiCall& call = t.calls[c];
    auto [it, added] = thread_index.try_emplace(call.tid, static_cast<int32_t>(first_unit.size()));
    if (added) {
      first_unit.push_back(-1);
      last_unit.push_back(-1);
    }
    int32_t& last = last_unit[it->second];
    if (last >= 0 && call.enter_ns < units[last].exit) {
      unit_of_call[c] = last;  // nested in the thread's current call
      units[last].exit = std::max(units[last].exit, call.exit_ns);
    } else {
      Unit u;
      u.tid = call.tid;
      u.enter = call.enter_ns;
      u.exit = call.exit_ns;
      u.prev = last;
      const int32_t id = static_cast<int32_t>(units.size());
      if (last >= 0) units[last].next = id;
      if (first_unit[it->second] < 0) first_unit[it->second] = id;
      last = id;
      unit_of_call[c] = id;
      units.push_back(u);
    }
    Unit& u = units[unit_of_call[c]];
    const bool removed = !options.remove_wait.empty() && options.remove_wait[c];
    if (classes[c] == CallClass::kSync) {
      u.sync = true;
      u.removed = u.removed || removed;
      std::string_view name = t.Api(call.api).name;
      if (name.find("StreamSynchronize") != std::string_view::npos) {
        auto s = stream_of_handle.find(handle_key(c));
        if (s != stream_of_handle.end()) u.stream = s->second;
      }
    }
    if (op_begin[c + 1] > op_begin[c]) u.own_ops = true;
  }
  // Each thread's first NVTX event before its first call (kNone: none).
  std::vector<int64_t> thread_start(first_unit.size(), kNone);
  for (const NvtxEvent& e : t.nvtx) {
    auto it = thread_index.find(e.tid);
    if (it == thread_index.end() || first_unit[it->second] < 0) continue;
    if (e.ns < units[first_unit[it->second]].enter) {
      int64_t& s = thread_start[it->second];
      s = s == kNone ? e.ns : std::min(s, e.ns);
    }
  }
  // The leading thread: the one that waits for the device most often (the
  // training loop's; with no waits, the one with the most units). Another
  // thread's units follow the leader's clock: a helper thread (PyTorch's
  // autograd thread) is woken by the work the leader hands it.
  uint32_t leader = 0;
  {
    absl::flat_hash_map<uint32_t, std::pair<int64_t, int64_t>> weight;  // tid → (syncs, units)
    for (const Unit& u : units) {
      auto& w = weight[u.tid];
      w.first += u.sync;
      ++w.second;
    }
    std::pair<int64_t, int64_t> best{-1, -1};
    for (const auto& [tid, w] : weight) {
      if (w > best || (w == best && tid < leader)) {
        best = w;
        leader = tid;
      }
    }
    if (options.leader != 0 && weight.contains(options.leader)) leader = options.leader;
  }
  // Calls of a unit, in call order; f(call, op) for each op a unit's calls
  // submitted, in submission order.
  const Groups calls_of(units.size(), nc, [&](size_t c) -> int64_t { return unit_of_call[c]; });
  auto for_each_op = [&](size_t ui, auto f) {
    for (uint32_t m = calls_of.begin[ui]; m < calls_of.begin[ui + 1]; ++m) {
      const uint32_t c = calls_of.items[m];
      for (uint32_t k = op_begin[c]; k < op_begin[c + 1]; ++k) f(c, op_list[k]);
    }
  };

  // CUDA-graph capture: graph_head[u] is the first unit of the captured
  // stretch a later unit u belongs to (-1: none).
  std::vector<int32_t> graph_head(units.size(), -1);
  if (options.graph_node_ns >= 0) {
    const auto& windows = options.graph_windows;
    auto window_of = [&](int64_t x) -> int64_t {
      if (windows.empty()) return 0;
      auto it = std::upper_bound(windows.begin(), windows.end(), x,
                                 [](int64_t v, const std::pair<int64_t, int64_t>& w) { return v < w.first; });
      if (it == windows.begin()) return -1;
      --it;
      return x <= it->second ? it - windows.begin() : -1;
    };
    // The stream of a unit that only launches kernels, all on one stream;
    // -1 for any other unit.
    auto kernel_stream = [&](size_t ui) -> int32_t {
      const Unit& u = units[ui];
      if (u.sync || !u.own_ops) return -1;
      for (uint32_t m = calls_of.begin[ui]; m < calls_of.begin[ui + 1]; ++m) {
        if (t.Api(t.calls[calls_of.items[m]].api).category != trace::ApiCategory::kLaunch) return -1;
      }
      int32_t stream = -2;
      for_each_op(ui, [&](uint32_t, uint32_t o) {
        if (t.ops[o].kind != trace::DeviceOpKind::kKernel || (stream != -2 && stream != op_stream[o])) {
          stream = -1;
        } else if (stream == -2) {
          stream = op_stream[o];
        }
      });
      return stream < 0 ? -1 : stream;
    };
    std::vector<int32_t> run;
    auto flush = [&] {
      if (run.size() >= 2) {
        int64_t device = 0;
        for (int32_t ui : run) for_each_op(ui, [&](uint32_t, uint32_t o) { device += t.ops[o].end_ns - t.ops[o].start_ns; });
        if (options.graph_every_stretch || units[run.back()].exit - units[run.front()].enter > device) {
          for (size_t k = 1; k < run.size(); ++k) graph_head[run[k]] = run.front();
          if (counted(units[run.front()].enter)) {
            ++st.stretches_captured;
            st.launches_captured += static_cast<int64_t>(run.size() - 1);
          }
        }
      }
      run.clear();
    };
    for (int32_t first : first_unit) {
      int32_t run_stream = -1;
      int64_t run_window = -1;
      for (int32_t ui = first; ui >= 0; ui = units[ui].next) {
        const int32_t stream = kernel_stream(ui);
        const int64_t window = stream < 0 ? -1 : window_of(units[ui].enter);
        if (window < 0) {
          flush();
          continue;
        }
        if (!run.empty()) {
          const Unit& prev = units[run.back()];
          bool same = stream == run_stream && window == run_window;
          if (const int64_t gap = units[ui].enter - prev.exit; same && gap >= options.launch_dispatch_ns) {
            // A wait between two launches (off-CPU, not for a CPU) is not
            // launch work; time the thread was preempted is the machine's.
            const HostGapSplit split = SplitHostGap(t, units[ui].tid, prev.exit, units[ui].enter);
            const int64_t on = std::clamp<int64_t>(split.on, 0, gap);
            same = gap - on - std::clamp<int64_t>(split.preempted, 0, gap - on) < options.launch_dispatch_ns;
          }
          if (!same) flush();
        }
        if (run.empty()) {
          run_stream = stream;
          run_window = window;
        }
        run.push_back(ui);
      }
      flush();
    }
  }

  // Cross-stream event waits: dep[o] is the op an event wait makes op o
  // wait for (the last op submitted on the event's stream before the
  // event's latest record), -1 none. Between two ops of a stream, several
  // waits keep the dependency that ended last.
  std::vector<int32_t> dep(no, -1);
  // after_host_func[o]: a host function was enqueued on op o's stream
  // between the stream's previous op and o.
  std::vector<bool> after_host_func(no, false);
  {
    std::vector<bool> host_func(nstreams, false);
    absl::flat_hash_map<uint64_t, int32_t> recorded;  // event handle -> op
    std::vector<int32_t> last_op(nstreams, -1), pending(nstreams, -1);
    for (size_t ui = 0; ui < units.size(); ++ui) {
      for (uint32_t m = calls_of.begin[ui]; m < calls_of.begin[ui + 1]; ++m) {
        const uint32_t c = calls_of.items[m];
        const std::string_view name = t.Api(t.calls[c].api).name;
        const bool record = name.find("EventRecord") != std::string_view::npos;
        const bool wait = name.find("StreamWaitEvent") != std::string_view::npos;
        if (t.Api(t.calls[c].api).category == trace::ApiCategory::kHostFunc) {
          if (const auto s = stream_of_handle.find(handle_key(c)); s != stream_of_handle.end()) {
            host_func[s->second] = true;
          }
        }
        if (record || wait) {
          const auto s = stream_of_handle.find(handle_key(c));
          const int32_t stream = s == stream_of_handle.end() ? -1 : s->second;
          const uint64_t event = t.call_info[c].object;
          if (record) {
            if (stream >= 0 && last_op[stream] >= 0) {
              recorded[event] = last_op[stream];
            } else {
              recorded.erase(event);  // nothing submitted there: nothing to wait for
            }
          } else if (auto r = recorded.find(event); stream >= 0 && r != recorded.end()) {
            int32_t& p = pending[stream];
            if (p < 0 || t.ops[r->second].end_ns > t.ops[p].end_ns) p = r->second;
          }
        } else if (classes[c] == CallClass::kSync && name.find("EventSynchronize") != std::string_view::npos) {
          if (auto r = recorded.find(t.call_info[c].object); r != recorded.end()) units[ui].event_op = r->second;
        }
        for (uint32_t k = op_begin[c]; k < op_begin[c + 1]; ++k) {
          const uint32_t o = op_list[k];
          const int32_t stream = op_stream[o];
          if (pending[stream] >= 0) {
            dep[o] = pending[stream];
            pending[stream] = -1;
            if (counted(t.calls[c].enter_ns)) ++st.event_waits;
          }
          last_op[stream] = static_cast<int32_t>(o);
          after_host_func[o] = host_func[stream];
          host_func[stream] = false;
        }
      }
    }
  }

  // The baseline pass: each op's binding constraint (its submitting call,
  // the previous op of its stream, or the op an event wait made it wait
  // for) and each sync unit's target; the typical delays the graph gives
  // the sides that did not bind.
  std::vector<int64_t> dep_delay(no, kNone);  // after dep[o]'s end, when that bound it
  std::vector<int64_t> prev_end(no, kNone);  // the stream's previous op's end, submission order
  // The baseline time a sync unit waited for: the end of the work before it
  // (or of its own ops), or the start of its own op when it returned before
  // that op ended (a pageable upload returns once its copy started); kNone
  // when it returned before either (what it waited for is not known: it
  // keeps its duration).
  std::vector<int64_t> target(units.size(), kNone);
  std::vector<bool> waits_start(units.size(), false);
  std::vector<int64_t> host_delays, device_delays, posts;
  {
    std::vector<int64_t> stream_end(nstreams, kNone);
    SubmittedEnds submitted(nstreams);
    for (size_t ui = 0; ui < units.size(); ++ui) {
      const Unit& u = units[ui];
      if (u.sync && !u.own_ops) target[ui] = u.event_op >= 0 ? t.ops[u.event_op].end_ns : submitted.Before(u.stream);
      int64_t own = kNone, own_start = kNone;
      for_each_op(ui, [&](uint32_t c, uint32_t o) {
        const DeviceOp& op = t.ops[o];
        const int32_t s = op_stream[o];
        prev_end[o] = stream_end[s];
        const int64_t dep_end = dep[o] >= 0 ? t.ops[dep[o]].end_ns : kNone;
        const bool sample = gather == nullptr || counted(t.calls[c].enter_ns);
        if (dep_end != kNone && dep_end >= t.calls[c].enter_ns && dep_end >= prev_end[o]) {
          dep_delay[o] = std::max<int64_t>(0, op.start_ns - dep_end);  // the other stream bound it
        } else if (prev_end[o] != kNone && prev_end[o] >= t.calls[c].enter_ns) {
          // (not after a host function: that delay is the function's time)
          if (!after_host_func[o] && sample) device_delays.push_back(op.start_ns - prev_end[o]);
        } else if (sample) {
          host_delays.push_back(op.start_ns - t.calls[c].enter_ns);
        }
        stream_end[s] = op.end_ns;
        own = std::max(own, op.end_ns);
        own_start = std::max(own_start, op.start_ns);
      });
      if (u.sync && u.own_ops) {
        target[ui] = own;
        if (own > u.exit) {
          waits_start[ui] = true;
          target[ui] = own_start;
        }
      }
      if (target[ui] != kNone && target[ui] > u.exit) target[ui] = kNone;
      if (u.sync && target[ui] != kNone && target[ui] > u.enter && target[ui] <= u.exit &&
          (gather == nullptr || counted(u.enter))) {
        posts.push_back(u.exit - target[ui]);
      }
      for_each_op(ui, [&](uint32_t, uint32_t o) { submitted.Add(op_stream[o], t.ops[o].end_ns); });
    }
  }
  if (gather != nullptr) {
    for (const int64_t d : host_delays) gather->AddHost(d);
    for (const int64_t d : device_delays) gather->AddDevice(d);
    for (const int64_t d : posts) gather->AddPost(d);
    return Timeline{};
  }
  TypicalDelays typical;
  if (options.typical) {
    typical = *options.typical;
  } else {
    if (!device_delays.empty()) {
      typical.device_min_ns = std::max<int64_t>(0, *std::min_element(device_delays.begin(), device_delays.end()));
    }
    typical.host_ns = std::max<int64_t>(0, Median(host_delays, 0));
    typical.post_ns = std::max<int64_t>(0, Median(posts, 0));
  }
  const int64_t device_delay_min = typical.device_min_ns;
  const int64_t host_delay_typ = typical.host_ns;
  const int64_t post_typ = typical.post_ns;

  // The replay, in the trace's order of units.
  std::vector<int64_t> enter2(units.size()), exit2(units.size());
  std::vector<int64_t> call_enter2(nc), call_exit2(nc), start2(no), end2(no);
  std::vector<int64_t> stream_end2(nstreams, kNone);
  SubmittedEnds submitted2(nstreams);
  // Per thread: the CPU-time and run-delay changes of its scaled gaps, at
  // the gap's start (for the CPU samples).
  struct GapChange {
    int64_t at = 0;
    int64_t cpu = 0;
    int64_t delay = 0;
  };
  absl::flat_hash_map<uint32_t, std::vector<GapChange>> gap_changes;
  int32_t leader_last = -1;  // the leader's last unit replayed so far
  // The leader's replayed clock at trace time x (from its units replayed so
  // far: inside one, with it; after one, shifted as its end was).
  auto leader_clock = [&](int64_t x) {
    if (leader_last < 0) return x;
    const Unit& m = units[leader_last];
    if (x <= m.exit) return std::clamp(enter2[leader_last] + (x - m.enter), enter2[leader_last], exit2[leader_last]);
    return exit2[leader_last] + (x - m.exit);
  };
  for (size_t ui = 0; ui < units.size(); ++ui) {
    const Unit& u = units[ui];
    const int32_t head = graph_head[ui];
    if (head >= 0) {
      // Folded into its stretch's graph launch: no host time of its own.
      enter2[ui] = exit2[u.prev];
    } else if (u.tid != leader) {
      // A helper thread: at the leader's clock, after its own previous call.
      enter2[ui] = leader_clock(u.enter);
      if (u.prev >= 0) enter2[ui] = std::max(enter2[ui], exit2[u.prev]);
    } else if (u.prev < 0 && thread_start[thread_index[u.tid]] == kNone) {
      enter2[ui] = u.enter;
    } else {
      // The host time since the thread's previous call, or, before its
      // first call, since its first NVTX event (the first step's range
      // opens before its input wait).
      const int64_t from = u.prev >= 0 ? units[u.prev].exit : thread_start[thread_index[u.tid]];
      const int64_t from2 = u.prev >= 0 ? exit2[u.prev] : from;
      const int64_t gap = u.enter - from;
      int64_t gap2 = gap;
      if (gap >= options.launch_dispatch_ns) {
        if (counted(u.enter)) ++st.gaps_scaled;
        const HostGapSplit split = SplitHostGap(t, u.tid, from, u.enter);
        int64_t on = split.on;
        if (on < 0) {
          if (counted(u.enter)) ++st.gaps_without_cpu;
          on = 0;
        }
        on = std::min(on, gap);
        gap2 = Scale(on, options.scale_host_busy) + Scale(gap - on, options.scale_host_wait);
        const int64_t pre = std::max<int64_t>(0, split.preempted);
        if (gap2 != gap) {
          gap_changes[u.tid].push_back({from, Scale(on, options.scale_host_busy) - on,
                                        Scale(pre, options.scale_host_wait) - pre});
        }
      }
      enter2[ui] = from2 + std::max<int64_t>(0, gap2);
    }
    const int64_t shift = enter2[ui] - u.enter;
    // The device work a sync unit waits for, replayed (before its own ops,
    // which only a read-back waits for).
    int64_t target2 = kNone;
    if (u.sync && !u.own_ops) target2 = u.event_op >= 0 ? end2[u.event_op] : submitted2.Before(u.stream);
    int64_t own2 = kNone, own_start2 = kNone;
    for_each_op(ui, [&](uint32_t c, uint32_t o) {
      const DeviceOp& op = t.ops[o];
      const int32_t s = op_stream[o];
      const int64_t a = t.calls[c].enter_ns, start = op.start_ns;
      int64_t dh, dd;
      const int64_t cut = options.start_cut.empty() ? 0 : options.start_cut[o];
      if (dep_delay[o] != kNone) {  // the event wait bound it: the other sides typical
        dh = std::min(host_delay_typ, start - a);
        dd = prev_end[o] == kNone ? 0 : std::min(device_delay_min, start - prev_end[o]);
      } else if (prev_end[o] != kNone && prev_end[o] >= a) {  // the stream bound it
        dd = std::max<int64_t>(0, start - prev_end[o] - cut);
        dh = std::min(host_delay_typ, start - a);
        if (after_host_func[o]) {  // the host function's time, scaled
          if (counted(a)) ++st.after_host_func;
          if (options.scale_host_func != 1.0 && dd > device_delay_min) {
            dd = device_delay_min + Scale(dd - device_delay_min, options.scale_host_func);
          }
        }
      } else {  // its submission bound it
        dh = std::max<int64_t>(0, start - a - cut);
        dd = prev_end[o] == kNone ? 0 : std::min(device_delay_min, start - prev_end[o]);
      }
      int64_t s2 = a + shift + dh;
      if (stream_end2[s] != kNone) s2 = std::max(s2, stream_end2[s] + dd);
      if (dep[o] >= 0) {  // after the op its event wait names, and as long after it as it bound
        s2 = std::max(s2, end2[dep[o]] + (dep_delay[o] == kNone ? 0 : std::max<int64_t>(0, dep_delay[o] - cut)));
      }
      if (head >= 0) {  // a graph node after the first: after the previous node
        s2 = std::max(enter2[head], stream_end2[s] + options.graph_node_ns);
      }
      start2[o] = s2;
      int64_t duration = op.end_ns - op.start_ns;
      if (!options.op_scale.empty() && options.op_scale[o] != 1.0) {
        duration = std::max<int64_t>(0, Scale(duration, options.op_scale[o]));
        if (counted(a)) ++st.ops_scaled;
      }
      end2[o] = s2 + duration;
      stream_end2[s] = end2[o];
      own2 = std::max(own2, end2[o]);
      own_start2 = std::max(own_start2, start2[o]);
    });
    if (u.sync && u.own_ops) target2 = waits_start[ui] ? own_start2 : own2;
    const int64_t base = target[ui];
    const bool blocked = u.sync && base != kNone && base > u.enter;
    const int64_t cost = blocked ? std::max<int64_t>(0, u.exit - base) : u.exit - u.enter;
    exit2[ui] = enter2[ui] + (head >= 0 ? 0 : cost);
    if (u.sync && u.removed) {
      // Without its wait the call costs what a call returning from a wait
      // typically does after the work ended (never more than it took):
      // a thread preempted in the wait in the trace is not preempted here.
      if (blocked) exit2[ui] = enter2[ui] + std::min(cost, post_typ);
      if (counted(u.enter)) ++st.waits_removed;
    } else if (u.sync && base != kNone && target2 != kNone) {
      const int64_t post = blocked ? cost : std::min(post_typ, cost);
      exit2[ui] = std::max(exit2[ui], target2 + post);
    }
    for_each_op(ui, [&](uint32_t, uint32_t o) { submitted2.Add(op_stream[o], end2[o]); });
    for (uint32_t m = calls_of.begin[ui]; m < calls_of.begin[ui + 1]; ++m) {
      const uint32_t c = calls_of.items[m];
      call_enter2[c] = std::clamp(enter2[ui] + (t.calls[c].enter_ns - u.enter), enter2[ui], exit2[ui]);
      call_exit2[c] = std::clamp(exit2[ui] - (u.exit - t.calls[c].exit_ns), call_enter2[c], exit2[ui]);
    }
    if (u.tid == leader) leader_last = static_cast<int32_t>(ui);
  }

  // The replayed timeline.
  Timeline r = t;
  for (size_t c = 0; c < nc; ++c) {
    r.calls[c].enter_ns = call_enter2[c];
    r.calls[c].exit_ns = call_exit2[c];
    int64_t last = 0;
    for (uint32_t k = op_begin[c]; k < op_begin[c + 1]; ++k) last = std::max(last, end2[op_list[k]]);
    if (op_begin[c + 1] > op_begin[c]) r.call_info[c].last_op_end_ns = last;
  }
  for (size_t o = 0; o < no; ++o) {
    if (t.ops[o].call >= 0 && static_cast<size_t>(t.ops[o].call) < nc) {
      r.ops[o].start_ns = start2[o];
      r.ops[o].end_ns = end2[o];
    }
  }
  Warp warp(units, first_unit, thread_start, enter2, exit2, thread_index);
  warp.ResetHints();
  for (NvtxRange& range : r.ranges) {
    const int64_t start = warp.Map(range.tid, range.start_ns);
    range.end_ns = std::max(start, warp.Map(range.tid, range.end_ns));
    range.start_ns = start;
  }
  std::stable_sort(r.ranges.begin(), r.ranges.end(),
                   [](const NvtxRange& a, const NvtxRange& b) { return a.start_ns < b.start_ns; });
  warp.ResetHints();
  for (NvtxEvent& e : r.nvtx) e.ns = warp.Map(e.tid, e.ns);
  for (auto& [tid, samples] : r.cpu) {
    warp.ResetHints();
    const auto changes = gap_changes.find(tid);
    size_t k = 0;
    int64_t cpu = 0, delay = 0;
    for (CpuSample& s : samples) {
      if (changes != gap_changes.end()) {
        for (; k < changes->second.size() && changes->second[k].at < s.ns; ++k) {
          cpu += changes->second[k].cpu;
          delay += changes->second[k].delay;
        }
      }
      s.ns = warp.Map(tid, s.ns);
      s.cpu_ns = std::max<int64_t>(0, s.cpu_ns + cpu);
      if (s.run_delay_ns >= 0) s.run_delay_ns = std::max<int64_t>(0, s.run_delay_ns + delay);
    }
  }
  for (NcclCall& n : r.nccl) {
    if (n.call >= 0 && static_cast<size_t>(n.call) < nc) n.enter_ns = call_enter2[n.call];
  }

  // Calls back in enter order (indices change: ops, NCCL calls and the
  // pageable copies follow), ops in start order.
  std::vector<uint32_t> order(nc);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
    return r.calls[a].enter_ns < r.calls[b].enter_ns;
  });
  std::vector<uint32_t> to(nc);
  for (uint32_t k = 0; k < nc; ++k) to[order[k]] = k;
  // In place, cycle by cycle (position k takes the call at order[k]; a
  // done position gets order[k] = k): no second copy of the calls.
  for (uint32_t k = 0; k < nc; ++k) {
    if (order[k] == k) continue;
    const ApiCall call = r.calls[k];
    const CallInfo info = r.call_info[k];
    for (uint32_t j = k;;) {
      const uint32_t from = order[j];
      order[j] = j;
      if (from == k) {
        r.calls[j] = call;
        r.call_info[j] = info;
        break;
      }
      r.calls[j] = r.calls[from];
      r.call_info[j] = r.call_info[from];
      j = from;
    }
  }
  for (DeviceOp& op : r.ops) {
    if (op.call >= 0 && static_cast<size_t>(op.call) < nc) op.call = static_cast<int32_t>(to[op.call]);
  }
  for (NcclCall& n : r.nccl) {
    if (n.call >= 0 && static_cast<size_t>(n.call) < nc) n.call = static_cast<int32_t>(to[n.call]);
  }
  std::stable_sort(r.nccl.begin(), r.nccl.end(),
                   [](const NcclCall& a, const NcclCall& b) { return a.enter_ns < b.enter_ns; });
  absl::flat_hash_set<int32_t> pageable;
  for (int32_t c : r.pageable_copy_calls) {
    pageable.insert(c >= 0 && static_cast<size_t>(c) < nc ? static_cast<int32_t>(to[c]) : c);
  }
  r.pageable_copy_calls = std::move(pageable);
  SortOpsByStart(&r);
  return r;
}

}  // namespace

Timeline Replay(const Timeline& t, const std::vector<CallClass>& classes, const ReplayOptions& options,
                ReplayStats* stats) {
  return ReplayOrGather(t, classes, options, stats, nullptr);
}

DelaySamples ReplayDelaySamples(const Timeline& t, const std::vector<CallClass>& classes,
                                const ReplayOptions& options) {
  DelaySamples d;
  ReplayOrGather(t, classes, options, nullptr, &d);
  return d;
}

}  // namespace stallscope::analyzer
