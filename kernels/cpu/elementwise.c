/* elementwise.c — residual add, scale and the full sum, with their
 * backwards. The sum adds fixed-size chunks in double and then the chunk
 * totals in order, so its result does not depend on the thread count. */
#include "kernels/cpu/cpu_impl.h"

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

tl_status tl__cpu_sum_forward(void* ctx, float* out, const float* inp, float alpha, int64_t n) {
  (void)ctx;
  int64_t n_chunks = (n + SUM_CHUNK - 1) / SUM_CHUNK;
  double total = 0.0;
  if (n_chunks <= 1) {
    for (int64_t i = 0; i < n; i++) total += inp[i];
  } else {
    double partial[256];
    double* parts = n_chunks <= 256 ? partial : NULL;
    if (!parts) {
      /* Very large inputs: chunk totals summed in order, one chunk at a time. */
      for (int64_t ch = 0; ch < n_chunks; ch++) {
        double s = 0.0;
        int64_t end = (ch + 1) * SUM_CHUNK < n ? (ch + 1) * SUM_CHUNK : n;
        for (int64_t i = ch * SUM_CHUNK; i < end; i++) s += inp[i];
        total += s;
      }
    } else {
#pragma omp parallel for
      for (int64_t ch = 0; ch < n_chunks; ch++) {
        double s = 0.0;
        int64_t end = (ch + 1) * SUM_CHUNK < n ? (ch + 1) * SUM_CHUNK : n;
        for (int64_t i = ch * SUM_CHUNK; i < end; i++) s += inp[i];
        parts[ch] = s;
      }
      for (int64_t ch = 0; ch < n_chunks; ch++) total += parts[ch];
    }
  }
  out[0] = (float)(alpha * total);
  return TL_OK;
}

tl_status tl__cpu_sum_backward(void* ctx, float* dinp, const float* dout, float alpha, int64_t n) {
  (void)ctx;
  float g = alpha * dout[0];
#pragma omp parallel for if (n > TL_CPU_PAR_MIN)
  for (int64_t i = 0; i < n; i++) dinp[i] += g;
  return TL_OK;
}
