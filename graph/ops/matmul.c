/* matmul.c — out = op(a) op(b) [+ bias]; attr {trans_a, trans_b}.
 * a may have leading batch dimensions when not transposed: (..., K) is
 * treated as (M, K) with M the product of the leading ones, and the output
 * keeps them: (..., N). A linear layer is matmul(x, W, bias) with trans_b. */
#include <stdio.h>

#include "graph/ops/shape.h"

static tl_status infer(tl_graph* g, tl_node* n) {
  TL_NEED_F32(g, n, 0);
  TL_NEED_F32(g, n, 1);
  const tl_value *a = tl__in(g, n, 0), *b = tl__in(g, n, 1),
                 *bias = n->n_in > 2 ? tl__in(g, n, 2) : NULL;
  int ta = n->attr[0], tb = n->attr[1];
  char sa[64], sb[64];
  if (b->n_dims != 2 || (ta && a->n_dims != 2))
    return TL_ERRF(
        TL_ERR_INVALID,
        "matmul '%s': operands %s and %s must be 2-D (a may be batched when not transposed)",
        n->name, tl__shape_str(a, sa, sizeof sa), tl__shape_str(b, sb, sizeof sb));
  int64_t m = ta ? a->shape[1] : tl__rows(a), k = ta ? a->shape[0] : tl__cols(a);
  int64_t kb = tb ? b->shape[1] : b->shape[0], nn = tb ? b->shape[0] : b->shape[1];
  if (k != kb)
    return TL_ERRF(TL_ERR_INVALID, "matmul '%s': inner dimensions differ: %s%s times %s%s", n->name,
                   tl__shape_str(a, sa, sizeof sa), ta ? "^T" : "", tl__shape_str(b, sb, sizeof sb),
                   tb ? "^T" : "");
  if (bias && (bias->n_dims != 1 || bias->shape[0] != nn))
    return TL_ERRF(TL_ERR_INVALID, "matmul '%s': bias has %lld elements; expected %lld", n->name,
                   (long long)tl_value_numel(bias), (long long)nn);
  int64_t shape[4];
  int nd = 2;
  if (ta) {
    shape[0] = m, shape[1] = nn;
  } else {
    nd = a->n_dims;
    memcpy(shape, a->shape, sizeof shape);
    shape[nd - 1] = nn;
  }
  TL_CHECK(tl__op_output(g, n, 0, "", TL_ROLE_ACTIVATION, TL_F32, nd, shape));
  n->flops = 2.0 * (double)m * (double)nn * (double)k;
  n->bytes = tl__op_bytes(g, n->in, n->n_in) + tl__op_bytes(g, n->out, 1);
  return TL_OK;
}

static void dims(const tl_graph* g, const tl_node* n, int* m, int* nn, int* k) {
  const tl_value *a = &g->values[n->in[0]], *b = &g->values[n->in[1]];
  *m = (int)(n->attr[0] ? a->shape[1] : tl__rows(a));
  *k = (int)(n->attr[0] ? a->shape[0] : tl__cols(a));
  *nn = (int)(n->attr[1] ? b->shape[0] : b->shape[1]);
}

/* Whether every float input of n reaches the kernel as a bf16 number (a
 * bf16 graph's copy of a bf16 value, or a parameter read rounded): then a
 * backend's bf16 GEMM may multiply them (kernels/ops.h's matmul_bf16). */
static bool bf16_operands(const tl_graph* g, const tl_node* n) {
  if (g->precision != TL_BF16) return false;
  for (int i = 0; i < n->n_in; i++) {
    const tl_value* v = n->in[i] >= 0 ? &g->values[n->in[i]] : NULL;
    if (v && v->dtype != TL_BF16 && v->role != TL_ROLE_PARAM) return false;
  }
  return true;
}

/* The strided GEMM for a node: the bf16 one where its operands are bf16
 * numbers (matmul_ld_bf16), else matmul_ld. */
typedef tl_status (*matmul_ld_fn)(void*, float*, int, const float*, int, const float*, int,
                                  const float*, int, int, int, bool, bool, bool);
static matmul_ld_fn strided(const struct tl_run_ctx* x, const tl_node* n) {
  const struct tl_kernel_ops* ops = x->be->ops;
  return ops->matmul_ld_bf16 && bf16_operands(x->g, n) ? ops->matmul_ld_bf16 : ops->matmul_ld;
}

