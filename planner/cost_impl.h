/* cost_impl.h — what planner/cost.c and planner/cost_mlp.c share: the
 * costs read off a range of a graph, ZeRO's state, the data-parallel time,
 * the schedule's micro-batches in flight, and the MLP's half of the model
 * (its layers differ in shape, so it is priced per layer and per stage). */
#ifndef TL_PLANNER_COST_IMPL_H
#define TL_PLANNER_COST_IMPL_H

#include "planner/cost.h"
#include "tp/tp.h"

/* Which forward region node i of g (forward or backward) belongs to. */
int tl__cost_forward_index(const tl_graph* g, int i);

/* What forward nodes [begin, end) of a rank's graph g (sharded as sh) cost
 * a device at micro-batch 1. */
struct tl__cost_range {
  /* elements of the parameters the nodes use (each once), and of those
   * whose gradients sequence parallelism sums over the group */
  double params, replicated;
  /* ZeRO's late gradients (dp/layout.h): parameters other stages read too
   * (the tied embedding), ones several nodes of the range read; and the
   * staging ZeRO-2 needs (dp/buckets.h), in elements */
  double shared, multi, staging;
  /* of multi (or of shared, over a pipeline), the parameters whose
   * gradients ZeRO 2 and 3 take in pieces of rows (the tied embedding: graph/exec.h's
   * tl_exec_can_piece): their elements, a row's elements, the temporaries' elements a row of a
   * piece takes (tl_exec_piece_bytes; none today: the head reads its columns of the output
   * gradient in place), and the elements of the embedding's output (ZeRO-3 adds each piece's
   * from a copy) */
  double pieced, piece_cols, piece_m, piece_emb;
  double arena, io;              /* bytes an executor of the range allocates */
  double transient;              /* bytes of the transient arena its executors share */
  double transient_fixed;        /* of which no part grows with the batch (tl_exec_bytes) */
  double transient_fixed_pieced; /* the same where ZeRO-3 reads `pieced` in pieces */
  double fwd_flops, flops;       /* forward; forward + backward */
  double again_flops;            /* of flops, nodes run again in the backward */
  double attn_flops, attn_fwd_flops, attn_again_flops; /* of those, the attention kernels' */
  struct tl_cost_solo solo; /* ZeRO-2's matrix in pieces on a stage of no late parameters */
};

tl_status tl__cost_range(const tl_graph* g, const tl_tp_shard* sh, int begin, int end,
                         struct tl__cost_range* out);

/* The matrix products of forward nodes [begin, end) and their backward
 * and recomputed copies, per sequence of a graph built at micro-batch
 * `per` (at most `max` distinct shapes; the rest dropped). */
tl_status tl__cost_gemms(const tl_graph* g, int begin, int end, int per, struct tl_cost_gemm* out,
                         int* n_out, int max);

/* The model state a stage of `params` elements holds on a data-parallel
 * rank (planner/cost.c). */
/* What an activation byte of cm's graphs costs in dtype (1: built in it;
 * 1/2: an fp32 graph priced in bf16), and the dtype the model state is
 * kept in (fp32 for trellis's bf16). */
double tl__cost_act_scale(const tl_cost_model* cm, tl_dtype dtype);
tl_dtype tl__cost_state_dtype(const tl_cost_model* cm, tl_dtype dtype);

/* The rows a piece of the tied embedding's `pieced` elements (rows of
 * cols) ZeRO 2 and 3 cut on a stage of `early` early parameters, and in
 * *ops the temporaries its pieces take (a piece's packed columns of the
 * micro-batch's `tokens` rows, or ZeRO-3's copy of the embedding's `emb`
 * outputs); 0 where the trainer keeps it whole: those would hold as much
 * as its gradient at a bucket's rows (launcher/train/trainer_pieces.c's
 * kept_whole). Under ZeRO-3 over a group fewer rows where two pieces fit
 * `room` (the stage shape's piece_room: dp/buckets.h's tl_dp_piece_rows). */
double tl__cost_piece_rows(const tl_plan* p, double early, double pieced, double cols,
                           double tokens, double emb, double room, double* ops);

/* ZeRO-2 on a stage of n parameters with no late ones, staging `staging`:
 * the rows a piece where writing the matrix `so` in pieces holds less
 * (dp/buckets.h's tl_dp_solo_pieces_pay at the plan's micro-batch,
 * buckets and dtypes), with the pieces' temporaries in *ops; 0 where it is
 * staged whole. */
double tl__cost_solo_rows(const tl_plan* p, tl_dtype precision, double n, double staging,
                          const struct tl_cost_solo* so, double* ops);
