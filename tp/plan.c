/* plan.c — the tensor-parallel pass (tp.h): decide how every value and
 * parameter of a full forward graph is held across the group, then emit
 * one rank's graph with the collectives in between.
 *
 * 1. Decide. One walk over the forward nodes tracks each value's state —
 *    WHOLE (every rank holds it), SPLIT (its last dimension divided, in
 *    `parts` blocks), PARTIAL (each rank holds a summand; reduced at once)
 *    or ROWS (this rank's token rows: sequence parallelism) — and decides
 *    each parameter (whole, split along a dimension, rank 0's only). A rule
 *    that meets a state it cannot take fails naming the node whose choice
 *    caused it; that node is forbidden to shard and the walk starts again.
 *    Each restart forbids one more node, so the walk ends.
 * 2. Lay out: the rank's parameters in the full vector's order.
 * 3. Emit: the same walk, writing the rank's graph: nodes with their local
 *    attributes, the conversions each input needs before it is read, the
 *    reductions after a partial output. */
#include <stdlib.h>
#include <string.h>

#include "graph/ops/shape.h"
#include "tp/tp.h"
#include "tp/tp_impl.h"

enum { WHOLE = 0, SPLIT, PARTIAL, ROWS };
enum { P_UNDECIDED = 0, P_WHOLE, P_SPLIT, P_FIRST };
enum { CONV_COPY = 0, CONV_GATHER, CONV_SLICE, CONV_GATHER_WHOLE, N_CONV };

struct vstate {
  unsigned char st, parts;
  int origin; /* SPLIT: the node whose choice split it */
};

struct pdec {
  unsigned char kind, dim, parts;
  int by;          /* the node that decided it */
  bool partial;    /* a node reads it on token-row shards */
  bool read_whole; /* a node every rank runs whole (all rows) reads it */
};

struct pass {
  const tl_graph* g;
  int tp, rank;
  bool sp;
  struct vstate* vs; /* per full value */
  struct pdec* pd;   /* per full value (parameters) */
  bool* forbid;      /* per forward node: may not shard */
  int fail;          /* the node to forbid after a failed walk, or -1 */
  bool loss_split;
  int n_linear, n_linear_split;
  /* emitting */
  tl_graph* out;
  tl_tp_shard* sh;
  int* vmap;             /* full value -> rank value */
  int (*conv)[N_CONV];   /* full value -> rank value after a conversion, or -1 */
  int64_t* local_offset; /* full parameter value -> offset in the rank's vector, or -1 */
};

static const tl_value* val(const struct pass* p, int v) {
  return &p->g->values[v];
}

static bool is_param(const struct pass* p, int v) {
  return v >= 0 && val(p, v)->role == TL_ROLE_PARAM;
}

/* Decides parameter v (`kind` along dim/parts, by node i); false when an
 * earlier decision disagrees (then that decision's node is to be forbidden). */
static bool decide(struct pass* p, int v, int kind, int dim, int parts, int i) {
  if (v < 0) return true;
  struct pdec* d = &p->pd[v];
  if (d->kind == P_UNDECIDED) {
    *d = (struct pdec){(unsigned char)kind, (unsigned char)dim, (unsigned char)parts, i,
                       d->partial,          d->read_whole};
    return true;
  }
  if (d->kind == kind && (kind != P_SPLIT || (d->dim == dim && d->parts == parts))) return true;
  if (p->fail < 0) p->fail = d->by >= 0 ? d->by : i;
  return false;
}

/* Whether parameter v may still be decided as given. */
static bool can_decide(const struct pass* p, int v, int kind, int dim, int parts) {
  if (v < 0) return true;
  const struct pdec* d = &p->pd[v];
  return d->kind == P_UNDECIDED ||
         (d->kind == kind && (kind != P_SPLIT || (d->dim == dim && d->parts == parts)));
}

static void fail_at(struct pass* p, int node) {
  if (p->fail < 0) p->fail = node;
}

/* ---- emitting --------------------------------------------------------- */

static int64_t numel_of(const int64_t* shape, int n) {
  int64_t e = 1;
  for (int i = 0; i < n; i++) e *= shape[i];
  return e;
}

/* The rank's value for full value v (parameters and inputs made on first
 * use); -1 for a parameter this rank holds none of. */
