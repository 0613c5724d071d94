// Chrome trace JSON export in Kineto's shape (see report_perfetto.h and
// docs/analyzer.md "Timeline export"). Every event is appended to one string
// by hand: one event per line, strings escaped, times in microseconds with
// three decimals (exact nanoseconds) relative to PerfettoBaseNs.
#include "analyzer/report/perfetto.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <string_view>
#include <tuple>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "analyzer/analyze/stream.h"
#include "analyzer/model/format.h"

namespace stallscope::analyzer {
namespace {

using trace::ApiCategory;
using trace::DeviceOpKind;

// ---- JSON pieces

constexpr char kHex[] = "0123456789abcdef";

void AppendUnicodeEscape(std::string* out, uint32_t c) {
  out->append("\\u00");
  out->push_back(kHex[(c >> 4) & 0xf]);
  out->push_back(kHex[c & 0xf]);
}

// Length of the valid UTF-8 sequence at s[i], 0 when invalid.
size_t Utf8Length(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  size_t n = 0;
  uint32_t min = 0;
  if (c >= 0xc2 && c <= 0xdf) {
    n = 2, min = 0x80;
  } else if (c >= 0xe0 && c <= 0xef) {
    n = 3, min = 0x800;
  } else if (c >= 0xf0 && c <= 0xf4) {
    n = 4, min = 0x10000;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  uint32_t cp = c & (0x7f >> n);
  for (size_t k = 1; k < n; ++k) {
    if ((b(i + k) & 0xc0) != 0x80) return 0;
    cp = (cp << 6) | (b(i + k) & 0x3f);
  }
  if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
  return n;
}

// A JSON string: quotes, backslashes and control characters escaped; <, >
// and & as \u escapes (the export may be embedded in HTML); invalid UTF-8
// bytes replaced by U+FFFD.
void AppendString(std::string* out, std::string_view s) {
  out->push_back('"');
  size_t plain = 0;  // start of the pending run that needs no escaping
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x80 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&') {
      ++i;
      continue;
    }
    if (c >= 0x80) {
      if (size_t n = Utf8Length(s, i); n > 0) {
        i += n;
        continue;
      }
    }
    out->append(s.substr(plain, i - plain));
    switch (c) {
      case '"': out->append("\\\""); break;
      case '\\': out->append("\\\\"); break;
      case '\n': out->append("\\n"); break;
      case '\t': out->append("\\t"); break;
      case '\r': out->append("\\r"); break;
      default:
        if (c >= 0x80) {
          out->append("\\ufffd");
        } else {
          AppendUnicodeEscape(out, c);
        }
    }
    plain = ++i;
  }
  out->append(s.substr(plain));
  out->push_back('"');
}

// Nanoseconds as microseconds with exactly three decimals ("12.345"), as
// Kineto writes them. Negative values (never produced) are clamped to 0.
void AppendUs(std::string* out, int64_t ns) {
  if (ns < 0) ns = 0;
  absl::StrAppend(out, ns / 1000);
  const int64_t frac = ns % 1000;
  const char digits[4] = {'.', static_cast<char>('0' + frac / 100),
                          static_cast<char>('0' + frac / 10 % 10),
                          static_cast<char>('0' + frac % 10)};
  out->append(digits, 4);
}

// ---- what the events say

const char* MemcpyKindName(uint8_t kind) {
  // CUpti_ActivityMemcpyKind values.
  switch (kind) {
    case 1: return "HtoD";
    case 2: return "DtoH";
    case 3: return "HtoA";
    case 4: return "AtoH";
    case 5: return "AtoA";
    case 6: return "AtoD";
    case 7: return "DtoA";
    case 8: return "DtoD";
    case 9: return "HtoH";
    case 10: return "PtoP";
    default: return "unknown";
  }
}

const char* OpCategory(const DeviceOp& op) {
  switch (op.kind) {
    case DeviceOpKind::kMemcpy: return "gpu_memcpy";
    case DeviceOpKind::kMemset: return "gpu_memset";
    default: return "kernel";  // kernels and NCCL kernels, as Kineto
  }
}

std::string OpName(const Timeline& t, size_t i) {
  const DeviceOp& op = t.ops[i];
  if (op.kind == DeviceOpKind::kMemcpy) return absl::StrCat("Memcpy ", MemcpyKindName(op.copy_kind));
  if (op.kind == DeviceOpKind::kMemset) return "Memset";
  std::string_view name = t.String(t.op_info[i].name);
  return name.empty() ? std::string("kernel") : std::string(name);
}

std::string SiteString(const Frame& f) {
  if (f.file.empty()) return f.function.empty() ? f.module : f.function;
  std::string s = absl::StrCat(f.file, ":", f.line);
  if (!f.function.empty()) absl::StrAppend(&s, " (", f.function, ")");
  return s;
}

// Index of the step whose host range [host_start, host_end) holds `ns`, -1
// when none. Steps are sorted by host start and do not overlap.
int StepOfHostTime(const std::vector<StepSpan>& steps, int64_t ns) {
  auto it = std::upper_bound(steps.begin(), steps.end(), ns,
                             [](int64_t v, const StepSpan& s) { return v < s.host_start_ns; });
  if (it == steps.begin()) return -1;
  --it;
  return ns < it->host_end_ns ? static_cast<int>(it - steps.begin()) : -1;
}

// The CUPTI correlation id of each call's first device op (0: none): both
// the call and its ops carry it as "correlation", which is what HTA joins.
std::vector<uint32_t> CallCorrelations(const Timeline& t) {
  std::vector<uint32_t> corr(t.calls.size(), 0);
  std::vector<uint8_t> seen(t.calls.size(), 0);
  for (size_t i = 0; i < t.ops.size(); ++i) {
    const DeviceOp& op = t.ops[i];
    if (op.call < 0 || seen[op.call]) continue;
    seen[op.call] = 1;
    corr[op.call] = t.op_info[i].correlation;
  }
  return corr;
}

// ---- what the export says besides the events of each call and op

// PerfettoBaseNs of the earliest call, op or range start `lo`.
int64_t BaseOf(int64_t lo) {
  return lo == std::numeric_limits<int64_t>::max() || lo < 0 ? 0 : lo / 1000 * 1000;
}

// HTA's idle-time breakdown (HtaIdleBreakdown), fed the ops a slice at a
// time: each op is final once no op to come can sort before it on its
// stream (Settle), so that what is held follows the slice, not the trace.
class HtaIdleBuilder {
 public:
  HtaIdleBuilder(const std::vector<StepSpan>& plan_steps, int64_t base) : base_(base) {
    for (const StepSpan& s : plan_steps) {
      steps_.push_back({StartUs(s.host_start_ns), EndUs(s.host_start_ns, s.host_end_ns)});
    }
    filter_ = steps_.size() >= 2;
    last_end_ = filter_ ? steps_.back().hi : 0;
  }

