/* group_nccl_absent.c — the NCCL backend's entry points in a build without
 * a CUDA toolkit: creation says so; nothing else changes. */
#include "core/group_nccl.h"

bool tl_group_nccl_built(void) {
  return false;
}

tl_status tl_group_nccl_check(void) {
  return TL_ERRF(TL_ERR_NO_DEVICE, "trellis was built without CUDA, so without NCCL");
}

tl_status tl_group_nccl_create(tl_group* mpi_group, int device, const char* name, tl_group** out) {
  (void)mpi_group;
  *out = NULL;
  return TL_ERRF(TL_ERR_NO_DEVICE,
                 "NCCL group '%s' on cuda:%d: trellis was built without CUDA (no nvcc found when "
                 "Bazel configured @cuda)",
                 name ? name : "group", device);
}
