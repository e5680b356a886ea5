/* graph.c — graph construction and autodiff. */
#include "graph/graph.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/op.h"

tl_status tl_graph_create(tl_graph** out) {
  *out = NULL;
  tl_graph* g = calloc(1, sizeof *g);
  if (!g) return TL_ERRF(TL_ERR_NOMEM, "out of memory for a graph");
  g->loss = -1;
  *out = g;
  return TL_OK;
}

void tl_graph_destroy(tl_graph* g) {
  if (!g) return;
  free(g->values);
  free(g->nodes);
  free(g);
}

static tl_status grow(void** p, int* cap, int need, size_t size) {
  if (need <= *cap) return TL_OK;
  int c = *cap ? *cap * 2 : 64;
  while (c < need) c *= 2;
  void* q = realloc(*p, (size_t)c * size);
  if (!q) return TL_ERRF(TL_ERR_NOMEM, "out of memory growing a graph to %d entries", c);
  *p = q;
  *cap = c;
  return TL_OK;
}

tl_status tl_graph_value(tl_graph* g, const char* name, tl_value_role role, tl_dtype dtype,
                         int n_dims, const int64_t* shape, int* out) {
  if (n_dims < 1 || n_dims > 4)
    return TL_ERRF(TL_ERR_INVALID, "value '%s' has %d dimensions; expected 1 to 4", name, n_dims);
  for (int i = 0; i < n_dims; i++)
    if (shape[i] < 1)
      return TL_ERRF(TL_ERR_INVALID, "value '%s' dimension %d is %lld; expected >= 1", name, i,
                     (long long)shape[i]);
  TL_CHECK(grow((void**)&g->values, &g->cap_values, g->n_values + 1, sizeof(tl_value)));
  tl_value* v = &g->values[g->n_values];
  memset(v, 0, sizeof *v);
  snprintf(v->name, sizeof v->name, "%s", name);
  v->dtype = dtype;
  v->n_dims = n_dims;
  memcpy(v->shape, shape, sizeof(int64_t) * (size_t)n_dims);
  v->role = role;
  v->grad = -1;
  v->grad_of = -1;
  *out = g->n_values++;
  return TL_OK;
}

tl_status tl_graph_param(tl_graph* g, const char* name, int64_t offset, int n_dims,
                         const int64_t* shape, int* out) {
  TL_CHECK(tl_graph_value(g, name, TL_ROLE_PARAM, TL_F32, n_dims, shape, out));
  tl_value* v = &g->values[*out];
  v->offset = offset;
  v->requires_grad = true;
  if (offset + tl_value_numel(v) > g->n_params) g->n_params = offset + tl_value_numel(v);
  return TL_OK;
}

tl_status tl_graph_input(tl_graph* g, const char* name, tl_dtype dtype, int n_dims,
                         const int64_t* shape, int* out) {
  return tl_graph_value(g, name, TL_ROLE_INPUT, dtype, n_dims, shape, out);
}

static tl_status append_node(tl_graph* g, int op, const char* name, tl_node** out) {
  TL_CHECK(grow((void**)&g->nodes, &g->cap_nodes, g->n_nodes + 1, sizeof(tl_node)));
  tl_node* n = &g->nodes[g->n_nodes];
  memset(n, 0, sizeof *n);
  n->op = op;
  n->forward_of = -1;
  snprintf(n->name, sizeof n->name, "%s", name);
  for (int i = 0; i < TL_NODE_MAX_IO; i++) n->in[i] = n->out[i] = -1;
  *out = n;
  return TL_OK;
}

