// Symbol resolution under the preload library, on the simulated driver: the
// three ways a program reaches the driver (PLT, dlsym on a handle,
// cuGetProcAddress) all end in stallscope's wrapper of the exact variant the
// driver would have returned, and everything else passes through untouched.
// Runs with LD_PRELOAD=libstallscope.so (set by CTest).
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>

// As in hooks.cc: without it cuda.h's name macros (cuMemcpyHtoD ->
// cuMemcpyHtoD_v2) would rename hooks.def's rows as they are read.
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>
#include <dlfcn.h>
#include <string.h>

#include <string>

namespace {

std::string ModuleOf(void* p) {
  Dl_info info{};
  if (!dladdr(p, &info) || !info.dli_fname) return "";
  return info.dli_fname;
}

std::string SymbolOf(void* p) {
  Dl_info info{};
  if (!dladdr(p, &info) || !info.dli_sname) return "";
  return info.dli_sname;
}

bool FromStallscope(void* p) { return ModuleOf(p).find("libstallscope.so") != std::string::npos; }

using GetProc = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);

GetProc RuntimeStyleResolver() {
  // What NVIDIA's runtime does: dlopen, dlsym cuGetProcAddress_v2, then ask it
  // for "cuGetProcAddress" itself and use that pointer from then on.
  void* h = dlopen("libcuda.so.1", RTLD_NOW);
  REQUIRE(h != nullptr);
  auto first = reinterpret_cast<GetProc>(dlsym(h, "cuGetProcAddress_v2"));
  REQUIRE(first != nullptr);
  void* self = nullptr;
  CUdriverProcAddressQueryResult st;
  REQUIRE(first("cuGetProcAddress", &self, 12000, 0, &st) == CUDA_SUCCESS);
  return reinterpret_cast<GetProc>(self);
}

}  // namespace

// A dlsym of a hooked name on a libcuda handle yields stallscope's wrapper.
TEST_CASE("dlsym on a libcuda handle returns the wrapper") {
  void* h = dlopen("libcuda.so.1", RTLD_NOW);
  REQUIRE(h != nullptr);
  void* p = dlsym(h, "cuLaunchKernel");
  REQUIRE(p != nullptr);
  CHECK(FromStallscope(p));
  CHECK(SymbolOf(p) == "cuLaunchKernel");
  // Unhooked names come from the driver itself.
  void* alloc = dlsym(h, "cuMemAlloc_v2");
  REQUIRE(alloc != nullptr);
  CHECK_FALSE(FromStallscope(alloc));
}

// The runtime's self-lookup returns stallscope's resolver, so every later
// lookup passes through it.
TEST_CASE("cuGetProcAddress self-lookup is answered with the wrapper") {
  GetProc resolve = RuntimeStyleResolver();
  CHECK(FromStallscope(reinterpret_cast<void*>(resolve)));
}

// The wrapper handed out is the variant the driver chose for (version, flags).
TEST_CASE("cuGetProcAddress picks the variant by the driver's answer") {
  GetProc resolve = RuntimeStyleResolver();
  CUdriverProcAddressQueryResult st;
  void* p = nullptr;
  REQUIRE(resolve("cuMemcpyDtoH", &p, 3020, 0, &st) == CUDA_SUCCESS);
  CHECK(SymbolOf(p) == "cuMemcpyDtoH_v2");
  CHECK(FromStallscope(p));
  REQUIRE(resolve("cuLaunchKernel", &p, 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st) == CUDA_SUCCESS);
  CHECK(SymbolOf(p) == "cuLaunchKernel_ptsz");
  REQUIRE(resolve("cuStreamSynchronize", &p, 12000, 0, &st) == CUDA_SUCCESS);
  CHECK(SymbolOf(p) == "cuStreamSynchronize");
  CHECK(FromStallscope(p));
}

// Every row of hooks.def, from the table itself: asked for its base name at
// its version, with the per-thread flag for a _ptds/_ptsz twin, the resolver
// hands out stallscope's wrapper of exactly that entry point, and dlsym of
// the exported name on a libcuda handle gives the same wrapper (the simulated
// driver exports every hooked entry point).
struct Row {
  const char* name;
  const char* base;
  int version;
  bool per_thread;
};
constexpr Row kRows[] = {
#define HOOK(name, base, version, per_thread, ...) {#name, #base, version, per_thread != 0},
#include "hooks.def"
#undef HOOK
};

TEST_CASE("every hooks.def row resolves to its own wrapper") {
  GetProc resolve = RuntimeStyleResolver();
  void* h = dlopen("libcuda.so.1", RTLD_NOW);
  REQUIRE(h != nullptr);
  CHECK(sizeof kRows / sizeof kRows[0] >= 138);
  for (const Row& r : kRows) {
    INFO(r.name << " (" << r.base << " at " << r.version << (r.per_thread ? ", per-thread" : "")
                << ")");
    CUdriverProcAddressQueryResult st;
    void* p = nullptr;
    const cuuint64_t flags =
        r.per_thread ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM : CU_GET_PROC_ADDRESS_LEGACY_STREAM;
    REQUIRE(resolve(r.base, &p, r.version, flags, &st) == CUDA_SUCCESS);
    CHECK(FromStallscope(p));
    CHECK(SymbolOf(p) == r.name);
    void* exported = dlsym(h, r.name);
    CHECK(exported == p);
  }
}

// Names stallscope does not hook, and unknown names, pass through untouched.
TEST_CASE("unhooked and unknown names pass through") {
  GetProc resolve = RuntimeStyleResolver();
  CUdriverProcAddressQueryResult st;
  void* p = nullptr;
  REQUIRE(resolve("cuDeviceGet", &p, 2000, 0, &st) == CUDA_SUCCESS);
  CHECK_FALSE(FromStallscope(p));
  void* h = dlopen("libcuda.so.1", RTLD_NOW);
  CHECK(p == dlsym(h, "cuDeviceGet"));
  p = reinterpret_cast<void*>(0x1);
  CHECK(resolve("cuNoSuchFunction", &p, 12000, 0, &st) != CUDA_SUCCESS);
  CHECK(st == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
}

// dlsym of non-CUDA names behaves exactly as glibc's, RTLD_NEXT included.
TEST_CASE("dlsym of other names is glibc's") {
  CHECK(dlsym(RTLD_DEFAULT, "strlen") == reinterpret_cast<void*>(&strlen));
  void* next_malloc = dlsym(RTLD_NEXT, "malloc");
  REQUIRE(next_malloc != nullptr);
  // The same "next" glibc's own dlsym finds from here: libc's malloc, or a
  // sanitizer runtime's in a sanitized build.
  using Dlsym = void* (*)(void*, const char*);
  void* glibc = dlvsym(RTLD_DEFAULT, "dlsym", "GLIBC_2.34");
  if (glibc == nullptr) glibc = dlvsym(RTLD_DEFAULT, "dlsym", "GLIBC_2.2.5");
  REQUIRE(glibc != nullptr);
  CHECK(next_malloc == reinterpret_cast<Dlsym>(glibc)(RTLD_NEXT, "malloc"));
  const std::string module = ModuleOf(next_malloc);
  CHECK((module.find("libc.so") != std::string::npos || module.find("san.so") != std::string::npos));
  CHECK(dlsym(RTLD_DEFAULT, "no_such_symbol_anywhere") == nullptr);
  CHECK(dlerror() != nullptr);
}
