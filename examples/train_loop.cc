// A driver-API imitation of a training loop, with switches for the stalls the
// seed article describes: a slow input pipeline, a loss read back every step
// (the `.item()` pattern), an explicit synchronize after logging, many tiny
// kernels, and a clean mode. Steps are NVTX ranges "step N" (--no-nvtx drops
// them). The kernels are empty PTX entry points, so the same binary runs on a
// real GPU; on the simulated GPU their durations come from SIMGPU_KERNEL_US.
//
//   train_loop [--steps N] [--input-us U] [--readback] [--sync-log]
//              [--tiny K] [--dispatch-us D] [--cpu-us C] [--no-nvtx]
//              [--batch-bytes B] [--graph] [--dump-at STEP]
//              [--slow-from STEP --slow-input-us U] [--step-time]
//              [--log-waits FILE] [--name-period P]
//
// --dispatch-us spins the CPU for D us before every launch: the per-op cost of
// a framework's dispatcher, which is what makes tiny kernels launch-bound.
// --cpu-us spins the CPU for C us at the start of every step, on the launching
// thread (CPU preprocessing of the batch: on-CPU, unlike --input-us's sleep).
// --graph captures the step's kernels once, before the first step, into a
// CUDA graph (stream capture) and launches that graph every step instead:
// one dispatch and one launch call per step, the nodes back to back on the
// device (what `stallscope whatif --launch-cost` predicts).
// --dump-at asks stallscope's flight recorder (`stallscope run --ring`) for a
// dump after step STEP, through the C API `stallscope_dump()` when the
// preload library is loaded (looked up at run time: the program needs no
// stallscope to build or run), and prints what it answered.
// --slow-from with --slow-input-us: from step STEP on, the host waits U us
// for each batch instead of --input-us's (an input pipeline that slows down
// mid-run: what the flight recorder's regression trigger catches).
// --step-time prints the mean host time of a step, begin to begin, over the
// steps after the first tenth (the warm-up), and the process's peak resident
// memory so far (VmHWM: its own address space's, not the exec'ing parent's),
// for scripts/bench's overhead figures.
// --log-waits FILE writes each input wait's CLOCK_MONOTONIC [start, end) ns
// and the thread's CPU time in it, one JSON object a line, after the loop
// (the same fields as the Python examples' --log-waits): what the waits
// really took, for the tests' oracles.
#include <cuda.h>
#include <dlfcn.h>
#include <nvtx3/nvToolsExt.h>
#include <time.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "example_args.h"

namespace {

const char kPtx[] = R"(
.version 8.0
.target sm_75
.address_size 64
.visible .entry load_batch() { ret; }
.visible .entry gemm_fwd() { ret; }
.visible .entry relu() { ret; }
.visible .entry gemm_bwd() { ret; }
.visible .entry sgd_update() { ret; }
.visible .entry loss_reduce() { ret; }
.visible .entry tiny_elementwise() { ret; }
)";

struct Options : example::LoopOptions {
  long dispatch_us = 0;
  long cpu_us = 0;
  bool graph = false;
  int dump_at = -1;  // --dump-at: the step after which to ask for a flight-recorder dump
  int slow_from = -1;      // --slow-from: the first step of the slower input
  long slow_input_us = 0;  // --slow-input-us: its wait per batch
  bool step_time = false;  // --step-time: print the mean step time
  int name_period = 0;     // --name-period: step N's range is named "step N mod P"
  const char* log_waits = nullptr;  // --log-waits: where to write the waits
};

void Check(CUresult r, const char* what) {
  if (r != CUDA_SUCCESS) {
    const char* name = nullptr;
    cuGetErrorName(r, &name);
    std::fprintf(stderr, "train_loop: %s failed: %s\n", what, name ? name : "?");
    std::exit(1);
  }
}

void SleepUs(long us) {
  timespec ts{us / 1000000, (us % 1000000) * 1000};
  while (nanosleep(&ts, &ts) != 0) {
  }
}


// The `.item()` pattern: a 4-byte copy of the loss into pageable memory on
// the training stream. Into pageable memory the "async" copy is synchronous:
// it returns only when every kernel queued before it has finished.
__attribute__((noinline)) float ReadLoss(CUdeviceptr loss, CUstream stream) {
  float value = 0;
  Check(cuMemcpyDtoHAsync(&value, loss, sizeof value, stream), "cuMemcpyDtoHAsync");  // STALL:readback
  return value;
}

// Logging that synchronizes the device so the printed numbers are "current".
__attribute__((noinline)) void LogProgress(int step, CUstream stream) {
  std::printf("step %d done\n", step);
  Check(cuStreamSynchronize(stream), "cuStreamSynchronize");  // STALL:sync-log
}

long g_dispatch_us = 0;

