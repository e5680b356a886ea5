/* rmsnorm.c — RMSNorm (the Llama family's norm): in {x (..., C), weight
 * (C)}, attr {eps as float bits}, out {y, rstd (N)}; rstd is saved for the
 * backward and carries no gradient. */
#include "graph/ops/shape.h"

static tl_status infer(tl_graph* g, tl_node* n) {
  TL_NEED_F32(g, n, 0);
  TL_NEED_F32(g, n, 1);
  const tl_value *x = tl__in(g, n, 0), *w = tl__in(g, n, 1);
  int64_t c = tl__cols(x), rows = tl__rows(x);
  if (tl_value_numel(w) != c)
    return TL_ERRF(TL_ERR_INVALID, "rmsnorm '%s': the weight has %lld elements; expected %lld",
                   n->name, (long long)tl_value_numel(w), (long long)c);
  if (!(tl_attr_float(n->attr[0]) > 0))
    return TL_ERRF(TL_ERR_INVALID, "rmsnorm '%s': eps %g; expected > 0", n->name,
                   tl_attr_float(n->attr[0]));
  int64_t shape[4];
  memcpy(shape, x->shape, sizeof shape);
  TL_CHECK(tl__op_output(g, n, 0, "", TL_ROLE_ACTIVATION, TL_F32, x->n_dims, shape));
  TL_CHECK(tl__op_output(g, n, 1, "rstd", TL_ROLE_ACTIVATION, TL_F32, 1, &rows));
  n->flops = 4.0 * (double)rows * (double)c;
  n->bytes = 2.0 * 4.0 * (double)rows * (double)c;
  return TL_OK;
}

static tl_status run(const struct tl_run_ctx* x, const tl_node* n) {
  const tl_value* v = &x->g->values[n->in[0]];
  return x->be->ops->rmsnorm_forward(x->be->ctx, TL_DATA(x, n->out[0]), TL_DATA(x, n->out[1]),
                                     TL_DATA(x, n->in[0]), TL_DATA(x, n->in[1]), (int)tl__rows(v),
                                     (int)tl__cols(v), tl_attr_float(n->attr[0]));
}

/* backward node: in {dy, x, weight, rstd}, out {dx, dweight} */
static tl_status backward(tl_graph* g, int i) {
  const tl_node* n = &g->nodes[i];
  int in[4] = {tl__grad(g, n->out[0]), n->in[0], n->in[1], n->out[1]};
  int out[2] = {tl__grad(g, n->in[0]), tl__grad(g, n->in[1])};
  return tl__op_backward_node(g, TL_OP_RMSNORM_BACKWARD, i, 4, in, 2, out);
}

static tl_status run_backward(const struct tl_run_ctx* x, const tl_node* n) {
  const tl_value* v = &x->g->values[n->in[1]];
  return x->be->ops->rmsnorm_backward(x->be->ctx, TL_DATA(x, n->out[0]), TL_DATA(x, n->out[1]),
                                      TL_DATA(x, n->in[0]), TL_DATA(x, n->in[1]),
                                      TL_DATA(x, n->in[2]), TL_DATA(x, n->in[3]), (int)tl__rows(v),
                                      (int)tl__cols(v));
}

const struct tl_op_def tl_op_rmsnorm = {.name = "rmsnorm",
                                        .n_diff_out = 1,
                                        .infer = infer,
                                        .run = run,
                                        .backward = backward,
                                        .flags = TL_OP_ROWWISE};
const struct tl_op_def tl_op_rmsnorm_backward = {
    .name = "rmsnorm_backward", .n_diff_out = 0, .run = run_backward};
