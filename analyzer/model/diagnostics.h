// Diagnostics as data: every condition the analyzer can report about a trace
// (dropped records, truncation, clock problems ...) is a row of the one table
// in common/diagnostic_table.h, shared with the recorder, and printed in every
// report.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "diagnostic_table.h"

namespace stallscope::analyzer {

enum class Severity { kInfo, kWarning, kError };

enum class DiagId {
#define STALLSCOPE_DIAG_ENUM(id, wire, source, name, sev, desc) id,
  STALLSCOPE_DIAGNOSTICS(STALLSCOPE_DIAG_ENUM)
#undef STALLSCOPE_DIAG_ENUM
};

struct Diagnostic {
  DiagId id;
  uint64_t count = 0;
  std::string message;  // one sentence with the numbers; description if empty
};

const char* DiagName(DiagId id);
Severity DiagSeverity(DiagId id);
const char* DiagDescription(DiagId id);
const char* SeverityName(Severity s);

// Adds `count` to the diagnostic `id` in `list` (creating it), replacing its
// message when `message` is not empty.
void AddDiagnostic(std::vector<Diagnostic>* list, DiagId id, uint64_t count,
                   std::string message = {});

}  // namespace stallscope::analyzer
