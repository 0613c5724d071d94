// Tests of `stallscope audit`: budget parsing (TOML and JSON, unknown keys,
// types, ranges, syntax errors with file:line), each check against a
// hand-built run, and the JUnit / Prometheus renderings and their escaping.
#include "analyzer/compare/audit.h"

#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/str_format.h"
#include "analyzer/testing/test_util.h"

namespace stallscope::analyzer {
namespace {

using testing::kUs;
using testing::TraceBuilder;
namespace tf = stallscope::trace;

std::string ErrorOf(std::string_view text, BudgetFormat format, const std::string& path) {
  auto b = ParseBudget(text, path, format);
  REQUIRE_FALSE(b.ok());
  return std::string(b.status().message());
}

Budget Parse(std::string_view text, BudgetFormat format = BudgetFormat::kToml) {
  auto b = ParseBudget(text, format == BudgetFormat::kToml ? "b.toml" : "b.json", format);
  if (!b.ok()) FAIL(b.status().message());
  return *b;
}

// Guards the documented keys: every limit is read from TOML and from JSON
// into the same budget.
TEST_CASE("budget keys in TOML and JSON", "[audit]") {
  const Budget t = Parse(R"(
schema = "stallscope.budget/1"
min_steps = 10
max_syncs_per_step = 2
max_gpu_idle_share = 0.25
max_step_time_p95_ms = 40.5
max_hotspot_idle_caused_ms = 3
forbidden_fingerprints = ["0123456789abcdef"]
allowed_fingerprints = []
no_new_hotspots = true

[max_idle_share_by_cause]
sync = 0.05
host_wait = 0.1
)");
  const Budget j = Parse(R"({
  "schema": "stallscope.budget/1",
  "min_steps": 10, "max_syncs_per_step": 2, "max_gpu_idle_share": 0.25,
  "max_step_time_p95_ms": 40.5, "max_hotspot_idle_caused_ms": 3,
  "forbidden_fingerprints": ["0123456789abcdef"], "allowed_fingerprints": [],
  "no_new_hotspots": true,
  "max_idle_share_by_cause": {"sync": 0.05, "host_wait": 0.1}
})",
                         BudgetFormat::kJson);
  for (const Budget* b : {&t, &j}) {
    CHECK(b->min_steps == 10);
    CHECK(b->max_syncs_per_step == 2.0);
    CHECK(b->max_gpu_idle_share == 0.25);
    CHECK(b->max_step_time_p95_ms == 40.5);
    CHECK(b->max_hotspot_idle_caused_ms == 3.0);
    REQUIRE(b->forbidden_fingerprints.has_value());
    CHECK(*b->forbidden_fingerprints == std::vector<std::string>{"0123456789abcdef"});
    REQUIRE(b->allowed_fingerprints.has_value());
    CHECK(b->allowed_fingerprints->empty());
    CHECK(b->no_new_hotspots);
    CHECK(b->max_idle_share_by_cause[static_cast<int>(Cause::kSync)] == 0.05);
    CHECK(b->max_idle_share_by_cause[static_cast<int>(Cause::kHostWait)] == 0.1);
    CHECK_FALSE(b->max_idle_share_by_cause[static_cast<int>(Cause::kComm)].has_value());
  }
  // An empty budget sets no limit; an absent allowed list is not an empty one.
  const Budget empty = Parse("");
  CHECK_FALSE(empty.allowed_fingerprints.has_value());
  CHECK_FALSE(empty.no_new_hotspots);
}

