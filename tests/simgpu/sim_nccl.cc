// The simulated libnccl.so.2: communicators across processes on one machine,
// collectives and point-to-point calls as device ops of the simulated driver
// that end only when every rank involved has reached them.
//
// Rendezvous. ncclCommInitRank maps a POSIX shared memory object named after
// the unique id ("/simgpu-nccl-" + 32 hex digits of its first 16 bytes) and
// waits until all ranks have joined; ncclCommInitAll uses anonymous shared
// memory in one process. In that memory each rank publishes, per collective
// sequence number (a ring of kSlots), the time its op started on its stream
// (its arrival); and per (sender, receiver) pair, the arrival of each side of
// the n-th send/recv. A rank's op, once started, polls (simgpu_hooks.h,
// SimgpuExternalOp) until every other rank's arrival for the same instance is
// there, then ends at max(arrivals) + latency + bytes / bandwidth on every
// rank: a late rank makes the others wait, as on a real cluster.
//
// Groups: calls between ncclGroupStart and the outermost ncclGroupEnd are
// launched at ncclGroupEnd as one op per stream (as NCCL aggregates them into
// one kernel), which waits for every rendezvous of its parts.
//
// Data. Collectives whose per-rank buffer is at most SIMGPU_NCCL_DATA_BYTES
// (default 64 KiB) move their data, so that what frameworks exchange about
// themselves is right (DDP compares every rank's parameter shapes, object
// collectives carry pickles): at its arrival a rank copies its send buffer
// into its slot of a shared data area, and once every rank has arrived each
// computes its receive buffer from the slots (sum, product, min, max and
// average of every NCCL type but the 8-bit floats, which take rank 0's
// values). Larger collectives and point-to-point calls only take time: the
// copying and reducing run on the device thread, and for gradient buckets
// (megabytes) they would delay the simulated device beyond the op's time.
//
// Knobs: SIMGPU_NCCL_GBPS (default 10), SIMGPU_NCCL_LATENCY_US (default 10),
// SIMGPU_NCCL_POLL_US (default 20), SIMGPU_NCCL_TIMEOUT_S (default 120: a
// rank that never arrives ends the wait with a message on stderr).
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "nccl_abi.h"
#include "simgpu_hooks.h"

namespace {

constexpr int kMaxRanks = 64;
constexpr int kSlots = 64;     // collective instances in flight per rank
constexpr int kP2pSlots = 16;  // sends in flight per (sender, receiver)
constexpr int kSplitSlots = 8;
constexpr uint32_t kCommMagic = 0x4e43434c;  // "NCCL"
// Collectives whose data may be in the shared data area at once (a group
// holds several of one communicator): slot sets, by sequence number.
constexpr int kDataSets = 8;
constexpr int kVersionCode = 22800;          // reports NCCL 2.28.0

struct Arrival {
  std::atomic<uint64_t> tag;  // instance number + 1, stored after `ns`
  std::atomic<uint64_t> ns;
};

struct SplitSlot {
  std::atomic<uint64_t> tag;
  std::atomic<int32_t> color;
  std::atomic<int32_t> key;
};

// The shared rendezvous area of one communicator (zero-filled on creation).
struct Shared {
  std::atomic<uint32_t> joined;
  std::atomic<uint32_t> mapped;  // ranks past the join; the last unlinks
  Arrival coll[kMaxRanks][kSlots];
  Arrival p2p[kMaxRanks][kMaxRanks][kP2pSlots][2];  // [from][to][n][0 send, 1 recv]
  SplitSlot split[kSplitSlots][kMaxRanks];
};

uint64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

double EnvDouble(const char* name, double def) {
  const char* v = getenv(name);
  if (v == nullptr || *v == '\0') return def;
  char* end = nullptr;
  double d = strtod(v, &end);
  return (end == v || d < 0) ? def : d;
}

struct Knobs {
  double bytes_per_ns = EnvDouble("SIMGPU_NCCL_GBPS", 10.0);
  uint64_t latency_ns = uint64_t(EnvDouble("SIMGPU_NCCL_LATENCY_US", 10.0) * 1000.0);
  uint64_t poll_ns = uint64_t(EnvDouble("SIMGPU_NCCL_POLL_US", 20.0) * 1000.0);
  uint64_t timeout_ns = uint64_t(EnvDouble("SIMGPU_NCCL_TIMEOUT_S", 120.0) * 1e9);
  uint64_t data_bytes = uint64_t(EnvDouble("SIMGPU_NCCL_DATA_BYTES", double(64 << 10)));
};
const Knobs& K() {
  static const Knobs* k = new Knobs();
  return *k;
}

uint64_t DurationNs(uint64_t bytes) {
  const Knobs& k = K();
  double rate = k.bytes_per_ns > 0 ? k.bytes_per_ns : 10.0;
  return k.latency_ns + uint64_t(double(bytes) / rate);
}

// FNV-1a 64 over the whole unique id: the same communicator id the
// interposer records (libinterpose/nccl_state.cc).
uint64_t CommIdOf(const ncclUniqueId& id) {
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : id.internal) h = (h ^ c) * 1099511628211ull;
  return h;
}

}  // namespace

