// The recorder and the reader agree on every byte: the recorder writes a
// trace in this process (its buffers, its writer thread, its final flush) and
// the analyzer's reader reads it back, and every field of every record kind
// comes back as written. No driver: the records are put in the recorder's
// buffers and queues the way the hooks and the CUPTI source put them.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>

#include <dirent.h>
#include <dlfcn.h>
#include <stdlib.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "analyzer/read/trace_reader.h"
#include "clock.h"
#include "cupti_source.h"
#include "cupti_stall.h"
#include "hooks.h"
#include "process_info.h"
#include "recorder.h"
#include "ring_spec.h"
#include "step_regression.h"
#include "thread_cpu.h"

namespace stallscope {
namespace {

namespace rec = recorder;
namespace tf = trace;

// The one trace file in `dir`.
std::string OnlyTrace(const std::string& dir) {
  std::vector<std::string> found;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      std::string name = e->d_name;
      if (name.size() > 8 && name.substr(name.size() - 8) == tf::kFileSuffix) found.push_back(name);
    }
    closedir(d);
  }
  REQUIRE(found.size() == 1);
  return dir + "/" + found[0];
}

// A call record whose every field says which thread and which call it is.
tf::ApiRecord CallRecord(uint32_t thread, uint32_t i, uint64_t t0, uint16_t api) {
  tf::ApiRecord r{};
  r.enter = t0 + uint64_t(i) * 1000 + thread * 100;
  r.exit = r.enter + 50 + i % 7;
  r.stream = 0x7000 + thread;
  r.object = 0xabc00000ull + i;
  r.bytes = uint64_t(i) * 3;
  r.api = api;
  r.result = int32_t(i % 3);
  return r;
}

uint32_t Tid() { return uint32_t(syscall(SYS_gettid)); }

