// Tests of the simulated libcupti.so.13 against the simulated driver: buffer
// callbacks, record contents equal to the ground-truth trace, external
// correlation, enabled kinds only, and the timestamp callback.
#include <catch2/catch.hpp>
#include <cuda_runtime_api.h>
#include <cupti_runtime_cbid.h>
#include <dlfcn.h>
#include <string.h>

#include <mutex>
#include <vector>

#include "simgpu_test_util.h"

using namespace simgpu_test;

namespace {

#define SIMGPU_CUPTI_FN(name) \
  decltype(&::name) name = reinterpret_cast<decltype(&::name)>(Sym(lib, #name))

struct Cupti {
  void* lib = LibCupti();
  SIMGPU_CUPTI_FN(cuptiActivityEnable);
  SIMGPU_CUPTI_FN(cuptiActivityDisable);
  SIMGPU_CUPTI_FN(cuptiActivityRegisterCallbacks);
  SIMGPU_CUPTI_FN(cuptiActivityFlushAll);
  SIMGPU_CUPTI_FN(cuptiActivityGetNextRecord);
  SIMGPU_CUPTI_FN(cuptiActivityGetNumDroppedRecords);
  SIMGPU_CUPTI_FN(cuptiActivityPushExternalCorrelationId);
  SIMGPU_CUPTI_FN(cuptiActivityPopExternalCorrelationId);
  SIMGPU_CUPTI_FN(cuptiActivityRegisterTimestampCallback);
  SIMGPU_CUPTI_FN(cuptiGetTimestamp);
  SIMGPU_CUPTI_FN(cuptiGetVersion);
  SIMGPU_CUPTI_FN(cuptiGetResultString);
  SIMGPU_CUPTI_FN(cuptiActivityEnableRuntimeApi);
};

// Records delivered through the completion callback, copied out.
struct Collected {
  std::mutex mu;
  std::vector<CUpti_ActivityKernel10> kernels;
  std::vector<CUpti_ActivityMemcpy6> copies;
  std::vector<CUpti_ActivityMemset4> sets;
  std::vector<CUpti_ActivityExternalCorrelation> ext;
  std::vector<CUpti_ActivityAPI> api;
  int buffers = 0;
};
Collected g_got;
Cupti* g_cupti = nullptr;

void CUPTIAPI BufferRequested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *size = 4096;  // small, so that several buffers are used
  *buffer = static_cast<uint8_t*>(aligned_alloc(8, *size));
  *max_records = 0;
}

void CUPTIAPI BufferCompleted(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  std::lock_guard<std::mutex> lk(g_got.mu);
  g_got.buffers++;
  CUpti_Activity* rec = nullptr;
  while (g_cupti->cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
    switch (rec->kind) {
      case CUPTI_ACTIVITY_KIND_KERNEL:
      case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
        g_got.kernels.push_back(*reinterpret_cast<CUpti_ActivityKernel10*>(rec));
        break;
      case CUPTI_ACTIVITY_KIND_MEMCPY:
        g_got.copies.push_back(*reinterpret_cast<CUpti_ActivityMemcpy6*>(rec));
        break;
      case CUPTI_ACTIVITY_KIND_MEMSET:
        g_got.sets.push_back(*reinterpret_cast<CUpti_ActivityMemset4*>(rec));
        break;
      case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION:
        g_got.ext.push_back(*reinterpret_cast<CUpti_ActivityExternalCorrelation*>(rec));
        break;
      case CUPTI_ACTIVITY_KIND_RUNTIME:
        g_got.api.push_back(*reinterpret_cast<CUpti_ActivityAPI*>(rec));
        break;
      default:
        FAIL("unexpected record kind " << rec->kind);
    }
  }
  free(buffer);
}

const CUpti_ActivityKernel10* FindKernel(const std::string& name) {
  for (const auto& k : g_got.kernels) {
    if (name == k.name) return &k;
  }
  return nullptr;
}

uint64_t g_ts_offset = 0;
uint64_t CUPTIAPI ShiftedClock() { return NowNs() + g_ts_offset; }
// A clock in other units than ns, as a TSC is (Kineto's callback returns
// raw TSC ticks): 2.5 ticks per ns.
uint64_t CUPTIAPI TickClock() { return NowNs() * 5 / 2 + g_ts_offset; }

}  // namespace

// Guards: the activity path end to end: kernel, memcpy and memset records
// with the trace's times, stream ids and correlation ids, and an external
// correlation record mapping the pushed id to the kernel's correlationId.
TEST_CASE("cupti records match the ground truth", "[cupti]") {
  Cu cu;
  cu.Setup();
  Cupti cupti;
  g_cupti = &cupti;
  CUstream s;
  REQUIRE(cu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS);

  // Completed before activity is enabled: no record.
  REQUIRE(cu.Launch("relu_before", s) == CUDA_SUCCESS);
  REQUIRE(cu.cuStreamSynchronize(s) == CUDA_SUCCESS);

  REQUIRE(cupti.cuptiActivityRegisterCallbacks(BufferRequested, BufferCompleted) ==
          CUPTI_SUCCESS);
  for (auto k : {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
                 CUPTI_ACTIVITY_KIND_MEMSET, CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION}) {
    REQUIRE(cupti.cuptiActivityEnable(k) == CUPTI_SUCCESS);
  }
  CHECK(cupti.cuptiActivityEnable(CUPTI_ACTIVITY_KIND_SYNCHRONIZATION) ==
        CUPTI_ERROR_NOT_COMPATIBLE);

  CUdeviceptr d;
  REQUIRE(cu.cuMemAlloc_v2(&d, 1 << 16) == CUDA_SUCCESS);
  std::vector<char> host(1 << 16, 1);
  REQUIRE(cupti.cuptiActivityPushExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0,
                                                       4242) == CUPTI_SUCCESS);
  REQUIRE(cu.cuLaunchKernel(cu.Kernel("gemm_cupti"), 4, 2, 1, 128, 1, 1, 256, s, nullptr,
                            nullptr) == CUDA_SUCCESS);
  uint64_t popped = 0;
  REQUIRE(cupti.cuptiActivityPopExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0,
                                                      &popped) == CUPTI_SUCCESS);
  CHECK(popped == 4242);
  CHECK(cupti.cuptiActivityPopExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0,
                                                    &popped) == CUPTI_ERROR_QUEUE_EMPTY);
  REQUIRE(cu.cuMemcpyHtoDAsync_v2(d, host.data(), host.size(), s) == CUDA_SUCCESS);
  REQUIRE(cu.cuMemsetD32Async(d, 9, 16, s) == CUDA_SUCCESS);
  for (int i = 0; i < 40; ++i) REQUIRE(cu.Launch("relu_many", s) == CUDA_SUCCESS);
  REQUIRE(cu.cuStreamSynchronize(s) == CUDA_SUCCESS);
  REQUIRE(cupti.cuptiActivityFlushAll(0) == CUPTI_SUCCESS);

  auto ops = FlushAndReadTrace(cu);
  std::lock_guard<std::mutex> lk(g_got.mu);
  CHECK(g_got.buffers >= 2);  // 4 KiB buffers cannot hold 42 kernel records
  CHECK(FindKernel("relu_before") == nullptr);
  int relus = 0;
  for (const auto& k : g_got.kernels) relus += std::string(k.name) == "relu_many";
  CHECK(relus == 40);

  const CUpti_ActivityKernel10* k = FindKernel("gemm_cupti");
  const TraceOp* t = FindOp(ops, "gemm_cupti");
  REQUIRE(k);
  REQUIRE(t);
  CHECK(k->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  CHECK(k->start == t->start_ns);
  CHECK(k->end == t->end_ns);
  CHECK(k->end - k->start >= 760000);
  CHECK(k->streamId == t->stream);
  CHECK(k->streamId == cu.StreamId(s));
  CHECK(k->correlationId == t->correlation);
  CHECK(k->deviceId == 0);
  CHECK(k->gridX == 4);
  CHECK(k->gridY == 2);
  CHECK(k->blockX == 128);
  CHECK(k->dynamicSharedMemory == 256);

  REQUIRE(g_got.ext.size() == 1);  // only the call made while the id was pushed
  CHECK(g_got.ext[0].externalKind == CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0);
  CHECK(g_got.ext[0].externalId == 4242);
  CHECK(g_got.ext[0].correlationId == k->correlationId);

  REQUIRE(g_got.copies.size() == 1);
  const auto& c = g_got.copies[0];
  CHECK(c.copyKind == CUPTI_ACTIVITY_MEMCPY_KIND_HTOD);
  CHECK(c.srcKind == CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE);
  CHECK(c.dstKind == CUPTI_ACTIVITY_MEMORY_KIND_DEVICE);
  CHECK(c.bytes == (1u << 16));
  CHECK(c.streamId == cu.StreamId(s));
  const TraceOp* tc = FindOp(ops, "HtoD");
  REQUIRE(tc);
  CHECK(c.start == tc->start_ns);
  CHECK(c.correlationId == tc->correlation);
  REQUIRE(g_got.sets.size() == 1);
  CHECK(g_got.sets[0].bytes == 64);
  CHECK(g_got.sets[0].value == 9);
  CHECK(g_got.sets[0].memoryKind == CUPTI_ACTIVITY_MEMORY_KIND_DEVICE);

  // Disabled kinds produce nothing.
  g_got.copies.clear();
  REQUIRE(cupti.cuptiActivityDisable(CUPTI_ACTIVITY_KIND_MEMCPY) == CUPTI_SUCCESS);
  REQUIRE(cu.cuMemcpyHtoDAsync_v2(d, host.data(), host.size(), s) == CUDA_SUCCESS);
  REQUIRE(cu.cuStreamSynchronize(s) == CUDA_SUCCESS);
  g_got.mu.unlock();
  REQUIRE(cupti.cuptiActivityFlushAll(0) == CUPTI_SUCCESS);
  g_got.mu.lock();
  CHECK(g_got.copies.empty());
  size_t dropped = 1;
  REQUIRE(cupti.cuptiActivityGetNumDroppedRecords(nullptr, 0, &dropped) == CUPTI_SUCCESS);
  CHECK(dropped == 0);
}