tl_status tl_graph_node(tl_graph* g, int op, const char* name, int n_in, const int* in,
                        const int* attr, int n_attr, int* out) {
  const struct tl_op_def* def = tl_op_get(op);
  if (!def || !def->infer)
    return TL_ERRF(TL_ERR_INVALID, "node '%s': op %d cannot be built", name, op);
  if (g->n_forward != g->n_nodes)
    return TL_ERRF(TL_ERR_INVALID, "node '%s': forward nodes cannot follow the backward pass",
                   name);
  if (n_in > TL_NODE_MAX_IO || n_attr > TL_NODE_MAX_ATTRS)
    return TL_ERRF(TL_ERR_INVALID, "node '%s': too many inputs or attributes", name);
  for (int i = 0; i < n_in; i++)
    if (in[i] < -1 || in[i] >= g->n_values)
      return TL_ERRF(TL_ERR_INVALID, "node '%s' input %d is value %d, which does not exist", name,
                     i, in[i]);
  tl_node* n = NULL;
  TL_CHECK(append_node(g, op, name, &n));
  n->n_in = n_in;
  memcpy(n->in, in, sizeof(int) * (size_t)n_in);
  if (n_attr) memcpy(n->attr, attr, sizeof(int) * (size_t)n_attr);
  int n_values = g->n_values;
  tl_status st = def->infer(g, n);
  if (st != TL_OK) {
    g->n_values = n_values; /* drop any outputs made: the graph is unchanged */
    return st;
  }
  g->n_forward = ++g->n_nodes;
  if (out)
    for (int i = 0; i < n->n_out; i++) out[i] = n->out[i];
  return TL_OK;
}

tl_status tl__op_output(tl_graph* g, tl_node* n, int slot, const char* suffix, tl_value_role role,
                        tl_dtype dtype, int n_dims, const int64_t* shape) {
  char name[TL_NAME_MAX];
  snprintf(name, sizeof name, "%.38s%s%.8s", n->name, suffix[0] ? "." : "", suffix);
  /* `n` may move when values grow; values and nodes are separate arrays. */
  int id = -1;
  TL_CHECK(tl_graph_value(g, name, role, dtype, n_dims, shape, &id));
  n->out[slot] = id;
  if (slot + 1 > n->n_out) n->n_out = slot + 1;
  return TL_OK;
}

tl_status tl__op_backward_node(tl_graph* g, int op, int fwd, int n_in, const int* in, int n_out,
                               const int* out) {
  char name[TL_NAME_MAX];
  snprintf(name, sizeof name, "%.38s.grad", g->nodes[fwd].name);
  tl_node* n = NULL;
  TL_CHECK(append_node(g, op, name, &n));
  n->forward_of = fwd;
  n->n_in = n_in;
  n->n_out = n_out;
  memcpy(n->in, in, sizeof(int) * (size_t)n_in);
  memcpy(n->out, out, sizeof(int) * (size_t)n_out);
  memcpy(n->attr, g->nodes[fwd].attr, sizeof n->attr);
  /* A backward pass costs about twice its forward (two products per one). */
  n->flops = 2.0 * g->nodes[fwd].flops;
  n->bytes = tl__op_bytes(g, in, n_in) + 2.0 * tl__op_bytes(g, out, n_out);
  g->n_nodes++;
  return TL_OK;
}

double tl__op_bytes(const tl_graph* g, const int* ids, int n) {
  double b = 0;
  for (int i = 0; i < n; i++)
    if (ids[i] >= 0) b += (double)tl_value_numel(&g->values[ids[i]]) * 4.0;
  return b;
}

tl_status tl_graph_mark_output(tl_graph* g, int v) {
  if (v < 0 || v >= g->n_values) return TL_ERRF(TL_ERR_INVALID, "value %d does not exist", v);
  g->values[v].output = true;
  return TL_OK;
}

tl_status tl_graph_set_loss(tl_graph* g, int loss) {
  if (loss < 0 || loss >= g->n_values || g->values[loss].dtype != TL_F32)
    return TL_ERRF(TL_ERR_INVALID, "loss value %d is not an f32 value of the graph", loss);
  g->loss = loss;
  g->values[loss].output = true;
  return TL_OK;
}

/* 1. which values depend on a parameter (forward sweep), 2. which values the
 * loss depends on (backward sweep); gradients exist where both hold. */
