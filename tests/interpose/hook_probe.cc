// Calls hooked driver entry points with valid and invalid arguments and prints
// each result code and errno. The end-to-end test runs it with and without
// libstallscope.so preloaded: the two outputs must be identical.
#include <cuda.h>
#include <errno.h>

#include <cstdio>

namespace {

void Show(const char* what, CUresult r) {
  std::printf("%s result=%d errno=%d\n", what, int(r), errno);
  errno = 4242;  // must survive every hooked call unchanged
}

}  // namespace

int main() {
  errno = 4242;
  Show("cuInit", cuInit(0));
  CUdevice dev;
  Show("cuDeviceGet", cuDeviceGet(&dev, 0));
  CUcontext ctx;
  Show("cuDevicePrimaryCtxRetain", cuDevicePrimaryCtxRetain(&ctx, dev));
  Show("cuCtxSetCurrent", cuCtxSetCurrent(ctx));
  CUmodule mod;
  Show("cuModuleLoadData", cuModuleLoadData(&mod, ".version 8.0\n.target sm_75\n.address_size 64\n.visible .entry k() { ret; }\n"));
  CUfunction f;
  Show("cuModuleGetFunction", cuModuleGetFunction(&f, mod, "k"));
  CUstream s;
  Show("cuStreamCreate", cuStreamCreate(&s, 0));
  CUdeviceptr d;
  Show("cuMemAlloc", cuMemAlloc(&d, 4096));
  char host[4096];
  Show("cuLaunchKernel", cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s, nullptr, nullptr));
  Show("cuLaunchKernel(null function)", cuLaunchKernel(nullptr, 1, 1, 1, 1, 1, 1, 0, s, nullptr, nullptr));
  Show("cuMemcpyHtoDAsync", cuMemcpyHtoDAsync(d, host, sizeof host, s));
  Show("cuMemcpyDtoH", cuMemcpyDtoH(host, d, sizeof host));
  Show("cuMemcpyDtoH(null dst)", cuMemcpyDtoH(nullptr, d, 16));
  Show("cuMemsetD8", cuMemsetD8(d, 7, 4096));
  Show("cuMemsetD32Async", cuMemsetD32Async(d, 7, 1024, s));
  CUevent e;
  Show("cuEventCreate", cuEventCreate(&e, 0));
  Show("cuEventRecord", cuEventRecord(e, s));
  Show("cuStreamWaitEvent", cuStreamWaitEvent(nullptr, e, 0));
  Show("cuEventSynchronize", cuEventSynchronize(e));
  Show("cuEventQuery", cuEventQuery(e));
  Show("cuStreamSynchronize", cuStreamSynchronize(s));
  Show("cuStreamQuery", cuStreamQuery(s));
  Show("cuCtxSynchronize", cuCtxSynchronize());
  Show("cuMemFree", cuMemFree(d));
  Show("cuEventDestroy", cuEventDestroy(e));
  Show("cuStreamDestroy", cuStreamDestroy(s));
  return 0;
}
