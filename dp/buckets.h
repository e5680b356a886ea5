/* buckets.h — data-parallel gradient all-reduce in buckets.
 *
 * The flat gradient buffer of a stage (dp/layout.h) is cut into buckets of
 * about parallel.bucket_mb each, in buffer order. During the backward pass
 * of the last micro-batch the trainer reports each forward node whose
 * backward has run; the layout says how much of the buffer's front is then
 * final (it holds parameters in the order their gradients finish), and
 * every bucket lying entirely in that front starts its all-reduce at once,
 * asynchronously, so communication overlaps the rest of the backward pass.
 * tl_dp_buckets_finish starts what is left and waits for everything.
 *
 * The reduction is a SUM: each replica's gradients are already scaled by
 * 1 / (global batch tokens), so the sum is the gradient of the mean loss over
 * the global batch. Gradients of intermediate micro-batches are never
 * reduced: they accumulate locally first. */
#ifndef TL_DP_BUCKETS_H
#define TL_DP_BUCKETS_H

#include <stdint.h>

#include "core/group.h"
#include "dp/layout.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tl_dp_buckets tl_dp_buckets;

/* grads: the layout's n floats on the group's device; the layout and the
 * buffer are not owned and must outlive the buckets. A group of size 1
 * makes every call a no-op. */
tl_status tl_dp_buckets_create(tl_group* dp, const tl_dp_layout* layout, float* grads,
                               double bucket_mb, tl_dp_buckets** out);
void tl_dp_buckets_destroy(tl_dp_buckets* b); /* waits for nothing: finish first */

/* The backward of forward node `forward_node` has run: launch every bucket
 * whose gradients are now all final. */
tl_status tl_dp_buckets_node_done(tl_dp_buckets* b, int forward_node);
/* Launches the remaining buckets and waits for all; then resets for the
 * next step. */
tl_status tl_dp_buckets_finish(tl_dp_buckets* b);

int tl_dp_buckets_count(const tl_dp_buckets* b);
/* Buckets launched before finish in the last step (how much overlapped). */
int tl_dp_buckets_early(const tl_dp_buckets* b);

#ifdef __cplusplus
}
#endif

#endif
