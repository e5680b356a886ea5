/* partition.h — cutting a row of costs into contiguous parts.
 *
 * tl_partition_minmax splits n items (layers) into `parts` contiguous runs
 * of at least one item each, minimising the largest run's cost, where run
 * 0 also pays `first_extra` and the last run `last_extra` (a pipeline's
 * embedding and head). Dynamic programming over (parts, items); ties keep
 * the first cut found, so the same costs always give the same cut — the
 * trainer's stages (pp/stage.c) and the planner's prediction of them
 * (planner/cost.c) both call it. */
#ifndef TL_CORE_PARTITION_H
#define TL_CORE_PARTITION_H

#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* counts[0 .. parts) receives the items of each run (summing to n).
 * TL_ERR_INVALID unless 1 <= parts <= n; TL_ERR_NOMEM. */
tl_status tl_partition_minmax(const double* cost, int n, double first_extra, double last_extra,
                              int parts, int* counts);

#ifdef __cplusplus
}
#endif

#endif
