/* stallscope's C API: explicit step markers for jobs without NVTX ranges.
 * Resolve these with dlsym(RTLD_DEFAULT, ...) so that a job runs unchanged
 * when libstallscope.so is not preloaded. */
#ifndef STALLSCOPE_STALLSCOPE_H_
#define STALLSCOPE_STALLSCOPE_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Marks the start of training step `index` on the calling thread. */
void stallscope_step_begin(uint64_t index);
/* Marks the end of the current step on the calling thread. */
void stallscope_step_end(void);

#ifdef __cplusplus
}
#endif

#endif /* STALLSCOPE_STALLSCOPE_H_ */