// Busy-waits `us` microseconds of wall time: on-CPU work on this thread.
void SpinUs(long us) {
  timespec t0, t;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  do {
    clock_gettime(CLOCK_MONOTONIC, &t);
  } while ((t.tv_sec - t0.tv_sec) * 1000000L + (t.tv_nsec - t0.tv_nsec) / 1000 < us);
}

// Framework dispatch overhead: on-CPU work on the launching thread.
void Dispatch() {
  if (g_dispatch_us) SpinUs(g_dispatch_us);
}

// CPU preprocessing of the batch on the launching thread, before the step's
// first CUDA call. The thread's CPU clock says how much of it was really
// on-CPU (a loaded machine preempts the spin); the share is printed at the
// end for the tests.
long long g_spin_cpu_ns = 0, g_spin_wall_ns = 0;

long long ClockNs(clockid_t id) {
  timespec t;
  clock_gettime(id, &t);
  return t.tv_sec * 1000000000LL + t.tv_nsec;
}

// The slow input pipeline: the host waits for the next batch before it can
// launch anything (a data-loader queue, storage). What the waits really took
// is printed at the end for the tests.
// Each wait's start, end and on-CPU time, kept in memory until the loop ends
// (--log-waits).
struct Wait {
  long long start_ns, end_ns, cpu_ns;
};
std::vector<Wait> g_waits;
void WaitForBatch(long us) {
  const long long c0 = ClockNs(CLOCK_THREAD_CPUTIME_ID), w0 = ClockNs(CLOCK_MONOTONIC);
  SleepUs(us);
  const long long w1 = ClockNs(CLOCK_MONOTONIC);
  g_waits.push_back({w0, w1, ClockNs(CLOCK_THREAD_CPUTIME_ID) - c0});
}

// What the waits really took, in all.
long long WaitWallNs() {
  long long ns = 0;
  for (const Wait& w : g_waits) ns += w.end_ns - w.start_ns;
  return ns;
}

void WriteWaits(const char* path) {
  FILE* f = std::fopen(path, "w");
  if (f == nullptr) {
    std::fprintf(stderr, "train_loop: cannot write %s\n", path);
    std::exit(1);
  }
  for (const Wait& w : g_waits) {
    std::fprintf(f, "{\"start_ns\": %lld, \"end_ns\": %lld, \"cpu_ns\": %lld}\n", w.start_ns, w.end_ns, w.cpu_ns);
  }
  std::fclose(f);
}

__attribute__((noinline)) void PreprocessBatch(long us) {
  const long long c0 = ClockNs(CLOCK_THREAD_CPUTIME_ID), w0 = ClockNs(CLOCK_MONOTONIC);
  SpinUs(us);
  g_spin_cpu_ns += ClockNs(CLOCK_THREAD_CPUTIME_ID) - c0;
  g_spin_wall_ns += ClockNs(CLOCK_MONOTONIC) - w0;
}

void Launch(CUfunction f, CUstream s) {
  Dispatch();
  Check(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, s, nullptr, nullptr), "cuLaunchKernel");
}

