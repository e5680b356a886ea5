/* swiglu.c — SwiGLU's gate, element-wise: in {gate, up} (same shape), out
 * {y = silu(gate) * up}. The Llama MLP is down(swiglu(gate(x), up(x))). */
#include "graph/ops/shape.h"

static tl_status infer(tl_graph* g, tl_node* n) {
  TL_NEED_F32(g, n, 0);
  TL_NEED_F32(g, n, 1);
  const tl_value *a = tl__in(g, n, 0), *b = tl__in(g, n, 1);
  if (!tl__same_shape(a, b)) {
    char sa[48], sb[48];
    return TL_ERRF(TL_ERR_INVALID, "swiglu '%s': gate %s and up %s differ", n->name,
                   tl__shape_str(a, sa, sizeof sa), tl__shape_str(b, sb, sizeof sb));
  }
  const double numel = (double)tl_value_numel(a); /* a moves when values grow */
  int64_t shape[4];
  memcpy(shape, a->shape, sizeof shape);
  TL_CHECK(tl__op_output(g, n, 0, "", TL_ROLE_ACTIVATION, TL_F32, a->n_dims, shape));
  n->flops = 6.0 * numel;
  n->bytes = 12.0 * numel;
  return TL_OK;
}

static tl_status run(const struct tl_run_ctx* x, const tl_node* n) {
  return x->be->ops->swiglu_forward(x->be->ctx, TL_DATA(x, n->out[0]), TL_DATA(x, n->in[0]),
                                    TL_DATA(x, n->in[1]), tl_value_numel(&x->g->values[n->in[0]]));
}

/* backward node: in {dy, gate, up}, out {dgate, dup} */
static tl_status backward(tl_graph* g, int i) {
  const tl_node* n = &g->nodes[i];
  int in[3] = {tl__grad(g, n->out[0]), n->in[0], n->in[1]};
  int out[2] = {tl__grad(g, n->in[0]), tl__grad(g, n->in[1])};
  return tl__op_backward_node(g, TL_OP_SWIGLU_BACKWARD, i, 3, in, 2, out);
}

static tl_status run_backward(const struct tl_run_ctx* x, const tl_node* n) {
  return x->be->ops->swiglu_backward(x->be->ctx, TL_DATA(x, n->out[0]), TL_DATA(x, n->out[1]),
                                     TL_DATA(x, n->in[0]), TL_DATA(x, n->in[1]),
                                     TL_DATA(x, n->in[2]), tl_value_numel(&x->g->values[n->in[1]]));
}

const struct tl_op_def tl_op_swiglu = {.name = "swiglu",
                                       .n_diff_out = 1,
                                       .infer = infer,
                                       .run = run,
                                       .backward = backward,
                                       .flags = TL_OP_ELEMENTWISE};
const struct tl_op_def tl_op_swiglu_backward = {
    .name = "swiglu_backward", .n_diff_out = 0, .run = run_backward};
