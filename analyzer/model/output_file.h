// Writes report files whole or not at all: the data goes to a temporary file
// beside the target, which becomes the target only once it is complete, so
// a full disk or a failed write leaves nothing behind (the error says why).
#pragma once

#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace stallscope::analyzer {

// A new file (never overwrites, a symlink at `path` included), mode 0640
// (owner and group only).
absl::Status WriteNewFile(const std::string& path, std::string_view data);

// Writes `data` to a temporary file beside `path` (mode 0640), then links
// it to `path` (fails when `path` exists) or, with `replace`, renames it over
// `path`. On any failure the temporary file is removed.
absl::Status WriteThroughTemporary(const std::string& path, std::string_view data, bool replace);

}  // namespace stallscope::analyzer
