// cuGetProcAddress / cuGetProcAddress_v2 of the simulated driver, answered
// from the one table in sim_proc_table.def, the way the real driver answers:
// base name + cudaVersion select the ABI variant, flag 2 the per-thread one.
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sim_cuda.h"

namespace {

// SIMGPU_LOOKUP_LOG=PATH: every request is appended to PATH as one line
// "name version flags" (an empty name gives " 0 0"), in call order, so tests
// can compare a runtime's lookups with NVIDIA's (shared/reference/
// cudart13-driver-requests.txt). Read once per process.
void LogLookup(const char* symbol, int version, cuuint64_t flags) {
  static const int fd = [] {
    const char* path = getenv("SIMGPU_LOOKUP_LOG");
    if (path == nullptr || *path == '\0') return -1;
    return open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  }();
  if (fd < 0) return;
  char line[512];
  int n = snprintf(line, sizeof line, "%s %d %llu\n", symbol != nullptr ? symbol : "(null)",
                   version, static_cast<unsigned long long>(flags));
  if (n <= 0) return;
  if (n >= static_cast<int>(sizeof line)) {
    n = sizeof line - 1;
    line[n - 1] = '\n';
  }
  ssize_t w = write(fd, line, static_cast<size_t>(n));  // one write: lines never interleave
  (void)w;
}

struct ProcEntry {
  const char* base;
  const char* symbol;
  void* fn;
  int min_version;
  bool per_thread;
};

const ProcEntry kProcs[] = {
#define SIMGPU_PROC(base, symbol, version, per_thread) \
  {#base, #symbol, reinterpret_cast<void*>(&symbol), version, per_thread != 0},
#include "sim_proc_table.def"
#undef SIMGPU_PROC
};

CUresult Lookup(const char* symbol, void** pfn, int version, cuuint64_t flags,
                CUdriverProcAddressQueryResult* status) {
  LogLookup(symbol, version, flags);
  if (status != nullptr) *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  if (pfn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *pfn = nullptr;
  if (symbol == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (flags & ~static_cast<cuuint64_t>(CU_GET_PROC_ADDRESS_LEGACY_STREAM |
                                       CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  bool want_pt = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
  const ProcEntry* best_pt = nullptr;
  const ProcEntry* best = nullptr;
  bool known = false;
  for (const ProcEntry& e : kProcs) {
    if (strcmp(e.base, symbol) != 0) continue;
    known = true;
    if (e.min_version > version) continue;
    const ProcEntry*& slot = e.per_thread ? best_pt : best;
    if (slot == nullptr || e.min_version > slot->min_version) slot = &e;
  }
  if (!known) return CUDA_ERROR_NOT_FOUND;
  const ProcEntry* pick = (want_pt && best_pt != nullptr) ? best_pt : best;
  if (pick == nullptr) {
    if (status != nullptr) *status = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
    return CUDA_ERROR_NOT_FOUND;
  }
  *pfn = pick->fn;
  if (status != nullptr) *status = CU_GET_PROC_ADDRESS_SUCCESS;
  return CUDA_SUCCESS;
}

}  // namespace

extern "C" {

CUresult CUDAAPI cuGetProcAddress_v2(const char* symbol, void** pfn, int cudaVersion,
                                     cuuint64_t flags, CUdriverProcAddressQueryResult* status) {
  return Lookup(symbol, pfn, cudaVersion, flags, status);
}

CUresult CUDAAPI cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion,
                                  cuuint64_t flags) {
  return Lookup(symbol, pfn, cudaVersion, flags, nullptr);
}

}  // extern "C"