struct ncclComm {
  uint32_t magic = kCommMagic;
  Shared* shared = nullptr;
  bool anonymous = false;  // ncclCommInitAll
  std::string shm_name;
  ncclUniqueId uid{};
  uint64_t id = 0;
  int rank = 0, nranks = 1, device = 0;
  uint64_t collectives = 0;
  uint64_t splits = 0;
  std::map<int, uint64_t> sends, recvs;
  // The shared data area: [kDataSets][nranks][data_slot] bytes (null: none).
  uint8_t* data = nullptr;
  uint64_t data_slot = 0;
  size_t data_size = 0;
};

namespace {

bool Valid(const ncclComm* c) { return c != nullptr && c->magic == kCommMagic; }

// ---- the driver's external-op entry ----
SimgpuSubmitExternalFn Submitter() {
  static SimgpuSubmitExternalFn fn = [] {
    void* h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
    if (h == nullptr) h = dlopen("libcuda.so.1", RTLD_LAZY);
    return h ? reinterpret_cast<SimgpuSubmitExternalFn>(dlsym(h, "simgpu_submit_external"))
             : nullptr;
  }();
  return fn;
}

// What a collective computes, for its data.
enum class Coll { kNone, kAllReduce, kBroadcast, kReduce, kAllGather, kReduceScatter, kAllToAll };

// One rendezvous an op takes part in.
struct Part {
  enum Kind { kColl, kSend, kRecv } kind = kColl;
  ncclComm* comm = nullptr;
  uint64_t seq = 0;  // collective sequence, or n-th send/recv of the pair
  int peer = -1;
  uint64_t bytes = 0;
  const char* name = "";
  // Collectives' data: the buffers and the elements of one rank's share
  // (count for all-reduce, broadcast, reduce, all-to-all's per-peer block;
  // sendcount for all-gather; recvcount for reduce-scatter).
  Coll coll = Coll::kNone;
  const void* send = nullptr;
  void* recv = nullptr;
  uint64_t count = 0;
  int type = 0, op = 0, root = 0;
};

Arrival& Mine(const Part& p) {
  Shared* s = p.comm->shared;
  int me = p.comm->rank;
  switch (p.kind) {
    case Part::kColl: return s->coll[me][p.seq % kSlots];
    case Part::kSend: return s->p2p[me][p.peer][p.seq % kP2pSlots][0];
    default: return s->p2p[p.peer][me][p.seq % kP2pSlots][1];
  }
}

// The latest arrival of the others for this part; false while one is missing.
bool Others(const Part& p, uint64_t* latest) {
  Shared* s = p.comm->shared;
  int me = p.comm->rank;
  auto check = [&](Arrival& a) {
    if (a.tag.load(std::memory_order_acquire) != p.seq + 1) return false;
    *latest = std::max(*latest, a.ns.load(std::memory_order_relaxed));
    return true;
  };
  switch (p.kind) {
    case Part::kColl:
      for (int r = 0; r < p.comm->nranks; ++r)
        if (r != me && !check(s->coll[r][p.seq % kSlots])) return false;
      return true;
    case Part::kSend: return check(s->p2p[me][p.peer][p.seq % kP2pSlots][1]);
    default: return check(s->p2p[p.peer][me][p.seq % kP2pSlots][0]);
  }
}

struct PendingOp {
  std::vector<Part> parts;
  uint64_t start_ns = 0;
  uint64_t bytes = 0;
};

// ---- data ----
// The bytes one rank contributes (its slot's fill).
uint64_t ShareBytes(const Part& p) {
  const uint64_t elem = StallscopeNcclTypeSize(p.type);
  const uint64_t n = uint64_t(p.comm->nranks);
  switch (p.coll) {
    case Coll::kReduceScatter:
    case Coll::kAllToAll: return p.count * elem * n;
    case Coll::kNone: return 0;
    default: return p.count * elem;
  }
}

bool MovesData(const Part& p) {
  return p.kind == Part::kColl && p.coll != Coll::kNone && p.comm->data != nullptr &&
         ShareBytes(p) <= p.comm->data_slot && p.send != nullptr && p.recv != nullptr;
}

uint8_t* Slot(const Part& p, int rank) {
  const ncclComm* c = p.comm;
  return c->data + ((p.seq % kDataSets) * uint64_t(c->nranks) + uint64_t(rank)) * c->data_slot;
}

float HalfToFloat(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ff, bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal
      exp = 127 - 15 + 1;
      while ((mant & 0x400) == 0) {
        mant <<= 1;
        --exp;
      }
      bits = sign | (exp << 23) | ((mant & 0x3ff) << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000 | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

uint16_t FloatToHalf(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  const uint16_t sign = uint16_t((x >> 16) & 0x8000);
  const int exp = int((x >> 23) & 0xff) - 127 + 15;
  const uint32_t mant = x & 0x7fffff;
  if (((x >> 23) & 0xff) == 0xff) return uint16_t(sign | 0x7c00 | (mant ? 0x200 : 0));
  if (exp >= 31) return uint16_t(sign | 0x7c00);
  if (exp <= 0) {
    if (exp < -10) return sign;
    const uint32_t m = (mant | 0x800000) >> (1 - exp);
    return uint16_t(sign | ((m + 0x1000) >> 13));
  }
  return uint16_t(sign | (uint32_t(exp) << 10) | ((mant + 0x1000) >> 13));
}

float Bf16ToFloat(uint16_t b) {
  const uint32_t bits = uint32_t(b) << 16;
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

uint16_t FloatToBf16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  return uint16_t((x + 0x7fff + ((x >> 16) & 1)) >> 16);  // round to nearest even
}

template <typename T>
T Combine(T a, T b, int op) {
  switch (op) {
    case ncclProd: return T(a * b);
    case ncclMax: return a > b ? a : b;
    case ncclMin: return a < b ? a : b;
    default: return T(a + b);  // sum, and average before its division
  }
}

// dst[i] = op over ranks of srcs[r][i], n elements of `type`.
template <typename T, typename Acc = T>
void ReduceAs(void* dst, const std::vector<const uint8_t*>& srcs, uint64_t n, int op,
              Acc (*load)(T) = nullptr, T (*store)(Acc) = nullptr) {
  T* out = static_cast<T*>(dst);
  for (uint64_t i = 0; i < n; ++i) {
    Acc acc{};
    for (size_t r = 0; r < srcs.size(); ++r) {
      T v;
      memcpy(&v, srcs[r] + i * sizeof(T), sizeof(T));
      const Acc a = load ? load(v) : Acc(v);
      acc = r == 0 ? a : Combine(acc, a, op);
    }
    if (op == ncclAvg) acc = Acc(acc / Acc(srcs.size()));
    T v = store ? store(acc) : T(acc);
    memcpy(out + i, &v, sizeof(T));
  }
}

void ReduceInto(void* dst, const std::vector<const uint8_t*>& srcs, uint64_t n, int type,
                int op) {
  switch (type) {
    case ncclInt8: ReduceAs<int8_t>(dst, srcs, n, op); break;
    case ncclUint8: ReduceAs<uint8_t>(dst, srcs, n, op); break;
    case ncclInt32: ReduceAs<int32_t>(dst, srcs, n, op); break;
    case ncclUint32: ReduceAs<uint32_t>(dst, srcs, n, op); break;
    case ncclInt64: ReduceAs<int64_t>(dst, srcs, n, op); break;
    case ncclUint64: ReduceAs<uint64_t>(dst, srcs, n, op); break;
    case ncclFloat32: ReduceAs<float>(dst, srcs, n, op); break;
    case ncclFloat64: ReduceAs<double>(dst, srcs, n, op); break;
    case ncclFloat16: ReduceAs<uint16_t, float>(dst, srcs, n, op, HalfToFloat, FloatToHalf); break;
    case ncclBfloat16: ReduceAs<uint16_t, float>(dst, srcs, n, op, Bf16ToFloat, FloatToBf16); break;
    default: memcpy(dst, srcs[0], n * StallscopeNcclTypeSize(type)); break;  // 8-bit floats
  }
}

// At the arrival: this rank's share into its slot.
void Publish(const Part& p) {
  if (!MovesData(p)) return;
  if (p.coll == Coll::kBroadcast && p.comm->rank != p.root) return;
  memcpy(Slot(p, p.comm->rank), p.send, ShareBytes(p));
}

// Once every rank has arrived: this rank's receive buffer.
void Deliver(const Part& p) {
  if (!MovesData(p)) return;
  const ncclComm* c = p.comm;
  const uint64_t elem = StallscopeNcclTypeSize(p.type);
  const uint64_t block = p.count * elem;
  std::vector<const uint8_t*> slots;
  for (int r = 0; r < c->nranks; ++r) slots.push_back(Slot(p, r));
  auto* out = static_cast<uint8_t*>(p.recv);
  switch (p.coll) {
    case Coll::kAllReduce: ReduceInto(out, slots, p.count, p.type, p.op); break;
    case Coll::kReduce:
      if (c->rank == p.root) ReduceInto(out, slots, p.count, p.type, p.op);
      break;
    case Coll::kBroadcast: memmove(out, Slot(p, p.root), block); break;
    case Coll::kAllGather:
      for (int r = 0; r < c->nranks; ++r) memcpy(out + uint64_t(r) * block, slots[r], block);
      break;
    case Coll::kReduceScatter: {
      std::vector<const uint8_t*> mine;
      for (const uint8_t* s : slots) mine.push_back(s + uint64_t(c->rank) * block);
      ReduceInto(out, mine, p.count, p.type, p.op);
      break;
    }
    case Coll::kAllToAll:
      for (int r = 0; r < c->nranks; ++r) {
        memcpy(out + uint64_t(r) * block, slots[r] + uint64_t(c->rank) * block, block);
      }
      break;
    case Coll::kNone: break;
  }
}

void OnStart(void* user, uint64_t start_ns) {
  auto* op = static_cast<PendingOp*>(user);
  op->start_ns = start_ns;
  for (const Part& p : op->parts) {
    Publish(p);  // before the arrival is visible
    Arrival& a = Mine(p);
    a.ns.store(start_ns, std::memory_order_relaxed);
    a.tag.store(p.seq + 1, std::memory_order_release);
  }
}

uint64_t PollEnd(void* user, uint64_t now_ns) {
  auto* op = static_cast<PendingOp*>(user);
  uint64_t latest = op->start_ns;
  for (const Part& p : op->parts) {
    if (!Others(p, &latest)) {
      if (now_ns - op->start_ns > K().timeout_ns) {
        fprintf(stderr, "simgpu nccl: rank %d gave up waiting for its peers (seq %llu)\n",
                p.comm->rank, static_cast<unsigned long long>(p.seq));
        return now_ns;
      }
      return 0;
    }
  }
  // Every rank has arrived (and published): the results, once (the end is
  // known from here on, so this runs once per op).
  for (const Part& p : op->parts) Deliver(p);
  return latest + DurationNs(op->bytes);
}

void Release(void* user) { delete static_cast<PendingOp*>(user); }

ncclResult_t SubmitOp(cudaStream_t stream, PendingOp* op) {
  SimgpuSubmitExternalFn submit = Submitter();
  if (submit == nullptr) {
    delete op;
    return ncclUnhandledCudaError;
  }
  const Part& first = op->parts.front();
  SimgpuExternalOp ext{};
  ext.size = sizeof ext;
  ext.name = first.name;
  for (const Part& p : op->parts) op->bytes += p.bytes;
  ext.bytes = op->bytes;
  ext.poll_ns = K().poll_ns;
  ext.comm = first.comm->id;
  ext.seq = first.seq;
  ext.rank = first.comm->rank;
  ext.on_start = OnStart;
  ext.poll_end = PollEnd;
  ext.release = Release;
  ext.user = op;
  if (submit(stream, &ext) != 0) {
    delete op;
    return ncclUnhandledCudaError;
  }
  return ncclSuccess;
}

// ---- groups ----
struct Deferred {
  cudaStream_t stream;
  Part part;
};
thread_local int t_group_depth = 0;
thread_local std::vector<Deferred>* t_deferred = nullptr;

ncclResult_t Enqueue(cudaStream_t stream, const Part& part) {
  if (t_group_depth > 0) {
    if (t_deferred == nullptr) t_deferred = new std::vector<Deferred>;
    t_deferred->push_back({stream, part});
    return ncclSuccess;
  }
  auto* op = new PendingOp;
  op->parts.push_back(part);
  return SubmitOp(stream, op);
}

ncclResult_t FlushGroup() {
  if (t_deferred == nullptr || t_deferred->empty()) return ncclSuccess;
  std::vector<Deferred> items;
  items.swap(*t_deferred);
  // One op per stream, in order of first appearance; p2p-only ops are named
  // like NCCL's send/recv kernel.
  std::vector<cudaStream_t> streams;
  for (const Deferred& d : items)
    if (std::find(streams.begin(), streams.end(), d.stream) == streams.end())
      streams.push_back(d.stream);
  ncclResult_t result = ncclSuccess;
  for (cudaStream_t s : streams) {
    auto* op = new PendingOp;
    for (const Deferred& d : items)
      if (d.stream == s) op->parts.push_back(d.part);
    // A collective part names the op; else the send/recv kernel.
    auto coll = std::find_if(op->parts.begin(), op->parts.end(),
                             [](const Part& p) { return p.kind == Part::kColl; });
    if (coll != op->parts.end()) {
      std::iter_swap(op->parts.begin(), coll);
    } else {
      op->parts.front().name = "ncclDevKernel_SendRecv";
    }
    ncclResult_t r = SubmitOp(s, op);
    if (r != ncclSuccess) result = r;
  }
  return result;
}

// ---- kernel names (as NCCL's: ncclDevKernel_<Coll>_<Op>_<type>_RING_LL) ----
const char* TypeName(int t) {
  static const char* kNames[] = {"i8",  "u8",  "i32", "u32",  "i64",  "u64",
                                 "f16", "f32", "f64", "bf16", "f8e4m3", "f8e5m2"};
  return t >= 0 && t < ncclNumTypes ? kNames[t] : "u8";
}
const char* OpName(int op) {
  static const char* kNames[] = {"Sum", "Prod", "MinMax", "MinMax", "Avg"};
  return op >= 0 && op < ncclNumOps ? kNames[op] : "PreMulSum";
}
const char* KernelName(const char* coll, int op, int type) {
  // Interned for the process lifetime (CUPTI records point at the name).
  static std::map<std::string, std::string>* names = new std::map<std::string, std::string>;
  static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
  std::string n = std::string("ncclDevKernel_") + coll;
  if (op >= 0) n += std::string("_") + OpName(op);
  n += std::string("_") + TypeName(type) + "_RING_LL";
  pthread_mutex_lock(&mu);
  const char* p = (*names)[n].assign(n).c_str();
  pthread_mutex_unlock(&mu);
  return p;
}

ncclResult_t Collective(ncclComm* comm, cudaStream_t stream, const char* coll, int op,
                        int type, uint64_t bytes, Coll what = Coll::kNone,
                        const void* send = nullptr, void* recv = nullptr, uint64_t count = 0,
                        int root = 0) {
  if (!Valid(comm)) return ncclInvalidArgument;
  if (StallscopeNcclTypeSize(type) == 0) return ncclInvalidArgument;
  Part p;
  p.kind = Part::kColl;
  p.comm = comm;
  p.seq = comm->collectives++;
  p.bytes = bytes;
  p.name = KernelName(coll, op, type);
  p.coll = what;
  p.send = send;
  p.recv = recv;
  p.count = count;
  p.type = type;
  p.op = op;
  p.root = root;
  return Enqueue(stream, p);
}

ncclResult_t PointToPoint(ncclComm* comm, cudaStream_t stream, bool send, int peer, int type,
                          uint64_t bytes) {
  if (!Valid(comm)) return ncclInvalidArgument;
  if (peer < 0 || peer >= comm->nranks || StallscopeNcclTypeSize(type) == 0)
    return ncclInvalidArgument;
  Part p;
  p.kind = send ? Part::kSend : Part::kRecv;
  p.comm = comm;
  p.peer = peer;
  p.seq = (send ? comm->sends[peer] : comm->recvs[peer])++;
  p.bytes = bytes;
  p.name = send ? "ncclDevKernel_Send" : "ncclDevKernel_Recv";
  return Enqueue(stream, p);
}

// ---- communicators ----
std::string ShmName(const ncclUniqueId& id) {
  static const char kHex[] = "0123456789abcdef";
  std::string n = "/simgpu-nccl-";
  for (int i = 0; i < 16; ++i) {
    unsigned char c = static_cast<unsigned char>(id.internal[i]);
    n += kHex[c >> 4];
    n += kHex[c & 15];
  }
  return n;
}

void Sleep(uint64_t ns) {
  timespec ts{time_t(ns / 1000000000ull), long(ns % 1000000000ull)};
  nanosleep(&ts, nullptr);
}

ncclResult_t InitRank(ncclComm_t* out, int nranks, const ncclUniqueId& id, int rank) {
  if (out == nullptr || nranks < 1 || nranks > kMaxRanks || rank < 0 || rank >= nranks)
    return ncclInvalidArgument;
  std::string name = ShmName(id);
  int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return ncclSystemError;
  struct stat st;
  if (fstat(fd, &st) != 0 ||
      (st.st_size < off_t(sizeof(Shared)) && ftruncate(fd, sizeof(Shared)) != 0)) {
    close(fd);
    return ncclSystemError;
  }
  void* mem = mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (mem == MAP_FAILED) return ncclSystemError;
  auto* shared = static_cast<Shared*>(mem);
  // The data area, mapped before this rank counts as joined (so it exists,
  // at full size, for every rank once all have joined).
  const uint64_t slot = K().data_bytes;
  const size_t data_size = size_t(kDataSets) * size_t(nranks) * size_t(slot);
  uint8_t* data = nullptr;
  if (slot > 0) {
    const std::string data_name = name + "-data";
    int dfd = shm_open(data_name.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (dfd >= 0) {
      struct stat dst;
      if (fstat(dfd, &dst) == 0 &&
          (dst.st_size >= off_t(data_size) || ftruncate(dfd, off_t(data_size)) == 0)) {
        void* dm = mmap(nullptr, data_size, PROT_READ | PROT_WRITE, MAP_SHARED, dfd, 0);
        if (dm != MAP_FAILED) data = static_cast<uint8_t*>(dm);
      }
      close(dfd);
    }
  }
  shared->joined.fetch_add(1);
  // ncclCommInitRank blocks until every rank has joined.
  const uint64_t deadline = NowNs() + K().timeout_ns;
  while (shared->joined.load() < uint32_t(nranks)) {
    if (NowNs() > deadline) {
      munmap(mem, sizeof(Shared));
      if (data != nullptr) munmap(data, data_size);
      return ncclSystemError;
    }
    Sleep(200000);
  }
  if (shared->mapped.fetch_add(1) + 1 == uint32_t(nranks)) {
    shm_unlink(name.c_str());
    shm_unlink((name + "-data").c_str());
  }
  auto* c = new ncclComm;
  c->data = data;
  c->data_slot = data != nullptr ? slot : 0;
  c->data_size = data != nullptr ? data_size : 0;
  c->shared = shared;
  c->shm_name = name;
  c->uid = id;
  c->id = CommIdOf(id);
  c->rank = rank;
  c->nranks = nranks;
  int dev = 0;
  if (const char* v = getenv("LOCAL_RANK")) dev = atoi(v);
  c->device = dev;
  *out = c;
  return ncclSuccess;
}

}  // namespace

#define SIM_NCCL_EXPORT extern "C" __attribute__((visibility("default")))
// Every entry point under both names, as NCCL exports them (`nccl*` a weak
// alias of `pnccl*`).
#define SIM_NCCL_ALIAS(name) \
  extern "C" __attribute__((visibility("default"), weak, alias("p" #name)))

SIM_NCCL_EXPORT ncclResult_t pncclGetVersion(int* version) {
  if (version == nullptr) return ncclInvalidArgument;
  *version = kVersionCode;
  return ncclSuccess;
}
SIM_NCCL_ALIAS(ncclGetVersion) ncclResult_t ncclGetVersion(int* version);

SIM_NCCL_EXPORT const char* pncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error";
    case ncclSystemError: return "unhandled system error";
    case ncclInternalError: return "internal error";
    case ncclInvalidArgument: return "invalid argument";
    case ncclInvalidUsage: return "invalid usage";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
  }
}
SIM_NCCL_ALIAS(ncclGetErrorString) const char* ncclGetErrorString(ncclResult_t result);

SIM_NCCL_EXPORT const char* pncclGetLastError(ncclComm_t) { return ""; }
SIM_NCCL_ALIAS(ncclGetLastError) const char* ncclGetLastError(ncclComm_t comm);

SIM_NCCL_EXPORT ncclResult_t pncclGetUniqueId(ncclUniqueId* id) {
  if (id == nullptr) return ncclInvalidArgument;
  memset(id, 0, sizeof *id);
  size_t got = 0;
  while (got < 32) {
    ssize_t n = getrandom(id->internal + got, 32 - got, 0);
    if (n <= 0) return ncclSystemError;
    got += size_t(n);
  }
  return ncclSuccess;
}
SIM_NCCL_ALIAS(ncclGetUniqueId) ncclResult_t ncclGetUniqueId(ncclUniqueId* id);

SIM_NCCL_EXPORT ncclResult_t pncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id,
                                               int rank) {
  return InitRank(comm, nranks, id, rank);
}
SIM_NCCL_ALIAS(ncclCommInitRank)
ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank);

SIM_NCCL_EXPORT ncclResult_t pncclCommInitRankConfig(ncclComm_t* comm, int nranks,
                                                     ncclUniqueId id, int rank, ncclConfig_t*) {
  return InitRank(comm, nranks, id, rank);
}
SIM_NCCL_ALIAS(ncclCommInitRankConfig)
ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank,
                                    ncclConfig_t* config);

SIM_NCCL_EXPORT ncclResult_t pncclCommInitAll(ncclComm_t* comms, int ndev, const int* devlist) {
  if (comms == nullptr || ndev < 1 || ndev > kMaxRanks) return ncclInvalidArgument;
  void* mem = mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                   -1, 0);
  if (mem == MAP_FAILED) return ncclSystemError;
  auto* shared = static_cast<Shared*>(mem);
  shared->joined.store(uint32_t(ndev));
  shared->mapped.store(uint32_t(ndev));
  const uint64_t slot = K().data_bytes;
  const size_t data_size = size_t(kDataSets) * size_t(ndev) * size_t(slot);
  uint8_t* data = nullptr;
  if (slot > 0) {
    void* dm = mmap(nullptr, data_size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (dm != MAP_FAILED) data = static_cast<uint8_t*>(dm);
  }
  ncclUniqueId id;
  if (pncclGetUniqueId(&id) != ncclSuccess) return ncclSystemError;
  for (int i = 0; i < ndev; ++i) {
    auto* c = new ncclComm;
    c->shared = shared;
    c->anonymous = true;
    c->uid = id;
    c->id = CommIdOf(id);
    c->rank = i;
    c->nranks = ndev;
    c->device = devlist ? devlist[i] : i;
    c->data = data;
    c->data_slot = data != nullptr ? slot : 0;
    c->data_size = data != nullptr ? data_size : 0;
    comms[i] = c;
  }
  return ncclSuccess;
}
SIM_NCCL_ALIAS(ncclCommInitAll)
ncclResult_t ncclCommInitAll(ncclComm_t* comms, int ndev, const int* devlist);

// Every rank of `comm` publishes (color, key); members of one color form the
// new communicator, ranked by (key, old rank), meeting under an id derived
// from the parent's, the split's number and the color.
SIM_NCCL_EXPORT ncclResult_t pncclCommSplit(ncclComm_t comm, int color, int key,
                                            ncclComm_t* newcomm, ncclConfig_t*) {
  if (!Valid(comm) || newcomm == nullptr) return ncclInvalidArgument;
  if (comm->anonymous) return ncclInvalidUsage;  // not simulated for ncclCommInitAll's
  uint64_t n = comm->splits++;
  Shared* s = comm->shared;
  SplitSlot& mine = s->split[n % kSplitSlots][comm->rank];
  mine.color.store(color, std::memory_order_relaxed);
  mine.key.store(key, std::memory_order_relaxed);
  mine.tag.store(n + 1, std::memory_order_release);
  const uint64_t deadline = NowNs() + K().timeout_ns;
  std::vector<std::pair<int, int>> members;  // (key, rank) of my color
  for (int r = 0; r < comm->nranks; ++r) {
    SplitSlot& other = s->split[n % kSplitSlots][r];
    while (other.tag.load(std::memory_order_acquire) < n + 1) {
      if (NowNs() > deadline) return ncclSystemError;
      Sleep(100000);
    }
    if (color != STALLSCOPE_NCCL_SPLIT_NOCOLOR && other.color.load() == color)
      members.push_back({other.key.load(), r});
  }
  if (color == STALLSCOPE_NCCL_SPLIT_NOCOLOR) {
    *newcomm = nullptr;
    return ncclSuccess;
  }
  std::sort(members.begin(), members.end());
  int new_rank = int(std::find(members.begin(), members.end(), std::make_pair(key, comm->rank)) -
                     members.begin());
  ncclUniqueId id = comm->uid;
  uint64_t mix[2] = {n + 1, uint64_t(uint32_t(color))};
  for (int i = 0; i < 16; ++i) id.internal[i] ^= reinterpret_cast<const char*>(mix)[i];
  id.internal[16] ^= 0x5a;
  ncclResult_t r = InitRank(newcomm, int(members.size()), id, new_rank);
  if (r == ncclSuccess) (*newcomm)->device = comm->device;
  return r;
}
SIM_NCCL_ALIAS(ncclCommSplit)
ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
                           ncclConfig_t* config);

