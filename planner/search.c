/* search.c — enumerate splits, price each with the cost model, keep what
 * fits, rank by step time. The cost model is built once by the caller, so a
 * plan costs a few dozen floating-point operations; thousands of plans take
 * milliseconds. */
#include "planner/search.h"

#include <stdlib.h>
#include <string.h>

static const char* const k_reject_names[TL_REJECT_COUNT] = {"tp_heads",  "tp_vocab",  "tp_split",
                                                            "tp_node",   "pp_layers", "batch",
                                                            "sp_tokens", "trainer",   "memory"};

const char* tl_reject_name(tl_reject_reason r) {
  return r >= 0 && r < TL_REJECT_COUNT ? k_reject_names[r] : "unknown";
}

void tl_search_options_defaults(struct tl_search_options* o, int global_batch, tl_dtype dtype) {
  memset(o, 0, sizeof *o);
  o->global_batch = global_batch;
  o->dtype = dtype;
  o->fix_dp = o->fix_tp = o->fix_pp = o->fix_micro_batch = o->fix_n_micro = -1;
  o->fix_zero = o->fix_recompute = o->fix_schedule = o->fix_sp = o->fix_virtual_stages = -1;
  o->dp_bucket_mb = 25;
}

void tl_search_free(tl_search_result* r) {
  if (!r) return;
  free(r->plans);
  memset(r, 0, sizeof *r);
}

static int by_step_time(const void* a, const void* b) {
  const tl_plan *x = a, *y = b;
  if (x->t_step != y->t_step) return x->t_step < y->t_step ? -1 : 1;
  /* ties: less memory first, then smaller tp, pp (simpler meshes) */
  if (x->mem_total != y->mem_total) return x->mem_total < y->mem_total ? -1 : 1;
  if (x->tp != y->tp) return x->tp - y->tp;
  if (x->pp != y->pp) return x->pp - y->pp;
  return (int)x->sequence_parallel - (int)y->sequence_parallel;
}

static bool fixed_ok(int fix, int v) {
  return fix < 0 || fix == v;
}

static tl_status push(tl_search_result* r, int* cap, const tl_plan* p) {
  if (r->n_plans == *cap) {
    int nc = *cap ? *cap * 2 : 256;
    tl_plan* np = realloc(r->plans, sizeof *np * (size_t)nc);
    if (!np) return TL_ERRF(TL_ERR_NOMEM, "search: %d plans", nc);
    r->plans = np;
    *cap = nc;
  }
  r->plans[r->n_plans++] = *p;
  return TL_OK;
}

/* Every plan of mesh dp x tp x pp (sequence parallel or not): the stages as
 * the trainer cuts them (one cut per mesh), then every way to cut the
 * replica's batch, every schedule, ZeRO stage and recomputation. */
/* The interleaved schedule's chunk counts the search tries per rank. */
#define MAX_SEARCHED_CHUNKS 8