  // The ops of t whose call is one of [i0, i1); with `all`, every op of t
  // (a whole reading's, those without a call too). `corr`: CallCorrelations.
  void Add(const Timeline& t, const std::vector<uint32_t>& corr, size_t i0, size_t i1, bool all) {
    for (size_t i = 0; i < t.ops.size(); ++i) {
      const DeviceOp& op = t.ops[i];
      if (!all && !SubmittedBy(op, i0, i1)) continue;
      const OpInfo& info = t.op_info[i];
      // An op is joined to its call when it carries the call's "correlation"
      // (the call's first op's id; see CallCorrelations).
      const bool joined = op.call >= 0 && corr[op.call] == info.correlation;
      const int64_t call_ts = joined ? StartUs(t.calls[op.call].enter_ns) : std::numeric_limits<int64_t>::min();
      // HTA keeps GPU ops whose correlated host call began by the end of
      // the last ProfilerStep (include_last_profiler_step=True); with fewer
      // than two ProfilerSteps it filters nothing.
      if (filter_ && (!joined || call_ts > last_end_)) continue;
      const Op o{StartUs(op.start_ns), EndUs(op.start_ns, op.end_ns), call_ts, op.start_ns, info.stream,
                 joined ? StepOf(call_ts) : -1};
      if (o.ts < settled_) exact_ = false;  // it sorts before ops already counted
      pending_.push_back(o);
    }
  }

  // No op to come starts before `ns`: the ops sorting before any such op
  // are counted and let go.
  void Settle(int64_t ns) {
    if (ns >= std::numeric_limits<int64_t>::max() / 2) {
      Count(std::numeric_limits<int64_t>::max());
      return;
    }
    Count(StartUs(ns));
  }

  // False when an op came that sorts before one already counted (an op
  // starting before its call entered): the rows may then differ from the
  // whole trace's.
  bool exact() const { return exact_; }

  std::vector<HtaIdleRow> Finish() {
    Count(std::numeric_limits<int64_t>::max());
    std::vector<HtaIdleRow> out;
    out.reserve(rows_.size());
    for (auto& [key, r] : rows_) out.push_back(r);
    return out;
  }

 private:
  struct Op {
    int64_t ts, end, call_ts;  // call_ts: INT64_MIN when no call
    int64_t start_ns;
    uint32_t stream;
    int step;
  };
  struct Range {
    int64_t lo, hi;
  };