TEST_CASE("a trace written by the recorder reads back field for field", "[recorder]") {
  char dir_template[] = "/tmp/stallscope-recorder-XXXXXX";
  REQUIRE(mkdtemp(dir_template) != nullptr);
  const std::string dir = dir_template;
  setenv("STALLSCOPE_OUT", dir.c_str(), 1);
  setenv("STALLSCOPE_NO_CUPTI", "1", 1);
  setenv("STALLSCOPE_CLOCK", "mono", 1);  // ticks are CLOCK_MONOTONIC ns
  setenv("RANK", "3", 1);
  setenv("LOCAL_RANK", "1", 1);
  setenv("WORLD_SIZE", "8", 1);
  setenv("LOCAL_WORLD_SIZE", "4", 1);
  REQUIRE(rec::EnsureStarted());

  size_t nhooks = 0;
  const HookInfo* hooks = Hooks(&nhooks);
  REQUIRE(nhooks > 3);
  const uint64_t t0 = MonoNs();

  // Two threads of calls; the main thread's 2500 fill two buffers and hand
  // them to the writer, the second thread's 700 leave with the thread.
  constexpr uint32_t kMain = 2500, kOther = 700;
  const uint32_t kernel = rec::InternString("kernel\x01name");
  const uint32_t py_file = rec::InternString("train.py\tstep");
  const uint64_t py_pairs[4] = {py_file, 41, rec::InternString("main.py\t<module>"), 7};
  const uint32_t py_stack = rec::InternPythonStack(py_pairs, 2);
  const uint32_t native_stack = rec::CaptureStack();
  REQUIRE(kernel != 0);
  REQUIRE(py_stack != 0);
  REQUIRE(native_stack != 0);
  std::atomic<uint32_t> no_slot{0};  // Catch's macros are for this thread only
  auto fill = [&](uint32_t thread, uint32_t n) {
    ThreadState& ts = rec::Self();
    for (uint32_t i = 0; i < n; ++i) {
      tf::ApiRecord* r = rec::Reserve(ts);
      if (r == nullptr) {
        no_slot++;
        continue;
      }
      *r = CallRecord(thread, i, t0, uint16_t(i % nhooks));
      if (i == 5) {  // one submission, one blocking call with both stacks
        r->correlation = 0x123456;
      } else if (i == 6) {
        r->stack = native_stack;
        r->python_stack = py_stack;
        r->flags = tf::kRecordPythonStack;
      }
      rec::Commit(ts);
    }
  };
  fill(0, kMain);
  uint32_t other_tid = 0;
  std::thread other([&] {
    other_tid = Tid();
    fill(1, kOther);
  });
  other.join();
  REQUIRE(no_slot == 0);

  tf::CorrelationRecord corr{0x123456, 77, 0};
  tf::DeviceRecord dev{};
  dev.start_ns = t0 + 5000 + 60;
  dev.end_ns = dev.start_ns + 900;
  dev.bytes = 4096;
  dev.correlation = 77;
  dev.name = kernel;
  dev.stream = 13;
  dev.device = 2;
  dev.context = 9;
  dev.kind = uint8_t(tf::DeviceOpKind::kMemcpy);
  dev.copy_kind = 2;
  dev.src_kind = 3;
  dev.dst_kind = 1;
  rec::AddActivity(&corr, 1, &dev, 1);

  const uint32_t range = rec::InternString("step");
  rec::AddNvtx({t0 + 10, 0, 0, range, uint16_t(tf::NvtxType::kPush), 0});
  rec::AddNvtx({t0 + 3'000'000, 0, 0, 0, uint16_t(tf::NvtxType::kPop), 0});
  tf::NcclRecord nccl{};
  nccl.enter = t0 + 2000;
  nccl.correlation = 0x123456;
  nccl.comm = 0xc0ffee;
  nccl.seq = 4;
  nccl.count = 1 << 20;
  nccl.tid = Tid();
  nccl.rank = 3;
  nccl.nranks = 8;
  nccl.peer = -1;
  nccl.kind = uint8_t(tf::NcclKind::kAllReduce);
  nccl.datatype = 7;
  nccl.flags = tf::kNcclCollective;
  nccl.group_depth = 1;
  nccl.op = 0;
  rec::AddNccl(nccl);
  rec::CountDiagnostic(tf::DiagnosticId::kStacksDropped, 3);
  rec::Shutdown();

  const std::string path = OnlyTrace(dir);
  auto t = analyzer::ReadTraceFile(path);
  unlink(path.c_str());
  rmdir(dir.c_str());
  REQUIRE(t.ok());

  {  // the file is whole
    CHECK(t->ended_cleanly);
    CHECK(t->header.pid == uint32_t(getpid()));
    CHECK(t->header.version == tf::kVersion);
    CHECK(t->ticks_are_ns);
    CHECK(t->bytes_used == t->file_size);
  }
  {  // the API table is the hook table
    REQUIRE(t->apis.size() == nhooks);
    for (size_t i = 0; i < nhooks; ++i) {
      CHECK(t->apis[i].name == hooks[i].name);
      CHECK(uint8_t(t->apis[i].category) == hooks[i].category);
      CHECK(t->apis[i].flags == hooks[i].flags);
    }
  }
  {  // every call, every field
    REQUIRE(t->calls.size() == kMain + kOther);
    uint32_t seen[2] = {0, 0};
    for (size_t k = 0; k < t->calls.size(); ++k) {
      const analyzer::ApiCall& c = t->calls[k];
      const analyzer::CallInfo& info = t->call_info[k];
      const uint32_t thread = c.tid == other_tid ? 1 : 0;
      const uint32_t i = uint32_t(info.object - 0xabc00000ull);
      const tf::ApiRecord want = CallRecord(thread, i, t0, uint16_t(i % nhooks));
      ++seen[thread];
      CHECK(c.tid == (thread == 1 ? other_tid : Tid()));
      CHECK(c.enter_ns == int64_t(want.enter));
      CHECK(c.exit_ns == int64_t(want.exit));
      CHECK(c.api == want.api);
      CHECK(info.stream == want.stream);
      CHECK(info.bytes == want.bytes);
      CHECK(info.result == want.result);
      CHECK(info.correlation == (i == 5 ? 0x123456u : 0u));
      CHECK(info.stack == (i == 6 ? native_stack : 0u));
      CHECK(info.python_stack == (i == 6 ? py_stack : 0u));
      CHECK(c.flags == (i == 6 ? tf::kRecordPythonStack : 0));
    }
    CHECK(seen[0] == kMain);
    CHECK(seen[1] == kOther);
  }
  {  // strings and stacks
    CHECK(t->String(kernel) == "kernel\x01name");
    const analyzer::StackRef& py = t->stacks.at(py_stack);
    REQUIRE(py.python_depth == 2);
    CHECK(t->stack_words[py.python_offset] == py_file);
    CHECK(t->stack_words[py.python_offset + 1] == 41);
    CHECK(t->stack_words[py.python_offset + 3] == 7);
    CHECK(t->String(uint32_t(t->stack_words[py.python_offset + 2])) == "main.py\t<module>");
    const analyzer::StackRef& native = t->stacks.at(native_stack);
    CHECK(native.native_depth > 0);
    CHECK(!t->modules.empty());
  }
  {  // the device op, joined to its call
    REQUIRE(t->ops.size() == 1);
    const analyzer::DeviceOp& op = t->ops[0];
    CHECK(op.start_ns == int64_t(dev.start_ns));
    CHECK(op.end_ns == int64_t(dev.end_ns));
    CHECK(op.device == 2);
    CHECK(op.kind == tf::DeviceOpKind::kMemcpy);
    CHECK(op.copy_kind == 2);
    CHECK(t->op_info[0].bytes == 4096);
    CHECK(t->op_info[0].stream == 13);
    CHECK(t->op_info[0].context == 9);
    CHECK(t->String(t->op_info[0].name) == "kernel\x01name");
    REQUIRE(op.call >= 0);
    CHECK(t->pageable_copy_calls.contains(op.call));  // DtoH into pageable memory
    CHECK(t->call_info[size_t(op.call)].correlation == 0x123456u);
  }
  {  // NVTX, NCCL, rank, threads and diagnostics
    REQUIRE(t->ranges.size() == 1);
    CHECK(t->String(t->ranges[0].name) == "step");
    CHECK(t->ranges[0].start_ns == int64_t(t0 + 10));
    CHECK(t->ranges[0].end_ns == int64_t(t0 + 3'000'000));
    REQUIRE(t->nccl.size() == 1);
    const analyzer::NcclCall& n = t->nccl[0];
    CHECK(n.comm == 0xc0ffee);
    CHECK(n.seq == 4);
    CHECK(n.count == 1 << 20);
    CHECK(n.rank == 3);
    CHECK(n.nranks == 8);
    CHECK(n.peer == -1);
    CHECK(n.kind == tf::NcclKind::kAllReduce);
    CHECK(n.datatype == 7);
    CHECK(n.group_depth == 1);
    CHECK(t->rank.known);
    CHECK(t->rank.rank == 3);
    CHECK(t->rank.local_rank == 1);
    CHECK(t->rank.world_size == 8);
    CHECK(t->rank.local_world_size == 4);
    CHECK(t->rank.source == tf::RankSource::kTorch);
    CHECK(t->thread_names.contains(other_tid));
    uint64_t stacks_dropped = 0, cupti_unavailable = 0;
    for (const analyzer::Diagnostic& d : t->diagnostics) {
      if (d.id == analyzer::DiagId::kStacksDropped) stacks_dropped += d.count;
      if (d.id == analyzer::DiagId::kCuptiUnavailable) cupti_unavailable += d.count;
    }
    CHECK(stacks_dropped == 3);
    CHECK(cupti_unavailable == 1);
  }
}

