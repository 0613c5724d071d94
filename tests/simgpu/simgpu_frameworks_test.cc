// Tests of the driver entry points that frameworks (PyTorch, numba-cuda,
// cuda-python, NVRTC) call beyond the launch/copy/sync core: host functions
// in stream order, pointer attributes from the memory map, function and
// kernel attributes, occupancy, and cuGetExportTable's "not supported".
// Times come from what the simulator recorded (the trace, the host
// function's own clock reads), never from nominal durations alone.
#include <catch2/catch.hpp>
#include <dlfcn.h>
#include <glob.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "simgpu_test_util.h"

using namespace simgpu_test;

namespace {

constexpr uint64_t kMs = 1000000;

#define FRAMEWORK_FN(name) \
  decltype(&::name) name = reinterpret_cast<decltype(&::name)>(Sym(LibCuda(), #name))

struct Ext {
  FRAMEWORK_FN(cuLaunchHostFunc);
  FRAMEWORK_FN(cuLaunchHostFunc_ptsz);
  FRAMEWORK_FN(cuStreamAddCallback);
  FRAMEWORK_FN(cuPointerGetAttribute);
  FRAMEWORK_FN(cuPointerGetAttributes);
  FRAMEWORK_FN(cuFuncGetAttribute);
  FRAMEWORK_FN(cuKernelGetAttribute);
  FRAMEWORK_FN(cuKernelGetLibrary);
  FRAMEWORK_FN(cuLibraryGetModule);
  FRAMEWORK_FN(cuOccupancyMaxActiveBlocksPerMultiprocessor);
  FRAMEWORK_FN(cuGetExportTable);
};

struct HostCallLog {
  std::atomic<uint64_t> start{0}, end{0};
  std::atomic<int> calls{0};
  uint64_t sleep_ns = 0;
};

void CUDA_CB LogHostCall(void* p) {
  auto* log = static_cast<HostCallLog*>(p);
  log->start = NowNs();
  if (log->sleep_ns) usleep(static_cast<useconds_t>(log->sleep_ns / 1000));
  log->calls++;
  log->end = NowNs();
}

}  // namespace

// Guards cuLaunchHostFunc's stream order: the function runs after the kernel
// before it has ended (trace end), and the kernel after it starts only once
// the function has returned; a stream synchronize waits for the function.
TEST_CASE("host function runs in stream order and the stream waits for it", "[driver][hostfn]") {
  Cu cu;
  cu.Setup();
  Ext ext;
  CUstream s;
  REQUIRE(cu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS);
  HostCallLog log;
  log.sleep_ns = 3 * kMs;
  REQUIRE(cu.Launch("long_before_hostfn", s) == CUDA_SUCCESS);  // long*=2000 us
  REQUIRE(ext.cuLaunchHostFunc(s, LogHostCall, &log) == CUDA_SUCCESS);
  REQUIRE(cu.Launch("mid_after_hostfn", s) == CUDA_SUCCESS);
  REQUIRE(cu.cuStreamSynchronize(s) == CUDA_SUCCESS);
  const uint64_t sync_returned = NowNs();
  REQUIRE(log.calls == 1);
  std::vector<TraceOp> ops = FlushAndReadTrace(cu);
  const TraceOp* before = FindOp(ops, "long_before_hostfn");
  const TraceOp* after = FindOp(ops, "mid_after_hostfn");
  REQUIRE(before != nullptr);
  REQUIRE(after != nullptr);
  CHECK(log.start >= before->end_ns);
  CHECK(after->start_ns >= log.end);
  CHECK(sync_returned >= after->end_ns);
  // A host function is no device op: it leaves no line in the ground truth.
  CHECK(FindOp(ops, "host_function") == nullptr);
}

// Guards the legacy stream and the per-thread form: a host function on the
// NULL stream through cuLaunchHostFunc_ptsz, and cuStreamAddCallback's
// callback (same thread, stream order) get called exactly once each.
TEST_CASE("per-thread host function and stream callback are called once", "[driver][hostfn]") {
  Cu cu;
  cu.Setup();
  Ext ext;
  HostCallLog a, b;
  REQUIRE(ext.cuLaunchHostFunc_ptsz(nullptr, LogHostCall, &a) == CUDA_SUCCESS);
  struct Cb {
    static void CUDA_CB Call(CUstream, CUresult status, void* p) {
      if (status == CUDA_SUCCESS) LogHostCall(p);
    }
  };
  CUstream s;
  REQUIRE(cu.cuStreamCreate(&s, CU_STREAM_DEFAULT) == CUDA_SUCCESS);
  REQUIRE(cu.Launch("gemm_cb", s) == CUDA_SUCCESS);
  REQUIRE(ext.cuStreamAddCallback(s, Cb::Call, &b, 0) == CUDA_SUCCESS);
  CHECK(ext.cuStreamAddCallback(s, Cb::Call, &b, 1) == CUDA_ERROR_INVALID_VALUE);
  REQUIRE(cu.cuCtxSynchronize() == CUDA_SUCCESS);
  CHECK(a.calls == 1);
  CHECK(b.calls == 1);
  CHECK(ext.cuLaunchHostFunc(s, nullptr, nullptr) == CUDA_ERROR_INVALID_VALUE);
}

// Guards pointer attributes from the simulator's memory map (what torch's
// is_pinned() and copy paths read): device and pinned allocations, an
// interior pointer's range, and pageable memory (an error alone, zeros in
// the multi-attribute form).
TEST_CASE("pointer attributes follow the memory map", "[driver][pointer]") {
  Cu cu;
  cu.Setup();
  Ext ext;
  CUdeviceptr d = 0;
  REQUIRE(cu.cuMemAlloc_v2(&d, 4096) == CUDA_SUCCESS);
  void* pinned = nullptr;
  REQUIRE(cu.cuMemAllocHost_v2(&pinned, 1024) == CUDA_SUCCESS);
  static char pageable[64];

  unsigned type = 0;
  REQUIRE(ext.cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, d + 100) ==
          CUDA_SUCCESS);
  CHECK(type == CU_MEMORYTYPE_DEVICE);
  CUdeviceptr start = 0;
  size_t size = 0;
  REQUIRE(ext.cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, d + 100) ==
          CUDA_SUCCESS);
  REQUIRE(ext.cuPointerGetAttribute(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, d + 100) ==
          CUDA_SUCCESS);
  CHECK(start == d);
  CHECK(size == 4096);
  REQUIRE(ext.cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                    reinterpret_cast<CUdeviceptr>(pinned)) == CUDA_SUCCESS);
  CHECK(type == CU_MEMORYTYPE_HOST);
  CHECK(ext.cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                  reinterpret_cast<CUdeviceptr>(pageable)) ==
        CUDA_ERROR_INVALID_VALUE);

  CUpointer_attribute which[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                 CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL};
  unsigned t2 = 99;
  int ordinal = 99;
  void* out[] = {&t2, &ordinal};
  REQUIRE(ext.cuPointerGetAttributes(2, which, out, reinterpret_cast<CUdeviceptr>(pageable)) ==
          CUDA_SUCCESS);
  CHECK(t2 == 0);
  CHECK(ordinal == -1);
  REQUIRE(ext.cuPointerGetAttributes(2, which, out, reinterpret_cast<CUdeviceptr>(pinned)) ==
          CUDA_SUCCESS);
  CHECK(t2 == CU_MEMORYTYPE_HOST);
  CHECK(ordinal == 0);
  REQUIRE(cu.cuMemFreeHost(pinned) == CUDA_SUCCESS);
  CHECK(ext.cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                  reinterpret_cast<CUdeviceptr>(pinned)) ==
        CUDA_ERROR_INVALID_VALUE);
  REQUIRE(cu.cuMemFree_v2(d) == CUDA_SUCCESS);
}

