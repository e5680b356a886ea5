/* cost.h — the planner's cost model: what one training step of a GPT costs
 * on a given split (dp, tp, pp, micro-batches, schedule, ZeRO, recompute,
 * sequence parallelism) of a given cluster, in bytes per device and seconds.
 *
 * Arithmetic and memory come FROM THE GRAPH, not from a formula:
 * tl_cost_model_build builds the model's training graph as metadata
 * (tl_model_build allocates no tensors) at micro-batch 1 and reads off it,
 * per layer, for the embedding and for the head + loss, the FLOPs of its
 * nodes, the parameters its nodes use and what an executor running it
 * allocates (tl_exec_size: the memory plan's arena, inputs, scratch). It
 * does so for every tensor-parallel degree t that divides the heads and
 * the padded vocabulary, on the graph of t's rank 0 (the rank that also
 * holds wpe and the row-parallel biases, so the fullest) as tp's own pass
 * shards it (tl_tp_build, the trainer's call), with and without sequence
 * parallelism, and with each recomputation mode (tl_model_recompute: the
 * copies' FLOPs and the smaller arenas are the graph's). Every such
 * quantity is linear in the micro-batch size and,
 * for a pipeline stage, affine in its number of layers (the blocks have one
 * shape), so graphs of one and two blocks price every plan; a search never
 * rebuilds them. Beyond TL_COST_MAX_SHARDS degrees, t > 1 is scaled from
 * t = 1 (parameters and FLOPs by 1/t, activations by Korthikanti's
 * replicated/sharded split, as tp's pass classifies a block's values): an
 * approximation.
 *
 * What the model assumes on top (REFERENCES.md):
 * - stages: the trainer's cut (pp/stage.c: dynamic programming over layers
 *   minimising the largest forward FLOPs of a stage, embedding on the
 *   first, head on the last), reproduced exactly by tl_cost_stage_layers;
 * - model state per device by ZeRO stage, with w + g + o bytes per
 *   parameter (the papers' bf16 mixed precision 2 + 2 + 12, fp32
 *   4 + 4 + 8 — the trainer's fp32 weights, gradients and two AdamW
 *   moments): ZeRO-0 (w+g+o)Ψ, ZeRO-1 (w+g)Ψ + oΨ/d, ZeRO-2
 *   wΨ + (g+o)Ψ/d, ZeRO-3 (w+g+o)Ψ/d, Ψ the stage's parameters on the
 *   rank; for a graph the trainer runs (fp32 gradients in either
 *   precision), what dp/ allocates instead: Ψ/d as the buckets' chunks
 *   round it (tl_dp_shard_elems), ZeRO-2's staging, two bucket buffers
 *   and the whole gradients of its late parameters, ZeRO-3's unit slots,
 *   and under trellis's bf16 the parameters as ZeRO 1-3 hold them: bf16
 *   working parameters (ZeRO 1-2 the whole stage's, ZeRO-3 its unit
 *   slots) and the fp32 master sharded with
 *   the moments — 16, 6 + 12/d, 2 + 16/d, 16/d bytes a parameter, Megatron-
 *   LM's distributed optimizer (tl_dp_buckets_bytes);
 * - activations: one executor per micro-batch in flight on the stage, as
 *   the trainer holds them (GPipe m; 1F1B min(p - s, m) on stage s), each
 *   with its own arena (what its forward keeps for its backward), its
 *   inputs and its collectives' scratch, plus one transient arena they
 *   share (what lives within a pass: graph/memplan.h); fp32 in the graph,
 *   scaled to the training dtype. Under full recomputation the own arena
 *   keeps each layer's input (b·s·h, /t with sequence parallelism), under
 *   selective it drops each attention's log-sum-exp (the kernels keep no
 *   T x T probabilities in any mode);
 * - the fullest stage is the device's figure (first and last stages hold
 *   the embedding and head and, under 1F1B, differ in micro-batches held);
 * - time: arithmetic of the slowest stage at peak × efficiency, its
 *   attention kernels' FLOPs at peak × attention_efficiency (the spec's
 *   attention_efficiency_table at the model's head dimension and sequence
 *   length where it has one) and, where the
 *   cluster carries a GEMM table, each matrix product at the table's
 *   efficiency for its shape at the plan's micro-batch; per layer
 *   and micro-batch 4 all-reduces of b·s·h over tp (6 with full
 *   recomputation, which re-runs the forward; sequence parallelism moves
 *   the same bytes as reduce-scatters and all-gathers, plus 2 all-gathers
 *   per layer re-gathering matmul inputs in the backward — full
 *   recomputation's own gathers serve those — and, once a step,
 *   the packed LayerNorm gradients' all-reduce); b·s·h/t per stage boundary
 *   each way (Megatron's scatter/gather over tp, as the trainer sends it;
 *   the receivers' all-gather within the node is not priced), each on its
 *   own boundary's link, for the stage whose two cost the most
 *   (tl_cost_pp_sends), and once a step the tied embedding's gradient
 *   all-reduced between the first and last stages, exposed (each tp
 *   rank's rows of it, or under ZeRO 2-3 in pieces its dp x cp shard of
 *   them: tl_plan.t_tied, part of t_pp); the gradient
 *   all-reduce
 *   over dp, 2(d-1)/d·S/β + kα (k = 2(d-1) messages of NCCL's ring on
 *   GPUs, 2 log2 d of MPICH's halving and doubling on CPUs; the same for
 *   every all-reduce), over the inter-node link when the dp
 *   group spans nodes, at the bandwidth of as many network cards as the
 *   group has members on a node (tl_cost_group_link; the same for a tensor-
 *   parallel group across nodes) (ZeRO-1: a reduce-scatter and, exposed after the
 *   update, an all-gather of the same total; ZeRO-2: a reduce-scatter per
 *   micro-batch; ZeRO-3 the same reduce-scatters, its parameters gathered unit
 *   by unit one ahead of the compute: tl_cost_zero3_gathers);
 *   the bubble (p-1)/(m+p-1) of GPipe and 1F1B; the optimizer's update once
 *   a step (t_opt: TL_COST_OPTIMIZER_FLOPS a parameter of the rank's at the
 *   element-wise rate, or TL_COST_OPTIMIZER_BYTES through the spec's
 *   memory_bandwidth where those take longer, as on GPUs). What
 *   overlaps: with
 *   dp_bucket_mb > 0 the gradient all-reduce runs bucket by bucket during
 *   the last micro-batch's backward (two thirds of its arithmetic), so only
 *   what that backward cannot cover, and at least the last bucket, shows;
 *   tensor- and pipeline-parallel messages do not overlap (the trainer's
 *   are blocking). On a CPU cluster whose ranks outnumber a node's cores
 *   (cores_per_node) the micro-batches and the bubble are priced over pp's
 *   timeline instead, each stretch at the share of the cores its computing
 *   ranks get (cost_share.c: the spec's measured shared_core_speed, else
 *   the cores' ideal share): an idle stage lends its share to the busy
 *   ones (on one node; over several, each node holds whole stages and the
 *   bubble stays idle time), and a plan on fewer ranks than the spec
 *   measured gives each a larger share.
 * Context parallelism (tl_plan.cp): a cost model per degree, read off
 * rank 0's graphs as tp/cp_split.c splits them (seq / cp tokens a rank,
 * attention around the ring: its FLOPs, arenas and scratch the graph's);
 * gradients and ZeRO's shards over dp x cp (tl_cost_data_link); the ring's
 * transfers by tl_cost_ring, each hop beside the attention of the block in
 * hand, the backward's gradients exposed.
 * An MLP's layers differ in shape: its costs are per layer and per range of
 * layers (a stage), read off its whole graph at every tensor-parallel
 * degree that splits each of its linear layers; each stage is priced from
 * its own layers and
 * the slowest sets the pace; no sequence parallelism, no recomputation. */
