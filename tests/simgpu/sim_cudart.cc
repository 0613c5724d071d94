// The simulated CUDA runtime, libcudart.so.13 (see README.md).
//
// A small stand-in for NVIDIA's shared runtime, with its real ABI (CUDA 13.0
// cuda_runtime_api.h and the nvcc registration/launch entry points of
// crt/host_runtime.h), so that programs built with `nvcc --cudart shared` run
// on the simulated driver unchanged. NVIDIA's own runtime cannot: it performs
// an integrity check that only NVIDIA's driver passes.
//
// It resolves the driver exactly the way NVIDIA's runtime does, and never
// calls it through the PLT (it does not link libcuda):
//   dlopen("libcuda.so.1") -> dlsym(handle, "cuGetProcAddress_v2") -> an empty
//   probe -> "cuInit" -> "cuGetProcAddress" (11030, then 12000) and, through
//   the 12000 pointer, every (name, version, flags) NVIDIA's cudart 13.0 asks
//   for, in the same order (kRequests below).
// So an interposer's dlsym / cuGetProcAddress hooks see what they see in a
// real job. Only the legacy default stream and the per-thread default stream
// entry points (_ptsz / _ptds, --default-stream per-thread) of the subset
// below are provided; everything else is absent.
#define __CUDA_API_VERSION_INTERNAL 1  // declares both the legacy and _ptsz/_ptds names
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>
#include <cupti_runtime_cbid.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <atomic>
#include <mutex>
#include <new>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "simgpu_hooks.h"

#define CUDART_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

// ---------------------------------------------------------------------------
// The driver requests of NVIDIA's cudart 13.0 at start-up, in order: name,
// cudaVersion, flags (2 = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM).
// Source: shared/reference/cudart13-driver-requests.txt (the first row is the
// empty probe). Rows 0 and 1 are asked of the dlsym'd cuGetProcAddress_v2,
// rows 2 and 3 too (the self-lookup); every later row of the pointer row 3
// returned.
struct Request {
  std::string_view name;
  int version;
  int flags;
};

