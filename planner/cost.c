/* cost.c — per-layer costs read off the graph, and the analytic step model
 * built on them (see cost.h for the formulas and their sources). */
#include "planner/cost.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dp/buckets.h"
#include "dp/layout.h"
#include "graph/exec.h"
#include "graph/graph.h"
#include "graph/model.h"
#include "planner/cost_impl.h"
#include "graph/op.h"
#include "pp/cut.h"
#include "pp/schedule.h"
#include "tp/tp.h"

int tl__cost_forward_index(const tl_graph* g, int i) {
  return i < g->n_forward ? i : g->nodes[i].forward_of;
}

tl_status tl__cost_range(const tl_graph* g, const tl_tp_shard* sh, int begin, int end,
                         struct tl__cost_range* out) {
  memset(out, 0, sizeof *out);
  for (int i = 0; i < g->n_nodes; i++) {
    int f = tl__cost_forward_index(g, i);
    if (f < begin || f >= end) continue;
    const tl_node* n = &g->nodes[i];
    out->flops += n->flops;
    if (i < g->n_forward) out->fwd_flops += n->flops;
    if (n->again) out->again_flops += n->flops;
    if (n->op == TL_OP_ATTENTION || n->op == TL_OP_ATTENTION_BACKWARD) {
      out->attn_flops += n->flops;
      if (i < g->n_forward) out->attn_fwd_flops += n->flops;
      if (n->again) out->attn_again_flops += n->flops;
    }
  }
  /* a parameter counts once however many nodes read it (the tied wte) */
  bool* late = calloc((size_t)g->n_values, sizeof(bool));
  if (!late) return TL_ERRF(TL_ERR_NOMEM, "out of memory pricing a stage");
  for (int v = 0; v < g->n_values; v++) {
    const tl_value* val = &g->values[v];
    if (val->role != TL_ROLE_PARAM) continue;
    if (tl_graph_first_reader(g, v, begin, end) < 0) continue;
    double e = (double)tl_value_numel(val);
    out->params += e;
    const struct tl_tp_param* p = tl_tp_param_of(sh, v);
    if (p && p->partial) out->replicated += e;
    /* the trainer's late parameters (launcher/train/trainer.c) */
    int inside = tl_dp_readers(g, begin, end, v), all = tl_dp_readers(g, 0, g->n_forward, v);
    if (all > inside)
      out->shared += e;
    else if (inside > 1)
      out->multi += e;
    late[v] = all > inside || inside > 1 || (p && p->partial);
  }
  tl_dp_layout lay;
  tl_status st = tl_dp_layout_build_late(g, begin, end, late, &lay);
  free(late);
  TL_CHECK(st);
  out->staging = (double)tl_dp_layout_staging(&lay);
  tl_dp_layout_free(&lay);
  struct tl_exec_bytes b;
  TL_CHECK(tl_exec_size(g, begin, end, &b));
  out->arena = (double)b.arena;
  out->io = (double)(b.inputs + b.scratch);
  out->transient = (double)(b.transient - b.staging_params);
  out->transient_fixed = (double)b.staging_params;
  return TL_OK;
}

/* stage shape from its costs at one and two layers */
static struct tl_cost_stage_shape stage_shape(const struct tl__cost_range* one,
                                              const struct tl__cost_range* two) {
  struct tl_cost_stage_shape s = {
      .params = one->params,
      .params_layer = two->params - one->params,
      .replicated = one->replicated,
      .replicated_layer = two->replicated - one->replicated,
      .arena = one->arena,
      .arena_layer = two->arena - one->arena,
      .io = one->io,
      .transient = one->transient,
      .transient_layer = two->transient - one->transient,
      .transient_fixed = fmax(one->transient_fixed, two->transient_fixed),
  };
  /* what does not grow with the blocks: the tied embedding, the largest node */
  s.shared = two->shared, s.multi = two->multi;
  s.staging = one->staging > two->staging ? one->staging : two->staging;
  return s;
}

static int gcd(int a, int b) {
  while (b) {
    int r = a % b;
    a = b, b = r;
  }
  return a;
}

/* Rank 0's graphs of one and two blocks at tensor-parallel degree tp,
 * recomputing as rc says. */
