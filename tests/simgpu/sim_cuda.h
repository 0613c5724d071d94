// Includes the toolkit's cuda.h the way the driver itself must see it:
// __CUDA_API_VERSION_INTERNAL stops cuda.h from renaming functions with macros
// (cuMemAlloc -> cuMemAlloc_v2 ...) and declares the old versioned names too,
// so every export is defined under its exact real name. The declarations get
// default visibility; everything else in the library is hidden.
#ifndef STALLSCOPE_TESTS_SIMGPU_SIM_CUDA_H_
#define STALLSCOPE_TESTS_SIMGPU_SIM_CUDA_H_

#define __CUDA_API_VERSION_INTERNAL 1
#pragma GCC visibility push(default)
#include <cuda.h>
#pragma GCC visibility pop

#endif  // STALLSCOPE_TESTS_SIMGPU_SIM_CUDA_H_