/* W read in pieces (tl_piece_params): each piece's columns of the output
 * (with the bias's) written in place, out's rows nn apart. */
static tl_status run_pieces(const struct tl_run_ctx* x, const tl_node* n, int m, int nn, int k,
                            int64_t rows) {
  const matmul_ld_fn mm = strided(x, n);
  float *out = TL_DATA(x, n->out[0]), *a = TL_DATA(x, n->in[0]);
  const float* bias = n->n_in > 2 ? TL_DATA(x, n->in[2]) : NULL;
  for (int64_t r0 = 0; r0 < nn; r0 += rows) {
    const int r = (int)(rows < nn - r0 ? rows : nn - r0);
    const float* wp = NULL;
    TL_CHECK(x->piece_param(x, n->in[1], r0, r, &wp));
    TL_CHECK(mm(x->be->ctx, out + r0, nn, a, k, wp, k, bias ? bias + r0 : NULL, m, r, k, false,
                true, false));
  }
  return TL_OK;
}

static tl_status run(const struct tl_run_ctx* x, const tl_node* n) {
  int m, nn, k;
  dims(x->g, n, &m, &nn, &k);
  const int64_t rows = tl_piece_params(x) ? tl_piece_rows(x, n->in[1]) : 0;
  if (rows > 0) return run_pieces(x, n, m, nn, k, rows);
  const struct tl_kernel_ops* ops = x->be->ops;
  if (ops->matmul_bf16 && bf16_operands(x->g, n))
    return ops->matmul_bf16(x->be->ctx, TL_DATA(x, n->out[0]), TL_DATA(x, n->in[0]),
                            TL_DATA(x, n->in[1]), n->n_in > 2 ? TL_DATA(x, n->in[2]) : NULL, m, nn,
                            k, n->attr[0], n->attr[1], false);
  return x->be->ops->matmul(x->be->ctx, TL_DATA(x, n->out[0]), TL_DATA(x, n->in[0]),
                            TL_DATA(x, n->in[1]), n->n_in > 2 ? TL_DATA(x, n->in[2]) : NULL, m, nn,
                            k, n->attr[0], n->attr[1], false);
}

/* backward node: in {dout, a, b}, out {da, db, dbias} */
static tl_status backward(tl_graph* g, int i) {
  const tl_node* n = &g->nodes[i];
  int in[3] = {tl__grad(g, n->out[0]), n->in[0], n->in[1]};
  int out[3] = {tl__grad(g, n->in[0]), tl__grad(g, n->in[1]),
                n->n_in > 2 ? tl__grad(g, n->in[2]) : -1};
  return tl__op_backward_node(g, TL_OP_MATMUL_BACKWARD, i, 3, in, 3, out);
}

/* A linear layer y = x W^T (+ bias) may write W's gradient in pieces of
 * rows (graph/exec.h's tl_exec_pieces); the bias's is written whole. */
static bool pieces(const tl_graph* g, const tl_node* n, int v) {
  (void)g;
  return v == n->in[1] && v != n->in[0] && !n->attr[0] && n->attr[1] &&
         (n->n_in < 3 || (n->in[2] != v && n->in[2] != n->in[0]));
}

/* W's gradient in pieces of `rows` rows: dx += dout W as one product (the
 * sums of the whole backward's, bit for bit) and the bias's gradient whole
 * (dout's column sums), then for each piece dW_p += dout_p^T x, dout_p its
 * columns of dout read in place (rows nn apart), into the memory the
 * piece's begin gives. With W read in pieces too (tl_piece_params) dx is
 * summed piece by piece, dx += dout_p W_p, the last piece first (the one
 * the forward read last, still gathered). */
