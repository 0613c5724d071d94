// The streamed analysis (see stream.h).
#include "analyzer/analyze/stream.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <chrono>
#include <iterator>
#include <limits>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
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

// The chunks of `of` (indices into the index's chunks) whose spans meet
// [from, to).
std::vector<size_t> Meeting(const TraceIndex& index, const std::vector<size_t>& of, int64_t from, int64_t to) {
  std::vector<size_t> out;
  for (const size_t i : of) {
    const ChunkSpan& c = index.chunks[i];
    if (static_cast<int64_t>(c.lo) < to && static_cast<int64_t>(c.hi) >= from) out.push_back(i);
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

absl::Status ForEachOpSlice(SliceReader* reader, const TraceIndex& index, size_t chunks_per_slice,
                            const std::function<absl::Status(const Timeline&, int64_t, int64_t)>& fn) {
  std::vector<size_t> device;
  for (size_t i = 0; i < index.chunks.size(); ++i) {
    if (IsType(index.chunks[i], trace::ChunkType::kDevice) && index.chunks[i].count > 0) device.push_back(i);
  }
  const size_t per_slice = std::max<size_t>(1, chunks_per_slice);
  return TileSlices(index, trace::ChunkType::kDevice, per_slice, [&](int64_t from, int64_t to) -> absl::Status {
    auto t = reader->Read(Meeting(index, device, from, to));
    if (!t.ok()) return t.status();
    return fn(*t, from, to);
  });
}

absl::Status ForEachCallSlice(SliceReader* reader, const TraceIndex& index, size_t chunks_per_slice,
                              const std::function<absl::Status(const Timeline&, int64_t, int64_t)>& fn,
                              const std::function<void(uint64_t, uint64_t)>& progress,
                              const std::function<void(Timeline*)>& adjust) {
  std::vector<size_t> nccl;
  for (size_t i = 0; i < index.chunks.size(); ++i) {
    if (IsType(index.chunks[i], trace::ChunkType::kNccl) && index.chunks[i].count > 0) nccl.push_back(i);
  }
  const SliceChunker chunker(index);
  const auto tiles = Tiles(index, trace::ChunkType::kApi, std::max<size_t>(1, chunks_per_slice));
  uint64_t done = 0;
  if (progress) progress(0, tiles.size());
  for (size_t k = 0; k < tiles.size(); ++k) {
    const auto [from, to] = tiles[k];
    std::vector<size_t> chunks = chunker.CallsAndTheirOps(Clamp(from), Clamp(to - 1));
    // The first and last slices reach out to every time before and after
    // the calls: NCCL arguments whose calls were not kept (a flight
    // recorder's window may begin inside a group) still count, once.
    const int64_t lo = k == 0 ? std::numeric_limits<int64_t>::min() : from;
    const int64_t hi = k + 1 == tiles.size() ? kMax : to;
    const std::vector<size_t> args = Meeting(index, nccl, lo, hi);
    std::vector<size_t> both;
    std::set_union(chunks.begin(), chunks.end(), args.begin(), args.end(), std::back_inserter(both));
    auto t = reader->Read(both);
    if (!t.ok()) return t.status();
    if (adjust) adjust(&*t);
    if (progress) progress(++done, tiles.size());
    absl::Status s = fn(*t, lo, hi);
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

GapSpill::~GapSpill() {
  if (file_ != nullptr) std::fclose(file_);
}

absl::Status GapSpill::Open() {
  const char* dir = std::getenv("TMPDIR");
  std::string path = absl::StrCat(dir != nullptr && *dir != '\0' ? dir : "/tmp", "/stallscope-gaps-XXXXXX");
  const int fd = mkstemp(path.data());
  if (fd < 0) return absl::ErrnoToStatus(errno, absl::StrCat("cannot create a temporary file for the idle gaps in ", path));
  unlink(path.c_str());
  file_ = fdopen(fd, "w+b");
  if (file_ == nullptr) {
    const int e = errno;
    close(fd);
    return absl::ErrnoToStatus(e, "cannot open a temporary file for the idle gaps");
  }
  return absl::OkStatus();
}

void GapSpill::Add(const IdleGap& gap, const ApiCall* call) {
  if (left_ > 0 || next_ < block_.size()) {
    // Appended after what was read.
    std::fseek(file_, 0, SEEK_END);
    block_.clear();
    next_ = 0;
    left_ = 0;
  }
  Gap g;
  g.gap = gap;
  g.gap.call = -1;
  if (call != nullptr) {
    g.call = CallKey::Of(*call);
    g.has_call = true;
  }
  buffer_.push_back(g);
  ++count_;
  if (buffer_.size() >= 4096) Write();
}

void GapSpill::Write() {
  errno = 0;
  if (!buffer_.empty() && error_ == 0 &&
      (file_ == nullptr || std::fwrite(buffer_.data(), sizeof(Gap), buffer_.size(), file_) != buffer_.size())) {
    error_ = file_ == nullptr ? EBADF : (errno != 0 ? errno : EIO);
  }
  buffer_.clear();
}

void GapSpill::Clear() {
  buffer_.clear();
  count_ = 0;
  block_.clear();
  next_ = 0;
  left_ = 0;
  if (file_ != nullptr && error_ == 0) {
    std::fflush(file_);
    if (ftruncate(fileno(file_), 0) != 0) error_ = errno;
    std::rewind(file_);
  }
}

absl::Status GapSpill::ForEach(const std::function<void(const Gap&)>& fn) {
  if (absl::Status st = Rewind(); !st.ok()) return st;
  while (const Gap* g = Next()) fn(*g);
  return status();
}

absl::Status GapSpill::Rewind() {
  Write();
  if (error_ == 0 && file_ != nullptr && std::fflush(file_) != 0) error_ = errno != 0 ? errno : EIO;
  block_.clear();
  next_ = 0;
  left_ = 0;
  read_status_ = error_ != 0 ? absl::ErrnoToStatus(error_, "cannot keep the idle gaps in a temporary file")
                             : absl::OkStatus();
  if (!read_status_.ok() || count_ == 0) return read_status_;
  std::rewind(file_);
  left_ = count_;
  return read_status_;
}

const GapSpill::Gap* GapSpill::Next() {
  if (next_ < block_.size()) return &block_[next_++];
  if (left_ == 0 || !read_status_.ok()) return nullptr;
  const size_t n = static_cast<size_t>(std::min<uint64_t>(left_, 4096));
  block_.resize(n);
  if (std::fread(block_.data(), sizeof(Gap), n, file_) != n) {
    read_status_ = absl::DataLossError("the idle gaps' temporary file was cut short");
    block_.clear();
    left_ = 0;
    return nullptr;
  }
  left_ -= n;
  next_ = 1;
  return &block_[0];
}

std::pair<size_t, size_t> EnteringIn(const std::vector<ApiCall>& calls, int64_t from, int64_t to) {
  auto by_enter = [](const ApiCall& c, int64_t v) { return c.enter_ns < v; };
  return {static_cast<size_t>(std::lower_bound(calls.begin(), calls.end(), from, by_enter) - calls.begin()),
          static_cast<size_t>(std::lower_bound(calls.begin(), calls.end(), to, by_enter) - calls.begin())};
}

CallMarks::CallMarks(const StreamedAnalysis& s) {
  for (const CallMark& m : s.call_marks) {
    CallMarkView& v = marks_[m.key];
    v.sync = m.sync;
    v.hotspot = m.hotspot;
  }
  for (const auto& [key, ns] : s.idle_caused) marks_[key].idle += ns;
}

bool ExternalIdsMayRepeat(const TraceIndex& index) {
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (const ChunkSpan& c : index.chunks) {
    if (IsType(c, trace::ChunkType::kApi) && c.id_lo <= c.id_hi) ranges.emplace_back(c.id_lo, c.id_hi);
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) {
    if (ranges[i].first <= ranges[i - 1].second) return true;
  }
  return false;
}

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
    if (stream.adjust) stream.adjust(&*t);
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
  absl::flat_hash_set<uint32_t> range_tids;
  StepNames is_step(*names, pattern);
  absl::Status tiled = TileSlices(index, trace::ChunkType::kNvtx, per_slice, [&](int64_t from, int64_t to) {
    auto t = read(Meeting(index, nvtx, from, to), 0);
    if (!t.ok()) return t.status();
    for (const NvtxEvent& e : t->nvtx) {
      if (e.ns < from || e.ns >= to) continue;
      closed.clear();
      pairer.Add(e, &closed);
      for (const NvtxRange& r : closed) {
        out.first_range_ns = std::min(out.first_range_ns, r.start_ns);
        range_tids.insert(r.tid);
        if (r.explicit_step || is_step(r.name)) step_ranges.push_back(r);
      }
    }
    return absl::OkStatus();
  });
  if (!tiled.ok()) return tiled;
  out.range_tids.assign(range_tids.begin(), range_tids.end());
  std::sort(out.range_tids.begin(), out.range_tids.end());
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
  uint64_t file_ops = 0;  // on every device
  for (const DeviceOpCount& d : index.ops_per_device) file_ops += static_cast<uint64_t>(d.ops);

  // Passes 2 and 3, one of two ways. Fused: the windows' slices give the
  // steps' spans too (each window's slice holds the calls of its steps and
  // of the next one, and their ops), so every record chunk is decoded once
  // after the index. Or, when device timing was sampled or an assumption of
  // the fused way fails for this trace (attempt gives false, and
  // everything is done again): the spans from a pass of their own first.
  const StreamedAnalysis before = out;
  auto attempt = [&](bool fused) -> absl::StatusOr<bool> {
    std::vector<StepSpan> steps = marked;
    out.spans_fused = fused;
    // An op, each once, by the call that submitted it: its step's span,
    // when work was pending on the device (the call classes need it at each
    // call's entry, and an op queued long after its launch may lie beyond
    // the slice of a call it kept waiting), the kernel counts; and the ops
    // joined to a call, on every device (the others are the unjoined ones).
    PendingIntervals pending;
    uint64_t joined = 0;
    auto add_op = [&](StepSpanBuilder& spans, const ApiCall& c, const DeviceOp& op) {
      ++joined;
      if (op.device != plan.device) return;
      spans.AddOp(c.enter_ns, op.start_ns, op.end_ns);
      pending.Add(c.enter_ns, op.end_ns);
      if (op.kind == trace::DeviceOpKind::kKernel) CountKernel(c, op, options.launch_dispatch_ns, &out.questions);
    };
    bool drop = false;
    // A profiler's closing range (StepSpanBuilder::LastSubmittedNothing) is
    // dropped before the windows are cut: the fused way knows its ops from
    // the slice of its host range, which holds the ops of its calls.
    if (fused && plan.source == "marker" && steps.size() > 1 &&
        names->String(steps.back().name).starts_with("ProfilerStep#")) {
      const StepSpan& last = steps.back();
      auto t = read(chunker.Chunks(Clamp(last.host_start_ns), Clamp(last.host_end_ns)), 2);
      if (!t.ok()) return t.status();
      bool took = false;
      for (const DeviceOp& op : t->ops) {
        if (op.call < 0 || op.device != plan.device) continue;
        const int64_t enter = t->calls[static_cast<size_t>(op.call)].enter_ns;
        took = took || (enter >= last.host_start_ns && enter < last.host_end_ns);
      }
      drop = !took && !SubmittedIn(*t, last.host_start_ns, last.host_end_ns);
      if (drop) steps.pop_back();
    }
    StepSpanBuilder spans(steps);
    if (!fused) {
      // Pass 2: the steps' device spans, from slices by the device chunks'
      // starts; an op counts in the slice its start falls in.
      absl::Status tiled = TileSlices(index, trace::ChunkType::kDevice, per_slice, [&](int64_t from, int64_t to) {
        // The slice's ops and their calls only: what an op's step and the
        // kernel counts need.
        auto t = read(chunker.OpsAndTheirCalls(Clamp(from), Clamp(to - 1)), 1);
        if (!t.ok()) return t.status();
        for (const DeviceOp& op : t->ops) {
          if (op.start_ns < from || op.start_ns >= to || op.call < 0) continue;
          add_op(spans, t->calls[static_cast<size_t>(op.call)], op);
        }
        return absl::OkStatus();
      });
      if (!tiled.ok()) return tiled;
      if (plan.source == "marker" && spans.LastSubmittedNothing(*names)) {
        const StepSpan& last = spans.steps().back();
        auto t = read(chunker.Chunks(Clamp(last.host_start_ns), Clamp(last.host_end_ns)), 1);
        if (!t.ok()) return t.status();
        drop = !SubmittedIn(*t, last.host_start_ns, last.host_end_ns);
      }
      spans.Finish(drop, &plan);
      KeepTimedSteps(*names, &plan);
    } else {
      // The host ranges; each span is set once known (SpanThrough), the last
      // step's end (the plan's extent, which a window's sweep stops at) held
      // past every time until then.
      plan.steps = steps;
      plan.steps.back().end_ns = kMax;
    }
    done(1);
    // The fused way: the calls entering before it have had their ops added.
    int64_t added = std::numeric_limits<int64_t>::min();
    // The ops of the calls of `t` entering in [max(from, added), to).
    auto add_ops = [&](const Timeline& t, int64_t from, int64_t to) {
      if (!fused) return;
      from = std::max(from, added);
      for (const DeviceOp& op : t.ops) {
        if (op.call < 0) continue;
        const ApiCall& c = t.calls[static_cast<size_t>(op.call)];
        if (c.enter_ns >= from && c.enter_ns < to) add_op(spans, c, op);
      }
      added = std::max(added, to);
    };

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
    // The classes of a slice's calls. The fused way, a call entering past
    // the calls whose ops are added may be classed as not having waited for
    // work not yet known to be pending (PendingIntervals::Unsure): it is
    // taken by a later slice, where its class is right, and a window whose
    // part holds it gives up.
    auto classify = [&](const Timeline& t, std::vector<CallClass>* classes) {
      pending.KnownUntil(fused ? added : kMax);
      *classes = ClassifyCalls(t, plan.device, options, &pending);
    };
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
    std::vector<CallClass> classes;
    // The calls entering in [taken, to), by the tiles that meet it (and, the
    // fused way, their ops).
    auto take_until = [&](int64_t to) -> absl::Status {
      for (; (fused || !hot_over) && tile < call_tiles.size() && call_tiles[tile].first < to; ++tile) {
        const int64_t a = std::max(call_tiles[tile].first, taken);
        const int64_t b = std::min(call_tiles[tile].second, to);
        if (a < b) {
          auto t = read(chunker.CallsAndTheirOps(Clamp(a), Clamp(b - 1)), 3);
          if (!t.ok()) return t.status();
          add_ops(*t, a, b);
          if (!hot_over) {
            std::vector<CallClass> tile_classes;
            classify(*t, &tile_classes);  // those taken enter before `added`
            take(*t, tile_classes, a, b);
          }
        }
        if (call_tiles[tile].second > to) break;  // the rest of this tile is past `to`
      }
      taken = std::max(taken, to);
      if (fused) added = std::max(added, to);
      return absl::OkStatus();
    };
    // The gaps listed only where they are kept or passed on.
    AttributionOptions window_options = options;
    window_options.list_gaps = stream.keep_gaps || static_cast<bool>(stream.on_gap);
    const size_t n = plan.steps.size();
    uint64_t events = 0;
    for (const DeviceOpCount& d : index.ops_per_device) events += static_cast<uint64_t>(d.ops);
    for (const ThreadCallCount& c : index.calls_per_thread) events += static_cast<uint64_t>(c.calls);
    const uint64_t per_step = std::max<uint64_t>(1, events / std::max<size_t>(1, n));
    const size_t per = stream.steps_per_window > 0 ? stream.steps_per_window
                                                   : std::max<size_t>(1, kWindowEvents / per_step);
    out.steps_per_window = per;
    WindowPart part;
    int64_t lag = 0;  // the fused way: how far the last window's slice reached past its steps' host end
    for (size_t k0 = 0; k0 < n; k0 += per) {
      const size_t k1 = std::min(n, k0 + per);
      absl::StatusOr<Timeline> t;
      int64_t read_lo = kMax, read_hi = std::numeric_limits<int64_t>::min();  // what t was read over
      if (fused) {
        // The spans through the next step (or the last): the ops of the calls
        // entering before its host end, from a slice reaching it (and as far
        // past it as the last window's reached), from the window's start on.
        const size_t kn = k1 < n ? k1 : n - 1;
        const int64_t start = k0 == 0 ? plan.steps[0].host_start_ns
                                       : std::min(plan.steps[k0].host_start_ns, plan.steps[k0].start_ns);
        if (k0 == 0) {
          if (absl::Status st = take_until(start); !st.ok()) return st;
        }
        const int64_t through = plan.steps[kn].host_end_ns;
        read_lo = std::min(start, added);
        read_hi = std::max(through, read_lo) + std::min(lag, kFar - std::max(through, read_lo));
        t = read(chunker.Chunks(Clamp(read_lo), Clamp(read_hi)), 2);
        if (!t.ok()) return t.status();
        add_ops(*t, added, through);
        spans.SpanThrough(kn, &plan.steps);
      }
      const int64_t w0 = plan.steps[k0].start_ns;
      const int64_t w1 = plan.steps[k1 - 1].end_ns;
      int64_t lo = std::min(plan.steps[k0].host_start_ns, w0);
      // The first op after the window is mostly the next step's first.
      int64_t hi = std::max({plan.steps[k1 - 1].host_end_ns, w1, k1 < n ? plan.steps[k1].end_ns : w1});
      int64_t widen = std::max<int64_t>(hi - lo, 1'000);
      // The slice must hold the drain before the window (the latest op end at
      // or before w0) and the first op starting at or after w1: the part's
      // sweep runs from one to the other. Until it does, it is widened on the
      // side lacking one, twice as far each time. (A slice read over more
      // holds all this one would.)
      for (;;) {
        if (!(read_lo <= lo && hi <= read_hi)) {
          t = read(chunker.Chunks(Clamp(lo), Clamp(hi)), 2);
          if (!t.ok()) return t.status();
          read_lo = lo;
          read_hi = hi;
        }
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
      if (fused) {
        // The calls the window takes have their ops added (the slice holds
        // them: it reaches back to where the adding stands). The plan's
        // extent is not known before the last step's span: a window before
        // it must sweep to the first op after it, found by the next step's
        // end, as it would with the extent known.
        add_ops(*t, added, hi + 1);
        lag = std::max<int64_t>(0, hi - plan.steps[k1 < n ? k1 : n - 1].host_end_ns);
        if (k1 + 1 < n) {
          int64_t first_after = kMax;
          for (const DeviceOp& op : t->ops) {
            if (op.device == plan.device && op.start_ns >= w1) first_after = std::min(first_after, op.start_ns);
          }
          if (first_after == kMax) {
            // No op starts after w1 (the slice reaches the file's last): every
            // step's ops were submitted before, and are added.
            spans.SpanThrough(n - 1, &plan.steps);
          } else if (first_after > std::max(plan.steps[k1].end_ns, spans.latest_op_end())) {
            return false;  // the extent might stop the sweep before that op
          }
        }
      }
      classify(*t, &classes);
      if (taken < lo) {
        if (absl::Status st = take_until(lo); !st.ok()) return st;
      }
      take(*t, classes, std::max(taken, lo), hi + 1);
      taken = std::max(taken, hi + 1);
      WindowCutter cutter(*t, plan, classes);
      cutter.Cut(k0, k1, &part);
      if (fused && !pending.Unsure().empty()) {
        const std::vector<int64_t>& unsure = pending.Unsure();
        for (const int32_t i : part.call) {
          const int64_t enter = t->calls[static_cast<size_t>(i)].enter_ns;
          if (std::binary_search(unsure.begin(), unsure.end(), enter)) return false;
        }
      }
      Attribution a = AttributeWindow(part, plan, k0, k1, window_options);
      out.steps.insert(out.steps.end(), a.steps.begin(), a.steps.end());
      if (stream.on_gap) {
        for (const IdleGap& g : a.gaps) {
          stream.on_gap(g, g.call >= 0 ? &t->calls[static_cast<size_t>(g.call)] : nullptr);
        }
      }
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
    if (fused) {
      // Every op added: the spans the windows used must be the ones all ops
      // give, or their assumptions failed for this trace.
      const std::vector<StepSpan> used = std::move(plan.steps);
      spans.Finish(false, &plan);
      plan.dropped_empty_last = drop;
      KeepTimedSteps(*names, &plan);  // timing was continuous: it counts them
      if (plan.steps.size() != used.size()) return false;
      for (size_t k = 0; k < used.size(); ++k) {
        if (plan.steps[k].start_ns != used[k].start_ns || plan.steps[k].end_ns != used[k].end_ns) return false;
      }
    }
    out.unjoined_ops = file_ops - std::min(file_ops, joined);
    out.idle_caused.assign(caused.begin(), caused.end());
    std::sort(out.idle_caused.begin(), out.idle_caused.end());
    done(2);
    // With call marks: each call the finder is given, its key and class,
    // and its hotspot (renumbered by Finish).
    std::vector<CallMark> marks;
    std::vector<int32_t> mark_hotspot;
    if (!hot_over) {
      if (stream.keep_call_marks) {
        for (size_t j = 0; j < hot.size(); ++j) hot[j].index = j;
        mark_hotspot.assign(hot.size(), -1);
        marks.reserve(hot.size());
        for (const HotspotFinder::Call& c : hot) marks.push_back({{c.tid, c.api, c.enter_ns, c.exit_ns}, -1, c.sync});
      }
      finder.Add(*names, hot, [&](const HotspotFinder::Call& c) {
        return caused_by(CallKey{c.tid, c.api, c.enter_ns, c.exit_ns});
      }, stream.keep_call_marks ? &mark_hotspot : nullptr);
      out.hotspot_calls = hot.size();
    }

    // Pass 4, past max_hotspot_calls: the hotspots, from slices by the call
    // chunks' starts; a call counts in the slice its enter time falls in.
    out.hotspots_pass = hot_over;
    if (hot_over) {
      absl::Status tiled = TileSlices(index, trace::ChunkType::kApi, per_slice, [&](int64_t from, int64_t to) {
        // The slice's calls and their ops only: what a call's class and its
        // hotspot need.
        auto t = read(chunker.CallsAndTheirOps(Clamp(from), Clamp(to - 1)), 3);
        if (!t.ok()) return t.status();
        const auto [i0, i1] = EnteringIn(t->calls, from, to);
        classify(*t, &classes);
        std::vector<int32_t> of_call;
        if (stream.keep_call_marks) of_call.assign(t->calls.size(), -1);
        finder.Add(*t, classes, i0, i1, [&](size_t i) { return caused_by(CallKey::Of(t->calls[i])); },
                   stream.keep_call_marks ? &of_call : nullptr);
        for (size_t i = i0; i < i1 && stream.keep_call_marks; ++i) {
          const bool sync = classes[i] == CallClass::kSync;
          if (!sync && of_call[i] < 0) continue;
          marks.push_back({CallKey::Of(t->calls[i]), -1, sync});
          mark_hotspot.push_back(of_call[i]);
        }
        return absl::OkStatus();
      });
      if (!tiled.ok()) return tiled;
    }
    out.hotspots = finder.Finish(names->apis, stream.keep_call_marks ? &mark_hotspot : nullptr);
    if (stream.keep_call_marks) {
      // The copies that joined no hotspot are not marks.
      for (size_t j = 0; j < marks.size(); ++j) {
        marks[j].hotspot = mark_hotspot[j];
        if (marks[j].sync || marks[j].hotspot >= 0) out.call_marks.push_back(marks[j]);
      }
      std::sort(out.call_marks.begin(), out.call_marks.end(),
                [](const CallMark& a, const CallMark& b) { return a.key < b.key; });
    }
    out.changed_modules = symbolizer.ChangedModules();
    done(3);
    return true;
  };
  const bool fuse = stream.fuse_spans && DeviceTimingOn(*names).empty() && !ExternalIdsMayRepeat(index);
  passes -= fuse ? 1 : 0;
  absl::StatusOr<bool> whole = attempt(fuse);
  if (whole.ok() && !*whole) {
    // Again the two-pass way, from where the passes began (the slices read
    // are still counted).
    size_t slices[5];
    std::copy(std::begin(out.slices), std::end(out.slices), slices);
    out = before;
    std::copy(std::begin(slices), std::end(slices), out.slices);
    out.spans_fused_failed = true;
    if (stream.on_gaps_again) stream.on_gaps_again();
    passes += 1;
    whole = attempt(false);
  }
  if (!whole.ok()) return whole.status();
  out.first_slice = *std::move(names);
  out.chunks_decoded = reader->chunks_decoded() - decoded0;
  out.chunks_kept = reader->chunks_kept() - kept0;
  return out;
}

}  // namespace stallscope::analyzer
