/* cost_eval.c — a plan priced on a cluster from the cost model's per-layer
 * costs: model state by ZeRO stage, the fullest stage's bytes, and the
 * step's time by its parts (planner/cost.h for the formulas). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dp/buckets.h"
#include "planner/cost.h"
#include "planner/cost_impl.h"
#include "pp/schedule.h"

double tl__cost_act_scale(const tl_cost_model* cm, tl_dtype dtype) {
  /* graphs built in the dtype are exact; an fp32 graph priced in bf16 is
   * the papers' accounting: every activation in 2 bytes */
  return cm->precision == dtype ? 1.0 : tl_dtype_size(dtype) / 4.0;
}

tl_dtype tl__cost_state_dtype(const tl_cost_model* cm, tl_dtype dtype) {
  /* trellis's bf16 keeps fp32 weights, gradients and moments */
  return cm->precision == TL_BF16 ? TL_F32 : dtype;
}

struct tl_state_bytes tl_cost_state_bytes(tl_dtype dtype) {
  struct tl_state_bytes sb = {4, 4, 8}; /* fp32 Adam: weights, grads, two moments */
  if (dtype == TL_BF16 || dtype == TL_F16)
    sb = (struct tl_state_bytes){2, 2, 12}; /* 16-bit w, g; fp32 master + two moments */
  return sb;
}

double tl_cost_model_state(double params, int zero, int d, struct tl_state_bytes sb) {
  double dd = d < 1 ? 1 : d;
  switch (zero) {
    case 1:
      return params * (sb.w + sb.g + sb.o / dd);
    case 2:
      return params * (sb.w + (sb.g + sb.o) / dd);
    case 3:
      return params * (sb.w + sb.g + sb.o) / dd;
    default:
      return params * (sb.w + sb.g + sb.o);
  }
}

double tl__cost_piece_rows(const tl_plan* p, double early, double pieced, double cols,
                           double tokens, double emb, double room, double* ops) {
  *ops = 0;
  if (p->zero < 2 || cols <= 0 || pieced <= 0) return 0;
  const double mb = p->dp_bucket_mb > 0 ? p->dp_bucket_mb : 1e9;
  const double per = (double)tl_dp_bucket_elems(p->zero, (int64_t)early, mb);
  const double rows = fmin(fmax(1, floor(per / cols)), pieced / cols);
  const bool several = rows < pieced / cols; /* one piece is used in place */
  /* ZeRO-3 over a group reads the parameter in pieces too: the
   * embedding's output added piece by piece */
  const bool read = p->zero == 3 && tl_plan_data(p) > 1;
  double t = several ? sizeof(float) * tokens * rows : 0;
  if (read && several) t = fmax(t, sizeof(float) * emb);
  if (t >= sizeof(float) * pieced) return 0; /* as much as the gradient: kept whole */
  if (!read) {
    *ops = t;
    return rows;
  }
  /* pieces small enough that both piece slots lie in a unit slot's tail */
  const double r = (double)tl_dp_piece_rows((int64_t)per, (int64_t)cols, (int64_t)(pieced / cols),
                                            (int64_t)room);
  *ops = several ? fmax(sizeof(float) * tokens * r, sizeof(float) * emb) : 0;
  return r;
}

/* The model state a stage of `params` elements holds on a data-parallel
 * rank, as dp/ and the trainer allocate it in fp32: the formulas' ZeRO-1
 * and ZeRO-2 with the shard the buckets cut (each bucket's chunk rounded
 * up) and ZeRO-2's staging, bucket buffers and late gradients
 * (dp/buckets.h); under trellis's bf16 (precision) ZeRO 1 and 2 hold the
 * parameters as the buckets' bf16 working copy and fp32 master shard
 * instead of whole in fp32; late = the parameters reduced last (sum over
 * another group first), multi = those several nodes write (late for
 * ZeRO-2). */
double tl__cost_zero_state(const tl_plan* p, tl_dtype dtype, tl_dtype precision, double params,
                           double late, double multi, double staging, double unit_max,
                           double pieced, double cols, double rows, double ops, double room,
                           double late_in_units) {
  struct tl_state_bytes sb = tl_cost_state_bytes(dtype);
  /* a bf16 reduction's image of the buckets (ZeRO 0, 1: the whole stage) */
  const int d = tl_plan_data(p); /* dp x cp */
  const double image = p->grad_reduce == TL_BF16 && d > 1 ? 2.0 * params : 0;
  if (dtype != TL_F32 || p->zero == 0)
    return tl_cost_model_state(params, p->zero, d, sb) + (p->zero < 2 ? image : 0);
  double mb = p->dp_bucket_mb > 0 ? p->dp_bucket_mb : 1e9; /* 0: one bucket a part */
  int64_t n = (int64_t)params;
  const tl_dtype working = precision == TL_BF16 ? TL_BF16 : TL_F32;
  /* the caller's whole fp32 parameters, unless the buckets hold them */
  const double whole_w = p->zero < 3 && working == TL_F32 ? params * sb.w : 0;
  int64_t l2 = p->zero == 1 ? (int64_t)late : (int64_t)(late + multi);
  double shard = (double)tl_dp_shard_elems(p->zero, n, l2, d, mb);
  /* ZeRO 2 and 3: the tied embedding's gradient in pieces of whole rows,
   * and the temporaries a piece takes (graph/exec.h's tl_exec_piece_bytes:
   * ops) */
  const int64_t n_pieced = rows > 0 ? (int64_t)pieced : 0;
  double pack = ops;
  /* and a bf16 graph's fp32 copy of a piece ZeRO-3 reads */
  if (rows > 0 && p->zero == 3 && d > 1 && precision == TL_BF16)
    pack = ceil(pack / 64) * 64 + sizeof(float) * rows * cols;
  return whole_w + (p->zero == 1 ? params * sb.g : 0) + sb.o * shard + pack +
         (double)tl_dp_buckets_bytes(p->zero, n, l2, n_pieced, (int64_t)(rows * cols),
                                     (int64_t)staging, (int64_t)unit_max,
                                     p->zero == 3 && d > 1 ? (int64_t)room : 0,
                                     (int64_t)late_in_units, d, mb, p->grad_reduce, working);
}

