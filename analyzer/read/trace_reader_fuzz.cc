// Fuzz target for the whole analysis pipeline on hostile trace bytes:
// reader → timeline → steps → attribution → hotspots → JSON, and the
// index pass. Built with Clang's libFuzzer when STALLSCOPE_FUZZ is on; seeds: analyzer/testdata.
//   build/analyzer/trace_reader_fuzz -max_total_time=60 analyzer/testdata
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "analyzer/analyze/analysis.h"
#include "analyzer/report/json.h"
#include "analyzer/read/trace_reader.h"

namespace {

// Rewrites every complete chunk's checksum so that mutations reach the
// record parsers and the analysis instead of stopping at the checksum.
void FixChecksums(std::string* bytes) {
  namespace tf = stallscope::trace;
  if (bytes->size() < sizeof(tf::FileHeader)) return;
  uint32_t header_bytes;
  uint16_t version;
  std::memcpy(&header_bytes, bytes->data() + offsetof(tf::FileHeader, header_bytes), 4);
  std::memcpy(&version, bytes->data() + offsetof(tf::FileHeader, version), 2);
  size_t off = header_bytes;
  while (off + sizeof(tf::ChunkHeader) <= bytes->size()) {
    tf::ChunkHeader h;
    std::memcpy(&h, bytes->data() + off, sizeof(h));
    const size_t end = off + sizeof(h) + h.payload_bytes;
    if (h.payload_bytes % 8 != 0 || end > bytes->size() || end < off) return;
    h.checksum = tf::ChunkChecksum(version, bytes->data() + off + sizeof(h), h.payload_bytes);
    std::memcpy(bytes->data() + off, &h, sizeof(h));
    off = end;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace stallscope::analyzer;
  std::string bytes(reinterpret_cast<const char*>(data), size);
  // One input in two is taken as it is (checksums included), the other
  // with its checksums repaired.
  if (size > 0 && (data[size - 1] & 1)) FixChecksums(&bytes);
  // The index pass reads the same bytes (its spans and its refusals).
  (void)IndexTraceBytes(bytes, "fuzz");
  auto t = ReadTraceBytes(bytes, "fuzz");
  if (!t.ok()) return 0;
  auto r = AnalyzeTimeline(*t, AnalysisOptions{});
  if (r.ok()) (void)RenderJson(*r);
  return 0;
}
