// The simulated cuBLAS, libcublas.so.13 (see README.md). NVIDIA's cuBLAS
// carries NVIDIA's runtime inside it, which asks the driver for private
// export tables and cannot run on the simulator; this one provides what
// PyTorch's matmul, linear and batched-matmul paths call. Each GEMM (and
// GEMV, and dot) is one simulated kernel launched through the driver
// (sim_blas_launch.h) whose time grows with its FLOPs; nothing is computed.
// Routines PyTorch imports beyond these (the rest of levels 1-3, the batched
// factorizations cuSOLVER and torch.linalg call) are "not supported"
// (sim_cublas_unsupported.cc).
#include <cublas_v2.h>
#include <stdio.h>
#include <string.h>

#include <atomic>
#include <cstdint>
#include <string>

#include "sim_blas_launch.h"

#define CUBLAS_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

constexpr uint32_t kHandleMagic = 0x43424c53;  // "CBLS"

struct Handle {
  uint32_t magic = kHandleMagic;
  cudaStream_t stream = nullptr;
  cublasPointerMode_t pointer_mode = CUBLAS_POINTER_MODE_HOST;
  cublasMath_t math_mode = CUBLAS_DEFAULT_MATH;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  int sm_count_target = 0;
};

Handle* H(cublasHandle_t h) {
  auto* p = reinterpret_cast<Handle*>(h);
  return p != nullptr && p->magic == kHandleMagic ? p : nullptr;
}

char Op(cublasOperation_t op) {
  return op == CUBLAS_OP_N ? 'n' : op == CUBLAS_OP_T ? 't' : 'c';
}

cublasStatus_t FromDriver(CUresult r) {
  switch (r) {
    case CUDA_SUCCESS: return CUBLAS_STATUS_SUCCESS;
    case CUDA_ERROR_NOT_FOUND:
    case CUDA_ERROR_NOT_INITIALIZED:
    case CUDA_ERROR_INVALID_CONTEXT: return CUBLAS_STATUS_NOT_INITIALIZED;
    default: return CUBLAS_STATUS_EXECUTION_FAILED;
  }
}