double tl__cost_solo_rows(const tl_plan* p, tl_dtype precision, double n, double staging,
                          const struct tl_cost_solo* so, double* ops) {
  *ops = 0;
  const int d = tl_plan_data(p);
  if (p->zero != 2 || tl_plan_chunks(p) != 1 || d <= 1 || so->elems <= 0 || so->cols <= 0) return 0;
  const double mb = p->dp_bucket_mb > 0 ? p->dp_bucket_mb : 1e9;
  const int64_t cols = (int64_t)so->cols, all = (int64_t)so->elems / cols;
  const int64_t rows = tl_dp_solo_piece_rows((int64_t)n, cols, all, mb);
  /* what a piece's node takes beside it (tl_exec_piece_bytes: a linear
   * layer reads its columns of the output gradient in place, none) */
  const double temps = rows < all ? sizeof(float) * so->m * p->micro_batch * (double)rows : 0;
  const tl_dtype working = precision == TL_BF16 ? TL_BF16 : TL_F32;
  if (!tl_dp_solo_pieces_pay((int64_t)n, (int64_t)staging, (int64_t)so->after, (int64_t)so->elems,
                             rows * cols, temps, d, mb, p->grad_reduce, working))
    return 0;
  *ops = temps;
  return (double)rows;
}

/* The bubble in micro-batch times (one micro-batch's forward and
 * backward on the slowest stage, all its chunks): p - 1 for GPipe and
 * 1F1B, (p - 1) / v interleaved; zero-bubble's from pp's own simulation
 * (ticks beyond 3m, a third of a micro-batch each). */
static double bubble_micro_batches(const tl_plan* p, const struct tl_pp_costs* c) {
  const int v = tl_plan_chunks(p);
  if (v > 1) return (p->pp - 1.0) / v;
  if (p->schedule != TL_SCHEDULE_ZERO_BUBBLE || p->pp <= 1) return p->pp - 1;
  int ticks = 0;
  if (tl_pp_schedule_ticks(TL_SCHEDULE_ZERO_BUBBLE, p->pp, p->n_micro, 1, c, &ticks) != TL_OK) {
    tl_clear_error();
    return p->pp - 1; /* cannot simulate it: priced as 1F1B */
  }
  const double micro = c->forward + c->backward + c->weight;
  return (ticks - micro * p->n_micro) / micro;
}

/* Micro-batches whose activations stage s holds at once: pp's schedule's
 * (all its chunks' under the interleaved schedule). */
int tl__cost_in_flight(const tl_plan* p, const struct tl_cost_shard* sh, int s) {
  return tl_pp_schedule_in_flight_costs(p->schedule, p->pp, s, p->n_micro, tl_plan_chunks(p),
                                        &sh->zb_costs);
}

static int stage_kind(int s, int pp) {
  return (s == 0 ? TL_COST_STAGE_EMBED : 0) | (s == pp - 1 ? TL_COST_STAGE_HEAD : 0);
}

/* A stage's early parameters at k blocks: less the late ones (shared,
 * several readers, the partial ones sequence parallelism sums). */
static double early_of(const struct tl_cost_shard* sh, const struct tl_cost_stage_shape* x, int k) {
  const double rep = sh->sp && sh->tp > 1 ? x->replicated + (k - 1) * x->replicated_layer : 0;
  return x->params + (k - 1) * x->params_layer - x->shared - x->multi - rep;
}

/* The tied embedding's pieces on pipeline rank s of a plan of one chunk a
 * stage at micro-batch b: the rows a piece (0: kept whole) and in *ops the
 * temporaries they take there. On one stage (pp 1) tl__cost_piece_rows;
 * on the first and the last stages, both holding it, the trainer's
 * agreement (launcher/train/trainer_pieces.c): whole where either stage's
 * temporaries at a bucket's rows would hold as much as its gradient (or
 * either keeps it whole: sequence parallelism's LayerNorms behind it), else
 * cut at the fewest rows either stage's buckets would cut. */
