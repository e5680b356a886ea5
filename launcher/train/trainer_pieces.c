/* trainer_pieces.c — what the trainer decides about ZeRO's parameters from
 * its stages: ZeRO-3's units, and which parameters ZeRO 2 and 3 write (and
 * ZeRO-3 reads) a piece of rows at a time, at how many rows (dp/buckets.h's
 * piece_cols and piece_rows; graph/exec.h's tl_exec_pieces): the tied
 * embedding, and under ZeRO-2 a stage's largest matrix where staging it
 * would cost what sharding saves. The planner decides alike
 * (planner/cost_eval.c's stage_pieces and tl__cost_solo_rows). */
#include <stdlib.h>

#include "graph/exec.h"
#include "launcher/train/trainer_impl.h"
#include "tp/tp.h"

int tl__trainer_units(const tl_trainer* t, int s, int* units) {
  const tl_pp_stage* x = &t->stages[s]; /* its first chunk: ZeRO-3 runs one */
  int n = 0;
  units[n++] = x->node_begin;
  for (int l = 0; l <= t->io.n_layers; l++)
    if (t->io.layer_begin[l] > x->node_begin && t->io.layer_begin[l] < x->node_end)
      units[n++] = t->io.layer_begin[l];
  units[n] = x->node_end;
  return n;
}

void tl__trainer_unit_pieces(const tl_trainer* t, const int* units, int n_units, bool* out) {
  for (int u = 0; u < n_units; u++) {
    out[u] = false;
    for (int f = units[u]; t->piece_cols && f < units[u + 1]; f++)
      for (int k = 0; k < t->graph->nodes[f].n_in; k++) {
        const int v = t->graph->nodes[f].in[k];
        if (v >= 0 && t->piece_cols[v] > 0) out[u] = true;
      }
  }
}

void tl__trainer_unit_late(const tl_trainer* t, const int* units, int n_units, int* out) {
  const tl_graph* g = t->graph;
  for (int u = 0; u < n_units; u++) {
    out[u] = -1;
    for (int f = units[u]; f < units[u + 1] && out[u] < 0; f++)
      for (int k = 0; k < g->nodes[f].n_in && out[u] < 0; k++) {
        const int v = g->nodes[f].in[k];
        if (v < 0 || g->values[v].role != TL_ROLE_PARAM || t->lay->offset[v] < t->lay->n_early ||
            (t->piece_cols && t->piece_cols[v] > 0))
          continue;
        const struct tl_tp_param* p = tl_tp_param_of(&t->shard, v);
        if (!(p && p->partial && t->tp_size > 1)) out[u] = v;
      }
  }
  /* a parameter is gathered with the units that name it, so every unit
   * that reads it must name it: else none does (whole for the step) */
  for (int u = 0; u < n_units; u++) {
    const int v = out[u];
    bool all = v >= 0;
    for (int w = 0; all && w < n_units; w++)
      for (int f = units[w]; all && f < units[w + 1]; f++)
        if (tl_node_reads(&g->nodes[f], v) && out[w] != v) all = false;
    for (int w = 0; v >= 0 && !all && w < n_units; w++)
      if (out[w] == v) out[w] = -1;
  }
}

/* Whether this rank's stage writes parameter v's gradient in pieces: under
 * ZeRO 2 and 3 with one chunk a stage, a matrix whose gradient is a sum
 * (several of the stage's nodes read it, or another stage's too: the tied
 * embedding over a pipeline, its stages' shards summed by the trainer) that
 * no tensor-parallel group sums first, read only by nodes that can write
 * it in pieces — on every stage that holds it, so that they all agree. */
static bool may_piece(const tl_trainer* t, int v) {
  const tl_graph* g = t->graph;
  if (t->zero < 2 || t->n_chunks != 1 || g->values[v].role != TL_ROLE_PARAM ||
      g->values[v].n_dims != 2)
    return false;
  const struct tl_tp_param* p = tl_tp_param_of(&t->shard, v);
  if (p && p->partial && t->tp_size > 1) return false;
  const tl_pp_stage* me = t->me;
  if (tl_pp_stage_shares(me, v)) {
    /* the last of every holder's layout (dp/buckets.h: those in pieces
     * are its tail; another late parameter behind it, a LayerNorm that
     * sequence parallelism sums, keeps it whole) */
    for (int s = 0; s < t->pp_size; s++) {
      const tl_dp_layout* l = &t->layouts[s];
      if (l->offset[v] < 0) continue;
      if (l->segments[l->n_segments - 1].value != v) return false;
      /* nor a parameter several of a holder's nodes read (which that stage
       * alone might write in pieces, its units' room then unknown here) */
      for (int i = 0; i < l->n_segments; i++)
        if (tl_dp_readers(g, t->stages[s].node_begin, t->stages[s].node_end, l->segments[i].value) >
            1)
          return false;
    }
    return tl_exec_can_piece(g, 0, g->n_forward, v);
  }
  return tl_dp_readers(g, me->node_begin, me->node_end, v) > 1 &&
         tl_exec_can_piece(g, me->node_begin, me->node_end, v);
}

