// The part of NCCL's C ABI that stallscope uses: the opaque communicator, the
// unique id, the result, data type and reduction enums, the config struct's
// leading fields and the entry points' signatures. Values and layouts are
// those of NCCL's public nccl.h (NCCL 2.28, as shipped with CUDA 13.0;
// unchanged since 2.19 for everything used here). Declared here rather than
// included because NCCL's headers are not part of every CUDA installation.
// Used by the preload library's NCCL hooks, the simulated libnccl.so.2 and the
// examples; never mixed with NVIDIA's nccl.h in one translation unit.
#pragma once

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ncclComm* ncclComm_t;

#define STALLSCOPE_NCCL_UNIQUE_ID_BYTES 128
typedef struct {
  char internal[STALLSCOPE_NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;

typedef enum {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7,
  ncclNumResults = 8
} ncclResult_t;

// ncclRedOp_t is an enum of int size; values >= ncclNumOps are user-created.
typedef enum {
  ncclSum = 0,
  ncclProd = 1,
  ncclMax = 2,
  ncclMin = 3,
  ncclAvg = 4,
  ncclNumOps = 5,
  ncclMaxRedOp = 0x7fffffff
} ncclRedOp_t;

typedef enum {
  ncclInt8 = 0,
  ncclUint8 = 1,
  ncclInt32 = 2,
  ncclUint32 = 3,
  ncclInt64 = 4,
  ncclUint64 = 5,
  ncclFloat16 = 6,
  ncclFloat32 = 7,
  ncclFloat64 = 8,
  ncclBfloat16 = 9,
  ncclFloat8e4m3 = 10,
  ncclFloat8e5m2 = 11,
  ncclNumTypes = 12
} ncclDataType_t;

#define STALLSCOPE_NCCL_SPLIT_NOCOLOR (-1)

// Only passed through by pointer; the leading fields identify the layout.
typedef struct ncclConfig_v22800 {
  size_t size;
  unsigned int magic;
  unsigned int version;
} ncclConfig_t;

// The stream type of NCCL's signatures (cuda_runtime_api.h declares the same
// typedef; repeating an identical typedef is allowed).
typedef struct CUstream_st* cudaStream_t;

// Bytes per element of a data type; 0 for an unknown type.
static inline size_t StallscopeNcclTypeSize(int datatype) {
  switch (datatype) {
    case ncclInt8: case ncclUint8: case ncclFloat8e4m3: case ncclFloat8e5m2: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
    default: return 0;
  }
}

#ifdef __cplusplus
}  // extern "C"
#endif