static double stage_pieces(const tl_plan* p, const struct tl_cost_shard* sh, const int* layers,
                           int s, int b, double* ops) {
  *ops = 0;
  const struct tl_cost_stage_shape* x = &sh->stage[stage_kind(s, p->pp)];
  if (tl_plan_chunks(p) != 1 || x->pieced <= 0) return 0;
  if (x->shared <= 0)
    return tl__cost_piece_rows(p, early_of(sh, x, layers[s]), x->pieced, x->piece_cols,
                               x->piece_m * b, x->piece_emb * b, x->piece_room, ops);
  if (p->zero < 2) return 0;
  const bool read = p->zero == 3 && tl_plan_data(p) > 1;
  const double mb = p->dp_bucket_mb > 0 ? p->dp_bucket_mb : 1e9;
  const double cols = x->piece_cols, all = x->pieced / cols;
  const int holders[2] = {0, p->pp - 1};
  double at_bucket = all, cut = all;
  for (int i = 0; i < 2; i++) {
    const struct tl_cost_stage_shape* h = &sh->stage[stage_kind(holders[i], p->pp)];
    if (h->pieced <= 0) return 0;
    const double per =
        (double)tl_dp_bucket_elems(p->zero, (int64_t)early_of(sh, h, layers[holders[i]]), mb);
    at_bucket = fmin(at_bucket, fmin(fmax(1, floor(per / cols)), all));
    cut = fmin(cut, (double)tl_dp_piece_rows((int64_t)per, (int64_t)cols, (int64_t)all,
                                             read ? (int64_t)h->late_room : 0));
  }
  for (int i = 0; i < 2 && at_bucket < all; i++) { /* one piece is used in place */
    const struct tl_cost_stage_shape* h = &sh->stage[stage_kind(holders[i], p->pp)];
    double t = sizeof(float) * h->piece_m * b * at_bucket;
    if (read) t = fmax(t, sizeof(float) * h->piece_emb * b);
    if (t >= sizeof(float) * x->pieced) return 0;
  }
  if (cut < all) {
    *ops = sizeof(float) * x->piece_m * b * cut;
    if (read) *ops = fmax(*ops, sizeof(float) * x->piece_emb * b);
  }
  return cut;
}

/* Memory of pipeline rank s: its chunks, virtual stages c * pp + s of
 * pp * v with layers[c * pp + s] layers each (one chunk, layers[s], unless
 * interleaved). */
static void stage_memory(const tl_cost_model* cm, const struct tl_cost_shard* sh, tl_dtype dtype,
                         const tl_plan* p, const int* layers, int s, double* state, double* act) {
  const int v = tl_plan_chunks(p), n_virtual = p->pp * v;
  const double b = p->micro_batch;
  const double scale = tl__cost_act_scale(cm, dtype);
  const tl_dtype state_dtype = tl__cost_state_dtype(cm, dtype);
  int held[TL_PP_MAX_CHUNKS] = {0};
  if (v > 1)
    tl_pp_schedule_chunk_in_flight(p->pp, s, p->n_micro, v, held);
  else
    held[0] = tl__cost_in_flight(p, sh, s);
  double params = 0, rep = 0, shared = 0, multi = 0, staging = 0, unit_max = 0;
  double pieced = 0, cols = 0, rows = 0, ops = 0, room = 0, with_units = 0;
  double kept = 0, transient = 0;
  for (int c = 0; c < v; c++) {
    const int q = c * p->pp + s, k = layers[q];
    const struct tl_cost_stage_shape* x = &sh->stage[stage_kind(q, n_virtual)];
    /* 1. parameters, gradients, optimizer state: the chunks' in one layout */
    params += x->params + (k - 1) * x->params_layer;
    if (sh->sp && sh->tp > 1) rep += x->replicated + (k - 1) * x->replicated_layer;
    shared += x->shared, multi += x->multi;
    if (v == 1) {
      pieced = x->pieced, cols = x->piece_cols;
      room = x->shared > 0 ? x->late_room : x->piece_room;
      rows = stage_pieces(p, sh, layers, s, b, &ops);
    }
    staging = fmax(staging, x->staging), unit_max = fmax(unit_max, x->unit_max);
    /* 2. an executor per micro-batch the chunk holds, each its own arena
     * (what a forward keeps for its backward: with recomputation, the
     * layers' inputs alone), and the transient arena they all share (a
     * pass's working set: the largest chunk's) */
    kept += held[c] * b * ((x->arena + (k - 1) * x->arena_layer) * scale + x->io);
    /* ZeRO-3 reading the tied embedding in pieces keeps no whole copy of it */
    const bool in_pieces = v == 1 && p->zero == 3 && tl_plan_data(p) > 1 && rows > 0;
    transient = fmax(transient, (x->transient + (k - 1) * x->transient_layer) * scale * b +
                                    (in_pieces ? x->transient_fixed_pieced : x->transient_fixed));
  }
  /* ZeRO-2: the largest node's matrix in pieces on a stage of no late
   * parameters, where that holds less */
  double solo = 0;
  if (v == 1 && shared + multi + rep <= 0) {
    const struct tl_cost_stage_shape* x = &sh->stage[stage_kind(s, p->pp)];
    const struct tl_cost_solo* so = layers[s] == 1 ? &x->solo : &x->solo_k;
    double solo_ops = 0;
    const double solo_rows = tl__cost_solo_rows(p, dtype, params, staging, so, &solo_ops);
    if (solo_rows > 0) {
      solo = pieced = so->elems, cols = so->cols, rows = solo_rows, ops = solo_ops;
      staging = so->after;
    }
  }
  /* ZeRO-3: the tied embedding gathered with the units that read it */
  if (v == 1)
    with_units =
        tl__cost_late_in_units(p, &sh->stage[stage_kind(s, p->pp)], rows > 0,
                               tl_dp_zero3_slots((int64_t)params, (int64_t)(shared + rep + multi),
                                                 (int64_t)unit_max, tl_plan_data(p)) < 2);
  /* the packed LayerNorm gradients of sequence parallelism; the trainer's
   * norm scalar */
  *state = tl__cost_zero_state(p, state_dtype, dtype, params, shared + rep + solo, multi, staging,
                               unit_max, pieced, cols, rows, ops, room, with_units) +
           4.0;
  if (sh->sp && sh->tp > 1) *state += 4.0 * (rep > 0 ? rep : 1);
  *act = kept + transient;
}