#ifndef TL_PLANNER_COST_H
#define TL_PLANNER_COST_H

#include <stdbool.h>
#include <stdint.h>

#include "core/config.h"
#include "core/dtype.h"
#include "core/status.h"
#include "graph/model.h"
#include "planner/cluster.h"
#include "pp/schedule.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Kinds of pipeline stage, as bits: the first stage embeds the tokens, the
 * last holds the head and the loss; one stage alone does both. */
enum { TL_COST_STAGE_EMBED = 1, TL_COST_STAGE_HEAD = 2 };

/* ZeRO-2 on a stage with no late parameters: the matrix of its largest
 * backward node that it may write in pieces (dp/buckets.h's
 * tl_dp_solo_candidates, one alone): its elements (0: none), a row's
 * elements, per sequence the rows a piece's gradient columns are packed
 * for (the linear layer's tokens; 0 for an embedding's table), and the
 * staging that remains without it. */
struct tl_cost_solo {
  double elems, cols, m, after;
};

/* One pipeline stage of k layers on a device (tensor-parallel rank 0), per
 * sequence of its micro-batch where it says so, each quantity affine in k:
 * x(k) = x + (k - 1) x_layer. */
struct tl_cost_stage_shape {
  double params, params_layer; /* elements of the stage's flat parameter buffer */
  /* of those, tensors whole on every tp rank (LayerNorms), whose gradients
   * sequence parallelism sums over the group from a packed buffer */
  double replicated, replicated_layer;
  /* ZeRO's late parameters on the stage, elements (the same at any number
   * of blocks): read by another stage too (the tied embedding), read by
   * several of the stage's nodes; and the most early gradient elements one
   * backward node writes (ZeRO-2's staging) */
  double shared, multi, staging;
  /* of multi (one stage holds both its readers) or of shared (over a
   * pipeline), the elements ZeRO 2 and 3 take in pieces of rows (the tied
   * embedding: dp/buckets.h), a row's elements, and per sequence the
   * temporaries' elements a row of a piece takes (graph/exec.h's
   * tl_exec_piece_bytes; none today: the head reads its columns of the
   * output gradient in place) and the elements of the embedding's output */
  double pieced, piece_cols, piece_m, piece_emb;
  double unit_max; /* ZeRO-3: the most early parameters one unit (block, embedding, head) holds */
  /* ZeRO-3 on a stage of both the embedding and the head: unit_max less
   * the larger of their units, the room for the piece slots of the tied
   * embedding read in pieces (dp/buckets.h's tl_dp_piece_rows) */
  double piece_room;
  /* ZeRO-3 on a stage of the embedding or the head alone: unit_max less
   * its unit, the room where the tied embedding (shared) is gathered with
   * that unit when it fits (dp/buckets.h's unit_late), or where it is read
   * in pieces, the room for their slots; on a stage of both, piece_room,
   * where the table kept whole is gathered with both units (one slot).
   * 0 on a tensor-parallel degree scaled from another: a guess either way */
  double late_room;
  double arena, arena_layer; /* bytes of one executor's own arena, per sequence */
  double io;                 /* bytes of its inputs and scratch, per sequence */
  /* bytes of the transient arena the stage's executors share (graph/memplan.h),
   * per sequence, and the part of it that does not grow with the batch (a
   * bf16 graph's fp32 copies of one node's parameters: tl_exec_bytes) */
  double transient, transient_layer, transient_fixed;
  double transient_fixed_pieced; /* the same where ZeRO-3 reads `pieced` in pieces */
  /* the matrix ZeRO-2 may write in pieces at one block (solo) and at more
   * (solo_k: its blocks' largest nodes are alike, so the staging that
   * remains is another block's); none on a degree scaled from another */
  struct tl_cost_solo solo, solo_k;
};

