// A data-parallel training loop imitation (driver API + NCCL): every rank
// copies its batch in, runs forward and backward kernels, all-reduces its
// gradients in buckets, applies the update and reads the loss back (a
// synchronization, as `loss.item()` is). One rank can be made slow: a slow
// input pipeline (--slow-us: the host sleeps before the step) or extra GPU
// work (--slow-kernels: more kernels before its all-reduce). The other ranks'
// GPUs then wait inside the all-reduce, as on a real cluster.
//
//   ddp_train [--steps N] [--grad-bytes B] [--buckets K] [--slow-rank R]
//             [--slow-us U] [--slow-kernels K] [--no-nvtx] [--id-file PATH]
//
// Rank and size come from RANK / WORLD_SIZE (LOCAL_RANK picks the device), as
// torchrun and scripts/launch-ranks set them. Rank 0 creates the NCCL unique
// id and writes it to the id file (--id-file, else $DDP_ID_FILE); the others
// read it from there. Steps are NVTX ranges "step N". The kernels are empty
// PTX entry points; on the simulated GPU their durations come from
// SIMGPU_KERNEL_US, the all-reduce's from SIMGPU_NCCL_GBPS/_LATENCY_US.
#include <cuda.h>
#include <fcntl.h>
#include <nvtx3/nvToolsExt.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "example_args.h"
#include "nccl_abi.h"

extern "C" {
ncclResult_t ncclGetUniqueId(ncclUniqueId* id);
ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank);
ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                           ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                           cudaStream_t stream);
ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                           ncclDataType_t datatype, int root, ncclComm_t comm,
                           cudaStream_t stream);
ncclResult_t ncclCommDestroy(ncclComm_t comm);
const char* ncclGetErrorString(ncclResult_t result);
}

namespace {

const char kPtx[] = R"(
.version 8.0
.target sm_75
.address_size 64
.visible .entry load_batch() { ret; }
.visible .entry gemm_fwd() { ret; }
.visible .entry relu() { ret; }
.visible .entry gemm_bwd() { ret; }
.visible .entry aux_work() { ret; }
.visible .entry sgd_update() { ret; }
.visible .entry loss_reduce() { ret; }
)";

struct Options {
  int steps = 20;
  size_t grad_bytes = 4 << 20;
  int buckets = 2;
  int slow_rank = -1;
  long slow_us = 0;
  int slow_kernels = 0;
  bool nvtx = true;
  std::string id_file;
};

int g_rank = 0;

void Check(CUresult r, const char* what) {
  if (r != CUDA_SUCCESS) {
    const char* name = nullptr;
    cuGetErrorName(r, &name);
    std::fprintf(stderr, "ddp_train[%d]: %s failed: %s\n", g_rank, what, name ? name : "?");
    std::exit(1);
  }
}

void CheckNccl(ncclResult_t r, const char* what) {
  if (r != ncclSuccess) {
    std::fprintf(stderr, "ddp_train[%d]: %s failed: %s\n", g_rank, what, ncclGetErrorString(r));
    std::exit(1);
  }
}

void SleepUs(long us) {
  timespec ts{us / 1000000, (us % 1000000) * 1000};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

int EnvInt(const char* name, int def) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : def;
}

// Rank 0 publishes the id (write to a temporary name, then rename, so a
// reader never sees half of it); the others wait for the file.
ncclUniqueId ShareUniqueId(const std::string& path, int rank) {
  ncclUniqueId id;
  if (rank == 0) {
    CheckNccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
    std::string tmp = path + ".tmp";
    int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0 || write(fd, &id, sizeof id) != ssize_t(sizeof id) || close(fd) != 0 ||
        rename(tmp.c_str(), path.c_str()) != 0) {
      std::fprintf(stderr, "ddp_train[0]: cannot write %s\n", path.c_str());
      std::exit(1);
    }
    return id;
  }
  for (int i = 0; i < 60000; ++i) {  // up to a minute
    int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
      ssize_t n = read(fd, &id, sizeof id);
      close(fd);
      if (n == ssize_t(sizeof id)) return id;
    }
    SleepUs(1000);
  }
  std::fprintf(stderr, "ddp_train[%d]: no unique id in %s\n", rank, path.c_str());
  std::exit(1);
}

Options Parse(int argc, char** argv) {
  Options o;
  if (const char* f = std::getenv("DDP_ID_FILE")) o.id_file = f;
  example::Args a("ddp_train", argc, argv);
  while (a.Next()) {
    if (a.Is("--steps")) o.steps = a.Int();
    else if (a.Is("--grad-bytes")) o.grad_bytes = size_t(a.Long());
    else if (a.Is("--buckets")) o.buckets = a.Int();
    else if (a.Is("--slow-rank")) o.slow_rank = a.Int();
    else if (a.Is("--slow-us")) o.slow_us = a.Long();
    else if (a.Is("--slow-kernels")) o.slow_kernels = a.Int();
    else if (a.Is("--no-nvtx")) o.nvtx = false;
    else if (a.Is("--id-file")) o.id_file = a.Value();
    else a.Unknown();
  }
  if (o.buckets < 1) o.buckets = 1;
  return o;
}

