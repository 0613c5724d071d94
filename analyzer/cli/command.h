// What every subcommand shares: its options are declarations on a CLI11 app
// (one declaration gives parsing, `--help` and the docs' option tables),
// the conventions every subcommand spells the same way (-o/--output,
// --format, -q, --color, -j), and writing a result.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "analyzer/analyze/analysis.h"

namespace stallscope::analyzer {

// Runs a subcommand once its options are parsed; returns the exit code.
using Runner = std::function<int()>;

// The options each subcommand declares with the same spelling and meaning.
struct Conventions {
  std::string format;          // --format (the first of the command's formats by default)
  std::string out;             // -o/--output: a new file; empty: standard output
  bool quiet = false;          // -q/--quiet: errors only
  std::string color = "auto";  // --color auto|always|never
  int jobs = 0;                // -j/--jobs: threads over traces (0: one per core)
};

// Declares --format (one of `formats`, the first the default; `help` says
// what each gives), -o/--output, -q/--quiet, --color and -j/--jobs on `app`.
// `quiet`, `color` and `jobs` say what they do in this command (empty: the
// shared sentence).
struct ConventionHelp {
  std::string format;
  std::string output;
  std::string quiet;
  std::string color;
  std::string jobs;
};
void AddConventions(CLI::App* app, Conventions* c, const std::vector<std::string>& formats,
                    const ConventionHelp& help);

// Rejects an empty value ("needs WHAT").
CLI::Validator NonEmpty(const std::string& what);

// What every subcommand that analyzes traces takes: --step-pattern RE,
// --user-code / --not-user-code GLOB (repeatable), --window-steps N,
// --stream and --stream-above EVENTS.
// With `predictions` (report, run), also --no-predict: the report's
// predicted step times (analyze/predict.h) are made unless it is given.
struct AnalysisArgs {
  std::string step_pattern;
  SiteRule site;
  bool predictions = false;
  bool no_predict = false;
  size_t window_steps = 0;
  bool stream = false;
  uint64_t stream_above = 20'000'000;
};
void AddAnalysisArgs(CLI::App* app, AnalysisArgs* a, bool predictions = false);

// Analysis options from the conventions and the analysis arguments:
// threads, progress on a terminal unless quiet, the step pattern, the
// user-code rule (with the environment's).
AnalysisOptions OptionsFrom(const Conventions& c, const AnalysisArgs& a);
// Whether the text output is coloured: --color always, or auto on a
// terminal without NO_COLOR (never into a file unless always).
bool UseColor(const Conventions& c);
// A progress line on stderr, "stallscope: " and `text` of the work done
// and in all, rewritten in place and cleared once all is done: on a
// terminal, unless quiet; else null.
std::function<void(uint64_t done, uint64_t total)> ProgressLine(
    const Conventions& c, std::function<std::string(uint64_t done, uint64_t total)> text);
// Progress on stderr while a report is written from a trace's file by
// slices (slices done and in all), as the reading's: a ProgressLine, for a
// trace of 64 MB or more; else null.
std::function<void(uint64_t done, uint64_t total)> WritingProgress(const Conventions& c, uint64_t trace_bytes);

// A usage error of subcommand `name`: one line on stderr, then its usage;
// kExitUsage.
int UsageError(std::string_view name, std::string_view message);
// An error with a status (stallscope: MESSAGE); returns `code`.
int Fail(const absl::Status& status, int code);

// Writes `text` to stdout (an unwritable stdout is an error with its cause,
// never a silent partial report) or to the new file `out`; the exit code.
int Emit(const std::string& out, std::string_view text);
// The same for output made a piece at a time: `produce` calls its sink with
// each piece in order. Into a file, all of it or nothing.
int EmitStreamed(const std::string& out,
                 const std::function<absl::Status(const std::function<absl::Status(std::string_view)>&)>& produce);

}  // namespace stallscope::analyzer