Options Parse(int argc, char** argv) {
  Options o;
  example::Args a("train_loop", argc, argv);
  while (a.Next()) {
    if (example::TakeLoopOption(a, &o)) continue;
    if (a.Is("--dispatch-us")) o.dispatch_us = a.Long();
    else if (a.Is("--cpu-us")) o.cpu_us = a.Long();
    else if (a.Is("--graph")) o.graph = true;
    else if (a.Is("--dump-at")) o.dump_at = a.Int();
    else if (a.Is("--slow-from")) o.slow_from = a.Int();
    else if (a.Is("--slow-input-us")) o.slow_input_us = a.Long();
    else if (a.Is("--step-time")) o.step_time = true;
    else if (a.Is("--name-period")) o.name_period = a.Int();
    else if (a.Is("--log-waits")) o.log_waits = a.Value();
    else a.Unknown();
  }
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  Options o = Parse(argc, argv);
  g_dispatch_us = o.dispatch_us;
  Check(cuInit(0), "cuInit");
  CUdevice dev;
  Check(cuDeviceGet(&dev, 0), "cuDeviceGet");
  CUcontext ctx;
  Check(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
  Check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
  CUmodule mod;
  Check(cuModuleLoadData(&mod, kPtx), "cuModuleLoadData");
  auto fn = [&](const char* name) {
    CUfunction f;
    Check(cuModuleGetFunction(&f, mod, name), name);
    return f;
  };
  CUfunction load_batch = fn("load_batch"), gemm_fwd = fn("gemm_fwd"), relu = fn("relu"),
             gemm_bwd = fn("gemm_bwd"), sgd_update = fn("sgd_update"),
             loss_reduce = fn("loss_reduce"), tiny = fn("tiny_elementwise");
  CUstream stream;
  Check(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  void* host_batch;
  Check(cuMemAllocHost(&host_batch, o.batch_bytes), "cuMemAllocHost");
  std::memset(host_batch, 1, o.batch_bytes);
  CUdeviceptr batch, loss;
  Check(cuMemAlloc(&batch, o.batch_bytes), "cuMemAlloc");
  Check(cuMemAlloc(&loss, sizeof(float)), "cuMemAlloc");

  // The step's kernels, after the batch's copy.
  auto step_kernels = [&] {
    Launch(load_batch, stream);
    if (o.tiny) {
      for (int k = 0; k < o.tiny; ++k) Launch(tiny, stream);
    } else {
      Launch(gemm_fwd, stream);
      Launch(relu, stream);
      Launch(gemm_bwd, stream);
      Launch(sgd_update, stream);
    }
    Launch(loss_reduce, stream);
  };
  CUgraphExec graph = nullptr;
  if (o.graph) {
    // Captured once, outside every step: the capture itself runs nothing.
    const long dispatch_us = g_dispatch_us;
    g_dispatch_us = 0;
    Check(cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL), "cuStreamBeginCapture");
    step_kernels();
    CUgraph g;
    Check(cuStreamEndCapture(stream, &g), "cuStreamEndCapture");
    Check(cuGraphInstantiate(&graph, g, 0), "cuGraphInstantiate");
    Check(cuGraphDestroy(g), "cuGraphDestroy");
    g_dispatch_us = dispatch_us;
  }

  float last_loss = 0;
  g_waits.reserve(size_t(o.steps));
  const int timed_from = o.steps / 10;
  long long timed_start = 0;
  for (int step = 0; step < o.steps; ++step) {
    if (step == timed_from) timed_start = ClockNs(CLOCK_MONOTONIC);
    const int name = o.name_period > 0 ? step % o.name_period : step;
    if (o.nvtx) nvtxRangePushA(("step " + std::to_string(name)).c_str());
    const long input_us = o.slow_from >= 0 && step >= o.slow_from ? o.slow_input_us : o.input_us;
    if (input_us) WaitForBatch(input_us);
    if (o.cpu_us) PreprocessBatch(o.cpu_us);
    Check(cuMemcpyHtoDAsync(batch, host_batch, o.batch_bytes, stream), "cuMemcpyHtoDAsync");
    if (graph != nullptr) {
      Dispatch();  // the replay's own dispatch: one per step
      Check(cuGraphLaunch(graph, stream), "cuGraphLaunch");
    } else {
      step_kernels();
    }
    if (o.readback) last_loss = ReadLoss(loss, stream);
    if (o.sync_log) LogProgress(step, stream);
    if (o.nvtx) nvtxRangePop();
    if (step == o.dump_at) {
      using DumpFn = int (*)();
      auto dump = reinterpret_cast<DumpFn>(dlsym(RTLD_DEFAULT, "stallscope_dump"));
      std::printf("dump after step %d: %s\n", step, dump == nullptr ? "no stallscope" : dump() == 0 ? "written" : "refused");
    }
  }
  const long long timed_end = ClockNs(CLOCK_MONOTONIC);
  // Drain the device once at the end, outside every step.
  Check(cuCtxSynchronize(), "cuCtxSynchronize");
  if (o.step_time && o.steps > timed_from) {
    std::printf("step_time_ns %lld\n", (timed_end - timed_start) / (o.steps - timed_from));
    if (FILE* f = std::fopen("/proc/self/status", "r")) {
      char line[256];
      while (std::fgets(line, sizeof line, f) != nullptr) {
        if (std::strncmp(line, "VmHWM:", 6) == 0) std::printf("peak_rss_kb %ld\n", std::strtol(line + 6, nullptr, 10));
      }
      std::fclose(f);
    }
  }
  std::printf("train_loop: %d steps, last loss %g\n", o.steps, double(last_loss));
  if (o.log_waits != nullptr) WriteWaits(o.log_waits);
  if (g_spin_wall_ns > 0) {
    std::printf("spin_on_cpu_share %.4f\n", double(g_spin_cpu_ns) / double(g_spin_wall_ns));
  }
  if (WaitWallNs() > 0 || g_spin_wall_ns > 0) {
    std::printf("scaled_sleep_ns %lld scaled_spin_ns %lld\n", WaitWallNs(), g_spin_wall_ns);
  }
  if (graph != nullptr) cuGraphExecDestroy(graph);
  cuMemFree(batch);
  cuMemFree(loss);
  cuMemFreeHost(host_batch);
  cuStreamDestroy(stream);
  cuDevicePrimaryCtxRelease(dev);
  return 0;
}
