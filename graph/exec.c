/* exec.c — the executor: one arena for planned values, one buffer for the
 * inputs, views into the caller's flat parameter and gradient buffers. */
#include "graph/exec.h"

#include <stdlib.h>
#include <string.h>

#include "core/timer.h"
#include "graph/op.h"

struct tl_exec {
  const tl_graph* g;
  const tl_backend* be;
  tl_buffer* params;
  bool params_bf16; /* params stores bf16 (tl_exec_options.params_dtype) */
  tl_buffer* grads;
  tl_buffer* arena;
  tl_buffer* transient; /* values living within one pass: own or shared */
  bool own_transient;
  tl_buffer* inputs;
  tl_buffer* scratch;    /* collectives' temporaries (tp_comm backward) */
  int64_t* input_offset; /* bytes into `inputs`, per value; -1 otherwise */
  tl_memplan plan;
  int begin, end;        /* forward nodes this executor runs */
  int64_t* param_offset; /* per value: element offset in params */
  int64_t* grad_offset;  /* per parameter value: element offset of its gradient in grads */
  int64_t* grad_acc;     /* exact gradient sums, or NULL (tl_exec_options) */
  bool* grads_fresh;     /* per parameter: its gradient holds nothing yet (tl_exec_options) */
  struct tl_run_ctx ctx;
  float* seed; /* host copy of the loss-gradient fill */
  int64_t seed_n;
  int profile;
  double op_seconds[TL_OP_MAX];
  tl_exec_hook hook;
  void* hook_user;
  tl_exec_node_hook node_hook;
  void* node_hook_user;
  tl_exec_span_hook span_hook;
  void* span_hook_user;
  tl_exec_pre_hook pre_hook;
  void* pre_hook_user;
  struct tl_exec_pieces pieces; /* tl_exec_options.pieces */
  float* piece_copy;            /* a bf16 graph's fp32 copy of a parameter's piece */
  /* bf16 storage: the fp32 copies of the running node's bf16 values (and
   * of its parameters, rounded, or widened when stored in bf16), at the
   * end of the transient arena */
  size_t staging_at;     /* bytes into `transient` */
  size_t staging_params; /* the parameters' copies first, the other values' after */
  bool staging;          /* whether any node of the range has staged values */
  int n_staged;
  int staged_v[2 * TL_NODE_MAX_IO];
  float* staged_p[2 * TL_NODE_MAX_IO];
};

#define ALIGN64(b) (((b) + 63) / 64 * 64)

/* Whether value v reaches kernels through an fp32 copy: stored in bf16,
 * or a parameter of a bf16 graph (read rounded to bf16). */
static bool is_staged(const tl_graph* g, int v) {
  const tl_value* val = &g->values[v];
  return val->dtype == TL_BF16 || (val->role == TL_ROLE_PARAM && g->precision == TL_BF16);
}

/* The distinct staged values node n reads or writes, in slot order
 * (inputs first); returns how many (at most 2 * TL_NODE_MAX_IO). */
static int staged_values(const tl_graph* g, const tl_node* n, const struct tl_exec_pieces* p,
                         int* ids) {
  int k = 0;
  for (int s = 0; s < n->n_in + n->n_out; s++) {
    int v = s < n->n_in ? n->in[s] : n->out[s - n->n_in];
    if (v < 0 || !is_staged(g, v)) continue;
    /* a parameter read in pieces: each piece's copy (tl_exec_piece_bytes) */
    if (p && p->param && p->rows && p->rows[v] > 0) continue;
    bool seen = false;
    for (int j = 0; j < k && !seen; j++) seen = ids[j] == v;
    if (!seen) ids[k++] = v;
  }
  return k;
}

/* The fp32 copies the nodes of forward nodes [begin, end) (and of their
 * backward) need, in bytes: *params, the most one node's parameters take
 * (fixed), and the return value, the most one node's other values take
 * (which grow with the batch). The copies of a node's parameters go first,
 * its other values after *params: the region is the sum of the two maxima,
 * so that it is a fixed part plus a part linear in the batch (what the
 * planner prices) at the cost of a little more than the largest node. */
