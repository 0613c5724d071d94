// Runtime entry points that PyTorch 2.15's libraries import and the simulator
// does not provide: CUDA graphs and stream capture, IPC, memory pools, the
// runtime's library API. Each one exists (so the libraries load) and returns
// cudaErrorNotSupported, which also becomes the thread's last error. torch
// reaches them only when asked for (torch.cuda.graphs, IPC between processes,
// the cudaMallocAsync allocator backend); docs/frameworks.md lists them.
//
// Their parameters do not matter: a C function that ignores its arguments and
// returns an int may be called with any argument list on x86-64 and AArch64,
// so each one is defined without parameters (this file includes no CUDA
// header, whose prototypes would conflict).

extern "C" {
__attribute__((visibility("hidden"))) int simgpu_cudart_not_supported(void);
}

#define SIMGPU_UNSUPPORTED(name) \
  extern "C" int name(void) { return simgpu_cudart_not_supported(); }

// graphs and stream capture
SIMGPU_UNSUPPORTED(cudaStreamBeginCapture)
SIMGPU_UNSUPPORTED(cudaStreamBeginCapture_ptsz)
SIMGPU_UNSUPPORTED(cudaStreamBeginCaptureToGraph)
SIMGPU_UNSUPPORTED(cudaStreamBeginCaptureToGraph_ptsz)
SIMGPU_UNSUPPORTED(cudaStreamEndCapture)
SIMGPU_UNSUPPORTED(cudaStreamEndCapture_ptsz)
SIMGPU_UNSUPPORTED(cudaStreamUpdateCaptureDependencies)
SIMGPU_UNSUPPORTED(cudaStreamUpdateCaptureDependencies_ptsz)
SIMGPU_UNSUPPORTED(cudaGraphAddNode)
SIMGPU_UNSUPPORTED(cudaGraphConditionalHandleCreate)
SIMGPU_UNSUPPORTED(cudaGraphDestroy)
SIMGPU_UNSUPPORTED(cudaGraphExecDestroy)
SIMGPU_UNSUPPORTED(cudaGraphGetNodes)
SIMGPU_UNSUPPORTED(cudaGraphInstantiate)
SIMGPU_UNSUPPORTED(cudaGraphInstantiateWithFlags)
SIMGPU_UNSUPPORTED(cudaGraphLaunch)
SIMGPU_UNSUPPORTED(cudaGraphLaunch_ptsz)
SIMGPU_UNSUPPORTED(cudaGraphNodeGetDependencies)
SIMGPU_UNSUPPORTED(cudaGraphRetainUserObject)
SIMGPU_UNSUPPORTED(cudaUserObjectCreate)
SIMGPU_UNSUPPORTED(cudaUserObjectRelease)
SIMGPU_UNSUPPORTED(cudaDeviceGetGraphMemAttribute)
SIMGPU_UNSUPPORTED(cudaDeviceSetGraphMemAttribute)

// interprocess handles
SIMGPU_UNSUPPORTED(cudaIpcGetEventHandle)
SIMGPU_UNSUPPORTED(cudaIpcOpenEventHandle)
SIMGPU_UNSUPPORTED(cudaIpcGetMemHandle)
SIMGPU_UNSUPPORTED(cudaIpcOpenMemHandle)
SIMGPU_UNSUPPORTED(cudaIpcCloseMemHandle)

// memory pools (torch's cudaMallocAsync allocator backend)
SIMGPU_UNSUPPORTED(cudaDeviceGetDefaultMemPool)
SIMGPU_UNSUPPORTED(cudaMemPoolGetAttribute)
SIMGPU_UNSUPPORTED(cudaMemPoolSetAttribute)
SIMGPU_UNSUPPORTED(cudaMemPoolSetAccess)
SIMGPU_UNSUPPORTED(cudaMemPoolTrimTo)

// the runtime's library API (cudaLibrary_t); the driver's cuLibrary* works
SIMGPU_UNSUPPORTED(cudaLibraryLoadData)
SIMGPU_UNSUPPORTED(cudaLibraryLoadFromFile)
SIMGPU_UNSUPPORTED(cudaLibraryUnload)
SIMGPU_UNSUPPORTED(cudaLibraryGetKernel)
SIMGPU_UNSUPPORTED(cudaLibraryGetKernelCount)
SIMGPU_UNSUPPORTED(cudaLibraryGetGlobal)
SIMGPU_UNSUPPORTED(cudaLibraryGetManaged)
SIMGPU_UNSUPPORTED(cudaLibraryGetUnifiedFunction)
