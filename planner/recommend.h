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
#include "dp/buckets.h"
#include "planner/cluster.h"
#include "planner/cost.h"

#ifdef __cplusplus
extern "C" {
#endif

/* parallel.bucket_mb of a plan priced with dp_bucket_mb 0 (one all-reduce
 * after the backward): larger than any stage, so one bucket a stage part,
 * at every ZeRO stage (dp/buckets.h) */
#define TL_PLAN_ONE_BUCKET_MB TL_DP_ONE_BUCKET_MB

/* The plan a config runs — the inverse of tl_plan_to_config — into *p (its
 * split fields; the predictions zeroed) and the dtype it trains in into
 * *dtype: mesh, schedule and micro-batches (micro_batch = batch_size / (dp
 * x micro_batches), as the config's checks require it to divide),
 * interleaved chunks, ZeRO stage, recomputation, sequence parallelism
 * (with tp > 1), buckets and the reduction's dtype. */
void tl_plan_from_config(const struct tl_config* cfg, tl_plan* p, tl_dtype* dtype);

/* Prices the run `cfg` describes on cluster `c` (`trellis train --cluster`):
 * tl_plan_from_config, evaluated on c with its devices set to the mesh's
 * ranks — one node of them where they fit one (a node of fewer devices,
 * as plan_bench prices a job), else whole nodes of c's — and the config's
 * stage cut where it gives one. The mesh priced is the config's whatever
 * the planner would choose; a plan that does not fit c's memory is still
 * priced (out->fits says). TL_ERR_CONFIG, naming the field, when the
 * config trains on another device type than c, its ranks are more than c
 * has or not whole nodes, c has no peak for its precision, or it runs what
 * the cost model does not price (an MLP recomputing or interleaved or
 * zero-bubble, as trellis plan never plans one; parallel.deterministic's
 * exact sums). The groups' links follow the config's mesh.order
 * (tl_cost_axis_strides). */
tl_status tl_plan_price_config(const struct tl_config* cfg, const tl_cluster* c, tl_plan* out);

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