/* One matrix product shape of a graph range, per sequence: (m x k) times
 * (k x n), `count` times; `grows` says which of m (1) or k (2) holds the
 * micro-batch's token rows, so that it grows with the micro-batch (0:
 * neither). A forward matmul is one, its backward two (the input's gradient
 * (m, k, n) and the weight's (k, n, m)). `pass`: TL_COST_GEMM_*. */
enum { TL_COST_GEMM_FWD, TL_COST_GEMM_BWD, TL_COST_GEMM_AGAIN };
struct tl_cost_gemm {
  double m, n, k;
  signed char grows, pass;
  short count;
};
#define TL_COST_MAX_GEMMS 32
struct tl_cost_gemms {
  int n;
  struct tl_cost_gemm g[TL_COST_MAX_GEMMS];
};

/* An MLP's layers differ in shape, so its costs are per layer and per range
 * of layers [a, b) (a stage), read off the whole graph of rank 0 at one
 * sequence; tl_cost_range_index(a, b) indexes the ranges. */
#define TL_COST_MLP_RANGES (TL_MLP_MAX_LAYERS * (TL_MLP_MAX_LAYERS + 1) / 2)
struct tl_cost_range {
  double params, arena, io; /* as tl_cost_stage_shape, for the stage of layers [a, b) */
  double shared, multi, staging, unit_max;
  double transient, transient_fixed;
  struct tl_cost_solo solo;
};
struct tl_cost_mlp_layer {
  double fwd_flops, flops; /* per sequence */
  /* its matrix products (a linear layer: its forward and the backward's two) */
  int n_gemm;
  struct tl_cost_gemm gemm[4];
  /* its tensor-parallel all-reduces (count; elements per sequence, summed) */
  double n_all_reduce, all_reduce_elems;
  double out_elems; /* elements per sequence a rank sends to the next stage after this layer */
};