tl_status tl_graph_backward(tl_graph* g) {
  if (g->loss < 0) return TL_ERRF(TL_ERR_INVALID, "graph has no loss to differentiate");
  if (g->n_nodes != g->n_forward)
    return TL_ERRF(TL_ERR_INVALID, "graph already has a backward pass");
  int nv = g->n_values;
  bool* from_param = calloc((size_t)nv, sizeof(bool));
  bool* to_loss = calloc((size_t)nv, sizeof(bool));
  if (!from_param || !to_loss) {
    free(from_param), free(to_loss);
    return TL_ERRF(TL_ERR_NOMEM, "out of memory for autodiff");
  }
  for (int v = 0; v < nv; v++) from_param[v] = g->values[v].role == TL_ROLE_PARAM;
  for (int i = 0; i < g->n_forward; i++) {
    const tl_node* n = &g->nodes[i];
    const struct tl_op_def* def = tl_op_get(n->op);
    bool any = false;
    for (int k = 0; k < n->n_in; k++)
      if (n->in[k] >= 0 && from_param[n->in[k]] && g->values[n->in[k]].dtype == TL_F32) any = true;
    if (any && def->backward)
      for (int k = 0; k < def->n_diff_out && k < n->n_out; k++)
        if (n->out[k] >= 0) from_param[n->out[k]] = true;
  }
  to_loss[g->loss] = true;
  for (int i = g->n_forward - 1; i >= 0; i--) {
    const tl_node* n = &g->nodes[i];
    const struct tl_op_def* def = tl_op_get(n->op);
    bool any = false;
    for (int k = 0; k < def->n_diff_out && k < n->n_out; k++)
      if (n->out[k] >= 0 && to_loss[n->out[k]]) any = true;
    if (any && def->backward)
      for (int k = 0; k < n->n_in; k++)
        if (n->in[k] >= 0 && g->values[n->in[k]].dtype == TL_F32) to_loss[n->in[k]] = true;
  }
  tl_status st = TL_OK;
  if (!from_param[g->loss]) {
    st = TL_ERRF(TL_ERR_INVALID, "loss '%s' does not depend on any parameter",
                 g->values[g->loss].name);
    goto done;
  }
  for (int v = 0; v < nv; v++) {
    if (!(from_param[v] && to_loss[v])) continue;
    tl_value* val = &g->values[v];
    val->requires_grad = true;
    char name[TL_NAME_MAX];
    snprintf(name, sizeof name, "%.42s.grad", val->name);
    int id = -1;
    tl_value_role role = val->role == TL_ROLE_PARAM ? TL_ROLE_PARAM_GRAD : TL_ROLE_GRAD;
    int64_t shape[4];
    memcpy(shape, val->shape, sizeof shape);
    TL_CHECK_GOTO(tl_graph_value(g, name, role, TL_F32, val->n_dims, shape, &id), st, done);
    val = &g->values[v]; /* values may have moved */
    val->grad = id;
    g->values[id].grad_of = v;
    g->values[id].offset = val->offset;
  }
  for (int v = 0; v < nv; v++)
    if (g->values[v].role == TL_ROLE_PARAM && g->values[v].grad < 0)
      g->values[v].requires_grad = false;
  for (int i = g->n_forward - 1; i >= 0; i--) {
    const tl_node* n = &g->nodes[i];
    const struct tl_op_def* def = tl_op_get(n->op);
    bool any = false;
    for (int k = 0; k < def->n_diff_out && k < n->n_out; k++)
      if (tl__grad(g, n->out[k]) >= 0) any = true;
    if (any && def->backward) TL_CHECK_GOTO(def->backward(g, i), st, done);
  }
done:
  free(from_param);
  free(to_loss);
  return st;
}

static bool reads_any(const tl_node* n, const int* vals, int nv) {
  for (int j = 0; j < nv; j++)
    if (tl_node_reads(n, vals[j])) return true;
  return false;
}