constexpr Request kRequests[] = {
    {"", 0, 0}, {"cuInit", 2000, 0}, {"cuGetProcAddress", 11030, 0},
    {"cuGetProcAddress", 12000, 0}, {"cuDeviceGet", 2000, 0}, {"cuDeviceGetCount", 2000, 0},
    {"cuDeviceGetName", 2000, 0}, {"cuDeviceTotalMem", 3020, 0},
    {"cuDeviceGetAttribute", 2000, 0}, {"cuDeviceGetP2PAttribute", 8000, 0},
    {"cuDeviceGetHostAtomicCapabilities", 13000, 0},
    {"cuDeviceGetP2PAtomicCapabilities", 13000, 0}, {"cuDriverGetVersion", 2020, 0},
    {"cuDeviceGetByPCIBusId", 4010, 0}, {"cuDeviceGetPCIBusId", 4010, 0},
    {"cuDeviceGetUuid", 9020, 0}, {"cuDeviceGetTexture1DLinearMaxWidth", 11010, 0},
    {"cuDeviceGetDefaultMemPool", 11020, 0}, {"cuDeviceSetMemPool", 11020, 0},
    {"cuDeviceGetMemPool", 11020, 0}, {"cuFlushGPUDirectRDMAWrites", 11030, 0},
    {"cuDevicePrimaryCtxRetain", 7000, 0}, {"cuDevicePrimaryCtxRelease", 7000, 0},
    {"cuDevicePrimaryCtxSetFlags", 11000, 0}, {"cuDevicePrimaryCtxGetState", 7000, 0},
    {"cuDevicePrimaryCtxReset", 7000, 0}, {"cuCtxCreate", 3020, 0}, {"cuCtxGetFlags", 7000, 0},
    {"cuCtxSetCurrent", 4000, 0}, {"cuCtxGetCurrent", 4000, 0}, {"cuCtxDetach", 2000, 0},
    {"cuCtxGetApiVersion", 3020, 0}, {"cuCtxGetDevice", 2000, 0}, {"cuCtxGetDevice", 13000, 0},
    {"cuCtxGetLimit", 3010, 0}, {"cuCtxSetLimit", 3010, 0}, {"cuCtxGetCacheConfig", 3020, 0},
    {"cuCtxSetCacheConfig", 3020, 0}, {"cuCtxGetSharedMemConfig", 4020, 0},
    {"cuCtxGetStreamPriorityRange", 5050, 0}, {"cuCtxSetSharedMemConfig", 4020, 0},
    {"cuCtxSynchronize", 2000, 0}, {"cuCtxSynchronize", 13000, 0},
    {"cuCtxResetPersistingL2Cache", 11000, 0}, {"cuCtxPopCurrent", 4000, 0},
    {"cuCtxPushCurrent", 4000, 0}, {"cuModuleLoad", 2000, 0}, {"cuModuleLoadData", 2000, 0},
    {"cuModuleLoadFatBinary", 2000, 0}, {"cuModuleUnload", 2000, 0},
    {"cuModuleGetFunction", 2000, 0}, {"cuModuleGetGlobal", 3020, 0},
    {"cuModuleGetTexRef", 2000, 0}, {"cuModuleGetSurfRef", 3000, 0},
    {"cuModuleGetLoadingMode", 11070, 0}, {"cuLibraryLoadData", 12000, 0},
    {"cuLibraryLoadFromFile", 12000, 0}, {"cuLibraryUnload", 12000, 0},
    {"cuLibraryGetKernel", 12000, 0}, {"cuLibraryGetModule", 12000, 0},
    {"cuKernelGetFunction", 12000, 0}, {"cuLibraryGetGlobal", 12000, 0},
    {"cuLibraryGetManaged", 12000, 0}, {"cuLibraryGetUnifiedFunction", 12000, 0},
    {"cuLibraryGetKernelCount", 12040, 0}, {"cuLibraryEnumerateKernels", 12040, 0},
    {"cuKernelGetAttribute", 12000, 0}, {"cuKernelSetAttribute", 12000, 0},
    {"cuKernelSetCacheConfig", 12000, 0}, {"cuKernelGetName", 12030, 0},
    {"cuKernelGetParamInfo", 12040, 0}, {"cuLinkCreate", 5050, 0}, {"cuLinkAddData", 5050, 0},
    {"cuLinkAddFile", 5050, 0}, {"cuLinkComplete", 5050, 0}, {"cuLinkDestroy", 5050, 0},
    {"cuMemGetInfo", 3020, 0}, {"cuMemAllocManaged", 6000, 0}, {"cuMemAlloc", 3020, 0},
    {"cuMemAllocPitch", 3020, 0}, {"cuMemFree", 3020, 0}, {"cuMemGetAddressRange", 3020, 0},
    {"cuMemFreeHost", 2000, 0}, {"cuMemHostAlloc", 2020, 0},
    {"cuMemHostGetDevicePointer", 3020, 0}, {"cuMemHostGetFlags", 2030, 0},
    {"cuMemHostRegister", 6050, 0}, {"cuMemHostUnregister", 4000, 0},
    {"cuPointerGetAttribute", 4000, 0}, {"cuPointerGetAttributes", 7000, 0},
    {"cuMemAllocAsync", 11020, 0}, {"cuMemAllocAsync", 11020, 2},
    {"cuMemAllocFromPoolAsync", 11020, 0}, {"cuMemAllocFromPoolAsync", 11020, 2},
    {"cuMemFreeAsync", 11020, 0}, {"cuMemFreeAsync", 11020, 2}, {"cuMemPoolTrimTo", 11020, 0},
    {"cuMemPoolSetAttribute", 11020, 0}, {"cuMemPoolGetAttribute", 11020, 0},
    {"cuMemPoolSetAccess", 11020, 0}, {"cuMemPoolGetAccess", 11020, 0},
    {"cuMemPoolCreate", 11020, 0}, {"cuMemPoolDestroy", 11020, 0},
    {"cuMemPoolExportToShareableHandle", 11020, 0},
    {"cuMemPoolImportFromShareableHandle", 11020, 0}, {"cuMemPoolExportPointer", 11020, 0},
    {"cuMemPoolImportPointer", 11020, 0}, {"cuMemGetDefaultMemPool", 13000, 0},
    {"cuMemGetMemPool", 13000, 0}, {"cuMemSetMemPool", 13000, 0}, {"cuMemcpy", 4000, 0},
    {"cuMemcpy", 7000, 2}, {"cuMemcpyAsync", 4000, 0}, {"cuMemcpyAsync", 7000, 2},
    {"cuMemcpyPeer", 4000, 0}, {"cuMemcpyPeer", 7000, 2}, {"cuMemcpyPeerAsync", 4000, 0},
    {"cuMemcpyPeerAsync", 7000, 2}, {"cuMemcpyHtoD", 3020, 0}, {"cuMemcpyHtoD", 7000, 2},
    {"cuMemcpyHtoDAsync", 3020, 0}, {"cuMemcpyHtoDAsync", 7000, 2}, {"cuMemcpyDtoH", 3020, 0},
    {"cuMemcpyDtoH", 7000, 2}, {"cuMemcpyDtoHAsync", 3020, 0}, {"cuMemcpyDtoHAsync", 7000, 2},
    {"cuMemcpyDtoD", 3020, 0}, {"cuMemcpyDtoD", 7000, 2}, {"cuMemcpyDtoDAsync", 3020, 0},
    {"cuMemcpyDtoDAsync", 7000, 2}, {"cuMemcpy2DUnaligned", 3020, 0},
    {"cuMemcpy2DUnaligned", 7000, 2}, {"cuMemcpy2DAsync", 3020, 0}, {"cuMemcpy2DAsync", 7000, 2},
    {"cuMemcpy3D", 3020, 0}, {"cuMemcpy3D", 7000, 2}, {"cuMemcpy3DAsync", 3020, 0},
    {"cuMemcpy3DAsync", 7000, 2}, {"cuMemcpy3DPeer", 4000, 0}, {"cuMemcpy3DPeer", 7000, 2},
    {"cuMemcpy3DPeerAsync", 4000, 0}, {"cuMemcpy3DPeerAsync", 7000, 2},
    {"cuMemcpyBatchAsync", 13000, 0}, {"cuMemcpyBatchAsync", 13000, 2},
    {"cuMemcpy3DBatchAsync", 13000, 0}, {"cuMemcpy3DBatchAsync", 13000, 2},
    {"cuMemcpyBatchAsync", 12080, 0}, {"cuMemcpyBatchAsync", 12080, 2},
    {"cuMemcpy3DBatchAsync", 12080, 0}, {"cuMemcpy3DBatchAsync", 12080, 2},
    {"cuMemsetD8", 3020, 0}, {"cuMemsetD8", 7000, 2}, {"cuMemsetD8Async", 3020, 0},
    {"cuMemsetD8Async", 7000, 2}, {"cuMemsetD2D8", 3020, 0}, {"cuMemsetD2D8", 7000, 2},
    {"cuMemsetD2D8Async", 3020, 0}, {"cuMemsetD2D8Async", 7000, 2},
    {"cuFuncSetCacheConfig", 3000, 0}, {"cuFuncSetSharedMemConfig", 4020, 0},
    {"cuFuncGetAttribute", 2020, 0}, {"cuFuncSetAttribute", 9000, 0},
    {"cuFuncGetName", 12030, 0}, {"cuFuncGetParamInfo", 12040, 0}, {"cuArrayCreate", 3020, 0},
    {"cuArrayGetDescriptor", 3020, 0}, {"cuArrayGetSparseProperties", 11010, 0},
    {"cuArrayGetPlane", 11020, 0}, {"cuArray3DCreate", 3020, 0},
    {"cuArray3DGetDescriptor", 3020, 0}, {"cuArrayDestroy", 2000, 0},
    {"cuMipmappedArrayCreate", 5000, 0}, {"cuMipmappedArrayGetLevel", 5000, 0},
    {"cuMipmappedArrayGetSparseProperties", 11010, 0}, {"cuMipmappedArrayDestroy", 5000, 0},
    {"cuArrayGetMemoryRequirements", 11060, 0},
    {"cuMipmappedArrayGetMemoryRequirements", 11060, 0}, {"cuTexObjectCreate", 5000, 0},
    {"cuTexObjectDestroy", 5000, 0}, {"cuTexObjectGetResourceDesc", 5000, 0},
    {"cuTexObjectGetTextureDesc", 5000, 0}, {"cuTexObjectGetResourceViewDesc", 5000, 0},
    {"cuSurfObjectCreate", 5000, 0}, {"cuSurfObjectDestroy", 5000, 0},
    {"cuSurfObjectGetResourceDesc", 5000, 0}, {"cuImportExternalMemory", 10000, 0},
    {"cuExternalMemoryGetMappedBuffer", 10000, 0},
    {"cuExternalMemoryGetMappedMipmappedArray", 10000, 0}, {"cuDestroyExternalMemory", 10000, 0},
    {"cuImportExternalSemaphore", 10000, 0}, {"cuSignalExternalSemaphoresAsync", 10000, 0},
    {"cuSignalExternalSemaphoresAsync", 10000, 2}, {"cuWaitExternalSemaphoresAsync", 10000, 0},
    {"cuWaitExternalSemaphoresAsync", 10000, 2}, {"cuDestroyExternalSemaphore", 10000, 0},
    {"cuDeviceGetNvSciSyncAttributes", 10020, 0}, {"cuLaunchKernel", 4000, 0},
    {"cuLaunchKernel", 7000, 2}, {"cuLaunchCooperativeKernel", 9000, 0},
    {"cuLaunchCooperativeKernel", 9000, 2}, {"cuLaunchHostFunc", 10000, 0},
    {"cuLaunchHostFunc", 10000, 2}, {"cuLaunchKernelEx", 11060, 0},
    {"cuLaunchKernelEx", 11060, 2}, {"cuEventCreate", 2000, 0}, {"cuEventRecord", 2000, 0},
    {"cuEventRecord", 7000, 2}, {"cuEventRecordWithFlags", 11010, 0},
    {"cuEventRecordWithFlags", 11010, 2}, {"cuEventQuery", 2000, 0},
    {"cuEventSynchronize", 2000, 0}, {"cuEventDestroy", 4000, 0},
    {"cuEventElapsedTime", 2000, 0}, {"cuEventElapsedTime", 12080, 0},
    {"cuStreamWaitValue32", 8000, 0}, {"cuStreamWaitValue32", 8000, 2},
    {"cuStreamWriteValue32", 8000, 0}, {"cuStreamWriteValue32", 8000, 2},
    {"cuStreamWaitValue64", 9000, 0}, {"cuStreamWaitValue64", 9000, 2},
    {"cuStreamWriteValue64", 9000, 0}, {"cuStreamWriteValue64", 9000, 2},
    {"cuStreamBatchMemOp", 8000, 0}, {"cuStreamBatchMemOp", 8000, 2},
    {"cuStreamCreate", 2000, 0}, {"cuStreamCreateWithPriority", 5050, 0},
    {"cuStreamGetPriority", 5050, 0}, {"cuStreamGetPriority", 7000, 2},
    {"cuStreamGetFlags", 5050, 0}, {"cuStreamGetDevice", 12080, 0},
    {"cuStreamGetDevice", 12080, 2}, {"cuStreamGetCtx", 9020, 0}, {"cuStreamGetFlags", 7000, 2},
    {"cuStreamGetId", 12000, 0}, {"cuStreamGetId", 12000, 2}, {"cuStreamDestroy", 4000, 0},
    {"cuStreamWaitEvent", 3020, 0}, {"cuStreamWaitEvent", 7000, 2},
    {"cuStreamAddCallback", 5000, 0}, {"cuStreamAddCallback", 7000, 2},
    {"cuStreamSynchronize", 2000, 0}, {"cuStreamSynchronize", 7000, 2},
    {"cuStreamQuery", 2000, 0}, {"cuStreamQuery", 7000, 2}, {"cuStreamAttachMemAsync", 6000, 0},
    {"cuStreamAttachMemAsync", 7000, 2}, {"cuStreamCopyAttributes", 11000, 0},
    {"cuStreamCopyAttributes", 11000, 2}, {"cuStreamGetAttribute", 11000, 0},
    {"cuStreamGetAttribute", 11000, 2}, {"cuStreamSetAttribute", 11000, 0},
    {"cuStreamSetAttribute", 11000, 2}, {"cuDeviceCanAccessPeer", 4000, 0},
    {"cuCtxEnablePeerAccess", 4000, 0}, {"cuCtxDisablePeerAccess", 4000, 0},
    {"cuIpcGetEventHandle", 4010, 0}, {"cuIpcOpenEventHandle", 4010, 0},
    {"cuIpcGetMemHandle", 4010, 0}, {"cuIpcOpenMemHandle", 4010, 0},
    {"cuIpcOpenMemHandle", 11000, 0}, {"cuIpcCloseMemHandle", 4010, 0},
    {"cuGLCtxCreate", 3020, 0}, {"cuGLInit", 2000, 0}, {"cuGLGetDevices", 4010, 0},
    {"cuGLRegisterBufferObject", 2000, 0}, {"cuGLMapBufferObject", 3020, 0},
    {"cuGLMapBufferObject", 7000, 2}, {"cuGLMapBufferObjectAsync", 3020, 0},
    {"cuGLMapBufferObjectAsync", 7000, 2}, {"cuGLUnmapBufferObject", 2000, 0},
    {"cuGLUnmapBufferObjectAsync", 2030, 0}, {"cuGLUnregisterBufferObject", 2000, 0},
    {"cuGLSetBufferObjectMapFlags", 2030, 0}, {"cuGraphicsGLRegisterImage", 3000, 0},
    {"cuGraphicsGLRegisterBuffer", 3000, 0}, {"cuGraphicsEGLRegisterImage", 7000, 0},
    {"cuEGLStreamConsumerConnect", 7000, 0}, {"cuEGLStreamConsumerDisconnect", 7000, 0},
    {"cuEGLStreamConsumerAcquireFrame", 7000, 0}, {"cuEGLStreamConsumerReleaseFrame", 7000, 0},
    {"cuEGLStreamProducerConnect", 7000, 0}, {"cuEGLStreamProducerDisconnect", 7000, 0},
    {"cuEGLStreamProducerPresentFrame", 7000, 0}, {"cuEGLStreamProducerReturnFrame", 7000, 0},
    {"cuGraphicsResourceGetMappedEglFrame", 7000, 0},
    {"cuEGLStreamConsumerConnectWithFlags", 8000, 0}, {"cuGraphicsUnregisterResource", 3000, 0},
    {"cuGraphicsMapResources", 3000, 0}, {"cuGraphicsMapResources", 7000, 2},
    {"cuGraphicsUnmapResources", 3000, 0}, {"cuGraphicsUnmapResources", 7000, 2},
    {"cuGraphicsResourceSetMapFlags", 6050, 0}, {"cuGraphicsSubResourceGetMappedArray", 3000, 0},
    {"cuGraphicsResourceGetMappedMipmappedArray", 5000, 0},
    {"cuGraphicsResourceGetMappedPointer", 3020, 0}, {"cuProfilerInitialize", 4000, 0},
    {"cuProfilerStart", 4000, 0}, {"cuProfilerStop", 4000, 0}, {"cuVDPAUGetDevice", 3010, 0},
    {"cuVDPAUCtxCreate", 3020, 0}, {"cuGraphicsVDPAURegisterVideoSurface", 3010, 0},
    {"cuGraphicsVDPAURegisterOutputSurface", 3010, 0}, {"cuGetExportTable", 3000, 0},
    {"cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags", 7000, 0},
    {"cuOccupancyAvailableDynamicSMemPerBlock", 10020, 0},
    {"cuOccupancyMaxPotentialClusterSize", 11070, 0}, {"cuOccupancyMaxActiveClusters", 11070, 0},
    {"cuMemAdvise", 8000, 0}, {"cuMemPrefetchAsync", 8000, 0}, {"cuMemPrefetchAsync", 8000, 2},
    {"cuMemAdvise", 12020, 0}, {"cuMemPrefetchAsync", 12020, 0},
    {"cuMemPrefetchAsync", 12020, 2}, {"cuMemPrefetchBatchAsync", 13000, 0},
    {"cuMemPrefetchBatchAsync", 13000, 2}, {"cuMemDiscardBatchAsync", 13000, 0},
    {"cuMemDiscardBatchAsync", 13000, 2}, {"cuMemDiscardAndPrefetchBatchAsync", 13000, 0},
    {"cuMemDiscardAndPrefetchBatchAsync", 13000, 2}, {"cuMemRangeGetAttribute", 8000, 0},
    {"cuMemRangeGetAttributes", 8000, 0}, {"cuGetErrorString", 6000, 0},
    {"cuGetErrorName", 6000, 0}, {"cuGraphCreate", 10000, 0}, {"cuGraphAddKernelNode", 12000, 0},
    {"cuGraphKernelNodeGetParams", 12000, 0}, {"cuGraphKernelNodeSetParams", 12000, 0},
    {"cuGraphAddMemcpyNode", 10000, 0}, {"cuGraphMemcpyNodeGetParams", 10000, 0},
    {"cuGraphMemcpyNodeSetParams", 10000, 0}, {"cuGraphAddMemsetNode", 10000, 0},
    {"cuGraphMemsetNodeGetParams", 10000, 0}, {"cuGraphMemsetNodeSetParams", 10000, 0},
    {"cuGraphAddHostNode", 10000, 0}, {"cuGraphHostNodeGetParams", 10000, 0},
    {"cuGraphHostNodeSetParams", 10000, 0}, {"cuGraphAddChildGraphNode", 10000, 0},
    {"cuGraphChildGraphNodeGetGraph", 10000, 0}, {"cuGraphAddEmptyNode", 10000, 0},
    {"cuGraphAddEventRecordNode", 11010, 0}, {"cuGraphEventRecordNodeGetEvent", 11010, 0},
    {"cuGraphEventRecordNodeSetEvent", 11010, 0}, {"cuGraphAddEventWaitNode", 11010, 0},
    {"cuGraphEventWaitNodeGetEvent", 11010, 0}, {"cuGraphEventWaitNodeSetEvent", 11010, 0},
    {"cuGraphAddExternalSemaphoresSignalNode", 11020, 0},
    {"cuGraphExternalSemaphoresSignalNodeGetParams", 11020, 0},
    {"cuGraphExternalSemaphoresSignalNodeSetParams", 11020, 0},
    {"cuGraphAddExternalSemaphoresWaitNode", 11020, 0},
    {"cuGraphExternalSemaphoresWaitNodeGetParams", 11020, 0},
    {"cuGraphExternalSemaphoresWaitNodeSetParams", 11020, 0},
    {"cuGraphExecExternalSemaphoresSignalNodeSetParams", 11020, 0},
    {"cuGraphExecExternalSemaphoresWaitNodeSetParams", 11020, 0},
    {"cuGraphAddMemAllocNode", 11040, 0}, {"cuGraphMemAllocNodeGetParams", 11040, 0},
    {"cuGraphAddMemFreeNode", 11040, 0}, {"cuGraphMemFreeNodeGetParams", 11040, 0},
    {"cuDeviceGraphMemTrim", 11040, 0}, {"cuDeviceGetGraphMemAttribute", 11040, 0},
    {"cuDeviceSetGraphMemAttribute", 11040, 0}, {"cuGraphClone", 10000, 0},
    {"cuGraphNodeFindInClone", 10000, 0}, {"cuGraphNodeGetType", 10000, 0},
    {"cuGraphGetNodes", 10000, 0}, {"cuGraphGetRootNodes", 10000, 0},
    {"cuGraphGetEdges", 10000, 0}, {"cuGraphGetEdges", 12030, 0},
    {"cuGraphNodeGetDependencies", 10000, 0}, {"cuGraphNodeGetDependencies", 12030, 0},
    {"cuGraphNodeGetDependentNodes", 10000, 0}, {"cuGraphNodeGetDependentNodes", 12030, 0},
    {"cuGraphAddDependencies", 10000, 0}, {"cuGraphAddDependencies", 12030, 0},
    {"cuGraphRemoveDependencies", 10000, 0}, {"cuGraphRemoveDependencies", 12030, 0},
    {"cuGraphDestroyNode", 10000, 0}, {"cuGraphInstantiate", 10000, 0},
    {"cuGraphInstantiate", 11000, 0}, {"cuGraphInstantiateWithFlags", 11040, 0},
    {"cuGraphUpload", 11010, 0}, {"cuGraphUpload", 11010, 2}, {"cuGraphLaunch", 10000, 0},
    {"cuGraphLaunch", 10000, 2}, {"cuGraphExecDestroy", 10000, 0}, {"cuGraphDestroy", 10000, 0},
    {"cuStreamBeginCapture", 10000, 0}, {"cuStreamBeginCapture", 10000, 2},
    {"cuStreamBeginCapture", 10010, 0}, {"cuStreamBeginCapture", 10010, 2},
    {"cuStreamBeginCaptureToGraph", 12030, 0}, {"cuStreamBeginCaptureToGraph", 12030, 2},
    {"cuStreamEndCapture", 10000, 0}, {"cuStreamEndCapture", 10000, 2},
    {"cuStreamIsCapturing", 10000, 0}, {"cuStreamIsCapturing", 10000, 2},
    {"cuStreamGetCaptureInfo", 10010, 0}, {"cuStreamGetCaptureInfo", 10010, 2},
    {"cuStreamGetCaptureInfo", 11030, 0}, {"cuStreamGetCaptureInfo", 11030, 2},
    {"cuStreamGetCaptureInfo", 12030, 0}, {"cuStreamGetCaptureInfo", 12030, 2},
    {"cuStreamUpdateCaptureDependencies", 11030, 0},
    {"cuStreamUpdateCaptureDependencies", 11030, 2},
    {"cuStreamUpdateCaptureDependencies", 12030, 0},
    {"cuStreamUpdateCaptureDependencies", 12030, 2},
    {"cuGraphExecKernelNodeSetParams", 12000, 0}, {"cuGraphExecMemcpyNodeSetParams", 10020, 0},
    {"cuGraphExecMemsetNodeSetParams", 10020, 0}, {"cuGraphExecHostNodeSetParams", 10020, 0},
    {"cuGraphExecChildGraphNodeSetParams", 11010, 0},
    {"cuGraphExecEventRecordNodeSetEvent", 11010, 0},
    {"cuGraphExecEventWaitNodeSetEvent", 11010, 0},
    {"cuThreadExchangeStreamCaptureMode", 10010, 0}, {"cuGraphExecUpdate", 12000, 0},
    {"cuGraphKernelNodeCopyAttributes", 11000, 0}, {"cuGraphKernelNodeGetAttribute", 11000, 0},
    {"cuGraphKernelNodeSetAttribute", 11000, 0}, {"cuGraphDebugDotPrint", 11030, 0},
    {"cuUserObjectCreate", 11030, 0}, {"cuUserObjectRetain", 11030, 0},
    {"cuUserObjectRelease", 11030, 0}, {"cuGraphRetainUserObject", 11030, 0},
    {"cuGraphReleaseUserObject", 11030, 0}, {"cuGraphNodeSetEnabled", 11060, 0},
    {"cuGraphNodeGetEnabled", 11060, 0}, {"cuGraphInstantiateWithParams", 12000, 0},
    {"cuGraphInstantiateWithParams", 12000, 2}, {"cuGraphExecGetFlags", 12000, 0},
    {"cuGraphAddNode", 12020, 0}, {"cuGraphAddNode", 12030, 0},
    {"cuGraphNodeSetParams", 12020, 0}, {"cuGraphExecNodeSetParams", 12020, 0},
    {"cuGraphConditionalHandleCreate", 12030, 0},
    {"cuDeviceRegisterAsyncNotification", 12040, 0},
    {"cuDeviceUnregisterAsyncNotification", 12040, 0}, {"cuLogsRegisterCallback", 12090, 0},
    {"cuLogsUnregisterCallback", 12090, 0}, {"cuLogsCurrent", 12090, 0},
    {"cuLogsDumpToFile", 12090, 0}, {"cuLogsDumpToMemory", 12090, 0},
};

