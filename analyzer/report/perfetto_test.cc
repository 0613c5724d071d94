// Tests of the timeline export (report_perfetto.h): valid JSON in Kineto's
// shape, one event per call and device op, flow arrows paired by
// correlation, idle-gap events that sum to the report's causes, hotspot
// call sites, escaping, and HTA's idle-time breakdown recomputed by hand.
#include "analyzer/report/perfetto.h"

#include <catch2/catch.hpp>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <regex>

#include "analyzer/testing/test_util.h"
#include "nlohmann/json.hpp"

namespace stallscope::analyzer {
namespace {

using Json = nlohmann::json;
using testing::kUs;
using testing::TraceBuilder;
namespace tf = stallscope::trace;

struct Exported {
  Report report;
  ProcessAnalysis analysis;
  std::string text;
  Json json;
};

Exported Export(const TraceBuilder& b) {
  Exported e;
  e.analysis.timeline = testing::ReadOrDie(b);
  auto r = AnalyzeTimeline(e.analysis.timeline, {}, &e.analysis);
  REQUIRE(r.ok());
  e.report = std::move(*r);
  auto text = RenderPerfetto(e.report, e.analysis);
  REQUIRE(text.ok());
  e.text = std::move(*text);
  e.json = Json::parse(e.text);  // throws (fails the test) on invalid JSON
  return e;
}

int64_t Ns(const Json& us) { return std::llround(us.get<double>() * 1000.0); }

// Four marked steps on thread 100: a memset, kernels on two streams, a
// synchronizing `.item()` with a Python site, a pageable copy, and a
// data-loader pause (host_wait) before each step.
TraceBuilder Sample() {
  TraceBuilder b;
  auto api = testing::AddStandardApis(&b);
  const uint32_t item = b.PythonStack({{"train.py", "train_step", 42}});
  b.Thread(100, "python");
  b.Thread(200, "loader");
  uint32_t cupti = 1;
  uint64_t external = 1000;
  auto submit = [&](uint16_t a, int64_t enter, int64_t start, int64_t end, tf::DeviceOpKind kind,
                    const std::string& name, uint32_t stream, uint64_t bytes = 0) {
    b.Call(100, a, enter, enter + 5 * kUs, {.correlation = external, .bytes = bytes});
    b.Device(start, end, kind, name, cupti, stream, 0, bytes, kind == tf::DeviceOpKind::kMemcpy ? 2 : 0);
    b.Correlate(external++, cupti++);
  };
  int64_t t = 1'000'000'000;
  for (int k = 0; k < 4; ++k) {
    b.Range(100, t, t + 2000 * kUs, "step " + std::to_string(k));
    b.Call(200, api.other, t + 10 * kUs, t + 20 * kUs);
    const int64_t h = t + 400 * kUs;  // after the input wait
    submit(api.memset, h, h + 10 * kUs, h + 20 * kUs, tf::DeviceOpKind::kMemset, "", 7, 256);
    submit(api.launch, h + 10 * kUs, h + 30 * kUs, h + 300 * kUs, tf::DeviceOpKind::kKernel, "gemm", 7);
    submit(api.launch, h + 20 * kUs, h + 40 * kUs, h + 140 * kUs, tf::DeviceOpKind::kKernel, "aux", 9);
    submit(api.launch, h + 30 * kUs, h + 300 * kUs, h + 500 * kUs, tf::DeviceOpKind::kKernel, "relu", 7);
    b.Call(100, api.sync, h + 40 * kUs, h + 505 * kUs, {.python_stack = item});
    submit(api.memcpy, h + 600 * kUs, h + 600 * kUs, h + 640 * kUs, tf::DeviceOpKind::kMemcpy, "", 7,
           4096);
    t += 2000 * kUs;
  }
  return b;
}

std::vector<Json> Events(const Json& j, const std::string& ph, const std::string& cat = "") {
  std::vector<Json> v;
  for (const Json& e : j["traceEvents"]) {
    if (e["ph"] == ph && (cat.empty() || e["cat"] == cat)) v.push_back(e);
  }
  return v;
}

// Guards the top-level shape HTA and the viewers read.
TEST_CASE("perfetto export: Kineto's top-level shape", "[perfetto]") {
  const Exported e = Export(Sample());
  const Json& j = e.json;
  CHECK(j["schemaVersion"] == 1);
  REQUIRE(j["deviceProperties"].size() == 1);
  CHECK(j["deviceProperties"][0]["id"] == 0);
  CHECK(j["distributedInfo"]["rank"] == 0);
  CHECK(j["displayTimeUnit"] == "ms");
  CHECK(j["stallscope"]["schema"] == kPerfettoSchema);
  CHECK(j["stallscope"]["clock"] == "CLOCK_MONOTONIC");
  // HTA's rank detection: a regular expression over the file's lines.
  CHECK(std::regex_search(e.text, std::regex(R"("rank":\s+(\d+))")));
  // ts 0 is base_monotonic_ns: the first event (the first step's start),
  // rounded down to a microsecond.
  CHECK(j["stallscope"]["base_monotonic_ns"] == 1'000'000'000);
  CHECK(j["baseTimeNanoseconds"] == 1'000'000'000);  // no realtime pair in the header
  for (const Json& e : j["traceEvents"]) {
    for (const char* f : {"ph", "name", "pid", "tid", "ts"}) CHECK(e.contains(f));
    if (e["ph"] == "X") CHECK(e.contains("dur"));
  }
}

// Guards one X event per host call and per device op, with the times,
// categories and args of the timeline.
TEST_CASE("perfetto export: one event per call and per op", "[perfetto]") {
  const Exported e = Export(Sample());
  const Timeline& t = e.analysis.timeline;
  const auto driver = Events(e.json, "X", "cuda_driver");
  const size_t ops = Events(e.json, "X", "kernel").size() + Events(e.json, "X", "gpu_memcpy").size() +
                     Events(e.json, "X", "gpu_memset").size();
  CHECK(driver.size() == t.calls.size());
  CHECK(ops == t.ops.size());
  CHECK(Events(e.json, "X", "kernel").size() == 12);
  for (const Json& k : Events(e.json, "X", "kernel")) {
    CHECK(k["pid"] == 0);
    CHECK(k["tid"] == k["args"]["stream"]);
    CHECK(k["args"].contains("correlation"));
    CHECK(k["args"].contains("External id"));
  }
  for (const Json& c : Events(e.json, "X", "gpu_memcpy")) {
    CHECK(c["name"] == "Memcpy DtoH");
    CHECK(c["args"]["bytes"] == 4096);
  }
  // Calls carry no "stream" (HTA would take them for GPU ops).
  for (const Json& c : driver) CHECK_FALSE(c["args"].contains("stream"));
  // Times are exact nanoseconds relative to the base.
  const int64_t base = e.json["stallscope"]["base_monotonic_ns"];
  const DeviceOp& first = t.ops.front();
  bool found = false;
  for (const Json& k : Events(e.json, "X", "gpu_memset")) {
    if (Ns(k["ts"]) == first.start_ns - base && Ns(k["dur"]) == first.end_ns - first.start_ns) {
      found = true;
    }
  }
  CHECK(found);
  // Steps: ProfilerStep#k on the launching thread, as HTA finds them.
  const auto steps = Events(e.json, "X", "user_annotation");
  REQUIRE(steps.size() == 4);
  for (size_t k = 0; k < steps.size(); ++k) {
    CHECK(steps[k]["name"] == "ProfilerStep#" + std::to_string(k));
    CHECK(steps[k]["tid"] == 100);
    CHECK(Ns(steps[k]["ts"]) == e.report.steps[k].host_start_ns - base);
  }
  // The GPU's step spans: per step and stream (7 and 9).
  CHECK(Events(e.json, "X", "gpu_user_annotation").size() == 8);
  // Metadata names every track.
  std::map<std::pair<int64_t, int64_t>, std::string> names;
  for (const Json& m : Events(e.json, "M")) {
    if (m["name"] == "thread_name") names[{m["pid"], m["tid"]}] = m["args"]["name"];
  }
  CHECK(names[{4242, 100}] == "python (100) [launching thread]");
  CHECK(names[{4242, 200}] == "loader (200)");
  CHECK(names[{0, 7}] == "stream 7");
  CHECK(names[{0, 9}] == "stream 9");
  CHECK(names[{0, kIdleTrackTid}] == "GPU idle (cause)");
}

// Guards the launch → op arrows: one s/f pair per correlation, from the
// submitting call to its op, as Kineto writes them.
TEST_CASE("perfetto export: flow pairs match correlation", "[perfetto]") {
  const Exported e = Export(Sample());
  std::map<int64_t, Json> calls, ops, starts, finishes;
  for (const Json& c : Events(e.json, "X", "cuda_driver")) {
    if (c["args"].contains("correlation")) calls[c["args"]["correlation"]] = c;
  }
  for (const Json& x : e.json["traceEvents"]) {
    if (x["ph"] == "X" && x["args"].contains("stream") && x["cat"] != "gpu_user_annotation") {
      ops[x["args"]["correlation"]] = x;
    }
  }
  for (const Json& s : Events(e.json, "s", "ac2g")) {
    CHECK(starts.count(s["id"]) == 0);
    starts[s["id"]] = s;
  }
  for (const Json& f : Events(e.json, "f", "ac2g")) {
    CHECK(finishes.count(f["id"]) == 0);
    CHECK(f["bp"] == "e");
    finishes[f["id"]] = f;
  }
  CHECK(starts.size() == e.analysis.timeline.ops.size());
  CHECK(finishes.size() == starts.size());
  CHECK(calls.size() == starts.size());
  for (const auto& [id, s] : starts) {
    REQUIRE(calls.count(id) == 1);
    REQUIRE(ops.count(id) == 1);
    REQUIRE(finishes.count(id) == 1);
    CHECK(s["ts"] == calls[id]["ts"]);
    CHECK(s["tid"] == calls[id]["tid"]);
    CHECK(s["pid"] == calls[id]["pid"]);
    const Json& f = finishes[id];
    CHECK(f["ts"] == ops[id]["ts"]);
    CHECK(f["tid"] == ops[id]["tid"]);
    CHECK(f["pid"] == ops[id]["pid"]);
    CHECK(calls[id]["args"]["External id"] == ops[id]["args"]["External id"]);
  }
}

// Guards the idle track: its events sum, per cause, to the report's totals,
// and the gap the sync caused names its call site.
TEST_CASE("perfetto export: idle gaps sum to the report's causes", "[perfetto]") {
  const Exported e = Export(Sample());
  CauseNs sum{};
  int with_site = 0;
  for (const Json& g : Events(e.json, "X", "gpu_idle")) {
    CHECK(g["tid"] == kIdleTrackTid);
    CHECK(g["name"] == g["args"]["cause"]);
    for (int c = 0; c < kNumCauses; ++c) {
      if (g["name"] == CauseName(CauseAt(c))) sum[c] += Ns(g["dur"]);
    }
    if (g["args"].contains("site")) {
      CHECK(g["args"]["site"] == "train.py:42 (train_step)");
      CHECK(g["name"] == "sync");
      ++with_site;
    }
  }
  for (int c = 0; c < kNumCauses; ++c) {
    INFO(CauseName(CauseAt(c)));
    CHECK(sum[c] == e.report.totals.idle_by_cause[c]);
  }
  CHECK(testing::CauseOf(sum, Cause::kHostWait) > 0);
  CHECK(testing::CauseOf(sum, Cause::kSync) > 0);
  CHECK(with_site > 0);
  // The blocking calls carry their hotspot.
  REQUIRE_FALSE(e.report.hotspots.empty());
  int64_t idle_caused = 0;
  int blocking = 0;
  for (const Json& c : Events(e.json, "X", "cuda_driver")) {
    if (c["name"] != "cudaStreamSynchronize") continue;
    ++blocking;
    CHECK(c["args"]["hotspot"] == e.report.hotspots[0].fingerprint);
    CHECK(c["args"]["site"] == "train.py:42 (train_step)");
    CHECK(c["args"]["sync"] == "explicit");
    CHECK_FALSE(c["args"]["suggestion"].get<std::string>().empty());
    idle_caused += c["args"]["idle_caused_ns"].get<int64_t>();
  }
  CHECK(blocking == 4);
  CHECK(idle_caused == e.report.hotspots[0].idle_caused_ns);
}

// Guards escaping: names with quotes, backslashes, control characters,
// markup and invalid UTF-8 stay valid JSON and read back as written.
// Guards the export of a trace with sampled device timing: the stretches
// with timing off are events on the idle track (steps 1 and 4's untimed
// launches lie in them: an empty GPU track there is not idle), and a
// continuous trace has none.
TEST_CASE("perfetto export: device timing off on the idle track", "[perfetto][sampled]") {
  const Exported e = Export(testing::SampledSteps());
  const std::vector<Json> off = Events(e.json, "X", "device_timing");
  REQUIRE(off.size() == 2);
  // [1000 us, 2005 us) and [4000 us, 5005 us) of the trace's time.
  const int64_t base = Ns(Events(e.json, "X", "cuda_driver").front()["ts"]) - 100 * kUs;
  CHECK(Ns(off[0]["ts"]) - base == 1000 * kUs);
  CHECK(Ns(off[0]["dur"]) == 1005 * kUs);
  CHECK(Ns(off[1]["ts"]) - base == 4000 * kUs);
  CHECK(Ns(off[1]["dur"]) == 1005 * kUs);
  for (const Json& o : off) {
    CHECK(o["name"] == "device timing off");
    CHECK(o["args"]["sampled_every"] == 3);
  }
  CHECK(Events(Export(Sample()).json, "X", "device_timing").empty());
}

TEST_CASE("perfetto export: names escaped in JSON", "[perfetto]") {
  TraceBuilder b;
  auto api = testing::AddStandardApis(&b);
  const std::string nasty = "k\"q\\b\x01\n\t</script><script>alert('x')</script>&é";
  b.Range(1, 0, 100 * kUs, "step");
  b.Submit(1, api.launch, 10 * kUs, 15 * kUs, 20 * kUs, 50 * kUs, tf::DeviceOpKind::kKernel, nasty);
  b.Submit(1, api.launch, 16 * kUs, 18 * kUs, 50 * kUs, 60 * kUs, tf::DeviceOpKind::kKernel,
           "bad\xff\xc3utf8");
  b.Thread(1, "th\"read");
  const Exported e = Export(b);
  CHECK(e.text.find("<script>") == std::string::npos);
  CHECK(e.text.find("</script>") == std::string::npos);
  for (char c : e.text) CHECK((static_cast<unsigned char>(c) >= 0x20 || c == '\n'));
  std::vector<std::string> names;
  for (const Json& k : Events(e.json, "X", "kernel")) names.push_back(k["name"]);
  REQUIRE(names.size() == 2);
  CHECK(names[0] == nasty);
  CHECK(names[1] == "bad\xef\xbf\xbd\xef\xbf\xbdutf8");  // U+FFFD per invalid byte
  bool thread = false;
  for (const Json& m : Events(e.json, "M")) {
    if (m["name"] == "thread_name" && m["tid"] == 1) thread = m["args"]["name"] == "th\"read (1) [launching thread]";
  }
  CHECK(thread);
}

// Guards HTA's idle-time breakdown as recomputed here, against numbers
// worked out by hand from HTA's rules (µs timestamps: start rounded up, end
// rounded down; host wait when the launch began after the previous op
// ended; kernel wait under 30 µs; ops launched after the last step dropped).
TEST_CASE("perfetto export: HTA idle-time breakdown by hand", "[perfetto]") {
  TraceBuilder b;
  auto api = testing::AddStandardApis(&b);
  const int64_t t0 = 1'000 * kUs;
  for (int k = 0; k < 3; ++k) b.Range(1, t0 + k * 1000 * kUs, t0 + k * 1000 * kUs + 900 * kUs, "step");
  // Step 0: gaps of 11 µs (kernel wait, after rounding 1100.6 down and
  // 1110.4 up) and 100 µs (other: launched before the previous op ended).
  b.Submit(1, api.launch, 1010 * kUs, 1012 * kUs, 1020 * kUs, 1100'600);
  b.Submit(1, api.launch, 1015 * kUs, 1017 * kUs, 1110'400, 1200 * kUs);
  b.Submit(1, api.launch, 1020 * kUs, 1022 * kUs, 1300 * kUs, 1400 * kUs);
  // Steps 1 and 2: launched after the device drained: host wait.
  b.Submit(1, api.launch, 2010 * kUs, 2012 * kUs, 2020 * kUs, 2100 * kUs);
  b.Submit(1, api.launch, 3010 * kUs, 3012 * kUs, 3020 * kUs, 3050 * kUs);
  // After the last step: not kept.
  b.Submit(1, api.launch, 4000 * kUs, 4002 * kUs, 4010 * kUs, 4020 * kUs);
  // Another stream: its first op has no gap.
  b.Call(1, api.launch, 2030 * kUs, 2032 * kUs, {.correlation = 77});
  b.Device(2040 * kUs, 2050 * kUs, tf::DeviceOpKind::kKernel, "other_stream", 7700, 9);
  b.Correlate(77, 7700);
  ProcessAnalysis a;
  a.timeline = testing::ReadOrDie(b);
  REQUIRE(AnalyzeTimeline(a.timeline, {}, &a).ok());
  const auto rows = HtaIdleBreakdown(a);
  REQUIRE(rows.size() == 4);
  auto check = [&](const HtaIdleRow& r, int step, uint32_t stream, int64_t ops, int64_t host,
                   int64_t kernel, int64_t other) {
    INFO("step " << step << " stream " << stream);
    CHECK(r.step == step);
    CHECK(r.stream == stream);
    CHECK(r.ops == ops);
    CHECK(r.host_wait_us == host);
    CHECK(r.kernel_wait_us == kernel);
    CHECK(r.other_us == other);
  };
  check(rows[0], 0, 7, 3, 0, 11, 100);
  check(rows[1], 1, 7, 1, 620, 0, 0);
  check(rows[2], 1, 9, 1, 0, 0, 0);
  check(rows[3], 2, 7, 1, 920, 0, 0);
  // The export carries the same rows.
  auto text = RenderPerfetto(Report{}, a);
  REQUIRE(text.ok());
  const Json j = Json::parse(*text);
  REQUIRE(j["stallscope"]["hta_idle_time_us"].size() == 4);
  CHECK(j["stallscope"]["hta_idle_time_us"][1]["host_wait"] == 620);
}

// Guards the streamed export (`report --format perfetto` writes it so): the
// same bytes as the one-string export, in pieces of about a megabyte, and a
// sink's error stops it.
TEST_CASE("perfetto export: streamed in pieces, byte for byte the same", "[perfetto]") {
  TraceBuilder b;
  auto api = testing::AddStandardApis(&b);
  b.Thread(100, "python");
  uint32_t cupti = 1;
  uint64_t external = 1;
  int64_t t = 1'000'000'000;
  for (int k = 0; k < 200; ++k) {
    b.Range(100, t, t + 1000 * kUs, "step " + std::to_string(k));
    for (int i = 0; i < 40; ++i) {
      const int64_t h = t + 20 * kUs * i;
      b.Call(100, api.launch, h, h + 5 * kUs, {.correlation = external});
      b.Device(h + 10 * kUs, h + 25 * kUs, tf::DeviceOpKind::kKernel, "k" + std::to_string(i % 7), cupti, 7);
      b.Correlate(external++, cupti++);
    }
    b.Call(100, api.sync, t + 800 * kUs, t + 830 * kUs);
    t += 1000 * kUs;
  }
  ProcessAnalysis analysis;
  analysis.timeline = testing::ReadOrDie(b);
  auto report = AnalyzeTimeline(analysis.timeline, {}, &analysis);
  REQUIRE(report.ok());
  auto whole = RenderPerfetto(*report, analysis);
  REQUIRE(whole.ok());
  REQUIRE(whole->size() > (3u << 20));  // several pieces

  std::string streamed;
  std::vector<size_t> pieces;
  auto st = StreamPerfetto(*report, analysis, [&](std::string_view piece) {
    pieces.push_back(piece.size());
    streamed.append(piece);
    return absl::OkStatus();
  });
  REQUIRE(st.ok());
  CHECK(streamed == *whole);
  CHECK(pieces.size() >= 3);
  for (size_t i = 0; i + 1 < pieces.size(); ++i) {
    CHECK(pieces[i] >= (1u << 20));
    CHECK(pieces[i] < (1u << 20) + 64 * 1024);  // a megabyte and at most one event
  }

  int calls = 0;
  st = StreamPerfetto(*report, analysis, [&](std::string_view) {
    return ++calls == 2 ? absl::ResourceExhaustedError("disk full") : absl::OkStatus();
  });
  CHECK(st.code() == absl::StatusCode::kResourceExhausted);
  CHECK(calls == 2);  // nothing more after the failure
}

}  // namespace
}  // namespace stallscope::analyzer

namespace stallscope::analyzer {
namespace {

// The export's parts: the text before the events, the events (one a line,
// sorted), the text after them.
struct Parts {
  std::string head, tail;
  std::vector<std::string> events;
};

Parts Split(const std::string& text) {
  Parts p;
  const std::string open = "\"traceEvents\": [";
  const std::string close = "\n  ],\n  \"traceName\"";
  const size_t a = text.find(open);
  const size_t b = text.rfind(close);
  REQUIRE(a != std::string::npos);
  REQUIRE(b != std::string::npos);
  p.head = text.substr(0, a + open.size());
  p.tail = text.substr(b);
  std::string_view body(text);
  body = body.substr(a + open.size(), b - a - open.size());
  size_t at = 0;
  while (at < body.size()) {
    size_t nl = body.find('\n', at);
    if (nl == std::string_view::npos) nl = body.size();
    std::string_view line = body.substr(at, nl - at);
    if (!line.empty() && line.back() == ',') line.remove_suffix(1);
    if (!line.empty()) p.events.emplace_back(line);
    at = nl + 1;
  }
  std::sort(p.events.begin(), p.events.end());
  return p;
}

// Guards the export of a trace reported by slices (PerfettoFromFile): its
// calls and ops read again by slices, the idle gaps and call marks the
// slices' analysis kept, the head from a first pass: the header and the
// end byte for byte the whole reading's, and the same events. Marked steps
// and not, two streams and threads, NVTX ranges, sampled device timing, the
// checked-in traces; refused (Unimplemented) for an op no call submitted.
TEST_CASE("perfetto export from the file by slices: the whole reading's", "[perfetto][stream]") {
  const auto built = testing::FromFileTraces(Sample());
  const testing::TracesOnDisk traces = testing::WriteTraces(built, "stallscope-perfetto");
  REQUIRE(!traces.dir.empty());
  const std::vector<std::string>& paths = traces.paths;
  int compared = 0;
  for (const std::string& path : paths) {
    INFO(path);
    const testing::ReadForExport read(path);
    REQUIRE(read.status.ok());
    const Report& whole_report = read.whole_report;
    const ProcessAnalysis& whole = read.whole;
    const StreamedProcess& sliced = read.sliced;
    testing::ProgressLog progress;  // both passes, as one
    auto from_file = PerfettoFromFile::Prepare(read.sliced_report, sliced, progress.Callback());
    if (path.find("unjoined") != std::string::npos || path.find("early op") != std::string::npos) {
      CHECK(from_file.status().code() == absl::StatusCode::kUnimplemented);
      continue;
    }
    REQUIRE(from_file.ok());
    REQUIRE(sliced.gaps != nullptr);
    // The given-up trace gave up (its gaps came again from the start).
    CHECK(sliced.analysis.spans_fused_failed == read.given_up);
    CHECK(sliced.gaps->size() == whole.gaps.size());
    std::string text;
    size_t pieces = 0;
    REQUIRE(from_file
                ->Stream([&](std::string_view piece) {
                  ++pieces;
                  text.append(piece);
                  return absl::OkStatus();
                }, progress.Callback())
                .ok());
    CHECK(progress.Ok());
    CHECK(progress.calls.front().first == 0);
    auto expected = RenderPerfetto(whole_report, whole);
    REQUIRE(expected.ok());
    const Parts got = Split(text);
    const Parts want = Split(*expected);
    CHECK(got.head == want.head);
    CHECK(got.tail == want.tail);
    CHECK(got.events.size() == want.events.size());
    size_t same = 0;  // (not the vectors compared whole: a failure would print them)
    while (same < got.events.size() && same < want.events.size() && got.events[same] == want.events[same]) ++same;
    INFO("the first event that differs, by slices: " << (same < got.events.size() ? got.events[same] : "none")
         << "\nread whole: " << (same < want.events.size() ? want.events[same] : "none"));
    CHECK(same == want.events.size());
    CHECK(pieces >= 1);
    const Json parsed = Json::parse(text);  // throws (fails the test) on invalid JSON
    CHECK(parsed["traceEvents"].size() == want.events.size());
    ++compared;
  }
  CHECK(compared == static_cast<int>(paths.size()) - 2);
  traces.Remove();
}

}  // namespace
}  // namespace stallscope::analyzer
