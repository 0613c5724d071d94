// End-to-end tests of the `stallscope` command line: exit codes, one-line
// errors, help, `run` (exit codes, environment, empty-folder cleanup,
// summary) and `report` output files.
#include <sys/stat.h>
#include <sys/wait.h>
#include <sqlite3.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <fstream>
#include <sstream>

#include "analyzer/analyze/predict.h"
#include "analyzer/compare/whatif.h"
#include "analyzer/testing/test_util.h"
#include "nlohmann/json.hpp"

namespace stallscope::analyzer {
namespace {

using testing::kUs;

struct Result {
  int code;
  std::string out;
  std::string err;
};

std::string Slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

class Sandbox {
 public:
  Sandbox() {
    char dir[] = "/tmp/stallscope-cli-XXXXXX";
    REQUIRE(mkdtemp(dir) != nullptr);
    root_ = dir;
    REQUIRE(mkdir((root_ + "/cwd").c_str(), 0755) == 0);
  }
  ~Sandbox() { std::system(("rm -rf '" + root_ + "'").c_str()); }
  const std::string& root() const { return root_; }
  std::string cwd() const { return root_ + "/cwd"; }

  // Runs `stallscope ARGS` (a shell fragment) in cwd().
  Result Run(const std::string& args, const std::string& env = "") const {
    const std::string cmd = "cd '" + cwd() + "' && umask 022 && " + env + " '" +
                            STALLSCOPE_BIN_PATH + "' " + args + " >'" + root_ + "/out' 2>'" +
                            root_ + "/err'";
    int status = std::system(cmd.c_str());
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, Slurp(root_ + "/out"),
            Slurp(root_ + "/err")};
  }

  int CwdEntries() const {
    Result r = Run("");  // writes out/err outside cwd
    (void)r;
    int n = 0;
    std::string listing = cwd();
    std::system(("ls -A '" + cwd() + "' | wc -l > '" + root_ + "/count'").c_str());
    n = std::stoi(Slurp(root_ + "/count"));
    return n;
  }

