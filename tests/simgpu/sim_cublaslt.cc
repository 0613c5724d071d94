// The simulated cuBLASLt, libcublasLt.so.13 (see README.md): the matmul API
// PyTorch's addmm/linear (with a bias epilogue) and scaled-matmul paths call.
// Descriptors keep the attributes they are given; cublasLtMatmul reads the
// shape from the layouts and the transposes from the operation descriptor and
// launches one simulated kernel whose time grows with m·n·k
// (sim_blas_launch.h). Every call PyTorch 2.15 imports is here.
#include <cublasLt.h>
#include <cublas_api.h>
#include <stdio.h>
#include <string.h>

#include <cstdint>
#include <new>

#include "sim_blas_launch.h"

#define CUBLASLT_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

// Every object starts with its type's magic (cleared when destroyed).
struct LtHandle {
  static constexpr uint32_t kMagic = 0x43424c54;  // "CBLT"
  uint32_t magic = kMagic;
};

struct MatmulDesc {
  static constexpr uint32_t kMagic = 0x4c54444d;
  uint32_t magic = kMagic;
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  cudaDataType_t scale = CUDA_R_32F;
  int32_t transa = CUBLAS_OP_N;
  int32_t transb = CUBLAS_OP_N;
  uint32_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
};

struct Layout {
  static constexpr uint32_t kMagic = 0x4c544c59;
  uint32_t magic = kMagic;
  cudaDataType type = CUDA_R_32F;
  uint64_t rows = 0, cols = 0;
  int64_t ld = 0;
  int32_t batch = 1;
  int64_t stride = 0;
  int32_t order = CUBLASLT_ORDER_COL;
};

struct Preference {
  static constexpr uint32_t kMagic = 0x4c545052;
  uint32_t magic = kMagic;
  uint64_t max_workspace = 0;
};

template <typename T>
T* As(void* p) {
  auto* t = static_cast<T*>(p);
  return t != nullptr && t->magic == T::kMagic ? t : nullptr;
}

// Destroys an object of type T; `bad` when p is none.
template <typename T>
cublasStatus_t Destroy(void* p, cublasStatus_t bad = CUBLAS_STATUS_INVALID_VALUE) {
  T* t = As<T>(p);
  if (t == nullptr) return bad;
  t->magic = 0;
  delete t;
  return CUBLAS_STATUS_SUCCESS;
}

template <typename V>
cublasStatus_t Take(const void* buf, size_t size, V* out) {
  if (buf == nullptr || size != sizeof(V)) return CUBLAS_STATUS_INVALID_VALUE;
  memcpy(out, buf, sizeof(V));
  return CUBLAS_STATUS_SUCCESS;
}

const char* TypeName(cudaDataType t) {
  switch (t) {
    case CUDA_R_64F: return "d";
    case CUDA_R_16F: return "h";
    case CUDA_R_16BF: return "bf16";
    case CUDA_R_8F_E4M3: return "e4m3";
    case CUDA_R_8F_E5M2: return "e5m2";
    case CUDA_C_32F: return "c";
    case CUDA_C_64F: return "z";
    default: return "s";
  }
}

char OpLetter(int32_t op) { return op == CUBLAS_OP_N ? 'n' : op == CUBLAS_OP_T ? 't' : 'c'; }

}  // namespace

// cuBLASLt ships with cuBLAS: the same version.
CUBLASLT_EXPORT size_t cublasLtGetVersion(void) { return CUBLAS_VERSION; }

CUBLASLT_EXPORT cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) {
  if (handle == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *handle = reinterpret_cast<cublasLtHandle_t>(new LtHandle);
  return CUBLAS_STATUS_SUCCESS;
}

CUBLASLT_EXPORT cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) {
  return Destroy<LtHandle>(handle, CUBLAS_STATUS_NOT_INITIALIZED);
}

// ---- operation descriptors ----
CUBLASLT_EXPORT cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc,
                                                        cublasComputeType_t compute,
                                                        cudaDataType_t scale) {
  if (desc == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  auto* d = new MatmulDesc;
  d->compute = compute;
  d->scale = scale;
  *desc = reinterpret_cast<cublasLtMatmulDesc_t>(d);
  return CUBLAS_STATUS_SUCCESS;
}

CUBLASLT_EXPORT cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  return Destroy<MatmulDesc>(desc);
}

