// The human-readable text report: summary, per-step table, idle by cause,
// hotspot table, questions and diagnostics.
#pragma once

#include <string>

#include "analyzer/model/report.h"

namespace stallscope::analyzer {

// At most this many steps are listed; the rest are summarized in one line.
inline constexpr size_t kTextMaxSteps = 50;

struct TextStyle {
  // ANSI colours and bold headings (for a terminal): answers, severities and
  // section titles. Padding is computed before colouring, so columns stay
  // aligned either way.
  bool color = false;
};

std::string RenderText(const Report& report, const TextStyle& style = {});

// The short summary `stallscope run` prints: steps, GPU idle %, top cause,
// top hotspot. No trailing newline.
std::string RenderSummary(const Report& report);

}  // namespace stallscope::analyzer