static tl_status add_mesh(const tl_cost_model* cm, const tl_cluster* c,
                          const struct tl_search_options* o, int dp, int tp, int pp, bool sp,
                          tl_search_result* out, int* cap) {
  /* the cut per chunk count: cuts[v - 1] into pp * v virtual stages (v = 1:
   * the stages); interleaving only where every chunk gets a layer */
  int cuts[MAX_SEARCHED_CHUNKS][TL_MODEL_MAX_LAYERS];
  int max_v = 1;
  if (pp >= 2 && cm->kind != TL_MODEL_MLP &&
      (o->fix_schedule < 0 || o->fix_schedule == TL_SCHEDULE_INTERLEAVED))
    for (int v = 2; v <= MAX_SEARCHED_CHUNKS && pp * v <= cm->n_layers && pp * v <= TL_MAX_STAGES;
         v++)
      max_v = v;
  bool cut_made[MAX_SEARCHED_CHUNKS] = {false}; /* each cut when first needed */
  int per_replica = o->global_batch / dp;
  for (int mb = 1; mb <= per_replica; mb++) {
    if (per_replica % mb || !fixed_ok(o->fix_micro_batch, mb)) continue;
    int n_micro = per_replica / mb;
    if (!fixed_ok(o->fix_n_micro, n_micro)) continue;
    if (sp && (int64_t)mb * cm->seq % tp) { /* the trainer splits token rows evenly */
      out->rejected[TL_REJECT_SP_TOKENS]++;
      continue;
    }
    for (int sk = TL_SCHEDULE_GPIPE; sk <= TL_SCHEDULE_ZERO_BUBBLE; sk++) {
      if (!fixed_ok(o->fix_schedule, sk)) continue;
      /* interleaving: GPT plans of 2 to 8 chunks a rank, micro-batches in
       * groups of pp */
      const bool inter = sk == TL_SCHEDULE_INTERLEAVED;
      if (inter && (pp < 2 || max_v < 2 || n_micro % pp != 0)) continue;
      /* one stage: the schedules are the same run; keep 1F1B */
      if (pp == 1 && sk != TL_SCHEDULE_1F1B && o->fix_schedule < 0) continue;
      /* zero-bubble is priced for the GPT (an MLP's graphs are one-pass) */
      if (sk == TL_SCHEDULE_ZERO_BUBBLE && (cm->kind == TL_MODEL_MLP || pp > TL_MAX_STAGES))
        continue;
      for (int v = inter ? 2 : 1; v <= (inter ? max_v : 1); v++) {
        if (!fixed_ok(o->fix_virtual_stages, v)) continue;
        if (!cut_made[v - 1]) {
          TL_CHECK(tl_cost_stage_layers(cm, tp, sp, pp * v, cuts[v - 1]));
          cut_made[v - 1] = true;
        }
        const int* layers = cuts[v - 1];
        for (int zero = 0; zero <= 3; zero++) {
          if (!fixed_ok(o->fix_zero, zero)) continue;
          if (dp == 1 && zero > 0 && o->fix_zero < 0) continue; /* nothing to shard over */
          /* the trainer runs zero-bubble and interleaving with ZeRO 0 and 1 */
          if ((sk == TL_SCHEDULE_ZERO_BUBBLE || inter) && zero >= 2) continue;
          /* an MLP is priced without recomputation */
          for (int rc = 0; rc <= (cm->kind != TL_MODEL_MLP ? TL_RECOMPUTE_FULL : 0); rc++) {
            if (!fixed_ok(o->fix_recompute, rc)) continue;
            tl_plan p;
            memset(&p, 0, sizeof p);
            p.dp = dp, p.tp = tp, p.pp = pp, p.micro_batch = mb, p.n_micro = n_micro;
            p.schedule = (tl_schedule_kind)sk;
            p.zero = zero;
            p.recompute = (tl_recompute)rc;
            p.sequence_parallel = sp;
            p.dp_bucket_mb = o->dp_bucket_mb;
            p.recompute_whole_forward = o->recompute_whole_forward;
            p.virtual_stages = v;
            tl_cost_evaluate(cm, c, o->dtype, layers, &p);
            out->n_evaluated++;
            if (o->trainer_only && !p.runnable) {
              out->rejected[TL_REJECT_TRAINER]++;
              continue;
            }
            if (!p.fits) {
              out->rejected[TL_REJECT_MEMORY]++;
              continue;
            }
            TL_CHECK(push(out, cap, &p));
          }
        }
      }
    }
  }
  return TL_OK;
}

tl_status tl_search_run(const tl_cost_model* cm, const tl_cluster* c,
                        const struct tl_search_options* o, tl_search_result* out) {
  memset(out, 0, sizeof *out);
  const int devices = tl_cluster_devices(c), B = o->global_batch;
  if (B < 1) return TL_ERRF(TL_ERR_INVALID, "global batch %d; expected >= 1", B);
  if (tl_cluster_peak(c, o->dtype) <= 0)
    return TL_ERRF(TL_ERR_CONFIG, "cluster %s has no peak_flops for %s", c->name,
                   o->dtype == TL_BF16 ? "bf16" : "fp32");
  int cap = 0;
  tl_status st = TL_OK;
  for (int tp = 1; tp <= devices; tp++) {
    if (devices % tp || !fixed_ok(o->fix_tp, tp)) continue;
    for (int pp = 1; pp <= devices / tp; pp++) {
      if ((devices / tp) % pp || !fixed_ok(o->fix_pp, pp)) continue;
      int dp = devices / tp / pp;
      if (!fixed_ok(o->fix_dp, dp)) continue;
      /* 1. the mesh's own rules */
      tl_reject_reason why = TL_REJECT_COUNT;
      const bool mlp = cm->kind == TL_MODEL_MLP;
      if (mlp && !tl_cost_has_shard(cm, tp))
        why = TL_REJECT_TP_SPLIT;
      else if (!mlp && cm->n_heads % tp)
        why = TL_REJECT_TP_HEADS;
      else if (!mlp && cm->padded_vocab % tp)
        why = TL_REJECT_TP_VOCAB;
      else if (tp > c->devices_per_node && !o->allow_tp_across_nodes)
        why = TL_REJECT_TP_NODE;
      else if (pp > cm->n_layers)
        why = TL_REJECT_PP_LAYERS;
      else if (B % dp)
        why = TL_REJECT_BATCH;
      if (why != TL_REJECT_COUNT) {
        out->rejected[why]++;
        continue;
      }
      /* 2. with and without sequence parallelism (tp > 1) */
      for (int sp = 0; sp <= (tp > 1 && !mlp); sp++) { /* an MLP has no sequence */
        if (!fixed_ok(o->fix_sp, sp) && !(tp == 1 && o->fix_sp == 1)) continue;
        TL_CHECK_GOTO(add_mesh(cm, c, o, dp, tp, pp, sp, out, &cap), st, fail);
      }
    }
  }
  if (out->n_plans > 1) qsort(out->plans, (size_t)out->n_plans, sizeof *out->plans, by_step_time);
  return TL_OK;
fail:
  tl_search_free(out);
  return st;
}