double tl__cost_late_in_units(const tl_plan* p, const struct tl_cost_stage_shape* x, bool in_pieces,
                              bool one_slot) {
  const bool gathered = p->zero == 3 && tl_plan_data(p) > 1 && tl_plan_chunks(p) == 1;
  if (!gathered || in_pieces) return 0;
  /* read by one unit (the embedding's or the head's, over a pipeline) */
  if (x->shared > 0) return x->shared <= x->late_room ? x->shared : 0;
  /* read by both on one stage: only with one slot, behind the larger */
  return one_slot && x->multi > 0 && x->multi <= x->late_room ? x->multi : 0;
}

/* The tied embedding's elements pipeline rank s takes in pieces at
 * micro-batch b (stage_pieces; 0 where it is kept whole). */
static double kept_pieced(const tl_plan* p, const struct tl_cost_shard* sh, const int* layers,
                          int s, int b) {
  double ops;
  return stage_pieces(p, sh, layers, s, b, &ops) > 0 ? sh->stage[stage_kind(s, p->pp)].pieced : 0;
}

/* What the tied embedding's pieces move beyond the other parameters'.
 * On a stage that holds both its readers (pp 1): its gradient
 * reduce-scattered twice a micro-batch (the head's pieces and the
 * embedding's; tl__cost_dp_seconds prices once) and under ZeRO-3 its
 * table gathered three times (the embedding's forward, the head's forward
 * and backward). On the first and last stages of a pipeline each stage
 * reduce-scatters it once a micro-batch, as tl__cost_dp_seconds prices
 * every gradient of ZeRO 2 and 3, and under ZeRO-3 the last stage gathers
 * it twice a micro-batch (the head's forward and backward) where whole it
 * was gathered once a step (zero3_gathers).
 * A bucket at a time, priced exposed: a piece gathered ahead hides behind
 * one piece of compute at most, and the embedding's reductions come at the
 * backward's end. */
static double piece_seconds(const tl_cluster* c, const struct tl_cost_shard* sh, const tl_plan* p,
                            const int* layers, int b, double grads, int units,
                            const struct tl_link* link, tl_dtype precision) {
  const int d = tl_plan_data(p);
  if (p->zero < 2 || d <= 1) return 0;
  const double pieced = kept_pieced(p, sh, layers, p->pp - 1, b);
  if (pieced <= 0) return 0;
  /* its buckets are about the others' size, and move at their rate */
  const double bucket = grads / tl__cost_dp_buckets(p, grads, units);
  const double wire = p->grad_reduce == TL_BF16 ? 2.0 : 4.0;
  const struct tl_link at_wire = tl_link_at(link, wire * bucket);
  double t = p->pp == 1 ? p->n_micro * tl_cost_reduce_scatter(c, wire * pieced, d, &at_wire) : 0;
  if (p->zero == 3) {
    const double bytes = precision == TL_BF16 ? 2.0 : 4.0;
    const struct tl_link at = tl_link_at(link, bytes * bucket);
    const double gathers = (p->pp == 1 ? 3.0 : 2.0) * p->n_micro;
    t += gathers * tl_cost_all_gather(c, bytes * pieced, d, &at);
  }
  return t;
}

/* The tied embedding's gradient summed over the first and last stages of a
 * pipeline, once a step after the data-parallel reduction, in fp32 and
 * exposed (nothing runs beside it): whole (pp/runtime.c's
 * tl_pp_sync_shared), or where ZeRO 2 and 3 write it in pieces each rank's
 * shard of it, a (dp x cp)-th (launcher/train/trainer_step.c's
 * sync_tied_pieces). Each pair, the first stage's rank and the last's, on
 * the link of the schedule's wrap between them (tl_cost_pp_boundary_link:
 * a network card where any pair crosses nodes, whatever mesh.order); the
 * pairs run at once, each on its own card. */
