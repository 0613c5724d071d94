// The native stacks walked by cached rules are libgcc's, frame for frame:
// through frames on %rsp and on %rbp, through libc, through a module
// loaded and unloaded, on another thread, to a stop and to a limit; a
// signal frame is left to libgcc; the rules are worked out once per
// address, and again after a module is unloaded.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>

#include <alloca.h>
#include <dlfcn.h>
#include <signal.h>
#include <stdlib.h>

#include <algorithm>
#include <cstdint>
#include <thread>

#include "fast_unwind.h"

namespace stallscope::recorder {
namespace {

thread_local UnwindRules* t_rules = nullptr;
uint64_t g_stop_at = 0;  // a return address the walks stop before (0: none)

bool StopAt(uint64_t pc) { return g_stop_at != 0 && pc == g_stop_at; }

struct Both {
  int fast = 0, gcc = 0;
  uint64_t f[64] = {}, g[64] = {};
};

// Both walks, from this function's caller outward (this frame and the
// walker's own left out).
__attribute__((noinline)) void Walk(Both* b, int max = 64) {
  b->fast = FastBacktrace(&t_rules, b->f, max, 2, StopAt);
  b->gcc = LibgccBacktrace(b->g, max, 2, StopAt);
  asm volatile("" ::: "memory");  // not a tail call
}

void CheckSame(const Both& b) {
  REQUIRE(b.gcc > 2);
  REQUIRE(b.fast == b.gcc);
  for (int i = 0; i < b.gcc; ++i) {
    INFO("frame " << i);
    CHECK(b.f[i] == b.g[i]);
  }
}

// Frames without a frame pointer (the CFA on %rsp, its offset moving with
// each push) and with one (a variable-length array: the CFA on %rbp).
__attribute__((noinline, optimize("omit-frame-pointer"))) void OnRsp(int n, Both* b);

__attribute__((noinline)) void OnRbp(int n, Both* b) {
  auto* pad = static_cast<volatile char*>(alloca(16 + 8 * (n % 5)));
  pad[0] = char(n);
  if (n == 0) {
    Walk(b);
  } else {
    OnRsp(n - 1, b);
  }
  asm volatile("" ::: "memory");
}

__attribute__((noinline, optimize("omit-frame-pointer"))) void OnRsp(int n, Both* b) {
  volatile uint64_t pad[3] = {uint64_t(n), 0, 0};
  if (n == 0) {
    Walk(b);
  } else {
    OnRbp(n - 1, b);
  }
  pad[1] = pad[0];
}

// Six frames deep, from one call site.
__attribute__((noinline)) void Six(Both* b) {
  OnRbp(6, b);
  asm volatile("" ::: "memory");
}

Both* g_sorting = nullptr;

int Compare(const void* a, const void* b) {
  if (g_sorting != nullptr) {
    Walk(g_sorting);
    g_sorting = nullptr;
  }
  return *static_cast<const int*>(a) - *static_cast<const int*>(b);
}

void WalkFrom(void* b) { Walk(static_cast<Both*>(b)); }

Both* g_in_handler = nullptr;
void Handler(int) { Walk(g_in_handler); }

TEST_CASE("stacks walked by cached rules are libgcc's", "[unwind]") {
  SECTION("frames on %rsp and on %rbp, 21 deep") {
    Both b;
    OnRbp(20, &b);
    CheckSame(b);
    CHECK(b.gcc >= 22);
  }
  SECTION("through libc (qsort calling back)") {
    int v[64];
    for (int i = 0; i < 64; ++i) v[i] = (i * 37) % 64;
    Both b;
    g_sorting = &b;
    qsort(v, 64, sizeof v[0], Compare);
    CheckSame(b);
  }
  SECTION("on another thread, to the end of its stack") {
    Both b;
    std::thread([&b] { OnRsp(3, &b); }).join();
    CheckSame(b);
  }
  SECTION("to a stop, and to a limit") {
    Both all;
    Six(&all);
    CheckSame(all);
    // The first return address past the recursion's (which repeat).
    int at = 3;
    while (at < all.gcc && std::find(all.g, all.g + at, all.g[at]) != all.g + at) ++at;
    REQUIRE(at < all.gcc);
    g_stop_at = all.g[at];
    Both stopped;
    Six(&stopped);
    g_stop_at = 0;
    CHECK(stopped.gcc == at);
    CHECK(stopped.fast == at);
    Both five;  // the limit counts the frames written
    five.fast = FastBacktrace(&t_rules, five.f, 5, 1, nullptr);
    five.gcc = LibgccBacktrace(five.g, 5, 1, nullptr);
    CHECK(five.fast == 5);
    CHECK(five.gcc == 5);
  }
}

TEST_CASE("a signal frame is left to libgcc", "[unwind]") {
  Both b;
  g_in_handler = &b;
  struct sigaction sa = {}, old = {};
  sa.sa_handler = Handler;
  REQUIRE(sigaction(SIGUSR1, &sa, &old) == 0);
  raise(SIGUSR1);
  sigaction(SIGUSR1, &old, nullptr);
  const uint64_t fallbacks = CountsOf(t_rules).fallbacks;
  CHECK(b.fast == -1);
  CHECK(b.gcc > 3);  // through the signal frame to this test
  CHECK(fallbacks > 0);
}

TEST_CASE("rules are worked out once per address, again after an unload", "[unwind]") {
  Both b;
  uint64_t built[2] = {};
  volatile int times = 2;  // one call site (a loop neither unrolled nor peeled)
  for (int i = 0; i < times; ++i) {
    OnRbp(4, &b);  // the first time, the rules of these frames
    built[i] = CountsOf(t_rules).rules_built;
  }
  CheckSame(b);
  CHECK(built[1] == built[0]);  // every frame's rule from the cache
  // Twice through a module loaded, walked through and unloaded: the first
  // time only the new addresses' rules are worked out, the second time
  // (a module was unloaded since) every frame's.
  uint64_t new_rules[2] = {};
  for (int i = 0; i < times; ++i) {
    void* lib = dlopen(UNWIND_TEST_MODULE, RTLD_NOW | RTLD_LOCAL);
    REQUIRE(lib != nullptr);
    auto through = reinterpret_cast<void (*)(void (*)(void*), void*)>(dlsym(lib, "UnwindTestThrough"));
    REQUIRE(through != nullptr);
    const uint64_t before = CountsOf(t_rules).rules_built;
    Both m;
    through(WalkFrom, &m);
    CheckSame(m);  // through the module's frame
    new_rules[i] = CountsOf(t_rules).rules_built - before;
    REQUIRE(dlclose(lib) == 0);
    b = m;
  }
  CHECK(new_rules[0] < uint64_t(b.fast));
  CHECK(new_rules[1] >= uint64_t(b.fast) + 2);
}

}  // namespace
}  // namespace stallscope::recorder