static tl_status rank_value(struct pass* p, int v, int* out) {
  *out = -1;
  if (v < 0 || !p->out) return TL_OK;
  if (p->vmap[v] >= 0) {
    *out = p->vmap[v];
    return TL_OK;
  }
  const tl_value* x = val(p, v);
  if (x->role == TL_ROLE_INPUT) {
    int64_t shape[4];
    memcpy(shape, x->shape, sizeof shape);
    TL_CHECK(tl_graph_input(p->out, x->name, x->dtype, x->n_dims, shape, &p->vmap[v]));
  } else if (x->role == TL_ROLE_PARAM) {
    const struct pdec* d = &p->pd[v];
    if (d->kind == P_FIRST && p->rank != 0) return TL_OK;
    int64_t shape[4];
    memcpy(shape, x->shape, sizeof shape);
    if (d->kind == P_SPLIT) shape[d->dim] /= p->tp;
    TL_CHECK(tl_graph_param(p->out, x->name, p->local_offset[v], x->n_dims, shape, &p->vmap[v]));
  } else {
    return TL_ERRF(TL_ERR_INTERNAL, "tp: value '%s' is read before it is written", x->name);
  }
  *out = p->vmap[v];
  return TL_OK;
}

/* A tp_comm node of `kind` over rank value x, named after full value v;
 * full value `shape_of` gives a gathered output's shape. */
static tl_status comm(struct pass* p, int kind, int x, int v, int* out) {
  const tl_value* f = val(p, v);
  int attr[TL_NODE_MAX_ATTRS] = {kind, p->tp, 0, 0};
  if (kind == TL_TP_GATHER || kind == TL_TP_GATHER_WHOLE) { /* the whole's (d0, d1, C) or (d0, C) */
    attr[2] = (int)f->shape[0];
    attr[3] = f->n_dims == 3 ? (int)f->shape[1] : 0;
  }
  static const char* const kinds[] = {"copy", "reduce", "gather", "scatter", "slice", "gather"};
  char name[TL_NAME_MAX];
  snprintf(name, sizeof name, "%.38s.%s", f->name, kinds[kind]);
  return tl_graph_node(p->out, tl__tp_ops()->comm, name, 1, &x, attr, TL_NODE_MAX_ATTRS, out);
}

/* Full value v as the consumer needs it: converted (COPY, GATHER, SLICE) or
 * as held. Conversions are made once per value (a second reader shares
 * them). Returns the rank value through *out when emitting. */
static tl_status input(struct pass* p, int v, int conv, int* out) {
  *out = -1;
  if (conv < 0) return rank_value(p, v, out);
  if (p->out && p->conv[v][conv] >= 0) {
    *out = p->conv[v][conv];
    return TL_OK;
  }
  if (!p->out) return TL_OK;
  int x;
  TL_CHECK(rank_value(p, v, &x));
  static const int kinds[N_CONV] = {TL_TP_COPY, TL_TP_GATHER, TL_TP_SLICE, TL_TP_GATHER_WHOLE};
  TL_CHECK(comm(p, kinds[conv], x, v, &p->conv[v][conv]));
  /* a conversion is one reader's view: its gradient differs by rank */
  p->sh->whole[p->conv[v][conv]] = false;
  *out = p->conv[v][conv];
  return TL_OK;
}

/* Emits node i of the full graph as op `op` with rank inputs `in` and
 * attributes `attr`; maps its outputs, reducing a partial first output
 * (REDUCE, or SCATTER under sequence parallelism). `state` is the outputs'
 * state (for the whole flags). */
static tl_status emit(struct pass* p, int i, int op, int n_in, const int* in, const int* attr,
                      int state) {
  const tl_node* n = &p->g->nodes[i];
  if (!p->out) return TL_OK;
  int outs[TL_NODE_MAX_IO];
  TL_CHECK(tl_graph_node(p->out, op, n->name, n_in, in, attr, TL_NODE_MAX_ATTRS, outs));
  const tl_node* made = &p->out->nodes[p->out->n_nodes - 1];
  for (int k = 0; k < n->n_out && k < made->n_out; k++) {
    if (n->out[k] < 0) continue;
    p->vmap[n->out[k]] = outs[k];
    p->sh->whole[outs[k]] = state == WHOLE;
  }
  if (state == PARTIAL) {
    int y;
    TL_CHECK(comm(p, p->sp ? TL_TP_SCATTER : TL_TP_REDUCE, outs[0], n->out[0], &y));
    p->vmap[n->out[0]] = y;
    p->sh->whole[y] = !p->sp;
  }
  return TL_OK;
}

