/* attention.c — causal multi-head self-attention: in {qkv (B,T,3C)},
 * attr {n_heads}, out {y (B,T,C), lse (B,NH,T)}. The kernels never hold the
 * T x T probabilities (flash attention): the backward recomputes them from
 * qkv and lse, each row's log-sum-exp, which carries no gradient. So what
 * a layer keeps grows linearly in T. */
#include "graph/ops/shape.h"

static tl_status infer(tl_graph* g, tl_node* n) {
  TL_NEED_F32(g, n, 0);
  const tl_value* qkv = tl__in(g, n, 0);
  int nh = n->attr[0];
  if (qkv->n_dims != 3 || qkv->shape[2] % 3 != 0)
    return TL_ERRF(TL_ERR_INVALID, "attention '%s': qkv must be (B, T, 3C)", n->name);
  int64_t b = qkv->shape[0], t = qkv->shape[1], c = qkv->shape[2] / 3;
  if (nh < 1 || c % nh != 0)
    return TL_ERRF(TL_ERR_INVALID, "attention '%s': %d heads do not divide C=%lld", n->name, nh,
                   (long long)c);
  int64_t ys[3] = {b, t, c}, ls[3] = {b, nh, t};
  TL_CHECK(tl__op_output(g, n, 0, "", TL_ROLE_ACTIVATION, TL_F32, 3, ys));
  TL_CHECK(tl__op_output(g, n, 1, "lse", TL_ROLE_ACTIVATION, TL_F32, 3, ls));
  /* causal: about half of the T x T scores, each a dot of C/NH, twice (QK^T, AV) */
  n->flops = 2.0 * 2.0 * (double)b * (double)t * (double)t / 2.0 * (double)c;
  n->bytes = 4.0 * ((double)b * t * 4 * c + (double)b * nh * t);
  return TL_OK;
}

static tl_status run(const struct tl_run_ctx* x, const tl_node* n) {
  const tl_value* y = &x->g->values[n->out[0]];
  return x->be->ops->attention_forward(x->be->ctx, TL_DATA(x, n->out[0]), TL_DATA(x, n->out[1]),
                                       TL_DATA(x, n->in[0]), (int)y->shape[0], (int)y->shape[1],
                                       (int)y->shape[2], n->attr[0]);
}

/* backward node: in {dy, qkv, y, lse}, out {dqkv} */
static tl_status backward(tl_graph* g, int i) {
  const tl_node* n = &g->nodes[i];
  int in[4] = {tl__grad(g, n->out[0]), n->in[0], n->out[0], n->out[1]};
  int out[1] = {tl__grad(g, n->in[0])};
  TL_CHECK(tl__op_backward_node(g, TL_OP_ATTENTION_BACKWARD, i, 4, in, 1, out));
  /* five T x T products, not four: the scores are computed again */
  g->nodes[g->n_nodes - 1].flops = 2.5 * g->nodes[i].flops;
  return TL_OK;
}

static tl_status run_backward(const struct tl_run_ctx* x, const tl_node* n) {
  const tl_value* dy = &x->g->values[n->in[0]];
  return x->be->ops->attention_backward(x->be->ctx, TL_DATA(x, n->out[0]), TL_DATA(x, n->in[0]),
                                        TL_DATA(x, n->in[1]), TL_DATA(x, n->in[2]),
                                        TL_DATA(x, n->in[3]), (int)dy->shape[0],
                                        (int)dy->shape[1], (int)dy->shape[2], n->attr[0]);
}

const struct tl_op_def tl_op_attention = {
    .name = "attention", .n_diff_out = 1, .infer = infer, .run = run, .backward = backward};
const struct tl_op_def tl_op_attention_backward = {
    .name = "attention_backward", .n_diff_out = 0, .run = run_backward};
