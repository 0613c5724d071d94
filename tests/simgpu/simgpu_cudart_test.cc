// Tests of the simulated runtime (libcudart.so.13). Each runs a child program
// on the simulated stack (LD_LIBRARY_PATH = the simgpu output directory, as
// `stallscope run --sim` does): simgpu_cudart_probe (plain C++, the nvcc
// registration/launch calls made by hand) or examples/cuda_train_loop (built
// with nvcc when the toolkit has one).
#include <catch2/catch.hpp>
#include <fcntl.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "simgpu_test_util.h"

extern char** environ;

namespace {

using simgpu_test::ReadTrace;
using simgpu_test::TraceOp;

std::string TempPath(const std::string& stem) {
  const char* tmp = getenv("TMPDIR");
  return std::string(tmp != nullptr ? tmp : "/tmp") + "/simgpu_cudart_" + stem + "_" +
         std::to_string(getpid());
}

// Runs argv with this environment plus `extra` (NAME=value entries replace
// inherited ones) and LD_LIBRARY_PATH = the simulated stack; stdout goes to
// *out. Returns the exit status.
int RunChild(const std::vector<std::string>& argv, std::vector<std::string> extra,
             std::string* out) {
  extra.push_back(std::string("LD_LIBRARY_PATH=") + SIMGPU_DIR);
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string kv(*e);
    std::string key = kv.substr(0, kv.find('=') + 1);
    bool replaced = std::any_of(extra.begin(), extra.end(),
                                [&](const std::string& x) { return x.rfind(key, 0) == 0; });
    if (!replaced) env.push_back(kv);
  }
  env.insert(env.end(), extra.begin(), extra.end());
  std::vector<char*> envp, args;
  for (std::string& s : env) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_copy = argv;
  for (std::string& s : argv_copy) args.push_back(s.data());
  args.push_back(nullptr);
  std::string out_path = TempPath("stdout");
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid;
  int rc = posix_spawn(&pid, args[0], &fa, nullptr, args.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) return -1;
  int status = 0;
  if (waitpid(pid, &status, 0) < 0) return -1;
  std::ifstream in(out_path);
  std::stringstream ss;
  ss << in.rdbuf();
  *out = ss.str();
  unlink(out_path.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// The value of "key=value" in a probe's output, or "" when absent.
std::string Value(const std::string& out, const std::string& key) {
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key + "=", 0) == 0) return line.substr(key.size() + 1);
  }
  return "";
}

using Lookup = std::tuple<std::string, int, unsigned long long>;

// "name version flags" lines; a line with two fields is the empty-name probe
// (the reference writes it "0 0", SIMGPU_LOOKUP_LOG " 0 0").
std::vector<Lookup> ReadLookups(const std::string& path) {
  std::vector<Lookup> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::vector<std::string> f;
    for (std::string w; ls >> w;) f.push_back(w);
    if (f.size() == 2) f.insert(f.begin(), "");
    if (f.size() != 3) continue;
    out.emplace_back(f[0], std::stoi(f[1]), std::stoull(f[2]));
  }
  return out;
}

std::vector<TraceOp> BySubmission(std::vector<TraceOp> ops) {
  std::sort(ops.begin(), ops.end(),
            [](const TraceOp& a, const TraceOp& b) { return a.correlation < b.correlation; });
  return ops;
}

}  // namespace

// Guards: the simulated runtime resolves the driver exactly as NVIDIA's cudart
// 13.0 does — dlsym'd cuGetProcAddress_v2, empty probe, cuInit, the
// self-lookup of cuGetProcAddress (11030, 12000), then every entry point with
// the same (name, version, flags) in the same order — so stallscope's dlsym /
// cuGetProcAddress hooks are exercised as in a real job; that it does not link
// libcuda; that cudaGetDriverEntryPoint goes through the resolved
// cuGetProcAddress; and (no further lookups) device properties, the last
// error, and cudaDeviceReset.
TEST_CASE("cudart resolves the driver like NVIDIA's cudart 13.0", "[cudart]") {
  std::vector<Lookup> want = ReadLookups(SIMGPU_CUDART_REQUESTS);
  REQUIRE(want.size() == 440);
  std::string log = TempPath("lookups");
  unlink(log.c_str());
  std::string out;
  int rc = RunChild({SIMGPU_CUDART_PROBE, "lookups"}, {"SIMGPU_LOOKUP_LOG=" + log}, &out);
  INFO(out);
  REQUIRE(rc == 0);
  CHECK(Value(out, "libcuda_preloaded") == "0");
  CHECK(Value(out, "devices") == "1");
  CHECK(Value(out, "entry_point_ok") == "1");
  CHECK(Value(out, "cc") == "9.0");
  CHECK(Value(out, "sms") == "132");
  CHECK(Value(out, "bad_device") == "cudaErrorInvalidDevice");
  CHECK(Value(out, "last_error") == "cudaErrorInvalidDevice");
  CHECK(Value(out, "after_get") == "cudaSuccess");
  std::vector<Lookup> got = ReadLookups(log);
  unlink(log.c_str());
  REQUIRE(got.size() == want.size() + 1);
  for (size_t i = 0; i < want.size(); ++i) {
    INFO("request " << i);
    REQUIRE(got[i] == want[i]);
  }
  // cudaGetDriverEntryPoint(cudaEnableDefault): the runtime's version, legacy stream.
  CHECK(got.back() == Lookup("cuLaunchKernel", 13000, 0));
}

