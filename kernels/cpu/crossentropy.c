/* crossentropy.c — softmax + cross-entropy fused: one pass over each row of
 * logits gives its loss and, when asked, its gradient, so the (N, Vp)
 * probabilities are never stored. */
#include <math.h>

#include "kernels/cpu/cpu_impl.h"
#include "kernels/cpu/fastmath.h"

tl_status tl__cpu_crossentropy_forward_backward(void* ctx, float* losses, float* dlogits,
                                                const float* logits, const int32_t* targets,
                                                const float* dlosses, int n, int v, int vp) {
  (void)ctx;
  for (int i = 0; i < n; i++)
    if (targets[i] < 0 || targets[i] >= v)
      return TL_ERRF(TL_ERR_INVALID, "cross-entropy target %d at row %d is outside [0, %d)",
                     targets[i], i, v);
#pragma omp parallel for if ((int64_t)n * vp > TL_CPU_PAR_MIN)
  for (int i = 0; i < n; i++) {
    const float* x = logits + (int64_t)i * vp;
    float mx = -INFINITY;
    for (int j = 0; j < v; j++) mx = x[j] > mx ? x[j] : mx;
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int j = 0; j < v; j++) sum += tl__expf(x[j] - mx);
    float log_sum = logf(sum);
    losses[i] = log_sum + mx - x[targets[i]];
    if (dlosses) {
      float* dx = dlogits + (int64_t)i * vp;
      float inv = 1.0f / sum, dl = dlosses[i];
      for (int j = 0; j < v; j++) dx[j] = (tl__expf(x[j] - mx) * inv - (j == targets[i])) * dl;
      for (int j = v; j < vp; j++) dx[j] = 0.0f;
    }
  }
  return TL_OK;
}
