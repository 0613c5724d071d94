// An application that reaches the driver through a driver layer
// (tests/interpose/shim_driver.cc, path in argv[1]): dlopen, dlsym of its
// cuGetProcAddress_v2, every entry point through it, 5 launches. Prints the
// layer's counts ("lookups N launches M"); exits 1 when a call fails.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <dlfcn.h>
#include <stdio.h>

namespace {

PFN_cuGetProcAddress_v12000 g_gpa = nullptr;

template <typename F>
F Get(const char* name, int version) {
  void* p = nullptr;
  CUdriverProcAddressQueryResult status;
  if (g_gpa(name, &p, version, CU_GET_PROC_ADDRESS_DEFAULT, &status) != CUDA_SUCCESS || !p) {
    fprintf(stderr, "shim_probe: %s not found\n", name);
    return nullptr;
  }
  return reinterpret_cast<F>(p);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  void* shim = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (shim == nullptr) {
    fprintf(stderr, "shim_probe: %s\n", dlerror());
    return 1;
  }
  g_gpa = reinterpret_cast<PFN_cuGetProcAddress_v12000>(dlsym(shim, "cuGetProcAddress_v2"));
  if (g_gpa == nullptr) return 1;
  auto init = Get<PFN_cuInit_v2000>("cuInit", 2000);
  auto retain = Get<PFN_cuDevicePrimaryCtxRetain_v7000>("cuDevicePrimaryCtxRetain", 7000);
  auto set = Get<PFN_cuCtxSetCurrent_v4000>("cuCtxSetCurrent", 4000);
  auto load = Get<PFN_cuModuleLoadData_v2000>("cuModuleLoadData", 2000);
  auto function = Get<PFN_cuModuleGetFunction_v2000>("cuModuleGetFunction", 2000);
  auto launch = Get<PFN_cuLaunchKernel_v4000>("cuLaunchKernel", 4000);
  auto sync = Get<PFN_cuCtxSynchronize_v2000>("cuCtxSynchronize", 2000);
  if (!init || !retain || !set || !load || !function || !launch || !sync) return 1;
  CUcontext ctx;
  CUmodule mod;
  CUfunction f;
  static const char kImage[] = "shim probe";
  if (init(0) || retain(&ctx, 0) || set(ctx) || load(&mod, kImage) ||
      function(&f, mod, "shim_kernel")) {
    fprintf(stderr, "shim_probe: set-up failed\n");
    return 1;
  }
  for (int i = 0; i < 5; ++i) {
    if (launch(f, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr) != CUDA_SUCCESS) return 1;
  }
  if (sync() != CUDA_SUCCESS) return 1;
  auto lookups = reinterpret_cast<int (*)()>(dlsym(shim, "shim_lookups"));
  auto launches = reinterpret_cast<int (*)()>(dlsym(shim, "shim_launches"));
  printf("lookups %d launches %d\n", lookups(), launches());
  return 0;
}
