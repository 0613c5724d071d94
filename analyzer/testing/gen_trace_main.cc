// Writes a synthetic .sstrace of N steps of launches, syncs and copies with
// the test trace builder: input for benchmarking `stallscope report` and a
// seed corpus for fuzzing. Usage: stallscope_gen_trace OUT.sstrace [STEPS [KERNEL_NAME]]
// (KERNEL_NAME, default "kernel", names every kernel: e.g. markup for the
// HTML report's escaping test). STALLSCOPE_GEN_ENCODING=packed or zstd writes
// the call, op and correlation chunks as the recorder does (format 4's
// encodings); raw (the default) writes fixed records. STALLSCOPE_GEN_OP_RANGES=1
// puts each launch inside an NVTX range of its own; STALLSCOPE_GEN_MARKERS=0
// leaves out the step ranges; STALLSCOPE_GEN_PID sets the process id;
// STALLSCOPE_GEN_RANK=R/N makes it rank R of N, an all-reduce each step.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "analyzer/testing/test_util.h"

int main(int argc, char** argv) {
  using namespace stallscope::testing;
  // An option (--help) is not an output path: it would become a file.
  if (argc < 2 || argv[1][0] == '-' || (argc > 2 && atoi(argv[2]) <= 0)) {
    fprintf(stderr, "usage: %s OUT.sstrace [STEPS [KERNEL_NAME]]  (STEPS > 0)\n", argv[0]);
    return argc >= 2 && std::string(argv[1]) == "--help" ? 0 : 1;
  }
  const int steps = argc > 2 ? atoi(argv[2]) : 1000;
  const std::string kernel = argc > 3 ? argv[3] : "kernel";
  const char* encoding = getenv("STALLSCOPE_GEN_ENCODING");
  const std::string e = encoding != nullptr ? encoding : "raw";
  if (e != "raw" && e != "packed" && e != "zstd") {
    fprintf(stderr, "STALLSCOPE_GEN_ENCODING=%s: expected raw, packed or zstd\n", e.c_str());
    return 1;
  }
  const char* op_ranges = getenv("STALLSCOPE_GEN_OP_RANGES");
  const char* markers = getenv("STALLSCOPE_GEN_MARKERS");
  // Each kernel's time (default 20 us: the device runs behind the host);
  // under the 6 us between launches, the host sets the pace.
  const char* kernel_us = getenv("STALLSCOPE_GEN_KERNEL_US");
  const int64_t kernel_ns = kernel_us != nullptr ? atoll(kernel_us) * kUs : 20 * kUs;
  if (kernel_ns <= 0) {
    fprintf(stderr, "STALLSCOPE_GEN_KERNEL_US=%s: expected a positive number of microseconds\n", kernel_us);
    return 1;
  }
  int rank = -1, nranks = 0;
  if (const char* r = getenv("STALLSCOPE_GEN_RANK"); r != nullptr) {
    if (sscanf(r, "%d/%d", &rank, &nranks) != 2 || rank < 0 || nranks < 2 || rank >= nranks) {
      fprintf(stderr, "STALLSCOPE_GEN_RANK=%s: expected R/N, 0 <= R < N, N >= 2\n", r);
      return 1;
    }
  }
  TraceBuilder b = SyntheticSteps(steps, kernel, op_ranges != nullptr && std::string(op_ranges) == "1",
                                  markers == nullptr || std::string(markers) != "0", kernel_ns, rank, nranks);
  // STALLSCOPE_GEN_PID: the process id in the header (default 4242), so
  // that several files make a folder of distinct processes.
  if (const char* pid = getenv("STALLSCOPE_GEN_PID"); pid != nullptr) {
    const long long id = atoll(pid);
    if (id <= 0 || id > 0xffffffffLL) {
      fprintf(stderr, "STALLSCOPE_GEN_PID=%s: expected a positive process id\n", pid);
      return 1;
    }
    b.SetPid(static_cast<uint32_t>(id));
  }
  b.SetPacked(e != "raw", e == "zstd");
  b.WriteTo(argv[1]);
  return 0;
}
