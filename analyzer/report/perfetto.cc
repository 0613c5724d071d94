// Chrome trace JSON export in Kineto's shape (see report_perfetto.h and
// docs/analyzer.md "Timeline export"). Every event is appended to one string
// by hand: one event per line, strings escaped, times in microseconds with
// three decimals (exact nanoseconds) relative to PerfettoBaseNs.
#include "analyzer/report/perfetto.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <string_view>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"

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

// ---- the writer

class Writer {
 public:
  Writer(const Report& report, const ProcessAnalysis& a)
      : report_(report), a_(a), t_(a.timeline), base_(PerfettoBaseNs(a.timeline)) {}

  // With a sink, the export goes to it a megabyte at a time and Run()
  // returns what is left unsent (nothing, unless the sink failed); without,
  // the whole export.
  Writer(const Report& report, const ProcessAnalysis& a, const PerfettoSink* sink) : Writer(report, a) {
    sink_ = sink;
  }

  std::string Run() {
    if (sink_ == nullptr) {
      // About 150 bytes per event: calls, ops, two flow events per op.
      out_.reserve(4096 + 150 * (t_.calls.size() + 3 * t_.ops.size() + a_.gaps.size()));
    } else {
      out_.reserve(kFlushBytes + 64 * 1024);
    }
    Header();
    Metadata();
    Steps();
    Calls();
    Ops();
    Gaps();
    TimingOff();
    absl::StrAppend(&out_, "\n  ],\n  \"traceName\": ");
    AppendString(&out_, Basename(t_.path));
    out_.append("\n}\n");
    Flush();
    return std::move(out_);
  }

  const absl::Status& status() const { return status_; }

 private:
  static std::string_view Basename(std::string_view path) {
    const size_t slash = path.rfind('/');
    return slash == std::string_view::npos ? path : path.substr(slash + 1);
  }

  int64_t Pid() const { return t_.header.pid; }

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
    const int64_t realtime_offset =
        t_.header.start_realtime_ns != 0
            ? static_cast<int64_t>(t_.header.start_realtime_ns) -
                  static_cast<int64_t>(t_.header.start_mono_ns)
            : 0;
    out_.append("{\n  \"schemaVersion\": 1,\n  \"deviceProperties\": [");
    bool first = true;
    for (uint32_t d : Devices()) {
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
    AppendString(&out_, Basename(t_.path));
    absl::StrAppend(&out_, ", \"pid\": ", Pid(), ", \"host\": ");
    AppendString(&out_, t_.host);
    absl::StrAppend(&out_, ", \"device\": ", a_.plan.device, ", \"main_tid\": ", a_.plan.main_tid,
                    ", \"step_source\": ");
    AppendString(&out_, report_.step_source);
    absl::StrAppend(&out_, ", \"clock\": \"CLOCK_MONOTONIC\", \"base_monotonic_ns\": ", base_,
                    ", \"idle_track_tid\": ", kIdleTrackTid, ",\n    \"hta_idle_time_us\": [");
    first = true;
    for (const HtaIdleRow& r : HtaIdleBreakdown(a_)) {
      absl::StrAppend(&out_, first ? "\n" : ",\n", "      {\"step\": ", r.step, ", \"stream\": ",
                      r.stream, ", \"ops\": ", r.ops, ", \"host_wait\": ", r.host_wait_us,
                      ", \"kernel_wait\": ", r.kernel_wait_us, ", \"other\": ", r.other_us, "}");
      first = false;
    }
    absl::StrAppend(&out_, "\n    ]},\n  \"displayTimeUnit\": \"ms\",\n  \"baseTimeNanoseconds\": ",
                    base_ + realtime_offset, ",\n  \"traceEvents\": [");
  }

  std::vector<uint32_t> Devices() const {
    std::vector<uint32_t> d;
    for (const DeviceOp& op : t_.ops) {
      if (std::find(d.begin(), d.end(), op.device) == d.end()) d.push_back(op.device);
    }
    if (d.empty()) d.push_back(a_.plan.device);
    std::sort(d.begin(), d.end());
    return d;
  }

