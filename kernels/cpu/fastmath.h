/* fastmath.h — exp and tanh the compiler can vectorize.
 *
 * libm's expf and tanhf are scalar calls (glibc offers vector versions only
 * under -ffast-math, which would also let the compiler assume no NaN or
 * infinity — and the kernels rely on -INFINITY as a starting maximum). These
 * are branch-free polynomials, accurate to about 2 ulp over the float range,
 * so a loop of them becomes SIMD code. */
#ifndef TL_KERNELS_CPU_FASTMATH_H
#define TL_KERNELS_CPU_FASTMATH_H

#include <stdint.h>
#include <string.h>

/* e^x: x = n ln2 + r with |r| <= ln2/2 (Cody-Waite), e^r by a degree-6
 * polynomial (Cephes' coefficients), then 2^n through the exponent bits.
 * Inputs below -87.3 give 0-ish (tiny), above 88.7 are clamped; NaN stays
 * NaN (computed on a clamped stand-in, so that no NaN is converted to an
 * integer, which C leaves undefined). */
static inline float tl__expf(float in) {
  float x = in >= -87.3f ? in : -87.3f; /* NaN: -87.3 */
  x = x > 88.7f ? 88.7f : x;
  const float shift = 12582912.0f; /* 1.5 * 2^23: adding it rounds to an integer */
  float n = (x * 1.44269504088896341f + shift) - shift;
  float r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  float y = p * r * r + r + 1.0f;
  int32_t bits = ((int32_t)n + 127) << 23;
  float scale;
  memcpy(&scale, &bits, 4);
  return in == in ? y * scale : in;
}

/* tanh: for |x| >= 0.625, 1 - 2 / (e^{2|x|} + 1) with the sign restored;
 * below, an odd polynomial (Cephes' tanhf), which avoids the cancellation. */
static inline float tl__tanhf(float x) {
  float a = x < 0 ? -x : x;
  float e = tl__expf(2.0f * (a > 9.0f ? 9.0f : a));
  float big = 1.0f - 2.0f / (e + 1.0f);
  float z = x * x;
  float small = ((((-5.70498872745e-3f * z + 2.06390887954e-2f) * z - 5.37397155531e-2f) * z +
                  1.33314422036e-1f) *
                     z -
                 3.33332819422e-1f) *
                    z * a +
                a;
  float t = a < 0.625f ? small : big;
  return x < 0 ? -t : t;
}

#endif
