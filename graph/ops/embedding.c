/* embedding.c — token + position embedding: in {tokens (B,T) i32, wte (rows,
 * C), wpe (maxT,C) or -1}, attr {row_begin}, out (B,T,C) = wte[token -
 * row_begin] + wpe[t]. wte is the whole table (row_begin 0) or, under tensor
 * parallelism, the shard of vocabulary rows [row_begin, row_begin + rows):
 * tokens outside it contribute zeros, and the tensor-parallel group's sum
 * is the embedding. Without wpe there is no position term.
 *
 * attr {row_begin, cp, cp_rank}: with cp > 1 the T rows of a sequence are
 * the two chunks context-parallel rank cp_rank holds of a sequence of cp T
 * tokens (kernels/ops.h's tl_cp_position), and read the position rows of
 * those chunks. */
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
  const int cp = n->attr[1] > 1 ? n->attr[1] : 1;
  if (cp > 1 && (tok->shape[1] % 2 != 0 || n->attr[2] < 0 || n->attr[2] >= cp))
    return TL_ERRF(TL_ERR_INVALID,
                   "embedding '%s': context-parallel rank %d of %d over %lld rows; expected a "
                   "rank below cp and an even number of rows (two chunks)",
                   n->name, n->attr[2], cp, (long long)tok->shape[1]);
  if (wpe && tok->shape[1] * cp > wpe->shape[0])
    return TL_ERRF(TL_ERR_INVALID, "embedding '%s': T=%lld exceeds the %lld positions of wpe",
                   n->name, (long long)tok->shape[1] * cp, (long long)wpe->shape[0]);
  if (n->attr[0] < 0)
    return TL_ERRF(TL_ERR_INVALID, "embedding '%s': first row %d; expected >= 0", n->name,
                   n->attr[0]);
  int64_t shape[3] = {tok->shape[0], tok->shape[1], wte->shape[1]};
  TL_CHECK(tl__op_output(g, n, 0, "", TL_ROLE_ACTIVATION, TL_F32, 3, shape));
  n->flops = (double)shape[0] * shape[1] * shape[2];
  n->bytes = 3.0 * 4.0 * (double)shape[0] * shape[1] * shape[2];
  return TL_OK;
}

/* With a split sequence and a position table, the kernels run once per
 * (sequence, chunk), each chunk reading its own rows of wpe. */
#define SPLIT(f) (f->attr[1] > 1 && f->n_in > 2 && f->in[2] >= 0)

/* out = wte rows [row_begin, row_begin + rows) of the vocabulary for the
 * tokens there (zeros for the others) + wpe (NULL: none); accumulate:
 * out += the same. */
static tl_status run_rows(const struct tl_run_ctx* x, const tl_node* n, float* out,
                          const float* wte, const float* wpe, int row_begin, int rows,
                          bool accumulate) {
  const tl_value* y = &x->g->values[n->out[0]];
  const int b = (int)y->shape[0], t = (int)y->shape[1], c = (int)y->shape[2];
  const int32_t* tok = TL_IDATA(x, n->in[0]);
  if (!SPLIT(n) || !wpe)
    return x->be->ops->embedding_forward(x->be->ctx, out, tok, wte, wpe, b, t, c, row_begin, rows,
                                         accumulate);
  const int h = t / 2;
  for (int s = 0; s < b; s++)
    for (int j = 0; j < 2; j++) {
      const int64_t row = (int64_t)s * t + (int64_t)j * h;
      const int pos = tl_cp_position(j * h, t, n->attr[1], n->attr[2]);
      TL_CHECK(x->be->ops->embedding_forward(x->be->ctx, out + row * c, tok + row, wte,
                                             wpe + (int64_t)pos * c, 1, h, c, row_begin, rows,
                                             accumulate));
    }
  return TL_OK;
}

/* With the table read in pieces (graph/exec.h's tl_exec_pieces.param):
 * the first piece's rows and the positions, then each other piece's rows
 * added in place (the tokens outside a piece left as they are). */
