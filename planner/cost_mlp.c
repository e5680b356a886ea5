/* cost_mlp.c — the cost model of an MLP, whose layers differ in shape:
 * read off its whole graph per layer and per range of layers (a stage) at
 * every tensor-parallel degree that splits each linear layer, and priced
 * stage by stage (planner/cost.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "graph/graph.h"
#include "graph/model.h"
#include "planner/cost_impl.h"
#include "tp/tp.h"

/* Elements of the activations crossing a stage cut before forward node
 * `at` (pp/stage.c's boundary: tl_graph_crossing), as one rank sends them:
 * values every tp rank holds alike go as 1/tp each. */
static double boundary_elems(const tl_graph* g, const tl_tp_shard* sh, int at) {
  int ids[16];
  int n = tl_graph_crossing(g, at, ids, 16);
  double e = 0;
  for (int k = 0; k < n && k < 16; k++) {
    const tl_value* val = &g->values[ids[k]];
    e += (double)tl_value_numel(val) / (tl_tp_value_whole(sh, ids[k]) ? sh->tp : 1);
  }
  return e;
}

/* The collectives of forward nodes [begin, end): how many, and the
 * elements each moves per sequence, summed. */
static void collectives(const tl_graph* g, int begin, int end, double* n, double* elems) {
  for (int i = begin; i < end; i++) {
    const tl_node* node = &g->nodes[i];
    if (!tl_tp_is_comm(node)) continue; /* COPY in (all-reduce backward), REDUCE out */
    *n += 1;
    *elems += (double)tl_value_numel(&g->values[node->out[0]]);
  }
}

/* An MLP's costs at tensor-parallel degree tp: per layer and per range of
 * layers, off rank 0's whole graph at one sequence. TL_ERR_CONFIG when tp
 * leaves a linear layer unsplit (the config check refuses such a mesh). */
static tl_status mlp_shard_build(const struct tl_model_config* mc, int seq, int tp,
                                 tl_dtype precision, struct tl_cost_shard* out) {
  memset(out, 0, sizeof *out);
  out->tp = tp;
  out->from_graph = true;
  tl_model m;
  TL_CHECK(tl_model_init(mc, &m));
  tl_graph* g = NULL;
  struct tl_model_io io;
  tl_tp_shard sh;
  TL_CHECK(
      tl_tp_build(&m, 1, seq, tp, 0, false, 1, 0, TL_RECOMPUTE_NONE, false, &g, &io, &sh, NULL));
  tl_status st = tl_graph_set_precision(g, precision);
  if (st == TL_OK && tp > 1 && sh.n_linear_split < sh.n_linear)
    st = TL_ERRF(TL_ERR_CONFIG, "mesh.tp=%d leaves a linear layer of the MLP unsplit", tp);
  const int L = io.n_layers, nf = g->n_forward;
  struct tl__cost_range r;
  for (int l = 0; l < L && st == TL_OK; l++) {
    struct tl_cost_mlp_layer* x = &out->mlp_layer[l];
    st = tl__cost_range(g, &sh, io.layer_begin[l], io.layer_begin[l + 1], &r);
    x->fwd_flops = r.fwd_flops, x->flops = r.flops;
    if (st == TL_OK)
      st = tl__cost_gemms(g, io.layer_begin[l], io.layer_begin[l + 1], 1, x->gemm, &x->n_gemm, 4);
    collectives(g, io.layer_begin[l], io.layer_begin[l + 1], &x->n_all_reduce,
                &x->all_reduce_elems);
    if (l + 1 < L) x->out_elems = boundary_elems(g, &sh, io.layer_begin[l + 1]);
  }
  /* the vocabulary-parallel embedding's sum: stage 0, with the first layer */
  if (st == TL_OK)
    collectives(g, 0, io.layer_begin[0], &out->mlp_layer[0].n_all_reduce,
                &out->mlp_layer[0].all_reduce_elems);
  if (st == TL_OK) st = tl__cost_range(g, &sh, 0, io.layer_begin[0], &r);
  if (st == TL_OK) out->embed_fwd_flops = r.fwd_flops, out->embed_flops = r.flops;
  if (st == TL_OK) st = tl__cost_range(g, &sh, io.layer_begin[L], nf, &r);
  if (st == TL_OK) out->head_fwd_flops = r.fwd_flops, out->head_flops = r.flops;
  /* the vocabulary-parallel loss of an odd last layer: the rows' maximum
   * (one all-reduce), then their sums of exponentials and target logits
   * (one more, of two values a row) */
  if (st == TL_OK && sh.loss_split) {
    out->mlp_layer[L - 1].n_all_reduce += 2;
    out->mlp_layer[L - 1].all_reduce_elems += 3.0 * seq;
  }
  for (int b = 1; b <= L && st == TL_OK; b++)
    for (int a = 0; a < b && st == TL_OK; a++) {
      st = tl__cost_range(g, &sh, a == 0 ? 0 : io.layer_begin[a], b == L ? nf : io.layer_begin[b],
                          &r);
      struct tl_cost_range* x = &out->mlp_range[tl_cost_range_index(a, b)];
      x->params = r.params, x->arena = r.arena, x->io = r.io, x->transient = r.transient;
      x->transient_fixed = r.transient_fixed;
      x->shared = r.shared, x->multi = r.multi, x->staging = r.staging;
      x->solo = r.solo;
    }
  /* ZeRO-3's units are the layers: the largest of each range's */
  for (int b = 1; b <= L && st == TL_OK; b++)
    for (int a = 0; a < b; a++) {
      struct tl_cost_range* x = &out->mlp_range[tl_cost_range_index(a, b)];
      x->unit_max = 0;
      for (int u = a; u < b; u++) {
        const struct tl_cost_range* one = &out->mlp_range[tl_cost_range_index(u, u + 1)];
        double early = one->params - one->shared - one->multi;
        if (early > x->unit_max) x->unit_max = early;
      }
    }
  tl_graph_destroy(g);
  tl_tp_shard_free(&sh);
  return st;
}