static size_t staging_bytes(const tl_graph* g, int begin, int end, const struct tl_exec_pieces* p,
                            size_t* params) {
  size_t most = 0, most_params = 0;
  for (int i = 0; i < g->n_nodes; i++) {
    const bool in =
        i < g->n_forward ? i >= begin && i < end : tl_memplan_in_range(g, i, begin, end);
    if (!in || (tl_op_get(g->nodes[i].op)->flags & TL_OP_STORED)) continue;
    int ids[2 * TL_NODE_MAX_IO];
    int k = staged_values(g, &g->nodes[i], p, ids);
    size_t b = 0, bp = 0;
    for (int j = 0; j < k; j++) {
      size_t bytes = ALIGN64((size_t)tl_value_numel(&g->values[ids[j]]) * 4);
      if (g->values[ids[j]].role == TL_ROLE_PARAM)
        bp += bytes;
      else
        b += bytes;
    }
    if (b > most) most = b;
    if (bp > most_params) most_params = bp;
  }
  *params = most_params;
  return most;
}

bool tl_exec_can_piece(const tl_graph* g, int begin, int end, int v) {
  if (v < 0 || v >= g->n_values || g->values[v].role != TL_ROLE_PARAM || g->weight_begin)
    return false;
  int readers = 0;
  for (int i = begin; i < end && i < g->n_forward; i++) {
    const tl_node* n = &g->nodes[i];
    if (!tl_node_reads(n, v)) continue;
    const struct tl_op_def* def = tl_op_get(n->op);
    if (!def->pieces || !def->pieces(g, n, v)) return false;
    readers++;
  }
  return readers > 0;
}

void tl_exec_piece_sizes(const tl_graph* g, int begin, int end, const struct tl_exec_pieces* p,
                         size_t* ops, size_t* copy) {
  *ops = *copy = 0;
  for (int i = begin; p && p->rows && i < end && i < g->n_forward; i++) {
    const tl_node* n = &g->nodes[i];
    const struct tl_op_def* def = tl_op_get(n->op);
    for (int k = 0; k < n->n_in; k++) {
      int v = n->in[k];
      if (v < 0 || p->rows[v] <= 0) continue;
      size_t b = def->piece_bytes ? def->piece_bytes(g, n, p->rows[v], p->param != NULL) : 0;
      if (b > *ops) *ops = b;
      const tl_value* val = &g->values[v];
      size_t c = (size_t)p->rows[v] * (size_t)(tl_value_numel(val) / val->shape[0]) * 4;
      if (p->param && is_staged(g, v) && c > *copy) *copy = c;
    }
  }
}

size_t tl_exec_piece_bytes(const tl_graph* g, int begin, int end, const struct tl_exec_pieces* p) {
  size_t ops, copy;
  tl_exec_piece_sizes(g, begin, end, p, &ops, &copy);
  return copy ? ALIGN64(ops) + copy : ops;
}

static void* ctx_data(const struct tl_run_ctx* c, int v);

/* struct tl_run_ctx's piece_param: gathered by the caller (pieces->param),
 * widened or rounded into the pieces' copy for a bf16 graph; or within
 * the parameter read whole. */
static tl_status ctx_piece_param(const struct tl_run_ctx* c, int v, int64_t row0, int64_t rows,
                                 const float** out) {
  const tl_exec* x = c->exec;
  const tl_value* val = &x->g->values[v];
  const int64_t cols = tl_value_numel(val) / val->shape[0];
  if (!x->pieces.param) {
    *out = (const float*)ctx_data(c, v) + row0 * cols;
    return TL_OK;
  }
  const void* at = NULL;
  TL_CHECK(x->pieces.param(x->pieces.user, v, row0, rows, &at));
  if (!is_staged(x->g, v)) {
    *out = at;
    return TL_OK;
  }
  float* copy = x->piece_copy;
  if (x->params_bf16)
    TL_CHECK(x->be->ops->from_bf16(x->be->ctx, copy, at, rows * cols));
  else
    TL_CHECK(x->be->ops->round_bf16(x->be->ctx, copy, at, rows * cols));
  *out = copy;
  return TL_OK;
}

void tl_exec_set_backward_hook(tl_exec* x, tl_exec_hook hook, void* user) {
  x->hook = hook;
  x->hook_user = user;
}

void tl_exec_set_pre_hook(tl_exec* x, tl_exec_pre_hook hook, void* user) {
  x->pre_hook = hook;
  x->pre_hook_user = user;
}

/* struct tl_run_ctx's span: to the executor's span hook */
static void ctx_span(const struct tl_run_ctx* c, const tl_node* n, const char* what,
                     int64_t start_ns, int64_t end_ns) {
  const tl_exec* x = c->exec;
  if (x->span_hook) x->span_hook(x->span_hook_user, n, what, start_ns, end_ns);
}

void tl_exec_set_span_hook(tl_exec* x, tl_exec_span_hook hook, void* user) {
  x->span_hook = hook;
  x->span_hook_user = user;
  x->ctx.span = hook ? ctx_span : NULL;
}

