// The simulated GPU engine: knobs, device threads that run ops in real time on
// CLOCK_MONOTONIC, host-side blocking, the memory range map, the ground-truth
// trace writer and the observer hook used by the simulated CUPTI.
//
// All global state is allocated once and never destroyed, so device and writer
// threads may keep running while the process exits.
#include "sim_engine.h"

#include <fcntl.h>
#include <fnmatch.h>
#include <pthread.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <shared_mutex>

namespace simgpu {
namespace {

constexpr uint64_t kSleepThresholdNs = 200000;  // sleep when the next event is farther
constexpr uint64_t kWakeEarlyNs = 150000;       // ... and wake this much before it
constexpr uint64_t kYieldThresholdNs = 30000;   // spin with sched_yield above this
constexpr uint64_t kReportDeferNs = 20000;      // report completed ops later when the next is this close
constexpr size_t kMaxDeferred = 64;             // ... but never hold back more than this many

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

std::string Trim(std::string s) {
  size_t b = s.find_first_not_of(" \t");
  size_t e = s.find_last_not_of(" \t");
  if (b == std::string::npos) return "";
  return s.substr(b, e - b + 1);
}

double EnvDouble(const char* name, double def) {
  const char* v = getenv(name);
  if (v == nullptr || *v == '\0') return def;
  char* end = nullptr;
  double d = strtod(v, &end);
  if (end == v || d < 0) return def;
  return d;
}

Knobs* LoadKnobs() {
  Knobs* k = new Knobs();
  if (const char* v = getenv("SIMGPU_KERNEL_US")) {
    std::string spec(v);
    size_t pos = 0;
    while (pos <= spec.size()) {
      size_t comma = spec.find(',', pos);
      if (comma == std::string::npos) comma = spec.size();
      std::string item = spec.substr(pos, comma - pos);
      size_t eq = item.rfind('=');
      if (eq != std::string::npos) {
        std::string glob = Trim(item.substr(0, eq));
        std::string num = Trim(item.substr(eq + 1));
        char* end = nullptr;
        double us = strtod(num.c_str(), &end);
        if (!glob.empty() && end != num.c_str() && us >= 0) {
          k->kernel_rules.push_back({glob, static_cast<uint64_t>(us * 1000.0)});
        }
      }
      pos = comma + 1;
    }
  }
  k->launch_latency_ns =
      static_cast<uint64_t>(EnvDouble("SIMGPU_LAUNCH_LATENCY_US", 4.0) * 1000.0);
  const double node_us = EnvDouble("SIMGPU_GRAPH_NODE_US", 0.5);
  k->graph_node_ns = node_us > 0 ? static_cast<uint64_t>(node_us * 1000.0) : 0;
  double depth = EnvDouble("SIMGPU_QUEUE_DEPTH", 1024);
  k->queue_depth = depth < 1 ? 1 : static_cast<size_t>(depth);
  double gbps = EnvDouble("SIMGPU_COPY_GBPS", 25.0);
  k->copy_bytes_per_ns = gbps > 0 ? gbps : 25.0;
  double devs = EnvDouble("SIMGPU_DEVICES", 1);
  k->devices = devs < 1 ? 1 : (devs > 64 ? 64 : static_cast<int>(devs));
  if (const char* v = getenv("SIMGPU_TRACE"); v != nullptr && *v != '\0') {
    std::string p(v);
    std::string out;
    for (size_t i = 0; i < p.size(); ++i) {
      if (p[i] == '%' && i + 1 < p.size() && p[i + 1] == 'p') {
        out += std::to_string(getpid());
        ++i;
      } else {
        out += p[i];
      }
    }
    k->trace_path = out;
  }
  return k;
}

// ---- global state ----
struct Globals {
  std::once_flag devices_once;
  std::vector<Device*> devices;
  std::atomic<uint64_t> correlation{0};
  std::atomic<uint32_t> stream_ids{6};  // first stream gets 7
  std::atomic<uint32_t> context_ids{0};
  std::shared_mutex ranges_mu;
  std::map<uintptr_t, std::pair<size_t, MemKind>> ranges;
  std::atomic<const SimgpuObserver*> observer{nullptr};
};
Globals& G() {
  static Globals* g = new Globals();
  return *g;
}

// ---- trace writer ----
struct Tracer {
  std::mutex mu;  // guards pending
  std::vector<SimgpuOpRecord> pending;
  std::mutex io_mu;  // serializes writes
  int fd = -1;
  bool open_failed = false;
  std::atomic<bool> writer_started{false};
};
Tracer& T() {
  static Tracer* t = new Tracer();
  return *t;
}

void AppendJsonString(std::string* out, const char* s) {
  out->push_back('"');
  for (const unsigned char* p = reinterpret_cast<const unsigned char*>(s); *p; ++p) {
    unsigned char c = *p;
    if (c == '"' || c == '\\') {
      out->push_back('\\');
      out->push_back(static_cast<char>(c));
    } else if (c < 0x20) {
      char buf[8];
      snprintf(buf, sizeof buf, "\\u%04x", c);
      out->append(buf);
    } else {
      out->push_back(static_cast<char>(c));
    }
  }
  out->push_back('"');
}

const char* KindName(uint32_t kind) {
  switch (kind) {
    case SIMGPU_OP_KERNEL: return "kernel";
    case SIMGPU_OP_MEMCPY: return "memcpy";
    default: return "memset";
  }
}

void WriteAll(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    ssize_t n = write(fd, s.data() + off, s.size() - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      return;
    }
    off += static_cast<size_t>(n);
  }
}

void TraceWriterLoop() {
  pthread_setname_np(pthread_self(), "simgpu-trace");
  for (;;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    TraceFlush();
  }
}

void TraceAppend(const SimgpuOpRecord& r) {
  const Knobs& k = GetKnobs();
  if (k.trace_path.empty()) return;
  Tracer& t = T();
  {
    std::lock_guard<std::mutex> lk(t.mu);
    t.pending.push_back(r);
  }
  if (!t.writer_started.exchange(true)) {
    std::thread(TraceWriterLoop).detach();
  }
}

// ---- observer ----
void Report(const Op& op, const Device* d) {
  SimgpuOpRecord r;
  memset(&r, 0, sizeof r);
  r.size = sizeof r;
  r.kind = op.kind == OpKind::kKernel   ? SIMGPU_OP_KERNEL
           : op.kind == OpKind::kMemcpy ? SIMGPU_OP_MEMCPY
                                        : SIMGPU_OP_MEMSET;
  r.name = op.name;
  r.device = static_cast<uint32_t>(d->ordinal);
  r.context_id = op.stream->ctx->id;
  r.stream_id = op.stream->id;
  r.is_async = op.is_async;
  r.correlation = op.correlation;
  r.queued_ns = op.enqueue_ns;
  r.host_tid = op.host_tid;
  r.host_run_delay_ns = op.host_run_delay_ns;
  r.start_ns = op.start_ns;
  r.end_ns = op.end_ns;
  r.bytes = op.bytes;
  r.copy_kind = op.copy_kind;
  r.src_kind = op.src_kind;
  r.dst_kind = op.dst_kind;
  r.memset_value = op.memset_value;
  for (int i = 0; i < 3; ++i) {
    r.grid[i] = op.grid[i];
    r.block[i] = op.block[i];
  }
  r.dynamic_shared_bytes = op.shared_bytes;
  if (op.external) {
    r.is_nccl = 1;
    r.nccl_rank = op.ext.rank;
    r.nccl_comm = op.ext.comm;
    r.nccl_seq = op.ext.seq;
  }
  TraceAppend(r);
  if (const SimgpuObserver* o = G().observer.load(std::memory_order_acquire)) {
    if (o->on_complete) o->on_complete(&r, o->user);
  }
}

void RunAction(Op* op) {
  if (op->free_ptr != nullptr) {
    MemKind kind;
    size_t size;
    if (RemoveRange(op->free_ptr, &kind, &size)) {
      op->stream->dev->allocated.fetch_sub(size);
      free(op->free_ptr);
    }
    return;
  }
  if (op->kind == OpKind::kMemcpy) {
    const void* src = op->staged ? op->staged.get() : op->src;
    if (op->bytes > 0 && src != nullptr) memmove(op->dst, src, op->bytes);
    op->staged.reset();
  } else if (op->kind == OpKind::kMemset) {
    char* p = static_cast<char*>(op->dst);
    if (op->memset_elem == 1) {
      memset(p, static_cast<int>(op->memset_value & 0xff), op->memset_count);
    } else if (op->memset_elem == 2) {
      uint16_t v = static_cast<uint16_t>(op->memset_value);
      for (size_t i = 0; i < op->memset_count; ++i) memcpy(p + 2 * i, &v, 2);
    } else {
      uint32_t v = op->memset_value;
      for (size_t i = 0; i < op->memset_count; ++i) memcpy(p + 4 * i, &v, 4);
    }
  }
}

void PruneStreams(Device* d) {
  auto dead = [](Stream* s) { return s->destroyed && s->queue.empty(); };
  bool any = false;
  for (Stream* s : d->streams) any |= dead(s);
  if (!any) return;
  for (Stream* s : d->streams) {
    if (!dead(s)) continue;
    auto& cs = s->ctx->streams;
    cs.erase(std::remove(cs.begin(), cs.end(), s), cs.end());
  }
  d->streams.erase(std::remove_if(d->streams.begin(), d->streams.end(), dead), d->streams.end());
}

void KickOthers(Device* self);

// The device thread: starts ready ops, completes ops whose time has come,
// and sleeps or spins until the next thing to do.
void DeviceLoop(Device* d) {
  prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
  // Best effort: a higher CFS weight makes the device thread wake on time on a
  // loaded machine. Ignored when not permitted. Dropped while it copies bytes
  // (big copies must not starve the host threads it has just released).
  const id_t tid = static_cast<id_t>(syscall(SYS_gettid));
  const bool niced = getenv("SIMGPU_NO_NICE") == nullptr &&
                     setpriority(PRIO_PROCESS, tid, -10) == 0;
  char name[16];
  snprintf(name, sizeof name, "simgpu-dev%d", d->ordinal);
  pthread_setname_np(pthread_self(), name);
  std::vector<OpPtr> completed;
  std::vector<Op*> actions;
  const size_t queue_depth = GetKnobs().queue_depth;
  std::unique_lock<std::mutex> lk(d->mu);
  for (;;) {
    d->kick = false;
    d->kick_flag.store(false, std::memory_order_relaxed);
    uint64_t now = NowNs();
    uint64_t next = UINT64_MAX;
    uint64_t next_poll = UINT64_MAX;  // an external op's next poll
    bool wake_host = false;  // an op started or ended
    bool wake_awaited = false;  // ... one a host thread waits for
    bool completed_any = false;
    bool progress = true;
    while (progress) {
      progress = false;
      next = UINT64_MAX;
      next_poll = UINT64_MAX;
      for (Stream* s : d->streams) {
        while (!s->queue.empty()) {
          Op* op = s->queue.front().get();
          if (op->started) {
            if (op->action_pending) {
              next = now;
              break;
            }
            if (op->external && !op->external_end_known) {
              uint64_t end = op->ext.poll_end(op->ext.user, now);
              if (end == 0) {
                next_poll = std::min(next_poll, now + (op->ext.poll_ns ? op->ext.poll_ns : 20000));
                break;
              }
              op->external_end_known = true;
              op->target_end_ns = std::max(end, op->start_ns);
            }
            if (op->target_end_ns > now) {
              next = std::min(next, op->target_end_ns);
              break;
            }
            op->end_ns = op->external ? op->target_end_ns : now;
            op->finished.store(true);
            wake_awaited |= op->awaited;
            completed.push_back(std::move(s->queue.front()));
            s->queue.pop_front();
            if (!s->queue.empty() && s->queue.front()->after_prev_ns != 0) {
              Op* n = s->queue.front().get();  // the next graph node: not started yet
              n->ready_ns = std::max(n->ready_ns, op->end_ns + n->after_prev_ns);
            }
            completed_any = true;
            wake_host = true;
            progress = true;
            continue;
          }
          if (op->ready_ns > now) {
            next = std::min(next, op->ready_ns);
            break;
          }
          bool ready = true;
          for (const OpPtr& dep : op->deps) {
            if (!dep->finished.load()) {
              ready = false;
              break;
            }
          }
          if (!ready) break;  // rescanned when the dependency completes
          op->deps.clear();
          op->started = true;
          wake_awaited |= op->awaited;
          op->start_ns = now;
          op->target_end_ns = now + op->duration_ns;
          if (op->external && op->ext.on_start != nullptr) op->ext.on_start(op->ext.user, now);
          s->not_started--;
          // A host thread may wait for room in this stream's queue.
          wake_awaited |= s->not_started + 1 == queue_depth;
          wake_host = true;
          progress = true;
          if (op->HasAction()) {
            op->action_pending = true;
            actions.push_back(op);
            next = now;
            break;
          }
        }
      }
    }
    PruneStreams(d);
    // Host threads wake only for what they wait for: a sync woken by every
    // op of a queue would take the device mutex from the device thread once
    // per op (microseconds between back-to-back kernels).
    const bool wake = wake_awaited || (wake_host && d->any_op_waiters > 0);
    // Another device may wait on one of these ops (cuStreamWaitEvent).
    bool kick_others = completed_any && G().devices.size() > 1;
    // Reporting an op (its CUPTI record, its ground-truth line) takes the
    // device thread a microsecond or so; a real device starts its next
    // kernel meanwhile. When the next op is due within kReportDeferNs and
    // no host thread waits for a completed op, the reports wait for the
    // next slack (at most kMaxDeferred ops), so back-to-back ops (graph
    // nodes) start on time.
    bool defer = actions.empty() && !kick_others && !completed.empty() &&
                 completed.size() < kMaxDeferred && next != UINT64_MAX && next_poll == UINT64_MAX &&
                 next < NowNs() + kReportDeferNs;
    for (size_t i = 0; defer && i < completed.size(); ++i) defer = !completed[i]->awaited;
    if (wake && d->host_waiters > 0 && (completed.empty() || defer)) d->host_cv.notify_all();
    if (!defer && (!actions.empty() || !completed.empty() || kick_others)) {
      lk.unlock();
      if (kick_others) KickOthers(d);
      if (niced && !actions.empty()) setpriority(PRIO_PROCESS, tid, 0);
      for (Op* op : actions) RunAction(op);
      if (niced && !actions.empty()) setpriority(PRIO_PROCESS, tid, -10);
      for (const OpPtr& op : completed) {
        if (op->kind != OpKind::kMarker) Report(*op, d);
      }
      lk.lock();
      // A waiter may have marked an op while the lock was dropped.
      bool wake_done = wake;
      for (const OpPtr& op : completed) {
        op->done.store(true);
        wake_done |= op->awaited;
      }
      if (!completed.empty() && wake_done && d->host_waiters > 0) d->host_cv.notify_all();
      completed.clear();
      for (Op* op : actions) op->action_pending = false;
      actions.clear();
      continue;
    }
    if (d->kick) continue;
    if (next_poll < next) {
      // Only external ops are due soonest: poll again after a sleep (never
      // spin for them; a kick from a submission or another device wakes it).
      now = NowNs();
      if (next_poll > now) {
        d->work_cv.wait_for(lk, std::chrono::nanoseconds(next_poll - now),
                            [d] { return d->kick; });
      }
      continue;
    }
    if (next == UINT64_MAX) {
      d->work_cv.wait(lk, [d] { return d->kick; });
      continue;
    }
    now = NowNs();
    if (next <= now) continue;
    if (next - now > kSleepThresholdNs) {
      d->work_cv.wait_for(lk, std::chrono::nanoseconds(next - now - kWakeEarlyNs),
                          [d] { return d->kick; });
      continue;
    }
    lk.unlock();
    for (;;) {
      uint64_t t = NowNs();
      if (t >= next || d->kick_flag.load(std::memory_order_relaxed)) break;
      if (next - t > kYieldThresholdNs) {
        sched_yield();
      } else {
        CpuRelax();
      }
    }
    lk.lock();
  }
}

void KickOthers(Device* self) {
  for (Device* o : G().devices) {
    if (o == self) continue;
    {
      std::lock_guard<std::mutex> lk(o->mu);
      if (!o->thread_started) continue;
      o->kick = true;
      o->kick_flag.store(true, std::memory_order_relaxed);
    }
    o->work_cv.notify_one();
  }
}

void EnsureThread(Device* d) {
  // Called with d->mu held.
  if (d->thread_started) return;
  d->thread_started = true;
  std::thread(DeviceLoop, d).detach();
}

struct ForkLocks {
  std::mutex mu;
  std::vector<std::mutex*> locks;
  std::vector<std::condition_variable*> conditions;
};
ForkLocks& FL() {
  static ForkLocks* f = new ForkLocks;  // never destroyed
  return *f;
}

void ResetAfterFork() {
  // Only the forking thread survives: rebuild locks, forget threads.
  ForkLocks& fl = FL();
  new (&fl.mu) std::mutex();
  for (std::mutex* mu : fl.locks) new (mu) std::mutex();
  for (std::condition_variable* cv : fl.conditions) new (cv) std::condition_variable();
  Globals& g = G();
  for (Device* d : g.devices) {
    new (&d->mu) std::mutex();
    new (&d->work_cv) std::condition_variable();
    new (&d->host_cv) std::condition_variable();
    d->host_waiters = 0;
    d->any_op_waiters = 0;
    d->thread_started = false;
    d->kick = false;
    // The parent's pending work is not the child's: drop it (as done), so
    // nothing is run or traced twice and no wait in the child hangs on it.
    for (Stream* s : d->streams) {
      s->queue.clear();
      s->not_started = 0;
      if (s->tail) {
        s->tail->finished.store(true);
        s->tail->done.store(true);
      }
    }
  }
  new (&g.ranges_mu) std::shared_mutex();
  Tracer& t = T();
  new (&t.mu) std::mutex();
  new (&t.io_mu) std::mutex();
  t.pending.clear();
  t.writer_started.store(false);
  if (t.fd >= 0) close(t.fd);
  t.fd = -1;
  t.open_failed = false;
  // Re-read SIMGPU_TRACE so that %p names the child's own file; without %p
  // the child writes nothing rather than clobbering the parent's file.
  Knobs& k = const_cast<Knobs&>(GetKnobs());
  const char* v = getenv("SIMGPU_TRACE");
  if (v == nullptr || strstr(v, "%p") == nullptr) {
    k.trace_path.clear();
  } else {
    Knobs* fresh = LoadKnobs();
    k.trace_path = fresh->trace_path;
  }
}

}  // namespace

