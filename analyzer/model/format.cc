#include "analyzer/model/format.h"

#include <cmath>

#include "absl/strings/str_format.h"

namespace stallscope::analyzer {

std::string FormatDuration(int64_t ns) {
  const double v = static_cast<double>(ns);
  const double a = std::fabs(v);
  if (a >= 1e9) return absl::StrFormat("%.2f s", v / 1e9);
  if (a >= 1e6) return absl::StrFormat("%.2f ms", v / 1e6);
  if (a >= 1e3) return absl::StrFormat("%.1f us", v / 1e3);
  return absl::StrFormat("%d ns", ns);
}

std::string BaseName(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

}  // namespace stallscope::analyzer
