// Tests of `stallscope compare`: per-step and per-cause deltas, hotspots that
// appeared / vanished / changed by fingerprint, the verdict, q2, the JSON
// schema and the command's exit codes.
#include "analyzer/compare/compare.h"

#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "analyzer/testing/test_util.h"

namespace stallscope::analyzer {
namespace {

using testing::kUs;
using testing::TraceBuilder;
namespace tf = stallscope::trace;

struct LoopOptions {
  int steps = 6;
  int64_t input_us = 0;   // host wait before each step's batch copy
  bool readback = false;  // a blocking sync at train.py:42 after each step
  bool log_sync = false;  // another blocking sync at train.py:77
};

// A marked loop: input wait, one 1 ms kernel, optional syncs.
TraceBuilder Loop(const LoopOptions& o) {
  TraceBuilder b;
  auto api = testing::AddStandardApis(&b);
  const uint32_t read = b.PythonStack({{"train.py", "train_step", 42}});
  const uint32_t log = b.PythonStack({{"train.py", "log", 77}});
  int64_t t = 0, dev = 0;
  for (int k = 0; k < o.steps; ++k) {
    const int64_t start = t;
    t += o.input_us * kUs;
    const int64_t s = std::max(dev, t + 10 * kUs);
    b.Submit(1, api.launch, t, t + 5 * kUs, s, s + 1000 * kUs);
    dev = s + 1000 * kUs;
    t += 10 * kUs;
    if (o.readback) {
      b.Call(1, api.sync, t, dev + 5 * kUs, {.python_stack = read});
      t = dev + 10 * kUs;
    }
    if (o.log_sync) {
      b.Call(1, api.sync, t, std::max(t, dev) + 5 * kUs, {.python_stack = log});
      t = std::max(t, dev) + 10 * kUs;
    }
    b.Range(1, start, t, "step " + std::to_string(k));
  }
  return b;
}

Comparison CompareLoops(const LoopOptions& base, const LoopOptions& other) {
  return CompareReports(testing::AnalyzeOrDie(Loop(base)), "base",
                        testing::AnalyzeOrDie(Loop(other)), "other");
}

// Guards the input-bound verdict: removing a 3 ms input wait removes (nearly)
// all host_wait; q2 is yes; step time drops.
TEST_CASE("compare: input wait removed → input-bound", "[compare]") {
  Comparison c = CompareLoops({.input_us = 3000, .readback = true}, {.readback = true});
  CHECK(c.base.steps == 6);
  CHECK(c.other.steps == 6);
  const Delta& hw = c.causes[static_cast<int>(Cause::kHostWait)];
  CHECK(hw.base > 1000 * kUs);
  CHECK(hw.other < hw.base * 0.5);
  CHECK(c.step.delta() < 0);
  CHECK(c.verdict.find("removed") != std::string::npos);
  CHECK(c.verdict.find("host_wait") != std::string::npos);
  CHECK(c.verdict.find("input-bound") != std::string::npos);
  CHECK(c.q2.id == "q2");
  CHECK(c.q2.answer == "yes");
  // The same read-back in both runs: no hotspot change.
  CHECK(c.appeared.empty());
  CHECK(c.vanished.empty());
  CHECK(c.changed.empty());
}

// Guards the reverse order: OTHER adds the wait; still names host_wait.
TEST_CASE("compare: input wait added", "[compare]") {
  Comparison c = CompareLoops({}, {.input_us = 3000});
  CHECK(c.verdict.find("added") != std::string::npos);
  CHECK(c.verdict.find("host_wait") != std::string::npos);
  CHECK(c.q2.answer == "no");
}

// Guards the no-change verdict and appeared / vanished / changed hotspots by
// fingerprint.
TEST_CASE("compare: hotspots by fingerprint, no change", "[compare]") {
  Comparison same = CompareLoops({.input_us = 100}, {.input_us = 100});
  CHECK(same.verdict.starts_with("no idle cause changed by more than"));
  CHECK(same.q2.answer == "no");

  Comparison c = CompareLoops({.readback = true}, {.log_sync = true});
  REQUIRE(c.vanished.size() == 1);
  CHECK(c.vanished[0].site.line == 42);
  CHECK(c.vanished[0].base_count == 6);
  REQUIRE(c.appeared.size() == 1);
  CHECK(c.appeared[0].site.line == 77);
  CHECK(c.appeared[0].other_count == 6);
  CHECK_FALSE(c.appeared[0].fingerprint.empty());
  CHECK(c.changed.empty());

  Comparison fewer = CompareLoops({.steps = 6, .readback = true}, {.steps = 4, .readback = true});
  REQUIRE(fewer.changed.size() == 1);
  CHECK(fewer.changed[0].base_count == 6);
  CHECK(fewer.changed[0].other_count == 4);
  CHECK(fewer.changed[0].other_per_step == 1.0);
}

// Guards the JSON schema's fields.
TEST_CASE("compare: JSON schema", "[compare]") {
  Comparison c = CompareLoops({.input_us = 3000, .readback = true}, {.log_sync = true});
  auto j = ComparisonToJson(c);
  CHECK(j["schema"] == "stallscope.compare/1");
  for (const char* side : {"base", "other"}) {
    CHECK(j[side]["steps"] == 6);
    CHECK(j[side].contains("mean_step_ns"));
    CHECK(j[side].contains("mean_gpu_idle_ns"));
    CHECK(j[side]["idle_by_cause_per_step"].size() == kNumCauses);
    CHECK(j[side]["totals"].contains("gpu_idle_ns"));
  }
  CHECK(j["deltas"]["idle_by_cause"].size() == kNumCauses);
  CHECK(j["deltas"]["idle_by_cause"]["host_wait"]["delta"].get<double>() < 0);
  CHECK(j["deltas"]["idle_by_cause"]["comm"]["change"].is_null());  // 0 in BASE
  CHECK(j["deltas"]["mean_step_ns"].contains("change"));
  CHECK(j["appeared"].size() == 1);
  CHECK(j["vanished"].size() == 1);
  CHECK(j["vanished"][0].contains("fingerprint"));
  CHECK(j["changed"].is_array());
  CHECK(j["verdict"].get<std::string>().find("host_wait") != std::string::npos);
  CHECK(j["q2"]["answer"] == "yes");
  const std::string text = RenderCompareText(c);
  for (const char* s : {"Verdict:", "step time", "idle host_wait", "vanished", "appeared", "q2"}) {
    CHECK(text.find(s) != std::string::npos);
  }
}

std::string Slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// Guards the command: exit codes 0 / 1 (usage) / 2 (bad trace), JSON output.
TEST_CASE("compare command", "[compare][cli]") {
  char dir[] = "/tmp/stallscope-compare-XXXXXX";
  REQUIRE(mkdtemp(dir) != nullptr);
  const std::string root = dir;
  Loop({.input_us = 3000}).WriteTo(root + "/base.sstrace");
  Loop({}).WriteTo(root + "/other.sstrace");
  auto run = [&](const std::string& args) {
    const std::string cmd = std::string("'") + STALLSCOPE_BIN_PATH + "' " + args + " >'" + root +
                            "/out' 2>'" + root + "/err'";
    const int status = std::system(cmd.c_str());
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  };
  CHECK(run("compare " + root + "/base.sstrace " + root + "/other.sstrace --format json") == 0);
  auto j = nlohmann::json::parse(Slurp(root + "/out"));
  CHECK(j["schema"] == "stallscope.compare/1");
  CHECK(j["verdict"].get<std::string>().find("input-bound") != std::string::npos);
  CHECK(run("compare " + root + "/base.sstrace " + root + "/other.sstrace") == 0);
  CHECK(Slurp(root + "/out").find("Verdict:") != std::string::npos);
  CHECK(run("compare " + root + "/base.sstrace") == 1);
  CHECK(run("compare a b --format html") == 1);
  CHECK(run("compare " + root + "/base.sstrace " + root + "/missing") == 2);
  CHECK(Slurp(root + "/err").find("missing") != std::string::npos);
  CHECK(run("compare --help") == 0);
  CHECK(run("help") == 0);
  CHECK(Slurp(root + "/out").find("compare") != std::string::npos);
  std::system(("rm -rf '" + root + "'").c_str());
}

}  // namespace
}  // namespace stallscope::analyzer