// Registers `clock` as CUPTI's timestamp callback (g_ts_offset 1000 s),
// runs kernel `name`, and returns the simulator's op and CUPTI's record of
// it; `ts` gets cuptiGetTimestamp's reading, taken before the launch.
std::pair<TraceOp, CUpti_ActivityKernel10> KernelUnderClock(CUpti_TimestampCallbackFunc clock,
                                                            const char* name, uint64_t* ts) {
  Cu cu;
  cu.Setup();
  Cupti cupti;
  g_cupti = &cupti;
  g_ts_offset = 1000ULL * 1000000000ULL;
  REQUIRE(cupti.cuptiActivityRegisterTimestampCallback(clock) == CUPTI_SUCCESS);
  REQUIRE(cupti.cuptiActivityRegisterCallbacks(BufferRequested, BufferCompleted) ==
          CUPTI_SUCCESS);
  REQUIRE(cupti.cuptiActivityEnable(CUPTI_ACTIVITY_KIND_KERNEL) == CUPTI_SUCCESS);
  REQUIRE(cupti.cuptiGetTimestamp(ts) == CUPTI_SUCCESS);
  REQUIRE(cu.Launch(name, nullptr) == CUDA_SUCCESS);
  REQUIRE(cu.cuCtxSynchronize() == CUDA_SUCCESS);
  REQUIRE(cupti.cuptiActivityFlushAll(0) == CUPTI_SUCCESS);
  auto ops = FlushAndReadTrace(cu);
  const TraceOp* t = FindOp(ops, name);
  REQUIRE(t);
  std::lock_guard<std::mutex> lk(g_got.mu);
  const CUpti_ActivityKernel10* k = FindKernel(name);
  REQUIRE(k);
  return {*t, *k};
}