constexpr int kNumRequests = static_cast<int>(sizeof kRequests / sizeof kRequests[0]);
constexpr int kLastBootstrapRow = 3;  // rows 0..3 go through the dlsym'd pointer
static_assert(kRequests[0].name.empty() && kRequests[1].name == "cuInit");
static_assert(kRequests[2].name == "cuGetProcAddress" && kRequests[2].version == 11030);
static_assert(kRequests[3].name == "cuGetProcAddress" && kRequests[3].version == 12000);

// The row of a request; a (name, version, flags) cudart 13.0 never asks for
// does not compile.
consteval int Row(std::string_view name, int version, int flags) {
  for (int i = 0; i < kNumRequests; ++i) {
    if (kRequests[i].name == name && kRequests[i].version == version &&
        kRequests[i].flags == flags) {
      return i;
    }
  }
  throw "not a driver request of cudart 13.0";
}

constexpr int kMaxDevices = 64;

// ---------------------------------------------------------------------------
// State. Registration runs from the program's static constructors, possibly
// before this library's own globals are constructed, and __cudaUnregister*
// from atexit handlers: everything lives in objects created on first use and
// never destroyed.
struct Driver {
  std::once_flag once;
  cudaError_t init_error = cudaSuccess;
  void* slots[kNumRequests] = {};  // what each request returned (null: not found)
  int device_count = 0;
  std::mutex mu;
  CUcontext primary[kMaxDevices] = {};  // retained primary contexts
  std::atomic<unsigned> generation{1};   // bumped by cudaDeviceReset
};

Driver& Drv() {
  static Driver* d = new Driver;
  return *d;
}

struct Registry;
Registry& Reg();
void ResetLocksAfterFork();  // below: a fork child gets these locks back unlocked

