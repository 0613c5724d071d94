// Tests of hotspot grouping: by call site and API, explicit vs implicit,
// idle caused (rule 1), blocked time, the "actually blocked" filter, and the
// choice of the user-code site in native and Python stacks.
#include "analyzer/analyze/hotspots.h"

#include <catch2/catch.hpp>
#include <stdlib.h>

#include "analyzer/testing/test_util.h"

namespace stallscope::analyzer {
namespace {

using testing::kUs;
using testing::TraceBuilder;
namespace tf = stallscope::trace;

// Guards grouping and the fields: two `.item()`-style syncs from one Python
// line are one hotspot with count 2; a sync copy elsewhere is another,
// implicit; ordering is by idle caused.
TEST_CASE("hotspots group by site and api", "[hotspots]") {
  TraceBuilder b;
  auto api = testing::AddStandardApis(&b);
  const uint32_t loss = b.PythonStack({{"train.py", "train_step", 42}, {"train.py", "main", 90}});
  const uint32_t copy = b.PythonStack({{"train.py", "log_metrics", 77}});
  for (int k = 0; k < 2; ++k) {
    const int64_t t0 = k * 1000 * kUs;
    b.Submit(1, api.launch, t0, t0 + 5 * kUs, t0 + 10 * kUs, t0 + 500 * kUs);
    b.Call(1, api.sync, t0 + 400 * kUs, t0 + 505 * kUs, {.python_stack = loss});  // 100 us rule 1
    b.Submit(1, api.memcpy, t0 + 700 * kUs, t0 + 720 * kUs, t0 + 705 * kUs, t0 + 715 * kUs,
             tf::DeviceOpKind::kMemcpy, "", {.python_stack = copy});
  }
  Report r = testing::AnalyzeOrDie(b);
  REQUIRE(r.hotspots.size() == 2);
  const Hotspot& h = r.hotspots[0];
  CHECK(h.api == "cudaStreamSynchronize");
  CHECK(h.explicit_sync);
  CHECK(h.site.file == "train.py");
  CHECK(h.site.line == 42);
  CHECK(h.site.function == "train_step");
  CHECK(h.count == 2);
  CHECK(h.blocked_ns == 2 * 105 * kUs);
  CHECK(h.idle_caused_ns == 2 * 100 * kUs);
  REQUIRE(h.stack.size() == 2);
  CHECK(h.stack[1].function == "main");  // outermost last
  const Hotspot& c = r.hotspots[1];
  CHECK(c.api == "cudaMemcpy");
  CHECK_FALSE(c.explicit_sync);
  CHECK(c.site.line == 77);
  CHECK(c.count == 2);
}

// Guards sites_lost: a call whose Python frames the recorder could not read
// (its stack: one frame in trace::kLostSiteFile) is not put at a made-up
// Python site; it falls back to the native site, and its hotspot counts it.
TEST_CASE("a lost Python site is counted on its hotspot", "[hotspots]") {
  TraceBuilder b;
  auto api = testing::AddStandardApis(&b);
  const uint32_t good = b.PythonStack({{"train.py", "train_step", 42}});
  const uint32_t lost = b.PythonStack({{tf::kLostSiteFile, "frame walk stopped", 0}});
  for (int k = 0; k < 3; ++k) {
    const int64_t t0 = k * 1000 * kUs;
    b.Submit(1, api.launch, t0, t0 + 5 * kUs, t0 + 10 * kUs, t0 + 500 * kUs);
    b.Call(1, api.sync, t0 + 400 * kUs, t0 + 505 * kUs, {.python_stack = k == 1 ? lost : good});
  }
  Report r = testing::AnalyzeOrDie(b);
  REQUIRE(r.hotspots.size() == 2);
  int64_t lost_total = 0;
  for (const Hotspot& h : r.hotspots) {
    lost_total += h.sites_lost;
    if (h.site.file == "train.py") {
      CHECK(h.count == 2);
      CHECK(h.sites_lost == 0);
    } else {
      CHECK(h.count == 1);
      CHECK(h.sites_lost == 1);
      CHECK(h.site.file != tf::kLostSiteFile);
      for (const Frame& f : h.stack) CHECK(f.file != tf::kLostSiteFile);
    }
  }
  CHECK(lost_total == 1);
}

// Guards "a clean run reports none": syncs that return at once and cause no
// idle are not hotspots.
TEST_CASE("non-blocking syncs are not hotspots", "[hotspots]") {
  TraceBuilder b;
  auto api = testing::AddStandardApis(&b);
  b.Submit(1, api.launch, 0, 5 * kUs, 10 * kUs, 20 * kUs);
  b.Call(1, api.sync, 30 * kUs, 32 * kUs);  // device already idle, 2 us
  b.Submit(1, api.launch, 33 * kUs, 38 * kUs, 40 * kUs, 60 * kUs);
  Report r = testing::AnalyzeOrDie(b);
  CHECK(r.hotspots.empty());
}

// Guards the native site rule: frames in libcuda, libstallscope, libc and
// simgpu are skipped; the first user frame is the site, `module+0xoffset`
// when the module cannot be read; stallscope's own frames are not shown.
TEST_CASE("native call sites skip runtime modules", "[hotspots]") {
  TraceBuilder b;
  auto api = testing::AddStandardApis(&b);
  b.Module(0x10000, 0x10000, 0x20000, "/opt/lib/libstallscope.so");
  b.Module(0x20000, 0x20000, 0x30000, "/opt/stallscope/build/lib/simgpu/libcudart.so.13");
  b.Module(0x30000, 0x30000, 0x40000, "/nonexistent/libtrainer.so");
  b.Module(0x40000, 0x40000, 0x50000, "/lib/x86_64-linux-gnu/libc.so.6");
  const uint32_t stack = b.NativeStack({0x10010, 0x20020, 0x30030, 0x40040});
  b.Submit(1, api.launch, 0, 5 * kUs, 10 * kUs, 500 * kUs);
  b.Call(1, api.sync, 20 * kUs, 505 * kUs, {.stack = stack});
  b.Submit(1, api.launch, 506 * kUs, 510 * kUs, 515 * kUs, 600 * kUs);
  Report r = testing::AnalyzeOrDie(b);
  REQUIRE(r.hotspots.size() == 1);
  CHECK(r.hotspots[0].site.function == "libtrainer.so+0x30");
  CHECK(r.hotspots[0].stack.size() == 3);
  CHECK(r.hotspots[0].stack[0].module == "libcudart.so.13");
  CHECK(r.hotspots[0].stack[2].module == "libc.so.6");
}

// Guards the runtime-module list.
TEST_CASE("runtime modules", "[hotspots]") {
  CHECK(IsRuntimeModule("/usr/lib/x86_64-linux-gnu/libcuda.so.1"));
  CHECK(IsRuntimeModule("/usr/local/cuda/lib64/libcudart.so.13"));
  CHECK(IsRuntimeModule("libcupti.so.13"));
  CHECK(IsRuntimeModule("/x/libnccl.so.2"));
  CHECK(IsRuntimeModule("/lib/x86_64-linux-gnu/libc.so.6"));
  CHECK(IsRuntimeModule("/lib/x86_64-linux-gnu/libm.so.6"));
  CHECK(IsRuntimeModule("/lib/x86_64-linux-gnu/libstdc++.so.6"));
  CHECK(IsRuntimeModule("/lib/x86_64-linux-gnu/libgcc_s.so.1"));
  CHECK(IsRuntimeModule("/lib64/ld-linux-x86-64.so.2"));
  CHECK(IsRuntimeModule("/lib/x86_64-linux-gnu/libpthread.so.0"));
  CHECK(IsRuntimeModule("/build/lib/simgpu/libfoo.so"));
  CHECK(IsRuntimeModule("/build/lib/libstallscope.so"));
  CHECK_FALSE(IsRuntimeModule("/usr/lib/libcrypto.so.3"));
  CHECK_FALSE(IsRuntimeModule("/home/u/train"));
  CHECK_FALSE(IsRuntimeModule("/usr/lib/python3.11/libmagic.so"));
  // frameworks' native libraries and anything installed as a Python package
  CHECK(IsRuntimeModule("/venv/lib/python3.11/site-packages/torch/lib/libtorch_cuda.so"));
  CHECK(IsRuntimeModule("/opt/torch/lib/libc10_cuda.so"));
  CHECK(IsRuntimeModule("/usr/lib/python3/dist-packages/numba/_helperlib.so"));
  CHECK(IsRuntimeModule("/x/libcublasLt.so.13"));
}

// Guards the Python user-code rule: the standard library (a pyenv or Debian
// interpreter's lib/python3.X, frozen modules), site-packages and
// dist-packages and stallscope's own package are not user code; scripts,
// `-c` code and a project's modules are; the patterns decide first.
TEST_CASE("python user-code rule", "[hotspots]") {
  SiteRule none;
  CHECK(IsUserPythonFile("/home/u/proj/train.py", none));
  CHECK(IsUserPythonFile("train.py", none));
  CHECK(IsUserPythonFile("<string>", none));
  CHECK(IsUserPythonFile("/home/u/lib/python3/tools.py", none));  // not lib/python3.X/
  CHECK_FALSE(IsUserPythonFile("/usr/lib/python3.11/threading.py", none));
  CHECK_FALSE(IsUserPythonFile("/home/u/.pyenv/versions/3.12.4/lib/python3.12/json/__init__.py", none));
  CHECK_FALSE(IsUserPythonFile("/usr/lib64/python3.12/contextlib.py", none));
  CHECK_FALSE(IsUserPythonFile("<frozen importlib._bootstrap>", none));
  CHECK_FALSE(IsUserPythonFile("/venv/lib/python3.11/site-packages/torch/cuda/__init__.py", none));
  CHECK_FALSE(IsUserPythonFile("/usr/lib/python3/dist-packages/numba/cuda/cudadrv/driver.py", none));
  CHECK_FALSE(IsUserPythonFile("/home/u/src/stallscope/python/stallscope/__init__.py", none));
  SiteRule rule;
  rule.user_code = {"*/site-packages/mylib/*"};
  rule.not_user_code = {"*/proj/wrappers.py", "*/site-packages/*"};
  CHECK(IsUserPythonFile("/venv/lib/python3.11/site-packages/mylib/step.py", rule));
  CHECK_FALSE(IsUserPythonFile("/home/u/proj/wrappers.py", rule));
  CHECK(IsUserPythonFile("/home/u/proj/train.py", rule));
}

// Guards the environment's patterns: appended after the command line's,
// ':'-separated, empty entries skipped.
TEST_CASE("site patterns from the environment", "[hotspots]") {
  setenv("STALLSCOPE_USER_CODE", "*/mylib/*::*/other/*", 1);
  setenv("STALLSCOPE_NOT_USER_CODE", "*/wrap.py", 1);
  SiteRule rule;
  rule.user_code = {"*/first/*"};
  AddSiteRulesFromEnvironment(&rule);
  unsetenv("STALLSCOPE_USER_CODE");
  unsetenv("STALLSCOPE_NOT_USER_CODE");
  CHECK(rule.user_code == std::vector<std::string>{"*/first/*", "*/mylib/*", "*/other/*"});
  CHECK(rule.not_user_code == std::vector<std::string>{"*/wrap.py"});
  CHECK_FALSE(IsUserPythonFile("/home/u/proj/wrap.py", rule));
  CHECK(IsUserPythonFile("/venv/lib/python3.11/site-packages/mylib/x.py", rule));
}

// Guards the site of a call made through framework and standard-library
// frames (torch.cuda.synchronize(), numba's safe_cuda_api_call, a context
// manager): the innermost user frame, with the whole stack kept; with no
// user frame at all, the innermost Python frame; configured patterns move it.
TEST_CASE("python sites skip library frames", "[hotspots]") {
  TraceBuilder b;
  auto api = testing::AddStandardApis(&b);
  const uint32_t through_libs = b.PythonStack(
      {{"/venv/lib/python3.11/site-packages/torch/cuda/__init__.py", "synchronize", 1371},
       {"/usr/lib/python3.11/contextlib.py", "__exit__", 144},
       {"/home/u/proj/wrappers.py", "timed", 8},
       {"/home/u/proj/train.py", "train_step", 42},
       {"/home/u/proj/train.py", "<module>", 90}});
  const uint32_t only_libs = b.PythonStack(
      {{"/venv/lib/python3.11/site-packages/numba/cuda/cudadrv/driver.py", "safe_cuda_api_call", 324},
       {"/venv/lib/python3.11/site-packages/numba/cuda/cudadrv/devicearray.py", "copy_to_host", 900}});
  for (int k = 0; k < 2; ++k) {
    const int64_t t0 = k * 1000 * kUs;
    b.Submit(1, api.launch, t0, t0 + 5 * kUs, t0 + 10 * kUs, t0 + 500 * kUs);
    b.Call(1, api.sync, t0 + 400 * kUs, t0 + 505 * kUs, {.python_stack = through_libs});
    b.Submit(1, api.launch, t0 + 600 * kUs, t0 + 605 * kUs, t0 + 610 * kUs, t0 + 800 * kUs);
    b.Call(1, api.sync, t0 + 700 * kUs, t0 + 805 * kUs, {.python_stack = only_libs});
  }
  Report r = testing::AnalyzeOrDie(b);
  REQUIRE(r.hotspots.size() == 2);
  const Hotspot* user = nullptr;
  const Hotspot* lib = nullptr;
  for (const Hotspot& h : r.hotspots) (h.stack.size() == 5 ? user : lib) = &h;
  REQUIRE(user != nullptr);
  REQUIRE(lib != nullptr);
  CHECK(user->site.file == "/home/u/proj/wrappers.py");
  CHECK(user->site.line == 8);
  CHECK(user->stack[0].function == "synchronize");  // the whole stack stays
  CHECK(lib->site.function == "safe_cuda_api_call");
  CHECK(lib->stack.size() == 2);

  AnalysisOptions o;
  o.attribution.site.not_user_code = {"*/wrappers.py"};
  Report moved = testing::AnalyzeOrDie(b, o);
  bool found = false;
  for (const Hotspot& h : moved.hotspots) {
    if (h.stack.size() != 5) continue;
    found = true;
    CHECK(h.site.function == "train_step");
    CHECK(h.site.line == 42);
  }
  CHECK(found);
}

// Guards the native rule for frameworks: frames in libtorch_cuda.so (and
// anything under site-packages) are skipped for the first user frame.
TEST_CASE("native sites skip framework libraries", "[hotspots]") {
  TraceBuilder b;
  auto api = testing::AddStandardApis(&b);
  b.Module(0x10000, 0x10000, 0x20000, "/venv/lib/python3.11/site-packages/torch/lib/libtorch_cuda.so");
  b.Module(0x20000, 0x20000, 0x30000, "/venv/lib/python3.11/site-packages/torch/lib/libc10_cuda.so");
  b.Module(0x30000, 0x30000, 0x40000, "/nonexistent/train_bin");
  const uint32_t stack = b.NativeStack({0x10010, 0x20020, 0x30030});
  b.Submit(1, api.launch, 0, 5 * kUs, 10 * kUs, 500 * kUs);
  b.Call(1, api.sync, 20 * kUs, 505 * kUs, {.stack = stack});
  b.Submit(1, api.launch, 506 * kUs, 510 * kUs, 515 * kUs, 600 * kUs);
  Report r = testing::AnalyzeOrDie(b);
  REQUIRE(r.hotspots.size() == 1);
  CHECK(r.hotspots[0].site.function == "train_bin+0x30");
  CHECK(r.hotspots[0].stack.size() == 3);
}

}  // namespace
}  // namespace stallscope::analyzer