/* ---- the rules --------------------------------------------------------- */

/* The state a value has once a partial sum is reduced. */
static struct vstate reduced(const struct pass* p) {
  return (struct vstate){p->sp ? ROWS : WHOLE, 1, -1};
}

/* How parts a column split of node i's output must use: [Q | K | V] when an
 * attention reads it fused. */
static int column_parts(const struct pass* p, int i) {
  const tl_graph* g = p->g;
  int y = g->nodes[i].out[0];
  for (int j = i + 1; j < g->n_forward; j++)
    if (g->nodes[j].op == TL_OP_ATTENTION && g->nodes[j].n_in == 1 &&
        tl_node_reads(&g->nodes[j], y))
      return 3;
  return 1;
}

/* Notes how the whole parameters of node n are read: on token-row shards
 * (their gradients are then parts of a sum over the group) or whole. */
static void params_read(struct pass* p, const tl_node* n, bool rows) {
  for (int k = 0; k < n->n_in; k++) {
    if (!is_param(p, n->in[k]) || p->pd[n->in[k]].kind != P_WHOLE) continue;
    if (rows)
      p->pd[n->in[k]].partial = true;
    else
      p->pd[n->in[k]].read_whole = true;
  }
}

/* A linear layer: matmul(x, W^T [, b]) with W a 2-D parameter (out, in). */
static bool is_linear(const struct pass* p, const tl_node* n) {
  return n->op == TL_OP_MATMUL && n->attr[0] == 0 && n->attr[1] == 1 && is_param(p, n->in[1]) &&
         val(p, n->in[1])->n_dims == 2 && (n->n_in < 3 || n->in[2] < 0 || is_param(p, n->in[2]));
}

static tl_status rule_linear(struct pass* p, int i) {
  const tl_node* n = &p->g->nodes[i];
  const int x = n->in[0], w = n->in[1], b = n->n_in > 2 ? n->in[2] : -1;
  const struct vstate xs = p->vs[x];
  const int64_t rows_out = val(p, w)->shape[0], cols_in = val(p, w)->shape[1];
  int in[3] = {-1, -1, -1}, y = n->out[0];
  p->n_linear++;
  if (xs.st == SPLIT) { /* row-parallel: W by input columns, the bias once */
    bool ok = xs.parts == 1 && p->tp > 1 && !p->forbid[i] && cols_in % p->tp == 0 &&
              can_decide(p, w, P_SPLIT, 1, 1) && can_decide(p, b, P_FIRST, 0, 1);
    if (!ok) {
      fail_at(p, xs.origin);
      return TL_OK;
    }
    decide(p, w, P_SPLIT, 1, 1, i);
    decide(p, b, P_FIRST, 0, 1, i);
    TL_CHECK(input(p, x, -1, &in[0]));
    TL_CHECK(rank_value(p, w, &in[1]));
    TL_CHECK(rank_value(p, b, &in[2]));
    TL_CHECK(emit(p, i, n->op, in[2] >= 0 ? 3 : 2, in, n->attr, PARTIAL));
    p->vs[y] = reduced(p);
    p->n_linear_split++;
    return TL_OK;
  }
  /* x whole or token rows: column-parallel when the split is possible */
  const int parts = column_parts(p, i);
  bool column = p->tp > 1 && !p->forbid[i] && rows_out % ((int64_t)p->tp * parts) == 0 &&
                can_decide(p, w, P_SPLIT, 0, parts) && can_decide(p, b, P_SPLIT, 0, parts);
  if (column) {
    decide(p, w, P_SPLIT, 0, parts, i);
    decide(p, b, P_SPLIT, 0, parts, i);
    TL_CHECK(input(p, x, xs.st == ROWS ? CONV_GATHER : CONV_COPY, &in[0]));
    TL_CHECK(rank_value(p, w, &in[1]));
    TL_CHECK(rank_value(p, b, &in[2]));
    TL_CHECK(emit(p, i, n->op, b >= 0 ? 3 : 2, in, n->attr, SPLIT));
    p->vs[y] = (struct vstate){SPLIT, (unsigned char)parts, i};
    p->n_linear_split++;
    return TL_OK;
  }
  /* whole on every rank, row by row (on token rows too) */
  if (!decide(p, w, P_WHOLE, 0, 1, i) || !decide(p, b, P_WHOLE, 0, 1, i)) return TL_OK;
  params_read(p, n, xs.st == ROWS);
  TL_CHECK(input(p, x, -1, &in[0]));
  TL_CHECK(rank_value(p, w, &in[1]));
  TL_CHECK(rank_value(p, b, &in[2]));
  TL_CHECK(emit(p, i, n->op, n->n_in, in, n->attr, xs.st == ROWS ? ROWS : WHOLE));
  p->vs[y] = (struct vstate){xs.st, 1, -1};
  return TL_OK;
}

