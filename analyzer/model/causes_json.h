// The idle-by-cause object every JSON document writes: cause name → value
// (ns, or a per-step mean), in the causes' order (report, compare, audit,
// whatif).
#pragma once

#include <array>

#include "analyzer/model/report.h"
#include "nlohmann/json.hpp"

namespace stallscope::analyzer {

template <typename T>
nlohmann::ordered_json CausesJson(const std::array<T, kNumCauses>& by_cause) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  for (int i = 0; i < kNumCauses; ++i) j[CauseName(CauseAt(i))] = by_cause[i];
  return j;
}

}  // namespace stallscope::analyzer
