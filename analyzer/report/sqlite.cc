// SQLite export (see sqlite.h): the schema is created in an in-memory
// database (or, by slices, in the new file), every row is inserted with
// prepared statements inside one transaction (journal and syncs off), the
// indexes are built after the rows, and (read whole) the database is
// serialized to bytes.
#include "analyzer/report/sqlite.h"

#include <sqlite3.h>

#include <algorithm>
#include <bit>
#include <concepts>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "analyzer/analyze/stream.h"
#include "analyzer/read/trace_reader.h"
#include "analyzer/report/json.h"

namespace stallscope::analyzer {
namespace {

using trace::ApiCategory;
using trace::DeviceOpKind;

const char* CategoryName(ApiCategory c) {
  switch (c) {
    case ApiCategory::kOther: return "other";
    case ApiCategory::kLaunch: return "launch";
    case ApiCategory::kCopy: return "copy";
    case ApiCategory::kSet: return "set";
    case ApiCategory::kSync: return "sync";
    case ApiCategory::kQuery: return "query";
    case ApiCategory::kFree: return "free";
    case ApiCategory::kWait: return "wait";
    case ApiCategory::kEvent: return "event";
    case ApiCategory::kAlloc: return "alloc";
    case ApiCategory::kNccl: return "nccl";
    case ApiCategory::kResolve: return "resolve";
    case ApiCategory::kGraph: return "graph";
    case ApiCategory::kHostFunc: return "host_func";
  }
  return "other";
}

const char* OpKindName(DeviceOpKind k) {
  switch (k) {
    case DeviceOpKind::kKernel: return "kernel";
    case DeviceOpKind::kMemcpy: return "memcpy";
    case DeviceOpKind::kMemset: return "memset";
    case DeviceOpKind::kNccl: return "nccl";
  }
  return "unknown";
}

const char* ClassName(CallClass c) {
  switch (c) {
    case CallClass::kNonBlocking: return "nonblocking";
    case CallClass::kSync: return "sync";
    case CallClass::kNccl: return "nccl";
  }
  return "nonblocking";
}

// " idle_sync_ns INTEGER, idle_host_wait_ns INTEGER, ..." for a CREATE TABLE.
std::string CauseColumns() {
  std::string s;
  for (int c = 0; c < kNumCauses; ++c) {
    absl::StrAppend(&s, "  idle_", CauseName(CauseAt(c)), "_ns INTEGER NOT NULL,\n");
  }
  return s;
}

std::string Schema() {
  const std::string causes = CauseColumns();
  return absl::StrCat(
      "CREATE TABLE meta (key TEXT PRIMARY KEY, value);\n"
      "CREATE TABLE processes (\n"
      "  id INTEGER PRIMARY KEY, file TEXT NOT NULL, pid INTEGER NOT NULL, host TEXT NOT NULL,\n"
      "  analyzed INTEGER NOT NULL, steps INTEGER NOT NULL, device_ops INTEGER NOT NULL,\n"
      "  wall_ns INTEGER NOT NULL, gpu_busy_ns INTEGER NOT NULL, gpu_idle_ns INTEGER NOT NULL,\n",
      causes,
      "  busy_compute_ns INTEGER NOT NULL, busy_copy_ns INTEGER NOT NULL,\n"
      "  busy_comm_ns INTEGER NOT NULL, launches INTEGER NOT NULL, syncs INTEGER NOT NULL);\n"
      "CREATE TABLE threads (\n"
      "  tid INTEGER PRIMARY KEY, name TEXT, calls INTEGER NOT NULL, launches INTEGER NOT NULL,\n"
      "  main INTEGER NOT NULL);\n"
      "CREATE TABLE apis (\n"
      "  id INTEGER PRIMARY KEY, name TEXT NOT NULL, category TEXT NOT NULL,\n"
      "  flags INTEGER NOT NULL);\n"
      "CREATE TABLE strings (id INTEGER PRIMARY KEY, value TEXT NOT NULL);\n"
      "CREATE TABLE api_calls (\n"
      "  id INTEGER PRIMARY KEY, api_id INTEGER NOT NULL REFERENCES apis(id),\n"
      "  enter_ns INTEGER NOT NULL, exit_ns INTEGER NOT NULL, tid INTEGER NOT NULL,\n"
      "  stream INTEGER NOT NULL, bytes INTEGER NOT NULL, correlation INTEGER NOT NULL,\n"
      "  class TEXT NOT NULL, step INTEGER REFERENCES steps(step),\n"
      "  hotspot_id INTEGER REFERENCES hotspots(id), idle_caused_ns INTEGER NOT NULL,\n"
      "  result INTEGER NOT NULL, op_count INTEGER NOT NULL);\n"
      "CREATE TABLE device_ops (\n"
      "  id INTEGER PRIMARY KEY, kind TEXT NOT NULL, name_id INTEGER REFERENCES strings(id),\n"
      "  start_ns INTEGER NOT NULL, end_ns INTEGER NOT NULL, stream INTEGER NOT NULL,\n"
      "  device INTEGER NOT NULL, bytes INTEGER NOT NULL, copy_kind INTEGER NOT NULL,\n"
      "  call_id INTEGER REFERENCES api_calls(id), step INTEGER REFERENCES steps(step));\n"
      "CREATE TABLE steps (\n"
      "  step INTEGER PRIMARY KEY, device INTEGER NOT NULL, start_ns INTEGER NOT NULL,\n"
      "  end_ns INTEGER NOT NULL, host_start_ns INTEGER NOT NULL, host_end_ns INTEGER NOT NULL,\n"
      "  gpu_busy_ns INTEGER NOT NULL, gpu_idle_ns INTEGER NOT NULL,\n",
      causes,
      "  busy_compute_ns INTEGER NOT NULL, busy_copy_ns INTEGER NOT NULL,\n"
      "  busy_comm_ns INTEGER NOT NULL, sync_count INTEGER NOT NULL,\n"
      "  launches INTEGER NOT NULL);\n"
      "CREATE TABLE idle_gaps (\n"
      "  id INTEGER PRIMARY KEY, start_ns INTEGER NOT NULL, end_ns INTEGER NOT NULL,\n"
      "  cause TEXT NOT NULL, step INTEGER NOT NULL REFERENCES steps(step),\n"
      "  call_id INTEGER REFERENCES api_calls(id));\n"
      "CREATE TABLE hotspots (\n"
      "  id INTEGER PRIMARY KEY, api TEXT NOT NULL, kind TEXT NOT NULL, file TEXT NOT NULL,\n"
      "  line INTEGER NOT NULL, function TEXT NOT NULL, count INTEGER NOT NULL,\n"
      "  blocked_ns INTEGER NOT NULL, idle_caused_ns INTEGER NOT NULL,\n"
      "  fingerprint TEXT NOT NULL, suggestion TEXT NOT NULL, sites_lost INTEGER NOT NULL);\n"
      "CREATE TABLE stacks (\n"
      "  hotspot_id INTEGER NOT NULL REFERENCES hotspots(id), depth INTEGER NOT NULL,\n"
      "  function TEXT NOT NULL, file TEXT NOT NULL, line INTEGER NOT NULL,\n"
      "  module TEXT NOT NULL, PRIMARY KEY (hotspot_id, depth)) WITHOUT ROWID;\n"
      "CREATE TABLE questions (\n"
      "  id TEXT PRIMARY KEY, answer TEXT NOT NULL, evidence TEXT NOT NULL);\n"
      "CREATE TABLE diagnostics (\n"
      "  name TEXT NOT NULL, severity TEXT NOT NULL, count INTEGER NOT NULL,\n"
      "  message TEXT NOT NULL);\n");
}

// Built after the rows (one sort each instead of a b-tree insert per row).
struct IndexSql {
  std::string_view table;
  const char* sql;
};
constexpr IndexSql kCallIndexes[] = {
    {"api_calls", "CREATE INDEX api_calls_by_time ON api_calls(enter_ns);"},
    {"api_calls", "CREATE INDEX api_calls_by_thread ON api_calls(tid, enter_ns);"},
    {"api_calls", "CREATE INDEX api_calls_by_step ON api_calls(step);"},
    {"api_calls", "CREATE INDEX api_calls_by_hotspot ON api_calls(hotspot_id) WHERE hotspot_id IS NOT NULL;"},
};
constexpr IndexSql kOtherIndexes[] = {
    {"device_ops", "CREATE INDEX device_ops_by_time ON device_ops(start_ns);"},
    {"device_ops", "CREATE INDEX device_ops_by_step ON device_ops(step);"},
    {"device_ops", "CREATE INDEX device_ops_by_call ON device_ops(call_id);"},
    {"idle_gaps", "CREATE INDEX idle_gaps_by_step ON idle_gaps(step, cause);"},
    {"idle_gaps", "CREATE INDEX idle_gaps_by_cause ON idle_gaps(cause);"},
};

absl::Status SqliteError(sqlite3* db, std::string_view what) {
  return absl::InternalError(absl::StrFormat("sqlite export: %s: %s", what, sqlite3_errmsg(db)));
}

// One prepared statement, reused for every row.
class Statement {
 public:
  Statement(sqlite3* db, const char* sql) : db_(db) {
    if (sqlite3_prepare_v3(db, sql, -1, SQLITE_PREPARE_PERSISTENT, &stmt_, nullptr) != SQLITE_OK) {
      status_ = SqliteError(db, sql);
    }
  }
  ~Statement() { sqlite3_finalize(stmt_); }
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  const absl::Status& status() const { return status_; }

