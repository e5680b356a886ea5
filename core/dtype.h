/* dtype.h — element types and the conversions between the 16-bit floats and
 * f32. Kernels compute in f32 for now; bf16/f16 exist so that files,
 * checkpoints and the planner can speak of them, and the conversions round
 * to nearest even like the hardware does. */
#ifndef TL_CORE_DTYPE_H
#define TL_CORE_DTYPE_H

#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* TL_I64: fixed-point gradients of the deterministic mode (exact sums) */
typedef enum { TL_F32 = 0, TL_BF16, TL_F16, TL_I32, TL_U16, TL_I64, TL_DTYPE_COUNT } tl_dtype;

size_t tl_dtype_size(tl_dtype t);
const char* tl_dtype_name(tl_dtype t); /* "f32", "bf16", ... */

uint16_t tl_f32_to_bf16(float x);
float tl_bf16_to_f32(uint16_t x);
uint16_t tl_f32_to_f16(float x);
float tl_f16_to_f32(uint16_t x);

#ifdef __cplusplus
}
#endif

#endif
