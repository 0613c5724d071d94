// Subcommand table, option parsing and help (see cli.h).
#include "analyzer/cli/cli.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "analyzer/analyze/analysis.h"
#include "analyzer/analyze/hotspots.h"
#include "analyzer/analyze/ranks.h"
#include "analyzer/analyze/steps.h"
#include "analyzer/cli/run_command.h"
#include "analyzer/compare/audit.h"
#include "analyzer/compare/compare.h"
#include "analyzer/model/format.h"
#include "analyzer/model/output_file.h"
#include "analyzer/read/symbolizer.h"
#include "analyzer/read/trace_reader.h"
#include "analyzer/report/dump.h"
#include "analyzer/report/html.h"
#include "analyzer/report/json.h"
#include "analyzer/report/perfetto.h"
#include "analyzer/report/sqlite.h"
#include "analyzer/report/text.h"

namespace stallscope::analyzer {
namespace {

int RunCmd(const std::vector<std::string>& args);
int ReportCmd(const std::vector<std::string>& args);
int HelpCmd(const std::vector<std::string>& args);
int DumpCmd(const std::vector<std::string>& args);
int CompareCmd(const std::vector<std::string>& args);
int AuditCmd(const std::vector<std::string>& args);
int FleetCmd(const std::vector<std::string>& args);

struct Subcommand {
  const char* name;
  const char* usage;
  const char* summary;
  const char* options;
  int (*fn)(const std::vector<std::string>& args);
};

// The one table of subcommands; --help and `help` are generated from it.
constexpr Subcommand kSubcommands[] = {
    {"run", "stallscope run [--out DIR] [--sim] [--] CMD [ARGS...]",
     "Run CMD with the profiler preloaded; write its traces into DIR, print a short summary "
     "and exit with CMD's exit code.",
     "  --out DIR   trace folder (default: a new stallscope-YYYYMMDD-HHMMSS in the current\n"
     "              folder, mode 0750); an empty folder left at the end is removed\n"
     "  --sim       use the simulated GPU libraries (machines without a GPU)\n"
     "  -q, --quiet no summary after the command (errors only)\n"
     "  --          end of options; CMD follows\n"
     "Environment: STALLSCOPE_LIBDIR overrides where libstallscope.so is found\n"
     "(default: <dir of this program>/../lib).\n",
     RunCmd},
    {"report",
     "stallscope report DIR|FILE... [--format text|json|html|perfetto|sqlite] [-o OUT] "
     "[--step-pattern RE]",
     "Analyze traces (every *.sstrace in a folder) and print the report: steps, GPU idle by "
     "cause, forced-sync hotspots, questions, diagnostics.",
     "  --format F         text (default), json (schema stallscope.report/1), html, perfetto\n"
     "                     or sqlite\n"
     "                     html: one self-contained page, no script, no network: verdict,\n"
     "                     questions, nvidia-smi utilization curve over a busy/idle strip by\n"
     "                     cause, per-step bars, step time vs idle, hotspots with stacks\n"
     "                     perfetto: Chrome trace JSON of the analyzed process in\n"
     "                     PyTorch/Kineto's shape: open in ui.perfetto.dev or\n"
     "                     chrome://tracing, or load with Holistic Trace Analysis (*.json)\n"
     "                     sqlite: a SQLite database of the report and the analyzed\n"
     "                     process's calls, device ops and idle gaps (stallscope.sqlite/1;\n"
     "                     needs -o)\n"
     "  -o, --output OUT   write to OUT (a new file, never overwritten, mode 0640)\n"
     "  --step-pattern RE  NVTX range names that mark steps\n"
     "                     (default: (?i)step|iter|ProfilerStep; a leading (?i) ignores case)\n"
     "  --user-code GLOB   frames whose file (or native module) matches are user code, for a\n"
     "                     hotspot's site (repeatable; e.g. '*/site-packages/mylib/*')\n"
     "  --not-user-code GLOB\n"
     "                     frames that match are not (repeatable); by default the standard\n"
     "                     library, site-packages, dist-packages and stallscope are not\n"
     "  --color WHEN       colour the text output: auto (default: on a terminal, unless\n"
     "                     NO_COLOR is set), always or never\n"
     "  -q, --quiet        no progress on stderr (errors only)\n"
     "  -j, --jobs N       threads reading and analyzing a folder's traces (default 0:\n"
     "                     one per core)\n",
     ReportCmd},
    {"compare",
     "stallscope compare BASE OTHER [--format text|json] [-o OUT] [--step-pattern RE]",
     "Analyze two runs (trace folders or files; e.g. real input as BASE, synthetic or cached "
     "input as OTHER) and print per-step and per-cause deltas, hotspots that appeared or "
     "vanished, a verdict, and q2.",
     "  --format F         text (default) or json (schema stallscope.compare/1)\n"
     "  -o, --output OUT   write to OUT (a new file, never overwritten, mode 0640)\n"
     "  --step-pattern RE  NVTX range names that mark steps (as for report)\n"
     "  --user-code GLOB, --not-user-code GLOB\n"
     "                     which frames are user code (as for report)\n"
     "  --color WHEN       accepted as for report (the comparison has no colours yet)\n"
     "  -q, --quiet        no progress on stderr (errors only)\n"
     "  -j, --jobs N       threads reading and analyzing each run's traces (as for report)\n",
     CompareCmd},
    {"audit",
     "stallscope audit DIR|FILE... --budget FILE [--baseline DIR] [--junit OUT.xml] "
     "[--prometheus OUT.prom] [--step-pattern RE]",
     "Check a run against a budget (limits on syncs per step, GPU idle, idle by cause, step "
     "time, hotspots) for nightly jobs; exit 3 when it is exceeded.",
     "  --budget FILE       the limits: TOML (.toml) or JSON (.json); see docs/analyzer.md\n"
     "                      \"Audits\" (unknown keys are an error)\n"
     "  --baseline DIR      an earlier run, for no_new_hotspots (hotspots by fingerprint)\n"
     "  --junit OUT.xml     JUnit XML: one test case per budget check (a new file)\n"
     "  --prometheus OUT    Prometheus text-format metrics, written atomically for\n"
     "                      node_exporter's textfile collector (replaces only an earlier\n"
     "                      stallscope metrics file)\n"
     "  --step-pattern RE   NVTX range names that mark steps (as for report)\n"
     "Exit codes: 0 within budget; 3 budget exceeded (each violation on stderr); 2 unreadable\n"
     "trace; 1 usage or a bad budget file (one line: FILE:LINE: what).\n",
     AuditCmd},
    {"fleet",
     "stallscope fleet arrivals TRACE | last ARRIVALS... | rank TRACE --last LAST | "
     "report --last LAST SUMMARY... [--format text|json] [-o OUT] [--step-pattern RE]",
     "The steps of a multi-rank analysis one at a time, for running them on a cluster "
     "(python/stallscope/fleet.py submits them to Dask): per-rank maps and their reduces, "
     "exchanging small JSON documents. `report` gives what `stallscope report` gives over "
     "all the ranks' traces.",
     "  arrivals TRACE          map 1: the rank's collective arrivals (stallscope.arrivals/1)\n"
     "  last ARRIVALS...        reduce 1: each collective's last arrival\n"
     "                          (stallscope.last-arrivals/1)\n"
     "  rank TRACE --last LAST  map 2: the rank analyzed with the others' arrivals\n"
     "                          (stallscope.rank-summary/1)\n"
     "  report --last LAST SUMMARY...\n"
     "                          reduce 2: the report over every rank (re-reads the shown\n"
     "                          rank's trace, named in its summary)\n"
     "  -o, --output OUT        write to OUT (a new file, never overwritten, mode 0640)\n"
     "  --step-pattern RE       as for report (give the same to `rank` and `report`)\n",
     FleetCmd},
    {"dump", "stallscope dump FILE [--format text|json] [-o OUT]",
     "Print one trace as it was read, before any analysis: its rank (when set), calls, device "
     "ops, NCCL call arguments and NVTX ranges in time order, one per line (for debugging the "
     "recorder and the analyzer), or all of it as JSON for tools and tests.",
     "  --format F        text (default) or json (schema stallscope.dump/1: the process,\n"
     "                    threads, calls with their Python frames, device ops, NCCL calls,\n"
     "                    NVTX events and ranges, diagnostics)\n"
     "  -o, --output OUT  write to OUT (a new file, never overwritten, mode 0640)\n",
     DumpCmd},
    {"help", "stallscope help [COMMAND]", "Show help for stallscope or one of its commands.", "",
     HelpCmd},
};

const Subcommand* Find(std::string_view name) {
  for (const Subcommand& s : kSubcommands) {
    if (name == s.name) return &s;
  }
  return nullptr;
}

std::string MainHelp() {
  std::string s =
      "stallscope: find out why a GPU sits idle during training.\n\n"
      "usage: stallscope <command> [options]\n\ncommands:\n";
  for (const Subcommand& c : kSubcommands) absl::StrAppendFormat(&s, "  %-8s %s\n", c.name, c.summary);
  absl::StrAppend(&s,
                  "\nRun `stallscope help <command>` or `stallscope <command> --help` for its "
                  "options.\n"
                  "Exit codes: 0 ok; 1 usage; 2 unreadable or invalid trace; 3 an audit "
                  "budget was exceeded; `run` exits with the command's code.\n");
  return s;
}

std::string CommandHelp(const Subcommand& c) {
  std::string s = absl::StrFormat("usage: %s\n\n%s\n", c.usage, c.summary);
  if (*c.options != '\0') absl::StrAppendFormat(&s, "\noptions:\n%s", c.options);
  return s;
}

int Usage(const Subcommand& c, const std::string& message) {
  fprintf(stderr, "stallscope %s: %s\nusage: %s\n", c.name, message.c_str(), c.usage);
  return kExitUsage;
}

bool IsHelp(std::string_view a) { return a == "--help" || a == "-h"; }

// Reads the value of an option given as `--opt VALUE` or `--opt=VALUE`.
bool TakeValue(const std::vector<std::string>& args, size_t* i, std::string_view name,
               std::string* value) {
  const std::string& a = args[*i];
  if (a == name) {
    if (*i + 1 >= args.size()) return false;
    *value = args[++*i];
    return true;
  }
  *value = a.substr(name.size() + 1);
  return true;
}

bool Matches(std::string_view arg, std::string_view name) {
  return arg == name || (std::string_view(arg).starts_with(name) && arg.size() > name.size() && arg[name.size()] == '=');
}

// Every subcommand that writes a result takes it the same way: -o OUT,
// --output OUT or --output=OUT.
bool IsOutput(std::string_view arg) { return arg == "-o" || Matches(arg, "--output"); }
// Reads the value of -o/--output; false when it is missing.
bool TakeOutput(const std::vector<std::string>& args, size_t* i, std::string* out) {
  if (args[*i] == "-o") {
    if (*i + 1 >= args.size()) return false;
    *out = args[++*i];
    return true;
  }
  return TakeValue(args, i, "--output", out);
}

int RunCmd(const std::vector<std::string>& args) {
  const Subcommand& self = *Find("run");
  RunOptions o;
  size_t i = 0;
  for (; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (IsHelp(a)) {
      fputs(CommandHelp(self).c_str(), stdout);
      return kExitOk;
    }
    if (a == "--") {
      ++i;
      break;
    }
    if (Matches(a, "--out")) {
      if (!TakeValue(args, &i, "--out", &o.out_dir) || o.out_dir.empty()) {
        return Usage(self, "--out needs a folder");
      }
    } else if (a == "--sim") {
      o.sim = true;
    } else if (a == "-q" || a == "--quiet") {
      o.quiet = true;
    } else if (std::string_view(a).starts_with("-")) {
      return Usage(self, absl::StrFormat("unknown option %s", a));
    } else {
      break;
    }
  }
  o.command.assign(args.begin() + static_cast<std::ptrdiff_t>(i), args.end());
  if (o.command.empty()) return Usage(self, "no command to run");
  return RunUnderStallscope(o);
}

// The options `report` and `compare` share: paths, --format, -o/--output,
// --step-pattern. Returns an exit code when parsing ends the command (help,
// usage error), nullopt to go on.
struct ReportArgs {
  std::vector<std::string> inputs;
  std::string format = "text", out, pattern = kDefaultStepPattern;
  bool quiet = false;
  std::string color = "auto";  // auto | always | never
  int jobs = 0;                // threads over a folder's traces (0: one per core)
  SiteRule site;               // --user-code / --not-user-code
};

// Progress on stderr while a large file is read, only on a terminal.
void ShowProgress(const std::string& path, uint64_t done, uint64_t total) {
  constexpr uint64_t kMinBytes = uint64_t{64} << 20;
  if (total < kMinBytes) return;
  if (done >= total) {
    fputs("\r\033[K", stderr);
  } else {
    fprintf(stderr, "\rstallscope: reading %s %3d%% (%d of %d MB)", BaseName(path).c_str(),
            static_cast<int>(100 * done / total), static_cast<int>(done >> 20),
            static_cast<int>(total >> 20));
  }
  fflush(stderr);
}

// Options common to report and compare: progress, colour, the user-code rule.
void ApplyCommon(const ReportArgs& r, AnalysisOptions* options, bool* color) {
  options->jobs = r.jobs;
  options->attribution.site = r.site;
  AddSiteRulesFromEnvironment(&options->attribution.site);
  if (!r.quiet && isatty(STDERR_FILENO)) options->progress = ShowProgress;
  const char* no_color = getenv("NO_COLOR");
  *color = r.color == "always" ||
           (r.color == "auto" && isatty(STDOUT_FILENO) && (no_color == nullptr || *no_color == '\0'));
}

std::optional<int> ParseReportArgs(const Subcommand& self, const std::vector<std::string>& args,
                                   ReportArgs* r) {
  bool only_paths = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (only_paths || a.empty() || a[0] != '-' || a == "-") {
      r->inputs.push_back(a);
    } else if (a == "--") {
      only_paths = true;
    } else if (IsHelp(a)) {
      fputs(CommandHelp(self).c_str(), stdout);
      return kExitOk;
    } else if (Matches(a, "--format")) {
      if (!TakeValue(args, &i, "--format", &r->format)) return Usage(self, "--format needs a value");
    } else if (IsOutput(a)) {
      if (!TakeOutput(args, &i, &r->out)) return Usage(self, absl::StrCat(a, " needs a file"));
    } else if (Matches(a, "--step-pattern")) {
      if (!TakeValue(args, &i, "--step-pattern", &r->pattern)) {
        return Usage(self, "--step-pattern needs a regular expression");
      }
    } else if (Matches(a, "--user-code") || Matches(a, "--not-user-code")) {
      const bool user = Matches(a, "--user-code");
      const char* flag = user ? "--user-code" : "--not-user-code";
      std::string glob;
      if (!TakeValue(args, &i, flag, &glob) || glob.empty()) {
        return Usage(self, absl::StrCat(flag, " needs a glob (e.g. '*/site-packages/mylib/*')"));
      }
      (user ? r->site.user_code : r->site.not_user_code).push_back(glob);
    } else if (a == "-q" || a == "--quiet") {
      r->quiet = true;
    } else if (Matches(a, "--jobs") || a == "-j") {
      std::string v;
      if (a == "-j") {
        if (i + 1 >= args.size()) return Usage(self, "-j needs a number");
        v = args[++i];
      } else if (!TakeValue(args, &i, "--jobs", &v)) {
        return Usage(self, "--jobs needs a number");
      }
      char* end = nullptr;
      const long n = strtol(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0' || n < 0 || n > 4096) {
        return Usage(self, absl::StrFormat("--jobs needs a number from 0 to 4096, not %s", v));
      }
      r->jobs = static_cast<int>(n);
    } else if (Matches(a, "--color")) {
      if (!TakeValue(args, &i, "--color", &r->color) ||
          (r->color != "auto" && r->color != "always" && r->color != "never")) {
        return Usage(self, "--color needs auto, always or never");
      }
    } else {
      return Usage(self, absl::StrFormat("unknown option %s", a));
    }
  }
  return std::nullopt;
}

// The one table of report formats (`report --format`).
struct ReportFormat {
  const char* name;
  bool needs_timeline;     // renders the analyzed process's timeline, not only the report
  bool needs_output_file;  // binary output: -o is required
  absl::StatusOr<std::string> (*render)(const Report& report, const ProcessAnalysis& analysis);
};

constexpr ReportFormat kFormats[] = {
    {"text", false, false,
     [](const Report& r, const ProcessAnalysis&) -> absl::StatusOr<std::string> {
       return RenderText(r);
     }},
    {"json", false, false,
     [](const Report& r, const ProcessAnalysis&) -> absl::StatusOr<std::string> {
       return RenderJson(r);
     }},
    {"html", true, false,
     [](const Report& r, const ProcessAnalysis& a) -> absl::StatusOr<std::string> {
       return RenderHtml(r, a);
     }},
    {"perfetto", true, false, RenderPerfetto},
    {"sqlite", true, true, RenderSqlite},
};

const ReportFormat* FindFormat(std::string_view name) {
  for (const ReportFormat& f : kFormats) {
    if (name == f.name) return &f;
  }
  return nullptr;
}

std::string FormatNames() {
  std::string s;
  for (const ReportFormat& f : kFormats) absl::StrAppend(&s, s.empty() ? "" : ", ", f.name);
  return s;
}

// Writes `text` to stdout; the exit code. A failed write (a full disk, a
// closed pipe, /dev/full) is an error with its cause, never a silent
// partial report.
int WriteStdout(std::string_view text) {
  errno = 0;
  const size_t wrote = fwrite(text.data(), 1, text.size(), stdout);
  if (wrote == text.size() && fflush(stdout) == 0 && !ferror(stdout)) return kExitOk;
  const int err = errno != 0 ? errno : EIO;
  fprintf(stderr, "stallscope: cannot write the report to standard output: %s\n", strerror(err));
  return kExitUsage;
}

// Writes `text` to stdout or a new file; the exit code.
int Emit(const std::string& out, const std::string& text) {
  if (out.empty()) return WriteStdout(text);
  if (auto st = WriteNewFile(out, text); !st.ok()) {
    fprintf(stderr, "stallscope: %s\n", std::string(st.message()).c_str());
    return kExitUsage;
  }
  return kExitOk;
}

int ReportCmd(const std::vector<std::string>& args) {
  const Subcommand& self = *Find("report");
  ReportArgs parsed;
  if (auto code = ParseReportArgs(self, args, &parsed)) return *code;
  auto& [inputs, format, out, pattern, quiet, color_when, jobs, site] = parsed;
  if (inputs.empty()) return Usage(self, "no trace folder or file given");
  const ReportFormat* fmt = FindFormat(format);
  if (fmt == nullptr) {
    return Usage(self, absl::StrFormat("unknown format %s (%s)", format, FormatNames()));
  }
  if (fmt->needs_output_file && out.empty()) {
    return Usage(self, absl::StrFormat("--format %s writes a file: give -o OUT", format));
  }
  if (auto re = CompileStepPattern(pattern); !re.ok()) {
    return Usage(self, std::string(re.status().message()));
  }
  AnalysisOptions options;
  options.step_pattern = pattern;
  bool color = false;
  ApplyCommon(parsed, &options, &color);
  if (!out.empty() && color_when != "always") color = false;
  ProcessAnalysis analysis;
  auto report = AnalyzePaths(inputs, options, fmt->needs_timeline ? &analysis : nullptr);
  if (!report.ok()) {
    fprintf(stderr, "stallscope: %s\n", std::string(report.status().message()).c_str());
    return kExitBadTrace;
  }
  auto rendered = std::string_view(fmt->name) == "text" && color
                      ? absl::StatusOr<std::string>(RenderText(*report, {.color = true}))
                      : fmt->render(*report, analysis);
  if (!rendered.ok()) {
    fprintf(stderr, "stallscope: %s\n", std::string(rendered.status().message()).c_str());
    return kExitUsage;
  }
  return Emit(out, *rendered);
}

int CompareCmd(const std::vector<std::string>& args) {
  const Subcommand& self = *Find("compare");
  ReportArgs parsed;
  if (auto code = ParseReportArgs(self, args, &parsed)) return *code;
  auto& [inputs, format, out, pattern, quiet, color_when, jobs, site] = parsed;
  if (inputs.size() != 2) return Usage(self, "two runs: BASE and OTHER (folders or files)");
  if (format != "text" && format != "json") {
    return Usage(self, absl::StrFormat("unknown format %s (text or json)", format));
  }
  if (auto re = CompileStepPattern(pattern); !re.ok()) {
    return Usage(self, std::string(re.status().message()));
  }
  AnalysisOptions options;
  options.step_pattern = pattern;
  bool color = false;  // the comparison's text has no colours yet
  ApplyCommon(parsed, &options, &color);
  auto base = AnalyzePaths({inputs[0]}, options);
  if (!base.ok()) {
    fprintf(stderr, "stallscope: %s\n", std::string(base.status().message()).c_str());
    return kExitBadTrace;
  }
  auto other = AnalyzePaths({inputs[1]}, options);
  if (!other.ok()) {
    fprintf(stderr, "stallscope: %s\n", std::string(other.status().message()).c_str());
    return kExitBadTrace;
  }
  const Comparison c = CompareReports(*base, inputs[0], *other, inputs[1]);
  return Emit(out, format == "json" ? RenderCompareJson(c) : RenderCompareText(c));
}

int AuditCmd(const std::vector<std::string>& args) {
  const Subcommand& self = *Find("audit");
  std::vector<std::string> inputs;
  std::string budget_path, baseline, junit, prometheus, pattern = kDefaultStepPattern;
  bool only_paths = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (only_paths || a.empty() || a[0] != '-' || a == "-") {
      inputs.push_back(a);
    } else if (a == "--") {
      only_paths = true;
    } else if (IsHelp(a)) {
      fputs(CommandHelp(self).c_str(), stdout);
      return kExitOk;
    } else if (Matches(a, "--budget")) {
      if (!TakeValue(args, &i, "--budget", &budget_path) || budget_path.empty()) {
        return Usage(self, "--budget needs a file");
      }
    } else if (Matches(a, "--baseline")) {
      if (!TakeValue(args, &i, "--baseline", &baseline) || baseline.empty()) {
        return Usage(self, "--baseline needs a trace folder or file");
      }
    } else if (Matches(a, "--junit")) {
      if (!TakeValue(args, &i, "--junit", &junit) || junit.empty()) {
        return Usage(self, "--junit needs a file");
      }
    } else if (Matches(a, "--prometheus")) {
      if (!TakeValue(args, &i, "--prometheus", &prometheus) || prometheus.empty()) {
        return Usage(self, "--prometheus needs a file");
      }
    } else if (Matches(a, "--step-pattern")) {
      if (!TakeValue(args, &i, "--step-pattern", &pattern)) {
        return Usage(self, "--step-pattern needs a regular expression");
      }
    } else {
      return Usage(self, absl::StrFormat("unknown option %s", a));
    }
  }
  if (inputs.empty()) return Usage(self, "no trace folder or file given");
  if (budget_path.empty()) return Usage(self, "no budget given (--budget FILE)");
  if (auto re = CompileStepPattern(pattern); !re.ok()) {
    return Usage(self, std::string(re.status().message()));
  }
  auto budget = LoadBudget(budget_path);
  if (!budget.ok()) {
    fprintf(stderr, "stallscope audit: %s\n", std::string(budget.status().message()).c_str());
    return kExitUsage;
  }
  if (budget->no_new_hotspots && baseline.empty()) {
    return Usage(self, absl::StrFormat("%s sets no_new_hotspots: give --baseline DIR",
                                       budget_path));
  }
  AnalysisOptions options;
  options.step_pattern = pattern;
  AddSiteRulesFromEnvironment(&options.attribution.site);
  auto run = AnalyzePaths(inputs, options);
  if (!run.ok()) {
    fprintf(stderr, "stallscope: %s\n", std::string(run.status().message()).c_str());
    return kExitBadTrace;
  }
  std::optional<Report> base;
  if (!baseline.empty()) {
    auto b = AnalyzePaths({baseline}, options);
    if (!b.ok()) {
      fprintf(stderr, "stallscope: %s\n", std::string(b.status().message()).c_str());
      return kExitBadTrace;
    }
    base = std::move(*b);
  }
  const AuditResult result = RunAudit(*budget, *run, absl::StrJoin(inputs, " "),
                                      base ? &*base : nullptr);
  if (!junit.empty()) {
    if (auto st = WriteNewFile(junit, RenderJunit(result)); !st.ok()) {
      fprintf(stderr, "stallscope: %s\n", std::string(st.message()).c_str());
      return kExitUsage;
    }
  }
  if (!prometheus.empty()) {
    if (auto st = WriteMetricsFile(prometheus, RenderPrometheus(result)); !st.ok()) {
      fprintf(stderr, "stallscope: %s\n", std::string(st.message()).c_str());
      return kExitUsage;
    }
  }
  fputs(RenderAuditText(result).c_str(), stdout);
  fflush(stdout);
  for (const AuditCheck& c : result.checks) {
    for (const std::string& v : c.violations) {
      fprintf(stderr, "stallscope audit: budget exceeded: %s: %s\n", c.name.c_str(), v.c_str());
    }
  }
  return result.violations() > 0 ? kExitBudget : kExitOk;
}

