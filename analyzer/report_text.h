// The human-readable text report: summary, per-step table, idle by cause,
// hotspot table, questions and diagnostics.
#pragma once

#include <string>

#include "analyzer/report.h"

namespace stallscope::analyzer {

// At most this many steps are listed; the rest are summarized in one line.
inline constexpr size_t kTextMaxSteps = 50;

std::string RenderText(const Report& report);

// The short summary `stallscope run` prints: steps, GPU idle %, top cause,
// top hotspot. No trailing newline.
std::string RenderSummary(const Report& report);

}  // namespace stallscope::analyzer
