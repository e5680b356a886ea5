/* device.c */
#include "core/device.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int tl_cpu_cores(void) {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  long online = sysconf(_SC_NPROCESSORS_ONLN);
  return online > 0 ? (int)online : 1;
}

const char* tl_device_name(tl_device d, char* buf, size_t size) {
  if (d.type == TL_DEVICE_CPU)
    snprintf(buf, size, "cpu");
  else
    snprintf(buf, size, "cuda:%d", d.index);
  return buf;
}

tl_status tl_device_parse(const char* s, tl_device* out) {
  if (strcmp(s, "cpu") == 0) return *out = tl_cpu(), TL_OK;
  if (strcmp(s, "cuda") == 0) return *out = tl_cuda(0), TL_OK;
  if (strncmp(s, "cuda:", 5) == 0) {
    char* end = NULL;
    long i = strtol(s + 5, &end, 10);
    if (end != s + 5 && *end == '\0' && i >= 0 && i < TL_MAX_CUDA_DEVICES)
      return *out = tl_cuda((int)i), TL_OK;
  }
  return TL_ERRF(TL_ERR_INVALID, "device '%s' is not 'cpu', 'cuda' or 'cuda:N' with 0 <= N < %d", s,
                 TL_MAX_CUDA_DEVICES);
}

const char* tl_cuda_absent_why(int no_device, int driver, int runtime, char* buf, size_t size) {
  if (no_device)
    snprintf(buf, size, "no NVIDIA GPU found on this machine (the driver, CUDA %d.%d, sees none)",
             driver / 1000, driver % 1000 / 10);
  else if (driver <= 0)
    snprintf(buf, size, "no NVIDIA GPU or driver found on this machine");
  else if (driver >= runtime)
    snprintf(buf, size,
             "the NVIDIA driver (CUDA %d.%d) refused the CUDA %d.%d runtime trellis was built "
             "with as insufficient",
             driver / 1000, driver % 1000 / 10, runtime / 1000, runtime % 1000 / 10);
  else
    snprintf(buf, size,
             "the NVIDIA driver supports CUDA %d.%d, older than the CUDA %d.%d runtime trellis "
             "was built with: install a newer driver (nvidia-smi shows the version in use)",
             driver / 1000, driver % 1000 / 10, runtime / 1000, runtime % 1000 / 10);
  return buf;
}
