// One small driver-API job per cause of GPU idle that the seed article names,
// chosen with --scenario. tests/scenarios/scenarios.py runs each one under
// `stallscope run --sim`, with and without NVTX step ranges, and checks the
// report against the simulator's ground truth (SIMGPU_TRACE).
//
//   scenario --scenario NAME [--steps N] [--no-nvtx] [--seed S]
//            [--no-sync] [--wait-scale X] [--busy-scale X] [--graph]
//            [--host-func-scale X]
//
// The last five make what `stallscope whatif` predicts real
// (tests/whatif): --no-sync leaves out the scenario's synchronizing calls
// (the `// STALL:` lines), --wait-scale and --busy-scale multiply every
// sleep and every spin of 50 us or more (the host time whatif's
// --scale-host-wait and --scale-host-busy scale; shorter ones are launch
// dispatch, which they keep), --host-func-scale multiplies host_func's
// host function's 3 ms (whatif's --scale-host-func), and --graph captures the step's kernels of
// the launch-bound scenarios (small_batches, light_model) once, before the
// steps, and launches that CUDA graph every step after one dispatch
// (whatif's --launch-cost).
//
// Kernels are empty PTX entry points; on the simulated GPU their durations come
// from SIMGPU_KERNEL_US (scenarios.py sets the globs). Every step begins with
// the launch of one "first" kernel (batch_load, light_load or, on the second
// device of cross_stream, producer_long), so the ground truth shows where each
// true step starts. The lines that synchronize are marked `// STALL:<name>`;
// scenarios.py looks the hotspots up at those lines.
#include <cuda.h>
#include <nvtx3/nvToolsExt.h>
#include <sched.h>
#include <time.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

const char kPtx[] = R"(
.version 8.0
.target sm_75
.address_size 64
.visible .entry batch_load() { ret; }
.visible .entry gemm_fwd() { ret; }
.visible .entry gemm_bwd() { ret; }
.visible .entry loss_reduce() { ret; }
.visible .entry tiny_op() { ret; }
.visible .entry light_load() { ret; }
.visible .entry light_fwd() { ret; }
.visible .entry light_bwd() { ret; }
.visible .entry light_update() { ret; }
.visible .entry resume_a() { ret; }
.visible .entry resume_b() { ret; }
.visible .entry producer_long() { ret; }
.visible .entry consume_a() { ret; }
.visible .entry consume_b() { ret; }
)";

void Check(CUresult r, const char* what) {
  if (r != CUDA_SUCCESS) {
    const char* name = nullptr;
    cuGetErrorName(r, &name);
    std::fprintf(stderr, "scenario: %s failed: %s\n", what, name ? name : "?");
    std::exit(1);
  }
}

// --wait-scale and --busy-scale: host time of at least kScaledUs, times these.
constexpr long kScaledUs = 50;
double g_wait_scale = 1.0;
double g_busy_scale = 1.0;
// What those sleeps and spins took (printed at the end: the whatif tests
// compare what a changed run's host time really was with what was asked).
long long g_scaled_sleep_ns = 0, g_scaled_spin_ns = 0;

long long NowNs() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1000000000LL + t.tv_nsec;
}

// Off-CPU host time: a data loader queue, storage, a log write.
void SleepUs(long us) {
  const bool scaled = us >= kScaledUs;
  if (scaled) us = std::lround(double(us) * g_wait_scale);
  if (us <= 0) return;
  const long long t0 = NowNs();
  timespec ts{us / 1000000, (us % 1000000) * 1000};
  while (nanosleep(&ts, &ts) != 0) {
  }
  if (scaled) g_scaled_sleep_ns += NowNs() - t0;
}

// On-CPU host time on the launching thread: preprocessing, a framework's
// dispatcher.
void SpinUs(long us, bool yield = false) {
  const bool scaled = us >= kScaledUs;
  if (scaled) us = std::lround(double(us) * g_busy_scale);
  const long long start = NowNs();
  timespec t0, t;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  if (yield) sched_yield();  // once: lets a waiting thread (the simulated device) run
  do {
    clock_gettime(CLOCK_MONOTONIC, &t);
  } while ((t.tv_sec - t0.tv_sec) * 1000000L + (t.tv_nsec - t0.tv_nsec) / 1000 < us);
  if (scaled) g_scaled_spin_ns += NowNs() - start;
}

// --host-func-scale: host_func's host function takes 3 ms times this; what
// its calls really took (printed at the end, for the same reason).
double g_host_func_scale = 1.0;
std::atomic<long long> g_host_func_ns{0};

void HostFunction(void*) {
  const long long t0 = NowNs();
  const long us = std::lround(3000.0 * g_host_func_scale);
  timespec ts{us / 1000000, (us % 1000000) * 1000};
  while (us > 0 && nanosleep(&ts, &ts) != 0) {
  }
  g_host_func_ns += NowNs() - t0;
}

