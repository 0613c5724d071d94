// Every row of hooks.def against the toolkit, at compile time: each
// wrapper's type must be cudaTypedefs.h's PFN_<base>_v<version> (and
// PFN_<base>_v<pt_version>_ptds|_ptsz for its per-thread twin), so a wrong
// version or parameter list fails the build. Included by hooks.cc;
// tests/interpose/hooks_check_test.py compiles it alone, on a copy of the
// table with one version changed (STALLSCOPE_HOOKS_DEF), and expects the
// build to fail.
#ifndef __CUDA_API_VERSION_INTERNAL
#define __CUDA_API_VERSION_INTERNAL 1  // the 32-bit-pointer forms of CUDA 2.x too
#endif
#include <cuda.h>
#include <cudaTypedefs.h>

#include <type_traits>

#ifndef STALLSCOPE_HOOKS_DEF
#define STALLSCOPE_HOOKS_DEF "hooks.def"
#endif

#define HOOK(name, base, version, per_thread, category, flags, params, ...)               \
  extern "C" CUresult name params;                                                       \
  static_assert(std::is_same_v<decltype(&::name), PFN_##base##_v##version>,              \
                #name ": hooks.def's version or parameters differ from cudaTypedefs.h's " \
                "PFN_" #base "_v" #version);
#define HOOK_PT(name, base, version, pt, pt_version, category, flags, params, ...)          \
  HOOK(name, base, version, 0, category, flags, params)                                    \
  extern "C" CUresult name##_##pt params;                                                  \
  static_assert(std::is_same_v<decltype(&::name##_##pt), PFN_##base##_v##pt_version##_##pt>, \
                #name "_" #pt ": hooks.def's version or parameters differ from "           \
                "cudaTypedefs.h's PFN_" #base "_v" #pt_version "_" #pt);
#include STALLSCOPE_HOOKS_DEF
#undef HOOK_PT
#undef HOOK
