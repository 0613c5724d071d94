// The subcommand table, parsing through CLI11, and help and the docs'
// option tables generated from the same declarations (see cli.h).
#include "analyzer/cli/cli.h"

#include <cstdio>
#include <memory>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "analyzer/cli/commands.h"

namespace stallscope::analyzer {
namespace {

struct Subcommand {
  const char* name;
  const char* usage;     // the usage line after "stallscope NAME"
  const char* summary;
  const char* notes;     // after the options in help: exit codes, environment
  Runner (*declare)(CLI::App* app);
};

// The one table of subcommands; `--help`, `help` and `help --markdown` are
// generated from it and from each subcommand's option declarations.
const Subcommand kSubcommands[] = {
    {"run", "[options] [--] CMD [ARGS...]",
     "Run CMD with the profiler preloaded; write its traces into DIR, print a short summary "
     "(or the whole report, with --format or -o) and exit with CMD's exit code.",
     "Environment: STALLSCOPE_LIBDIR overrides where libstallscope.so is found (default: <dir "
     "of this program>/../lib).",
     DeclareRun},
    {"report", "DIR|FILE... [options]",
     "Analyze traces (every *.sstrace in a folder) and print the report: steps, GPU idle by "
     "cause, forced-sync hotspots, questions, diagnostics.",
     "", DeclareReport},
    {"compare", "BASE OTHER [options]",
     "Analyze two runs (trace folders or files; e.g. real input as BASE, synthetic or cached "
     "input as OTHER) and print per-step and per-cause deltas, hotspots that appeared or "
     "vanished, a verdict, and q2.",
     "", DeclareCompare},
    {"audit", "DIR|FILE... --budget FILE [options]",
     "Check a run against a budget (limits on syncs per step, GPU idle, idle by cause, step "
     "time, hotspots) for nightly jobs; exit 3 when it is exceeded.",
     "Exit codes: 0 within budget; 3 budget exceeded (each violation on stderr); 2 unreadable "
     "trace; 1 usage or a bad budget file (one line: FILE:LINE: what).",
     DeclareAudit},
    {"fleet", "arrivals|last|rank|report OPERANDS... [options]",
     "The steps of a multi-rank analysis one at a time, for running them on a cluster "
     "(python/stallscope/fleet.py submits them to Dask): per-rank maps and their reduces, "
     "exchanging small JSON documents. `report` gives what `stallscope report` gives over all "
     "the ranks' traces.",
     "", DeclareFleet},
    {"whatif", "DIR|FILE... [--remove-sync SITE]... [--scale-host-wait X] [options]",
     "Predict the step time after a fix before making it: the trace's dependency graph "
     "replayed with the sync at SITE removed, or the host's waits or work scaled; says the "
     "predicted step time, the next limit, and the replay's own error.",
     "", DeclareWhatIf},
    {"dump", "FILE [options]",
     "Print one trace as it was read, before any analysis: its rank (when set), calls, device "
     "ops, NCCL call arguments and NVTX ranges in time order, one per line (for debugging the "
     "recorder and the analyzer), or all of it as JSON for tools and tests.",
     "", DeclareDump},
};

constexpr const char* kHelpUsage = "stallscope help [COMMAND | --markdown]";
constexpr const char* kHelpSummary =
    "Show help for stallscope or one of its commands (--markdown: every command's options as "
    "the docs' tables).";

const Subcommand* Find(std::string_view name) {
  for (const Subcommand& s : kSubcommands) {
    if (name == s.name) return &s;
  }
  return nullptr;
}

std::string Usage(const Subcommand& c) {
  return absl::StrFormat("stallscope %s %s", c.name, c.usage);
}

// A subcommand's app with its options declared; `run` gets what runs it.
std::unique_ptr<CLI::App> MakeApp(const Subcommand& c, Runner* run) {
  auto app = std::make_unique<CLI::App>(c.summary, absl::StrCat("stallscope ", c.name));
  // A repeated option takes its last value (lists take every one).
  app->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app->set_help_flag("-h,--help", "show this help");
  Runner r = c.declare(app.get());
  if (run != nullptr) *run = std::move(r);
  return app;
}

// An option's names as written: "-o, --output OUT".
std::string OptionNames(const CLI::Option& o) {
  std::vector<std::string> names;
  for (const std::string& s : o.get_snames()) names.push_back("-" + s);
  for (const std::string& l : o.get_lnames()) names.push_back("--" + l);
  std::string s = absl::StrJoin(names, ", ");
  // The declared type name, without the validators' descriptions CLI11
  // appends after a colon (the description says what is accepted).
  const std::string type = o.get_type_name().substr(0, o.get_type_name().find(':'));
  if (o.get_type_size() != 0 && !type.empty()) absl::StrAppend(&s, " ", type);
  return s;
}

// The options of `app`: not its operands, nor -h/--help (every command
// has it).
std::vector<const CLI::Option*> Options(const CLI::App& app) {
  std::vector<const CLI::Option*> out;
  for (const CLI::Option* o : app.get_options()) {
    if (!o->get_positional() && o != app.get_help_ptr()) out.push_back(o);
  }
  return out;
}

// `text` wrapped to `width` columns, every line after the first indented by
// `indent`.
std::string Wrap(const std::string& text, size_t indent, size_t width) {
  std::string out, line;
  const std::vector<std::string> words = absl::StrSplit(text, ' ', absl::SkipEmpty());
  for (const std::string& word : words) {
    if (!line.empty() && line.size() + 1 + word.size() > width - indent) {
      absl::StrAppend(&out, line, "\n", std::string(indent, ' '));
      line.clear();
    }
    absl::StrAppend(&line, line.empty() ? "" : " ", word);
  }
  return out + line;
}

void AppendOptions(std::string* s, const CLI::App& app) {
  constexpr size_t kColumn = 26, kWidth = 96;
  for (const CLI::Option* o : Options(app)) {
    const std::string names = OptionNames(*o);
    if (names.size() + 3 > kColumn) {
      absl::StrAppend(s, "  ", names, "\n", std::string(kColumn, ' '));
    } else {
      absl::StrAppend(s, "  ", names, std::string(kColumn - 2 - names.size(), ' '));
    }
    absl::StrAppend(s, Wrap(o->get_description(), kColumn, kWidth), "\n");
  }
}

std::string MainHelp() {
  std::string s =
      "stallscope: find out why a GPU sits idle during training.\n\n"
      "usage: stallscope <command> [options]\n\ncommands:\n";
  for (const Subcommand& c : kSubcommands) {
    absl::StrAppend(&s, "  ", absl::StrFormat("%-8s ", c.name), Wrap(c.summary, 11, 96), "\n");
  }
  absl::StrAppend(&s, "  help     ", Wrap(kHelpSummary, 11, 96), "\n");
  absl::StrAppend(&s,
                  "\nRun `stallscope help <command>` or `stallscope <command> --help` for its "
                  "options.\n"
                  "Exit codes: 0 ok; 1 usage; 2 unreadable or invalid trace; 3 an audit "
                  "budget was exceeded; `run` exits with the command's code.\n");
  return s;
}

std::string CommandHelp(const Subcommand& c) {
  auto app = MakeApp(c, nullptr);
  std::string s = absl::StrFormat("usage: %s\n\n%s\n", Usage(c), Wrap(c.summary, 0, 96));
  if (app->get_subcommands({}).empty()) {
    absl::StrAppend(&s, "\noptions:\n");
    AppendOptions(&s, *app);
  }
  for (const CLI::App* sub : app->get_subcommands({})) {
    absl::StrAppend(&s, "\n", c.name, " ", sub->get_name(), ": ",
                    Wrap(sub->get_description(), 2, 96), "\n");
    AppendOptions(&s, *sub);
  }
  if (*c.notes != '\0') absl::StrAppend(&s, "\n", Wrap(c.notes, 0, 96), "\n");
  return s;
}

std::string MarkdownCell(const std::string& s) {
  return absl::StrReplaceAll(s, {{"|", "\\|"}, {"*", "\\*"}, {"<", "&lt;"}, {">", "&gt;"}});
}

void AppendMarkdownTable(std::string* s, const CLI::App& app) {
  absl::StrAppend(s, "| Option | What it does |\n|---|---|\n");
  for (const CLI::Option* o : Options(app)) {
    absl::StrAppend(s, "| `", OptionNames(*o), "` | ", MarkdownCell(o->get_description()), " |\n");
  }
}

// Every subcommand's usage and options as Markdown: docs/analyzer.md's
// "Options" section is this text (tests/docs checks it).
std::string MarkdownHelp() {
  std::string s;
  for (const Subcommand& c : kSubcommands) {
    auto app = MakeApp(c, nullptr);
    absl::StrAppend(&s, "### `", Usage(c), "`\n\n", MarkdownCell(c.summary), "\n\n");
    if (app->get_subcommands({}).empty()) AppendMarkdownTable(&s, *app);
    for (const CLI::App* sub : app->get_subcommands({})) {
      absl::StrAppend(&s, "`", c.name, " ", sub->get_name(), "`: ",
                      MarkdownCell(sub->get_description()), "\n\n");
      AppendMarkdownTable(&s, *sub);
      if (sub != app->get_subcommands({}).back()) s += "\n";
    }
    if (*c.notes != '\0') absl::StrAppend(&s, "\n", MarkdownCell(c.notes), "\n");
    s += "\n";
  }
  s.pop_back();
  return s;
}

int HelpCmd(const std::vector<std::string>& args) {
  if (args.empty()) return Emit("", MainHelp());
  if (args[0] == "--markdown") return Emit("", MarkdownHelp());
  const Subcommand* c = Find(args[0]);
  if (c == nullptr) {
    fprintf(stderr, "stallscope: no command '%s'\n%s", args[0].c_str(), MainHelp().c_str());
    return kExitUsage;
  }
  return Emit("", CommandHelp(*c));
}

int RunSubcommand(const Subcommand& c, const std::vector<std::string>& args) {
  Runner run;
  auto app = MakeApp(c, &run);
  // CLI11 takes the arguments last first.
  std::vector<std::string> reversed(args.rbegin(), args.rend());
  try {
    app->parse(reversed);
  } catch (const CLI::CallForHelp&) {
    return Emit("", CommandHelp(c));
  } catch (const CLI::ParseError& e) {
    return UsageError(c.name, e.what());
  }
  return run();
}

}  // namespace

int UsageError(std::string_view name, std::string_view message) {
  const Subcommand* c = Find(name);
  fprintf(stderr, "stallscope %s: %s\nusage: %s\n", std::string(name).c_str(),
          std::string(message).c_str(), c != nullptr ? Usage(*c).c_str() : "stallscope --help");
  return kExitUsage;
}

int RunCli(const std::vector<std::string>& args) {
  if (args.empty()) {
    fputs(MainHelp().c_str(), stderr);
    return kExitUsage;
  }
  if (args[0] == "--help" || args[0] == "-h") return Emit("", MainHelp());
  const std::vector<std::string> rest(args.begin() + 1, args.end());
  if (args[0] == "help") return HelpCmd(rest);
  const Subcommand* c = Find(args[0]);
  if (c == nullptr) {
    fprintf(stderr, "stallscope: unknown command '%s'\n%s", args[0].c_str(), MainHelp().c_str());
    return kExitUsage;
  }
  return RunSubcommand(*c, rest);
}

}  // namespace stallscope::analyzer