tl_status tl__cost_mlp_model_build(const struct tl_model_config* mc, int seq, tl_cost_model* out) {
  const int L = mc->n_mlp_layers;
  if (L < 1 || L > TL_MLP_MAX_LAYERS)
    return TL_ERRF(TL_ERR_CONFIG, "model.mlp_sizes: %d layers; the planner prices 1 to %d", L,
                   TL_MLP_MAX_LAYERS);
  tl_model m;
  TL_CHECK(tl_model_init(mc, &m));
  out->kind = TL_MODEL_MLP;
  out->n_layers = L;
  out->n_embd = mc->mlp_sizes[0];
  out->vocab = m.vocab;
  out->padded_vocab = m.padded_vocab;
  out->seq = seq;
  out->params_total = m.n_params;
  /* every degree that splits each linear layer (so none beyond the widest) */
  int widest = 1;
  for (int i = 0; i <= L; i++)
    if (mc->mlp_sizes[i] > widest) widest = mc->mlp_sizes[i];
  for (int t = 1; t <= widest && out->n_shards < TL_COST_MAX_SHARDS; t++) {
    struct tl_cost_shard* s = &out->shards[out->n_shards];
    tl_status st = mlp_shard_build(mc, seq, t, out->precision, s);
    if (st == TL_OK)
      out->n_shards++;
    else if (t == 1 || st != TL_ERR_CONFIG)
      return st;
  }
  return TL_OK;
}

/* An MLP's stage of layers [a, b): its range's parameters and executor
 * (no sequence parallelism, no recomputation). */
void tl__cost_mlp_stage_memory(const tl_cost_model* cm, const struct tl_cost_shard* sh,
                               tl_dtype dtype, const tl_plan* p, int a, int b, int s, double* state,
                               double* act) {
  const struct tl_cost_range* x = &sh->mlp_range[tl_cost_range_index(a, b)];
  /* ZeRO-2's largest node's matrix in pieces, where that holds less */
  double ops = 0;
  const double rows = x->shared + x->multi > 0
                          ? 0
                          : tl__cost_solo_rows(p, dtype, x->params, x->staging, &x->solo, &ops);
  const double solo = rows > 0 ? x->solo.elems : 0;
  *state = tl__cost_zero_state(p, tl__cost_state_dtype(cm, dtype), dtype, x->params,
                               x->shared + solo, x->multi, rows > 0 ? x->solo.after : x->staging,
                               x->unit_max, solo, x->solo.cols, rows, ops, 0, 0) +
           4.0;
  const double scale = tl__cost_act_scale(cm, dtype);
  *act = tl__cost_in_flight(p, sh, s) * p->micro_batch * (x->arena * scale + x->io) +
         p->micro_batch * x->transient * scale + x->transient_fixed;
}

