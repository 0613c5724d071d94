// Tests of the six questions' answers and thresholds, and of the report over
// a folder of several processes.
#include "analyzer/analyze/questions.h"

#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include "analyzer/model/format.h"
#include "analyzer/testing/test_util.h"

namespace stallscope::analyzer {
namespace {

using testing::kUs;

StepStats Step(int64_t duration, int64_t idle, int64_t host_wait) {
  StepStats s;
  s.end_ns = duration;
  s.gpu_idle_ns = idle;
  s.gpu_busy_ns = duration - idle;
  s.idle_by_cause[static_cast<int>(Cause::kHostWait)] = host_wait;
  s.idle_by_cause[static_cast<int>(Cause::kOther)] = idle - host_wait;
  return s;
}

Totals Sum(const std::vector<StepStats>& steps) {
  Totals t;
  for (const StepStats& s : steps) {
    t.wall_ns += s.end_ns - s.start_ns;
    t.gpu_idle_ns += s.gpu_idle_ns;
    t.gpu_busy_ns += s.gpu_busy_ns;
    for (int c = 0; c < kNumCauses; ++c) t.idle_by_cause[c] += s.idle_by_cause[c];
  }
  return t;
}

// Guards q1: unknown under 3 steps; "no" for steady step time; "yes" when
// idle moves with step time.
TEST_CASE("q1 correlation of idle with step time", "[questions]") {
  std::vector<StepStats> two = {Step(10, 1, 0), Step(20, 11, 0)};
  CHECK(AnswerQuestions(two, Sum(two), {})[0].answer == "unknown");
  std::vector<StepStats> steady = {Step(1000, 100, 0), Step(1001, 50, 0), Step(1000, 10, 0)};
  CHECK(AnswerQuestions(steady, Sum(steady), {})[0].answer == "no");
  std::vector<StepStats> moving = {Step(1000, 100, 0), Step(2000, 1100, 0), Step(1500, 600, 0)};
  auto q = AnswerQuestions(moving, Sum(moving), {});
  CHECK(q[0].answer == "yes");
  CHECK(q[0].evidence.find("r=1.00") != std::string::npos);
}

// Guards q3 and q4 thresholds: host stall share, and its jitter.
TEST_CASE("q3 host stall and q4 jitter", "[questions]") {
  std::vector<StepStats> even = {Step(10'000'000, 5'000'000, 4'000'000),
                                 Step(10'000'000, 5'000'000, 4'000'000),
                                 Step(10'000'000, 5'000'000, 4'000'000)};
  auto q = AnswerQuestions(even, Sum(even), {});
  CHECK(q[2].id == "q3");
  CHECK(q[2].answer == "yes");
  // 40% of wall time: highly on XProf's input scale.
  CHECK(q[2].evidence.find("highly host-bound on XProf's input scale") != std::string::npos);
  CHECK(q[3].answer == "no");
  std::vector<StepStats> uneven = {Step(10'000'000, 5'000'000, 100'000),
                                   Step(10'000'000, 5'000'000, 100'000),
                                   Step(10'000'000, 5'000'000, 4'000'000)};
  q = AnswerQuestions(uneven, Sum(uneven), {});
  CHECK(q[3].answer == "yes");
  CHECK(q[3].evidence.find("max 4.00 ms") != std::string::npos);
  CHECK(q[3].evidence.find("above the median cost 3.90 ms") != std::string::npos);
  // Waits spread evenly from 1.5 to 5.5 ms (p95/p50 about 1.5, CV about 0.4,
  // under a CV rule's 0.5): 6 ms above the 3.5 ms median over 110 ms of
  // steps (5.5%) is uneven.
  std::vector<StepStats> spread;
  for (int k = 0; k < 11; ++k) spread.push_back(Step(10'000'000, 5'000'000, 1'500'000 + k * 400'000));
  q = AnswerQuestions(spread, Sum(spread), {});
  CHECK(q[3].answer == "yes");
  // The same spread on 200 ms steps costs under 5% of step time: no.
  std::vector<StepStats> long_steps;
  for (int k = 0; k < 11; ++k) {
    long_steps.push_back(Step(200'000'000, 5'000'000, 1'500'000 + k * 400'000));
  }
  CHECK(AnswerQuestions(long_steps, Sum(long_steps), {})[3].answer == "no");
  std::vector<StepStats> busy = {Step(10, 0, 0), Step(10, 0, 0), Step(10, 0, 0)};
  CHECK(AnswerQuestions(busy, Sum(busy), {})[2].answer == "no");
}

// Guards XProf's levels: the boundaries belong to the higher level.
TEST_CASE("XProf scale levels", "[questions]") {
  CHECK(std::string(XprofLevel(0.049, kXprofInputScale)) == "not");
  CHECK(std::string(XprofLevel(0.05, kXprofInputScale)) == "moderately");
  CHECK(std::string(XprofLevel(0.199, kXprofInputScale)) == "moderately");
  CHECK(std::string(XprofLevel(0.20, kXprofInputScale)) == "highly");
  CHECK(std::string(XprofLevel(0.029, kXprofLaunchScale)) == "not");
  CHECK(std::string(XprofLevel(0.03, kXprofLaunchScale)) == "moderately");
  CHECK(std::string(XprofLevel(0.15, kXprofLaunchScale)) == "highly");
}

// Guards q2/q5 (always unknown for now) and q6 (short kernels, launch share).
TEST_CASE("q2, q5 and q6", "[questions]") {
  std::vector<StepStats> steps = {Step(1000, 500, 0), Step(1000, 500, 0), Step(1000, 500, 0)};
  Totals t = Sum(steps);
  auto q = AnswerQuestions(steps, t, {});
  CHECK(q[1].answer == "unknown");
  CHECK(q[4].answer == "unknown");
  CHECK(q[5].answer == "unknown");  // no kernels
  q = AnswerQuestions(steps, t, {.kernels = 10, .short_kernels = 9});
  CHECK(q[5].answer == "yes");  // short kernels, 50% idle
  q = AnswerQuestions(steps, t, {.kernels = 10, .short_kernels = 1});
  CHECK(q[5].answer == "no");
  CHECK(FormatDuration(1500) == "1.5 us");
  CHECK(FormatDuration(2'500'000'000) == "2.50 s");
}

// Guards a report over a folder of several processes: each is listed, the
// one with the most device ops is analyzed, and a diagnostic says so.
TEST_CASE("a folder of several processes", "[questions][analysis]") {
  char dir[] = "/tmp/stallscope-multi-XXXXXX";
  REQUIRE(mkdtemp(dir) != nullptr);
  for (int p = 0; p < 2; ++p) {
    testing::TraceBuilder b;
    b.SetPid(100 + p);
    auto api = testing::AddStandardApis(&b);
    for (int i = 0; i <= p * 3; ++i) {
      b.Submit(1, api.launch, i * 100 * kUs, i * 100 * kUs + 5, i * 100 * kUs + 10,
               i * 100 * kUs + 50 * kUs);
    }
    b.WriteTo(std::string(dir) + "/rank" + std::to_string(p) + ".sstrace");
  }
  auto r = AnalyzePaths({dir}, AnalysisOptions{});
  REQUIRE(r.ok());
  REQUIRE(r->processes.size() == 2);
  CHECK(r->processes[0].file == "rank0.sstrace");
  CHECK_FALSE(r->processes[0].analyzed);
  CHECK(r->processes[1].analyzed);
  CHECK(r->processes[1].pid == 101);
  CHECK(r->totals.launches == 4);
  bool said = false;
  for (const Diagnostic& d : r->diagnostics) said |= d.id == DiagId::kMultipleProcesses;
  CHECK(said);
  std::system(("rm -rf '" + std::string(dir) + "'").c_str());
}

}  // namespace
}  // namespace stallscope::analyzer