void tl_exec_set_node_hook(tl_exec* x, tl_exec_node_hook hook, void* user) {
  x->node_hook = hook;
  x->node_hook_user = user;
}

void* tl_exec_data(const tl_exec* x, int v) {
  if (v < 0) return NULL;
  const tl_value* val = &x->g->values[v];
  switch (val->role) {
    case TL_ROLE_PARAM:
      if (x->params_bf16) return (uint16_t*)x->params->data + x->param_offset[v];
      return (float*)x->params->data + x->param_offset[v];
    case TL_ROLE_PARAM_GRAD: /* none for a gradient written in pieces */
      return x->grads && x->grad_offset[val->grad_of] >= 0
                 ? (float*)x->grads->data + x->grad_offset[val->grad_of]
                 : NULL;
    case TL_ROLE_INPUT:
      return x->input_offset[v] >= 0 ? (char*)x->inputs->data + x->input_offset[v] : NULL;
    default:
      if (x->plan.offset[v] < 0) return NULL;
      return (char*)(x->plan.transient[v] ? x->transient : x->arena)->data + x->plan.offset[v];
  }
}

/* What kernels see: the fp32 copy of a staged value of the running node. */
static void* ctx_data(const struct tl_run_ctx* c, int v) {
  const tl_exec* x = c->exec;
  for (int j = 0; j < x->n_staged; j++)
    if (x->staged_v[j] == v) return x->staged_p[j];
  return tl_exec_data(x, v);
}

tl_status tl_exec_create(const tl_graph* g, const tl_backend* be, tl_buffer* params,
                         tl_buffer* grads, tl_exec** out) {
  struct tl_exec_options opt = {.begin = 0, .end = g->n_forward};
  return tl_exec_create_ex(g, be, params, grads, &opt, out);
}

/* Places the inputs that nodes of [begin, end) (forward and backward) read
 * in one buffer, each 64-byte aligned: offset[v] in bytes, -1 for values
 * not placed (offset may be NULL). Returns the buffer's size. */
static size_t input_layout(const tl_graph* g, int begin, int end, int64_t* offset) {
  size_t in_bytes = 0;
  for (int v = 0; v < g->n_values; v++) {
    if (offset) offset[v] = -1;
    if (g->values[v].role != TL_ROLE_INPUT) continue;
    bool used = false;
    for (int i = begin; i < end && !used; i++) used = tl_node_uses(&g->nodes[i], v);
    for (int i = g->n_forward; i < g->n_nodes && !used; i++)
      used = tl_memplan_in_range(g, i, begin, end) && tl_node_uses(&g->nodes[i], v);
    if (!used) continue;
    if (offset) offset[v] = (int64_t)in_bytes;
    in_bytes +=
        ((size_t)tl_value_numel(&g->values[v]) * tl_dtype_size(g->values[v].dtype) + 63) / 64 * 64;
  }
  return in_bytes;
}

/* The largest temporary a node of the range (forward or backward) needs. */
static size_t scratch_bytes(const tl_graph* g, int begin, int end) {
  size_t scratch = 0;
  for (int i = 0; i < g->n_nodes; i++) {
    const struct tl_op_def* def = tl_op_get(g->nodes[i].op);
    if (!def->scratch_bytes || !tl_memplan_in_range(g, i, begin, end)) continue;
    size_t b = def->scratch_bytes(g, &g->nodes[i]);
    if (b > scratch) scratch = b;
  }
  return scratch;
}

static tl_status check_create_range(const tl_graph* g, int begin, int end) {
  if (begin < 0 || end > g->n_forward || begin > end)
    return TL_ERRF(TL_ERR_INVALID, "node range [%d, %d) is outside the %d forward nodes", begin,
                   end, g->n_forward);
  return TL_OK;
}

/* Where a transient arena of `planned` bytes puts the bf16 copies (at
 * *staging_at, `staging` bytes) and the pieces' temporaries (at
 * *piece_at, `pieces` bytes); returns its size. */
static size_t transient_layout(size_t planned, size_t staging, size_t pieces, size_t* staging_at,
                               size_t* piece_at) {
  size_t end = staging ? ALIGN64(planned) + staging : planned;
  if (staging_at) *staging_at = staging ? ALIGN64(planned) : planned;
  if (piece_at) *piece_at = pieces ? ALIGN64(end) : end;
  return pieces ? ALIGN64(end) + pieces : end;
}