static tl_status rule_embedding(struct pass* p, int i) {
  const tl_node* n = &p->g->nodes[i];
  const int tok = n->in[0], wte = n->in[1], wpe = n->n_in > 2 ? n->in[2] : -1;
  const int64_t rows = val(p, wte)->shape[0];
  int in[3] = {-1, -1, -1}, attr[TL_NODE_MAX_ATTRS];
  memcpy(attr, n->attr, sizeof attr);
  bool split = p->tp > 1 && !p->forbid[i] && rows % p->tp == 0 &&
               can_decide(p, wte, P_SPLIT, 0, 1) && can_decide(p, wpe, P_FIRST, 0, 1);
  TL_CHECK(input(p, tok, -1, &in[0]));
  if (split) { /* vocabulary-parallel: this rank's rows; the position term once */
    decide(p, wte, P_SPLIT, 0, 1, i);
    decide(p, wpe, P_FIRST, 0, 1, i);
    attr[0] = n->attr[0] + p->rank * (int)(rows / p->tp);
    TL_CHECK(rank_value(p, wte, &in[1]));
    TL_CHECK(rank_value(p, wpe, &in[2]));
    TL_CHECK(emit(p, i, n->op, 3, in, attr, PARTIAL));
    p->vs[n->out[0]] = reduced(p);
    return TL_OK;
  }
  if (!decide(p, wte, P_WHOLE, 0, 1, i) || !decide(p, wpe, P_WHOLE, 0, 1, i)) return TL_OK;
  params_read(p, n, false);
  TL_CHECK(rank_value(p, wte, &in[1]));
  TL_CHECK(rank_value(p, wpe, &in[2]));
  TL_CHECK(emit(p, i, n->op, n->n_in, in, attr, WHOLE));
  p->vs[n->out[0]] = (struct vstate){WHOLE, 1, -1};
  return TL_OK;
}

static tl_status rule_attention(struct pass* p, int i) {
  const tl_node* n = &p->g->nodes[i];
  int in[3], attr[TL_NODE_MAX_ATTRS];
  memcpy(attr, n->attr, sizeof attr);
  /* fused [Q | K | V] (one input, parts 3) or separate q, k and v (parts 1
   * each, grouped-query: n_kv_heads key/value heads) */
  const bool fused = n->n_in == 1;
  const int want = fused ? 3 : 1, nkv = fused ? n->attr[0] : n->attr[1];
  int n_split = 0, origin = -1;
  bool ok = true;
  for (int k = 0; k < n->n_in; k++) {
    const struct vstate xs = p->vs[n->in[k]];
    if (xs.st != SPLIT) continue;
    n_split++;
    if (origin < 0) origin = xs.origin;
    if (xs.parts != want) ok = false;
  }
  if (n_split > 0) { /* heads split with Q, K and V alike */
    if (!ok || n_split != n->n_in || n->attr[0] % p->tp != 0 || nkv % p->tp != 0) {
      fail_at(p, origin);
      return TL_OK;
    }
    attr[0] = n->attr[0] / p->tp;
    if (!fused) attr[1] = nkv / p->tp;
    for (int k = 0; k < n->n_in; k++) TL_CHECK(input(p, n->in[k], -1, &in[k]));
    TL_CHECK(emit(p, i, n->op, n->n_in, in, attr, SPLIT));
    for (int k = 0; k < n->n_out; k++)
      if (n->out[k] >= 0) p->vs[n->out[k]] = (struct vstate){SPLIT, 1, origin};
    return TL_OK;
  }
  /* whole: every rank attends over every head of whole sequences */
  for (int k = 0; k < n->n_in; k++)
    TL_CHECK(input(p, n->in[k], p->vs[n->in[k]].st == ROWS ? CONV_GATHER_WHOLE : -1, &in[k]));
  TL_CHECK(emit(p, i, n->op, n->n_in, in, attr, WHOLE));
  for (int k = 0; k < n->n_out; k++)
    if (n->out[k] >= 0) p->vs[n->out[k]] = (struct vstate){WHOLE, 1, -1};
  return TL_OK;
}

