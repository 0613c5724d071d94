// Per-thread buffers, the writer thread and the trace file (see recorder.h).
#include "recorder.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>
#include <unwind.h>

#include <algorithm>
#include <deque>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "clock.h"
#include "cupti_source.h"
#include "cupti_stall.h"
#include "fast_unwind.h"
#include "hooks.h"
#include "nccl_state.h"
#include "process_info.h"
#include "python_frames.h"
#include "thread_cpu.h"
#include "trace_codec.h"
#include "ring_spec.h"
#include "step_regression.h"
#include "trace_pack.h"

namespace stallscope {

bool g_ticks_are_ns = false;
void* RealDlsym(void* handle, const char* name);  // hooks.cc: the libc dlsym, not ours

namespace recorder {

std::atomic<int> g_state{int(State::kOff)};
// Until start-up calibrates it every call samples; nothing records before.
uint64_t g_cpu_gap_ticks = 0;
// STALLSCOPE_CPU_SAMPLES=0: no CPU samples at all (each is two system calls:
// the thread's CPU clock and its schedstat), for the lowest overhead; the
// analyzer then splits no host gap on-CPU or preempted.
bool g_cpu_samples = true;
constinit thread_local ThreadState t_self __attribute__((tls_model("initial-exec")));

namespace {

using trace::ChunkType;

int g_fd = -1;
uint32_t g_pid = 0;

// Guards the queues, free list, string and stack tables and pending records.
pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
pthread_cond_t g_cv = PTHREAD_COND_INITIALIZER;
// Serializes writes to the file (writer thread versus final flush).
pthread_mutex_t g_write_mu = PTHREAD_MUTEX_INITIALIZER;

ThreadBuffer* g_full_head = nullptr;
ThreadBuffer* g_full_tail = nullptr;
ThreadBuffer* g_free = nullptr;
size_t g_buffers_allocated = 0;
size_t g_buffer_budget = 1024;  // buffers; STALLSCOPE_BUFFER_MB
ThreadState* g_live = nullptr;
std::atomic<uint32_t> g_next_thread_index{1};
pthread_key_t g_thread_key;
bool g_writer_started = false;
bool g_stop_writer = false;
// Read without the lock by the blocking-call path that starts the writer.
std::atomic<bool> g_writer_running{false};
// No free buffer and the budget spent: threads without a buffer drop their
// records without taking the lock until the writer returns buffers.
std::atomic<bool> g_exhausted{false};
std::atomic<uint64_t> g_dropped_device{0};  // device records dropped over the budget
bool g_initialized = false;      // Initialize() ran (once per process image)
bool g_handlers_installed = false;  // atexit/pthread_atfork registered
bool g_is_fork_child = false;    // this process is a fork of a recording one
std::atomic<bool> g_shutdown_done{false};

std::atomic<uint64_t> g_diag[trace::kDiagnosticSlots];
uint64_t g_diag_written[trace::kDiagnosticSlots];  // counts already in the file; under g_write_mu
// The file's length up to its last complete chunk, and the header to write
// first when it could not be (both under g_write_mu). A write that fails
// part-way (a full disk) is cut back to g_file_end, so the file never holds
// a torn chunk before later ones; its records are counted as lost.
uint64_t g_file_end = 0;
trace::FileHeader g_header{};
trace::RankRecord g_rank{};
std::atomic<int> g_write_errno{0};

StallTracker* g_stall = nullptr;  // under g_write_mu

// Pending variable-size data, written by the next drain.
struct Pending {
  std::vector<std::pair<uint32_t, std::string>> strings;
  struct Stack {
    uint32_t id;
    trace::StackKind kind;
    std::vector<uint64_t> words;
  };
  std::vector<Stack> stacks;
  std::vector<trace::DeviceRecord> device;
  std::vector<trace::CorrelationRecord> correlations;
  std::vector<std::pair<uint32_t, trace::NvtxRecord>> nvtx;  // (tid, record)
  std::vector<trace::ThreadRecord> threads;
  std::vector<std::pair<uint32_t, trace::CpuSchedRecord>> cpu;  // (tid, sample)
  std::vector<trace::NcclRecord> nccl;
  std::vector<trace::DeviceTimingRecord> timing;
  // Per recorder thread, the highest external id of correlation records
  // dropped over the budget: the writer still acknowledges them.
  std::vector<uint64_t> dropped_acks;