// Guards function and kernel attributes (numba-cuda asks cuKernelGetAttribute
// before it launches), a kernel's library and module, occupancy, and a bad
// handle.
TEST_CASE("function and kernel attributes are plausible", "[driver][function]") {
  Cu cu;
  cu.Setup();
  Ext ext;
  CUfunction f = cu.Kernel("attr_kernel");
  int v = 0;
  REQUIRE(ext.cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, f) == CUDA_SUCCESS);
  CHECK(v == 1024);
  REQUIRE(ext.cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_NUM_REGS, f) == CUDA_SUCCESS);
  CHECK(v > 0);
  CUlibrary lib;
  static const char kImage[] = "library image";
  REQUIRE(cu.cuLibraryLoadData(&lib, kImage, nullptr, nullptr, 0, nullptr, nullptr, 0) ==
          CUDA_SUCCESS);
  CUkernel k;
  REQUIRE(cu.cuLibraryGetKernel(&k, lib, "lib_kernel") == CUDA_SUCCESS);
  REQUIRE(ext.cuKernelGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, k, 0) ==
          CUDA_SUCCESS);
  CHECK(v == 49152);
  CHECK(ext.cuKernelGetAttribute(&v, CU_FUNC_ATTRIBUTE_NUM_REGS, k, 7) ==
        CUDA_ERROR_INVALID_DEVICE);
  CUlibrary owner = nullptr;
  REQUIRE(ext.cuKernelGetLibrary(&owner, k) == CUDA_SUCCESS);
  CHECK(owner == lib);
  CUmodule mod = nullptr;
  REQUIRE(ext.cuLibraryGetModule(&mod, lib) == CUDA_SUCCESS);
  CHECK(mod != nullptr);
  int blocks = 0;
  REQUIRE(ext.cuOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, f, 256, 0) == CUDA_SUCCESS);
  CHECK(blocks == 8);  // 2048 threads per SM
  REQUIRE(ext.cuOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, f, 2048, 0) == CUDA_SUCCESS);
  CHECK(blocks == 0);
  int bogus = 0;
  CHECK(ext.cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_NUM_REGS,
                               reinterpret_cast<CUfunction>(&bogus)) == CUDA_ERROR_INVALID_HANDLE);
}

