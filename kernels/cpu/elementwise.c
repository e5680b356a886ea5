/* elementwise.c — residual add and scale with their backwards, and the sum
 * of squares (the gradient norm). That sum adds fixed-size chunks in double
 * and then the chunk totals in order, so its result does not depend on the
 * thread count. */
#include <string.h>

#include "kernels/cpu/cpu_impl.h"

tl_status tl__cpu_copy_2d(void* ctx, float* dst, int64_t ldd, const float* src, int64_t lds,
                          int64_t rows, int64_t cols, bool accumulate) {
  (void)ctx;
#pragma omp parallel for if (rows * cols > TL_CPU_PAR_MIN)
  for (int64_t r = 0; r < rows; r++) {
    float* restrict d = dst + r * ldd;
    const float* restrict s = src + r * lds;
    if (accumulate)
      for (int64_t i = 0; i < cols; i++) d[i] += s[i];
    else
      memcpy(d, s, sizeof(float) * (size_t)cols);
  }
  return TL_OK;
}

tl_status tl__cpu_add_forward(void* ctx, float* out, const float* a, const float* b, int64_t n) {
  (void)ctx;
#pragma omp parallel for if (n > TL_CPU_PAR_MIN)
  for (int64_t i = 0; i < n; i++) out[i] = a[i] + b[i];
  return TL_OK;
}

tl_status tl__cpu_add_backward(void* ctx, float* da, float* db, const float* dout, int64_t n) {
  (void)ctx;
#pragma omp parallel for if (n > TL_CPU_PAR_MIN)
  for (int64_t i = 0; i < n; i++) {
    if (da) da[i] += dout[i];
    if (db) db[i] += dout[i];
  }
  return TL_OK;
}

tl_status tl__cpu_scale_forward(void* ctx, float* out, const float* inp, float alpha, int64_t n) {
  (void)ctx;
#pragma omp parallel for if (n > TL_CPU_PAR_MIN)
  for (int64_t i = 0; i < n; i++) out[i] = alpha * inp[i];
  return TL_OK;
}

tl_status tl__cpu_scale_backward(void* ctx, float* dinp, const float* dout, float alpha,
                                 int64_t n) {
  (void)ctx;
#pragma omp parallel for if (n > TL_CPU_PAR_MIN)
  for (int64_t i = 0; i < n; i++) dinp[i] += alpha * dout[i];
  return TL_OK;
}

#define SUM_CHUNK 65536
#define SUM_MAX_CHUNKS 4096

/* Squares in fixed chunks summed in double, then the chunk totals in order: the same
 * result for any thread count. */
static double chunked_sumsq(const float* inp, int64_t n) {
  int64_t n_chunks = (n + SUM_CHUNK - 1) / SUM_CHUNK;
  double partial[SUM_MAX_CHUNKS];
  double total = 0.0;
  for (int64_t base = 0; base < n_chunks; base += SUM_MAX_CHUNKS) {
    int64_t count = n_chunks - base < SUM_MAX_CHUNKS ? n_chunks - base : SUM_MAX_CHUNKS;
#pragma omp parallel for if (count > 1)
    for (int64_t ch = 0; ch < count; ch++) {
      int64_t begin = (base + ch) * SUM_CHUNK, end = begin + SUM_CHUNK < n ? begin + SUM_CHUNK : n;
      double s = 0.0;
#pragma omp simd reduction(+ : s)
      for (int64_t i = begin; i < end; i++) s += (double)inp[i] * inp[i];
      partial[ch] = s;
    }
    for (int64_t ch = 0; ch < count; ch++) total += partial[ch];
  }
  return total;
}

tl_status tl__cpu_sumsq(void* ctx, float* out, const float* inp, int64_t n) {
  (void)ctx;
  out[0] = (float)chunked_sumsq(inp, n);
  return TL_OK;
}

/* bf16 storage: core/dtype.c's conversions, inlined so that the loops
 * vectorise. */
static inline uint16_t to_bf16(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
  u += 0x7fffu + ((u >> 16) & 1u);                                          /* nearest even */
  return (uint16_t)(u >> 16);
}

static inline float from_bf16(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float x;
  memcpy(&x, &u, 4);
  return x;
}

tl_status tl__cpu_to_bf16(void* ctx, uint16_t* out, const float* x, int64_t n) {
  (void)ctx;
#pragma omp parallel for if (n > TL_CPU_PAR_MIN)
  for (int64_t i = 0; i < n; i++) out[i] = to_bf16(x[i]);
  return TL_OK;
}

tl_status tl__cpu_from_bf16(void* ctx, float* out, const uint16_t* x, int64_t n) {
  (void)ctx;
#pragma omp parallel for if (n > TL_CPU_PAR_MIN)
  for (int64_t i = 0; i < n; i++) out[i] = from_bf16(x[i]);
  return TL_OK;
}

tl_status tl__cpu_round_bf16(void* ctx, float* out, const float* x, int64_t n) {
  (void)ctx;
#pragma omp parallel for if (n > TL_CPU_PAR_MIN)
  for (int64_t i = 0; i < n; i++) out[i] = from_bf16(to_bf16(x[i]));
  return TL_OK;
}
