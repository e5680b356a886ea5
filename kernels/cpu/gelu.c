/* gelu.c — GELU in GPT-2's tanh form. The derivative uses 1 - tanh^2 rather
 * than 1/cosh^2, which overflows for large |x|; tanh is the vectorizable one
 * of fastmath.h. */
#include <math.h>

#include "kernels/cpu/cpu_impl.h"
#include "kernels/cpu/fastmath.h"

#define GELU_K 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_C 0.044715f

tl_status tl__cpu_gelu_forward(void* ctx, float* out, const float* inp, int64_t n) {
  (void)ctx;
#pragma omp parallel for simd if (n > TL_CPU_PAR_MIN)
  for (int64_t i = 0; i < n; i++) {
    float x = inp[i];
    out[i] = 0.5f * x * (1.0f + tl__tanhf(GELU_K * (x + GELU_C * x * x * x)));
  }
  return TL_OK;
}

tl_status tl__cpu_gelu_backward(void* ctx, float* dinp, const float* inp, const float* dout,
                                int64_t n) {
  (void)ctx;
#pragma omp parallel for simd if (n > TL_CPU_PAR_MIN)
  for (int64_t i = 0; i < n; i++) {
    float x = inp[i];
    float th = tl__tanhf(GELU_K * (x + GELU_C * x * x * x));
    float dth = (1.0f - th * th) * GELU_K * (1.0f + 3.0f * GELU_C * x * x);
    dinp[i] += (0.5f * (1.0f + th) + 0.5f * x * dth) * dout[i];
  }
  return TL_OK;
}