void RegisterForkLock(std::mutex* mu) {
  ForkLocks& fl = FL();
  std::lock_guard<std::mutex> lk(fl.mu);
  fl.locks.push_back(mu);
}

void RegisterForkCondition(std::condition_variable* cv) {
  ForkLocks& fl = FL();
  std::lock_guard<std::mutex> lk(fl.mu);
  fl.conditions.push_back(cv);
}

namespace {

void WaitForDrain(uint64_t timeout_ns) {
  uint64_t deadline = NowNs() + timeout_ns;
  for (Device* d : G().devices) {
    std::unique_lock<std::mutex> lk(d->mu);
    if (!d->thread_started) continue;
    d->host_waiters++;
    d->any_op_waiters++;
    for (;;) {
      bool idle = true;
      for (Stream* s : d->streams) idle &= !s->tail || s->tail->done.load();
      uint64_t now = NowNs();
      if (idle || now >= deadline) break;
      d->host_cv.wait_for(lk, std::chrono::nanoseconds(std::min<uint64_t>(deadline - now, 10000000)));
    }
    d->host_waiters--;
    d->any_op_waiters--;
  }
}

void OnExit() {
  // Let ops already submitted finish (bounded), so that the ground truth of a
  // process that exits normally is complete.
  WaitForDrain(2000000000ULL);
  TraceFlush();
}

// The registry itself must not be copied half-way through an append.
void LockForkRegistry() { FL().mu.lock(); }
void UnlockForkRegistry() { FL().mu.unlock(); }

__attribute__((constructor)) void SimgpuInit() {
  atexit(OnExit);
  pthread_atfork(LockForkRegistry, UnlockForkRegistry, ResetAfterFork);
}

__attribute__((destructor)) void SimgpuFini() { TraceFlush(); }

}  // namespace

