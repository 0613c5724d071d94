// Entry point of the `stallscope` command (see cli.h).
#include <cerrno>
#include <cstdio>
#include <cstring>

#include <cstdint>
#include <string>
#include <vector>

#include "analyzer/cli/cli.h"
#include "analyzer/model/timeline.h"

int main(int argc, char** argv) {
  // Freed memory kept on the heap for reuse (timeline.h).
  stallscope::analyzer::KeepFreedMemory();
  int rc = stallscope::analyzer::RunCli(std::vector<std::string>(argv + 1, argv + argc));
  // Whatever a command printed (dump, audit, help) reached its reader, or
  // the exit code says it did not.
  errno = 0;
  if (fflush(stdout) != 0 || ferror(stdout)) {
    if (rc == 0) {
      fprintf(stderr, "stallscope: cannot write to standard output: %s\n",
              strerror(errno != 0 ? errno : EIO));
      rc = 1;
    }
  }
  return rc;
}