SIM_NCCL_EXPORT ncclResult_t pncclCommFinalize(ncclComm_t comm) {
  return Valid(comm) ? ncclSuccess : ncclInvalidArgument;
}
SIM_NCCL_ALIAS(ncclCommFinalize) ncclResult_t ncclCommFinalize(ncclComm_t comm);

// The shared area stays mapped: ops of this communicator may still be
// queued on a stream and read it.
SIM_NCCL_EXPORT ncclResult_t pncclCommDestroy(ncclComm_t comm) {
  if (!Valid(comm)) return ncclInvalidArgument;
  comm->magic = 0;
  return ncclSuccess;
}
SIM_NCCL_ALIAS(ncclCommDestroy) ncclResult_t ncclCommDestroy(ncclComm_t comm);

SIM_NCCL_EXPORT ncclResult_t pncclCommAbort(ncclComm_t comm) { return pncclCommDestroy(comm); }
SIM_NCCL_ALIAS(ncclCommAbort) ncclResult_t ncclCommAbort(ncclComm_t comm);

SIM_NCCL_EXPORT ncclResult_t pncclCommCount(const ncclComm_t comm, int* count) {
  if (!Valid(comm) || count == nullptr) return ncclInvalidArgument;
  *count = comm->nranks;
  return ncclSuccess;
}
SIM_NCCL_ALIAS(ncclCommCount) ncclResult_t ncclCommCount(const ncclComm_t comm, int* count);

