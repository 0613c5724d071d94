// A small CUDA driver-API job for the robustness tests (tests/robustness/
// robustness.py): each mode exercises one way a job can disturb a recorder
// — threads that come and go, exit from a thread, _exit, fork, fork+exec,
// signals, a CUPTI client of its own (dlclose of libcuda: rb_dlopen.cc). The output of
// every mode is deterministic so that runs with and without stallscope can
// be compared byte for byte.
//
//   rb_job storm THREADS LAUNCHES     THREADS threads launch at once (each
//                                     LAUNCHES, then a synchronize)
//   rb_job thread_exit N              a second thread launches N and exits
//   rb_job exit_thread N              a second thread calls exit(5)
//   rb_job quick_exit N               launches, waits for a drain, _exit(3)
//   rb_job fork CHILD_END N           fork without exec; child ends with
//                                     "exit" or "_exit" after its launches
//   rb_job fork_exec N                fork + exec of `rb_job simple N`
//   rb_job fork_storm CHILDREN N      CHILDREN forks while a thread launches;
//                                     each child makes N launches (0: none)
//   rb_job simple N                   N launches and a synchronize
//   rb_job inflight N                 N launches left queued at exit
//   rb_job paced ROUNDS N MS          ROUNDS x (N launches, a synchronize),
//                                     MS apart; with env RB_GATE=PATH, after
//                                     half the rounds it prints "gate" and
//                                     waits while PATH exists
//   rb_job signal N                   launches until SIGTERM/SIGINT; with
//                                     env RB_HANDLER=1 its own handlers
//   rb_job cupti MODE N               N launches, then MODE (none, steal:
//                                     the job registers its own CUPTI
//                                     buffers, disable: it disables the
//                                     kernel kind), then 4*N launches
#include <cuda.h>
#include <dirent.h>
#include <dlfcn.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <string>
#include <vector>