tl_status tl_graph_rematerialize(tl_graph* g, int fwd) {
  if (fwd < 0 || fwd >= g->n_forward)
    return TL_ERRF(TL_ERR_INVALID, "rematerialize: node %d is not a forward node", fwd);
  if (g->n_nodes == g->n_forward || g->weight_begin)
    return TL_ERRF(TL_ERR_INVALID,
                   "rematerialize '%s': the graph has no backward pass yet, or it is split",
                   g->nodes[fwd].name);
  const int n_out = g->nodes[fwd].n_out;
  int outs[TL_NODE_MAX_IO];
  memcpy(outs, g->nodes[fwd].out, sizeof outs);
  int at = -1;
  for (int i = g->n_forward; i < g->n_nodes && at < 0; i++)
    if (reads_any(&g->nodes[i], outs, n_out)) at = i;
  if (at < 0) return TL_OK;
  /* the copy's outputs */
  int again[TL_NODE_MAX_IO];
  for (int k = 0; k < TL_NODE_MAX_IO; k++) again[k] = -1;
  for (int k = 0; k < n_out; k++) {
    if (outs[k] < 0) continue;
    tl_value v = g->values[outs[k]];
    char name[TL_NAME_MAX];
    snprintf(name, sizeof name, "%.41s.again", v.name);
    TL_CHECK(tl_graph_value(g, name, TL_ROLE_ACTIVATION, v.dtype, v.n_dims, v.shape, &again[k]));
  }
  /* the copy, appended then moved to `at` */
  char node_name[TL_NAME_MAX];
  snprintf(node_name, sizeof node_name, "%.41s.again", g->nodes[fwd].name);
  tl_node* n = NULL;
  TL_CHECK(append_node(g, g->nodes[fwd].op, node_name, &n));
  const tl_node* f = &g->nodes[fwd];
  n->n_in = f->n_in;
  memcpy(n->in, f->in, sizeof n->in);
  n->n_out = n_out;
  memcpy(n->out, again, sizeof n->out);
  memcpy(n->attr, f->attr, sizeof n->attr);
  n->flops = f->flops, n->bytes = f->bytes;
  n->forward_of = g->nodes[at].forward_of;
  n->again = true;
  tl_node copy = *n;
  memmove(&g->nodes[at + 1], &g->nodes[at], sizeof(tl_node) * (size_t)(g->n_nodes - at));
  g->nodes[at] = copy;
  g->n_nodes++;
  /* backward readers read the copy when their forward node lies between
   * the original's and the copy's (the last forward reader's: a block's
   * q, k and v projections of one gathered input, say), so the original
   * dies in the forward; any other keeps reading the original (kept alive
   * for it). A pipeline cuts between layers, never inside that span, so a
   * stage runs the copy with its readers. */
  for (int i = at + 1; i < g->n_nodes; i++) {
    const int f2 = g->nodes[i].forward_of;
    if (f2 < fwd || f2 > copy.forward_of) continue;
    for (int k = 0; k < g->nodes[i].n_in; k++)
      for (int j = 0; j < n_out; j++)
        if (g->nodes[i].in[k] >= 0 && g->nodes[i].in[k] == outs[j]) g->nodes[i].in[k] = again[j];
  }
  return TL_OK;
}

/* Whether node n is forward node j's twin: same op, attributes and inputs. */
static bool same_node(const tl_node* n, const tl_node* j) {
  return n->op == j->op && n->n_in == j->n_in && n->n_out == j->n_out &&
         memcmp(n->in, j->in, sizeof n->in) == 0 && memcmp(n->attr, j->attr, sizeof n->attr) == 0;
}

/* Nodes from `from_node` on read to[j] where they read from[j]. */
static void replace_reads(tl_graph* g, int from_node, const int* from, const int* to, int n) {
  for (int i = from_node; i < g->n_nodes; i++) {
    tl_node* x = &g->nodes[i];
    for (int k = 0; k < x->n_in; k++)
      for (int j = 0; j < n; j++)
        if (x->in[k] >= 0 && x->in[k] == from[j]) x->in[k] = to[j];
  }
}

static bool backward_of_range(const tl_node* n, int begin, int end) {
  return n->forward_of >= begin && n->forward_of < end;
}

