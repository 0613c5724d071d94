// Name, severity and description tables generated from STALLSCOPE_DIAGNOSTICS.
#include "analyzer/model/diagnostics.h"

namespace stallscope::analyzer {
namespace {

struct DiagInfo {
  const char* name;
  Severity severity;
  const char* description;
};

constexpr DiagInfo kDiagInfo[] = {
#define STALLSCOPE_DIAG_INFO(id, wire, source, name, sev, desc) {name, Severity::sev, desc},
    STALLSCOPE_DIAGNOSTICS(STALLSCOPE_DIAG_INFO)
#undef STALLSCOPE_DIAG_INFO
};

}  // namespace

const char* DiagName(DiagId id) { return kDiagInfo[static_cast<int>(id)].name; }
Severity DiagSeverity(DiagId id) {
  return kDiagInfo[static_cast<int>(id)].severity;
}
const char* DiagDescription(DiagId id) {
  return kDiagInfo[static_cast<int>(id)].description;
}
const char* SeverityName(Severity s) {
  switch (s) {
    case Severity::kInfo: return "info";
    case Severity::kWarning: return "warning";
    case Severity::kError: return "error";
  }
  return "info";
}

void AddDiagnostic(std::vector<Diagnostic>* list, DiagId id, uint64_t count,
                   std::string message) {
  for (Diagnostic& d : *list) {
    if (d.id == id) {
      d.count += count;
      if (!message.empty()) d.message = std::move(message);
      return;
    }
  }
  list->push_back(Diagnostic{id, count, std::move(message)});
}

}  // namespace stallscope::analyzer
