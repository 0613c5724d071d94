// `stallscope run` (see run_command.h).
#include "analyzer/cli/run_command.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "analyzer/analyze/analysis.h"
#include "analyzer/analyze/hotspots.h"
#include "analyzer/analyze/steps.h"
#include "analyzer/cli/commands.h"
#include "analyzer/report/text.h"

extern char** environ;

namespace stallscope::analyzer {
namespace {

volatile sig_atomic_t g_child = 0;

// Forwards signals sent to stallscope itself. A terminal's Ctrl-C
// (si_code SI_KERNEL) already reaches the whole foreground group, the child
// included: forwarding it would deliver it twice.
void Forward(int sig, siginfo_t* info, void*) {
  if (g_child > 0 && (info == nullptr || info->si_code != SI_KERNEL)) kill(g_child, sig);
}

// The local time now in strftime's `format`.
std::string Now(const char* format) {
  time_t now = time(nullptr);
  struct tm tm;
  localtime_r(&now, &tm);
  char buf[64];
  strftime(buf, sizeof(buf), format, &tm);
  return buf;
}

std::string DefaultDirName() { return Now("stallscope-%Y%m%d-%H%M%S"); }

// The rank when a launcher (torchrun, mpirun, srun, any PMI launcher)
// started this `stallscope run` as one of a job's ranks; -1 otherwise.
int LauncherRank() {
  for (const char* name : {"RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"}) {
    const char* v = getenv(name);
    if (v != nullptr && *v != '\0') return atoi(v);
  }
  return -1;
}

// The folder every rank of one job shares when none is given: named after
// the launcher's job id, so that ranks started together agree on it.
std::string JobDirName() {
  if (const char* run_id = getenv("TORCHELASTIC_RUN_ID"); run_id && *run_id && strcmp(run_id, "none")) {
    return absl::StrCat("stallscope-", run_id);
  }
  if (const char* job = getenv("SLURM_JOB_ID"); job && *job) {
    const char* step = getenv("SLURM_STEP_ID");
    return absl::StrCat("stallscope-slurm-", job, step && *step ? absl::StrCat(".", step) : "");
  }
  for (const char* name : {"OMPI_MCA_ess_base_jobid", "PMIX_NAMESPACE", "PMI_JOBID"}) {
    if (const char* v = getenv(name); v && *v) return absl::StrCat("stallscope-job-", v);
  }
  // No job id: the launcher's rendezvous address, else the minute.
  const char* addr = getenv("MASTER_ADDR");
  const char* port = getenv("MASTER_PORT");
  if (addr && *addr && port && *port) return absl::StrCat("stallscope-", addr, "-", port);
  return Now("stallscope-ranks-%Y%m%d-%H%M");
}

bool IsEmptyDir(const std::string& path) {
  auto paths = ExpandTracePaths({path});
  return !paths.ok();
}

// The simulated stack's libraries, preloaded by `run --sim` in this order
// after libstallscope.so (whose hooks must come first).
constexpr const char* kSimulatedLibraries[] = {"libcuda.so.1",       "libcudart.so.13",
                                               "libcupti.so.13",     "libnccl.so.2",
                                               "libcublas.so.13",    "libcublasLt.so.13"};

}  // namespace

std::string LibDir() {
  if (const char* env = getenv("STALLSCOPE_LIBDIR"); env != nullptr && *env != '\0') return env;
  char buf[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return "lib";
  std::string exe(buf, static_cast<size_t>(n));
  size_t slash = exe.rfind('/');
  std::string bin = slash == std::string::npos ? "." : exe.substr(0, slash);
  return bin + "/../lib";
}

int RunUnderStallscope(const RunOptions& o) {
  const std::string libdir = LibDir();
  std::string dir = o.out_dir;
  bool created = false;
  // Inside a launcher every rank runs its own `stallscope run`: they share
  // one folder (named after the job unless --out says), and only rank 0
  // speaks, without analyzing (the other ranks may still be writing).
  const int launcher_rank = LauncherRank();
  if (dir.empty() && launcher_rank >= 0) dir = JobDirName();
  if (dir.empty()) {
    const std::string base = DefaultDirName();
    dir = base;
    for (int i = 2; mkdir(dir.c_str(), 0750) != 0; ++i) {
      if (errno != EEXIST || i > 100) {
        fprintf(stderr, "stallscope: cannot create %s: %s\n", dir.c_str(), strerror(errno));
        return 1;
      }
      dir = absl::StrFormat("%s-%d", base, i);
    }
    created = true;
  } else if (mkdir(dir.c_str(), 0750) == 0) {
    created = true;
  } else {
    struct stat st;
    if (errno != EEXIST || lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      fprintf(stderr, "stallscope: cannot create %s: %s\n", dir.c_str(),
              errno == EEXIST ? "exists and is not a folder" : strerror(errno));
      return 1;
    }
  }
  char abs[PATH_MAX];
  const std::string out_abs = realpath(dir.c_str(), abs) != nullptr ? abs : dir;
  // The job's traces must be writable there: said now, not as "no CUDA
  // activity recorded" after the job has run for nothing.
  {
    const std::string probe = absl::StrFormat("%s/.stallscope-probe-%d", out_abs, getpid());
    int fd = open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) {
      const int err = errno;
      if (created) rmdir(dir.c_str());
      fprintf(stderr, "stallscope: cannot write traces to %s: %s\n", dir.c_str(), strerror(err));
      return 1;
    }
    close(fd);
    unlink(probe.c_str());
  }

  // The child's environment.
  const std::string lib = libdir + "/libstallscope.so";
  if (access(lib.c_str(), R_OK) != 0) {
    fprintf(stderr, "stallscope: warning: %s not found (set STALLSCOPE_LIBDIR); nothing will be "
            "recorded\n", lib.c_str());
  }
  const bool custom_steps = !o.analysis.step_pattern.empty() && o.analysis.step_pattern != kDefaultStepPattern;
  std::vector<std::string> env;
  std::string preload = lib;
  std::string library_path = libdir + "/simgpu";
  // --sim: the simulated driver, runtime, CUPTI, NCCL and cuBLAS are preloaded, not
  // only first on the library path. A library's DT_RPATH is searched before
  // LD_LIBRARY_PATH (torch's point into NVIDIA's wheels), but a DT_NEEDED or
  // dlopen by soname is satisfied by an object already loaded under that
  // soname, whatever the search path (docs/frameworks.md).
  if (o.sim) {
    for (const char* name : kSimulatedLibraries) preload += ":" + library_path + "/" + name;
  }
  std::string python_path;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string_view kv(*e);
    if (std::string_view(kv).starts_with("LD_PRELOAD=")) {
      std::string_view old = kv.substr(11);
      if (!old.empty()) preload += ":" + std::string(old);
    } else if (std::string_view(kv).starts_with("PYTHONPATH=")) {
      python_path = std::string(kv.substr(11));
    } else if (o.sim && std::string_view(kv).starts_with("LD_LIBRARY_PATH=")) {
      std::string_view old = kv.substr(16);
      if (!old.empty()) library_path += ":" + std::string(old);
    } else if (!std::string_view(kv).starts_with("NVTX_INJECTION64_PATH=") &&
               !std::string_view(kv).starts_with("STALLSCOPE_OUT=") &&
               (o.ring.empty() || !std::string_view(kv).starts_with("STALLSCOPE_RING=")) &&
               (o.ring_regression.empty() || !std::string_view(kv).starts_with("STALLSCOPE_RING_REGRESSION=")) &&
               (o.device_sample == 0 || !std::string_view(kv).starts_with("STALLSCOPE_DEVICE_SAMPLE=")) &&
               (!custom_steps || !std::string_view(kv).starts_with("STALLSCOPE_STEP_PATTERN="))) {
      env.emplace_back(kv);
    }
  }
  env.push_back("LD_PRELOAD=" + preload);
  env.push_back("NVTX_INJECTION64_PATH=" + lib);
  env.push_back("STALLSCOPE_OUT=" + out_abs);
  if (!o.ring.empty()) env.push_back("STALLSCOPE_RING=" + o.ring);
  if (!o.ring_regression.empty()) env.push_back("STALLSCOPE_RING_REGRESSION=" + o.ring_regression);
  if (o.device_sample != 0) env.push_back(absl::StrCat("STALLSCOPE_DEVICE_SAMPLE=", o.device_sample));
  // The flight recorder's regression trigger finds steps as the report does.
  if (custom_steps) env.push_back("STALLSCOPE_STEP_PATTERN=" + o.analysis.step_pattern);
  if (o.sim) env.push_back("LD_LIBRARY_PATH=" + library_path);
  // stallscope's Python hooks (torch.profiler's ProfilerStep#N as step
  // markers): its sitecustomize, first on PYTHONPATH; it then runs the one
  // the job would have run, the next on the path (docs/frameworks.md).
  const std::string hooks = libdir + "/stallscope-python";
  if (access((hooks + "/sitecustomize.py").c_str(), R_OK) == 0) {
    python_path = python_path.empty() ? hooks : hooks + ":" + python_path;
  }
  if (!python_path.empty()) env.push_back("PYTHONPATH=" + python_path);
  std::vector<char*> envp, argv;
  for (std::string& s : env) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = o.command;
  for (std::string& s : args) argv.push_back(s.data());
  argv.push_back(nullptr);

  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    fprintf(stderr, "stallscope: pipe: %s\n", strerror(errno));
    return 1;
  }
  fflush(nullptr);
  // SIGINT/SIGTERM stay blocked from before the fork until the handler that
  // forwards them to the child is in place: a signal sent in between (the
  // child may signal its parent at once) is delivered then, not lost or
  // fatal to stallscope.
  sigset_t forwarded, old_mask;
  sigemptyset(&forwarded);
  sigaddset(&forwarded, SIGINT);
  sigaddset(&forwarded, SIGTERM);
  sigprocmask(SIG_BLOCK, &forwarded, &old_mask);
  pid_t pid = fork();
  if (pid < 0) {
    sigprocmask(SIG_SETMASK, &old_mask, nullptr);
    fprintf(stderr, "stallscope: fork: %s\n", strerror(errno));
    return 1;
  }
  if (pid == 0) {
    close(fds[0]);
    sigprocmask(SIG_SETMASK, &old_mask, nullptr);
    execvpe(argv[0], argv.data(), envp.data());
    int err = errno;
    ssize_t ignored = write(fds[1], &err, sizeof(err));
    (void)ignored;
    _exit(127);
  }
  close(fds[1]);
  g_child = pid;
  struct sigaction sa = {}, old_int = {}, old_term = {};
  sa.sa_sigaction = Forward;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);
  sigprocmask(SIG_SETMASK, &old_mask, nullptr);

  int exec_errno = 0;
  ssize_t got;
  do {
    got = read(fds[0], &exec_errno, sizeof(exec_errno));
  } while (got < 0 && errno == EINTR);
  close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  g_child = 0;
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);

  if (got == static_cast<ssize_t>(sizeof(exec_errno))) {
    if (created) rmdir(dir.c_str());
    if (exec_errno == ENOENT) {
      fprintf(stderr, "stallscope: %s: command not found\n", o.command[0].c_str());
      return 127;
    }
    fprintf(stderr, "stallscope: %s: cannot run: %s\n", o.command[0].c_str(),
            strerror(exec_errno));
    return 126;
  }
  const int code = WIFEXITED(status)     ? WEXITSTATUS(status)
                   : WIFSIGNALED(status) ? 128 + WTERMSIG(status)
                                         : 1;

  if (launcher_rank >= 0) {
    if (launcher_rank == 0 && !o.report.quiet) {
      fprintf(stderr,
              "stallscope: rank 0 done; every rank writes its trace into %s; once all have "
              "finished: stallscope report %s\n",
              dir.c_str(), dir.c_str());
    }
    return code;
  }
  if (IsEmptyDir(dir)) {
    if (created) rmdir(dir.c_str());  // only removes an empty folder
    if (o.report.quiet) return code;
    fprintf(stderr, "stallscope: no CUDA activity recorded%s\n",
            o.sim ? "" : " (on a machine without a GPU driver, try `stallscope run --sim`)");
    return code;
  }
  const AnalysisOptions ao = OptionsFrom(o.report, o.analysis);
  if (o.full_report) {
    // The command's exit code stays the answer; a report that could not be
    // written turns a success into its error code.
    const int wrote = WriteReport("run", {dir}, o.report, ao);
    if (!o.report.quiet) fprintf(stderr, "stallscope: traces in %s\n", dir.c_str());
    return code != 0 ? code : wrote;
  }
  if (o.report.quiet) return code;
  AnalysisOptions summary = ao;
  summary.predict = false;  // the summary line shows none
  auto report = AnalyzePaths({dir}, summary);
  if (report.ok()) {
    fprintf(stderr, "stallscope: %s\n", RenderSummary(*report).c_str());
  } else {
    fprintf(stderr, "stallscope: the traces could not be analyzed: %s\n",
            std::string(report.status().message()).c_str());
  }
  fprintf(stderr, "stallscope: traces in %s; full report: stallscope report %s\n", dir.c_str(),
          dir.c_str());
  return code;
}

}  // namespace stallscope::analyzer
