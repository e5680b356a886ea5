/* fixed.c — the deterministic mode's exact sums (kernels/ops.h): floats
 * into 64-bit fixed point and back, and a sum of squares in 128-bit fixed
 * point. Integer addition is associative, so every split of a sum — over
 * micro-batches, data-parallel ranks, pipeline stages, threads — gives the
 * same bits. */
#include <math.h>

#include "kernels/cpu/cpu_impl.h"

tl_status tl__cpu_fixed_add(void* ctx, int64_t* acc, float* x, int64_t n) {
  (void)ctx;
  const double scale = ldexp(1.0, TL_FIXED_SHIFT), limit = ldexp(1.0, 62 - TL_FIXED_SHIFT);
  int64_t bad = -1;
#pragma omp parallel for if (n > TL_CPU_PAR_MIN)
  for (int64_t i = 0; i < n; i++) {
    double v = x[i];
    if (!(fabs(v) < limit)) {
#pragma omp critical
      bad = i;
      continue;
    }
    /* v * 2^48 is exact in double; a running sum past int64 is refused */
    if (__builtin_add_overflow(acc[i], (int64_t)llrint(v * scale), &acc[i])) {
#pragma omp critical
      bad = i;
      continue;
    }
    x[i] = 0.0f;
  }
  if (bad >= 0)
    return TL_ERRF(TL_ERR_INVALID,
                   "a gradient of %g at element %lld is outside the deterministic mode's "
                   "fixed-point range (|g| < 2^%d)",
                   (double)x[bad], (long long)bad, 62 - TL_FIXED_SHIFT);
  return TL_OK;
}

tl_status tl__cpu_fixed_to_float(void* ctx, float* out, const int64_t* acc, int64_t n) {
  (void)ctx;
  const double unit = ldexp(1.0, -TL_FIXED_SHIFT);
  const int64_t limit = (int64_t)1 << 62; /* sums over ranks wrap silently past int64 */
  int64_t bad = -1;
#pragma omp parallel for if (n > TL_CPU_PAR_MIN)
  for (int64_t i = 0; i < n; i++) {
    if (acc[i] > limit || acc[i] < -limit) {
#pragma omp critical
      bad = i;
    }
    out[i] = (float)((double)acc[i] * unit);
  }
  if (bad >= 0)
    return TL_ERRF(TL_ERR_INVALID,
                   "a summed gradient at element %lld is outside the deterministic mode's "
                   "fixed-point range (|g| < 2^%d)",
                   (long long)bad, 62 - TL_FIXED_SHIFT);
  return TL_OK;
}

#define CHUNK 8192

tl_status tl__cpu_sumsq_fixed(void* ctx, int64_t* out, const float* x, int64_t n) {
  (void)ctx;
  const double scale = ldexp(1.0, TL_FIXED_SQ_SHIFT);
  const int64_t chunks = (n + CHUNK - 1) / CHUNK;
  __int128 total = 0;
  int over = 0;
#pragma omp parallel if (n > TL_CPU_PAR_MIN)
  {
    __int128 mine = 0;
#pragma omp for
    for (int64_t c = 0; c < chunks; c++) {
      const int64_t end = (c + 1) * CHUNK < n ? (c + 1) * CHUNK : n;
      /* x^2 is exact in double (48 significant bits), times 2^64 too; the
       * conversion truncates what lies below the unit, the same way for an
       * element wherever it is summed */
      for (int64_t i = c * CHUNK; i < end; i++) mine += (__int128)((double)x[i] * x[i] * scale);
    }
#pragma omp critical
    {
      total += mine;
      if (mine < 0) over = 1;
    }
  }
  if (over || total < 0 || total > ((__int128)1 << 126))
    return TL_ERRF(TL_ERR_INVALID,
                   "the sum of squared gradients is outside the deterministic mode's "
                   "fixed-point range");
  out[0] = (int64_t)(total >> 64);
  out[1] = (int64_t)(uint64_t)total;
  return TL_OK;
}