SIM_NCCL_EXPORT ncclResult_t pncclCommUserRank(const ncclComm_t comm, int* rank) {
  if (!Valid(comm) || rank == nullptr) return ncclInvalidArgument;
  *rank = comm->rank;
  return ncclSuccess;
}
SIM_NCCL_ALIAS(ncclCommUserRank) ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank);

SIM_NCCL_EXPORT ncclResult_t pncclCommCuDevice(const ncclComm_t comm, int* device) {
  if (!Valid(comm) || device == nullptr) return ncclInvalidArgument;
  *device = comm->device;
  return ncclSuccess;
}
SIM_NCCL_ALIAS(ncclCommCuDevice) ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device);

SIM_NCCL_EXPORT ncclResult_t pncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* error) {
  if (!Valid(comm) || error == nullptr) return ncclInvalidArgument;
  *error = ncclSuccess;
  return ncclSuccess;
}
SIM_NCCL_ALIAS(ncclCommGetAsyncError)
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* error);

SIM_NCCL_EXPORT ncclResult_t pncclGroupStart() {
  ++t_group_depth;
  return ncclSuccess;
}
SIM_NCCL_ALIAS(ncclGroupStart) ncclResult_t ncclGroupStart();

SIM_NCCL_EXPORT ncclResult_t pncclGroupEnd() {
  if (t_group_depth == 0) return ncclInvalidUsage;
  if (--t_group_depth > 0) return ncclSuccess;
  return FlushGroup();
}
SIM_NCCL_ALIAS(ncclGroupEnd) ncclResult_t ncclGroupEnd();

