// Hot-path benchmark: the cost of one cuLaunchKernel call. scripts/bench runs
// it bare and with libstallscope.so preloaded; the difference is the hook's
// added cost per launch.
#include <benchmark/benchmark.h>
#include <cuda.h>

static void BM_Launch(benchmark::State& state) {
  auto f = reinterpret_cast<CUfunction>(0x1000);
  for (auto _ : state) {
    CUresult r = cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, nullptr, nullptr, nullptr);
    benchmark::DoNotOptimize(r);
  }
}
BENCHMARK(BM_Launch)->Iterations(500000);

BENCHMARK_MAIN();
