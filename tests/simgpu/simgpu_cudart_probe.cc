// A small program on the simulated runtime (libcudart.so.13), run by
// simgpu_cudart_test.cc with LD_LIBRARY_PATH pointing at the simulated stack.
// It needs no nvcc: it registers a kernel and launches it with the same calls
// nvcc generates for `kernel<<<grid, block, 0, stream>>>()` (notes §10).
//
//   simgpu_cudart_probe lookups        start the runtime, then one
//                                      cudaGetDriverEntryPoint("cuLaunchKernel"),
//                                      device properties, errors, a reset
//   simgpu_cudart_probe memcpy-blocks  two slow_kernel launches on a created
//                                      stream, then a 4-byte cudaMemcpy D2H
//
// Prints key=value lines; exits non-zero on any failed call.
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <stdint.h>
#include <time.h>

#include <cstdio>
#include <cstring>

extern "C" {
void** __cudaRegisterFatBinary(void* fat_cubin);
void __cudaRegisterFatBinaryEnd(void** handle);
void __cudaRegisterFunction(void** handle, const char* host_fun, char* device_fun,
                            const char* device_name, int thread_limit, uint3* tid, uint3* bid,
                            dim3* block_dim, dim3* grid_dim, int* warp_size);
cudaError_t __cudaGetKernel(cudaKernel_t* kernel, const void* host_stub);
unsigned __cudaPushCallConfiguration(dim3 grid, dim3 block, size_t shared_mem,
                                     struct CUstream_st* stream);
cudaError_t __cudaPopCallConfiguration(dim3* grid, dim3* block, size_t* shared_mem, void* stream);
cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 grid, dim3 block, void** args,
                               size_t shared_mem, cudaStream_t stream);
}

namespace {

#define CHECK_RT(call)                                                                \
  do {                                                                                \
    cudaError_t e_ = (call);                                                          \
    if (e_ != cudaSuccess) {                                                          \
      std::fprintf(stderr, "probe: %s failed: %s\n", #call, cudaGetErrorName(e_));    \
      return 1;                                                                       \
    }                                                                                 \
  } while (0)

uint64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

// What nvcc emits: a fatbin wrapper (magic 0x466243b1) pointing at the fatbin.
const unsigned long long kFatbin[2] = {0x00100001ba55ed50ull, 0};
struct {
  int magic, version;
  const void* data;
  void* unused;
} const kWrapper = {0x466243b1, 1, kFatbin, nullptr};

// The host stub nvcc would generate for `__global__ void slow_kernel(int*)`.
void slow_kernel_stub(int* p) {
  static cudaKernel_t handle = nullptr;
  if (handle == nullptr && __cudaGetKernel(&handle, reinterpret_cast<const void*>(&slow_kernel_stub)) != cudaSuccess) {
    return;
  }
  void* args[1] = {&p};
  dim3 grid, block;
  size_t shared_mem;
  cudaStream_t stream;
  if (__cudaPopCallConfiguration(&grid, &block, &shared_mem, &stream) != cudaSuccess) return;
  __cudaLaunchKernel(handle, grid, block, args, shared_mem, stream);
}

// slow_kernel<<<grid, block, 0, stream>>>(p)
cudaError_t LaunchSlow(cudaStream_t stream, int* p) {
  if (__cudaPushCallConfiguration(dim3(4), dim3(32), 0, stream) != 0) return cudaErrorUnknown;
  slow_kernel_stub(p);
  return cudaGetLastError();
}

void** g_handle;

__attribute__((constructor)) void RegisterKernels() {  // static constructor, as nvcc does
  g_handle = __cudaRegisterFatBinary(const_cast<void*>(static_cast<const void*>(&kWrapper)));
  char name[] = "_Z11slow_kernelPi";
  __cudaRegisterFunction(g_handle, reinterpret_cast<const char*>(&slow_kernel_stub), name, name,
                         -1, nullptr, nullptr, nullptr, nullptr, nullptr);
  __cudaRegisterFatBinaryEnd(g_handle);
}

int Lookups() {
  int count = 0;
  CHECK_RT(cudaGetDeviceCount(&count));
  std::printf("devices=%d\n", count);
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult status;
  CHECK_RT(cudaGetDriverEntryPoint("cuLaunchKernel", &fn, cudaEnableDefault, &status));
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  std::printf("entry_point_ok=%d\n", fn != nullptr && status == cudaDriverEntryPointSuccess &&
                                         lib != nullptr && fn == dlsym(lib, "cuLaunchKernel"));
  cudaDeviceProp prop;
  CHECK_RT(cudaGetDeviceProperties(&prop, 0));
  std::printf("cc=%d.%d\nsms=%d\n", prop.major, prop.minor, prop.multiProcessorCount);
  std::printf("bad_device=%s\n", cudaGetErrorName(cudaSetDevice(count)));
  std::printf("last_error=%s\n", cudaGetErrorName(cudaGetLastError()));
  std::printf("after_get=%s\n", cudaGetErrorName(cudaPeekAtLastError()));
  CHECK_RT(cudaDeviceReset());
  void* p = nullptr;
  CHECK_RT(cudaMalloc(&p, 256));  // the runtime comes back after a reset
  CHECK_RT(cudaFree(p));
  return 0;
}

int MemcpyBlocks() {
  int* d = nullptr;
  CHECK_RT(cudaMalloc(reinterpret_cast<void**>(&d), sizeof(int)));
  CHECK_RT(cudaMemset(d, 0, sizeof(int)));
  cudaStream_t s;
  CHECK_RT(cudaStreamCreate(&s));
  CHECK_RT(LaunchSlow(s, d));
  CHECK_RT(LaunchSlow(s, d));
  int value = -1;
  uint64_t t0 = NowNs();
  CHECK_RT(cudaMemcpy(&value, d, sizeof value, cudaMemcpyDeviceToHost));
  uint64_t t1 = NowNs();
  std::printf("memcpy_ns=%llu\n", static_cast<unsigned long long>(t1 - t0));
  std::printf("memcpy_returned_ns=%llu\n", static_cast<unsigned long long>(t1));
  std::printf("stream_done_after=%d\n", cudaStreamQuery(s) == cudaSuccess);
  std::printf("value=%d\n", value);
  CHECK_RT(cudaStreamDestroy(s));
  CHECK_RT(cudaFree(d));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // The runtime must not link libcuda: nothing has loaded it before the
  // first runtime call.
  std::printf("libcuda_preloaded=%d\n", dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD) != nullptr);
  if (argc == 2 && std::strcmp(argv[1], "lookups") == 0) return Lookups();
  if (argc == 2 && std::strcmp(argv[1], "memcpy-blocks") == 0) return MemcpyBlocks();
  std::fprintf(stderr, "usage: simgpu_cudart_probe lookups|memcpy-blocks\n");
  return 2;
}