tl_status tl_exec_size(const tl_graph* g, int begin, int end, struct tl_exec_bytes* out) {
  return tl_exec_size_pieces(g, begin, end, NULL, out);
}

tl_status tl_exec_size_pieces(const tl_graph* g, int begin, int end, const struct tl_exec_pieces* p,
                              struct tl_exec_bytes* out) {
  memset(out, 0, sizeof *out);
  TL_CHECK(check_create_range(g, begin, end));
  tl_memplan plan;
  TL_CHECK(tl_memplan_build_range(g, begin, end, &plan));
  out->arena = plan.arena_bytes;
  size_t params = 0, staging = staging_bytes(g, begin, end, p, &params) + params;
  out->transient = transient_layout(plan.transient_bytes, staging,
                                    tl_exec_piece_bytes(g, begin, end, p), NULL, NULL);
  out->staging_params = params;
  tl_memplan_free(&plan);
  out->inputs = input_layout(g, begin, end, NULL);
  out->scratch = scratch_bytes(g, begin, end);
  return TL_OK;
}

tl_status tl_exec_create_ex(const tl_graph* g, const tl_backend* be, tl_buffer* params,
                            tl_buffer* grads, const struct tl_exec_options* opt, tl_exec** out) {
  *out = NULL;
  TL_CHECK(check_create_range(g, opt->begin, opt->end));
  tl_exec* x = calloc(1, sizeof *x);
  if (!x) return TL_ERRF(TL_ERR_NOMEM, "out of memory for an executor");
  x->g = g;
  x->be = be;
  x->params = params;
  x->params_bf16 = opt->params_dtype == TL_BF16;
  x->grads = grads;
  x->begin = opt->begin;
  if ((opt->params_dtype != TL_F32 && !x->params_bf16) ||
      (x->params_bf16 && g->precision != TL_BF16)) {
    free(x);
    return TL_ERRF(TL_ERR_INVALID,
                   "parameters stored in %s: an executor reads them in f32, or in bf16 for a "
                   "bf16 graph (this one computes in %s)",
                   tl_dtype_name(opt->params_dtype), tl_dtype_name(g->precision));
  }
  x->end = opt->end;
  x->grad_acc = opt->grad_acc;
  x->grads_fresh = grads ? opt->grads_fresh : NULL;
  if (x->grad_acc && (!grads || !be->ops->fixed_add)) {
    free(x);
    return TL_ERRF(TL_ERR_UNSUPPORTED,
                   "exact gradient sums need a gradient buffer and a backend "
                   "with fixed-point kernels (the %s backend has none)",
                   be->ops->name);
  }
  x->ctx = (struct tl_run_ctx){.be = be,
                               .g = g,
                               .data = ctx_data,
                               .exec = x,
                               .group = opt->group,
                               .ring = opt->ring,
                               .grads_fresh = x->grads_fresh};
  tl_status st = TL_OK;
  x->param_offset = malloc(sizeof(int64_t) * (size_t)g->n_values);
  x->grad_offset = malloc(sizeof(int64_t) * (size_t)g->n_values);
  x->input_offset = malloc(sizeof(int64_t) * (size_t)g->n_values);
  if (!x->param_offset || !x->grad_offset || !x->input_offset) {
    st = TL_ERRF(TL_ERR_NOMEM, "out of memory for an executor");
    goto fail;
  }
  /* 1. parameters this range uses must fit the buffers given */
  size_t need = 0, need_grads = 0;
  for (int v = 0; v < g->n_values; v++) {
    const tl_value* val = &g->values[v];
    x->param_offset[v] = x->grad_offset[v] = -1;
    if (val->role != TL_ROLE_PARAM) continue;
    x->param_offset[v] = opt->param_offset ? opt->param_offset[v] : val->offset;
    if (x->param_offset[v] < 0) continue; /* not part of this range */
    size_t end = (x->params_bf16 ? sizeof(uint16_t) : sizeof(float)) *
                 (size_t)(x->param_offset[v] + tl_value_numel(val));
    if (end > need) need = end;
    if (opt->pieces.rows && opt->pieces.rows[v] > 0) {
      if (!opt->pieces.begin || !opt->pieces.end ||
          !tl_exec_can_piece(g, opt->begin, opt->end, v)) {
        st = TL_ERRF(TL_ERR_INVALID, "parameter %s's gradient cannot be written in pieces here",
                     val->name);
        goto fail;
      }
      continue; /* its gradient lies where the pieces' begin says */
    }
    x->grad_offset[v] = opt->grad_offset ? opt->grad_offset[v] : x->param_offset[v];
    size_t gend = sizeof(float) * (size_t)(x->grad_offset[v] + tl_value_numel(val));
    if (x->grad_offset[v] < 0) {
      st = TL_ERRF(TL_ERR_INVALID, "parameter %s is in the range but has no gradient offset",
                   val->name);
      goto fail;
    }
    if (gend > need_grads) need_grads = gend;
  }
  if (!params || params->bytes < need || (grads && grads->bytes < need_grads)) {
    st = TL_ERRF(TL_ERR_INVALID,
                 "parameter/gradient buffers hold %zu/%zu bytes; the graph needs %zu/%zu",
                 params ? params->bytes : 0, grads ? grads->bytes : need_grads, need, need_grads);
    goto fail;
  }
  /* 2. activations */
  TL_CHECK_GOTO(tl_memplan_build_range(g, opt->begin, opt->end, &x->plan), st, fail);
  /* 3. inputs this range reads */
  size_t in_bytes = input_layout(g, opt->begin, opt->end, x->input_offset);
  TL_CHECK_GOTO(tl_buffer_create(be->device, x->plan.arena_bytes, &x->arena), st, fail);
  /* the fp32 copies of a bf16 graph's values live one node long: after
   * the transient values */
  size_t param_copies = 0, piece_at = 0;
  size_t staging =
      staging_bytes(g, opt->begin, opt->end, &opt->pieces, &param_copies) + param_copies;
  /* and the pieces' temporaries after them */
  const size_t pieces = tl_exec_piece_bytes(g, opt->begin, opt->end, &opt->pieces);
  size_t transient =
      transient_layout(x->plan.transient_bytes, staging, pieces, &x->staging_at, &piece_at);
  x->staging_params = param_copies;
  x->staging = staging > 0;
  if (staging && (!be->ops->to_bf16 || !be->ops->from_bf16 || !be->ops->round_bf16)) {
    st = TL_ERRF(TL_ERR_UNSUPPORTED, "the %s backend has no bf16 conversions", be->ops->name);
    goto fail;
  }
  if (opt->transient) {
    if (opt->transient->bytes < transient) {
      st =
          TL_ERRF(TL_ERR_INVALID, "the shared transient arena holds %zu bytes; the range needs %zu",
                  opt->transient->bytes, transient);
      goto fail;
    }
    x->transient = opt->transient;
  } else {
    TL_CHECK_GOTO(tl_buffer_create(be->device, transient, &x->transient), st, fail);
    x->own_transient = true;
  }
  TL_CHECK_GOTO(tl_buffer_create(be->device, in_bytes, &x->inputs), st, fail);
  /* 4. scratch for the collectives of the nodes in range */
  size_t scratch = scratch_bytes(g, opt->begin, opt->end);
  if (scratch) {
    TL_CHECK_GOTO(tl_buffer_create(be->device, scratch, &x->scratch), st, fail);
    x->ctx.scratch = x->scratch->data;
    x->ctx.scratch_bytes = scratch;
  }
  if (opt->pieces.rows) {
    x->pieces = opt->pieces;
    x->ctx.pieces = &x->pieces;
    x->ctx.piece_tmp = pieces ? (char*)x->transient->data + piece_at : NULL;
    x->ctx.piece_param = ctx_piece_param;
    size_t ops, copy; /* the copy behind the nodes' temporaries */
    tl_exec_piece_sizes(g, opt->begin, opt->end, &opt->pieces, &ops, &copy);
    x->piece_copy = copy ? (float*)((char*)x->transient->data + piece_at + ALIGN64(ops)) : NULL;
  }
  if (g->loss >= 0 && g->values[g->loss].grad >= 0) {
    x->seed_n = tl_value_numel(&g->values[g->loss]);
    x->seed = malloc(sizeof(float) * (size_t)x->seed_n);
    if (!x->seed) {
      st = TL_ERRF(TL_ERR_NOMEM, "out of memory for an executor");
      goto fail;
    }
  }
  *out = x;
  return TL_OK;
fail:
  tl_exec_destroy(x);
  return st;
}