// Guards cuGetExportTable (NVRTC calls it without a null check on the
// pointer it gets from dlsym): exported, reachable through cuGetProcAddress,
// and "not supported" with a null table.
TEST_CASE("cuGetExportTable answers not supported with a null table", "[driver][export]") {
  Cu cu;
  Ext ext;
  const void* table = &table;
  CUuuid id{};
  CHECK(ext.cuGetExportTable(&table, &id) == CUDA_ERROR_NOT_SUPPORTED);
  CHECK(table == nullptr);
  void* p = nullptr;
  CUdriverProcAddressQueryResult status;
  REQUIRE(cu.cuGetProcAddress_v2("cuGetExportTable", &p, 13000, 0, &status) == CUDA_SUCCESS);
  CHECK(p == reinterpret_cast<void*>(ext.cuGetExportTable));
}

// Guards the simulated cuBLAS and cuBLASLt: a GEMM is one kernel on the
// handle's stream named after its shape, lasting at least 3 us + 2mnk / 50
// TFLOP/s (the ground truth's duration);
// cublasLtMatmul takes m, n from D's layout and k from A's (transposed);
// routines it does not provide say "not supported".
TEST_CASE("simulated cuBLAS GEMMs are kernels whose time grows with m*n*k", "[cublas]") {
  Cu cu;
  cu.Setup();
  void* blas = dlopen(SIMGPU_DIR "/libcublas.so.13", RTLD_NOW | RTLD_LOCAL);
  void* lt = dlopen(SIMGPU_DIR "/libcublasLt.so.13", RTLD_NOW | RTLD_LOCAL);
  REQUIRE(blas != nullptr);
  REQUIRE(lt != nullptr);
  using Status = int;
  using Handle = void*;
  auto create = reinterpret_cast<Status (*)(Handle*)>(Sym(blas, "cublasCreate_v2"));
  auto set_stream = reinterpret_cast<Status (*)(Handle, CUstream)>(Sym(blas, "cublasSetStream_v2"));
  auto sgemm = reinterpret_cast<Status (*)(Handle, int, int, int, int, int, const float*,
                                           const float*, int, const float*, int, const float*,
                                           float*, int)>(Sym(blas, "cublasSgemm_v2"));
  auto dgeqrf = reinterpret_cast<Status (*)()>(Sym(blas, "cublasDgeqrfBatched"));
  Handle h = nullptr;
  REQUIRE(create(&h) == 0);
  CUstream s;
  REQUIRE(cu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS);
  REQUIRE(set_stream(h, s) == 0);
  const float one = 1;
  // 2 * 2048^3 = 17.2 GFLOP: 343.6 us at 50 TFLOP/s, + 3 us.
  REQUIRE(sgemm(h, 0, 1, 2048, 2048, 2048, &one, nullptr, 2048, nullptr, 2048, &one, nullptr,
                2048) == 0);
  CHECK(dgeqrf() == 15);  // CUBLAS_STATUS_NOT_SUPPORTED

  // cublasLtMatmul: D 256 x 1024, op(A) = A^T with A stored 512 x 256 -> k = 512.
  auto lt_create = reinterpret_cast<Status (*)(Handle*)>(Sym(lt, "cublasLtCreate"));
  auto desc_create = reinterpret_cast<Status (*)(void**, int, int)>(Sym(lt, "cublasLtMatmulDescCreate"));
  auto desc_set = reinterpret_cast<Status (*)(void*, int, const void*, size_t)>(
      Sym(lt, "cublasLtMatmulDescSetAttribute"));
  auto layout = reinterpret_cast<Status (*)(void**, int, uint64_t, uint64_t, int64_t)>(
      Sym(lt, "cublasLtMatrixLayoutCreate"));
  auto matmul = reinterpret_cast<Status (*)(Handle, void*, const void*, const void*, void*,
                                            const void*, void*, const void*, const void*, void*,
                                            void*, void*, const void*, void*, size_t, CUstream)>(
      Sym(lt, "cublasLtMatmul"));
  Handle lh = nullptr;
  REQUIRE(lt_create(&lh) == 0);
  void* desc = nullptr;
  REQUIRE(desc_create(&desc, 68 /* CUBLAS_COMPUTE_32F */, 0 /* CUDA_R_32F */) == 0);
  const int32_t transpose = 1;  // CUBLAS_OP_T
  REQUIRE(desc_set(desc, 3 /* CUBLASLT_MATMUL_DESC_TRANSA */, &transpose, sizeof transpose) == 0);
  void *a = nullptr, *b = nullptr, *d = nullptr;
  REQUIRE(layout(&a, 0, 512, 256, 512) == 0);
  REQUIRE(layout(&b, 0, 512, 1024, 512) == 0);
  REQUIRE(layout(&d, 0, 256, 1024, 256) == 0);
  REQUIRE(matmul(lh, desc, &one, nullptr, a, nullptr, b, &one, nullptr, d, nullptr, d, nullptr,
                 nullptr, 0, s) == 0);
  REQUIRE(cu.cuStreamSynchronize(s) == CUDA_SUCCESS);

  std::vector<TraceOp> ops = FlushAndReadTrace(cu);
  const TraceOp* big = FindOp(ops, "cublas_sgemm_nt_m2048_n2048_k2048");
  REQUIRE(big != nullptr);
  CHECK(big->stream == cu.StreamId(s));
  // At least its m*n*k time (a kernel of the default 20 us would fail); no
  // upper bound: a loaded machine wakes the device thread late.
  const double nominal = 3000 + 2.0 * 2048 * 2048 * 2048 / 50e3;
  CHECK(big->end_ns - big->start_ns >= 0.95 * nominal);
  const TraceOp* ltop = FindOp(ops, "cublasLt_sgemm_tn_m256_n1024_k512");
  REQUIRE(ltop != nullptr);
  CHECK(ltop->start_ns >= big->end_ns);  // stream order
}

