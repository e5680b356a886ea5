/* stage.c — partition, boundaries and stage parameter layouts. */
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

static int tensor_of(const tl_model* m, int64_t offset) {
  for (int k = 0; k < m->n_tensors; k++)
    if (offset >= m->tensors[k].offset && offset < m->tensors[k].offset + m->tensors[k].numel)
      return k;
  return -1;
}

/* Parameters used by forward nodes [begin, end), ordered so that gradients
 * finish front to back: a parameter's gradient is final once the backward
 * of its FIRST forward use has run, so later first uses come first. */
static tl_status layout(const tl_graph* g, const tl_model* m, tl_pp_stage* s) {
  s->param_offset = malloc(sizeof(int64_t) * (size_t)g->n_values);
  s->segments = malloc(sizeof(tl_pp_segment) * (size_t)g->n_values);
  s->first_use = malloc(sizeof(int) * (size_t)g->n_values);
  int* first = malloc(sizeof(int) * (size_t)g->n_values);
  if (!s->param_offset || !s->segments || !s->first_use || !first) {
    free(first);
    return TL_ERRF(TL_ERR_NOMEM, "out of memory for a stage");
  }
  for (int v = 0; v < g->n_values; v++) s->param_offset[v] = -1, first[v] = -1;
  for (int i = s->node_begin; i < s->node_end; i++) {
    const tl_node* n = &g->nodes[i];
    for (int k = 0; k < n->n_in; k++) {
      int v = n->in[k];
      if (v >= 0 && g->values[v].role == TL_ROLE_PARAM && first[v] < 0) first[v] = i;
    }
  }
  s->n_params = 0;
  for (int i = s->node_end - 1; i >= s->node_begin; i--)
    for (int v = 0; v < g->n_values; v++) {
      if (first[v] != i) continue;
      const tl_value* val = &g->values[v];
      s->param_offset[v] = s->n_params;
      s->first_use[s->n_segments] = i;
      s->segments[s->n_segments++] = (tl_pp_segment){val->offset, s->n_params, tl_value_numel(val),
                                                     tensor_of(m, val->offset), 0};
      s->n_params += tl_value_numel(val);
    }
  free(first);
  return TL_OK;
}

int64_t tl_pp_stage_final_upto(const tl_pp_stage* s, int forward_node) {
  int64_t upto = 0;
  for (int i = 0; i < s->n_segments && s->first_use[i] >= forward_node; i++)
    upto = s->segments[i].local_offset + s->segments[i].n;
  return upto;
}

tl_status tl_pp_partition(const tl_graph* g, const struct tl_model_io* io, const tl_model* m,
                          int n_stages, const int* layers_per_stage, tl_pp_stage* out) {
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
    if (st == TL_OK) st = layout(g, m, p);
  }
  /* parameters held by more than one stage */
  for (int a = 0; a < n_stages && st == TL_OK; a++)
    for (int i = 0; i < out[a].n_segments; i++)
      for (int b = 0; b < n_stages; b++) {
        if (b == a) continue;
        for (int j = 0; j < out[b].n_segments; j++)
          if (out[b].segments[j].global_offset == out[a].segments[i].global_offset)
            out[a].segments[i].shared = 1;
      }
  free(counts);
  free(layer);
  if (st != TL_OK)
    for (int s = 0; s < n_stages; s++) tl_pp_stage_free(&out[s]);
  return st;
}

void tl_pp_stage_free(tl_pp_stage* s) {
  if (!s) return;
  free(s->param_offset);
  free(s->segments);
  free(s->first_use);
  s->param_offset = NULL;
  s->segments = NULL;
  s->first_use = NULL;
  s->n_segments = 0;
}