// Deterministic jitter (a 64-bit LCG; the same seed gives the same run).
uint64_t g_rng = 1;
double Uniform() {
  g_rng = g_rng * 6364136223846793005ULL + 1442695040888963407ULL;
  return double(g_rng >> 11) / double(1ULL << 53);
}

const char* const kKernels[] = {"batch_load", "gemm_fwd",  "gemm_bwd",      "loss_reduce",
                                "tiny_op",    "light_load", "light_fwd",    "light_bwd",
                                "light_update", "resume_a", "resume_b",     "producer_long",
                                "consume_a",  "consume_b"};
constexpr int kNumKernels = sizeof kKernels / sizeof kKernels[0];

// A module and a stream; every function is looked up once, before the loop.
struct Job {
  CUmodule mod{};
  CUstream stream{};
  CUfunction fns[kNumKernels]{};
  void Load() {
    Check(cuModuleLoadData(&mod, kPtx), "cuModuleLoadData");
    for (int i = 0; i < kNumKernels; ++i) Check(cuModuleGetFunction(&fns[i], mod, kKernels[i]), kKernels[i]);
  }
  CUfunction f(const char* name) const {
    for (int i = 0; i < kNumKernels; ++i)
      if (std::strcmp(kKernels[i], name) == 0) return fns[i];
    std::fprintf(stderr, "scenario: no kernel %s\n", name);
    std::exit(2);
  }
};

void Launch(CUfunction f, CUstream s) {
  Check(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, s, nullptr, nullptr), "cuLaunchKernel");
}

// ---- the synchronizing call sites (noinline: each keeps its own frame) ----

// The `.item()` pattern: 4 bytes into pageable memory, on the work stream.
__attribute__((noinline)) float ReadScalar(CUdeviceptr p, CUstream s) {
  float v = 0;
  Check(cuMemcpyDtoHAsync(&v, p, sizeof v, s), "cuMemcpyDtoHAsync");  // STALL:scalar_read
  return v;
}

// Logging that synchronizes first so the printed numbers are current.
__attribute__((noinline)) void SyncAndLog(int step, CUstream s) {
  Check(cuStreamSynchronize(s), "cuStreamSynchronize");  // STALL:sync_log
  std::printf("step %d done\n", step);
}

// Printing a metric: a small synchronous read-back each time.
__attribute__((noinline)) double PrintMetric(const char* name, CUdeviceptr p) {
  double v = 0;
  Check(cuMemcpyDtoH(&v, p, sizeof v), "cuMemcpyDtoH");  // STALL:print_burst
  std::printf("%s %g\n", name, v);
  return v;
}

// A temporary freed every step: cuMemFree waits for the whole device.
__attribute__((noinline)) void FreeTemp(CUdeviceptr p) {
  Check(cuMemFree(p), "cuMemFree");  // STALL:free_sync
}

// A synchronous host-to-device copy from malloc'd (pageable) memory: it waits
// for the work queued before it.
__attribute__((noinline)) void UploadPageable(CUdeviceptr dst, const void* src, size_t n) {
  Check(cuMemcpyHtoD(dst, src, n), "cuMemcpyHtoD");  // STALL:pageable_htod
}

// ---- scenarios ----

struct Options {
  std::string scenario;
  int steps = 12;
  bool nvtx = true;
  uint64_t seed = 7;
  bool sync = true;  // --no-sync: the synchronizing calls left out
  bool graph = false;  // --graph: small_batches' and light_model's kernels as one CUDA graph
};

// The usual step: ~2 ms of device work on the work stream.
void TrainStep(const Job& j) {
  Launch(j.f("batch_load"), j.stream);
  Launch(j.f("gemm_fwd"), j.stream);
  Launch(j.f("gemm_bwd"), j.stream);
  Launch(j.f("loss_reduce"), j.stream);
}

// Host work after a synchronization (shorter than the device work the host
// waited for: without the synchronization it would have overlapped it).
constexpr long kAfterSyncUs = 600;

