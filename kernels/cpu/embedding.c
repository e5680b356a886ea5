/* embedding.c — token + position embedding. The backward scatters into the
 * rows of wte that the tokens name; repeated tokens make that a reduction,
 * so positions are walked in order on one thread (deterministic), while
 * channels of one position are contiguous and vectorise. A tensor-parallel
 * shard holds wte rows [row_begin, row_begin + rows); other tokens add
 * nothing here (another rank holds them). */
#include <string.h>

#include "kernels/cpu/cpu_impl.h"

tl_status tl__cpu_embedding_forward(void* ctx, float* out, const int32_t* tokens, const float* wte,
                                    const float* wpe, int b, int t, int c, int row_begin, int rows,
                                    bool accumulate) {
  (void)ctx;
#pragma omp parallel for if ((int64_t)b * t * c > TL_CPU_PAR_MIN)
  for (int64_t p = 0; p < (int64_t)b * t; p++) {
    int64_t row = (int64_t)tokens[p] - row_begin;
    const float* we = row >= 0 && row < rows ? wte + row * c : NULL;
    const float* pe = wpe ? wpe + (p % t) * c : NULL;
    float* o = out + p * c;
    if (accumulate) {
      if (we)
        for (int i = 0; i < c; i++) o[i] += we[i];
      if (pe)
        for (int i = 0; i < c; i++) o[i] += pe[i];
    } else if (we && pe)
      for (int i = 0; i < c; i++) o[i] = we[i] + pe[i];
    else if (we)
      memcpy(o, we, sizeof(float) * (size_t)c);
    else if (pe)
      memcpy(o, pe, sizeof(float) * (size_t)c);
    else
      memset(o, 0, sizeof(float) * (size_t)c);
  }
  return TL_OK;
}

tl_status tl__cpu_embedding_backward(void* ctx, float* dwte, float* dwpe, const float* dout,
                                     const int32_t* tokens, int b, int t, int c, int row_begin,
                                     int rows) {
  (void)ctx;
  for (int64_t p = 0; p < (int64_t)b * t; p++) {
    const float* dy = dout + p * c;
    int64_t row = (int64_t)tokens[p] - row_begin;
    if (dwte && row >= 0 && row < rows) {
      float* dw = dwte + row * c;
      for (int i = 0; i < c; i++) dw[i] += dy[i];
    }
    if (dwpe) {
      float* dp = dwpe + (p % t) * c;
      for (int i = 0; i < c; i++) dp[i] += dy[i];
    }
  }
  return TL_OK;
}
