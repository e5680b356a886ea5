/* build.c — a model's training graph as one tensor-parallel rank runs it
 * (tp.h's tl_tp_build): built whole, sharded, then differentiated. */
#include "tp/cp.h"
#include "tp/tp.h"
#include "tp/tp_impl.h"

tl_status tl_tp_backward(tl_graph* g, const tl_tp_shard* shard) {
  /* 1. autodiff; 2. sequence parallelism keeps the token shard a
   * column-parallel matmul gathers, not the gathered whole, and gathers it
   * again for the weight gradient (b·s·h/tp held instead of b·s·h) */
  TL_CHECK(tl_graph_backward(g));
  for (int i = 0; shard->sp && i < g->n_forward; i++)
    if (tl_tp_is_comm(&g->nodes[i]) && g->nodes[i].attr[0] == TL_TP_GATHER)
      TL_CHECK(tl_graph_rematerialize(g, i));
  return TL_OK;
}

tl_status tl_tp_build(const tl_model* m, int b, int t, int tp, int rank, bool sp, int cp,
                      int cp_rank, tl_recompute recompute, bool split_weight, tl_graph** out,
                      struct tl_model_io* io, tl_tp_shard* shard, tl_graph** full_out) {
  *out = NULL;
  if (full_out) *full_out = NULL;
  tl_graph *full = NULL, *g = NULL;
  struct tl_model_io fio;
  TL_CHECK(tl_model_build_forward(m, b, t, true, &full, &fio));
  tl_status st = tl_tp_shard_graph(full, tp, rank, sp, &g, shard);
  if (st != TL_OK) {
    tl_graph_destroy(full);
    return st;
  }
  /* the builder's handles, on the rank's graph (forward node indices stay
   * as they are through autodiff) */
  struct tl_model_io rio = fio;
  rio.tokens = shard->value_map[fio.tokens];
  rio.targets = fio.targets >= 0 ? shard->value_map[fio.targets] : -1;
  rio.logits = fio.logits >= 0 ? shard->value_map[fio.logits] : -1;
  rio.losses = fio.losses >= 0 ? shard->value_map[fio.losses] : -1;
  for (int l = 0; l <= fio.n_layers; l++) rio.layer_begin[l] = shard->node_map[fio.layer_begin[l]];
  st = tl_cp_split_graph(g, cp, cp_rank);
  if (st == TL_OK) st = tl_tp_backward(g, shard);
  if (st == TL_OK) st = tl_model_recompute(g, &rio, recompute);
  if (st == TL_OK && split_weight) st = tl_graph_split_weight(g);
  if (st != TL_OK) {
    tl_graph_destroy(g);
    tl_graph_destroy(full);
    tl_tp_shard_free(shard);
    return st;
  }
  *io = rio;
  *out = g;
  if (full_out)
    *full_out = full;
  else
    tl_graph_destroy(full);
  return TL_OK;
}