uint64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ULL + static_cast<uint64_t>(ts.tv_nsec);
}

const Knobs& GetKnobs() {
  static Knobs* k = LoadKnobs();
  return *k;
}

uint64_t KernelDurationNs(const char* name) {
  const Knobs& k = GetKnobs();
  for (const auto& rule : k.kernel_rules) {
    if (fnmatch(rule.glob.c_str(), name, 0) == 0) return rule.ns;
  }
  return k.default_kernel_ns;
}

uint64_t CopyDurationNs(uint64_t bytes) {
  return 2000 + static_cast<uint64_t>(static_cast<double>(bytes) / GetKnobs().copy_bytes_per_ns);
}

uint64_t MemsetDurationNs(uint64_t bytes) {
  return 1000 +
         static_cast<uint64_t>(static_cast<double>(bytes) / (10.0 * GetKnobs().copy_bytes_per_ns));
}

int DeviceCount() { return GetKnobs().devices; }

void StartDeviceThreads() {
  for (int i = 0; i < DeviceCount(); ++i) {
    Device* d = GetDevice(i);
    std::lock_guard<std::mutex> lk(d->mu);
    EnsureThread(d);
  }
}

Device* GetDevice(int ordinal) {
  Globals& g = G();
  std::call_once(g.devices_once, [&g] {
    int n = GetKnobs().devices;
    for (int i = 0; i < n; ++i) {
      Device* d = new Device();
      d->ordinal = i;
      g.devices.push_back(d);
    }
  });
  if (ordinal < 0 || ordinal >= static_cast<int>(g.devices.size())) return nullptr;
  return g.devices[static_cast<size_t>(ordinal)];
}