  // HTA parses "ts" and "dur" (µs, three decimals) as doubles, rounds the
  // start up and the end (ts + dur, in doubles) down. The double of the
  // written decimal equals ns / 1000.0 (both correctly rounded).
  int64_t StartUs(int64_t ns) const {
    return static_cast<int64_t>(std::ceil(static_cast<double>(ns - base_) / 1000.0));
  }
  int64_t EndUs(int64_t start_ns, int64_t end_ns) const {
    const double ts = static_cast<double>(start_ns - base_) / 1000.0;
    const double dur = static_cast<double>(std::max<int64_t>(0, end_ns - start_ns)) / 1000.0;
    return static_cast<int64_t>(std::floor(ts + dur));
  }
  // ProfilerStep ranges as HTA sees them: [ceil(start), floor(end)). Steps
  // do not overlap (nor do their rounded ranges): at most one holds us.
  int StepOf(int64_t us) const {
    auto it = std::upper_bound(steps_.begin(), steps_.end(), us,
                               [](int64_t v, const Range& r) { return v < r.lo; });
    if (it == steps_.begin()) return -1;
    --it;
    return us < it->hi ? static_cast<int>(it - steps_.begin()) : -1;
  }

  // Counts the pending ops starting before `bound` µs, in HTA's order (by
  // stream, then start; stable): each op's gap to the one before it on its
  // stream is charged to its step.
  void Count(int64_t bound) {
    std::stable_sort(pending_.begin(), pending_.end(), [](const Op& x, const Op& y) {
      return std::tie(x.stream, x.ts, x.start_ns) < std::tie(y.stream, y.ts, y.start_ns);
    });
    size_t kept = 0;
    for (const Op& op : pending_) {
      if (op.ts >= bound) {
        pending_[kept++] = op;
        continue;
      }
      HtaIdleRow& r = rows_[{op.step, op.stream}];
      r.step = op.step;
      r.stream = op.stream;
      ++r.ops;
      auto [prev, first] = prev_end_.try_emplace(op.stream, op.end);
      if (first) continue;  // the stream's first op has no gap
      const int64_t gap = op.ts - prev->second;
      if (op.call_ts != std::numeric_limits<int64_t>::min() && op.call_ts > prev->second) {
        r.host_wait_us += gap;
      } else if (gap < kHtaKernelWaitUs) {
        r.kernel_wait_us += gap;
      } else {
        r.other_us += gap;
      }
      prev->second = op.end;
    }
    pending_.resize(kept);
    settled_ = std::max(settled_, bound);
  }

  const int64_t base_;
  std::vector<Range> steps_;
  bool filter_ = false;
  int64_t last_end_ = 0;
  std::vector<Op> pending_;
  std::map<std::pair<int, uint32_t>, HtaIdleRow> rows_;
  std::map<uint32_t, int64_t> prev_end_;  // by stream: the last op counted's end
  int64_t settled_ = std::numeric_limits<int64_t>::min();
  bool exact_ = true;
};

}  // namespace

// Everything the export writes before the calls' and ops' events and
// after them, gathered from the calls and their ops as a whole reading or
// slices give them (HeadBuilder), in time order.
struct ExportHead {
  int64_t pid = 0;
  std::string host;
  std::string trace_name;
  int64_t realtime_offset = 0;
  int64_t base = 0;
  std::vector<uint32_t> devices;
  std::vector<uint32_t> tids;
  std::vector<std::pair<uint32_t, uint32_t>> streams;  // (device, stream)
  // (step, device, stream) → its ops' first start, last end.
  std::map<std::tuple<int, uint32_t, uint32_t>, std::pair<int64_t, int64_t>> step_spans;
  std::vector<HtaIdleRow> hta;
  std::vector<std::pair<int64_t, int64_t>> timing_on;
  int64_t first_enter = std::numeric_limits<int64_t>::max();
  int64_t last_exit = std::numeric_limits<int64_t>::min();
};

namespace {

class HeadBuilder {
 public:
  HeadBuilder(const StepPlan& plan, int64_t base) : plan_(plan), hta_(plan.steps, base) {}

  // The calls [i0, i1) of t and their ops; with `all`, every op of t.
  void Add(const Timeline& t, const std::vector<uint32_t>& corr, size_t i0, size_t i1, bool all) {
    for (size_t i = i0; i < i1; ++i) {
      const ApiCall& c = t.calls[i];
      // (Consecutive duplicates skipped before the sort: one thread makes most calls.)
      if (tids_.empty() || tids_.back() != c.tid) tids_.push_back(c.tid);
      first_enter_ = std::min(first_enter_, c.enter_ns);
      last_exit_ = std::max(last_exit_, c.exit_ns);
    }
    if (tids_.size() > 4096) SortUnique(&tids_);
    for (size_t i = 0; i < t.ops.size(); ++i) {
      const DeviceOp& op = t.ops[i];
      if (!all && !SubmittedBy(op, i0, i1)) continue;
      const std::pair<uint32_t, uint32_t> ds{op.device, t.op_info[i].stream};
      if (streams_.empty() || streams_.back() != ds) streams_.push_back(ds);
      if (op.call < 0) continue;
      // The step's span on the stream: the ops of its calls.
      const int k = StepOfHostTime(plan_.steps, t.calls[op.call].enter_ns);
      if (k < 0) continue;
      auto [it, fresh] = spans_.try_emplace({k, uint32_t{op.device}, t.op_info[i].stream}, op.start_ns, op.end_ns);
      if (!fresh) {
        it->second.first = std::min(it->second.first, op.start_ns);
        it->second.second = std::max(it->second.second, op.end_ns);
      }
    }
    if (streams_.size() > 4096) SortUnique(&streams_);
    hta_.Add(t, corr, i0, i1, all);
  }