  // Binds the values to ?1, ?2 ... and runs the statement.
  template <typename... Values>
  absl::Status Row(const Values&... values) {
    if (!status_.ok()) return status_;
    int i = 0;
    (Bind(++i, values), ...);
    const int rc = sqlite3_step(stmt_);
    sqlite3_reset(stmt_);
    if (rc != SQLITE_DONE) return SqliteError(db_, "insert");
    return absl::OkStatus();
  }

 private:
  // Unsigned 64-bit values (stream handles, correlation ids, byte counts)
  // are stored as their two's-complement int64.
  template <std::integral T>
  void Bind(int i, T v) {
    sqlite3_bind_int64(stmt_, i, static_cast<sqlite3_int64>(v));
  }
  void Bind(int i, std::string_view s) {
    sqlite3_bind_text64(stmt_, i, s.data(), s.size(), SQLITE_STATIC, SQLITE_UTF8);
  }
  void Bind(int i, const std::string& s) { Bind(i, std::string_view(s)); }
  void Bind(int i, const char* s) { Bind(i, std::string_view(s)); }
  template <typename T>
  void Bind(int i, const std::optional<T>& v) {
    if (v.has_value()) {
      Bind(i, *v);
    } else {
      sqlite3_bind_null(stmt_, i);
    }
  }