// CUPTI acknowledges each submission with an external-correlation record:
// 256 or more unacknowledged submissions say its records stopped coming, and
// acknowledged ones whose device record never came are counted at exit.
// Guards the CUPTI buffer's kernel names (cupti::KernelNames): each id is
// the recorder's for the name's text, for more names than it remembers,
// asked again, and for a new text at a pointer it has seen.
TEST_CASE("a buffer's kernel names take the recorder's ids by their text", "[recorder][cupti]") {
  char dir_template[] = "/tmp/stallscope-names-XXXXXX";
  REQUIRE(mkdtemp(dir_template) != nullptr);
  setenv("STALLSCOPE_OUT", dir_template, 1);
  setenv("STALLSCOPE_NO_CUPTI", "1", 1);
  REQUIRE(rec::EnsureStarted());
  cupti::KernelNames names;
  CHECK(names.Intern(nullptr) == 0);
  std::vector<std::string> texts;
  for (int i = 0; i < 300; ++i) texts.push_back("kernel_" + std::to_string(i) + "<float, 128>");
  for (int round = 0; round < 2; ++round) {
    for (size_t i = 0; i < texts.size(); i += (round == 0 ? 1 : 7)) {
      CAPTURE(round, i);
      const uint32_t id = names.Intern(texts[i].c_str());
      CHECK(id != 0);
      CHECK(id == rec::InternString(texts[i].c_str()));
    }
  }
  char text[32] = "gemm_a";  // one place, two names
  const uint32_t a = names.Intern(text);
  CHECK(names.Intern(text) == a);
  std::strcpy(text, "gemm_b");
  const uint32_t b = names.Intern(text);
  CHECK(b != a);
  CHECK(b == rec::InternString("gemm_b"));
  CHECK(a == rec::InternString("gemm_a"));
}

