// Tests of the SQLite export: the bytes open as a SQLite database, its row
// counts match the timeline and the analysis, and its sums match the report
// (idle by cause per step and in total, launches and syncs per step,
// hotspot counts and idle caused through the calls).
#include "analyzer/report/sqlite.h"

#include <sqlite3.h>

#include <catch2/catch.hpp>
#include <algorithm>
#include <cstring>
#include <unistd.h>
#include <set>
#include <stdexcept>

#include "analyzer/testing/test_util.h"

namespace stallscope::analyzer {
namespace {

using testing::kUs;
using testing::TraceBuilder;
namespace tf = stallscope::trace;

// An opened copy of exported bytes.
class Db {
 public:
  // A database file, read only.
  static Db File(const std::string& path) {
    Db db;
    REQUIRE(sqlite3_open_v2(path.c_str(), &db.db_, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK);
    return db;
  }
  Db(Db&& o) noexcept : db_(o.db_) { o.db_ = nullptr; }
  explicit Db(const std::string& bytes) {
    REQUIRE(sqlite3_open(":memory:", &db_) == SQLITE_OK);
    auto* buf = static_cast<unsigned char*>(sqlite3_malloc64(bytes.size()));
    REQUIRE(buf != nullptr);
    std::memcpy(buf, bytes.data(), bytes.size());
    REQUIRE(sqlite3_deserialize(db_, "main", buf, static_cast<sqlite3_int64>(bytes.size()),
                                static_cast<sqlite3_int64>(bytes.size()),
                                SQLITE_DESERIALIZE_FREEONCLOSE | SQLITE_DESERIALIZE_READONLY) ==
            SQLITE_OK);
  }
  ~Db() { sqlite3_close(db_); }

  // The first column of every row of `sql`, as text ("" for NULL).
  std::vector<std::string> Column(const std::string& sql, int64_t bind = INT64_MIN) const {
    sqlite3_stmt* st = nullptr;
    if (sqlite3_prepare_v2(db_, sql.c_str(), -1, &st, nullptr) != SQLITE_OK) {
      throw std::runtime_error(sql + ": " + sqlite3_errmsg(db_));
    }
    if (bind != INT64_MIN) sqlite3_bind_int64(st, 1, bind);
    std::vector<std::string> out;
    while (sqlite3_step(st) == SQLITE_ROW) {
      const unsigned char* t = sqlite3_column_text(st, 0);
      out.emplace_back(t ? reinterpret_cast<const char*>(t) : "");
    }
    sqlite3_finalize(st);
    return out;
  }
  std::string Text(const std::string& sql, int64_t bind = INT64_MIN) const {
    auto c = Column(sql, bind);
    if (c.size() != 1) throw std::runtime_error(sql + ": not one row");
    return c[0];
  }
  int64_t Int(const std::string& sql, int64_t bind = INT64_MIN) const {
    return std::stoll(Text(sql, bind));
  }
  // Every row of `sql`, its columns as text joined by '|' ("NULL" for
  // NULL), sorted.
  std::vector<std::string> Rows(const std::string& sql) const {
    sqlite3_stmt* st = nullptr;
    if (sqlite3_prepare_v2(db_, sql.c_str(), -1, &st, nullptr) != SQLITE_OK) {
      throw std::runtime_error(sql + ": " + sqlite3_errmsg(db_));
    }
    std::vector<std::string> out;
    while (sqlite3_step(st) == SQLITE_ROW) {
      std::string row;
      for (int c = 0; c < sqlite3_column_count(st); ++c) {
        const unsigned char* t = sqlite3_column_text(st, c);
        row += (c > 0 ? "|" : "") + (t ? std::string(reinterpret_cast<const char*>(t)) : std::string("NULL"));
      }
      out.push_back(std::move(row));
    }
    sqlite3_finalize(st);
    std::sort(out.begin(), out.end());
    return out;
  }

 private:
  Db() = default;
  sqlite3* db_ = nullptr;
};

struct Sample {
  Report report;
  ProcessAnalysis analysis;
};

// Four steps on the main thread (launches, a blocking .item()-style read-back
// at one Python site, an explicit sync at another), a helper thread that
// launches on another stream, a memset, and (`other_device`) ops that no
// call submitted on a second device.
TraceBuilder SampleTrace(bool other_device = true) {
  TraceBuilder b;
  auto api = testing::AddStandardApis(&b);
  const uint32_t item = b.PythonStack({{"train.py", "train_step", 42}, {"train.py", "main", 7}});
  const uint32_t sync = b.PythonStack({{"train.py", "log_metrics", 90}});
  b.Thread(1, "python");
  b.Thread(2, "loader");
  for (int k = 0; k < 4; ++k) {
    const int64_t t0 = k * 2000 * kUs;
    b.Range(1, t0, t0 + 1800 * kUs, "step");
    b.Submit(1, api.launch, t0 + 10 * kUs, t0 + 15 * kUs, t0 + 20 * kUs, t0 + 400 * kUs,
             tf::DeviceOpKind::kKernel, "gemm");
    b.Submit(1, api.launch, t0 + 16 * kUs, t0 + 20 * kUs, t0 + 400 * kUs, t0 + 402 * kUs,
             tf::DeviceOpKind::kKernel, "tiny");
    // The helper thread's external ids its own, as the recorder gives them
    // (the thread's index above bit 40).
    const uint64_t external = (uint64_t{2} << 40) + static_cast<uint64_t>(k);
    b.Call(2, api.launch, t0 + 30 * kUs, t0 + 36 * kUs, {.correlation = external});
    b.Device(t0 + 410 * kUs, t0 + 600 * kUs, tf::DeviceOpKind::kKernel, "aux", 100'000 + k);
    b.Correlate(external, 100'000 + k);
    b.Submit(1, api.memcpy, t0 + 25 * kUs, t0 + 650 * kUs, t0 + 600 * kUs, t0 + 640 * kUs,
             tf::DeviceOpKind::kMemcpy, "DtoH", {.python_stack = item, .bytes = 4});
    b.Submit(1, api.memset, t0 + 900 * kUs, t0 + 905 * kUs, t0 + 1000 * kUs, t0 + 1010 * kUs,
             tf::DeviceOpKind::kMemset, "");
    b.Submit(1, api.launch, t0 + 910 * kUs, t0 + 915 * kUs, t0 + 1020 * kUs, t0 + 1500 * kUs,
             tf::DeviceOpKind::kKernel, "gemm");
    if (k % 2 == 1) b.Call(1, api.sync, t0 + 920 * kUs, t0 + 1505 * kUs, {.python_stack = sync});
    if (other_device) b.Device(t0 + 100 * kUs, t0 + 200 * kUs, tf::DeviceOpKind::kKernel, "other_device", 0, 3, 1);
  }
  return b;
}

Sample MakeSample() {
  TraceBuilder b = SampleTrace();
  Timeline t = testing::ReadOrDie(b);
  Sample s;
  auto r = AnalyzeTimeline(t, {}, &s.analysis);
  REQUIRE(r.ok());
  s.report = std::move(*r);
  s.analysis.timeline = std::move(t);
  return s;
}

std::string Render(const Sample& s) {
  auto bytes = RenderSqlite(s.report, s.analysis);
  REQUIRE(bytes.ok());
  return *bytes;
}

// Guards the file itself: a SQLite 3 file that passes the integrity check
// and names its schema, source and step source.
TEST_CASE("sqlite export is a valid database with its meta table", "[sqlite]") {
  const Sample s = MakeSample();
  const std::string bytes = Render(s);
  REQUIRE(bytes.size() > 100);
  CHECK(bytes.compare(0, 16, std::string("SQLite format 3\0", 16)) == 0);
  Db db(bytes);
  CHECK(db.Text("PRAGMA integrity_check") == "ok");
  CHECK(db.Text("SELECT value FROM meta WHERE key = 'schema'") == kSqliteSchema);
  CHECK(db.Int("SELECT value FROM meta WHERE key = 'schema_version'") == kSqliteSchemaVersion);
  CHECK(db.Text("SELECT value FROM meta WHERE key = 'source_trace'") == "test.sstrace");
  CHECK(db.Text("SELECT value FROM meta WHERE key = 'step_source'") == s.report.step_source);
  CHECK(db.Int("SELECT value FROM meta WHERE key = 'analyzed_device'") == s.analysis.plan.device);
}

// Guards completeness: one row per call, op, gap, step, hotspot, frame,
// API, thread and process.
TEST_CASE("sqlite row counts match the timeline and the analysis", "[sqlite]") {
  const Sample s = MakeSample();
  const Timeline& t = s.analysis.timeline;
  Db db(Render(s));
  CHECK(db.Int("SELECT COUNT(*) FROM api_calls") == static_cast<int64_t>(t.calls.size()));
  CHECK(db.Int("SELECT COUNT(*) FROM device_ops") == static_cast<int64_t>(t.ops.size()));
  CHECK(db.Int("SELECT COUNT(*) FROM idle_gaps") == static_cast<int64_t>(s.analysis.gaps.size()));
  CHECK(db.Int("SELECT COUNT(*) FROM steps") == static_cast<int64_t>(s.report.steps.size()));
  REQUIRE(s.report.hotspots.size() == 2);
  CHECK(db.Int("SELECT COUNT(*) FROM hotspots") == 2);
  size_t frames = 0;
  for (const Hotspot& h : s.report.hotspots) frames += h.stack.size();
  CHECK(db.Int("SELECT COUNT(*) FROM stacks") == static_cast<int64_t>(frames));
  CHECK(db.Int("SELECT COUNT(*) FROM apis") == static_cast<int64_t>(t.apis.size()));
  CHECK(db.Int("SELECT COUNT(*) FROM threads") == 2);
  CHECK(db.Text("SELECT name FROM threads WHERE main = 1") == "python");
  CHECK(db.Int("SELECT COUNT(*) FROM processes") == 1);
  CHECK(db.Int("SELECT COUNT(*) FROM questions") ==
        static_cast<int64_t>(s.report.questions.size()));
  CHECK(db.Int("SELECT COUNT(*) FROM diagnostics") ==
        static_cast<int64_t>(s.report.diagnostics.size()));
  // Every op with a submitting call joins to it, and to its name.
  int64_t joined = 0;
  for (const DeviceOp& op : t.ops) joined += op.call >= 0;
  CHECK(db.Int("SELECT COUNT(*) FROM device_ops o JOIN api_calls c ON c.id = o.call_id") == joined);
  CHECK(db.Int("SELECT COUNT(*) FROM device_ops o JOIN strings s ON s.id = o.name_id "
               "WHERE s.value = 'gemm'") == 8);
  CHECK(db.Int("SELECT COUNT(*) FROM device_ops WHERE kind = 'memset'") == 4);
  // Ops on the other device are in no step; those of the analyzed device
  // inside the steps' span are.
  CHECK(db.Int("SELECT COUNT(*) FROM device_ops WHERE device = 1 AND step IS NOT NULL") == 0);
  int64_t in_steps = 0;
  for (const DeviceOp& op : t.ops) {
    in_steps += op.device == s.analysis.plan.device &&
                op.start_ns >= s.report.steps.front().start_ns &&
                op.start_ns < s.report.steps.back().end_ns;
  }
  CHECK(db.Int("SELECT COUNT(*) FROM device_ops WHERE step IS NOT NULL") == in_steps);
  // A hotspot's frames keep their order (innermost first).
  CHECK(db.Column("SELECT s.function FROM stacks s JOIN hotspots h ON h.id = s.hotspot_id "
                  "WHERE h.function = 'train_step' ORDER BY depth") ==
        std::vector<std::string>{"train_step", "main"});
}

// Guards the sums scripts rely on: gaps by cause equal the report's idle by
// cause (per step and in total); calls by step give the launches and syncs
// per step; calls by hotspot give each hotspot's count and idle caused.
TEST_CASE("sqlite sums match the report", "[sqlite]") {
  const Sample s = MakeSample();
  const Report& r = s.report;
  Db db(Render(s));
  REQUIRE(r.totals.gpu_idle_ns > 0);
  for (int c = 0; c < kNumCauses; ++c) {
    const std::string cause = CauseName(CauseAt(c));
    INFO(cause);
    CHECK(db.Int("SELECT COALESCE(SUM(end_ns - start_ns), 0) FROM idle_gaps WHERE cause = '" +
                 cause + "'") == r.totals.idle_by_cause[c]);
    for (const StepStats& st : r.steps) {
      CHECK(db.Int("SELECT COALESCE(SUM(end_ns - start_ns), 0) FROM idle_gaps WHERE cause = '" +
                       cause + "' AND step = ?1",
                   st.index) == st.idle_by_cause[c]);
      CHECK(db.Int("SELECT idle_" + cause + "_ns FROM steps WHERE step = ?1", st.index) ==
            st.idle_by_cause[c]);
    }
  }
  int64_t launches = 0, syncs = 0;
  for (const StepStats& st : r.steps) {
    INFO("step " << st.index);
    CHECK(db.Int("SELECT COUNT(*) FROM api_calls c JOIN apis a ON a.id = c.api_id "
                 "WHERE a.category = 'launch' AND c.step = ?1",
                 st.index) == st.launches);
    CHECK(db.Int("SELECT COUNT(*) FROM api_calls WHERE class = 'sync' AND step = ?1", st.index) ==
          st.sync_count);
    CHECK(db.Int("SELECT gpu_busy_ns FROM steps WHERE step = ?1", st.index) == st.gpu_busy_ns);
    CHECK(db.Int("SELECT (end_ns - start_ns) - gpu_busy_ns FROM steps WHERE step = ?1", st.index) ==
          db.Int("SELECT COALESCE(SUM(end_ns - start_ns), 0) FROM idle_gaps WHERE step = ?1",
                 st.index));
    launches += st.launches;
    syncs += st.sync_count;
  }
  CHECK(launches == r.totals.launches);
  CHECK(syncs == r.totals.syncs);
  CHECK(db.Int("SELECT launches FROM processes WHERE analyzed = 1") == r.totals.launches);
  for (size_t i = 0; i < r.hotspots.size(); ++i) {
    const Hotspot& h = r.hotspots[i];
    INFO(h.site.function);
    const auto id = static_cast<int64_t>(i);
    CHECK(db.Int("SELECT COUNT(*) FROM api_calls WHERE hotspot_id = ?1", id) == h.count);
    CHECK(db.Int("SELECT SUM(idle_caused_ns) FROM api_calls WHERE hotspot_id = ?1", id) ==
          h.idle_caused_ns);
    CHECK(db.Int("SELECT SUM(exit_ns - enter_ns) FROM api_calls WHERE hotspot_id = ?1", id) ==
          h.blocked_ns);
    CHECK(db.Text("SELECT fingerprint FROM hotspots WHERE id = ?1", id) == h.fingerprint);
    CHECK(db.Text("SELECT function FROM hotspots WHERE id = ?1", id) == h.site.function);
  }
  CHECK(db.Int("SELECT SUM(idle_caused_ns) FROM api_calls") ==
        db.Int("SELECT SUM(idle_caused_ns) FROM hotspots"));
  // The gap's call points at a real call; the read-back's rule-1 idle is
  // charged to sync gaps pointing at the read-back calls.
  CHECK(db.Int("SELECT COUNT(*) FROM idle_gaps g LEFT JOIN api_calls c ON c.id = g.call_id "
               "WHERE g.call_id IS NOT NULL AND c.id IS NULL") == 0);
}

// Guards the classes: the read-back, the explicit sync and the synchronous
// memset are `sync`, launches are `nonblocking`, as ClassifyCalls said.
TEST_CASE("sqlite call classes follow the analysis", "[sqlite]") {
  const Sample s = MakeSample();
  Db db(Render(s));
  int64_t n[3] = {0, 0, 0};
  for (CallClass c : s.analysis.classes) ++n[static_cast<int>(c)];
  CHECK(db.Int("SELECT COUNT(*) FROM api_calls WHERE class = 'nonblocking'") == n[0]);
  CHECK(db.Int("SELECT COUNT(*) FROM api_calls WHERE class = 'sync'") == n[1]);
  CHECK(db.Int("SELECT COUNT(*) FROM api_calls WHERE class = 'nccl'") == n[2]);
  CHECK(n[1] == 4 + 2 + 4);
  const std::set<std::string> sync_apis = [&] {
    auto v = db.Column(
        "SELECT DISTINCT a.name FROM api_calls c JOIN apis a ON a.id = c.api_id "
        "WHERE c.class = 'sync'");
    return std::set<std::string>(v.begin(), v.end());
  }();
  CHECK(sync_apis == std::set<std::string>{"cudaMemcpy", "cudaMemset", "cudaStreamSynchronize"});
}

// Guards the database of a trace too large to hold (WriteSqliteFromFile):
// written from the file by slices, every table holds the whole reading's
// rows, ids included, and so do its indexes; a trace with an op that no
// call submitted is refused (read whole instead).
// `report --format sqlite -o` of a trace read whole writes its database
// into the file (WriteSqlite) instead of serializing one held in memory:
// the same schema and rows as RenderSqlite's bytes.
TEST_CASE("sqlite database written into its file: the rendered database's rows", "[sqlite]") {
  const Sample s = MakeSample();
  const Db want(Render(s));
  std::string dir = "/tmp/stallscope-sqlite-file-XXXXXX";
  REQUIRE(mkdtemp(dir.data()) != nullptr);
  const std::string path = dir + "/written.db";
  const absl::Status written = WriteSqlite(s.report, s.analysis, path);
  INFO(written.ToString());
  REQUIRE(written.ok());
  {
    const Db got = Db::File(path);
    CHECK(got.Text("PRAGMA integrity_check") == "ok");
    const std::string schema = "SELECT type, name, sql FROM sqlite_master";
    CHECK(got.Rows(schema) == want.Rows(schema));
    const std::vector<std::string> tables = want.Column("SELECT name FROM sqlite_master WHERE type = 'table'");
    CHECK(tables.size() >= 10);
    for (const std::string& table : tables) {
      INFO(table);
      CHECK(got.Rows("SELECT * FROM " + table) == want.Rows("SELECT * FROM " + table));
    }
    CHECK(got.Int("SELECT COUNT(*) FROM api_calls") == static_cast<int64_t>(s.analysis.timeline.calls.size()));
  }
  // A path that cannot be opened is an error, not an empty database.
  CHECK(!WriteSqlite(s.report, s.analysis, dir + "/no/such/folder.db").ok());
  unlink(path.c_str());
  rmdir(dir.c_str());
}

TEST_CASE("sqlite database from the file by slices: the whole reading's rows", "[sqlite][stream]") {
  const testing::TracesOnDisk traces =
      testing::WriteTraces(testing::FromFileTraces(SampleTrace(/*other_device=*/false)), "stallscope-sqlite");
  REQUIRE(!traces.dir.empty());
  const std::string db_path = traces.dir + "/sliced.db";
  int compared = 0;
  for (const std::string& path : traces.paths) {
    INFO(path);
    const testing::ReadForExport read(path);
    REQUIRE(read.status.ok());
    const Report& whole_report = read.whole_report;
    const Report& sliced_report = read.sliced_report;
    const ProcessAnalysis& whole = read.whole;
    const StreamedProcess& sliced = read.sliced;
    if (path.find("unjoined") != std::string::npos) {
      CHECK(ExportFromFileRefusal(sliced).code() == absl::StatusCode::kUnimplemented);
      CHECK(WriteSqliteFromFile(sliced_report, sliced, db_path).code() == absl::StatusCode::kUnimplemented);
      continue;
    }
    INFO(ExportFromFileRefusal(sliced).ToString());
    REQUIRE(ExportFromFileRefusal(sliced).ok());
    unlink(db_path.c_str());
    testing::ProgressLog progress;
    SqliteFromFileStats stats;
    const absl::Status written = WriteSqliteFromFile(sliced_report, sliced, db_path, progress.Callback(), &stats);
    INFO(written.ToString());
    REQUIRE(written.ok());
    CHECK(progress.Ok());
    // The pass reaches its share; the indexes move the rest before the end.
    const uint64_t total = progress.calls.back().second;
    const auto share = static_cast<uint64_t>(kSqlitePassShare * static_cast<double>(total));
    size_t indexing = 0;
    for (const auto& [done, of] : progress.calls) indexing += done > share && done < total;
    CHECK(indexing >= 2);
    CHECK(progress.calls[progress.calls.size() - 2].first < total);
    // The ops were numbered as their slices settled them, but for the op
    // that starts before its call entered; each gap's call was held, but
    // for those charged to the long calls (not the long syncs: those are
    // held as marked).
    CHECK((stats.ops_sorted_after > 0) == (path.find("early op") != std::string::npos));
    CHECK((stats.gaps_found_after > 0) == (path.find("long calls") != std::string::npos));
    auto bytes = RenderSqlite(whole_report, whole);
    REQUIRE(bytes.ok());
    const Db want(*bytes);
    const Db got = Db::File(db_path);
    CHECK(got.Text("PRAGMA integrity_check") == "ok");
    const std::string schema = "SELECT type, name, sql FROM sqlite_master";
    REQUIRE(got.Rows(schema) == want.Rows(schema));
    REQUIRE(whole.timeline.ops.size() > 0);
    for (const std::string& table : want.Column("SELECT name FROM sqlite_master WHERE type = 'table'")) {
      INFO(table);
      const std::vector<std::string> a = got.Rows("SELECT * FROM " + table);
      const std::vector<std::string> b = want.Rows("SELECT * FROM " + table);
      size_t same = 0;  // (the first difference, not the whole tables)
      while (same < a.size() && same < b.size() && a[same] == b[same]) ++same;
      INFO("the first row that differs, by slices: " << (same < a.size() ? a[same] : "none")
           << "\nread whole: " << (same < b.size() ? b[same] : "none"));
      CHECK(same == b.size());
      CHECK(a.size() == b.size());
    }
    CHECK(got.Int("SELECT COUNT(*) FROM idle_gaps") == static_cast<int64_t>(whole.gaps.size()));
    if (path.find("starting together") != std::string::npos) {
      // The timeline holds the ops starting together in the file's order;
      // the ids in the columns' (stream 7 first).
      CHECK(whole.timeline.String(whole.timeline.op_info[0].name) == "late");
      CHECK(want.Text("SELECT s.value FROM device_ops o JOIN strings s ON s.id = o.name_id WHERE o.id = 0") ==
            "early");
    }
    ++compared;
  }
  CHECK(compared == static_cast<int>(traces.paths.size()) - 1);
  unlink(db_path.c_str());
  traces.Remove();
}

// Guards the degenerate case: a trace without calls or ops still exports.
TEST_CASE("sqlite export of an empty trace", "[sqlite]") {
  TraceBuilder b;
  testing::AddStandardApis(&b);
  Timeline t = testing::ReadOrDie(b);
  ProcessAnalysis a;
  auto r = AnalyzeTimeline(t, {}, &a);
  REQUIRE(r.ok());
  a.timeline = std::move(t);
  auto bytes = RenderSqlite(*r, a);
  REQUIRE(bytes.ok());
  Db db(*bytes);
  CHECK(db.Int("SELECT COUNT(*) FROM api_calls") == 0);
  CHECK(db.Int("SELECT COUNT(*) FROM idle_gaps") == 0);
  CHECK(db.Text("PRAGMA integrity_check") == "ok");
}

}  // namespace
}  // namespace stallscope::analyzer