// Guards: with a timestamp callback registered, records and cuptiGetTimestamp
// use the client's clock (here CLOCK_MONOTONIC + 1000 s).
TEST_CASE("cupti timestamp callback moves records to the client clock", "[cupti]") {
  const uint64_t before = NowNs();
  uint64_t ts = 0;
  auto [t, k] = KernelUnderClock(ShiftedClock, "mid_ts", &ts);
  CHECK(ts >= before + g_ts_offset);
  CHECK(k.kind == CUPTI_ACTIVITY_KIND_KERNEL);
  int64_t skew = static_cast<int64_t>(k.start - (t.start_ns + g_ts_offset));
  CHECK(skew < 50000);
  CHECK(skew > -50000);
  CHECK(k.end - k.start == t.end_ns - t.start_ns);
}

// Guards: records follow a timestamp callback's unit, not only its origin
// (the real CUPTI maps GPU times onto the callback's clock linearly): a
// 2.5-ticks-per-ns clock gives 2.5x the durations and ticks-based starts.
TEST_CASE("cupti timestamp callback in other units than ns", "[cupti]") {
  uint64_t ts = 0;
  auto [t, k] = KernelUnderClock(TickClock, "tick_ts", &ts);
  int64_t skew = static_cast<int64_t>(k.start - (t.start_ns * 5 / 2 + g_ts_offset));
  CHECK(skew < 50000);
  CHECK(skew > -50000);
  double ratio = static_cast<double>(k.end - k.start) / static_cast<double>(t.end_ns - t.start_ns);
  CHECK(ratio > 2.49);
  CHECK(ratio < 2.51);
}

