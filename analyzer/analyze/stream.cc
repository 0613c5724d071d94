// The streamed analysis (see stream.h).
#include "analyzer/analyze/stream.h"

#include <algorithm>
#include <chrono>
#include <iterator>
#include <limits>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "analyzer/analyze/hotspots.h"
#include "analyzer/analyze/windows.h"
#include "analyzer/read/symbolizer.h"
#include "trace_codec.h"

namespace stallscope::analyzer {
namespace {

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
// How far a window's slice may be widened (146 years of ns, past
// kMaxTimeNs, the latest time a reading keeps).
constexpr int64_t kFar = kMax / 2;

bool IsType(const ChunkSpan& c, trace::ChunkType type) {
  return c.type == static_cast<uint16_t>(type);
}

uint64_t Clamp(int64_t ns) { return ns < 0 ? 0 : static_cast<uint64_t>(ns); }

// The calls (sorted by enter time) entering in [from, to): [i0, i1).
std::pair<size_t, size_t> EnteringIn(const std::vector<ApiCall>& calls, int64_t from, int64_t to) {
  auto by_enter = [](const ApiCall& c, int64_t v) { return c.enter_ns < v; };
  return {static_cast<size_t>(std::lower_bound(calls.begin(), calls.end(), from, by_enter) - calls.begin()),
          static_cast<size_t>(std::lower_bound(calls.begin(), calls.end(), to, by_enter) - calls.begin())};
}

// A trace with neither step markers nor a repeating launch sequence.
absl::Status NoSteps() {
  return absl::UnimplementedError(
      "the trace has no steps, marked or repeating: one step of the whole run needs the whole "
      "trace in memory");
}

// Slices tiling the records of one chunk type by their chunks' starts,
// `per_slice` chunks apart: [from, to) each, a record belonging to the
// slice its time (an op's start, a call's enter) falls in.
std::vector<std::pair<int64_t, int64_t>> Tiles(const TraceIndex& index, trace::ChunkType type, size_t per_slice) {
  std::vector<int64_t> starts;
  int64_t last = std::numeric_limits<int64_t>::min();
  for (const ChunkSpan& c : index.chunks) {
    if (!IsType(c, type) || c.count == 0) continue;
    starts.push_back(static_cast<int64_t>(c.lo));
    last = std::max(last, static_cast<int64_t>(c.hi));
  }
  std::sort(starts.begin(), starts.end());
  std::vector<std::pair<int64_t, int64_t>> out;
  for (size_t j = 0; j < starts.size(); j += per_slice) {
    const int64_t from = starts[j];
    const int64_t to = j + per_slice < starts.size() ? starts[j + per_slice] : last + 1;
    if (to <= from) continue;  // chunks starting together: the next slice has them
    out.emplace_back(from, to);
  }
  return out;
}

// fn(from, to) for each of the tiles.
template <typename Fn>
absl::Status TileSlices(const TraceIndex& index, trace::ChunkType type, size_t per_slice, Fn fn) {
  for (const auto& [from, to] : Tiles(index, type, per_slice)) {
    absl::Status s = fn(from, to);
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<StreamedAnalysis> AnalyzeStreamed(SliceReader* reader, const TraceIndex& index,
                                                 const std::regex& pattern,
                                                 const AttributionOptions& options,
                                                 const StreamOptions& stream) {
  StreamedAnalysis out;
  const SliceChunker chunker(index);
  auto last = std::chrono::steady_clock::now();
  auto done = [&](int pass) {
    const auto now = std::chrono::steady_clock::now();
    out.seconds[pass] = std::chrono::duration<double>(now - last).count();
    last = now;
  };
  const uint64_t decoded0 = reader->chunks_decoded();
  const uint64_t kept0 = reader->chunks_kept();
  const size_t per_slice = std::max<size_t>(1, stream.chunks_per_slice);
  uint64_t record_chunks = 0, chunks_read = 0;
  // Passes reading the record chunks: 3 with steps from the launch
  // sequence, 2 once markers are found (the share done only grows; the
  // hotspots' own pass, where it runs, is not foreseen).
  uint64_t passes = 3;
  for (const ChunkSpan& c : index.chunks) {
    const trace::ChunkTypeInfo* info = trace::FindChunkType(c.type);
    record_chunks += info != nullptr && info->reading == trace::ChunkReading::kSliced;
  }
  auto read = [&](const std::vector<size_t>& chunks, int pass) -> absl::StatusOr<Timeline> {
    auto t = reader->Read(chunks);
    if (!t.ok()) return t.status();
    chunks_read += chunks.size();
    const uint64_t total = std::max<uint64_t>(1, passes * record_chunks);
    if (stream.progress) stream.progress(std::min(chunks_read, total - 1), total);
    ++out.slices[pass];
    out.max_slice_calls = std::max(out.max_slice_calls, t->calls.size());
    out.max_slice_ops = std::max(out.max_slice_ops, t->ops.size());
    return t;
  };

  // Pass 1: the counts (the index's), and the NVTX ranges a step can be.
  Timeline counts;
  counts.calls_per_thread = index.calls_per_thread;
  counts.ops_per_device = index.ops_per_device;
  std::vector<size_t> nvtx;
  int64_t ops_from = kMax;  // the device chunks' extent
  int64_t ops_to = std::numeric_limits<int64_t>::min();
  for (size_t i = 0; i < index.chunks.size(); ++i) {
    const ChunkSpan& c = index.chunks[i];
    if (IsType(c, trace::ChunkType::kNvtx)) nvtx.push_back(i);
    if (IsType(c, trace::ChunkType::kDevice) && c.count > 0) {
      ops_from = std::min(ops_from, static_cast<int64_t>(c.lo));
      ops_to = std::max(ops_to, static_cast<int64_t>(c.hi));
    }
  }
  // The NVTX events by slices of the NVTX chunks, in time order (an event
  // counts in the slice its time falls in), paired as a whole reading
  // pairs them; of the ranges, those a step can be are kept (explicit
  // steps, and names the pattern matches), so a range around every op
  // costs no memory.
  auto names = read({}, 0);  // the chunks every slice reads
  if (!names.ok()) return names.status();
  NvtxPairer pairer;
  std::vector<NvtxRange> step_ranges, closed;
  absl::Status tiled = TileSlices(index, trace::ChunkType::kNvtx, per_slice, [&](int64_t from, int64_t to) {
    std::vector<size_t> chunks;
    for (const size_t i : nvtx) {
      const ChunkSpan& c = index.chunks[i];
      if (static_cast<int64_t>(c.lo) < to && static_cast<int64_t>(c.hi) >= from) chunks.push_back(i);
    }
    auto t = read(chunks, 0);
    if (!t.ok()) return t.status();
    for (const NvtxEvent& e : t->nvtx) {
      if (e.ns < from || e.ns >= to) continue;
      closed.clear();
      pairer.Add(e, &closed);
      for (const NvtxRange& r : closed) {
        if (r.explicit_step || IsStepName(*names, r.name, pattern)) step_ranges.push_back(r);
      }
    }
    return absl::OkStatus();
  });
  if (!tiled.ok()) return tiled;
  SortRanges(&step_ranges);
  names->ranges = std::move(step_ranges);
  out.unmatched_nvtx = pairer.Unmatched();
  StepPlan& plan = out.plan;
  plan.device = BusiestDevice(counts);
  plan.main_tid = MainThread(counts);
  std::vector<StepSpan> marked = MarkedSteps(*names, pattern, plan.main_tid);
  plan.source = "marker";
  done(0);
  if (!marked.empty()) {
    passes = 2;
  } else {
    // No markers: the steps from the launch sequence, by slices of the call
    // chunks (a call counts in the slice its enter time falls in): the
    // slice's calls and their ops and, until the period is found, the CPU
    // samples from the latest exit of a sequence call on, which split the
    // host's gap before the next.
    AutoStepFinder finder(plan.main_tid, SeveralLaunch(index.calls_per_thread, plan.main_tid),
                          stream.auto_detect_calls);
    tiled = TileSlices(index, trace::ChunkType::kApi, per_slice, [&](int64_t from, int64_t to) {
      std::vector<size_t> chunks = chunker.CallsAndTheirOps(Clamp(from), Clamp(to - 1));
      auto add = [&](const std::vector<size_t>& more) {
        std::vector<size_t> both;
        std::set_union(chunks.begin(), chunks.end(), more.begin(), more.end(), std::back_inserter(both));
        chunks = std::move(both);
      };
      if (finder.needs_gaps()) {
        // A gap is split by the last sample at or before each of its ends:
        // those of the slice, and those around the latest exit before it
        // (not every sample between, which a long gap would have each of
        // its slices read again).
        add(chunker.CpuSamples(Clamp(from), Clamp(to - 1)));
        const int64_t busy = finder.busy_until();
        if (busy != std::numeric_limits<int64_t>::min() && busy < from) {
          add(chunker.CpuSamples(Clamp(busy), Clamp(busy)));
        }
      }
      auto t = read(chunks, 4);
      if (!t.ok()) return t.status();
      const auto [i0, i1] = EnteringIn(t->calls, from, to);
      finder.Add(*t, i0, i1);
      // No period in the main thread's first calls: none will come, and
      // the rest of the pass is not read.
      return finder.found_none() ? NoSteps() : absl::OkStatus();
    });
    if (!tiled.ok()) return tiled;
    marked = finder.Finish();
    plan.auto_tail = finder.tail();
    plan.source = "auto";
    done(4);
  }
  if (marked.empty()) return NoSteps();
  for (const DeviceOpCount& d : index.ops_per_device) {
    if (d.device == plan.device) out.questions.nccl_ops = d.nccl;
  }
  out.questions.cpu_samples = index.cpu_samples;

  // Pass 2: the steps' device spans, from slices by the device chunks'
  // starts; an op counts in the slice its start falls in.
  StepSpanBuilder spans(std::move(marked));
  // And when work was pending on the device (the call classes need it at
  // each call's entry, and an op queued long after its launch may lie
  // beyond the slice of a call it kept waiting).
  PendingIntervals pending;
  tiled = TileSlices(index, trace::ChunkType::kDevice, per_slice, [&](int64_t from, int64_t to) {
    // The slice's ops and their calls only: what an op's step and the
    // kernel counts need.
    auto t = read(chunker.OpsAndTheirCalls(Clamp(from), Clamp(to - 1)), 1);
    if (!t.ok()) return t.status();
    for (const DeviceOp& op : t->ops) {
      if (op.start_ns < from || op.start_ns >= to) continue;
      if (op.call < 0) {
        ++out.unjoined_ops;
        continue;
      }
      if (op.device != plan.device) continue;
      const ApiCall& c = t->calls[static_cast<size_t>(op.call)];
      spans.AddOp(c.enter_ns, op.start_ns, op.end_ns);
      pending.Add(c.enter_ns, op.end_ns);
      if (op.kind == trace::DeviceOpKind::kKernel) CountKernel(c, op, options.launch_dispatch_ns, &out.questions);
    }
    return absl::OkStatus();
  });
  if (!tiled.ok()) return tiled;
  bool drop = false;
  if (plan.source == "marker" && spans.LastSubmittedNothing(*names)) {
    const StepSpan& last = spans.steps().back();
    auto t = read(chunker.Chunks(Clamp(last.host_start_ns), Clamp(last.host_end_ns)), 1);
    if (!t.ok()) return t.status();
    drop = !SubmittedIn(*t, last.host_start_ns, last.host_end_ns);
  }
  spans.Finish(drop, &plan);
  KeepTimedSteps(*names, &plan);
  done(1);

  // Pass 3: windows of steps, each from its own slice; and the calls that
  // can be hotspots (HotspotFinder::Take), each taken from one slice: a
  // window's takes those entering in its range [lo, hi] not taken before,
  // and slices of the calls and their ops tile the times the windows
  // leave (before the first, between two, after the last). They wait, in
  // time order, until the windows have charged every call its idle. Past
  // stream.max_hotspot_calls of them, they are dropped and the hotspots
  // have a pass of their own (4).
  absl::flat_hash_map<CallKey, int64_t> caused;
  auto caused_by = [&](const CallKey& k) {
    auto it = caused.find(k);
    return it == caused.end() ? int64_t{0} : it->second;
  };
  Symbolizer symbolizer(names->modules);
  HotspotFinder finder(plan, options, &symbolizer);
  std::vector<HotspotFinder::Call> hot;
  bool hot_over = false;
  int64_t taken = std::numeric_limits<int64_t>::min();  // the calls entering before it are taken
  auto take = [&](const Timeline& t, const std::vector<CallClass>& classes, int64_t from, int64_t to) {
    if (hot_over || to <= from) return;
    const auto [i0, i1] = EnteringIn(t.calls, from, to);
    HotspotFinder::Take(t, classes, i0, i1, &hot);
    if (hot.size() > stream.max_hotspot_calls) {
      hot_over = true;
      std::vector<HotspotFinder::Call>().swap(hot);
    }
  };
  const std::vector<std::pair<int64_t, int64_t>> call_tiles = Tiles(index, trace::ChunkType::kApi, per_slice);
  size_t tile = 0;
  // The calls entering in [taken, to), by the tiles that meet it.
  auto take_until = [&](int64_t to) -> absl::Status {
    for (; !hot_over && tile < call_tiles.size() && call_tiles[tile].first < to; ++tile) {
      const int64_t a = std::max(call_tiles[tile].first, taken);
      const int64_t b = std::min(call_tiles[tile].second, to);
      if (a < b) {
        auto t = read(chunker.CallsAndTheirOps(Clamp(a), Clamp(b - 1)), 3);
        if (!t.ok()) return t.status();
        take(*t, ClassifyCalls(*t, plan.device, options, &pending), a, b);
      }
      if (call_tiles[tile].second > to) break;  // the rest of this tile is past `to`
    }
    taken = std::max(taken, to);
    return absl::OkStatus();
  };
  const size_t n = plan.steps.size();
  uint64_t events = 0;
  for (const DeviceOpCount& d : index.ops_per_device) events += static_cast<uint64_t>(d.ops);
  for (const ThreadCallCount& c : index.calls_per_thread) events += static_cast<uint64_t>(c.calls);
  const uint64_t per_step = std::max<uint64_t>(1, events / std::max<size_t>(1, n));
  const size_t per = stream.steps_per_window > 0 ? stream.steps_per_window
                                                 : std::max<size_t>(1, kWindowEvents / per_step);
  out.steps_per_window = per;
  WindowPart part;
  for (size_t k0 = 0; k0 < n; k0 += per) {
    const size_t k1 = std::min(n, k0 + per);
    const int64_t w0 = plan.steps[k0].start_ns;
    const int64_t w1 = plan.steps[k1 - 1].end_ns;
    int64_t lo = std::min(plan.steps[k0].host_start_ns, w0);
    // The first op after the window is mostly the next step's first.
    int64_t hi = std::max({plan.steps[k1 - 1].host_end_ns, w1, k1 < n ? plan.steps[k1].end_ns : w1});
    int64_t widen = std::max<int64_t>(hi - lo, 1'000);
    absl::StatusOr<Timeline> t;
    // The slice must hold the drain before the window (the latest op end at
    // or before w0) and the first op starting at or after w1: the part's
    // sweep runs from one to the other. Until it does, it is widened on the
    // side lacking one, twice as far each time.
    for (;;) {
      t = read(chunker.Chunks(Clamp(lo), Clamp(hi)), 2);
      if (!t.ok()) return t.status();
      // (Or nothing is left on that side: the file's first op is in, or the
      // slice reaches the file's start, or past any sane time.)
      bool drain = lo <= ops_from || lo <= 0;
      bool next = hi >= ops_to || hi >= kFar;
      for (const DeviceOp& op : t->ops) {
        if (op.device != plan.device) continue;
        drain = drain || (op.end_ns <= w0 && op.end_ns >= lo);
        next = next || (op.start_ns >= w1 && op.start_ns <= hi);
      }
      if (drain && next) break;
      if (!drain) lo -= std::min(widen, std::max<int64_t>(lo, 0));
      if (!next) hi += std::min(widen, kFar - hi);
      widen = std::min(widen, kFar / 2) * 2;
    }
    const std::vector<CallClass> classes = ClassifyCalls(*t, plan.device, options, &pending);
    if (taken < lo) {
      if (absl::Status st = take_until(lo); !st.ok()) return st;
    }
    take(*t, classes, std::max(taken, lo), hi + 1);
    taken = std::max(taken, hi + 1);
    WindowCutter cutter(*t, plan, classes);
    cutter.Cut(k0, k1, &part);
    Attribution a = AttributeWindow(part, plan, k0, k1, options);
    out.steps.insert(out.steps.end(), a.steps.begin(), a.steps.end());
    if (!stream.keep_gaps) a.gaps.clear();
    for (IdleGap& g : a.gaps) {
      if (g.call >= 0) {
        out.gap_call.push_back({out.gaps.size(), CallKey::Of(t->calls[static_cast<size_t>(g.call)])});
        g.call = -1;
      }
      out.gaps.push_back(g);
    }
    a.idle_caused.ForEach([&](size_t call, int64_t ns) { caused[CallKey::Of(t->calls[call])] += ns; });
  }
  if (absl::Status st = take_until(kMax); !st.ok()) return st;
  out.idle_caused.assign(caused.begin(), caused.end());
  std::sort(out.idle_caused.begin(), out.idle_caused.end());
  done(2);
  if (!hot_over) {
    finder.Add(*names, hot, [&](const HotspotFinder::Call& c) {
      return caused_by(CallKey{c.tid, c.api, c.enter_ns, c.exit_ns});
    });
    out.hotspot_calls = hot.size();
  }

  // Pass 4, past max_hotspot_calls: the hotspots, from slices by the call
  // chunks' starts; a call counts in the slice its enter time falls in.
  out.hotspots_pass = hot_over;
  if (hot_over) tiled = TileSlices(index, trace::ChunkType::kApi, per_slice, [&](int64_t from, int64_t to) {
    // The slice's calls and their ops only: what a call's class and its
    // hotspot need.
    auto t = read(chunker.CallsAndTheirOps(Clamp(from), Clamp(to - 1)), 3);
    if (!t.ok()) return t.status();
    const auto [i0, i1] = EnteringIn(t->calls, from, to);
    const std::vector<CallClass> classes = ClassifyCalls(*t, plan.device, options, &pending);
    finder.Add(*t, classes, i0, i1, [&](size_t i) { return caused_by(CallKey::Of(t->calls[i])); });
    return absl::OkStatus();
  });
  if (!tiled.ok()) return tiled;
  out.hotspots = finder.Finish(names->apis);
  out.changed_modules = symbolizer.ChangedModules();
  done(3);
  out.first_slice = *std::move(names);
  out.chunks_decoded = reader->chunks_decoded() - decoded0;
  out.chunks_kept = reader->chunks_kept() - kept0;
  return out;
}

}  // namespace stallscope::analyzer
