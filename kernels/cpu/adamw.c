/* adamw.c — AdamW (Loshchilov & Hutter): decoupled weight decay, bias
 * correction, the gradients scaled (clipped) as they are read. One pass
 * over parameters, moments and gradients. */
#include <math.h>

#include "kernels/cpu/cpu_impl.h"

tl_status tl__cpu_adamw(void* ctx, float* params, const float* grads, float grad_scale, float* m,
                        float* v, int64_t n, float lr, float beta1, float beta2, float eps,
                        float weight_decay, int step) {
  (void)ctx;
  if (step < 1) return TL_ERRF(TL_ERR_INVALID, "AdamW step %d: steps count from 1", step);
  const float c1 = 1.0f - powf(beta1, (float)step);
  const float c2 = 1.0f - powf(beta2, (float)step);
#pragma omp parallel for if (n > TL_CPU_PAR_MIN)
  for (int64_t i = 0; i < n; i++) {
    float g = grads[i] * grad_scale;
    float mi = beta1 * m[i] + (1.0f - beta1) * g;
    float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    params[i] -= lr * ((mi / c1) / (sqrtf(vi / c2) + eps) + weight_decay * params[i]);
  }
  return TL_OK;
}
