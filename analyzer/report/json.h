// The JSON report writer: schema `stallscope.report/1` (design.md).
#pragma once

#include <functional>
#include <string>
#include <string_view>

#include "absl/status/status.h"

#include "analyzer/model/report.h"
#include "nlohmann/json.hpp"

namespace stallscope::analyzer {

inline constexpr const char* kReportSchema = "stallscope.report/1";

nlohmann::ordered_json ReportToJson(const Report& report);
// Pretty-printed with two-space indentation and a trailing newline: the
// JSON library's dump(2) of ReportToJson, byte for byte.
std::string RenderJson(const Report& report);

// The same bytes a piece at a time (about a megabyte each), so that the
// document of a long run (its steps, the ranks' per-step collectives) is
// never held whole; the first error of `sink` ends it.
using JsonSink = std::function<absl::Status(std::string_view)>;
absl::Status StreamJson(const Report& report, const JsonSink& sink);

}  // namespace stallscope::analyzer