void tl_exec_destroy(tl_exec* x) {
  if (!x) return;
  tl_buffer_destroy(x->arena);
  if (x->own_transient) tl_buffer_destroy(x->transient);
  tl_buffer_destroy(x->inputs);
  tl_buffer_destroy(x->scratch);
  tl_memplan_free(&x->plan);
  free(x->input_offset);
  free(x->param_offset);
  free(x->grad_offset);
  free(x->seed);
  free(x);
}

tl_status tl_exec_set_input(tl_exec* x, int v, const void* host, size_t bytes) {
  if (v < 0 || v >= x->g->n_values || x->g->values[v].role != TL_ROLE_INPUT ||
      x->input_offset[v] < 0)
    return TL_ERRF(TL_ERR_INVALID, "value %d is not an input of this executor's nodes", v);
  const tl_value* val = &x->g->values[v];
  size_t need = (size_t)tl_value_numel(val) * tl_dtype_size(val->dtype);
  if (bytes != need)
    return TL_ERRF(TL_ERR_INVALID, "input '%s' takes %zu bytes; got %zu", val->name, need, bytes);
  return tl_memcpy(x->be->device, tl_exec_data(x, v), tl_cpu(), host, bytes);
}

tl_status tl_exec_get(const tl_exec* x, int v, void* host, size_t bytes) {
  void* p = tl_exec_data(x, v);
  if (!p) return TL_ERRF(TL_ERR_INVALID, "value %d has no storage in this executor", v);
  TL_CHECK(x->be->ops->synchronize(x->be->ctx));
  return tl_memcpy(tl_cpu(), host, x->be->device, p, bytes);
}