/* Per-device costs at tensor-parallel degree tp, with or without sequence
 * parallelism, at micro-batch 1: FLOPs as the rank's graph counts them
 * (forward; forward + backward) and the four kinds of stage. */
struct tl_cost_shard {
  int tp;
  bool sp;
  tl_recompute recompute; /* the graph's recomputation (tl_model_recompute) */
  bool split;             /* its backward in two passes (zero-bubble: tl_graph_split_weight) */
  bool from_graph;        /* read off rank 0's graph; false: scaled from tp = 1 */
  double layer_fwd_flops, layer_flops, embed_fwd_flops, embed_flops, head_fwd_flops, head_flops;
  double layer_recompute_flops; /* of layer_flops, the recomputation's copies */
  /* of a block's FLOPs, its attention kernels' (forward and backward; those
   * in the forward; those the recomputation's copies re-run), priced at the
   * cluster's attention efficiency (tl_cluster_attention_efficiency) */
  double layer_attn_flops, layer_attn_fwd_flops, layer_attn_again_flops;
  /* the matrix products of a block, of the embedding and of the head */
  struct tl_cost_gemms layer_gemms, embed_gemms, head_gemms;
  struct tl_pp_costs zb_costs; /* a block's passes, as the trainer builds zero-bubble's lists */
  struct tl_cost_stage_shape stage[4]; /* indexed by TL_COST_STAGE_* bits */
  /* MLP only: per layer, and per range of layers */
  struct tl_cost_mlp_layer mlp_layer[TL_MLP_MAX_LAYERS];
  struct tl_cost_range mlp_range[TL_COST_MLP_RANGES];
};

static inline int tl_cost_range_index(int a, int b) { /* 0 <= a < b <= TL_MLP_MAX_LAYERS */
  return (b - 1) * b / 2 + a;
}

#define TL_COST_MAX_SHARDS 192

/* Per-sequence (micro-batch 1) costs of a GPT or an MLP at one sequence
 * length, read off its graph. FLOPs are executed FLOPs as the graph's nodes
 * count them (forward; backward twice the forward). Activation sizes are
 * elements. For an MLP (kind TL_MODEL_MLP) the shards' mlp_* tables hold
 * the costs; the GPT's per-block fields are zero (n_heads 0). */
typedef struct tl_cost_model {
  tl_model_kind kind;
  int n_layers, n_heads, n_embd, vocab, padded_vocab, seq;
  /* the context-parallel degree its shards' graphs are split for (1: none):
   * each rank's graph holds seq / cp tokens of a sequence and computes
   * attention around the ring (tp/cp.h); the model-wide figures below
   * (FLOPs, activations, layer_input) stay the whole sequence's */
  int cp;
  /* a Llama's key/value heads and MLP width (a GPT's: n_heads, 4 n_embd),
   * which tensor parallelism must divide too */
  int n_kv_heads, ffn_hidden;
  int64_t params_total;
  tl_dtype precision;   /* of the graphs the costs were read off (tl_cost_model_build_precision) */
  int64_t params_layer; /* one transformer block */
  int64_t params_embed; /* wte + wpe (the first stage) */
  /* the LM head's matrix (a Llama's own; tied: wte's copy on the last
   * stage when pp > 1) + the final norm */
  int64_t params_head;
  double layer_fwd_flops, layer_flops; /* one block: forward; forward + backward */
  double embed_flops, head_flops;      /* forward + backward */
  double head_fwd_flops;
  /* elements one block's forward writes, split into the values tensor
   * parallelism replicates (layer norms, residual adds, the row-parallel
   * matmul outputs) and those it shards (qkv, attention, the MLP's hidden):
   * Korthikanti's accounting (tests/planner/cost_test.cc) */
  double layer_act_rep, layer_act_shard;
  double layer_input; /* elements of a block's input (b·s·h at b = 1) */
  /* FLOPs recomputation adds to one block's forward + backward, by mode
   * (the copies tl_model_recompute places in the backward; tp = 1) */
  double layer_recompute_flops[3];
  double head_act; /* final layer norm, logits, losses */
  /* per device, by tensor-parallel degree (shards[0] is tp = 1) */
  struct tl_cost_shard shards[TL_COST_MAX_SHARDS];
  int n_shards;
} tl_cost_model;