  void Metadata() {
    Meta(true, Pid(), 0, absl::StrCat("pid ", Pid(), t_.host.empty() ? "" : " on ", t_.host), 0);
    std::vector<uint32_t> tids;
    // (Consecutive duplicates skipped before the sort: one thread makes most calls.)
    for (const ApiCall& c : t_.calls) {
      if (tids.empty() || tids.back() != c.tid) tids.push_back(c.tid);
    }
    for (const NvtxRange& r : t_.ranges) tids.push_back(r.tid);
    tids.push_back(a_.plan.main_tid);
    std::sort(tids.begin(), tids.end());
    tids.erase(std::unique(tids.begin(), tids.end()), tids.end());
    for (uint32_t tid : tids) {
      auto it = t_.thread_names.find(tid);
      std::string name = it != t_.thread_names.end() && !it->second.empty()
                             ? absl::StrCat(it->second, " (", tid, ")")
                             : absl::StrCat("thread ", tid);
      if (tid == a_.plan.main_tid) absl::StrAppend(&name, " [launching thread]");
      Meta(false, Pid(), tid, name, tid == a_.plan.main_tid ? 0 : 1);
    }
    std::vector<std::pair<uint32_t, uint32_t>> streams;  // (device, stream)
    for (size_t i = 0; i < t_.ops.size(); ++i) {
      const std::pair<uint32_t, uint32_t> ds{t_.ops[i].device, t_.op_info[i].stream};
      if (streams.empty() || streams.back() != ds) streams.push_back(ds);
    }
    std::sort(streams.begin(), streams.end());
    streams.erase(std::unique(streams.begin(), streams.end()), streams.end());
    for (uint32_t d : Devices()) {
      Meta(true, d, 0, absl::StrCat("GPU ", d), 0x1000000 + d);
    }
    for (const auto& [d, s] : streams) {
      Meta(false, d, s, absl::StrCat("stream ", s), s);
    }
    Meta(false, a_.plan.device, kIdleTrackTid, "GPU idle (cause)", -1);
  }

