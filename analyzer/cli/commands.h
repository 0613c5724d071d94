// The subcommands: each declares its options on a CLI11 app and returns the
// function that runs it once they are parsed (one file each).
#pragma once

#include "analyzer/cli/command.h"

namespace stallscope::analyzer {

Runner DeclareRun(CLI::App* app);
Runner DeclareReport(CLI::App* app);
Runner DeclareCompare(CLI::App* app);
Runner DeclareAudit(CLI::App* app);
Runner DeclareFleet(CLI::App* app);
Runner DeclareDump(CLI::App* app);
Runner DeclareWhatIf(CLI::App* app);

// `report --format`'s names, and what each gives (run takes them too).
std::vector<std::string> ReportFormatNames();
extern const char* kReportFormatHelp;
// Analyzes `inputs` and writes the report as `common` says (format, -o,
// colour); usage errors name `command`. The exit code.
int WriteReport(std::string_view command, const std::vector<std::string>& inputs,
                const Conventions& common, const AnalysisOptions& options);

}  // namespace stallscope::analyzer