// The pointer the driver returned for a request, typed by cudaTypedefs.h.
#define DRV(name, ver) reinterpret_cast<PFN_##name##_v##ver>(Drv().slots[Row(#name, ver, 0)])
// Legacy or per-thread default stream variant (flags 2 row, same signature).
#define DRV_PT(pt, name, ver, ptver) \
  reinterpret_cast<PFN_##name##_v##ver>(   \
      Drv().slots[(pt) ? Row(#name, ptver, 2) : Row(#name, ver, 0)])

struct FatBinary {
  const void* image;                       // what cuModuleLoadData gets
  CUmodule module[kMaxDevices] = {};       // loaded on first launch, per device
};

struct Kernel {
  FatBinary* binary;
  const void* host_stub;
  std::string device_name;                       // mangled: matches SIMGPU_KERNEL_US globs
  std::atomic<CUfunction> function[kMaxDevices] = {};
};

// A __device__ or __constant__ variable (__cudaRegisterVar): its storage is
// simulated device memory, allocated at first use and zero-filled.
struct Var {
  size_t size = 0;
  void* storage = nullptr;
};

struct Registry {
  std::mutex mu;
  std::unordered_map<const void*, Kernel*> by_stub;
  std::unordered_map<const void*, Kernel*> by_handle;  // cudaKernel_t == Kernel*
  std::unordered_map<const void*, Var> vars;           // by host shadow address
};

// A fork child has only the forking thread: a lock another thread held at
// the fork would stay held for ever.
void ResetLocksAfterFork() {
  new (&Drv().mu) std::mutex();
  new (&Reg().mu) std::mutex();
}
__attribute__((constructor)) void RegisterForkHandler() {
  pthread_atfork(nullptr, nullptr, ResetLocksAfterFork);
}

Registry& Reg() {
  static Registry* r = new Registry;
  return *r;
}

struct LaunchConfig {
  dim3 grid, block;
  size_t shared_mem;
  cudaStream_t stream;
};

struct ThreadState {
  int device = 0;
  CUcontext ctx = nullptr;  // the primary context this thread made current
  int ready_device = -1;    // Ready() fast path: device and generation last checked
  unsigned ready_generation = 0;
  cudaError_t last_error = cudaSuccess;
  LaunchConfig configs[8];  // __cudaPushCallConfiguration stack
  int depth = 0;
};

thread_local ThreadState t;

// ---------------------------------------------------------------------------
// API records (CUPTI_ACTIVITY_KIND_RUNTIME): the observer the simulated
// libcupti installs (simgpu_cudart_set_api_observer) while that kind is
// enabled. NVIDIA's CUPTI records a runtime call once, under its
// cupti_runtime_cbid.h id, and the device work it submits (through the
// driver calls it makes) carries the runtime call's correlation id.
std::atomic<const SimgpuApiObserver*> g_api_observer{nullptr};
thread_local bool t_in_api = false;  // an outermost call is being reported

uint64_t MonoNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ULL + static_cast<uint64_t>(ts.tv_nsec);
}

// Runs an entry point's body, reported to the observer when one is
// installed (a single load of the observer pointer when none is). Runtime
// calls made inside a reported one (cudaMallocHost -> cudaHostAlloc) are not
// reported again.
template <typename F>
cudaError_t Api(CUpti_runtime_api_trace_cbid cbid, F&& body) {
  const SimgpuApiObserver* o = g_api_observer.load(std::memory_order_acquire);
  if (o == nullptr || t_in_api) return body();
  t_in_api = true;
  const uint64_t correlation = o->enter(cbid);
  const uint64_t start = MonoNs();
  const cudaError_t e = body();
  const uint64_t end = MonoNs();
  t_in_api = false;
  o->exit(cbid, correlation, start, end, static_cast<uint32_t>(e));
  return e;
}

// ---------------------------------------------------------------------------
// Errors. cudaError_t values equal the CUresult values for every code below
// (CUDA_ERROR_INVALID_CONTEXT 201 = cudaErrorDeviceUninitialized, ...).
struct ErrorText {
  cudaError_t code;
  const char* name;
  const char* text;
};

#define ERR(code, text) {code, #code, text}
constexpr ErrorText kErrors[] = {
    ERR(cudaSuccess, "no error"),
    ERR(cudaErrorInvalidValue, "invalid argument"),
    ERR(cudaErrorMemoryAllocation, "out of memory"),
    ERR(cudaErrorInitializationError, "initialization error"),
    ERR(cudaErrorCudartUnloading, "driver shutting down"),
    ERR(cudaErrorInvalidConfiguration, "invalid configuration argument"),
    ERR(cudaErrorInvalidDevicePointer, "invalid device pointer"),
    ERR(cudaErrorInvalidMemcpyDirection, "invalid copy direction for memcpy"),
    ERR(cudaErrorInvalidPitchValue, "invalid pitch argument"),
    ERR(cudaErrorInvalidSymbol, "invalid device symbol"),
    ERR(cudaErrorPeerAccessUnsupported, "peer access is not supported between these two devices"),
    ERR(cudaErrorStubLibrary, "CUDA driver is a stub library"),
    ERR(cudaErrorInsufficientDriver, "CUDA driver version is insufficient for CUDA runtime version"),
    ERR(cudaErrorDevicesUnavailable, "CUDA-capable device(s) is/are busy or unavailable"),
    ERR(cudaErrorMissingConfiguration, "__global__ function call is not configured"),
    ERR(cudaErrorInvalidDeviceFunction, "invalid device function"),
    ERR(cudaErrorNoDevice, "no CUDA-capable device is detected"),
    ERR(cudaErrorInvalidDevice, "invalid device ordinal"),
    ERR(cudaErrorInvalidKernelImage, "device kernel image is invalid"),
    ERR(cudaErrorDeviceUninitialized, "invalid device context"),
    ERR(cudaErrorNoKernelImageForDevice, "no kernel image is available for execution on the device"),
    ERR(cudaErrorInvalidPtx, "a PTX JIT compilation failed"),
    ERR(cudaErrorInvalidResourceHandle, "invalid resource handle"),
    ERR(cudaErrorSymbolNotFound, "named symbol not found"),
    ERR(cudaErrorNotReady, "device not ready"),
    ERR(cudaErrorIllegalAddress, "an illegal memory access was encountered"),
    ERR(cudaErrorLaunchOutOfResources, "too many resources requested for launch"),
    ERR(cudaErrorLaunchTimeout, "the launch timed out and was terminated"),
    ERR(cudaErrorContextIsDestroyed, "context is destroyed"),
    ERR(cudaErrorHostMemoryAlreadyRegistered, "part or all of the requested memory range is already mapped"),
    ERR(cudaErrorHostMemoryNotRegistered, "pointer does not correspond to a registered memory region"),
    ERR(cudaErrorLaunchFailure, "unspecified launch failure"),
    ERR(cudaErrorNotPermitted, "operation not permitted"),
    ERR(cudaErrorNotSupported, "operation not supported"),
    ERR(cudaErrorSystemDriverMismatch, "system has unsupported display driver / cuda driver combination"),
    ERR(cudaErrorUnknown, "unknown error"),
};
#undef ERR

const ErrorText* FindError(int code) {
  for (const ErrorText& e : kErrors) {
    if (e.code == code) return &e;
  }
  return nullptr;
}

cudaError_t ToRt(CUresult r) {
  if (r == CUDA_SUCCESS) return cudaSuccess;
  if (r == CUDA_ERROR_NOT_FOUND) return cudaErrorSymbolNotFound;
  const ErrorText* e = FindError(static_cast<int>(r));
  return e != nullptr ? e->code : cudaErrorUnknown;
}

// Calls a resolved driver entry point; a null one (the driver lacks it) is
// "not supported".
template <typename F, typename... A>
cudaError_t Cu(F fn, A... args) {
  if (fn == nullptr) return cudaErrorNotSupported;
  return ToRt(fn(args...));
}

// Every API entry point returns through this: failures become the thread's
// last error (cudaGetLastError).
cudaError_t Record(cudaError_t e) {
  if (e != cudaSuccess) t.last_error = e;
  return e;
}

// ---------------------------------------------------------------------------
// Driver start-up, once per process, the way NVIDIA's runtime does it.
cudaError_t LoadDriver() {
  Driver& d = Drv();
  void* lib = dlopen("libcuda.so.1", RTLD_NOW);
  if (lib == nullptr) return cudaErrorInsufficientDriver;
  auto entry = reinterpret_cast<PFN_cuGetProcAddress_v12000>(dlsym(lib, "cuGetProcAddress_v2"));
  if (entry == nullptr) return cudaErrorInsufficientDriver;
  auto ask = [&](PFN_cuGetProcAddress_v12000 gpa, int row) {
    CUdriverProcAddressQueryResult status;
    const Request& q = kRequests[row];
    // Names are string literals: NUL-terminated.
    if (gpa(q.name.data(), &d.slots[row], q.version, static_cast<cuuint64_t>(q.flags),
            &status) != CUDA_SUCCESS) {
      d.slots[row] = nullptr;
    }
  };
  for (int row = 0; row <= kLastBootstrapRow; ++row) ask(entry, row);
  auto gpa = reinterpret_cast<PFN_cuGetProcAddress_v12000>(d.slots[kLastBootstrapRow]);
  if (gpa == nullptr) return cudaErrorInsufficientDriver;
  for (int row = kLastBootstrapRow + 1; row < kNumRequests; ++row) ask(gpa, row);

  int version = 0;
  if (Cu(DRV(cuDriverGetVersion, 2020), &version) != cudaSuccess || version < CUDART_VERSION) {
    return cudaErrorInsufficientDriver;
  }
  auto init = reinterpret_cast<PFN_cuInit_v2000>(d.slots[Row("cuInit", 2000, 0)]);
  if (cudaError_t e = Cu(init, 0u)) return e;
  if (cudaError_t e = Cu(DRV(cuDeviceGetCount, 2000), &d.device_count)) return e;
  if (d.device_count <= 0) return cudaErrorNoDevice;
  if (d.device_count > kMaxDevices) d.device_count = kMaxDevices;
  return cudaSuccess;
}

cudaError_t Init() {
  Driver& d = Drv();
  std::call_once(d.once, [&d] { d.init_error = LoadDriver(); });
  return d.init_error;
}

cudaError_t CheckDevice(int device) {
  if (cudaError_t e = Init()) return e;
  return device >= 0 && device < Drv().device_count ? cudaSuccess : cudaErrorInvalidDevice;
}

// Driver loaded, and the primary context of this thread's device current.
cudaError_t Ready() {
  if (cudaError_t e = Init()) return e;
  Driver& d = Drv();
  const unsigned generation = d.generation.load(std::memory_order_acquire);
  if (t.ready_device == t.device && t.ready_generation == generation) return cudaSuccess;
  CUcontext ctx;
  {
    std::lock_guard<std::mutex> lk(d.mu);
    ctx = d.primary[t.device];
    if (ctx == nullptr) {
      if (cudaError_t e = Cu(DRV(cuDevicePrimaryCtxRetain, 7000), &ctx, CUdevice(t.device))) {
        return e;
      }
      d.primary[t.device] = ctx;
    }
  }
  if (t.ctx != ctx) {
    if (cudaError_t e = Cu(DRV(cuCtxSetCurrent, 4000), ctx)) return e;
    t.ctx = ctx;
  }
  t.ready_device = t.device;
  t.ready_generation = generation;
  return cudaSuccess;
}

CUdeviceptr Dptr(const void* p) { return reinterpret_cast<CUdeviceptr>(p); }
CUstream Cs(cudaStream_t s) { return reinterpret_cast<CUstream>(s); }
CUevent Ce(cudaEvent_t e) { return reinterpret_cast<CUevent>(e); }

// ---------------------------------------------------------------------------
// Implementations shared by the legacy and per-thread (pt) entry points.
// The cudaMemcpyKind picks the driver's copy so its blocking rules apply:
// DeviceToHost -> cuMemcpyDtoH_v2 etc.; Default/HostToHost -> cuMemcpy, which
// infers the direction from the addresses.
cudaError_t MemcpyImpl(bool pt, void* dst, const void* src, size_t n, cudaMemcpyKind kind) {
  if (cudaError_t e = Ready()) return e;
  if (n == 0) return cudaSuccess;
  switch (kind) {
    case cudaMemcpyHostToDevice:
      return Cu(DRV_PT(pt, cuMemcpyHtoD, 3020, 7000), Dptr(dst), src, n);
    case cudaMemcpyDeviceToHost:
      return Cu(DRV_PT(pt, cuMemcpyDtoH, 3020, 7000), dst, Dptr(src), n);
    case cudaMemcpyDeviceToDevice:
      return Cu(DRV_PT(pt, cuMemcpyDtoD, 3020, 7000), Dptr(dst), Dptr(src), n);
    case cudaMemcpyHostToHost:
    case cudaMemcpyDefault:
      return Cu(DRV_PT(pt, cuMemcpy, 4000, 7000), Dptr(dst), Dptr(src), n);
  }
  return cudaErrorInvalidMemcpyDirection;
}

cudaError_t MemcpyAsyncImpl(bool pt, void* dst, const void* src, size_t n, cudaMemcpyKind kind,
                            cudaStream_t s) {
  if (cudaError_t e = Ready()) return e;
  if (n == 0) return cudaSuccess;
  switch (kind) {
    case cudaMemcpyHostToDevice:
      return Cu(DRV_PT(pt, cuMemcpyHtoDAsync, 3020, 7000), Dptr(dst), src, n, Cs(s));
    case cudaMemcpyDeviceToHost:
      return Cu(DRV_PT(pt, cuMemcpyDtoHAsync, 3020, 7000), dst, Dptr(src), n, Cs(s));
    case cudaMemcpyDeviceToDevice:
      return Cu(DRV_PT(pt, cuMemcpyDtoDAsync, 3020, 7000), Dptr(dst), Dptr(src), n, Cs(s));
    case cudaMemcpyHostToHost:
    case cudaMemcpyDefault:
      return Cu(DRV_PT(pt, cuMemcpyAsync, 4000, 7000), Dptr(dst), Dptr(src), n, Cs(s));
  }
  return cudaErrorInvalidMemcpyDirection;
}

cudaError_t MemsetImpl(bool pt, void* p, int value, size_t n) {
  if (cudaError_t e = Ready()) return e;
  if (n == 0) return cudaSuccess;
  return Cu(DRV_PT(pt, cuMemsetD8, 3020, 7000), Dptr(p), static_cast<unsigned char>(value), n);
}

cudaError_t MemsetAsyncImpl(bool pt, void* p, int value, size_t n, cudaStream_t s) {
  if (cudaError_t e = Ready()) return e;
  if (n == 0) return cudaSuccess;
  return Cu(DRV_PT(pt, cuMemsetD8Async, 3020, 7000), Dptr(p), static_cast<unsigned char>(value),
            n, Cs(s));
}

// The driver function of a registered kernel on this thread's device: the
// binary's module is loaded (cuModuleLoadData) on first use, the function is
// looked up by its registered (mangled) device name.
cudaError_t FunctionOf(Kernel* k, CUfunction* out) {
  const int dev = t.device;
  *out = k->function[dev].load(std::memory_order_acquire);
  if (*out != nullptr) return cudaSuccess;
  std::lock_guard<std::mutex> lk(Reg().mu);
  CUmodule& mod = k->binary->module[dev];
  if (mod == nullptr) {
    if (cudaError_t e = Cu(DRV(cuModuleLoadData, 2000), &mod, k->binary->image)) {
      mod = nullptr;
      return e == cudaErrorInvalidKernelImage ? cudaErrorNoKernelImageForDevice : e;
    }
  }
  CUfunction f = nullptr;
  if (cudaError_t e = Cu(DRV(cuModuleGetFunction, 2000), &f, mod, k->device_name.c_str())) {
    return e == cudaErrorSymbolNotFound ? cudaErrorInvalidDeviceFunction : e;
  }
  k->function[dev].store(f, std::memory_order_release);
  *out = f;
  return cudaSuccess;
}

cudaError_t LaunchImpl(bool pt, Kernel* k, dim3 grid, dim3 block, void** args, size_t shared_mem,
                       cudaStream_t s) {
  if (cudaError_t e = Ready()) return e;
  if (k == nullptr) return cudaErrorInvalidDeviceFunction;
  if (grid.x == 0 || grid.y == 0 || grid.z == 0 || block.x == 0 || block.y == 0 || block.z == 0) {
    return cudaErrorInvalidConfiguration;
  }
  CUfunction f;
  if (cudaError_t e = FunctionOf(k, &f)) return e;
  return Cu(DRV_PT(pt, cuLaunchKernel, 4000, 7000), f, grid.x, grid.y, grid.z, block.x, block.y,
            block.z, static_cast<unsigned>(shared_mem), Cs(s), args, static_cast<void**>(nullptr));
}

// A host stub (the address nvcc registered) or a cudaKernel_t.
Kernel* FindKernel(const void* func) {
  Registry& r = Reg();
  std::lock_guard<std::mutex> lk(r.mu);
  if (auto it = r.by_stub.find(func); it != r.by_stub.end()) return it->second;
  if (auto it = r.by_handle.find(func); it != r.by_handle.end()) return it->second;
  return nullptr;
}

cudaError_t EntryPointImpl(const char* symbol, void** fn, unsigned version,
                           unsigned long long flags, cudaDriverEntryPointQueryResult* status) {
  if (symbol == nullptr || fn == nullptr) return cudaErrorInvalidValue;
  *fn = nullptr;
  if (cudaError_t e = Init()) return e;
  int driver = 0;
  if (cudaError_t e = Cu(DRV(cuDriverGetVersion, 2020), &driver)) return e;
  if (static_cast<int>(version) > driver) return cudaErrorInvalidValue;
  CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  CUresult r = DRV(cuGetProcAddress, 12000)(symbol, fn, static_cast<int>(version), flags, &st);
  if (status != nullptr) *status = static_cast<cudaDriverEntryPointQueryResult>(st);
  if (r != CUDA_SUCCESS) *fn = nullptr;
  // Not found is success with a null pointer (cuda_runtime_api.h).
  return r == CUDA_SUCCESS || r == CUDA_ERROR_NOT_FOUND ? cudaSuccess : ToRt(r);
}

struct FatbinWrapper {  // what nvcc passes to __cudaRegisterFatBinary
  int magic;            // 0x466243b1
  int version;
  const void* data;     // the fatbin (magic 0xBA55ED50)
  void* filename_or_fatbins;
};

constexpr int kFatbinWrapperMagic = 0x466243b1;

}  // namespace