TEST_CASE("sync trace child", "[.][sync_trace_child]") {
  Cu cu;
  cu.Setup();
  CUstream s;
  REQUIRE(cu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS);
  CUdeviceptr d = 0;
  REQUIRE(cu.cuMemAlloc_v2(&d, 4096) == CUDA_SUCCESS);
  void* pinned = nullptr;
  REQUIRE(cu.cuMemAllocHost_v2(&pinned, 4096) == CUDA_SUCCESS);
  static char pageable[4096];
  REQUIRE(cu.Launch("mid_sync_trace", s) == CUDA_SUCCESS);
  // Not synchronizing: a pinned async read-back, an async upload.
  REQUIRE(cu.cuMemcpyDtoHAsync_v2(pinned, d, 64, s) == CUDA_SUCCESS);
  REQUIRE(cu.cuMemcpyHtoDAsync_v2(d, pageable, 64, s) == CUDA_SUCCESS);
  // Synchronizing: the stream sync, a pageable async read-back, a sync copy,
  // the context sync, the free.
  REQUIRE(cu.cuStreamSynchronize(s) == CUDA_SUCCESS);
  REQUIRE(cu.cuMemcpyDtoHAsync_v2(pageable, d, 64, s) == CUDA_SUCCESS);
  REQUIRE(cu.cuMemcpyDtoH_v2(pageable, d, 64) == CUDA_SUCCESS);
  REQUIRE(cu.cuCtxSynchronize() == CUDA_SUCCESS);
  REQUIRE(cu.cuMemFree_v2(d) == CUDA_SUCCESS);
}