void Launch(CUfunction f, CUstream s) {
  Check(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, s, nullptr, nullptr), "cuLaunchKernel");
}

// The slow input pipeline of one rank: its host waits for the batch.
__attribute__((noinline)) void WaitForBatch(long us) { SleepUs(us); }

// The loss read back into pageable memory: returns when the step's work,
// all-reduces included, has finished.
__attribute__((noinline)) float ReadLoss(CUdeviceptr loss, CUstream stream) {
  float value = 0;
  Check(cuMemcpyDtoHAsync(&value, loss, sizeof value, stream), "cuMemcpyDtoHAsync");
  return value;
}

}  // namespace

int main(int argc, char** argv) {
  Options o = Parse(argc, argv);
  const int rank = EnvInt("RANK", 0), world = EnvInt("WORLD_SIZE", 1);
  const int local_rank = EnvInt("LOCAL_RANK", rank);
  g_rank = rank;
  if (world > 1 && o.id_file.empty()) {
    std::fprintf(stderr, "ddp_train: WORLD_SIZE=%d needs --id-file or DDP_ID_FILE\n", world);
    return 2;
  }
  Check(cuInit(0), "cuInit");
  int devices = 0;
  Check(cuDeviceGetCount(&devices), "cuDeviceGetCount");
  CUdevice dev;
  Check(cuDeviceGet(&dev, devices > 0 ? local_rank % devices : 0), "cuDeviceGet");
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
             gemm_bwd = fn("gemm_bwd"), aux_work = fn("aux_work"),
             sgd_update = fn("sgd_update"), loss_reduce = fn("loss_reduce");
  CUstream stream;
  Check(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");

  ncclUniqueId id{};
  if (world > 1) {
    id = ShareUniqueId(o.id_file, rank);
  } else {
    CheckNccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
  }
  ncclComm_t comm;
  CheckNccl(ncclCommInitRank(&comm, world, id, rank), "ncclCommInitRank");

  const size_t batch_bytes = 1 << 20;
  void* host_batch;
  Check(cuMemAllocHost(&host_batch, batch_bytes), "cuMemAllocHost");
  std::memset(host_batch, 1, batch_bytes);
  CUdeviceptr batch, grads, loss;
  Check(cuMemAlloc(&batch, batch_bytes), "cuMemAlloc");
  Check(cuMemAlloc(&grads, o.grad_bytes), "cuMemAlloc");
  Check(cuMemAlloc(&loss, sizeof(float)), "cuMemAlloc");
  const size_t bucket_floats = o.grad_bytes / sizeof(float) / size_t(o.buckets);

  // The initial weights come from rank 0, as DDP's constructor broadcasts them.
  CheckNccl(ncclBroadcast(reinterpret_cast<void*>(grads), reinterpret_cast<void*>(grads),
                          o.grad_bytes / sizeof(float), ncclFloat32, 0, comm,
                          reinterpret_cast<cudaStream_t>(stream)),
            "ncclBroadcast");
  Check(cuStreamSynchronize(stream), "cuStreamSynchronize");

  const bool slow = rank == o.slow_rank;
  float last_loss = 0;
  for (int step = 0; step < o.steps; ++step) {
    if (o.nvtx) nvtxRangePushA(("step " + std::to_string(step)).c_str());
    if (slow && o.slow_us) WaitForBatch(o.slow_us);
    Check(cuMemcpyHtoDAsync(batch, host_batch, batch_bytes, stream), "cuMemcpyHtoDAsync");
    Launch(load_batch, stream);
    Launch(gemm_fwd, stream);
    Launch(relu, stream);
    if (slow) {
      for (int k = 0; k < o.slow_kernels; ++k) Launch(aux_work, stream);
    }
    // Backward, bucket by bucket; each bucket's gradients are all-reduced
    // once computed (on the same stream: the order is the data dependency).
    for (int b = 0; b < o.buckets; ++b) {
      Launch(gemm_bwd, stream);
      void* bucket = reinterpret_cast<void*>(grads + b * bucket_floats * sizeof(float));
      CheckNccl(ncclAllReduce(bucket, bucket, bucket_floats, ncclFloat32, ncclSum, comm,
                              reinterpret_cast<cudaStream_t>(stream)),
                "ncclAllReduce");
    }
    Launch(sgd_update, stream);
    Launch(loss_reduce, stream);
    last_loss = ReadLoss(loss, stream);
    if (o.nvtx) nvtxRangePop();
  }
  Check(cuCtxSynchronize(), "cuCtxSynchronize");
  std::printf("ddp_train: rank %d of %d, %d steps, last loss %g\n", rank, world, o.steps,
              double(last_loss));
  CheckNccl(ncclCommDestroy(comm), "ncclCommDestroy");
  cuMemFree(batch);
  cuMemFree(grads);
  cuMemFree(loss);
  cuMemFreeHost(host_batch);
  cuStreamDestroy(stream);
  cuDevicePrimaryCtxRelease(dev);
  if (rank == 0 && world > 1) unlink(o.id_file.c_str());
  return 0;
}
