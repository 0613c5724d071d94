// The native stack at a blocking call, walked from per-address rules cached
// by the calling thread (docs/performance.md, "Native stacks at blocking
// calls"). libgcc's
// unwinder finds each frame's FDE and runs its CFA program on every call; a
// training loop blocks at the same few places every step, so each return
// address's rule (where the caller's frame starts, and where the return
// address and %rbp were saved) is worked out once, from the same FDE, and
// then only applied. Any frame whose rule is not one of those (a signal
// frame, a DWARF expression, a CFA on another register, no FDE) sends the
// whole stack to libgcc, so the answer is always libgcc's.
#pragma once

#include <link.h>

#include <cstdint>

namespace stallscope::recorder {

// Every walk of the loaded modules (dl_iterate_phdr) that the library makes
// goes through WalkModules, under a lock that fork's prepare handler holds
// across the fork (HoldModuleWalks, then ReleaseModuleWalks in the parent and
// the child). glibc 2.36's fork does not reset the loader's lock that
// dl_iterate_phdr holds: a fork while another thread walked left the child's
// first walk (its writer's module scan, its first blocking call's unwind)
// blocked forever (robustness_fork_storm).
int WalkModules(int (*callback)(dl_phdr_info*, size_t, void*), void* arg);
void HoldModuleWalks();
void ReleaseModuleWalks();

// One thread's cache of rules (allocated at its first walk).
struct UnwindRules;

// Writes into `pcs` the return addresses of the calling thread's frames,
// leaving out the `skip` innermost (0: the frame of FastBacktrace itself),
// as _Unwind_Backtrace hands them to a callback that records
// _Unwind_GetIP: at most `max`, ending before the first that is 0 or for
// which `stop` is true. Returns how many it wrote, or -1 when this stack
// needs libgcc's unwinder (nothing written is to be used). `*rules` is the
// thread's cache, allocated on first use, dropped and rebuilt whenever a
// module was unloaded since it was built.
int FastBacktrace(UnwindRules** rules, uint64_t* pcs, int max, int skip, bool (*stop)(uint64_t));

// The same stack from libgcc's unwinder (`skip`: 0 is this function's own
// frame).
int LibgccBacktrace(uint64_t* pcs, int max, int skip, bool (*stop)(uint64_t));

void FreeUnwindRules(UnwindRules* rules);

// Rules worked out from FDEs, and walks that went to libgcc (the thread's,
// since its cache was built), for tests.
struct UnwindCounts {
  uint64_t rules_built = 0;
  uint64_t fallbacks = 0;
};
UnwindCounts CountsOf(const UnwindRules* rules);

}  // namespace stallscope::recorder