  sqlite3* db_;
  sqlite3_stmt* stmt_ = nullptr;
  absl::Status status_;
};

absl::Status Exec(sqlite3* db, const std::string& sql) {
  char* err = nullptr;
  if (sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
    absl::Status st = absl::InternalError(
        absl::StrFormat("sqlite export: %s", err != nullptr ? err : "exec failed"));
    sqlite3_free(err);
    return st;
  }
  return absl::OkStatus();
}

#define RETURN_IF_ERROR(expr)                   \
  do {                                          \
    if (absl::Status _st = (expr); !_st.ok()) { \
      return _st;                               \
    }                                           \
  } while (0)

// The step whose host range a call entered in, as the report counts
// launches and synchronizing calls (attribution.cc); nullopt: none.
class HostStepFinder {
 public:
  explicit HostStepFinder(const StepPlan& plan) : plan_(plan) {}
  std::optional<int> operator()(int64_t enter_ns) const {
    const auto& s = plan_.steps;
    auto it = std::upper_bound(s.begin(), s.end(), enter_ns,
                               [](int64_t v, const StepSpan& x) { return v < x.host_start_ns; });
    if (it == s.begin()) return std::nullopt;
    --it;
    if (enter_ns >= it->host_end_ns && plan_.source != "none") return std::nullopt;
    return static_cast<int>(it - s.begin());
  }

 private:
  const StepPlan& plan_;
};

// The step whose device span holds an op's start (analyzed device only).
std::optional<int> DeviceStep(const StepPlan& plan, const DeviceOp& op) {
  if (op.device != plan.device) return std::nullopt;
  const auto& s = plan.steps;
  auto it = std::upper_bound(s.begin(), s.end(), op.start_ns,
                             [](int64_t v, const StepSpan& x) { return v < x.start_ns; });
  if (it == s.begin()) return std::nullopt;
  --it;
  if (op.start_ns >= it->end_ns) return std::nullopt;
  return static_cast<int>(it - s.begin());
}

std::optional<int64_t> Index(int64_t i) { return i < 0 ? std::nullopt : std::optional<int64_t>(i); }

// `t`: the analyzed timeline, or (by slices) the chunks every slice reads.
absl::Status InsertMeta(sqlite3* db, const Report& r, const std::string& path, const Timeline& t,
                        const StepPlan& plan) {
  Statement st(db, "INSERT INTO meta VALUES (?1, ?2)");
  RETURN_IF_ERROR(st.Row("schema", kSqliteSchema));
  RETURN_IF_ERROR(st.Row("schema_version", kSqliteSchemaVersion));
  RETURN_IF_ERROR(st.Row("report_schema", kReportSchema));
  RETURN_IF_ERROR(st.Row("source_trace", path));
  RETURN_IF_ERROR(st.Row("step_source", r.step_source));
  RETURN_IF_ERROR(st.Row("analyzed_device", plan.device));
  RETURN_IF_ERROR(st.Row("main_tid", plan.main_tid));
  RETURN_IF_ERROR(st.Row("pid", t.header.pid));
  RETURN_IF_ERROR(st.Row("host", t.host));
  RETURN_IF_ERROR(st.Row("ended_cleanly", t.ended_cleanly ? 1 : 0));
  RETURN_IF_ERROR(st.Row("time_unit", "ns (CLOCK_MONOTONIC)"));
  return absl::OkStatus();
}

absl::Status InsertProcesses(sqlite3* db, const Report& r) {
  std::string sql = "INSERT INTO processes VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10";
  for (int c = 0; c < kNumCauses; ++c) absl::StrAppend(&sql, ", ?", 11 + c);
  absl::StrAppendFormat(&sql, ", ?%d, ?%d, ?%d, ?%d, ?%d)", 11 + kNumCauses, 12 + kNumCauses,
                        13 + kNumCauses, 14 + kNumCauses, 15 + kNumCauses);
  Statement st(db, sql.c_str());
  int64_t id = 0;
  for (const ProcessSummary& p : r.processes) {
    const Totals& x = p.totals;
    const CauseNs& c = x.idle_by_cause;
    static_assert(kNumCauses == 8);
    RETURN_IF_ERROR(st.Row(id++, p.file, p.pid, p.host, p.analyzed ? 1 : 0, p.steps, p.device_ops,
                           x.wall_ns, x.gpu_busy_ns, x.gpu_idle_ns, c[0], c[1], c[2], c[3], c[4],
                           c[5], c[6], c[7], x.busy_by_kind.compute, x.busy_by_kind.copy,
                           x.busy_by_kind.comm, x.launches, x.syncs));
  }
  return absl::OkStatus();
}

// Every thread that made a call (`counts`: each one's calls and launches)
// or has a name (`t`'s), and `t`'s API table.
absl::Status InsertThreadsAndApis(sqlite3* db, const Timeline& t, const std::vector<ThreadCallCount>& counts,
                                  uint32_t main_tid) {
  absl::flat_hash_map<uint32_t, ThreadCallCount> threads;
  for (const auto& [tid, name] : t.thread_names) threads[tid].tid = tid;
  for (const ThreadCallCount& c : counts) {
    ThreadCallCount& n = threads[c.tid];
    n.tid = c.tid;
    n.calls += c.calls;
    n.launches += c.launches;
  }
  std::vector<uint32_t> tids;
  for (const auto& [tid, n] : threads) tids.push_back(tid);
  std::sort(tids.begin(), tids.end());
  Statement th(db, "INSERT INTO threads VALUES (?1, ?2, ?3, ?4, ?5)");
  for (uint32_t tid : tids) {
    auto name = t.thread_names.find(tid);
    const ThreadCallCount& n = threads[tid];
    RETURN_IF_ERROR(th.Row(tid,
                           name == t.thread_names.end()
                               ? std::optional<std::string_view>()
                               : std::optional<std::string_view>(name->second),
                           n.calls, n.launches, tid == main_tid ? 1 : 0));
  }
  Statement api(db, "INSERT INTO apis VALUES (?1, ?2, ?3, ?4)");
  for (size_t i = 0; i < t.apis.size(); ++i) {
    const ApiInfo& info = t.apis[i];
    RETURN_IF_ERROR(api.Row(i, info.name, CategoryName(info.category), info.flags));
  }
  return absl::OkStatus();
}

constexpr const char* kInsertCall =
    "INSERT INTO api_calls VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)";

// The row of call `i` of `t` as call `id`: its class, hotspot (an index
// into the report's, -1 none) and rule-1 idle as the analysis gave them.
absl::Status InsertCall(Statement* st, int64_t id, const Timeline& t, size_t i, CallClass cls, int64_t hotspot,
                        int64_t idle, const HostStepFinder& step_of, size_t hotspots) {
  const ApiCall& c = t.calls[i];
  const CallInfo& info = t.call_info[i];
  return st->Row(id, c.api, c.enter_ns, c.exit_ns, c.tid, info.stream, info.bytes, info.correlation, ClassName(cls),
                 step_of(c.enter_ns), hotspot < static_cast<int64_t>(hotspots) ? Index(hotspot) : std::nullopt,
                 idle, info.result, info.op_count);
}

absl::Status InsertCalls(sqlite3* db, const Report& r, const ProcessAnalysis& a) {
  const Timeline& t = a.timeline;
  Statement st(db, kInsertCall);
  const HostStepFinder step_of(a.plan);
  for (size_t i = 0; i < t.calls.size(); ++i) {
    const CallClass cls = i < a.classes.size() ? a.classes[i] : CallClass::kNonBlocking;
    const int64_t hotspot = i < a.hotspot_of_call.size() ? a.hotspot_of_call[i] : -1;
    RETURN_IF_ERROR(InsertCall(&st, static_cast<int64_t>(i), t, i, cls, hotspot, a.idle_caused.Get(i), step_of,
                               r.hotspots.size()));
  }
  return absl::OkStatus();
}

// A device_ops row but its id. The ids follow the rows in kOpOrder: start
// first, then the other columns, so that two readings of a trace (whole,
// or by slices: the ops of each slice of calls, then sorted) number its
// ops alike, whatever order ops starting together were recorded in.
struct OpRow {
  int64_t start_ns = 0, end_ns = 0;
  int64_t stream = 0;  // as stored (two's complement)
  int64_t device = 0;
  int64_t bytes = 0;  // as stored
  int64_t copy_kind = 0;
  std::optional<int64_t> call;  // api_calls.id
  std::optional<int64_t> name;  // strings.id
  std::string_view kind;
  std::optional<int> step;  // follows from start_ns

