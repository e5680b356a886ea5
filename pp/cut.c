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
  for (int s = 1; s <= p; s++)
    for (int l = s; l <= L - (p - s); l++)
      for (int k = s - 1; k < l; k++) {
        double c = prefix[l] - prefix[k] + (s == 1 ? first_extra : 0) + (s == p ? last_extra : 0);
        double v = BEST(s - 1, k) > c ? BEST(s - 1, k) : c;
        if (v < BEST(s, l)) BEST(s, l) = v, CUT(s, l) = k;
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