static tl_status shard_build(const struct tl_model_config* full, int seq, int tp, bool sp,
                             tl_recompute rc, bool split, tl_dtype precision,
                             struct tl_cost_shard* out) {
  memset(out, 0, sizeof *out);
  out->tp = tp;
  out->sp = sp;
  out->recompute = rc;
  out->split = split;
  out->from_graph = true;
  /* sequence parallelism splits a micro-batch's token rows over the group:
   * the smallest micro-batch whose rows divide, then per sequence */
  const int b = sp ? tp / gcd(seq, tp) : 1;
  struct tl__cost_range r[2][4]; /* [blocks - 1][stage kind] */
  double unit[3] = {0, 0, 0};    /* embedding, block, head */
  tl_status st = TL_OK;
  for (int n = 1; n <= 2 && st == TL_OK; n++) {
    struct tl_model_config one = *full;
    one.n_layers = n;
    tl_model m;
    tl_tp_shard sh = {0};
    st = tl_model_init(&one, &m);
    tl_graph* g = NULL;
    struct tl_model_io io;
    /* rank 0's graph, as the trainer builds it (tp/tp.h) */
    if (st == TL_OK) st = tl_tp_build(&m, b, seq, tp, 0, sp, rc, split, &g, &io, &sh, NULL);
    if (st == TL_OK) st = tl_graph_set_precision(g, precision);
    if (st == TL_OK) {
      /* the last n blocks, with the embedding and / or the head */
      const int lb = io.layer_begin[0], le = io.layer_begin[n], nf = g->n_forward;
      for (int kind = 0; kind < 4 && st == TL_OK; kind++)
        st = tl__cost_range(g, &sh, kind & TL_COST_STAGE_EMBED ? 0 : lb,
                            kind & TL_COST_STAGE_HEAD ? nf : le, &r[n - 1][kind]);
      if (st == TL_OK && n == 1) {
        struct tl__cost_range e, l, h;
        st = tl__cost_range(g, &sh, 0, lb, &e);
        if (st == TL_OK) st = tl__cost_range(g, &sh, lb, le, &l);
        if (st == TL_OK) st = tl__cost_range(g, &sh, le, nf, &h);
        /* ZeRO-3's units: the early parameters of the embedding, a block, the head */
        unit[0] = e.params - e.shared - e.multi - e.replicated;
        unit[1] = l.params - l.shared - l.multi - l.replicated;
        unit[2] = h.params - h.shared - h.multi - h.replicated;
        out->embed_fwd_flops = e.fwd_flops / b, out->embed_flops = e.flops / b;
        out->layer_fwd_flops = l.fwd_flops / b, out->layer_flops = l.flops / b;
        out->layer_recompute_flops = l.again_flops / b;
        out->layer_attn_flops = l.attn_flops / b, out->layer_attn_fwd_flops = l.attn_fwd_flops / b;
        out->layer_attn_again_flops = l.attn_again_flops / b;
        out->zb_costs = tl_pp_costs_of(g, lb, le);
        if (st == TL_OK)
          st = tl__cost_gemms(g, 0, lb, b, out->embed_gemms.g, &out->embed_gemms.n,
                              TL_COST_MAX_GEMMS);
        if (st == TL_OK)
          st = tl__cost_gemms(g, lb, le, b, out->layer_gemms.g, &out->layer_gemms.n,
                              TL_COST_MAX_GEMMS);
        if (st == TL_OK)
          st = tl__cost_gemms(g, le, nf, b, out->head_gemms.g, &out->head_gemms.n,
                              TL_COST_MAX_GEMMS);
        out->head_fwd_flops = h.fwd_flops / b, out->head_flops = h.flops / b;
      }
    }
    tl_graph_destroy(g);
    tl_tp_shard_free(&sh);
  }
  for (int kind = 0; kind < 4 && st == TL_OK; kind++) {
    struct tl_cost_stage_shape* x = &out->stage[kind];
    *x = stage_shape(&r[0][kind], &r[1][kind]);
    x->arena /= b, x->arena_layer /= b, x->io /= b;
    x->transient /= b, x->transient_layer /= b;
    x->unit_max = unit[1];
    if (kind & TL_COST_STAGE_EMBED && unit[0] > x->unit_max) x->unit_max = unit[0];
    if (kind & TL_COST_STAGE_HEAD && unit[2] > x->unit_max) x->unit_max = unit[2];
  }
  return st;
}