  // SQLite's ascending order of the same columns (NULL first, integers
  // signed, text by its bytes).
  auto Tie() const { return std::tie(start_ns, end_ns, stream, device, bytes, copy_kind, call, name, kind); }
};
constexpr const char* kOpOrder = "start_ns, end_ns, stream, device, bytes, copy_kind, call_id, name_id, kind";

// Op `i` of `t`, submitted by call `call`; `names` gathers the names used.
OpRow OpRowOf(const Timeline& t, size_t i, std::optional<int64_t> call, const StepPlan& plan,
              absl::flat_hash_set<uint32_t>* names) {
  const DeviceOp& op = t.ops[i];
  const OpInfo& info = t.op_info[i];
  OpRow row;
  row.start_ns = op.start_ns;
  row.end_ns = op.end_ns;
  row.stream = static_cast<int64_t>(info.stream);
  row.device = op.device;
  row.bytes = static_cast<int64_t>(info.bytes);
  row.copy_kind = op.copy_kind;
  row.call = call;
  if (info.name != 0 && t.strings.contains(info.name)) {
    row.name = info.name;
    names->insert(info.name);
  }
  row.kind = OpKindName(op.kind);
  row.step = DeviceStep(plan, op);
  return row;
}

constexpr const char* kOpColumns = "kind, name_id, start_ns, end_ns, stream, device, bytes, copy_kind, call_id, step";
constexpr const char* kInsertOp = "INSERT INTO device_ops VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)";

absl::Status InsertOp(Statement* st, std::optional<int64_t> id, const OpRow& o) {
  if (id.has_value()) {
    return st->Row(*id, o.kind, o.name, o.start_ns, o.end_ns, o.stream, o.device, o.bytes, o.copy_kind, o.call,
                   o.step);
  }
  return st->Row(o.kind, o.name, o.start_ns, o.end_ns, o.stream, o.device, o.bytes, o.copy_kind, o.call, o.step);
}

absl::Status InsertStrings(sqlite3* db, const Timeline& t, const absl::flat_hash_set<uint32_t>& names) {
  std::vector<uint32_t> ids(names.begin(), names.end());
  std::sort(ids.begin(), ids.end());
  Statement s(db, "INSERT INTO strings VALUES (?1, ?2)");
  for (uint32_t id : ids) RETURN_IF_ERROR(s.Row(id, t.String(id)));
  return absl::OkStatus();
}

absl::Status InsertOps(sqlite3* db, const ProcessAnalysis& a) {
  const Timeline& t = a.timeline;
  Statement st(db, kInsertOp);
  absl::flat_hash_set<uint32_t> names;
  // The ops are in start order; those starting together take kOpOrder.
  std::vector<OpRow> together;
  int64_t id = 0;
  for (size_t i = 0; i < t.ops.size();) {
    size_t j = i + 1;
    while (j < t.ops.size() && t.ops[j].start_ns == t.ops[i].start_ns) ++j;
    together.clear();
    for (size_t k = i; k < j; ++k) together.push_back(OpRowOf(t, k, Index(t.ops[k].call), a.plan, &names));
    if (together.size() > 1) {
      std::sort(together.begin(), together.end(), [](const OpRow& x, const OpRow& y) { return x.Tie() < y.Tie(); });
    }
    for (const OpRow& o : together) RETURN_IF_ERROR(InsertOp(&st, id++, o));
    i = j;
  }
  return InsertStrings(db, t, names);
}

absl::Status InsertSteps(sqlite3* db, const Report& r) {
  std::string sql = "INSERT INTO steps VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8";
  for (int i = 9; i < 9 + kNumCauses + 5; ++i) absl::StrAppend(&sql, ", ?", i);
  sql += ")";
  Statement st(db, sql.c_str());
  for (const StepStats& s : r.steps) {
    const CauseNs& c = s.idle_by_cause;
    static_assert(kNumCauses == 8);
    RETURN_IF_ERROR(st.Row(s.index, s.device, s.start_ns, s.end_ns, s.host_start_ns, s.host_end_ns,
                           s.gpu_busy_ns, s.gpu_idle_ns, c[0], c[1], c[2], c[3], c[4], c[5], c[6],
                           c[7],
                           s.busy_by_kind.compute, s.busy_by_kind.copy, s.busy_by_kind.comm,
                           s.sync_count, s.launches));
  }
  return absl::OkStatus();
}

constexpr const char* kInsertGap = "INSERT INTO idle_gaps VALUES (?1, ?2, ?3, ?4, ?5, ?6)";

absl::Status InsertGap(Statement* st, int64_t id, const IdleGap& g, std::optional<int64_t> call) {
  return st->Row(id, g.start_ns, g.end_ns, CauseName(g.cause), g.step, call);
}

absl::Status InsertGaps(sqlite3* db, const ProcessAnalysis& a) {
  Statement st(db, kInsertGap);
  for (size_t i = 0; i < a.gaps.size(); ++i) {
    const IdleGap& g = a.gaps[i];
    RETURN_IF_ERROR(InsertGap(&st, static_cast<int64_t>(i), g, Index(g.call)));
  }
  return absl::OkStatus();
}

absl::Status InsertHotspots(sqlite3* db, const Report& r) {
  Statement h(db, "INSERT INTO hotspots VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)");
  Statement f(db, "INSERT INTO stacks VALUES (?1, ?2, ?3, ?4, ?5, ?6)");
  for (size_t i = 0; i < r.hotspots.size(); ++i) {
    const Hotspot& x = r.hotspots[i];
    RETURN_IF_ERROR(h.Row(i, x.api, x.explicit_sync ? "explicit" : "implicit", x.site.file,
                          x.site.line, x.site.function, x.count, x.blocked_ns, x.idle_caused_ns,
                          x.fingerprint, x.suggestion, x.sites_lost));
    for (size_t d = 0; d < x.stack.size(); ++d) {
      const Frame& fr = x.stack[d];
      RETURN_IF_ERROR(f.Row(i, d, fr.function, fr.file, fr.line, fr.module));
    }
  }
  return absl::OkStatus();
}

absl::Status InsertQuestionsAndDiagnostics(sqlite3* db, const Report& r) {
  Statement q(db, "INSERT INTO questions VALUES (?1, ?2, ?3)");
  for (const Question& x : r.questions) RETURN_IF_ERROR(q.Row(x.id, x.answer, x.evidence));
  Statement d(db, "INSERT INTO diagnostics VALUES (?1, ?2, ?3, ?4)");
  for (const Diagnostic& x : r.diagnostics) {
    RETURN_IF_ERROR(d.Row(DiagName(x.id), SeverityName(DiagSeverity(x.id)), x.count,
                          x.message.empty() ? std::string(DiagDescription(x.id)) : x.message));
  }
  return absl::OkStatus();
}

// The page size, the journal and syncs off (nothing is on disk until the
// end, or the file is new), one transaction, the tables.
absl::Status Begin(sqlite3* db, std::string_view more_pragmas) {
  // 64 KiB pages: fewer page allocations and b-tree levels for tables of
  // millions of rows (about 5% faster and 25% less peak memory than 4 KiB on
  // the 35,000-step benchmark trace).
  RETURN_IF_ERROR(Exec(db, absl::StrCat("PRAGMA page_size=65536; PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF; "
                                        "PRAGMA locking_mode=EXCLUSIVE; ",
                                        std::string(more_pragmas))));
  RETURN_IF_ERROR(Exec(db, "BEGIN"));
  return Exec(db, Schema());
}

// Each index of `indexes` in turn; `built` (optional) told its table after.
absl::Status BuildIndexes(sqlite3* db, std::span<const IndexSql> indexes,
                          const std::function<void(std::string_view table)>& built = nullptr) {
  for (const IndexSql& index : indexes) {
    RETURN_IF_ERROR(Exec(db, index.sql));
    if (built) built(index.table);
  }
  return absl::OkStatus();
}

absl::Status Fill(sqlite3* db, const Report& r, const ProcessAnalysis& a) {
  const Timeline& t = a.timeline;
  RETURN_IF_ERROR(Begin(db, "PRAGMA temp_store=MEMORY;"));
  RETURN_IF_ERROR(InsertMeta(db, r, t.path, t, a.plan));
  RETURN_IF_ERROR(InsertProcesses(db, r));
  RETURN_IF_ERROR(InsertThreadsAndApis(db, t, t.calls_per_thread, a.plan.main_tid));
  RETURN_IF_ERROR(InsertSteps(db, r));
  RETURN_IF_ERROR(InsertHotspots(db, r));
  RETURN_IF_ERROR(InsertCalls(db, r, a));
  RETURN_IF_ERROR(InsertOps(db, a));
  RETURN_IF_ERROR(InsertGaps(db, a));
  RETURN_IF_ERROR(InsertQuestionsAndDiagnostics(db, r));
  RETURN_IF_ERROR(BuildIndexes(db, kCallIndexes));
  RETURN_IF_ERROR(BuildIndexes(db, kOtherIndexes));
  return Exec(db, "COMMIT");
}

// The class the whole reading's analysis gives a call (ClassifyCalls), from
// its mark: kNccl is the NCCL calls' whatever else.
CallClass ClassOf(const Timeline& t, const ApiCall& c, const CallMarkView& m) {
  if (m.sync) return CallClass::kSync;
  return t.Api(c.api).category == ApiCategory::kNccl ? CallClass::kNccl : CallClass::kNonBlocking;
}

// The ops of the slices of calls into device_ops in kOpOrder, numbered as
// they go. An op starts after its call entered: once a slice of the calls
// entering in [from, to) is read, no op to come starts before `to`, and the
// ops before it are final (Settle), so that what waits follows the work
// queued on the device, not the trace. An op that starts before the last
// such time (its call entered after it, as two clocks apart could make it
// seem) ends that: every op goes to a temporary table instead, which SQLite
// sorts once all are read (Finish).
class OpSorter {
 public:
  explicit OpSorter(sqlite3* db) : db_(db), row_(db, kInsertOp) {}

