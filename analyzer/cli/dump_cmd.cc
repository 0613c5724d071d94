// `stallscope dump FILE`: one trace as it was read, before any analysis;
// with --chunks, its chunks as the index pass sees them.
#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "analyzer/cli/cli.h"
#include "analyzer/cli/commands.h"
#include "analyzer/read/trace_reader.h"
#include "analyzer/report/dump.h"
#include "nlohmann/json.hpp"
#include "trace_codec.h"
#include "trace_pack.h"

namespace stallscope::analyzer {
namespace {

struct DumpArgs {
  std::string path;
  bool chunks = false;
  Conventions common;
};

std::string EncodingName(uint16_t e) {
  std::string s = (e & 0xff) == trace::kEncodingPacked ? "packed" : "raw";
  if ((e & trace::kEncodingZstd) != 0) s += "+zstd";
  return s;
}

std::string TypeName(uint16_t type) {
  const trace::ChunkTypeInfo* info = trace::FindChunkType(type);
  return info != nullptr ? info->name : absl::StrCat("type ", type);
}

// One line per chunk, then the totals by type; or schema
// stallscope.chunks/1.
std::string RenderChunks(const TraceIndex& index, const std::string& path, bool json) {
  if (json) {
    nlohmann::ordered_json j;
    j["schema"] = "stallscope.chunks/1";
    j["file"] = path;
    j["format"] = index.header.version;
    j["bytes"] = index.file_size;
    j["truncated"] = index.truncated;
    nlohmann::ordered_json& list = j["chunks"] = nlohmann::ordered_json::array();
    for (const ChunkSpan& c : index.chunks) {
      list.push_back({{"offset", c.offset}, {"type", TypeName(c.type)},
                      {"encoding", EncodingName(c.encoding)}, {"tid", c.tid},
                      {"count", c.count}, {"payload_bytes", c.payload_bytes},
                      {"lo", c.lo}, {"hi", c.hi}});
    }
    return j.dump(1) + "\n";
  }
  std::string out = absl::StrFormat("%s: format %d, %d bytes, %d chunks%s\n", path,
                                    index.header.version, index.file_size, index.chunks.size(),
                                    index.truncated ? " (the last one cut short: a torn tail)" : "");
  absl::StrAppend(&out, absl::StrFormat("%12s  %-13s %-11s %8s %8s %9s  %s\n", "offset", "type",
                                        "encoding", "tid", "count", "bytes", "span"));
  struct Sum {
    uint64_t chunks = 0, records = 0, bytes = 0;
  };
  std::vector<std::pair<std::string, Sum>> sums;
  for (const ChunkSpan& c : index.chunks) {
    const std::string type = TypeName(c.type);
    absl::StrAppend(&out, absl::StrFormat("%12d  %-13s %-11s %8d %8d %9d  %s\n", c.offset, type,
                                          EncodingName(c.encoding), c.tid, c.count,
                                          c.payload_bytes,
                                          c.lo == 0 && c.hi == 0 ? std::string()
                                                                 : absl::StrCat(c.lo, "..", c.hi)));
    auto it = std::find_if(sums.begin(), sums.end(), [&](const auto& s) { return s.first == type; });
    if (it == sums.end()) it = sums.insert(sums.end(), {type, Sum{}});
    ++it->second.chunks;
    it->second.records += c.count;
    it->second.bytes += 24 + c.payload_bytes;
  }
  for (const auto& [type, s] : sums) {
    absl::StrAppend(&out, absl::StrFormat("%s: %d chunks, %d records, %d bytes\n", type, s.chunks,
                                          s.records, s.bytes));
  }
  return out;
}

int Dump(const DumpArgs& a) {
  if (a.path.empty()) return UsageError("dump", "one trace file");
  if (a.chunks) {
    auto index = IndexTraceFile(a.path);
    if (!index.ok()) return Fail(index.status(), kExitBadTrace);
    return Emit(a.common.out, RenderChunks(*index, a.path, a.common.format == "json"));
  }
  auto t = ReadTraceFile(a.path);
  if (!t.ok()) return Fail(t.status(), kExitBadTrace);
  return Emit(a.common.out, a.common.format == "json" ? RenderDumpJson(*t) : RenderDumpText(*t));
}

}  // namespace

Runner DeclareDump(CLI::App* app) {
  auto a = std::make_shared<DumpArgs>();
  app->add_option("file", a->path);
  app->add_flag("--chunks", a->chunks,
                "list the file's chunks instead (offset, type, encoding, writing thread, "
                "records, payload bytes, and the span of their times in ns, or of their "
                "CUPTI ids for correlations), then "
                "the totals by type; read one chunk at a time, without keeping the records");
  AddConventions(app, &a->common, {"text", "json"},
                 {.format = "text: one line per call, op, NCCL call and range in time order; "
                            "json (schema stallscope.dump/1): the process, threads, calls with "
                            "their Python frames, device ops, NCCL calls, NVTX events and "
                            "ranges, diagnostics",
                  .quiet = "accepted (dump prints no progress)",
                  .color = "accepted (the dump has no colours)",
                  .jobs = "accepted (dump reads one file)"});
  return [a] { return Dump(*a); };
}

}  // namespace stallscope::analyzer