  // ProfilerStep#k on the launching thread (its host range), and per stream
  // the span of the step's ops on that stream (gpu_user_annotation).
  void Steps() {
    const auto& steps = a_.plan.steps;
    for (size_t k = 0; k < steps.size(); ++k) {
      const std::string name = absl::StrCat("ProfilerStep#", k);
      Begin("X", "user_annotation", name, Pid(), a_.plan.main_tid, steps[k].host_start_ns);
      Dur(steps[k].host_end_ns - steps[k].host_start_ns);
      OpenArgs();
      Arg("step", static_cast<int64_t>(k));
      Arg("device_start_ns", steps[k].start_ns);
      Arg("device_end_ns", steps[k].end_ns);
      End(true);
    }
    // (step, device, stream) → first start, last end.
    std::map<std::tuple<int, uint32_t, uint32_t>, std::pair<int64_t, int64_t>> spans;
    for (size_t i = 0; i < t_.ops.size(); ++i) {
      const DeviceOp& op = t_.ops[i];
      if (op.call < 0) continue;
      const int k = StepOfHostTime(steps, t_.calls[op.call].enter_ns);
      if (k < 0) continue;
      auto [it, fresh] = spans.try_emplace({k, uint32_t{op.device}, t_.op_info[i].stream},
                                           op.start_ns, op.end_ns);
      if (!fresh) {
        it->second.first = std::min(it->second.first, op.start_ns);
        it->second.second = std::max(it->second.second, op.end_ns);
      }
    }
    for (const auto& [key, span] : spans) {
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
  void Calls() {
    const std::vector<uint32_t> corr = CallCorrelations(t_);
    for (size_t i = 0; i < t_.calls.size(); ++i) {
      const ApiCall& c = t_.calls[i];
      const ApiInfo& api = t_.Api(c.api);
      Begin("X", api.category == ApiCategory::kNccl ? "cpu_op" : "cuda_driver", api.name, Pid(),
            c.tid, c.enter_ns);
      Dur(c.exit_ns - c.enter_ns);
      OpenArgs();
      const CallInfo& info = t_.call_info[i];
      if (info.op_count > 0) {
        Arg("correlation", corr[i]);
        Arg("External id", static_cast<int64_t>(info.correlation));
      }
      if (info.bytes != 0) Arg("bytes", static_cast<int64_t>(info.bytes));
      if (info.result != 0) Arg("result", info.result);
      if (i < a_.classes.size() && a_.classes[i] == CallClass::kSync) {
        ArgStr("sync", api.category == ApiCategory::kSync ? "explicit" : "implicit");
        if (const int64_t idle = a_.idle_caused.Get(i); idle > 0) Arg("idle_caused_ns", idle);
      }
      if (i < a_.hotspot_of_call.size() && a_.hotspot_of_call[i] >= 0 &&
          a_.hotspot_of_call[i] < static_cast<int32_t>(report_.hotspots.size())) {
        const Hotspot& h = report_.hotspots[a_.hotspot_of_call[i]];
        ArgStr("hotspot", h.fingerprint);
        if (std::string site = SiteString(h.site); !site.empty()) ArgStr("site", site);
        ArgStr("suggestion", h.suggestion);
        if (a_.idle_caused.Get(i) == 0) Arg("idle_caused_ns", 0);
      }
      End(true);
    }
  }

  // Device ops on pid = device, tid = stream, with the flow arrow from the
  // submitting call (one per call and correlation id).
  void Ops() {
    const std::vector<uint32_t> corr = CallCorrelations(t_);
    std::vector<uint8_t> flowed(t_.calls.size(), 0);
    for (size_t i = 0; i < t_.ops.size(); ++i) {
      const DeviceOp& op = t_.ops[i];
      const OpInfo& info = t_.op_info[i];
      const uint32_t device = op.device;
      Begin("X", OpCategory(op), OpName(t_, i), device, info.stream, op.start_ns);
      Dur(op.end_ns - op.start_ns);
      OpenArgs();
      Arg("device", device);
      Arg("context", info.context);
      Arg("stream", info.stream);
      Arg("correlation", info.correlation);
      if (op.call >= 0) Arg("External id", static_cast<int64_t>(t_.call_info[op.call].correlation));
      if (op.kind == DeviceOpKind::kMemcpy || op.kind == DeviceOpKind::kMemset) {
        Arg("bytes", static_cast<int64_t>(info.bytes));
      }
      End(true);
      if (op.call < 0) continue;
      const bool first_of_call = !flowed[op.call];
      if (!first_of_call && info.correlation == corr[op.call]) continue;
      flowed[op.call] = 1;
      const ApiCall& c = t_.calls[op.call];
      Begin("s", "ac2g", "ac2g", Pid(), c.tid, c.enter_ns);
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
    const auto on = DeviceTimingOn(t_);
    if (on.empty() || t_.calls.empty()) return;
    int64_t first = std::numeric_limits<int64_t>::max(), last = std::numeric_limits<int64_t>::min();
    for (const ApiCall& c : t_.calls) {
      first = std::min(first, c.enter_ns);
      last = std::max(last, c.exit_ns);
    }
    auto emit = [&](int64_t from, int64_t to) {
      from = std::max(from, first);
      to = std::min(to, last);
      if (to <= from) return;
      Begin("X", "device_timing", "device timing off", a_.plan.device, kIdleTrackTid, from);
      Dur(to - from);
      OpenArgs();
      Arg("sampled_every", static_cast<int64_t>(a_.plan.sampled_every));
      End(true);
    };
    int64_t off_from = std::numeric_limits<int64_t>::min();
    for (const auto& [from, to] : on) {
      emit(off_from, from);
      off_from = to;
    }
    emit(off_from, std::numeric_limits<int64_t>::max());
  }

  // One event per idle gap piece on the idle track, named by its cause.
  void Gaps() {
    for (const IdleGap& g : a_.gaps) {
      const char* cause = CauseName(g.cause);
      Begin("X", "gpu_idle", cause, a_.plan.device, kIdleTrackTid, g.start_ns);
      Dur(g.end_ns - g.start_ns);
      OpenArgs();
      ArgStr("cause", cause);
      Arg("step", g.step);
      if (g.call >= 0 && g.call < static_cast<int32_t>(t_.calls.size())) {
        ArgStr("call", t_.Api(t_.calls[g.call].api).name);
        const int32_t h = g.call < static_cast<int32_t>(a_.hotspot_of_call.size())
                              ? a_.hotspot_of_call[g.call]
                              : -1;
        if (h >= 0 && h < static_cast<int32_t>(report_.hotspots.size())) {
          ArgStr("hotspot", report_.hotspots[h].fingerprint);
          if (std::string site = SiteString(report_.hotspots[h].site); !site.empty()) {
            ArgStr("site", site);
          }
        }
      }
      End(true);
    }
  }

  const Report& report_;
  const ProcessAnalysis& a_;
  const Timeline& t_;
  const int64_t base_;
  // Sends what is buffered to the sink; after a failed send, what follows
  // is dropped (the status says why).
  void Flush() {
    if (sink_ == nullptr) return;
    if (status_.ok()) status_ = (*sink_)(out_);
    out_.clear();
  }

  static constexpr size_t kFlushBytes = 1 << 20;
  const PerfettoSink* sink_ = nullptr;
  absl::Status status_;
  std::string out_;
  bool first_ = true;
  bool first_arg_ = true;
};

}  // namespace

int64_t PerfettoBaseNs(const Timeline& t) {
  int64_t lo = std::numeric_limits<int64_t>::max();
  if (!t.calls.empty()) lo = std::min(lo, t.calls.front().enter_ns);  // sorted by enter
  if (!t.ops.empty()) lo = std::min(lo, t.ops.front().start_ns);      // sorted by start
  if (!t.ranges.empty()) lo = std::min(lo, t.ranges.front().start_ns);
  if (lo == std::numeric_limits<int64_t>::max() || lo < 0) return 0;
  return lo / 1000 * 1000;
}

std::vector<HtaIdleRow> HtaIdleBreakdown(const ProcessAnalysis& a) {
  const Timeline& t = a.timeline;
  const int64_t base = PerfettoBaseNs(t);
  // HTA parses "ts" and "dur" (µs, three decimals) as doubles, rounds the
  // start up and the end (ts + dur, in doubles) down. The double of the
  // written decimal equals ns / 1000.0 (both correctly rounded).
  const auto start_us = [&](int64_t ns) {
    return static_cast<int64_t>(std::ceil(static_cast<double>(ns - base) / 1000.0));
  };
  const auto end_us = [&](int64_t start_ns, int64_t end_ns) {
    const double ts = static_cast<double>(start_ns - base) / 1000.0;
    const double dur = static_cast<double>(std::max<int64_t>(0, end_ns - start_ns)) / 1000.0;
    return static_cast<int64_t>(std::floor(ts + dur));
  };
  // ProfilerStep ranges as HTA sees them: [ceil(start), floor(end)).
  struct Range {
    int64_t lo, hi;
  };
  std::vector<Range> steps;
  for (const StepSpan& s : a.plan.steps) {
    steps.push_back({start_us(s.host_start_ns), end_us(s.host_start_ns, s.host_end_ns)});
  }
  // Steps do not overlap (nor do their rounded ranges): at most one holds us.
  const auto step_of = [&](int64_t us) {
    auto it = std::upper_bound(steps.begin(), steps.end(), us,
                               [](int64_t v, const Range& r) { return v < r.lo; });
    if (it == steps.begin()) return -1;
    --it;
    return us < it->hi ? static_cast<int>(it - steps.begin()) : -1;
  };
  // HTA keeps GPU ops whose correlated host call began by the end of the
  // last ProfilerStep (include_last_profiler_step=True); with fewer than two
  // ProfilerSteps it filters nothing.
  const bool filter = steps.size() >= 2;
  const int64_t last_end = filter ? steps.back().hi : 0;
  struct Op {
    int64_t ts, end, call_ts;  // call_ts: INT64_MIN when no call
    int64_t start_ns;
    uint32_t stream;
    int step;
  };
  // An op is joined to its call when it carries the call's "correlation"
  // (the call's first op's id; see CallCorrelations).
  const std::vector<uint32_t> corr = CallCorrelations(t);
  std::vector<Op> ops;
  for (size_t i = 0; i < t.ops.size(); ++i) {
    const DeviceOp& op = t.ops[i];
    const OpInfo& info = t.op_info[i];
    const bool joined = op.call >= 0 && corr[op.call] == info.correlation;
    const int64_t call_ts = joined ? start_us(t.calls[op.call].enter_ns)
                                   : std::numeric_limits<int64_t>::min();
    if (filter && (!joined || call_ts > last_end)) continue;
    ops.push_back({start_us(op.start_ns), end_us(op.start_ns, op.end_ns), call_ts, op.start_ns,
                   info.stream, joined ? step_of(call_ts) : -1});
  }
  std::stable_sort(ops.begin(), ops.end(), [](const Op& x, const Op& y) {
    return std::tie(x.stream, x.ts, x.start_ns) < std::tie(y.stream, y.ts, y.start_ns);
  });
  std::map<std::pair<int, uint32_t>, HtaIdleRow> rows;
  for (size_t i = 0; i < ops.size(); ++i) {
    const Op& op = ops[i];
    HtaIdleRow& r = rows[{op.step, op.stream}];
    r.step = op.step;
    r.stream = op.stream;
    ++r.ops;
    if (i == 0 || ops[i - 1].stream != op.stream) continue;
    const int64_t prev_end = ops[i - 1].end;
    const int64_t gap = op.ts - prev_end;
    if (op.call_ts != std::numeric_limits<int64_t>::min() && op.call_ts > prev_end) {
      r.host_wait_us += gap;
    } else if (gap < kHtaKernelWaitUs) {
      r.kernel_wait_us += gap;
    } else {
      r.other_us += gap;
    }
  }
  std::vector<HtaIdleRow> out;
  out.reserve(rows.size());
  for (auto& [key, r] : rows) out.push_back(r);
  return out;
}

absl::StatusOr<std::string> RenderPerfetto(const Report& report, const ProcessAnalysis& analysis) {
  return Writer(report, analysis).Run();
}

absl::Status StreamPerfetto(const Report& report, const ProcessAnalysis& analysis, const PerfettoSink& sink) {
  Writer w(report, analysis, &sink);
  w.Run();
  return w.status();
}

}  // namespace stallscope::analyzer
