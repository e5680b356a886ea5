/* normalization.c — layernorm, forward and backward. Row
 * loops are independent and run in parallel; the layernorm parameter
 * gradients sum over rows, so they run in a second pass split by column,
 * which keeps every sum in one fixed order (deterministic for any thread
 * count). */
#include <math.h>

#include "kernels/cpu/cpu_impl.h"
#include "kernels/cpu/fastmath.h"

tl_status tl__cpu_layernorm_forward(void* ctx, float* out, float* mean, float* rstd,
                                    const float* inp, const float* weight, const float* bias, int n,
                                    int c) {
  (void)ctx;
#pragma omp parallel for if ((int64_t)n * c > TL_CPU_PAR_MIN)
  for (int i = 0; i < n; i++) {
    const float* x = inp + (int64_t)i * c;
    float m = 0.0f;
#pragma omp simd reduction(+ : m)
    for (int j = 0; j < c; j++) m += x[j];
    m /= (float)c;
    float var = 0.0f;
#pragma omp simd reduction(+ : var)
    for (int j = 0; j < c; j++) var += (x[j] - m) * (x[j] - m);
    var /= (float)c;
    float s = 1.0f / sqrtf(var + TL_LAYERNORM_EPS);
    float* o = out + (int64_t)i * c;
    for (int j = 0; j < c; j++) o[j] = (x[j] - m) * s * weight[j] + bias[j];
    mean[i] = m;
    rstd[i] = s;
  }
  return TL_OK;
}

tl_status tl__cpu_layernorm_backward(void* ctx, float* dinp, float* dweight, float* dbias,
                                     const float* dout, const float* inp, const float* weight,
                                     const float* mean, const float* rstd, int n, int c) {
  (void)ctx;
  int par = (int64_t)n * c > TL_CPU_PAR_MIN;
  if (dinp) {
#pragma omp parallel for if (par)
    for (int i = 0; i < n; i++) {
      const float* x = inp + (int64_t)i * c;
      const float* dy = dout + (int64_t)i * c;
      float m = mean[i], s = rstd[i];
      float dnorm_mean = 0.0f, dnorm_norm_mean = 0.0f;
#pragma omp simd reduction(+ : dnorm_mean, dnorm_norm_mean)
      for (int j = 0; j < c; j++) {
        float dnorm = weight[j] * dy[j];
        dnorm_mean += dnorm;
        dnorm_norm_mean += dnorm * (x[j] - m) * s;
      }
      dnorm_mean /= (float)c;
      dnorm_norm_mean /= (float)c;
      float* dx = dinp + (int64_t)i * c;
      for (int j = 0; j < c; j++) {
        float norm = (x[j] - m) * s;
        dx[j] += (weight[j] * dy[j] - dnorm_mean - norm * dnorm_norm_mean) * s;
      }
    }
  }
  if (dweight || dbias) {
    /* blocks of columns, each summed over the rows in order (one fixed
     * order per column, whatever the threads), a row's block at a time */
    enum { BLOCK = 64 };
    const int n_blocks = (c + BLOCK - 1) / BLOCK;
#pragma omp parallel for if (par)
    for (int blk = 0; blk < n_blocks; blk++) {
      const int j0 = blk * BLOCK, w = c - j0 < BLOCK ? c - j0 : BLOCK;
      float dw[BLOCK] = {0}, db[BLOCK] = {0};
      for (int i = 0; i < n; i++) {
        const float* restrict dy = dout + (int64_t)i * c + j0;
        const float* restrict x = inp + (int64_t)i * c + j0;
        const float m = mean[i], r = rstd[i];
#pragma omp simd
        for (int j = 0; j < w; j++) {
          dw[j] += (x[j] - m) * r * dy[j];
          db[j] += dy[j];
        }
      }
      for (int j = 0; j < w; j++) {
        if (dweight) dweight[j0 + j] += dw[j];
        if (dbias) dbias[j0 + j] += db[j];
      }
    }
  }
  return TL_OK;
}