// The correlation id of the API call open on this thread (simgpu_api_begin),
// 0 when none is.
thread_local uint64_t t_api_correlation = 0;

uint64_t NextCorrelation() {
  if (t_api_correlation != 0) return t_api_correlation;
  return G().correlation.fetch_add(1, std::memory_order_relaxed) + 1;
}
uint32_t NextStreamId() { return G().stream_ids.fetch_add(1, std::memory_order_relaxed) + 1; }

Context* NewContext(Device* dev, bool primary, unsigned flags) {
  Context* c = new Context();
  c->dev = dev;
  c->id = G().context_ids.fetch_add(1) + 1;
  c->flags = flags;
  c->primary = primary;
  Stream* l = NewStream(c, 0, 0);
  {
    std::lock_guard<std::mutex> lk(dev->mu);
    l->legacy = true;
  }
  c->legacy = l;
  return c;
}

Stream* NewStream(Context* ctx, unsigned flags, int priority) {
  Stream* s = new Stream();
  s->ctx = ctx;
  s->dev = ctx->dev;
  s->id = NextStreamId();
  s->flags = flags;
  s->priority = priority;
  s->blocking = (flags & 0x1) == 0;  // CU_STREAM_NON_BLOCKING
  std::lock_guard<std::mutex> lk(ctx->dev->mu);
  ctx->dev->streams.push_back(s);
  ctx->streams.push_back(s);
  return s;
}

