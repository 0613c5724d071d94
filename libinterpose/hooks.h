// The hook table as data (generated from hooks.def in hooks.cc), for the
// recorder's API table and for symbol resolution.
#pragma once

#include <cstddef>
#include <cstdint>

namespace stallscope {

struct HookInfo {
  const char* name;  // exported, versioned name (cuMemcpyDtoH_v2_ptds)
  const char* base;  // the name cuGetProcAddress is asked for (cuMemcpyDtoH)
  int version;       // CUDA version that introduced this ABI
  bool per_thread;   // the _ptsz/_ptds form
  uint8_t category;  // trace::ApiCategory
  uint16_t flags;    // trace::ApiFlags
};

const HookInfo* Hooks(size_t* count);

}  // namespace stallscope