CUBLASLT_EXPORT cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc,
                                                              cublasLtMatmulDescAttributes_t attr,
                                                              const void* buf, size_t size) {
  auto* d = As<MatmulDesc>(desc);
  if (d == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  switch (attr) {
    case CUBLASLT_MATMUL_DESC_TRANSA: return Take(buf, size, &d->transa);
    case CUBLASLT_MATMUL_DESC_TRANSB: return Take(buf, size, &d->transb);
    case CUBLASLT_MATMUL_DESC_EPILOGUE: return Take(buf, size, &d->epilogue);
    default:
      // Bias and scale pointers, fill modes, fast accumulation: they change
      // what a real kernel computes, not how long the simulated one takes.
      return buf != nullptr || size == 0 ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
  }
}

// ---- matrix layouts ----
CUBLASLT_EXPORT cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout,
                                                          cudaDataType type, uint64_t rows,
                                                          uint64_t cols, int64_t ld) {
  if (layout == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  auto* l = new Layout;
  l->type = type;
  l->rows = rows;
  l->cols = cols;
  l->ld = ld;
  *layout = reinterpret_cast<cublasLtMatrixLayout_t>(l);
  return CUBLAS_STATUS_SUCCESS;
}

CUBLASLT_EXPORT cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  return Destroy<Layout>(layout);
}

CUBLASLT_EXPORT cublasStatus_t cublasLtMatrixLayoutSetAttribute(
    cublasLtMatrixLayout_t layout, cublasLtMatrixLayoutAttribute_t attr, const void* buf,
    size_t size) {
  auto* l = As<Layout>(layout);
  if (l == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  switch (attr) {
    case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT: return Take(buf, size, &l->batch);
    case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET: return Take(buf, size, &l->stride);
    case CUBLASLT_MATRIX_LAYOUT_ORDER: return Take(buf, size, &l->order);
    case CUBLASLT_MATRIX_LAYOUT_ROWS: return Take(buf, size, &l->rows);
    case CUBLASLT_MATRIX_LAYOUT_COLS: return Take(buf, size, &l->cols);
    case CUBLASLT_MATRIX_LAYOUT_LD: return Take(buf, size, &l->ld);
    default:
      return buf != nullptr ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
  }
}

// ---- preferences and algorithms ----
CUBLASLT_EXPORT cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  if (pref == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *pref = reinterpret_cast<cublasLtMatmulPreference_t>(new Preference);
  return CUBLAS_STATUS_SUCCESS;
}

CUBLASLT_EXPORT cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  return Destroy<Preference>(pref);
}

