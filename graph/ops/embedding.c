/* embedding.c — token + position embedding: in {tokens (B,T) i32, wte (rows,
 * C), wpe (maxT,C) or -1}, attr {row_begin}, out (B,T,C) = wte[token -
 * row_begin] + wpe[t]. wte is the whole table (row_begin 0) or, under tensor
 * parallelism, the shard of vocabulary rows [row_begin, row_begin + rows):
 * tokens outside it contribute zeros, and the tensor-parallel group's sum
 * is the embedding. Without wpe there is no position term. */
#include "graph/ops/shape.h"

static tl_status infer(tl_graph* g, tl_node* n) {
  const tl_value *tok = tl__in(g, n, 0), *wte = tl__in(g, n, 1), *wpe = tl__in(g, n, 2);
  if (!tok || tok->dtype != TL_I32 || tok->n_dims != 2)
    return TL_ERRF(TL_ERR_INVALID, "embedding '%s': tokens must be an i32 (B, T) value", n->name);
  TL_NEED_F32(g, n, 1);
  if (wpe) TL_NEED_F32(g, n, 2);
  if (wte->n_dims != 2 || (wpe && (wpe->n_dims != 2 || wte->shape[1] != wpe->shape[1])))
    return TL_ERRF(TL_ERR_INVALID, "embedding '%s': wte and wpe must be (rows, C) with the same C",
                   n->name);
  if (wpe && tok->shape[1] > wpe->shape[0])
    return TL_ERRF(TL_ERR_INVALID, "embedding '%s': T=%lld exceeds the %lld positions of wpe",
                   n->name, (long long)tok->shape[1], (long long)wpe->shape[0]);
  if (n->attr[0] < 0)
    return TL_ERRF(TL_ERR_INVALID, "embedding '%s': first row %d; expected >= 0", n->name,
                   n->attr[0]);
  int64_t shape[3] = {tok->shape[0], tok->shape[1], wte->shape[1]};
  TL_CHECK(tl__op_output(g, n, 0, "", TL_ROLE_ACTIVATION, TL_F32, 3, shape));
  n->flops = (double)shape[0] * shape[1] * shape[2];
  n->bytes = 3.0 * 4.0 * (double)shape[0] * shape[1] * shape[2];
  return TL_OK;
}

static tl_status run(const struct tl_run_ctx* x, const tl_node* n) {
  const tl_value* y = &x->g->values[n->out[0]];
  return x->be->ops->embedding_forward(x->be->ctx, TL_DATA(x, n->out[0]), TL_IDATA(x, n->in[0]),
                                       TL_DATA(x, n->in[1]), TL_DATA(x, n->in[2]), (int)y->shape[0],
                                       (int)y->shape[1], (int)y->shape[2], n->attr[0],
                                       (int)x->g->values[n->in[1]].shape[0]);
}

/* backward node: in {dout, tokens}, out {dwte, dwpe} */
static tl_status backward(tl_graph* g, int i) {
  const tl_node* n = &g->nodes[i];
  int in[2] = {tl__grad(g, n->out[0]), n->in[0]};
  int out[2] = {tl__grad(g, n->in[1]), tl__grad(g, n->in[2])};
  return tl__op_backward_node(g, TL_OP_EMBEDDING_BACKWARD, i, 2, in, 2, out);
}

static tl_status run_backward(const struct tl_run_ctx* x, const tl_node* n) {
  const tl_value* dy = &x->g->values[n->in[0]];
  const tl_node* f = &x->g->nodes[n->forward_of];
  return x->be->ops->embedding_backward(x->be->ctx, TL_DATA(x, n->out[0]), TL_DATA(x, n->out[1]),
                                        TL_DATA(x, n->in[0]), TL_IDATA(x, n->in[1]),
                                        (int)dy->shape[0], (int)dy->shape[1], (int)dy->shape[2],
                                        f->attr[0], (int)x->g->values[f->in[1]].shape[0]);
}

const struct tl_op_def tl_op_embedding = {
    .name = "embedding", .n_diff_out = 1, .infer = infer, .run = run, .backward = backward};
const struct tl_op_def tl_op_embedding_backward = {
    .name = "embedding_backward", .n_diff_out = 0, .run = run_backward};
