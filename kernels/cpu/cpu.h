/* cpu.h — the CPU backend: C kernels threaded with OpenMP, GEMM through
 * OpenBLAS. Thread count comes from TRELLIS_NUM_THREADS (see core/env.h). */
#ifndef TL_KERNELS_CPU_CPU_H
#define TL_KERNELS_CPU_CPU_H

#include "kernels/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

extern const struct tl_kernel_ops tl_cpu_kernel_ops;

/* Creates the backend's context (thread settings applied process-wide). */
tl_status tl_cpu_backend_init(void** ctx);
void tl_cpu_backend_free(void* ctx);

/* Threads the CPU kernels and OpenBLAS use in this process. */
int tl_cpu_num_threads(void);

#ifdef __cplusplus
}
#endif

#endif