/* Builds the graphs of one and two blocks of `mc` (at micro-batch 1 and
 * `seq` tokens) for tp = 1 and every tensor-parallel degree dividing the
 * heads and the padded vocabulary, and fills *out. An MLP: its whole graph,
 * for tp = 1 and every degree that splits each of its linear layers
 * (tl_cost_has_shard says which). The graphs are destroyed before
 * returning. */
/* Whether a tensor-parallel degree splits the transformer `mc` (the
 * heads, the padded vocabulary; a Llama's key/value heads and MLP width):
 * the degrees the config accepts. */
bool tl_cost_tp_divides(const struct tl_model_config* mc, int padded_vocab, int tp);

tl_status tl_cost_model_build(const struct tl_model_config* mc, int seq, tl_cost_model* out);

/* The same, with the graphs in `precision` (tl_graph_set_precision) as
 * `trellis train` runs them under train.precision: TL_BF16 reads bf16
 * activations, their fp32 statistics and the executor's fp32 copies off
 * the memory plan, and keeps the model state as the trainer does (fp32
 * weights, gradients and moments: 16 bytes a parameter, sharded by ZeRO as
 * dp/ cuts it). tl_cost_model_build is TL_F32: evaluated in TL_BF16, its
 * graphs' activation bytes are halved and the state is the ZeRO paper's
 * 2 + 2 + 12 (the published accounting, which the paper tests hold it to). */
tl_status tl_cost_model_build_precision(const struct tl_model_config* mc, int seq,
                                        tl_dtype precision, tl_cost_model* out);

/* The same, reading graphs only for the tensor-parallel degrees up to
 * max_tp (0: all): the search of a cluster whose tp stays within a node
 * (its devices_per_node) prices no other; a degree beyond is then scaled
 * from tp = 1, as past TL_COST_MAX_SHARDS. An MLP's are all read. */
tl_status tl_cost_model_build_tp(const struct tl_model_config* mc, int seq, tl_dtype precision,
                                 int max_tp, tl_cost_model* out);

/* The same, each rank's graphs split for cp context-parallel ranks (cp >=
 * 2; rank 0's, whose work is every rank's under the load-balanced split):
 * a GPT or Llama whose seq 2 cp divides. */
tl_status tl_cost_model_build_cp(const struct tl_model_config* mc, int seq, tl_dtype precision,
                                 int max_tp, int cp, tl_cost_model* out);

/* Whether costs at tp were read off a graph (an MLP plans only those). */
bool tl_cost_has_shard(const tl_cost_model* cm, int tp);

/* The per-device costs at tp (sequence parallelism only counts when
 * tp > 1) with recomputation `rc` and, with `split`, the backward in the
 * zero-bubble schedule's two passes: those read off the graph, else scaled
 * from tp = 1 into *tmp. An MLP's are of one-pass graphs without
 * recomputation. */
const struct tl_cost_shard* tl_cost_shard_of(const tl_cost_model* cm, int tp, bool sp,
                                             tl_recompute rc, bool split,
                                             struct tl_cost_shard* tmp);

/* Layers per stage (layers[0 .. pp); pp is the virtual stages, pp * v, of
 * an interleaved plan) as the trainer cuts the graph of a rank at tp (pp/stage.c's tl_pp_partition
 * without layers given): minimising the largest 3 x forward FLOPs of a stage, embedding on the
 * first, head on the last, every stage at least one layer; ties broken as
 * there, so the cut is the same. TL_ERR_CONFIG when pp > layers. */
