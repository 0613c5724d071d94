// Golden "diff tests": hand-built traces (checked in under testdata/ as
// .sstrace) in, JSON and text reports out, compared with checked-in expected
// files. To regenerate after an intended change:
//   STALLSCOPE_UPDATE_GOLDEN=1 build/analyzer/analyzer_tests '[golden]'
// then review `git diff analyzer/testdata`.
#include <catch2/catch.hpp>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "analyzer/analyze/analysis.h"
#include "analyzer/report/json.h"
#include "analyzer/report/text.h"
#include "analyzer/testing/test_util.h"

namespace stallscope::analyzer {
namespace {

using testing::kUs;
using testing::TraceBuilder;
namespace tf = stallscope::trace;

// Five marked steps of a training loop: forward kernels, a `.item()` sync
// (explicit, Python site), a pageable device-to-host copy (implicit), a data
// loader pause that grows in step 3, and a free.
TraceBuilder SyncLoop() {
  TraceBuilder b;
  auto api = testing::AddStandardApis(&b);
  const uint32_t item = b.PythonStack({{"train.py", "train_step", 42}, {"train.py", "main", 120}});
  const uint32_t copy = b.PythonStack({{"train.py", "log_metrics", 57}, {"train.py", "main", 121}});
  b.Thread(100, "python");
  int64_t t = 1'000'000'000;
  for (int k = 0; k < 5; ++k) {
    const int64_t load = (k == 3 ? 3000 : 300) * kUs;  // data loading before the step
    b.Range(100, t, t + load + 2000 * kUs, "ProfilerStep#" + std::to_string(k));
    int64_t h = t + load;
    int64_t d = h + 10 * kUs;
    for (int i = 0; i < 4; ++i) {
      b.Submit(100, api.launch, h, h + 6 * kUs, std::max(d, h + 10 * kUs),
               std::max(d, h + 10 * kUs) + 200 * kUs, tf::DeviceOpKind::kKernel,
               i % 2 ? "relu" : "gemm");
      d = std::max(d, h + 10 * kUs) + 200 * kUs;
      h += 8 * kUs;
    }
    b.Call(100, api.sync, h, d + 5 * kUs, {.python_stack = item});
    h = d + 5 * kUs + 30 * kUs;
    b.Submit(100, api.memcpy, h, h + 60 * kUs, h + 20 * kUs, h + 50 * kUs, tf::DeviceOpKind::kMemcpy,
             "", {.python_stack = copy, .bytes = 4096});
    h += 70 * kUs;
    b.Call(100, api.free, h, h + 3 * kUs);
    t = t + load + 2000 * kUs;
  }
  return b;
}

// No markers, ticks on their own clock: a launch-bound stretch of tiny
// kernels, a cross-stream wait (device_wait), an all-reduce (comm), a second
// thread, a recorder diagnostic and an uncorrelated op.
TraceBuilder LaunchBound() {
  TraceBuilder b;
  auto api = testing::AddStandardApis(&b);
  b.SetTicksAreNs(false);
  b.Clock(0, 5'000'000'000);
  b.Clock(10'000'000, 5'005'000'000);  // 2 ticks per ns
  auto ticks = [](int64_t ns) { return static_cast<uint64_t>(ns * 2); };
  int64_t h = 0;
  for (int i = 0; i < 40; ++i) {
    b.Call(7, api.launch, ticks(h), ticks(h + 5 * kUs), {.correlation = 5000u + i});
    b.Device(5'000'000'000 + h + 9 * kUs, 5'000'000'000 + h + 11 * kUs, tf::DeviceOpKind::kKernel,
             "tiny", 900 + i);
    b.Correlate(5000u + i, 900 + i);
    h += 12 * kUs;
  }
  // A kernel that waits on another stream's event.
  b.Call(7, api.launch, ticks(h), ticks(h + 5 * kUs), {.correlation = 6000});
  b.Device(5'000'000'000 + h + 300 * kUs, 5'000'000'000 + h + 400 * kUs, tf::DeviceOpKind::kKernel,
           "waits_on_event", 1900, 9);
  b.Correlate(6000, 1900);
  h += 400 * kUs;
  b.Call(7, api.nccl, ticks(h), ticks(h + 150 * kUs), {.correlation = 6001});
  b.Device(5'000'000'000 + h + 155 * kUs, 5'000'000'000 + h + 255 * kUs, tf::DeviceOpKind::kNccl,
           "ncclDevKernel_AllReduce_Sum_f32", 1901);
  b.Correlate(6001, 1901);
  b.Call(8, api.alloc, ticks(100 * kUs), ticks(120 * kUs));
  b.Device(5'000'000'000 + h + 300 * kUs, 5'000'000'000 + h + 310 * kUs, tf::DeviceOpKind::kMemset,
           "", 7777);  // no correlation record
  b.Diag(tf::DiagnosticId::kDroppedRecords, 12);
  return b;
}

std::string Slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

void Spit(const std::string& path, const std::string& data) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << data;
}

// What `report` asks for: the predicted fixes too.
AnalysisOptions ReportOptions() {
  AnalysisOptions o;
  o.predict = true;
  return o;
}

void Golden(const std::string& name, const TraceBuilder& b) {
  const std::string dir = STALLSCOPE_TESTDATA_DIR;
  const std::string trace = dir + "/" + name + ".sstrace";
  const bool update = std::getenv("STALLSCOPE_UPDATE_GOLDEN") != nullptr;
  if (update) Spit(trace, b.Build());
  // The checked-in trace is what the builder writes (catches format drift).
  CHECK(Slurp(trace) == b.Build());
  auto report = AnalyzePaths({trace}, ReportOptions());
  REQUIRE(report.ok());
  const std::string json = RenderJson(*report);
  const std::string text = RenderText(*report);
  if (update) {
    Spit(dir + "/" + name + ".json", json);
    Spit(dir + "/" + name + ".txt", text);
    WARN("updated golden files for " << name);
  }
  CHECK(json == Slurp(dir + "/" + name + ".json"));
  CHECK(text == Slurp(dir + "/" + name + ".txt"));
  // Attributed by windows of one, two and three steps: the same bytes.
  for (size_t per : {size_t{1}, size_t{2}, size_t{3}}) {
    CAPTURE(per);
    AnalysisOptions o = ReportOptions();
    o.window_steps = per;
    auto windowed = AnalyzePaths({trace}, o);
    REQUIRE(windowed.ok());
    CHECK(RenderJson(*windowed) == json);
    CHECK(RenderText(*windowed) == text);
  }
}

// Guards the whole pipeline's output for a marked training loop.
TEST_CASE("golden: marked steps with sync hotspots", "[golden]") { Golden("sync_loop", SyncLoop()); }

// Guards reading older formats: the same loop written by the version-1
// writer (one-lane FNV checksums), the version-2 writer (four lanes) and the
// version-3 writer (XXH3, no packed chunks) gives the same report as the
// current file; and so does the loop with its chunks packed and compressed
// (format 4's encodings, as the recorder writes them).
TEST_CASE("golden: format-1, 2 and 3 traces and packed ones give the same report", "[golden]") {
  const std::string dir = STALLSCOPE_TESTDATA_DIR;
  {
    TraceBuilder b = SyncLoop();
    b.SetPacked(true, true);
    if (std::getenv("STALLSCOPE_UPDATE_GOLDEN") != nullptr) Spit(dir + "/format4_packed_sync_loop.sstrace", b.Build());
    CHECK(Slurp(dir + "/format4_packed_sync_loop.sstrace") == b.Build());
  }
  for (uint16_t want : {uint16_t{1}, uint16_t{2}, uint16_t{3}, uint16_t{4}}) {
    CAPTURE(want);
    const std::string from =
        want == 4 ? std::string("format4_packed_sync_loop.sstrace") : "format" + std::to_string(want) + "_sync_loop.sstrace";
    const std::string old = Slurp(dir + "/" + from);
    uint16_t version = 0;
    REQUIRE(old.size() > 10);
    std::memcpy(&version, old.data() + 8, 2);
    CHECK(version == want);
    auto report = AnalyzePaths({dir + "/" + from}, ReportOptions());
    REQUIRE(report.ok());
    std::string json = RenderJson(*report);
    for (size_t at = json.find(from); at != std::string::npos; at = json.find(from, at)) {
      json.replace(at, from.size(), "sync_loop.sstrace");
    }
    CHECK(json == Slurp(dir + "/sync_loop.json"));
  }
}

// Guards the whole pipeline's output for an unmarked launch-bound run.
TEST_CASE("golden: launch-bound run without markers", "[golden]") {
  Golden("launch_bound", LaunchBound());
}

}  // namespace
}  // namespace stallscope::analyzer
