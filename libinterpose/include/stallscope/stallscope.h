/* stallscope's C API: explicit step markers and named ranges for jobs without
 * NVTX ranges, and the flight recorder's dump.
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

/* A named range, like nvtxRangeStartA/nvtxRangeEnd: it may end on another
 * thread and does not nest with NVTX push/pop. A name that matches the step
 * pattern makes it a step marker (stallscope's Python hooks record
 * torch.profiler's ProfilerStep#N this way). Returns the id to end it with;
 * 0 when nothing was recorded. */
uint64_t stallscope_range_start(const char* name);
void stallscope_range_end(uint64_t id);

/* Flight-recorder mode (`stallscope run --ring`, STALLSCOPE_RING): writes what
 * the ring holds, the last seconds or bytes of the trace, to a new trace file
 * now. 0 when written; -1 when not in ring mode, before the first CUDA call,
 * or when the file could not be written. */
int stallscope_dump(void);

#ifdef __cplusplus
}
#endif

#endif /* STALLSCOPE_STALLSCOPE_H_ */