// Guards the error contract: unknown keys (top level and causes), wrong
// types and ranges name the key and its line; syntax errors name the line.
TEST_CASE("budget errors name the file, line and key", "[audit]") {
  using F = BudgetFormat;
  std::string e = ErrorOf("min_steps = 3\nmax_sync_per_step = 1\n", F::kToml, "nightly.toml");
  CHECK(e.starts_with("nightly.toml:2: unknown key 'max_sync_per_step'"));
  CHECK(e.find('\n') == std::string::npos);
  e = ErrorOf("[max_idle_share_by_cause]\nsync = 0.1\nhost_wiat = 0.2\n", F::kToml, "b.toml");
  CHECK(e.starts_with("b.toml:3: unknown key 'max_idle_share_by_cause.host_wiat'"));
  e = ErrorOf("{\n  \"min_steps\": 3,\n  \"max_gpu_idle\": 0.2\n}", F::kJson, "b.json");
  CHECK(e.starts_with("b.json:3: unknown key 'max_gpu_idle'"));
  e = ErrorOf("{\"max_idle_share_by_cause\": {\n \"sync\": 0.1,\n \"bogus\": 1}}", F::kJson,
              "b.json");
  CHECK(e.starts_with("b.json:3: unknown key 'max_idle_share_by_cause.bogus'"));
  // Types and ranges.
  CHECK(ErrorOf("max_gpu_idle_share = 1.5\n", F::kToml, "b.toml") ==
        "b.toml:1: max_gpu_idle_share: expected a number from 0 to 1");
  CHECK(ErrorOf("\n\nmax_syncs_per_step = \"two\"\n", F::kToml, "b.toml")
            .starts_with("b.toml:3: max_syncs_per_step: expected a number"));
  CHECK(ErrorOf("min_steps = 2.5\n", F::kToml, "b.toml")
            .starts_with("b.toml:1: min_steps: expected a whole number"));
  CHECK(ErrorOf("no_new_hotspots = 1\n", F::kToml, "b.toml")
            .starts_with("b.toml:1: no_new_hotspots: expected true or false"));
  CHECK(ErrorOf("forbidden_fingerprints = [\"xyz\"]\n", F::kToml, "b.toml")
            .starts_with("b.toml:1: forbidden_fingerprints: \"xyz\" is not a hotspot fingerprint"));
  CHECK(ErrorOf("forbidden_fingerprints = \"0123456789abcdef\"\n", F::kToml, "b.toml")
            .starts_with("b.toml:1: forbidden_fingerprints: expected a list"));
  CHECK(ErrorOf("schema = \"stallscope.budget/9\"\n", F::kToml, "b.toml")
            .starts_with("b.toml:1: schema: expected"));
  CHECK(ErrorOf("[1, 2]", F::kJson, "b.json").starts_with("b.json:1: a budget is a JSON object"));
  // Syntax errors: file:line.
  e = ErrorOf("min_steps = 3\nmax_gpu_idle_share = = 0.2\n", F::kToml, "bad.toml");
  CHECK(e.starts_with("bad.toml:2:"));
  CHECK(e.find('\n') == std::string::npos);
  e = ErrorOf("{\n  \"min_steps\": 3,\n  \"max_gpu_idle_share\": ,\n}", F::kJson, "bad.json");
  CHECK(e.starts_with("bad.json:3:"));
  CHECK(e.find('\n') == std::string::npos);
}

// Guards LoadBudget: the extension picks the parser; others are refused.
TEST_CASE("budget files by extension", "[audit]") {
  char dir[] = "/tmp/stallscope-audit-XXXXXX";
  REQUIRE(mkdtemp(dir) != nullptr);
  const std::string d = dir;
  std::ofstream(d + "/b.toml") << "max_gpu_idle_share = 0.5\n";
  std::ofstream(d + "/b.json") << "{\"max_gpu_idle_share\": 0.25}\n";
  std::ofstream(d + "/b.yaml") << "max_gpu_idle_share: 0.5\n";
  auto t = LoadBudget(d + "/b.toml");
  REQUIRE(t.ok());
  CHECK(t->max_gpu_idle_share == 0.5);
  auto j = LoadBudget(d + "/b.json");
  REQUIRE(j.ok());
  CHECK(j->max_gpu_idle_share == 0.25);
  CHECK_FALSE(LoadBudget(d + "/b.yaml").ok());
  CHECK_FALSE(LoadBudget(d + "/missing.toml").ok());
  std::system(("rm -rf '" + d + "'").c_str());
}

// A run of 4 steps of 1 ms: a 500 us kernel, a blocking read-back at
// train.py:42 (it drains the GPU), and in `with_log` runs an extra explicit
// sync at train.py:90 in every step.
Report Run(bool with_log) {
  TraceBuilder b;
  auto api = testing::AddStandardApis(&b);
  const uint32_t item = b.PythonStack({{"train.py", "train_step", 42}});
  const uint32_t log = b.PythonStack({{"train.py", "log", 90}});
  for (int k = 0; k < 4; ++k) {
    const int64_t t0 = k * 1000 * kUs;
    b.Range(1, t0, t0 + 1000 * kUs, "step");
    b.Submit(1, api.launch, t0 + 10 * kUs, t0 + 15 * kUs, t0 + 20 * kUs, t0 + 500 * kUs);
    b.Submit(1, api.memcpy, t0 + 20 * kUs, t0 + 520 * kUs, t0 + 500 * kUs, t0 + 510 * kUs,
             tf::DeviceOpKind::kMemcpy, "DtoH", {.python_stack = item, .bytes = 4});
    if (with_log) b.Call(1, api.sync, t0 + 600 * kUs, t0 + 620 * kUs, {.python_stack = log});
  }
  return testing::AnalyzeOrDie(b);
}

