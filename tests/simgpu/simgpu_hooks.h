// Private ABI between the simulated libcuda.so.1 and libcupti.so.13 (and tests).
//
// The two libraries never link against each other: libcupti finds libcuda with
// dlopen("libcuda.so.1", RTLD_NOLOAD) and looks up simgpu_set_observer with
// dlsym. Plain C, fixed-size structs with a leading size field so either side
// can grow them.
#ifndef STALLSCOPE_TESTS_SIMGPU_SIMGPU_HOOKS_H_
#define STALLSCOPE_TESTS_SIMGPU_SIMGPU_HOOKS_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum SimgpuOpKind {
  SIMGPU_OP_KERNEL = 0,
  SIMGPU_OP_MEMCPY = 1,
  SIMGPU_OP_MEMSET = 2,
};

// Values of copy_kind / src_kind / dst_kind / memory_kind are the CUPTI enum
// values (CUpti_ActivityMemcpyKind, CUpti_ActivityMemoryKind).
enum {
  SIMGPU_COPY_HTOD = 1,
  SIMGPU_COPY_DTOH = 2,
  SIMGPU_COPY_DTOD = 8,
  SIMGPU_COPY_HTOH = 9,
  SIMGPU_MEM_PAGEABLE = 1,
  SIMGPU_MEM_PINNED = 2,
  SIMGPU_MEM_DEVICE = 3,
};

// One completed device op, as the device thread observed it. Times are
// CLOCK_MONOTONIC nanoseconds.
typedef struct SimgpuOpRecord {
  uint32_t size;            // sizeof(SimgpuOpRecord)
  uint32_t kind;            // SimgpuOpKind
  const char* name;         // kernel name (valid for the process lifetime) or
                            // "HtoD"/"DtoH"/"DtoD"/"HtoH"/"memset"
  uint32_t device;
  uint32_t context_id;
  uint32_t stream_id;       // == cuStreamGetId of the stream
  uint32_t is_async;        // submitted by an *Async / launch entry point
  uint64_t correlation;     // the submitting call's correlation id
  uint64_t queued_ns;       // when the host call enqueued it
  uint64_t start_ns;
  uint64_t end_ns;
  uint64_t bytes;           // copies and sets; 0 for kernels
  uint32_t copy_kind;       // memcpy only
  uint32_t src_kind;        // memcpy only
  uint32_t dst_kind;        // memcpy: dst; memset: target memory kind
  uint32_t memset_value;
  int32_t grid[3];
  int32_t block[3];
  int32_t dynamic_shared_bytes;
  uint32_t reserved;
  // An op of the simulated NCCL (reported to CUPTI as a kernel; "nccl" in
  // SIMGPU_TRACE): its communicator id, collective sequence number and rank.
  uint32_t is_nccl;
  int32_t nccl_rank;
  uint64_t nccl_comm;
  uint64_t nccl_seq;
  // The host thread that enqueued it, and that thread's run-queue delay (ns
  // runnable but waiting for a CPU since it started, from the kernel's
  // /proc/thread-self/schedstat) read when it enqueued; ~0 when unknown or
  // when SIMGPU_TRACE is off. What the host really did, for the tests'
  // oracles: the delay between two of a thread's submissions is the time it
  // was preempted between them.
  uint32_t host_tid;
  uint32_t reserved2;
  uint64_t host_run_delay_ns;
} SimgpuOpRecord;

// Callbacks of the (single) observer. on_submit runs on the host thread inside
// every driver call that submits a device op, with the call's fresh correlation
// id, before the op is enqueued. on_complete runs on a device thread, in
// completion order, for every kernel, copy and set (never for event markers),
// with no simulator lock held.
typedef struct SimgpuObserver {
  uint32_t size;  // sizeof(SimgpuObserver)
  void (*on_submit)(uint64_t correlation, void* user);
  void (*on_complete)(const SimgpuOpRecord* op, void* user);
  void* user;
} SimgpuObserver;

// Exported by libcuda.so.1. Installs (or, with NULL, removes) the observer.
// Returns 0 on success.
typedef int (*SimgpuSetObserverFn)(const SimgpuObserver* observer);
int simgpu_set_observer(const SimgpuObserver* observer);