  void Settle(int64_t ns) { hta_.Settle(ns); }
  bool exact() const { return hta_.exact(); }

  // `range_tids`: the threads of the NVTX ranges.
  void Finish(const std::vector<uint32_t>& range_tids, ExportHead* head) {
    tids_.insert(tids_.end(), range_tids.begin(), range_tids.end());
    tids_.push_back(plan_.main_tid);
    SortUnique(&tids_);
    SortUnique(&streams_);
    head->tids = std::move(tids_);
    head->streams = std::move(streams_);
    for (const auto& [d, s] : head->streams) {
      if (head->devices.empty() || head->devices.back() != d) head->devices.push_back(d);
    }
    if (head->devices.empty()) head->devices.push_back(plan_.device);
    head->step_spans = std::move(spans_);
    head->hta = hta_.Finish();
    head->first_enter = first_enter_;
    head->last_exit = last_exit_;
  }

 private:
  template <typename T>
  static void SortUnique(std::vector<T>* v) {
    std::sort(v->begin(), v->end());
    v->erase(std::unique(v->begin(), v->end()), v->end());
  }

  const StepPlan& plan_;
  HtaIdleBuilder hta_;
  std::vector<uint32_t> tids_;
  std::vector<std::pair<uint32_t, uint32_t>> streams_;
  std::map<std::tuple<int, uint32_t, uint32_t>, std::pair<int64_t, int64_t>> spans_;
  int64_t first_enter_ = std::numeric_limits<int64_t>::max();
  int64_t last_exit_ = std::numeric_limits<int64_t>::min();
};

// ---- the writer

class Writer {
 public:
  // With a sink, the export goes to it a megabyte at a time and Finish()
  // returns what is left unsent (nothing, unless the sink failed); without,
  // the whole export.
  Writer(const Report& report, const StepPlan& plan, const ExportHead& head, const Timeline& names,
         const PerfettoSink* sink, size_t reserve)
      : report_(report), plan_(plan), head_(head), names_(names), base_(head.base), sink_(sink) {
    out_.reserve(sink_ == nullptr ? reserve : kFlushBytes + 64 * 1024);
  }

  // The header, the threads' and streams' names, and the steps.
  void Start() {
    Header();
    Metadata();
    Steps();
  }

  // The calls [i0, i1) of t and their ops (with `all`, every op of t).
  void Slice(const Timeline& t, size_t i0, size_t i1, bool all,
             const std::function<CallMarkView(const Timeline&, size_t)>& mark) {
    const std::vector<uint32_t> corr = CallCorrelations(t);
    Calls(t, corr, i0, i1, mark);
    Ops(t, corr, i0, i1, all);
  }

  // One event per idle gap piece on the idle track, named by its cause;
  // `call`: its call's API name (empty: none), `hotspot` its hotspot.
  void Gap(const IdleGap& g, std::string_view call, int32_t hotspot) {
    const char* cause = CauseName(g.cause);
    Begin("X", "gpu_idle", cause, plan_.device, kIdleTrackTid, g.start_ns);
    Dur(g.end_ns - g.start_ns);
    OpenArgs();
    ArgStr("cause", cause);
    Arg("step", g.step);
    if (!call.empty()) {
      ArgStr("call", call);
      if (hotspot >= 0 && hotspot < static_cast<int32_t>(report_.hotspots.size())) {
        ArgStr("hotspot", report_.hotspots[hotspot].fingerprint);
        if (std::string site = SiteString(report_.hotspots[hotspot].site); !site.empty()) {
          ArgStr("site", site);
        }
      }
    }
    End(true);
  }

  std::string Finish() {
    TimingOff();
    absl::StrAppend(&out_, "\n  ],\n  \"traceName\": ");
    AppendString(&out_, head_.trace_name);
    out_.append("\n}\n");
    Flush();
    return std::move(out_);
  }

  const absl::Status& status() const { return status_; }