 private:
  std::string root_;
};

int Lines(const std::string& s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

std::string WriteSampleTrace(const std::string& path) {
  testing::TraceBuilder b;
  auto api = testing::AddStandardApis(&b);
  b.Submit(1, api.launch, 0, 5 * kUs, 10 * kUs, 500 * kUs);
  b.Call(1, api.sync, 100 * kUs, 505 * kUs);
  b.Submit(1, api.launch, 600 * kUs, 605 * kUs, 610 * kUs, 700 * kUs);
  b.WriteTo(path);
  return path;
}

// Guards: a command that never touches CUDA leaves no folder and its exit
// code passes through.
TEST_CASE("run of a non-CUDA command leaves nothing and exits 0", "[cli]") {
  Sandbox box;
  Result r = box.Run("run -- /bin/true");
  CHECK(r.code == 0);
  CHECK(box.CwdEntries() == 0);
  CHECK(r.err.find("no CUDA activity recorded") != std::string::npos);
}

// Guards exit-code passthrough, 128+signal, and 127 for a missing command.
TEST_CASE("run exit codes", "[cli]") {
  Sandbox box;
  CHECK(box.Run("run -- sh -c 'exit 7'").code == 7);
  CHECK(box.Run("run sh -c 'kill -TERM $$'").code == 128 + 15);
  Result missing = box.Run("run -- no-such-command-stallscope");
  CHECK(missing.code == 127);
  // The last line (a warning may precede it when libstallscope.so is not built).
  CHECK(("\n" + missing.err).ends_with("\nstallscope: no-such-command-stallscope: command not found\n"));
  CHECK(box.Run("run").code == 1);
  CHECK(box.Run("run --bogus -- /bin/true").code == 1);
  CHECK(box.CwdEntries() == 0);
}

// Guards signal forwarding: a SIGTERM sent to stallscope reaches the child.
TEST_CASE("run forwards SIGTERM to the command", "[cli]") {
  Sandbox box;
  Result r = box.Run("run -- sh -c 'trap \"exit 9\" TERM; kill -TERM $PPID; sleep 5 & wait'");
  CHECK(r.code == 9);
}

// Guards the child's environment: preload, NVTX injection, output folder
// (absolute), the simulated libraries preloaded and their folder first on the
// library path with --sim; an --out folder is created and removed again when
// empty.
TEST_CASE("run sets the environment", "[cli]") {
  Sandbox box;
  const std::string env_file = box.root() + "/env";
  Result r = box.Run("run --out traces --sim -- sh -c 'echo \"$LD_PRELOAD|$NVTX_INJECTION64_PATH|"
                     "$STALLSCOPE_OUT|$LD_LIBRARY_PATH\" > " + env_file + "'",
                     "env -u LD_PRELOAD STALLSCOPE_LIBDIR=/opt/ss LD_LIBRARY_PATH=/usr/x");
  CHECK(r.code == 0);
  CHECK(Slurp(env_file) ==
        "/opt/ss/libstallscope.so:/opt/ss/simgpu/libcuda.so.1:/opt/ss/simgpu/libcudart.so.13:"
        "/opt/ss/simgpu/libcupti.so.13:/opt/ss/simgpu/libnccl.so.2:/opt/ss/simgpu/libcublas.so.13:"
        "/opt/ss/simgpu/libcublasLt.so.13|/opt/ss/libstallscope.so|" +
            box.cwd() + "/traces|/opt/ss/simgpu:/usr/x\n");
  CHECK(box.CwdEntries() == 0);
  Result pre = box.Run("run -- sh -c 'echo \"$LD_PRELOAD\" > " + env_file + "'",
                       "STALLSCOPE_LIBDIR=/opt/ss LD_PRELOAD=/usr/lib/libother.so");
  CHECK(Slurp(env_file) == "/opt/ss/libstallscope.so:/usr/lib/libother.so\n");
}

// Guards the summary after a run that produced a trace.
TEST_CASE("run prints a summary when traces were written", "[cli]") {
  Sandbox box;
  const std::string trace = WriteSampleTrace(box.root() + "/sample.sstrace");
  Result r = box.Run("run --out traces -- sh -c 'cp " + trace + " \"$STALLSCOPE_OUT\"/'");
  CHECK(r.code == 0);
  CHECK(r.err.find("1 step (no markers), GPU idle") != std::string::npos);
  CHECK(r.err.find("stallscope report traces") != std::string::npos);
  struct stat st;
  REQUIRE(stat((box.cwd() + "/traces").c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0750);
}

// Guards `run` inside a launcher: ranks share a folder named after the job,
// and a rank other than 0 says nothing.
TEST_CASE("run inside a launcher shares the job's folder", "[cli]") {
  Sandbox box;
  Result r = box.Run("run -- sh -c 'echo \"$STALLSCOPE_OUT\"'",
                     "env -u RANK -u OMPI_COMM_WORLD_RANK -u PMI_RANK SLURM_PROCID=1 "
                     "SLURM_JOB_ID=77 SLURM_STEP_ID=3");
  CHECK(r.code == 0);
  CHECK(r.err.empty());
  CHECK(r.out == box.cwd() + "/stallscope-slurm-77.3\n");
  Result zero = box.Run("run -- true", "env -u SLURM_PROCID -u TORCHELASTIC_RUN_ID -u SLURM_JOB_ID "
                                       "RANK=0 MASTER_ADDR=10.0.0.1 MASTER_PORT=29500");
  CHECK(zero.code == 0);
  CHECK(zero.err.find("rank 0 done") != std::string::npos);
  CHECK(zero.err.find("stallscope-10.0.0.1-29500") != std::string::npos);
}

// Guards colour and quiet: colour only when asked (stdout here is a pipe, so
// auto means none), a bad --color is a usage error, --quiet silences the
// run summary.
TEST_CASE("colour only on request, and quiet", "[cli]") {
  Sandbox box;
  const std::string trace = WriteSampleTrace(box.root() + "/sample.sstrace");
  Result plain = box.Run("report " + trace);
  CHECK(plain.code == 0);
  CHECK(plain.out.find('\033') == std::string::npos);
  Result colored = box.Run("report --color always " + trace);
  CHECK(colored.code == 0);
  CHECK(colored.out.find("\033[1mstallscope report\033[0m") != std::string::npos);
  Result never = box.Run("report --color=never " + trace);
  CHECK(never.out == plain.out);
  CHECK(box.Run("report --color sometimes " + trace).code == 1);
  Result quiet = box.Run("run -q --out traces -- sh -c 'cp " + trace + " \"$STALLSCOPE_OUT\"/'");
  CHECK(quiet.code == 0);
  CHECK(quiet.err.empty());
}

// Guards report errors: exit 2 and exactly one line saying what and where.
TEST_CASE("report of missing or corrupt traces exits 2 with one line", "[cli]") {
  Sandbox box;
  Result missing = box.Run("report '" + box.root() + "/nope'");
  CHECK(missing.code == 2);
  CHECK(Lines(missing.err) == 1);
  CHECK(missing.err.find("nope") != std::string::npos);
  Result empty = box.Run("report .");
  CHECK(empty.code == 2);
  CHECK(Lines(empty.err) == 1);
  const std::string bad = WriteSampleTrace(box.root() + "/bad.sstrace");
  {
    std::fstream f(bad, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(sizeof(trace::FileHeader) + 30);  // inside the first chunk's payload
    f.put('\x7f');
  }
  // A damaged chunk is skipped, not fatal: the report says what was lost.
  Result corrupt = box.Run("report '" + bad + "'");
  CHECK(corrupt.code == 0);
  CHECK(corrupt.out.find("corrupt_chunks") != std::string::npos);
  CHECK(corrupt.out.find("byte offset") != std::string::npos);
  // Not a trace at all: exit 2, one line.
  const std::string junk = box.root() + "/junk.sstrace";
  std::ofstream(junk) << "not a trace at all, but long enough to hold a header of sixty-four bytes";
  Result notrace = box.Run("report '" + junk + "'");
  CHECK(notrace.code == 2);
  CHECK(Lines(notrace.err) == 1);
  CHECK(notrace.err.find("junk.sstrace") != std::string::npos);
}

// Guards a folder with good and bad files: the good ones are reported, the
// bad ones (not a trace, empty, a FIFO: opened without waiting for a writer)
// named in unreadable_traces; a folder of only bad files is an error.
TEST_CASE("report of a folder with unreadable files reports the rest", "[cli]") {
  Sandbox box;
  const std::string dir = box.root() + "/traces";
  REQUIRE(mkdir(dir.c_str(), 0755) == 0);
  WriteSampleTrace(dir + "/good.sstrace");
  std::ofstream(dir + "/empty.sstrace").close();
  REQUIRE(mkfifo((dir + "/fifo.sstrace").c_str(), 0644) == 0);
  Result r = box.Run("report '" + dir + "' --format json");
  CHECK(r.code == 0);
  CHECK(r.out.find("unreadable_traces") != std::string::npos);
  CHECK(r.out.find("2 trace file(s) could not be read") != std::string::npos);
  CHECK(r.out.find("empty.sstrace") != std::string::npos);
  CHECK(r.out.find("fifo.sstrace: not a regular file") != std::string::npos);
  CHECK(r.out.find("\"steps\"") != std::string::npos);
  // The FIFO named alone: refused at once, one line.
  Result fifo = box.Run("report '" + dir + "/fifo.sstrace'");
  CHECK(fifo.code == 2);
  CHECK(Lines(fifo.err) == 1);
  Result dump = box.Run("dump '" + dir + "/fifo.sstrace'");
  CHECK(dump.code == 2);
  REQUIRE(std::remove((dir + "/good.sstrace").c_str()) == 0);
  Result none = box.Run("report '" + dir + "'");
  CHECK(none.code == 2);
  CHECK(Lines(none.err) == 1);
}

// Guards output failures: a report that cannot be written exits non-zero
// with one line saying why, and -o leaves no partial file behind (the next
// run is not refused with "already exists").
TEST_CASE("a report that cannot be written is an error and leaves nothing", "[cli]") {
  Sandbox box;
  const std::string trace = WriteSampleTrace(box.root() + "/sample.sstrace");
  for (const char* format : {"text", "json"}) {
    Result full = box.Run("report '" + trace + "' --format " + format + " >/dev/full; exit $?; :");
    CHECK(full.code == 1);
  }
  Result full = box.Run("report '" + trace + "' >/dev/full 2>'" + box.root() + "/err2'; exit $?; :");
  CHECK(full.code == 1);
  const std::string err = Slurp(box.root() + "/err2");
  CHECK(Lines(err) == 1);
  CHECK(err.find("cannot write the report to standard output: No space left on device") !=
        std::string::npos);
  Result dump = box.Run("dump '" + trace + "' >/dev/full; exit $?; :");
  CHECK(dump.code == 1);
  // A file limit of 1 KiB (SIGXFSZ ignored): the write fails part-way.
  Result limited = box.Run("report '" + trace + "' --format json -o out.json", "trap '' XFSZ; ulimit -f 1;");
  CHECK(limited.code != 0);
  CHECK(limited.err.find("out.json") != std::string::npos);
  CHECK(box.CwdEntries() == 0);
  Result again = box.Run("report '" + trace + "' --format json -o out.json");
  CHECK(again.code == 0);
  CHECK(box.CwdEntries() == 1);
}

// Guards the dump against hostile names: control bytes are escaped, so a
// kernel or range name cannot clear the terminal or forge a record line.
TEST_CASE("dump escapes control bytes in names", "[cli]") {
  Sandbox box;
  testing::TraceBuilder b;
  auto api = testing::AddStandardApis(&b);
  b.Submit(1, api.launch, 0, 5 * kUs, 10 * kUs, 500 * kUs, trace::DeviceOpKind::kKernel,
           "evil\x1b[2J\nop 99 kind 1 \"forged\"\x7f");
  b.Range(1, 0, 600 * kUs, "step\r0");
  const std::string path = box.root() + "/evil.sstrace";
  b.WriteTo(path);
  Result r = box.Run("dump '" + path + "'");
  CHECK(r.code == 0);
  CHECK(r.out.find('\x1b') == std::string::npos);
  CHECK(r.out.find('\r') == std::string::npos);
  CHECK(r.out.find('\x7f') == std::string::npos);
  CHECK(r.out.find("evil\\x1b[2J\\x0aop 99 kind 1 \\\"forged\\\"\\x7f") != std::string::npos);
  CHECK(r.out.find("\nop 99") == std::string::npos);
  CHECK(r.out.find("step\\x0d0") != std::string::npos);
}

// Guards the message for an unwritable trace folder: said before the job
// runs, with the cause, not "no CUDA activity recorded" after it. /sys is
// read-only even for root; a folder without write permission, for others.
TEST_CASE("run onto a folder it cannot write says so before running", "[cli]") {
  Sandbox box;
  const std::string ran = box.root() + "/ran";
  for (const std::string& dir : {std::string("/sys/kernel"), box.root() + "/ro"}) {
    if (dir != "/sys/kernel") {
      REQUIRE(mkdir(dir.c_str(), 0555) == 0);
      if (geteuid() == 0) continue;  // root writes anyway
    }
    Result r = box.Run("run --out '" + dir + "' -- touch '" + ran + "'");
    CHECK(r.code == 1);
    CHECK(Lines(r.err) == 1);
    CHECK(r.err.find("cannot write traces to " + dir + ": ") != std::string::npos);
    CHECK(access(ran.c_str(), F_OK) != 0);
  }
}

// Guards a folder holding two traces of one process (the flight recorder's
// dumps, here a copy: same host, pid and start, same last clock reading):
// one process, the first by name analyzed, the other named as left out.
// A trace past --stream-above is reported from its file by slices: the same
// bytes as reading it whole, its predictions left out as past 1 M events
// they are; and with --stream, as with no predictions asked.
TEST_CASE("report past --stream-above reads by slices, the same report", "[cli]") {
  Sandbox box;
  const std::string path = box.root() + "/large.sstrace";
  const int steps = static_cast<int>(analyzer::kPredictMaxEvents / 201) + 10;
  testing::SyntheticSteps(steps).SetPacked(true).WriteTo(path);
  auto counts = analyzer::CountByHeaders(path);
  REQUIRE(counts.ok());
  CHECK(counts->calls_and_ops == 201u * steps);
  Result whole = box.Run("report '" + path + "' --format json --stream-above 1000000000");
  REQUIRE(whole.code == 0);
  CHECK(whole.out.find("not predicted: the analyzed process has") != std::string::npos);
  Result sliced = box.Run("report '" + path + "' --format json --stream-above 1000000");
  REQUIRE(sliced.code == 0);
  CHECK(sliced.out == whole.out);
  Result streamed = box.Run("report '" + path + "' --format text --stream");
  Result text = box.Run("report '" + path + "' --format text --stream-above 1000000000");
  REQUIRE(streamed.code == 0);
  CHECK(streamed.out == text.out);
}

// The same loop without step markers: its steps found from the launch
// sequence, by slices as read whole.
TEST_CASE("report past --stream-above without step markers reads by slices, the same report", "[cli]") {
  Sandbox box;
  const std::string path = box.root() + "/unmarked.sstrace";
  const int steps = static_cast<int>(analyzer::kPredictMaxEvents / 201) + 10;
  testing::SyntheticSteps(steps, "kernel", false, false).SetPacked(true).WriteTo(path);
  Result whole = box.Run("report '" + path + "' --format json --stream-above 1000000000");
  REQUIRE(whole.code == 0);
  const auto j = nlohmann::json::parse(whole.out);
  CHECK(j["step_source"] == "auto");
  CHECK(j["steps"].size() == static_cast<size_t>(steps));
  Result sliced = box.Run("report '" + path + "' --format json --stream-above 1000000");
  REQUIRE(sliced.code == 0);
  CHECK(sliced.out == whole.out);
}

TEST_CASE("report of a folder with two traces of one process analyzes one", "[cli]") {
  Sandbox box;
  const std::string dir = box.root() + "/dumps";
  REQUIRE(mkdir(dir.c_str(), 0755) == 0);
  WriteSampleTrace(dir + "/a.sstrace");
  std::filesystem::copy_file(dir + "/a.sstrace", dir + "/b.sstrace");
  Result r = box.Run("report '" + dir + "' --format json");
  REQUIRE(r.code == 0);
  CHECK(r.out.find("multiple_processes") == std::string::npos);
  CHECK(r.out.find("\"earlier_dumps\"") != std::string::npos);
  CHECK(r.out.find("are left out (flight-recorder dumps") != std::string::npos);
  CHECK(r.out.find("): b.sstrace") != std::string::npos);
}

// Guards a job's folder with a rank missing and a rank killed: ranks 0 and
// 2 of a world of 4 wrote traces (rank 2's without its end chunk: killed
// mid-run), rank 3's file is not a trace, rank 1 wrote nothing; the report
// covers the readable ranks and names the missing one, the incomplete one
// and the unreadable file.
TEST_CASE("report of a job with ranks missing or killed names them", "[cli]") {
  Sandbox box;
  const std::string dir = box.root() + "/job";
  REQUIRE(mkdir(dir.c_str(), 0755) == 0);
  for (int rank : {0, 2}) {
    testing::TraceBuilder b;
    b.SetPid(static_cast<uint32_t>(1000 + rank));  // two processes, not two dumps of one
    auto api = testing::AddStandardApis(&b);
    trace::RankRecord rr{};
    rr.rank = rank;
    rr.world_size = 4;
    rr.local_world_size = 4;
    rr.local_rank = rank;
    b.Rank(rr);
    b.Submit(1, api.launch, 0, 5 * kUs, 10 * kUs, 500 * kUs);
    b.Call(1, api.sync, 100 * kUs, 505 * kUs);
    if (rank == 2) b.SetEnd(false);
    b.WriteTo(dir + "/rank" + std::to_string(rank) + ".sstrace");
  }
  std::ofstream(dir + "/rank3.sstrace") << "cut short before its header was written, by a full disk";
  Result r = box.Run("report '" + dir + "' --format json");
  REQUIRE(r.code == 0);
  CHECK(r.out.find("no trace for rank(s) 1, 3 of the job's 4") != std::string::npos);
  CHECK(r.out.find("end before their process finished") != std::string::npos);
  CHECK(r.out.find("rank2.sstrace (rank 2)") != std::string::npos);
  CHECK(r.out.find("rank0.sstrace (rank 0)") == std::string::npos);
  CHECK(r.out.find("rank3.sstrace: not a stallscope trace") != std::string::npos);
}

// Guards the user-code patterns: --user-code and --not-user-code take a
// glob (a missing one is a usage error, exit 1, one line), repeat, and the
// report still runs with them.
TEST_CASE("report --user-code and --not-user-code", "[cli]") {
  Sandbox box;
  const std::string trace = WriteSampleTrace(box.root() + "/sample.sstrace");
  Result missing = box.Run("report '" + trace + "' --user-code");
  CHECK(missing.code == 1);
  CHECK(missing.err.rfind("stallscope report: --user-code", 0) == 0);
  CHECK(Lines(missing.err) == 2);  // the error, then the usage
  CHECK(box.Run("report '" + trace + "' --user-code ''").code == 1);
  Result ok = box.Run("report '" + trace + "' --user-code '*/mylib/*' --not-user-code '*/wrap.py' "
                      "--not-user-code=x --format json");
  CHECK(ok.code == 0);
  CHECK(ok.out.find("\"hotspots\"") != std::string::npos);
}

// Guards -o: a new file with mode 0640 holding the JSON report, never
// overwritten.
TEST_CASE("report -o writes a new file and never overwrites", "[cli]") {
  Sandbox box;
  const std::string trace = WriteSampleTrace(box.root() + "/sample.sstrace");
  const std::string out = box.root() + "/report.json";
  Result r = box.Run("report '" + trace + "' --format json -o '" + out + "'");
  REQUIRE(r.code == 0);
  struct stat st;
  REQUIRE(stat(out.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0640);
  const auto j = nlohmann::json::parse(Slurp(out));
  CHECK(j["schema"] == "stallscope.report/1");
  Result again = box.Run("report '" + trace + "' --format text -o '" + out + "'");
  CHECK(again.code == 1);
  CHECK(again.err.find("already exists") != std::string::npos);
  CHECK(nlohmann::json::parse(Slurp(out))["schema"] == "stallscope.report/1");
  // Refused as the options are read: before the trace is read (here, one
  // that is not there) or a job is run (no trace folder is made).
  Result early = box.Run("report '" + box.root() + "/missing.sstrace' -o '" + out + "'");
  CHECK(early.code == 1);
  CHECK(early.err.find("already exists") != std::string::npos);
  CHECK(early.err.find("missing.sstrace") == std::string::npos);
  const std::string ran = box.root() + "/ran";
  Result job = box.Run("run --out '" + box.root() + "/job' -o '" + out + "' touch '" + ran + "'");
  CHECK(job.code == 1);
  CHECK(job.err.find("already exists") != std::string::npos);
  struct stat none;
  CHECK(stat(ran.c_str(), &none) != 0);
  Result text = box.Run("report '" + trace + "'");
  CHECK(text.code == 0);
  CHECK(text.out.find("Forced-sync hotspots") != std::string::npos);
}

// Guards --format html: the page goes to stdout or to a new -o file, the
// same bytes.
TEST_CASE("report --format html", "[cli][html]") {
  Sandbox box;
  const std::string trace = WriteSampleTrace(box.root() + "/sample.sstrace");
  const std::string out = box.root() + "/report.html";
  Result r = box.Run("report '" + trace + "' --format html -o '" + out + "'");
  REQUIRE(r.code == 0);
  struct stat st;
  REQUIRE(stat(out.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0640);
  const std::string page = Slurp(out);
  CHECK(page.rfind("<!DOCTYPE html>", 0) == 0);
  CHECK(page.find("id=\"utilization\"") != std::string::npos);
  Result stdout_page = box.Run("report '" + trace + "' --format=html");
  CHECK(stdout_page.code == 0);
  CHECK(stdout_page.out == page);
  CHECK(box.Run("report '" + trace + "' --format html -o '" + out + "'").code == 1);
}

// Guards `report --format perfetto`: the table row reaches the timeline
// writer, and -o makes a new 0640 file holding the Chrome trace.
TEST_CASE("report --format perfetto writes the timeline export", "[cli][perfetto]") {
  Sandbox box;
  const std::string trace = WriteSampleTrace(box.root() + "/sample.sstrace");
  const std::string out = box.root() + "/rank-0.json";
  Result r = box.Run("report '" + trace + "' --format perfetto -o '" + out + "'");
  REQUIRE(r.code == 0);
  struct stat st;
  REQUIRE(stat(out.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0640);
  const auto j = nlohmann::json::parse(Slurp(out));
  CHECK(j["schemaVersion"] == 1);
  CHECK(j["distributedInfo"]["rank"] == 0);
  CHECK_FALSE(j["traceEvents"].empty());
  CHECK(box.Run("report --help").out.find("perfetto") != std::string::npos);
}

// The traces of the exports' --stream tests, in `dir`: "joined" (exported
// by slices); "unjoined" (an op no call submitted) and "repeating" (another
// thread's call with an external id a launch has too, as recorders before
// 2026-12-06 gave), exported from the whole reading.
std::vector<std::string> WriteExportTraces(const std::string& dir) {
  const std::vector<std::string> paths = {dir + "/joined.sstrace", dir + "/unjoined.sstrace",
                                          dir + "/repeating.sstrace"};
  testing::SyntheticSteps(40).SetChunkRecords(64).WriteTo(paths[0]);
  testing::TraceBuilder b = testing::SyntheticSteps(40);
  b.Device(1'000'100'000, 1'000'300'000, stallscope::trace::DeviceOpKind::kKernel, "no_call", 900001, 7);
  b.WriteTo(paths[1]);
  testing::TraceBuilder r = testing::SyntheticSteps(40);
  r.Call(3, 0, 1'000'100'000, 1'000'105'000, {.correlation = 1005});  // 1005: a launch of thread 1's
  r.SetChunkRecords(64).WriteTo(paths[2]);
  return paths;
}

// A Perfetto export's events, each as JSON text, sorted.
std::vector<std::string> SortedEvents(const std::string& text) {
  std::vector<std::string> v;
  for (const auto& e : nlohmann::json::parse(text)["traceEvents"]) v.push_back(e.dump());
  std::sort(v.begin(), v.end());
  return v;
}

// Guards `report --format perfetto --stream`: the export from the file by
// slices (the same events, another order: the slices' calls and ops in
// turn), and from the whole reading where that cannot be made (an op no
// call submitted, external ids that repeat): the whole reading's bytes.
TEST_CASE("report --format perfetto --stream: by slices, else read whole", "[cli][perfetto][stream]") {
  Sandbox box;
  const std::vector<std::string> traces = WriteExportTraces(box.root());
  for (const std::string& trace : traces) {
    INFO(trace);
    const Result whole = box.Run("report '" + trace + "' --format perfetto --no-predict");
    const Result sliced = box.Run("report '" + trace + "' --format perfetto --no-predict --stream");
    REQUIRE(whole.code == 0);
    REQUIRE(sliced.code == 0);
    if (trace == traces[0]) {
      CHECK(sliced.out != whole.out);  // by slices
      CHECK(SortedEvents(sliced.out) == SortedEvents(whole.out));
    } else {
      CHECK(sliced.out == whole.out);
    }
  }
}

// The rows of every table of the SQLite database at `path`, sorted, as
// text ("" if it cannot be opened).
std::string DatabaseRows(const std::string& path) {
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) {
    sqlite3_close(db);
    return "";
  }
  std::vector<std::string> rows;
  auto each = [&](const std::string& sql, const std::function<void(sqlite3_stmt*)>& fn) {
    sqlite3_stmt* st = nullptr;
    if (sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr) != SQLITE_OK) return;
    while (sqlite3_step(st) == SQLITE_ROW) fn(st);
    sqlite3_finalize(st);
  };
  std::vector<std::string> tables;
  each("SELECT name FROM sqlite_master WHERE type = 'table'",
       [&](sqlite3_stmt* st) { tables.emplace_back(reinterpret_cast<const char*>(sqlite3_column_text(st, 0))); });
  for (const std::string& table : tables) {
    each("SELECT * FROM " + table, [&](sqlite3_stmt* st) {
      std::string row = table;
      for (int c = 0; c < sqlite3_column_count(st); ++c) {
        const unsigned char* v = sqlite3_column_text(st, c);
        row += "|" + (v ? std::string(reinterpret_cast<const char*>(v)) : std::string("NULL"));
      }
      rows.push_back(std::move(row));
    });
  }
  sqlite3_close(db);
  std::sort(rows.begin(), rows.end());
  std::string out;
  for (const std::string& r : rows) out += r + "\n";
  return out;
}

// Writes `report INPUT --format sqlite --no-predict` to `whole`, and with
// --stream to `sliced`; the rows of `whole` (DatabaseRows).
std::string WriteDatabases(Sandbox* box, const std::string& input, const std::string& whole,
                           const std::string& sliced) {
  REQUIRE(box->Run("report '" + input + "' --format sqlite --no-predict -o '" + whole + "'").code == 0);
  REQUIRE(box->Run("report '" + input + "' --format sqlite --no-predict --stream -o '" + sliced + "'").code == 0);
  return DatabaseRows(whole);
}

// Guards `report --format sqlite` of a trace reported by slices: the
// database is written from the file by slices (another file, the same
// rows), or, for a trace it cannot be written so from (an op no call
// submitted, external ids that repeat), from the whole reading; a new file either way (0640, never
// over one that exists, no temporary left).
TEST_CASE("report --format sqlite --stream: by slices, else read whole", "[cli][sqlite][stream]") {
  Sandbox box;
  const std::vector<std::string> traces = WriteExportTraces(box.root());
  for (const std::string& trace : traces) {
    INFO(trace);
    const std::string whole = trace + ".whole.db", sliced = trace + ".sliced.db";
    const std::string rows = WriteDatabases(&box, trace, whole, sliced);
    CHECK(rows.find("api_calls|") != std::string::npos);
    CHECK(DatabaseRows(sliced) == rows);
    if (trace == traces[0]) {
      CHECK(Slurp(sliced) != Slurp(whole));  // by slices
    } else {
      CHECK(Slurp(sliced) == Slurp(whole));
    }
    struct stat st{};
    REQUIRE(stat(sliced.c_str(), &st) == 0);
    CHECK((st.st_mode & 0777) == 0640);
    const Result again = box.Run("report '" + trace + "' --format sqlite --no-predict --stream -o '" + sliced + "'");
    CHECK(again.code != 0);
    CHECK(again.err.find("already exists") != std::string::npos);
    CHECK(DatabaseRows(sliced) == rows);
  }
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(box.root())) {
    const std::string name = e.path().filename();
    if (e.is_regular_file() && name != "out" && name != "err") files.push_back(name);  // (Run's)
  }
  std::sort(files.begin(), files.end());
  CHECK(files == std::vector<std::string>{"joined.sstrace", "joined.sstrace.sliced.db", "joined.sstrace.whole.db",
                                          "repeating.sstrace", "repeating.sstrace.sliced.db",
                                          "repeating.sstrace.whole.db", "unjoined.sstrace",
                                          "unjoined.sstrace.sliced.db", "unjoined.sstrace.whole.db"});
}

// Guards the exports of a distributed run read one at a time (--stream):
// the analyzed rank is drawn from its file by slices, each slice with its
// NCCL waits (rank 1 reaches every all-reduce 100 us late), and gives the
// held folder's page, events and rows; where a rank holds an op no call
// submitted, the page and exports come from the whole reading, the same.
TEST_CASE("report of a distributed run: its exports by slices, else read whole", "[cli][stream]") {
  Sandbox box;
  for (const bool unjoined : {false, true}) {
    INFO((unjoined ? "an op no call submitted" : "every op joined"));
    const std::string dir = box.root() + (unjoined ? "/unjoined" : "/joined");
    std::filesystem::create_directories(dir);
    for (int rank : {0, 1}) {
      testing::TraceBuilder b = testing::SyntheticSteps(30, "kernel", false, true, 20 * kUs, rank, 2);
      b.SetPid(static_cast<uint32_t>(2000 + rank)).SetChunkRecords(64);
      if (unjoined && rank == 0) {
        b.Device(1'000'100'000, 1'000'300'000, stallscope::trace::DeviceOpKind::kKernel, "no_call", 900001, 7);
      }
      b.WriteTo(dir + "/rank" + std::to_string(rank) + ".sstrace");
    }
    const Result html = box.Run("report '" + dir + "' --format html --no-predict");
    const Result html_sliced = box.Run("report '" + dir + "' --format html --no-predict --stream");
    REQUIRE(html.code == 0);
    REQUIRE(html_sliced.code == 0);
    CHECK(html.out.find("waiting for the last rank") != std::string::npos);  // a distributed run's page
    CHECK(html_sliced.out == html.out);
    const Result perfetto = box.Run("report '" + dir + "' --format perfetto --no-predict");
    const Result perfetto_sliced = box.Run("report '" + dir + "' --format perfetto --no-predict --stream");
    REQUIRE(perfetto.code == 0);
    REQUIRE(perfetto_sliced.code == 0);
    CHECK(SortedEvents(perfetto_sliced.out) == SortedEvents(perfetto.out));
    CHECK((perfetto_sliced.out != perfetto.out) == !unjoined);  // by slices: another order
    const std::string sliced_db = dir + ".sliced.db";
    const std::string rows = WriteDatabases(&box, dir, dir + ".whole.db", sliced_db);
    CHECK(rows.find("device_ops|") != std::string::npos);
    CHECK(DatabaseRows(sliced_db) == rows);
  }
}

// Guards the debugging dump: one line per call, op and range.
TEST_CASE("dump lists records in time order", "[cli]") {
  Sandbox box;
  const std::string trace = WriteSampleTrace(box.root() + "/sample.sstrace");
  Result r = box.Run("dump '" + trace + "'");
  CHECK(r.code == 0);
  CHECK(r.out.find("call 0 tid 1 cuLaunchKernel") == 0);
  CHECK(r.out.find("op 0 kind 1 kernel") != std::string::npos);
  CHECK(box.Run("dump '" + box.root() + "/nope'").code == 2);
}

// Guards the dump as JSON (stallscope.dump/1), what the Python tests read
// traces through: every call with its Python frames, ops, diagnostics.
TEST_CASE("dump as JSON holds every call with its Python frames", "[cli]") {
  Sandbox box;
  testing::TraceBuilder b;
  auto api = testing::AddStandardApis(&b);
  const uint32_t py = b.PythonStack({{"/w/train.py", "read_back", 88}, {"/w/train.py", "<module>", 120}});
  b.Submit(1, api.launch, 0, 5 * kUs, 10 * kUs, 500 * kUs);
  b.Call(1, api.sync, 100 * kUs, 505 * kUs, {.python_stack = py, .flags = 1});
  const std::string trace = box.root() + "/py.sstrace";
  b.WriteTo(trace);
  Result r = box.Run("dump '" + trace + "' --format json");
  REQUIRE(r.code == 0);
  const auto j = nlohmann::json::parse(r.out);
  CHECK(j["schema"] == "stallscope.dump/1");
  REQUIRE(j["calls"].size() == 2);
  CHECK(j["calls"][0]["api"] == "cuLaunchKernel");
  CHECK_FALSE(j["calls"][0].contains("python_frames"));
  const auto& sync = j["calls"][1];
  CHECK(sync["tid"] == 1);
  CHECK(sync["flags"] == 1);
  CHECK(sync["exit_ns"].get<int64_t>() - sync["enter_ns"].get<int64_t>() == 405 * kUs);
  REQUIRE(sync["python_frames"].size() == 2);
  CHECK(sync["python_frames"][0] == nlohmann::json::array({"/w/train.py", "read_back", 88}));
  CHECK(sync["python_frames"][1][1] == "<module>");
  CHECK(j["ops"].size() == 1);
  // The same records as the text dump, and the same conventions as report.
  CHECK(box.Run("dump '" + trace + "' --format text").out == box.Run("dump '" + trace + "'").out);
  CHECK(box.Run("dump '" + trace + "' -o dump.json --format json").code == 0);
  CHECK(nlohmann::json::parse(Slurp(box.cwd() + "/dump.json")) == j);
  CHECK(box.Run("dump '" + trace + "' --format xml").code == 1);
  CHECK(box.Run("dump '" + trace + "' '" + trace + "'").code == 1);
}

// Guards one convention for output files: -o OUT, --output OUT and
// --output=OUT on every subcommand that writes a result, and help that
// names every option a subcommand accepts.
TEST_CASE("every subcommand takes -o and --output alike", "[cli]") {
  Sandbox box;
  const std::string trace = WriteSampleTrace(box.root() + "/sample.sstrace");
  CHECK(box.Run("report '" + trace + "' --format json --output r1.json").code == 0);
  CHECK(box.Run("report '" + trace + "' --format json --output=r2.json").code == 0);
  CHECK(box.Run("dump '" + trace + "' --output d.txt").code == 0);
  CHECK(box.Run("compare '" + trace + "' '" + trace + "' --output c.txt").code == 0);
  CHECK(box.Run("fleet arrivals '" + trace + "' --output a.json").code == 0);
  CHECK(box.Run("fleet arrivals '" + trace + "' -o a2.json").code == 0);
  CHECK(Slurp(box.cwd() + "/a.json") == Slurp(box.cwd() + "/a2.json"));
  CHECK(Slurp(box.cwd() + "/r1.json") == Slurp(box.cwd() + "/r2.json"));
  CHECK(box.Run("report '" + trace + "' -o").code == 1);
  CHECK(box.Run("fleet arrivals '" + trace + "' --output").code == 1);
  // The conventions, declared once (AddConventions), in every subcommand's
  // help; and every one of them parses on every subcommand.
  for (const char* cmd : {"run", "report", "compare", "audit", "fleet", "whatif", "dump"}) {
    const std::string help = box.Run(std::string("help ") + cmd).out;
    for (const char* opt : {"--format F", "-o, --output OUT", "--color WHEN", "-q, --quiet",
                            "-j, --jobs N"}) {
      CAPTURE(cmd, opt);
      CHECK(help.find(opt) != std::string::npos);
    }
  }
  CHECK(box.Run("dump '" + trace + "' -q --color never -j 2 -o d2.txt").code == 0);
  CHECK(Slurp(box.cwd() + "/d2.txt") == Slurp(box.cwd() + "/d.txt"));
  CHECK(box.Run("compare '" + trace + "' '" + trace + "' -q --color=never --jobs=1 -o c2.txt").code == 0);
  CHECK(Slurp(box.cwd() + "/c2.txt") == Slurp(box.cwd() + "/c.txt"));
  CHECK(box.Run("report '" + trace + "' -j 4097").code == 1);
}

// Guards `audit --format json` and -o: the same checks as the text, as data.
TEST_CASE("audit writes JSON with the conventions", "[cli]") {
  Sandbox box;
  const std::string trace = WriteSampleTrace(box.root() + "/sample.sstrace");
  std::ofstream(box.cwd() + "/budget.toml") << "max_syncs_per_step = 0\nmax_gpu_idle_share = 1.0\n";
  Result text = box.Run("audit '" + trace + "' --budget budget.toml");
  CHECK(text.code == 3);
  Result json = box.Run("audit '" + trace + "' --budget budget.toml --format json -o audit.json");
  CHECK(json.code == 3);
  CHECK(json.out.empty());
  CHECK(json.err == text.err);  // each violation on stderr, whatever the format
  const auto j = nlohmann::json::parse(Slurp(box.cwd() + "/audit.json"));
  CHECK(j["schema"] == "stallscope.audit/1");
  CHECK(j["within_budget"] == false);
  REQUIRE(j["checks"].size() == 2);
  CHECK(j["checks"][0]["name"] == "max_syncs_per_step");
  CHECK(j["checks"][0]["ok"] == false);
  CHECK(j["checks"][1]["ok"] == true);
  CHECK(j["violations"] == 1);
  CHECK(j["metrics"]["steps"].get<int64_t>() >= 1);
  CHECK(text.out.find("FAIL  max_syncs_per_step") != std::string::npos);
  CHECK(box.Run("audit '" + trace + "' --budget budget.toml --format xml").code == 1);
  CHECK(box.Run("audit '" + trace + "'").code == 1);  // --budget is required
}

// Guards `run --format/-o`: after the command, the whole report as
// `stallscope report` writes it.
TEST_CASE("run writes the whole report with --format or -o", "[cli]") {
  Sandbox box;
  const std::string trace = WriteSampleTrace(box.root() + "/sample.sstrace");
  const std::string job = "sh -c 'cp " + trace + " \"$STALLSCOPE_OUT\"/'";
  Result r = box.Run("run --out traces --format json -o report.json -- " + job);
  CHECK(r.code == 0);
  CHECK(Slurp(box.cwd() + "/report.json") == box.Run("report traces --format json").out);
  Result stdout_report = box.Run("run --out traces2 --format json " + job);
  CHECK(stdout_report.code == 0);
  CHECK(nlohmann::json::parse(stdout_report.out)["schema"] == "stallscope.report/1");
  // The command's exit code stays the answer.
  CHECK(box.Run("run --out traces3 -o r3.txt -- sh -c 'cp " + trace + " \"$STALLSCOPE_OUT\"/; exit 5'").code == 5);
  CHECK(Slurp(box.cwd() + "/r3.txt").find("Forced-sync hotspots") != std::string::npos);
  // An existing -o target: the job ran, the report is refused.
  CHECK(box.Run("run --out traces4 -o r3.txt -- " + job).code == 1);
}

// Guards `whatif`'s contract: the JSON's top-level keys, the replay of an
// unchanged trace equal to it, and a site that names no hotspot as a
// one-line usage error.
TEST_CASE("whatif predicts from one trace", "[cli]") {
  Sandbox box;
  const std::string trace = WriteSampleTrace(box.root() + "/sample.sstrace");
  Result r = box.Run("whatif '" + trace + "' --format json");
  REQUIRE(r.code == 0);
  const auto j = nlohmann::json::parse(r.out);
  CHECK(j["schema"] == "stallscope.whatif/1");
  for (const char* key : {"baseline", "predicted", "transformations", "assumptions", "replayed"}) {
    CAPTURE(key);
    CHECK(j.contains(key));
  }
  CHECK(j["predicted"]["mean_step_ns"] == j["baseline"]["mean_step_ns"]);
  CHECK(j["replay_error"] == 0.0);
  const auto report = nlohmann::json::parse(box.Run("report '" + trace + "' --format json").out);
  CHECK(j["baseline"]["gpu_idle_ns"] == report["totals"]["gpu_idle_ns"]);
  Result text = box.Run("whatif '" + trace + "' --scale-host-wait 0.5");
  CHECK(text.code == 0);
  CHECK(text.out.find("host waits × 0.5 takes the step from ") == 0);
  Result bad = box.Run("whatif '" + trace + "' --remove-sync nowhere.py:12");
  CHECK(bad.code == 1);
  CHECK(bad.err.find("--remove-sync nowhere.py:12: no hotspot") != std::string::npos);
  CHECK(Lines(bad.err) == 2);
  CHECK(box.Run("whatif '" + trace + "' --scale-host-wait -1").code == 1);
  for (const char* spec : {"nosuchkernel*=0.5", "*=fast", "=2", "*=-1"}) {
    CAPTURE(spec);
    Result k = box.Run("whatif '" + trace + "' --scale-kernel '" + spec + "'");
    CHECK(k.code == 1);
    CHECK(k.err.find(std::string("--scale-kernel ") + spec + ": ") != std::string::npos);
    CHECK(Lines(k.err) == 2);
  }
  Result k = box.Run("whatif '" + trace + "' --scale-kernel '*=0.5' --format json");
  REQUIRE(k.code == 0);
  const auto kj = nlohmann::json::parse(k.out);
  CHECK(kj["transformations"][0]["kind"] == "scale_kernel");
  CHECK(kj["transformations"][0]["changed"].get<int64_t>() > 0);
  CHECK(kj["predicted"]["mean_step_ns"].get<int64_t>() < kj["baseline"]["mean_step_ns"].get<int64_t>());
}

// 300 steps of SyntheticSteps, steps apart by up to 300 us of input
// jitter, in chunks of 64 records, into DIR/marked.sstrace (with step
// markers) or DIR/unmarked.sstrace; the path.
std::string WriteJitteredSteps(const std::string& dir, bool markers) {
  const std::string trace = dir + (markers ? "/marked.sstrace" : "/unmarked.sstrace");
  testing::SyntheticSteps(300, "kernel", false, markers, 20 * testing::kUs, -1, 0, 30 * testing::kUs)
      .SetChunkRecords(64)
      .WriteTo(trace);
  return trace;
}

// `steps` marked steps of a loop, in chunks of 64 records: step k's calls
// written by `step(b, api, k, &t)` from host time t (its range's start)
// on, t left at its end (what carries from step to step, the caller's).
template <typename Step>
testing::TraceBuilder MarkedLoop(int steps, Step step) {
  testing::TraceBuilder b;
  const auto api = testing::AddStandardApis(&b);
  b.SetChunkRecords(64);
  int64_t t = 1'000'000'000;
  for (int k = 0; k < steps; ++k) {
    const int64_t start = t;
    step(b, api, k, &t);
    b.Range(1, start, t, "step");
  }
  return b;
}

// `steps` steps of a loop that synchronizes in its first ten steps only,
// launching on its own thread (1) and a helper thread making more calls
// (2, as PyTorch's autograd thread).
testing::TraceBuilder HelperThreadLoop(int steps) {
  return MarkedLoop(steps, [](testing::TraceBuilder& b, const testing::Apis& api, int k, int64_t* tp) {
    int64_t& t = *tp;
    t += 300 * testing::kUs + (k % 5) * 40 * testing::kUs;  // the input
    int64_t d = t;
    for (int i = 0; i < 10; ++i, t += 6 * testing::kUs) {
      d = std::max(d, t + 10 * testing::kUs) + 20 * testing::kUs;
      b.Submit(1, api.launch, t, t + 4 * testing::kUs, d - 20 * testing::kUs, d);
    }
    for (int i = 0; i < 30; ++i, t += 5 * testing::kUs) {
      d = std::max(d, t + 10 * testing::kUs) + 3 * testing::kUs;
      b.Submit(2, api.launch, t, t + 3 * testing::kUs, d - 3 * testing::kUs, d);
    }
    if (k < 10) b.Call(1, api.sync, t, d + 5 * testing::kUs);
    t = std::max(t, d + 5 * testing::kUs) + 10 * testing::kUs;
  });
}

// `steps` steps of a loop whose device queues its launches (kernels of
// 20 us launched 6 us apart, then a synchronize), with the first launch of
// a step starting after a launch latency that grows from about 5 us in
// the first half of the steps to about 14 us in the second (a driver or
// clock change mid-run).
testing::TraceBuilder ShiftingLatencyLoop(int steps) {
  return MarkedLoop(steps, [steps](testing::TraceBuilder& b, const testing::Apis& api, int k, int64_t* tp) {
    int64_t& t = *tp;
    t += 200 * testing::kUs;  // the input
    const int64_t latency = (k < steps / 2 ? 5 : 14) * testing::kUs + (k * 7919 % 13) * 100;
    int64_t d = 0;
    for (int i = 0; i < 8; ++i, t += 6 * testing::kUs) {
      const int64_t start = i == 0 ? t + latency : d + 1 * testing::kUs;
      d = start + 20 * testing::kUs;
      b.Submit(1, api.launch, t, t + 4 * testing::kUs, start, d);
    }
    b.Call(1, api.sync, t, d + 5 * testing::kUs);
    t = d + 5 * testing::kUs + 10 * testing::kUs;
  });
}

// `steps` steps of a loop that waits for the device every 40th step only
// (a logged loss): 10 launches of 8 us kernels, 5 us apart after 50 us of
// input, and at every 40th step's end a synchronize. The host sets the
// pace; kernels made twice as long, the device does, and its queue grows
// from one synchronize to the next.
testing::TraceBuilder PeriodicSyncLoop(int steps) {
  int64_t d = 0;  // the device's last op end, across steps
  return MarkedLoop(steps, [&d](testing::TraceBuilder& b, const testing::Apis& api, int k, int64_t* tp) {
    int64_t& t = *tp;
    t += 50 * testing::kUs;  // the input
    for (int i = 0; i < 10; ++i, t += 5 * testing::kUs) {
      const int64_t start = std::max(d + 1000, t + 4 * testing::kUs);
      d = start + 8 * testing::kUs;
      b.Submit(1, api.launch, t, t + 3 * testing::kUs, start, d);
    }
    if (k % 40 == 39) {
      b.Call(1, api.sync, t, std::max(t, d) + 5 * testing::kUs);
      t = std::max(t, d) + 5 * testing::kUs;
    }
    t += 5 * testing::kUs;
  });
}

// Guards `whatif --steps`: steps predicted from the part of the trace they
// cover alone (a trace of 64-record chunks: a part, not the whole), the
// same steps, replays and predictions as the whole trace's for those steps
// (each step of this loop drains the device: nothing before the part
// changes them); steps the trace lacks and a straggler's move as usage
// errors.
TEST_CASE("whatif --steps predicts steps from the part of the trace they cover", "[cli][whatif]") {
  Sandbox box;
  for (const bool markers : {true, false}) {
    INFO(markers);
    const std::string trace = WriteJitteredSteps(box.root(), markers);
    for (const std::string change : {"--scale-host-wait 0.5", "--remove-sync train.py:42", ""}) {
      INFO(change);
      const Result whole = box.Run("whatif '" + trace + "' --format json " + change);
      const Result part = box.Run("whatif '" + trace + "' --format json --steps 100-149 " + change);
      REQUIRE(whole.code == 0);
      REQUIRE(part.code == 0);
      const auto w = nlohmann::json::parse(whole.out), p = nlohmann::json::parse(part.out);
      CHECK(!w.contains("steps"));
      CHECK(p["steps"]["first"] == 100);
      CHECK(p["steps"]["last"] == 149);
      CHECK(p["steps"]["of"] == w["baseline"]["steps"]);
      CHECK(p["steps"]["calls_and_ops"] == 300 * 201);
      CHECK(p["steps"]["calls_and_ops_read"].get<int64_t>() < 300 * 201 / 2);
      for (const char* s : {"baseline", "replayed", "predicted"}) {
        CAPTURE(s);
        for (const char* v : {"step_ns", "step_idle_ns"}) {
          CAPTURE(v);
          const auto& all = w[s][v];
          CHECK(p[s][v] == nlohmann::json(std::vector<nlohmann::json>(all.begin() + 100, all.begin() + 150)));
        }
        int64_t idle = 0;
        for (const auto& x : p[s]["step_idle_ns"]) idle += x.get<int64_t>();
        CHECK(p[s]["gpu_idle_ns"] == idle);
      }
      const auto& steps = w["baseline"]["step_ns"];
      CHECK(steps[100] != steps[101]);  // steps apart: the part's are the trace's own
      // What changed, counted over the steps asked for: one input wait
      // or one synchronize a step (the whole trace's unmarked first input
      // wait has no call before it).
      if (!change.empty()) {
        CHECK(p["transformations"][0]["changed"] == 50);
        CHECK(w["transformations"][0]["changed"].get<int64_t>() >= 299);
      }
    }
  }
  {
    // A loop that synchronizes in its first steps only, and a helper
    // thread making more calls (PyTorch's autograd thread): the part of
    // steps 100-149 is led, as the whole trace is, by the loop's thread.
    testing::TraceBuilder b = HelperThreadLoop(300);
    const std::string helper = box.root() + "/helper.sstrace";
    b.WriteTo(helper);
    const auto w = nlohmann::json::parse(box.Run("whatif '" + helper + "' --format json --scale-host-wait 0.5").out);
    const auto p = nlohmann::json::parse(
        box.Run("whatif '" + helper + "' --format json --scale-host-wait 0.5 --steps 100-149").out);
    REQUIRE(p.contains("steps"));
    CHECK(p["steps"]["calls_and_ops_read"].get<int64_t>() < p["steps"]["calls_and_ops"].get<int64_t>() / 2);
    const auto& all = w["predicted"]["step_ns"];
    CHECK(p["predicted"]["step_ns"] ==
          nlohmann::json(std::vector<nlohmann::json>(all.begin() + 100, all.begin() + 150)));
    CHECK(p["predicted"]["mean_step_ns"].get<int64_t>() < p["baseline"]["mean_step_ns"].get<int64_t>());
  }
  const std::string trace = box.root() + "/marked.sstrace";
  const Result past = box.Run("whatif '" + trace + "' --steps 290-300");
  CHECK(past.code == 1);
  CHECK(past.err.find("--steps 290-300: the trace has steps 0-299") != std::string::npos);
  CHECK(Lines(past.err) == 2);
  CHECK(box.Run("whatif '" + trace + "' --steps 9-3").code == 1);
  const Result straggler = box.Run("whatif '" + trace + "' --steps 1-3 --straggler-to-median");
  CHECK(straggler.code == 1);
  CHECK(straggler.err.find("--straggler-to-median: not a distributed run") != std::string::npos);
  CHECK(Lines(straggler.err) == 2);
}

// Guards `whatif` by windows of steps: every step of a trace past
// --stream-above (or with --stream) predicted a window at a time, each
// window from its part of the file alone, gives the whole replay's steps,
// step by step, and the whole replay's counts of what changed (each window
// counts its own steps); the windows' walls join up whatever their size.
TEST_CASE("whatif by windows predicts every step as the whole replay does", "[cli][whatif]") {
  Sandbox box;
  auto json = [&](const std::string& args) {
    const Result r = box.Run("whatif " + args + " --format json");
    INFO(args << "\n" << r.err);
    REQUIRE(r.code == 0);
    return nlohmann::json::parse(r.out);
  };
  // The windows' joined steps, and their idle, against the whole replay's.
  auto same_steps = [](const nlohmann::json& whole, const nlohmann::json& windows) {
    for (const char* s : {"baseline", "replayed", "predicted"}) {
      CAPTURE(s);
      CHECK(windows[s]["step_ns"] == whole[s]["step_ns"]);
      CHECK(windows[s]["step_idle_ns"] == whole[s]["step_idle_ns"]);
      CHECK(windows[s]["mean_step_ns"] == whole[s]["mean_step_ns"]);
      int64_t idle = 0;
      for (const auto& x : windows[s]["step_idle_ns"]) idle += x.get<int64_t>();
      CHECK(windows[s]["gpu_idle_ns"] == idle);
    }
    REQUIRE(windows["transformations"].size() == whole["transformations"].size());
    for (size_t k = 0; k < whole["transformations"].size(); ++k) {
      CAPTURE(k);
      CHECK(windows["transformations"][k] == whole["transformations"][k]);
    }
    CHECK(windows["predicted"]["next_limit"] == whole["predicted"]["next_limit"]);
  };
  for (const bool markers : {true, false}) {
    INFO(markers);
    const std::string trace = WriteJitteredSteps(box.root(), markers);
    for (const std::string change : {"--scale-host-wait 0.5", "--remove-sync train.py:42", "--scale-kernel 'k*=0.5'",
                                     "--launch-cost 100 --launch-steps 95-105", ""}) {
      INFO(change);
      const auto whole = json("'" + trace + "' " + change);
      const auto w40 = json("'" + trace + "' --stream --window-steps 40 " + change);
      const auto w300 = json("'" + trace + "' --stream --window-steps 300 " + change);
      CHECK(!whole.contains("windows"));
      CHECK(w40["windows"]["count"] == 8);
      CHECK(w40["windows"]["steps"] == 40);
      CHECK(w40["steps"]["of"] == 300);
      CHECK(w40["steps"]["calls_and_ops"] == 300 * 201);
      // Each window reads its steps and one on either side, not the trace.
      CHECK(w40["windows"]["largest_calls_and_ops_read"].get<int64_t>() < 300 * 201 / 5);
      CHECK(w40["steps"]["calls_and_ops_read"].get<int64_t>() >= 300 * 201);
      same_steps(whole, w40);
      for (const char* s : {"baseline", "replayed", "predicted"}) {
        CAPTURE(s);
        CHECK(w40[s]["wall_ns"] == w300[s]["wall_ns"]);
        CHECK(w40[s]["wall_ns"].get<int64_t>() > 0);
      }
      if (!change.empty()) CHECK(w40["transformations"][0]["changed"].get<int64_t>() > 0);
      if (change.find("--launch-cost") == std::string::npos && !change.empty()) {
        CHECK(w40["predicted"]["mean_step_ns"].get<int64_t>() < w40["baseline"]["mean_step_ns"].get<int64_t>());
      }
    }
    // The progress: before the first window, then once a window in each
    // of the two passes (the typical delays, the predictions), to the last.
    AnalysisOptions by_windows;
    by_windows.stream = true;
    by_windows.window_steps = 40;
    std::vector<std::pair<uint64_t, uint64_t>> calls;
    auto w = RunWhatIfByWindows({trace}, WhatIfRequest{}, by_windows,
                                [&](uint64_t done, uint64_t total) { calls.emplace_back(done, total); });
    REQUIRE(w.ok());
    REQUIRE(calls.size() == 17);
    for (size_t k = 0; k < calls.size(); ++k) CHECK(calls[k] == std::make_pair(uint64_t{k}, uint64_t{16}));
    // Past --stream-above: by windows, the default's (about 200,000 calls
    // and ops: one window here), with nothing said on stderr.
    const Result large = box.Run("whatif '" + trace + "' --stream-above 1000 --format json");
    CHECK(large.code == 0);
    CHECK(large.err.empty());
    CHECK(nlohmann::json::parse(large.out)["windows"]["count"] == 1);
  }
  {
    // Device timing sampled: refused as the whole reading refuses it,
    // before any window is read.
    const std::string sampled = box.root() + "/sampled.sstrace";
    testing::SampledSteps().WriteTo(sampled);
    for (const std::string how : {"", "--stream", "--stream --steps 1-2", "--steps 1-2"}) {
      INFO(how);
      const Result r = box.Run("whatif '" + sampled + "' " + how);
      CHECK(r.code == 1);
      CHECK(r.err.find("sampled.sstrace: device timing was sampled (one step in 3): whatif replays every step's "
                       "device work") != std::string::npos);
      CHECK(Lines(r.err) == 2);
    }
  }
  {
    // Every window's part has launch latencies of its own, about 5 us in
    // the first half of the steps and 14 us in the second: the typical
    // delays that the replay gives an op whose other constraint bound it
    // are the whole trace's in every window, as in the whole replay (made
    // kernels faster, the queued launches start that long after their
    // calls).
    const std::string shifting = box.root() + "/shifting.sstrace";
    ShiftingLatencyLoop(120).WriteTo(shifting);
    for (const std::string change : {"--scale-kernel '*=0.1'", "--scale-host-wait 0.5"}) {
      INFO(change);
      const auto whole = json("'" + shifting + "' " + change);
      const auto w = json("'" + shifting + "' --stream --window-steps 20 " + change);
      CHECK(w["windows"]["count"] == 6);
      same_steps(whole, w);
    }
  }
  {
    // A loop that synchronizes every 40th step, its kernels made twice as
    // long: the device's queue grows from one synchronize to the next,
    // across windows of 25 steps. A window's replay starts from the
    // trace's times at the step before it, without the queue that the
    // whole replay carries into it; the steps, on the device's timeline
    // (each its kernels back to back, the synchronizing one's drain after
    // them), are the whole replay's all the same.
    const std::string periodic = box.root() + "/periodic.sstrace";
    PeriodicSyncLoop(120).WriteTo(periodic);
    const auto whole = json("'" + periodic + "' --scale-kernel '*=2'");
    const auto w = json("'" + periodic + "' --stream --window-steps 25 --scale-kernel '*=2'");
    CHECK(w["windows"]["count"] == 5);
    CHECK(w["predicted"]["mean_step_ns"].get<int64_t>() > w["baseline"]["mean_step_ns"].get<int64_t>());
    same_steps(whole, w);
  }
  {
    // Two ranks of a data-parallel job whose rank 1 reaches every
    // all-reduce 100 us late: rank 0, the analyzed one, read by slices
    // too, each window's part with its NCCL waits for rank 1 applied as
    // the whole reading applies them; --steps likewise.
    const std::string ranks = box.root() + "/ranks";
    REQUIRE(mkdir(ranks.c_str(), 0755) == 0);
    for (int rank = 0; rank < 2; ++rank) {
      testing::SyntheticSteps(120, "kernel", false, true, 20 * testing::kUs, rank, 2, 30 * testing::kUs)
          .SetPid(static_cast<uint32_t>(1000 + rank))  // two processes, not two dumps of one
          .SetChunkRecords(64)
          .WriteTo(ranks + "/rank" + std::to_string(rank) + ".sstrace");
    }
    for (const std::string change : {"--scale-host-wait 0.5", "--scale-kernel 'k*=0.5'"}) {
      INFO(change);
      const auto whole = json("'" + ranks + "' " + change);
      const auto w = json("'" + ranks + "' --stream --window-steps 25 " + change);
      CHECK(!whole.contains("windows"));
      CHECK(w["windows"]["count"] == 5);
      CHECK(w["windows"]["largest_calls_and_ops_read"].get<int64_t>() < 120 * 205 / 3);
      same_steps(whole, w);
      // The waits for rank 1 are in: 100 us of idle a step more than rank
      // 0's trace alone holds.
      const auto alone = json("'" + ranks + "/rank0.sstrace' --stream --window-steps 25 " + change);
      CHECK(w["baseline"]["gpu_idle_ns"].get<int64_t>() - alone["baseline"]["gpu_idle_ns"].get<int64_t>() ==
            120 * 100 * testing::kUs);
      const auto p = json("'" + ranks + "' --steps 50-69 " + change);
      REQUIRE(p.contains("steps"));
      CHECK(p["steps"]["calls_and_ops_read"].get<int64_t>() < p["steps"]["calls_and_ops"].get<int64_t>() / 2);
      for (const char* s : {"baseline", "replayed", "predicted"}) {
        CAPTURE(s);
        const auto& all = whole[s]["step_ns"];
        CHECK(p[s]["step_ns"] == nlohmann::json(std::vector<nlohmann::json>(all.begin() + 50, all.begin() + 70)));
      }
    }
    // Rank 1 at the median (of two: rank 0's time): each window's part
    // moves rank 0's collectives as the whole run's replay does, each
    // counted by the window of its steps.
    const auto whole = json("'" + ranks + "' --straggler-to-median");
    const auto w = json("'" + ranks + "' --stream --window-steps 25 --straggler-to-median");
    CHECK(w["windows"]["count"] == 5);
    same_steps(whole, w);
    CHECK(w["transformations"][0]["changed"] == 120);
    const auto p = json("'" + ranks + "' --steps 50-69 --straggler-to-median");
    const auto& all = whole["predicted"]["step_ns"];
    CHECK(p["predicted"]["step_ns"] ==
          nlohmann::json(std::vector<nlohmann::json>(all.begin() + 50, all.begin() + 70)));
    CHECK(p["transformations"][0]["changed"] == 20);
    CHECK(w["predicted"]["mean_step_ns"].get<int64_t>() < w["baseline"]["mean_step_ns"].get<int64_t>());
  }
  {
    // A site that blocks in the first steps only, and a helper thread: the
    // windows without the site's calls change nothing, and the calls it
    // removes add up to the whole trace's. Past step 10 nothing drains the
    // device, and the whole replay's helper kernels run into the next
    // step: the windows' steps, their idle too, are the whole replay's
    // (a part's chunks reach past its steps; their ops whose calls it did
    // not read, left at their trace times, had landed among its replayed
    // steps).
    testing::TraceBuilder b = HelperThreadLoop(120);
    const std::string helper = box.root() + "/helper.sstrace";
    b.WriteTo(helper);
    const auto report = nlohmann::json::parse(box.Run("report '" + helper + "' --format json").out);
    REQUIRE(report["hotspots"].size() == 1);
    const std::string fingerprint = report["hotspots"][0]["fingerprint"];
    for (const std::string& change : {"--remove-sync " + fingerprint, std::string("--scale-host-wait 0.5")}) {
      INFO(change);
      const auto whole = json("'" + helper + "' " + change);
      const auto w = json("'" + helper + "' --stream --window-steps 25 " + change);
      const auto one = json("'" + helper + "' --stream --window-steps 120 " + change);
      CHECK(w["windows"]["count"] == 5);
      CHECK(one["windows"]["count"] == 1);
      for (const char* s : {"baseline", "replayed", "predicted"}) {
        CAPTURE(s);
        CHECK(w[s]["wall_ns"] == one[s]["wall_ns"]);
      }
      CHECK(whole["transformations"][0]["changed"].get<int64_t>() > 0);
      same_steps(whole, w);
    }
  }
}

// Guards the docs' option tables: docs/analyzer.md holds what
// `stallscope help --markdown` writes from the declarations.
TEST_CASE("the docs' option tables are the declarations'", "[cli]") {
  Sandbox box;
  const std::string doc = Slurp(std::string(STALLSCOPE_TESTDATA_DIR) + "/../../docs/analyzer.md");
  const std::string begin = "<!-- options: generated by `stallscope help --markdown`"
                            " (scripts/gen-cli-docs) -->\n";
  const std::string end = "<!-- options: end -->";
  const size_t a = doc.find(begin), b = doc.find(end);
  REQUIRE(a != std::string::npos);
  REQUIRE(b != std::string::npos);
  Result md = box.Run("help --markdown");
  CHECK(md.code == 0);
  // On a difference: scripts/gen-cli-docs rewrites the section.
  CHECK(doc.substr(a + begin.size(), b - a - begin.size()) == md.out);
}

// Guards help generated from the subcommand table, and usage errors.
TEST_CASE("help and usage", "[cli]") {
  Sandbox box;
  Result help = box.Run("--help");
  CHECK(help.code == 0);
  CHECK(help.out.find("  run ") != std::string::npos);
  CHECK(help.out.find("  report ") != std::string::npos);
  Result report_help = box.Run("help report");
  CHECK(report_help.code == 0);
  CHECK(report_help.out.find("usage: stallscope report DIR|FILE...") == 0);
  CHECK(box.Run("report --help").out == report_help.out);
  CHECK(box.Run("run --help").out.find("usage: stallscope run") == 0);
  CHECK(box.Run("").code == 1);
  CHECK(box.Run("frobnicate").code == 1);
  CHECK(box.Run("report").code == 1);
  CHECK(box.Run("report x --format nosuch").code == 1);
  CHECK(box.Run("report x --step-pattern '('").code == 1);
}

}  // namespace
}  // namespace stallscope::analyzer