static double tied_seconds(const tl_cluster* c, const struct tl_cost_shard* sh, const tl_plan* p,
                           const int* layers, int b) {
  if (p->pp < 2) return 0;
  const double shared = sh->stage[stage_kind(0, p->pp * tl_plan_chunks(p))].shared;
  if (shared <= 0) return 0;
  const double elems = kept_pieced(p, sh, layers, 0, b) > 0 ? shared / tl_plan_data(p) : shared;
  return tl_cost_all_reduce(c, sizeof(float) * elems, 2, tl_cost_pp_boundary_link(c, p, p->pp - 1));
}

/* ZeRO-3's exposed gathers on the stage where they show most: its units
 * (the embedding on the first stage, its blocks, the head on the last) with
 * their parameters and seconds at micro-batch b, forward and backward split
 * as the shard's graph splits the FLOPs (tl_cost_zero3_gathers). One chunk
 * a stage: the trainer runs ZeRO-3 with GPipe and 1F1B only. */
static double zero3_gathers(const tl_cluster* c, const struct tl_cost_shard* sh, const tl_plan* p,
                            const int* layers, int b, double sec_layer, double sec_embed,
                            double sec_head, const struct tl_link* link, tl_dtype precision) {
  const double fl = sh->layer_flops > 0 ? sh->layer_fwd_flops / sh->layer_flops : 1.0 / 3;
  const double fe = sh->embed_flops > 0 ? sh->embed_fwd_flops / sh->embed_flops : 1.0 / 3;
  const double fh = sh->head_flops > 0 ? sh->head_fwd_flops / sh->head_flops : 1.0 / 3;
  double worst = 0;
  for (int s = 0; s < p->pp; s++) {
    const int kind = stage_kind(s, p->pp), k = layers[s];
    /* of stages alike, the first shows the most: the longest warm-up */
    if (s > 0 && s < p->pp - 1 && layers[s - 1] == k && stage_kind(s - 1, p->pp) == kind) continue;
    const struct tl_cost_stage_shape* x = &sh->stage[kind];
    /* late, gathered whole for the step: parameters another stage or
     * several nodes read, and the tensor-parallel partial ones (LayerNorms
     * under sequence parallelism), as planner/cost.c counts ZeRO-3's units */
    const double rep = x->replicated + (k - 1) * x->replicated_layer;
    const double block = x->params_layer - x->replicated_layer;
    /* the stage's early parameters beyond its blocks': the embedding's and
     * the head's own */
    const double rest = fmax(0, x->params - x->params_layer - x->shared - x->multi -
                                    (x->replicated - x->replicated_layer));
    struct tl_cost_unit u[3];
    int n = 0;
    /* the tied embedding read in pieces is not gathered whole
     * (piece_seconds); else gathered with the embedding's unit, the
     * head's, or both, where it fits */
    const double pieced = kept_pieced(p, sh, layers, s, b);
    const double params = x->params + (k - 1) * x->params_layer;
    const bool one = tl_dp_zero3_slots((int64_t)params, (int64_t)(x->shared + x->multi + rep),
                                       (int64_t)x->unit_max, tl_plan_data(p)) < 2;
    const double with = tl__cost_late_in_units(p, x, pieced > 0, one);
    if (kind & TL_COST_STAGE_EMBED)
      u[n++] =
          (struct tl_cost_unit){rest + with, sec_embed * b * fe, sec_embed * b * (1 - fe), 1, with};
    u[n++] = (struct tl_cost_unit){block, sec_layer * b * fl, sec_layer * b * (1 - fl), k, 0};
    if (kind & TL_COST_STAGE_HEAD)
      u[n++] = (struct tl_cost_unit){(kind & TL_COST_STAGE_EMBED ? 0 : rest) + with,
                                     sec_head * b * fh, sec_head * b * (1 - fh), 1, with};
    worst =
        fmax(worst, tl_cost_zero3_gathers(c, p, s, u, n, x->shared + x->multi - pieced + rep - with,
                                          link, precision));
  }
  return worst;
}

void tl_cost_stage_memory(const tl_cost_model* cm, tl_dtype dtype, const tl_plan* p,
                          const int* layers, int stage, double* state, double* act) {
  struct tl_cost_shard tmp;
  const struct tl_cost_shard* sh = tl_cost_shard_of(cm, p->tp, p->sequence_parallel, p->recompute,
                                                    p->schedule == TL_SCHEDULE_ZERO_BUBBLE, &tmp);
  if (cm->kind == TL_MODEL_MLP) {
    if (!tl_cost_has_shard(cm, p->tp)) { /* no such split: nothing fits */
      *state = *act = HUGE_VAL;
      return;
    }
    int a = 0;
    for (int s = 0; s < stage; s++) a += layers[s];
    tl__cost_mlp_stage_memory(cm, sh, dtype, p, a, a + layers[stage], stage, state, act);
    return;
  }
  stage_memory(cm, sh, dtype, p, layers, stage, state, act);
}