// Guards: a synchronous cudaMemcpy DeviceToHost (on the legacy default
// stream) returns only after the kernels queued on a blocking stream have
// finished — the `.item()` stall stallscope must attribute.
TEST_CASE("cudaMemcpy D2H blocks until queued kernels are done", "[cudart]") {
  std::string trace = TempPath("memcpy") + ".jsonl";
  std::string out;
  int rc = RunChild({SIMGPU_CUDART_PROBE, "memcpy-blocks"},
                    {"SIMGPU_KERNEL_US=*slow_kernel*=30000,*=20", "SIMGPU_TRACE=" + trace}, &out);
  INFO(out);
  REQUIRE(rc == 0);
  CHECK(Value(out, "value") == "0");
  CHECK(Value(out, "stream_done_after") == "1");
  // The copy returned after the kernels and the copy itself ended (their
  // recorded ends, not the call's duration: a loaded machine can keep the
  // probe off the CPU between the launches and the copy).
  const unsigned long long returned = std::stoull("0" + Value(out, "memcpy_returned_ns"));
  std::vector<TraceOp> ops = BySubmission(ReadTrace(trace));
  unlink(trace.c_str());
  REQUIRE(ops.size() == 4);
  CHECK(ops[0].name == "memset");
  CHECK(ops[1].name == "_Z11slow_kernelPi");
  CHECK(ops[2].name == "_Z11slow_kernelPi");
  CHECK(ops[3].name == "DtoH");
  CHECK(ops[3].start_ns >= ops[2].end_ns);
  CHECK(returned >= ops[3].end_ns);
  CHECK(ops[2].end_ns - ops[1].start_ns >= 57000000ull);
}

// Guards: the CUDA C++ example built with nvcc (--cudart shared) runs on the
// simulated stack: exit 0, and per step the ground truth has the batch copy,
// the kernels under their mangled names (a template instance too) in launch
// order, and the readback copy.
TEST_CASE("cuda_train_loop runs on the simulated runtime", "[cudart][example]") {
  const std::string exe = SIMGPU_CUDA_TRAIN_LOOP;
  if (exe.empty()) {
    WARN("cuda_train_loop not built (no nvcc, or the examples part is off)");
    return;
  }
  REQUIRE(access(exe.c_str(), X_OK) == 0);
  const std::vector<std::string> step = {
      "HtoD",
      "_Z10load_batchPKhPfi",
      "_Z8gemm_fwdPKfS0_Pfi",
      "_Z4reluPfi",
      "_Z8gemm_bwdPKfS0_Pfi",
      "_Z10sgd_updateIfEvPT_PKS0_S0_i",
      "_Z11loss_reducePKfPfi",
      "DtoH"};
  const std::vector<std::string> tiny_step = {
      "HtoD", "_Z10load_batchPKhPfi", "_Z16tiny_elementwisePfi", "_Z16tiny_elementwisePfi",
      "_Z16tiny_elementwisePfi", "_Z11loss_reducePKfPfi"};
  struct Case {
    std::vector<std::string> args;
    const std::vector<std::string>* step;
    int steps;
  };
  for (const Case& c : {Case{{"--steps", "4", "--readback", "--sync-log"}, &step, 4},
                        Case{{"--steps", "3", "--tiny", "3", "--no-nvtx"}, &tiny_step, 3}}) {
    std::string trace = TempPath("example") + ".jsonl";
    std::vector<std::string> argv = {exe};
    argv.insert(argv.end(), c.args.begin(), c.args.end());
    std::string out;
    int rc = RunChild(argv, {"SIMGPU_KERNEL_US=*gemm*=200,*=20", "SIMGPU_TRACE=" + trace}, &out);
    INFO(out);
    REQUIRE(rc == 0);
    CHECK(out.find("cuda_train_loop: " + std::to_string(c.steps) + " steps") != std::string::npos);
    std::vector<TraceOp> ops = BySubmission(ReadTrace(trace));
    unlink(trace.c_str());
    // Two memsets (weights, loss), then the steps.
    REQUIRE(ops.size() == 2 + c.step->size() * size_t(c.steps));
    CHECK(ops[0].name == "memset");
    CHECK(ops[1].name == "memset");
    for (int s = 0; s < c.steps; ++s) {
      for (size_t k = 0; k < c.step->size(); ++k) {
        INFO("step " << s << " op " << k);
        CHECK(ops[2 + size_t(s) * c.step->size() + k].name == (*c.step)[k]);
      }
    }
    std::map<std::string, int> kernels;
    for (const TraceOp& op : ops) {
      if (op.kind == "kernel") ++kernels[op.name];
    }
    for (const auto& [name, count] : kernels) {
      INFO(name);
      CHECK(count == c.steps * int(std::count(c.step->begin(), c.step->end(), name)));
    }
  }
}
