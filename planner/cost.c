/* cost.c — the cost model built: per-layer costs read off the graphs of
 * every tensor-parallel shard (cost_eval.c prices plans on them; see cost.h
 * for the formulas and their sources). */
#include "planner/cost.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/device.h"
#include "dp/buckets.h"
#include "dp/layout.h"
#include "graph/exec.h"
#include "graph/graph.h"
#include "graph/model.h"
#include "graph/op.h"
#include "planner/cost_impl.h"
#include "pp/cut.h"
#include "pp/schedule.h"
#include "tp/cp.h"
#include "tp/tp.h"

int tl__cost_forward_index(const tl_graph* g, int i) {
  return i < g->n_forward ? i : g->nodes[i].forward_of;
}

/* what sizes an executor whose pieces read their parameter (never run) */
static tl_status never_called(void* user, int v, int64_t row0, int64_t rows, const void** at) {
  (void)user, (void)v, (void)row0, (void)rows, (void)at;
  return TL_ERRF(TL_ERR_INTERNAL, "the planner runs no pieces");
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
    if (n->op == TL_OP_ATTENTION || n->op == TL_OP_ATTENTION_BACKWARD ||
        tl_cp_attention_op(n->op)) {
      out->attn_flops += n->flops;
      if (i < g->n_forward) out->attn_fwd_flops += n->flops;
      if (n->again) out->attn_again_flops += n->flops;
    }
  }
  /* a parameter counts once however many nodes read it (the tied wte) */
  bool* late = calloc((size_t)g->n_values, sizeof(bool));
  int64_t* one = calloc((size_t)g->n_values, sizeof(int64_t)); /* the pieces, a row each */
  int shared_pieced = -1; /* a parameter in pieces another stage reads too */
  if (!late || !one) {
    free(late);
    free(one);
    return TL_ERRF(TL_ERR_NOMEM, "out of memory pricing a stage");
  }
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
    /* the trainer's pieces (launcher/train/trainer_pieces.c): several
     * readers here, or here and on another stage (then every reader can
     * write pieces, and the parameter is the last of the layout: checked
     * below) */
    const bool pieceable = all == inside ? inside > 1 && tl_exec_can_piece(g, begin, end, v)
                                         : tl_exec_can_piece(g, 0, g->n_forward, v);
    if (pieceable && !(p && p->partial) && val->n_dims == 2) {
      if (all > inside) shared_pieced = v;
      out->pieced += e;
      out->piece_cols = (double)val->shape[1];
      one[v] = 1;
    }
  }
  tl_dp_layout lay;
  tl_status st = tl_dp_layout_build_late(g, begin, end, late, &lay);
  free(late);
  if (st != TL_OK) free(one);
  TL_CHECK(st);
  /* a late parameter behind the shared one (a LayerNorm sequence
   * parallelism sums), or one several of the range's nodes read, keeps it
   * whole (launcher/train/trainer_pieces.c's may_piece) */
  if (shared_pieced >= 0 &&
      (lay.segments[lay.n_segments - 1].value != shared_pieced || out->multi > 0)) {
    out->pieced = out->piece_cols = out->piece_emb = 0;
    one[shared_pieced] = 0;
  }
  /* a piece of one row: its temporaries' elements a row */
  const struct tl_exec_pieces p1 = {.rows = one};
  out->piece_m = (double)(tl_exec_piece_bytes(g, begin, end, &p1) / sizeof(float));
  /* and ZeRO-3's reading them in pieces too (the ops' part: the bf16
   * copy of a piece is priced apart) */
  const struct tl_exec_pieces pr = {.rows = one, .param = never_called};
  size_t read_ops, read_copy;
  tl_exec_piece_sizes(g, begin, end, &pr, &read_ops, &read_copy);
  out->piece_emb = (double)(read_ops / sizeof(float));
  out->staging = (double)tl_dp_layout_staging(&lay);
  /* ZeRO-2's matrix of the largest node, on a range of no late parameters
   * (launcher/train/trainer_pieces.c's tl__trainer_solo_pieces) */
  int sv;
  int64_t solo = 0, after = 0;
  if (tl_dp_solo_candidates(g, begin, end, &lay, &sv, 1, &solo, &after) == 1) {
    int64_t* row = calloc((size_t)g->n_values, sizeof(int64_t));
    if (!row) st = TL_ERRF(TL_ERR_NOMEM, "out of memory pricing a stage");
    if (row) {
      row[sv] = 1;
      const struct tl_exec_pieces ps = {.rows = row};
      out->solo = (struct tl_cost_solo){
          .elems = (double)solo,
          .cols = (double)g->values[sv].shape[1],
          .m = (double)(tl_exec_piece_bytes(g, begin, end, &ps) / sizeof(float)),
          .after = (double)after};
    }
    free(row);
  }
  tl_dp_layout_free(&lay);
  if (st != TL_OK) free(one);
  TL_CHECK(st);
  struct tl_exec_bytes b;
  st = tl_exec_size(g, begin, end, &b);
  if (st != TL_OK) free(one);
  TL_CHECK(st);
  out->arena = (double)b.arena;
  out->io = (double)(b.inputs + b.scratch);
  out->transient = (double)(b.transient - b.staging_params);
  out->transient_fixed = out->transient_fixed_pieced = (double)b.staging_params;
  /* ZeRO-3 reads the pieced parameters a piece at a time: no whole fp32
   * copy of them */
  const struct tl_exec_pieces p3 = {.rows = one, .param = never_called};
  if (out->pieced > 0) st = tl_exec_size_pieces(g, begin, end, &p3, &b);
  free(one);
  TL_CHECK(st);
  out->transient_fixed_pieced = (double)b.staging_params;
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
      .transient_fixed_pieced = fmax(one->transient_fixed_pieced, two->transient_fixed_pieced),
  };
  /* what does not grow with the blocks: the tied embedding, the largest node */
  s.shared = two->shared, s.multi = two->multi;
  s.pieced = two->pieced, s.piece_cols = two->piece_cols, s.piece_m = two->piece_m;
  s.piece_emb = two->piece_emb;
  s.staging = one->staging > two->staging ? one->staging : two->staging;
  s.solo = one->solo, s.solo_k = two->solo;
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
static tl_status shard_build(const struct tl_model_config* full, int seq, int cp, int tp, bool sp,
                             tl_recompute rc, bool split, tl_dtype precision,
                             struct tl_cost_shard* out) {
  memset(out, 0, sizeof *out);
  out->tp = tp;
  out->sp = sp;
  out->recompute = rc;
  out->split = split;
  out->from_graph = true;
  /* a context-parallel rank's share of each sequence (cp.h) */
  const int t = seq / cp;
  /* sequence parallelism splits a micro-batch's token rows over the group:
   * the smallest micro-batch whose rows divide, then per sequence */
  const int b = sp ? tp / gcd(t, tp) : 1;
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
    if (st == TL_OK) st = tl_tp_build(&m, b, t, tp, 0, sp, cp, 0, rc, split, &g, &io, &sh, NULL);
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
    x->transient /= b, x->transient_layer /= b, x->piece_m /= b, x->piece_emb /= b;
    x->solo.m /= b, x->solo_k.m /= b;
    x->unit_max = unit[1];
    if (kind & TL_COST_STAGE_EMBED && unit[0] > x->unit_max) x->unit_max = unit[0];
    if (kind & TL_COST_STAGE_HEAD && unit[2] > x->unit_max) x->unit_max = unit[2];
    x->piece_room = kind == (TL_COST_STAGE_EMBED | TL_COST_STAGE_HEAD)
                        ? x->unit_max - (unit[0] > unit[2] ? unit[0] : unit[2])
                        : 0;
    x->late_room = kind == TL_COST_STAGE_EMBED  ? x->unit_max - unit[0]
                   : kind == TL_COST_STAGE_HEAD ? x->unit_max - unit[2]
                                                : x->piece_room;
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
  int seq, cp;
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
    j->status[i] = shard_build(j->full, j->seq, j->cp, x->tp, x->sp, (tl_recompute)x->rc, x->split,
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
  long cores = tl_cpu_cores();
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

bool tl_cost_tp_divides(const struct tl_model_config* mc, int padded_vocab, int tp) {
  if (mc->n_heads % tp || padded_vocab % tp) return false;
  if (mc->kind != TL_MODEL_LLAMA) return true;
  return tl_config_kv_heads(mc) % tp == 0 && tl_config_ffn_hidden(mc) % tp == 0;
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
  return tl_cost_model_build_cp(mc, seq, precision, max_tp, 1, out);
}

tl_status tl_cost_model_build_cp(const struct tl_model_config* mc, int seq, tl_dtype precision,
                                 int max_tp, int cp, tl_cost_model* out) {
  memset(out, 0, sizeof *out);
  out->kind = mc->kind;
  out->precision = precision;
  out->cp = 1;
  if (precision != TL_F32 && precision != TL_BF16)
    return TL_ERRF(TL_ERR_INVALID, "precision %s; expected f32 or bf16", tl_dtype_name(precision));
  if (seq < 1) return TL_ERRF(TL_ERR_INVALID, "sequence length %d; expected >= 1", seq);
  if (cp < 1 || (cp > 1 && (mc->kind == TL_MODEL_MLP || seq % (2 * cp) != 0)))
    return TL_ERRF(TL_ERR_CONFIG,
                   "context parallelism of %d ranks: it splits a transformer's sequence into 2 cp "
                   "chunks (%d tokens%s)",
                   cp, seq, mc->kind == TL_MODEL_MLP ? "; an MLP has none" : "");
  out->cp = cp;
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
  out->n_kv_heads = mc->kind == TL_MODEL_LLAMA ? tl_config_kv_heads(mc) : mc->n_heads;
  out->ffn_hidden = mc->kind == TL_MODEL_LLAMA ? tl_config_ffn_hidden(mc) : 4 * mc->n_embd;
  out->vocab = m.vocab;
  out->padded_vocab = m.padded_vocab;
  out->seq = seq;
  out->params_total = m.n_params;
  /* the embedding's tensors (the GPT's position table too), the head's (its
   * own matrix, or the tied embedding's copy; the final norm) and, the
   * rest over the layers, one block's */
  const bool llama = mc->kind == TL_MODEL_LLAMA;
  const int64_t wte = m.tensors[tl_model_tensor(&m, "wte")].numel;
  const int64_t wpe = llama ? 0 : m.tensors[tl_model_tensor(&m, "wpe")].numel;
  const int64_t norm = llama ? m.tensors[tl_model_tensor(&m, "rmsfw")].numel
                             : 2 * m.tensors[tl_model_tensor(&m, "lnfw")].numel;
  const int headw = tl_model_tensor(&m, "headw");
  const int64_t own_head = headw >= 0 ? m.tensors[headw].numel : 0;
  out->params_embed = wte + wpe;
  out->params_head = (headw >= 0 ? own_head : wte) + norm;
  out->params_layer = (m.n_params - out->params_embed - own_head - norm) / mc->n_layers;

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
  while (t0 <= mc->n_heads && !tl_cost_tp_divides(mc, m.padded_vocab, t0)) t0++;
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
  struct shard_jobs jobs = {
      .full = &full, .seq = seq, .cp = cp, .precision = precision, .out = out};
  const int top = max_tp > 0 && max_tp < mc->n_heads ? max_tp : mc->n_heads;
  for (int t = 1; t <= top && jobs.n + 6 <= TL_COST_MAX_SHARDS; t++) {
    if (!tl_cost_tp_divides(mc, m.padded_vocab, t)) continue;
    for (int sp = 0; sp <= (t > 1) && jobs.n + 6 <= TL_COST_MAX_SHARDS; sp++)
      for (int split = 0; split <= 1; split++)
        for (int rc = TL_RECOMPUTE_NONE; rc <= TL_RECOMPUTE_FULL; rc++)
          jobs.job[jobs.n++] = (struct shard_job){t, sp, split, rc};
  }
  out->n_shards = jobs.n;
  TL_CHECK(shard_build_all(&jobs));
  /* a rank's share of the recomputation (a cp-th of the sequence's) */
  for (int rc = 0; rc < 3; rc++)
    out->layer_recompute_flops[rc] =
        cp * (out->shards[rc].layer_flops - out->shards[0].layer_flops);
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
  double* flops[] = {&tmp->layer_fwd_flops,       &tmp->layer_flops,
                     &tmp->embed_fwd_flops,       &tmp->embed_flops,
                     &tmp->head_fwd_flops,        &tmp->head_flops,
                     &tmp->layer_recompute_flops, &tmp->layer_attn_flops,
                     &tmp->layer_attn_fwd_flops,  &tmp->layer_attn_again_flops};
  for (int i = 0; i < 10; i++) *flops[i] /= t;
  struct tl_cost_gemms* gs[] = {&tmp->layer_gemms, &tmp->embed_gemms, &tmp->head_gemms};
  for (int i = 0; i < 3; i++) /* each product's FLOPs by 1/t (its shape as one) */
    for (int j = 0; j < gs[i]->n; j++) gs[i]->g[j].n /= t;
  for (int k = 0; k < 4; k++) {
    struct tl_cost_stage_shape* s = &tmp->stage[k];
    s->params /= t, s->params_layer /= t;
    s->replicated = s->replicated_layer = 0;
    s->shared /= t, s->multi /= t, s->pieced /= t, s->staging /= t, s->unit_max /= t;
    s->piece_room /= t; /* approximate, as unit_max: a replicated table does not shrink */
    s->late_room = 0;   /* not scaled: the table would be priced whole or not by a guess */
    s->solo = s->solo_k = (struct tl_cost_solo){0}; /* nor the pieces of a matrix */
    s->arena *= act, s->arena_layer *= act;
    s->transient *= act, s->transient_layer *= act, s->transient_fixed /= t;
    s->transient_fixed_pieced /= t;
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
