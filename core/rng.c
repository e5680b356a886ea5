/* rng.c — Philox-4x32-10 and the draws built on it. */
#include "core/rng.h"

#include <math.h>

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

void tl_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
  uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3];
  uint32_t k0 = key[0], k1 = key[1];
  for (int r = 0; r < 10; r++) {
    if (r > 0) k0 += PHILOX_W0, k1 += PHILOX_W1; /* key bumped before rounds 2..10 */
    uint64_t p0 = (uint64_t)PHILOX_M0 * c0;
    uint64_t p1 = (uint64_t)PHILOX_M1 * c2;
    uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
    uint32_t n1 = (uint32_t)p1;
    uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
    uint32_t n3 = (uint32_t)p0;
    c0 = n0, c1 = n1, c2 = n2, c3 = n3;
  }
  out[0] = c0, out[1] = c1, out[2] = c2, out[3] = c3;
}

static void block(uint64_t seed, uint32_t id, uint32_t stream, uint64_t b, uint32_t out[4]) {
  const uint32_t ctr[4] = {(uint32_t)b, (uint32_t)(b >> 32), id, stream};
  const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
  tl_philox4x32_10(ctr, key, out);
}

/* 24 random bits to [0, 1) and to (0, 1]. */
static float unit_open_hi(uint32_t x) {
  return (float)(x >> 8) * (1.0f / 16777216.0f);
}
static float unit_open_lo(uint32_t x) {
  return ((float)(x >> 8) + 1.0f) * (1.0f / 16777216.0f);
}

void tl_rng_uniform(uint64_t seed, uint32_t id, uint64_t start, size_t n, float lo, float hi,
                    float* out) {
  uint32_t r[4];
  uint64_t cached = UINT64_MAX;
  for (size_t j = 0; j < n; j++) {
    uint64_t i = start + j;
    if (i / 4 != cached) block(seed, id, 0, cached = i / 4, r);
    out[j] = lo + (hi - lo) * unit_open_hi(r[i % 4]);
  }
}

void tl_rng_normal(uint64_t seed, uint32_t id, uint64_t start, size_t n, float mean, float std,
                   float* out) {
  const float two_pi = 6.28318530717958647692f;
  uint32_t r[4];
  uint64_t cached = UINT64_MAX;
  for (size_t j = 0; j < n; j++) {
    uint64_t i = start + j;
    if (i / 2 != cached) block(seed, id, 1, cached = i / 2, r);
    int w = (int)(i % 2) * 2;
    float u1 = unit_open_lo(r[w]), u2 = unit_open_hi(r[w + 1]);
    out[j] = mean + std * (sqrtf(-2.0f * logf(u1)) * cosf(two_pi * u2));
  }
}

void tl_rng_normal_2d(uint64_t seed, uint32_t id, int64_t cols, int64_t row0, int64_t n_rows,
                      int64_t col0, int64_t n_cols, float mean, float std, float* out) {
  for (int64_t r = 0; r < n_rows; r++)
    tl_rng_normal(seed, id, (uint64_t)((row0 + r) * cols + col0), (size_t)n_cols, mean, std,
                  out + r * n_cols);
}