tl_status tl_cost_stage_layers(const tl_cost_model* cm, int tp, bool sp, int pp, int* layers);

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
  /* context parallelism: each sequence split over cp ranks (0 or 1: none),
   * priced on a cost model built for that cp (tl_cost_model_build_cp).
   * Gradients and ZeRO's shards run over the data group dp x cp */
  int cp;
  int micro_batch, n_micro; /* global batch = dp * micro_batch * n_micro */
  tl_schedule_kind schedule;
  int zero;
  tl_recompute recompute;
  bool sequence_parallel; /* with tp > 1: LayerNorm and residual regions split by tokens */
  /* > 0: the data-parallel all-reduce runs in buckets of this many MiB during
   * the last micro-batch's backward, as trellis's trainer does (its
   * parallel.bucket_mb); 0: after the backward (Megatron-LM before its
   * --overlap-grad-reduce of 2023, as in the runs of Narayanan et al. 2021) */
  double dp_bucket_mb;
  /* the dtype the data-parallel reduction moves (parallel.grad_reduce):
   * TL_F32 (0, the default) or TL_BF16 — half the bytes, and a bf16 image
   * of the buckets on each rank (dp/buckets.h) */
  tl_dtype grad_reduce;
  /* price every data-parallel collective exposed — the buckets' and
   * ZeRO-3's gathers as if no compute ran beside them — to check the model
   * against published runs that overlapped nothing; trellis always
   * overlaps them (false, the default) */
  bool no_overlap;
  /* price full recomputation as Megatron-LM runs it — each block's whole
   * forward again, where trellis recomputes only what a backward reads —
   * to check the model against published runs; trellis does not run it */
  bool recompute_whole_forward;
  /* the ranks' layout (mesh.order, innermost first: core/mesh.h), which
   * sets the stride of each axis's groups and so the links they cross;
   * not a permutation of the four axes: the first three as a permutation
   * of dp, tp and pp with cp just outside tp, else (a zeroed plan: the
   * search's) the default {tp, cp, dp, pp} */
  tl_axis order[TL_N_AXES];
  /* memory, bytes per device: the fullest stage's (mem_stage), state and
   * activations as the trainer's allocator counts them, plus the reserve
   * (the spec's reserve_bytes and its allocator_overhead of the two) */
  double mem_total, mem_state, mem_act, mem_reserve;
  int mem_stage;
  /* time, seconds per step, and its parts (they add up to t_step): t_opt
   * is the optimizer's update once a step (tl__cost_optimizer_seconds) */
  double t_step, t_compute, t_bubble, t_tp, t_pp, t_dp, t_opt;
  /* of t_pp, what is not the micro-batches' sends: the tied embedding's
   * gradient summed over the pipeline's first and last stages once a step */
  double t_tied;
  /* the context-parallel ring's transfers a step leaves exposed (part of
   * t_step), and all of them with nothing hidden */
  double t_cp, c_cp;
  /* the data-parallel communication a step carries, seconds with nothing
   * hidden (t_dp is what of it shows: never below c_dp less the compute it
   * can run beside) */
  double c_dp;
  double tokens_per_s;
  double flops_per_device;     /* executed FLOP/s per device (recomputation counted) */
  double mfu;                  /* model FLOPs (no recomputation) / (devices × peak × t_step) */
  bool fits;                   /* mem_total <= device memory */
  bool runnable;               /* `trellis train` runs it as planned */
  struct tl_pp_costs zb_costs; /* zero-bubble: the passes' costs its lists were built with */
  /* the interleaved schedule's model chunks per pipeline rank (its
   * schedule.virtual_stages; 0 or 1: one). Its `layers` (tl_cost_evaluate,
   * tl_cost_stage_memory) are then per chunk, pp * v of them: chunk c of
   * stage s is entry c * pp + s */
  int virtual_stages;
} tl_plan;

/* The plan's context-parallel degree (1: none), its data group (dp x cp:
 * what gradients are reduced and ZeRO shards over) and its devices. */
static inline int tl_plan_cp(const tl_plan* p) {
  return p->cp > 1 ? p->cp : 1;
}
static inline int tl_plan_data(const tl_plan* p) {
  return p->dp * tl_plan_cp(p);
}
static inline int64_t tl_plan_devices(const tl_plan* p) {
  return (int64_t)p->dp * p->tp * p->pp * tl_plan_cp(p);
}

/* Chunks per pipeline rank of plan p: virtual_stages under the interleaved
 * schedule, else 1. */
static inline int tl_plan_chunks(const tl_plan* p) {
  return p->schedule == TL_SCHEDULE_INTERLEAVED && p->virtual_stages > 1 ? p->virtual_stages : 1;
}

/* Seconds per sequence of `n` matrix products at micro-batch b on a device
 * of c (peak FLOP/s `peak`): each at the cluster's GEMM table's efficiency
 * for its shape (tl_cluster_gemm_efficiency). `whole`: a block's forward
 * products run again in place of the recomputation's copies (Megatron-LM's
 * full recomputation). */
double tl_cost_gemm_seconds(const tl_cluster* c, double peak, const struct tl_cost_gemm* g, int n,
                            int b, bool whole);

/* Their FLOPs per sequence, counted as tl_cost_gemm_seconds counts them. */
double tl_cost_gemm_flops(const struct tl_cost_gemm* g, int n, bool whole);