tl_status tl_exec_get_f32(const tl_exec* x, int v, float* host, int64_t n) {
  if (v < 0 || v >= x->g->n_values)
    return TL_ERRF(TL_ERR_INVALID, "value %d is not in the graph", v);
  const tl_value* val = &x->g->values[v];
  if (n != tl_value_numel(val))
    return TL_ERRF(TL_ERR_INVALID, "value '%s' has %lld elements; asked for %lld", val->name,
                   (long long)tl_value_numel(val), (long long)n);
  /* stored as bf16: the value's own dtype, or a parameter of bf16 params */
  const bool bf16 = val->dtype == TL_BF16 || (val->role == TL_ROLE_PARAM && x->params_bf16);
  if (!bf16 && val->dtype == TL_F32) return tl_exec_get(x, v, host, sizeof(float) * (size_t)n);
  if (!bf16)
    return TL_ERRF(TL_ERR_INVALID, "value '%s' is %s, not a float", val->name,
                   tl_dtype_name(val->dtype));
  uint16_t* h = malloc(sizeof(uint16_t) * (size_t)(n > 0 ? n : 1));
  if (!h) return TL_ERRF(TL_ERR_NOMEM, "out of memory reading '%s'", val->name);
  tl_status st = tl_exec_get(x, v, h, sizeof(uint16_t) * (size_t)n);
  for (int64_t i = 0; st == TL_OK && i < n; i++) host[i] = tl_bf16_to_f32(h[i]);
  free(h);
  return st;
}

/* Exact gradient sums: the parameter gradients node n just wrote, into
 * the fixed-point buffer. */
static tl_status move_param_grads(tl_exec* x, const tl_node* n) {
  for (int k = 0; k < n->n_out; k++) {
    int v = n->out[k];
    if (v < 0 || x->g->values[v].role != TL_ROLE_PARAM_GRAD) continue;
    int64_t off = x->grad_offset[x->g->values[v].grad_of];
    if (off < 0) return TL_ERRF(TL_ERR_INVALID, "exact gradient sums of a gradient in pieces");
    TL_CHECK(x->be->ops->fixed_add(x->be->ctx, x->grad_acc + off, (float*)x->grads->data + off,
                                   tl_value_numel(&x->g->values[v])));
  }
  return TL_OK;
}

/* Before node n runs: the fp32 copies of its staged values. Inputs and
 * gradients (which the node adds into) are widened from their bf16,
 * parameters rounded to bf16 precision (widened, when the params buffer
 * holds them in bf16 already: the same values); activations it writes
 * need no copy in. */
static tl_status stage_in(tl_exec* x, const tl_node* n) {
  const tl_graph* g = x->g;
  const struct tl_kernel_ops* ops = x->be->ops;
  int ids[2 * TL_NODE_MAX_IO];
  int k = staged_values(g, n, x->ctx.pieces, ids);
  char* base = (char*)x->transient->data + x->staging_at;
  char *at_params = base, *at = base + x->staging_params;
  for (int j = 0; j < k; j++) {
    const tl_value* val = &g->values[ids[j]];
    int64_t count = tl_value_numel(val);
    char** next = val->role == TL_ROLE_PARAM ? &at_params : &at;
    float* p = (float*)*next;
    *next += ALIGN64((size_t)count * 4);
    void* raw = tl_exec_data(x, ids[j]);
    if (val->role == TL_ROLE_PARAM && x->params_bf16)
      TL_CHECK(ops->from_bf16(x->be->ctx, p, raw, count)); /* stored rounded already */
    else if (val->role == TL_ROLE_PARAM)
      TL_CHECK(ops->round_bf16(x->be->ctx, p, raw, count));
    else if (val->role == TL_ROLE_GRAD || tl_node_reads(n, ids[j]))
      TL_CHECK(ops->from_bf16(x->be->ctx, p, raw, count));
    x->staged_v[j] = ids[j];
    x->staged_p[j] = p;
  }
  x->n_staged = k;
  return TL_OK;
}

