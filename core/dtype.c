/* dtype.c */
#include "core/dtype.h"

#include <math.h>
#include <string.h>

static const char* const k_names[TL_DTYPE_COUNT] = {"f32", "bf16", "f16", "i32", "u16", "i64"};
static const size_t k_sizes[TL_DTYPE_COUNT] = {4, 2, 2, 4, 2, 8};

size_t tl_dtype_size(tl_dtype t) {
  return (unsigned)t < TL_DTYPE_COUNT ? k_sizes[t] : 0;
}

const char* tl_dtype_name(tl_dtype t) {
  return (unsigned)t < TL_DTYPE_COUNT ? k_names[t] : "?";
}

static uint32_t bits_of(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  return u;
}

static float float_of(uint32_t u) {
  float x;
  memcpy(&x, &u, 4);
  return x;
}

uint16_t tl_f32_to_bf16(float x) {
  uint32_t u = bits_of(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
  u += 0x7fffu + ((u >> 16) & 1u);                                          /* nearest even */
  return (uint16_t)(u >> 16);
}

float tl_bf16_to_f32(uint16_t x) {
  return float_of((uint32_t)x << 16);
}

uint16_t tl_f32_to_f16(float x) {
  uint32_t u = bits_of(x);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t absu = u & 0x7fffffffu;
  if (absu > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);  /* NaN */
  if (absu >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* rounds to inf */
  if (absu < 0x38800000u) {                                   /* subnormal or zero in f16 */
    float a = float_of(absu);
    /* scale so that one f16 subnormal ulp (2^-24) becomes 1, round to even */
    float r = rintf(a * 16777216.0f);
    return (uint16_t)(sign | (uint32_t)r);
  }
  uint32_t mant = absu & 0x7fffffu;
  uint32_t exp = (absu >> 23) - 127 + 15;
  uint32_t h = (exp << 10) | (mant >> 13);
  uint32_t rest = mant & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) h++; /* may carry into the exponent */
  return (uint16_t)(sign | h);
}

float tl_f16_to_f32(uint16_t x) {
  uint32_t sign = (uint32_t)(x & 0x8000u) << 16;
  uint32_t exp = (x >> 10) & 0x1fu;
  uint32_t mant = x & 0x3ffu;
  if (exp == 0) {
    float v = (float)mant * (1.0f / 16777216.0f);
    return sign ? -v : v;
  }
  if (exp == 31) return float_of(sign | 0x7f800000u | (mant << 13));
  return float_of(sign | ((exp - 15 + 127) << 23) | (mant << 13));
}