/* Seconds for an all-reduce of `bytes` over n ranks on `link` of cluster c
 * (the formula above; 0 for n <= 1). */
double tl_cost_all_reduce(const tl_cluster* c, double bytes, int n, const struct tl_link* link);

/* The link a collective over n ranks `stride` apart (tl_cost_axis_strides;
 * in the default layout, tensor-parallel fastest, then data-parallel: tp 1,
 * dp tp)
 * runs on: the node's when all n share one; else the inter-node link with
 * the bandwidth of the group's k members on a node together, k x the
 * per-device figure (at most the node's own): rail-optimised nodes give
 * every device its own network card, and NCCL's rings and trees cross
 * nodes through all of the group's cards at once, so a group of 8 per node
 * reduces at 8 cards' rate and one member per node at one card's. */
struct tl_link tl_cost_group_link(const tl_cluster* c, int n, int stride);

/* The plan's layout, innermost first: p->order (tl_plan.order says how
 * three axes are read), or the default {tp, cp, dp, pp}. */
void tl_cost_plan_order(const tl_plan* p, tl_axis order[TL_N_AXES]);

/* The rank distance between neighbours of each axis's groups in the plan's
 * layout (p->order): the product of the sizes of the axes inside it (the
 * default order: tp 1, cp tp, dp tp x cp, pp dp x tp x cp). */
void tl_cost_axis_strides(const tl_plan* p, int* tp, int* dp, int* pp);
int tl_cost_axis_stride(const tl_plan* p, tl_axis axis);

/* The link of the plan's data group (dp x cp ranks; dp's alone when cp is
 * 1), as tl_cost_group_link: the node's when every member shares one, else
 * the inter-node link at the rate of the members a node holds. */
struct tl_link tl_cost_data_link(const tl_cluster* c, const tl_plan* p);

/* Seconds the context-parallel ring leaves exposed in one micro-batch of
 * `layers` blocks at micro-batch b (exposed; *all: with nothing hidden):
 * each block's forward passes its key/value block cp - 1 times, each send
 * beside the attention of the block in hand (a cp-th of the layer's), and
 * again where recomputation re-runs attention; its backward passes them
 * cp - 1 times beside the attention's backward and their gradients cp
 * times after it, exposed (tp/cp_attention.c). k and v in the training's
 * dtype (2 bytes under bf16, as the ring moves them), dk and dv in fp32,
 * over the cp group's link (the node's, or the inter-node link at one
 * card's rate when the group spans nodes). attn_fwd, attn_bwd: one block's
 * attention seconds per sequence, forward and backward. */
double tl_cost_ring(const tl_cluster* c, const tl_cost_model* cm, const tl_plan* p, int layers,
                    double attn_fwd, double attn_bwd, tl_dtype dtype, double* all);

/* The link between pipeline stages s and s + 1 (s = pp - 1: the last and
 * the first, the interleaved schedule's next chunk): the inter-node one when
 * some rank of stage s has its neighbour on another node, else the node's. */
const struct tl_link* tl_cost_pp_boundary_link(const tl_cluster* c, const tl_plan* p, int s);
#define TL_COST_PP_MAX_NODE 1024 /* devices a node, beyond which any boundary past one counts */

/* Seconds a micro-batch's pipeline sends of `bytes` each cost the stage
 * that spends the most on them: its activation ahead and its gradient
 * behind, each on its own boundary's link (an end stage's two on its one
 * boundary). Interleaved over v chunks a rank, v of each on every
 * boundary, and v - 1 on the wrap from the last stage's chunk to the first
 * stage's next (a micro-batch leaves the last chunk for the loss, not the
 * wrap), which is the end stages' other side. An MLP's stages (cost_mlp.c)
 * pay the same way, each side the bytes of its own boundary's width. */
double tl_cost_pp_sends(const tl_cluster* c, const tl_plan* p, double bytes);

/* Seconds for an all-gather assembling `bytes` on each of n ranks: half an
 * all-reduce's bandwidth term, (n-1) ring messages on GPUs, log2 n recursive
 * doubling steps on CPUs; the bandwidth the link's times the cluster's
 * collective_bandwidth.all_gather (1 unless measured). A reduce-scatter of
 * `bytes` on each rank the same at its own share; a point-to-point send of
 * `bytes`, one message at send_recv's share. */
