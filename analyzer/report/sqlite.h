// SQLite export of a report and the analyzed process's timeline
// (`stallscope report --format sqlite -o OUT.db`): processes, threads, API
// calls with their class, step and hotspot, device ops, steps, idle gaps with
// their causes, hotspots and their stacks, questions, diagnostics and a meta
// table. The database is built in memory and returned as the bytes of a
// SQLite file. Schema: docs/analyzer.md, "SQLite export".
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "analyzer/analyze/analysis.h"
#include "analyzer/model/report.h"

namespace stallscope::analyzer {

inline constexpr const char* kSqliteSchema = "stallscope.sqlite/1";
inline constexpr int kSqliteSchemaVersion = 1;

// The bytes of a SQLite database file holding `report` and `analysis`.
absl::StatusOr<std::string> RenderSqlite(const Report& report, const ProcessAnalysis& analysis);

}  // namespace stallscope::analyzer