/* After node n ran: what it wrote, back into bf16 storage. */
static tl_status stage_out(tl_exec* x, const tl_node* n) {
  const tl_graph* g = x->g;
  tl_status st = TL_OK;
  for (int j = 0; j < x->n_staged && st == TL_OK; j++) {
    const int v = x->staged_v[j];
    if (g->values[v].role == TL_ROLE_PARAM || !tl_node_writes(n, v)) continue;
    st = x->be->ops->to_bf16(x->be->ctx, tl_exec_data(x, v), x->staged_p[j],
                             tl_value_numel(&g->values[v]));
  }
  x->n_staged = 0;
  return st;
}

/* Before backward node n runs: each parameter gradient it writes that
 * holds nothing of this step yet is zeroed, unless the op writes it whole
 * (tl_op_def.overwrites); one in pieces has none here (each piece's
 * memory begins empty: tl_exec_pieces.begin). */
static tl_status fresh_in(tl_exec* x, const struct tl_op_def* def, const tl_node* n) {
  for (int k = 0; k < n->n_out; k++) {
    const int v = n->out[k];
    if (v < 0 || x->g->values[v].role != TL_ROLE_PARAM_GRAD ||
        !x->grads_fresh[x->g->values[v].grad_of])
      continue;
    void* at = tl_exec_data(x, v);
    if (at && !(def->overwrites && def->overwrites(x->g, n, v)))
      TL_CHECK(
          tl_memzero(x->be->device, at, sizeof(float) * (size_t)tl_value_numel(&x->g->values[v])));
  }
  return TL_OK;
}

/* After it ran: what it wrote holds this step's gradient now. */
static void fresh_out(tl_exec* x, const tl_node* n) {
  for (int k = 0; k < n->n_out; k++) {
    const int v = n->out[k];
    if (v >= 0 && x->g->values[v].role == TL_ROLE_PARAM_GRAD)
      x->grads_fresh[x->g->values[v].grad_of] = false;
  }
}

static tl_status run_op_staged(tl_exec* x, const struct tl_op_def* def, const tl_node* n) {
  if (!x->staging || (def->flags & TL_OP_STORED)) return def->run(&x->ctx, n);
  tl_status st = stage_in(x, n);
  if (st == TL_OK) st = def->run(&x->ctx, n);
  tl_status st2 = stage_out(x, n);
  return st != TL_OK ? st : st2;
}

static tl_status run_op(tl_exec* x, const struct tl_op_def* def, const tl_node* n) {
  if (x->grads_fresh && n - x->g->nodes >= x->g->n_forward) {
    TL_CHECK(fresh_in(x, def, n));
    tl_status st = run_op_staged(x, def, n);
    fresh_out(x, n);
    return st;
  }
  return run_op_staged(x, def, n);
}

static tl_status run_node(tl_exec* x, int i) {
  const tl_node* n = &x->g->nodes[i];
  /* activation gradients start from zero in each backward pass */
  for (int k = 0; k < n->n_out; k++) {
    int v = n->out[k];
    if (v >= 0 && x->g->values[v].role == TL_ROLE_GRAD && x->plan.first[v] == i)
      TL_CHECK(tl_memzero(
          x->be->device, tl_exec_data(x, v),
          (size_t)tl_value_numel(&x->g->values[v]) * tl_dtype_size(x->g->values[v].dtype)));
  }
  const struct tl_op_def* def = tl_op_get(n->op);
  if (x->node_hook) {
    /* traced: a collective's span should be its own time, not the queued
     * kernels' it waits for on a GPU, so the host waits for those first
     * (only when tracing: untraced, nothing stops the host here) */
    if (def->flags & TL_OP_COLLECTIVE) TL_CHECK(x->be->ops->synchronize(x->be->ctx));
    int64_t t0 = tl_time_ns();
    TL_CHECK(run_op(x, def, n));
    x->node_hook(x->node_hook_user, n, t0, tl_time_ns());
    return x->grad_acc ? move_param_grads(x, n) : TL_OK;
  }
  if (!x->profile) {
    TL_CHECK(run_op(x, def, n));
  } else {
    tl_timer t;
    tl_timer_start(&t);
    TL_CHECK(run_op(x, def, n));
    TL_CHECK(x->be->ops->synchronize(x->be->ctx));
    x->op_seconds[n->op] += tl_timer_elapsed_s(&t);
  }
  return x->grad_acc ? move_param_grads(x, n) : TL_OK;
}

