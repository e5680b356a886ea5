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
#pragma omp parallel for if (par)
    for (int j = 0; j < c; j++) {
      float dw = 0.0f, db = 0.0f;
      for (int i = 0; i < n; i++) {
        float dy = dout[(int64_t)i * c + j];
        dw += (inp[(int64_t)i * c + j] - mean[i]) * rstd[i] * dy;
        db += dy;
      }
      if (dweight) dweight[j] += dw;
      if (dbias) dbias[j] += db;
    }
  }
  return TL_OK;
}
