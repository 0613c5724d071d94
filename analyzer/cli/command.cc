// The conventions every subcommand shares, and writing a result (see command.h).
#include "analyzer/cli/command.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "analyzer/analyze/hotspots.h"
#include "analyzer/analyze/steps.h"
#include "analyzer/cli/cli.h"
#include "analyzer/model/format.h"
#include "analyzer/model/output_file.h"

namespace stallscope::analyzer {
namespace {

// Progress is shown for files of this size or more.
constexpr uint64_t kProgressMinBytes = uint64_t{64} << 20;

// Progress on stderr while a large file is read, only on a terminal.
void ShowProgress(const std::string& path, uint64_t done, uint64_t total) {
  if (total < kProgressMinBytes) return;
  if (done >= total) {
    fputs("\r\033[K", stderr);
  } else {
    fprintf(stderr, "\rstallscope: reading %s %3d%% (%d of %d MB)", BaseName(path).c_str(),
            static_cast<int>(100 * done / total), static_cast<int>(done >> 20),
            static_cast<int>(total >> 20));
  }
  fflush(stderr);
}

std::string Or(const std::string& text, const char* fallback) {
  return text.empty() ? fallback : text;
}

}  // namespace

CLI::Validator NonEmpty(const std::string& what) {
  return CLI::Validator(
      [what](std::string& value) { return value.empty() ? "needs " + what : std::string(); }, "",
      "non-empty");
}

void AddConventions(CLI::App* app, Conventions* c, const std::vector<std::string>& formats,
                    const ConventionHelp& help) {
  c->format = formats.front();
  app->add_option("--format", c->format,
                  help.format.empty()
                      ? absl::StrCat("the output's format: ", absl::StrJoin(formats, ", "),
                                     " (default ", formats.front(), ")")
                      : absl::StrCat(help.format, " (default ", formats.front(), ")"))
      ->type_name("F")
      ->check(CLI::IsMember(formats));
  // An OUT that exists is refused as the options are read, before a job
  // runs or a trace is read (the write refuses it again, should it appear
  // meanwhile).
  app->add_option("-o,--output", c->out,
                  Or(help.output, "write to OUT (a new file, never overwritten, mode 0640) "
                                  "instead of standard output"))
      ->type_name("OUT")
      ->check(CLI::Validator(
          [](std::string& path) {
            struct stat st;
            return lstat(path.c_str(), &st) == 0
                       ? path + ": already exists; stallscope never overwrites a file"
                       : std::string();
          },
          "", "new file"));
  app->add_flag("-q,--quiet", c->quiet, Or(help.quiet, "no progress on stderr (errors only)"));
  app->add_option("--color", c->color,
                  Or(help.color, "colour the text output: auto (on a terminal, unless NO_COLOR "
                                 "is set), always or never (default auto)"))
      ->type_name("WHEN")
      ->check(CLI::IsMember({"auto", "always", "never"}));
  app->add_option("-j,--jobs", c->jobs,
                  Or(help.jobs, "threads reading and analyzing the traces (default 0: one per "
                                "core)"))
      ->type_name("N")
      ->check(CLI::Range(0, 4096));
}

void AddAnalysisArgs(CLI::App* app, AnalysisArgs* a, bool predictions) {
  a->step_pattern = kDefaultStepPattern;
  a->predictions = predictions;
  if (predictions) {
    app->add_flag("--no-predict", a->no_predict,
                  "leave out the predicted step times (each top hotspot removed, all of them, "
                  "the launch-bound stretches in CUDA graphs: a replay of the trace each)");
  }
  app->add_option("--step-pattern", a->step_pattern,
                  absl::StrCat("NVTX range names that mark steps (default ", kDefaultStepPattern,
                               "; a leading (?i) ignores case)"))
      ->type_name("RE")
      ->check([](const std::string& re) -> std::string {
        auto compiled = CompileStepPattern(re);
        return compiled.ok() ? "" : std::string(compiled.status().message());
      });
  app->add_option("--window-steps", a->window_steps,
                  "attribute idle N steps at a time, each window from the part of the trace it "
                  "reads (the report is the same; default 0: all steps at once, or read by slices, "
                  "about 200,000 calls and ops a window; whatif by windows: the steps a window replays)")
      ->type_name("N")
      ->check(CLI::Range(0, 1 << 30));
  app->add_flag("--stream", a->stream,
                "read the trace file by slices, a window of steps at a time (the report is the "
                "same): one trace's whole report, holding a window at a time, when it makes no "
                "predictions (--no-predict, or past 1 M events), and its html page, else the "
                "idle attribution and hotspots; traces with no steps, marked or repeating, are analyzed "
                "in memory; a folder's traces are read one at a time, each by slices where it can be "
                "(a rank of a distributed run too, its NCCL waits applied to each slice); whatif "
                "replays every step a window of steps at a time, each from its part of the file");
  app->add_option("--stream-above", a->stream_above,
                  "report one trace as --stream does when it holds more calls and device ops "
                  "than this, and read a folder's traces one at a time when they hold more together, "
                  "each past it by slices where it can be (default 20000000: about 1 GB read whole)")
      ->type_name("EVENTS");
  const struct {
    const char* name;
    std::vector<std::string>* globs;
    const char* help;
  } kGlobs[] = {
      {"--user-code", &a->site.user_code,
       "frames whose file (or native module) matches are user code, for a hotspot's site "
       "(repeatable; e.g. '*/site-packages/mylib/*')"},
      {"--not-user-code", &a->site.not_user_code,
       "frames that match are not user code (repeatable); by default the standard library, "
       "site-packages, dist-packages and stallscope are not"},
  };
  for (const auto& g : kGlobs) {
    app->add_option(g.name, *g.globs, g.help)
        ->type_name("GLOB")
        ->allow_extra_args(false)
        ->check(NonEmpty("a glob"));
  }
}

AnalysisOptions OptionsFrom(const Conventions& c, const AnalysisArgs& a) {
  AnalysisOptions options;
  options.step_pattern = a.step_pattern;
  options.jobs = c.jobs;
  options.attribution.site = a.site;
  options.predict = a.predictions && !a.no_predict;
  options.window_steps = a.window_steps;
  options.stream = a.stream;
  options.stream_above_events = a.stream_above;
  AddSiteRulesFromEnvironment(&options.attribution.site);
  if (!c.quiet && isatty(STDERR_FILENO)) options.progress = ShowProgress;
  return options;
}

bool UseColor(const Conventions& c) {
  if (c.color == "always") return true;
  if (c.color != "auto" || !c.out.empty()) return false;
  const char* no_color = getenv("NO_COLOR");
  return isatty(STDOUT_FILENO) && (no_color == nullptr || *no_color == '\0');
}

std::function<void(uint64_t, uint64_t)> ProgressLine(const Conventions& c,
                                                     std::function<std::string(uint64_t, uint64_t)> text) {
  if (c.quiet || !isatty(STDERR_FILENO)) return nullptr;
  return [text = std::move(text)](uint64_t done, uint64_t total) {
    if (done >= total) {
      fputs("\r\033[K", stderr);
    } else {
      fprintf(stderr, "\rstallscope: %s", text(done, total).c_str());
    }
    fflush(stderr);
  };
}

std::function<void(uint64_t, uint64_t)> WritingProgress(const Conventions& c, uint64_t trace_bytes) {
  if (trace_bytes < kProgressMinBytes) return nullptr;
  const std::string what = c.out.empty() ? "the report" : BaseName(c.out);
  return ProgressLine(c, [what](uint64_t done, uint64_t total) {
    return absl::StrFormat("writing %s %3d%%", what, static_cast<int>(100 * done / std::max<uint64_t>(total, 1)));
  });
}

int Fail(const absl::Status& status, int code) {
  fprintf(stderr, "stallscope: %s\n", std::string(status.message()).c_str());
  return code;
}

int Emit(const std::string& out, std::string_view text) {
  if (!out.empty()) {
    if (auto st = WriteNewFile(out, text); !st.ok()) return Fail(st, kExitUsage);
    return kExitOk;
  }
  errno = 0;
  const size_t wrote = fwrite(text.data(), 1, text.size(), stdout);
  if (wrote == text.size() && fflush(stdout) == 0 && !ferror(stdout)) return kExitOk;
  const int err = errno != 0 ? errno : EIO;
  fprintf(stderr, "stallscope: cannot write the report to standard output: %s\n", strerror(err));
  return kExitUsage;
}

int EmitStreamed(const std::string& out,
                 const std::function<absl::Status(const std::function<absl::Status(std::string_view)>&)>& produce) {
  if (!out.empty()) {
    if (auto st = WriteNewFileStreamed(out, produce); !st.ok()) return Fail(st, kExitUsage);
    return kExitOk;
  }
  int err = 0;
  auto st = produce([&](std::string_view piece) {
    errno = 0;
    if (fwrite(piece.data(), 1, piece.size(), stdout) == piece.size()) return absl::OkStatus();
    err = errno != 0 ? errno : EIO;
    return absl::InternalError("standard output");
  });
  if (st.ok() && (fflush(stdout) != 0 || ferror(stdout))) err = errno != 0 ? errno : EIO;
  if (st.ok() && err == 0) return kExitOk;
  if (err == 0) return Fail(st, kExitUsage);
  fprintf(stderr, "stallscope: cannot write the report to standard output: %s\n", strerror(err));
  return kExitUsage;
}

}  // namespace stallscope::analyzer
