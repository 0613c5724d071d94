// SIMGPU_SYNC_TRACE (see README.md): one JSON line per driver call that
// synchronized with the device under the simulator's blocking rules, the
// ground truth for a report's synchronizing calls. Written at once with
// write(2) on an O_APPEND descriptor (each line is one write), so nothing is
// lost at exit and threads never interleave.
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <mutex>
#include <string>

#include "sim_engine.h"

namespace simgpu {
namespace {

struct SyncTraceFile {
  std::mutex mu;
  pid_t pid = 0;  // the process the descriptor belongs to
  int fd = -1;
};

SyncTraceFile& File() {
  static SyncTraceFile* f = new SyncTraceFile;  // never destroyed: syncs may run at exit
  return *f;
}

// The path for this process: %p is its pid. Without %p only the process
// that first writes uses the file (a forked child writes nothing rather than
// mixing its lines into the parent's).
int OpenFor(pid_t pid, bool first) {
  const char* v = getenv("SIMGPU_SYNC_TRACE");
  if (v == nullptr || *v == '\0') return -1;
  std::string path;
  bool has_pid = false;
  for (const char* p = v; *p != '\0'; ++p) {
    if (p[0] == '%' && p[1] == 'p') {
      path += std::to_string(pid);
      has_pid = true;
      ++p;
    } else {
      path += *p;
    }
  }
  if (!first && !has_pid) return -1;
  return open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
}

}  // namespace

void SyncTrace(const char* api, uint64_t start_ns, uint64_t end_ns) {
  static const bool enabled = [] {
    const char* v = getenv("SIMGPU_SYNC_TRACE");
    return v != nullptr && *v != '\0';
  }();
  if (!enabled) return;
  SyncTraceFile& f = File();
  std::lock_guard<std::mutex> lk(f.mu);
  const pid_t pid = getpid();
  if (f.pid != pid) {
    const bool first = f.pid == 0;
    if (f.fd >= 0) close(f.fd);  // inherited across fork: the parent's file
    f.fd = OpenFor(pid, first);
    f.pid = pid;
  }
  if (f.fd < 0) return;
  char line[256];
  const int n = snprintf(line, sizeof line,
                         "{\"kind\":\"sync\",\"api\":\"%s\",\"tid\":%ld,\"start_ns\":%llu,"
                         "\"end_ns\":%llu}\n",
                         api, static_cast<long>(syscall(SYS_gettid)),
                         static_cast<unsigned long long>(start_ns),
                         static_cast<unsigned long long>(end_ns));
  if (n > 0 && n < static_cast<int>(sizeof line)) {
    ssize_t ignored = write(f.fd, line, static_cast<size_t>(n));
    (void)ignored;
  }
}

}  // namespace simgpu
