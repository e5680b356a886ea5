/* xent.c — vocabulary-parallel softmax + cross-entropy: in {logits
 * (..., cols) — this rank's columns [v0, v0 + cols) of the padded
 * vocabulary — and targets (rows) i32}, attr {V, v0, tp}, out {losses (rows),
 * stats (3, rows)}. The full logits are never on one rank: the row maxima
 * are combined over the tensor-parallel group (all-reduce max), then the
 * sums of exponentials and the targets' logits (all-reduce sum), so every
 * rank ends with the same losses. stats keep max, sum and target logit for
 * the backward, which WRITES dlogits (the logits' only consumer). */
#include "graph/ops/shape.h"
#include "tp/tp_impl.h"

static tl_status infer(tl_graph* g, tl_node* n) {
  TL_NEED_F32(g, n, 0);
  const tl_value *lg = tl__in(g, n, 0), *tg = tl__in(g, n, 1);
  int64_t rows = tl__rows(lg), cols = tl__cols(lg);
  int v = n->attr[0], v0 = n->attr[1], tp = n->attr[2];
  if (!tg || tg->dtype != TL_I32 || tl_value_numel(tg) != rows)
    return TL_ERRF(TL_ERR_INVALID, "xent_shard '%s': targets must be %lld i32 values", n->name,
                   (long long)rows);
  if (v < 1 || v0 < 0 || v > (int64_t)tp * cols || tp < 1)
    return TL_ERRF(TL_ERR_INVALID,
                   "xent_shard '%s': vocabulary %d, first column %d, %lld columns on each of %d "
                   "ranks do not fit",
                   n->name, v, v0, (long long)cols, tp);
  TL_CHECK(tl__op_output(g, n, 0, "", TL_ROLE_ACTIVATION, TL_F32, 1, &rows));
  int64_t st[2] = {3, rows};
  TL_CHECK(tl__op_output(g, n, 1, "stats", TL_ROLE_ACTIVATION, TL_F32, 2, st));
  n->flops = 4.0 * (double)rows * (double)cols;
  n->bytes = 4.0 * (double)rows * (double)cols;
  return TL_OK;
}

static tl_status reduce(const struct tl_run_ctx* x, float* p, size_t n, tl_reduce_op op) {
  if (!x->group || tl_group_size(x->group) == 1) return TL_OK;
  return tl_group_all_reduce(x->group, p, p, n, TL_F32, op, NULL);
}

static tl_status run(const struct tl_run_ctx* x, const tl_node* n) {
  const tl_value* lg = &x->g->values[n->in[0]];
  int rows = (int)tl__rows(lg), cols = (int)tl__cols(lg);
  int size = x->group ? tl_group_size(x->group) : 1;
  if (size != n->attr[2])
    return TL_ERRF(TL_ERR_INVALID,
                   "xent_shard '%s' was built for %d tensor-parallel ranks; the executor's group "
                   "has %d",
                   n->name, n->attr[2], size);
  float *loss = TL_DATA(x, n->out[0]), *stats = TL_DATA(x, n->out[1]);
  const float* logits = TL_DATA(x, n->in[0]);
  const int32_t* tg = TL_IDATA(x, n->in[1]);
  const struct tl_kernel_ops* ops = x->be->ops;
  void* c = x->be->ctx;
  TL_CHECK(
      ops->xent_shard_forward(c, loss, stats, logits, tg, rows, cols, n->attr[1], n->attr[0], 0));
  TL_CHECK(reduce(x, stats, (size_t)rows, TL_REDUCE_MAX));
  TL_CHECK(
      ops->xent_shard_forward(c, loss, stats, logits, tg, rows, cols, n->attr[1], n->attr[0], 1));
  TL_CHECK(reduce(x, stats + rows, 2 * (size_t)rows, TL_REDUCE_SUM));
  return ops->xent_shard_forward(c, loss, stats, logits, tg, rows, cols, n->attr[1], n->attr[0], 2);
}

/* backward node: in {dlosses, logits, targets, stats}, out {dlogits} */
static tl_status backward(tl_graph* g, int i) {
  const tl_node* n = &g->nodes[i];
  int in[4] = {tl__grad(g, n->out[0]), n->in[0], n->in[1], n->out[1]};
  int out[1] = {tl__grad(g, n->in[0])};
  return tl__op_backward_node(g, tl__tp_ops()->xent_backward, i, 4, in, 1, out);
}

static tl_status run_backward(const struct tl_run_ctx* x, const tl_node* n) {
  const tl_node* f = &x->g->nodes[n->forward_of];
  const tl_value* lg = &x->g->values[n->in[1]];
  return x->be->ops->xent_shard_backward(x->be->ctx, TL_DATA(x, n->out[0]), TL_DATA(x, n->in[1]),
                                         TL_IDATA(x, n->in[2]), TL_DATA(x, n->in[3]),
                                         TL_DATA(x, n->in[0]), (int)tl__rows(lg), (int)tl__cols(lg),
                                         f->attr[1], f->attr[0]);
}

const struct tl_op_def tl__tp_op_xent = {.name = "xent_shard",
                                         .n_diff_out = 1,
                                         .infer = infer,
                                         .run = run,
                                         .backward = backward,
                                         .flags = TL_OP_COLLECTIVE};
const struct tl_op_def tl__tp_op_xent_backward = {.name = "xent_shard_backward",
                                                  .run = run_backward};
