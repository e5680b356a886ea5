/* attention.c — causal self-attention without the T x T matrix: flash
 * attention's algorithm (Dao et al. 2022) on the CPU, in tiles that are
 * matrix products.
 *
 * Forward, for each (batch, query head) and each tile of QT query rows:
 * walk the key tiles of KT keys up to the diagonal; the tile's scores are
 * one GEMM, Q_tile K_tile^T (OpenBLAS); each row keeps a running maximum m,
 * a running sum l of e^(s - m) and an accumulator of e^(s - m) v, rescaled
 * whenever m grows (the online softmax), and the accumulator's update is a
 * second GEMM, P V_tile. What a row keeps for the backward is one number,
 * lse = m + log l, so activation memory is linear in T; the scratch is a
 * tile's (QT x KT), never T x T.
 *
 * Backward, per tile pair: the probabilities again, P = e^(S - lse) (S one
 * GEMM); dV_tile += P^T dO; dP = dO V_tile^T; dS = P (dP - D) scale, with
 * D = dout . out per row (equal to the row sum of P dP); dQ += dS K_tile;
 * dK_tile += dS^T Q — five GEMMs.
 *
 * Grouped-query attention: query head h reads key/value head h / (NH /
 * NKV). The forward splits work by (batch, query head): each pair writes
 * only its own slices of out and lse. The backward splits it by (batch,
 * key/value head) and walks that head's query heads, and their tiles, in
 * order inside, so the sums into dk and dv that several query heads share
 * are made by one thread in one order. Inside a parallel region OpenBLAS
 * runs on the calling thread; results do not depend on the thread count. */
#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu_impl.h"
#include "kernels/cpu/fastmath.h"

#define QT 64  /* query rows a tile */
#define KT 128 /* keys a tile */

/* s (rows x KT) = scale * q (rows x hs, rows ldq apart) k^T (cols x hs,
 * ldk apart) */
static void scores(float* s, const float* q, int64_t ldq, const float* k, int64_t ldk, int rows,
                   int cols, int hs, float scale) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, cols, hs, scale, q, (int)ldq, k,
              (int)ldk, 0.0f, s, KT);
}

/* the causal mask: of a tile's cols keys, the first at position kp, how
 * many the query at position qp sees */
static inline int keys_seen(int qp, int kp, int cols) {
  int n = qp - kp + 1;
  return n < 0 ? 0 : n < cols ? n : cols;
}

/* how many of the block's keys a tile of queries whose last is at position
 * q_last sees at all */
static inline int keys_end(const struct tl_attention_shape* sh, int q_last) {
  int n = q_last - sh->k_pos + 1;
  return n < 0 ? 0 : n < sh->tk ? n : sh->tk;
}