SIM_NCCL_EXPORT ncclResult_t pncclAllReduce(const void* send, void* recv, size_t count,
                                            ncclDataType_t type, ncclRedOp_t op,
                                            ncclComm_t comm, cudaStream_t stream) {
  return Collective(comm, stream, "AllReduce", op, type, count * StallscopeNcclTypeSize(type),
                    Coll::kAllReduce, send, recv, count);
}
SIM_NCCL_ALIAS(ncclAllReduce)
ncclResult_t ncclAllReduce(const void* s, void* r, size_t count, ncclDataType_t type,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);

SIM_NCCL_EXPORT ncclResult_t pncclBroadcast(const void* send, void* recv, size_t count,
                                            ncclDataType_t type, int root, ncclComm_t comm,
                                            cudaStream_t stream) {
  if (Valid(comm) && (root < 0 || root >= comm->nranks)) return ncclInvalidArgument;
  return Collective(comm, stream, "Broadcast", -1, type, count * StallscopeNcclTypeSize(type),
                    Coll::kBroadcast, send, recv, count, root);
}
SIM_NCCL_ALIAS(ncclBroadcast)
ncclResult_t ncclBroadcast(const void* s, void* r, size_t count, ncclDataType_t type, int root,
                           ncclComm_t comm, cudaStream_t stream);