int Run(const Options& o) {
  g_rng = o.seed;
  Check(cuInit(0), "cuInit");
  CUdevice dev;
  Check(cuDeviceGet(&dev, 0), "cuDeviceGet");
  CUcontext ctx;
  Check(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
  Check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
  Job j;
  j.Load();
  // A blocking stream: legacy-stream copies (cuMemcpyDtoH/HtoD) wait for it.
  Check(cuStreamCreate(&j.stream, CU_STREAM_DEFAULT), "cuStreamCreate");
  CUdeviceptr buf;
  Check(cuMemAlloc(&buf, 1 << 16), "cuMemAlloc");
  void* pageable = std::malloc(1 << 16);
  std::memset(pageable, 1, 1 << 16);

  // cross_stream: a producer on a second device (its own context and stream);
  // the work stream waits on an event recorded after the producer's kernel.
  CUcontext ctx1{};
  Job j1;
  CUevent produced{};
  CUdevice dev1{};
  const bool cross = o.scenario == "cross_stream";
  if (cross) {
    Check(cuDeviceGet(&dev1, 1), "cuDeviceGet(1) (set SIMGPU_DEVICES=2)");
    Check(cuDevicePrimaryCtxRetain(&ctx1, dev1), "cuDevicePrimaryCtxRetain(1)");
    Check(cuCtxSetCurrent(ctx1), "cuCtxSetCurrent(1)");
    j1.Load();
    Check(cuStreamCreate(&j1.stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate(1)");
    Check(cuEventCreate(&produced, CU_EVENT_DISABLE_TIMING), "cuEventCreate");
    Check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent(0)");
  }

  // Warm-up outside the steps: the first blocking call starts the recorder's
  // writer thread; let that settle before the first step.
  Check(cuCtxSynchronize(), "cuCtxSynchronize");
  SleepUs(5000);

  const std::string& s = o.scenario;
  // free_sync's temporaries are allocated before the steps: the stall is the
  // free's wait for the device, and a fresh allocation's own host time (the
  // simulator backs device memory at once; page faults vary with the
  // machine's memory state) would be host time the scenario does not model.
  std::vector<CUdeviceptr> temps;
  if (s == "free_sync") {
    temps.resize(static_cast<size_t>(o.steps));
    for (CUdeviceptr& p : temps) Check(cuMemAlloc(&p, 1 << 20), "cuMemAlloc");
  }
  // --graph: the launch-bound scenarios' kernels, captured once outside
  // every step (the capture runs nothing).
  CUgraphExec graph = nullptr;
  if (o.graph && (s == "small_batches" || s == "light_model")) {
    Check(cuStreamBeginCapture(j.stream, CU_STREAM_CAPTURE_MODE_GLOBAL), "cuStreamBeginCapture");
    if (s == "small_batches") {
      Launch(j.f("batch_load"), j.stream);
      for (int k = 0; k < 80; ++k) Launch(j.f("tiny_op"), j.stream);
    } else {
      for (const char* k : {"light_load", "light_fwd", "light_bwd", "light_update"}) Launch(j.f(k), j.stream);
    }
    CUgraph g;
    Check(cuStreamEndCapture(j.stream, &g), "cuStreamEndCapture");
    Check(cuGraphInstantiate(&graph, g, 0), "cuGraphInstantiate");
    Check(cuGraphDestroy(g), "cuGraphDestroy");
  }
  double sink = 0;
  for (int step = 0; step < o.steps; ++step) {
    if (o.nvtx) nvtxRangePushA(("step " + std::to_string(step)).c_str());
    if (s == "input") {
      SleepUs(4000);  // waiting for the next batch from the loader
      TrainStep(j);
    } else if (s == "jitter") {
      // Storage latency: mostly short reads, now and then a slow one.
      const double u = Uniform();
      SleepUs(u < 0.35 ? 3000 + long(3000 * Uniform()) : 200 + long(600 * Uniform()));
      TrainStep(j);
    } else if (s == "busy_host") {
      // CPU-side preprocessing on the launching thread (a loaded machine
      // preempts it: the ground truth's run-queue delays say how much).
      SpinUs(4000);
      // Little device work: the spinning thread and the simulated device share
      // two cores, and a starved device thread stretches its ops.
      Launch(j.f("batch_load"), j.stream);
      Launch(j.f("loss_reduce"), j.stream);
    } else if (graph != nullptr) {
      // The captured step: one dispatch, one launch.
      SpinUs(s == "small_batches" ? 25 : 20, true);
      Check(cuGraphLaunch(graph, j.stream), "cuGraphLaunch");
    } else if (s == "small_batches") {
      // Many tiny kernels, each behind a framework dispatch on the CPU.
      Launch(j.f("batch_load"), j.stream);
      for (int k = 0; k < 80; ++k) {
        SpinUs(25, true);  // yields: the simulated device needs a core too
        Launch(j.f("tiny_op"), j.stream);
      }
    } else if (s == "light_model") {
      // A model too small for the device: a few short kernels, and the
      // host-side cost of issuing each one is larger than the kernel.
      for (const char* k : {"light_load", "light_fwd", "light_bwd", "light_update"}) {
        SpinUs(20, true);
        Launch(j.f(k), j.stream);
      }
    } else if (s == "scalar_read") {
      TrainStep(j);
      if (o.sync) sink += ReadScalar(buf, j.stream);
      SleepUs(kAfterSyncUs);
    } else if (s == "sync_log") {
      TrainStep(j);
      if (o.sync) SyncAndLog(step, j.stream);
      SleepUs(kAfterSyncUs);
    } else if (s == "print_burst") {
      // Three prints per step, each a small synchronous read.
      Launch(j.f("batch_load"), j.stream);
      Launch(j.f("gemm_fwd"), j.stream);
      if (o.sync) sink += PrintMetric("loss", buf);
      SleepUs(150);
      Launch(j.f("resume_a"), j.stream);
      if (o.sync) sink += PrintMetric("grad_norm", buf + 8);
      SleepUs(150);
      Launch(j.f("resume_b"), j.stream);
      if (o.sync) sink += PrintMetric("lr", buf + 16);
      SleepUs(150);
    } else if (s == "free_sync") {
      TrainStep(j);
      if (o.sync) FreeTemp(temps[static_cast<size_t>(step)]);
      SleepUs(kAfterSyncUs);
    } else if (s == "pageable_htod") {
      TrainStep(j);
      if (o.sync) UploadPageable(buf, pageable, 1 << 16);
      SleepUs(kAfterSyncUs);
    } else if (s == "cross_stream") {
      // Device 1 produces, device 0 consumes; the host never blocks.
      Check(cuCtxSetCurrent(ctx1), "cuCtxSetCurrent(1)");
      Launch(j1.f("producer_long"), j1.stream);
      Check(cuEventRecord(produced, j1.stream), "cuEventRecord");
      Check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent(0)");
      Launch(j.f("batch_load"), j.stream);
      Check(cuStreamWaitEvent(j.stream, produced, 0), "cuStreamWaitEvent");
      Launch(j.f("consume_a"), j.stream);
      Launch(j.f("consume_b"), j.stream);
    } else if (s == "host_func") {
      // A host function on the work stream (a callback that logs, or frees a
      // host buffer) takes 3 ms; the kernels queued after it wait for it
      // while the host goes on: a device-side dependency, not a host stall.
      Launch(j.f("batch_load"), j.stream);
      Check(cuLaunchHostFunc(j.stream, HostFunction, nullptr), "cuLaunchHostFunc");
      Launch(j.f("consume_a"), j.stream);
      Launch(j.f("consume_b"), j.stream);
    } else if (s == "clean") {
      TrainStep(j);
    } else {
      std::fprintf(stderr, "scenario: unknown scenario '%s'\n", s.c_str());
      return 2;
    }
    if (o.nvtx) nvtxRangePop();
  }
  // Drain once at the end, outside every step.
  Check(cuCtxSynchronize(), "cuCtxSynchronize");
  if (cross) {
    Check(cuCtxSetCurrent(ctx1), "cuCtxSetCurrent(1)");
    Check(cuCtxSynchronize(), "cuCtxSynchronize(1)");
    Check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent(0)");
  }
  std::printf("scenario %s: %d steps (%g)\n", s.c_str(), o.steps, sink);
  std::printf("scaled_sleep_ns %lld scaled_spin_ns %lld\n", g_scaled_sleep_ns, g_scaled_spin_ns);
  if (s == "host_func") std::printf("host_func_ns %lld\n", g_host_func_ns.load());
  if (graph != nullptr) cuGraphExecDestroy(graph);
  std::free(pageable);
  cuMemFree(buf);
  cuStreamDestroy(j.stream);
  cuDevicePrimaryCtxRelease(dev);
  if (cross) cuDevicePrimaryCtxRelease(dev1);
  return 0;
}

Options Parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "scenario: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--scenario") o.scenario = value();
    else if (a == "--steps") o.steps = std::atoi(value());
    else if (a == "--no-nvtx") o.nvtx = false;
    else if (a == "--seed") o.seed = std::strtoull(value(), nullptr, 10);
    else if (a == "--no-sync") o.sync = false;
    else if (a == "--wait-scale") g_wait_scale = std::atof(value());
    else if (a == "--busy-scale") g_busy_scale = std::atof(value());
    else if (a == "--graph") o.graph = true;
    else if (a == "--host-func-scale") g_host_func_scale = std::atof(value());
    else {
      std::fprintf(stderr, "scenario: unknown option %s\n", a.c_str());
      std::exit(2);
    }
  }
  if (o.scenario.empty()) {
    std::fprintf(stderr, "usage: scenario --scenario NAME [--steps N] [--no-nvtx] [--seed S] [--no-sync] "
                         "[--wait-scale X] [--busy-scale X] [--graph] [--host-func-scale X]\n");
    std::exit(2);
  }
  return o;
}

}  // namespace

int main(int argc, char** argv) { return Run(Parse(argc, argv)); }