// Exported by libcuda.so.1. Writes every completed op to SIMGPU_TRACE now.
void simgpu_trace_flush(void);

// An op whose end is decided outside the device (the simulated NCCL's
// collectives: they end when every rank has reached them). Submitted like a
// kernel launch (a correlation id, the observer's on_submit, the launch
// latency, stream order); once the stream reaches it (its start, the rank's
// "arrival") the device thread calls on_start, then poll_end every poll_ns
// (sleeping in between, other streams keep running) until it returns a
// nonzero end time on CLOCK_MONOTONIC. Both run on the device thread with
// the device lock held: they must not block. release runs once the op is
// gone. The op's reported end is poll_end's answer (at least its start), even
// when the device thread noticed it up to poll_ns later; the stream's next
// op starts after the device thread noticed.
typedef struct SimgpuExternalOp {
  uint32_t size;       // sizeof(SimgpuExternalOp)
  uint32_t reserved;
  const char* name;    // kernel name, valid for the process lifetime
  uint64_t bytes;
  uint64_t poll_ns;    // 0: 20 us
  uint64_t comm;       // ground truth only
  uint64_t seq;
  int32_t rank;
  int32_t reserved2;
  void (*on_start)(void* user, uint64_t start_ns);
  uint64_t (*poll_end)(void* user, uint64_t now_ns);
  void (*release)(void* user);
  void* user;
} SimgpuExternalOp;

// Exported by libcuda.so.1. Enqueues an external op on `stream` (a CUstream;
// NULL is the current context's legacy stream). Returns a CUresult; on
// failure release has not been called and the caller keeps `user`.
typedef int (*SimgpuSubmitExternalFn)(void* stream, const SimgpuExternalOp* op);
int simgpu_submit_external(void* stream, const SimgpuExternalOp* op);

// Exported by libcuda.so.1, used by the simulated cuBLAS: every later launch
// of `function` (a CUfunction) takes `ns` (its GEMM's time from m·n·k).
// Returns a CUresult.
typedef int (*SimgpuSetFunctionDurationFn)(void* function, uint64_t ns);
int simgpu_set_function_duration(void* function, uint64_t ns);

// API records (CUPTI_ACTIVITY_KIND_RUNTIME). NVIDIA's CUPTI gives every
// traced runtime call a correlation id of its own, and the kernel, memcpy and
// memset records of the device work that call submits carry the same id
// (cupti_activity.h, CUpti_ActivityAPI::correlationId); the driver calls the
// runtime makes inside it submit under that id.
//
// Exported by libcuda.so.1. simgpu_api_begin opens an API call on the calling
// thread and returns its fresh correlation id: every op the thread submits
// until simgpu_api_end takes that id (instead of one of its own) and calls no
// on_submit. Calls do not nest (the runtime reports its outermost calls
// only): a begin inside an open call returns the open call's id.
typedef uint64_t (*SimgpuApiBeginFn)(void);
typedef void (*SimgpuApiEndFn)(uint64_t correlation);
uint64_t simgpu_api_begin(void);
void simgpu_api_end(uint64_t correlation);

// The observer of runtime API calls, called by libcudart.so.13 on the calling
// thread: enter before the call does anything (returns the call's correlation
// id), exit after it, with the call's CLOCK_MONOTONIC start and end and its
// cudaError_t. Only the outermost runtime call of a thread is reported.
typedef struct SimgpuApiObserver {
  uint32_t size;  // sizeof(SimgpuApiObserver)
  uint64_t (*enter)(uint32_t cbid);
  void (*exit)(uint32_t cbid, uint64_t correlation, uint64_t start_ns, uint64_t end_ns,
               uint32_t result);
} SimgpuApiObserver;

// Exported by libcudart.so.13. Installs (or, with NULL, removes) the API
// observer; the struct must stay valid for the process lifetime. Returns 0 on
// success.
typedef int (*SimgpuSetApiObserverFn)(const SimgpuApiObserver* observer);
int simgpu_cudart_set_api_observer(const SimgpuApiObserver* observer);

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // STALLSCOPE_TESTS_SIMGPU_SIMGPU_HOOKS_H_
