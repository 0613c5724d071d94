// Tests of the JSON and text reports: every contract field of
// stallscope.report/1 is present, every cause key in every idle_by_cause,
// and the text report has its sections.
#include "analyzer/report/json.h"

#include <catch2/catch.hpp>

#include "analyzer/report/text.h"
#include "analyzer/testing/test_util.h"

namespace stallscope::analyzer {
namespace {

using testing::kUs;
using testing::TraceBuilder;

Report Sample() {
  TraceBuilder b;
  auto api = testing::AddStandardApis(&b);
  const uint32_t site = b.PythonStack({{"train.py", "train_step", 42}});
  for (int k = 0; k < 4; ++k) {
    const int64_t t0 = k * 1000 * kUs;
    b.Range(1, t0, t0 + 900 * kUs, "step");
    b.Submit(1, api.launch, t0 + 10 * kUs, t0 + 15 * kUs, t0 + 20 * kUs, t0 + 500 * kUs);
    b.Call(1, api.sync, t0 + 400 * kUs, t0 + 505 * kUs, {.python_stack = site});
  }
  return testing::AnalyzeOrDie(b);
}

void CheckCauses(const nlohmann::ordered_json& j) {
  for (const char* c : {"sync", "host_wait", "host_busy", "host_preempted", "launch_overhead", "comm",
                        "device_wait", "other"}) {
    CHECK(j.contains(c));
    CHECK(j[c].is_number_integer());
  }
  CHECK(j.size() == 8);
}

// Guards RenderJson's directly written steps array: byte-identical to the
// JSON library's rendering of the whole report, with steps and without.
TEST_CASE("json steps written directly match the library", "[report]") {
  Report r = Sample();
  REQUIRE(r.steps.size() == 4);
  r.steps[1].idle_by_cause[2] = -7;  // any integer, negative included
  r.steps[3].busy_by_kind.comm = int64_t{1} << 60;
  const auto library = [](const Report& x) {
    return ReportToJson(x).dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  };
  CHECK(RenderJson(r) == library(r));
  r.steps.resize(1);
  CHECK(RenderJson(r) == library(r));
  r.steps.clear();
  CHECK(RenderJson(r) == library(r));
  CHECK(nlohmann::json::parse(RenderJson(Sample()))["steps"].size() == 4);
}

// Guards StreamJson: the same bytes as the library's rendering, given a
// piece at a time, for a report with ranks whose collectives' per-step
// array is written in its place (doubles as the library writes them), its
// steps past a piece's megabyte; a sink's error ends it.
TEST_CASE("json streamed a piece at a time matches the library", "[report]") {
  Report r = Sample();
  const auto library = [](const Report& x) {
    return ReportToJson(x).dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  };
  RankRow row;
  row.rank = 0;
  row.host = "node\"1\"";  // a string that must be escaped
  row.file = "\"per_step\": []";
  r.ranks = {row, row};
  r.ranks[1].rank = 1;
  r.collectives.count = 3;
  r.collectives.comm_share = 1.0 / 3;
  for (int k = 0; k < 3; ++k) {
    StepCollectives sc;
    sc.index = k;
    sc.comm_share = k == 0 ? 0.0 : 1.0 / (k + 6);
    sc.overlap = k == 1 ? 1e-7 : 0.5;
    sc.wait_share = 2.0 / 3;
    sc.wait_mean_ns = 1234567 * k;
    sc.wait_max_ns = int64_t{1} << 50;
    r.collectives.per_step.push_back(sc);
  }
  for (size_t steps : {size_t{4}, size_t{0}, size_t{3000}}) {  // 3,000 steps: about 1.7 MB
    CAPTURE(steps);
    r.steps.resize(steps, r.steps.empty() ? StepStats{} : r.steps.front());
    std::vector<std::string> pieces;
    REQUIRE(StreamJson(r, [&](std::string_view p) {
              pieces.emplace_back(p);
              return absl::OkStatus();
            }).ok());
    std::string joined;
    for (const std::string& p : pieces) joined += p;
    CHECK(joined == library(r));
    CHECK(RenderJson(r) == joined);
    CHECK(pieces.size() == (steps == 3000 ? 2u : 1u));
  }
  r.collectives.per_step.clear();
  CHECK(RenderJson(r) == library(r));
  int calls = 0;
  const absl::Status failed = StreamJson(r, [&](std::string_view) {
    ++calls;
    return absl::DataLossError("disk full");
  });
  CHECK(failed.code() == absl::StatusCode::kDataLoss);
  CHECK(calls == 1);
}

// Guards the sampled-timing fields: a report of a trace recorded with
// device timing one step in 3 says so (device_timing: the period and the
// steps found, beside the timed steps it lists); a continuous one has no
// such key.
TEST_CASE("json report of sampled device timing", "[report][sampled]") {
  const Report r = testing::AnalyzeOrDie(testing::SampledSteps());
  const std::string text = RenderJson(r);
  CHECK(text == ReportToJson(r).dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
  const auto j = nlohmann::ordered_json::parse(text);
  CHECK(j["device_timing"]["sampled_every"] == 3);
  CHECK(j["device_timing"]["steps_found"] == 7);
  REQUIRE(j["steps"].size() == 3);
  CHECK(j["steps"][1]["index"] == 3);
  CHECK_FALSE(nlohmann::ordered_json::parse(RenderJson(Sample())).contains("device_timing"));
  // The summary line says the steps are a sample.
  CHECK(RenderSummary(r).rfind("3 of 7 steps timed (from step markers; device timing one step in 3), ", 0) == 0);
  CHECK(RenderSummary(Sample()).rfind("4 steps (from step markers), ", 0) == 0);
}

// Guards the report contract read by scripts (design.md).
TEST_CASE("json report has every contract field", "[report]") {
  const auto j = nlohmann::ordered_json::parse(RenderJson(Sample()));
  CHECK(j["schema"] == "stallscope.report/1");
  CHECK(j["step_source"] == "marker");
  REQUIRE(j["steps"].size() == 4);
  for (const auto& s : j["steps"]) {
    for (const char* f : {"index", "device", "start_ns", "end_ns", "host_start_ns", "host_end_ns",
                          "gpu_busy_ns", "gpu_idle_ns", "idle_by_cause", "busy_by_kind",
                          "sync_count", "launches"}) {
      CHECK(s.contains(f));
    }
    CheckCauses(s["idle_by_cause"]);
    for (const char* k : {"compute", "copy", "comm"}) CHECK(s["busy_by_kind"].contains(k));
    int64_t sum = 0;
    for (const auto& [k, v] : s["idle_by_cause"].items()) sum += v.get<int64_t>();
    CHECK(sum == s["gpu_idle_ns"].get<int64_t>());
  }
  REQUIRE(j["hotspots"].size() == 1);
  const auto& h = j["hotspots"][0];
  for (const char* f : {"api", "kind", "site", "stack", "count", "blocked_ns", "idle_caused_ns",
                        "per_step"}) {
    CHECK(h.contains(f));
  }
  CHECK(h["kind"] == "explicit");
  CHECK(h["site"]["file"] == "train.py");
  CHECK(h["site"]["line"] == 42);
  CHECK(h["site"]["function"] == "train_step");
  CHECK(h["stack"][0]["module"] == "python");
  for (const char* f : {"wall_ns", "gpu_busy_ns", "gpu_idle_ns", "idle_by_cause", "launches",
                        "syncs"}) {
    CHECK(j["totals"].contains(f));
  }
  CheckCauses(j["totals"]["idle_by_cause"]);
  REQUIRE(j["questions"].size() == 6);
  for (int i = 0; i < 6; ++i) {
    const auto& q = j["questions"][i];
    CHECK(q["id"] == "q" + std::to_string(i + 1));
    const std::string a = q["answer"];
    CHECK((a == "yes" || a == "no" || a == "unknown"));
    CHECK_FALSE(q["evidence"].get<std::string>().empty());
  }
  bool other = false;
  for (const auto& d : j["diagnostics"]) {
    for (const char* f : {"name", "severity", "count", "message"}) CHECK(d.contains(f));
    if (d["name"] == "other_idle") other = true;
  }
  CHECK(other);
  REQUIRE(j["processes"].size() == 1);
  CHECK(j["processes"][0]["pid"] == 4242);
}

// Guards the text report's sections and its hotspot site.
TEST_CASE("text report sections", "[report]") {
  const std::string text = RenderText(Sample());
  for (const char* s : {"Steps", "GPU idle by cause", "Forced-sync hotspots", "Questions",
                        "Diagnostics", "train.py:42 (train_step)", "cudaStreamSynchronize"}) {
    CHECK(text.find(s) != std::string::npos);
  }
  CHECK(RenderSummary(Sample()).find("4 steps") == 0);
}

}  // namespace
}  // namespace stallscope::analyzer