// Guards: runtime API records (CUPTI_ACTIVITY_KIND_RUNTIME) from the
// simulated runtime: a cudaLaunchKernel record whose correlationId is the
// kernel record's (how Kineto and HTA join launches to kernels), its
// cupti_runtime_cbid.h id and times around the launch's submission; the
// external correlation record of the call; per-cbid filtering; and no
// record once the kind is disabled.
TEST_CASE("cupti runtime API records join their kernels", "[cupti]") {
  Cu cu;
  cu.Setup();
  Cupti cupti;
  g_cupti = &cupti;
  void* rt = dlopen(SIMGPU_DIR "/libcudart.so.13", RTLD_NOW | RTLD_LOCAL);
  REQUIRE(rt != nullptr);
  auto reg_fatbin = reinterpret_cast<void** (*)(void*)>(Sym(rt, "__cudaRegisterFatBinary"));
  auto reg_function = reinterpret_cast<void (*)(void**, const char*, char*, const char*, int,
                                                uint3*, uint3*, dim3*, dim3*, int*)>(
      Sym(rt, "__cudaRegisterFunction"));
  auto launch = reinterpret_cast<decltype(&::cudaLaunchKernel)>(Sym(rt, "cudaLaunchKernel"));
  auto stream_create =
      reinterpret_cast<decltype(&::cudaStreamCreate)>(Sym(rt, "cudaStreamCreate"));
  auto stream_sync =
      reinterpret_cast<decltype(&::cudaStreamSynchronize)>(Sym(rt, "cudaStreamSynchronize"));
  static const char kImage[] = "runtime image";
  static char stub_a, stub_b;  // the host stubs nvcc would register
  void** fatbin = reg_fatbin(const_cast<char*>(kImage));
  char name_a[] = "rt_cupti_kernel", name_b[] = "rt_cupti_after";
  reg_function(fatbin, &stub_a, name_a, name_a, -1, nullptr, nullptr, nullptr, nullptr, nullptr);
  reg_function(fatbin, &stub_b, name_b, name_b, -1, nullptr, nullptr, nullptr, nullptr, nullptr);
  cudaStream_t s;
  REQUIRE(stream_create(&s) == cudaSuccess);

  REQUIRE(cupti.cuptiActivityRegisterCallbacks(BufferRequested, BufferCompleted) ==
          CUPTI_SUCCESS);
  for (auto k : {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_RUNTIME,
                 CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION}) {
    REQUIRE(cupti.cuptiActivityEnable(k) == CUPTI_SUCCESS);
  }
  // Kineto leaves cudaGetDevice out; here cudaStreamSynchronize is.
  REQUIRE(cupti.cuptiActivityEnableRuntimeApi(CUPTI_RUNTIME_TRACE_CBID_cudaStreamSynchronize_v3020,
                                              0) == CUPTI_SUCCESS);
  CHECK(cupti.cuptiActivityEnableRuntimeApi(CUPTI_RUNTIME_TRACE_CBID_SIZE, 0) ==
        CUPTI_ERROR_INVALID_PARAMETER);
  REQUIRE(cupti.cuptiActivityPushExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0,
                                                       77) == CUPTI_SUCCESS);
  REQUIRE(launch(&stub_a, dim3(2), dim3(64), nullptr, 0, s) == cudaSuccess);
  uint64_t popped = 0;
  REQUIRE(cupti.cuptiActivityPopExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0,
                                                      &popped) == CUPTI_SUCCESS);
  REQUIRE(stream_sync(s) == cudaSuccess);
  REQUIRE(cupti.cuptiActivityDisable(CUPTI_ACTIVITY_KIND_RUNTIME) == CUPTI_SUCCESS);
  REQUIRE(launch(&stub_b, dim3(1), dim3(32), nullptr, 0, s) == cudaSuccess);  // not recorded
  REQUIRE(stream_sync(s) == cudaSuccess);
  REQUIRE(cupti.cuptiActivityFlushAll(0) == CUPTI_SUCCESS);

  std::lock_guard<std::mutex> lk(g_got.mu);
  const CUpti_ActivityKernel10* k = FindKernel("rt_cupti_kernel");
  const CUpti_ActivityKernel10* after = FindKernel("rt_cupti_after");
  REQUIRE(k != nullptr);
  REQUIRE(after != nullptr);
  REQUIRE(g_got.api.size() == 1);  // the launch: the sync is filtered, the last launch disabled
  const CUpti_ActivityAPI& a = g_got.api[0];
  CHECK(a.kind == CUPTI_ACTIVITY_KIND_RUNTIME);
  CHECK(a.cbid == CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000);
  CHECK(a.correlationId == k->correlationId);
  CHECK(a.correlationId != after->correlationId);
  CHECK(a.start <= a.end);
  CHECK(a.start <= k->queued);  // the kernel was enqueued during the call
  CHECK(k->queued <= a.end);
  CHECK(a.returnValue == cudaSuccess);
  CHECK(a.processId == static_cast<uint32_t>(getpid()));
  CHECK(a.threadId == static_cast<uint32_t>(pthread_self()));
  REQUIRE(g_got.ext.size() == 1);
  CHECK(g_got.ext[0].externalId == 77);
  CHECK(g_got.ext[0].correlationId == a.correlationId);
}

