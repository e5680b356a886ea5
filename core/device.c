/* device.c */
#include "core/device.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
