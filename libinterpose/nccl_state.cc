// Communicator bookkeeping for the NCCL hooks (see nccl_state.h).
#include "nccl_state.h"

#include <dlfcn.h>
#include <pthread.h>

#include <unordered_map>
#include <utility>

#include "recorder.h"

extern "C" __attribute__((visibility("hidden"))) void* stallscope_resolve_real_dlsym();

namespace stallscope::nccl {
namespace {

struct PairHash {
  size_t operator()(uint64_t k) const { return std::hash<uint64_t>()(k); }
};

struct Comm {
  uint64_t id = 0;
  int rank = -1;
  int nranks = -1;
  bool unknown = false;   // created before tracing started
  uint64_t collectives = 0;  // collectives issued so far
  uint64_t splits = 0;       // ncclCommSplit calls on it so far
  // Point-to-point sequences: (peer << 1 | is_recv) -> count so far.
  std::unordered_map<uint64_t, uint64_t, PairHash> p2p;
};

pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
std::unordered_map<ncclComm_t, Comm>* g_comms = nullptr;
uint64_t g_init_all = 0;  // ncclCommInitAll calls so far

thread_local int t_group_depth __attribute__((tls_model("initial-exec"))) = 0;

uint64_t Fnv(uint64_t h, const void* p, size_t n) {
  const auto* c = static_cast<const unsigned char*>(p);
  for (size_t i = 0; i < n; ++i) h = (h ^ c[i]) * 1099511628211ull;
  return h;
}
constexpr uint64_t kFnvBasis = 14695981039346656037ull;

std::unordered_map<ncclComm_t, Comm>& Comms() {
  if (!g_comms) g_comms = new std::unordered_map<ncclComm_t, Comm>;
  return *g_comms;
}

// A real NCCL query function (never one of our wrappers: these are not
// hooked), resolved from the next object or an already loaded libnccl.
using QueryFn = ncclResult_t (*)(const ncclComm_t, int*);
QueryFn RealQuery(const char* pname, const char* name) {
  using Dlsym = void* (*)(void*, const char*);
  auto real_dlsym = reinterpret_cast<Dlsym>(stallscope_resolve_real_dlsym());
  if (!real_dlsym) return nullptr;
  void* p = real_dlsym(RTLD_NEXT, pname);
  if (!p) p = real_dlsym(RTLD_NEXT, name);
  if (!p) {
    if (void* h = dlopen("libnccl.so.2", RTLD_LAZY | RTLD_NOLOAD)) {
      p = real_dlsym(h, pname);
      if (!p) p = real_dlsym(h, name);
    }
  }
  return reinterpret_cast<QueryFn>(p);
}

void QueryRank(ncclComm_t comm, int* rank, int* nranks) {
  static QueryFn user_rank = RealQuery("pncclCommUserRank", "ncclCommUserRank");
  static QueryFn count = RealQuery("pncclCommCount", "ncclCommCount");
  if (user_rank && user_rank(comm, rank) != ncclSuccess) *rank = -1;
  if (count && count(comm, nranks) != ncclSuccess) *nranks = -1;
}

// The state of `comm`, registered on first sight when it was created before
// tracing started (its id then is only unique within this process).
Comm& Lookup(ncclComm_t comm) {
  auto& comms = Comms();
  auto it = comms.find(comm);
  if (it != comms.end()) return it->second;
  Comm& c = comms[comm];
  uintptr_t p = reinterpret_cast<uintptr_t>(comm);
  c.id = Fnv(kFnvBasis ^ 0x756e6b6e6f776e, &p, sizeof p);
  c.unknown = true;
  QueryRank(comm, &c.rank, &c.nranks);
  return c;
}

trace::NcclRecord Base(const Call& c, uint32_t tid, uint64_t enter, uint64_t corr) {
  trace::NcclRecord r{};
  r.enter = enter;
  r.correlation = corr;
  r.tid = tid;
  r.rank = -1;
  r.nranks = -1;
  r.peer = c.peer;
  r.kind = uint8_t(c.kind);
  r.datatype = c.datatype >= 0 && c.datatype < 255 ? uint8_t(c.datatype) : 255;
  r.group_depth = c.group_depth;
  r.op = c.op;
  r.count = c.count;
  if (c.group_depth > 0) r.flags |= trace::kNcclInGroup;
  return r;
}

void Describe(const Comm& comm, trace::NcclRecord* r) {
  r->comm = comm.id;
  r->rank = comm.rank;
  r->nranks = comm.nranks;
  if (comm.unknown) r->flags |= trace::kNcclCommUnknown;
}

}  // namespace

uint64_t CommIdFromUniqueId(const ncclUniqueId& id) {
  return Fnv(kFnvBasis, id.internal, sizeof id.internal);
}

void Before(Call* c) {
  c->group_depth = uint8_t(t_group_depth > 255 ? 255 : t_group_depth);
  const bool device_work = c->collective || c->p2p;
  c->submits = (device_work && t_group_depth == 0) ||
               (c->kind == trace::NcclKind::kGroupEnd && t_group_depth == 1);
}

void After(const Call& c, int result, uint32_t tid, uint64_t enter, uint64_t corr) {
  using K = trace::NcclKind;
  const bool ok = result == ncclSuccess || result == ncclInProgress;
  if (c.kind == K::kGroupStart && ok) ++t_group_depth;
  if (c.kind == K::kGroupEnd && t_group_depth > 0) --t_group_depth;

  trace::NcclRecord recs[8];
  size_t n = 0;
  trace::NcclRecord r = Base(c, tid, enter, corr);
  pthread_mutex_lock(&g_mu);
  auto& comms = Comms();
  switch (c.kind) {
    case K::kCommInit: {
      if (!ok || !c.out) {
        recs[n++] = r;
        break;
      }
      uint64_t all_id = 0;
      if (!c.id) {  // ncclCommInitAll: one process, ranks 0..n-1
        uint64_t seq = g_init_all++;
        uintptr_t first = reinterpret_cast<uintptr_t>(c.out[0]);
        all_id = Fnv(Fnv(kFnvBasis ^ 0x616c6c, &first, sizeof first), &seq, sizeof seq);
      }
      for (int i = 0; i < c.out_count; ++i) {
        ncclComm_t made = c.out[i];
        if (!made) continue;
        Comm& cm = comms[made];
        cm = Comm();
        cm.id = c.id ? CommIdFromUniqueId(*c.id) : all_id;
        cm.rank = c.id ? c.rank : i;
        cm.nranks = c.nranks;
        trace::NcclRecord x = r;
        Describe(cm, &x);
        if (n < 8) recs[n++] = x;
      }
      if (n == 0) recs[n++] = r;
      break;
    }
    case K::kCommSplit: {
      Comm& parent = Lookup(c.comm);
      uint64_t split = parent.splits++;
      trace::NcclRecord x = r;
      x.peer = -1;
      if (ok && c.out && *c.out) {
        ncclComm_t made = *c.out;
        uint64_t id = parent.id;
        id = Fnv(id, &split, sizeof split);
        int64_t color = c.color;
        id = Fnv(id, &color, sizeof color);
        Comm& cm = comms[made];
        cm = Comm();
        cm.id = id;
        QueryRank(made, &cm.rank, &cm.nranks);
        Describe(cm, &x);
      } else {
        Describe(parent, &x);  // no new communicator (NOCOLOR or failure)
      }
      recs[n++] = x;
      break;
    }
    case K::kCommDestroy:
    case K::kCommAbort:
    case K::kCommFinalize: {
      if (c.comm) {
        Describe(Lookup(c.comm), &r);
        if (ok && c.kind != K::kCommFinalize) comms.erase(c.comm);
      }
      recs[n++] = r;
      break;
    }
    default: {
      if (c.comm) {
        Comm& cm = Lookup(c.comm);
        Describe(cm, &r);
        if (c.collective) {
          r.flags |= trace::kNcclCollective;
          r.seq = cm.collectives;
          if (ok) cm.collectives++;
        } else if (c.p2p) {
          r.flags |= trace::kNcclP2p;
          uint64_t key = (uint64_t(uint32_t(c.peer)) << 1) | (c.kind == K::kRecv ? 1 : 0);
          uint64_t& s = cm.p2p[key];
          r.seq = s;
          if (ok) s++;
        }
      }
      recs[n++] = r;
      break;
    }
  }
  pthread_mutex_unlock(&g_mu);
  for (size_t i = 0; i < n; ++i) recorder::AddNccl(recs[i]);
}

void ResetAfterFork() {
  g_mu = PTHREAD_MUTEX_INITIALIZER;
  if (g_comms) g_comms->clear();
  t_group_depth = 0;
}

}  // namespace stallscope::nccl