// Reads a JSON document; an error message on failure.
absl::StatusOr<nlohmann::json> ReadJsonFile(const std::string& path) {
  FILE* f = fopen(path.c_str(), "rb");
  if (f == nullptr) return absl::NotFoundError(absl::StrFormat("%s: %s", path, strerror(errno)));
  std::string text;
  char buf[65536];
  size_t got;
  while ((got = fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, got);
  fclose(f);
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded()) return absl::InvalidArgumentError(absl::StrFormat("%s: not JSON", path));
  return j;
}

int FleetCmd(const std::vector<std::string>& args) {
  const Subcommand& self = *Find("fleet");
  if (args.empty()) return Usage(self, "arrivals, last, rank or report");
  if (IsHelp(args[0])) {
    fputs(CommandHelp(self).c_str(), stdout);
    return kExitOk;
  }
  const std::string step = args[0];
  std::vector<std::string> inputs;
  std::string out, last_path, format = "json", pattern = kDefaultStepPattern;
  for (size_t i = 1; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (IsHelp(a)) {
      fputs(CommandHelp(self).c_str(), stdout);
      return kExitOk;
    } else if (IsOutput(a)) {
      if (!TakeOutput(args, &i, &out)) return Usage(self, absl::StrCat(a, " needs a file"));
    } else if (Matches(a, "--last")) {
      if (!TakeValue(args, &i, "--last", &last_path)) return Usage(self, "--last needs a file");
    } else if (Matches(a, "--format")) {
      if (!TakeValue(args, &i, "--format", &format)) return Usage(self, "--format needs a value");
    } else if (Matches(a, "--step-pattern")) {
      if (!TakeValue(args, &i, "--step-pattern", &pattern)) {
        return Usage(self, "--step-pattern needs a regular expression");
      }
    } else if (!a.empty() && a[0] == '-') {
      return Usage(self, absl::StrFormat("unknown option %s", a));
    } else {
      inputs.push_back(a);
    }
  }
  if (auto re = CompileStepPattern(pattern); !re.ok()) {
    return Usage(self, std::string(re.status().message()));
  }
  AnalysisOptions options;
  options.step_pattern = pattern;
  AddSiteRulesFromEnvironment(&options.attribution.site);
  auto fail = [](const absl::Status& st, int code) {
    fprintf(stderr, "stallscope: %s\n", std::string(st.message()).c_str());
    return code;
  };
  auto load_last = [&]() -> absl::StatusOr<LastArrivals> {
    auto j = ReadJsonFile(last_path);
    if (!j.ok()) return j.status();
    return LastArrivalsFromJson(*j);
  };
  if (step == "arrivals") {
    if (inputs.size() != 1) return Usage(self, "arrivals takes one trace");
    auto t = ReadTraceFile(inputs[0]);
    if (!t.ok()) return fail(t.status(), kExitBadTrace);
    return Emit(out, ArrivalsToJson(CollectArrivals(*t)).dump() + "\n");
  }
  if (step == "last") {
    if (inputs.empty()) return Usage(self, "last takes the ranks' arrivals documents");
    std::vector<RankArrivals> all;
    for (const std::string& path : inputs) {
      auto j = ReadJsonFile(path);
      if (!j.ok()) return fail(j.status(), kExitBadTrace);
      auto a = ArrivalsFromJson(*j);
      if (!a.ok()) return fail(a.status(), kExitBadTrace);
      all.push_back(std::move(*a));
    }
    return Emit(out, LastArrivalsToJson(ReduceArrivals(all)).dump() + "\n");
  }
  if (last_path.empty()) return Usage(self, absl::StrFormat("%s needs --last LAST", step));
  auto last = load_last();
  if (!last.ok()) return fail(last.status(), kExitBadTrace);
  if (step == "rank") {
    if (inputs.size() != 1) return Usage(self, "rank takes one trace");
    auto t = ReadTraceFile(inputs[0]);
    if (!t.ok()) return fail(t.status(), kExitBadTrace);
    const RankArrivals arrivals = CollectArrivals(*t);
    ApplyLastArrivals(&*t, arrivals, *last);
    auto report = AnalyzeTimeline(*t, options);
    if (!report.ok()) return fail(report.status(), kExitUsage);
    return Emit(out, RankSummaryToJson(SummarizeRank(*t, arrivals, *last, *report)).dump() + "\n");
  }
  if (step == "report") {
    if (inputs.empty()) return Usage(self, "report takes the ranks' summaries");
    if (format != "json" && format != "text") return Usage(self, "--format text or json");
    std::vector<RankSummary> ranks;
    std::vector<std::pair<int32_t, int64_t>> candidates;
    size_t with_collectives = 0;
    for (const std::string& path : inputs) {
      auto j = ReadJsonFile(path);
      if (!j.ok()) return fail(j.status(), kExitBadTrace);
      auto s = RankSummaryFromJson(*j);
      if (!s.ok()) return fail(s.status(), kExitBadTrace);
      with_collectives += !s->arrivals.arrivals.empty();
      ranks.push_back(std::move(*s));
    }
    const bool distributed = with_collectives >= 2;
    for (const RankSummary& r : ranks) {
      candidates.emplace_back(distributed ? r.arrivals.rank : -1, r.process.device_ops);
    }
    const size_t primary = PrimaryProcess(candidates);
    auto t = ReadTraceFile(ranks[primary].path);
    if (!t.ok()) return fail(t.status(), kExitBadTrace);
    if (distributed) ApplyLastArrivals(&*t, ranks[primary].arrivals, *last);
    auto report = AnalyzeTimeline(*t, options);
    if (!report.ok()) return fail(report.status(), kExitUsage);
    Report composed;
    if (distributed) {
      composed = ComposeRanksReport(std::move(*report), std::move(ranks), primary);
    } else {
      std::vector<ProcessSummary> processes;
      for (const RankSummary& r : ranks) processes.push_back(r.process);
      composed = ComposeProcessesReport(std::move(*report), std::move(processes), primary);
    }
    return Emit(out, format == "json" ? RenderJson(composed) : RenderText(composed));
  }
  return Usage(self, absl::StrFormat("unknown step %s (arrivals, last, rank or report)", step));
}

