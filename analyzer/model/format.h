// Formatting helpers shared by the analysis and every report writer.
#pragma once

#include <cstdint>
#include <string>

namespace stallscope::analyzer {

// "1.23 ms", "45.6 us", "2.50 s", "120 ns".
std::string FormatDuration(int64_t ns);

// The last component of a path ("a/b/train.py" -> "train.py").
std::string BaseName(const std::string& path);

}  // namespace stallscope::analyzer