namespace stallscope::analyzer {
namespace {

// Guards the hotspot window with markers: a start-up sync before the first
// step and a teardown sync after the last are left out; a sync between two
// step ranges counts.
TEST_CASE("hotspots with markers skip start-up and teardown", "[hotspots]") {
  testing::TraceBuilder b;
  auto api = testing::AddStandardApis(&b);
  const uint32_t init = b.PythonStack({{"train.py", "setup", 10}});
  const uint32_t between = b.PythonStack({{"train.py", "log", 20}});
  const uint32_t teardown = b.PythonStack({{"train.py", "finish", 30}});
  b.Submit(1, api.launch, 0, 5 * kUs, 10 * kUs, 500 * kUs);
  b.Call(1, api.sync, 20 * kUs, 505 * kUs, {.python_stack = init});
  for (int k = 0; k < 2; ++k) {
    const int64_t t0 = 1000 * kUs + k * 2000 * kUs;
    b.Range(1, t0, t0 + 1000 * kUs, "step");
    b.Submit(1, api.launch, t0, t0 + 5 * kUs, t0 + 10 * kUs, t0 + 900 * kUs);
  }
  b.Call(1, api.sync, 2100 * kUs, 2200 * kUs, {.python_stack = between});  // device idle: blocked only
  b.Call(1, api.sync, 5000 * kUs, 5100 * kUs, {.python_stack = teardown});
  Report r = testing::AnalyzeOrDie(b);
  REQUIRE(r.hotspots.size() == 1);
  CHECK(r.hotspots[0].site.function == "log");
}

}  // namespace
}  // namespace stallscope::analyzer