// ---------------------------------------------------------------------------
// Exported API (cuda_runtime_api.h, CUDA 13.0). The library's version script
// puts every export under the version node libcudart.so.13.
extern "C" {

// What every entry point of sim_cudart_unsupported.cc returns (hidden: the
// version script exports cuda* only).
__attribute__((visibility("hidden"))) cudaError_t simgpu_cudart_not_supported(void) {
  return Record(cudaErrorNotSupported);
}

// ---- version, errors ----
cudaError_t cudaRuntimeGetVersion(int* v) {
  if (v == nullptr) return Record(cudaErrorInvalidValue);
  *v = CUDART_VERSION;
  return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int* v) {
  if (v == nullptr) return Record(cudaErrorInvalidValue);
  *v = 0;  // no driver: 0 and success, as NVIDIA's runtime
  if (Init() == cudaErrorInsufficientDriver && DRV(cuDriverGetVersion, 2020) == nullptr) {
    return cudaSuccess;
  }
  return Record(Cu(DRV(cuDriverGetVersion, 2020), v));
}

cudaError_t cudaGetLastError(void) {
  cudaError_t e = t.last_error;
  t.last_error = cudaSuccess;
  return e;
}

cudaError_t cudaPeekAtLastError(void) { return t.last_error; }

const char* cudaGetErrorString(cudaError_t e) {
  const ErrorText* x = FindError(e);
  return x != nullptr ? x->text : "unrecognized error code";
}

const char* cudaGetErrorName(cudaError_t e) {
  const ErrorText* x = FindError(e);
  return x != nullptr ? x->name : "unrecognized error code";
}

// ---- devices ----
cudaError_t cudaGetDeviceCount(int* count) {
  if (count == nullptr) return Record(cudaErrorInvalidValue);
  *count = 0;
  if (cudaError_t e = Init()) return Record(e);
  *count = Drv().device_count;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  if (cudaError_t e = CheckDevice(device)) return Record(e);
  t.device = device;
  return Record(Ready());
}

cudaError_t cudaGetDevice(int* device) {
  if (device == nullptr) return Record(cudaErrorInvalidValue);
  *device = t.device;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  if (value == nullptr) return Record(cudaErrorInvalidValue);
  if (cudaError_t e = CheckDevice(device)) return Record(e);
  // cudaDeviceAttr values are the CUdevice_attribute values.
  return Record(Cu(DRV(cuDeviceGetAttribute, 2000), value,
                   static_cast<CUdevice_attribute>(attr), CUdevice(device)));
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (prop == nullptr) return Record(cudaErrorInvalidValue);
  if (cudaError_t e = CheckDevice(device)) return Record(e);
  memset(prop, 0, sizeof *prop);
  const CUdevice dev = device;
  if (cudaError_t e = Cu(DRV(cuDeviceGetName, 2000), prop->name, int(sizeof prop->name), dev)) {
    return Record(e);
  }
  Cu(DRV(cuDeviceTotalMem, 3020), &prop->totalGlobalMem, dev);
  Cu(DRV(cuDeviceGetUuid, 9020), reinterpret_cast<CUuuid*>(&prop->uuid), dev);
  auto attr = [dev](CUdevice_attribute a) {
    int v = 0;
    Cu(DRV(cuDeviceGetAttribute, 2000), &v, a, dev);
    return v;
  };
  prop->sharedMemPerBlock = size_t(attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK));
  prop->regsPerBlock = attr(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK);
  prop->warpSize = attr(CU_DEVICE_ATTRIBUTE_WARP_SIZE);
  prop->memPitch = size_t(attr(CU_DEVICE_ATTRIBUTE_MAX_PITCH));
  prop->maxThreadsPerBlock = attr(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
  prop->maxThreadsDim[0] = attr(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X);
  prop->maxThreadsDim[1] = attr(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y);
  prop->maxThreadsDim[2] = attr(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z);
  prop->maxGridSize[0] = attr(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X);
  prop->maxGridSize[1] = attr(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y);
  prop->maxGridSize[2] = attr(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z);
  prop->totalConstMem = size_t(attr(CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY));
  prop->major = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
  prop->minor = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
  prop->textureAlignment = size_t(attr(CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT));
  prop->multiProcessorCount = attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
  prop->integrated = attr(CU_DEVICE_ATTRIBUTE_INTEGRATED);
  prop->canMapHostMemory = attr(CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY);
  prop->concurrentKernels = attr(CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS);
  prop->ECCEnabled = attr(CU_DEVICE_ATTRIBUTE_ECC_ENABLED);
  prop->pciBusID = attr(CU_DEVICE_ATTRIBUTE_PCI_BUS_ID);
  prop->pciDeviceID = attr(CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID);
  prop->pciDomainID = attr(CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID);
  prop->asyncEngineCount = attr(CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT);
  prop->unifiedAddressing = attr(CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING);
  prop->memoryBusWidth = attr(CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH);
  prop->l2CacheSize = attr(CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE);
  prop->maxThreadsPerMultiProcessor = attr(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR);
  prop->streamPrioritiesSupported = attr(CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED);
  prop->globalL1CacheSupported = attr(CU_DEVICE_ATTRIBUTE_GLOBAL_L1_CACHE_SUPPORTED);
  prop->localL1CacheSupported = attr(CU_DEVICE_ATTRIBUTE_LOCAL_L1_CACHE_SUPPORTED);
  prop->sharedMemPerMultiprocessor =
      size_t(attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR));
  prop->regsPerMultiprocessor = attr(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR);
  prop->managedMemory = attr(CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY);
  prop->concurrentManagedAccess = attr(CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS);
  prop->cooperativeLaunch = attr(CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH);
  prop->sharedMemPerBlockOptin = size_t(attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN));
  prop->maxBlocksPerMultiProcessor = attr(CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR);
  prop->hostRegisterSupported = attr(CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED);
  prop->hostRegisterReadOnlySupported = attr(CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED);
  prop->memoryPoolsSupported = attr(CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED);
  prop->clusterLaunch = attr(CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH);
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void) {
  return Api(CUPTI_RUNTIME_TRACE_CBID_cudaDeviceSynchronize_v3020, [&]() -> cudaError_t {
    if (cudaError_t e = Ready()) return Record(e);
    return Record(Cu(DRV(cuCtxSynchronize, 2000)));
  });
}

// Waits for the device and resets its primary context; the next call
// retains it again. (Loaded modules are kept: the simulated driver keeps
// them valid.)
cudaError_t cudaDeviceReset(void) {
  if (cudaError_t e = Init()) return Record(e);
  Driver& d = Drv();
  std::lock_guard<std::mutex> lk(d.mu);
  if (d.primary[t.device] == nullptr) return cudaSuccess;
  d.primary[t.device] = nullptr;
  t.ctx = nullptr;
  d.generation.fetch_add(1, std::memory_order_acq_rel);
  return Record(Cu(DRV(cuDevicePrimaryCtxReset, 7000), CUdevice(t.device)));
}

// ---- memory ----
cudaError_t cudaMalloc(void** p, size_t size) {
  return Api(CUPTI_RUNTIME_TRACE_CBID_cudaMalloc_v3020, [&]() -> cudaError_t {
    if (p == nullptr) return Record(cudaErrorInvalidValue);
    *p = nullptr;
    if (cudaError_t e = Ready()) return Record(e);
    if (size == 0) return cudaSuccess;
    CUdeviceptr d = 0;
    cudaError_t e = Cu(DRV(cuMemAlloc, 3020), &d, size);
    if (e == cudaSuccess) *p = reinterpret_cast<void*>(d);
    return Record(e);
  });
}

cudaError_t cudaFree(void* p) {
  return Api(CUPTI_RUNTIME_TRACE_CBID_cudaFree_v3020, [&]() -> cudaError_t {
    if (cudaError_t e = Ready()) return Record(e);  // cudaFree(0) initializes the context
    if (p == nullptr) return cudaSuccess;
    return Record(Cu(DRV(cuMemFree, 3020), Dptr(p)));
  });
}

cudaError_t cudaHostAlloc(void** p, size_t size, unsigned int flags) {
  return Api(CUPTI_RUNTIME_TRACE_CBID_cudaHostAlloc_v3020, [&]() -> cudaError_t {
    if (p == nullptr) return Record(cudaErrorInvalidValue);
    *p = nullptr;
    if (cudaError_t e = Ready()) return Record(e);
    // cudaHostAlloc* flags are the CU_MEMHOSTALLOC_* values.
    return Record(Cu(DRV(cuMemHostAlloc, 2020), p, size, flags));
  });
}

cudaError_t cudaMallocHost(void** p, size_t size) {
  return Api(CUPTI_RUNTIME_TRACE_CBID_cudaMallocHost_v3020,
             [&]() -> cudaError_t { return cudaHostAlloc(p, size, 0); });
}

cudaError_t cudaFreeHost(void* p) {
  return Api(CUPTI_RUNTIME_TRACE_CBID_cudaFreeHost_v3020, [&]() -> cudaError_t {
    if (cudaError_t e = Ready()) return Record(e);
    if (p == nullptr) return cudaSuccess;
    return Record(Cu(DRV(cuMemFreeHost, 2000), p));
  });
}

static cudaError_t MallocAsyncImpl(bool pt, void** p, size_t size, cudaStream_t s) {
  if (p == nullptr) return cudaErrorInvalidValue;
  *p = nullptr;
  if (cudaError_t e = Ready()) return e;
  CUdeviceptr d = 0;
  cudaError_t e = Cu(DRV_PT(pt, cuMemAllocAsync, 11020, 11020), &d, size, Cs(s));
  if (e == cudaSuccess) *p = reinterpret_cast<void*>(d);
  return e;
}

static cudaError_t FreeAsyncImpl(bool pt, void* p, cudaStream_t s) {
  if (cudaError_t e = Ready()) return e;
  return Cu(DRV_PT(pt, cuMemFreeAsync, 11020, 11020), Dptr(p), Cs(s));
}

