// See sim_blas_launch.h.
#include "sim_blas_launch.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>

#include <cudaTypedefs.h>

#include <atomic>
#include <mutex>
#include <new>
#include <string>
#include <unordered_map>

#include "simgpu_hooks.h"

namespace simgpu_blas {
namespace {

struct Driver {
  PFN_cuLaunchKernel_v4000 launch = nullptr;
  PFN_cuModuleLoadData_v2000 load = nullptr;
  PFN_cuModuleGetFunction_v2000 get_function = nullptr;
  PFN_cuCtxGetCurrent_v4000 current = nullptr;
  PFN_cuStreamSynchronize_v2000 sync = nullptr;
  SimgpuSetFunctionDurationFn set_duration = nullptr;
  double flops_per_ns = 50e3;  // 50 TFLOP/s
  std::mutex mu;
  std::unordered_map<CUcontext, CUmodule> modules;
};

Driver* Load() {
  auto* d = new Driver;
  void* lib = dlopen("libcuda.so.1", RTLD_NOW);
  if (lib == nullptr) return d;
  auto gpa = reinterpret_cast<PFN_cuGetProcAddress_v12000>(dlsym(lib, "cuGetProcAddress_v2"));
  if (gpa == nullptr) return d;
  auto get = [gpa](const char* name, int version, void** out) {
    CUdriverProcAddressQueryResult status;
    if (gpa(name, out, version, CU_GET_PROC_ADDRESS_DEFAULT, &status) != CUDA_SUCCESS) *out = nullptr;
  };
  get("cuLaunchKernel", 4000, reinterpret_cast<void**>(&d->launch));
  get("cuModuleLoadData", 2000, reinterpret_cast<void**>(&d->load));
  get("cuModuleGetFunction", 2000, reinterpret_cast<void**>(&d->get_function));
  get("cuCtxGetCurrent", 4000, reinterpret_cast<void**>(&d->current));
  get("cuStreamSynchronize", 2000, reinterpret_cast<void**>(&d->sync));
  d->set_duration =
      reinterpret_cast<SimgpuSetFunctionDurationFn>(dlsym(lib, "simgpu_set_function_duration"));
  if (const char* v = getenv("SIMGPU_GEMM_TFLOPS")) {
    char* end = nullptr;
    const double tflops = strtod(v, &end);
    if (end != v && tflops > 0) d->flops_per_ns = tflops * 1e3;
  }
  return d;
}

std::atomic<Driver*> g_loaded{nullptr};

Driver& Drv() {
  static Driver* d = Load();  // never destroyed: launches may come from atexit handlers
  g_loaded.store(d, std::memory_order_relaxed);
  return *d;
}

// A fork child has only the forking thread: the lock another thread held at
// the fork would stay held for ever. (Nothing is loaded here: a child
// handler must not dlopen.)
__attribute__((constructor)) void RegisterForkHandler() {
  pthread_atfork(nullptr, nullptr, [] {
    if (Driver* d = g_loaded.load(std::memory_order_relaxed)) new (&d->mu) std::mutex();
  });
}

}  // namespace

CUresult LaunchWork(const char* name, double flops, CUstream stream) {
  Driver& d = Drv();
  if (d.launch == nullptr || d.load == nullptr || d.get_function == nullptr ||
      d.current == nullptr) {
    return CUDA_ERROR_NOT_FOUND;
  }
  CUcontext ctx = nullptr;
  if (CUresult r = d.current(&ctx); r != CUDA_SUCCESS || ctx == nullptr) {
    return r != CUDA_SUCCESS ? r : CUDA_ERROR_INVALID_CONTEXT;
  }
  CUfunction f = nullptr;
  {
    std::lock_guard<std::mutex> lk(d.mu);
    CUmodule& mod = d.modules[ctx];
    if (mod == nullptr) {
      static const char kImage[] = "simulated cuBLAS kernels";
      if (CUresult r = d.load(&mod, kImage); r != CUDA_SUCCESS) {
        mod = nullptr;
        return r;
      }
    }
    if (CUresult r = d.get_function(&f, mod, name); r != CUDA_SUCCESS) return r;
  }
  if (d.set_duration != nullptr) {
    d.set_duration(f, static_cast<uint64_t>(3000.0 + flops / d.flops_per_ns));
  }
  return d.launch(f, 1, 1, 1, 128, 1, 1, 0, stream, nullptr, nullptr);
}

CUresult SyncStream(CUstream stream) {
  Driver& d = Drv();
  if (d.sync == nullptr) return CUDA_ERROR_NOT_FOUND;
  return d.sync(stream);
}

}  // namespace simgpu_blas
