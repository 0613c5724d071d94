// rb_dlopen N: a job that reaches libcuda only through dlopen/dlsym (no link
// to it), uses it, dlcloses it, opens it again and uses it again; N launches
// each time (kernels "first_open", "second_open"). Under stallscope it must
// not crash and every call must be recorded (tests/robustness/robustness.py).
#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

namespace {

const char* kImage = ".version 8.0\n.target sm_75\n.address_size 64\n";

void Check(CUresult r, const char* what) {
  if (r != CUDA_SUCCESS) {
    fprintf(stderr, "rb_dlopen: %s failed: %d\n", what, int(r));
    exit(1);
  }
}

int DlReopen(int n) {
  for (int round = 0; round < 2; ++round) {
    void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      fprintf(stderr, "dlopen: %s\n", dlerror());
      return 1;
    }
    auto init = reinterpret_cast<CUresult (*)(unsigned)>(dlsym(h, "cuInit"));
    auto dev_get = reinterpret_cast<CUresult (*)(CUdevice*, int)>(dlsym(h, "cuDeviceGet"));
    auto retain = reinterpret_cast<CUresult (*)(CUcontext*, CUdevice)>(dlsym(h, "cuDevicePrimaryCtxRetain"));
    auto set = reinterpret_cast<CUresult (*)(CUcontext)>(dlsym(h, "cuCtxSetCurrent"));
    auto load = reinterpret_cast<CUresult (*)(CUmodule*, const void*)>(dlsym(h, "cuModuleLoadData"));
    auto get_fn = reinterpret_cast<CUresult (*)(CUfunction*, CUmodule, const char*)>(dlsym(h, "cuModuleGetFunction"));
    auto launch = reinterpret_cast<decltype(&cuLaunchKernel)>(dlsym(h, "cuLaunchKernel"));
    auto sync = reinterpret_cast<CUresult (*)()>(dlsym(h, "cuCtxSynchronize"));
    if (!init || !dev_get || !retain || !set || !load || !get_fn || !launch || !sync) {
      fprintf(stderr, "dlsym failed\n");
      return 1;
    }
    CUdevice dev;
    CUcontext ctx;
    CUmodule mod;
    CUfunction f;
    Check(init(0), "cuInit");
    Check(dev_get(&dev, 0), "cuDeviceGet");
    Check(retain(&ctx, dev), "retain");
    Check(set(ctx), "set");
    Check(load(&mod, kImage), "load");
    Check(get_fn(&f, mod, round == 0 ? "first_open" : "second_open"), "get");
    for (int i = 0; i < n; ++i) Check(launch(f, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr), "launch");
    Check(sync(), "sync");
    if (dlclose(h) != 0) {
      fprintf(stderr, "dlclose: %s\n", dlerror());
      return 1;
    }
  }
  printf("dlreopen done\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return DlReopen(argc > 1 ? atoi(argv[1]) : 100); }