/* The shards to build, each into out->shards[i]: independent graphs, built
 * by as many threads as there are cores (at most 8), each taking the next
 * job; the first error (in job order) is the build's. */
struct shard_job {
  int tp, sp, split, rc;
};
struct shard_jobs {
  const struct tl_model_config* full;
  int seq;
  tl_dtype precision;
  tl_cost_model* out;
  struct shard_job job[TL_COST_MAX_SHARDS];
  int n;
  _Atomic int next;
  /* per job: its status and, when not TL_OK, its message */
  tl_status status[TL_COST_MAX_SHARDS];
  char* message[TL_COST_MAX_SHARDS];
};

static void* shard_worker(void* arg) {
  struct shard_jobs* j = arg;
  for (int i; (i = atomic_fetch_add(&j->next, 1)) < j->n;) {
    const struct shard_job* x = &j->job[i];
    j->status[i] = shard_build(j->full, j->seq, x->tp, x->sp, (tl_recompute)x->rc, x->split,
                               j->precision, &j->out->shards[i]);
    if (j->status[i] != TL_OK) {
      j->message[i] = strdup(tl_last_error());
      atomic_store(&j->next, j->n); /* no more jobs: the build fails */
    }
  }
  return NULL;
}

static tl_status shard_build_all(struct shard_jobs* j) {
  for (int i = 0; i < j->n; i++) j->status[i] = TL_OK, j->message[i] = NULL;
  atomic_init(&j->next, 0);
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  int n_threads = cores < 1 ? 1 : cores > 8 ? 8 : (int)cores;
  if (n_threads > j->n) n_threads = j->n;
  pthread_t th[8];
  int started = 0;
  for (int i = 1; i < n_threads; i++) /* this thread is the first worker */
    if (pthread_create(&th[started], NULL, shard_worker, j) == 0) started++;
  shard_worker(j);
  for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
  tl_status st = TL_OK;
  for (int i = 0; i < j->n; i++) {
    if (st == TL_OK && j->status[i] != TL_OK)
      st = TL_ERRF(j->status[i], "%s", j->message[i] ? j->message[i] : "building a cost model");
    free(j->message[i]);
  }
  return st;
}

tl_status tl_cost_model_build(const struct tl_model_config* mc, int seq, tl_cost_model* out) {
  return tl_cost_model_build_precision(mc, seq, TL_F32, out);
}

tl_status tl_cost_model_build_precision(const struct tl_model_config* mc, int seq,
                                        tl_dtype precision, tl_cost_model* out) {
  return tl_cost_model_build_tp(mc, seq, precision, 0, out);
}

