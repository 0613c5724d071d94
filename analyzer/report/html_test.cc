// Tests of the HTML report: every string is escaped (hostile kernel, file and
// function names), every section is present for ordinary and degenerate
// traces, the utilization curve matches hand-computed windows, and many
// steps or long runs are aggregated into a bounded page.
#include "analyzer/report/html.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <limits>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "analyzer/testing/test_util.h"

namespace stallscope::analyzer {
namespace {

using testing::kUs;
using testing::TraceBuilder;

struct Rendered {
  Report report;
  ProcessAnalysis analysis;
  std::string html;
};

Rendered Render(const TraceBuilder& b) {
  Rendered r;
  Timeline t = testing::ReadOrDie(b);
  auto rep = AnalyzeTimeline(t, {}, &r.analysis);
  REQUIRE(rep.ok());
  r.analysis.timeline = std::move(t);
  r.report = std::move(*rep);
  r.html = RenderHtml(r.report, r.analysis);
  return r;
}

size_t Count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + what.size())) ++n;
  return n;
}

std::string Lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

// Every section is there and the elements that hold others are closed.
void CheckStructure(const std::string& html) {
  for (const char* id : {"verdict", "questions", "utilization", "step-bars", "scatter", "hotspots",
                         "idle-causes", "kernels", "steps", "diagnostics", "about"}) {
    INFO(id);
    CHECK(Count(html, absl::StrCat("id=\"", id, "\"")) == 1);
  }
  CHECK(html.rfind("<!DOCTYPE html>", 0) == 0);
  for (const char* tag : {"section", "svg", "table", "details", "tr", "g"}) {
    INFO(tag);
    CHECK(Count(html, absl::StrCat("<", tag, ">")) + Count(html, absl::StrCat("<", tag, " ")) ==
          Count(html, absl::StrCat("</", tag, ">")));
  }
  // Nothing runs and nothing is fetched.
  const std::string lower = Lower(html);
  CHECK(lower.find("<script") == std::string::npos);
  CHECK(lower.find("src=\"") == std::string::npos);
  CHECK(lower.find("href=\"") == std::string::npos);
  CHECK(lower.find("@import") == std::string::npos);
  CHECK(lower.find("url(") == std::string::npos);
  // The footer states the page's own size.
  CHECK(html.find(absl::StrCat("<span id=\"size\">", html.size(), "</span>")) != std::string::npos);
}

// Steps with a launch and a blocking sync from a Python call site; kernels
// named `kernel`.
TraceBuilder SyncLoop(int steps, const std::string& kernel = "kernel",
                      testing::PyFrame site = {"train.py", "train_step", 42}) {
  TraceBuilder b;
  auto api = testing::AddStandardApis(&b);
  const uint32_t stack = b.PythonStack({site, {"main.py", "main", 7}});
  for (int k = 0; k < steps; ++k) {
    const int64_t t0 = k * 1000 * kUs;
    b.Range(1, t0, t0 + 900 * kUs, "step");
    b.Submit(1, api.launch, t0 + 10 * kUs, t0 + 15 * kUs, t0 + 20 * kUs, t0 + 500 * kUs,
             trace::DeviceOpKind::kKernel, kernel);
    b.Call(1, api.sync, t0 + 400 * kUs, t0 + 505 * kUs, {.python_stack = stack});
  }
  return b;
}

// Guards against script injection through any string of the trace: kernel
// names, Python file and function names reach the page as text only.
TEST_CASE("html escapes kernel, file and function names", "[html]") {
  const Rendered r = Render(SyncLoop(
      4, "<script>alert(1)</script>", {"<img src=x onerror=alert(2)>.py", "f\"q'&amp", 42}));
  REQUIRE(r.report.hotspots.size() == 1);
  const std::string& html = r.html;
  CHECK(html.find("<script>alert") == std::string::npos);
  CHECK(html.find("<img") == std::string::npos);
  CHECK(html.find("&lt;script&gt;alert(1)&lt;/script&gt;") != std::string::npos);
  CHECK(html.find("&lt;img src=x onerror=alert(2)&gt;.py:42 (f&quot;q&#39;&amp;amp)") !=
        std::string::npos);
  CheckStructure(html);
}