// Guards SIMGPU_SYNC_TRACE, the ground truth for synchronizing calls: one
// line per call that synchronized under the simulator's rules, none for the
// asynchronous ones.
TEST_CASE("the sync trace holds exactly the synchronizing calls", "[driver][sync_trace]") {
  char dir[] = "/tmp/simgpu-sync-XXXXXX";
  REQUIRE(mkdtemp(dir) != nullptr);
  const std::string path = std::string(dir) + "/sync-%p.jsonl";
  REQUIRE(RunSelf({"SIMGPU_SYNC_TRACE=" + path}, "[sync_trace_child]") == 0);
  std::vector<std::string> apis;
  glob_t g{};
  REQUIRE(glob((std::string(dir) + "/sync-*.jsonl").c_str(), 0, nullptr, &g) == 0);
  REQUIRE(g.gl_pathc == 1);
  const std::string file = g.gl_pathv[0];
  globfree(&g);
  REQUIRE(!file.empty());
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);) {
    const size_t at = line.find("\"api\":\"");
    REQUIRE(at != std::string::npos);
    apis.push_back(line.substr(at + 7, line.find('"', at + 7) - at - 7));
  }
  CHECK(apis == std::vector<std::string>{"cuStreamSynchronize", "cuMemcpyAsync", "cuMemcpy",
                                         "cuCtxSynchronize", "cuMemFree"});
  std::remove(file.c_str());
  rmdir(dir);
}

