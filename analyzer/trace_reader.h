// Reads one .sstrace file (format: common/trace_format.h) into a Timeline.
// Validates the header, each chunk's magic, bounds and checksum; keeps what
// precedes a truncated or torn tail with a warning; rejects corruption in the
// middle with a one-line error naming the file and byte offset.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "analyzer/timeline.h"

namespace stallscope::analyzer {

// Largest chunk payload accepted; larger sizes are treated as corruption.
inline constexpr uint32_t kMaxChunkPayload = 1u << 30;

// Reads `path` with one read per chunk (no whole-file buffer) and finalizes
// the timeline (ticks → ns, join, NVTX ranges).
absl::StatusOr<Timeline> ReadTraceFile(const std::string& path);

// The same over bytes in memory; `name` names the input in messages.
absl::StatusOr<Timeline> ReadTraceBytes(std::string_view bytes,
                                        const std::string& name);

}  // namespace stallscope::analyzer
