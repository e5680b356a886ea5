/* attention.c — causal multi-head self-attention without the T x T matrix:
 * flash attention's algorithm (Dao et al. 2022) on the CPU.
 *
 * Forward: each query row walks its keys in tiles of TILE, keeping a running
 * maximum m, a running sum l of e^(s - m) and an accumulator of e^(s - m) v
 * that is rescaled whenever m grows (the online softmax). What it keeps for
 * the backward is one number a row, lse = m + log l, so activation memory
 * is linear in T. Backward: per query row, the probabilities come back as
 * e^(s - lse) tile by tile, and D = dout . out replaces the row sum of
 * p * dp (the two are equal), so nothing of size T x T is ever held.
 *
 * Grouped-query attention: query head h reads key/value head h / (NH /
 * NKV). The forward splits work by (batch, query head): each pair writes
 * only its own slices of out and lse. The backward splits it by (batch,
 * key/value head) and walks that head's query heads in order inside, so
 * the sums into dk and dv that several query heads share are made by one
 * thread in one order. Each pair first copies its keys (and, for the
 * backward, values) transposed, (hs, T), so that the scores of a query
 * against a tile of keys are a sum of hs rows — vector work along the
 * tile with no horizontal sums. Results do not depend on the thread
 * count. */
#include <math.h>
#include <stdlib.h>

#include "kernels/cpu/cpu_impl.h"
#include "kernels/cpu/fastmath.h"

#define TILE 64

/* rows t2 of x (a key or value head's slice, rows `ld` floats apart) as
 * (hs, T): dst[i * t + t2] = x[t2 * ld + i] */
static void gather_transposed(float* restrict dst, const float* x, int64_t ld, int t, int hs) {
  for (int t2 = 0; t2 < t; t2++) {
    const float* src = x + (int64_t)t2 * ld;
    for (int i = 0; i < hs; i++) dst[(int64_t)i * t + t2] = src[i];
  }
}

/* s[j] = scale * q . rows[i][j0 + j] for j < w: the tile's scores (rows is
 * (hs, T), keys or values transposed) */
static inline void tile_dot(float* restrict s, const float* restrict q, const float* rows,
                            int64_t t, int j0, int w, int hs, float scale) {
  for (int j = 0; j < w; j++) s[j] = 0.0f;
  for (int i = 0; i < hs; i++) {
    const float qi = q[i] * scale;
    const float* restrict r = rows + (int64_t)i * t + j0;
#pragma omp simd
    for (int j = 0; j < w; j++) s[j] += qi * r[j];
  }
}

tl_status tl__cpu_attention_forward(void* ctx, float* out, float* lse, const float* q,
                                    const float* k, const float* v,
                                    const struct tl_attention_shape* sh) {
  (void)ctx;
  const int b = sh->b, t = sh->t, nh = sh->nh, hs = sh->hs, group = sh->nh / sh->nkv;
  const int64_t ldq = sh->ldq, ldkv = sh->ldkv, c = (int64_t)nh * hs;
  const float scale = 1.0f / sqrtf((float)hs);
  /* per (b, h): keys transposed (hs, T), a tile of scores, the accumulator */
  const int64_t per = (int64_t)hs * t + TILE + hs;
  float* scratch = malloc(sizeof(float) * (size_t)per * (size_t)b * (size_t)nh);
  if (!scratch) return TL_ERRF(TL_ERR_NOMEM, "attention: no memory for %d x %d keys", hs, t);
#pragma omp parallel for collapse(2) if ((int64_t)b * nh * t * t * hs > TL_CPU_PAR_MIN)
  for (int bi = 0; bi < b; bi++) {
    for (int h = 0; h < nh; h++) {
      float* restrict kt = scratch + ((int64_t)bi * nh + h) * per;
      float* restrict s = kt + (int64_t)hs * t;
      float* restrict acc = s + TILE;
      const int64_t kv = (int64_t)(h / group) * hs; /* the key/value head's columns */
      gather_transposed(kt, k + (int64_t)bi * t * ldkv + kv, ldkv, t, hs);
      for (int ti = 0; ti < t; ti++) {
        const float* qr = q + ((int64_t)bi * t + ti) * ldq + (int64_t)h * hs;
        const int n = ti + 1; /* keys 0..ti */
        float m = -INFINITY, l = 0.0f;
        for (int i = 0; i < hs; i++) acc[i] = 0.0f;
        for (int j0 = 0; j0 < n; j0 += TILE) {
          const int w = n - j0 < TILE ? n - j0 : TILE;
          tile_dot(s, qr, kt, t, j0, w, hs, scale);
          /* 1. the running maximum, and what the sums so far are worth under it */
          float mt = m;
          for (int j = 0; j < w; j++) mt = s[j] > mt ? s[j] : mt;
          const float keep = j0 ? tl__expf(m - mt) : 0.0f;
          /* 2. this tile's probabilities, unnormalised */
          float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
          for (int j = 0; j < w; j++) sum += (s[j] = tl__expf(s[j] - mt));
          l = l * keep + sum;
          /* 3. acc = acc * keep + sum_j p_j v_j */
#pragma omp simd
          for (int i = 0; i < hs; i++) acc[i] *= keep;
          for (int j = 0; j < w; j++) {
            const float* restrict vr = v + ((int64_t)bi * t + j0 + j) * ldkv + kv;
            const float p = s[j];
#pragma omp simd
            for (int i = 0; i < hs; i++) acc[i] += p * vr[i];
          }
          m = mt;
        }
        const float inv = 1.0f / l;
        float* restrict o = out + ((int64_t)bi * t + ti) * c + (int64_t)h * hs;
#pragma omp simd
        for (int i = 0; i < hs; i++) o[i] = acc[i] * inv;
        lse[((int64_t)bi * nh + h) * t + ti] = m + logf(l);
      }
    }
  }
  free(scratch);
  return TL_OK;
}