  // Empty, keeping every vector's capacity.
  void Clear() {
    strings.clear();
    stacks.clear();
    device.clear();
    correlations.clear();
    nvtx.clear();
    threads.clear();
    cpu.clear();
    nccl.clear();
    timing.clear();
    dropped_acks.clear();
  }
};
Pending* g_pending = nullptr;
// The writer's side of g_pending (under g_write_mu, empty between drains):
// the two swap at each drain and the drained one is cleared keeping its
// capacity, so the vectors stop growing once they hold a drain's worth
// rather than being grown from empty every drain (which left the writer's
// malloc arena fragmented: megabytes of the job's peak RSS).
Pending* g_drained = nullptr;
// Interned strings (under g_mu). A transient one (an NVTX message: a step's
// own name, "step 1234", is new every step) records the drain epoch it was
// last interned in; in ring mode the ones no held chunk can name any more
// are forgotten (CompactRingStrings), so the table and the ring's string
// chunks follow the window, not the run; writing the whole trace, those
// whose records are all written (ForgetWrittenStrings).
struct InternedString {
  uint32_t id;
  bool transient;
  uint64_t used;  // g_epoch at the latest interning
};
std::unordered_map<std::string, InternedString>* g_strings = nullptr;
// Drains so far (under g_mu): what is queued in epoch e is written by the
// drain that ends it, or, queued after that drain's snapshot, the next.
uint64_t g_epoch = 0;
// Transient strings added since the last compaction (under g_mu).
size_t g_transient_added = 0;
// Compact the ring's strings (forget the written ones) after this many new
// transient ones.
inline constexpr size_t kTransientCompactEvery = 4096;
std::unordered_map<uint64_t, uint32_t>* g_stacks = nullptr;
uint32_t g_next_string = 1;
uint32_t g_next_stack = 1;
unsigned long long g_module_generation = ~0ull;


uint32_t GetTid() { return uint32_t(syscall(SYS_gettid)); }

trace::ClockRecord ReadClockPair() {
  // Bracket the tick read by two monotonic reads; keep the tightest of three.
  trace::ClockRecord best{};
  uint64_t best_window = ~0ull;
  for (int i = 0; i < 3; ++i) {
    uint64_t m0 = MonoNs();
    uint64_t t = Ticks();
    uint64_t m1 = MonoNs();
    if (m1 - m0 < best_window) {
      best_window = m1 - m0;
      best = {t, m0 + (m1 - m0) / 2, 0};
    }
  }
  best.realtime_ns = RealtimeNs();
  return best;
}

bool WriteAll(const iovec* iov, int n) {
  // A chunk goes out in one writev; short writes are continued.
  std::vector<iovec> v(iov, iov + n);
  size_t idx = 0;
  while (idx < v.size()) {
    ssize_t w = writev(g_fd, v.data() + idx, int(v.size() - idx));
    if (w < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    size_t left = size_t(w);
    while (idx < v.size() && left >= v[idx].iov_len) left -= v[idx++].iov_len;
    if (idx < v.size()) {
      v[idx].iov_base = static_cast<char*>(v[idx].iov_base) + left;
      v[idx].iov_len -= left;
    }
  }
  return true;
}

// Cuts the file back to its last complete chunk after a failed write.
void CutBack(int err) {
  g_write_errno.store(err != 0 ? err : EIO);
  if (ftruncate(g_fd, off_t(g_file_end)) != 0 || lseek(g_fd, off_t(g_file_end), SEEK_SET) < 0) {
    g_diag[int(trace::DiagnosticId::kInternalErrors)]++;
  }
}

bool WriteApiTable();
bool WriteChunk(ChunkType type, uint32_t tid, uint32_t count, const void* payload, size_t bytes,
                uint16_t encoding = trace::kEncodingRaw);
// A chunk of fixed-size records, typed by the codec's table.
template <ChunkType kType>
bool WriteRecords(uint32_t tid, const typename trace::ChunkRecord<kType>::type* records,
                  size_t count) {
  return WriteChunk(kType, tid, uint32_t(count), records, count * sizeof *records);
}

// Packed chunks (docs/trace-format.md, "Packed chunks"): kApi, kDevice and
// kCorrelation records packed by the writer (STALLSCOPE_TRACE_PACK=0 writes
// them raw), then compressed with zstd when libzstd.so.1 loads (by dlopen,
// in the writer thread: the library's NEEDED list does not grow;
// STALLSCOPE_TRACE_ZSTD=0 turns it off, 1 to 19 set the level, default 3).
bool g_pack = true;
// Native stacks by the threads' cached rules (fast_unwind.h), or with
// STALLSCOPE_UNWIND=libgcc by libgcc's unwinder; =check walks both, writes
// libgcc's and counts the stacks compared and those that differ.
enum class Unwind { kRules, kLibgcc, kCheck };
Unwind g_unwind = Unwind::kRules;
int g_zstd_level = 3;
// One compression context, made once and reused by every chunk: ZSTD_compress
// makes and frees a context of about a megabyte per call, and glibc keeps
// what the frees give back, which added 7 MiB to a job's peak RSS in the
// robustness soak (16 threads, 10 M launches).
struct Zstd {
  size_t (*compress)(void*, void*, size_t, const void*, size_t, int);  // ZSTD_compressCCtx
  size_t (*bound)(size_t);
  unsigned (*is_error)(size_t);
  void* cctx;
};
std::atomic<const Zstd*> g_zstd{nullptr};
// The writer's scratch (under g_write_mu).
trace::ApiPacker* g_api_packer;
trace::DevicePacker* g_device_packer;
std::vector<unsigned char>* g_packed;
std::vector<unsigned char>* g_compressed;

void LoadZstd() {
  static bool tried = false;
  if (tried || g_zstd_level <= 0) return;
  tried = true;
  void* h = dlopen("libzstd.so.1", RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) return;
  static Zstd z;
  auto create = reinterpret_cast<void* (*)()>(RealDlsym(h, "ZSTD_createCCtx"));
  z.compress = reinterpret_cast<decltype(z.compress)>(RealDlsym(h, "ZSTD_compressCCtx"));
  z.bound = reinterpret_cast<decltype(z.bound)>(RealDlsym(h, "ZSTD_compressBound"));
  z.is_error = reinterpret_cast<decltype(z.is_error)>(RealDlsym(h, "ZSTD_isError"));
  if (create == nullptr || z.compress == nullptr || z.bound == nullptr || z.is_error == nullptr) return;
  z.cctx = create();
  if (z.cctx != nullptr) g_zstd.store(&z);
}

// `payload` compressed into g_compressed (its sizes, the zstd frame, padded
// to 8), when zstd loaded, packing is on, the payload is worth it (256
// bytes or more) and compression makes it smaller (under g_write_mu).
bool Compress(const void* payload, size_t bytes) {
  const Zstd* z = g_zstd.load(std::memory_order_acquire);
  if (z == nullptr || !g_pack || bytes < 256) return false;
  std::vector<unsigned char>& c = *g_compressed;
  c.resize(8 + z->bound(bytes));
  const size_t frame = z->compress(z->cctx, c.data() + 8, c.size() - 8, payload, bytes, g_zstd_level);
  if (z->is_error(frame) || trace::PadTo8(8 + frame) >= bytes) return false;
  const uint32_t sizes[2] = {uint32_t(bytes), uint32_t(frame)};
  memcpy(c.data(), sizes, sizeof sizes);
  c.resize(8 + frame);
  trace::PadEntry(&c);
  return true;
}

struct Ring;
extern Ring* g_ring;

// The chunks a ring holds for its window (and pushes out) that are written
// compressed: records, CPU samples and NVTX events. The rest of what it
// holds is kept.
bool RingWindowed(ChunkType type) {
  return type == ChunkType::kApi || type == ChunkType::kDevice || type == ChunkType::kCorrelation ||
         type == ChunkType::kCpuSched || type == ChunkType::kNvtx;
}

// A chunk compressed when Compress can; else as it is. In ring mode the
// ring holds its records, CPU samples and NVTX events as they are, and a
// dump compresses what it writes: most of them are pushed out unread, and
// compressing them would cost the job's host CPU for nothing.
bool WriteCompressed(ChunkType type, uint32_t tid, uint32_t count, const void* payload, size_t bytes,
                     uint16_t encoding = trace::kEncodingRaw) {
  if ((g_ring != nullptr && RingWindowed(type)) || !Compress(payload, bytes)) {
    return WriteChunk(type, tid, count, payload, bytes, encoding);
  }
  const std::vector<unsigned char>& c = *g_compressed;
  return WriteChunk(type, tid, count, c.data(), c.size(), encoding | trace::kEncodingZstd);
}

// A chunk of kApi, kDevice or kCorrelation records, packed (and compressed)
// unless packing is off.
template <ChunkType kType>
bool WritePackedRecords(uint32_t tid, const typename trace::ChunkRecord<kType>::type* records,
                        size_t count) {
  if (!g_pack || count == 0) return WriteRecords<kType>(tid, records, count);
  std::vector<unsigned char>& out = *g_packed;
  out.clear();
  if constexpr (kType == ChunkType::kApi) {
    g_api_packer->Pack(&out, records, count);
  } else if constexpr (kType == ChunkType::kDevice) {
    g_device_packer->Pack(&out, records, count);
  } else {
    static_assert(kType == ChunkType::kCorrelation);
    if (!trace::Packable(records, count)) return WriteRecords<kType>(tid, records, count);
    trace::PackCorrelation(&out, records, count);
  }
  trace::PadEntry(&out);
  return WriteCompressed(kType, tid, uint32_t(count), out.data(), out.size(), trace::kEncodingPacked);
}

bool g_writing_preamble = false;  // under g_write_mu (or start-up)

// Writes the file's preamble (header, API table, rank) when the file does
// not hold it yet: it could not be written at start-up (a full disk), and
// without it no later chunk can be read. All of it or none of it: false
// (and the file cut back to empty) when it still cannot be written.
bool EnsurePreamble() {
  if (g_file_end != 0 || g_writing_preamble) return true;
  iovec iov{&g_header, sizeof g_header};
  if (!WriteAll(&iov, 1)) {
    CutBack(errno);
    return false;
  }
  g_file_end = sizeof g_header;
  g_writing_preamble = true;
  const bool ok = WriteApiTable() &&
                  (g_rank.rank < 0 || WriteRecords<ChunkType::kRank>(0, &g_rank, 1));
  g_writing_preamble = false;
  if (!ok) {
    g_file_end = 0;
    CutBack(errno);
    return false;
  }
  return true;
}

// ---- Flight recorder (STALLSCOPE_RING; docs/robustness.md, "Flight
// recorder") ----
// Chunks go to memory instead of the file: the ones every reading needs
// (the API table, rank, thread names, strings, stacks, the latest module
// map, the first clock pair, diagnostics) are kept; the rest are held while
// they are younger than `limit_ns` and fit in `limit_bytes`. A dump writes an
// ordinary trace file of both, in order, and an end marker.
struct Ring {
  uint64_t limit_ns = 0;
  size_t limit_bytes = 0;
  std::vector<std::string> kept;
  std::string modules;  // the latest module map chunk
  bool have_clock = false;
  struct Held {
    uint64_t mono_ns;
    uint64_t epoch;
    std::string bytes;
  };
  std::deque<Held> held;  // each with the epoch of the drain that wrote it
  size_t held_bytes = 0;
  uint64_t dumps = 0;
  // The newest device-timing chunk pushed out of `held`: a dump starts with
  // it, so the state of device timing at the window's start is known.
  std::string timing_before;
};
Ring* g_ring = nullptr;  // set at start-up in ring mode; its contents under g_write_mu
// The time the chunks being written now stand for (under g_write_mu): when
// the drain took its records from the threads, or, for a dump at exit or by
// stallscope_dump(), when it was asked for, before the CUPTI flush. A ring
// chunk's age is counted from it, so the time stallscope's own flush and
// drain take does not push the job's last seconds out of the window.
uint64_t g_ring_as_of = 0;
uint64_t g_ring_epoch = 0;  // the epoch being written (under g_write_mu)
std::atomic<bool> g_dump_requested{false};
bool g_ring_dump_at_exit = true;
// The step-time regression trigger (STALLSCOPE_RING_REGRESSION; ring mode
// only): the detector belongs to the first thread that begins a step.
trace::RegressionDetector* g_regression = nullptr;
std::atomic<uint32_t> g_step_tid{0};

// Device timing in sampled windows (STALLSCOPE_DEVICE_SAMPLE=N, N > 2; any
// mode): of every N steps the watched thread begins, CUPTI's device kinds
// are on for two: the reported step (its index a multiple of N) and the one
// before it, whose device work tells when the reported step's device time
// begins. Each turn is a kDeviceTiming record. The state is touched by the
// watched thread only.
uint32_t g_sample_every = 0;  // 0: continuous
std::atomic<uint64_t> g_sample_steps{0};  // step begins seen (read at exit)
bool g_timing_on = true;

void SampleStep(uint64_t ticks) {
  const uint64_t phase = g_sample_steps.fetch_add(1, std::memory_order_relaxed) % g_sample_every;
  const bool want = phase == 0 || phase == g_sample_every - 1;
  if (want == g_timing_on) return;
  if (!cupti::SetDeviceTiming(want)) {
    CountDiagnostic(trace::DiagnosticId::kDeviceTimingRefused);
    return;
  }
  g_timing_on = want;
  // The window is the time timing was surely on: from after the kinds were
  // turned on, to the step's begin before they are turned off.
  const trace::DeviceTimingRecord r{want ? Ticks() : ticks, want ? 1u : 0u, g_sample_every};
  pthread_mutex_lock(&g_mu);
  g_pending->timing.push_back(r);
  pthread_mutex_unlock(&g_mu);
}

void RingAppend(ChunkType type, const trace::ChunkHeader& h, const void* payload, size_t bytes) {
  std::string chunk(reinterpret_cast<const char*>(&h), sizeof h);
  chunk.append(static_cast<const char*>(payload), bytes);
  Ring& r = *g_ring;
  switch (type) {
    case ChunkType::kEnd: return;  // a dump writes its own
    case ChunkType::kModule: r.modules = std::move(chunk); return;
    case ChunkType::kClock:
      if (r.have_clock) break;
      r.have_clock = true;
      [[fallthrough]];
    case ChunkType::kApiTable:
    case ChunkType::kRank:
    case ChunkType::kThread:
    case ChunkType::kString:
    case ChunkType::kStack:
    case ChunkType::kDiagnostic:
      r.kept.push_back(std::move(chunk));
      return;
    default: break;
  }
  const uint64_t now = g_ring_as_of != 0 ? g_ring_as_of : MonoNs();
  r.held_bytes += chunk.size();
  r.held.push_back({now, g_ring_epoch, std::move(chunk)});
  while (!r.held.empty() && ((r.limit_bytes != 0 && r.held_bytes > r.limit_bytes) ||
                             (r.limit_ns != 0 && now > r.held.front().mono_ns + r.limit_ns))) {
    r.held_bytes -= r.held.front().bytes.size();
    trace::ChunkHeader evicted;
    memcpy(&evicted, r.held.front().bytes.data(), sizeof evicted);
    if (evicted.type == uint16_t(ChunkType::kDeviceTiming)) r.timing_before = std::move(r.held.front().bytes);
    r.held.pop_front();
  }
}

bool WriteFd(int fd, const void* p, size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    const ssize_t w = write(fd, c, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    c += w;
    n -= size_t(w);
  }
  return true;
}

// A chunk the ring holds, compressed as WriteCompressed would have written
// it, in place: a dump compresses each chunk once, and the ring keeps the
// smaller chunk for the next dump (under g_write_mu).
void CompressHeld(Ring* r, Ring::Held* held) {
  trace::ChunkHeader h;
  memcpy(&h, held->bytes.data(), sizeof h);
  const char* payload = held->bytes.data() + sizeof h;
  const size_t bytes = held->bytes.size() - sizeof h;
  if (!RingWindowed(ChunkType(h.type)) || (h.encoding & trace::kEncodingZstd) != 0 || !Compress(payload, bytes)) {
    return;
  }
  const std::vector<unsigned char>& c = *g_compressed;
  const trace::ChunkHeader z = trace::MakeChunkHeader(trace::kVersion, ChunkType(h.type), h.tid, h.count, c.data(),
                                                      c.size(), uint16_t(h.encoding | trace::kEncodingZstd));
  std::string chunk(reinterpret_cast<const char*>(&z), sizeof z);
  chunk.append(reinterpret_cast<const char*>(c.data()), c.size());
  r->held_bytes -= held->bytes.size() - chunk.size();
  held->bytes = std::move(chunk);
}

// Writes what the ring holds to a new trace file (under g_write_mu). True
// when the whole file was written.
bool DumpRingLocked() {
  const int fd = OpenTraceFile(g_rank, g_pid);
  if (fd < 0) {
    g_diag[int(trace::DiagnosticId::kTraceWriteFailed)]++;
    return false;
  }
  Ring& r = *g_ring;
  bool ok = WriteFd(fd, &g_header, sizeof g_header);
  for (const std::string& c : r.kept) ok = ok && WriteFd(fd, c.data(), c.size());
  if (!r.modules.empty()) ok = ok && WriteFd(fd, r.modules.data(), r.modules.size());
  if (!r.timing_before.empty()) ok = ok && WriteFd(fd, r.timing_before.data(), r.timing_before.size());
  for (Ring::Held& c : r.held) {
    CompressHeld(&r, &c);
    ok = ok && WriteFd(fd, c.bytes.data(), c.bytes.size());
  }
  const trace::ChunkHeader end = trace::MakeChunkHeader(trace::kVersion, ChunkType::kEnd, 0, 0, nullptr, 0);
  ok = ok && WriteFd(fd, &end, sizeof end);
  close(fd);
  ++g_ring->dumps;
  return ok;
}

// Parses STALLSCOPE_RING (common/ring_spec.h). False when it is neither
// SECONDS nor SIZE.
bool ParseRing(const char* spec, Ring* r) {
  trace::RingSpec w;
  if (!trace::ParseRingSpec(spec, &w)) return false;
  r->limit_ns = w.window_ns;
  r->limit_bytes = size_t(w.bytes);
  return true;
}

// The dump signal (SIGUSR2 unless STALLSCOPE_RING_SIGNAL says otherwise; 0:
// none): it asks the writer for a dump, then runs the job's own handler for
// the signal, if it had one. A job that installs its own handler later
// replaces this one (its dumps then come from stallscope_dump()).
int g_ring_signal = SIGUSR2;
struct sigaction g_job_action;
void OnDumpSignal(int sig, siginfo_t* info, void* context) {
  g_dump_requested.store(true, std::memory_order_relaxed);
  const struct sigaction& a = g_job_action;
  if ((a.sa_flags & SA_SIGINFO) != 0) {
    if (a.sa_sigaction != nullptr) a.sa_sigaction(sig, info, context);
  } else if (a.sa_handler != SIG_DFL && a.sa_handler != SIG_IGN && a.sa_handler != nullptr) {
    a.sa_handler(sig);
  }
}

void InstallDumpSignal() {
  if (g_ring_signal <= 0) return;
  struct sigaction current{};
  // A fork child inherits the handler: the job's stays the one saved.
  if (sigaction(g_ring_signal, nullptr, &current) == 0 && (current.sa_flags & SA_SIGINFO) != 0 &&
      current.sa_sigaction == OnDumpSignal) {
    return;
  }
  struct sigaction sa{};
  sa.sa_sigaction = OnDumpSignal;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  sigaction(g_ring_signal, &sa, &g_job_action);
}

// Writes one chunk whole, or nothing: true when it reached the file (in
// ring mode, the ring).
// `bytes` is a multiple of 8 (the codec pads every entry; records are sized
// in 8s).
bool WriteChunk(ChunkType type, uint32_t tid, uint32_t count, const void* payload, size_t bytes,
                uint16_t encoding) {
  if (g_ring != nullptr) {
    if (bytes % 8 != 0) return false;
    RingAppend(type, trace::MakeChunkHeader(trace::kVersion, type, tid, count, payload, bytes, encoding),
               payload, bytes);
    return true;
  }
  if (g_fd < 0) return false;
  auto lost = [&](int err) {
    g_diag[int(trace::DiagnosticId::kTraceWriteFailed)] += count;
    if (type == ChunkType::kApi) g_diag[int(trace::DiagnosticId::kTraceWriteFailedCalls)] += count;
    CutBack(err);
    return false;
  };
  if (bytes % 8 != 0) {  // not the disk's doing: an encoder that did not pad
    g_diag[int(trace::DiagnosticId::kInternalErrors)]++;
    return false;
  }
  if (!EnsurePreamble()) return lost(errno);
  trace::ChunkHeader h = trace::MakeChunkHeader(trace::kVersion, type, tid, count, payload, bytes, encoding);
  iovec iov[2] = {{&h, sizeof h}, {const_cast<void*>(payload), bytes}};
  if (!WriteAll(iov, bytes == 0 ? 1 : 2)) return lost(errno);
  g_file_end += sizeof h + bytes;
  return true;
}

bool WriteApiTable() {
  size_t n = 0;
  const HookInfo* hooks = Hooks(&n);
  std::vector<unsigned char> out;
  for (size_t i = 0; i < n; ++i) {
    trace::EncodeApi(&out, uint16_t(i), hooks[i].category, hooks[i].flags, hooks[i].name);
  }
  return WriteChunk(ChunkType::kApiTable, 0, uint32_t(n), out.data(), out.size());
}

void WriteModulesIfChanged(bool force) {
  // The counts first: a scan copies every module's path and build id (and
  // reads /proc/self/exe), at each drain.
  if (!force && ModuleGeneration() == g_module_generation) return;
  ModuleScan scan = ScanModules();
  g_module_generation = scan.generation;
  WriteCompressed(ChunkType::kModule, 0, scan.count, scan.out.data(), scan.out.size());
}

// Judges whether CUPTI's records stopped arriving; the verdicts become the
// kCuptiRecordsStopped and kNoDeviceRecordsAtExit counts.
void EvaluateStall(bool final) {
  const StallTracker::Verdict v = g_stall->Evaluate(final, g_dropped_device.load(std::memory_order_relaxed));
  if (v.records_stopped) g_diag[int(trace::DiagnosticId::kCuptiRecordsStopped)].store(v.records_stopped);
  if (v.missing_at_exit) g_diag[int(trace::DiagnosticId::kNoDeviceRecordsAtExit)].store(v.missing_at_exit);
}

// Writes records [b->flushed, n) of a buffer and moves its watermark. Only
// the writer (under g_write_mu) reads or moves the watermark.
void WriteBuffer(ThreadBuffer* b, uint32_t n, bool track) {
  if (n <= b->flushed) return;
  const trace::ApiRecord* first = b->records + b->flushed;
  uint32_t count = n - b->flushed;
  WritePackedRecords<ChunkType::kApi>(b->tid, first, count);
  if (track)
    for (uint32_t i = 0; i < count; ++i)
      if (first[i].correlation && !(first[i].flags & trace::kRecordUntimed))
        g_stall->Submit(first[i].correlation, first[i].result == 0);
  b->flushed = n;
}

struct LiveSlice {
  ThreadBuffer* buffer;
  uint32_t count;
};

// Ring mode (under g_write_mu): once kTransientCompactEvery transient
// strings came since the last time, forgets those that no chunk the ring
// holds can name, and replaces the ring's string chunks with one holding
// the rest. A transient string last interned in epoch e is named by records
// drained in e or e + 1 (a record is queued after its name, under a second
// hold of g_mu); it goes once the oldest held chunk is of a later epoch.
// What is still queued is written by the next drain, not here.
void CompactRingStrings() {
  Ring& r = *g_ring;
  pthread_mutex_lock(&g_mu);
  if (g_transient_added < kTransientCompactEvery) {
    pthread_mutex_unlock(&g_mu);
    return;
  }
  g_transient_added = 0;
  const uint64_t oldest = r.held.empty() ? g_epoch : r.held.front().epoch;
  size_t forgotten = 0;
  for (auto it = g_strings->begin(); it != g_strings->end();) {
    const InternedString& e = it->second;
    if (e.transient && e.used + 1 < oldest) {
      it = g_strings->erase(it);
      ++forgotten;
    } else {
      ++it;
    }
  }
  if (forgotten == 0) {  // the chunks held already name exactly these
    pthread_mutex_unlock(&g_mu);
    return;
  }
  std::vector<uint32_t> queued;
  for (const auto& [id, text] : g_pending->strings) queued.push_back(id);
  std::sort(queued.begin(), queued.end());
  std::vector<unsigned char> out;
  uint32_t count = 0;
  for (const auto& [text, e] : *g_strings) {
    if (std::binary_search(queued.begin(), queued.end(), e.id)) continue;
    trace::EncodeString(&out, e.id, text);
    ++count;
  }
  pthread_mutex_unlock(&g_mu);
  std::erase_if(r.kept, [](const std::string& c) {
    trace::ChunkHeader h;
    memcpy(&h, c.data(), sizeof h);
    return h.type == uint16_t(ChunkType::kString);
  });
  if (count > 0) WriteCompressed(ChunkType::kString, 0, count, out.data(), out.size());
}

// Whole-trace mode (under g_write_mu, after a drain wrote epoch `written`):
// once kTransientCompactEvery transient strings came since the last time,
// forgets those whose records are all in the file (named in epoch e, they
// are written by the drain of e or e + 1; one drain more of margin). The
// file keeps their chunks; a name that comes back gets a new id. So the
// table follows the names in use, not every step's name of the run.
void ForgetWrittenStrings(uint64_t written) {
  pthread_mutex_lock(&g_mu);
  if (g_transient_added >= kTransientCompactEvery) {
    g_transient_added = 0;
    std::erase_if(*g_strings, [written](const auto& kv) {
      return kv.second.transient && kv.second.used + 2 <= written;
    });
  }
  pthread_mutex_unlock(&g_mu);
}

// Writes everything pending: full buffers, the published part of every live
// thread's buffer, strings, stacks, device records, diagnostics counted since
// the last drain. `final` adds the module map and the end marker.
// `after_cupti_flush`: a forced CUPTI flush completed since the previous
// drain, so the stall detector may judge what that drain wrote. Returns true
// when the stall detector suspects that CUPTI records stopped arriving.
// `as_of_ns`: the time the drain stands for in the ring (0: now).
bool Drain(bool final, bool after_cupti_flush = false, uint64_t as_of_ns = 0) {
  pthread_mutex_lock(&g_write_mu);
  pthread_mutex_lock(&g_mu);
  // Never back: a writer's drain may come between a trigger and its own drain.
  g_ring_as_of = std::max(g_ring_as_of, as_of_ns != 0 ? as_of_ns : MonoNs());
  // Full queue and live buffers in one snapshot: a buffer handed off after it
  // is written by the next drain, and its successor is not yet in g_live's
  // view, so a thread's records stay in order in the file.
  ThreadBuffer* full = g_full_head;
  g_full_head = g_full_tail = nullptr;
  Pending& pending = *g_drained;  // cleared below, before g_write_mu is released
  std::swap(pending, *g_pending);
  g_ring_epoch = g_epoch++;
  std::vector<LiveSlice> live;
  for (ThreadState* ts = g_live; ts; ts = ts->next_live)
    if (ThreadBuffer* b = __atomic_load_n(&ts->buffer, __ATOMIC_ACQUIRE))
      live.push_back({b, b->count.load(std::memory_order_acquire)});
  pthread_mutex_unlock(&g_mu);

  bool track = cupti::Active();
  if (track) {
    for (const auto& c : pending.correlations) {
      g_stall->Ack(c.external);
      g_stall->Acknowledged(c.correlation);
    }
    for (uint64_t external : pending.dropped_acks) g_stall->Ack(external);
    for (const auto& d : pending.device) g_stall->DeviceRecord(d.correlation);
    if (after_cupti_flush && !final) EvaluateStall(false);
  }

  // Thread names, strings and stacks are queued once (interned): when their
  // chunk cannot be written (a full disk) they go back to the queue for the
  // next drain, so what is written later can still name them.
  auto requeue = [](auto& items, auto Pending::*queue) {
    pthread_mutex_lock(&g_mu);
    auto& q = g_pending->*queue;
    q.insert(q.begin(), std::make_move_iterator(items.begin()), std::make_move_iterator(items.end()));
    pthread_mutex_unlock(&g_mu);
  };
  // Strings first: records written after may refer to them.
  if (!pending.threads.empty() &&
      !WriteRecords<ChunkType::kThread>(0, pending.threads.data(), pending.threads.size())) {
    requeue(pending.threads, &Pending::threads);
  }
  if (!pending.strings.empty()) {
    std::vector<unsigned char> out;
    for (auto& [id, s] : pending.strings) trace::EncodeString(&out, id, s);
    if (!WriteCompressed(ChunkType::kString, 0, uint32_t(pending.strings.size()), out.data(), out.size()))
      requeue(pending.strings, &Pending::strings);
  }
  if (!pending.stacks.empty()) {
    std::vector<unsigned char> out;
    for (auto& st : pending.stacks)
      trace::EncodeStack(&out, st.id, st.kind, st.words.data(), st.words.size());
    if (!WriteCompressed(ChunkType::kStack, 0, uint32_t(pending.stacks.size()), out.data(), out.size()))
      requeue(pending.stacks, &Pending::stacks);
  }
  trace::ClockRecord clock = ReadClockPair();
  WriteRecords<ChunkType::kClock>(0, &clock, 1);

  ThreadBuffer* done = nullptr;
  while (full) {
    ThreadBuffer* b = full;
    full = b->next;
    WriteBuffer(b, b->count.load(std::memory_order_acquire), track);
    b->count.store(0, std::memory_order_relaxed);
    b->flushed = 0;
    b->next = done;
    done = b;
  }
  for (const LiveSlice& s : live) WriteBuffer(s.buffer, s.count, track);
  if (!pending.nccl.empty())
    WriteRecords<ChunkType::kNccl>(0, pending.nccl.data(), pending.nccl.size());
  if (!pending.timing.empty())
    WriteRecords<ChunkType::kDeviceTiming>(0, pending.timing.data(), pending.timing.size());
  if (!pending.cpu.empty()) {
    // One kCpuSched chunk per thread, samples in the order they were taken.
    std::stable_sort(pending.cpu.begin(), pending.cpu.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    std::vector<trace::CpuSchedRecord> recs;
    for (size_t i = 0; i < pending.cpu.size();) {
      uint32_t tid = pending.cpu[i].first;
      recs.clear();
      for (; i < pending.cpu.size() && pending.cpu[i].first == tid; ++i)
        recs.push_back(pending.cpu[i].second);
      WriteCompressed(ChunkType::kCpuSched, tid, uint32_t(recs.size()), recs.data(), recs.size() * sizeof recs[0]);
    }
  }
  if (!pending.device.empty())
    WritePackedRecords<ChunkType::kDevice>(0, pending.device.data(), pending.device.size());
  if (!pending.correlations.empty())
    WritePackedRecords<ChunkType::kCorrelation>(0, pending.correlations.data(),
                                                pending.correlations.size());
  if (!pending.nvtx.empty()) {
    // One chunk per thread, in arrival order.
    std::vector<trace::NvtxRecord> recs;
    std::vector<bool> used(pending.nvtx.size(), false);
    for (size_t i = 0; i < pending.nvtx.size(); ++i) {
      if (used[i]) continue;
      uint32_t tid = pending.nvtx[i].first;
      recs.clear();
      for (size_t j = i; j < pending.nvtx.size(); ++j)
        if (!used[j] && pending.nvtx[j].first == tid) {
          used[j] = true;
          recs.push_back(pending.nvtx[j].second);
        }
      WriteCompressed(ChunkType::kNvtx, tid, uint32_t(recs.size()), recs.data(), recs.size() * sizeof recs[0]);
    }
  }
  WriteModulesIfChanged(final);
  if (track && final) EvaluateStall(true);
  bool suspect = track && g_stall->Suspect();
  // Diagnostics as deltas since the previous drain (the reader adds them up),
  // so a killed job's file still says what was dropped before its last drain.
  // A delta is committed only once its chunk is in the file: what a full
  // disk kept out is written at the next drain that succeeds.
  std::vector<trace::DiagnosticRecord> diags;
  uint64_t counts[trace::kDiagnosticSlots] = {};
  for (uint32_t i = 1; i < trace::kDiagnosticSlots; ++i) {
    counts[i] = g_diag[i].load();
    if (counts[i] > g_diag_written[i]) {
      const uint32_t detail = i == uint32_t(trace::DiagnosticId::kTraceWriteFailed)
                                  ? uint32_t(g_write_errno.load())
                                  : 0;
      diags.push_back({i, detail, counts[i] - g_diag_written[i]});
    }
  }
  if (!diags.empty() &&
      WriteRecords<ChunkType::kDiagnostic>(0, diags.data(), diags.size())) {
    for (const trace::DiagnosticRecord& d : diags) g_diag_written[d.id] = counts[d.id];
  }
  if (final) WriteChunk(ChunkType::kEnd, 0, 0, nullptr, 0);
  pending.Clear();
  if (g_ring != nullptr) {
    CompactRingStrings();
  } else {
    ForgetWrittenStrings(g_ring_epoch);
  }
  pthread_mutex_unlock(&g_write_mu);

  if (done) {
    pthread_mutex_lock(&g_mu);
    while (done) {
      ThreadBuffer* b = done;
      done = b->next;
      b->next = g_free;
      g_free = b;
    }
    g_exhausted.store(false, std::memory_order_relaxed);
    pthread_mutex_unlock(&g_mu);
  }
  return suspect;
}

void* WriterMain(void*) {
  pthread_setname_np(pthread_self(), "stallscope-wr");
  t_self.in_hook = true;  // the writer never records itself
  pthread_mutex_lock(&g_write_mu);
  LoadZstd();
  pthread_mutex_unlock(&g_write_mu);
  uint64_t last_forced_flush = 0;
  for (;;) {
    pthread_mutex_lock(&g_mu);
    if (!g_stop_writer && g_full_head == nullptr) {
      timespec deadline;
      clock_gettime(CLOCK_REALTIME, &deadline);
      deadline.tv_nsec += 200 * 1000 * 1000;
      if (deadline.tv_nsec >= 1000000000) {
        deadline.tv_sec++;
        deadline.tv_nsec -= 1000000000;
      }
      pthread_cond_timedwait(&g_cv, &g_mu, &deadline);
    }
    bool stop = g_stop_writer;
    pthread_mutex_unlock(&g_mu);
    if (stop || g_state.load() != int(State::kOn)) return nullptr;
    if (g_ring != nullptr && g_dump_requested.exchange(false)) {
      cupti::Flush();  // the device records up to now
      Drain(false);
      pthread_mutex_lock(&g_write_mu);
      DumpRingLocked();
      pthread_mutex_unlock(&g_write_mu);
      continue;
    }
    if (Drain(false)) {
      // Submissions without CUPTI records: force CUPTI to deliver (at most
      // once a second), then judge what was written before the flush.
      uint64_t now = MonoNs();
      if (now - last_forced_flush >= 1000ull * 1000 * 1000) {
        last_forced_flush = now;
        cupti::Flush();
        if (g_state.load() == int(State::kOn)) Drain(false, /*after_cupti_flush=*/true);
      }
    }
  }
}

void StartWriterLocked() {
  if (g_writer_started) return;
  g_writer_started = true;
  g_writer_running.store(true, std::memory_order_relaxed);
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_t th;
  // Block signals in the writer so the job's handlers run on its own threads.
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  if (pthread_create(&th, &attr, WriterMain, nullptr) != 0) {
    g_writer_started = false;
    g_writer_running.store(false, std::memory_order_relaxed);
  }
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  pthread_attr_destroy(&attr);
}

void HandOff(ThreadBuffer* b) {
  pthread_mutex_lock(&g_mu);
  b->next = nullptr;
  if (g_full_tail) g_full_tail->next = b; else g_full_head = b;
  g_full_tail = b;
  StartWriterLocked();
  pthread_cond_signal(&g_cv);
  pthread_mutex_unlock(&g_mu);
}

bool AcquireBuffer(ThreadState& ts) {
  pthread_mutex_lock(&g_mu);
  ThreadBuffer* b = g_free;
  if (b) {
    g_free = b->next;
  } else if (g_buffers_allocated < g_buffer_budget) {
    void* mem = nullptr;
    if (posix_memalign(&mem, 64, sizeof(ThreadBuffer)) == 0) {
      b = new (mem) ThreadBuffer;
      g_buffers_allocated++;
    }
  }
  if (!b) g_exhausted.store(true, std::memory_order_relaxed);
  pthread_mutex_unlock(&g_mu);
  if (!b) return false;
  b->count.store(0, std::memory_order_relaxed);
  b->flushed = 0;
  b->tid = ts.tid;
  b->next = nullptr;
  __atomic_store_n(&ts.buffer, b, __ATOMIC_RELEASE);  // its tid and watermark with it (the writer loads it acquiring)
  return true;
}

void OnThreadExit(void* arg) {
  auto* ts = static_cast<ThreadState*>(arg);
  pthread_mutex_lock(&g_mu);
  for (ThreadState** p = &g_live; *p; p = &(*p)->next_live)
    if (*p == ts) {
      *p = ts->next_live;
      break;
    }
  pthread_mutex_unlock(&g_mu);
  ThreadBuffer* b = ts->buffer;
  __atomic_store_n(&ts->buffer, static_cast<ThreadBuffer*>(nullptr), __ATOMIC_RELAXED);
  // The exiting thread's records go to the writer (started if need be), so
  // a thread that ends mid-run still has all its calls in the trace.
  if (b && g_state.load() == int(State::kOn)) HandOff(b);
  ts->registered = false;
  if (ts->sched_fd >= 0) close(ts->sched_fd);
  ts->sched_fd = -1;
  FreeUnwindRules(ts->unwind);
  ts->unwind = nullptr;
}

void RegisterThread(ThreadState& ts) {
  ts.registered = true;
  ts.tid = GetTid();
  if (ts.index == 0) ts.index = TakeThreadIndex();
  pthread_setspecific(g_thread_key, &ts);
  trace::ThreadRecord tr{};
  tr.tid = ts.tid;
  pthread_getname_np(pthread_self(), tr.name, sizeof tr.name);
  pthread_mutex_lock(&g_mu);
  ts.next_live = g_live;
  g_live = &ts;
  g_pending->threads.push_back(tr);
  pthread_mutex_unlock(&g_mu);
}

// fork: the prepare handler takes both locks so that the child inherits
// consistent tables (no thread of ours is half-way through one); the parent
// handler releases them. Installed when the library is loaded, so a fork at
// any moment runs them: a child copied while another thread was starting
// the recorder (state kStarting) is reset like any other and starts its own
// file at its first CUDA call (before, it never recorded). Prepare never
// waits for a start-up: start-up loads CUPTI, whose libraries may register
// fork handlers, which the C library serializes against a fork in progress.
// The module walks' lock is taken last: a thread holding g_write_mu (the
// writer's module scan) may be waiting for it, while no walk waits for ours.
void AtForkPrepare() {
  pthread_mutex_lock(&g_write_mu);
  pthread_mutex_lock(&g_mu);
  HoldModuleWalks();
}

void AtForkParent() {
  ReleaseModuleWalks();
  pthread_mutex_unlock(&g_mu);
  pthread_mutex_unlock(&g_write_mu);
}

// The child never writes into the parent's file and inherits none of its
// records: it forgets the parent's file, queues, live threads, strings,
// stacks and counters, and starts its own file (new pid) on its first CUDA
// call, host-only (it never touches the CUPTI state inherited from the
// parent; a cupti_unavailable diagnostic says so). A child that never calls
// CUDA writes nothing; one that ends in _exit leaves what its writer drained.
void AtForkChild() {
  ReleaseModuleWalks();  // no walk was in progress at the fork
  // Recording stays possible in the child unless it was disabled: a parent
  // that had not started yet leaves a child that starts its own file at its
  // first CUDA call.
  const bool disabled = g_state.load() == int(State::kDisabled);
  // The parent may have been writing its file's preamble on another thread.
  g_file_end = 0;
  g_writing_preamble = false;
  if (!g_initialized) {  // nothing recorded yet: nothing to forget
    g_state.store(int(disabled ? State::kDisabled : State::kOff));
    pthread_mutex_unlock(&g_mu);
    pthread_mutex_unlock(&g_write_mu);
    return;
  }
  if (g_fd >= 0) close(g_fd);
  g_fd = -1;
  g_ring = nullptr;  // the parent's ring: the child makes its own at start-up
  g_regression = nullptr;
  g_dump_requested.store(false);
  cupti::ForgetAfterFork();
  nccl::ResetAfterFork();
  *g_pending = Pending();
  g_strings->clear();
  g_epoch = 0;
  g_transient_added = 0;
  g_stacks->clear();
  g_next_string = 1;
  g_next_stack = 1;
  g_module_generation = ~0ull;
  // Buffers on the full queue or owned by the parent's other threads hold
  // the parent's records: leave them (copy-on-write pages, never touched).
  // The free list is clean and stays usable.
  g_full_head = g_full_tail = nullptr;
  // The parent's threads' schedstat descriptors name the parent's threads:
  // closed (this thread's own is reopened at its next sample).
  for (ThreadState* ts = g_live; ts; ts = ts->next_live) {
    if (ts->sched_fd >= 0) close(ts->sched_fd);
    ts->sched_fd = -1;
  }
  if (t_self.sched_fd >= 0) close(t_self.sched_fd);
  t_self.sched_fd = -1;
  g_live = nullptr;
  g_buffers_allocated = 0;
  for (ThreadBuffer* b = g_free; b; b = b->next) g_buffers_allocated++;
  g_exhausted.store(false);
  g_dropped_device.store(0);
  t_self.buffer = nullptr;
  t_self.registered = false;
  t_self.next_corr = 0;
  for (auto& d : g_diag) d.store(0);
  for (auto& d : g_diag_written) d = 0;
  *g_stall = StallTracker(BudgetBytes());
  g_writer_started = false;
  g_writer_running.store(false);
  g_stop_writer = false;
  g_shutdown_done.store(false);
  g_is_fork_child = true;
  g_state.store(int(disabled ? State::kDisabled : State::kOff));
  pthread_cond_init(&g_cv, nullptr);
  pthread_mutex_unlock(&g_mu);
  pthread_mutex_unlock(&g_write_mu);
}

__attribute__((constructor)) void InstallForkHandlers() {
  pthread_atfork(AtForkPrepare, AtForkParent, AtForkChild);
}

void AtExit() { Shutdown(); }

void Initialize() {
  g_ticks_are_ns = !TscIsInvariant() || (getenv("STALLSCOPE_CLOCK") && strcmp(getenv("STALLSCOPE_CLOCK"), "mono") == 0);
  if (const char* mb = getenv("STALLSCOPE_BUFFER_MB")) {
    long v = strtol(mb, nullptr, 10);
    if (v > 0) g_buffer_budget = size_t(v) * 1024 * 1024 / sizeof(ThreadBuffer) + 1;
  }
  if (const char* p = getenv("STALLSCOPE_TRACE_PACK"); p && strcmp(p, "0") == 0) g_pack = false;
  if (const char* z = getenv("STALLSCOPE_TRACE_ZSTD")) g_zstd_level = int(strtol(z, nullptr, 10));
  g_zstd_level = std::min(g_zstd_level, 19);
  g_api_packer = new trace::ApiPacker;
  g_device_packer = new trace::DevicePacker;
  g_packed = new std::vector<unsigned char>;
  g_compressed = new std::vector<unsigned char>;
  g_pending = new Pending;
  g_drained = new Pending;
  g_strings = new std::unordered_map<std::string, InternedString>;
  g_stacks = new std::unordered_map<uint64_t, uint32_t>;
  g_stall = new StallTracker(BudgetBytes());
  pthread_key_create(&g_thread_key, OnThreadExit);
  if (const char* u = getenv("STALLSCOPE_UNWIND")) {
    if (strcmp(u, "libgcc") == 0) g_unwind = Unwind::kLibgcc;
    if (strcmp(u, "check") == 0) g_unwind = Unwind::kCheck;
  }
  // Warm up the unwinder: its first use allocates.
  uint64_t pcs[64];
  LibgccBacktrace(pcs, 64, 0, python::InInterpreter);
}

void QueueCpuSample(ThreadState& ts, uint64_t ticks, uint64_t cpu_ns, uint64_t run_delay) {
  if (!ts.registered) RegisterThread(ts);
  pthread_mutex_lock(&g_mu);
  g_pending->cpu.push_back({ts.tid, trace::CpuSchedRecord{ticks, cpu_ns, run_delay}});
  pthread_mutex_unlock(&g_mu);
}

}  // namespace

uint32_t TakeThreadIndex() { return g_next_thread_index.fetch_add(1, std::memory_order_relaxed); }

__attribute__((noinline)) uint64_t SampleCpuAtEnter(ThreadState& ts) {
  int saved_errno = errno;
  uint64_t cpu = ThreadCpuNs();
  uint64_t delay = ThreadRunDelayNs(ts);
  uint64_t now = Ticks();
  if (cpu) QueueCpuSample(ts, now, cpu, delay);
  errno = saved_errno;
  return now;
}

__attribute__((noinline)) void SampleCpuAtExit(ThreadState& ts, uint64_t exit) {
  // (Samples off: no gap or call is long enough, so only a may-block call's
  // exit comes here.)
  if (!g_cpu_samples) return;
  int saved_errno = errno;
  if (uint64_t cpu = ThreadCpuNs()) QueueCpuSample(ts, exit, cpu, ThreadRunDelayNs(ts));
  errno = saved_errno;
}

bool EnsureStarted() {
  int s = g_state.load(std::memory_order_acquire);
  if (s == int(State::kOn)) return true;
  // Start-up opens files and searches for CUPTI: the job's errno survives.
  struct ErrnoGuard {
    int saved = errno;
    ~ErrnoGuard() { errno = saved; }
  } guard;
  if (s == int(State::kStarting)) {
    // Another thread is starting the recorder (a few ms: file, CUPTI). Wait
    // for it rather than lose this thread's first calls; this thread holds
    // none of our locks and has not entered the driver yet. The wait is
    // bounded in case start-up itself waits on this thread (a library thread
    // calling the driver from inside CUPTI's initialization).
    uint64_t deadline = MonoNs() + 200 * 1000 * 1000;
    while ((s = g_state.load(std::memory_order_acquire)) == int(State::kStarting) &&
           MonoNs() < deadline)
      sched_yield();
    return s == int(State::kOn);
  }
  if (s != int(State::kOff)) return false;
  if (const char* d = getenv("STALLSCOPE_DISABLE"); d && *d && strcmp(d, "0") != 0) {
    g_state.store(int(State::kDisabled));
    return false;
  }
  int expected = int(State::kOff);
  if (!g_state.compare_exchange_strong(expected, int(State::kStarting))) return EnsureStarted();
  if (!g_initialized) {
    Initialize();
    g_initialized = true;
  }
  g_pid = uint32_t(getpid());
  g_rank = ReadRankInfo();
  if (const char* spec = getenv("STALLSCOPE_RING"); spec && *spec) {
    static Ring ring;
    ring = Ring();  // a fork child's starts empty
    if (!ParseRing(spec, &ring)) {
      fprintf(stderr, "stallscope: STALLSCOPE_RING=%s: expected SECONDS or SIZE (e.g. 30, 30s or 64MB); "
                      "keeping the last 60 s\n", spec);
      ParseRing("60", &ring);
    }
    if (const char* sig = getenv("STALLSCOPE_RING_SIGNAL")) g_ring_signal = int(strtol(sig, nullptr, 10));
    if (const char* at_exit = getenv("STALLSCOPE_RING_AT_EXIT")) g_ring_dump_at_exit = strcmp(at_exit, "0") != 0;
    trace::RegressionSpec regression;
    trace::ParseRegressionSpec(trace::kDefaultRegressionSpec, &regression);
    if (const char* r = getenv("STALLSCOPE_RING_REGRESSION"); r && *r && !trace::ParseRegressionSpec(r, &regression)) {
      fprintf(stderr, "stallscope: STALLSCOPE_RING_REGRESSION=%s: expected K:M[:N] (e.g. %s) or off; "
                      "using %s\n", r, trace::kSuggestedRegressionSpec, trace::kDefaultRegressionSpec);
    }
    static trace::RegressionDetector* detector = nullptr;
    delete detector;  // a fork child's starts over
    detector = regression.enabled() ? new trace::RegressionDetector(regression) : nullptr;
    g_regression = detector;
    g_ring = &ring;
  } else {
    g_fd = OpenTraceFile(g_rank, g_pid);
    if (g_fd < 0) {
      g_state.store(int(State::kDisabled));
      return false;
    }
  }
  trace::FileHeader h{};
  memcpy(h.magic, trace::kMagic, sizeof h.magic);
  h.version = trace::kVersion;
  h.oldest_reader = g_pack ? trace::kWriterOldestReader : trace::kUnpackedOldestReader;
  h.header_bytes = sizeof h;
  h.pid = g_pid;
  h.ppid = uint32_t(getppid());
  h.start_mono_ns = MonoNs();
  h.start_realtime_ns = RealtimeNs();
  h.flags = g_ticks_are_ns ? uint32_t(trace::kFileTicksAreNs) : 0u;
  gethostname(h.host, sizeof h.host - 1);
  g_header = h;
  g_file_end = 0;
  g_writing_preamble = false;
  if (g_ring != nullptr) {
    WriteApiTable();
    if (g_rank.rank >= 0) WriteRecords<ChunkType::kRank>(0, &g_rank, 1);
  } else {
    EnsurePreamble();  // header, API table, rank
  }
  trace::ClockRecord clock = ReadClockPair();
  WriteRecords<ChunkType::kClock>(0, &clock, 1);
  const char* cpu_samples = getenv("STALLSCOPE_CPU_SAMPLES");
  g_cpu_samples = !(cpu_samples && strcmp(cpu_samples, "0") == 0);
  // Off: no gap or call is ever long enough to sample at.
  g_cpu_gap_ticks = g_cpu_samples ? CalibrateCpuGapTicks() : UINT64_MAX;
  if (!g_cpu_samples) CountDiagnostic(trace::DiagnosticId::kCpuSamplesOff);
  // A fork child stays host-only: CUPTI's state belongs to the parent.
  if (g_is_fork_child || !cupti::Start()) CountDiagnostic(trace::DiagnosticId::kCuptiUnavailable);
  g_step_tid.store(0);
  g_sample_every = 0;
  g_sample_steps = 0;
  g_timing_on = true;
  if (const char* e = getenv("STALLSCOPE_DEVICE_SAMPLE"); e && *e && cupti::Active()) {
    char* end = nullptr;
    const long n = strtol(e, &end, 10);
    if (end == e || *end != '\0' || n < 1 || n > 1'000'000) {
      fprintf(stderr, "stallscope: STALLSCOPE_DEVICE_SAMPLE=%s: expected a number of steps from 1 to "
                      "1000000; timing every step\n", e);
    } else if (n > 2) {  // 1 and 2 time every step
      g_sample_every = uint32_t(n);
    }
  }
  if (!g_handlers_installed) {
    g_handlers_installed = true;
    atexit(AtExit);
  }
  g_state.store(int(State::kOn), std::memory_order_release);
  if (g_ring != nullptr) {
    InstallDumpSignal();
    pthread_mutex_lock(&g_mu);
    StartWriterLocked();  // it drains into the ring and answers the dump signal
    pthread_mutex_unlock(&g_mu);
  }
  return true;
}

trace::ApiRecord* ReserveSlow(ThreadState& ts) {
  int saved_errno = errno;
  if (!ts.registered) RegisterThread(ts);
  if (ThreadBuffer* b = ts.buffer) {
    if (b->count.load(std::memory_order_relaxed) < kRecordsPerBuffer) {
      errno = saved_errno;
      return &b->records[b->count.load(std::memory_order_relaxed)];
    }
    __atomic_store_n(&ts.buffer, static_cast<ThreadBuffer*>(nullptr), __ATOMIC_RELAXED);
    HandOff(b);
  }
  trace::ApiRecord* r = nullptr;
  // No lock while over budget: the counters are atomic.
  if (!g_exhausted.load(std::memory_order_relaxed) && AcquireBuffer(ts)) {
    r = &ts.buffer->records[0];
  } else {
    g_diag[int(trace::DiagnosticId::kDroppedRecords)]++;
    g_diag[int(trace::DiagnosticId::kDroppedCalls)]++;
  }
  errno = saved_errno;
  return r;
}

namespace {

uint32_t Intern(const char* s, size_t len, bool transient) {
  if (!s) return 0;
  std::string key(s, len);
  pthread_mutex_lock(&g_mu);
  uint32_t id;
  auto it = g_strings->find(key);
  if (it != g_strings->end()) {
    InternedString& e = it->second;
    id = e.id;
    e.transient = e.transient && transient;  // named by a stack or a kernel: kept
    e.used = g_epoch;
  } else {
    id = g_next_string++;
    g_strings->emplace(key, InternedString{id, transient, g_epoch});
    g_pending->strings.emplace_back(id, std::move(key));
    g_transient_added += transient ? 1 : 0;
  }
  pthread_mutex_unlock(&g_mu);
  return id;
}

}  // namespace

uint32_t InternString(const char* s, size_t len) { return Intern(s, len, false); }

uint32_t InternString(const char* s) { return s ? InternString(s, strlen(s)) : 0; }

uint32_t InternTransientString(const char* s) { return s ? Intern(s, strlen(s), true) : 0; }

namespace {

uint32_t InternStack(trace::StackKind kind, const uint64_t* words, size_t n) {
  // The stack's key (a 64-bit XXH3 of its words, seeded with its kind).
  const uint64_t h = XXH3_64bits_withSeed(words, n * sizeof(uint64_t), uint64_t(kind));
  pthread_mutex_lock(&g_mu);
  uint32_t id;
  auto it = g_stacks->find(h);
  if (it != g_stacks->end()) {
    id = it->second;
  } else {
    id = g_next_stack++;
    g_stacks->emplace(h, id);
    g_pending->stacks.push_back({id, kind, std::vector<uint64_t>(words, words + n)});
  }
  pthread_mutex_unlock(&g_mu);
  return id;
}

}  // namespace

__attribute__((noinline)) uint32_t CaptureStack() {
  struct ErrnoGuard {
    int saved = errno;
    ~ErrnoGuard() { errno = saved; }
  } guard;
  // Called on every blocking call (never on a launch): the first one starts
  // the writer, so that a job's trace reaches the disk every 200 ms even
  // before any buffer fills.
  if (!g_writer_running.load(std::memory_order_relaxed)) {
    pthread_mutex_lock(&g_mu);
    if (g_state.load() == int(State::kOn)) StartWriterLocked();
    pthread_mutex_unlock(&g_mu);
  }
  // From the hook's wrapper outward (this function's frame left out), by
  // the thread's cached rules, or libgcc's unwinder where they do not reach.
  uint64_t pcs[64];
  int n = g_unwind != Unwind::kLibgcc ? FastBacktrace(&t_self.unwind, pcs, 64, 2, python::InInterpreter) : -1;
  if (g_unwind == Unwind::kCheck && n >= 0) {
    uint64_t gcc[64];
    const int m = LibgccBacktrace(gcc, 64, 2, python::InInterpreter);
    CountDiagnostic(trace::DiagnosticId::kNativeStacksChecked);
    if (m != n || memcmp(gcc, pcs, size_t(n) * sizeof pcs[0]) != 0) {
      CountDiagnostic(trace::DiagnosticId::kNativeStacksDiffer);
      n = -1;
    }
  }
  if (n < 0) n = LibgccBacktrace(pcs, 64, 2, python::InInterpreter);
  if (n == 0) return 0;
  return InternStack(trace::StackKind::kNative, pcs, size_t(n));
}

uint32_t InternPythonStack(const uint64_t* pairs, size_t frames) {
  if (frames == 0) return 0;
  return InternStack(trace::StackKind::kPython, pairs, frames * 2);
}

size_t BudgetBytes() { return g_buffer_budget * sizeof(ThreadBuffer); }

// Device and correlation records from CUPTI wait for the writer in
// g_pending: at most a quarter of the memory budget. Past it the writer is
// woken and what does not fit is dropped and counted (nothing waits for
// the writer: these arrive on CUPTI's thread). A dropped correlation record
// is still an acknowledgement that CUPTI saw the submission: its external
// id is kept (the highest per thread), so it never reads as records that
// stopped arriving.
size_t PendingRoom(size_t record_bytes) {  // under g_mu
  const size_t held = g_pending->device.size() * sizeof(trace::DeviceRecord) +
                      g_pending->correlations.size() * sizeof(trace::CorrelationRecord);
  const size_t cap = BudgetBytes() / 4;
  return held >= cap ? 0 : (cap - held) / record_bytes;
}

void AddActivity(const trace::CorrelationRecord* corr, size_t nc, const trace::DeviceRecord* dev,
                 size_t nd) {
  pthread_mutex_lock(&g_mu);
  const size_t take_c = std::min(nc, PendingRoom(sizeof(trace::CorrelationRecord)));
  g_pending->correlations.insert(g_pending->correlations.end(), corr, corr + take_c);
  if (take_c < nc) {
    std::vector<uint64_t>& acks = g_pending->dropped_acks;
    for (size_t i = take_c; i < nc; ++i) {
      const uint64_t ext = corr[i].external;
      auto it = std::find_if(acks.begin(), acks.end(),
                             [ext](uint64_t a) { return (a >> 40) == (ext >> 40); });
      if (it == acks.end()) {
        acks.push_back(ext);
      } else if (ext > *it) {
        *it = ext;
      }
    }
  }
  const size_t take_d = std::min(nd, PendingRoom(sizeof(trace::DeviceRecord)));
  g_pending->device.insert(g_pending->device.end(), dev, dev + take_d);
  g_dropped_device.fetch_add(nd - take_d, std::memory_order_relaxed);
  if (take_c < nc || take_d < nd) {
    g_diag[int(trace::DiagnosticId::kDroppedRecords)] += (nc - take_c) + (nd - take_d);
    pthread_cond_signal(&g_cv);
  }
  pthread_mutex_unlock(&g_mu);
}

void AddNvtx(const trace::NvtxRecord& rec) {
  ThreadState& ts = t_self;
  if (!ts.registered) RegisterThread(ts);
  pthread_mutex_lock(&g_mu);
  g_pending->nvtx.emplace_back(ts.tid, rec);
  pthread_mutex_unlock(&g_mu);
}

void AddNccl(const trace::NcclRecord& rec) {
  pthread_mutex_lock(&g_mu);
  g_pending->nccl.push_back(rec);
  pthread_mutex_unlock(&g_mu);
}

void CountDiagnostic(trace::DiagnosticId id, uint64_t n) { g_diag[int(id)] += n; }

void Shutdown() {
  if (g_state.load() != int(State::kOn) || g_shutdown_done.exchange(true)) return;
  bool was_in_hook = t_self.in_hook;
  t_self.in_hook = true;
  const uint64_t exit_ns = MonoNs();  // the trigger: the ring's last seconds end here
  if (g_sample_every != 0 && g_sample_steps.load(std::memory_order_relaxed) == 0)
    CountDiagnostic(trace::DiagnosticId::kDeviceTimingNoSteps);
  cupti::Flush();
  Drain(true, false, exit_ns);
  if (g_ring != nullptr && g_ring_dump_at_exit) {
    pthread_mutex_lock(&g_write_mu);
    DumpRingLocked();
    pthread_mutex_unlock(&g_write_mu);
  }
  pthread_mutex_lock(&g_mu);
  g_state.store(int(State::kDisabled));
  g_stop_writer = true;
  pthread_cond_signal(&g_cv);
  pthread_mutex_unlock(&g_mu);
  pthread_mutex_lock(&g_write_mu);
  close(g_fd);
  g_fd = -1;
  pthread_mutex_unlock(&g_write_mu);
  t_self.in_hook = was_in_hook;
}

__attribute__((destructor)) void LibraryFini() { Shutdown(); }

bool WatchingSteps() {
  return (g_regression != nullptr || g_sample_every != 0) &&
         g_state.load(std::memory_order_relaxed) == int(State::kOn);
}

bool ClaimStepThread() {
  const uint32_t self = Self().tid != 0 ? Self().tid : GetTid();
  uint32_t owner = 0;
  return g_step_tid.compare_exchange_strong(owner, self, std::memory_order_relaxed) || owner == self;
}

void StepBegan(uint64_t ticks) {
  if (g_sample_every != 0) SampleStep(ticks);
  trace::RegressionDetector* d = g_regression;
  if (d == nullptr || !d->Begin(ticks)) return;
  // The writer dumps (it is woken now rather than at its next 200 ms turn).
  g_diag[int(trace::DiagnosticId::kRingRegressionDumps)]++;
  g_dump_requested.store(true, std::memory_order_relaxed);
  pthread_mutex_lock(&g_mu);
  StartWriterLocked();
  pthread_cond_signal(&g_cv);
  pthread_mutex_unlock(&g_mu);
}

int DumpNow() {
  if (g_ring == nullptr || g_state.load() != int(State::kOn)) return -1;
  const bool was_in_hook = t_self.in_hook;
  t_self.in_hook = true;
  const uint64_t asked_ns = MonoNs();
  cupti::Flush();
  Drain(false, false, asked_ns);
  pthread_mutex_lock(&g_write_mu);
  const bool ok = DumpRingLocked();
  pthread_mutex_unlock(&g_write_mu);
  t_self.in_hook = was_in_hook;
  return ok ? 0 : -1;
}

}  // namespace recorder
}  // namespace stallscope

// The flight recorder's dump, for the job (python/stallscope's dump()): 0
// when a trace file of what the ring holds was written; -1 when not in ring
// mode (STALLSCOPE_RING) or the file could not be written.
extern "C" __attribute__((visibility("default"))) int stallscope_dump(void) {
  return stallscope::recorder::DumpNow();
}