cudaError_t cudaMallocAsync(void** p, size_t size, cudaStream_t s) {
  return Api(CUPTI_RUNTIME_TRACE_CBID_cudaMallocAsync_v11020, [&]() -> cudaError_t {
    return Record(MallocAsyncImpl(false, p, size, s));
  });
}
cudaError_t cudaMallocAsync_ptsz(void** p, size_t size, cudaStream_t s) {
  return Api(CUPTI_RUNTIME_TRACE_CBID_cudaMallocAsync_ptsz_v11020, [&]() -> cudaError_t {
    return Record(MallocAsyncImpl(true, p, size, s));
  });
}
cudaError_t cudaFreeAsync(void* p, cudaStream_t s) {
  return Api(CUPTI_RUNTIME_TRACE_CBID_cudaFreeAsync_v11020,
             [&]() -> cudaError_t { return Record(FreeAsyncImpl(false, p, s)); });
}
cudaError_t cudaFreeAsync_ptsz(void* p, cudaStream_t s) {
  return Api(CUPTI_RUNTIME_TRACE_CBID_cudaFreeAsync_ptsz_v11020,
             [&]() -> cudaError_t { return Record(FreeAsyncImpl(true, p, s)); });
}

// ---- copies and sets ----
cudaError_t cudaMemcpy(void* dst, const void* src, size_t n, cudaMemcpyKind kind) {
  return Api(CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy_v3020, [&]() -> cudaError_t {
    return Record(MemcpyImpl(false, dst, src, n, kind));
  });
}
cudaError_t cudaMemcpy_ptds(void* dst, const void* src, size_t n, cudaMemcpyKind kind) {
  return Api(CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy_ptds_v7000, [&]() -> cudaError_t {
    return Record(MemcpyImpl(true, dst, src, n, kind));
  });
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t n, cudaMemcpyKind kind,
                            cudaStream_t s) {
  return Api(CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_v3020, [&]() -> cudaError_t {
    return Record(MemcpyAsyncImpl(false, dst, src, n, kind, s));
  });
}
cudaError_t cudaMemcpyAsync_ptsz(void* dst, const void* src, size_t n, cudaMemcpyKind kind,
                                 cudaStream_t s) {
  return Api(CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_ptsz_v7000, [&]() -> cudaError_t {
    return Record(MemcpyAsyncImpl(true, dst, src, n, kind, s));
  });
}
cudaError_t cudaMemset(void* p, int value, size_t n) {
  return Api(CUPTI_RUNTIME_TRACE_CBID_cudaMemset_v3020, [&]() -> cudaError_t {
    return Record(MemsetImpl(false, p, value, n));
  });
}
cudaError_t cudaMemset_ptds(void* p, int value, size_t n) {
  return Api(CUPTI_RUNTIME_TRACE_CBID_cudaMemset_ptds_v7000, [&]() -> cudaError_t {
    return Record(MemsetImpl(true, p, value, n));
  });
}
cudaError_t cudaMemsetAsync(void* p, int value, size_t n, cudaStream_t s) {
  return Api(CUPTI_RUNTIME_TRACE_CBID_cudaMemsetAsync_v3020, [&]() -> cudaError_t {
    return Record(MemsetAsyncImpl(false, p, value, n, s));
  });
}
cudaError_t cudaMemsetAsync_ptsz(void* p, int value, size_t n, cudaStream_t s) {
  return Api(CUPTI_RUNTIME_TRACE_CBID_cudaMemsetAsync_ptsz_v7000, [&]() -> cudaError_t {
    return Record(MemsetAsyncImpl(true, p, value, n, s));
  });
}

// ---- streams ----
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned int flags) {
  if (s == nullptr) return Record(cudaErrorInvalidValue);
  if (cudaError_t e = Ready()) return Record(e);
  // cudaStreamNonBlocking == CU_STREAM_NON_BLOCKING
  return Record(Cu(DRV(cuStreamCreate, 2000), reinterpret_cast<CUstream*>(s), flags));
}

cudaError_t cudaStreamCreate(cudaStream_t* s) { return cudaStreamCreateWithFlags(s, 0); }

cudaError_t cudaStreamDestroy(cudaStream_t s) {
  if (cudaError_t e = Ready()) return Record(e);
  return Record(Cu(DRV(cuStreamDestroy, 4000), Cs(s)));
}

static cudaError_t StreamSyncImpl(bool pt, cudaStream_t s) {
  if (cudaError_t e = Ready()) return e;
  return Cu(DRV_PT(pt, cuStreamSynchronize, 2000, 7000), Cs(s));
}
cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  return Api(CUPTI_RUNTIME_TRACE_CBID_cudaStreamSynchronize_v3020,
             [&]() -> cudaError_t { return Record(StreamSyncImpl(false, s)); });
}
cudaError_t cudaStreamSynchronize_ptsz(cudaStream_t s) {
  return Api(CUPTI_RUNTIME_TRACE_CBID_cudaStreamSynchronize_ptsz_v7000,
             [&]() -> cudaError_t { return Record(StreamSyncImpl(true, s)); });
}

// cudaErrorNotReady is not recorded as the last error (as NVIDIA's runtime).
static cudaError_t StreamQueryImpl(bool pt, cudaStream_t s) {
  if (cudaError_t e = Ready()) return Record(e);
  cudaError_t e = Cu(DRV_PT(pt, cuStreamQuery, 2000, 7000), Cs(s));
  return e == cudaErrorNotReady ? e : Record(e);
}
cudaError_t cudaStreamQuery(cudaStream_t s) {
  return Api(CUPTI_RUNTIME_TRACE_CBID_cudaStreamQuery_v3020,
             [&]() -> cudaError_t { return StreamQueryImpl(false, s); });
}
cudaError_t cudaStreamQuery_ptsz(cudaStream_t s) {
  return Api(CUPTI_RUNTIME_TRACE_CBID_cudaStreamQuery_ptsz_v7000,
             [&]() -> cudaError_t { return StreamQueryImpl(true, s); });
}

static cudaError_t StreamWaitEventImpl(bool pt, cudaStream_t s, cudaEvent_t ev,
                                       unsigned int flags) {
  if (cudaError_t e = Ready()) return e;
  return Cu(DRV_PT(pt, cuStreamWaitEvent, 3020, 7000), Cs(s), Ce(ev), flags);
}
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t ev, unsigned int flags) {
  return Api(CUPTI_RUNTIME_TRACE_CBID_cudaStreamWaitEvent_v3020, [&]() -> cudaError_t {
    return Record(StreamWaitEventImpl(false, s, ev, flags));
  });
}
cudaError_t cudaStreamWaitEvent_ptsz(cudaStream_t s, cudaEvent_t ev, unsigned int flags) {
  return Api(CUPTI_RUNTIME_TRACE_CBID_cudaStreamWaitEvent_ptsz_v7000, [&]() -> cudaError_t {
    return Record(StreamWaitEventImpl(true, s, ev, flags));
  });
}

// ---- events ----
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* ev, unsigned int flags) {
  if (ev == nullptr) return Record(cudaErrorInvalidValue);
  if (cudaError_t e = Ready()) return Record(e);
  // cudaEventBlockingSync / DisableTiming / Interprocess == CU_EVENT_*
  return Record(Cu(DRV(cuEventCreate, 2000), reinterpret_cast<CUevent*>(ev), flags));
}

cudaError_t cudaEventCreate(cudaEvent_t* ev) { return cudaEventCreateWithFlags(ev, 0); }

static cudaError_t EventRecordImpl(bool pt, cudaEvent_t ev, cudaStream_t s) {
  if (cudaError_t e = Ready()) return e;
  return Cu(DRV_PT(pt, cuEventRecord, 2000, 7000), Ce(ev), Cs(s));
}
cudaError_t cudaEventRecord(cudaEvent_t ev, cudaStream_t s) {
  return Api(CUPTI_RUNTIME_TRACE_CBID_cudaEventRecord_v3020, [&]() -> cudaError_t {
    return Record(EventRecordImpl(false, ev, s));
  });
}
cudaError_t cudaEventRecord_ptsz(cudaEvent_t ev, cudaStream_t s) {
  return Api(CUPTI_RUNTIME_TRACE_CBID_cudaEventRecord_ptsz_v7000, [&]() -> cudaError_t {
    return Record(EventRecordImpl(true, ev, s));
  });
}

cudaError_t cudaEventSynchronize(cudaEvent_t ev) {
  return Api(CUPTI_RUNTIME_TRACE_CBID_cudaEventSynchronize_v3020, [&]() -> cudaError_t {
    if (cudaError_t e = Ready()) return Record(e);
    return Record(Cu(DRV(cuEventSynchronize, 2000), Ce(ev)));
  });
}

cudaError_t cudaEventQuery(cudaEvent_t ev) {
  return Api(CUPTI_RUNTIME_TRACE_CBID_cudaEventQuery_v3020, [&]() -> cudaError_t {
    if (cudaError_t e = Ready()) return Record(e);
    cudaError_t e = Cu(DRV(cuEventQuery, 2000), Ce(ev));
    return e == cudaErrorNotReady ? e : Record(e);
  });
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (cudaError_t e = Ready()) return Record(e);
  return Record(Cu(DRV(cuEventElapsedTime, 12080), ms, Ce(start), Ce(end)));
}

cudaError_t cudaEventDestroy(cudaEvent_t ev) {
  if (cudaError_t e = Ready()) return Record(e);
  return Record(Cu(DRV(cuEventDestroy, 4000), Ce(ev)));
}

// ---- launches ----
cudaError_t cudaLaunchKernel(const void* func, dim3 grid, dim3 block, void** args,
                             size_t shared_mem, cudaStream_t s) {
  return Api(CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000, [&]() -> cudaError_t {
    return Record(LaunchImpl(false, FindKernel(func), grid, block, args, shared_mem, s));
  });
}
cudaError_t cudaLaunchKernel_ptsz(const void* func, dim3 grid, dim3 block, void** args,
                                  size_t shared_mem, cudaStream_t s) {
  return Api(CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_ptsz_v7000, [&]() -> cudaError_t {
    return Record(LaunchImpl(true, FindKernel(func), grid, block, args, shared_mem, s));
  });
}

// ---- driver entry points (NCCL, PyTorch): through the resolved cuGetProcAddress ----
cudaError_t cudaGetDriverEntryPointByVersion(const char* symbol, void** fn, unsigned int version,
                                             unsigned long long flags,
                                             cudaDriverEntryPointQueryResult* status) {
  return Record(EntryPointImpl(symbol, fn, version, flags, status));
}
cudaError_t cudaGetDriverEntryPointByVersion_ptsz(const char* symbol, void** fn,
                                                  unsigned int version, unsigned long long flags,
                                                  cudaDriverEntryPointQueryResult* status) {
  // cudaEnableDefault means per-thread in a per-thread build.
  if (flags == cudaEnableDefault) flags = cudaEnablePerThreadDefaultStream;
  return Record(EntryPointImpl(symbol, fn, version, flags, status));
}
cudaError_t cudaGetDriverEntryPoint(const char* symbol, void** fn, unsigned long long flags,
                                    cudaDriverEntryPointQueryResult* status) {
  return cudaGetDriverEntryPointByVersion(symbol, fn, CUDART_VERSION, flags, status);
}
cudaError_t cudaGetDriverEntryPoint_ptsz(const char* symbol, void** fn, unsigned long long flags,
                                         cudaDriverEntryPointQueryResult* status) {
  return cudaGetDriverEntryPointByVersion_ptsz(symbol, fn, CUDART_VERSION, flags, status);
}

// ---- what nvcc generates (crt/host_runtime.h, crt/device_functions.h) ----
void** __cudaRegisterFatBinary(void* fat_cubin) {
  const auto* w = static_cast<const FatbinWrapper*>(fat_cubin);
  const void* image = (w != nullptr && w->magic == kFatbinWrapperMagic) ? w->data : fat_cubin;
  return reinterpret_cast<void**>(new FatBinary{image});
}