/* Rotary embeddings turn each head by the tokens' positions: a split by
 * whole heads keeps its split (the head size divides each rank's columns);
 * token rows are gathered into whole sequences first, since a row shard
 * does not know its positions. */
static tl_status rule_rope(struct pass* p, int i) {
  const tl_node* n = &p->g->nodes[i];
  const struct vstate xs = p->vs[n->in[0]];
  int in[1];
  if (xs.st == SPLIT) {
    const int64_t cols = tl__cols(val(p, n->in[0]));
    if (xs.parts != 1 || (cols / p->tp) % n->attr[0] != 0) {
      fail_at(p, xs.origin);
      return TL_OK;
    }
    TL_CHECK(input(p, n->in[0], -1, &in[0]));
    TL_CHECK(emit(p, i, n->op, 1, in, n->attr, SPLIT));
    p->vs[n->out[0]] = (struct vstate){SPLIT, 1, xs.origin};
    return TL_OK;
  }
  TL_CHECK(input(p, n->in[0], xs.st == ROWS ? CONV_GATHER_WHOLE : -1, &in[0]));
  TL_CHECK(emit(p, i, n->op, 1, in, n->attr, WHOLE));
  p->vs[n->out[0]] = (struct vstate){WHOLE, 1, -1};
  return TL_OK;
}

static tl_status rule_crossentropy(struct pass* p, int i) {
  const tl_node* n = &p->g->nodes[i];
  const struct vstate xs = p->vs[n->in[0]];
  int in[2];
  TL_CHECK(input(p, n->in[1], -1, &in[1]));
  if (xs.st == SPLIT) { /* vocabulary-parallel: columns [v0, v0 + cols) of the logits */
    if (xs.parts != 1) {
      fail_at(p, xs.origin);
      return TL_OK;
    }
    const int cols = (int)(tl__cols(val(p, n->in[0])) / p->tp);
    int attr[TL_NODE_MAX_ATTRS] = {n->attr[0], p->rank * cols, p->tp};
    TL_CHECK(input(p, n->in[0], -1, &in[0]));
    TL_CHECK(emit(p, i, tl__tp_ops()->xent, 2, in, attr, WHOLE));
    p->loss_split = true;
  } else {
    TL_CHECK(input(p, n->in[0], xs.st == ROWS ? CONV_GATHER_WHOLE : -1, &in[0]));
    TL_CHECK(emit(p, i, n->op, 2, in, n->attr, WHOLE));
  }
  p->vs[n->out[0]] = (struct vstate){WHOLE, 1, -1};
  return TL_OK;
}

/* Ops that work row by row (norms: TL_OP_ROWWISE), or element by element
 * (add, gelu, swiglu: TL_OP_ELEMENTWISE): the outputs are held as the inputs are; a whole input
 * meeting token rows takes its own rows; split inputs must all split alike, with no whole operand.
 * Anything else — or an elementwise op with a parameter operand on token rows, whose shape is the
 * whole's — runs whole on every rank, token rows gathered first. */
