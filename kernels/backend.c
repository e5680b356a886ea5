/* backend.c — choose the kernel table for a device. */
#include "kernels/backend.h"

#include <stdlib.h>

#include "kernels/cpu/cpu.h"
#include "kernels/cuda/cuda.h"

tl_status tl_backend_create(tl_device device, tl_backend** out) {
  *out = NULL;
  tl_backend* be = calloc(1, sizeof *be);
  if (!be) return TL_ERRF(TL_ERR_NOMEM, "out of host memory for a backend");
  be->device = device;
  tl_status st;
  if (device.type == TL_DEVICE_CPU) {
    be->ops = &tl_cpu_kernel_ops;
    st = tl_cpu_backend_init(&be->ctx);
  } else {
    be->ops = &tl_cuda_kernel_ops;
    st = tl_cuda_backend_init(device.index, &be->ctx);
  }
  if (st != TL_OK) {
    free(be);
    return st;
  }
  *out = be;
  return TL_OK;
}

void tl_backend_destroy(tl_backend* be) {
  if (!be) return;
  if (be->device.type == TL_DEVICE_CPU)
    tl_cpu_backend_free(be->ctx);
  else
    tl_cuda_backend_free(be->ctx);
  free(be);
}

int tl_cuda_device_count(const char** why) {
  return tl__cuda_device_count(why);
}

tl_status tl_cuda_device_info(int index, char* name, size_t name_size, double* memory_bytes,
                              double* free_bytes) {
  return tl__cuda_device_info(index, name, name_size, memory_bytes, free_bytes);
}
