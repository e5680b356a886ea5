/* device.h — where memory lives and kernels run: the CPU or CUDA device N. */
#ifndef TL_CORE_DEVICE_H
#define TL_CORE_DEVICE_H

#include <stddef.h>

#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { TL_DEVICE_CPU = 0, TL_DEVICE_CUDA = 1 } tl_device_type;

#define TL_MAX_CUDA_DEVICES 16

typedef struct tl_device {
  tl_device_type type;
  int index; /* 0 for the CPU */
} tl_device;

static inline tl_device tl_cpu(void) {
  return (tl_device){TL_DEVICE_CPU, 0};
}
static inline tl_device tl_cuda(int index) {
  return (tl_device){TL_DEVICE_CUDA, index};
}
/* "cpu" or "cuda:N" into buf; returns buf. */
const char* tl_device_name(tl_device d, char* buf, size_t size);
/* Parses "cpu", "cuda" (= cuda:0) or "cuda:N". */
tl_status tl_device_parse(const char* s, tl_device* out);

/* The CPU cores this process may run on: its affinity mask (what taskset,
 * a cgroup's cpuset or a Slurm step's --cpus-per-task leave it), else the
 * online count; at least 1. The automatic thread count and the planner's
 * shared cores are taken from it. */
int tl_cpu_cores(void);

/* Why the CUDA runtime found no device, in words a user can act on, into
 * buf (returned). no_device: the runtime said there is no GPU
 * (cudaErrorNoDevice); else it said the driver is missing or too old
 * (cudaErrorInsufficientDriver). driver: cudaDriverGetVersion's figure
 * (0: no driver loaded), runtime: cudaRuntimeGetVersion's (1000 major + 10
 * minor). A driver older than the runtime trellis was built with is named
 * as such, with both versions: "no GPU" would send the user looking for
 * hardware that is there. */
const char* tl_cuda_absent_why(int no_device, int driver, int runtime, char* buf, size_t size);

#ifdef __cplusplus
}
#endif

#endif