// Device timing turned off and on between steps (stallscope's sampled
// windows): a kernel is reported when its kind was on at its launch, as
// NVIDIA's CUPTI decides, whenever it completes.
TEST_CASE("cupti kinds turned off and on apply to the kernels launched after", "[cupti]") {
  Cu cu;
  cu.Setup();
  Cupti cupti;
  g_cupti = &cupti;
  CUstream s;
  REQUIRE(cu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS);
  REQUIRE(cupti.cuptiActivityRegisterCallbacks(BufferRequested, BufferCompleted) ==
          CUPTI_SUCCESS);
  REQUIRE(cupti.cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) == CUPTI_SUCCESS);
  REQUIRE(cu.Launch("long_timed_then_off", s) == CUDA_SUCCESS);  // 2 ms
  REQUIRE(cupti.cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) == CUPTI_SUCCESS);
  // Still running when its kind went off (unless the machine stalled this
  // thread for 2 ms: then the case shows less, and still holds).
  const bool in_flight = cu.cuStreamQuery(s) == CUDA_ERROR_NOT_READY;
  REQUIRE(cu.Launch("relu_untimed", s) == CUDA_SUCCESS);
  REQUIRE(cu.cuStreamSynchronize(s) == CUDA_SUCCESS);
  REQUIRE(cupti.cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) == CUPTI_SUCCESS);
  REQUIRE(cu.Launch("relu_timed_again", s) == CUDA_SUCCESS);
  REQUIRE(cu.cuStreamSynchronize(s) == CUDA_SUCCESS);
  REQUIRE(cupti.cuptiActivityFlushAll(0) == CUPTI_SUCCESS);
  std::lock_guard<std::mutex> lk(g_got.mu);
  INFO("the first kernel was still running when its kind went off: " << in_flight);
  CHECK(FindKernel("long_timed_then_off") != nullptr);
  CHECK(FindKernel("relu_untimed") == nullptr);
  CHECK(FindKernel("relu_timed_again") != nullptr);
  REQUIRE(cupti.cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) == CUPTI_SUCCESS);
}

// Guards: small API pieces: version, result strings, parameter checks.
TEST_CASE("cupti misc API", "[cupti]") {
  Cupti cupti;
  uint32_t v = 0;
  REQUIRE(cupti.cuptiGetVersion(&v) == CUPTI_SUCCESS);
  CHECK(v == CUPTI_API_VERSION);
  const char* s = nullptr;
  REQUIRE(cupti.cuptiGetResultString(CUPTI_ERROR_QUEUE_EMPTY, &s) == CUPTI_SUCCESS);
  CHECK(std::string(s) == "CUPTI_ERROR_QUEUE_EMPTY");
  CHECK(cupti.cuptiActivityFlushAll(0) == CUPTI_ERROR_INVALID_OPERATION);  // no callbacks yet
  CHECK(cupti.cuptiActivityPushExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_INVALID,
                                                     1) == CUPTI_ERROR_INVALID_PARAMETER);
  uint8_t buf[64] = {};
  CUpti_Activity* rec = nullptr;
  CHECK(cupti.cuptiActivityGetNextRecord(buf, 0, &rec) == CUPTI_ERROR_MAX_LIMIT_REACHED);
}
