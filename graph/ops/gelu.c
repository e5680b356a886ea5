/* gelu.c — GELU (tanh form), elementwise: in {x}, out {y}. */
#include "graph/ops/shape.h"

static tl_status infer(tl_graph* g, tl_node* n) {
  TL_NEED_F32(g, n, 0);
  const tl_value* x = tl__in(g, n, 0);
  int64_t shape[4];
  memcpy(shape, x->shape, sizeof shape);
  TL_CHECK(tl__op_output(g, n, 0, "", TL_ROLE_ACTIVATION, TL_F32, x->n_dims, shape));
  n->flops = 10.0 * (double)tl_value_numel(&g->values[n->out[0]]);
  n->bytes = 8.0 * (double)tl_value_numel(&g->values[n->out[0]]);
  return TL_OK;
}

static tl_status run(const struct tl_run_ctx* x, const tl_node* n) {
  return x->be->ops->gelu_forward(x->be->ctx, TL_DATA(x, n->out[0]), TL_DATA(x, n->in[0]),
                                  tl_value_numel(&x->g->values[n->in[0]]));
}

/* backward node: in {dy, x}, out {dx} */
static tl_status backward(tl_graph* g, int i) {
  const tl_node* n = &g->nodes[i];
  int in[2] = {tl__grad(g, n->out[0]), n->in[0]};
  int out[1] = {tl__grad(g, n->in[0])};
  return tl__op_backward_node(g, TL_OP_GELU_BACKWARD, i, 2, in, 1, out);
}

static tl_status run_backward(const struct tl_run_ctx* x, const tl_node* n) {
  return x->be->ops->gelu_backward(x->be->ctx, TL_DATA(x, n->out[0]), TL_DATA(x, n->in[1]),
                                   TL_DATA(x, n->in[0]), tl_value_numel(&x->g->values[n->in[1]]));
}

const struct tl_op_def tl_op_gelu = {.name = "gelu",
                                     .n_diff_out = 1,
                                     .infer = infer,
                                     .run = run,
                                     .backward = backward,
                                     .flags = TL_OP_ELEMENTWISE};
const struct tl_op_def tl_op_gelu_backward = {
    .name = "gelu_backward", .n_diff_out = 0, .run = run_backward};