static tl_status run_backward_pieces(const struct tl_run_ctx* x, const tl_node* n, int m, int nn,
                                     int k, int64_t rows) {
  const struct tl_kernel_ops* ops = x->be->ops;
  const bool bf16 = ops->matmul_backward_bf16 && bf16_operands(x->g, n);
  const matmul_ld_fn mm = strided(x, n);
  const int w = x->g->nodes[n->forward_of].in[1];
  float *da = TL_DATA(x, n->out[0]), *dout = TL_DATA(x, n->in[0]), *a = TL_DATA(x, n->in[1]),
        *b = tl_piece_params(x) ? NULL : TL_DATA(x, n->in[2]);
  tl_status (*backward)(void*, float*, float*, float*, const float*, const float*, const float*,
                        int, int, int, bool, bool) =
      bf16 ? ops->matmul_backward_bf16 : ops->matmul_backward;
  const bool whole = !tl_piece_params(x);
  float* dbias = n->out[2] >= 0 ? TL_DATA(x, n->out[2]) : NULL;
  if ((da && whole) || dbias)
    TL_CHECK(
        backward(x->be->ctx, whole ? da : NULL, NULL, dbias, dout, a, b, m, nn, k, false, true));
  const int64_t n_pieces = (nn + rows - 1) / rows;
  for (int64_t j = 0; j < n_pieces; j++) {
    /* W read in pieces: the last first, which the forward ended on */
    const int64_t r0 = (whole ? j : n_pieces - 1 - j) * rows;
    const int r = (int)(rows < nn - r0 ? rows : nn - r0);
    float* dw = NULL;
    const float* wp = NULL;
    TL_CHECK(x->pieces->begin(x->pieces->user, w, r0, r, &dw));
    TL_CHECK(x->piece_param(x, w, r0, r, &wp));
    if (!whole && da) /* dx (M,K) += dout_p (M,r) W_p (r,K) */
      TL_CHECK(mm(x->be->ctx, da, k, dout + r0, nn, wp, k, NULL, m, k, r, false, false, true));
    /* dW_p (r,K) += dout_p^T (r,M) x (M,K) */
    TL_CHECK(mm(x->be->ctx, dw, k, dout + r0, nn, a, k, NULL, r, k, m, true, false, true));
    TL_CHECK(x->pieces->end(x->pieces->user, w, r0, r));
  }
  return TL_OK;
}

/* A linear layer's backward writes W's gradient whole (graph/op.h): its
 * product with the output written, not added to what W's gradient held. */
static bool overwrites(const tl_graph* g, const tl_node* n, int v) {
  (void)g;
  return v >= 0 && v == n->out[1] && v != n->out[0] && v != n->out[2] && !n->attr[0] && n->attr[1];
}

static tl_status run_backward(const struct tl_run_ctx* x, const tl_node* n) {
  int m, nn, k;
  const tl_node* f = &x->g->nodes[n->forward_of];
  dims(x->g, f, &m, &nn, &k);
  const int64_t rows = tl_piece_rows(x, f->in[1]);
  if (rows > 0) return run_backward_pieces(x, n, m, nn, k, rows);
  const struct tl_kernel_ops* ops = x->be->ops;
  const bool bf16 = ops->matmul_backward_bf16 && bf16_operands(x->g, n);
  tl_status (*backward)(void*, float*, float*, float*, const float*, const float*, const float*,
                        int, int, int, bool, bool) =
      bf16 ? ops->matmul_backward_bf16 : ops->matmul_backward;
  float *da = TL_DATA(x, n->out[0]), *db = TL_DATA(x, n->out[1]), *dbias = TL_DATA(x, n->out[2]),
        *dout = TL_DATA(x, n->in[0]), *a = TL_DATA(x, n->in[1]), *b = TL_DATA(x, n->in[2]);
  if (!db || !tl_grad_fresh(x, n->out[1]) || !overwrites(x->g, n, n->out[1]))
    return backward(x->be->ctx, da, db, dbias, dout, a, b, m, nn, k, n->attr[0], n->attr[1]);
  /* the first of the step to write W's gradient: dx and the bias's as
   * always, then dW (N,K) = dout^T (N,M) x (M,K) written */
  if (da || dbias)
    TL_CHECK(backward(x->be->ctx, da, NULL, dbias, dout, a, b, m, nn, k, false, true));
  return (ops->matmul_bf16 && bf16 ? ops->matmul_bf16 : ops->matmul)(x->be->ctx, db, dout, a, NULL,
                                                                     nn, k, m, true, false, false);
}

const struct tl_op_def tl_op_matmul = {.name = "matmul",
                                       .n_diff_out = 1,
                                       .infer = infer,
                                       .run = run,
                                       .backward = backward,
                                       .pieces = pieces};
const struct tl_op_def tl_op_matmul_backward = {
    .name = "matmul_backward", .n_diff_out = 0, .run = run_backward, .overwrites = overwrites};
