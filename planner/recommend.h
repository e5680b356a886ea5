/* recommend.h — a plan becomes a training config. The plan is the contract
 * (DESIGN.md): `trellis plan --out plan.json` writes what `trellis train`
 * runs, so the config carries everything of the user's config (model, data,
 * optimizer, checkpoints) with the plan's choices written over it: mesh,
 * schedule and micro-batches, ZeRO stage, recomputation, sequence
 * parallelism (when tp > 1), the global batch and sequence length, and the
 * device type of the cluster. */
#ifndef TL_PLANNER_RECOMMEND_H
#define TL_PLANNER_RECOMMEND_H

#include "core/config.h"
#include "planner/cluster.h"
#include "planner/cost.h"

#ifdef __cplusplus
extern "C" {
#endif

/* parallel.bucket_mb of a plan priced with dp_bucket_mb 0 (one all-reduce
 * after the backward): larger than any stage, so one bucket a stage part */
#define TL_PLAN_ONE_BUCKET_MB 1e6

/* *out = *base with plan `p` for a global batch of dp * micro_batch *
 * n_micro sequences of `seq` tokens on cluster `c`, trained in `dtype`
 * (train.precision: TL_BF16 or TL_F32, as priced), its data-parallel
 * buckets and reduction dtype as priced; stage cuts are left to
 * the trainer's FLOP balance. Fails (TL_ERR_CONFIG) when seq exceeds the
 * model's max_seq_len. */
tl_status tl_plan_to_config(const tl_plan* p, const struct tl_config* base, int seq,
                            const tl_cluster* c, tl_dtype dtype, struct tl_config* out);

#ifdef __cplusplus
}
#endif

#endif