int DumpCmd(const std::vector<std::string>& args) {
  const Subcommand& self = *Find("dump");
  std::string path, format = "text", out;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (IsHelp(a)) {
      fputs(CommandHelp(self).c_str(), stdout);
      return kExitOk;
    } else if (Matches(a, "--format")) {
      if (!TakeValue(args, &i, "--format", &format)) return Usage(self, "--format needs a value");
    } else if (IsOutput(a)) {
      if (!TakeOutput(args, &i, &out)) return Usage(self, absl::StrCat(a, " needs a file"));
    } else if (a.size() > 1 && a[0] == '-') {
      return Usage(self, absl::StrFormat("unknown option %s", a));
    } else if (!path.empty()) {
      return Usage(self, "one trace file");
    } else {
      path = a;
    }
  }
  if (path.empty()) return Usage(self, "one trace file");
  if (format != "text" && format != "json") {
    return Usage(self, absl::StrFormat("unknown format %s (text or json)", format));
  }
  auto t = ReadTraceFile(path);
  if (!t.ok()) {
    fprintf(stderr, "stallscope: %s\n", std::string(t.status().message()).c_str());
    return kExitBadTrace;
  }
  return Emit(out, format == "json" ? RenderDumpJson(*t) : RenderDumpText(*t));
}

int HelpCmd(const std::vector<std::string>& args) {
  if (args.empty()) {
    fputs(MainHelp().c_str(), stdout);
    return kExitOk;
  }
  const Subcommand* c = Find(args[0]);
  if (c == nullptr) {
    fprintf(stderr, "stallscope: no command '%s'\n%s", args[0].c_str(), MainHelp().c_str());
    return kExitUsage;
  }
  fputs(CommandHelp(*c).c_str(), stdout);
  return kExitOk;
}

}  // namespace

int RunCli(const std::vector<std::string>& args) {
  if (args.empty()) {
    fputs(MainHelp().c_str(), stderr);
    return kExitUsage;
  }
  if (IsHelp(args[0])) {
    fputs(MainHelp().c_str(), stdout);
    return kExitOk;
  }
  const Subcommand* c = Find(args[0]);
  if (c == nullptr) {
    fprintf(stderr, "stallscope: unknown command '%s'\n%s", args[0].c_str(), MainHelp().c_str());
    return kExitUsage;
  }
  return c->fn(std::vector<std::string>(args.begin() + 1, args.end()));
}

}  // namespace stallscope::analyzer