  absl::Status Add(const OpRow& row) {
    if (spill_ == nullptr && row.start_ns < settled_) RETURN_IF_ERROR(Spill());
    if (spill_ != nullptr) {
      ++spilled_;
      return InsertOp(spill_.get(), std::nullopt, row);
    }
    pending_.push_back(row);
    return absl::OkStatus();
  }
  // No op to come starts before `to`.
  absl::Status Settle(int64_t to) {
    if (spill_ != nullptr) return absl::OkStatus();
    std::sort(pending_.begin(), pending_.end(), [](const OpRow& x, const OpRow& y) { return x.Tie() < y.Tie(); });
    size_t n = 0;
    for (; n < pending_.size() && pending_[n].start_ns < to; ++n) {
      RETURN_IF_ERROR(InsertOp(&row_, next_id_++, pending_[n]));
    }
    pending_.erase(pending_.begin(), pending_.begin() + static_cast<std::ptrdiff_t>(n));
    settled_ = std::max(settled_, to);
    return absl::OkStatus();
  }
  absl::Status Finish(int64_t* sorted_after) {
    if (spill_ == nullptr) return Settle(std::numeric_limits<int64_t>::max());
    spill_.reset();
    *sorted_after = spilled_;
    return Exec(db_, absl::StrCat("INSERT INTO device_ops SELECT row_number() OVER (ORDER BY ", kOpOrder, ") - 1, ",
                                  kOpColumns, " FROM temp.ops_in; DROP TABLE temp.ops_in;"));
  }

