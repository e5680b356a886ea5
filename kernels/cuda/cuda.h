/* cuda.h — the CUDA backend: CUDA C kernels and cuBLAS GEMM on one stream
 * per device context. When trellis is built without a CUDA toolkit, the
 * same functions exist and report TL_ERR_NO_DEVICE with that reason. */
#ifndef TL_KERNELS_CUDA_CUDA_H
#define TL_KERNELS_CUDA_CUDA_H

#include "kernels/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

extern const struct tl_kernel_ops tl_cuda_kernel_ops;

/* Selects device `index`, creates its stream and cuBLAS handle, and registers
 * CUDA memory with core's allocator. TL_ERR_NO_DEVICE when unavailable. */
tl_status tl_cuda_backend_init(int index, void** ctx);
void tl_cuda_backend_free(void* ctx);

int tl__cuda_device_count(const char** why);
tl_status tl__cuda_device_info(int index, char* name, size_t name_size, double* memory_bytes,
                               double* free_bytes);

/* Loads cuBLAS now, as the first backend does (trellis does not link it):
 * TL_OK, or TL_ERR_CUBLAS naming the library and the loader's reason;
 * TL_ERR_NO_DEVICE in a build without CUDA. Needs no GPU. */
tl_status tl_cuda_blas_check(void);

#ifdef __cplusplus
}
#endif

#endif
