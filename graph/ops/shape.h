/* shape.h — small shape helpers shared by the op files. */
#ifndef TL_GRAPH_OPS_SHAPE_H
#define TL_GRAPH_OPS_SHAPE_H

#include <string.h>

#include "graph/op.h"

static inline const tl_value* tl__in(const tl_graph* g, const tl_node* n, int k) {
  return n->in[k] >= 0 ? &g->values[n->in[k]] : NULL;
}

/* Rows of a value viewed as (rows, last dimension). */
static inline int64_t tl__rows(const tl_value* v) {
  return tl_value_numel(v) / v->shape[v->n_dims - 1];
}
static inline int64_t tl__cols(const tl_value* v) {
  return v->shape[v->n_dims - 1];
}

static inline int tl__same_shape(const tl_value* a, const tl_value* b) {
  return a->n_dims == b->n_dims &&
         memcmp(a->shape, b->shape, sizeof(int64_t) * (size_t)a->n_dims) == 0;
}

/* "[4,64,128]" */
static inline const char* tl__shape_str(const tl_value* v, char* buf, size_t size) {
  int k = snprintf(buf, size, "[");
  for (int i = 0; i < v->n_dims && k > 0 && (size_t)k < size; i++)
    k += snprintf(buf + k, size - (size_t)k, i ? ",%lld" : "%lld", (long long)v->shape[i]);
  if (k > 0 && (size_t)k < size) snprintf(buf + k, size - (size_t)k, "]");
  return buf;
}

#define TL_NEED_F32(g, n, k)                                                                    \
  do {                                                                                          \
    if (tl__in(g, n, k) == NULL || tl__in(g, n, k)->dtype != TL_F32)                            \
      return TL_ERRF(TL_ERR_INVALID, "node '%s': input %d must be an f32 value", (n)->name, k); \
  } while (0)

#endif