static tl_status rule_rowwise(struct pass* p, int i) {
  const tl_node* n = &p->g->nodes[i];
  const unsigned flags = tl_op_get(n->op)->flags;
  const bool elementwise = flags & TL_OP_ELEMENTWISE;
  const bool rowwise = elementwise || (flags & TL_OP_ROWWISE);
  bool any_split = false, any_rows = false, any_whole = false, any_param = false, mixed = false;
  int parts = -1, origin = -1;
  for (int k = 0; k < n->n_in; k++) {
    int v = n->in[k];
    if (v < 0 || val(p, v)->dtype != TL_F32) continue;
    if (is_param(p, v)) {
      any_param = true;
      continue;
    }
    const struct vstate* s = &p->vs[v];
    if (s->st == SPLIT) {
      if (parts >= 0 && s->parts != parts) mixed = true;
      if (parts < 0) parts = s->parts, origin = s->origin;
      any_split = true;
    } else if (s->st == ROWS) {
      any_rows = true;
    } else {
      any_whole = true;
    }
  }
  int state = WHOLE;
  if (any_split) {
    if (!elementwise || any_rows || any_whole || any_param || mixed) {
      fail_at(p, origin);
      return TL_OK;
    }
    state = SPLIT;
  } else if (any_rows && rowwise && !(elementwise && any_param)) {
    state = ROWS;
  }
  int in[TL_NODE_MAX_IO];
  for (int k = 0; k < n->n_in; k++) {
    int v = n->in[k], conv = -1;
    if (v >= 0 && is_param(p, v)) {
      if (!decide(p, v, P_WHOLE, 0, 1, i)) return TL_OK;
    } else if (v >= 0 && val(p, v)->dtype == TL_F32) {
      int st = p->vs[v].st;
      if (state == ROWS && st == WHOLE) conv = CONV_SLICE;
      if (state == WHOLE && st == ROWS) conv = CONV_GATHER_WHOLE;
    }
    TL_CHECK(input(p, v, conv, &in[k]));
  }
  params_read(p, n, state == ROWS);
  TL_CHECK(emit(p, i, n->op, n->n_in, in, n->attr, state));
  for (int k = 0; k < n->n_out; k++)
    if (n->out[k] >= 0)
      p->vs[n->out[k]] =
          (struct vstate){(unsigned char)state, (unsigned char)(parts > 0 ? parts : 1), origin};
  return TL_OK;
}

/* One walk over the forward nodes: deciding (p->out NULL) or emitting. */
static tl_status walk(struct pass* p) {
  const tl_graph* g = p->g;
  p->fail = -1;
  p->loss_split = false;
  p->n_linear = p->n_linear_split = 0;
  for (int v = 0; v < g->n_values; v++) {
    p->vs[v] = (struct vstate){WHOLE, 1, -1};
    if (!p->out) p->pd[v] = (struct pdec){P_UNDECIDED, 0, 1, -1, false, false};
  }
  for (int i = 0; i < g->n_forward && p->fail < 0; i++) {
    const tl_node* n = &g->nodes[i];
    if (p->sh && p->sh->node_map) p->sh->node_map[i] = p->out ? p->out->n_nodes : 0;
    if (is_linear(p, n))
      TL_CHECK(rule_linear(p, i));
    else if (n->op == TL_OP_EMBEDDING && is_param(p, n->in[1]))
      TL_CHECK(rule_embedding(p, i));
    else if (n->op == TL_OP_ATTENTION)
      TL_CHECK(rule_attention(p, i));
    else if (n->op == TL_OP_ROPE)
      TL_CHECK(rule_rope(p, i));
    else if (n->op == TL_OP_CROSSENTROPY)
      TL_CHECK(rule_crossentropy(p, i));
    else
      TL_CHECK(rule_rowwise(p, i));
  }
  return TL_OK;
}

/* Decides every value, restarting with one more node forbidden after each
 * failed walk. */
static tl_status decide_all(struct pass* p) {
  for (int tries = 0; tries <= p->g->n_forward; tries++) {
    TL_CHECK(walk(p));
    if (p->fail < 0) {
      for (int v = 0; v < p->g->n_values; v++) {
        if (!is_param(p, v)) continue;
        if (p->pd[v].kind == P_UNDECIDED) p->pd[v].kind = P_WHOLE;
        /* its gradient would be a sum of row parts plus a whole part that
         * every rank holds: no sum over the group is right for both */
        if (p->sp && p->pd[v].partial && p->pd[v].read_whole)
          return TL_ERRF(TL_ERR_UNSUPPORTED,
                         "tp: parameter '%s' is read both on token-row shards and whole on "
                         "every rank under sequence parallelism",
                         p->g->values[v].name);
      }
      return TL_OK;
    }
    p->forbid[p->fail] = true;
  }
  return TL_ERRF(TL_ERR_INTERNAL, "tp: the sharding pass did not settle");
}

