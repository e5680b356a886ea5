/* attention.c — causal multi-head self-attention with the T x T
 * probabilities kept for backward (llm.c's CPU algorithm). Inner sums are
 * `omp simd` reductions: vectorized in a fixed order for a given build. Work splits by
 * (batch, head): every write of one (b, h) pair lands in its own slices of
 * out, att and dqkv, so threads never share an element. */
#include <math.h>
#include <stdlib.h>

#include "kernels/cpu/cpu_impl.h"
#include "kernels/cpu/fastmath.h"

tl_status tl__cpu_attention_forward(void* ctx, float* out, float* att, const float* qkv, int b,
                                    int t, int c, int nh) {
  (void)ctx;
  const int hs = c / nh;
  const float scale = 1.0f / sqrtf((float)hs);
  const int64_t c3 = 3 * (int64_t)c;
#pragma omp parallel for collapse(2) if ((int64_t)b * nh * t * t * hs > TL_CPU_PAR_MIN)
  for (int bi = 0; bi < b; bi++) {
    for (int h = 0; h < nh; h++) {
      for (int ti = 0; ti < t; ti++) {
        const float* q = qkv + ((int64_t)bi * t + ti) * c3 + h * hs;
        float* a = att + (((int64_t)bi * nh + h) * t + ti) * t;
        float mx = -INFINITY;
        for (int t2 = 0; t2 <= ti; t2++) {
          const float* k = qkv + ((int64_t)bi * t + t2) * c3 + c + h * hs;
          float s = 0.0f;
#pragma omp simd reduction(+ : s)
          for (int i = 0; i < hs; i++) s += q[i] * k[i];
          a[t2] = s * scale;
          mx = fmaxf(mx, a[t2]);
        }
        float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
        for (int t2 = 0; t2 <= ti; t2++) sum += (a[t2] = tl__expf(a[t2] - mx));
        float inv = 1.0f / sum;
        for (int t2 = 0; t2 < t; t2++) a[t2] = t2 <= ti ? a[t2] * inv : 0.0f;
        float* o = out + ((int64_t)bi * t + ti) * c + h * hs;
        for (int i = 0; i < hs; i++) o[i] = 0.0f;
        for (int t2 = 0; t2 <= ti; t2++) {
          const float* v = qkv + ((int64_t)bi * t + t2) * c3 + 2 * c + h * hs;
          for (int i = 0; i < hs; i++) o[i] += a[t2] * v[i];
        }
      }
    }
  }
  return TL_OK;
}

tl_status tl__cpu_attention_backward(void* ctx, float* dqkv, const float* dout, const float* qkv,
                                     const float* att, int b, int t, int c, int nh) {
  (void)ctx;
  const int hs = c / nh;
  const float scale = 1.0f / sqrtf((float)hs);
  const int64_t c3 = 3 * (int64_t)c;
  float* scratch = malloc(sizeof(float) * (size_t)t * 2 * (size_t)b * (size_t)nh);
  if (!scratch) return TL_ERRF(TL_ERR_NOMEM, "attention backward: no memory for %d-long rows", t);
#pragma omp parallel for collapse(2) if ((int64_t)b * nh * t * t * hs > TL_CPU_PAR_MIN)
  for (int bi = 0; bi < b; bi++) {
    for (int h = 0; h < nh; h++) {
      float* datt = scratch + ((int64_t)bi * nh + h) * 2 * t; /* d probabilities */
      float* dpre = datt + t;                                 /* d scores */
      for (int ti = 0; ti < t; ti++) {
        const float* a = att + (((int64_t)bi * nh + h) * t + ti) * t;
        const float* dy = dout + ((int64_t)bi * t + ti) * c + h * hs;
        const float* q = qkv + ((int64_t)bi * t + ti) * c3 + h * hs;
        float* dq = dqkv + ((int64_t)bi * t + ti) * c3 + h * hs;
        /* out = att . v */
        for (int t2 = 0; t2 <= ti; t2++) {
          const float* v = qkv + ((int64_t)bi * t + t2) * c3 + 2 * c + h * hs;
          float* dv = dqkv + ((int64_t)bi * t + t2) * c3 + 2 * c + h * hs;
          float s = 0.0f;
#pragma omp simd reduction(+ : s)
          for (int i = 0; i < hs; i++) {
            s += v[i] * dy[i];
            dv[i] += a[t2] * dy[i];
          }
          datt[t2] = s;
        }
        /* softmax: dpre = a * (datt - sum(a * datt)) */
        float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
        for (int t2 = 0; t2 <= ti; t2++) dot += a[t2] * datt[t2];
        for (int t2 = 0; t2 <= ti; t2++) dpre[t2] = a[t2] * (datt[t2] - dot) * scale;
        /* scores = q . k */
        for (int t2 = 0; t2 <= ti; t2++) {
          const float* k = qkv + ((int64_t)bi * t + t2) * c3 + c + h * hs;
          float* dk = dqkv + ((int64_t)bi * t + t2) * c3 + c + h * hs;
          for (int i = 0; i < hs; i++) {
            dq[i] += dpre[t2] * k[i];
            dk[i] += dpre[t2] * q[i];
          }
        }
      }
    }
  }
  free(scratch);
  return TL_OK;
}
