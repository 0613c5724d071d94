// Test main for the simgpu tests: sets the knobs this process runs with (before
// the simulated driver is loaded) and implements the helpers of
// simgpu_test_util.h.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#include <spawn.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>

#include "simgpu_test_util.h"

extern char** environ;

namespace simgpu_test {
namespace {

std::string g_self;

// Kernel durations every test process runs with, unless a parent set them.
constexpr const char* kKernelKnobs =
    "huge*=10000,long*=2000,gemm*=800,gemm_small=5,relu*=15,mid*=500,*=20";

uint64_t FieldU64(const std::string& line, const char* key) {
  std::string k = std::string("\"") + key + "\":";
  size_t p = line.find(k);
  if (p == std::string::npos) return 0;
  return strtoull(line.c_str() + p + k.size(), nullptr, 10);
}

std::string FieldStr(const std::string& line, const char* key) {
  std::string k = std::string("\"") + key + "\":\"";
  size_t p = line.find(k);
  if (p == std::string::npos) return "";
  size_t b = p + k.size();
  size_t e = line.find('"', b);
  return line.substr(b, e - b);
}

}  // namespace

void* LibCuda() {
  static void* h = dlopen(SIMGPU_LIBCUDA, RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) FAIL("dlopen " SIMGPU_LIBCUDA ": " << dlerror());
  return h;
}

void* LibCupti() {
  static void* h = dlopen(SIMGPU_LIBCUPTI, RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) FAIL("dlopen " SIMGPU_LIBCUPTI ": " << dlerror());
  return h;
}

void* Sym(void* lib, const char* name) {
  void* p = dlsym(lib, name);
  if (p == nullptr) FAIL("dlsym " << name);
  return p;
}

void Cu::Setup() {
  REQUIRE(cuInit(0) == CUDA_SUCCESS);
  CUcontext ctx;
  REQUIRE(cuDevicePrimaryCtxRetain(&ctx, 0) == CUDA_SUCCESS);
  REQUIRE(cuCtxSetCurrent(ctx) == CUDA_SUCCESS);
  static const char kImage[] = "not a real cubin";
  REQUIRE(cuModuleLoadData(&module, kImage) == CUDA_SUCCESS);
}

CUfunction Cu::Kernel(const char* name) {
  CUfunction f = nullptr;
  REQUIRE(cuModuleGetFunction(&f, module, name) == CUDA_SUCCESS);
  return f;
}

CUresult Cu::Launch(const char* name, CUstream s) {
  return cuLaunchKernel(Kernel(name), 1, 1, 1, 1, 1, 1, 0, s, nullptr, nullptr);
}

uint64_t Cu::StreamId(CUstream s) {
  unsigned long long id = 0;
  REQUIRE(cuStreamGetId(s, &id) == CUDA_SUCCESS);
  return id;
}

std::vector<TraceOp> ReadTrace(const std::string& path) {
  std::vector<TraceOp> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    TraceOp op;
    op.kind = FieldStr(line, "kind");
    op.name = FieldStr(line, "name");
    op.device = FieldU64(line, "device");
    op.stream = FieldU64(line, "stream");
    op.start_ns = FieldU64(line, "start_ns");
    op.end_ns = FieldU64(line, "end_ns");
    op.correlation = FieldU64(line, "correlation");
    op.bytes = FieldU64(line, "bytes");
    op.queued_ns = FieldU64(line, "queued_ns");
    out.push_back(op);
  }
  return out;
}

std::vector<TraceOp> FlushAndReadTrace(Cu& cu) {
  cu.trace_flush();
  std::string path = getenv("SIMGPU_TRACE");
  size_t p = path.find("%p");
  if (p != std::string::npos) path.replace(p, 2, std::to_string(getpid()));
  return ReadTrace(path);
}

const TraceOp* FindOp(const std::vector<TraceOp>& ops, const std::string& name) {
  for (const TraceOp& op : ops) {
    if (op.name == name) return &op;
  }
  return nullptr;
}

int RunSelf(const std::vector<std::string>& extra_env, const std::string& test_spec) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string kv(*e);
    bool overridden = false;
    for (const std::string& x : extra_env) {
      if (kv.compare(0, x.find('=') + 1, x, 0, x.find('=') + 1) == 0) overridden = true;
    }
    if (!overridden) env.push_back(kv);
  }
  env.insert(env.end(), extra_env.begin(), extra_env.end());
  std::vector<char*> envp;
  for (std::string& s : env) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::string spec = test_spec;
  std::vector<char*> argv = {g_self.data(), spec.data(), nullptr};
  pid_t pid;
  if (posix_spawn(&pid, g_self.c_str(), nullptr, nullptr, argv.data(), envp.data()) != 0) {
    return -1;
  }
  int status = 0;
  if (waitpid(pid, &status, 0) < 0) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace simgpu_test

int main(int argc, char** argv) {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  simgpu_test::g_self = n > 0 ? std::string(buf, static_cast<size_t>(n)) : argv[0];
  setenv("SIMGPU_KERNEL_US", simgpu_test::kKernelKnobs, 0);
  // Unless the caller chose a trace file, each test process (children
  // included) writes its own under TMPDIR and removes it when done.
  std::string trace;
  if (getenv("SIMGPU_TRACE") == nullptr) {
    const char* tmp = getenv("TMPDIR");
    trace = std::string(tmp != nullptr ? tmp : "/tmp") + "/simgpu_test_%p.jsonl";
    setenv("SIMGPU_TRACE", trace.c_str(), 1);
    setenv("SIMGPU_TEST_OWN_TRACE", "1", 1);
  } else if (const char* own = getenv("SIMGPU_TEST_OWN_TRACE"); own && strcmp(own, "1") == 0) {
    trace = getenv("SIMGPU_TRACE");
  }
  int rc = Catch::Session().run(argc, argv);
  if (!trace.empty() && trace.find("%p") != std::string::npos) {
    // Open the file now (the simulator creates it with its first write), so
    // that removing it below also covers what atexit writes.
    if (void* h = dlopen(SIMGPU_LIBCUDA, RTLD_NOW | RTLD_NOLOAD)) {
      if (auto flush = reinterpret_cast<void (*)()>(dlsym(h, "simgpu_trace_flush"))) flush();
    }
    std::string path = trace;
    path.replace(path.find("%p"), 2, std::to_string(getpid()));
    unlink(path.c_str());  // the trace is flushed again at exit; that is harmless
  }
  return rc;
}
