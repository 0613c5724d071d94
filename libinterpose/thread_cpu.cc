// CPU-time and run-queue samples of the calling thread (see thread_cpu.h).
#include "thread_cpu.h"

#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"

namespace stallscope::recorder {

// kCpuGapNs in ticks: the tick rate measured against CLOCK_MONOTONIC over
// 200 us at start-up (error well under 1%; the threshold only decides when a
// sample is taken, and sits 20% below the analyzer's).
uint64_t CalibrateCpuGapTicks() {
  if (g_ticks_are_ns) return kCpuGapNs;
  uint64_t m0 = MonoNs(), t0 = Ticks(), m1, t1;
  do {
    m1 = MonoNs();
    t1 = Ticks();
  } while (m1 - m0 < 200 * 1000);
  if (t1 <= t0) return kCpuGapNs;
  return uint64_t(double(kCpuGapNs) * double(t1 - t0) / double(m1 - m0));
}

uint64_t ThreadCpuNs() {
  timespec ts;
  if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0) return 0;
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

// Parses "<sum_exec_runtime> <run_delay> <pcount>\n"; false unless the text
// is exactly that (a descriptor the job closed and reused is never trusted).
bool ParseSchedstat(const char* p, const char* end, uint64_t* run_delay) {
  uint64_t v[3] = {0, 0, 0};
  for (int f = 0; f < 3; ++f) {
    if (p == end || *p < '0' || *p > '9') return false;
    while (p != end && *p >= '0' && *p <= '9') v[f] = v[f] * 10 + uint64_t(*p++ - '0');
    const char sep = f < 2 ? ' ' : '\n';
    if (p == end || *p++ != sep) return false;
  }
  if (p != end) return false;
  *run_delay = v[1];
  return true;
}

// The thread's run-queue delay so far (ns), or kRunDelayUnknown. The first
// field of schedstat is not used for CPU time: for a running thread it lags
// by up to a scheduler tick, where CLOCK_THREAD_CPUTIME_ID is exact; the
// delay is current (it grows only while the thread waits, and this thread
// is running).
uint64_t ThreadRunDelayNs(ThreadState& ts) {
  if (ts.sched_fd == -2) return trace::kRunDelayUnknown;
  if (ts.sched_fd < 0) {
    ts.sched_fd = open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
    if (ts.sched_fd < 0) {
      ts.sched_fd = -2;
      return trace::kRunDelayUnknown;
    }
  }
  char buf[96];
  const ssize_t n = pread(ts.sched_fd, buf, sizeof buf, 0);
  uint64_t delay;
  if (n <= 0 || !ParseSchedstat(buf, buf + n, &delay)) {
    // Not schedstat any more (the job closed the descriptor and reused its
    // number) or never readable: stop reading, never close what is not ours.
    // The samples then say kRunDelayUnknown, and the analyzer says so.
    ts.sched_fd = -2;
    return trace::kRunDelayUnknown;
  }
  return delay;
}

}  // namespace stallscope::recorder