 private:
  // Opens an event: separator, ph, cat, name, pid, tid, ts.
  void Begin(const char* ph, std::string_view cat, std::string_view name, int64_t pid, int64_t tid,
             int64_t ns) {
    if (sink_ != nullptr && out_.size() >= kFlushBytes) Flush();
    out_.append(first_ ? "\n{\"ph\":\"" : ",\n{\"ph\":\"");
    first_ = false;
    out_.append(ph);
    out_.append("\",\"cat\":");
    AppendString(&out_, cat);
    out_.append(",\"name\":");
    AppendString(&out_, name);
    absl::StrAppend(&out_, ",\"pid\":", pid, ",\"tid\":", tid, ",\"ts\":");
    AppendUs(&out_, ns - base_);
  }

  void Dur(int64_t ns) {
    out_.append(",\"dur\":");
    AppendUs(&out_, ns);
  }

  // Args: Arg() calls between OpenArgs() and End().
  void OpenArgs() {
    out_.append(",\"args\":{");
    first_arg_ = true;
  }
  void Key(std::string_view key) {
    if (!first_arg_) out_.push_back(',');
    first_arg_ = false;
    AppendString(&out_, key);
    out_.push_back(':');
  }
  void Arg(std::string_view key, int64_t v) {
    Key(key);
    absl::StrAppend(&out_, v);
  }
  void ArgStr(std::string_view key, std::string_view v) {
    Key(key);
    AppendString(&out_, v);
  }
  void End(bool args) { out_.append(args ? "}}" : "}"); }

  // A process's or thread's name and sort index.
  void Meta(bool process, int64_t pid, int64_t tid, std::string_view name, int64_t sort_index) {
    Begin("M", "__metadata", process ? "process_name" : "thread_name", pid, tid, base_);
    OpenArgs();
    ArgStr("name", name);
    End(true);
    Begin("M", "__metadata", process ? "process_sort_index" : "thread_sort_index", pid, tid, base_);
    OpenArgs();
    Arg("sort_index", sort_index);
    End(true);
  }

  void Header() {
    out_.append("{\n  \"schemaVersion\": 1,\n  \"deviceProperties\": [");
    bool first = true;
    for (uint32_t d : head_.devices) {
      absl::StrAppend(&out_, first ? "\n" : ",\n", "    {\"id\": ", d, ", \"name\": ",
                      "\"CUDA device ", d, "\"}");
      first = false;
    }
    // HTA finds a file's rank with the regular expression "rank":\s+(\d+),
    // line by line: keep the space and the line.
    out_.append(
        "\n  ],\n  \"distributedInfo\": {\"backend\": \"nccl\", \"rank\": 0, \"world_size\": 1},\n"
        "  \"stallscope\": {\"schema\": ");
    AppendString(&out_, kPerfettoSchema);
    out_.append(", \"trace\": ");
    AppendString(&out_, head_.trace_name);
    absl::StrAppend(&out_, ", \"pid\": ", head_.pid, ", \"host\": ");
    AppendString(&out_, head_.host);
    absl::StrAppend(&out_, ", \"device\": ", plan_.device, ", \"main_tid\": ", plan_.main_tid,
                    ", \"step_source\": ");
    AppendString(&out_, report_.step_source);
    absl::StrAppend(&out_, ", \"clock\": \"CLOCK_MONOTONIC\", \"base_monotonic_ns\": ", base_,
                    ", \"idle_track_tid\": ", kIdleTrackTid, ",\n    \"hta_idle_time_us\": [");
    first = true;
    for (const HtaIdleRow& r : head_.hta) {
      absl::StrAppend(&out_, first ? "\n" : ",\n", "      {\"step\": ", r.step, ", \"stream\": ",
                      r.stream, ", \"ops\": ", r.ops, ", \"host_wait\": ", r.host_wait_us,
                      ", \"kernel_wait\": ", r.kernel_wait_us, ", \"other\": ", r.other_us, "}");
      first = false;
    }
    absl::StrAppend(&out_, "\n    ]},\n  \"displayTimeUnit\": \"ms\",\n  \"baseTimeNanoseconds\": ",
                    base_ + head_.realtime_offset, ",\n  \"traceEvents\": [");
  }

  void Metadata() {
    const int64_t pid = head_.pid;
    Meta(true, pid, 0, absl::StrCat("pid ", pid, head_.host.empty() ? "" : " on ", head_.host), 0);
    for (uint32_t tid : head_.tids) {
      auto it = names_.thread_names.find(tid);
      std::string name = it != names_.thread_names.end() && !it->second.empty()
                             ? absl::StrCat(it->second, " (", tid, ")")
                             : absl::StrCat("thread ", tid);
      if (tid == plan_.main_tid) absl::StrAppend(&name, " [launching thread]");
      Meta(false, pid, tid, name, tid == plan_.main_tid ? 0 : 1);
    }
    for (uint32_t d : head_.devices) {
      Meta(true, d, 0, absl::StrCat("GPU ", d), 0x1000000 + d);
    }
    for (const auto& [d, s] : head_.streams) {
      Meta(false, d, s, absl::StrCat("stream ", s), s);
    }
    Meta(false, plan_.device, kIdleTrackTid, "GPU idle (cause)", -1);
  }