// Guards the kernel table's sums: sixteen kernels as long as a timeline can
// hold (2^60 ns each) total 2^64 ns, past int64; the sums stop at
// kMaxSumNs, so no total or share comes out negative.
TEST_CASE("html kernel table on huge durations", "[html]") {
  TraceBuilder b;
  auto api = testing::AddStandardApis(&b);
  const uint64_t huge = uint64_t{1} << 60;
  for (int k = 0; k < 16; ++k) {
    b.Submit(1, api.launch, 0, 10, 20, huge, trace::DeviceOpKind::kKernel, "huge" + std::to_string(k % 2));
  }
  const Rendered r = Render(b);
  const size_t table = r.html.find("<section id=\"kernels\">");
  REQUIRE(table != std::string::npos);
  const std::string kernels = r.html.substr(table, r.html.find("</section>", table) - table);
  CHECK(kernels.find("huge0") != std::string::npos);
  CHECK(kernels.find(">-") == std::string::npos);
  CHECK(kernels.find("100.0%") != std::string::npos);  // both capped sums
  CheckStructure(r.html);
}

// Guards the escaping function itself, control characters included.
TEST_CASE("html escape", "[html]") {
  CHECK(HtmlEscape("a&b<c>d\"e'f") == "a&amp;b&lt;c&gt;d&quot;e&#39;f");
  CHECK(HtmlEscape(std::string("x\0y\x1b", 4)) == "x&#xFFFD;y&#xFFFD;");
  CHECK(HtmlEscape("tab\tnl\n\u00e9") == "tab\tnl\n\u00e9");
}

// Guards the page's content for an ordinary run: verdict, questions,
// hotspot with both stacks' sections, per-step bars and table.
TEST_CASE("html has every section and the report's figures", "[html]") {
  const Rendered r = Render(SyncLoop(4));
  const std::string& html = r.html;
  CheckStructure(html);
  CHECK(html.find("4 steps (from step markers)") != std::string::npos);
  CHECK(Count(html, "<span class=\"ans ") == 6);
  CHECK(html.find("Does step time move with the utilization dips?") != std::string::npos);
  CHECK(html.find("train.py:42 (train_step)") != std::string::npos);
  CHECK(html.find("main.py:7 (main)") != std::string::npos);
  CHECK(html.find("stacks: 2 Python, 0 native frames") != std::string::npos);
  CHECK(html.find(HtmlEscape(r.report.hotspots[0].fingerprint)) != std::string::npos);
  CHECK(html.find(HtmlEscape(r.report.hotspots[0].suggestion)) != std::string::npos);
  CHECK(Count(html, "<g><title>step ") == 4);
  CHECK(Count(html, "<circle ") == 4);
  CHECK(html.find("mean of") == std::string::npos);
  // A 4 ms run: the window note.
  CHECK(html.find("A short run") != std::string::npos);
  CHECK(html.find("the window is 1/6 s") != std::string::npos);
}

// Guards the ranks section of a distributed run: absent for one process;
// with ranks, the summary, one row per rank (host escaped) and the
// straggler sentence.
TEST_CASE("html ranks section", "[html]") {
  Rendered r = Render(SyncLoop(4));
  CHECK(r.html.find("id=\"ranks\"") == std::string::npos);
  for (int k = 0; k < 3; ++k) {
    RankRow row;
    row.rank = k;
    row.host = "<b>node" + std::to_string(k);
    row.steps = 4;
    row.gpu_busy_ns = 3'000'000;
    row.gpu_idle_ns = 1'000'000;
    row.waited_ns = k == 1 ? 0 : 800'000;
    row.idle_by_cause[static_cast<int>(Cause::kComm)] = row.waited_ns;
    row.analyzed = k == 0;
    r.report.ranks.push_back(row);
  }
  r.report.collectives.count = 4;
  r.report.clock.method = "monotonic";
  Straggler st;
  st.rank = 1;
  st.times_last = 4;
  st.wait_caused_ns = 1'600'000;
  st.before_cause = "host_wait";
  r.report.stragglers.push_back(st);
  const std::string html = RenderHtml(r.report, r.analysis);
  CheckStructure(html);
  CHECK(html.find("id=\"ranks\"") != std::string::npos);
  CHECK(html.find("Straggler: rank 1 arrived last at 4 collectives") != std::string::npos);
  CHECK(Count(html, "&lt;b&gt;node") == 3);
  CHECK(html.find("<b>node") == std::string::npos);
  CHECK(html.find("0 (shown)") != std::string::npos);
}

