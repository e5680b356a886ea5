/* layout.c — stage buffers in gradient-readiness order (see layout.h). */
#include "dp/layout.h"

#include <stdlib.h>
#include <string.h>

tl_status tl_dp_layout_build(const tl_graph* g, int begin, int end, tl_dp_layout* out) {
  return tl_dp_layout_build_late(g, begin, end, NULL, out);
}

int tl_dp_readers(const tl_graph* g, int begin, int end, int v) {
  int n = 0;
  for (int i = begin; i < end; i++) n += tl_node_reads(&g->nodes[i], v);
  return n;
}

tl_status tl_dp_layout_build_late(const tl_graph* g, int begin, int end, const bool* late,
                                  tl_dp_layout* out) {
  return tl_dp_layout_build_ranges(g, 1, &begin, &end, late, out);
}

tl_status tl_dp_layout_build_ranges(const tl_graph* g, int n_ranges, const int* begin,
                                    const int* end, const bool* late, tl_dp_layout* out) {
  memset(out, 0, sizeof *out);
  for (int k = 0; k < n_ranges; k++)
    if (begin[k] > end[k] || (k > 0 && begin[k] < end[k - 1]))
      return TL_ERRF(TL_ERR_INVALID, "layout ranges must ascend without overlap: [%d, %d) at %d",
                     begin[k], end[k], k);
  out->offset = malloc(sizeof(int64_t) * (size_t)(g->n_values > 0 ? g->n_values : 1));
  out->segments = malloc(sizeof(tl_dp_segment) * (size_t)(g->n_values > 0 ? g->n_values : 1));
  int* first = malloc(sizeof(int) * (size_t)(g->n_values > 0 ? g->n_values : 1));
  if (!out->offset || !out->segments || !first) {
    free(first);
    tl_dp_layout_free(out);
    return TL_ERRF(TL_ERR_NOMEM, "out of memory for a parameter layout");
  }
  out->n_values = g->n_values;
  for (int v = 0; v < g->n_values; v++) {
    out->offset[v] = -1;
    first[v] = -1; /* its first reader in the ranges */
    for (int k = 0; k < n_ranges && first[v] < 0 && g->values[v].role == TL_ROLE_PARAM; k++)
      first[v] = tl_graph_first_reader(g, v, begin[k], end[k]);
  }
  /* 1. later first uses first: their gradients are final earliest; the
   * late ones after all of them */
  for (int pass = 0; pass < 2; pass++) {
    for (int k = n_ranges - 1; k >= 0; k--)
      for (int i = end[k] - 1; i >= begin[k]; i--)
        for (int v = 0; v < g->n_values; v++) {
          if (first[v] != i || (late && late[v]) != (pass == 1)) continue;
          int64_t n = tl_value_numel(&g->values[v]);
          out->offset[v] = out->n;
          out->segments[out->n_segments++] = (tl_dp_segment){v, out->n, n, i};
          out->n += n;
        }
    if (pass == 0) out->n_early = out->n;
  }
  free(first);
  return TL_OK;
}

void tl_dp_layout_free(tl_dp_layout* l) {
  if (!l) return;
  free(l->offset);
  free(l->segments);
  memset(l, 0, sizeof *l);
}

int64_t tl_dp_layout_final_upto(const tl_dp_layout* l, int forward_node) {
  int64_t upto = 0;
  for (int i = 0; i < l->n_segments && l->segments[i].offset < l->n_early &&
                  l->segments[i].first_use >= forward_node;
       i++)
    upto = l->segments[i].offset + l->segments[i].n;
  return upto;
}