void __cudaRegisterFatBinaryEnd(void** handle) {}

// Called from atexit: nothing to release (the process is ending; the
// driver may already be shutting down).
void __cudaUnregisterFatBinary(void** handle) {}

void __cudaRegisterFunction(void** handle, const char* host_fun, char* device_fun,
                            const char* device_name, int thread_limit, uint3* tid, uint3* bid,
                            dim3* block_dim, dim3* grid_dim, int* warp_size) {
  auto* binary = reinterpret_cast<FatBinary*>(handle);
  const char* name = device_fun != nullptr ? device_fun : device_name;
  if (binary == nullptr || host_fun == nullptr || name == nullptr) return;
  auto* k = new Kernel{binary, host_fun, name};
  Registry& r = Reg();
  std::lock_guard<std::mutex> lk(r.mu);
  r.by_stub[host_fun] = k;
  r.by_handle[k] = k;
}

void __cudaRegisterVar(void** handle, char* host_var, char* device_address,
                       const char* device_name, int ext, size_t size, int constant, int global) {
  if (host_var == nullptr) return;
  Registry& r = Reg();
  std::lock_guard<std::mutex> lk(r.mu);
  r.vars[host_var].size = size;
}

char __cudaInitModule(void** handle) { return 1; }

cudaError_t __cudaGetKernel(cudaKernel_t* kernel, const void* host_stub) {
  if (kernel == nullptr) return Record(cudaErrorInvalidValue);
  Registry& r = Reg();
  std::lock_guard<std::mutex> lk(r.mu);
  auto it = r.by_stub.find(host_stub);
  *kernel = it != r.by_stub.end() ? reinterpret_cast<cudaKernel_t>(it->second) : nullptr;
  return *kernel != nullptr ? cudaSuccess : Record(cudaErrorInvalidDeviceFunction);
}

unsigned __cudaPushCallConfiguration(dim3 grid, dim3 block, size_t shared_mem,
                                     struct CUstream_st* stream) {
  if (t.depth == static_cast<int>(sizeof t.configs / sizeof t.configs[0])) return 1;
  t.configs[t.depth++] = {grid, block, shared_mem, stream};
  return 0;
}

cudaError_t __cudaPopCallConfiguration(dim3* grid, dim3* block, size_t* shared_mem,
                                       void* stream) {
  if (t.depth == 0) return Record(cudaErrorMissingConfiguration);
  const LaunchConfig& c = t.configs[--t.depth];
  *grid = c.grid;
  *block = c.block;
  *shared_mem = c.shared_mem;
  *static_cast<cudaStream_t*>(stream) = c.stream;
  return cudaSuccess;
}

cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 grid, dim3 block, void** args,
                               size_t shared_mem, cudaStream_t s) {
  return Api(CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000, [&]() -> cudaError_t {
    return Record(LaunchImpl(false, reinterpret_cast<Kernel*>(kernel), grid, block, args,
                             shared_mem, s));
  });
}

cudaError_t __cudaLaunchKernel_ptsz(cudaKernel_t kernel, dim3 grid, dim3 block, void** args,
                                    size_t shared_mem, cudaStream_t s) {
  return Api(CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_ptsz_v7000, [&]() -> cudaError_t {
    return Record(LaunchImpl(true, reinterpret_cast<Kernel*>(kernel), grid, block, args,
                             shared_mem, s));
  });
}


// ---------------------------------------------------------------------------
// What PyTorch's libraries import beyond the subset above. Real semantics where
// torch relies on them; "not supported" (sim_cudart_unsupported.cc) for the
// rest.

// ---- streams: priorities, capture (never active), host functions ----
cudaError_t cudaDeviceGetStreamPriorityRange(int* least, int* greatest) {
  if (cudaError_t e = Ready()) return Record(e);
  return Record(Cu(DRV(cuCtxGetStreamPriorityRange, 5050), least, greatest));
}

cudaError_t cudaStreamCreateWithPriority(cudaStream_t* s, unsigned int flags, int priority) {
  if (s == nullptr) return Record(cudaErrorInvalidValue);
  if (cudaError_t e = Ready()) return Record(e);
  return Record(Cu(DRV(cuStreamCreateWithPriority, 5050), reinterpret_cast<CUstream*>(s), flags,
                   priority));
}

static cudaError_t StreamGetPriorityImpl(bool pt, cudaStream_t s, int* priority) {
  if (priority == nullptr) return cudaErrorInvalidValue;
  if (cudaError_t e = Ready()) return e;
  return Cu(DRV_PT(pt, cuStreamGetPriority, 5050, 7000), Cs(s), priority);
}
cudaError_t cudaStreamGetPriority(cudaStream_t s, int* priority) {
  return Record(StreamGetPriorityImpl(false, s, priority));
}
cudaError_t cudaStreamGetPriority_ptsz(cudaStream_t s, int* priority) {
  return Record(StreamGetPriorityImpl(true, s, priority));
}

// Capture is not supported (cudaStreamBeginCapture fails), so no stream is
// ever capturing.
cudaError_t cudaStreamIsCapturing(cudaStream_t s, cudaStreamCaptureStatus* status) {
  if (status == nullptr) return Record(cudaErrorInvalidValue);
  *status = cudaStreamCaptureStatusNone;
  return cudaSuccess;
}
cudaError_t cudaStreamIsCapturing_ptsz(cudaStream_t s, cudaStreamCaptureStatus* status) {
  return cudaStreamIsCapturing(s, status);
}

cudaError_t cudaStreamGetCaptureInfo(cudaStream_t s, cudaStreamCaptureStatus* status,
                                     unsigned long long* id, cudaGraph_t* graph,
                                     const cudaGraphNode_t** deps, const cudaGraphEdgeData** edges,
                                     size_t* num_deps) {
  if (status == nullptr) return Record(cudaErrorInvalidValue);
  *status = cudaStreamCaptureStatusNone;
  if (id != nullptr) *id = 0;
  if (graph != nullptr) *graph = nullptr;
  if (deps != nullptr) *deps = nullptr;
  if (edges != nullptr) *edges = nullptr;
  if (num_deps != nullptr) *num_deps = 0;
  return cudaSuccess;
}
cudaError_t cudaStreamGetCaptureInfo_ptsz(cudaStream_t s, cudaStreamCaptureStatus* status,
                                          unsigned long long* id, cudaGraph_t* graph,
                                          const cudaGraphNode_t** deps,
                                          const cudaGraphEdgeData** edges, size_t* num_deps) {
  return cudaStreamGetCaptureInfo(s, status, id, graph, deps, edges, num_deps);
}

static thread_local cudaStreamCaptureMode t_capture_mode = cudaStreamCaptureModeGlobal;
cudaError_t cudaThreadExchangeStreamCaptureMode(cudaStreamCaptureMode* mode) {
  if (mode == nullptr) return Record(cudaErrorInvalidValue);
  cudaStreamCaptureMode old = t_capture_mode;
  t_capture_mode = *mode;
  *mode = old;
  return cudaSuccess;
}

static cudaError_t LaunchHostFuncImpl(bool pt, cudaStream_t s, cudaHostFn_t fn, void* data) {
  if (cudaError_t e = Ready()) return e;
  return Cu(DRV_PT(pt, cuLaunchHostFunc, 10000, 10000), Cs(s), fn, data);
}
cudaError_t cudaLaunchHostFunc(cudaStream_t s, cudaHostFn_t fn, void* data) {
  return Api(CUPTI_RUNTIME_TRACE_CBID_cudaLaunchHostFunc_v10000, [&]() -> cudaError_t {
    return Record(LaunchHostFuncImpl(false, s, fn, data));
  });
}
cudaError_t cudaLaunchHostFunc_ptsz(cudaStream_t s, cudaHostFn_t fn, void* data) {
  return Api(CUPTI_RUNTIME_TRACE_CBID_cudaLaunchHostFunc_ptsz_v10000, [&]() -> cudaError_t {
    return Record(LaunchHostFuncImpl(true, s, fn, data));
  });
}

// cudaStreamCallback_t has the driver callback's shape (CUstream, CUresult);
// the error codes agree for success, the only status a callback gets here.
static cudaError_t StreamAddCallbackImpl(bool pt, cudaStream_t s, cudaStreamCallback_t cb,
                                         void* data, unsigned flags) {
  if (cudaError_t e = Ready()) return e;
  return Cu(DRV_PT(pt, cuStreamAddCallback, 5000, 7000), Cs(s),
            reinterpret_cast<CUstreamCallback>(cb), data, flags);
}
cudaError_t cudaStreamAddCallback(cudaStream_t s, cudaStreamCallback_t cb, void* data,
                                  unsigned int flags) {
  return Record(StreamAddCallbackImpl(false, s, cb, data, flags));
}
cudaError_t cudaStreamAddCallback_ptsz(cudaStream_t s, cudaStreamCallback_t cb, void* data,
                                       unsigned int flags) {
  return Record(StreamAddCallbackImpl(true, s, cb, data, flags));
}

// ---- events ----
static cudaError_t EventRecordWithFlagsImpl(bool pt, cudaEvent_t ev, cudaStream_t s,
                                            unsigned flags) {
  if (cudaError_t e = Ready()) return e;
  return Cu(DRV_PT(pt, cuEventRecordWithFlags, 11010, 11010), Ce(ev), Cs(s), flags);
}
cudaError_t cudaEventRecordWithFlags(cudaEvent_t ev, cudaStream_t s, unsigned int flags) {
  return Api(CUPTI_RUNTIME_TRACE_CBID_cudaEventRecordWithFlags_v11010, [&]() -> cudaError_t {
    return Record(EventRecordWithFlagsImpl(false, ev, s, flags));
  });
}
cudaError_t cudaEventRecordWithFlags_ptsz(cudaEvent_t ev, cudaStream_t s, unsigned int flags) {
  return Api(CUPTI_RUNTIME_TRACE_CBID_cudaEventRecordWithFlags_ptsz_v11010, [&]() -> cudaError_t {
    return Record(EventRecordWithFlagsImpl(true, ev, s, flags));
  });
}

// ---- memory: info, pointer attributes, registration, managed ----
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total) {
  if (cudaError_t e = Ready()) return Record(e);
  return Record(Cu(DRV(cuMemGetInfo, 3020), free_bytes, total));
}

// From the simulator's memory map: cudaMalloc'd memory is device memory,
// cudaHostAlloc'd and registered memory is pinned host memory (so torch's
// pin_memory() reports is_pinned), anything else is unregistered.
cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* a, const void* ptr) {
  if (a == nullptr) return Record(cudaErrorInvalidValue);
  if (cudaError_t e = Init()) return Record(e);
  auto get = DRV(cuPointerGetAttributes, 7000);
  if (get == nullptr) return Record(cudaErrorNotSupported);
  unsigned type = 0;
  int ordinal = -1;
  CUdeviceptr dptr = 0;
  void* hptr = nullptr;
  CUpointer_attribute which[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                 CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                 CU_POINTER_ATTRIBUTE_DEVICE_POINTER,
                                 CU_POINTER_ATTRIBUTE_HOST_POINTER};
  void* out[] = {&type, &ordinal, &dptr, &hptr};
  if (cudaError_t e = Cu(get, 4u, which, out, Dptr(ptr))) return Record(e);
  memset(a, 0, sizeof *a);
  a->type = type == CU_MEMORYTYPE_DEVICE ? cudaMemoryTypeDevice
            : type == CU_MEMORYTYPE_HOST ? cudaMemoryTypeHost
                                         : cudaMemoryTypeUnregistered;
  a->device = a->type == cudaMemoryTypeUnregistered ? -2 : ordinal;
  a->devicePointer = reinterpret_cast<void*>(dptr);
  a->hostPointer = a->type == cudaMemoryTypeUnregistered ? const_cast<void*>(ptr) : hptr;
  return cudaSuccess;
}