void tl_cost_evaluate(const tl_cost_model* cm, const tl_cluster* c, tl_dtype dtype,
                      const int* layers, tl_plan* p) {
  if (tl_plan_cp(p) != cm->cp) { /* priced on the model of its context parallelism only */
    p->fits = p->runnable = false;
    p->t_step = HUGE_VAL;
    return;
  }
  if (cm->kind == TL_MODEL_MLP && p->pp >= 1 && p->pp <= cm->n_layers) {
    tl__cost_mlp_evaluate(cm, c, dtype, layers, p);
    return;
  }
  const int t = p->tp, pp = p->pp, d = p->dp, m = p->n_micro, b = p->micro_batch;
  const double act_bytes = tl_dtype_size(dtype); /* the graph counts elements */
  const int L = cm->n_layers;
  const int cp = cm->cp;
  /* (b, s, h) elements: of a context-parallel rank's s / cp tokens */
  const double bsh = (double)b * cm->layer_input / cp;
  struct tl_cost_shard tmp;
  const struct tl_cost_shard* sh = tl_cost_shard_of(cm, t, p->sequence_parallel, p->recompute,
                                                    p->schedule == TL_SCHEDULE_ZERO_BUBBLE, &tmp);
  if (pp < 1 || pp > L) { /* no such mesh (the search rejects it first) */
    p->fits = p->runnable = false;
    p->t_step = HUGE_VAL;
    return;
  }
  /* 0. the stages (the chunks, interleaved), cut as the trainer cuts them */
  const int v = tl_plan_chunks(p), n_virtual = pp * v;
  if (n_virtual > L || (v > 1 && (pp < 2 || m % pp != 0))) { /* no such schedule */
    p->fits = p->runnable = false;
    p->t_step = HUGE_VAL;
    return;
  }
  int cut[TL_MODEL_MAX_LAYERS];
  if (!layers) {
    layers = cut;
    if (tl_cost_stage_layers(cm, t, p->sequence_parallel, n_virtual, cut) != TL_OK)
      for (int s = 0; s < n_virtual; s++) /* out of memory: even */
        cut[s] = L / n_virtual + (s < L % n_virtual);
  }

  const bool whole = p->recompute_whole_forward && p->recompute == TL_RECOMPUTE_FULL;
  /* the arithmetic at the matrix products' rate: a block's attention FLOPs
   * weighed by how much slower they run (a whole forward again re-runs the
   * forward's attention in place of the graph's copies) */
  double eff = c->efficiency;
  if (c->efficiency_half_flops > 0) {
    double x = cm->layer_fwd_flops * b / t; /* one block's forward on one rank */
    eff *= x / (x + c->efficiency_half_flops);
  }
  const double attn_eff = tl_cluster_attention_efficiency(
      c, cm->n_heads > 0 ? (double)cm->n_embd / cm->n_heads : 1, cm->seq / cp);
  const double attn =
      sh->layer_attn_flops + (whole ? sh->layer_attn_fwd_flops - sh->layer_attn_again_flops : 0);
  const double peak = tl_cluster_peak(c, dtype);
  /* the kernels that compute in fp32 in every precision (attention; the
   * element-wise ops, alone in "the rest" where a table prices the
   * products) at one peak whatever the plan's dtype */
  const double kpeak = tl_cluster_kernel_peak(c), rest_peak = c->gemm.n_m > 0 ? kpeak : peak;
  /* seconds per sequence of a block, of the embedding and of the head at
   * micro-batch b: matrix products by shape where the cluster has a table,
   * attention kernels at their rate, the rest at `eff` */
  double sec_layer, sec_embed, sec_head;
  double attn_fwd, attn_bwd; /* of sec_layer, the attention's forward and backward */
  {
    double fl = sh->layer_flops + (whole ? sh->layer_fwd_flops - sh->layer_recompute_flops : 0);
    const struct tl_cost_gemms *gl = &sh->layer_gemms, *ge = &sh->embed_gemms,
                               *gh = &sh->head_gemms;
    /* without a table the products run at `eff` like the rest */
    double fl_l = 0, fl_e = 0, fl_h = 0, g_l = 0, g_e = 0, g_h = 0;
    if (c->gemm.n_m > 0) {
      fl_l = tl_cost_gemm_flops(gl->g, gl->n, whole);
      fl_e = tl_cost_gemm_flops(ge->g, ge->n, false);
      fl_h = tl_cost_gemm_flops(gh->g, gh->n, false);
      g_l = tl_cost_gemm_seconds(c, peak, gl->g, gl->n, b, whole);
      g_e = tl_cost_gemm_seconds(c, peak, ge->g, ge->n, b, false);
      g_h = tl_cost_gemm_seconds(c, peak, gh->g, gh->n, b, false);
    }
    sec_layer = (fl - attn - fl_l) / (rest_peak * eff) + attn / (kpeak * attn_eff) + g_l;
    attn_fwd = sh->layer_attn_fwd_flops / (kpeak * attn_eff);
    attn_bwd = (sh->layer_attn_flops - sh->layer_attn_fwd_flops - sh->layer_attn_again_flops) /
               (kpeak * attn_eff);
    sec_embed = (sh->embed_flops - fl_e) / (rest_peak * eff) + g_e;
    sec_head = (sh->head_flops - fl_h) / (rest_peak * eff) + g_h;
  }
  /* 1. memory: the fullest stage */
  p->mem_state = p->mem_act = -1;
  double grads = 0, slowest = 0, ln_grads = 0;
  int k_slowest = 1, units = 1; /* units: the fullest stage's ZeRO-3 units */
  /* A stage's bytes follow from its kind (embedding, head), its layers and
   * the micro-batches it holds, growing with the last: of stages alike in
   * the first two only the one holding the most (the first of those) can be
   * the fullest. One chunk a stage: price those alone, in stage order, the
   * first of equal totals kept as below. */
  int reps[16], rep_held[16], n_rep = 0;
  bool grouped = v == 1;
  for (int s = 0; grouped && s < pp; s++) {
    const int held = tl__cost_in_flight(p, sh, s), kind = stage_kind(s, pp);
    int g = 0;
    while (g < n_rep && !(stage_kind(reps[g], pp) == kind && layers[reps[g]] == layers[s])) g++;
    if (g == n_rep) {
      if (n_rep == 16)
        grouped = false; /* too many kinds of stage: price them all */
      else
        reps[n_rep] = s, rep_held[n_rep++] = held;
    } else if (held > rep_held[g]) {
      reps[g] = s, rep_held[g] = held;
    }
  }
  if (grouped) {
    /* in stage order, as the loop below would meet them */
    for (int i = 1; i < n_rep; i++)
      for (int j = i; j > 0 && reps[j - 1] > reps[j]; j--) {
        int x = reps[j];
        reps[j] = reps[j - 1], reps[j - 1] = x;
      }
    for (int i = 0; i < n_rep; i++) {
      double state, act;
      stage_memory(cm, sh, dtype, p, layers, reps[i], &state, &act);
      if (state + act > p->mem_state + p->mem_act)
        p->mem_state = state, p->mem_act = act, p->mem_stage = reps[i];
    }
  }
  for (int s = 0; s < pp; s++) {
    if (!grouped) {
      double state, act;
      stage_memory(cm, sh, dtype, p, layers, s, &state, &act);
      if (state + act > p->mem_state + p->mem_act)
        p->mem_state = state, p->mem_act = act, p->mem_stage = s;
    }
    double params = 0, rep = 0, fl = 0;
    int k = 0, ends = 0;          /* ends: the embedding's and the head's units */
    for (int c = 0; c < v; c++) { /* the stage's chunks */
      const int q = c * pp + s;
      const struct tl_cost_stage_shape* x = &sh->stage[stage_kind(q, n_virtual)];
      params += x->params + (layers[q] - 1) * x->params_layer;
      rep += x->replicated + (layers[q] - 1) * x->replicated_layer;
      /* the stage's arithmetic per sequence; the shard's graph recomputes
       * as the plan does: its FLOPs count the copies */
      fl += layers[q] * sec_layer;
      if (q == 0) fl += sec_embed, ends++;
      if (q == n_virtual - 1) fl += sec_head, ends++;
      k += layers[q];
    }
    if (params > grads) grads = params, units = k + ends;
    if (rep > ln_grads) ln_grads = rep;
    if (fl > slowest) slowest = fl, k_slowest = k;
  }
  p->mem_reserve = c->reserve_bytes + c->allocator_overhead * (p->mem_state + p->mem_act);
  p->mem_total = p->mem_state + p->mem_act + p->mem_reserve;
  p->fits = p->mem_total <= c->device_memory_bytes;
  const int s_tp = tl_cost_axis_stride(p, TL_AXIS_TP); /* its neighbours, ranks apart */
  /* the data group's link: dp x cp ranks */
  const struct tl_link dp_l = tl_cost_data_link(c, p), *dp_link = &dp_l;
  /* the gathers hide behind the compute at the rate the plan's ranks get */
  const double speed = tl__cost_core_speed(c, p);
  const double zero3 = p->zero == 3 && tl_plan_data(p) > 1
                           ? zero3_gathers(c, sh, p, layers, b, sec_layer / speed,
                                           sec_embed / speed, sec_head / speed, dp_link, dtype)
                           : 0;
  /* the same gathers with nothing hidden: what the data-parallel link
   * carries (tl__cost_dp_floor) */
  tl_plan bare = *p;
  bare.no_overlap = true;
  const double zero3_all = p->zero == 3 && tl_plan_data(p) > 1
                               ? zero3_gathers(c, sh, &bare, layers, b, sec_layer / speed,
                                               sec_embed / speed, sec_head / speed, dp_link, dtype)
                               : 0;

  /* 2. time of one micro-batch on the slowest stage */
  double comp = slowest * b; /* seconds of one micro-batch on the slowest stage */
  const struct tl_link tp_l = tl_cost_group_link(c, t, s_tp), *tp_link = &tp_l;
  /* full recomputation re-runs the forward's two collectives */
  const bool full = p->recompute == TL_RECOMPUTE_FULL;
  int tp_calls = full ? 6 : 4;
  /* sequence parallelism moves the same bytes (a reduce-scatter and an
   * all-gather for each all-reduce, each at its own share of the link), and
   * gathers each column-parallel matmul's input once more in the backward:
   * 2 all-gathers per layer (which full recomputation's own gathers serve:
   * tl_graph_recompute) */
  const double one = sh->sp && t > 1 ? tl_cost_reduce_scatter(c, bsh * act_bytes, t, tp_link) +
                                           tl_cost_all_gather(c, bsh * act_bytes, t, tp_link)
                                     : tl_cost_all_reduce(c, bsh * act_bytes, t, tp_link);
  double tp_comm = k_slowest * tp_calls * one;
  if (sh->sp && t > 1 && !full)
    tp_comm += k_slowest * 2 * tl_cost_all_gather(c, bsh * act_bytes, t, tp_link);
  double pp_comm = 0;
  if (pp > 1) {
    /* every chunk's boundaries (interleaving: v sends on each, v - 1 on
     * the wrap) */
    pp_comm = tl_cost_pp_sends(c, p, bsh * act_bytes / t);
  }

  /* 3. the step: m micro-batches, the bubble, then the gradient all-reduce */
  /* gradients are summed and all-reduced in fp32 (Megatron-LM's default for
   * bf16, and trellis's under train.precision "bf16"), whatever the
   * activations' dtype */
  const double pieces = piece_seconds(c, sh, p, layers, b, grads, units, dp_link, dtype);
  double dp = tl__cost_dp_seconds(c, p, grads, units, dp_link, comp / speed, dtype) + zero3;
  dp = fmax(dp, tl__cost_dp_floor(c, p, grads, dp_link, comp / speed, zero3_all, dtype)) + pieces;
  p->c_dp = tl__cost_dp_seconds(c, &bare, grads, units, dp_link, comp / speed, dtype) + zero3_all +
            pieces;
  if (tl__cost_overlap_stalls(c, p)) dp = p->c_dp; /* nothing hides (cost_impl.h) */
  /* the ring of the slowest stage's blocks, each micro-batch */
  double ring_all = 0;
  const double ring = tl_cost_ring(c, cm, p, k_slowest, attn_fwd, attn_bwd, dtype, &ring_all);
  p->zb_costs = sh->zb_costs;
  tl__cost_pipeline(c, p, &sh->zb_costs, comp, tp_comm, ring, pp_comm,
                    bubble_micro_batches(p, &sh->zb_costs));
  p->c_cp = m * ring_all;
  /* and once a step, the LayerNorm gradients summed over the group (packed) */
  if (sh->sp && t > 1) p->t_tp += tl_cost_all_reduce(c, ln_grads * 4.0, t, tp_link);
  p->t_tied = tied_seconds(c, sh, p, layers, b);
  p->t_pp += p->t_tied;
  p->t_dp = dp;
  p->t_opt = tl__cost_optimizer_seconds(c, p, grads);
  p->t_step = p->t_compute + p->t_tp + p->t_cp + p->t_pp + p->t_bubble + p->t_dp + p->t_opt;

  double layer_fl =
      cm->layer_flops + (whole ? cm->layer_fwd_flops : cm->layer_recompute_flops[p->recompute]);
  double devices = (double)tl_plan_devices(p);
  double seqs = (double)d * b * m;
  p->tokens_per_s = seqs * cm->seq / p->t_step;
  double exec = seqs * (L * layer_fl + cm->embed_flops + cm->head_flops);
  double model = seqs * (L * cm->layer_flops + cm->embed_flops + cm->head_flops);
  p->flops_per_device = exec / p->t_step / devices;
  p->mfu = model / p->t_step / devices / tl_cluster_peak(c, dtype);
  /* the trainer runs dp x tp x pp meshes with any ZeRO stage and
   * recomputation, interleaved with ZeRO 0 and 1 */
  p->runnable =
      !whole &&
      (v == 1 || (p->zero <= 1 && v <= TL_MAX_VIRTUAL_STAGES && n_virtual <= TL_MAX_STAGES));
}

const char* tl_plan_bound(const tl_plan* p) {
  const char* name = "compute";
  double best = p->t_compute;
  if (p->t_bubble > best) name = "bubble", best = p->t_bubble;
  if (p->t_tp > best) name = "tp comm", best = p->t_tp;
  if (p->t_cp > best) name = "cp comm", best = p->t_cp;
  if (p->t_pp > best) name = "pp comm", best = p->t_pp;
  if (p->t_dp > best) name = "dp comm", best = p->t_dp;
  if (p->t_opt > best) name = "optimizer", best = p->t_opt;
  return name;
}
