/* cut.h — where a pipeline cuts a model's layers into stages.
 *
 * tl_pp_cut splits n layers into `stages` contiguous runs of at least one
 * layer each, balancing each stage's arithmetic: a stage costs the forward
 * FLOPs of its layers three times over (the backward is about twice the
 * forward), stage 0 also its embedding's and the last stage its head's. It
 * minimises the largest stage's cost by dynamic programming over (stages,
 * layers); ties keep the first cut found, so the same costs always give the
 * same cut — the trainer's stages (pp/stage.c) and the planner's prediction
 * of them (planner/cost.c) both call it. */
#ifndef TL_PP_CUT_H
#define TL_PP_CUT_H

#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* layers[0 .. stages) receives the layers of each stage (summing to n).
 * TL_ERR_INVALID unless 1 <= stages <= n; TL_ERR_NOMEM. */
tl_status tl_pp_cut(const double* layer_fwd_flops, int n, double embed_fwd_flops,
                    double head_fwd_flops, int stages, int* layers);

#ifdef __cplusplus
}
#endif

#endif