Stream* PerThreadStream(Context* ctx) {
  thread_local std::vector<std::pair<Context*, Stream*>> tls;
  for (const auto& e : tls) {
    if (e.first == ctx) return e.second;
  }
  Stream* s = NewStream(ctx, 0, 0);
  s->per_thread = true;
  tls.emplace_back(ctx, s);
  return s;
}

void NotifySubmit(uint64_t correlation) {
  if (t_api_correlation != 0) return;  // the API call's observer has seen it
  if (const SimgpuObserver* o = G().observer.load(std::memory_order_acquire)) {
    if (o->on_submit) o->on_submit(correlation, o->user);
  }
}

// The calling thread's run-queue delay (the second field of
// /proc/thread-self/schedstat), ~0 when unreadable. The descriptor is kept
// per thread (pread, no open per call) and reopened in a fork child.
uint64_t ThreadRunDelayNs() {
  struct SchedFile {
    int fd = -1;
    pid_t pid = 0;
    ~SchedFile() {
      if (fd >= 0 && pid == getpid()) close(fd);
    }
  };
  static thread_local SchedFile f;
  const pid_t pid = getpid();
  if (f.fd == -2) return ~0ull;
  if (f.fd < 0 || f.pid != pid) {
    f.fd = open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
    f.pid = pid;
    if (f.fd < 0) {
      f.fd = -2;
      return ~0ull;
    }
  }
  char buf[96];
  const ssize_t n = pread(f.fd, buf, sizeof buf - 1, 0);
  if (n <= 0) return ~0ull;
  buf[n] = '\0';
  unsigned long long run = 0, delay = 0;
  if (sscanf(buf, "%llu %llu", &run, &delay) != 2) return ~0ull;
  return delay;
}

