/* cuda_absent.c — the CUDA backend's entry points in a build without a CUDA
 * toolkit: every one says so, nothing else changes. */
#include "kernels/cuda/cuda.h"

static const char k_why[] =
    "trellis was built without CUDA (no nvcc found when Bazel configured @cuda)";

int tl__cuda_device_count(const char** why) {
  if (why) *why = k_why;
  return 0;
}

tl_status tl__cuda_device_info(int index, char* name, size_t name_size, double* memory_bytes,
                               double* free_bytes) {
  if (name_size) name[0] = 0;
  *memory_bytes = *free_bytes = 0;
  return TL_ERRF(TL_ERR_NO_DEVICE, "cuda:%d is not available: %s", index, k_why);
}

tl_status tl_cuda_backend_init(int index, void** ctx) {
  *ctx = NULL;
  return TL_ERRF(TL_ERR_NO_DEVICE, "cuda:%d is not available: %s", index, k_why);
}

tl_status tl_cuda_blas_check(void) {
  return TL_ERRF(TL_ERR_NO_DEVICE, "cuBLAS is not used: %s", k_why);
}

void tl_cuda_backend_free(void* ctx) {
  (void)ctx;
}

const struct tl_kernel_ops tl_cuda_kernel_ops = {.name = "cuda (not built)"};
