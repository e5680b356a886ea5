/* attention.c — causal self-attention, multi-head or grouped-query. Two
 * forms:
 *   fused:     in {qkv (B,T,3C)} rows [Q | K | V], attr {n_heads} (GPT-2's);
 *   separate:  in {q (B,T,NH*hs), k (B,T,NKV*hs), v (B,T,NKV*hs)},
 *              attr {n_heads, n_kv_heads} (grouped-query: query head j reads
 *              key/value head j / (NH / NKV)).
 * out {y (B,T,NH*hs), lse (B,NH,T)}. The kernels never hold the T x T
 * probabilities (flash attention): the backward recomputes them from q, k,
 * v and lse, each row's log-sum-exp, which carries no gradient. So what a
 * layer keeps grows linearly in T. */
#include "graph/ops/shape.h"

/* The kernel's shape of node n (its inputs' values). */
static struct tl_attention_shape shape_of(const tl_graph* g, const tl_node* n) {
  const tl_value* q = tl__in(g, n, 0);
  struct tl_attention_shape s = {.b = (int)q->shape[0], .t = (int)q->shape[1], .nh = n->attr[0]};
  if (n->n_in == 1) {
    s.nkv = s.nh;
    s.hs = (int)(q->shape[2] / 3 / s.nh);
    s.ldq = s.ldkv = q->shape[2];
  } else {
    s.nkv = n->attr[1];
    s.hs = (int)(q->shape[2] / s.nh);
    s.ldq = q->shape[2];
    s.ldkv = tl__in(g, n, 1)->shape[2];
  }
  return s;
}

static tl_status infer(tl_graph* g, tl_node* n) {
  if (n->n_in != 1 && n->n_in != 3)
    return TL_ERRF(TL_ERR_INVALID, "attention '%s': %d inputs; expected qkv, or q, k and v",
                   n->name, n->n_in);
  for (int k = 0; k < n->n_in; k++) {
    TL_NEED_F32(g, n, k);
    if (tl__in(g, n, k)->n_dims != 3)
      return TL_ERRF(TL_ERR_INVALID, "attention '%s': input %d must be (B, T, channels)", n->name,
                     k);
  }
  const tl_value* q = tl__in(g, n, 0);
  const int nh = n->attr[0], nkv = n->n_in == 1 ? nh : n->attr[1];
  int64_t b = q->shape[0], t = q->shape[1], c;
  if (n->n_in == 1) {
    if (q->shape[2] % 3 != 0)
      return TL_ERRF(TL_ERR_INVALID, "attention '%s': qkv must be (B, T, 3C)", n->name);
    c = q->shape[2] / 3;
    if (nh < 1 || c % nh != 0)
      return TL_ERRF(TL_ERR_INVALID, "attention '%s': %d heads do not divide C=%lld", n->name, nh,
                     (long long)c);
  } else {
    const tl_value *k = tl__in(g, n, 1), *v = tl__in(g, n, 2);
    c = q->shape[2];
    if (nh < 1 || nkv < 1 || nh % nkv != 0 || c % nh != 0)
      return TL_ERRF(TL_ERR_INVALID,
                     "attention '%s': %d query heads over %d key/value heads of C=%lld; expected "
                     "key/value heads dividing the query heads, and heads dividing C",
                     n->name, nh, nkv, (long long)c);
    const int64_t kv = c / nh * nkv;
    if (!tl__same_shape(k, v) || k->shape[0] != b || k->shape[1] != t || k->shape[2] != kv) {
      char ks[48], vs[48];
      return TL_ERRF(TL_ERR_INVALID,
                     "attention '%s': k %s and v %s; expected [%lld,%lld,%lld] each", n->name,
                     tl__shape_str(k, ks, sizeof ks), tl__shape_str(v, vs, sizeof vs), (long long)b,
                     (long long)t, (long long)kv);
    }
  }
  int64_t ys[3] = {b, t, c}, ls[3] = {b, nh, t};
  TL_CHECK(tl__op_output(g, n, 0, "", TL_ROLE_ACTIVATION, TL_F32, 3, ys));
  TL_CHECK(tl__op_output(g, n, 1, "lse", TL_ROLE_ACTIVATION, TL_F32, 3, ls));
  /* causal: about half of the T x T scores, each a dot of C/NH, twice (QK^T, AV) */
  n->flops = 2.0 * 2.0 * (double)b * (double)t * (double)t / 2.0 * (double)c;
  const double kv = (double)c / nh * nkv;
  n->bytes = 4.0 * ((double)b * t * (2 * c + 2 * kv) + (double)b * nh * t);
  return TL_OK;
}

static tl_status run(const struct tl_run_ctx* x, const tl_node* n) {
  const struct tl_attention_shape s = shape_of(x->g, n);
  float* q = TL_DATA(x, n->in[0]);
  const bool fused = n->n_in == 1;
  const int64_t c = (int64_t)s.nh * s.hs;
  return x->be->ops->attention_forward(x->be->ctx, TL_DATA(x, n->out[0]), TL_DATA(x, n->out[1]), q,
                                       fused ? q + c : TL_DATA(x, n->in[1]),
                                       fused ? q + 2 * c : TL_DATA(x, n->in[2]), &s);
}

/* backward node: fused in {dy, qkv, y, lse}, out {dqkv}; separate in {dy,
 * q, k, v, y, lse}, out {dq, dk, dv} */
static tl_status backward(tl_graph* g, int i) {
  const tl_node* n = &g->nodes[i];
  int in[6] = {tl__grad(g, n->out[0])}, out[3], n_in = 1;
  for (int k = 0; k < n->n_in; k++) {
    in[n_in++] = n->in[k];
    out[k] = tl__grad(g, n->in[k]);
  }
  in[n_in++] = n->out[0];
  in[n_in++] = n->out[1];
  TL_CHECK(tl__op_backward_node(g, TL_OP_ATTENTION_BACKWARD, i, n_in, in, n->n_in, out));
  /* five T x T products, not four: the scores are computed again */
  g->nodes[g->n_nodes - 1].flops = 2.5 * g->nodes[i].flops;
  return TL_OK;
}

static tl_status run_backward(const struct tl_run_ctx* x, const tl_node* n) {
  const tl_node* f = &x->g->nodes[n->forward_of];
  const struct tl_attention_shape s = shape_of(x->g, f);
  const int k = f->n_in; /* y and lse follow the forward's inputs */
  const float* q = TL_DATA(x, n->in[1]);
  float* dq = TL_DATA(x, n->out[0]);
  const bool fused = k == 1;
  const int64_t c = (int64_t)s.nh * s.hs;
  return x->be->ops->attention_backward(
      x->be->ctx, dq, fused ? (dq ? dq + c : NULL) : TL_DATA(x, n->out[1]),
      fused ? (dq ? dq + 2 * c : NULL) : TL_DATA(x, n->out[2]), TL_DATA(x, n->in[0]), q,
      fused ? q + c : TL_DATA(x, n->in[2]), fused ? q + 2 * c : TL_DATA(x, n->in[3]),
      TL_DATA(x, n->in[1 + k]), TL_DATA(x, n->in[2 + k]), &s);
}

const struct tl_op_def tl_op_attention = {.name = "attention",
                                          .n_diff_out = 1,
                                          .infer = infer,
                                          .run = run,
                                          .backward = backward,
                                          .flags = TL_OP_ATTENTION_LIKE};
const struct tl_op_def tl_op_attention_backward = {
    .name = "attention_backward", .n_diff_out = 0, .run = run_backward};
