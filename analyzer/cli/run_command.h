// `stallscope run`: runs a command with libstallscope.so preloaded (and NVTX
// injection set) writing traces into a folder, forwards SIGINT/SIGTERM, then
// prints a short summary and exits with the command's exit code.
#pragma once

#include <string>
#include <vector>

#include "analyzer/cli/command.h"

namespace stallscope::analyzer {

struct RunOptions {
  std::string out_dir;  // empty: stallscope-YYYYMMDD-HHMMSS in the cwd
  bool sim = false;     // put <libdir>/simgpu first on LD_LIBRARY_PATH
  // Flight-recorder mode (STALLSCOPE_RING): SECONDS or MEGABYTES (`MB`);
  // empty: every record goes to the file.
  std::string ring;
  // The regression trigger (STALLSCOPE_RING_REGRESSION): K:M[:N] or off;
  // empty: the library's default.
  std::string ring_regression;
  // Device timing in sampled windows (STALLSCOPE_DEVICE_SAMPLE): one step in
  // N; 0: the environment's (continuous when unset).
  int device_sample = 0;
  std::vector<std::string> command;
  // After the command: one summary line on stderr, or with `full_report`
  // the report in report.format to report.out (standard output when
  // empty); report.quiet: neither, errors only.
  Conventions report;
  AnalysisArgs analysis;
  bool full_report = false;
};

// <dir of /proc/self/exe>/../lib, or $STALLSCOPE_LIBDIR when set.
std::string LibDir();

// Returns the exit code: the command's, 128+signal when it was killed, 127
// when it could not be found, 126 when it could not be run, 1 when the trace
// folder could not be made.
int RunUnderStallscope(const RunOptions& options);

}  // namespace stallscope::analyzer