tl_status tl__cpu_attention_forward(void* ctx, float* out, float* lse, const float* q,
                                    const float* k, const float* v,
                                    const struct tl_attention_shape* shape) {
  (void)ctx;
  const struct tl_attention_shape r = tl_attention_resolve(shape), *sh = &r;
  const int b = sh->b, t = sh->t, nh = sh->nh, hs = sh->hs, group = sh->nh / sh->nkv;
  const int64_t ldq = sh->ldq, ldkv = sh->ldkv, c = (int64_t)nh * hs;
  const float scale = 1.0f / sqrtf((float)hs);
  /* per thread: a tile of scores, the accumulator, the row statistics */
  const int64_t per = (int64_t)QT * KT + (int64_t)QT * hs + 2 * QT;
  const int n_pairs = b * nh;
  float* scratch = malloc(sizeof(float) * (size_t)per * (size_t)n_pairs);
  if (!scratch) return TL_ERRF(TL_ERR_NOMEM, "attention: no memory for %d-key tiles", KT);
#pragma omp parallel for if ((int64_t)b * nh * t * sh->tk * hs > TL_CPU_PAR_MIN)
  for (int pair = 0; pair < n_pairs; pair++) {
    const int bi = pair / nh, h = pair % nh;
    float* restrict s = scratch + (int64_t)pair * per;
    float* restrict acc = s + (int64_t)QT * KT;
    float* restrict m = acc + (int64_t)QT * hs;
    float* restrict l = m + QT;
    const int64_t kv = (int64_t)(h / group) * hs; /* the key/value head's columns */
    const float* qh = q + bi * sh->bq + (int64_t)h * hs;
    const float* kh = k + bi * sh->bkv + kv;
    const float* vh = v + bi * sh->bkv + kv;
    float* oh = out + bi * sh->bo + (int64_t)h * hs;
    float* lh = lse + ((int64_t)bi * nh + h) * sh->ldlse;
    for (int i0 = 0; i0 < t; i0 += QT) {
      const int rows = t - i0 < QT ? t - i0 : QT;
      /* the rows' state so far: none, or (merge) the earlier blocks' */
      for (int i = 0; i < rows; i++) {
        const bool seen = sh->merge && lh[i0 + i] != -INFINITY;
        m[i] = seen ? lh[i0 + i] : -INFINITY;
        l[i] = seen ? 1.0f : 0.0f;
        if (seen)
          memcpy(acc + (int64_t)i * hs, oh + (int64_t)(i0 + i) * c, sizeof(float) * (size_t)hs);
        else
          memset(acc + (int64_t)i * hs, 0, sizeof(float) * (size_t)hs);
      }
      const int kend = keys_end(sh, sh->q_pos + i0 + rows - 1);
      for (int j0 = 0; j0 < kend; j0 += KT) {
        const int cols = kend - j0 < KT ? kend - j0 : KT;
        /* 1. the tile's scores */
        scores(s, qh + i0 * ldq, ldq, kh + j0 * ldkv, ldkv, rows, cols, hs, scale);
        /* 2. per row: the running maximum, what the sums so far are worth
         * under it, the tile's probabilities (unnormalised) */
        for (int i = 0; i < rows; i++) {
          float* restrict sr = s + (int64_t)i * KT;
          const int n = keys_seen(sh->q_pos + i0 + i, sh->k_pos + j0, cols);
          float mt = m[i];
          for (int j = 0; j < n; j++) mt = sr[j] > mt ? sr[j] : mt;
          const float keep = m[i] == -INFINITY ? 0.0f : tl__expf(m[i] - mt);
          float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
          for (int j = 0; j < n; j++) sum += (sr[j] = tl__expf(sr[j] - mt));
          for (int j = n; j < cols; j++) sr[j] = 0.0f;
          l[i] = l[i] * keep + sum;
          m[i] = mt;
          float* restrict ar = acc + (int64_t)i * hs;
#pragma omp simd
          for (int x = 0; x < hs; x++) ar[x] *= keep;
        }
        /* 3. acc += P V_tile */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, hs, cols, 1.0f, s, KT,
                    vh + j0 * ldkv, (int)ldkv, 1.0f, acc, hs);
      }
      for (int i = 0; i < rows; i++) {
        const float inv = l[i] > 0.0f ? 1.0f / l[i] : 0.0f;
        float* restrict o = oh + (int64_t)(i0 + i) * c;
        const float* restrict ar = acc + (int64_t)i * hs;
#pragma omp simd
        for (int x = 0; x < hs; x++) o[x] = ar[x] * inv;
        lh[i0 + i] = l[i] > 0.0f ? m[i] + logf(l[i]) : -INFINITY;
      }
    }
  }
  free(scratch);
  return TL_OK;
}

