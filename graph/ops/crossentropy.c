/* crossentropy.c — softmax + cross-entropy over logits (..., Vp) whose first
 * V = attr[0] columns are real: in {logits, targets (rows) i32}, out
 * {losses (rows)}. The backward runs the fused kernel, which WRITES dlogits
 * (it is the logits' only consumer, and its backward runs first). */
#include "graph/ops/shape.h"

static tl_status infer(tl_graph* g, tl_node* n) {
  TL_NEED_F32(g, n, 0);
  const tl_value *lg = tl__in(g, n, 0), *tg = tl__in(g, n, 1);
  int64_t rows = tl__rows(lg), vp = tl__cols(lg);
  int v = n->attr[0];
  if (!tg || tg->dtype != TL_I32 || tl_value_numel(tg) != rows)
    return TL_ERRF(TL_ERR_INVALID, "crossentropy '%s': targets must be %lld i32 values", n->name,
                   (long long)rows);
  if (v < 1 || v > vp)
    return TL_ERRF(TL_ERR_INVALID, "crossentropy '%s': vocabulary %d is outside [1, %lld]", n->name,
                   v, (long long)vp);
  TL_CHECK(tl__op_output(g, n, 0, "", TL_ROLE_ACTIVATION, TL_F32, 1, &rows));
  n->flops = 4.0 * (double)rows * (double)v;
  n->bytes = 4.0 * (double)rows * (double)vp;
  return TL_OK;
}

static tl_status run(const struct tl_run_ctx* x, const tl_node* n) {
  const tl_value* lg = &x->g->values[n->in[0]];
  return x->be->ops->crossentropy_forward_backward(
      x->be->ctx, TL_DATA(x, n->out[0]), NULL, TL_DATA(x, n->in[0]), TL_IDATA(x, n->in[1]), NULL,
      (int)tl__rows(lg), n->attr[0], (int)tl__cols(lg));
}

/* backward node: in {dlosses, logits, targets, losses}, out {dlogits} */
static tl_status backward(tl_graph* g, int i) {
  const tl_node* n = &g->nodes[i];
  int in[4] = {tl__grad(g, n->out[0]), n->in[0], n->in[1], n->out[0]};
  int out[1] = {tl__grad(g, n->in[0])};
  return tl__op_backward_node(g, TL_OP_CROSSENTROPY_BACKWARD, i, 4, in, 1, out);
}

static tl_status run_backward(const struct tl_run_ctx* x, const tl_node* n) {
  const tl_value* lg = &x->g->values[n->in[1]];
  /* losses are recomputed into their own buffer (same values). */
  return x->be->ops->crossentropy_forward_backward(
      x->be->ctx, TL_DATA(x, n->in[3]), TL_DATA(x, n->out[0]), TL_DATA(x, n->in[1]),
      TL_IDATA(x, n->in[2]), TL_DATA(x, n->in[0]), (int)tl__rows(lg), n->attr[0],
      (int)tl__cols(lg));
}

const struct tl_op_def tl_op_crossentropy = {
    .name = "crossentropy", .n_diff_out = 1, .infer = infer, .run = run, .backward = backward};
const struct tl_op_def tl_op_crossentropy_backward = {
    .name = "crossentropy_backward", .n_diff_out = 0, .run = run_backward};
