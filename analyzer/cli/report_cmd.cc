// `stallscope report`: analyze traces and print the report in one of five formats.
#include <limits>
#include <memory>

#include "absl/strings/str_format.h"
#include "analyzer/cli/cli.h"
#include "analyzer/cli/commands.h"
#include "analyzer/model/output_file.h"
#include "analyzer/report/html.h"
#include "analyzer/report/json.h"
#include "analyzer/report/perfetto.h"
#include "analyzer/report/sqlite.h"
#include "analyzer/report/text.h"

namespace stallscope::analyzer {
namespace {

// The one table of report formats (`report --format`, `run --format`).
struct ReportFormat {
  const char* name;
  bool needs_timeline;     // renders the analyzed process's timeline, not only the report
  bool needs_output_file;  // binary output: -o is required
  absl::StatusOr<std::string> (*render)(const Report& report, const ProcessAnalysis& analysis,
                                        bool color);  // (null where write_file writes it)
  // Formats too large to hold whole (a long run's JSON, its rows; the
  // trace's events): written a piece at a time instead.
  absl::Status (*stream)(const Report& report, const ProcessAnalysis& analysis, const PerfettoSink& sink) =
      nullptr;
  // Formats that can draw a trace analyzed by slices from its file again by
  // slices (AnalyzePaths' `streamed`), instead of reading it whole.
  absl::StatusOr<std::string> (*render_from_file)(const Report& report, const StreamedProcess& process) = nullptr;
  // The timeline export from the file by slices, where the trace is
  // reported so: it writes `out` (standard output if empty) and sets the
  // exit code; Unimplemented where it cannot be made so (then it is made
  // from the whole reading, the same report).
  absl::Status (*export_from_file)(const Report& report, const StreamedProcess& process, const Conventions& common,
                                   int* code) = nullptr;
  // Formats written by a library into a file of its own (a SQLite
  // database): from the whole reading into the temporary file at `path`,
  // which becomes -o once written.
  absl::Status (*write_file)(const Report& report, const ProcessAnalysis& analysis, const std::string& path) =
      nullptr;
};

absl::Status PerfettoFromFileTo(const Report& report, const StreamedProcess& process, const Conventions& common,
                                int* code) {
  const auto progress = WritingProgress(common, process.index.file_size);
  auto from_file = PerfettoFromFile::Prepare(report, process, progress);
  if (!from_file.ok()) return from_file.status();
  *code = EmitStreamed(common.out, [&](const std::function<absl::Status(std::string_view)>& sink) {
    return from_file->Stream(sink, progress);
  });
  return absl::OkStatus();
}

absl::Status SqliteFromFileTo(const Report& report, const StreamedProcess& process, const Conventions& common,
                              int* code) {
  if (absl::Status refused = ExportFromFileRefusal(process); !refused.ok()) return refused;
  const auto progress = WritingProgress(common, process.index.file_size);
  const absl::Status st = WriteNewFileAt(common.out, [&](const std::string& temporary) {
    return WriteSqliteFromFile(report, process, temporary, progress);
  });
  *code = st.ok() ? kExitOk : Fail(st, kExitUsage);
  return absl::OkStatus();
}

constexpr ReportFormat kFormats[] = {
    {"text", false, false,
     [](const Report& r, const ProcessAnalysis&, bool color) -> absl::StatusOr<std::string> {
       return RenderText(r, {.color = color});
     }},
    {"json", false, false,
     [](const Report& r, const ProcessAnalysis&, bool) -> absl::StatusOr<std::string> {
       return RenderJson(r);
     },
     [](const Report& r, const ProcessAnalysis&, const PerfettoSink& sink) { return StreamJson(r, sink); }},
    {"html", true, false,
     [](const Report& r, const ProcessAnalysis& a, bool) -> absl::StatusOr<std::string> {
       return RenderHtml(r, a);
     },
     nullptr, RenderHtmlFromFile},
    {"perfetto", true, false,
     [](const Report& r, const ProcessAnalysis& a, bool) { return RenderPerfetto(r, a); }, StreamPerfetto,
     nullptr, PerfettoFromFileTo},
    {"sqlite", true, true,
     nullptr, nullptr, nullptr, SqliteFromFileTo, WriteSqlite},
};

const ReportFormat& FindFormat(std::string_view name) {
  for (const ReportFormat& f : kFormats) {
    if (name == f.name) return f;
  }
  return kFormats[0];  // the option's check admits only the names above
}

struct ReportArgs {
  std::vector<std::string> inputs;
  Conventions common;
  AnalysisArgs analysis;
};

}  // namespace

std::vector<std::string> ReportFormatNames() {
  std::vector<std::string> names;
  for (const ReportFormat& f : kFormats) names.push_back(f.name);
  return names;
}

const char* kReportFormatHelp =
    "text; json (schema stallscope.report/1); html: one self-contained page, no script, no "
    "network: verdict, questions, nvidia-smi utilization curve over a busy/idle strip by "
    "cause, per-step bars, step time vs idle, hotspots with stacks; perfetto: Chrome trace "
    "JSON of the analyzed process in PyTorch/Kineto's shape (ui.perfetto.dev, "
    "chrome://tracing, Holistic Trace Analysis); sqlite: a SQLite database of the report and "
    "the analyzed process's calls, device ops and idle gaps (stallscope.sqlite/1; needs -o)";

int WriteReport(std::string_view command, const std::vector<std::string>& inputs, const Conventions& common,
                const AnalysisOptions& options) {
  const ReportFormat& fmt = FindFormat(common.format);
  if (fmt.needs_output_file && common.out.empty()) {
    return UsageError(command, absl::StrFormat("--format %s writes a file: give -o OUT", fmt.name));
  }
  ProcessAnalysis analysis;
  StreamedProcess streamed;
  streamed.idle_columns = kHtmlStripColumns;
  streamed.keep_for_export = fmt.export_from_file != nullptr;
  // A distributed run's analyzed rank too: each slice these formats read
  // gets its NCCL waits.
  const bool from_file = fmt.render_from_file != nullptr || fmt.export_from_file != nullptr;
  streamed.rank_by_slices = from_file;
  auto report = AnalyzePaths(inputs, options, fmt.needs_timeline ? &analysis : nullptr, from_file ? &streamed : nullptr);
  if (!report.ok()) return Fail(report.status(), kExitBadTrace);
  // Where a format cannot be drawn from the file by slices (the status
  // says why): from the whole reading, the same report.
  auto read_whole = [&]() -> absl::Status {
    AnalysisOptions whole = options;
    whole.stream = false;
    whole.stream_above_events = std::numeric_limits<uint64_t>::max();
    report = AnalyzePaths(inputs, whole, &analysis, nullptr);
    streamed.used = false;
    return report.status();
  };
  if (streamed.used && fmt.export_from_file != nullptr) {
    int code = kExitOk;
    const absl::Status exported = fmt.export_from_file(*report, streamed, common, &code);
    if (exported.ok()) return code;
    if (exported.code() != absl::StatusCode::kUnimplemented) return Fail(exported, kExitBadTrace);
    if (absl::Status st = read_whole(); !st.ok()) return Fail(st, kExitBadTrace);
  }
  if (streamed.used) {
    auto rendered = fmt.render_from_file(*report, streamed);
    if (rendered.ok()) return Emit(common.out, *rendered);
    if (rendered.status().code() != absl::StatusCode::kUnimplemented) return Fail(rendered.status(), kExitBadTrace);
    if (absl::Status st = read_whole(); !st.ok()) return Fail(st, kExitBadTrace);
  }
  if (fmt.write_file != nullptr) {
    const absl::Status st = WriteNewFileAt(common.out, [&](const std::string& temporary) {
      return fmt.write_file(*report, analysis, temporary);
    });
    return st.ok() ? kExitOk : Fail(st, kExitUsage);
  }
  if (fmt.stream != nullptr) {
    return EmitStreamed(common.out, [&](const std::function<absl::Status(std::string_view)>& sink) {
      return fmt.stream(*report, analysis, sink);
    });
  }
  auto rendered = fmt.render(*report, analysis, UseColor(common));
  if (!rendered.ok()) return Fail(rendered.status(), kExitUsage);
  return Emit(common.out, *rendered);
}

Runner DeclareReport(CLI::App* app) {
  auto a = std::make_shared<ReportArgs>();
  app->add_option("inputs", a->inputs);
  AddConventions(app, &a->common, ReportFormatNames(),
                 {.format = kReportFormatHelp,
                  .quiet = "no progress on stderr while a large trace is read (errors only)",
                  .jobs = "threads reading and analyzing a folder's traces (default 0: one per "
                          "core)"});
  AddAnalysisArgs(app, &a->analysis, /*predictions=*/true);
  return [a] {
    if (a->inputs.empty()) return UsageError("report", "no trace folder or file given");
    return WriteReport("report", a->inputs, a->common, OptionsFrom(a->common, a->analysis));
  };
}

}  // namespace stallscope::analyzer