tl_status tl__cpu_attention_backward(void* ctx, float* dq, float* dk, float* dv, const float* dout,
                                     const float* q, const float* k, const float* v,
                                     const float* out, const float* lse,
                                     const struct tl_attention_shape* shape) {
  (void)ctx;
  const struct tl_attention_shape r = tl_attention_resolve(shape), *sh = &r;
  const int b = sh->b, t = sh->t, nh = sh->nh, nkv = sh->nkv, hs = sh->hs, group = nh / nkv;
  const int64_t ldq = sh->ldq, ldkv = sh->ldkv, c = (int64_t)nh * hs;
  const float scale = 1.0f / sqrtf((float)hs);
  /* per (b, kv head): the tile's probabilities and their gradients, and a
   * tile's D */
  const int64_t per = 2 * (int64_t)QT * KT + QT;
  const int n_pairs = b * nkv;
  float* scratch = malloc(sizeof(float) * (size_t)per * (size_t)n_pairs);
  if (!scratch) return TL_ERRF(TL_ERR_NOMEM, "attention backward: no memory for %d-key tiles", KT);
#pragma omp parallel for if ((int64_t)b * nh * t * sh->tk * hs > TL_CPU_PAR_MIN)
  for (int pair = 0; pair < n_pairs; pair++) {
    const int bi = pair / nkv, kh = pair % nkv;
    float* restrict p = scratch + (int64_t)pair * per;
    float* restrict ds = p + (int64_t)QT * KT;
    float* restrict d = ds + (int64_t)QT * KT;
    const int64_t kv = (int64_t)kh * hs;
    const float* kk = k + bi * sh->bkv + kv;
    const float* vv = v + bi * sh->bkv + kv;
    float* dkk = dk + bi * sh->bkv + kv;
    float* dvv = dv + bi * sh->bkv + kv;
    for (int h = kh * group; h < (kh + 1) * group; h++) {
      const float* qh = q + bi * sh->bq + (int64_t)h * hs;
      float* dqh = dq + bi * sh->bq + (int64_t)h * hs;
      const float* dy = dout + bi * sh->bo + (int64_t)h * hs;
      const float* o = out + bi * sh->bo + (int64_t)h * hs;
      const float* row_lse = lse + ((int64_t)bi * nh + h) * sh->ldlse;
      for (int i0 = 0; i0 < t; i0 += QT) {
        const int rows = t - i0 < QT ? t - i0 : QT;
        const int kend = keys_end(sh, sh->q_pos + i0 + rows - 1);
        if (kend == 0) continue;
        /* D = dout . out = sum_j p_j (dout . v_j), per query row */
        for (int i = 0; i < rows; i++) {
          const float* restrict dyr = dy + (int64_t)(i0 + i) * c;
          const float* restrict orow = o + (int64_t)(i0 + i) * c;
          float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
          for (int x = 0; x < hs; x++) sum += dyr[x] * orow[x];
          d[i] = sum;
        }
        for (int j0 = 0; j0 < kend; j0 += KT) {
          const int cols = kend - j0 < KT ? kend - j0 : KT;
          /* 1. the probabilities again, from the scores and the rows' lse */
          scores(p, qh + i0 * ldq, ldq, kk + j0 * ldkv, ldkv, rows, cols, hs, scale);
          for (int i = 0; i < rows; i++) {
            float* restrict pr = p + (int64_t)i * KT;
            const float lr = row_lse[i0 + i];
            const int n = keys_seen(sh->q_pos + i0 + i, sh->k_pos + j0, cols);
#pragma omp simd
            for (int j = 0; j < n; j++) pr[j] = tl__expf(pr[j] - lr);
            for (int j = n; j < cols; j++) pr[j] = 0.0f;
          }
          /* 2. dV_tile += P^T dO */
          cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, cols, hs, rows, 1.0f, p, KT,
                      dy + (int64_t)i0 * c, (int)c, 1.0f, dvv + j0 * ldkv, (int)ldkv);
          /* 3. dP = dO V_tile^T; dS = P (dP - D) scale */
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, cols, hs, 1.0f,
                      dy + (int64_t)i0 * c, (int)c, vv + j0 * ldkv, (int)ldkv, 0.0f, ds, KT);
          for (int i = 0; i < rows; i++) {
            float* restrict dsr = ds + (int64_t)i * KT;
            const float* restrict pr = p + (int64_t)i * KT;
            const float di = d[i];
#pragma omp simd
            for (int j = 0; j < cols; j++) dsr[j] = pr[j] * (dsr[j] - di) * scale;
          }
          /* 4. dQ += dS K_tile; dK_tile += dS^T Q */
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, hs, cols, 1.0f, ds, KT,
                      kk + j0 * ldkv, (int)ldkv, 1.0f, dqh + i0 * ldq, (int)ldq);
          cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, cols, hs, rows, 1.0f, ds, KT,
                      qh + i0 * ldq, (int)ldq, 1.0f, dkk + j0 * ldkv, (int)ldkv);
        }
      }
    }
  }
  free(scratch);
  return TL_OK;
}
