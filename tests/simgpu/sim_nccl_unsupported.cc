// NCCL 2.30 entry points that PyTorch 2.15 imports and the simulated NCCL
// does not provide: elastic communicators (shrink, grow, revoke, suspend,
// resume, scalable init), window registration, NCCL's allocator,
// device communicators, one-sided signals, gather, pre-multiplied sums.
// Each one exists (so libtorch_cuda.so loads) and returns ncclInvalidUsage.
// torch's ProcessGroupNCCL reaches them only when asked for (shrink_group,
// the NCCL memory allocator, symmetric memory, ReduceOp.PREMUL_SUM);
// docs/frameworks.md lists them.
//
// As NVIDIA's library, every entry point is `pnccl*` with a weak `nccl*`
// alias. Their parameters do not matter (a C function that ignores its
// arguments may be called with any argument list on x86-64 and AArch64), so
// each is defined without parameters; this file includes no NCCL header.

namespace {
constexpr int kNcclInvalidUsage = 5;
}

#define SIMGPU_NCCL_UNSUPPORTED(name)                                               \
  extern "C" __attribute__((visibility("default"))) int p##name(void) {            \
    return kNcclInvalidUsage;                                                       \
  }                                                                                 \
  extern "C" __attribute__((visibility("default"), weak, alias("p" #name))) int name(void);

SIMGPU_NCCL_UNSUPPORTED(ncclCommInitRankScalable)
SIMGPU_NCCL_UNSUPPORTED(ncclCommGetUniqueId)
SIMGPU_NCCL_UNSUPPORTED(ncclCommShrink)
SIMGPU_NCCL_UNSUPPORTED(ncclCommGrow)
SIMGPU_NCCL_UNSUPPORTED(ncclCommRevoke)
SIMGPU_NCCL_UNSUPPORTED(ncclCommSuspend)
SIMGPU_NCCL_UNSUPPORTED(ncclCommResume)
SIMGPU_NCCL_UNSUPPORTED(ncclCommMemStats)
SIMGPU_NCCL_UNSUPPORTED(ncclCommWindowRegister)
SIMGPU_NCCL_UNSUPPORTED(ncclCommWindowDeregister)
SIMGPU_NCCL_UNSUPPORTED(ncclWinGetUserPtr)
SIMGPU_NCCL_UNSUPPORTED(ncclMemAlloc)
SIMGPU_NCCL_UNSUPPORTED(ncclMemFree)
SIMGPU_NCCL_UNSUPPORTED(ncclDevCommCreate)
SIMGPU_NCCL_UNSUPPORTED(ncclDevCommDestroy)
SIMGPU_NCCL_UNSUPPORTED(ncclGetLsaMultimemDevicePointer)
SIMGPU_NCCL_UNSUPPORTED(ncclGetPeerDevicePointer)
SIMGPU_NCCL_UNSUPPORTED(ncclPutSignal)
SIMGPU_NCCL_UNSUPPORTED(ncclSignal)
SIMGPU_NCCL_UNSUPPORTED(ncclWaitSignal)
SIMGPU_NCCL_UNSUPPORTED(ncclGather)
SIMGPU_NCCL_UNSUPPORTED(ncclGroupSimulateEnd)
SIMGPU_NCCL_UNSUPPORTED(ncclRedOpCreatePreMulSum)
SIMGPU_NCCL_UNSUPPORTED(ncclRedOpDestroy)
