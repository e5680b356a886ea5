/* llama.c — the element-wise and row-wise kernels of the Llama family:
 * RMSNorm, rotary position embeddings and SwiGLU's gate. Rows (and, for
 * RoPE, positions) are independent and run in parallel; RMSNorm's weight
 * gradient sums over rows, so it runs in a second pass split by column,
 * each sum in one fixed order — results do not depend on the thread count.
 * The inner loops are plain arithmetic over contiguous floats, which the
 * compiler vectorises (exp through fastmath.h). */
#include <math.h>
#include <stdlib.h>

#include "kernels/cpu/cpu_impl.h"
#include "kernels/cpu/fastmath.h"

tl_status tl__cpu_rmsnorm_forward(void* ctx, float* out, float* rstd, const float* inp,
                                  const float* weight, int n, int c, float eps) {
  (void)ctx;
#pragma omp parallel for if ((int64_t)n * c > TL_CPU_PAR_MIN)
  for (int i = 0; i < n; i++) {
    const float* restrict x = inp + (int64_t)i * c;
    float* restrict o = out + (int64_t)i * c;
    float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
    for (int j = 0; j < c; j++) ss += x[j] * x[j];
    const float r = 1.0f / sqrtf(ss / (float)c + eps);
#pragma omp simd
    for (int j = 0; j < c; j++) o[j] = (x[j] * r) * weight[j];
    rstd[i] = r;
  }
  return TL_OK;
}

tl_status tl__cpu_rmsnorm_backward(void* ctx, float* dinp, float* dweight, const float* dout,
                                   const float* inp, const float* weight, const float* rstd, int n,
                                   int c) {
  (void)ctx;
  const int par = (int64_t)n * c > TL_CPU_PAR_MIN;
  if (dinp) {
    /* y_j = w_j x_j r with r = (mean(x^2) + eps)^-1/2, so
     * dx_j = r w_j dy_j - x_j r^3 / C * sum_k w_k dy_k x_k */
#pragma omp parallel for if (par)
    for (int i = 0; i < n; i++) {
      const float* restrict x = inp + (int64_t)i * c;
      const float* restrict dy = dout + (int64_t)i * c;
      float* restrict dx = dinp + (int64_t)i * c;
      const float r = rstd[i];
      float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
      for (int j = 0; j < c; j++) dot += weight[j] * dy[j] * x[j];
      const float k = dot * r * r * r / (float)c;
#pragma omp simd
      for (int j = 0; j < c; j++) dx[j] += r * weight[j] * dy[j] - k * x[j];
    }
  }
  if (dweight) {
    /* blocks of columns, each summed over the rows in order (one fixed
     * order per column, whatever the threads), a row's block at a time */
    enum { BLOCK = 64 };
    const int n_blocks = (c + BLOCK - 1) / BLOCK;
#pragma omp parallel for if (par)
    for (int blk = 0; blk < n_blocks; blk++) {
      const int j0 = blk * BLOCK, w = c - j0 < BLOCK ? c - j0 : BLOCK;
      float acc[BLOCK] = {0};
      for (int i = 0; i < n; i++) {
        const float* restrict dy = dout + (int64_t)i * c + j0;
        const float* restrict x = inp + (int64_t)i * c + j0;
        const float r = rstd[i];
#pragma omp simd
        for (int j = 0; j < w; j++) acc[j] += dy[j] * x[j] * r;
      }
      for (int j = 0; j < w; j++) dweight[j0 + j] += acc[j];
    }
  }
  return TL_OK;
}

/* cos and sin of row p's position times each frequency: (t, hs/2) each */
static tl_status rope_table(const struct tl_rope* r, int t, float** out) {
  const int half = r->hs / 2;
  float* tab = malloc(sizeof(float) * ((size_t)2 * t * half + (size_t)half));
  if (!tab) return TL_ERRF(TL_ERR_NOMEM, "rope: no memory for %d positions", t);
  float* inv = tab + (size_t)2 * t * half;
  tl_rope_inv_freq(r, inv);
  for (int p = 0; p < t; p++)
    for (int i = 0; i < half; i++) {
      const float angle = inv[i] * (float)tl_cp_position(p, t, r->cp, r->cp_rank);
      tab[(size_t)p * 2 * half + i] = cosf(angle);
      tab[(size_t)p * 2 * half + half + i] = sinf(angle);
    }
  *out = tab;
  return TL_OK;
}

/* out = R(sign * p) x for each head of each row; out may add into itself */
static tl_status rope_apply(float* out, const float* inp, const struct tl_rope* r, int b, int t,
                            int heads, float sign, bool accumulate) {
  float* tab = NULL;
  TL_CHECK(rope_table(r, t, &tab));
  const int hs = r->hs, half = hs / 2;
  const int64_t rows = (int64_t)b * t, c = (int64_t)heads * hs;
#pragma omp parallel for if (rows * c > TL_CPU_PAR_MIN)
  for (int64_t row = 0; row < rows; row++) {
    const float* restrict cs = tab + (size_t)(row % t) * 2 * half;
    const float* restrict sn = cs + half;
    for (int h = 0; h < heads; h++) {
      const float* restrict x = inp + row * c + (int64_t)h * hs;
      float* restrict y = out + row * c + (int64_t)h * hs;
      if (accumulate) {
#pragma omp simd
        for (int i = 0; i < half; i++) {
          const float x1 = x[i], x2 = x[i + half], s = sign * sn[i];
          y[i] += x1 * cs[i] - x2 * s;
          y[i + half] += x2 * cs[i] + x1 * s;
        }
      } else {
#pragma omp simd
        for (int i = 0; i < half; i++) {
          const float x1 = x[i], x2 = x[i + half], s = sign * sn[i];
          y[i] = x1 * cs[i] - x2 * s;
          y[i + half] = x2 * cs[i] + x1 * s;
        }
      }
    }
  }
  free(tab);
  return TL_OK;
}

tl_status tl__cpu_rope_forward(void* ctx, float* out, const float* inp, const struct tl_rope* r,
                               int b, int t, int heads) {
  (void)ctx;
  return rope_apply(out, inp, r, b, t, heads, 1.0f, false);
}

tl_status tl__cpu_rope_backward(void* ctx, float* dinp, const float* dout, const struct tl_rope* r,
                                int b, int t, int heads) {
  (void)ctx;
  return rope_apply(dinp, dout, r, b, t, heads, -1.0f, true);
}

tl_status tl__cpu_swiglu_forward(void* ctx, float* out, const float* gate, const float* up,
                                 int64_t n) {
  (void)ctx;
#pragma omp parallel for simd if (n > TL_CPU_PAR_MIN)
  for (int64_t i = 0; i < n; i++) {
    const float g = gate[i];
    out[i] = g / (1.0f + tl__expf(-g)) * up[i];
  }
  return TL_OK;
}

tl_status tl__cpu_swiglu_backward(void* ctx, float* dgate, float* dup, const float* dout,
                                  const float* gate, const float* up, int64_t n) {
  (void)ctx;
#pragma omp parallel for simd if (n > TL_CPU_PAR_MIN)
  for (int64_t i = 0; i < n; i++) {
    const float g = gate[i], sig = 1.0f / (1.0f + tl__expf(-g));
    if (dgate) dgate[i] += dout[i] * up[i] * sig * (1.0f + g * (1.0f - sig));
    if (dup) dup[i] += dout[i] * g * sig;
  }
  return TL_OK;
}