namespace stallscope::analyzer {
namespace {

// Guards calls from Python (a native and a Python stack id on one record):
// the site is the innermost Python frame; the stack lists the native frames
// (innermost first), then the Python frames, outermost last.
TEST_CASE("python call sites win over native frames", "[hotspots]") {
  testing::TraceBuilder b;
  auto api = testing::AddStandardApis(&b);
  b.Module(0x30000, 0x30000, 0x40000, "/nonexistent/_C.so");
  const uint32_t native = b.NativeStack({0x30030});
  const uint32_t py = b.PythonStack({{"model.py", "forward", 12}, {"train.py", "main", 3}});
  b.Submit(1, api.launch, 0, 5 * kUs, 10 * kUs, 500 * kUs);
  b.Call(1, api.sync, 20 * kUs, 505 * kUs, {.stack = native, .python_stack = py});
  b.Submit(1, api.launch, 506 * kUs, 510 * kUs, 515 * kUs, 600 * kUs);
  Report r = testing::AnalyzeOrDie(b);
  REQUIRE(r.hotspots.size() == 1);
  const Hotspot& h = r.hotspots[0];
  CHECK(h.site.file == "model.py");
  CHECK(h.site.line == 12);
  CHECK(h.site.function == "forward");
  REQUIRE(h.stack.size() == 3);
  CHECK(h.stack[0].function == "_C.so+0x30");
  CHECK(h.stack[1].function == "forward");
  CHECK(h.stack[2].function == "main");
}

}  // namespace
}  // namespace stallscope::analyzer