tl_status tl__cpu_attention_backward(void* ctx, float* dq, float* dk, float* dv, const float* dout,
                                     const float* q, const float* k, const float* v,
                                     const float* out, const float* lse,
                                     const struct tl_attention_shape* sh) {
  (void)ctx;
  const int b = sh->b, t = sh->t, nh = sh->nh, nkv = sh->nkv, hs = sh->hs, group = nh / nkv;
  const int64_t ldq = sh->ldq, ldkv = sh->ldkv, c = (int64_t)nh * hs;
  const float scale = 1.0f / sqrtf((float)hs);
  /* per (b, kv head): keys and values transposed (hs, T each), a tile of
   * probabilities and one of score gradients */
  const int64_t per = 2 * (int64_t)hs * t + 2 * TILE;
  float* scratch = malloc(sizeof(float) * (size_t)per * (size_t)b * (size_t)nkv);
  if (!scratch) return TL_ERRF(TL_ERR_NOMEM, "attention backward: no memory for %d-long rows", t);
#pragma omp parallel for collapse(2) if ((int64_t)b * nh * t * t * hs > TL_CPU_PAR_MIN)
  for (int bi = 0; bi < b; bi++) {
    for (int kh = 0; kh < nkv; kh++) {
      float* restrict kt = scratch + ((int64_t)bi * nkv + kh) * per;
      float* restrict vt = kt + (int64_t)hs * t;
      float* restrict p = vt + (int64_t)hs * t;
      float* restrict ds = p + TILE;
      const int64_t kv = (int64_t)kh * hs;
      gather_transposed(kt, k + (int64_t)bi * t * ldkv + kv, ldkv, t, hs);
      gather_transposed(vt, v + (int64_t)bi * t * ldkv + kv, ldkv, t, hs);
      for (int h = kh * group; h < (kh + 1) * group; h++) {
        for (int ti = 0; ti < t; ti++) {
          const int64_t row = ((int64_t)bi * t + ti);
          const float* restrict qr = q + row * ldq + (int64_t)h * hs;
          const float* restrict dy = dout + row * c + (int64_t)h * hs;
          const float* restrict o = out + row * c + (int64_t)h * hs;
          float* restrict dqr = dq + row * ldq + (int64_t)h * hs;
          const float row_lse = lse[((int64_t)bi * nh + h) * t + ti];
          const int n = ti + 1;
          /* D = dout . out = sum_j p_j (dout . v_j) */
          float d = 0.0f;
#pragma omp simd reduction(+ : d)
          for (int i = 0; i < hs; i++) d += dy[i] * o[i];
          for (int j0 = 0; j0 < n; j0 += TILE) {
            const int w = n - j0 < TILE ? n - j0 : TILE;
            /* 1. the probabilities again, from the scores and the row's lse */
            tile_dot(p, qr, kt, t, j0, w, hs, scale);
#pragma omp simd
            for (int j = 0; j < w; j++) p[j] = tl__expf(p[j] - row_lse);
            /* 2. dp_j = dout . v_j; the scores' gradients p (dp - D), scaled */
            tile_dot(ds, dy, vt, t, j0, w, hs, 1.0f);
#pragma omp simd
            for (int j = 0; j < w; j++) ds[j] = p[j] * (ds[j] - d) * scale;
            /* 3. dv_j += p_j dout; dk_j += ds_j q; dq += ds_j k_j */
            for (int j = 0; j < w; j++) {
              const int64_t key = ((int64_t)bi * t + j0 + j) * ldkv + kv;
              const float* restrict kr = k + key;
              float* restrict dkr = dk + key;
              float* restrict dvr = dv + key;
              const float pj = p[j], sj = ds[j];
#pragma omp simd
              for (int i = 0; i < hs; i++) {
                dvr[i] += pj * dy[i];
                dkr[i] += sj * qr[i];
                dqr[i] += sj * kr[i];
              }
            }
          }
        }
      }
    }
  }
  free(scratch);
  return TL_OK;
}
