/* crossentropy.c — softmax + cross-entropy fused: one pass over each row of
 * logits gives its loss and, when asked, its gradient, so the (N, Vp)
 * probabilities are never stored. */
#include <float.h>
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

/* ---- vocabulary-parallel: this rank's columns [v0, v0 + cols) ---------- */

/* Real columns of this shard: [0, real). */
static int shard_real(int cols, int v0, int v) {
  int real = v - v0;
  return real < 0 ? 0 : real > cols ? cols : real;
}

tl_status tl__cpu_xent_shard_forward(void* ctx, float* losses, float* stats, const float* logits,
                                     const int32_t* targets, int n, int cols, int v0, int v,
                                     int phase) {
  (void)ctx;
  int real = shard_real(cols, v0, v);
  float *mx = stats, *sum = stats + n, *tgt = stats + 2 * (int64_t)n;
  if (phase == 0)
    for (int i = 0; i < n; i++)
      if (targets[i] < 0 || targets[i] >= v)
        return TL_ERRF(TL_ERR_INVALID, "cross-entropy target %d at row %d is outside [0, %d)",
                       targets[i], i, v);
#pragma omp parallel for if ((int64_t)n * cols > TL_CPU_PAR_MIN)
  for (int i = 0; i < n; i++) {
    const float* x = logits + (int64_t)i * cols;
    if (phase == 0) {
      float m = -FLT_MAX;
      for (int j = 0; j < real; j++) m = x[j] > m ? x[j] : m;
      mx[i] = m;
    } else if (phase == 1) {
      float s = 0.0f, m = mx[i];
#pragma omp simd reduction(+ : s)
      for (int j = 0; j < real; j++) s += tl__expf(x[j] - m);
      sum[i] = s;
      int local = targets[i] - v0;
      tgt[i] = local >= 0 && local < real ? x[local] : 0.0f;
    } else {
      losses[i] = logf(sum[i]) + mx[i] - tgt[i];
    }
  }
  return TL_OK;
}

tl_status tl__cpu_xent_shard_backward(void* ctx, float* dlogits, const float* logits,
                                      const int32_t* targets, const float* stats,
                                      const float* dlosses, int n, int cols, int v0, int v) {
  (void)ctx;
  int real = shard_real(cols, v0, v);
#pragma omp parallel for if ((int64_t)n * cols > TL_CPU_PAR_MIN)
  for (int i = 0; i < n; i++) {
    const float* x = logits + (int64_t)i * cols;
    float* dx = dlogits + (int64_t)i * cols;
    float m = stats[i], inv = 1.0f / stats[n + i], dl = dlosses[i];
    int local = targets[i] - v0;
    for (int j = 0; j < real; j++) dx[j] = (tl__expf(x[j] - m) * inv - (j == local)) * dl;
    for (int j = real; j < cols; j++) dx[j] = 0.0f;
  }
  return TL_OK;
}