  // ProfilerStep#k on the launching thread (its host range), and per stream
  // the span of the step's ops on that stream (gpu_user_annotation).
  void Steps() {
    const auto& steps = plan_.steps;
    for (size_t k = 0; k < steps.size(); ++k) {
      const std::string name = absl::StrCat("ProfilerStep#", k);
      Begin("X", "user_annotation", name, head_.pid, plan_.main_tid, steps[k].host_start_ns);
      Dur(steps[k].host_end_ns - steps[k].host_start_ns);
      OpenArgs();
      Arg("step", static_cast<int64_t>(k));
      Arg("device_start_ns", steps[k].start_ns);
      Arg("device_end_ns", steps[k].end_ns);
      End(true);
    }
    for (const auto& [key, span] : head_.step_spans) {
      const auto& [k, device, stream] = key;
      // Not "ProfilerStep#k": HTA takes every event whose name holds
      // "ProfilerStep" for a step of the host timeline.
      Begin("X", "gpu_user_annotation", absl::StrCat("Step #", k), device, stream, span.first);
      Dur(span.second - span.first);
      OpenArgs();
      Arg("device", device);
      Arg("stream", stream);
      End(true);
    }
  }

  // Host calls: cuda_driver (our hooks are driver entry points), cpu_op for
  // NCCL calls. No "stream" arg: HTA takes any event with a stream and a
  // correlation for a GPU op.
  void Calls(const Timeline& t, const std::vector<uint32_t>& corr, size_t i0, size_t i1,
             const std::function<CallMarkView(const Timeline&, size_t)>& mark) {
    for (size_t i = i0; i < i1; ++i) {
      const ApiCall& c = t.calls[i];
      const ApiInfo& api = t.Api(c.api);
      Begin("X", api.category == ApiCategory::kNccl ? "cpu_op" : "cuda_driver", api.name, head_.pid, c.tid,
            c.enter_ns);
      Dur(c.exit_ns - c.enter_ns);
      OpenArgs();
      const CallInfo& info = t.call_info[i];
      if (info.op_count > 0) {
        Arg("correlation", corr[i]);
        Arg("External id", static_cast<int64_t>(info.correlation));
      }
      if (info.bytes != 0) Arg("bytes", static_cast<int64_t>(info.bytes));
      if (info.result != 0) Arg("result", info.result);
      const CallMarkView m = mark(t, i);
      if (m.sync) {
        ArgStr("sync", api.category == ApiCategory::kSync ? "explicit" : "implicit");
        if (m.idle > 0) Arg("idle_caused_ns", m.idle);
      }
      if (m.hotspot >= 0 && m.hotspot < static_cast<int32_t>(report_.hotspots.size())) {
        const Hotspot& h = report_.hotspots[m.hotspot];
        ArgStr("hotspot", h.fingerprint);
        if (std::string site = SiteString(h.site); !site.empty()) ArgStr("site", site);
        ArgStr("suggestion", h.suggestion);
        if (m.idle == 0) Arg("idle_caused_ns", 0);
      }
      End(true);
    }
  }

  // Device ops on pid = device, tid = stream, with the flow arrow from the
  // submitting call (one per call and correlation id).
  void Ops(const Timeline& t, const std::vector<uint32_t>& corr, size_t i0, size_t i1, bool all) {
    std::vector<uint8_t> flowed(t.calls.size(), 0);
    for (size_t i = 0; i < t.ops.size(); ++i) {
      const DeviceOp& op = t.ops[i];
      if (!all && !SubmittedBy(op, i0, i1)) continue;
      const OpInfo& info = t.op_info[i];
      const uint32_t device = op.device;
      Begin("X", OpCategory(op), OpName(t, i), device, info.stream, op.start_ns);
      Dur(op.end_ns - op.start_ns);
      OpenArgs();
      Arg("device", device);
      Arg("context", info.context);
      Arg("stream", info.stream);
      Arg("correlation", info.correlation);
      if (op.call >= 0) Arg("External id", static_cast<int64_t>(t.call_info[op.call].correlation));
      if (op.kind == DeviceOpKind::kMemcpy || op.kind == DeviceOpKind::kMemset) {
        Arg("bytes", static_cast<int64_t>(info.bytes));
      }
      End(true);
      if (op.call < 0) continue;
      const bool first_of_call = !flowed[op.call];
      if (!first_of_call && info.correlation == corr[op.call]) continue;
      flowed[op.call] = 1;
      const ApiCall& c = t.calls[op.call];
      Begin("s", "ac2g", "ac2g", head_.pid, c.tid, c.enter_ns);
      absl::StrAppend(&out_, ",\"id\":", info.correlation);
      End(false);
      Begin("f", "ac2g", "ac2g", device, info.stream, op.start_ns);
      absl::StrAppend(&out_, ",\"id\":", info.correlation, ",\"bp\":\"e\"");
      End(false);
    }
  }