namespace {

const char* kImage = ".version 8.0\n.target sm_75\n.address_size 64\n";

CUcontext g_ctx;
CUmodule g_mod;

void Check(CUresult r, const char* what) {
  if (r != CUDA_SUCCESS) {
    fprintf(stderr, "rb_job: %s failed: %d\n", what, int(r));
    exit(1);
  }
}

void SleepMs(long ms) {
  timespec ts{ms / 1000, (ms % 1000) * 1000000};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

void Setup() {
  Check(cuInit(0), "cuInit");
  CUdevice dev;
  Check(cuDeviceGet(&dev, 0), "cuDeviceGet");
  Check(cuDevicePrimaryCtxRetain(&g_ctx, dev), "cuDevicePrimaryCtxRetain");
  Check(cuCtxSetCurrent(g_ctx), "cuCtxSetCurrent");
  Check(cuModuleLoadData(&g_mod, kImage), "cuModuleLoadData");
}

// N launches of kernel `name` on a new stream, then a synchronize.
void Launches(const char* name, int n) {
  Check(cuCtxSetCurrent(g_ctx), "cuCtxSetCurrent");
  CUfunction f;
  Check(cuModuleGetFunction(&f, g_mod, name), "cuModuleGetFunction");
  CUstream s;
  Check(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  for (int i = 0; i < n; ++i)
    Check(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, s, nullptr, nullptr), "cuLaunchKernel");
  Check(cuStreamSynchronize(s), "cuStreamSynchronize");
  Check(cuStreamDestroy(s), "cuStreamDestroy");
}

void PrintPeakMemory();

int Storm(int threads, int n) {
  Setup();
  std::atomic<int> ready{0};
  std::vector<pthread_t> th(threads);
  struct Arg {
    std::atomic<int>* ready;
    int threads, n;
  } arg{&ready, threads, n};
  for (auto& t : th)
    pthread_create(&t, nullptr, [](void* p) -> void* {
      auto* a = static_cast<Arg*>(p);
      a->ready->fetch_add(1);
      // Yield while waiting: 64 spinners on 2 cores (and TSan's lock around
      // every atomic) starve the threads that have yet to arrive.
      while (a->ready->load() < a->threads) sched_yield();
      Launches("storm", a->n);
      return nullptr;
    }, &arg);
  for (auto& t : th) pthread_join(t, nullptr);
  printf("storm %d x %d done\n", threads, n);
  PrintPeakMemory();
  return 0;
}

int ThreadExit(int n) {
  Setup();
  Launches("main_before", n);
  pthread_t t;
  pthread_create(&t, nullptr, [](void* p) -> void* {
    Launches("worker", *static_cast<int*>(p));
    return nullptr;
  }, &n);
  pthread_join(t, nullptr);
  SleepMs(100);
  Launches("main_after", n);
  printf("thread_exit done\n");
  return 0;
}

int ExitThread(int n) {
  Setup();
  Launches("main_before", n);
  pthread_t t;
  pthread_create(&t, nullptr, [](void* p) -> void* {
    Launches("worker", *static_cast<int*>(p));
    printf("worker exits the process\n");
    fflush(stdout);
    exit(5);
  }, &n);
  // The main thread keeps launching until the worker ends the process.
  for (;;) Launches("main_loop", 10);
}

// The bytes of the files in STALLSCOPE_OUT (-1 without it).
long long TraceBytes() {
  const char* out = getenv("STALLSCOPE_OUT");
  if (out == nullptr) return -1;
  DIR* d = opendir(out);
  if (d == nullptr) return 0;
  long long total = 0;
  while (dirent* e = readdir(d)) {
    struct stat st;
    std::string path = std::string(out) + "/" + e->d_name;
    if (e->d_name[0] != '.' && stat(path.c_str(), &st) == 0) total += st.st_size;
  }
  closedir(d);
  return total;
}

int QuickExit(int n) {
  Setup();
  Launches("before_drain", n);
  // Until the writer's periodic drains (every 200 ms) have taken these
  // launches: the trace grew, then stayed the same for two drain periods
  // (on a loaded machine a drain comes late, and the next one writes the
  // rest); 700 ms without STALLSCOPE_OUT.
  const long long start = TraceBytes();
  if (start < 0) {
    SleepMs(700);
  } else {
    long long last = start;
    int still_ms = 0;
    for (int waited = 0; waited < 20000 && (last == start || still_ms < 400); waited += 20) {
      SleepMs(20);
      const long long now = TraceBytes();
      still_ms = now == last ? still_ms + 20 : 0;
      last = now;
    }
  }
  Launches("after_drain", n);
  printf("quick_exit\n");
  fflush(stdout);
  _exit(3);
}

int Fork(const char* child_end, int n) {
  Setup();
  Launches("parent_before", n);
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    Launches("child", n);
    if (strcmp(child_end, "_exit") == 0) _exit(0);
    exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  Launches("parent_after", n);
  printf("fork child status %d\n", status);
  return 0;
}

// CHILDREN forks, one after another, while a second thread keeps launching
// (and blocking in synchronizes): a DataLoader's workers forked beside a
// training thread. Each child exits with exit(0) (atexit handlers run), after
// `child_launches` launches of its own when that is not 0.
int ForkStorm(int children, int child_launches) {
  Setup();
  std::atomic<bool> stop{false};
  pthread_t t;
  pthread_create(&t, nullptr, [](void* p) -> void* {
    auto* stop = static_cast<std::atomic<bool>*>(p);
    while (!stop->load()) Launches("busy", 20);
    return nullptr;
  }, &stop);
  fflush(stdout);
  int failed = 0;
  for (int i = 0; i < children; ++i) {
    pid_t pid = fork();
    if (pid == 0) {
      if (child_launches > 0) Launches("child", child_launches);
      exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    failed += !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  stop.store(true);
  pthread_join(t, nullptr);
  printf("fork_storm %d children, %d failed\n", children, failed);
  return 0;
}

int ForkExec(const char* self, int n) {
  Setup();
  Launches("parent_before", n);
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    char arg[32];
    snprintf(arg, sizeof arg, "%d", n);
    execl("/proc/self/exe", self, "simple", arg, static_cast<char*>(nullptr));
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  Launches("parent_after", n);
  printf("fork_exec child status %d\n", status);
  return 0;
}

// With RB_PRINT_HWM set, the process's peak resident memory (VmHWM of
// /proc/self/status: per address space, so not the exec'ing parent's) on
// stderr.
void PrintPeakMemory() {
  if (getenv("RB_PRINT_HWM") == nullptr) return;
  FILE* f = fopen("/proc/self/status", "r");
  if (f == nullptr) return;
  char line[256];
  while (fgets(line, sizeof line, f) != nullptr) {
    if (strncmp(line, "VmHWM:", 6) == 0) fputs(line, stderr);
  }
  fclose(f);
}

// N launches of a kernel the test makes long, then exit without a
// synchronize: work still queued on the device at exit.
int InFlight(int n) {
  Setup();
  Check(cuCtxSetCurrent(g_ctx), "cuCtxSetCurrent");
  CUfunction f;
  Check(cuModuleGetFunction(&f, g_mod, "inflight"), "cuModuleGetFunction");
  for (int i = 0; i < n; ++i)
    Check(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, nullptr, nullptr, nullptr), "cuLaunchKernel");
  printf("inflight %d queued\n", n);
  return 0;
}

int Simple(int n) {
  Setup();
  Launches("simple", n);
  printf("simple done\n");
  PrintPeakMemory();
  return 0;
}

// ROUNDS rounds of N launches and a synchronize, MS apart: a job that keeps
// the writer busy for a while at a steady rate (the disk-full test).
int Paced(int rounds, int n, int ms) {
  Setup();
  const char* gate = getenv("RB_GATE");
  for (int r = 0; r < rounds; ++r) {
    if (gate != nullptr && r == rounds / 2) {
      printf("gate\n");
      fflush(stdout);
      while (access(gate, F_OK) == 0) SleepMs(10);
    }
    Launches("paced", n);
    SleepMs(ms);
  }
  printf("paced %d x %d done\n", rounds, n);
  return 0;
}

volatile sig_atomic_t g_signal = 0;

int Signal(int n) {
  if (getenv("RB_HANDLER") && strcmp(getenv("RB_HANDLER"), "1") == 0) {
    struct sigaction sa {};
    sa.sa_handler = [](int sig) { g_signal = sig; };
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, nullptr);
    sigaction(SIGINT, &sa, nullptr);
  }
  Setup();
  Launches("before_ready", n);
  printf("ready\n");
  fflush(stdout);
  while (!g_signal) {
    Launches("loop", 10);
    SleepMs(20);
  }
  printf("caught %s\n", g_signal == SIGTERM ? "SIGTERM" : "SIGINT");
  return 40 + int(g_signal == SIGTERM);
}

// The job's own CUPTI client, through the same libcupti.so.13 as stallscope.
std::atomic<long> g_own_records{0};

int Cupti(const char* mode, int n) {
  Setup();
  Launches("before", n);
  SleepMs(300);  // let CUPTI deliver what came before
  if (strcmp(mode, "none") != 0) {
    void* h = dlopen("libcupti.so.13", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      fprintf(stderr, "no libcupti: %s\n", dlerror());
      return 1;
    }
    using Req = void (*)(uint8_t**, size_t*, size_t*);
    using Done = void (*)(CUcontext, uint32_t, uint8_t*, size_t, size_t);
    if (strcmp(mode, "steal") == 0) {
      auto reg = reinterpret_cast<int (*)(Req, Done)>(dlsym(h, "cuptiActivityRegisterCallbacks"));
      auto enable = reinterpret_cast<int (*)(int)>(dlsym(h, "cuptiActivityEnable"));
      Req req = [](uint8_t** buf, size_t* size, size_t* max) {
        *size = 1 << 20;
        *buf = static_cast<uint8_t*>(aligned_alloc(8, *size));
        *max = 0;
      };
      Done done = [](CUcontext, uint32_t, uint8_t* buf, size_t, size_t valid) {
        if (valid) g_own_records.fetch_add(1);
        free(buf);
      };
      if (!reg || !enable || reg(req, done) != 0 || enable(10 /* CONCURRENT_KERNEL */) != 0) {
        fprintf(stderr, "cupti registration failed\n");
        return 1;
      }
    } else {
      auto disable = reinterpret_cast<int (*)(int)>(dlsym(h, "cuptiActivityDisable"));
      if (!disable || disable(10 /* CONCURRENT_KERNEL */) != 0) {
        fprintf(stderr, "cupti disable failed\n");
        return 1;
      }
    }
  }
  Launches("after", 4 * n);
  if (strcmp(mode, "steal") == 0) {
    void* h = dlopen("libcupti.so.13", RTLD_NOW | RTLD_NOLOAD);
    auto flush = reinterpret_cast<int (*)(uint32_t)>(dlsym(h, "cuptiActivityFlushAll"));
    flush(1);
    printf("own buffers received: %s\n", g_own_records.load() > 0 ? "yes" : "no");
  }
  printf("cupti %s done\n", mode);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  const char* mode = argv[1];
  auto arg = [&](int i, int def) { return argc > i ? atoi(argv[i]) : def; };
  if (strcmp(mode, "storm") == 0) return Storm(arg(2, 64), arg(3, 200));
  if (strcmp(mode, "thread_exit") == 0) return ThreadExit(arg(2, 100));
  if (strcmp(mode, "exit_thread") == 0) return ExitThread(arg(2, 100));
  if (strcmp(mode, "quick_exit") == 0) return QuickExit(arg(2, 100));
  if (strcmp(mode, "fork") == 0 && argc > 2) return Fork(argv[2], arg(3, 100));
  if (strcmp(mode, "fork_exec") == 0) return ForkExec(argv[0], arg(2, 100));
  if (strcmp(mode, "fork_storm") == 0) return ForkStorm(arg(2, 200), arg(3, 0));
  if (strcmp(mode, "simple") == 0) return Simple(arg(2, 100));
  if (strcmp(mode, "inflight") == 0) return InFlight(arg(2, 400));
  if (strcmp(mode, "paced") == 0) return Paced(arg(2, 50), arg(3, 100), arg(4, 20));
  if (strcmp(mode, "signal") == 0) return Signal(arg(2, 100));
  if (strcmp(mode, "cupti") == 0 && argc > 2) return Cupti(argv[2], arg(3, 100));
  return 2;
}