const Hotspot& At(const Report& r, int line) {
  for (const Hotspot& h : r.hotspots) {
    if (h.site.line == line) return h;
  }
  FAIL("no hotspot at line " << line);
  throw;
}

const AuditCheck& Check(const AuditResult& r, const std::string& name) {
  for (const AuditCheck& c : r.checks) {
    if (c.name == name) return c;
  }
  FAIL("no check " << name);
  throw;
}

// Guards each check against numbers computed here from the report: limits
// just above the measured value pass, just below fail, and the violation
// names the hotspot (api, site, fingerprint) and its numbers.
TEST_CASE("audit checks pass and fail at their limits", "[audit]") {
  const Report run = Run(true);
  const RunMetrics m = ComputeMetrics(run);
  REQUIRE(m.steps == 4);
  REQUIRE(run.totals.syncs == 8);
  CHECK(m.syncs_per_step == 2.0);
  CHECK(m.step_time_ns == run.totals.gpu_busy_ns + run.totals.gpu_idle_ns);
  const double idle =
      static_cast<double>(run.totals.gpu_idle_ns) / static_cast<double>(m.step_time_ns);
  REQUIRE(idle > 0.3);
  const Hotspot& item = At(run, 42);
  REQUIRE(item.idle_caused_ns > 0);

  Budget pass;
  pass.min_steps = 4;
  pass.max_syncs_per_step = 2;
  pass.max_gpu_idle_share = idle + 0.001;
  pass.max_idle_share_by_cause[static_cast<int>(Cause::kSync)] = 1.0;
  pass.max_step_time_p95_ms = static_cast<double>(m.step_time_p95_ns) / 1e6;
  pass.max_hotspot_idle_caused_ms = static_cast<double>(item.idle_caused_ns) / 1e6;
  pass.allowed_fingerprints = {item.fingerprint, At(run, 90).fingerprint};
  pass.forbidden_fingerprints = std::vector<std::string>{"0123456789abcdef"};
  const AuditResult ok = RunAudit(pass, run, "run", nullptr);
  CHECK(ok.checks.size() == 8);
  CHECK(ok.violations() == 0);

  Budget fail;
  fail.min_steps = 5;
  fail.max_syncs_per_step = 1.5;
  fail.max_gpu_idle_share = idle - 0.001;
  const double sync_share =
      static_cast<double>(run.totals.idle_by_cause[0]) / static_cast<double>(m.step_time_ns);
  REQUIRE(sync_share > 0.01);
  fail.max_idle_share_by_cause[static_cast<int>(Cause::kSync)] = sync_share - 0.01;
  fail.max_step_time_p95_ms = static_cast<double>(m.step_time_p95_ns) / 1e6 - 0.001;
  fail.max_hotspot_idle_caused_ms = static_cast<double>(item.idle_caused_ns) / 1e6 - 0.001;
  fail.allowed_fingerprints = {At(run, 90).fingerprint};
  fail.forbidden_fingerprints = {item.fingerprint};
  const AuditResult bad = RunAudit(fail, run, "run", nullptr);
  CHECK(bad.checks.size() == 8);
  for (const AuditCheck& c : bad.checks) {
    INFO(c.name);
    CHECK(c.violations.size() == 1);
  }
  const std::string& v = Check(bad, "forbidden_fingerprints").violations.at(0);
  CHECK(v.find(item.fingerprint) != std::string::npos);
  CHECK(v.find("train.py:42 (train_step)") != std::string::npos);
  CHECK(v.find(item.api) != std::string::npos);
  CHECK(v.find(absl::StrFormat("%d calls", item.count)) != std::string::npos);
  CHECK(Check(bad, "allowed_fingerprints").violations.at(0).find(item.fingerprint) !=
        std::string::npos);
  CHECK(Check(bad, "max_gpu_idle_share").violations.at(0).find("exceeds") != std::string::npos);
}