tl_status tl_cost_model_build_tp(const struct tl_model_config* mc, int seq, tl_dtype precision,
                                 int max_tp, tl_cost_model* out) {
  memset(out, 0, sizeof *out);
  out->kind = mc->kind;
  out->precision = precision;
  if (precision != TL_F32 && precision != TL_BF16)
    return TL_ERRF(TL_ERR_INVALID, "precision %s; expected f32 or bf16", tl_dtype_name(precision));
  if (seq < 1) return TL_ERRF(TL_ERR_INVALID, "sequence length %d; expected >= 1", seq);
  if (mc->kind == TL_MODEL_MLP) return tl__cost_mlp_model_build(mc, seq, out);
  if (mc->n_layers < 1 || mc->n_layers > TL_MODEL_MAX_LAYERS)
    return TL_ERRF(TL_ERR_CONFIG, "model.n_layers=%d; the planner prices 1 to %d", mc->n_layers,
                   TL_MODEL_MAX_LAYERS);
  /* 1. the whole model's parameter layout (arithmetic only) */
  struct tl_model_config full = *mc;
  if (full.max_seq_len < seq) full.max_seq_len = seq;
  tl_model m;
  TL_CHECK(tl_model_init(&full, &m));
  out->n_layers = mc->n_layers;
  out->n_heads = mc->n_heads;
  out->n_embd = mc->n_embd;
  out->vocab = m.vocab;
  out->padded_vocab = m.padded_vocab;
  out->seq = seq;
  out->params_total = m.n_params;
  const struct tl_param_tensor* wte = &m.tensors[tl_model_tensor(&m, "wte")];
  const struct tl_param_tensor* wpe = &m.tensors[tl_model_tensor(&m, "wpe")];
  const struct tl_param_tensor* lnfw = &m.tensors[tl_model_tensor(&m, "lnfw")];
  out->params_embed = wte->numel + wpe->numel;
  out->params_head = wte->numel + 2 * lnfw->numel;
  out->params_layer = (m.n_params - out->params_embed - 2 * lnfw->numel) / mc->n_layers;

  /* 2. one block's graph at micro-batch 1: every block has this shape */
  struct tl_model_config one = full;
  one.n_layers = 1;
  tl_model m1;
  TL_CHECK(tl_model_init(&one, &m1));
  tl_graph* g = NULL;
  struct tl_model_io io;
  TL_CHECK(tl_model_build(&m1, 1, seq, true, &g, &io));
  int lb = io.layer_begin[0], le = io.layer_begin[1];
  /* which of the block's activations tensor parallelism keeps whole on
   * every rank (Korthikanti's replicated part): as tp's pass holds them at
   * the smallest degree the block splits by (none: all of them) */
  tl_graph* fwd = NULL;
  tl_tp_shard sh = {0};
  int t0 = 2;
  while (t0 <= mc->n_heads && (mc->n_heads % t0 || m.padded_vocab % t0)) t0++;
  tl_status st = TL_OK;
  if (t0 <= mc->n_heads) {
    tl_graph* split = NULL;
    struct tl_model_io fio;
    st = tl_model_build_forward(&m1, 1, seq, true, &fwd, &fio);
    if (st == TL_OK) st = tl_tp_shard_graph(fwd, t0, 0, false, &split, &sh);
    tl_graph_destroy(split);
  }
  if (st != TL_OK) {
    tl_graph_destroy(g);
    tl_graph_destroy(fwd);
    return st;
  }
  for (int i = 0; i < g->n_nodes; i++) {
    const tl_node* n = &g->nodes[i];
    int f = tl__cost_forward_index(g, i);
    double fl = n->flops;
    if (f < lb) {
      out->embed_flops += fl;
    } else if (f < le) {
      out->layer_flops += fl;
      if (i < g->n_forward) out->layer_fwd_flops += fl;
    } else {
      out->head_flops += fl;
      if (i < g->n_forward) out->head_fwd_flops += fl;
    }
    if (i >= g->n_forward) continue;
    /* 3. the activations this forward node writes */
    for (int k = 0; k < n->n_out; k++) {
      int v = n->out[k];
      if (v < 0 || g->values[v].role != TL_ROLE_ACTIVATION) continue;
      double e = (double)tl_value_numel(&g->values[v]);
      if (f < lb) {
        out->layer_input += e; /* the embedding's output is block 0's input */
      } else if (f < le) {
        /* both graphs are built by the same calls: values are numbered alike */
        if (!fwd || tl_tp_value_whole(&sh, sh.value_map[v]))
          out->layer_act_rep += e;
        else
          out->layer_act_shard += e;
      } else {
        out->head_act += e;
      }
    }
  }
  tl_graph_destroy(g);
  tl_graph_destroy(fwd);
  tl_tp_shard_free(&sh);

  /* 4. per device, for every tensor-parallel degree a mesh may use,
   * every recomputation and both backwards (shards[0 .. 3) are tp = 1,
   * one pass, by mode; shards[3 .. 6) the same split) */
  struct shard_jobs jobs = {.full = &full, .seq = seq, .precision = precision, .out = out};
  const int top = max_tp > 0 && max_tp < mc->n_heads ? max_tp : mc->n_heads;
  for (int t = 1; t <= top && jobs.n + 6 <= TL_COST_MAX_SHARDS; t++) {
    if (mc->n_heads % t || m.padded_vocab % t) continue;
    for (int sp = 0; sp <= (t > 1) && jobs.n + 6 <= TL_COST_MAX_SHARDS; sp++)
      for (int split = 0; split <= 1; split++)
        for (int rc = TL_RECOMPUTE_NONE; rc <= TL_RECOMPUTE_FULL; rc++)
          jobs.job[jobs.n++] = (struct shard_job){t, sp, split, rc};
  }
  out->n_shards = jobs.n;
  TL_CHECK(shard_build_all(&jobs));
  for (int rc = 0; rc < 3; rc++)
    out->layer_recompute_flops[rc] = out->shards[rc].layer_flops - out->shards[0].layer_flops;
  return TL_OK;
}

