/* attention.c — causal multi-head self-attention with the T x T
 * probabilities kept for backward (llm.c's algorithm, reorganised for SIMD).
 *
 * Work splits by (batch, head): every write of one (b, h) pair lands in its
 * own slices of out, att and dqkv, so threads never share an element. Each
 * pair first copies its keys and values transposed, (hs, T), so that the
 * scores of a query against all keys are a sum of hs rows of length T —
 * vector work along T with no horizontal sums — and likewise for the
 * gradients. Results do not depend on the thread count. */
#include <math.h>
#include <stdlib.h>

#include "kernels/cpu/cpu_impl.h"
#include "kernels/cpu/fastmath.h"

/* keys or values of (b, h) as (hs, T): dst[i * t + t2] = qkv[b, t2, part, h, i] */
static void gather_transposed(float* restrict dst, const float* qkv, int bi, int h, int part, int t,
                              int c, int hs) {
  const int64_t c3 = 3 * (int64_t)c;
  for (int t2 = 0; t2 < t; t2++) {
    const float* src = qkv + ((int64_t)bi * t + t2) * c3 + (int64_t)part * c + (int64_t)h * hs;
    for (int i = 0; i < hs; i++) dst[(int64_t)i * t + t2] = src[i];
  }
}

tl_status tl__cpu_attention_forward(void* ctx, float* out, float* att, const float* qkv, int b,
                                    int t, int c, int nh) {
  (void)ctx;
  const int hs = c / nh;
  const float scale = 1.0f / sqrtf((float)hs);
  const int64_t c3 = 3 * (int64_t)c;
  float* scratch = malloc(sizeof(float) * (size_t)hs * (size_t)t * (size_t)b * (size_t)nh);
  if (!scratch) return TL_ERRF(TL_ERR_NOMEM, "attention: no memory for %d x %d keys", hs, t);
#pragma omp parallel for collapse(2) if ((int64_t)b * nh * t * t * hs > TL_CPU_PAR_MIN)
  for (int bi = 0; bi < b; bi++) {
    for (int h = 0; h < nh; h++) {
      float* restrict kt = scratch + ((int64_t)bi * nh + h) * hs * t;
      gather_transposed(kt, qkv, bi, h, 1, t, c, hs);
      for (int ti = 0; ti < t; ti++) {
        const float* q = qkv + ((int64_t)bi * t + ti) * c3 + h * hs;
        float* restrict a = att + (((int64_t)bi * nh + h) * t + ti) * t;
        int n = ti + 1;
        /* scores against keys 0..ti */
        for (int t2 = 0; t2 < n; t2++) a[t2] = 0.0f;
        for (int i = 0; i < hs; i++) {
          const float qi = q[i] * scale;
          const float* restrict krow = kt + (int64_t)i * t;
#pragma omp simd
          for (int t2 = 0; t2 < n; t2++) a[t2] += qi * krow[t2];
        }
        float mx = -INFINITY;
        for (int t2 = 0; t2 < n; t2++) mx = a[t2] > mx ? a[t2] : mx;
        float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
        for (int t2 = 0; t2 < n; t2++) sum += (a[t2] = tl__expf(a[t2] - mx));
        float inv = 1.0f / sum;
#pragma omp simd
        for (int t2 = 0; t2 < n; t2++) a[t2] *= inv;
        for (int t2 = n; t2 < t; t2++) a[t2] = 0.0f;
        /* out = att . v */
        float* restrict o = out + ((int64_t)bi * t + ti) * c + h * hs;
        for (int i = 0; i < hs; i++) o[i] = 0.0f;
        for (int t2 = 0; t2 < n; t2++) {
          const float* restrict v = qkv + ((int64_t)bi * t + t2) * c3 + 2 * c + h * hs;
          const float w = a[t2];
#pragma omp simd
          for (int i = 0; i < hs; i++) o[i] += w * v[i];
        }
      }
    }
  }
  free(scratch);
  return TL_OK;
}

tl_status tl__cpu_attention_backward(void* ctx, float* dqkv, const float* dout, const float* qkv,
                                     const float* att, int b, int t, int c, int nh) {
  (void)ctx;
  const int hs = c / nh;
  const float scale = 1.0f / sqrtf((float)hs);
  const int64_t c3 = 3 * (int64_t)c;
  /* per (b, h): values transposed (hs, T), d probabilities and d scores (T each) */
  const int64_t per = (int64_t)hs * t + 2 * (int64_t)t;
  float* scratch = malloc(sizeof(float) * (size_t)per * (size_t)b * (size_t)nh);
  if (!scratch) return TL_ERRF(TL_ERR_NOMEM, "attention backward: no memory for %d-long rows", t);
#pragma omp parallel for collapse(2) if ((int64_t)b * nh * t * t * hs > TL_CPU_PAR_MIN)
  for (int bi = 0; bi < b; bi++) {
    for (int h = 0; h < nh; h++) {
      float* restrict vt = scratch + ((int64_t)bi * nh + h) * per;
      float* restrict datt = vt + (int64_t)hs * t;
      float* restrict dpre = datt + t;
      gather_transposed(vt, qkv, bi, h, 2, t, c, hs);
      for (int ti = 0; ti < t; ti++) {
        const float* restrict a = att + (((int64_t)bi * nh + h) * t + ti) * t;
        const float* restrict dy = dout + ((int64_t)bi * t + ti) * c + h * hs;
        const float* restrict q = qkv + ((int64_t)bi * t + ti) * c3 + h * hs;
        float* restrict dq = dqkv + ((int64_t)bi * t + ti) * c3 + h * hs;
        int n = ti + 1;
        /* out = att . v: datt[t2] = dy . v[t2]; dv[t2] += att[t2] dy */
        for (int t2 = 0; t2 < n; t2++) datt[t2] = 0.0f;
        for (int i = 0; i < hs; i++) {
          const float di = dy[i];
          const float* restrict vrow = vt + (int64_t)i * t;
#pragma omp simd
          for (int t2 = 0; t2 < n; t2++) datt[t2] += di * vrow[t2];
        }
        for (int t2 = 0; t2 < n; t2++) {
          float* restrict dv = dqkv + ((int64_t)bi * t + t2) * c3 + 2 * c + h * hs;
          const float w = a[t2];
#pragma omp simd
          for (int i = 0; i < hs; i++) dv[i] += w * dy[i];
        }
        /* softmax: dpre = att * (datt - sum(att * datt)), times the score scale */
        float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
        for (int t2 = 0; t2 < n; t2++) dot += a[t2] * datt[t2];
#pragma omp simd
        for (int t2 = 0; t2 < n; t2++) dpre[t2] = a[t2] * (datt[t2] - dot) * scale;
        /* scores = q . k: dq += dpre[t2] k[t2]; dk[t2] += dpre[t2] q */
        for (int t2 = 0; t2 < n; t2++) {
          const float* restrict k = qkv + ((int64_t)bi * t + t2) * c3 + c + h * hs;
          float* restrict dk = dqkv + ((int64_t)bi * t + t2) * c3 + c + h * hs;
          const float w = dpre[t2];
#pragma omp simd
          for (int i = 0; i < hs; i++) {
            dq[i] += w * k[i];
            dk[i] += w * q[i];
          }
        }
      }
    }
  }
  free(scratch);
  return TL_OK;
}
