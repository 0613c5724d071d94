// Helpers shared by the simgpu tests: the built libcuda.so.1 / libcupti.so.13
// loaded with dlopen by full path and every entry point resolved with dlsym
// (as an application loading the driver would), a clock, the ground-truth trace
// reader, and re-running this test binary with other knobs.
#ifndef STALLSCOPE_TESTS_SIMGPU_SIMGPU_TEST_UTIL_H_
#define STALLSCOPE_TESTS_SIMGPU_SIMGPU_TEST_UTIL_H_

#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>
#include <cupti_activity.h>
#include <cupti_version.h>
#include <dlfcn.h>
#include <stdint.h>
#include <time.h>

#include <string>
#include <vector>

#include "simgpu_hooks.h"

namespace simgpu_test {

inline uint64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ULL + static_cast<uint64_t>(ts.tv_nsec);
}

void* LibCuda();   // dlopen(SIMGPU_LIBCUDA), once
void* LibCupti();  // dlopen(SIMGPU_LIBCUPTI), once
void* Sym(void* lib, const char* name);  // dlsym; fails the test when missing

#define SIMGPU_FN(name) decltype(&::name) name = reinterpret_cast<decltype(&::name)>(Sym(lib, #name))

// The driver entry points the tests use, resolved by their exported names.
struct Cu {
  void* lib = LibCuda();
  SIMGPU_FN(cuInit);
  SIMGPU_FN(cuDeviceGet);
  SIMGPU_FN(cuDeviceGetCount);
  SIMGPU_FN(cuDeviceGetAttribute);
  SIMGPU_FN(cuDevicePrimaryCtxRetain);
  SIMGPU_FN(cuCtxSetCurrent);
  SIMGPU_FN(cuCtxGetCurrent);
  SIMGPU_FN(cuCtxSynchronize);
  SIMGPU_FN(cuModuleLoadData);
  SIMGPU_FN(cuModuleGetFunction);
  SIMGPU_FN(cuLibraryLoadData);
  SIMGPU_FN(cuLibraryGetKernel);
  SIMGPU_FN(cuFuncGetName);
  SIMGPU_FN(cuMemAlloc_v2);
  SIMGPU_FN(cuMemFree_v2);
  SIMGPU_FN(cuMemFreeAsync);
  SIMGPU_FN(cuMemAllocHost_v2);
  SIMGPU_FN(cuMemFreeHost);
  SIMGPU_FN(cuMemcpy);
  SIMGPU_FN(cuMemcpyHtoD_v2);
  SIMGPU_FN(cuMemcpyDtoH_v2);
  SIMGPU_FN(cuMemcpyDtoD_v2);
  SIMGPU_FN(cuMemcpyHtoDAsync_v2);
  SIMGPU_FN(cuMemcpyDtoHAsync_v2);
  SIMGPU_FN(cuMemsetD8_v2);
  SIMGPU_FN(cuMemsetD32_v2);
  SIMGPU_FN(cuMemsetD32Async);
  SIMGPU_FN(cuLaunchKernel);
  SIMGPU_FN(cuLaunchKernel_ptsz);
  SIMGPU_FN(cuLaunchKernelEx);
  SIMGPU_FN(cuStreamCreate);
  SIMGPU_FN(cuStreamDestroy_v2);
  SIMGPU_FN(cuStreamSynchronize);
  SIMGPU_FN(cuStreamQuery);
  SIMGPU_FN(cuStreamWaitEvent);
  SIMGPU_FN(cuStreamGetId);
  SIMGPU_FN(cuStreamGetId_ptsz);
  SIMGPU_FN(cuEventCreate);
  SIMGPU_FN(cuEventRecord);
  SIMGPU_FN(cuEventSynchronize);
  SIMGPU_FN(cuEventQuery);
  SIMGPU_FN(cuEventElapsedTime_v2);
  SIMGPU_FN(cuStreamBeginCapture_v2);
  SIMGPU_FN(cuStreamEndCapture);
  SIMGPU_FN(cuStreamIsCapturing);
  SIMGPU_FN(cuGraphInstantiateWithFlags);
  SIMGPU_FN(cuGraphLaunch);
  SIMGPU_FN(cuGraphDestroy);
  SIMGPU_FN(cuGraphExecDestroy);
  SIMGPU_FN(cuGetProcAddress);
  SIMGPU_FN(cuGetProcAddress_v2);
  SIMGPU_FN(cuGetErrorName);
  void (*trace_flush)() = reinterpret_cast<void (*)()>(Sym(lib, "simgpu_trace_flush"));

  CUmodule module = nullptr;

  // cuInit, primary context of device 0 made current, one module.
  void Setup();
  CUfunction Kernel(const char* name);
  // Launches a 1x1x1 kernel by name on stream s.
  CUresult Launch(const char* name, CUstream s);
  uint64_t StreamId(CUstream s);
};

// One line of SIMGPU_TRACE.
struct TraceOp {
  std::string kind, name;
  uint64_t device = 0, stream = 0, start_ns = 0, end_ns = 0, correlation = 0, bytes = 0,
           queued_ns = 0;
};
std::vector<TraceOp> ReadTrace(const std::string& path);
// This process's trace file (SIMGPU_TRACE with %p expanded), after a flush.
std::vector<TraceOp> FlushAndReadTrace(Cu& cu);
const TraceOp* FindOp(const std::vector<TraceOp>& ops, const std::string& name);

// Runs this test binary again with extra environment entries and a Catch test
// spec; returns its exit status (0 = all its assertions passed).
int RunSelf(const std::vector<std::string>& extra_env, const std::string& test_spec);

}  // namespace simgpu_test

#endif  // STALLSCOPE_TESTS_SIMGPU_SIMGPU_TEST_UTIL_H_
