// Hot-path benchmark: the cost of one cuLaunchKernel call. scripts/bench runs
// it bare and with libstallscope.so preloaded; the difference is the hook's
// added cost per launch. BM_Floor is the least any recorder of a launch
// does: two TSC reads (enter and exit) and one 64-byte record stored into a
// thread's buffer, the floor the hook is measured against.
#include <benchmark/benchmark.h>
#include <cuda.h>
#include <nvtx3/nvToolsExt.h>
#include <x86intrin.h>

#include <cstdio>

#include <chrono>
#include <cstdint>
#include <thread>

static void BM_Launch(benchmark::State& state) {
  auto f = reinterpret_cast<CUfunction>(0x1000);
  for (auto _ : state) {
    CUresult r = cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, nullptr, nullptr, nullptr);
    benchmark::DoNotOptimize(r);
  }
}
BENCHMARK(BM_Launch)->Iterations(500000);

// The same launches at a pace a training job can reach (1,024 launches, then
// 100 us off the clock: under 10 M launches a second), so the recorder's
// writer keeps up and the thread's record buffers are reused; BM_Launch's
// burst outruns the writer, and then every fresh buffer's first touch (page
// faults) lands on the launching thread.
static void BM_LaunchPaced(benchmark::State& state) {
  auto f = reinterpret_cast<CUfunction>(0x1000);
  uint32_t n = 0;
  for (auto _ : state) {
    CUresult r = cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, nullptr, nullptr, nullptr);
    benchmark::DoNotOptimize(r);
    if (++n % 1024 == 0) {
      state.PauseTiming();
      std::this_thread::sleep_for(std::chrono::microseconds(100));
      state.ResumeTiming();
    }
  }
}
BENCHMARK(BM_LaunchPaced)->Iterations(500000);

// A blocking call that returns at once (the fake driver's synchronize):
// what the hook adds at every call that may block, once a step in a
// training loop (the thread's CPU sample, its native and Python stacks,
// the record).
static void BM_Sync(benchmark::State& state) {
  for (auto _ : state) {
    CUresult r = cuStreamSynchronize(nullptr);
    benchmark::DoNotOptimize(r);
  }
}
BENCHMARK(BM_Sync)->Iterations(100000);

// A step's NVTX range, named as a loop names it ("step N", a new name each
// step): push and pop. Bare, NVTX without an injection library returns at
// once; preloaded with NVTX_INJECTION64_PATH, stallscope records both.
static void BM_StepRange(benchmark::State& state) {
  char name[32];
  uint64_t step = 0;
  for (auto _ : state) {
    snprintf(name, sizeof name, "step %llu", static_cast<unsigned long long>(step++));
    benchmark::DoNotOptimize(nvtxRangePushA(name));
    benchmark::DoNotOptimize(nvtxRangePop());
  }
}
BENCHMARK(BM_StepRange)->Iterations(100000);

namespace {
struct Record {
  uint64_t enter, exit, correlation, stream, object, bytes;
  uint32_t stack, api_flags, result, python_stack;
};
static_assert(sizeof(Record) == 64);
alignas(64) Record g_buffer[1024];
}  // namespace

static void BM_Floor(benchmark::State& state) {
  uint64_t i = 0;
  auto f = reinterpret_cast<uint64_t>(&BM_Launch);
  for (auto _ : state) {
    const uint64_t enter = __rdtsc();
    const uint64_t exit = __rdtsc();
    Record& r = g_buffer[i++ & 1023];
    r = Record{enter, exit, i, 0, f, 0, 0, 1, 0, 0};
    benchmark::ClobberMemory();
  }
}
BENCHMARK(BM_Floor)->Iterations(500000);

BENCHMARK_MAIN();
