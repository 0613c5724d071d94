// A CUDA C++ imitation of a training loop (the runtime-API twin of
// train_loop.cc), with the same switches for the stalls the seed article
// describes: a slow input pipeline, a loss read back every step (the
// `.item()` pattern), an explicit synchronize after logging, many tiny
// kernels, and a clean mode. Steps are NVTX ranges "step N" (--no-nvtx drops
// them). --two-streams reduces the loss on a second stream that waits for
// the training stream's event.
//
// Real __global__ kernels (one templated), <<<>>> launches on a created
// stream, the batch copied with cudaMemcpyAsync from pinned memory, events
// around the loop. Built with `nvcc --cudart shared`: on a real GPU NVIDIA's
// libcudart runs it; on the simulated stack (tests/simgpu, found through
// LD_LIBRARY_PATH) the simulated libcudart.so.13 does, and kernel durations
// come from SIMGPU_KERNEL_US (globs on the mangled names, e.g. "*gemm*=800").
//
//   cuda_train_loop [--steps N] [--input-us U] [--readback] [--sync-log]
//                   [--tiny K] [--no-nvtx] [--batch-bytes B] [--two-streams]
#include <cuda_runtime.h>
#include <nvtx3/nvToolsExt.h>
#include <time.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "example_args.h"

namespace {

constexpr int kThreads = 256;
constexpr int kWeights = 4096;  // a small "layer": weights reused across the batch

struct Options : example::LoopOptions {
  bool two_streams = false;
};

void Check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "cuda_train_loop: %s failed: %s (%s)\n", what, cudaGetErrorName(e),
                 cudaGetErrorString(e));
    std::exit(1);
  }
}

}  // namespace

// ---- kernels (elementwise stand-ins for the layers of a small model) ----
__global__ void load_batch(const unsigned char* raw, float* act, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) act[i] = raw[i] * (1.0f / 255.0f);
}

__global__ void gemm_fwd(const float* act, const float* w, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = act[i] * w[i % kWeights];
}

__global__ void relu(float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n && x[i] < 0.0f) x[i] = 0.0f;
}

__global__ void gemm_bwd(const float* out, const float* act, float* grad, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < kWeights) {
    float g = 0.0f;
    for (int j = i; j < n; j += kWeights) g += out[j] * act[j];
    grad[i] = g / float(n / kWeights + 1);
  }
}

template <typename T>
__global__ void sgd_update(T* w, const T* grad, T lr, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) w[i] -= lr * grad[i];
}

// One block: the mean of out[] into *loss.
__global__ void loss_reduce(const float* out, float* loss, int n) {
  __shared__ float partial[kThreads];
  float s = 0.0f;
  for (int i = threadIdx.x; i < n; i += blockDim.x) s += out[i];
  partial[threadIdx.x] = s;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) *loss = partial[0] / float(n);
}

__global__ void tiny_elementwise(float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = x[i] * 0.999f + 0.001f;
}

