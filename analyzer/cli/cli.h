// The `stallscope` command line: one table of subcommands that also
// generates `--help`. Exit codes: 0 ok; 1 usage; 2 unreadable or invalid
// trace; 3 an audit budget was exceeded; `run` exits with the command's code.
#pragma once

#include <string>
#include <vector>

namespace stallscope::analyzer {

inline constexpr int kExitOk = 0;
inline constexpr int kExitUsage = 1;
inline constexpr int kExitBadTrace = 2;
inline constexpr int kExitBudget = 3;  // `audit`: a budget was exceeded

// args excludes argv[0].
int RunCli(const std::vector<std::string>& args);

}  // namespace stallscope::analyzer
