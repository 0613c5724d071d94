// Writes a report to a new file: O_NOFOLLOW, O_EXCL (never overwrites),
// mode 0640 (owner and group only).
#pragma once

#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace stallscope::analyzer {

absl::Status WriteNewFile(const std::string& path, std::string_view data);

}  // namespace stallscope::analyzer