/* dtype: the state's (tl__cost_state_dtype); precision: the training's,
 * under which ZeRO 1-3 keep bf16 working parameters (dp/buckets.h);
 * pieced, cols: of late and multi, the elements ZeRO 2 and 3 take in
 * pieces of rows of cols elements, rows a piece (0: kept whole) and ops
 * the bytes of the pieces' temporaries (tl__cost_piece_rows); room: the
 * unit slots' tail the piece slots may lie in (the stage shape's
 * piece_room, or late_room where another stage holds the table too);
 * late_in_units: tl__cost_late_in_units */
double tl__cost_zero_state(const tl_plan* p, tl_dtype dtype, tl_dtype precision, double params,
                           double late, double multi, double staging, double unit_max,
                           double pieced, double cols, double rows, double ops, double room,
                           double late_in_units);
/* ZeRO-3: the tied embedding's elements a stage of kind x gathers with
 * its embedding's or head's unit (fitting the slot's unused tail; on a
 * stage of both, with each, where the stage has one slot) rather than
 * whole for the step; 0: none, or it is read in pieces (dp/buckets.h's
 * unit_late). */
double tl__cost_late_in_units(const tl_plan* p, const struct tl_cost_stage_shape* x, bool in_pieces,
                              bool one_slot);

/* The buckets a stage of `elems` gradients is reduced in (units: its
 * ZeRO-3 units, each at least a bucket): each moves at its own size's
 * rate (cost_comm.c). */
double tl__cost_dp_buckets(const tl_plan* p, double elems, int units);

/* The data-parallel communication a step leaves exposed (planner/cost.c);
 * units: the fullest stage's ZeRO-3 units (each a bucket at least). */
double tl__cost_dp_seconds(const tl_cluster* c, const tl_plan* p, double grads, int units,
                           const struct tl_link* link, double comp, tl_dtype dtype);

/* What of the data-parallel communication no compute can hide
 * (cost_comm.c): the collectives take their turns on the one link, each
 * pass's behind that pass's compute at most. comp: one micro-batch's
 * compute; zero3_all: ZeRO-3's gathers of the step with nothing hidden. */
double tl__cost_dp_floor(const tl_cluster* c, const tl_plan* p, double grads,
                         const struct tl_link* link, double comp, double zero3_all, tl_dtype dtype);

/* Micro-batches whose activations stage s holds at once: pp's schedule's. */
int tl__cost_in_flight(const tl_plan* p, const struct tl_cost_shard* sh, int s);

/* cost_share.c: how much faster than the spec's rates a rank computes
 * while all the plan's ranks do (1 unless the cluster's ranks share CPU
 * cores and the plan has fewer of them on a node than the spec measured) */
double tl__cost_core_speed(const tl_cluster* c, const tl_plan* p);
/* Whether the plan's node ranks outnumber the cores they share: then a
 * nonblocking collective, which MPI moves only while every member polls,
 * waits for members the scheduler has put aside and hides behind no
 * compute (4 ranks on 2 cores, ZeRO-3 of a 4-layer GPT: 18 ms on the link,
 * 22-43 ms waited; on 2 ranks 1.1 ms waited, the gathers hidden). */
bool tl__cost_overlap_stalls(const tl_cluster* c, const tl_plan* p);
/* Sets p's t_compute, t_tp, t_cp, t_pp and t_bubble from one micro-batch's
 * seconds on the slowest stage at the spec's rates and the schedule's
 * bubble in micro-batch times (costs: its passes' relative durations,
 * NULL for equal ones): m micro-batches plus the bubble as idle time, or
 * on shared cores the schedule's timeline with every stretch run at the
 * share its computing ranks get. */
void tl__cost_pipeline(const tl_cluster* c, tl_plan* p, const struct tl_pp_costs* costs,
                       double comp, double tp_comm, double cp_comm, double pp_comm, double bubble);
/* The optimizer's step, once a step after the pipeline: AdamW over the
 * rank's `params` (the fullest stage's shard; its data-parallel share under
 * ZeRO) and the gradient norm's and clipping's passes, about
 * TL_COST_OPTIMIZER_FLOPS (cost.h) element-wise FLOPs a parameter at the spec's
 * element-wise rate (compute_efficiency of the kernels' peak), every rank
 * updating at once; or, where the spec gives memory_bandwidth and they take
 * longer, TL_COST_OPTIMIZER_BYTES a parameter through it. */
double tl__cost_optimizer_seconds(const tl_cluster* c, const tl_plan* p, double params);

/* The MLP (planner/cost_mlp.c). */
tl_status tl__cost_mlp_model_build(const struct tl_model_config* mc, int seq, tl_cost_model* out);
void tl__cost_mlp_stage_memory(const tl_cost_model* cm, const struct tl_cost_shard* sh,
                               tl_dtype dtype, const tl_plan* p, int a, int b, int s, double* state,
                               double* act);
void tl__cost_mlp_evaluate(const tl_cost_model* cm, const tl_cluster* c, tl_dtype dtype,
                           const int* layers, tl_plan* p);

#endif
