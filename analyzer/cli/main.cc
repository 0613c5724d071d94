// Entry point of the `stallscope` command (see cli.h).
#include <malloc.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include <cstdint>
#include <string>
#include <vector>

#include "analyzer/cli/cli.h"

int main(int argc, char** argv) {
  // The analyzer allocates large record vectors, frees them and allocates
  // others of similar size phase after phase. Served from the heap and kept
  // there, freed memory is reused instead of being unmapped and faulted in
  // (zeroed by the kernel) again: 15% fewer page faults and about 7% less
  // time on a large trace, for about 6% more peak memory (docs/analyzer.md,
  // Performance). A heap allocation that fails in a thread's arena is
  // retried in the main one.
  mallopt(M_MMAP_MAX, 0);
  mallopt(M_TRIM_THRESHOLD, INT32_MAX);
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