tl_status tl_graph_recompute(tl_graph* g, int begin, int end) {
  if (begin < 0 || end > g->n_forward || begin >= end)
    return TL_ERRF(TL_ERR_INVALID,
                   "recompute: nodes [%d, %d) are not a range of the %d forward "
                   "nodes",
                   begin, end, g->n_forward);
  if (g->n_nodes == g->n_forward || g->weight_begin)
    return TL_ERRF(TL_ERR_INVALID,
                   "recompute '%s': the graph has no backward pass yet, or it is split",
                   g->nodes[begin].name);
  int at = -1; /* the range's first backward node */
  for (int i = g->n_forward; i < g->n_nodes && at < 0; i++)
    if (backward_of_range(&g->nodes[i], begin, end)) at = i;
  if (at < 0) return TL_OK;
  const int n = end - begin, nv = g->n_values;
  bool* needed = calloc((size_t)n, sizeof(bool));
  int* map = malloc(sizeof(int) * (size_t)nv); /* original output -> its copy */
  if (!needed || !map) {
    free(needed), free(map);
    return TL_ERRF(TL_ERR_NOMEM, "out of memory recomputing %d nodes", n);
  }
  for (int v = 0; v < nv; v++) map[v] = -1;
  /* 1. the nodes whose outputs the range's backward reads, and what those read */
  for (int j = end - 1; j >= begin; j--) {
    const tl_node* f = &g->nodes[j];
    for (int i = at; i < g->n_nodes && !needed[j - begin]; i++)
      if (backward_of_range(&g->nodes[i], begin, end) && reads_any(&g->nodes[i], f->out, f->n_out))
        needed[j - begin] = true;
    for (int k = j + 1; k < end && !needed[j - begin]; k++)
      if (needed[k - begin] && reads_any(&g->nodes[k], f->out, f->n_out)) needed[j - begin] = true;
  }
  int n_copies = 0;
  for (int j = 0; j < n; j++) n_copies += needed[j];
  tl_status st = TL_OK;
  /* 2. their copies, built at the end and moved to `at` in forward order */
  const int first_copy = g->n_nodes;
  const int forward_of = g->nodes[at].forward_of;
  for (int j = begin; j < end && st == TL_OK; j++) {
    if (!needed[j - begin]) continue;
    tl_node f = g->nodes[j];
    tl_node* c = NULL;
    char name[TL_NAME_MAX];
    snprintf(name, sizeof name, "%.44s.rc", f.name);
    st = append_node(g, f.op, name, &c);
    if (st != TL_OK) break;
    g->n_nodes++;
    c->n_in = f.n_in, c->n_out = f.n_out;
    for (int k = 0; k < f.n_in; k++)
      c->in[k] = f.in[k] >= 0 && f.in[k] < nv && map[f.in[k]] >= 0 ? map[f.in[k]] : f.in[k];
    memcpy(c->attr, f.attr, sizeof c->attr);
    c->flops = f.flops, c->bytes = f.bytes;
    c->forward_of = forward_of;
    c->again = true;
    for (int k = 0; k < f.n_out && st == TL_OK; k++) {
      if (f.out[k] < 0) continue;
      tl_value v = g->values[f.out[k]];
      snprintf(name, sizeof name, "%.44s.rc", v.name);
      int id;
      st = tl_graph_value(g, name, TL_ROLE_ACTIVATION, v.dtype, v.n_dims, v.shape, &id);
      if (st != TL_OK) break;
      c->out[k] = id; /* tl_graph_value moves values, never nodes */
      map[f.out[k]] = id;
    }
  }
  if (st == TL_OK && n_copies) {
    tl_node* copies = malloc(sizeof(tl_node) * (size_t)n_copies);
    if (!copies) {
      st = TL_ERRF(TL_ERR_NOMEM, "out of memory recomputing %d nodes", n);
    } else {
      memcpy(copies, &g->nodes[first_copy], sizeof(tl_node) * (size_t)n_copies);
      memmove(&g->nodes[at + n_copies], &g->nodes[at], sizeof(tl_node) * (size_t)(first_copy - at));
      memcpy(&g->nodes[at], copies, sizeof(tl_node) * (size_t)n_copies);
      free(copies);
    }
  }
  if (st == TL_OK) {
    /* 3. the range's backward reads the copies */
    for (int i = at + n_copies; i < g->n_nodes; i++) {
      tl_node* x = &g->nodes[i];
      if (!backward_of_range(x, begin, end)) continue;
      for (int k = 0; k < x->n_in; k++)
        if (x->in[k] >= 0 && x->in[k] < nv && map[x->in[k]] >= 0) x->in[k] = map[x->in[k]];
    }
    /* 4. an earlier copy of a node of the range (tl_graph_rematerialize's)
     * that now reads what one of ours does: ours serves its readers */
    for (int i = at + n_copies; i < g->n_nodes; i++) {
      const tl_node* x = &g->nodes[i];
      if (!x->again || !backward_of_range(x, begin, end)) continue;
      int twin = -1;
      for (int c = at; c < at + n_copies && twin < 0; c++)
        if (same_node(x, &g->nodes[c])) twin = c;
      if (twin < 0) continue;
      int from[TL_NODE_MAX_IO], to[TL_NODE_MAX_IO];
      memcpy(from, x->out, sizeof from);
      memcpy(to, g->nodes[twin].out, sizeof to);
      int n_out = x->n_out;
      memmove(&g->nodes[i], &g->nodes[i + 1], sizeof(tl_node) * (size_t)(g->n_nodes - i - 1));
      g->n_nodes--;
      replace_reads(g, i, from, to, n_out);
      i--;
    }
  }
  free(needed);
  free(map);
  return st;
}

