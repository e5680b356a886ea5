/* cost.h — the planner's cost model: what one training step of a GPT costs
 * on a given split (dp, tp, pp, micro-batches, schedule, ZeRO, recompute) of
 * a given cluster, in bytes per device and seconds.
 *
 * Arithmetic and activation sizes come FROM THE GRAPH, not from a formula:
 * tl_cost_model_build builds the model's training graph once, as metadata
 * (tl_model_build allocates no tensors), for one layer at micro-batch 1, and
 * sums its nodes' FLOPs and its activations' sizes per layer (io.layer_begin
 * marks where layers start), for the embedding and for the head + loss.
 * Every term is linear in the micro-batch size and every transformer layer
 * has the same shape, so one small graph prices every plan; a search never
 * rebuilds it.
 *
 * Around those measured numbers the model is analytic (REFERENCES.md):
 * - model state per device by ZeRO stage, with w + g + o bytes per
 *   parameter (bf16 mixed precision 2 + 2 + 12, fp32 4 + 4 + 8):
 *   ZeRO-0 (w+g+o)Ψ, ZeRO-1 (w+g)Ψ + oΨ/d, ZeRO-2 wΨ + (g+o)Ψ/d,
 *   ZeRO-3 (w+g+o)Ψ/d;
 * - activations: the graph's saved values per layer (fp32 there; scaled to
 *   the training dtype), tensor-parallel values split by t and the rest
 *   replicated; recomputation keeps only each layer's input (b·s·h) plus one
 *   layer's working set; the first stage holds min(p, m) micro-batches under
 *   1F1B, m under GPipe;
 * - time: arithmetic at peak × efficiency; per layer and micro-batch 4 ring
 *   all-reduces of b·s·h over tp (6 with recomputation, which re-runs the
 *   forward); b·s·h/t per stage boundary each way (Megatron's scatter/gather
 *   over tp); the gradient all-reduce over dp, 2(d-1)/d·S/β + 2(d-1)α, over
 *   the inter-node link when the dp group spans nodes (1.5x that volume for
 *   ZeRO-3's parameter gathers); the bubble (p-1)/(m+p-1) of GPipe and 1F1B.
 *   Nothing overlaps (a pessimistic and simple rule).
 * GPT only: an MLP's layers differ in shape. */
#ifndef TL_PLANNER_COST_H
#define TL_PLANNER_COST_H

#include <stdbool.h>
#include <stdint.h>

#include "core/config.h"
#include "core/dtype.h"
#include "core/status.h"
#include "planner/cluster.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Per-sequence (micro-batch 1) costs of a GPT at one sequence length, read
 * off its graph. FLOPs are executed FLOPs as the graph's nodes count them
 * (forward; backward twice the forward). Activation sizes are elements. */
typedef struct tl_cost_model {
  int n_layers, n_heads, n_embd, vocab, padded_vocab, seq;
  int64_t params_total;
  int64_t params_layer;                /* one transformer block */
  int64_t params_embed;                /* wte + wpe (the first stage) */
  int64_t params_head;                 /* wte (tied, a copy on the last stage when pp > 1) + lnf */
  double layer_fwd_flops, layer_flops; /* one block: forward; forward + backward */
  double embed_flops, head_flops;      /* forward + backward */
  double head_fwd_flops;
  /* elements one block's forward keeps for its backward, split into the
   * values tensor parallelism replicates (layer norms, residual adds, the
   * row-parallel matmul outputs) and those it shards (qkv, attention, the
   * MLP's hidden) */
  double layer_act_rep, layer_act_shard;
  double layer_input; /* elements of a block's input (b·s·h at b = 1) */
  double head_act;    /* final layer norm, logits, losses */
} tl_cost_model;

/* Builds the graph of one block of `mc` (at micro-batch 1 and `seq` tokens)
 * and fills *out. The graph is destroyed before returning. */
tl_status tl_cost_model_build(const struct tl_model_config* mc, int seq, tl_cost_model* out);

/* Bytes per parameter of weights, gradients and optimizer state. */
struct tl_state_bytes {
  double w, g, o;
};
struct tl_state_bytes tl_cost_state_bytes(tl_dtype dtype);

/* Model-state bytes on one device for `params` parameters held by the
 * device's stage (already divided by tp), ZeRO stage `zero` over d ranks. */
double tl_cost_model_state(double params, int zero, int d, struct tl_state_bytes sb);

/* One candidate split and what the cost model predicts for it. */
typedef struct tl_plan {
  int dp, tp, pp;
  int micro_batch, n_micro; /* global batch = dp * micro_batch * n_micro */
  tl_schedule_kind schedule;
  int zero;
  bool recompute;
  /* memory, bytes per device (the fuller of the first and last stage) */
  double mem_total, mem_state, mem_act, mem_reserve;
  /* time, seconds per step, and its parts (they add up to t_step) */
  double t_step, t_compute, t_bubble, t_tp, t_pp, t_dp;
  double tokens_per_s;
  double flops_per_device; /* executed FLOP/s per device (recomputation counted) */
  double mfu;              /* model FLOPs (no recomputation) / (devices × peak × t_step) */
  bool fits;               /* mem_total <= device memory */
  bool runnable;           /* `trellis train` runs it as planned today: ZeRO 0, no recompute */
} tl_plan;

/* Fills the predictions of *p (its split fields set by the caller) for a
 * global batch of `global_batch` sequences trained in `dtype`. */
void tl_cost_evaluate(const tl_cost_model* cm, const tl_cluster* c, tl_dtype dtype, tl_plan* p);

/* What takes the largest share of the plan's step: "compute", "bubble",
 * "tp comm", "pp comm" or "dp comm". */
const char* tl_plan_bound(const tl_plan* p);

#ifdef __cplusplus
}
#endif

#endif
