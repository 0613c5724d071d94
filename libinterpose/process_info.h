// What the recorder reads of its process and machine: an invariant TSC, the
// rank in a distributed job, the trace file's name, the loaded modules.
#pragma once

#include <cstdint>
#include <vector>

#include "trace_format.h"

namespace stallscope::recorder {

// constant_tsc and nonstop_tsc in /proc/cpuinfo: the TSC ticks at a fixed
// rate in every state.
bool TscIsInvariant();

// A non-negative integer from the environment; -1 when unset or malformed.
int EnvInt(const char* name);

// The process's place in a distributed job, from the first launcher whose
// rank variable is set: torchrun/torch.distributed, Open MPI, PMI (MPICH,
// Intel MPI), Slurm. -1 for what that launcher does not say.
trace::RankRecord ReadRankInfo();

// Creates the process's trace file in $STALLSCOPE_OUT (default "."), named
// after `rank` (from ReadRankInfo, whose host it takes):
// <dir>/<host>-<pid>.sstrace, or with a rank
// <dir>/rank<R>[.<local rank>]-<host>-<pid>.sstrace (rank zero-padded to 5
// digits so that names sort by rank); "-N" is added if the name exists.
// The descriptor, or -1 with errno.
int OpenTraceFile(const trace::RankRecord& rank, uint32_t pid);

// The loaded modules (dl_iterate_phdr) as a kModule chunk's payload:
// load address, extent, path and GNU build id of each; `generation` changes
// when a module is loaded or unloaded.
struct ModuleScan {
  std::vector<unsigned char> out;
  uint32_t count = 0;
  unsigned long long generation = 0;
};
ModuleScan ScanModules();
// ScanModules' generation alone: the loader's counts of loads and unloads,
// from its first entry (nothing copied, no system call), what the writer
// reads at each drain before scanning again.
unsigned long long ModuleGeneration();

}  // namespace stallscope::recorder