/* ---- layout ------------------------------------------------------------- */

static int by_offset(const void* a, const void* b) {
  const struct tl_tp_param *x = a, *y = b;
  return x->full_offset < y->full_offset ? -1 : x->full_offset > y->full_offset;
}

/* The rank's parameters, in the full vector's order, from the decisions. */
static tl_status layout(struct pass* p, tl_tp_shard* sh) {
  const tl_graph* g = p->g;
  int n = 0;
  for (int v = 0; v < g->n_values; v++) n += is_param(p, v);
  sh->params = calloc((size_t)(n > 0 ? n : 1), sizeof *sh->params);
  if (!sh->params) return TL_ERRF(TL_ERR_NOMEM, "out of memory for a tensor-parallel layout");
  for (int v = 0; v < g->n_values; v++) {
    /* a parameter no node reads takes no room (nothing would ever write it) */
    if (!is_param(p, v) || tl_graph_first_reader(g, v, 0, g->n_forward) < 0) continue;
    const tl_value* x = val(p, v);
    const struct pdec* d = &p->pd[v];
    struct tl_tp_param* q = &sh->params[sh->n_params++];
    q->full_value = v;
    q->value = -1;
    q->kind = d->kind == P_SPLIT ? TL_TP_SPLIT : d->kind == P_FIRST ? TL_TP_FIRST : TL_TP_WHOLE;
    q->dim = d->dim;
    q->parts = d->parts ? d->parts : 1;
    q->n_dims = x->n_dims;
    memcpy(q->full_shape, x->shape, sizeof q->full_shape);
    memcpy(q->shape, x->shape, sizeof q->shape);
    if (q->kind == TL_TP_SPLIT) q->shape[q->dim] /= p->tp;
    if (q->kind == TL_TP_FIRST && p->rank != 0) q->shape[0] = 0;
    q->full_offset = x->offset;
    q->full_numel = tl_value_numel(x);
    q->numel = numel_of(q->shape, q->n_dims);
    q->partial = p->sp && d->partial && q->kind == TL_TP_WHOLE;
  }
  qsort(sh->params, (size_t)sh->n_params, sizeof *sh->params, by_offset);
  for (int k = 0; k < sh->n_params; k++) {
    sh->params[k].offset = sh->n_local;
    sh->n_local += sh->params[k].numel;
  }
  sh->n_full = g->n_params;
  return TL_OK;
}

/* ---- entry points ------------------------------------------------------- */

static tl_status pass_init(struct pass* p, const tl_graph* full, int tp, int rank, bool sp) {
  memset(p, 0, sizeof *p);
  if (tp < 1 || rank < 0 || rank >= tp)
    return TL_ERRF(TL_ERR_INVALID, "tensor-parallel rank %d of %d", rank, tp);
  if (full->n_nodes != full->n_forward)
    return TL_ERRF(TL_ERR_INVALID, "tp: shard the forward graph before it is differentiated");
  p->g = full, p->tp = tp, p->rank = rank, p->sp = sp && tp > 1;
  size_t nv = (size_t)(full->n_values > 0 ? full->n_values : 1);
  p->vs = calloc(nv, sizeof *p->vs);
  p->pd = calloc(nv, sizeof *p->pd);
  p->forbid = calloc((size_t)(full->n_forward > 0 ? full->n_forward : 1), sizeof(bool));
  if (!p->vs || !p->pd || !p->forbid)
    return TL_ERRF(TL_ERR_NOMEM, "out of memory for the tensor-parallel pass");
  return TL_OK;
}

static void pass_free(struct pass* p) {
  free(p->vs);
  free(p->pd);
  free(p->forbid);
  free(p->vmap);
  free(p->conv);
  free(p->local_offset);
}

static void shard_header(const struct pass* p, tl_tp_shard* sh) {
  sh->tp = p->tp;
  sh->rank = p->rank;
  sh->sp = p->sp;
  sh->loss_split = p->loss_split;
  sh->n_linear = p->n_linear;
  sh->n_linear_split = p->n_linear_split;
}