// One GEMM of `batch` m x n x k products: its kernel is named after the type,
// the operations and the shape (e.g. cublas_sgemm_nt_m512_n256_k1024_b8).
cublasStatus_t Gemm(cublasHandle_t handle, const char* type, cublasOperation_t ta,
                    cublasOperation_t tb, int m, int n, int k, int64_t batch, bool complex_type) {
  Handle* h = H(handle);
  if (h == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (m < 0 || n < 0 || k < 0 || batch < 0) return CUBLAS_STATUS_INVALID_VALUE;
  if (m == 0 || n == 0 || batch == 0) return CUBLAS_STATUS_SUCCESS;
  char name[128];
  if (batch > 1) {
    snprintf(name, sizeof name, "cublas_%sgemm_%c%c_m%d_n%d_k%d_b%lld", type, Op(ta), Op(tb), m,
             n, k, static_cast<long long>(batch));
  } else {
    snprintf(name, sizeof name, "cublas_%sgemm_%c%c_m%d_n%d_k%d", type, Op(ta), Op(tb), m, n, k);
  }
  return FromDriver(simgpu_blas::LaunchWork(
      name, simgpu_blas::GemmFlops(m, n, k, batch, complex_type),
      reinterpret_cast<CUstream>(h->stream)));
}

const char* TypeLetter(cudaDataType t) {
  switch (t) {
    case CUDA_R_64F: return "d";
    case CUDA_C_32F: return "c";
    case CUDA_C_64F: return "z";
    case CUDA_R_16F: return "h";
    case CUDA_R_16BF: return "bf16";
    case CUDA_R_8I: return "i8";
    default: return "s";
  }
}

bool IsComplex(cudaDataType t) {
  return t == CUDA_C_32F || t == CUDA_C_64F || t == CUDA_C_16F || t == CUDA_C_16BF;
}

// A level-1/2 routine: one kernel of `flops`; a result in host memory
// (host pointer mode) waits for it, as NVIDIA's library does.
cublasStatus_t Vector(cublasHandle_t handle, const char* name, double flops, void* result,
                      size_t result_bytes) {
  Handle* h = H(handle);
  if (h == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  CUstream s = reinterpret_cast<CUstream>(h->stream);
  if (CUresult r = simgpu_blas::LaunchWork(name, flops, s); r != CUDA_SUCCESS) {
    return FromDriver(r);
  }
  if (result != nullptr && h->pointer_mode == CUBLAS_POINTER_MODE_HOST) {
    if (CUresult r = simgpu_blas::SyncStream(s); r != CUDA_SUCCESS) return FromDriver(r);
    memset(result, 0, result_bytes);  // nothing was computed
  }
  return CUBLAS_STATUS_SUCCESS;
}

}  // namespace

// ---- handles ----
CUBLAS_EXPORT cublasStatus_t cublasCreate_v2(cublasHandle_t* handle) {
  if (handle == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *handle = reinterpret_cast<cublasHandle_t>(new Handle);
  return CUBLAS_STATUS_SUCCESS;
}

CUBLAS_EXPORT cublasStatus_t cublasDestroy_v2(cublasHandle_t handle) {
  Handle* h = H(handle);
  if (h == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  h->magic = 0;
  delete h;
  return CUBLAS_STATUS_SUCCESS;
}

CUBLAS_EXPORT cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream) {
  Handle* h = H(handle);
  if (h == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  h->stream = stream;
  return CUBLAS_STATUS_SUCCESS;
}

CUBLAS_EXPORT cublasStatus_t cublasGetStream_v2(cublasHandle_t handle, cudaStream_t* stream) {
  Handle* h = H(handle);
  if (h == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (stream == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *stream = h->stream;
  return CUBLAS_STATUS_SUCCESS;
}

CUBLAS_EXPORT cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t handle, void* workspace,
                                                   size_t bytes) {
  Handle* h = H(handle);
  if (h == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  h->workspace = workspace;
  h->workspace_bytes = bytes;
  return CUBLAS_STATUS_SUCCESS;
}

CUBLAS_EXPORT cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
  Handle* h = H(handle);
  if (h == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  h->math_mode = mode;
  return CUBLAS_STATUS_SUCCESS;
}

CUBLAS_EXPORT cublasStatus_t cublasGetMathMode(cublasHandle_t handle, cublasMath_t* mode) {
  Handle* h = H(handle);
  if (h == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (mode == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *mode = h->math_mode;
  return CUBLAS_STATUS_SUCCESS;
}

CUBLAS_EXPORT cublasStatus_t cublasSetPointerMode_v2(cublasHandle_t handle,
                                                     cublasPointerMode_t mode) {
  Handle* h = H(handle);
  if (h == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  h->pointer_mode = mode;
  return CUBLAS_STATUS_SUCCESS;
}

CUBLAS_EXPORT cublasStatus_t cublasGetPointerMode_v2(cublasHandle_t handle,
                                                     cublasPointerMode_t* mode) {
  Handle* h = H(handle);
  if (h == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (mode == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *mode = h->pointer_mode;
  return CUBLAS_STATUS_SUCCESS;
}

CUBLAS_EXPORT cublasStatus_t cublasSetSmCountTarget(cublasHandle_t handle, int target) {
  Handle* h = H(handle);
  if (h == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  h->sm_count_target = target;
  return CUBLAS_STATUS_SUCCESS;
}

CUBLAS_EXPORT cublasStatus_t cublasGetVersion_v2(cublasHandle_t, int* version) {
  if (version == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *version = CUBLAS_VERSION;
  return CUBLAS_STATUS_SUCCESS;
}

CUBLAS_EXPORT const char* cublasGetStatusName(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    default: return "CUBLAS_STATUS_UNKNOWN";
  }
}

CUBLAS_EXPORT const char* cublasGetStatusString(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "the library was not initialized";
    case CUBLAS_STATUS_INVALID_VALUE: return "an invalid value was used as an argument";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "the GPU program failed to execute";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "the functionality requested is not supported";
    default: return "unknown error";
  }
}

// ---- level 3: GEMMs ----
#define SIM_GEMM(fn, letter, T, complex_type)                                                  \
  CUBLAS_EXPORT cublasStatus_t fn(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, \
                                  int m, int n, int k, const T*, const T*, int, const T*, int,  \
                                  const T*, T*, int) {                                          \
    return Gemm(h, letter, ta, tb, m, n, k, 1, complex_type);                                   \
  }
SIM_GEMM(cublasSgemm_v2, "s", float, false)
SIM_GEMM(cublasDgemm_v2, "d", double, false)
SIM_GEMM(cublasCgemm_v2, "c", cuComplex, true)
SIM_GEMM(cublasZgemm_v2, "z", cuDoubleComplex, true)
#undef SIM_GEMM

#define SIM_GEMM_STRIDED(fn, letter, T, complex_type)                                           \
  CUBLAS_EXPORT cublasStatus_t fn(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, \
                                  int m, int n, int k, const T*, const T*, int, long long,      \
                                  const T*, int, long long, const T*, T*, int, long long,       \
                                  int batch) {                                                  \
    return Gemm(h, letter, ta, tb, m, n, k, batch, complex_type);                               \
  }
SIM_GEMM_STRIDED(cublasSgemmStridedBatched, "s", float, false)
SIM_GEMM_STRIDED(cublasDgemmStridedBatched, "d", double, false)
SIM_GEMM_STRIDED(cublasCgemmStridedBatched, "c", cuComplex, true)
SIM_GEMM_STRIDED(cublasZgemmStridedBatched, "z", cuDoubleComplex, true)
#undef SIM_GEMM_STRIDED

#define SIM_GEMM_BATCHED(fn, letter, T, complex_type)                                           \
  CUBLAS_EXPORT cublasStatus_t fn(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, \
                                  int m, int n, int k, const T*, const T* const[], int,         \
                                  const T* const[], int, const T*, T* const[], int, int batch) { \
    return Gemm(h, letter, ta, tb, m, n, k, batch, complex_type);                               \
  }
SIM_GEMM_BATCHED(cublasSgemmBatched, "s", float, false)
SIM_GEMM_BATCHED(cublasDgemmBatched, "d", double, false)
SIM_GEMM_BATCHED(cublasCgemmBatched, "c", cuComplex, true)
SIM_GEMM_BATCHED(cublasZgemmBatched, "z", cuDoubleComplex, true)
#undef SIM_GEMM_BATCHED

CUBLAS_EXPORT cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta,
                                          cublasOperation_t tb, int m, int n, int k, const void*,
                                          const void*, cudaDataType at, int, const void*,
                                          cudaDataType, int, const void*, void*, cudaDataType, int,
                                          cublasComputeType_t, cublasGemmAlgo_t) {
  return Gemm(h, TypeLetter(at), ta, tb, m, n, k, 1, IsComplex(at));
}

CUBLAS_EXPORT cublasStatus_t cublasSgemmEx(cublasHandle_t h, cublasOperation_t ta,
                                           cublasOperation_t tb, int m, int n, int k,
                                           const float*, const void*, cudaDataType at, int,
                                           const void*, cudaDataType, int, const float*, void*,
                                           cudaDataType, int) {
  return Gemm(h, TypeLetter(at), ta, tb, m, n, k, 1, false);
}

CUBLAS_EXPORT cublasStatus_t cublasGemmStridedBatchedEx(
    cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const void*,
    const void*, cudaDataType at, int, long long, const void*, cudaDataType, int, long long,
    const void*, void*, cudaDataType, int, long long, int batch, cublasComputeType_t,
    cublasGemmAlgo_t) {
  return Gemm(h, TypeLetter(at), ta, tb, m, n, k, batch, IsComplex(at));
}

// ---- level 2: GEMV ----
#define SIM_GEMV(fn, letter, T, complex_type)                                                   \
  CUBLAS_EXPORT cublasStatus_t fn(cublasHandle_t h, cublasOperation_t t, int m, int n, const T*, \
                                  const T*, int, const T*, int, const T*, T*, int) {            \
    if (m < 0 || n < 0) return CUBLAS_STATUS_INVALID_VALUE;                                     \
    char name[96];                                                                               \
    snprintf(name, sizeof name, "cublas_" letter "gemv_%c_m%d_n%d", Op(t), m, n);               \
    return Vector(h, name, simgpu_blas::GemmFlops(m, n, 1, 1, complex_type), nullptr, 0);       \
  }
SIM_GEMV(cublasSgemv_v2, "s", float, false)
SIM_GEMV(cublasDgemv_v2, "d", double, false)
SIM_GEMV(cublasCgemv_v2, "c", cuComplex, true)
SIM_GEMV(cublasZgemv_v2, "z", cuDoubleComplex, true)
#undef SIM_GEMV

// ---- level 1: dot products ----
CUBLAS_EXPORT cublasStatus_t cublasSdot_v2(cublasHandle_t h, int n, const float*, int,
                                           const float*, int, float* result) {
  char name[64];
  snprintf(name, sizeof name, "cublas_sdot_n%d", n);
  return Vector(h, name, 2.0 * n, result, sizeof(float));
}

CUBLAS_EXPORT cublasStatus_t cublasDdot_v2(cublasHandle_t h, int n, const double*, int,
                                           const double*, int, double* result) {
  char name[64];
  snprintf(name, sizeof name, "cublas_ddot_n%d", n);
  return Vector(h, name, 2.0 * n, result, sizeof(double));
}

CUBLAS_EXPORT cublasStatus_t cublasDotEx(cublasHandle_t h, int n, const void*, cudaDataType xt,
                                         int, const void*, cudaDataType, int, void* result,
                                         cudaDataType rt, cudaDataType) {
  char name[64];
  snprintf(name, sizeof name, "cublas_%sdot_n%d", TypeLetter(xt), n);
  const size_t bytes = rt == CUDA_R_64F || rt == CUDA_C_32F ? 8 : rt == CUDA_C_64F ? 16 : 4;
  return Vector(h, name, 2.0 * n, result, bytes);
}