double tl_graph_flops(const tl_graph* g, int begin, int end) {
  double f = 0;
  for (int i = begin; i < end; i++) f += g->nodes[i].flops;
  return f;
}

int tl_graph_find(const tl_graph* g, const char* name) {
  for (int v = 0; v < g->n_values; v++)
    if (strcmp(g->values[v].name, name) == 0) return v;
  return -1;
}

bool tl_node_reads(const tl_node* n, int v) {
  for (int k = 0; k < n->n_in; k++)
    if (n->in[k] >= 0 && n->in[k] == v) return true;
  return false;
}

bool tl_node_writes(const tl_node* n, int v) {
  for (int k = 0; k < n->n_out; k++)
    if (n->out[k] >= 0 && n->out[k] == v) return true;
  return false;
}

int tl_graph_producer(const tl_graph* g, int v) {
  for (int i = 0; i < g->n_forward; i++)
    if (tl_node_writes(&g->nodes[i], v)) return i;
  return -1;
}

int tl_graph_first_reader(const tl_graph* g, int v, int begin, int end) {
  for (int i = begin; i < end; i++)
    if (tl_node_reads(&g->nodes[i], v)) return i;
  return -1;
}

int tl_graph_crossing(const tl_graph* g, int at, int* ids, int max) {
  int n = 0;
  for (int v = 0; v < g->n_values; v++) {
    if (g->values[v].role != TL_ROLE_ACTIVATION) continue;
    int p = tl_graph_producer(g, v);
    if (p < 0 || p >= at || tl_graph_first_reader(g, v, at, g->n_forward) < 0) continue;
    if (n < max) ids[n] = v;
    n++;
  }
  return n;
}

static bool is_read_by(const tl_node* nodes, int from, int to, const tl_node* x) {
  for (int i = from; i < to; i++)
    if (reads_any(&nodes[i], x->out, x->n_out)) return true;
  return false;
}

tl_status tl_graph_split_weight(tl_graph* g) {
  if (g->weight_begin)
    return TL_ERRF(TL_ERR_INVALID, "split_weight: the backward is already in two passes");
  if (g->n_nodes == g->n_forward)
    return TL_ERRF(TL_ERR_INVALID, "split_weight: the graph has no backward pass yet");
  const int nb = g->n_nodes - g->n_forward;
  tl_node* in_pass = malloc(sizeof(tl_node) * (size_t)nb);
  tl_node* w_pass = malloc(sizeof(tl_node) * (size_t)nb);
  if (!in_pass || !w_pass) {
    free(in_pass), free(w_pass);
    return TL_ERRF(TL_ERR_NOMEM, "out of memory splitting %d backward nodes", nb);
  }
  int n_in = 0, n_w = 0;
  for (int i = g->n_forward; i < g->n_nodes; i++) {
    const tl_node* n = &g->nodes[i];
    /* a weight other nodes read too (the tied embedding) keeps its
     * gradient's order of summation: whole, in the input pass */
    int readers = 0;
    for (int j = 0; j < g->n_forward && n->op == TL_OP_MATMUL_BACKWARD; j++)
      readers += tl_node_reads(&g->nodes[j], n->in[2]);
    if (n->op != TL_OP_MATMUL_BACKWARD || readers > 1) {
      in_pass[n_in++] = *n;
      continue;
    }
    /* in {dout, a, b}, out {da, db, dbias}: da needs dout and b; db and
     * dbias need dout and a (the kernel skips absent outputs) */
    tl_node x = *n, w = *n;
    x.in[1] = -1, x.out[1] = x.out[2] = -1;
    w.in[2] = -1, w.out[0] = -1;
    /* each half is one of the backward's two products */
    x.flops = w.flops = n->flops / 2, x.bytes = w.bytes = n->bytes / 2;
    snprintf(w.name, sizeof w.name, "%.44s.w", n->name);
    if (x.out[0] >= 0) in_pass[n_in++] = x;
    if (w.out[1] >= 0 || w.out[2] >= 0) w_pass[n_w++] = w;
  }
  /* copies only the weight pass reads follow it, the last first (so that a
   * chain of them moves whole) */
  for (int i = n_in - 1; i >= 0; i--) {
    tl_node x = in_pass[i];
    if (!x.again || is_read_by(in_pass, i + 1, n_in, &x)) continue;
    int at = -1;
    for (int j = 0; j < n_w && at < 0; j++)
      if (reads_any(&w_pass[j], x.out, x.n_out)) at = j;
    if (at < 0) continue;
    memmove(&in_pass[i], &in_pass[i + 1], sizeof(tl_node) * (size_t)(n_in - i - 1));
    n_in--;
    memmove(&w_pass[at + 1], &w_pass[at], sizeof(tl_node) * (size_t)(n_w - at));
    w_pass[at] = x;
    n_w++;
  }
  tl_status st = grow((void**)&g->nodes, &g->cap_nodes, g->n_forward + n_in + n_w, sizeof(tl_node));
  if (st == TL_OK) {
    memcpy(&g->nodes[g->n_forward], in_pass, sizeof(tl_node) * (size_t)n_in);
    memcpy(&g->nodes[g->n_forward + n_in], w_pass, sizeof(tl_node) * (size_t)n_w);
    g->n_nodes = g->n_forward + n_in + n_w;
    g->weight_begin = g->n_forward + n_in;
  }
  free(in_pass), free(w_pass);
  return st;
}