bool tl_cost_has_shard(const tl_cost_model* cm, int tp) {
  for (int i = 0; i < cm->n_shards; i++)
    if (cm->shards[i].tp == tp && cm->shards[i].from_graph) return true;
  return false;
}

const struct tl_cost_shard* tl_cost_shard_of(const tl_cost_model* cm, int tp, bool sp,
                                             tl_recompute rc, bool split,
                                             struct tl_cost_shard* tmp) {
  sp = sp && tp > 1 && cm->kind != TL_MODEL_MLP; /* an MLP has no sequence */
  if (cm->kind == TL_MODEL_MLP) rc = TL_RECOMPUTE_NONE, split = false;
  for (int i = 0; i < cm->n_shards; i++)
    if (cm->shards[i].tp == tp && cm->shards[i].sp == sp && cm->shards[i].recompute == rc &&
        cm->shards[i].split == split)
      return &cm->shards[i];
  /* no layout for tp: scale tp = 1 (parameters and FLOPs by 1/t, the
   * activations' sharded part by 1/t, and everything by 1/t with sequence
   * parallelism) */
  *tmp = cm->shards[cm->kind == TL_MODEL_MLP ? 0 : rc + (split ? 3 : 0)];
  tmp->tp = tp;
  tmp->sp = sp;
  tmp->from_graph = false;
  if (tp <= 1) return tmp;
  double t = tp, rep = cm->layer_act_rep, shard = cm->layer_act_shard;
  double act = sp ? 1.0 / t : (rep + shard / t) / (rep + shard);
  double* flops[] = {&tmp->layer_fwd_flops,      &tmp->layer_flops,      &tmp->embed_fwd_flops,
                     &tmp->embed_flops,          &tmp->head_fwd_flops,   &tmp->head_flops,
                     &tmp->layer_recompute_flops, &tmp->layer_attn_flops, &tmp->layer_attn_fwd_flops,
                     &tmp->layer_attn_again_flops};
  for (int i = 0; i < 10; i++) *flops[i] /= t;
  struct tl_cost_gemms* gs[] = {&tmp->layer_gemms, &tmp->embed_gemms, &tmp->head_gemms};
  for (int i = 0; i < 3; i++) /* each product's FLOPs by 1/t (its shape as one) */
    for (int j = 0; j < gs[i]->n; j++) gs[i]->g[j].n /= t;
  for (int k = 0; k < 4; k++) {
    struct tl_cost_stage_shape* s = &tmp->stage[k];
    s->params /= t, s->params_layer /= t;
    s->replicated = s->replicated_layer = 0;
    s->shared /= t, s->multi /= t, s->staging /= t, s->unit_max /= t;
    s->arena *= act, s->arena_layer *= act;
    s->transient *= act, s->transient_layer *= act, s->transient_fixed /= t;
  }
  return tmp;
}

tl_status tl_cost_stage_layers(const tl_cost_model* cm, int tp, bool sp, int pp, int* layers) {
  if (pp < 1 || pp > cm->n_layers)
    return TL_ERRF(TL_ERR_CONFIG, "mesh.pp=%d stages for a model of %d layers: need 1 to %d", pp,
                   cm->n_layers, cm->n_layers);
  struct tl_cost_shard tmp;
  const struct tl_cost_shard* s = tl_cost_shard_of(cm, tp, sp, TL_RECOMPUTE_NONE, false, &tmp);
  /* the trainer's costs are b times these: FLOPs are whole numbers, so the
   * comparisons come out the same */
  double* cost = malloc(sizeof(double) * (size_t)cm->n_layers);
  if (!cost) return TL_ERRF(TL_ERR_NOMEM, "out of memory cutting %d layers", cm->n_layers);
  for (int l = 0; l < cm->n_layers; l++)
    cost[l] = cm->kind == TL_MODEL_MLP ? s->mlp_layer[l].fwd_flops : s->layer_fwd_flops;
  /* pp's own cut, on the forward FLOPs the trainer's graph counts */
  tl_status st = tl_pp_cut(cost, cm->n_layers, s->embed_fwd_flops, s->head_fwd_flops, pp, layers);
  free(cost);
  return st;
}

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

