// Reads one .sstrace file (format: common/trace_format.h) into a Timeline.
// Validates the header, each chunk's magic, bounds and checksum; keeps what
// precedes a truncated or torn tail with a warning; skips a damaged chunk
// in the middle, resuming at the next chunk that verifies, with a warning
// naming the bytes lost and the first byte offset (corrupt_chunks). What it
// allocates is bounded by the file's size.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "analyzer/model/timeline.h"

namespace stallscope::analyzer {

// Largest chunk payload accepted; larger sizes are treated as corruption.
inline constexpr uint32_t kMaxChunkPayload = 1u << 30;

// Called now and then while a file is read: bytes read so far, file size.
using ReadProgress = std::function<void(uint64_t done, uint64_t total)>;

// Reads `path` with one read per chunk (no whole-file buffer) and finalizes
// the timeline (ticks → ns, join, NVTX ranges). `progress`, when set, is
// called about every 32 MB and once at the end.
absl::StatusOr<Timeline> ReadTraceFile(const std::string& path,
                                       const ReadProgress& progress = nullptr);

// The same over bytes in memory; `name` names the input in messages.
absl::StatusOr<Timeline> ReadTraceBytes(std::string_view bytes,
                                        const std::string& name);

}  // namespace stallscope::analyzer