/* The stages holding v (one chunk each): their count, into holders
 * (pp_size of room). */
static int holders_of(const tl_trainer* t, int v, int* holders) {
  int n = 0;
  for (int s = 0; s < t->pp_size; s++)
    if (tl_dp_readers(t->graph, t->stages[s].node_begin, t->stages[s].node_end, v) > 0)
      holders[n++] = s;
  return n;
}

/* A marker: ZeRO-3 over a group reads the parameter in pieces too (its
 * temporaries are what tl_exec_piece_sizes asks; never called). */
static tl_status reads_in_pieces(void* user, int v, int64_t row0, int64_t rows, const void** at) {
  (void)user, (void)v, (void)row0, (void)rows, (void)at;
  return TL_ERRF(TL_ERR_INTERNAL, "a piece read while sizing pieces");
}

/* The elements of a bucket of stage s. */
static int64_t bucket_of(const tl_trainer* t, int s) {
  return tl_dp_bucket_elems(t->zero, t->layouts[s].n_early, t->cfg.parallel.bucket_mb);
}

/* The pieces may pay temporaries to never hold the parameter whole (under
 * ZeRO-3 over a group the embedding's output, added piece by piece; the
 * head reads and writes its pieces in place): where, on any stage
 * holding it, those would hold as much as its gradient at a bucket's rows
 * (a small vocabulary cut into many pieces) it stays whole, late, as
 * without pieces. */
static bool kept_whole(const tl_trainer* t, int v, const int* holders, int n, bool params,
                       int64_t* rows) {
  const tl_graph* g = t->graph;
  const int64_t cols = t->piece_cols[v], all = g->values[v].shape[0];
  int64_t r = all;
  for (int i = 0; i < n; i++) {
    const int64_t per = bucket_of(t, holders[i]);
    const int64_t k = per / cols < 1 ? 1 : per / cols > all ? all : per / cols;
    if (k < r) r = k;
  }
  rows[v] = r;
  bool whole = false;
  const struct tl_exec_pieces p = {.rows = rows, .param = params ? reads_in_pieces : NULL};
  for (int i = 0; i < n && !whole; i++) {
    const tl_pp_stage* x = &t->stages[holders[i]];
    size_t ops, copy;
    tl_exec_piece_sizes(g, x->node_begin, x->node_end, &p, &ops, &copy);
    whole = (double)ops >= sizeof(float) * (double)tl_value_numel(&g->values[v]);
  }
  rows[v] = 0;
  return whole;
}

/* The rows a piece of v where several stages hold it: the fewest any
 * holder's buckets would cut (tl_dp_piece_rows: a bucket's rows, under
 * ZeRO-3 over a group fewer where two fit the room its unit slots leave),
 * so that every holder cuts it alike and their shards of it sum. */
static int64_t shared_cut(const tl_trainer* t, int v, const int* holders, int n, bool params) {
  const int64_t cols = t->piece_cols[v], all = t->graph->values[v].shape[0];
  int64_t cut = all;
  for (int i = 0; i < n; i++) {
    const int s = holders[i];
    int64_t room = 0;
    if (params) {
      int units[TL_MODEL_MAX_LAYERS + 3];
      bool reads[TL_MODEL_MAX_LAYERS + 3];
      const int n_units = tl__trainer_units(t, s, units);
      tl__trainer_unit_pieces(t, units, n_units, reads);
      room = tl_dp_piece_room(&t->layouts[s], n_units, units, reads);
    }
    const int64_t c = tl_dp_piece_rows(bucket_of(t, s), cols, all, room);
    if (c < cut) cut = c;
  }
  return cut;
}