/* tl_cost_evaluate for an MLP: every stage priced from its own layers (they
 * differ), the slowest stage's micro-batch setting the pace. */
void tl__cost_mlp_evaluate(const tl_cost_model* cm, const tl_cluster* c, tl_dtype dtype,
                           const int* layers, tl_plan* p) {
  const int t = p->tp, pp = p->pp, d = p->dp, m = p->n_micro, b = p->micro_batch;
  if (!tl_cost_has_shard(cm, t)) { /* its layout cannot split the MLP t ways */
    p->fits = p->runnable = false;
    p->t_step = HUGE_VAL;
    return;
  }
  const double act_bytes = tl_dtype_size(dtype);
  const int L = cm->n_layers;
  struct tl_cost_shard tmp;
  const struct tl_cost_shard* sh = tl_cost_shard_of(cm, t, false, TL_RECOMPUTE_NONE, false, &tmp);
  int cut[TL_MLP_MAX_LAYERS];
  if (!layers) {
    layers = cut;
    if (tl_cost_stage_layers(cm, t, false, pp, cut) != TL_OK)
      for (int s = 0; s < pp; s++) cut[s] = L / pp + (s < L % pp);
  }
  int s_tp, s_dp, s_pp; /* each axis's neighbours, ranks apart (p->order) */
  tl_cost_axis_strides(p, &s_tp, &s_dp, &s_pp);
  const struct tl_link tp_l = tl_cost_group_link(c, t, s_tp), *tp_link = &tp_l;
  const double peak = tl_cluster_peak(c, dtype);
  p->mem_state = p->mem_act = -1;
  double grads = 0, micro = 0, comp = 0, tp_comm = 0, pp_comm = 0, total_flops = 0;
  int units = 1;                                  /* the fullest stage's ZeRO-3 units: its layers */
  const double speed = tl__cost_core_speed(c, p); /* the ZeRO-3 gathers hide at this rate */
  double zero3 = 0;     /* ZeRO-3's exposed gathers, on the stage where they show most */
  double zero3_all = 0; /* the same with nothing hidden */
  const struct tl_link dp_l = tl_cost_group_link(c, d, s_dp), *dp_link = &dp_l;
  for (int s = 0, a = 0; s < pp; a += layers[s++]) {
    const int e = a + layers[s];
    double state, act;
    tl__cost_mlp_stage_memory(cm, sh, dtype, p, a, e, s, &state, &act);
    if (state + act > p->mem_state + p->mem_act)
      p->mem_state = state, p->mem_act = act, p->mem_stage = s;
    double params = sh->mlp_range[tl_cost_range_index(a, e)].params;
    if (params > grads) grads = params, units = e - a;
    double fl = (s == 0 ? sh->embed_flops : 0) + (s == pp - 1 ? sh->head_flops : 0);
    double fwd = 0, n_ar = 0, ar_elems = 0, gemm_fl = 0, gemm_s = 0;
    for (int l = a; l < e; l++) {
      const struct tl_cost_mlp_layer* y = &sh->mlp_layer[l];
      fl += y->flops, fwd += y->fwd_flops;
      n_ar += y->n_all_reduce, ar_elems += y->all_reduce_elems;
      gemm_fl += tl_cost_gemm_flops(y->gemm, y->n_gemm, false);
      if (c->gemm.n_m > 0) gemm_s += tl_cost_gemm_seconds(c, peak, y->gemm, y->n_gemm, b, false);
    }
    total_flops += fl;
    double x = fwd * b / layers[s]; /* one layer's forward on this rank */
    double eff = c->efficiency_half_flops > 0 ? c->efficiency * x / (x + c->efficiency_half_flops)
                                              : c->efficiency;
    /* the matrix products by shape where the cluster has a GEMM table, the
     * element-wise rest then at the kernels' peak (tl_cluster_kernel_peak) */
    double comp_s = c->gemm.n_m > 0
                        ? ((fl - gemm_fl) / (tl_cluster_kernel_peak(c) * eff) + gemm_s) * b
                        : fl * b / (peak * eff);
    /* all-reduces cost their bytes plus one latency term each */
    double tp_s = n_ar > 0 ? tl_cost_all_reduce(c, ar_elems * b * act_bytes, t, tp_link) +
                                 (n_ar - 1) * tl_cost_all_reduce(c, 0, t, tp_link)
                           : 0;
    double pp_s = 0;
    if (pp > 1) {
      /* its activation ahead and its gradient behind, each the size of its
       * boundary and on its link (tl_cost_pp_sends' rule: an end stage's
       * two on its one boundary) */
      double in = a > 0 ? sh->mlp_layer[a - 1].out_elems : 0;
      double out = e < L ? sh->mlp_layer[e - 1].out_elems : 0;
      const double send_in =
          s > 0 ? tl_cost_send(c, in * b * act_bytes, tl_cost_pp_boundary_link(c, p, s - 1)) : 0;
      const double send_out =
          s < pp - 1 ? tl_cost_send(c, out * b * act_bytes, tl_cost_pp_boundary_link(c, p, s)) : 0;
      pp_s = s == 0 ? 2 * send_out : s == pp - 1 ? 2 * send_in : send_in + send_out;
    }
    if (comp_s + tp_s + pp_s > micro)
      micro = comp_s + tp_s + pp_s, comp = comp_s, tp_comm = tp_s, pp_comm = pp_s;
    if (p->zero == 3 && d > 1) { /* a unit a layer, its seconds its share of the stage's */
      struct tl_cost_unit u[TL_MLP_MAX_LAYERS];
      const struct tl_cost_range* r = &sh->mlp_range[tl_cost_range_index(a, e)];
      for (int l = a; l < e; l++) {
        const struct tl_cost_mlp_layer* y = &sh->mlp_layer[l];
        const struct tl_cost_range* one = &sh->mlp_range[tl_cost_range_index(l, l + 1)];
        double share = fl > 0 ? comp_s / speed * y->flops / fl : 0;
        double f = y->flops > 0 ? y->fwd_flops / y->flops : 1.0 / 3;
        u[l - a] = (struct tl_cost_unit){fmax(0, one->params - one->shared - one->multi), share * f,
                                         share * (1 - f), 1, 0};
      }
      zero3 = fmax(zero3,
                   tl_cost_zero3_gathers(c, p, s, u, e - a, r->shared + r->multi, dp_link, dtype));
      tl_plan bare = *p;
      bare.no_overlap = true;
      zero3_all = fmax(zero3_all, tl_cost_zero3_gathers(c, &bare, s, u, e - a, r->shared + r->multi,
                                                        dp_link, dtype));
    }
  }
  p->mem_reserve = c->reserve_bytes + c->allocator_overhead * (p->mem_state + p->mem_act);
  p->mem_total = p->mem_state + p->mem_act + p->mem_reserve;
  p->fits = p->mem_total <= c->device_memory_bytes;
  double dp = tl__cost_dp_seconds(c, p, grads, units, dp_link, comp / speed, dtype) + zero3;
  dp = fmax(dp, tl__cost_dp_floor(c, p, grads, dp_link, comp / speed, zero3_all, dtype));
  {
    tl_plan bare = *p;
    bare.no_overlap = true;
    p->c_dp = tl__cost_dp_seconds(c, &bare, grads, units, dp_link, comp / speed, dtype) + zero3_all;
  }
  if (tl__cost_overlap_stalls(c, p)) dp = p->c_dp; /* nothing hides (cost_impl.h) */
  tl__cost_pipeline(c, p, NULL, comp, tp_comm, 0, pp_comm, pp - 1);
  p->t_dp = dp;
  p->t_opt = tl__cost_optimizer_seconds(c, p, grads);
  p->t_step = p->t_compute + p->t_tp + p->t_pp + p->t_bubble + p->t_dp + p->t_opt;
  double devices = (double)d * t * pp, seqs = (double)d * b * m;
  p->tokens_per_s = seqs * cm->seq / p->t_step;
  /* a rank's FLOPs times the tp ranks: the shards' arithmetic (the split
   * layers' is divided, the whole embedding's is repeated on each) */
  double model = seqs * total_flops * t;
  p->flops_per_device = model / p->t_step / devices;
  p->mfu = p->flops_per_device / peak;
  p->runnable = true;
}
