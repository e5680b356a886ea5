/* rope.c — rotary position embeddings: in {x (B,T,H*hs)}, attr {hs,
 * theta, factor, low_freq_factor, high_freq_factor (float bits),
 * original_ctx} (kernels/ops.h's struct tl_rope; factor 0: no scaling),
 * out {y}: each head of position t rotated by t times its frequencies,
 * channel i paired with i + hs/2. Positions are the tokens' places in the
 * sequence, so the op needs whole sequences — or, attr {.., cp, cp_rank}
 * with cp > 1, the two chunks context-parallel rank cp_rank holds of each
 * (kernels/ops.h's tl_cp_position). */
#include "graph/ops/shape.h"

struct tl_rope tl_rope_of(const tl_node* n) {
  return (struct tl_rope){.hs = n->attr[0],
                          .theta = tl_attr_float(n->attr[1]),
                          .factor = tl_attr_float(n->attr[2]),
                          .low_freq_factor = tl_attr_float(n->attr[3]),
                          .high_freq_factor = tl_attr_float(n->attr[4]),
                          .original_ctx = n->attr[5],
                          .cp = n->attr[6],
                          .cp_rank = n->attr[7]};
}

static tl_status infer(tl_graph* g, tl_node* n) {
  TL_NEED_F32(g, n, 0);
  const tl_value* x = tl__in(g, n, 0);
  const struct tl_rope r = tl_rope_of(n);
  if (x->n_dims != 3 || r.hs < 2 || r.hs % 2 != 0 || x->shape[2] % r.hs != 0)
    return TL_ERRF(TL_ERR_INVALID,
                   "rope '%s': x must be (B, T, heads * hs) with an even head size hs=%d", n->name,
                   r.hs);
  if (!(r.theta > 1) || r.factor < 0 ||
      (r.factor > 0 &&
       !(r.high_freq_factor > r.low_freq_factor && r.low_freq_factor > 0 && r.original_ctx > 0)))
    return TL_ERRF(TL_ERR_INVALID,
                   "rope '%s': theta %g, scaling factor %g (low %g, high %g, context %d); "
                   "expected theta > 1, and with a factor 0 < low < high and a context > 0",
                   n->name, r.theta, r.factor, r.low_freq_factor, r.high_freq_factor,
                   r.original_ctx);
  const double numel = (double)tl_value_numel(x); /* x moves when values grow */
  int64_t shape[4];
  memcpy(shape, x->shape, sizeof shape);
  TL_CHECK(tl__op_output(g, n, 0, "", TL_ROLE_ACTIVATION, TL_F32, 3, shape));
  n->flops = 3.0 * numel;
  n->bytes = 8.0 * numel;
  return TL_OK;
}

static tl_status run(const struct tl_run_ctx* x, const tl_node* n) {
  const tl_value* v = &x->g->values[n->in[0]];
  const struct tl_rope r = tl_rope_of(n);
  return x->be->ops->rope_forward(x->be->ctx, TL_DATA(x, n->out[0]), TL_DATA(x, n->in[0]), &r,
                                  (int)v->shape[0], (int)v->shape[1], (int)(v->shape[2] / r.hs));
}

/* backward node: in {dy}, out {dx} */
static tl_status backward(tl_graph* g, int i) {
  const tl_node* n = &g->nodes[i];
  int in[1] = {tl__grad(g, n->out[0])};
  int out[1] = {tl__grad(g, n->in[0])};
  return tl__op_backward_node(g, TL_OP_ROPE_BACKWARD, i, 1, in, 1, out);
}

static tl_status run_backward(const struct tl_run_ctx* x, const tl_node* n) {
  const tl_value* v = &x->g->values[n->in[0]];
  const struct tl_rope r = tl_rope_of(&x->g->nodes[n->forward_of]);
  return x->be->ops->rope_backward(x->be->ctx, TL_DATA(x, n->out[0]), TL_DATA(x, n->in[0]), &r,
                                   (int)v->shape[0], (int)v->shape[1], (int)(v->shape[2] / r.hs));
}

const struct tl_op_def tl_op_rope = {
    .name = "rope", .n_diff_out = 1, .infer = infer, .run = run, .backward = backward};
const struct tl_op_def tl_op_rope_backward = {
    .name = "rope_backward", .n_diff_out = 0, .run = run_backward};