// Guards the 2D forms (rows of the 1D copies and sets, real bytes), peer
// copies (one address space) and cooperative launches (a plain launch); a
// hooked entry point the simulator does not simulate is exported and says
// "not supported".
TEST_CASE("2D copies and sets, peer copies, cooperative launches", "[driver][copy2d]") {
  Cu cu;
  cu.Setup();
  FRAMEWORK_FN(cuMemcpy2D_v2);
  FRAMEWORK_FN(cuMemsetD2D32_v2);
  FRAMEWORK_FN(cuMemcpyPeer);
  FRAMEWORK_FN(cuLaunchCooperativeKernel);
  // A 3 x 4-byte-wide block out of a host image with a 16-byte pitch, into
  // device rows with a 8-byte pitch.
  unsigned char host[3 * 16];
  for (int i = 0; i < 48; ++i) host[i] = static_cast<unsigned char>(i);
  CUdeviceptr d = 0, e = 0;
  REQUIRE(cu.cuMemAlloc_v2(&d, 64) == CUDA_SUCCESS);
  REQUIRE(cu.cuMemAlloc_v2(&e, 64) == CUDA_SUCCESS);
  REQUIRE(cu.cuMemsetD8_v2(d, 0xee, 64) == CUDA_SUCCESS);
  CUDA_MEMCPY2D p{};
  p.srcMemoryType = CU_MEMORYTYPE_HOST;
  p.srcHost = host;
  p.srcXInBytes = 2;
  p.srcPitch = 16;
  p.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  p.dstDevice = d;
  p.dstPitch = 8;
  p.WidthInBytes = 4;
  p.Height = 3;
  REQUIRE(cuMemcpy2D_v2(&p) == CUDA_SUCCESS);
  unsigned char back[24];
  REQUIRE(cu.cuMemcpyDtoH_v2(back, d, sizeof back) == CUDA_SUCCESS);
  for (int row = 0; row < 3; ++row) {
    for (int x = 0; x < 8; ++x) {
      const int want = x < 4 ? row * 16 + 2 + x : 0xee;
      CHECK(back[row * 8 + x] == want);
    }
  }
  // 2 rows of 1 u32 at an 8-byte pitch: the bytes between stay.
  REQUIRE(cuMemsetD2D32_v2(d, 8, 0x01020304u, 1, 2) == CUDA_SUCCESS);
  uint32_t words[4];
  REQUIRE(cu.cuMemcpyDtoH_v2(words, d, sizeof words) == CUDA_SUCCESS);
  CHECK(words[0] == 0x01020304u);
  CHECK(words[2] == 0x01020304u);
  CHECK(words[1] != 0x01020304u);
  // A peer copy within the one simulated address space.
  CUcontext ctx = nullptr;
  REQUIRE(cu.cuCtxGetCurrent(&ctx) == CUDA_SUCCESS);
  REQUIRE(cuMemcpyPeer(e, ctx, d, ctx, 16) == CUDA_SUCCESS);
  uint32_t peer[4];
  REQUIRE(cu.cuMemcpyDtoH_v2(peer, e, sizeof peer) == CUDA_SUCCESS);
  CHECK(peer[0] == 0x01020304u);
  // A cooperative launch is a launch.
  REQUIRE(cuLaunchCooperativeKernel(cu.Kernel("coop_kernel"), 1, 1, 1, 32, 1, 1, 0, nullptr,
                                    nullptr) == CUDA_SUCCESS);
  REQUIRE(cu.cuCtxSynchronize() == CUDA_SUCCESS);
  CHECK(FindOp(FlushAndReadTrace(cu), "coop_kernel") != nullptr);
  // Not simulated, but exported and found.
  auto legacy = reinterpret_cast<int (*)()>(Sym(LibCuda(), "cuMemcpy3D_v2"));
  CHECK(legacy() == CUDA_ERROR_NOT_SUPPORTED);
  void* fn = nullptr;
  CUdriverProcAddressQueryResult status;
  REQUIRE(cu.cuGetProcAddress_v2("cuMemcpy3D", &fn, 13000, 0, &status) == CUDA_SUCCESS);
  CHECK(fn == reinterpret_cast<void*>(legacy));
  REQUIRE(cu.cuMemFree_v2(d) == CUDA_SUCCESS);
  REQUIRE(cu.cuMemFree_v2(e) == CUDA_SUCCESS);
}