CUBLASLT_EXPORT cublasStatus_t cublasLtMatmulPreferenceSetAttribute(
    cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr, const void* buf,
    size_t size) {
  auto* p = As<Preference>(pref);
  if (p == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  if (attr == CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES) return Take(buf, size, &p->max_workspace);
  return buf != nullptr ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
}

// One algorithm fits every problem: it needs no workspace.
CUBLASLT_EXPORT cublasStatus_t cublasLtMatmulAlgoGetHeuristic(
    cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a,
    cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
    cublasLtMatmulPreference_t pref, int requested, cublasLtMatmulHeuristicResult_t results[],
    int* returned) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (As<MatmulDesc>(desc) == nullptr || As<Layout>(a) == nullptr ||
      As<Layout>(b) == nullptr || As<Layout>(c) == nullptr ||
      As<Layout>(d) == nullptr || returned == nullptr) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  *returned = 0;
  if (requested <= 0 || results == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  memset(&results[0], 0, sizeof results[0]);
  results[0].algo.data[0] = 1;  // the one algorithm's id
  results[0].workspaceSize = 0;
  results[0].state = CUBLAS_STATUS_SUCCESS;
  results[0].wavesCount = 1.0f;
  *returned = 1;
  return CUBLAS_STATUS_SUCCESS;
}

CUBLASLT_EXPORT cublasStatus_t cublasLtMatmulAlgoInit(cublasLtHandle_t handle, cublasComputeType_t,
                                                      cudaDataType_t, cudaDataType_t,
                                                      cudaDataType_t, cudaDataType_t,
                                                      cudaDataType_t, int id,
                                                      cublasLtMatmulAlgo_t* algo) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (algo == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  memset(algo, 0, sizeof *algo);
  algo->data[0] = static_cast<uint64_t>(id);
  return CUBLAS_STATUS_SUCCESS;
}

CUBLASLT_EXPORT cublasStatus_t cublasLtMatmulAlgoCheck(
    cublasLtHandle_t handle, cublasLtMatmulDesc_t, cublasLtMatrixLayout_t, cublasLtMatrixLayout_t,
    cublasLtMatrixLayout_t, cublasLtMatrixLayout_t, const cublasLtMatmulAlgo_t* algo,
    cublasLtMatmulHeuristicResult_t* result) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (algo == nullptr || result == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  const cublasLtMatmulAlgo_t copy = *algo;  // `algo` may point into `result`
  memset(result, 0, sizeof *result);
  result->algo = copy;
  result->state = CUBLAS_STATUS_SUCCESS;
  result->wavesCount = 1.0f;
  return CUBLAS_STATUS_SUCCESS;
}

// An algorithm's configuration is its data words, attribute by attribute.
CUBLASLT_EXPORT cublasStatus_t cublasLtMatmulAlgoConfigGetAttribute(
    const cublasLtMatmulAlgo_t* algo, cublasLtMatmulAlgoConfigAttributes_t attr, void* buf,
    size_t size, size_t* written) {
  if (algo == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  const size_t i = static_cast<size_t>(attr);
  if (i >= 8) return CUBLAS_STATUS_INVALID_VALUE;
  const uint64_t v = attr == CUBLASLT_ALGO_CONFIG_ID ? algo->data[0] : algo->data[i];
  const size_t need = size < sizeof v ? size : sizeof v;
  if (written != nullptr) *written = need;
  if (buf == nullptr) return size == 0 ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
  memcpy(buf, &v, need);  // little-endian: the low bytes for a narrower attribute
  return CUBLAS_STATUS_SUCCESS;
}

CUBLASLT_EXPORT cublasStatus_t cublasLtMatmulAlgoConfigSetAttribute(
    cublasLtMatmulAlgo_t* algo, cublasLtMatmulAlgoConfigAttributes_t attr, const void* buf,
    size_t size) {
  if (algo == nullptr || buf == nullptr || size == 0 || size > 8) return CUBLAS_STATUS_INVALID_VALUE;
  const size_t i = static_cast<size_t>(attr);
  if (i >= 8) return CUBLAS_STATUS_INVALID_VALUE;
  uint64_t v = 0;
  memcpy(&v, buf, size);
  algo->data[attr == CUBLASLT_ALGO_CONFIG_ID ? 0 : i] = v;
  return CUBLAS_STATUS_SUCCESS;
}

// ---- the matmul: D = op(A) op(B) (+ C), D is m x n, op(A) m x k ----
CUBLASLT_EXPORT cublasStatus_t cublasLtMatmul(
    cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void*, const void*,
    cublasLtMatrixLayout_t adesc, const void*, cublasLtMatrixLayout_t, const void*, const void*,
    cublasLtMatrixLayout_t, void*, cublasLtMatrixLayout_t ddesc, const cublasLtMatmulAlgo_t*,
    void*, size_t, cudaStream_t stream) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  auto* d = As<MatmulDesc>(desc);
  auto* a = As<Layout>(adesc);
  auto* out = As<Layout>(ddesc);
  if (d == nullptr || a == nullptr || out == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  const uint64_t m = out->rows, n = out->cols;
  const uint64_t k = d->transa == CUBLAS_OP_N ? a->cols : a->rows;
  const int64_t batch = out->batch > 0 ? out->batch : 1;
  if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
  char name[160];
  snprintf(name, sizeof name, "cublasLt_%sgemm_%c%c_m%llu_n%llu_k%llu%s%s", TypeName(a->type),
           OpLetter(d->transa), OpLetter(d->transb), static_cast<unsigned long long>(m),
           static_cast<unsigned long long>(n), static_cast<unsigned long long>(k),
           batch > 1 ? "_batched" : "",
           d->epilogue == CUBLASLT_EPILOGUE_DEFAULT ? "" : "_epilogue");
  const bool complex_type = a->type == CUDA_C_32F || a->type == CUDA_C_64F;
  CUresult r = simgpu_blas::LaunchWork(
      name,
      simgpu_blas::GemmFlops(static_cast<int64_t>(m), static_cast<int64_t>(n),
                             static_cast<int64_t>(k), batch, complex_type),
      reinterpret_cast<CUstream>(stream));
  return r == CUDA_SUCCESS ? CUBLAS_STATUS_SUCCESS
         : r == CUDA_ERROR_NOT_FOUND || r == CUDA_ERROR_INVALID_CONTEXT
             ? CUBLAS_STATUS_NOT_INITIALIZED
             : CUBLAS_STATUS_EXECUTION_FAILED;
}