 private:
  absl::Status Spill() {
    RETURN_IF_ERROR(Exec(db_, absl::StrCat("CREATE TEMP TABLE ops_in (", kOpColumns,
                                           "); INSERT INTO temp.ops_in SELECT ", kOpColumns,
                                           " FROM device_ops; DELETE FROM device_ops;")));
    spill_ = std::make_unique<Statement>(db_,
                                         "INSERT INTO temp.ops_in VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)");
    for (const OpRow& o : pending_) RETURN_IF_ERROR(InsertOp(spill_.get(), std::nullopt, o));
    spilled_ = next_id_ + static_cast<int64_t>(pending_.size());
    pending_.clear();
    return absl::OkStatus();
  }

  sqlite3* db_;
  Statement row_;
  std::unique_ptr<Statement> spill_;
  std::vector<OpRow> pending_;
  int64_t settled_ = std::numeric_limits<int64_t>::min();
  int64_t next_id_ = 0;
  int64_t spilled_ = 0;  // ops sent to the temporary table
};

// The idle gaps into idle_gaps in the analysis' order, each naming its call
// by id, written as the slices of calls are: a gap's call entered by the
// gap's end, so once the calls entering before `to` are numbered, the gaps
// ending before `to` can name theirs (Upto). Held: the keys and ids of the
// last two slices' calls, and of the marked calls (synchronizing, in a
// hotspot, charged idle: a rule-1 gap's call may have entered long
// before). A gap whose call is none of them is written without it, noted
// in a temporary table, and given its call, found by key among the rows,
// at the end (Finish, once api_calls is indexed by thread and enter time).
class GapWriter {
 public:
  GapWriter(sqlite3* db, GapSpill* spill)
      : db_(db), spill_(spill), row_(db, kInsertGap) {}