namespace stallscope::analyzer {
namespace {

using testing::kUs;
using testing::TraceBuilder;
namespace tf = stallscope::trace;

// One blocking sync at a native site in libtrainer.so loaded at `base`.
Report NativeSyncAt(uint64_t base, uint64_t offset) {
  TraceBuilder b;
  auto api = testing::AddStandardApis(&b);
  b.Module(base, base, base + 0x10000, "/nonexistent/libtrainer.so");
  const uint32_t stack = b.NativeStack({base + offset});
  b.Submit(1, api.launch, 0, 5 * kUs, 10 * kUs, 500 * kUs);
  b.Call(1, api.sync, 20 * kUs, 505 * kUs, {.stack = stack});
  return testing::AnalyzeOrDie(b);
}

// Guards the fingerprint: the same code loaded at another address (ASLR,
// another run) has the same fingerprint; another site or API does not; hex.
TEST_CASE("hotspot fingerprints are stable across runs", "[hotspots]") {
  Report a = NativeSyncAt(0x7f0000000000, 0x30);
  Report b = NativeSyncAt(0x7f1234560000, 0x30);
  Report c = NativeSyncAt(0x7f0000000000, 0x40);
  REQUIRE(a.hotspots.size() == 1);
  REQUIRE(b.hotspots.size() == 1);
  REQUIRE(c.hotspots.size() == 1);
  CHECK(a.hotspots[0].fingerprint == b.hotspots[0].fingerprint);
  CHECK(a.hotspots[0].fingerprint != c.hotspots[0].fingerprint);
  CHECK(a.hotspots[0].fingerprint.size() == 16);
  CHECK(a.hotspots[0].fingerprint.find_first_not_of("0123456789abcdef") == std::string::npos);
  const Frame site{"train_step", "train.py", 42, "python"};
  CHECK(HotspotFingerprint("cudaStreamSynchronize", true, site) ==
        HotspotFingerprint("cudaStreamSynchronize", true, site));
  CHECK(HotspotFingerprint("cudaStreamSynchronize", true, site) !=
        HotspotFingerprint("cuStreamSynchronize", true, site));
  CHECK(HotspotFingerprint("cudaStreamSynchronize", true, site) !=
        HotspotFingerprint("cudaStreamSynchronize", false, site));
  // The module path does not enter (only file:line:function).
  CHECK(HotspotFingerprint("x", true, site) ==
        HotspotFingerprint("x", true, Frame{"train_step", "train.py", 42, "other"}));
}

// Guards the suggestion for each kind of synchronization.
TEST_CASE("hotspot suggestions by kind", "[hotspots]") {
  using C = tf::ApiCategory;
  auto has = [](const std::string& s, const char* part) {
    return s.find(part) != std::string::npos;
  };
  CHECK(has(HotspotSuggestion("cuStreamSynchronize", C::kSync, tf::kApiMayBlock, 0, 0),
            "cudaStreamWaitEvent"));
  CHECK(has(HotspotSuggestion("cuCtxSynchronize", C::kSync, tf::kApiMayBlock, 0, 0),
            "next blocking read synchronizes"));
  CHECK(has(HotspotSuggestion("cuEventSynchronize", C::kSync, tf::kApiMayBlock, 0, 0),
            "event sync"));
  CHECK(has(HotspotSuggestion("cuMemFree_v2", C::kFree, tf::kApiMayBlock, 0, 0),
            "cudaMallocAsync/cudaFreeAsync"));
  CHECK(has(HotspotSuggestion("cuMemsetD8_v2", C::kSet, tf::kApiMayBlock, 0, 0),
            "cudaMemsetAsync"));
  const uint16_t async = tf::kApiAsync | tf::kApiSubmits;
  CHECK(has(HotspotSuggestion("cuMemcpyDtoHAsync_v2", C::kCopy, async, 0, 4), "scalar read-back"));
  CHECK(has(HotspotSuggestion("cudaMemcpyAsync", C::kCopy, async, tf::kApiDevToHost, 1 << 20),
            "pageable"));
  CHECK(has(HotspotSuggestion("cudaMemcpy", C::kCopy, tf::kApiMayBlock, tf::kApiDevToHost, 4096),
            "pinned"));
  CHECK(has(HotspotSuggestion("cuMemcpyHtoD_v2", C::kCopy, tf::kApiMayBlock, 0, 4096),
            "host-to-device"));
  CHECK(has(HotspotSuggestion("cudaMemcpy", C::kCopy, tf::kApiMayBlock, 0, 0), "cudaMemcpyAsync"));
}

// Guards the pipeline: a 4-byte read-back through the generic cudaMemcpy
// gets its direction from the op's CUPTI kind (2, DtoH) and the scalar
// suggestion; the explicit sync gets the event suggestion.
TEST_CASE("hotspot suggestion from the op's copy kind", "[hotspots]") {
  TraceBuilder b;
  auto api = testing::AddStandardApis(&b);
  b.Submit(1, api.launch, 0, 5 * kUs, 10 * kUs, 500 * kUs);
  b.Call(1, api.memcpy, 20 * kUs, 510 * kUs, {.correlation = 900, .bytes = 4});
  b.Device(500 * kUs, 501 * kUs, tf::DeviceOpKind::kMemcpy, "DtoH", 77, 7, 0, 4,
           /*copy_kind=*/2);
  b.Correlate(900, 77);
  Report r = testing::AnalyzeOrDie(b);
  REQUIRE(r.hotspots.size() == 1);
  CHECK(r.hotspots[0].suggestion.find("scalar read-back") != std::string::npos);
}

}  // namespace
}  // namespace stallscope::analyzer