// Guards the degenerate inputs: no steps, one step, no hotspots, no device
// ops.
TEST_CASE("html renders empty and host-only traces", "[html]") {
  SECTION("nothing recorded") {
    TraceBuilder b;
    testing::AddStandardApis(&b);
    const Rendered r = Render(b);
    CHECK(r.report.steps.empty());
    CheckStructure(r.html);
    CHECK(r.html.find("No steps: nothing to draw.") != std::string::npos);
    CHECK(r.html.find("Nothing was recorded") != std::string::npos);
    CHECK(r.html.find("None: no synchronizing call blocked the host.") != std::string::npos);
  }
  SECTION("host-only") {
    TraceBuilder b;
    auto api = testing::AddStandardApis(&b);
    for (int k = 0; k < 5; ++k) b.Call(1, api.alloc, k * 100 * kUs, k * 100 * kUs + 10 * kUs);
    const Rendered r = Render(b);
    CheckStructure(r.html);
    CHECK(r.html.find("No device ops were recorded") != std::string::npos);
    CHECK(r.html.find("No kernels were recorded") != std::string::npos);
    CHECK(r.html.find("mean 0.0%") != std::string::npos);
  }
  SECTION("one step") {
    const Rendered r = Render(SyncLoop(1));
    REQUIRE(r.report.steps.size() == 1);
    CheckStructure(r.html);
    CHECK(Count(r.html, "<g><title>step ") == 1);
    CHECK(Count(r.html, "<circle ") == 1);
  }
}

