/* rng.h — counter-based random numbers (Philox-4x32-10, Salmon et al. 2011).
 *
 * Why counter-based: a parameter element's value must depend only on
 * (seed, parameter id, element index in the full logical tensor), never on
 * which rank draws it or how much of the tensor that rank holds. Philox maps a
 * counter to random bits with no state, so element i is computed directly:
 *
 *   uniform: block i/4 of counter {i/4 lo, i/4 hi, id, 0}, word i%4
 *   normal:  block i/2 of counter {i/2 lo, i/2 hi, id, 1}, words 2(i%2) and
 *            2(i%2)+1 through Box-Muller (cosine branch)
 *
 * with key {seed lo, seed hi}. Any slice therefore equals the matching part
 * of the whole tensor, bit for bit. */
#ifndef TL_CORE_RNG_H
#define TL_CORE_RNG_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One Philox-4x32-10 block: out = philox(ctr, key). */
void tl_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);

/* Elements [start, start + n) of the logical tensor (seed, id), uniform in [lo, hi). */
void tl_rng_uniform(uint64_t seed, uint32_t id, uint64_t start, size_t n, float lo, float hi,
                    float* out);

/* Elements [start, start + n) of the logical tensor (seed, id), normal(mean, std). */
void tl_rng_normal(uint64_t seed, uint32_t id, uint64_t start, size_t n, float mean, float std,
                   float* out);

/* A 2-D block of a row-major logical matrix with `cols` columns:
 * rows [row0, row0 + n_rows) x columns [col0, col0 + n_cols), written densely
 * (n_rows, n_cols) — what a column- or row-parallel shard initialises. */
void tl_rng_normal_2d(uint64_t seed, uint32_t id, int64_t cols, int64_t row0, int64_t n_rows,
                      int64_t col0, int64_t n_cols, float mean, float std, float* out);

#ifdef __cplusplus
}
#endif

#endif