  // Sampled device timing: each stretch with timing off, on the idle track
  // (no device op and no idle gap there is not an idle GPU: it was not
  // timed), clipped to the host calls' span.
  void TimingOff() {
    const auto& on = head_.timing_on;
    if (on.empty() || head_.first_enter > head_.last_exit) return;
    const int64_t first = head_.first_enter, last = head_.last_exit;
    auto emit = [&](int64_t from, int64_t to) {
      from = std::max(from, first);
      to = std::min(to, last);
      if (to <= from) return;
      Begin("X", "device_timing", "device timing off", plan_.device, kIdleTrackTid, from);
      Dur(to - from);
      OpenArgs();
      Arg("sampled_every", static_cast<int64_t>(plan_.sampled_every));
      End(true);
    };
    int64_t off_from = std::numeric_limits<int64_t>::min();
    for (const auto& [from, to] : on) {
      emit(off_from, from);
      off_from = to;
    }
    emit(off_from, std::numeric_limits<int64_t>::max());
  }

  // Sends what is buffered to the sink; after a failed send, what follows
  // is dropped (the status says why).
  void Flush() {
    if (sink_ == nullptr) return;
    if (status_.ok()) status_ = (*sink_)(out_);
    out_.clear();
  }

  const Report& report_;
  const StepPlan& plan_;
  const ExportHead& head_;
  const Timeline& names_;  // the thread names
  const int64_t base_;
  static constexpr size_t kFlushBytes = 1 << 20;
  const PerfettoSink* sink_ = nullptr;
  absl::Status status_;
  std::string out_;
  bool first_ = true;
  bool first_arg_ = true;
};

// What the header says of the process and its clock.
void HeadOfProcess(const Timeline& t, const std::string& path, ExportHead* head) {
  head->pid = t.header.pid;
  head->host = t.host;
  head->trace_name = BaseName(path);
  head->realtime_offset = t.header.start_realtime_ns != 0
                              ? static_cast<int64_t>(t.header.start_realtime_ns) -
                                    static_cast<int64_t>(t.header.start_mono_ns)
                              : 0;
  head->timing_on = DeviceTimingOn(t);
}

// The export of a whole reading, into one string or to `sink`.
std::string ExportWhole(const Report& report, const ProcessAnalysis& a, const PerfettoSink* sink,
                        absl::Status* status) {
  const Timeline& t = a.timeline;
  ExportHead head;
  HeadOfProcess(t, t.path, &head);
  head.base = PerfettoBaseNs(t);
  std::vector<uint32_t> range_tids;
  for (const NvtxRange& r : t.ranges) range_tids.push_back(r.tid);
  HeadBuilder b(a.plan, head.base);
  b.Add(t, CallCorrelations(t), 0, t.calls.size(), true);
  b.Finish(range_tids, &head);
  // About 150 bytes per event: calls, ops, two flow events per op.
  Writer w(report, a.plan, head, t, sink, 4096 + 150 * (t.calls.size() + 3 * t.ops.size() + a.gaps.size()));
  w.Start();
  w.Slice(t, 0, t.calls.size(), true, [&a](const Timeline&, size_t i) {
    CallMarkView m;
    m.sync = i < a.classes.size() && a.classes[i] == CallClass::kSync;
    m.idle = a.idle_caused.Get(i);
    m.hotspot = i < a.hotspot_of_call.size() ? a.hotspot_of_call[i] : -1;
    return m;
  });
  for (const IdleGap& g : a.gaps) {
    const bool call = g.call >= 0 && g.call < static_cast<int32_t>(t.calls.size());
    const int32_t h = call && g.call < static_cast<int32_t>(a.hotspot_of_call.size()) ? a.hotspot_of_call[g.call] : -1;
    w.Gap(g, call ? std::string_view(t.Api(t.calls[g.call].api).name) : std::string_view(), h);
  }
  std::string out = w.Finish();
  *status = w.status();
  return out;
}

}  // namespace

int64_t PerfettoBaseNs(const Timeline& t) {
  int64_t lo = std::numeric_limits<int64_t>::max();
  if (!t.calls.empty()) lo = std::min(lo, t.calls.front().enter_ns);  // sorted by enter
  if (!t.ops.empty()) lo = std::min(lo, t.ops.front().start_ns);      // sorted by start
  if (!t.ranges.empty()) lo = std::min(lo, t.ranges.front().start_ns);
  return BaseOf(lo);
}

std::vector<HtaIdleRow> HtaIdleBreakdown(const ProcessAnalysis& a) {
  const Timeline& t = a.timeline;
  HtaIdleBuilder b(a.plan.steps, PerfettoBaseNs(t));
  b.Add(t, CallCorrelations(t), 0, t.calls.size(), true);
  return b.Finish();
}

