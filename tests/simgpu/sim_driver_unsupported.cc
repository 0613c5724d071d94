// Driver entry points that libinterpose/hooks.def hooks and the simulator
// does not simulate: the CUDA 2.x-era forms with 32-bit device pointers
// (cuMemcpyHtoD, cuMemsetD8, cuMemFree ... without _v2), the legacy launch
// API (cuLaunch, cuLaunchGrid), multi-device cooperative launches, graphs,
// CUDA arrays, 3D and batched copies, stream memory operations and external
// semaphores. Each is exported (a program linked against it loads; every
// hooked entry point resolves) and returns CUDA_ERROR_NOT_SUPPORTED.
//
// Their parameters do not matter: a C function that ignores its arguments and
// returns an int may be called with any argument list on x86-64 and AArch64,
// so each one is defined without parameters (this file includes no CUDA
// header, whose prototypes would conflict).

namespace {
constexpr int kNotSupported = 801;  // CUDA_ERROR_NOT_SUPPORTED
}

#define SIMGPU_DRIVER_UNSUPPORTED(name) \
  extern "C" __attribute__((visibility("default"))) int name(void) { return kNotSupported; }

SIMGPU_DRIVER_UNSUPPORTED(cuLaunchCooperativeKernelMultiDevice)
SIMGPU_DRIVER_UNSUPPORTED(cuLaunch)
SIMGPU_DRIVER_UNSUPPORTED(cuLaunchGrid)
SIMGPU_DRIVER_UNSUPPORTED(cuLaunchGridAsync)
SIMGPU_DRIVER_UNSUPPORTED(cuGraphLaunch)
SIMGPU_DRIVER_UNSUPPORTED(cuGraphLaunch_ptsz)
SIMGPU_DRIVER_UNSUPPORTED(cuMemcpyHtoA_v2)
SIMGPU_DRIVER_UNSUPPORTED(cuMemcpyHtoA_v2_ptds)
SIMGPU_DRIVER_UNSUPPORTED(cuMemcpyAtoH_v2)
SIMGPU_DRIVER_UNSUPPORTED(cuMemcpyAtoH_v2_ptds)
SIMGPU_DRIVER_UNSUPPORTED(cuMemcpyAtoD_v2)
SIMGPU_DRIVER_UNSUPPORTED(cuMemcpyAtoD_v2_ptds)
SIMGPU_DRIVER_UNSUPPORTED(cuMemcpyDtoA_v2)
SIMGPU_DRIVER_UNSUPPORTED(cuMemcpyDtoA_v2_ptds)
SIMGPU_DRIVER_UNSUPPORTED(cuMemcpyAtoA_v2)
SIMGPU_DRIVER_UNSUPPORTED(cuMemcpyAtoA_v2_ptds)
SIMGPU_DRIVER_UNSUPPORTED(cuMemcpyHtoAAsync_v2)
SIMGPU_DRIVER_UNSUPPORTED(cuMemcpyHtoAAsync_v2_ptsz)
SIMGPU_DRIVER_UNSUPPORTED(cuMemcpyAtoHAsync_v2)
SIMGPU_DRIVER_UNSUPPORTED(cuMemcpyAtoHAsync_v2_ptsz)
SIMGPU_DRIVER_UNSUPPORTED(cuMemcpy3D_v2)
SIMGPU_DRIVER_UNSUPPORTED(cuMemcpy3D_v2_ptds)
SIMGPU_DRIVER_UNSUPPORTED(cuMemcpy3DAsync_v2)
SIMGPU_DRIVER_UNSUPPORTED(cuMemcpy3DAsync_v2_ptsz)
SIMGPU_DRIVER_UNSUPPORTED(cuMemcpy3DPeer)
SIMGPU_DRIVER_UNSUPPORTED(cuMemcpy3DPeer_ptds)
SIMGPU_DRIVER_UNSUPPORTED(cuMemcpy3DPeerAsync)
SIMGPU_DRIVER_UNSUPPORTED(cuMemcpy3DPeerAsync_ptsz)
SIMGPU_DRIVER_UNSUPPORTED(cuMemcpyBatchAsync)
SIMGPU_DRIVER_UNSUPPORTED(cuMemcpyBatchAsync_ptsz)
SIMGPU_DRIVER_UNSUPPORTED(cuMemcpyBatchAsync_v2)
SIMGPU_DRIVER_UNSUPPORTED(cuMemcpyBatchAsync_v2_ptsz)
SIMGPU_DRIVER_UNSUPPORTED(cuMemcpy3DBatchAsync)
SIMGPU_DRIVER_UNSUPPORTED(cuMemcpy3DBatchAsync_ptsz)
SIMGPU_DRIVER_UNSUPPORTED(cuMemcpy3DBatchAsync_v2)
SIMGPU_DRIVER_UNSUPPORTED(cuMemcpy3DBatchAsync_v2_ptsz)
SIMGPU_DRIVER_UNSUPPORTED(cuMemcpyHtoD)
SIMGPU_DRIVER_UNSUPPORTED(cuMemcpyDtoH)
SIMGPU_DRIVER_UNSUPPORTED(cuMemcpyDtoD)
SIMGPU_DRIVER_UNSUPPORTED(cuMemcpyHtoDAsync)
SIMGPU_DRIVER_UNSUPPORTED(cuMemcpyDtoHAsync)
SIMGPU_DRIVER_UNSUPPORTED(cuMemcpyDtoDAsync)
SIMGPU_DRIVER_UNSUPPORTED(cuMemsetD8)
SIMGPU_DRIVER_UNSUPPORTED(cuMemsetD16)
SIMGPU_DRIVER_UNSUPPORTED(cuMemsetD32)
SIMGPU_DRIVER_UNSUPPORTED(cuMemFree)
SIMGPU_DRIVER_UNSUPPORTED(cuStreamWaitValue32)
SIMGPU_DRIVER_UNSUPPORTED(cuStreamWaitValue32_ptsz)
SIMGPU_DRIVER_UNSUPPORTED(cuStreamWaitValue32_v2)
SIMGPU_DRIVER_UNSUPPORTED(cuStreamWaitValue32_v2_ptsz)
SIMGPU_DRIVER_UNSUPPORTED(cuStreamWaitValue64)
SIMGPU_DRIVER_UNSUPPORTED(cuStreamWaitValue64_ptsz)
SIMGPU_DRIVER_UNSUPPORTED(cuStreamWaitValue64_v2)
SIMGPU_DRIVER_UNSUPPORTED(cuStreamWaitValue64_v2_ptsz)
SIMGPU_DRIVER_UNSUPPORTED(cuStreamBatchMemOp)
SIMGPU_DRIVER_UNSUPPORTED(cuStreamBatchMemOp_ptsz)
SIMGPU_DRIVER_UNSUPPORTED(cuStreamBatchMemOp_v2)
SIMGPU_DRIVER_UNSUPPORTED(cuStreamBatchMemOp_v2_ptsz)
SIMGPU_DRIVER_UNSUPPORTED(cuWaitExternalSemaphoresAsync)
SIMGPU_DRIVER_UNSUPPORTED(cuWaitExternalSemaphoresAsync_ptsz)
