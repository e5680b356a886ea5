/* layernorm.c — in {x (..., C), weight (C), bias (C)}, out {y, mean (N), rstd (N)};
 * mean and rstd are saved for the backward and carry no gradient. */
#include "graph/ops/shape.h"

static tl_status infer(tl_graph* g, tl_node* n) {
  TL_NEED_F32(g, n, 0);
  TL_NEED_F32(g, n, 1);
  TL_NEED_F32(g, n, 2);
  const tl_value *x = tl__in(g, n, 0), *w = tl__in(g, n, 1), *b = tl__in(g, n, 2);
  int64_t c = tl__cols(x), rows = tl__rows(x);
  if (tl_value_numel(w) != c || tl_value_numel(b) != c)
    return TL_ERRF(TL_ERR_INVALID, "layernorm '%s': weight and bias need %lld elements", n->name,
                   (long long)c);
  int64_t shape[4];
  memcpy(shape, x->shape, sizeof shape);
  int nd = x->n_dims;
  TL_CHECK(tl__op_output(g, n, 0, "", TL_ROLE_ACTIVATION, TL_F32, nd, shape));
  TL_CHECK(tl__op_output(g, n, 1, "mean", TL_ROLE_ACTIVATION, TL_F32, 1, &rows));
  TL_CHECK(tl__op_output(g, n, 2, "rstd", TL_ROLE_ACTIVATION, TL_F32, 1, &rows));
  n->flops = 8.0 * (double)rows * (double)c;
  n->bytes = 2.0 * 4.0 * (double)rows * (double)c;
  return TL_OK;
}

static tl_status run(const struct tl_run_ctx* x, const tl_node* n) {
  const tl_value* v = &x->g->values[n->in[0]];
  return x->be->ops->layernorm_forward(x->be->ctx, TL_DATA(x, n->out[0]), TL_DATA(x, n->out[1]),
                                       TL_DATA(x, n->out[2]), TL_DATA(x, n->in[0]),
                                       TL_DATA(x, n->in[1]), TL_DATA(x, n->in[2]), (int)tl__rows(v),
                                       (int)tl__cols(v));
}

/* backward node: in {dy, x, weight, mean, rstd}, out {dx, dweight, dbias} */
static tl_status backward(tl_graph* g, int i) {
  const tl_node* n = &g->nodes[i];
  int in[5] = {tl__grad(g, n->out[0]), n->in[0], n->in[1], n->out[1], n->out[2]};
  int out[3] = {tl__grad(g, n->in[0]), tl__grad(g, n->in[1]), tl__grad(g, n->in[2])};
  return tl__op_backward_node(g, TL_OP_LAYERNORM_BACKWARD, i, 5, in, 3, out);
}

static tl_status run_backward(const struct tl_run_ctx* x, const tl_node* n) {
  const tl_value* v = &x->g->values[n->in[1]];
  return x->be->ops->layernorm_backward(
      x->be->ctx, TL_DATA(x, n->out[0]), TL_DATA(x, n->out[1]), TL_DATA(x, n->out[2]),
      TL_DATA(x, n->in[0]), TL_DATA(x, n->in[1]), TL_DATA(x, n->in[2]), TL_DATA(x, n->in[3]),
      TL_DATA(x, n->in[4]), (int)tl__rows(v), (int)tl__cols(v));
}

const struct tl_op_def tl_op_layernorm = {.name = "layernorm",
                                          .n_diff_out = 1,
                                          .infer = infer,
                                          .run = run,
                                          .backward = backward,
                                          .flags = TL_OP_ROWWISE};
const struct tl_op_def tl_op_layernorm_backward = {
    .name = "layernorm_backward", .n_diff_out = 0, .run = run_backward};
