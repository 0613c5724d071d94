// What the NCCL hooks know about communicators: a stable id per communicator
// (the same on every rank), this process's rank and the communicator's size,
// and the per-communicator collective and point-to-point sequence numbers.
// The hooks (hooks.cc, from nccl_hooks.def) describe each call in a Call,
// call Before() ahead of the real function and After() once it returned;
// After() updates the state and queues the call's trace::NcclRecord.
//
// NCCL calls are not the launch fast path (a few per training step): the
// state is a map under a mutex.
#pragma once

#include <cstddef>
#include <cstdint>

#include "nccl_abi.h"
#include "trace_format.h"

namespace stallscope::nccl {

struct Call {
  trace::NcclKind kind = trace::NcclKind::kOther;
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  uint64_t count = 0;
  int datatype = -1;
  int op = -1;
  int peer = -1;  // p2p peer, or root
  bool collective = false;
  bool p2p = false;
  // Communicator creation: where the new communicators are written.
  ncclComm_t* out = nullptr;
  int out_count = 0;
  const ncclUniqueId* id = nullptr;
  int rank = -1, nranks = -1;
  int color = 0, key = 0;
  // Filled by Before().
  uint8_t group_depth = 0;
  bool submits = false;  // launches device work now (outside a group)

  void Coll(ncclComm_t c, cudaStream_t s, size_t n, int dtype, int rop, int root) {
    comm = c, stream = s, count = n, datatype = dtype, op = rop, peer = root, collective = true;
  }
  void P2p(ncclComm_t c, cudaStream_t s, size_t n, int dtype, int to) {
    comm = c, stream = s, count = n, datatype = dtype, peer = to, p2p = true;
  }
  void Init(ncclComm_t* o, int n, const ncclUniqueId* uid, int r) {
    out = o, out_count = 1, nranks = n, id = uid, rank = r;
  }
  void InitAll(ncclComm_t* o, int n) { out = o, out_count = n, nranks = n; }
  void Split(ncclComm_t parent, int c, int k, ncclComm_t* o) {
    comm = parent, color = c, key = k, out = o, out_count = 1;
  }
  uint64_t Bytes() const {
    return count * StallscopeNcclTypeSize(datatype);
  }
};

// Group depth, whether the call submits device work now.
void Before(Call* c);
// Updates the communicator state (on success) and queues the NcclRecord.
void After(const Call& c, int result, uint32_t tid, uint64_t enter, uint64_t correlation);

// Forgets every communicator (fork child: NCCL communicators do not survive
// a fork).
void ResetAfterFork();

// FNV-1a 64 over the unique id: the communicator id every rank computes.
uint64_t CommIdFromUniqueId(const ncclUniqueId& id);

}  // namespace stallscope::nccl