TEST_CASE("the stall tracker judges unacknowledged and missing CUPTI records", "[recorder][stall]") {
  constexpr uint64_t kTid = uint64_t{3} << 40;
  rec::StallTracker t(uint64_t{1} << 20);
  for (uint64_t seq = 1; seq <= 300; ++seq) t.Submit(kTid | seq, true);
  t.Submit(kTid | 301, false);  // a failed call submitted nothing
  CHECK(t.unacked == 300);
  CHECK(t.Suspect());
  auto v = t.Evaluate(false, 0);
  CHECK(v.records_stopped == 300);
  CHECK(v.missing_at_exit == 0);
  CHECK(t.Evaluate(false, 0).records_stopped == 0);  // reported once, until a larger stall
  t.Ack(kTid | 250);
  CHECK(t.unacked == 50);
  CHECK_FALSE(t.Suspect());
  t.Submit(kTid | 200, true);  // at or below the acknowledged: nothing owed
  CHECK(t.unacked == 50);

  // 1000 acknowledged correlation ids, 700 device records: 300 missing at
  // exit, less what the recorder dropped itself, when at least 256.
  for (uint32_t id = 1; id <= 1000; ++id) t.Acknowledged(id);
  for (uint32_t id = 1; id <= 700; ++id) t.DeviceRecord(id);
  CHECK(t.Evaluate(false, 0).missing_at_exit == 0);  // only at exit
  CHECK(t.Evaluate(true, 0).missing_at_exit == 300);
  CHECK(t.Evaluate(true, 40).missing_at_exit == 260);
  CHECK(t.Evaluate(true, 50).missing_at_exit == 0);  // 250: under the threshold
}

TEST_CASE("the stall tracker's window expires ids far behind the newest", "[recorder][stall]") {
  rec::StallTracker t(uint64_t{1} << 16);  // the smallest window: 65536 ids
  CHECK(t.outstanding.window_ids == (uint64_t{1} << 16));
  t.Acknowledged(5);
  t.Acknowledged(6);
  t.DeviceRecord(6);
  t.Acknowledged(200000);  // a jump past the window: id 5 is missing for good
  CHECK(t.outstanding.expired == 1);
  CHECK(t.outstanding.count == 1);
  t.DeviceRecord(5);  // too late: already counted
  t.DeviceRecord(200000);
  CHECK(t.outstanding.Missing() == 1);
}

TEST_CASE("schedstat is parsed only when it is exactly schedstat", "[recorder][cpu]") {
  auto parse = [](const std::string& text, uint64_t* delay) {
    return rec::ParseSchedstat(text.data(), text.data() + text.size(), delay);
  };
  uint64_t delay = 0;
  CHECK(parse("123456 7890 12\n", &delay));
  CHECK(delay == 7890);
  for (const char* bad : {"", "123 456\n", "123 456 7", "123 456 7\nx", "a 456 7\n", "123  456 7\n",
                          "-1 456 7\n"}) {
    CAPTURE(bad);
    CHECK_FALSE(parse(bad, &delay));
  }
  CHECK(rec::ThreadCpuNs() > 0);
}

