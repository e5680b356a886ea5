/* dynlib.h — the GPU libraries trellis loads when it first uses them
 * instead of linking them (cuBLAS in kernels/cuda/blas.cu, NCCL in
 * core/group_nccl.c): so that `trellis` starts, plans, checks and trains on
 * CPUs where none is installed, and no process pays for mapping them before
 * it needs them. */
#ifndef TL_CORE_DYNLIB_H
#define TL_CORE_DYNLIB_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Opens `soname` from `dir` (the toolkit trellis was built against; "" for
 * none) first, else from the loader's path (LD_LIBRARY_PATH: a bundle
 * carried to another machine, a PyTorch wheel's copy). NULL on failure,
 * with "cannot load SONAME (from DIR or the loader's path): why" (without
 * "DIR or" when there is none) in err[err_size]. */
void* tl_dynlib_open(const char* soname, const char* dir, char* err, size_t err_size);

#ifdef __cplusplus
}
#endif

#endif