tl_status tl_graph_set_precision(tl_graph* g, tl_dtype precision) {
  if (precision != TL_F32 && precision != TL_BF16)
    return TL_ERRF(TL_ERR_INVALID, "graph precision %s; expected f32 or bf16",
                   tl_dtype_name(precision));
  if (precision == g->precision) return TL_OK;
  if (g->precision != TL_F32)
    return TL_ERRF(TL_ERR_INVALID, "the graph's precision is already %s",
                   tl_dtype_name(g->precision));
  /* 1. what forward ops (and their copies run again) write in their
   * differentiable slots, but the loss and what its node reads (the
   * logits: the loss is computed from fp32 logits, as Megatron-LM's
   * default casts them, and their gradient is written in fp32) */
  const int loss_node = g->loss >= 0 ? tl_graph_producer(g, g->loss) : -1;
  for (int i = 0; i < g->n_nodes; i++) {
    const tl_node* n = &g->nodes[i];
    const struct tl_op_def* def = tl_op_get(n->op);
    if (!def->backward) continue; /* a backward op: it writes gradients */
    for (int k = 0; k < def->n_diff_out && k < n->n_out; k++) {
      int v = n->out[k];
      if (v < 0 || v == g->loss) continue;
      if (loss_node >= 0 && tl_node_reads(&g->nodes[loss_node], v)) continue;
      tl_value* val = &g->values[v];
      if (val->role == TL_ROLE_ACTIVATION && val->dtype == TL_F32) val->dtype = TL_BF16;
    }
  }
  /* an op that moves values as stored (TL_OP_STORED) reads and writes one
   * dtype: where one side stayed fp32 (the logits), so does the other */
  for (bool changed = true; changed;) {
    changed = false;
    for (int i = 0; i < g->n_nodes; i++) {
      const tl_node* n = &g->nodes[i];
      if (!(tl_op_get(n->op)->flags & TL_OP_STORED)) continue;
      bool f32 = false;
      for (int k = 0; k < n->n_in + n->n_out; k++) {
        int v = k < n->n_in ? n->in[k] : n->out[k - n->n_in];
        if (v >= 0 && g->values[v].role == TL_ROLE_ACTIVATION && g->values[v].dtype == TL_F32)
          f32 = true;
      }
      for (int k = 0; f32 && k < n->n_in + n->n_out; k++) {
        int v = k < n->n_in ? n->in[k] : n->out[k - n->n_in];
        if (v >= 0 && g->values[v].dtype == TL_BF16) g->values[v].dtype = TL_F32, changed = true;
      }
    }
  }
  /* 2. their gradients */
  for (int v = 0; v < g->n_values; v++) {
    tl_value* val = &g->values[v];
    if (val->role == TL_ROLE_GRAD && val->dtype == TL_F32 && val->grad_of >= 0 &&
        g->values[val->grad_of].dtype == TL_BF16)
      val->dtype = TL_BF16;
  }
  g->precision = precision;
  return TL_OK;
}