  absl::Status Start() {
    RETURN_IF_ERROR(Exec(db_, "CREATE TEMP TABLE gap_calls (id INTEGER PRIMARY KEY, tid, api, enter_ns, exit_ns);"));
    miss_ = std::make_unique<Statement>(db_, "INSERT INTO temp.gap_calls VALUES (?1, ?2, ?3, ?4, ?5)");
    RETURN_IF_ERROR(spill_->Rewind());
    next_ = spill_->Next();
    return spill_->status();
  }
  // A new slice of calls: the one before the last is let go.
  void NewSlice() {
    std::swap(before_, last_);
    last_.clear();
  }
  void Call(const CallKey& key, int64_t id, bool marked) {
    last_.try_emplace(key, id);
    if (marked) marked_.try_emplace(key, id);
  }
  // The gaps ending before `to`.
  absl::Status Upto(int64_t to) {
    for (; next_ != nullptr && next_->gap.end_ns < to; next_ = spill_->Next()) {
      std::optional<int64_t> call;
      if (next_->has_call) {
        call = Find(next_->call);
        if (!call.has_value()) {
          ++misses_;
          const CallKey& k = next_->call;
          RETURN_IF_ERROR(miss_->Row(id_, k.tid, k.api, k.enter_ns, k.exit_ns));
        }
      }
      RETURN_IF_ERROR(InsertGap(&row_, id_++, next_->gap, call));
    }
    return spill_->status();
  }
  // The rest of the gaps, and the calls of those written without theirs.
  absl::Status Finish(int64_t* misses) {
    RETURN_IF_ERROR(Upto(std::numeric_limits<int64_t>::max()));
    miss_.reset();
    *misses = misses_;
    return Exec(db_,
                "UPDATE idle_gaps SET call_id = (SELECT MIN(c.id) FROM temp.gap_calls g JOIN api_calls c ON "
                "c.tid = g.tid AND c.enter_ns = g.enter_ns AND c.api_id = g.api AND c.exit_ns = g.exit_ns "
                "WHERE g.id = idle_gaps.id) WHERE id IN (SELECT id FROM temp.gap_calls); DROP TABLE temp.gap_calls;");
  }

 private:
  std::optional<int64_t> Find(const CallKey& key) const {
    for (const auto* m : {&last_, &before_, &marked_}) {
      if (auto it = m->find(key); it != m->end()) return it->second;
    }
    return std::nullopt;
  }

  sqlite3* db_;
  GapSpill* spill_;
  Statement row_;
  std::unique_ptr<Statement> miss_;
  const GapSpill::Gap* next_ = nullptr;
  int64_t id_ = 0;
  int64_t misses_ = 0;
  absl::flat_hash_map<CallKey, int64_t> last_, before_, marked_;
};

// The progress of a database written from the file by slices (see
// WriteSqliteFromFile): the pass's slices, then the indexes by their
// tables' rows, in millionths of the whole; never the whole (which ends
// the display) before Done.
class WriteProgress {
 public:
  explicit WriteProgress(const std::function<void(uint64_t, uint64_t)>& out) : out_(out) {}
  std::function<void(uint64_t, uint64_t)> Pass() {
    if (!out_) return nullptr;
    return [this](uint64_t done, uint64_t total) {
      Show(kSqlitePassShare * static_cast<double>(done) / static_cast<double>(std::max<uint64_t>(total, 1)));
    };
  }
  // The rows of each indexed table, before the first index.
  void Rows(int64_t calls, int64_t ops, int64_t gaps) {
    rows_ = {{"api_calls", calls}, {"device_ops", ops}, {"idle_gaps", gaps}};
    for (const auto indexes : {std::span<const IndexSql>(kCallIndexes), std::span<const IndexSql>(kOtherIndexes)}) {
      for (const IndexSql& index : indexes) all_ += RowsOf(index.table);
    }
  }
  // BuildIndexes, each index moving the display by its table's rows.
  absl::Status Build(sqlite3* db, std::span<const IndexSql> indexes) {
    return BuildIndexes(db, indexes, [this](std::string_view table) {
      indexed_ += RowsOf(table);
      Show(kSqlitePassShare + (1 - kSqlitePassShare) * static_cast<double>(indexed_) /
                                  static_cast<double>(std::max<int64_t>(all_, 1)));
    });
  }
  void Done() {
    if (out_) out_(kWhole, kWhole);
  }

