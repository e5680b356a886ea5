/* backend.h — a device's kernel table bound to its context.
 *
 * tl_backend_create picks the implementation for a device: the CPU
 * backend, or the CUDA backend on cuda:N (which also installs CUDA memory
 * into core's counted allocator). Everything above kernels/ computes through
 * a tl_backend and never names a device-specific function. */
#ifndef TL_KERNELS_BACKEND_H
#define TL_KERNELS_BACKEND_H

#include <stddef.h>

#include "core/device.h"
#include "core/status.h"
#include "kernels/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tl_backend {
  tl_device device;
  const struct tl_kernel_ops* ops;
  void* ctx; /* passed as the first argument of every ops entry */
} tl_backend;

/* Creates the backend for `device`. TL_ERR_NO_DEVICE (with the reason:
 * no GPU, no driver, or trellis built without CUDA) when it cannot run there.
 * The caller destroys it with tl_backend_destroy. */
tl_status tl_backend_create(tl_device device, tl_backend** out);
void tl_backend_destroy(tl_backend* be); /* NULL is fine */

/* Number of usable CUDA devices; 0 without a GPU, driver or CUDA build.
 * Never fails; `why` (may be NULL) receives a short reason when it is 0. */
int tl_cuda_device_count(const char** why);

/* cuda:`index`'s name (as the driver gives it, into name[name_size]), its
 * memory and the part of it free now (every process's allocations, the
 * CUDA contexts' and libraries' included, taken off), in bytes.
 * TL_ERR_NO_DEVICE when it is not there. */
tl_status tl_cuda_device_info(int index, char* name, size_t name_size, double* memory_bytes,
                              double* free_bytes);

#ifdef __cplusplus
}
#endif

#endif