/* The model state a stage of `params` elements holds on a data-parallel
 * rank, as dp/ and the trainer allocate it in fp32: the formulas' ZeRO-1
 * and ZeRO-2 with the shard the buckets cut (each bucket's chunk rounded
 * up) and ZeRO-2's staging, bucket buffers and late gradients
 * (dp/buckets.h); late = the parameters reduced last (sum over another
 * group first), multi = those several nodes write (late for ZeRO-2). */
double tl__cost_zero_state(const tl_plan* p, tl_dtype dtype, double params, double late,
                           double multi, double staging, double unit_max) {
  struct tl_state_bytes sb = tl_cost_state_bytes(dtype);
  /* a bf16 reduction's image of the buckets (ZeRO 0, 1: the whole stage) */
  const double image = p->grad_reduce == TL_BF16 && p->dp > 1 ? 2.0 * params : 0;
  if (dtype != TL_F32 || p->zero == 0)
    return tl_cost_model_state(params, p->zero, p->dp, sb) + (p->zero < 2 ? image : 0);
  double mb = p->dp_bucket_mb > 0 ? p->dp_bucket_mb : 1e9; /* 0: one bucket a part */
  int64_t n = (int64_t)params;
  if (p->zero == 1)
    return params * (sb.w + sb.g) +
           sb.o * (double)tl_dp_shard_elems(n, (int64_t)late, p->dp, mb) + image;
  int64_t l2 = (int64_t)(late + multi);
  double shard = (double)tl_dp_shard_elems(n, l2, p->dp, mb);
  return (p->zero == 2 ? params * sb.w : 0) + sb.o * shard +
         (double)tl_dp_buckets_bytes(p->zero, n, l2, (int64_t)staging, (int64_t)unit_max, p->dp,
                                     mb, p->grad_reduce);
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
  double kept = 0, transient = 0;
  for (int c = 0; c < v; c++) {
    const int q = c * p->pp + s, k = layers[q];
    const struct tl_cost_stage_shape* x = &sh->stage[stage_kind(q, n_virtual)];
    /* 1. parameters, gradients, optimizer state: the chunks' in one layout */
    params += x->params + (k - 1) * x->params_layer;
    if (sh->sp && sh->tp > 1) rep += x->replicated + (k - 1) * x->replicated_layer;
    shared += x->shared, multi += x->multi;
    staging = fmax(staging, x->staging), unit_max = fmax(unit_max, x->unit_max);
    /* 2. an executor per micro-batch the chunk holds, each its own arena
     * (what a forward keeps for its backward: with recomputation, the
     * layers' inputs alone), and the transient arena they all share (a
     * pass's working set: the largest chunk's) */
    kept += held[c] * b * ((x->arena + (k - 1) * x->arena_layer) * scale + x->io);
    transient = fmax(transient, (x->transient + (k - 1) * x->transient_layer) * scale * b +
                                    x->transient_fixed);
  }
  /* the packed LayerNorm gradients of sequence parallelism; the trainer's
   * norm scalar */
  *state =
      tl__cost_zero_state(p, state_dtype, params, shared + rep, multi, staging, unit_max) + 4.0;
  if (sh->sp && sh->tp > 1) *state += 4.0 * (rep > 0 ? rep : 1);
  *act = kept + transient;
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
  if (cm->kind == TL_MODEL_MLP && p->pp >= 1 && p->pp <= cm->n_layers) {
    tl__cost_mlp_evaluate(cm, c, dtype, layers, p);
    return;
  }
  const int t = p->tp, pp = p->pp, d = p->dp, m = p->n_micro, b = p->micro_batch;
  const double act_bytes = tl_dtype_size(dtype); /* the graph counts elements */
  const int dpn = c->devices_per_node;
  const int L = cm->n_layers;
  const double bsh = (double)b * cm->layer_input; /* (b, s, h) elements */
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
  const double attn_eff = c->attention_efficiency > 0 ? c->attention_efficiency : c->efficiency;
  const double attn = sh->layer_attn_flops +
                      (whole ? sh->layer_attn_fwd_flops - sh->layer_attn_again_flops : 0);
  const double peak = tl_cluster_peak(c, dtype);
  /* seconds per sequence of a block, of the embedding and of the head at
   * micro-batch b: matrix products by shape where the cluster has a table,
   * attention kernels at their rate, the rest at `eff` */
  double sec_layer, sec_embed, sec_head;
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
    sec_layer = (fl - attn - fl_l) / (peak * eff) + attn / (peak * attn_eff) + g_l;
    sec_embed = (sh->embed_flops - fl_e) / (peak * eff) + g_e;
    sec_head = (sh->head_flops - fl_h) / (peak * eff) + g_h;
  }
  /* 1. memory: the fullest stage */
  p->mem_state = p->mem_act = -1;
  double grads = 0, slowest = 0, ln_grads = 0;
  int k_slowest = 1;
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
    int k = 0;
    for (int c = 0; c < v; c++) { /* the stage's chunks */
      const int q = c * pp + s;
      const struct tl_cost_stage_shape* x = &sh->stage[stage_kind(q, n_virtual)];
      params += x->params + (layers[q] - 1) * x->params_layer;
      rep += x->replicated + (layers[q] - 1) * x->replicated_layer;
      /* the stage's arithmetic per sequence; the shard's graph recomputes
       * as the plan does: its FLOPs count the copies */
      fl += layers[q] * sec_layer;
      if (q == 0) fl += sec_embed;
      if (q == n_virtual - 1) fl += sec_head;
      k += layers[q];
    }
    if (params > grads) grads = params;
    if (rep > ln_grads) ln_grads = rep;
    if (fl > slowest) slowest = fl, k_slowest = k;
  }
  p->mem_reserve = c->reserve_bytes;
  p->mem_total = p->mem_state + p->mem_act + p->mem_reserve;
  p->fits = p->mem_total <= c->device_memory_bytes;

  /* 2. time of one micro-batch on the slowest stage */
  double comp = slowest * b; /* seconds of one micro-batch on the slowest stage */
  const struct tl_link tp_l = tl_cost_group_link(c, t, 1), *tp_link = &tp_l;
  /* full recomputation re-runs the forward's two collectives */
  const bool full = p->recompute == TL_RECOMPUTE_FULL;
  int tp_calls = full ? 6 : 4;
  double tp_comm = k_slowest * tp_calls * tl_cost_all_reduce(c, bsh * act_bytes, t, tp_link);
  /* sequence parallelism moves the same bytes (a reduce-scatter and an
   * all-gather for each all-reduce), and gathers each column-parallel
   * matmul's input once more in the backward: 2 all-gathers per layer
   * (which full recomputation's own gathers serve: tl_graph_recompute) */
  if (sh->sp && t > 1 && !full)
    tp_comm += k_slowest * 2 * tl_cost_all_gather(c, bsh * act_bytes, t, tp_link);
  double pp_comm = 0;
  if (pp > 1) {
    const struct tl_link* pp_link = d * t >= dpn ? &c->inter : &c->intra;
    /* each chunk's boundary: interleaving sends v times the messages */
    pp_comm = v * 2.0 * (bsh * act_bytes / t / pp_link->bandwidth + pp_link->latency);
  }
  double micro = comp + tp_comm + pp_comm;

  /* 3. the step: m micro-batches, the bubble, then the gradient all-reduce */
  const struct tl_link dp_l = tl_cost_group_link(c, d, t), *dp_link = &dp_l;
  /* gradients are summed and all-reduced in fp32 (Megatron-LM's default for
   * bf16, and trellis's under train.precision "bf16"), whatever the
   * activations' dtype */
  double dp = tl__cost_dp_seconds(c, p, grads, dp_link, comp);
  p->t_compute = m * comp;
  p->t_tp = m * tp_comm;
  /* and once a step, the LayerNorm gradients summed over the group (packed) */
  if (sh->sp && t > 1) p->t_tp += tl_cost_all_reduce(c, ln_grads * 4.0, t, tp_link);
  p->t_pp = m * pp_comm;
  p->zb_costs = sh->zb_costs;
  p->t_bubble = bubble_micro_batches(p, &sh->zb_costs) * micro;
  p->t_dp = dp;
  p->t_step = p->t_compute + p->t_tp + p->t_pp + p->t_bubble + p->t_dp;

  double layer_fl =
      cm->layer_flops + (whole ? cm->layer_fwd_flops : cm->layer_recompute_flops[p->recompute]);
  double devices = (double)d * t * pp;
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
  if (p->t_pp > best) name = "pp comm", best = p->t_pp;
  if (p->t_dp > best) name = "dp comm", best = p->t_dp;
  return name;
}
