/* stage.c — the cut into stages, what crosses it, what stages share. */
#include "pp/stage.h"

#include <stdlib.h>
#include <string.h>

#include "pp/cut.h"

/* Forward and backward of forward nodes [begin, end): the backward is
 * about twice the forward (the cut weighs stages the same way). */
static double node_cost(const tl_graph* g, int begin, int end) {
  return 3.0 * tl_graph_flops(g, begin, end);
}

/* Activations crossing the cut at node `at`: produced before it, read at or after it. */
static tl_status boundary(const tl_graph* g, int at, int* ids, int* n) {
  *n = tl_graph_crossing(g, at, ids, TL_PP_MAX_BOUNDARY);
  if (*n > TL_PP_MAX_BOUNDARY)
    return TL_ERRF(TL_ERR_UNSUPPORTED,
                   "%d activations cross the stage boundary at node %d; at most %d can", *n, at,
                   TL_PP_MAX_BOUNDARY);
  return TL_OK;
}

tl_status tl_pp_partition(const tl_graph* g, const struct tl_model_io* io, int n_stages,
                          const int* layers_per_stage, tl_pp_stage* out) {
  int L = io->n_layers;
  if (n_stages < 1 || n_stages > L)
    return TL_ERRF(TL_ERR_CONFIG, "mesh.pp=%d stages for a model of %d layers: need 1 to %d",
                   n_stages, L, L);
  memset(out, 0, sizeof(tl_pp_stage) * (size_t)n_stages);
  int* counts = malloc(sizeof(int) * (size_t)n_stages);
  double* layer = malloc(sizeof(double) * (size_t)L);
  if (!counts || !layer) {
    free(counts), free(layer);
    return TL_ERRF(TL_ERR_NOMEM, "out of memory partitioning");
  }
  tl_status st = TL_OK;
  if (layers_per_stage) {
    int sum = 0;
    for (int s = 0; s < n_stages; s++) {
      if (layers_per_stage[s] < 1)
        st = TL_ERRF(TL_ERR_CONFIG, "stage %d is given %d layers; every stage needs at least one",
                     s, layers_per_stage[s]);
      sum += layers_per_stage[s];
      counts[s] = layers_per_stage[s];
    }
    if (st == TL_OK && sum != L)
      st = TL_ERRF(TL_ERR_CONFIG, "the stages' layer counts add up to %d; the model has %d layers",
                   sum, L);
  } else {
    for (int l = 0; l < L; l++)
      layer[l] = tl_graph_flops(g, io->layer_begin[l], io->layer_begin[l + 1]);
    st = tl_pp_cut(layer, L, tl_graph_flops(g, 0, io->layer_begin[0]),
                   tl_graph_flops(g, io->layer_begin[L], g->n_forward), n_stages, counts);
  }
  for (int s = 0, l = 0; s < n_stages && st == TL_OK; s++) {
    tl_pp_stage* p = &out[s];
    p->stage = s;
    p->n_stages = n_stages;
    p->layer_begin = l;
    p->layer_end = l + counts[s];
    p->node_begin = s == 0 ? 0 : io->layer_begin[l];
    p->node_end = s == n_stages - 1 ? g->n_forward : io->layer_begin[p->layer_end];
    p->flops = node_cost(g, p->node_begin, p->node_end);
    l = p->layer_end;
    if (st == TL_OK && s > 0) st = boundary(g, p->node_begin, p->recv, &p->n_recv);
    if (st == TL_OK && s < n_stages - 1) st = boundary(g, p->node_end, p->send, &p->n_send);
  }
  /* parameters read by more than one stage */
  for (int v = 0; v < g->n_values && st == TL_OK; v++) {
    if (g->values[v].role != TL_ROLE_PARAM) continue;
    int readers = 0;
    for (int s = 0; s < n_stages; s++)
      readers += tl_graph_first_reader(g, v, out[s].node_begin, out[s].node_end) >= 0;
    for (int s = 0; s < n_stages && readers > 1 && st == TL_OK; s++) {
      if (tl_graph_first_reader(g, v, out[s].node_begin, out[s].node_end) < 0) continue;
      if (out[s].n_shared == TL_PP_MAX_SHARED)
        st = TL_ERRF(TL_ERR_UNSUPPORTED, "stage %d shares more than %d parameters with others", s,
                     TL_PP_MAX_SHARED);
      else
        out[s].shared[out[s].n_shared++] = v;
    }
  }
  /* the stages sharing parameters sum them over one group, parameter by
   * parameter: they must share the same ones (the tied embedding: the
   * first and the last stage) */
  for (int s = 0, first = -1; s < n_stages && st == TL_OK; s++) {
    if (out[s].n_shared == 0) continue;
    if (first < 0) {
      first = s;
      continue;
    }
    if (out[s].n_shared != out[first].n_shared ||
        memcmp(out[s].shared, out[first].shared, sizeof(int) * (size_t)out[s].n_shared) != 0)
      st = TL_ERRF(TL_ERR_UNSUPPORTED,
                   "stages %d and %d share different parameters with other stages; trellis sums "
                   "one set of shared parameters per pipeline",
                   first, s);
  }
  free(counts);
  free(layer);
  return st;
}

bool tl_pp_stage_shares(const tl_pp_stage* s, int v) {
  for (int i = 0; i < s->n_shared; i++)
    if (s->shared[i] == v) return true;
  return false;
}
