// The simulated cuBLAS and cuBLASLt's way onto the device: every GEMM (and
// the few level-1/2 routines they provide) is one kernel launched through the
// driver's cuLaunchKernel, resolved the way NVIDIA's libraries resolve the
// driver (dlopen libcuda.so.1, cuGetProcAddress), so a preloaded interposer
// sees the launch as it sees the framework's own. The kernel's duration grows
// with its work: 3 us + FLOPs / SIMGPU_GEMM_TFLOPS (default 50).
#ifndef STALLSCOPE_TESTS_SIMGPU_SIM_BLAS_LAUNCH_H_
#define STALLSCOPE_TESTS_SIMGPU_SIM_BLAS_LAUNCH_H_

#include <cuda.h>
#include <stdint.h>

namespace simgpu_blas {

// Launches kernel `name` (1 block; the name encodes the shape, e.g.
// "cublas_sgemm_nt_m512_n256_k1024") on `stream` with a duration of
// 3 us + flops / rate. Returns the driver's result (CUDA_ERROR_NOT_FOUND
// without a simulated driver).
CUresult LaunchWork(const char* name, double flops, CUstream stream);

// Blocks until `stream` has finished (a result returned in host memory, as
// NVIDIA's library does for level-1 routines in host pointer mode).
CUresult SyncStream(CUstream stream);

// The FLOPs of one m x n x k multiply-accumulate: 2mnk (x4 for complex).
inline double GemmFlops(int64_t m, int64_t n, int64_t k, int64_t batch, bool complex_type) {
  const double f = 2.0 * double(m) * double(n) * double(k) * double(batch > 0 ? batch : 1);
  return complex_type ? 4.0 * f : f;
}

}  // namespace simgpu_blas

#endif  // STALLSCOPE_TESTS_SIMGPU_SIM_BLAS_LAUNCH_H_