SIM_NCCL_EXPORT ncclResult_t pncclBcast(void* buff, size_t count, ncclDataType_t type, int root,
                                        ncclComm_t comm, cudaStream_t stream) {
  return pncclBroadcast(buff, buff, count, type, root, comm, stream);
}
SIM_NCCL_ALIAS(ncclBcast)
ncclResult_t ncclBcast(void* buff, size_t count, ncclDataType_t type, int root, ncclComm_t comm,
                       cudaStream_t stream);

SIM_NCCL_EXPORT ncclResult_t pncclReduce(const void* send, void* recv, size_t count,
                                         ncclDataType_t type, ncclRedOp_t op, int root,
                                         ncclComm_t comm, cudaStream_t stream) {
  if (Valid(comm) && (root < 0 || root >= comm->nranks)) return ncclInvalidArgument;
  return Collective(comm, stream, "Reduce", op, type, count * StallscopeNcclTypeSize(type),
                    Coll::kReduce, send, recv, count, root);
}
SIM_NCCL_ALIAS(ncclReduce)
ncclResult_t ncclReduce(const void* s, void* r, size_t count, ncclDataType_t type,
                        ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream);

SIM_NCCL_EXPORT ncclResult_t pncclAllGather(const void* send, void* recv, size_t sendcount,
                                            ncclDataType_t type, ncclComm_t comm,
                                            cudaStream_t stream) {
  if (!Valid(comm)) return ncclInvalidArgument;
  return Collective(comm, stream, "AllGather", -1, type,
                    sendcount * StallscopeNcclTypeSize(type) * uint64_t(comm->nranks),
                    Coll::kAllGather, send, recv, sendcount);
}
SIM_NCCL_ALIAS(ncclAllGather)
ncclResult_t ncclAllGather(const void* s, void* r, size_t sendcount, ncclDataType_t type,
                           ncclComm_t comm, cudaStream_t stream);