double tl_cost_all_gather(const tl_cluster* c, double bytes, int n, const struct tl_link* link);
double tl_cost_reduce_scatter(const tl_cluster* c, double bytes, int n, const struct tl_link* link);
double tl_cost_send(const tl_cluster* c, double bytes, const struct tl_link* link);

/* `count` ZeRO-3 units in a row alike (the embedding, blocks, the head; an
 * MLP's layer): the parameters each gathers (elements) and its seconds in
 * one micro-batch's forward and backward. */
struct tl_cost_unit {
  double params, fwd, bwd;
  int count;
  /* of params, a late parameter gathered with the unit (the tied
   * embedding: dp/buckets.h's unit_late), one the same for every unit
   * that gathers it: not among what the slots and buckets are sized from */
  double late;
};

/* The seconds ZeRO-3's parameter gathers leave exposed on pipeline stage s
 * of plan p, as dp/units.c runs them over the units u[0..n) spell out
 * (forward order): the late parameters (`late` elements: read by several
 * nodes or another stage) whole at the step's start and the first unit,
 * then each unit gathered one ahead into the other of two slots while the
 * current one computes — in every micro-batch's forward (unit i behind
 * i - 1's forward) and again in its backward (unit i behind i + 1's
 * backward), so only what a unit's compute cannot cover shows. A pass
 * finds the two units the pass before it ran still in the slots (the last
 * two after a forward, the first two after a backward): a backward after a
 * forward gathers neither, a forward after a forward (GPipe's, 1F1B's
 * warm-up) its first unit unhidden. On the wire in `precision`: 2 bytes a
 * parameter in bf16 training (the shards rounded to bf16, as a bf16 graph
 * reads them), 4 in fp32. */
double tl_cost_zero3_gathers(const tl_cluster* c, const tl_plan* p, int s,
                             const struct tl_cost_unit* u, int n, double late,
                             const struct tl_link* link, tl_dtype precision); /* n runs of units */

/* Fills the predictions of *p (its split fields set by the caller) trained
 * in `dtype`. `layers` is the stage cut (tl_cost_stage_layers; a search
 * computes it once per mesh), or NULL to compute it here. */
void tl_cost_evaluate(const tl_cost_model* cm, const tl_cluster* c, tl_dtype dtype,
                      const int* layers, tl_plan* p);

/* Bytes on a device of pipeline stage `stage` of plan p (tensor-parallel
 * rank 0) with the stage cut `layers`: model state (parameters, gradients
 * and optimizer state by ZeRO stage; with sequence parallelism the packed
 * LayerNorm gradients; the trainer's norm scalar) and activations (an
 * executor per micro-batch in flight). */
void tl_cost_stage_memory(const tl_cost_model* cm, tl_dtype dtype, const tl_plan* p,
                          const int* layers, int stage, double* state, double* act);

/* Element-wise FLOPs a parameter of the optimizer's step: AdamW's update
 * (kernels/cpu/adamw.c: 16), the gradient norm and clipping (3); priced at
 * the spec's element-wise rate, once a step (tl_plan.t_opt). Under ZeRO 2
 * and 3 zeroing the gradients' shard as the step begins adds
 * TL_COST_ZEROING_FLOPS; under ZeRO 0 and 1 no pass zeroes them (the
 * step's first backward node to write each writes it: graph/exec.h's
 * grads_fresh; the few a product does not write — norms, biases, an
 * untied embedding's table — are zeroed as their node runs, not priced) */
#define TL_COST_OPTIMIZER_FLOPS 19
#define TL_COST_ZEROING_FLOPS 1
/* Bytes a parameter of the same step moves through the device's memory:
 * AdamW reads the weight, its gradient and both moments and writes the
 * weight and the moments (7 x 4), the norm reads the gradient (4); under
 * ZeRO 2 and 3 zeroing writes it (TL_COST_ZEROING_BYTES). With the spec's
 * memory_bandwidth the step takes the longer of these bytes and the FLOPs
 * above (an H100 moves 32 bytes in the time it does ~18,000 bf16 FLOPs:
 * there the bytes set it) */
#define TL_COST_OPTIMIZER_BYTES 32
#define TL_COST_ZEROING_BYTES 4

/* What takes the largest share of the plan's step: "compute", "bubble",
 * "tp comm", "cp comm", "pp comm", "dp comm" or "optimizer". */
const char* tl_plan_bound(const tl_plan* p);

#ifdef __cplusplus
}
#endif

#endif
