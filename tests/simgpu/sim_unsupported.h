// Entry points that exist so that a framework's libraries load, and answer a
// library's "not supported" status when called (sim_*_unsupported.cc).
//
// Their parameters do not matter: a C function that ignores its arguments and
// returns an int may be called with any argument list on x86-64 and AArch64,
// so each one is defined without parameters (the files that use this include
// no header of the library, whose prototypes would conflict).
#ifndef STALLSCOPE_TESTS_SIMGPU_SIM_UNSUPPORTED_H_
#define STALLSCOPE_TESTS_SIMGPU_SIM_UNSUPPORTED_H_

#define SIMGPU_RETURNS(name, status) \
  extern "C" __attribute__((visibility("default"))) int name(void) { return (status); }

#endif  // STALLSCOPE_TESTS_SIMGPU_SIM_UNSUPPORTED_H_
