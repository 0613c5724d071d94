// The JSON report writer: schema `stallscope.report/1` (design.md).
#pragma once

#include <string>

#include "analyzer/model/report.h"
#include "nlohmann/json.hpp"

namespace stallscope::analyzer {

inline constexpr const char* kReportSchema = "stallscope.report/1";

nlohmann::ordered_json ReportToJson(const Report& report);
// Pretty-printed with two-space indentation and a trailing newline.
std::string RenderJson(const Report& report);

}  // namespace stallscope::analyzer