TEST_CASE("trace files are named by rank, host and pid, never over another", "[recorder][file]") {
  char tmpl[] = "/tmp/stallscope-name-XXXXXX";
  REQUIRE(mkdtemp(tmpl) != nullptr);
  const std::string dir = tmpl;
  setenv("STALLSCOPE_OUT", dir.c_str(), 1);
  tf::RankRecord rank{};
  rank.rank = 7;
  rank.local_rank = 1;
  gethostname(rank.host, sizeof rank.host - 1);
  const std::string host = rank.host;
  const std::string base = dir + "/rank00007.1-" + host + "-4242";
  int a = rec::OpenTraceFile(rank, 4242);
  int b = rec::OpenTraceFile(rank, 4242);
  REQUIRE(a >= 0);
  REQUIRE(b >= 0);
  close(a);
  close(b);
  CHECK(access((base + tf::kFileSuffix).c_str(), F_OK) == 0);
  CHECK(access((base + "-1" + tf::kFileSuffix).c_str(), F_OK) == 0);
  unlink((base + tf::kFileSuffix).c_str());
  unlink((base + "-1" + tf::kFileSuffix).c_str());
  rmdir(dir.c_str());
  unsetenv("STALLSCOPE_OUT");
}

TEST_CASE("the module scan finds this program with its build id", "[recorder][modules]") {
  const rec::ModuleScan scan = rec::ScanModules();
  CHECK(scan.count > 0);
  CHECK(scan.out.size() > 0);
  const rec::ModuleScan again = rec::ScanModules();
  CHECK(again.generation == scan.generation);  // nothing loaded in between
  CHECK(rec::ModuleGeneration() == scan.generation);
  // A module loaded, then unloaded: each changes the generation, which
  // ModuleGeneration reads as the scan does.
  void* module = dlopen(UNWIND_TEST_MODULE, RTLD_NOW | RTLD_LOCAL);
  REQUIRE(module != nullptr);
  const rec::ModuleScan loaded = rec::ScanModules();
  CHECK(loaded.generation != scan.generation);
  CHECK(rec::ModuleGeneration() == loaded.generation);
  CHECK(loaded.count == scan.count + 1);
  dlclose(module);
  const unsigned long long unloaded = rec::ModuleGeneration();
  CHECK(unloaded != loaded.generation);
  CHECK(unloaded != scan.generation);
  CHECK(rec::ScanModules().generation == unloaded);
}

// glibc 2.36's fork leaves the loader's dl_iterate_phdr lock as it was: a
// fork while another thread walked the modules used to leave the child's
// walk blocked forever (robustness_fork_storm, about three forks in four
// with a thread walking in a loop). Each child walks under an alarm and
// reports by its exit status.
TEST_CASE("a fork while another thread walks the modules leaves the child free to walk them",
          "[recorder][modules][fork]") {
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> walks{0};
  std::thread walker([&] {
    while (!stop.load()) {
      (void)rec::ModuleGeneration();
      walks.fetch_add(1);
    }
  });
  while (walks.load() < 10) std::this_thread::yield();
  int blocked = 0, done = 0;
  for (int i = 0; i < 40; ++i) {
    const pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      alarm(5);
      const rec::ModuleScan scan = rec::ScanModules();
      _exit(scan.count > 0 ? 0 : 1);
    }
    int status = 0;
    REQUIRE(waitpid(pid, &status, 0) == pid);
    if (WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM) {
      ++blocked;
      break;  // one is enough to fail
    }
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) ++done;
  }
  stop.store(true);
  walker.join();
  CHECK(blocked == 0);
  CHECK(done == 40);
}