tl_status tl_tp_shard_layout(const tl_graph* full, int tp, int rank, bool sp, tl_tp_shard* sh) {
  memset(sh, 0, sizeof *sh);
  struct pass p;
  tl_status st = pass_init(&p, full, tp, rank, sp);
  if (st == TL_OK) st = decide_all(&p);
  if (st == TL_OK) st = layout(&p, sh);
  shard_header(&p, sh);
  pass_free(&p);
  if (st != TL_OK) tl_tp_shard_free(sh);
  return st;
}

tl_status tl_tp_shard_graph(const tl_graph* full, int tp, int rank, bool sp, tl_graph** out,
                            tl_tp_shard* sh) {
  *out = NULL;
  memset(sh, 0, sizeof *sh);
  struct pass p;
  tl_graph* g = NULL;
  tl_status st = pass_init(&p, full, tp, rank, sp);
  if (st == TL_OK) st = decide_all(&p);
  if (st == TL_OK) st = layout(&p, sh);
  /* 3. emit */
  const int nv = full->n_values;
  if (st == TL_OK) {
    p.vmap = malloc(sizeof(int) * (size_t)(nv > 0 ? nv : 1));
    p.conv = malloc(sizeof *p.conv * (size_t)(nv > 0 ? nv : 1));
    p.local_offset = malloc(sizeof(int64_t) * (size_t)(nv > 0 ? nv : 1));
    sh->value_map = malloc(sizeof(int) * (size_t)(nv > 0 ? nv : 1));
    sh->node_map = malloc(sizeof(int) * (size_t)(full->n_forward + 1));
    /* the rank's graph has at most the full graph's values plus a reduction
     * and three conversions per value */
    sh->whole = calloc((size_t)(5 * nv + 1), sizeof(bool));
    if (!p.vmap || !p.conv || !p.local_offset || !sh->value_map || !sh->node_map || !sh->whole)
      st = TL_ERRF(TL_ERR_NOMEM, "out of memory for the tensor-parallel pass");
  }
  if (st == TL_OK) st = tl_graph_create(&g);
  if (st == TL_OK) {
    for (int v = 0; v < nv; v++) {
      p.vmap[v] = -1, p.local_offset[v] = -1;
      for (int c = 0; c < N_CONV; c++) p.conv[v][c] = -1;
    }
    for (int k = 0; k < sh->n_params; k++)
      p.local_offset[sh->params[k].full_value] = sh->params[k].offset;
    p.out = g;
    p.sh = sh;
    st = walk(&p);
    if (st == TL_OK && p.fail >= 0)
      st = TL_ERRF(TL_ERR_INTERNAL, "tp: node '%s' failed after the decisions settled",
                   full->nodes[p.fail].name);
  }
  if (st == TL_OK) {
    sh->node_map[full->n_forward] = g->n_nodes;
    g->n_params = sh->n_local;
    for (int v = 0; v < nv; v++) {
      sh->value_map[v] = p.vmap[v];
      if (p.vmap[v] >= 0 && full->values[v].output) st = tl_graph_mark_output(g, p.vmap[v]);
    }
    if (st == TL_OK && full->loss >= 0) st = tl_graph_set_loss(g, p.vmap[full->loss]);
  }
  if (st == TL_OK) {
    sh->n_full_values = nv;
    sh->n_full_nodes = full->n_forward;
    sh->n_values = g->n_values;
    sh->param_of = malloc(sizeof(int) * (size_t)(g->n_values > 0 ? g->n_values : 1));
    if (!sh->param_of) st = TL_ERRF(TL_ERR_NOMEM, "out of memory for a tensor-parallel layout");
    for (int v = 0; st == TL_OK && v < g->n_values; v++) sh->param_of[v] = -1;
    for (int k = 0; st == TL_OK && k < sh->n_params; k++) {
      struct tl_tp_param* q = &sh->params[k];
      q->value = p.vmap[q->full_value];
      if (q->value >= 0) sh->param_of[q->value] = k;
    }
  }
  shard_header(&p, sh);
  pass_free(&p);
  if (st != TL_OK) {
    tl_graph_destroy(g);
    tl_tp_shard_free(sh);
    return st;
  }
  *out = g;
  return TL_OK;
}