tl_status tl__trainer_solo_pieces(tl_trainer* t, int begin, int end, bool* late) {
  const tl_graph* g = t->graph;
  if (t->zero != 2 || t->n_chunks != 1 || t->dp_size <= 1 || t->cfg.parallel.deterministic)
    return TL_OK;
  for (int v = 0; v < g->n_values; v++)
    if (late[v] && tl_dp_readers(g, begin, end, v) > 0) return TL_OK;
  tl_dp_layout base;
  TL_CHECK(tl_dp_layout_build_late(g, begin, end, late, &base));
  int vs[1];
  int64_t pieced = 0, after = 0, piece = 0;
  const int n = tl_dp_solo_candidates(g, begin, end, &base, vs, 1, &pieced, &after) == 1 ? 1 : 0;
  int64_t* rows = n > 0 ? calloc((size_t)g->n_values, sizeof(int64_t)) : NULL;
  tl_status st = n > 0 && !rows ? TL_ERRF(TL_ERR_NOMEM, "out of memory for a trainer") : TL_OK;
  const double mb = t->cfg.parallel.bucket_mb;
  for (int i = 0; rows && i < n; i++) {
    const tl_value* val = &g->values[vs[i]];
    rows[vs[i]] = tl_dp_solo_piece_rows(base.n, val->shape[1], val->shape[0], mb);
    if (rows[vs[i]] * val->shape[1] > piece) piece = rows[vs[i]] * val->shape[1];
  }
  bool pays = false;
  if (rows && st == TL_OK) {
    size_t ops, copy;
    const struct tl_exec_pieces p = {.rows = rows};
    tl_exec_piece_sizes(g, begin, end, &p, &ops, &copy);
    const tl_dtype wire = t->cfg.parallel.grad_reduce == TL_PRECISION_BF16 ? TL_BF16 : TL_F32;
    const tl_dtype params = t->cfg.train.precision == TL_PRECISION_BF16 ? TL_BF16 : TL_F32;
    pays = tl_dp_solo_pieces_pay(base.n, tl_dp_layout_staging(&base), after, pieced, piece,
                                 (double)ops, t->dp_size, mb, wire, params);
  }
  if (pays && !t->solo_rows) {
    t->solo_rows = calloc((size_t)g->n_values, sizeof(int64_t));
    if (!t->solo_rows) st = TL_ERRF(TL_ERR_NOMEM, "out of memory for a trainer");
  }
  for (int i = 0; pays && st == TL_OK && i < n; i++) {
    late[vs[i]] = true;
    t->solo_rows[vs[i]] = rows[vs[i]];
  }
  free(rows);
  tl_dp_layout_free(&base);
  return st;
}

tl_status tl__trainer_pieces(tl_trainer* t) {
  const tl_graph* g = t->graph;
  const int nv = g->n_values;
  bool any = false;
  /* the matrices ZeRO-2 writes in pieces on their own stage, at their rows */
  for (int v = 0; t->solo_rows && v < nv; v++) {
    if (t->solo_rows[v] <= 0) continue;
    if (!t->piece_cols) t->piece_cols = calloc((size_t)nv, sizeof(int64_t));
    if (!t->piece_cut) t->piece_cut = calloc((size_t)nv, sizeof(int64_t));
    if (!t->piece_cols || !t->piece_cut)
      return TL_ERRF(TL_ERR_NOMEM, "out of memory for a trainer");
    t->piece_cols[v] = g->values[v].shape[1];
    t->piece_cut[v] = t->solo_rows[v];
    any = true;
  }
  for (int v = 0; v < nv; v++) {
    if (!may_piece(t, v)) continue;
    if (!t->piece_cols) t->piece_cols = calloc((size_t)nv, sizeof(int64_t));
    if (!t->piece_cols) return TL_ERRF(TL_ERR_NOMEM, "out of memory for a trainer");
    t->piece_cols[v] = g->values[v].shape[1];
  }
  if (!t->piece_cols) return TL_OK;
  const bool params = t->zero == 3 && t->comm.dp && tl_group_size(t->comm.dp) > 1;
  int64_t* rows = calloc((size_t)nv, sizeof(int64_t));
  int* holders = malloc(sizeof(int) * (size_t)t->pp_size);
  if (!t->piece_cut) t->piece_cut = calloc((size_t)nv, sizeof(int64_t));
  tl_status st = rows && holders && t->piece_cut
                     ? TL_OK
                     : TL_ERRF(TL_ERR_NOMEM, "out of memory for a trainer");
  for (int v = 0; st == TL_OK && v < nv; v++) {
    if (t->piece_cols[v] <= 0 || (t->solo_rows && t->solo_rows[v] > 0)) continue;
    if (kept_whole(t, v, holders, holders_of(t, v, holders), params, rows))
      t->piece_cols[v] = 0;
    else
      any = true;
  }
  /* the cut once every stage's units know what they read in pieces */
  for (int v = 0; st == TL_OK && v < nv; v++) {
    const int n = t->piece_cols[v] > 0 && !(t->solo_rows && t->solo_rows[v] > 0)
                      ? holders_of(t, v, holders)
                      : 0;
    if (n > 1) t->piece_cut[v] = shared_cut(t, v, holders, n, params);
  }
  free(rows);
  free(holders);
  if (st != TL_OK || !any) {
    free(t->piece_cols);
    free(t->piece_cut);
    t->piece_cols = t->piece_cut = NULL;
  }
  return st;
}