 private:
  int64_t RowsOf(std::string_view table) const {
    for (const auto& [name, n] : rows_) {
      if (name == table) return n;
    }
    return 0;
  }
  void Show(double fraction) {
    if (!out_) return;
    shown_ = std::max(shown_, std::min(kWhole - 1, static_cast<uint64_t>(fraction * static_cast<double>(kWhole))));
    out_(shown_, kWhole);
  }
  static constexpr uint64_t kWhole = 1'000'000;
  const std::function<void(uint64_t, uint64_t)>& out_;
  uint64_t shown_ = 0;
  std::vector<std::pair<std::string_view, int64_t>> rows_;
  int64_t all_ = 0, indexed_ = 0;
};

// The timeline's rows by slices of the file: each slice's calls numbered
// on from the slices before (their order is the whole timeline's: by
// enter, ties in file order, and a slice holds every call entering in its
// time range), with their ops, which take their ids in kOpOrder
// (OpSorter), and the idle gaps (GapWriter).
absl::Status FillFromFile(sqlite3* db, const Report& r, const StreamedProcess& process,
                          const std::function<void(uint64_t, uint64_t)>& progress, SqliteFromFileStats* stats) {
  const StreamedAnalysis& s = process.analysis;
  const Timeline& every = s.first_slice;  // what every slice reads
  // The sorts (the ops', the indexes') in temporary files, in 64 MiB of
  // memory at most.
  RETURN_IF_ERROR(Begin(db, "PRAGMA temp_store=FILE; PRAGMA cache_size=-65536;"));
  RETURN_IF_ERROR(InsertMeta(db, r, process.path, every, process.plan));
  RETURN_IF_ERROR(InsertProcesses(db, r));
  RETURN_IF_ERROR(InsertThreadsAndApis(db, every, process.index.calls_per_thread, process.plan.main_tid));
  RETURN_IF_ERROR(InsertSteps(db, r));
  RETURN_IF_ERROR(InsertHotspots(db, r));
  if (process.gaps == nullptr) return absl::InternalError("sqlite export: the idle gaps were not kept");
  GapWriter gaps(db, process.gaps.get());
  RETURN_IF_ERROR(gaps.Start());
  WriteProgress bar(progress);
  int64_t call_rows = 0, op_rows = 0;
  {
    Statement call_row(db, kInsertCall);
    OpSorter ops(db);
    const HostStepFinder step_of(process.plan);
    const CallMarks marks(s);
    absl::flat_hash_set<uint32_t> names;
    int64_t& first_id = call_rows;  // the id of the slice's first call
    auto reader = SliceReader::OpenFile(process.path, process.index);
    if (!reader.ok()) return reader.status();
    RETURN_IF_ERROR(ForEachCallSlice(
        &*reader, process.index, StreamOptions{}.chunks_per_slice, [&](const Timeline& t, int64_t from, int64_t to) {
          const auto [i0, i1] = EnteringIn(t.calls, from, to);
          gaps.NewSlice();
          for (size_t i = i0; i < i1; ++i) {
            const CallKey key = CallKey::Of(t.calls[i]);
            const CallMarkView m = marks.Of(key);
            const int64_t id = first_id + static_cast<int64_t>(i - i0);
            RETURN_IF_ERROR(InsertCall(&call_row, id, t, i, ClassOf(t, t.calls[i], m), m.hotspot, m.idle, step_of,
                                       r.hotspots.size()));
            gaps.Call(key, id, m.sync || m.hotspot >= 0 || m.idle != 0);
          }
          for (size_t i = 0; i < t.ops.size(); ++i) {
            if (!SubmittedBy(t.ops[i], i0, i1)) continue;
            const int64_t call = first_id + (t.ops[i].call - static_cast<int64_t>(i0));
            RETURN_IF_ERROR(ops.Add(OpRowOf(t, i, call, process.plan, &names)));
            ++op_rows;
          }
          first_id += static_cast<int64_t>(i1 - i0);
          RETURN_IF_ERROR(gaps.Upto(to));
          return ops.Settle(to);
        },
        bar.Pass(), process.adjust));
    RETURN_IF_ERROR(ops.Finish(&stats->ops_sorted_after));
    RETURN_IF_ERROR(InsertStrings(db, every, names));
  }
  // The calls' indexes first: a gap written without its call finds it by
  // its thread and enter time.
  bar.Rows(call_rows, op_rows, static_cast<int64_t>(process.gaps->size()));
  RETURN_IF_ERROR(bar.Build(db, kCallIndexes));
  RETURN_IF_ERROR(gaps.Finish(&stats->gaps_found_after));
  RETURN_IF_ERROR(InsertQuestionsAndDiagnostics(db, r));
  RETURN_IF_ERROR(bar.Build(db, kOtherIndexes));
  RETURN_IF_ERROR(Exec(db, "COMMIT"));
  bar.Done();
  return absl::OkStatus();
}

}  // namespace

namespace {

// The SQLite file at `path` (new or empty) opened, filled and closed.
absl::Status FillFileAt(const std::string& path, const std::function<absl::Status(sqlite3*)>& fill) {
  sqlite3* db = nullptr;
  const int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX;
  absl::Status st = sqlite3_open_v2(path.c_str(), &db, flags, nullptr) == SQLITE_OK ? fill(db)
                                                                                    : SqliteError(db, "open " + path);
  if (sqlite3_close(db) != SQLITE_OK && st.ok()) st = SqliteError(db, "close");
  return st;
}

}  // namespace

absl::Status WriteSqliteFromFile(const Report& report, const StreamedProcess& process, const std::string& path,
                                 const std::function<void(uint64_t, uint64_t)>& progress, SqliteFromFileStats* stats) {
  SqliteFromFileStats unused;
  if (stats == nullptr) stats = &unused;
  RETURN_IF_ERROR(ExportFromFileRefusal(process));
  return FillFileAt(path, [&](sqlite3* db) { return FillFromFile(db, report, process, progress, stats); });
}

absl::Status WriteSqlite(const Report& report, const ProcessAnalysis& analysis, const std::string& path) {
  return FillFileAt(path, [&](sqlite3* db) { return Fill(db, report, analysis); });
}

absl::StatusOr<std::string> RenderSqlite(const Report& report, const ProcessAnalysis& analysis) {
  sqlite3* db = nullptr;
  // One connection, one thread: no mutexes.
  const int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX;
  if (sqlite3_open_v2(":memory:", &db, flags, nullptr) != SQLITE_OK) {
    absl::Status st = SqliteError(db, "open");
    sqlite3_close(db);
    return st;
  }
  absl::Status st = Fill(db, report, analysis);
  sqlite3_int64 size = 0;
  unsigned char* bytes = nullptr;
  if (st.ok()) {
    bytes = sqlite3_serialize(db, "main", &size, 0);
    if (bytes == nullptr) st = SqliteError(db, "serialize");
  }
  // Closed before the copy below: at most two copies of the database live
  // at once.
  sqlite3_close(db);
  if (!st.ok()) return st;
  std::string out(reinterpret_cast<const char*>(bytes), static_cast<size_t>(size));
  sqlite3_free(bytes);
  return out;
}

}  // namespace stallscope::analyzer
