// `stallscope dump FILE`: one trace as it was read, before any analysis.
#include <memory>

#include "analyzer/cli/cli.h"
#include "analyzer/cli/commands.h"
#include "analyzer/read/trace_reader.h"
#include "analyzer/report/dump.h"

namespace stallscope::analyzer {
namespace {

struct DumpArgs {
  std::string path;
  Conventions common;
};

int Dump(const DumpArgs& a) {
  if (a.path.empty()) return UsageError("dump", "one trace file");
  auto t = ReadTraceFile(a.path);
  if (!t.ok()) return Fail(t.status(), kExitBadTrace);
  return Emit(a.common.out, a.common.format == "json" ? RenderDumpJson(*t) : RenderDumpText(*t));
}

}  // namespace

Runner DeclareDump(CLI::App* app) {
  auto a = std::make_shared<DumpArgs>();
  app->add_option("file", a->path);
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
