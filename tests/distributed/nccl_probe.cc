// One rank of a small NCCL job that calls every NCCL entry point stallscope
// hooks, for tests/distributed/nccl_test.py. Started by scripts/launch-ranks (RANK,
// WORLD_SIZE, DDP_ID_FILE). Rank 0 publishes two unique ids in the id file.
//
//   nccl_probe [--iters N] [--late-rank R] [--late-us U] [--dlsym]
//
// Sequence per rank, on one stream: communicator A (ncclCommInitRank) and B
// (pncclCommInitRankConfig); N all-reduces of 1 Mi floats on A, rank R
// sleeping U us before each; one broadcast, bcast, reduce, all-gather,
// reduce-scatter and all-to-all on A; a ring send/recv in a group on A; an
// all-reduce on B through the `pnccl` name; ncclCommSplit of A by rank parity
// and an all-reduce on it; ncclCommInitAll of 2 local communicators; then
// finalize, destroy and abort. --dlsym resolves every entry point with
// dlsym on dlopen("libnccl.so.2", RTLD_LOCAL) instead of the PLT.
#include <cuda.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "nccl_abi.h"

extern "C" {
ncclResult_t ncclGetUniqueId(ncclUniqueId*);
ncclResult_t ncclCommInitRank(ncclComm_t*, int, ncclUniqueId, int);
ncclResult_t pncclCommInitRankConfig(ncclComm_t*, int, ncclUniqueId, int, ncclConfig_t*);
ncclResult_t ncclCommInitAll(ncclComm_t*, int, const int*);
ncclResult_t ncclCommSplit(ncclComm_t, int, int, ncclComm_t*, ncclConfig_t*);
ncclResult_t ncclCommFinalize(ncclComm_t);
ncclResult_t ncclCommDestroy(ncclComm_t);
ncclResult_t ncclCommAbort(ncclComm_t);
ncclResult_t ncclCommCount(const ncclComm_t, int*);
ncclResult_t ncclCommUserRank(const ncclComm_t, int*);
ncclResult_t ncclAllReduce(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                           cudaStream_t);
ncclResult_t pncclAllReduce(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                            cudaStream_t);
ncclResult_t ncclBroadcast(const void*, void*, size_t, ncclDataType_t, int, ncclComm_t,
                           cudaStream_t);
ncclResult_t ncclBcast(void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
ncclResult_t ncclReduce(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, int, ncclComm_t,
                        cudaStream_t);
ncclResult_t ncclAllGather(const void*, void*, size_t, ncclDataType_t, ncclComm_t, cudaStream_t);
ncclResult_t ncclReduceScatter(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t,
                               ncclComm_t, cudaStream_t);
ncclResult_t ncclAlltoAll(const void*, void*, size_t, ncclDataType_t, ncclComm_t, cudaStream_t);
ncclResult_t ncclSend(const void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
ncclResult_t ncclRecv(void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
ncclResult_t ncclGroupStart();
ncclResult_t ncclGroupEnd();
}

namespace {

int g_rank = 0;

// The entry points, from the PLT or from dlsym.
struct Api {
#define NCCL_FN(name) decltype(&::name) name = &::name;
  NCCL_FN(ncclGetUniqueId)
  NCCL_FN(ncclCommInitRank)
  NCCL_FN(pncclCommInitRankConfig)
  NCCL_FN(ncclCommInitAll)
  NCCL_FN(ncclCommSplit)
  NCCL_FN(ncclCommFinalize)
  NCCL_FN(ncclCommDestroy)
  NCCL_FN(ncclCommAbort)
  NCCL_FN(ncclCommCount)
  NCCL_FN(ncclCommUserRank)
  NCCL_FN(ncclAllReduce)
  NCCL_FN(pncclAllReduce)
  NCCL_FN(ncclBroadcast)
  NCCL_FN(ncclBcast)
  NCCL_FN(ncclReduce)
  NCCL_FN(ncclAllGather)
  NCCL_FN(ncclReduceScatter)
  NCCL_FN(ncclAlltoAll)
  NCCL_FN(ncclSend)
  NCCL_FN(ncclRecv)
  NCCL_FN(ncclGroupStart)
  NCCL_FN(ncclGroupEnd)
#undef NCCL_FN
};

void Resolve(Api* api) {
  void* h = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    std::fprintf(stderr, "probe: dlopen libnccl.so.2: %s\n", dlerror());
    std::exit(1);
  }
#define NCCL_FN(name)                                                  \
  api->name = reinterpret_cast<decltype(api->name)>(dlsym(h, #name)); \
  if (api->name == nullptr) {                                          \
    std::fprintf(stderr, "probe: dlsym %s failed\n", #name);           \
    std::exit(1);                                                      \
  }
  NCCL_FN(ncclGetUniqueId)
  NCCL_FN(ncclCommInitRank)
  NCCL_FN(pncclCommInitRankConfig)
  NCCL_FN(ncclCommInitAll)
  NCCL_FN(ncclCommSplit)
  NCCL_FN(ncclCommFinalize)
  NCCL_FN(ncclCommDestroy)
  NCCL_FN(ncclCommAbort)
  NCCL_FN(ncclCommCount)
  NCCL_FN(ncclCommUserRank)
  NCCL_FN(ncclAllReduce)
  NCCL_FN(pncclAllReduce)
  NCCL_FN(ncclBroadcast)
  NCCL_FN(ncclBcast)
  NCCL_FN(ncclReduce)
  NCCL_FN(ncclAllGather)
  NCCL_FN(ncclReduceScatter)
  NCCL_FN(ncclAlltoAll)
  NCCL_FN(ncclSend)
  NCCL_FN(ncclRecv)
  NCCL_FN(ncclGroupStart)
  NCCL_FN(ncclGroupEnd)
#undef NCCL_FN
}

void Check(CUresult r, const char* what) {
  if (r != CUDA_SUCCESS) {
    std::fprintf(stderr, "probe[%d]: %s failed: %d\n", g_rank, what, int(r));
    std::exit(1);
  }
}
void CheckNccl(ncclResult_t r, const char* what) {
  if (r != ncclSuccess) {
    std::fprintf(stderr, "probe[%d]: %s failed: %d\n", g_rank, what, int(r));
    std::exit(1);
  }
}

void SleepUs(long us) {
  timespec ts{us / 1000000, (us % 1000000) * 1000};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

void ShareIds(const Api& api, const std::string& path, int rank, ncclUniqueId ids[2]) {
  if (rank == 0) {
    CheckNccl(api.ncclGetUniqueId(&ids[0]), "ncclGetUniqueId");
    CheckNccl(api.ncclGetUniqueId(&ids[1]), "ncclGetUniqueId");
    std::string tmp = path + ".tmp";
    int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0 || write(fd, ids, 2 * sizeof ids[0]) != ssize_t(2 * sizeof ids[0]) ||
        close(fd) != 0 || rename(tmp.c_str(), path.c_str()) != 0) {
      std::fprintf(stderr, "probe: cannot write %s\n", path.c_str());
      std::exit(1);
    }
    return;
  }
  for (int i = 0; i < 30000; ++i) {
    int fd = open(path.c_str(), O_RDONLY);
    if (fd >= 0) {
      ssize_t n = read(fd, ids, 2 * sizeof ids[0]);
      close(fd);
      if (n == ssize_t(2 * sizeof ids[0])) return;
    }
    SleepUs(1000);
  }
  std::fprintf(stderr, "probe[%d]: no ids in %s\n", rank, path.c_str());
  std::exit(1);
}

}  // namespace

// Collectives move their data (the simulator does for buffers up to
// SIMGPU_NCCL_DATA_BYTES): the results every rank must see.
void CheckData(const Api& api, ncclComm_t comm, int rank, int world, cudaStream_t s) {
  constexpr size_t kN = 64;
  CUdeviceptr send, recv;
  Check(cuMemAlloc(&send, kN * sizeof(int64_t) * size_t(world)), "cuMemAlloc");
  Check(cuMemAlloc(&recv, kN * sizeof(int64_t) * size_t(world)), "cuMemAlloc");
  auto* sp = reinterpret_cast<void*>(send);
  auto* rp = reinterpret_cast<void*>(recv);
  std::vector<int64_t> host(kN * size_t(world)), got(kN * size_t(world));
  auto fail = [&](const char* what, size_t i, double v, double want) {
    std::fprintf(stderr, "probe: rank %d: %s[%zu] = %g, expected %g\n", rank, what, i, v, want);
    std::exit(1);
  };
  auto put = [&](size_t count) {
    Check(cuMemcpyHtoD(send, host.data(), count * sizeof(int64_t)), "cuMemcpyHtoD");
  };
  auto get = [&](size_t count) {
    Check(cuCtxSynchronize(), "cuCtxSynchronize");
    Check(cuMemcpyDtoH(got.data(), recv, count * sizeof(int64_t)), "cuMemcpyDtoH");
  };
  // all-reduce (sum, int64): element i of rank r is r * 100 + i.
  for (size_t i = 0; i < kN; ++i) host[i] = rank * 100 + int64_t(i);
  put(kN);
  CheckNccl(api.ncclAllReduce(sp, rp, kN, ncclInt64, ncclSum, comm, s), "ncclAllReduce");
  get(kN);
  for (size_t i = 0; i < kN; ++i) {
    const int64_t want = 100 * world * (world - 1) / 2 + int64_t(world) * int64_t(i);
    if (got[i] != want) fail("all-reduce", i, double(got[i]), double(want));
  }
  // all-gather: rank r's block is its values.
  CheckNccl(api.ncclAllGather(sp, rp, kN, ncclInt64, comm, s), "ncclAllGather");
  get(kN * size_t(world));
  for (int r = 0; r < world; ++r) {
    for (size_t i = 0; i < kN; ++i) {
      if (got[size_t(r) * kN + i] != r * 100 + int64_t(i)) {
        fail("all-gather", size_t(r) * kN + i, double(got[size_t(r) * kN + i]), r * 100.0 + double(i));
      }
    }
  }
  // broadcast from the last rank.
  CheckNccl(api.ncclBroadcast(sp, rp, kN, ncclInt64, world - 1, comm, s), "ncclBroadcast");
  get(kN);
  for (size_t i = 0; i < kN; ++i) {
    if (got[i] != (world - 1) * 100 + int64_t(i)) fail("broadcast", i, double(got[i]), (world - 1) * 100.0 + double(i));
  }
  // all-reduce (max, float32).
  std::vector<float> f(kN), fg(kN);
  for (size_t i = 0; i < kN; ++i) f[i] = float(rank) + 0.5f * float(i);
  Check(cuMemcpyHtoD(send, f.data(), kN * sizeof(float)), "cuMemcpyHtoD");
  CheckNccl(api.ncclAllReduce(sp, rp, kN, ncclFloat32, ncclMax, comm, s), "ncclAllReduce");
  Check(cuCtxSynchronize(), "cuCtxSynchronize");
  Check(cuMemcpyDtoH(fg.data(), recv, kN * sizeof(float)), "cuMemcpyDtoH");
  for (size_t i = 0; i < kN; ++i) {
    if (fg[i] != float(world - 1) + 0.5f * float(i)) fail("all-reduce max", i, fg[i], float(world - 1) + 0.5f * float(i));
  }
  Check(cuMemFree(send), "cuMemFree");
  Check(cuMemFree(recv), "cuMemFree");
}

int main(int argc, char** argv) {
  int iters = 3, late_rank = -1;
  long late_us = 0;
  bool use_dlsym = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--iters" && i + 1 < argc) iters = std::atoi(argv[++i]);
    else if (a == "--late-rank" && i + 1 < argc) late_rank = std::atoi(argv[++i]);
    else if (a == "--late-us" && i + 1 < argc) late_us = std::atol(argv[++i]);
    else if (a == "--dlsym") use_dlsym = true;
    else {
      std::fprintf(stderr, "probe: unknown option %s\n", a.c_str());
      return 2;
    }
  }
  const char* r = std::getenv("RANK");
  const char* w = std::getenv("WORLD_SIZE");
  const char* f = std::getenv("DDP_ID_FILE");
  if (!r || !w || !f) {
    std::fprintf(stderr, "probe: needs RANK, WORLD_SIZE and DDP_ID_FILE\n");
    return 2;
  }
  const int rank = std::atoi(r), world = std::atoi(w);
  g_rank = rank;
  Api api;
  if (use_dlsym) Resolve(&api);

  Check(cuInit(0), "cuInit");
  CUdevice dev;
  Check(cuDeviceGet(&dev, 0), "cuDeviceGet");
  CUcontext ctx;
  Check(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
  Check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
  CUstream cs;
  Check(cuStreamCreate(&cs, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  auto s = reinterpret_cast<cudaStream_t>(cs);
  const size_t n = 1 << 20;
  CUdeviceptr buf, big;
  Check(cuMemAlloc(&buf, n * sizeof(float)), "cuMemAlloc");
  Check(cuMemAlloc(&big, n * sizeof(float) * size_t(world)), "cuMemAlloc");
  auto* b = reinterpret_cast<void*>(buf);
  auto* g = reinterpret_cast<void*>(big);

  ncclUniqueId ids[2];
  ShareIds(api, f, rank, ids);
  ncclComm_t a, bcomm, split;
  CheckNccl(api.ncclCommInitRank(&a, world, ids[0], rank), "ncclCommInitRank");
  CheckNccl(api.pncclCommInitRankConfig(&bcomm, world, ids[1], rank, nullptr),
            "pncclCommInitRankConfig");

  for (int i = 0; i < iters; ++i) {
    if (rank == late_rank) SleepUs(late_us);
    CheckNccl(api.ncclAllReduce(b, b, n, ncclFloat32, ncclSum, a, s), "ncclAllReduce");
  }
  CheckNccl(api.ncclBroadcast(b, b, n / 2, ncclFloat32, 0, a, s), "ncclBroadcast");
  CheckNccl(api.ncclBcast(b, n / 4, ncclInt8, 1 % world, a, s), "ncclBcast");
  CheckNccl(api.ncclReduce(b, b, n, ncclFloat16, ncclMax, 0, a, s), "ncclReduce");
  CheckNccl(api.ncclAllGather(b, g, n / 8, ncclFloat32, a, s), "ncclAllGather");
  CheckNccl(api.ncclReduceScatter(g, b, n / 8, ncclFloat64, ncclSum, a, s), "ncclReduceScatter");
  CheckNccl(api.ncclAlltoAll(g, g, n / 16, ncclInt32, a, s), "ncclAlltoAll");
  CheckNccl(api.ncclGroupStart(), "ncclGroupStart");
  CheckNccl(api.ncclSend(b, 1000, ncclFloat32, (rank + 1) % world, a, s), "ncclSend");
  CheckNccl(api.ncclRecv(b, 1000, ncclFloat32, (rank + world - 1) % world, a, s), "ncclRecv");
  CheckNccl(api.ncclGroupEnd(), "ncclGroupEnd");
  CheckNccl(api.pncclAllReduce(b, b, 4096, ncclFloat32, ncclSum, bcomm, s), "pncclAllReduce");
  CheckNccl(api.ncclCommSplit(a, rank % 2, rank, &split, nullptr), "ncclCommSplit");
  int split_rank = -1, split_size = -1;
  CheckNccl(api.ncclCommUserRank(split, &split_rank), "ncclCommUserRank");
  CheckNccl(api.ncclCommCount(split, &split_size), "ncclCommCount");
  CheckNccl(api.ncclAllReduce(b, b, 2048, ncclFloat32, ncclSum, split, s), "ncclAllReduce");
  CheckData(api, a, rank, world, s);
  ncclComm_t local[2];
  int devs[2] = {0, 0};
  CheckNccl(api.ncclCommInitAll(local, 2, devs), "ncclCommInitAll");
  Check(cuCtxSynchronize(), "cuCtxSynchronize");
  CheckNccl(api.ncclCommDestroy(local[0]), "ncclCommDestroy");
  CheckNccl(api.ncclCommDestroy(local[1]), "ncclCommDestroy");
  CheckNccl(api.ncclCommFinalize(split), "ncclCommFinalize");
  CheckNccl(api.ncclCommDestroy(split), "ncclCommDestroy");
  CheckNccl(api.ncclCommDestroy(bcomm), "ncclCommDestroy");
  CheckNccl(api.ncclCommAbort(a), "ncclCommAbort");
  std::printf("probe: rank %d of %d done; split rank %d of %d\n", rank, world, split_rank,
              split_size);
  return 0;
}