SIM_NCCL_EXPORT ncclResult_t pncclReduceScatter(const void* send, void* recv, size_t recvcount,
                                                ncclDataType_t type, ncclRedOp_t op,
                                                ncclComm_t comm, cudaStream_t stream) {
  if (!Valid(comm)) return ncclInvalidArgument;
  return Collective(comm, stream, "ReduceScatter", op, type,
                    recvcount * StallscopeNcclTypeSize(type) * uint64_t(comm->nranks),
                    Coll::kReduceScatter, send, recv, recvcount);
}
SIM_NCCL_ALIAS(ncclReduceScatter)
ncclResult_t ncclReduceScatter(const void* s, void* r, size_t recvcount, ncclDataType_t type,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);

SIM_NCCL_EXPORT ncclResult_t pncclAlltoAll(const void* send, void* recv, size_t count,
                                           ncclDataType_t type, ncclComm_t comm,
                                           cudaStream_t stream) {
  if (!Valid(comm)) return ncclInvalidArgument;
  return Collective(comm, stream, "AllToAll", -1, type,
                    count * StallscopeNcclTypeSize(type) * uint64_t(comm->nranks),
                    Coll::kAllToAll, send, recv, count);
}
SIM_NCCL_ALIAS(ncclAlltoAll)
ncclResult_t ncclAlltoAll(const void* s, void* r, size_t count, ncclDataType_t type,
                          ncclComm_t comm, cudaStream_t stream);