// Guards audits of traces recorded with sampled device timing: min_steps
// counts the run's steps (found), not only the timed ones its report lists,
// and says how many were timed.
TEST_CASE("audit min_steps counts a sampled run's steps", "[audit][sampled]") {
  const Report run = testing::AnalyzeOrDie(testing::SampledSteps());
  REQUIRE(run.steps.size() == 3);
  Budget b;
  b.min_steps = 7;
  const AuditResult ok = RunAudit(b, run, "run", nullptr);
  CHECK(ok.violations() == 0);
  CHECK(Check(ok, "min_steps").summary == "7 steps, 3 of them timed (device timing one step in 3) (at least 7)");
  b.min_steps = 8;
  const AuditResult bad = RunAudit(b, run, "run", nullptr);
  REQUIRE(bad.violations() == 1);
  CHECK(Check(bad, "min_steps").violations.at(0).find("the run has 7 steps, 3 of them timed") !=
        std::string::npos);
}

// Guards "no new hotspot": matched by fingerprint against the baseline; a
// run with fewer hotspots passes, one with an extra site fails naming it;
// without a baseline the check fails and says why.
TEST_CASE("audit no_new_hotspots against a baseline", "[audit]") {
  const Report clean = Run(false), logged = Run(true);
  Budget b;
  b.no_new_hotspots = true;
  CHECK(RunAudit(b, clean, "clean", &logged).violations() == 0);
  const AuditResult r = RunAudit(b, logged, "logged", &clean);
  REQUIRE(r.violations() == 1);
  const std::string& v = r.checks.at(0).violations.at(0);
  CHECK(v.find(At(logged, 90).fingerprint) != std::string::npos);
  CHECK(v.find("train.py:90 (log)") != std::string::npos);
  const AuditResult none = RunAudit(b, clean, "clean", nullptr);
  REQUIRE(none.violations() == 1);
  CHECK(none.checks.at(0).violations.at(0).find("--baseline") != std::string::npos);
}

// Guards the distributed limits: a straggler and the ranks' waiting share
// against max_stragglers and max_rank_wait_share; a one-process run fails
// them saying it has no ranks; the metrics carry the ranks.
TEST_CASE("audit of a distributed run", "[audit]") {
  const Budget b = Parse("max_stragglers = 0\nmax_rank_wait_share = 0.25\n");
  REQUIRE(b.max_stragglers == 0);
  REQUIRE(b.max_rank_wait_share == 0.25);
  Report run = Run(false);
  const AuditResult single = RunAudit(b, run, "one", nullptr);
  REQUIRE(single.violations() == 2);
  CHECK(single.checks.at(0).violations.at(0).find("not a distributed run") != std::string::npos);
  for (int r = 0; r < 4; ++r) {
    RankRow row;
    row.rank = r;
    row.host = "node\"" + std::to_string(r);
    row.wait_caused_ns = r == 2 ? 9'000'000 : 0;
    run.ranks.push_back(row);
  }
  run.collectives.wait_share = 0.2;
  CHECK(RunAudit(b, run, "clean", nullptr).violations() == 0);
  run.collectives.wait_share = 0.3;
  Straggler st;
  st.rank = 2;
  st.times_last = 8;
  st.wait_caused_ns = 9'000'000;
  st.before_cause = "host_wait";
  run.stragglers.push_back(st);
  const AuditResult r = RunAudit(b, run, "slow", nullptr);
  REQUIRE(r.violations() == 2);
  bool named = false;
  for (const AuditCheck& c : r.checks) {
    for (const std::string& v : c.violations) named |= v.find("straggler rank 2") != std::string::npos;
  }
  CHECK(named);
  const std::string prom = RenderPrometheus(r);
  CHECK(prom.find("stallscope_stragglers 1\n") != std::string::npos);
  CHECK(prom.find("stallscope_rank_wait_share 0.3\n") != std::string::npos);
  CHECK(prom.find("stallscope_rank_wait_caused_seconds{rank=\"2\",host=\"node\\\"2\"} 0.009\n") !=
        std::string::npos);
  CHECK(ErrorOf("max_stragglers = -1\n", BudgetFormat::kToml, "b.toml").find("max_stragglers") !=
        std::string::npos);
}

