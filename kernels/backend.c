/* backend.c — choose the kernel table for a device. */
#include "kernels/backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "core/env.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cuda/cuda.h"
#include "kernels/emul/emul.h"

/* TRELLIS_EMULATE=cuda: a CUDA device is an emulated GPU (kernels/emul). */
static bool emulated(tl_device d) {
  return d.type == TL_DEVICE_CUDA && tl_env()->emulate_cuda;
}

tl_status tl_backend_create(tl_device device, tl_backend** out) {
  *out = NULL;
  tl_backend* be = calloc(1, sizeof *be);
  if (!be) return TL_ERRF(TL_ERR_NOMEM, "out of host memory for a backend");
  be->device = device;
  tl_status st;
  if (device.type == TL_DEVICE_CPU) {
    be->ops = &tl_cpu_kernel_ops;
    st = tl_cpu_backend_init(&be->ctx);
  } else if (emulated(device)) {
    be->ops = &tl_emul_kernel_ops;
    st = tl_emul_backend_init(device.index, &be->ctx);
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
  else if (emulated(be->device))
    tl_emul_backend_free(be->ctx);
  else
    tl_cuda_backend_free(be->ctx);
  free(be);
}

int tl_cuda_device_count(const char** why) {
  if (tl_env()->emulate_cuda) return TL_EMUL_DEVICES;
  return tl__cuda_device_count(why);
}

tl_status tl_cuda_device_info(int index, char* name, size_t name_size, double* memory_bytes,
                              double* free_bytes) {
  if (tl_env()->emulate_cuda) {
    if (index < 0 || index >= TL_EMUL_DEVICES)
      return TL_ERRF(TL_ERR_NO_DEVICE, "cuda:%d is not one of the %d emulated GPUs", index,
                     TL_EMUL_DEVICES);
    snprintf(name, name_size, "emulated GPU (TRELLIS_EMULATE=cuda, host memory)");
    *memory_bytes = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
    *free_bytes = (double)sysconf(_SC_AVPHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
    return TL_OK;
  }
  return tl__cuda_device_info(index, name, name_size, memory_bytes, free_bytes);
}