namespace stallscope::analyzer {
namespace {

// Guards "the kind is what the user wrote": torch's `.item()` copies into
// pinned memory (an async copy that returns at once) and then synchronizes
// the stream, both from the user's line. That synchronize is implicit, with
// the read-back's fix, and counts in the copy's hotspot; a stream synchronize from another line after the copy
// (torch.cuda.synchronize(), an explicit wait) stays explicit, and so does
// one with a launch's sync in between on another stream.
TEST_CASE("a synchronize completing a read-back from the same line is implicit", "[hotspots]") {
  TraceBuilder b;
  auto api = testing::AddStandardApis(&b);
  const uint32_t item = b.PythonStack({{"/home/u/train.py", "train_step", 42}});
  const uint32_t sync = b.PythonStack({{"/home/u/train.py", "train_step", 50}});
  for (int k = 0; k < 3; ++k) {
    const int64_t t0 = k * 2000 * kUs;
    b.Submit(1, api.launch, t0, t0 + 5 * kUs, t0 + 10 * kUs, t0 + 500 * kUs);
    // loss.item(): cudaMemcpyAsync DtoH of 4 bytes (CUPTI copy kind 2), then the sync.
    const uint64_t ext = 1000 + k;
    b.Call(1, api.memcpy_async, t0 + 20 * kUs, t0 + 22 * kUs,
           {.correlation = ext, .stream = 7, .python_stack = item, .bytes = 4});
    b.Device(t0 + 500 * kUs, t0 + 503 * kUs, tf::DeviceOpKind::kMemcpy, "", 500 + k, 7, 0, 4, 2);
    b.Correlate(ext, 500 + k);
    b.Call(1, api.sync, t0 + 25 * kUs, t0 + 505 * kUs, {.stream = 7, .python_stack = item});
    // An explicit synchronize from another line.
    b.Submit(1, api.launch, t0 + 600 * kUs, t0 + 605 * kUs, t0 + 610 * kUs, t0 + 1000 * kUs);
    b.Call(1, api.sync, t0 + 620 * kUs, t0 + 1005 * kUs, {.stream = 7, .python_stack = sync});
  }
  Report r = testing::AnalyzeOrDie(b);
  REQUIRE(r.hotspots.size() == 2);
  const Hotspot* read = nullptr;
  const Hotspot* expl = nullptr;
  for (const Hotspot& h : r.hotspots) (h.site.line == 42 ? read : expl) = &h;
  REQUIRE(read != nullptr);
  REQUIRE(expl != nullptr);
  CHECK(read->api == "cudaMemcpyAsync");  // the read-back's hotspot is its copy's
  CHECK_FALSE(read->explicit_sync);
  CHECK(read->count == 3);
  CHECK(read->blocked_ns == 3 * 480 * kUs);  // the synchronizes' wait
  CHECK(read->suggestion.find("scalar read-back") != std::string::npos);
  CHECK(expl->explicit_sync);
  CHECK(expl->count == 3);
  CHECK(expl->suggestion.find("explicit sync") != std::string::npos);
}

// Guards the rule's limits and its upload side: a copy and a synchronize on
// different streams are no completion (the synchronize stays explicit); an
// upload from pageable memory followed by its stream's synchronize
// (torch's blocking `x.to(device)`) is implicit, in the copy's hotspot, with
// the upload's fix.
TEST_CASE("copy completions: not across streams; uploads too", "[hotspots]") {
  TraceBuilder b;
  auto api = testing::AddStandardApis(&b);
  const uint32_t other_stream = b.PythonStack({{"/home/u/train.py", "step", 7}});
  const uint32_t upload = b.PythonStack({{"/home/u/train.py", "step", 9}});
  for (int k = 0; k < 2; ++k) {
    const int64_t t0 = k * 2000 * kUs;
    b.Submit(1, api.launch, t0, t0 + 5 * kUs, t0 + 10 * kUs, t0 + 500 * kUs);
    const uint64_t ext = 1000 + k;
    b.Call(1, api.memcpy_async, t0 + 20 * kUs, t0 + 22 * kUs,
           {.correlation = ext, .stream = 9, .python_stack = other_stream, .bytes = 4});
    b.Device(t0 + 30 * kUs, t0 + 33 * kUs, tf::DeviceOpKind::kMemcpy, "", 500 + k, 9, 0, 4, 2);
    b.Correlate(ext, 500 + k);
    b.Call(1, api.sync, t0 + 40 * kUs, t0 + 505 * kUs, {.stream = 7, .python_stack = other_stream});
    // The upload: HtoD (copy kind 1) on stream 7, then stream 7's synchronize.
    b.Submit(1, api.launch, t0 + 600 * kUs, t0 + 605 * kUs, t0 + 610 * kUs, t0 + 1000 * kUs);
    const uint64_t up = 2000 + k;
    b.Call(1, api.memcpy_async, t0 + 620 * kUs, t0 + 622 * kUs,
           {.correlation = up, .stream = 7, .python_stack = upload, .bytes = 1 << 20});
    b.Device(t0 + 1000 * kUs, t0 + 1040 * kUs, tf::DeviceOpKind::kMemcpy, "", 600 + k, 7, 0,
             1 << 20, 1);
    b.Correlate(up, 600 + k);
    b.Call(1, api.sync, t0 + 625 * kUs, t0 + 1045 * kUs, {.stream = 7, .python_stack = upload});
  }
  Report r = testing::AnalyzeOrDie(b);
  REQUIRE(r.hotspots.size() == 2);
  const Hotspot* cross = nullptr;
  const Hotspot* up = nullptr;
  for (const Hotspot& h : r.hotspots) (h.site.line == 7 ? cross : up) = &h;
  REQUIRE(cross != nullptr);
  REQUIRE(up != nullptr);
  CHECK(cross->explicit_sync);
  CHECK(cross->api == "cudaStreamSynchronize");
  CHECK(cross->count == 2);
  CHECK_FALSE(up->explicit_sync);
  CHECK(up->api == "cudaMemcpyAsync");
  CHECK(up->count == 2);
  CHECK(up->suggestion.find("host-to-device") != std::string::npos);
}

}  // namespace
}  // namespace stallscope::analyzer