void Submit(Stream* s, const OpPtr& op) { SubmitAll(s, &op, 1); }

void SubmitAll(Stream* s, const OpPtr* ops, size_t n) {
  if (n == 0) return;
  if (ops[0]->correlation != 0) NotifySubmit(ops[0]->correlation);
  const Knobs& k = GetKnobs();
  uint32_t host_tid = 0;
  uint64_t run_delay = ~0ull;
  if (!k.trace_path.empty()) {
    host_tid = static_cast<uint32_t>(syscall(SYS_gettid));
    run_delay = ThreadRunDelayNs();
  }
  Device* d = s->dev;
  {
    std::unique_lock<std::mutex> lk(d->mu);
    EnsureThread(d);
    if (s->not_started >= k.queue_depth) {
      d->host_waiters++;
      d->host_cv.wait(lk, [&] { return s->not_started < k.queue_depth; });
      d->host_waiters--;
    }
    const uint64_t enqueue = NowNs();
    Context* c = s->ctx;
    for (size_t i = 0; i < n; ++i) {
      Op* op = ops[i].get();
      op->stream = s;
      op->host_tid = host_tid;
      op->host_run_delay_ns = run_delay;
      op->enqueue_ns = enqueue;
      op->ready_ns = enqueue + k.launch_latency_ns;
      if (s->legacy) {
        for (Stream* t : c->streams) {
          if (t != s && t->blocking && t->tail && !t->tail->finished) op->deps.push_back(t->tail);
        }
      } else if (s->blocking) {
        Stream* l = c->legacy;
        if (l->tail && !l->tail->finished) op->deps.push_back(l->tail);
      }
      s->queue.push_back(ops[i]);
      s->not_started++;
      s->tail = ops[i];
    }
    d->kick = true;
    d->kick_flag.store(true, std::memory_order_relaxed);
  }
  d->work_cv.notify_one();
}

