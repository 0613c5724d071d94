// A driver layer between an application and the driver, as a CUDA shim or a
// forward-compatibility library is: it exports cuGetProcAddress_v2, finds
// the layer below (SHIM_LOWER, a libcuda.so.1 path) lazily with dlopen +
// dlsym, forwards every lookup to it, hands out its own cuLaunchKernel and
// counts what passes through it (shim_lookups, shim_launches). Used by
// tests/interpose/shim_test.py: under stallscope, the application's calls
// must still go through this layer.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include <atomic>
#include <mutex>

namespace {

std::atomic<int> g_lookups{0}, g_launches{0};
std::once_flag g_once;
PFN_cuGetProcAddress_v12000 g_lower_gpa = nullptr;
PFN_cuLaunchKernel_v4000 g_lower_launch = nullptr;

void FindLower() {
  const char* path = getenv("SHIM_LOWER");
  void* lower = path != nullptr ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : nullptr;
  if (lower == nullptr) return;
  g_lower_gpa = reinterpret_cast<PFN_cuGetProcAddress_v12000>(dlsym(lower, "cuGetProcAddress_v2"));
  if (g_lower_gpa == nullptr) return;
  CUdriverProcAddressQueryResult status;
  void* launch = nullptr;
  if (g_lower_gpa("cuLaunchKernel", &launch, 4000, CU_GET_PROC_ADDRESS_DEFAULT, &status) ==
      CUDA_SUCCESS) {
    g_lower_launch = reinterpret_cast<PFN_cuLaunchKernel_v4000>(launch);
  }
}

CUresult CUDAAPI ShimLaunch(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                            unsigned by, unsigned bz, unsigned shmem, CUstream s, void** params,
                            void** extra) {
  g_launches.fetch_add(1);
  if (g_lower_launch == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  return g_lower_launch(f, gx, gy, gz, bx, by, bz, shmem, s, params, extra);
}

}  // namespace

extern "C" __attribute__((visibility("default"))) CUresult CUDAAPI cuGetProcAddress_v2(
    const char* symbol, void** pfn, int version, cuuint64_t flags,
    CUdriverProcAddressQueryResult* status) {
  g_lookups.fetch_add(1);
  std::call_once(g_once, FindLower);
  if (g_lower_gpa == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  CUresult r = g_lower_gpa(symbol, pfn, version, flags, status);
  if (r == CUDA_SUCCESS && pfn != nullptr && symbol != nullptr &&
      strcmp(symbol, "cuLaunchKernel") == 0 && (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) == 0) {
    *pfn = reinterpret_cast<void*>(&ShimLaunch);
  }
  return r;
}

extern "C" __attribute__((visibility("default"))) int shim_lookups() { return g_lookups.load(); }
extern "C" __attribute__((visibility("default"))) int shim_launches() { return g_launches.load(); }