namespace stallscope::analyzer {
namespace {

// Guards one hotspot per read-back line: the first `.item()` copies into
// pageable memory and the copy itself blocks; later ones copy into pinned
// memory and their synchronize blocks. Both count in one hotspot (the
// copy's API), hit in every step; `steps` counts the steps it hit.
TEST_CASE("a read-back line is one hotspot whichever call blocked", "[hotspots]") {
  TraceBuilder b;
  auto api = testing::AddStandardApis(&b);
  const uint16_t d2h = b.Api("cuMemcpyDtoHAsync_v2", tf::ApiCategory::kCopy,
                             tf::kApiSubmits | tf::kApiAsync | tf::kApiMayBlock | tf::kApiDevToHost);
  const uint32_t item = b.PythonStack({{"/home/u/train.py", "train_step", 42}});
  constexpr int kSteps = 4;
  for (int k = 0; k < kSteps; ++k) {
    const int64_t t0 = k * 2000 * kUs;
    b.Range(1, t0, t0 + 2000 * kUs, "step");
    b.Submit(1, api.launch, t0, t0 + 5 * kUs, t0 + 10 * kUs, t0 + 500 * kUs);
    const uint64_t ext = 1000 + k;
    if (k == 0) {  // into pageable memory: the copy waits
      b.Call(1, d2h, t0 + 20 * kUs, t0 + 505 * kUs,
             {.correlation = ext, .stream = 7, .python_stack = item, .bytes = 4});
    } else {
      b.Call(1, d2h, t0 + 20 * kUs, t0 + 22 * kUs,
             {.correlation = ext, .stream = 7, .python_stack = item, .bytes = 4});
    }
    b.Device(t0 + 500 * kUs, t0 + 503 * kUs, tf::DeviceOpKind::kMemcpy, "", 500 + k, 7, 0, 4, 2);
    b.Correlate(ext, 500 + k);
    // k == 0: the synchronize after the blocking copy still takes 10 us (the
    // call's own cost): the same read-back, not a second hit.
    b.Call(1, api.sync, k == 0 ? t0 + 510 * kUs : t0 + 25 * kUs,
           k == 0 ? t0 + 520 * kUs : t0 + 505 * kUs, {.stream = 7, .python_stack = item});
    b.Submit(1, api.launch, t0 + 1500 * kUs, t0 + 1505 * kUs, t0 + 1510 * kUs, t0 + 1900 * kUs);
  }
  Report r = testing::AnalyzeOrDie(b);
  REQUIRE(r.hotspots.size() == 1);
  const Hotspot& h = r.hotspots[0];
  CHECK(h.api == "cuMemcpyDtoHAsync_v2");
  CHECK_FALSE(h.explicit_sync);
  CHECK(h.count == kSteps);
  CHECK(h.steps == kSteps);
  CHECK(h.suggestion.find("scalar read-back") != std::string::npos);
}

}  // namespace
}  // namespace stallscope::analyzer
