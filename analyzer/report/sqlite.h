// SQLite export of a report and the analyzed process's timeline
// (`stallscope report --format sqlite -o OUT.db`): processes, threads, API
// calls with their class, step and hotspot, device ops, steps, idle gaps with
// their causes, hotspots and their stacks, questions, diagnostics and a meta
// table. The database is built in memory and returned as the bytes of a
// SQLite file, or, for a trace too large to hold, written to its file from
// the trace's file by slices. Schema: docs/analyzer.md, "SQLite export".
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "analyzer/analyze/analysis.h"
#include "analyzer/model/report.h"

namespace stallscope::analyzer {

inline constexpr const char* kSqliteSchema = "stallscope.sqlite/1";
inline constexpr int kSqliteSchemaVersion = 1;

// The bytes of a SQLite database file holding `report` and `analysis`.
absl::StatusOr<std::string> RenderSqlite(const Report& report, const ProcessAnalysis& analysis);

// The same database written into the SQLite file at `path` (new or empty),
// not held in memory: RenderSqlite's copies (the database, its serialized
// bytes) cannot pass SQLite's 2 GiB allocation limit, and a database that
// large failed ("serialize").
absl::Status WriteSqlite(const Report& report, const ProcessAnalysis& analysis, const std::string& path);

// The pass's share of WriteSqliteFromFile's progress: the indexes took
// about 40% of the time on the benchmarks' traces (docs/performance.md,
// "Analysis").
inline constexpr double kSqlitePassShare = 0.6;
struct SqliteFromFileStats {
  int64_t ops_sorted_after = 0;  // ops sorted by SQLite once all were read (0: each as its slice settled it)
  int64_t gaps_found_after = 0;  // idle gaps whose call was found among the rows after the pass (not held)
};

// The same database as RenderSqlite's of the whole reading, the same rows
// with the same ids, written from the trace's file read again by slices
// into the SQLite file at `path` (new or empty), never held whole: the
// calls and ops a slice at a time, the ops then sorted into their ids on
// disk (SQLite's temporary files: $SQLITE_TMPDIR, else $TMPDIR, else
// /var/tmp or /tmp), the idle gaps from the analysis' temporary file.
// `progress` (optional): how far the writing is, of a constant total: the
// pass over the file's slices to kSqlitePassShare of it, then the indexes,
// each by its table's rows, and the total once the file is complete.
// `stats` (optional): what the writing took. Refused as
// ExportFromFileRefusal says (analysis.h).
absl::Status WriteSqliteFromFile(const Report& report, const StreamedProcess& process, const std::string& path,
                                 const std::function<void(uint64_t, uint64_t)>& progress = nullptr,
                                 SqliteFromFileStats* stats = nullptr);

}  // namespace stallscope::analyzer