// Guards the JUnit rendering: one testcase per check, a failure element per
// failed check whose message names the violation, and XML escaping.
TEST_CASE("audit JUnit XML", "[audit]") {
  const Report run = Run(true);
  Budget b;
  b.path = "b<&>\".toml";
  b.forbidden_fingerprints = {At(run, 42).fingerprint};
  b.max_gpu_idle_share = 1.0;
  const AuditResult r = RunAudit(b, run, "run'dir", nullptr);
  const std::string x = RenderJunit(r);
  CHECK(x.find("<testsuite name=\"stallscope audit\" tests=\"2\" failures=\"1\"") !=
        std::string::npos);
  CHECK(x.find("<testcase classname=\"stallscope.audit\" name=\"forbidden_fingerprints\">") !=
        std::string::npos);
  CHECK(x.find("<failure type=\"budget\" message=\"forbidden hotspot ") != std::string::npos);
  CHECK(x.find(At(run, 42).fingerprint) != std::string::npos);
  CHECK(x.find("value=\"b&lt;&amp;&gt;&quot;.toml\"") != std::string::npos);
  CHECK(x.find("value=\"run&apos;dir\"") != std::string::npos);
  CHECK(XmlEscape(std::string("a\x01"
                              "b\n",
                              4)) == "a?b&#10;");
}

// Guards the Prometheus text format: HELP and TYPE before each family's
// samples, label values escaped, the numbers those of the report.
TEST_CASE("audit Prometheus metrics", "[audit]") {
  Report run = Run(true);
  run.hotspots[0].site.file = "dir\\\"odd\"\nname.py";
  Budget b;
  b.max_gpu_idle_share = 0.0;
  const AuditResult r = RunAudit(b, run, "run", nullptr);
  const std::string p = RenderPrometheus(r);
  CHECK(p.starts_with("# HELP stallscope_budget_violations "));
  CHECK(p.find("\nstallscope_budget_violations 1\n") != std::string::npos);
  CHECK(p.find("# TYPE stallscope_gpu_idle_ratio gauge\n") != std::string::npos);
  CHECK(p.find("stallscope_idle_seconds{cause=\"host_wait\"} ") != std::string::npos);
  CHECK(p.find("\nstallscope_syncs_per_step 2\n") != std::string::npos);
  CHECK(p.find("site=\"dir\\\\\\\"odd\\\"\\nname.py:") != std::string::npos);
  CHECK(PrometheusLabelEscape("a\\b\"c\nd") == "a\\\\b\\\"c\\nd");
  // Every sample line belongs to a family announced just before.
  std::istringstream in(p);
  std::string line, family;
  while (std::getline(in, line)) {
    if (line.starts_with("# TYPE ")) family = line.substr(7, line.find(' ', 7) - 7);
    if (line.starts_with("#")) continue;
    INFO(line);
    CHECK(line.starts_with(family));
  }
}

// Guards the metrics file: written through a temporary file, replacing only
// an earlier stallscope metrics file, never another file.
TEST_CASE("metrics file replaces only its own kind", "[audit]") {
  char dir[] = "/tmp/stallscope-prom-XXXXXX";
  REQUIRE(mkdtemp(dir) != nullptr);
  const std::string d = dir;
  const std::string path = d + "/job.prom";
  REQUIRE(WriteMetricsFile(path, "# HELP stallscope_x one\nstallscope_x 1\n").ok());
  struct stat st;
  REQUIRE(stat(path.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0640);
  REQUIRE(WriteMetricsFile(path, "# HELP stallscope_x two\nstallscope_x 2\n").ok());
  std::stringstream s;
  s << std::ifstream(path).rdbuf();
  CHECK(s.str() == "# HELP stallscope_x two\nstallscope_x 2\n");
  std::ofstream(d + "/other.prom") << "# HELP node_x\nnode_x 1\n";
  auto st2 = WriteMetricsFile(d + "/other.prom", "# HELP stallscope_x 3\n");
  CHECK_FALSE(st2.ok());
  std::stringstream o;
  o << std::ifstream(d + "/other.prom").rdbuf();
  CHECK(o.str() == "# HELP node_x\nnode_x 1\n");
  REQUIRE(symlink("job.prom", (d + "/link.prom").c_str()) == 0);
  CHECK_FALSE(WriteMetricsFile(d + "/link.prom", "# HELP stallscope_x 4\n").ok());
  // No temporary file is left behind.
  CHECK(std::system(("test $(ls -A '" + d + "' | wc -l) -eq 3").c_str()) == 0);
  std::system(("rm -rf '" + d + "'").c_str());
}

}  // namespace
}  // namespace stallscope::analyzer