absl::StatusOr<std::string> RenderPerfetto(const Report& report, const ProcessAnalysis& analysis) {
  absl::Status status;
  return ExportWhole(report, analysis, nullptr, &status);
}

absl::Status StreamPerfetto(const Report& report, const ProcessAnalysis& analysis, const PerfettoSink& sink) {
  absl::Status status;
  ExportWhole(report, analysis, &sink, &status);
  return status;
}

PerfettoFromFile::PerfettoFromFile(const Report& report, const StreamedProcess& process,
                                   std::unique_ptr<ExportHead> head)
    : report_(&report), process_(&process), head_(std::move(head)) {}
PerfettoFromFile::PerfettoFromFile(PerfettoFromFile&&) noexcept = default;
PerfettoFromFile::~PerfettoFromFile() = default;

// The progress of one of two passes over as many slices (`second`: the
// second), as of both.
std::function<void(uint64_t, uint64_t)> HalfOf(const std::function<void(uint64_t, uint64_t)>& progress, bool second) {
  if (!progress) return nullptr;
  return [progress, second](uint64_t done, uint64_t total) {
    progress((second ? total : 0) + done, 2 * total);
  };
}

absl::StatusOr<PerfettoFromFile> PerfettoFromFile::Prepare(const Report& report, const StreamedProcess& process,
                                                           const std::function<void(uint64_t, uint64_t)>& progress) {
  if (absl::Status refused = ExportFromFileRefusal(process); !refused.ok()) return refused;
  const StreamedAnalysis& s = process.analysis;
  const TraceIndex& index = process.index;
  auto head = std::make_unique<ExportHead>();
  HeadOfProcess(s.first_slice, process.path, head.get());
  // PerfettoBaseNs from the index: the earliest enter and op start, and
  // range start.
  int64_t lo = s.first_range_ns;
  for (const ChunkSpan& c : index.chunks) {
    const bool records = c.type == static_cast<uint16_t>(trace::ChunkType::kApi) ||
                         c.type == static_cast<uint16_t>(trace::ChunkType::kDevice);
    if (records && c.count > 0) lo = std::min(lo, static_cast<int64_t>(c.lo));
  }
  head->base = BaseOf(lo);
  auto reader = SliceReader::OpenFile(process.path, index);
  if (!reader.ok()) return reader.status();
  HeadBuilder b(process.plan, head->base);
  absl::Status read = ForEachCallSlice(&*reader, index, StreamOptions{}.chunks_per_slice,
                                       [&](const Timeline& t, int64_t from, int64_t to) {
                                         const auto [i0, i1] = EnteringIn(t.calls, from, to);
                                         b.Add(t, CallCorrelations(t), i0, i1, false);
                                         // An op starts after its call entered.
                                         b.Settle(to);
                                         return absl::OkStatus();
                                       },
                                       HalfOf(progress, false), process.adjust);
  if (!read.ok()) return read;
  if (!b.exact()) return absl::UnimplementedError("a device op that starts before its call");
  b.Finish(s.range_tids, head.get());
  return PerfettoFromFile(report, process, std::move(head));
}

absl::Status PerfettoFromFile::Stream(const PerfettoSink& sink,
                                      const std::function<void(uint64_t, uint64_t)>& progress) const {
  const StreamedAnalysis& s = process_->analysis;
  const CallMarks marks(s);
  auto reader = SliceReader::OpenFile(process_->path, process_->index);
  if (!reader.ok()) return reader.status();
  Writer w(*report_, process_->plan, *head_, s.first_slice, &sink, 0);
  w.Start();
  absl::Status read = ForEachCallSlice(&*reader, process_->index, StreamOptions{}.chunks_per_slice,
                                       [&](const Timeline& t, int64_t from, int64_t to) {
                                         const auto [i0, i1] = EnteringIn(t.calls, from, to);
                                         w.Slice(t, i0, i1, false, [&](const Timeline& tt, size_t i) {
                                           return marks.Of(CallKey::Of(tt.calls[i]));
                                         });
                                         return w.status();
                                       },
                                       HalfOf(progress, true), process_->adjust);
  if (!read.ok()) return read;
  if (process_->gaps == nullptr) return absl::InternalError("the idle gaps were not kept");
  absl::Status gaps = process_->gaps->ForEach([&](const GapSpill::Gap& g) {
    if (g.has_call) {
      w.Gap(g.gap, s.first_slice.Api(g.call.api).name, marks.Of(g.call).hotspot);
    } else {
      w.Gap(g.gap, {}, -1);
    }
  });
  if (!gaps.ok()) return gaps;
  w.Finish();
  return w.status();
}

}  // namespace stallscope::analyzer