TEST_CASE("the ring window and the regression trigger parse as documented", "[recorder][ring]") {
  tf::RingSpec w;
  REQUIRE(tf::ParseRingSpec("30", &w));
  CHECK(w.window_ns == 30'000'000'000ull);
  CHECK(w.bytes == tf::kRingDefaultBytes);
  REQUIRE(tf::ParseRingSpec("2min", &w));
  CHECK(w.window_ns == 120'000'000'000ull);
  REQUIRE(tf::ParseRingSpec("64mb", &w));
  CHECK((w.window_ns == 0 && w.bytes == 64ull << 20));
  for (const char* bad : {"", "ten", "-3", "0", "30 s", "0.0001", "1KB", "5parsecs"}) {
    INFO(bad);
    CHECK_FALSE(tf::ParseRingSpec(bad, &w));
  }

  tf::RegressionSpec r;
  REQUIRE(tf::ParseRegressionSpec(tf::kDefaultRegressionSpec, &r));
  CHECK_FALSE(r.enabled());
  REQUIRE(tf::ParseRegressionSpec(tf::kSuggestedRegressionSpec, &r));
  CHECK((r.factor == 2.0 && r.steps == 3 && r.max_dumps == 8 && r.enabled()));
  REQUIRE(tf::ParseRegressionSpec("1.5:5", &r));
  CHECK((r.factor == 1.5 && r.steps == 5 && r.max_dumps == 8));
  REQUIRE(tf::ParseRegressionSpec("3:1:20", &r));
  CHECK((r.factor == 3.0 && r.steps == 1 && r.max_dumps == 20));
  REQUIRE(tf::ParseRegressionSpec("OFF", &r));
  CHECK_FALSE(r.enabled());
  REQUIRE(tf::ParseRegressionSpec("2:3", &r));
  REQUIRE(tf::ParseRegressionSpec("0", &r));
  CHECK_FALSE(r.enabled());
  for (const char* bad : {"", "2", "1:3", "0.5:3", "2:0", "2:3:", "2:3:-1", "2:3:4:5", "x:3", "2:3x"}) {
    INFO(bad);
    CHECK_FALSE(tf::ParseRegressionSpec(bad, &r));
  }
}

TEST_CASE("the regression detector fires on M slow steps in a row, once per regression", "[recorder][ring]") {
  tf::RegressionSpec spec;
  REQUIRE(tf::ParseRegressionSpec("2:3:2", &spec));
  tf::RegressionDetector d(spec);
  uint64_t tick = 1000;
  auto step = [&](uint64_t t) {
    tick += t;
    return d.Begin(tick);
  };
  CHECK_FALSE(d.Begin(tick));  // the first begin ends no step
  // Before kMinHistory steps nothing is judged, however slow.
  for (int i = 0; i < tf::RegressionDetector::kMinHistory; ++i) CHECK_FALSE(step(i == 3 ? 1000 : 100));
  // Two slow steps, then a normal one: no dump (not three in a row).
  CHECK_FALSE(step(250));
  CHECK_FALSE(step(250));
  CHECK_FALSE(step(100));
  // Exactly K x the median is not slow.
  CHECK_FALSE(step(200));
  CHECK_FALSE(step(200));
  CHECK_FALSE(step(200));
  // Three over it: the third's end (the next begin) dumps.
  CHECK_FALSE(step(201));
  CHECK_FALSE(step(500));
  CHECK(step(900));
  CHECK(d.dumps() == 1);
  CHECK(d.last_median() == 200);  // of the 17 steps before: eight of 100, three of 200, ...
  // Still slow: no second dump until three normal steps in a row.
  for (int i = 0; i < 5; ++i) CHECK_FALSE(step(900));
  CHECK_FALSE(step(100));
  CHECK_FALSE(step(100));
  CHECK_FALSE(step(900));  // two normal steps only: not re-armed
  CHECK_FALSE(step(900));
  CHECK_FALSE(step(900));
  for (int i = 0; i < 3; ++i) CHECK_FALSE(step(100));
  CHECK_FALSE(step(900));
  CHECK_FALSE(step(900));
  CHECK(step(900));
  CHECK(d.dumps() == 2);
  // N = 2: no third dump.
  for (int i = 0; i < 3; ++i) CHECK_FALSE(step(100));
  for (int i = 0; i < 3; ++i) CHECK_FALSE(step(5000));
  CHECK(d.dumps() == 2);
}

TEST_CASE("a lasting new pace becomes the median", "[recorder][ring]") {
  tf::RegressionSpec spec;
  REQUIRE(tf::ParseRegressionSpec("2:3:100", &spec));
  tf::RegressionDetector d(spec);
  for (int i = 0; i < 20; ++i) CHECK_FALSE(d.Step(100));
  int dumps = 0;
  for (int i = 0; i < 200; ++i) dumps += d.Step(1000) ? 1 : 0;
  CHECK(dumps == 1);  // the history fills with the new pace; no dump after the first
  CHECK(d.last_median() == 1000);
  // A clock that goes back ends no step.
  tf::RegressionDetector e(spec);
  CHECK_FALSE(e.Begin(500));
  CHECK_FALSE(e.Begin(400));
}

}  // namespace
}  // namespace stallscope
