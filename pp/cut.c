/* cut.c — the balanced contiguous cut (see cut.h). */
#include "pp/cut.h"

#include <stdlib.h>

/* A stage's cost: its forward and its backward, about twice the forward. */
#define COST(fwd_flops) (3.0 * (fwd_flops))

tl_status tl_pp_cut(const double* layer_fwd_flops, int n, double embed_fwd_flops,
                    double head_fwd_flops, int stages, int* counts) {
  int L = n, p = stages;
  const double first_extra = COST(embed_fwd_flops), last_extra = COST(head_fwd_flops);
  if (p < 1 || p > L)
    return TL_ERRF(TL_ERR_INVALID, "%d stages of %d layers: need 1 to %d stages", p, L, L);
  /* best[s][l]: smallest max cost placing items [0, l) in runs [0, s) */
  double* best = malloc(sizeof(double) * (size_t)(p + 1) * (size_t)(L + 1));
  int* cut = malloc(sizeof(int) * (size_t)(p + 1) * (size_t)(L + 1));
  double* prefix = malloc(sizeof(double) * (size_t)(L + 1));
  if (!best || !cut || !prefix) {
    free(best), free(cut), free(prefix);
    return TL_ERRF(TL_ERR_NOMEM, "out of memory cutting %d layers into %d stages", L, p);
  }
  prefix[0] = 0;
  for (int l = 0; l < L; l++) prefix[l + 1] = prefix[l] + COST(layer_fwd_flops[l]);
#define BEST(s, l) best[(s) * (L + 1) + (l)]
#define CUT(s, l) cut[(s) * (L + 1) + (l)]
  for (int s = 0; s <= p; s++)
    for (int l = 0; l <= L; l++) BEST(s, l) = 1e300, CUT(s, l) = 0;
  BEST(0, 0) = 0;
  /* BEST(s, l) = min over k of max(A(k), C(k)), A(k) = BEST(s - 1, k) not
   * falling as k grows (more items never cut better) and C(k), run s's cost
   * of items [k, l), not rising: the minimum sits where they cross. Found by
   * bisection, and of equal maxima the smallest k, as a scan of every k
   * keeping the first strict improvement would (tests/pp/cut_test.cc holds
   * the two equal). */
  for (int s = 1; s <= p; s++) {
    const double extra = (s == 1 ? first_extra : 0) + (s == p ? last_extra : 0);
    for (int l = s; l <= L - (p - s); l++) {
#define C(k) (prefix[l] - prefix[k] + extra)
      int lo = s - 1, hi = l - 1;
      /* the first k with A(k) >= C(k), or hi + 1 */
      int a = lo, b = hi + 1;
      while (a < b) {
        int mid = a + (b - a) / 2;
        if (BEST(s - 1, mid) >= C(mid))
          b = mid;
        else
          a = mid + 1;
      }
      const int cross = a;
      const double left = cross > lo ? C(cross - 1) : 1e301;
      const double right = cross <= hi ? BEST(s - 1, cross) : 1e301;
      int k = cross;
      double v = right;
      if (left <= right) { /* the first k with C(k) <= left: C does not rise */
        int x = lo, y = cross - 1;
        while (x < y) {
          int mid = x + (y - x) / 2;
          if (C(mid) <= left)
            y = mid;
          else
            x = mid + 1;
        }
        k = x, v = left;
      }
      if (v < BEST(s, l)) BEST(s, l) = v, CUT(s, l) = k;
#undef C
    }
  }
  for (int s = p, l = L; s >= 1; s--) {
    int k = CUT(s, l);
    counts[s - 1] = l - k;
    l = k;
  }
#undef BEST
#undef CUT
  free(best), free(cut), free(prefix);
  return TL_OK;
}
