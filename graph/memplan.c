/* memplan.c — lifetimes, then greedy placement: values in decreasing size,
 * each at the lowest offset that overlaps no placed value whose lifetime
 * overlaps its own. */
#include "graph/memplan.h"

#include <stdlib.h>
#include <string.h>

#define ALIGN 64

static size_t value_bytes(const tl_value* v) {
  size_t b = (size_t)tl_value_numel(v) * tl_dtype_size(v->dtype);
  return (b + ALIGN - 1) / ALIGN * ALIGN;
}

/* (size, value) pairs: largest first, ties by value id, so plans are reproducible. */
static int by_size_desc(const void* a, const void* b) {
  int64_t sa = ((const int64_t*)a)[0], sb = ((const int64_t*)b)[0];
  if (sa != sb) return sa > sb ? -1 : 1;
  return (((const int64_t*)a)[1] > ((const int64_t*)b)[1]) -
         (((const int64_t*)a)[1] < ((const int64_t*)b)[1]);
}

static int by_offset(const void* a, const void* b) {
  int64_t x = ((const int64_t*)a)[0], y = ((const int64_t*)b)[0];
  return (x > y) - (x < y);
}

/* The pass node i runs in: the forward, the (input-gradient) backward, the
 * weight-gradient backward (tl_graph_split_weight). */
static int pass_of(const tl_graph* g, int i) {
  return i < g->n_forward ? 0 : g->weight_begin && i >= g->weight_begin ? 2 : 1;
}

tl_status tl_memplan_build(const tl_graph* g, tl_memplan* p) {
  return tl_memplan_build_range(g, 0, g->n_forward, p);
}