namespace {

void SleepUs(long us) {
  timespec ts{us / 1000000, (us % 1000000) * 1000};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

// The slow input pipeline: the host waits for the next batch before it can
// launch anything (a data-loader queue, storage).
void WaitForBatch(long us) { SleepUs(us); }

// The `.item()` pattern: a 4-byte cudaMemcpy of the loss into pageable
// memory. It runs on the legacy default stream, which waits for the training
// stream (a blocking stream): it returns only when every kernel queued
// before it has finished.
__attribute__((noinline)) float ReadLoss(const float* loss) {
  float value = 0;
  Check(cudaMemcpy(&value, loss, sizeof value, cudaMemcpyDeviceToHost), "cudaMemcpy");  // STALL:readback
  return value;
}

// Logging that synchronizes the stream so the printed numbers are "current".
__attribute__((noinline)) void LogProgress(int step, cudaStream_t stream) {
  std::printf("step %d done\n", step);
  Check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");  // STALL:sync-log
}

Options Parse(int argc, char** argv) {
  Options o;
  example::Args a("cuda_train_loop", argc, argv);
  while (a.Next()) {
    if (example::TakeLoopOption(a, &o)) continue;
    if (a.Is("--two-streams")) o.two_streams = true;
    else a.Unknown();
  }
  if (o.batch_bytes < size_t(kWeights)) o.batch_bytes = kWeights;
  return o;
}

unsigned Blocks(int n) { return unsigned((n + kThreads - 1) / kThreads); }

}  // namespace

int main(int argc, char** argv) {
  Options o = Parse(argc, argv);
  const int n = int(o.batch_bytes);  // one float activation per input byte
  Check(cudaSetDevice(0), "cudaSetDevice");

  cudaStream_t stream;
  Check(cudaStreamCreate(&stream), "cudaStreamCreate");  // blocking: syncs with legacy stream
  cudaEvent_t start, stop;
  Check(cudaEventCreate(&start), "cudaEventCreate");
  Check(cudaEventCreate(&stop), "cudaEventCreate");

  unsigned char* host_batch;
  Check(cudaMallocHost(&host_batch, o.batch_bytes), "cudaMallocHost");
  for (size_t i = 0; i < o.batch_bytes; ++i) host_batch[i] = static_cast<unsigned char>(i * 31);
  unsigned char* raw;
  float *act, *out, *w, *grad, *loss;
  Check(cudaMalloc(&raw, o.batch_bytes), "cudaMalloc");
  Check(cudaMalloc(&act, n * sizeof(float)), "cudaMalloc");
  Check(cudaMalloc(&out, n * sizeof(float)), "cudaMalloc");
  Check(cudaMalloc(&w, kWeights * sizeof(float)), "cudaMalloc");
  Check(cudaMalloc(&grad, kWeights * sizeof(float)), "cudaMalloc");
  Check(cudaMalloc(&loss, sizeof(float)), "cudaMalloc");
  Check(cudaMemsetAsync(w, 0, kWeights * sizeof(float), stream), "cudaMemsetAsync");
  Check(cudaMemsetAsync(loss, 0, sizeof(float), stream), "cudaMemsetAsync");

  // --two-streams: the loss is reduced on a second stream that waits for the
  // training stream's event (a metrics stream, as frameworks keep).
  cudaStream_t side = nullptr;
  cudaEvent_t ready = nullptr;
  if (o.two_streams) {
    Check(cudaStreamCreate(&side), "cudaStreamCreate");
    Check(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming), "cudaEventCreateWithFlags");
  }

  float last_loss = 0;
  Check(cudaEventRecord(start, stream), "cudaEventRecord");
  for (int step = 0; step < o.steps; ++step) {
    if (o.nvtx) nvtxRangePushA(("step " + std::to_string(step)).c_str());
    if (o.input_us) WaitForBatch(o.input_us);
    Check(cudaMemcpyAsync(raw, host_batch, o.batch_bytes, cudaMemcpyHostToDevice, stream),
          "cudaMemcpyAsync");
    load_batch<<<Blocks(n), kThreads, 0, stream>>>(raw, act, n);
    if (o.tiny) {
      const int tiny_n = 1024;
      for (int k = 0; k < o.tiny; ++k) tiny_elementwise<<<Blocks(tiny_n), kThreads, 0, stream>>>(act, tiny_n);
    } else {
      gemm_fwd<<<Blocks(n), kThreads, 0, stream>>>(act, w, out, n);
      relu<<<Blocks(n), kThreads, 0, stream>>>(out, n);
      gemm_bwd<<<Blocks(kWeights), kThreads, 0, stream>>>(out, act, grad, n);
      sgd_update<float><<<Blocks(kWeights), kThreads, 0, stream>>>(w, grad, 0.01f, kWeights);
    }
    if (o.two_streams) {
      Check(cudaEventRecord(ready, stream), "cudaEventRecord");
      Check(cudaStreamWaitEvent(side, ready, 0), "cudaStreamWaitEvent");
    }
    loss_reduce<<<1, kThreads, 0, o.two_streams ? side : stream>>>(o.tiny ? act : out, loss, n);
    Check(cudaGetLastError(), "kernel launch");
    if (o.readback) last_loss = ReadLoss(loss);
    if (o.sync_log) LogProgress(step, stream);
    if (o.nvtx) nvtxRangePop();
  }
  Check(cudaEventRecord(stop, stream), "cudaEventRecord");
  // Drain the device once at the end, outside every step.
  Check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  float ms = 0;
  Check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
  std::printf("cuda_train_loop: %d steps, last loss %g, %.3f ms on the stream\n", o.steps,
              double(last_loss), double(ms));
  cudaFree(raw);
  cudaFree(act);
  cudaFree(out);
  cudaFree(w);
  cudaFree(grad);
  cudaFree(loss);
  cudaFreeHost(host_batch);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaStreamDestroy(stream);
  if (side != nullptr) {
    cudaEventDestroy(ready);
    cudaStreamDestroy(side);
  }
  return 0;
}
