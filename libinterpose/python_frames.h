// Python call sites at blocking calls: the calling thread's CPython frames,
// read straight from the interpreter's structures (CPython 3.9 to 3.13), so
// that it works whether or not this thread holds the GIL. See
// docs: cuda-interposition-notes.md §7.
//
// Never takes the GIL, never calls a CPython API that allocates or needs the
// GIL, never links libpython: symbols are resolved at run time with the real
// dlsym(RTLD_DEFAULT, ...), so this is inert in a process that is not Python.
#pragma once

#include <cstdint>

namespace stallscope::python {

// This thread's Python stack as a recorder stack id (StackKind::kPython:
// pairs of (string id of "file\tfunction", line), innermost first, at most
// kMaxFrames). 0 when the process is not a supported CPython, the thread has
// no Python frames, the interpreter is not initialized or is finalizing, or
// STALLSCOPE_PYTHON_STACKS=0. Preserves errno.
uint32_t CaptureStack();

inline constexpr int kMaxFrames = 64;

// Whether `pc` lies in the Python interpreter (known once a Python stack has
// been captured): native unwinding stops there, since the Python frames say
// more than the interpreter's own C frames, and a deep unwind costs µs.
bool InInterpreter(uint64_t pc);

}  // namespace stallscope::python
