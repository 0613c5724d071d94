// The stallscope trace format: the only contract between the preload library
// (writer) and the analyzer (reader). Both include this header; nothing else is
// shared between them. Described in docs/trace-format.md.
//
// A trace file is a FileHeader followed by self-contained chunks. Each chunk is
// a ChunkHeader and `payload_bytes` of payload whose checksum is in the header,
// so a reader can stop at the last complete chunk of a truncated file.
#pragma once

#include <cstddef>
#include <cstdint>

// xxHash compiled into each user, every function inline and static: the
// preload library gains no dependency (its NEEDED list stays as it is).
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "diagnostic_table.h"

namespace stallscope::trace {

inline constexpr char kMagic[8] = {'S', 'T', 'L', 'S', 'C', 'O', 'P', 'E'};
// Version 4: chunks may be packed (ChunkHeader::encoding, common/
// trace_pack.h). Version 3: chunk checksums by XXH3 (ChunkChecksum);
// version 2 (FNV-1a in four lanes) and version 1 (one lane) files are still
// read.
inline constexpr uint16_t kVersion = 4;
// A writer sets `oldest_reader` to the oldest reader version able to read its
// files (kWriterOldestReader: a version-3 reader would take a packed chunk's
// bytes for records; a writer that packs nothing may say 3). A reader
// accepts a file when `oldest_reader <= kVersion` and `version >=
// kOldestSupported` (files older than that it no longer reads).
inline constexpr uint16_t kWriterOldestReader = 4;
inline constexpr uint16_t kUnpackedOldestReader = 3;
inline constexpr uint16_t kOldestSupported = 1;
inline constexpr uint32_t kChunkMagic = 0x4b4e4843;  // "CHNK" little-endian
inline constexpr const char* kFileSuffix = ".sstrace";

struct FileHeader {
  char magic[8];
  uint16_t version;
  uint16_t oldest_reader;
  uint32_t header_bytes;  // sizeof(FileHeader) as written
  uint32_t pid;
  uint32_t ppid;
  uint64_t start_mono_ns;      // CLOCK_MONOTONIC at trace start
  uint64_t start_realtime_ns;  // CLOCK_REALTIME at the same instant
  uint32_t flags;              // FileFlags
  uint32_t reserved0;
  char host[32];  // gethostname, NUL-padded
  uint64_t reserved[2];
};
static_assert(sizeof(FileHeader) == 96);

enum FileFlags : uint32_t {
  kFileTicksAreNs = 1u << 0,  // API/NVTX ticks are CLOCK_MONOTONIC ns already
};

// What clock a chunk's record times are on.
enum class ChunkClock : uint8_t {
  kNoTime,  // none of its records carries a time
  kTicks,   // the host's ticks, converted to ns by the file's clock pairs
  kNs,      // CLOCK_MONOTONIC ns already (device ops, from CUPTI)
};

// How a reader of a slice of the timeline takes a chunk (SliceChunks in
// analyzer/read/trace_reader.h).
enum class ChunkReading : uint8_t {
  kWhole,   // always read, whatever the slice (tables, clocks, threads ...)
  kSliced,  // records of the timeline: read when the slice needs them
};

// The chunk types, the one table of them: X(enumerator, wire type, name,
// record, clock, reading). `record` is the fixed-size record a chunk holds
// `count` of; `Entries` for variable-size entries, each padded to 8 bytes
// (their encoders and decoders are in common/trace_codec.h); `NoRecords` for
// an empty payload. `clock` is a ChunkClock, `reading` a ChunkReading.
// kApi, kNvtx, kCpu and kCpuSched chunks hold one thread's records and carry
// it in `tid`. Payloads are described in docs/trace-format.md; a wire type
// is never reused.
#define STALLSCOPE_CHUNK_TYPES(X)                                                    \
  X(kApi, 1, "api", ApiRecord, kTicks, kSliced)                                      \
  X(kDevice, 2, "device", DeviceRecord, kNs, kSliced)                                \
  X(kCorrelation, 3, "correlation", CorrelationRecord, kNoTime, kSliced)             \
  X(kNvtx, 4, "nvtx", NvtxRecord, kTicks, kSliced)                                   \
  X(kString, 5, "string", Entries, kNoTime, kWhole)  /* {u32 id, u32 len, bytes} */  \
  X(kStack, 6, "stack", Entries, kNoTime, kWhole)    /* {u32 id, u16 depth,         \
                                                        u16 kind, words}: native    \
                                                        u64 pc[depth]; Python       \
                                                        depth x (string, line) */   \
  X(kModule, 7, "module", Entries, kNoTime, kWhole)  /* ModuleRecord, path,         \
                                                        build id */                 \
  X(kClock, 8, "clock", ClockRecord, kTicks, kWhole)                                 \
  X(kApiTable, 9, "api-table", Entries, kNoTime, kWhole) /* ApiTableEntry, name */   \
  X(kThread, 10, "thread", ThreadRecord, kNoTime, kWhole)                            \
  X(kDiagnostic, 11, "diagnostic", DiagnosticRecord, kNoTime, kWhole)                \
  X(kEnd, 12, "end", NoRecords, kNoTime, kWhole) /* the process finished cleanly */  \
  X(kCpu, 13, "cpu", CpuRecord, kTicks, kSliced) /* superseded by kCpuSched */       \
  X(kNccl, 14, "nccl", NcclRecord, kTicks, kSliced)                                  \
  X(kRank, 15, "rank", RankRecord, kNoTime, kWhole)                                  \
  X(kCpuSched, 16, "cpu-sched", CpuSchedRecord, kTicks, kSliced)                     \
  X(kDeviceTiming, 17, "device-timing", DeviceTimingRecord, kTicks, kWhole)

enum class ChunkType : uint16_t {
#define STALLSCOPE_CHUNK_ENUM(id, wire, name, record, clock, reading) id = wire,
  STALLSCOPE_CHUNK_TYPES(STALLSCOPE_CHUNK_ENUM)
#undef STALLSCOPE_CHUNK_ENUM
};

struct ChunkHeader {
  uint32_t magic;  // kChunkMagic
  uint16_t type;   // ChunkType
  uint16_t encoding;  // ChunkEncoding (trace_pack.h); 0 (raw) before version 4
  uint32_t tid;  // writing thread for kApi/kNvtx; 0 otherwise
  uint32_t count;
  uint32_t payload_bytes;  // multiple of 8
  uint32_t checksum;       // Checksum(payload)
};
static_assert(sizeof(ChunkHeader) == 24);

// Category of a hooked API; carried per API in the kApiTable chunk so the
// analyzer never depends on the preload library's enum order.
enum class ApiCategory : uint8_t {
  kOther = 0,
  kLaunch = 1,   // kernel launches (one device op)
  kCopy = 2,     // memcpy forms
  kSet = 3,      // memset forms
  kSync = 4,     // explicit stream/context/event synchronize
  kQuery = 5,    // polling stream/event query
  kFree = 6,     // frees that may synchronize
  kWait = 7,     // device-side waits (cuStreamWaitEvent ...)
  kEvent = 8,    // event record
  kAlloc = 9,
  kNccl = 10,
  kResolve = 11,  // cuGetProcAddress & co
  kGraph = 12,    // graph launches: one call, many device ops
  kHostFunc = 13, // host functions and callbacks enqueued on a stream
};

enum ApiFlags : uint16_t {
  kApiMayBlock = 1u << 0,    // may block the host until device work completes
  kApiSubmits = 1u << 1,     // submits device work (carries a correlation id)
  kApiAsync = 1u << 2,       // an *Async form
  kApiPerThread = 1u << 3,   // _ptsz/_ptds form (per-thread default stream)
  kApiHostToDev = 1u << 4,   // copy direction
  kApiDevToHost = 1u << 5,
  kApiDevToDev = 1u << 6,
};

struct ApiTableEntry {
  uint16_t api;
  uint8_t category;  // ApiCategory
  uint8_t reserved;
  uint16_t flags;  // ApiFlags
  uint16_t name_len;
  // followed by name_len bytes; the whole entry padded to 8 bytes
};
static_assert(sizeof(ApiTableEntry) == 8);

// One hooked call. Ticks convert to CLOCK_MONOTONIC ns through kClock pairs.
struct ApiRecord {
  uint64_t enter;        // ticks
  uint64_t exit;         // ticks
  uint64_t correlation;  // external correlation id given to CUPTI; 0 none
  uint64_t stream;       // CUstream value passed (0 = legacy default)
  uint64_t object;       // CUfunction, CUevent, device pointer, context ...
  uint64_t bytes;        // bytes copied or set
  uint32_t stack;        // call-site stack id (kStack); 0 none
  uint16_t api;          // index into the kApiTable
  uint16_t flags;        // RecordFlags
  int32_t result;        // CUresult returned to the caller
  uint32_t python_stack; // Python call-site stack id (kStack, kPython); 0 none
};
static_assert(sizeof(ApiRecord) == 64);

enum RecordFlags : uint16_t {
  kRecordPythonStack = 1u << 0,  // `stack` also has Python frames
  // A submission made while device timing was sampled off
  // (STALLSCOPE_DEVICE_SAMPLE): CUPTI was not asked to time it.
  kRecordUntimed = 1u << 1,
};

enum class DeviceOpKind : uint8_t {
  kKernel = 1,
  kMemcpy = 2,
  kMemset = 3,
  kNccl = 4,  // communication kernel
};

// A device op's execution, from CUPTI, on CLOCK_MONOTONIC ns.
struct DeviceRecord {
  uint64_t start_ns;
  uint64_t end_ns;
  uint64_t bytes;
  uint32_t correlation;  // CUPTI correlation id
  uint32_t name;         // string id (kernel name); 0 none
  uint32_t stream;       // CUPTI stream id
  uint32_t device;
  uint32_t context;
  uint8_t kind;       // DeviceOpKind
  uint8_t copy_kind;  // CUpti_ActivityMemcpyKind for copies
  // Copies: CUpti_ActivityMemoryKind of the source and the destination
  // (1 pageable, 2 pinned, 3 device ...); 0 unknown (other ops, and recorders
  // older than these fields, which wrote a zero u16 here).
  uint8_t src_kind;
  uint8_t dst_kind;
};
static_assert(sizeof(DeviceRecord) == 48);

// Maps a CUPTI correlation id to the external id of the ApiRecord.
struct CorrelationRecord {
  uint64_t external;
  uint32_t correlation;
  uint32_t reserved;
};
static_assert(sizeof(CorrelationRecord) == 16);

enum class NvtxType : uint16_t {
  kPush = 1,
  kPop = 2,
  kStart = 3,  // range_id identifies the range
  kEnd = 4,
  kMark = 5,
  kStepBegin = 6,  // explicit step API; range_id = step index
  kStepEnd = 7,
};

struct NvtxRecord {
  uint64_t ticks;
  uint64_t range_id;
  uint64_t domain;
  uint32_t name;  // string id; 0 none
  uint16_t type;  // NvtxType
  uint16_t reserved;
};
static_assert(sizeof(NvtxRecord) == 32);

enum class StackKind : uint16_t {
  kNative = 1,  // return addresses, innermost first
  kPython = 2,  // pairs (string id of "file\tfunction", line), innermost first
};

// Module map for offline symbolization: one entry per loaded object.
struct ModuleRecord {
  uint64_t base;      // load bias (dlpi_addr)
  uint64_t low;       // lowest mapped address of its PT_LOAD segments
  uint64_t high;      // one past the highest
  uint32_t path_len;  // followed by path bytes, entry padded to 8
  uint32_t build_id_len;  // followed (after path) by build-id bytes
};
static_assert(sizeof(ModuleRecord) == 32);

// A simultaneous reading of the tick counter and the clocks.
struct ClockRecord {
  uint64_t ticks;
  uint64_t mono_ns;
  uint64_t realtime_ns;
};
static_assert(sizeof(ClockRecord) == 24);

struct ThreadRecord {
  uint32_t tid;
  uint32_t reserved;
  char name[16];
};
static_assert(sizeof(ThreadRecord) == 24);

// A reading of a thread's CPU clock (CLOCK_THREAD_CPUTIME_ID), taken off the
// hot path: at the enter of a hooked call that follows a long gap outside
// hooked calls (then `ticks` equals that call's ApiRecord.enter) and at the
// exit of every may-block call (then `ticks` equals its ApiRecord.exit).
// Added to format 1 without a version change (older readers skip the chunk).
struct CpuRecord {
  uint64_t ticks;   // same tick counter as ApiRecord
  uint64_t cpu_ns;  // the thread's CPU time since it started
};
static_assert(sizeof(CpuRecord) == 16);

// kCpu's successor: the same sample plus the thread's run-queue delay, the
// time it spent runnable but waiting for a CPU (the second field of
// /proc/thread-self/schedstat; the kernel's sched_info accounting). Taken at
// the same points as CpuRecord. Added to format 1 without a version change.
inline constexpr uint64_t kRunDelayUnknown = ~0ull;  // schedstat unreadable
struct CpuSchedRecord {  // its first 16 bytes are a CpuRecord
  uint64_t ticks;         // same tick counter as ApiRecord
  uint64_t cpu_ns;        // the thread's CPU time since it started
  uint64_t run_delay_ns;  // time runnable but not running since it started;
                          // kRunDelayUnknown when it could not be read
};
static_assert(sizeof(CpuSchedRecord) == 24);

// What an NCCL call was (NcclRecord.kind).
enum class NcclKind : uint8_t {
  kOther = 0,
  kAllReduce = 1,
  kBroadcast = 2,  // ncclBroadcast and ncclBcast
  kReduce = 3,
  kAllGather = 4,
  kReduceScatter = 5,
  kAllToAll = 6,
  kSend = 7,
  kRecv = 8,
  kGroupStart = 9,
  kGroupEnd = 10,
  kCommInit = 11,     // ncclCommInitRank, ...InitRankConfig, ...InitAll
  kCommSplit = 12,
  kCommDestroy = 13,  // ncclCommDestroy
  kCommAbort = 14,
  kCommFinalize = 15,
};

enum NcclFlags : uint8_t {
  kNcclCollective = 1u << 0,  // seq is the communicator's collective sequence
  kNcclP2p = 1u << 1,         // seq is the (comm, peer, direction) sequence
  kNcclInGroup = 1u << 2,     // issued between ncclGroupStart and ncclGroupEnd
  kNcclCommUnknown = 1u << 3, // the communicator was created before tracing
};

// The NCCL arguments of one hooked NCCL call (one per ApiRecord of category
// kNccl). Joined to its ApiRecord by (tid, enter). Added to format 1 without
// a version change (older readers skip the chunk).
struct NcclRecord {
  uint64_t enter;        // ticks; equals the ApiRecord's enter
  uint64_t correlation;  // the ApiRecord's external correlation id; 0 none
  uint64_t comm;         // communicator id: the same on every rank
  uint64_t seq;          // see NcclFlags; 0-based
  uint64_t count;        // elements (per rank, as passed)
  uint32_t tid;          // the calling thread
  int32_t rank;          // this process's rank in comm; -1 unknown
  int32_t nranks;        // -1 unknown
  int32_t peer;          // send/recv: peer; broadcast/reduce: root; else -1
  uint8_t kind;          // NcclKind
  uint8_t datatype;      // ncclDataType_t; 255 none
  uint8_t flags;         // NcclFlags
  uint8_t group_depth;   // ncclGroupStart nesting at the call (before it)
  int32_t op;            // ncclRedOp_t; -1 none
};
static_assert(sizeof(NcclRecord) == 64);

// Where the process sits in a distributed job, from the launcher's
// environment at trace start. -1: not set.
enum class RankSource : uint32_t {
  kNone = 0,
  kTorch = 1,  // RANK / LOCAL_RANK / WORLD_SIZE / LOCAL_WORLD_SIZE
  kOpenMpi = 2,  // OMPI_COMM_WORLD_RANK / _LOCAL_RANK / _SIZE / _LOCAL_SIZE
  kPmi = 3,    // PMI_RANK / MPI_LOCALRANKID / PMI_SIZE / MPI_LOCALNRANKS
  kSlurm = 4,  // SLURM_PROCID / SLURM_LOCALID / SLURM_NTASKS / SLURM_NTASKS_PER_NODE
};

// Device timing sampled in windows (STALLSCOPE_DEVICE_SAMPLE): CUPTI's
// device kinds turned on or off at `ticks`. Device ops are recorded only
// while it is on; the state before a trace's first record is the opposite
// of that record's.
struct DeviceTimingRecord {
  uint64_t ticks;
  uint32_t on;     // 1 on, 0 off
  uint32_t every;  // the sampling period: one step in `every` is reported
};
static_assert(sizeof(DeviceTimingRecord) == 16);

struct RankRecord {
  int32_t rank;
  int32_t local_rank;
  int32_t world_size;
  int32_t local_world_size;
  uint32_t source;  // RankSource
  uint32_t reserved;
  char host[64];  // gethostname, NUL-padded (the header's is cut at 31)
};
static_assert(sizeof(RankRecord) == 88);

// The recorder's counted problems (DiagnosticId, kDiagnosticSlots) are rows of
// the one diagnostics table, common/diagnostic_table.h.

// The file of the one Python frame a call gets when its thread's frames could
// not be read (kPythonSitesLost): "<site lost>\t<why>", line 0.
inline constexpr char kLostSiteFile[] = "<site lost>";

struct DiagnosticRecord {
  uint32_t id;  // DiagnosticId
  uint32_t reserved;
  uint64_t count;
};
static_assert(sizeof(DiagnosticRecord) == 16);

inline constexpr size_t PadTo8(size_t n) { return (n + 7) & ~size_t{7}; }

// Version-1 checksum: FNV-1a over the payload's 64-bit words (payloads are
// padded to 8 bytes), folded to 32 bits. One multiply chain: its latency
// bounds it to about 2 bytes per cycle.
inline uint32_t ChecksumV1(const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint64_t h = 14695981039346656037ull;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    __builtin_memcpy(&w, p + i, 8);
    h = (h ^ w) * 1099511628211ull;
  }
  for (; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return static_cast<uint32_t>(h ^ (h >> 32));
}

// Version-2 checksum (ChecksumV2): the same FNV-1a step in four independent lanes (word
// k of the payload goes to lane k mod 4, each lane starting from the FNV
// offset basis xor its number), the lanes then folded in order into lane 0
// with the same step, and the result folded to 32 bits. The four chains run
// in parallel: about four times the version-1 speed, and still enough to
// reject a torn chunk.
inline uint32_t ChecksumV2(const void* data, size_t n) {
  constexpr uint64_t kBasis = 14695981039346656037ull;
  constexpr uint64_t kPrime = 1099511628211ull;
  const auto* p = static_cast<const unsigned char*>(data);
  uint64_t h0 = kBasis, h1 = kBasis ^ 1, h2 = kBasis ^ 2, h3 = kBasis ^ 3;
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    uint64_t w[4];
    __builtin_memcpy(w, p + i, 32);
    h0 = (h0 ^ w[0]) * kPrime;
    h1 = (h1 ^ w[1]) * kPrime;
    h2 = (h2 ^ w[2]) * kPrime;
    h3 = (h3 ^ w[3]) * kPrime;
  }
  uint64_t* lanes[4] = {&h0, &h1, &h2, &h3};
  for (size_t k = 0; i + 8 <= n; i += 8, ++k) {
    uint64_t w;
    __builtin_memcpy(&w, p + i, 8);
    *lanes[k] = (*lanes[k] ^ w) * kPrime;
  }
  for (; i < n; ++i) h0 = (h0 ^ p[i]) * kPrime;
  uint64_t h = h0;
  h = (h ^ h1) * kPrime;
  h = (h ^ h2) * kPrime;
  h = (h ^ h3) * kPrime;
  return static_cast<uint32_t>(h ^ (h >> 32));
}

// Version-3 checksum: the low 32 bits of XXH3-64 (xxHash 0.8, Debian's
// libxxhash-dev) over the payload.
inline uint32_t Checksum(const void* data, size_t n) {
  return static_cast<uint32_t>(XXH3_64bits(data, n));
}

// The checksum a file of format `version` carries in its chunk headers.
inline uint32_t ChunkChecksum(uint16_t version, const void* data, size_t n) {
  return version >= 3 ? Checksum(data, n) : version == 2 ? ChecksumV2(data, n) : ChecksumV1(data, n);
}

}  // namespace stallscope::trace