static tl_status run(const struct tl_run_ctx* x, const tl_node* n) {
  const int rows = (int)x->g->values[n->in[1]].shape[0];
  float *out = TL_DATA(x, n->out[0]), *wpe = TL_DATA(x, n->in[2]);
  const int64_t piece = tl_piece_params(x) ? tl_piece_rows(x, n->in[1]) : 0;
  if (piece <= 0) return run_rows(x, n, out, TL_DATA(x, n->in[1]), wpe, n->attr[0], rows, false);
  for (int64_t r0 = 0; r0 < rows; r0 += piece) {
    const int r = (int)(piece < rows - r0 ? piece : rows - r0);
    const float* w = NULL;
    TL_CHECK(x->piece_param(x, n->in[1], r0, r, &w));
    TL_CHECK(run_rows(x, n, out, w, r0 == 0 ? wpe : NULL, n->attr[0] + (int)r0, r, r0 > 0));
  }
  return TL_OK;
}

/* backward node: in {dout, tokens}, out {dwte, dwpe} */
static tl_status backward(tl_graph* g, int i) {
  const tl_node* n = &g->nodes[i];
  int in[2] = {tl__grad(g, n->out[0]), n->in[0]};
  int out[2] = {tl__grad(g, n->in[1]), tl__grad(g, n->in[2])};
  return tl__op_backward_node(g, TL_OP_EMBEDDING_BACKWARD, i, 2, in, 2, out);
}

/* The table's gradient may be written in pieces of rows (graph/exec.h's
 * tl_exec_pieces): each piece takes the tokens of its rows. */
static bool pieces(const tl_graph* g, const tl_node* n, int v) {
  (void)g;
  return v == n->in[1];
}

/* The backward into dwte, rows [row_begin, row_begin + rows) of the
 * vocabulary, and into dwpe (NULL: none). */
static tl_status backward_rows(const struct tl_run_ctx* x, const tl_node* n, float* dwte,
                               float* dwpe, int row_begin, int rows) {
  const tl_value* dy = &x->g->values[n->in[0]];
  const tl_node* f = &x->g->nodes[n->forward_of];
  const int b = (int)dy->shape[0], t = (int)dy->shape[1], c = (int)dy->shape[2];
  float* d = TL_DATA(x, n->in[0]);
  const int32_t* tok = TL_IDATA(x, n->in[1]);
  if (!SPLIT(f) || !dwpe)
    return x->be->ops->embedding_backward(x->be->ctx, dwte, dwpe, d, tok, b, t, c, row_begin, rows);
  const int h = t / 2;
  for (int s = 0; s < b; s++)
    for (int j = 0; j < 2; j++) {
      const int64_t row = (int64_t)s * t + (int64_t)j * h;
      const int pos = tl_cp_position(j * h, t, f->attr[1], f->attr[2]);
      TL_CHECK(x->be->ops->embedding_backward(x->be->ctx, dwte, dwpe + (int64_t)pos * c,
                                              d + row * c, tok + row, 1, h, c, row_begin, rows));
    }
  return TL_OK;
}

static tl_status run_backward(const struct tl_run_ctx* x, const tl_node* n) {
  const tl_node* f = &x->g->nodes[n->forward_of];
  const int rows = (int)x->g->values[f->in[1]].shape[0];
  float *dwte = TL_DATA(x, n->out[0]), *dwpe = TL_DATA(x, n->out[1]);
  const int64_t piece = tl_piece_rows(x, f->in[1]);
  if (piece <= 0) return backward_rows(x, n, dwte, dwpe, f->attr[0], rows);
  for (int64_t r0 = 0; r0 < rows; r0 += piece) { /* the position rows with the first piece */
    const int r = (int)(piece < rows - r0 ? piece : rows - r0);
    float* dw = NULL;
    TL_CHECK(x->pieces->begin(x->pieces->user, f->in[1], r0, r, &dw));
    TL_CHECK(backward_rows(x, n, dw, r0 == 0 ? dwpe : NULL, f->attr[0] + (int)r0, r));
    TL_CHECK(x->pieces->end(x->pieces->user, f->in[1], r0, r));
  }
  return TL_OK;
}

const struct tl_op_def tl_op_embedding = {.name = "embedding",
                                          .n_diff_out = 1,
                                          .infer = infer,
                                          .run = run,
                                          .backward = backward,
                                          .pieces = pieces};
const struct tl_op_def tl_op_embedding_backward = {
    .name = "embedding_backward", .n_diff_out = 0, .run = run_backward};