void WaitDone(Device* d, const std::vector<OpPtr>& ops) {
  std::unique_lock<std::mutex> lk(d->mu);
  auto all_done = [&] {
    for (const OpPtr& op : ops) {
      if (!op->done) return false;
    }
    return true;
  };
  if (all_done()) return;
  for (const OpPtr& op : ops) op->awaited = true;
  d->host_waiters++;
  d->host_cv.wait(lk, all_done);
  d->host_waiters--;
}

void WaitStarted(Device* d, const OpPtr& op) {
  std::unique_lock<std::mutex> lk(d->mu);
  if (op->started) return;
  op->awaited = true;
  d->host_waiters++;
  d->host_cv.wait(lk, [&] { return op->started; });
  d->host_waiters--;
}

void SyncStream(Stream* s) {
  OpPtr tail;
  {
    std::lock_guard<std::mutex> lk(s->dev->mu);
    tail = s->tail;
  }
  if (tail) WaitDone(s->dev, {tail});
}

void SyncDevice(Device* d) {
  std::vector<OpPtr> tails;
  {
    std::lock_guard<std::mutex> lk(d->mu);
    for (Stream* s : d->streams) {
      if (s->tail && !s->tail->done) tails.push_back(s->tail);
    }
  }
  if (!tails.empty()) WaitDone(d, tails);
}

void SyncAllDevices() {
  for (int i = 0; i < DeviceCount(); ++i) SyncDevice(GetDevice(i));
}

bool StreamIdle(Stream* s) {
  std::lock_guard<std::mutex> lk(s->dev->mu);
  return !s->tail || s->tail->done.load();
}

void AddRange(const void* p, size_t size, MemKind kind) {
  Globals& g = G();
  std::unique_lock<std::shared_mutex> lk(g.ranges_mu);
  g.ranges[reinterpret_cast<uintptr_t>(p)] = {size == 0 ? 1 : size, kind};
}

bool RemoveRange(const void* p, MemKind* kind, size_t* size) {
  Globals& g = G();
  std::unique_lock<std::shared_mutex> lk(g.ranges_mu);
  auto it = g.ranges.find(reinterpret_cast<uintptr_t>(p));
  if (it == g.ranges.end()) return false;
  *size = it->second.first;
  *kind = it->second.second;
  g.ranges.erase(it);
  return true;
}

bool FindRange(const void* p, uintptr_t* base, size_t* size, MemKind* kind) {
  Globals& g = G();
  uintptr_t a = reinterpret_cast<uintptr_t>(p);
  std::shared_lock<std::shared_mutex> lk(g.ranges_mu);
  auto it = g.ranges.upper_bound(a);
  if (it == g.ranges.begin()) return false;
  --it;
  if (a >= it->first + it->second.first) return false;
  *base = it->first;
  *size = it->second.first;
  *kind = it->second.second;
  return true;
}

void Kick(Device* d) {
  {
    std::lock_guard<std::mutex> lk(d->mu);
    if (!d->thread_started) return;
    d->kick = true;
    d->kick_flag.store(true, std::memory_order_relaxed);
  }
  d->work_cv.notify_one();
}