// Guards the nvidia-smi definition: the union of kernels (not their sum,
// not copies, not other devices) over each 1/6 s window.
TEST_CASE("utilization per 1/6 s window", "[html]") {
  // Window k starts at floor(k * 1e9 / 6) ns.
  auto w = [](int64_t k) { return k * 1'000'000'000 / 6; };
  TraceBuilder b;
  using K = trace::DeviceOpKind;
  uint32_t id = 1;
  // 0: half busy. 1: two overlapping kernels, union a quarter.
  b.Device(w(0), w(0) + (w(1) - w(0)) / 2, K::kKernel, "a", id++);
  b.Device(w(1), w(1) + (w(2) - w(1)) / 4, K::kKernel, "b", id++);
  b.Device(w(1) + 1000, w(1) + (w(2) - w(1)) / 8, K::kKernel, "c", id++);
  // 2-3: one kernel from the middle of 2 to the middle of 3, and an NCCL
  // kernel covering the rest of 3.
  b.Device((w(2) + w(3)) / 2, (w(3) + w(4)) / 2, K::kKernel, "d", id++);
  b.Device((w(3) + w(4)) / 2, w(4), K::kNccl, "e", id++);
  // 4: a copy only. 5: a kernel on another device.
  b.Device(w(4), w(5), K::kMemcpy, "", id++);
  b.Device(w(5), w(6), K::kKernel, "f", id++, 7, /*device=*/1);
  const Timeline t = testing::ReadOrDie(b);
  const UtilizationCurve u = ComputeUtilization(t, 0, 0, 1'250'000'000);
  REQUIRE(u.percent.size() == 8);  // the last window is [w(7), 1.25 s)
  CHECK(u.sixths == 1);
  CHECK(u.WindowStart(7) == w(7));
  CHECK(u.percent[0] == Approx(50).margin(1e-3));
  CHECK(u.percent[1] == Approx(25).margin(1e-3));
  CHECK(u.percent[2] == Approx(50).margin(1e-3));
  CHECK(u.percent[3] == Approx(100).margin(1e-3));
  CHECK(u.percent[4] == 0);
  CHECK(u.percent[5] == 0);
  CHECK(u.percent[6] == 0);
  CHECK(u.percent[7] == 0);
  const UtilizationCurve d1 = ComputeUtilization(t, 1, 0, 1'250'000'000);
  CHECK(d1.percent[5] == Approx(100).margin(1e-3));
  // A clipped last window counts against its own length.
  const UtilizationCurve clipped = ComputeUtilization(t, 1, w(5), w(5) + 1000);
  REQUIRE(clipped.percent.size() == 1);
  CHECK(clipped.percent[0] == 100);
}

// Guards the figures the page states for the curve: 12 windows each half
// busy give mean, p5 and p95 of 50%; the time axis counts from the run's
// start.
TEST_CASE("html utilization figures", "[html]") {
  constexpr int64_t kT0 = 1'234'567'891;  // the run's first call
  auto w = [](int64_t k) { return kT0 + k * 1'000'000'000 / 6; };
  TraceBuilder b;
  auto api = testing::AddStandardApis(&b);
  for (int k = 0; k < 12; ++k) {
    b.Submit(1, api.launch, w(k), w(k) + 10 * kUs, w(k), w(k) + (w(k + 1) - w(k)) / 2);
  }
  b.Call(1, api.sync, w(12) - 20 * kUs, w(12));  // the run ends at 2 s
  const Rendered r = Render(b);
  CheckStructure(r.html);
  CHECK(r.html.find("12 windows of 1/6 s: mean 50.0%, p5 50.0%, p95 50.0%") != std::string::npos);
  CHECK(r.html.find("A short run") == std::string::npos);
  // Ticks every 200 ms from the start, labelled from 0.
  for (int ms = 0; ms <= 2000; ms += 200) {
    INFO(ms);
    CHECK(r.html.find(absl::StrCat(">", ms, " ms</text>")) != std::string::npos);
  }
}

// Guards the bounds: thousands of steps become at most kHtmlMaxBars bars,
// kHtmlMaxScatterPoints points and kHtmlMaxTableSteps rows, and a long run's
// curve is merged.
TEST_CASE("html aggregates many steps", "[html]") {
  SECTION("600 steps: one bar each") {
    const Rendered r = Render(SyncLoop(600));
    CHECK(Count(r.html, "<g><title>step ") == 600);
    CHECK(r.html.find("mean of") == std::string::npos);
  }
  SECTION("3000 steps: buckets of 5") {
    const Rendered r = Render(SyncLoop(3000));
    REQUIRE(r.report.steps.size() == 3000);
    CheckStructure(r.html);
    CHECK(r.html.find("(each bar: mean of 5 consecutive steps)") != std::string::npos);
    CHECK(Count(r.html, "<g><title>steps ") == 600);
    CHECK(Count(r.html, "<circle ") <= kHtmlMaxScatterPoints);
    CHECK(Count(r.html, "<circle ") >= kHtmlMaxScatterPoints - 2);
    CHECK(Count(r.html, "<tr><td class=\"num\">") == kHtmlMaxTableSteps);
    CHECK(r.html.find("3000 steps drawn as 600 bars") != std::string::npos);
    const size_t size_3000 = r.html.size();
    const Rendered big = Render(SyncLoop(12000));
    CHECK(big.html.find("(each bar: mean of 20 consecutive steps)") != std::string::npos);
    // Four times the steps, about the same page.
    CHECK(big.html.size() < size_3000 * 11 / 10);
    CHECK(big.html.size() < 2'000'000);
  }
  SECTION("a 300 s run: merged curve windows") {
    TraceBuilder b;
    auto api = testing::AddStandardApis(&b);
    for (int k = 0; k <= 300; ++k) {
      const int64_t t0 = int64_t{k} * 1'000'000'000;
      b.Submit(1, api.launch, t0, t0 + 10 * kUs, t0, t0 + 500'000'000);
    }
    const Rendered r = Render(b);
    CheckStructure(r.html);
    // 300.5 s: 1803 windows, merged by 2.
    CHECK(r.html.find("1803 utilization windows drawn as 902 curve points") != std::string::npos);
    CHECK(r.html.find("<polygon class=\"band\"") != std::string::npos);
  }
}

}  // namespace
// Guards the page of a trace reported by slices (RenderHtmlFromFile: its
// ops read again by slices, the report's idle gaps, the span from the
// index): the same bytes as the page of the whole reading, with step
// markers and without, one device and two, the checked-in traces too.
// A distributed run's rank drawn from slices of calls (its NCCL waits
// found by the ops' calls): each slice's ops come in any order, held until
// no op to come can start before them. The strip, the utilization curve
// and the kernel table are those of the ops taken in start order.
TEST_CASE("html from the ops of slices of calls is the page of the ops in start order", "[html][stream]") {
  // Ops that overlap and outlast the calls' slices (NCCL kernels, kernels
  // whose calls come later but start earlier, copies), idle between some,
  // and an op on another device.
  TraceBuilder b;
  const testing::Apis api = testing::AddStandardApis(&b);
  for (int k = 0; k < 60; ++k) {
    const int64_t t0 = 1'000'000'000 + k * 1'000 * kUs;
    b.Submit(1, api.nccl, t0, t0 + 5 * kUs, t0 + 300 * kUs, t0 + 1'400 * kUs, trace::DeviceOpKind::kNccl,
             "ncclDevKernel_AllReduce");
    b.Submit(1, api.launch, t0 + 10 * kUs, t0 + 14 * kUs, t0 + 20 * kUs, t0 + 250 * kUs,
             trace::DeviceOpKind::kKernel, k % 3 == 0 ? "gemm" : "relu");
    b.Submit(2, api.memcpy_async, t0 + 15 * kUs, t0 + 16 * kUs, t0 + 50 * kUs, t0 + 60 * kUs,
             trace::DeviceOpKind::kMemcpy, "");
    if (k % 4 == 0) {
      b.Submit(1, api.launch, t0 + 700 * kUs, t0 + 704 * kUs, t0 + 1'500 * kUs, t0 + 1'600 * kUs,
               trace::DeviceOpKind::kKernel, "late");
    }
  }
  b.Device(1'000'100'000, 1'000'300'000, trace::DeviceOpKind::kKernel, "other_device_kernel", 900001, 7, 1);
  const Timeline t = testing::ReadOrDie(b);
  const RecordsSpan records = SpanOfRecords(t);
  const Span span{records.start_ns, records.end_ns};
  const TimeColumns idle(span.start_ns, span.end_ns, kHtmlStripColumns, kNumCauses);
  HtmlTimelineBuilder whole(0, span);
  whole.AddOps(t, std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max());
  const HtmlTimeline want = whole.Finish(idle);
  REQUIRE(want.kernels.size() >= 2);
  for (const int tiles : {1, 7, 60, 400}) {
    INFO(tiles << " slices of calls");
    HtmlTimelineBuilder sliced(0, span);
    const int64_t first = t.calls.front().enter_ns, last = t.calls.back().enter_ns + 1;
    for (int k = 0; k < tiles; ++k) {
      const int64_t from = first + (last - first) * k / tiles, to = first + (last - first) * (k + 1) / tiles;
      const auto [i0, i1] = EnteringIn(t.calls, from, to);
      CHECK(sliced.AddSubmittedOps(t, i0, i1, to));
    }
    const HtmlTimeline got = sliced.Finish(idle);
    CHECK(got.no_ops == want.no_ops);
    CHECK(got.strip == want.strip);
    CHECK(got.utilization.percent == want.utilization.percent);
    CHECK(got.kernels_ns == want.kernels_ns);
    REQUIRE(got.kernels.size() == want.kernels.size());
    for (size_t i = 0; i < want.kernels.size(); ++i) {
      CHECK(got.kernels[i].name == want.kernels[i].name);
      CHECK(got.kernels[i].count == want.kernels[i].count);
      CHECK(got.kernels[i].total_ns == want.kernels[i].total_ns);
    }
  }
  // Settled past ops that then come (as if they started before their
  // calls entered): refused, not drawn out of order.
  HtmlTimelineBuilder early(0, span);
  const size_t half = t.calls.size() / 2;
  CHECK(early.AddSubmittedOps(t, half, t.calls.size(), std::numeric_limits<int64_t>::max()));
  CHECK(!early.AddSubmittedOps(t, 0, half, std::numeric_limits<int64_t>::max()));
}

TEST_CASE("html of a trace read by slices is the page of the whole reading", "[html][stream]") {
  std::vector<std::pair<std::string, TraceBuilder>> built;
  // Small chunks: the ops come in many slices of 16 chunks.
  built.emplace_back("marked", testing::SyntheticSteps(300).SetPacked(true).SetChunkRecords(64));
  built.emplace_back("unmarked", testing::SyntheticSteps(300, "kernel", false, false).SetChunkRecords(64));
  {
    // Two devices, copies, NCCL and an op no call submitted.
    TraceBuilder b = testing::SyntheticSteps(50, "gemm");
    b.SetChunkRecords(100);
    b.Device(1'000'100'000, 1'000'300'000, trace::DeviceOpKind::kKernel, "other_device_kernel", 900001, 7, 1);
    b.Device(1'000'050'000, 1'000'060'000, trace::DeviceOpKind::kNccl, "ncclDevKernel_AllReduce", 900002, 9);
    b.Device(1'002'000'000, 1'002'001'000, trace::DeviceOpKind::kMemcpy, "", 900003, 7, 0, 4096, 1);
    built.emplace_back("two devices", std::move(b));
  }
  const testing::TracesOnDisk traces = testing::WriteTraces(built, "stallscope-html");
  REQUIRE(!traces.dir.empty());
  const std::vector<std::string>& paths = traces.paths;
  for (const std::string& path : paths) {
    INFO(path);
    Report whole_report, sliced_report;
    ProcessAnalysis whole;
    StreamedProcess sliced;
    sliced.idle_columns = kHtmlStripColumns;
    REQUIRE(testing::ReportBothWays(path, &whole_report, &whole, &sliced_report, &sliced).ok());
    auto page = RenderHtmlFromFile(sliced_report, sliced);
    REQUIRE(page.ok());
    const std::string expected = RenderHtml(whole_report, whole);
    const RecordsSpan span = SpanOfRecords(whole.timeline);
    CHECK(sliced.span.start_ns == span.start_ns);
    CHECK(sliced.span.end_ns == span.end_ns);
    CHECK(*page == expected);
    CheckStructure(*page);
  }
  traces.Remove();
}

}  // namespace stallscope::analyzer
