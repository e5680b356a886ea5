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

#ifdef __cplusplus
}
#endif

#endif