MemKind Classify(const void* p) {
  Globals& g = G();
  uintptr_t a = reinterpret_cast<uintptr_t>(p);
  std::shared_lock<std::shared_mutex> lk(g.ranges_mu);
  auto it = g.ranges.upper_bound(a);
  if (it == g.ranges.begin()) return MemKind::kPageable;
  --it;
  if (a < it->first + it->second.first) return it->second.second;
  return MemKind::kPageable;
}

uint32_t CuptiMemKind(MemKind k) {
  switch (k) {
    case MemKind::kDevice: return SIMGPU_MEM_DEVICE;
    case MemKind::kPinned:
    case MemKind::kRegistered: return SIMGPU_MEM_PINNED;
    default: return SIMGPU_MEM_PAGEABLE;
  }
}

void TraceFlush() {
  const Knobs& k = GetKnobs();
  if (k.trace_path.empty()) return;
  Tracer& t = T();
  std::lock_guard<std::mutex> io(t.io_mu);
  std::vector<SimgpuOpRecord> batch;
  {
    std::lock_guard<std::mutex> lk(t.mu);
    batch.swap(t.pending);
  }
  if (batch.empty()) return;
  if (t.fd < 0 && !t.open_failed) {  // created with the first op
    t.fd = open(k.trace_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (t.fd < 0) t.open_failed = true;
  }
  if (t.fd < 0) return;
  std::string out;
  out.reserve(batch.size() * 200);
  char buf[256];
  for (const SimgpuOpRecord& r : batch) {
    out += "{\"kind\":\"";
    out += r.is_nccl ? "nccl" : KindName(r.kind);
    out += "\",\"name\":";
    AppendJsonString(&out, r.name);
    snprintf(buf, sizeof buf,
             ",\"device\":%u,\"stream\":%u,\"start_ns\":%llu,\"end_ns\":%llu,"
             "\"correlation\":%llu,\"bytes\":%llu,\"queued_ns\":%llu,\"context\":%u}\n",
             r.device, r.stream_id, static_cast<unsigned long long>(r.start_ns),
             static_cast<unsigned long long>(r.end_ns),
             static_cast<unsigned long long>(r.correlation),
             static_cast<unsigned long long>(r.bytes),
             static_cast<unsigned long long>(r.queued_ns), r.context_id);
    out += buf;
    out.resize(out.size() - 2);  // "}\n"
    snprintf(buf, sizeof buf, ",\"tid\":%u,\"run_delay_ns\":%lld}\n", r.host_tid,
             r.host_run_delay_ns == ~0ull ? -1LL : static_cast<long long>(r.host_run_delay_ns));
    out += buf;
    if (r.is_nccl) {
      out.resize(out.size() - 2);  // "}\n"
      snprintf(buf, sizeof buf, ",\"comm\":%llu,\"seq\":%llu,\"rank\":%d}\n",
               static_cast<unsigned long long>(r.nccl_comm),
               static_cast<unsigned long long>(r.nccl_seq), r.nccl_rank);
      out += buf;
    }
  }
  WriteAll(t.fd, out);
}

}  // namespace simgpu

extern "C" __attribute__((visibility("default"))) int simgpu_set_observer(
    const SimgpuObserver* observer) {
  if (observer == nullptr) {
    simgpu::G().observer.store(nullptr, std::memory_order_release);
    return 0;
  }
  if (observer->size < sizeof(SimgpuObserver)) return 1;
  // Leaked on purpose: a device thread may still be reading the old one.
  SimgpuObserver* copy = new SimgpuObserver(*observer);
  simgpu::G().observer.store(copy, std::memory_order_release);
  return 0;
}

extern "C" __attribute__((visibility("default"))) uint64_t simgpu_api_begin(void) {
  if (simgpu::t_api_correlation != 0) return simgpu::t_api_correlation;
  simgpu::t_api_correlation = simgpu::NextCorrelation();
  return simgpu::t_api_correlation;
}

extern "C" __attribute__((visibility("default"))) void simgpu_api_end(uint64_t correlation) {
  if (simgpu::t_api_correlation == correlation) simgpu::t_api_correlation = 0;
}

extern "C" __attribute__((visibility("default"))) void simgpu_trace_flush(void) {
  simgpu::TraceFlush();
}