SIM_NCCL_EXPORT ncclResult_t pncclSend(const void*, size_t count, ncclDataType_t type, int peer,
                                       ncclComm_t comm, cudaStream_t stream) {
  return PointToPoint(comm, stream, true, peer, type, count * StallscopeNcclTypeSize(type));
}
SIM_NCCL_ALIAS(ncclSend)
ncclResult_t ncclSend(const void* s, size_t count, ncclDataType_t type, int peer,
                      ncclComm_t comm, cudaStream_t stream);

SIM_NCCL_EXPORT ncclResult_t pncclRecv(void*, size_t count, ncclDataType_t type, int peer,
                                       ncclComm_t comm, cudaStream_t stream) {
  return PointToPoint(comm, stream, false, peer, type, count * StallscopeNcclTypeSize(type));
}
SIM_NCCL_ALIAS(ncclRecv)
ncclResult_t ncclRecv(void* r, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                      cudaStream_t stream);

// Buffer registration (torch registers its caching allocator's segments when
// a process group is bound to a device): nothing moves in the simulator, so
// a registration is a token that deregistration takes back.
namespace {
struct Registration {
  ncclComm_t comm;
  void* buff;
  size_t size;
};
}  // namespace

SIM_NCCL_EXPORT ncclResult_t pncclCommRegister(const ncclComm_t comm, void* buff, size_t size,
                                               void** handle) {
  if (!Valid(comm) || handle == nullptr) return ncclInvalidArgument;
  *handle = new Registration{comm, buff, size};
  return ncclSuccess;
}
SIM_NCCL_ALIAS(ncclCommRegister)
ncclResult_t ncclCommRegister(const ncclComm_t comm, void* buff, size_t size, void** handle);

SIM_NCCL_EXPORT ncclResult_t pncclCommDeregister(const ncclComm_t comm, void* handle) {
  auto* r = static_cast<Registration*>(handle);
  if (!Valid(comm) || r == nullptr || r->comm != comm) return ncclInvalidArgument;
  delete r;
  return ncclSuccess;
}
SIM_NCCL_ALIAS(ncclCommDeregister)
ncclResult_t ncclCommDeregister(const ncclComm_t comm, void* handle);