cudaError_t cudaHostRegister(void* p, size_t size, unsigned int flags) {
  if (cudaError_t e = Ready()) return Record(e);
  return Record(Cu(DRV(cuMemHostRegister, 6050), p, size, flags));
}

cudaError_t cudaHostUnregister(void* p) {
  if (cudaError_t e = Ready()) return Record(e);
  return Record(Cu(DRV(cuMemHostUnregister, 4000), p));
}

// Simulated device memory is host memory, so a device allocation is also
// reachable from the host, as managed memory is.
cudaError_t cudaMallocManaged(void** p, size_t size, unsigned int flags) {
  return Api(CUPTI_RUNTIME_TRACE_CBID_cudaMallocManaged_v6000, [&]() -> cudaError_t {
    return cudaMalloc(p, size);
  });
}

// ---- copies: 2D and peer ----
// A 2D copy is one copy when both sides are contiguous, else one per row
// (in stream order, as the rows of NVIDIA's copy are).
static cudaError_t Memcpy2DAsyncImpl(bool pt, void* dst, size_t dpitch, const void* src,
                                     size_t spitch, size_t width, size_t height,
                                     cudaMemcpyKind kind, cudaStream_t s) {
  if (width > dpitch || width > spitch) return cudaErrorInvalidPitchValue;
  if (dpitch == width && spitch == width) {
    return MemcpyAsyncImpl(pt, dst, src, width * height, kind, s);
  }
  for (size_t row = 0; row < height; ++row) {
    if (cudaError_t e = MemcpyAsyncImpl(pt, static_cast<char*>(dst) + row * dpitch,
                                        static_cast<const char*>(src) + row * spitch, width,
                                        kind, s)) {
      return e;
    }
  }
  return cudaSuccess;
}
cudaError_t cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch,
                              size_t width, size_t height, cudaMemcpyKind kind, cudaStream_t s) {
  return Api(CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy2DAsync_v3020, [&]() -> cudaError_t {
    return Record(Memcpy2DAsyncImpl(false, dst, dpitch, src, spitch, width, height, kind, s));
  });
}
cudaError_t cudaMemcpy2DAsync_ptsz(void* dst, size_t dpitch, const void* src, size_t spitch,
                                   size_t width, size_t height, cudaMemcpyKind kind,
                                   cudaStream_t s) {
  return Api(CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy2DAsync_ptsz_v7000, [&]() -> cudaError_t {
    return Record(Memcpy2DAsyncImpl(true, dst, dpitch, src, spitch, width, height, kind, s));
  });
}

// One address space: a peer copy is a device-to-device copy on the stream.
cudaError_t cudaMemcpyPeerAsync(void* dst, int dst_device, const void* src, int src_device,
                                size_t n, cudaStream_t s) {
  return Api(CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyPeerAsync_v4000, [&]() -> cudaError_t {
    if (cudaError_t e = CheckDevice(dst_device)) return Record(e);
    if (cudaError_t e = CheckDevice(src_device)) return Record(e);
    return Record(MemcpyAsyncImpl(false, dst, src, n, cudaMemcpyDeviceToDevice, s));
  });
}
cudaError_t cudaMemcpyPeerAsync_ptsz(void* dst, int dst_device, const void* src, int src_device,
                                     size_t n, cudaStream_t s) {
  if (cudaError_t e = CheckDevice(dst_device)) return Record(e);
  if (cudaError_t e = CheckDevice(src_device)) return Record(e);
  return Record(MemcpyAsyncImpl(true, dst, src, n, cudaMemcpyDeviceToDevice, s));
}

// ---- devices: peers, PCI id ----
cudaError_t cudaDeviceCanAccessPeer(int* can, int device, int peer) {
  if (can == nullptr) return Record(cudaErrorInvalidValue);
  if (cudaError_t e = CheckDevice(device)) return Record(e);
  if (cudaError_t e = CheckDevice(peer)) return Record(e);
  *can = 0;  // no peer access: frameworks copy through the host or with cudaMemcpyPeer
  return cudaSuccess;
}

cudaError_t cudaDeviceEnablePeerAccess(int peer, unsigned int flags) {
  if (cudaError_t e = CheckDevice(peer)) return Record(e);
  return Record(cudaErrorPeerAccessUnsupported);
}

cudaError_t cudaDeviceGetPCIBusId(char* id, int len, int device) {
  if (id == nullptr || len <= 0) return Record(cudaErrorInvalidValue);
  int domain = 0, bus = 0, dev = 0;
  if (cudaError_t e = cudaDeviceGetAttribute(&domain, cudaDevAttrPciDomainId, device)) return e;
  cudaDeviceGetAttribute(&bus, cudaDevAttrPciBusId, device);
  cudaDeviceGetAttribute(&dev, cudaDevAttrPciDeviceId, device);
  snprintf(id, static_cast<size_t>(len), "%08X:%02X:%02X.0", domain, bus, dev);
  return cudaSuccess;
}

// ---- kernels: attributes, occupancy, extended and cooperative launches ----
static cudaError_t KernelFunction(const void* func, CUfunction* f) {
  if (cudaError_t e = Ready()) return e;
  Kernel* k = FindKernel(func);
  if (k == nullptr) return cudaErrorInvalidDeviceFunction;
  return FunctionOf(k, f);
}

cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* a, const void* func) {
  if (a == nullptr) return Record(cudaErrorInvalidValue);
  CUfunction f;
  if (cudaError_t e = KernelFunction(func, &f)) return Record(e);
  auto get = DRV(cuFuncGetAttribute, 2020);
  auto attr = [&](CUfunction_attribute which) {
    int v = 0;
    Cu(get, &v, which, f);
    return v;
  };
  if (get == nullptr) return Record(cudaErrorNotSupported);
  memset(a, 0, sizeof *a);
  a->sharedSizeBytes = size_t(attr(CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES));
  a->constSizeBytes = size_t(attr(CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES));
  a->localSizeBytes = size_t(attr(CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES));
  a->maxThreadsPerBlock = attr(CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
  a->numRegs = attr(CU_FUNC_ATTRIBUTE_NUM_REGS);
  a->ptxVersion = attr(CU_FUNC_ATTRIBUTE_PTX_VERSION);
  a->binaryVersion = attr(CU_FUNC_ATTRIBUTE_BINARY_VERSION);
  a->cacheModeCA = attr(CU_FUNC_ATTRIBUTE_CACHE_MODE_CA);
  a->maxDynamicSharedSizeBytes = attr(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES);
  a->preferredShmemCarveout = attr(CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT);
  return cudaSuccess;
}

cudaError_t cudaFuncSetAttribute(const void* func, cudaFuncAttribute attr, int value) {
  CUfunction f;
  if (cudaError_t e = KernelFunction(func, &f)) return Record(e);
  // cudaFuncAttribute values are the CUfunction_attribute values.
  return Record(Cu(DRV(cuFuncSetAttribute, 9000), f, static_cast<CUfunction_attribute>(attr),
                   value));
}

cudaError_t cudaKernelSetAttributeForDevice(cudaKernel_t kernel, cudaFuncAttribute attr,
                                            int value, int device) {
  if (cudaError_t e = CheckDevice(device)) return Record(e);
  return cudaFuncSetAttribute(kernel, attr, value);
}

cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int* n, const void* func,
                                                                   int block, size_t smem,
                                                                   unsigned int flags) {
  if (n == nullptr) return Record(cudaErrorInvalidValue);
  CUfunction f;
  if (cudaError_t e = KernelFunction(func, &f)) return Record(e);
  return Record(Cu(DRV(cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags, 7000), n, f, block,
                   smem, flags));
}

cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* n, const void* func, int block,
                                                          size_t smem) {
  return cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(n, func, block, smem, 0);
}

// Launch attributes (clusters, priorities, programmatic serialization) do not
// change when a simulated kernel runs: the launch is the plain one.
cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t* config, const void* func, void** args) {
  return Api(CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_v11060, [&]() -> cudaError_t {
    if (config == nullptr) return Record(cudaErrorInvalidValue);
    return Record(LaunchImpl(false, FindKernel(func), config->gridDim, config->blockDim, args,
                             config->dynamicSmemBytes, config->stream));
  });
}
cudaError_t cudaLaunchKernelExC_ptsz(const cudaLaunchConfig_t* config, const void* func,
                                     void** args) {
  return Api(CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_ptsz_v11060, [&]() -> cudaError_t {
    if (config == nullptr) return Record(cudaErrorInvalidValue);
    return Record(LaunchImpl(true, FindKernel(func), config->gridDim, config->blockDim, args,
                             config->dynamicSmemBytes, config->stream));
  });
}

cudaError_t cudaLaunchCooperativeKernel(const void* func, dim3 grid, dim3 block, void** args,
                                        size_t shared_mem, cudaStream_t s) {
  return Api(CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernel_v9000, [&]() -> cudaError_t {
    return Record(LaunchImpl(false, FindKernel(func), grid, block, args, shared_mem, s));
  });
}
cudaError_t cudaLaunchCooperativeKernel_ptsz(const void* func, dim3 grid, dim3 block, void** args,
                                             size_t shared_mem, cudaStream_t s) {
  return Api(CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernel_ptsz_v9000, [&]() -> cudaError_t {
    return Record(LaunchImpl(true, FindKernel(func), grid, block, args, shared_mem, s));
  });
}

// ---- profiler range (nothing to start: stallscope records regardless) ----
cudaError_t cudaProfilerStart(void) { return cudaSuccess; }
cudaError_t cudaProfilerStop(void) { return cudaSuccess; }

// ---- device variables ----
static cudaError_t SymbolAddress(const void* symbol, void** out, size_t* size) {
  if (cudaError_t e = Ready()) return e;
  Registry& r = Reg();
  std::lock_guard<std::mutex> lk(r.mu);
  auto it = r.vars.find(symbol);
  if (it == r.vars.end()) return cudaErrorInvalidSymbol;
  Var& v = it->second;
  if (v.storage == nullptr) {
    CUdeviceptr d = 0;
    if (cudaError_t e = Cu(DRV(cuMemAlloc, 3020), &d, v.size == 0 ? size_t(1) : v.size)) return e;
    v.storage = reinterpret_cast<void*>(d);
    memset(v.storage, 0, v.size);  // device memory is host memory in the simulator
  }
  *out = v.storage;
  if (size != nullptr) *size = v.size;
  return cudaSuccess;
}

cudaError_t cudaGetSymbolAddress(void** p, const void* symbol) {
  if (p == nullptr) return Record(cudaErrorInvalidValue);
  return Record(SymbolAddress(symbol, p, nullptr));
}

cudaError_t cudaMemcpyToSymbol(const void* symbol, const void* src, size_t n, size_t offset,
                               cudaMemcpyKind kind) {
  void* base;
  size_t size;
  if (cudaError_t e = SymbolAddress(symbol, &base, &size)) return Record(e);
  if (offset > size || n > size - offset) return Record(cudaErrorInvalidValue);
  if (kind == cudaMemcpyDefault) kind = cudaMemcpyHostToDevice;
  return Record(MemcpyImpl(false, static_cast<char*>(base) + offset, src, n, kind));
}

}  // extern "C"

// ---- API records (see SimgpuApiObserver in simgpu_hooks.h) ----
CUDART_EXPORT int simgpu_cudart_set_api_observer(const SimgpuApiObserver* observer) {
  if (observer != nullptr && observer->size < sizeof(SimgpuApiObserver)) return 1;
  g_api_observer.store(observer, std::memory_order_release);
  return 0;
}