static tl_status check_range(const tl_exec* x, int begin, int end) {
  if (begin < x->begin || end > x->end || begin > end)
    return TL_ERRF(TL_ERR_INVALID, "node range [%d, %d) is outside this executor's [%d, %d)", begin,
                   end, x->begin, x->end);
  return TL_OK;
}

tl_status tl_exec_forward(tl_exec* x, int begin, int end) {
  TL_CHECK(check_range(x, begin, end));
  for (int i = begin; i < end; i++) {
    if (x->pre_hook) TL_CHECK(x->pre_hook(x->pre_hook_user, i, false));
    TL_CHECK(run_node(x, i));
  }
  return TL_OK;
}

/* Backward nodes [from, to) of forward nodes [begin, end); the loss
 * gradient is seeded first when `seed`. */
static tl_status run_backward(tl_exec* x, int begin, int end, float loss_scale, int from, int to,
                              bool seed) {
  TL_CHECK(check_range(x, begin, end));
  const tl_graph* g = x->g;
  if (g->n_nodes == g->n_forward) return TL_ERRF(TL_ERR_INVALID, "graph has no backward pass");
  if (!x->grads) return TL_ERRF(TL_ERR_INVALID, "executor has no gradient buffer");
  if (seed && g->loss >= 0 && x->seed) {
    /* seed when the loss's producer is in range */
    for (int i = begin; i < end; i++) {
      const tl_node* n = &g->nodes[i];
      for (int k = 0; k < n->n_out; k++)
        if (n->out[k] == g->loss) {
          for (int64_t j = 0; j < x->seed_n; j++) x->seed[j] = loss_scale;
          TL_CHECK(tl_memcpy(x->be->device, tl_exec_data(x, g->values[g->loss].grad), tl_cpu(),
                             x->seed, sizeof(float) * (size_t)x->seed_n));
        }
    }
  }
  /* a split backward's gradients are final only as its weight pass goes */
  const int wb = g->weight_begin ? g->weight_begin : g->n_forward;
  for (int i = from; i < to; i++) {
    int f = g->nodes[i].forward_of;
    if (f < begin || f >= end) continue;
    if (x->pre_hook) TL_CHECK(x->pre_hook(x->pre_hook_user, f, true));
    TL_CHECK(run_node(x, i));
    /* a forward node run again says nothing about which gradients are final */
    if (x->hook && !g->nodes[i].again && i >= wb) TL_CHECK(x->hook(x->hook_user, f));
  }
  /* the weight pass over: every gradient of the range is */
  if (x->hook && g->weight_begin && to == g->n_nodes) TL_CHECK(x->hook(x->hook_user, begin));
  return TL_OK;
}

tl_status tl_exec_backward(tl_exec* x, int begin, int end, float loss_scale) {
  return run_backward(x, begin, end, loss_scale, x->g->n_forward, x->g->n_nodes, true);
}

tl_status tl_exec_backward_input(tl_exec* x, int begin, int end, float loss_scale) {
  const tl_graph* g = x->g;
  return run_backward(x, begin, end, loss_scale, g->n_forward,
                      g->weight_begin ? g->weight_begin : g->n_nodes, true);
}

tl_status tl_exec_backward_weight(tl_exec* x, int begin, int end) {
  const tl_graph* g = x->g;
  if (!g->weight_begin)
    return TL_ERRF(TL_ERR_INVALID, "the graph's backward is one pass (tl_graph_split_weight)");
  return run_backward(x, begin, end, 0.0f, g->weight_begin, g->n_nodes, false);
}

const tl_memplan* tl_exec_plan(const tl_exec* x) {
  return &x->plan;
}

void tl_exec_profile(tl_exec* x, int on) {
  x->profile = on;
  memset(x->op_seconds, 0, sizeof x->op_seconds);
}

double tl_exec_op_seconds(const tl_exec* x, int op) {
  return op >= 0 && op < TL_OP_MAX ? x->op_seconds[op] : 0.0;
}