tl_status tl_memplan_build_range(const tl_graph* g, int begin, int end, tl_memplan* p) {
  memset(p, 0, sizeof *p);
  int nv = g->n_values;
  p->n_values = nv;
  p->offset = malloc(sizeof(int64_t) * (size_t)nv);
  p->first = malloc(sizeof(int) * (size_t)nv);
  p->last = malloc(sizeof(int) * (size_t)nv);
  p->transient = calloc((size_t)nv, sizeof(bool));
  int* order = malloc(sizeof(int) * (size_t)nv);
  bool* boundary = calloc((size_t)nv, sizeof(bool)); /* touched outside the range */
  int64_t* sized = malloc(sizeof(int64_t) * 2 * (size_t)nv);
  int64_t* spans = malloc(sizeof(int64_t) * 2 * (size_t)nv);
  if (!p->offset || !p->first || !p->last || !p->transient || !order || !spans || !sized ||
      !boundary) {
    free(order), free(spans), free(sized), free(boundary);
    tl_memplan_free(p);
    return TL_ERRF(TL_ERR_NOMEM, "out of memory planning %d values", nv);
  }
  /* all bytes 0xff: every entry -1 */
  memset(p->offset, 0xff, sizeof(int64_t) * (size_t)nv);
  memset(p->first, 0xff, sizeof(int) * (size_t)nv);
  memset(p->last, 0xff, sizeof(int) * (size_t)nv);

  /* 1. lifetimes */
  int first_backward = -1;
  for (int i = 0; i < g->n_nodes; i++) {
    if (!tl_memplan_in_range(g, i, begin, end)) continue;
    if (i >= g->n_forward && first_backward < 0) first_backward = i;
    const tl_node* n = &g->nodes[i];
    for (int k = 0; k < n->n_out; k++) {
      int v = n->out[k];
      if (v < 0) continue;
      if (p->first[v] < 0) p->first[v] = i;
      p->last[v] = i;
    }
    for (int k = 0; k < n->n_in; k++) {
      int v = n->in[k];
      if (v < 0) continue;
      if (p->first[v] < 0) p->first[v] = i; /* read before any write: a seeded value */
      p->last[v] = i;
    }
  }
  /* outputs stay until the last node of the range */
  int last_node = -1;
  for (int i = g->n_nodes - 1; i >= 0 && last_node < 0; i--)
    if (tl_memplan_in_range(g, i, begin, end)) last_node = i;
  for (int v = 0; v < nv; v++)
    if (g->values[v].output && p->first[v] >= 0) p->last[v] = last_node;
  if (g->loss >= 0 && g->values[g->loss].grad >= 0) {
    int seed = g->values[g->loss].grad;
    if (p->first[seed] >= 0 && first_backward >= 0) p->first[seed] = first_backward;
  }

  /* 2. which values live within one pass: none that a node outside the
   * range touches, that the caller reads, or that crosses the passes */
  for (int i = 0; i < g->n_nodes; i++) {
    if (tl_memplan_in_range(g, i, begin, end)) continue;
    const tl_node* n = &g->nodes[i];
    for (int k = 0; k < n->n_in; k++)
      if (n->in[k] >= 0) boundary[n->in[k]] = true;
    for (int k = 0; k < n->n_out; k++)
      if (n->out[k] >= 0) boundary[n->out[k]] = true;
  }
  int n_planned = 0;
  for (int v = 0; v < nv; v++) {
    tl_value_role r = g->values[v].role;
    bool planned = (r == TL_ROLE_ACTIVATION || r == TL_ROLE_GRAD) && p->first[v] >= 0;
    bool one_pass = pass_of(g, p->first[v]) == pass_of(g, p->last[v]);
    p->transient[v] = planned && !boundary[v] && !g->values[v].output && one_pass;
    if (planned) order[n_planned++] = v;
  }

  /* 3. placement, in each arena */
  for (int i = 0; i < n_planned; i++) {
    sized[2 * i] = (int64_t)value_bytes(&g->values[order[i]]);
    sized[2 * i + 1] = order[i];
  }
  qsort(sized, (size_t)n_planned, 2 * sizeof(int64_t), by_size_desc);
  for (int i = 0; i < n_planned; i++) order[i] = (int)sized[2 * i + 1];
  for (int i = 0; i < n_planned; i++) {
    int v = order[i];
    size_t size = value_bytes(&g->values[v]);
    int n_spans = 0;
    for (int j = 0; j < i; j++) {
      int u = order[j];
      if (p->transient[u] != p->transient[v]) continue;
      if (p->first[u] <= p->last[v] && p->first[v] <= p->last[u]) {
        spans[2 * n_spans] = p->offset[u];
        spans[2 * n_spans + 1] = p->offset[u] + (int64_t)value_bytes(&g->values[u]);
        n_spans++;
      }
    }
    qsort(spans, (size_t)n_spans, 2 * sizeof(int64_t), by_offset);
    int64_t at = 0;
    for (int j = 0; j < n_spans; j++) {
      if (spans[2 * j] - at >= (int64_t)size) break; /* fits in the gap before span j */
      if (spans[2 * j + 1] > at) at = spans[2 * j + 1];
    }
    p->offset[v] = at;
    size_t* arena = p->transient[v] ? &p->transient_bytes : &p->arena_bytes;
    if ((size_t)at + size > *arena) *arena = (size_t)at + size;
  }

  /* 4. the most bytes live at once */
  for (int i = 0; i < g->n_nodes; i++) {
    if (!tl_memplan_in_range(g, i, begin, end)) continue;
    size_t live = 0;
    for (int j = 0; j < n_planned; j++)
      if (p->first[order[j]] <= i && i <= p->last[order[j]])
        live += value_bytes(&g->values[order[j]]);
    if (live > p->peak_live_bytes) p->peak_live_bytes = live;
  }
  free(order);
  free(spans);
  free(sized);
  free(boundary);
  return TL_OK;
}

void tl_memplan_free(tl_memplan* p) {
  if (!p) return;
  free(p->offset);
  free(p->first);
  free(p->last);
  free(p->transient);
  memset(p, 0, sizeof *p);
}
