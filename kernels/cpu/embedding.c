/* embedding.c — token + position embedding. The backward scatters into the
 * rows of wte that the tokens name; repeated tokens make that a reduction,
 * so positions are walked in order on one thread (deterministic), while
 * channels of one position are contiguous and vectorise. */
#include <string.h>

#include "kernels/cpu/cpu_impl.h"

tl_status tl__cpu_embedding_forward(void* ctx, float* out, const int32_t* tokens, const float* wte,
                                    const float* wpe, int b, int t, int c) {
  (void)ctx;
#pragma omp parallel for if ((int64_t)b * t * c > TL_CPU_PAR_MIN)
  for (int64_t p = 0; p < (int64_t)b * t; p++) {
    const float* we = wte + (int64_t)tokens[p] * c;
    const float* pe = wpe + (p % t) * c;
    float* o = out + p * c;
    for (int i = 0; i < c; i++) o[i] = we[i] + pe[i];
  }
  return TL_OK;
}

tl_status tl__cpu_embedding_backward(void* ctx, float* dwte, float* dwpe, const float* dout,
                                     const int32_t* tokens, int b, int t, int c) {
  (void)ctx;
  for (int64_t p = 0; p < (int64_t)b * t; p++) {
    const float* dy = dout + p * c;
    if (dwte) {
      float* dw = dwte + (int64_t)tokens[p] * c;
      for (int i = 0; i < c; i++) dw[i] += dy[i];
    }
    if (dwpe) {
      float* dp = dwpe + (p % t) * c;
      for (int i = 0; i < c; i++) dp[i] += dy[i];
    }
  }
  return TL_OK;
}
