/* comm.c — a collective over the tensor-parallel group as a graph node:
 * in {x}, attr {kind, tp, d0, d1}, out {y}. The kinds (tp_impl.h):
 *   COPY    y = x; backward dx += all-reduce(dy)              (Megatron's f)
 *   REDUCE  y = all-reduce(x); backward dx += dy               (Megatron's g)
 *   GATHER  x (rows, C) -> y (d0, d1, C), or (d0, C) when d1 is 0, with
 *           d0*d1 = rows*tp: all-gather of token rows; backward dx += this
 *           rank's rows of reduce-scatter(dy)
 *   SCATTER x (..., C) with R rows -> y (R/tp, C): reduce-scatter;
 *           backward dx += all-gather(dy)
 *   SLICE   x (..., C) with R rows, the same on every rank -> y (R/tp, C):
 *           this rank's rows; backward dx += all-gather(dy)
 *   GATHER_WHOLE  as GATHER, for a reader every rank runs whole: backward
 *           dx += this rank's rows of dy (the same dy on every rank)
 * Token rows are split contiguously: rank r holds rows [r*R/tp, (r+1)*R/tp)
 * of the flattened (R, C). Collectives wait for the device's queued work
 * first and are complete when the node returns. */
#include <pthread.h>

#include "core/alloc.h"
#include "core/env.h"
#include "graph/ops/shape.h"
#include "tp/tp_impl.h"

static tl_status infer(tl_graph* g, tl_node* n) {
  TL_NEED_F32(g, n, 0);
  const tl_value* a = tl__in(g, n, 0);
  int kind = n->attr[0], tp = n->attr[1];
  int64_t rows = tl__rows(a), cols = tl__cols(a), shape[4];
  if (tp < 1) return TL_ERRF(TL_ERR_INVALID, "tp_comm '%s': group of %d ranks", n->name, tp);
  memcpy(shape, a->shape, sizeof shape);
  int nd = a->n_dims;
  switch (kind) {
    case TL_TP_COPY:
    case TL_TP_REDUCE:
      break;
    case TL_TP_GATHER:
    case TL_TP_GATHER_WHOLE: {
      int64_t d0 = n->attr[2], d1 = n->attr[3] > 0 ? n->attr[3] : 1;
      if (d0 * d1 != rows * tp)
        return TL_ERRF(TL_ERR_INVALID, "tp_comm '%s': %lld rows x %d ranks is not %lld*%lld",
                       n->name, (long long)rows, tp, (long long)d0, (long long)d1);
      if (n->attr[3] > 0)
        nd = 3, shape[0] = d0, shape[1] = d1, shape[2] = cols;
      else
        nd = 2, shape[0] = d0, shape[1] = cols;
      break;
    }
    case TL_TP_SLICE:
    case TL_TP_SCATTER:
      if (rows % tp != 0)
        return TL_ERRF(TL_ERR_INVALID,
                       "tp_comm '%s': %lld token rows do not split over %d ranks (sequence "
                       "parallelism needs micro-batch x seq_len divisible by mesh.tp)",
                       n->name, (long long)rows, tp);
      nd = 2, shape[0] = rows / tp, shape[1] = cols;
      break;
    default:
      return TL_ERRF(TL_ERR_INVALID, "tp_comm '%s': unknown kind %d", n->name, kind);
  }
  TL_CHECK(tl__op_output(g, n, 0, "", TL_ROLE_ACTIVATION, TL_F32, nd, shape));
  n->flops = 0;
  n->bytes = tl__op_bytes(g, n->in, 1) + tl__op_bytes(g, n->out, 1);
  return TL_OK;
}

static tl_status group_of(const struct tl_run_ctx* x, const tl_node* n, tl_group** out) {
  *out = x->group;
  int size = x->group ? tl_group_size(x->group) : 1;
  if (size != n->attr[1])
    return TL_ERRF(TL_ERR_INVALID,
                   "tp_comm '%s' was built for %d tensor-parallel ranks; the executor's group "
                   "has %d",
                   n->name, n->attr[1], size);
  return TL_OK;
}

/* The forward moves values as stored (TL_OP_STORED): a bf16 graph's in
 * 2-byte elements, summed by the group in bf16. */
static tl_status run(const struct tl_run_ctx* x, const tl_node* n) {
  tl_group* tp;
  TL_CHECK(group_of(x, n, &tp));
  const tl_value *vi = &x->g->values[n->in[0]], *vo = &x->g->values[n->out[0]];
  if (vi->dtype != vo->dtype)
    return TL_ERRF(TL_ERR_INTERNAL, "tp_comm '%s': %s in, %s out", n->name,
                   tl_dtype_name(vi->dtype), tl_dtype_name(vo->dtype));
  const tl_dtype dt = vi->dtype;
  const size_t es = tl_dtype_size(dt);
  const char* in = x->data(x, n->in[0]);
  char* out = x->data(x, n->out[0]);
  size_t count = (size_t)tl_value_numel(vi);
  tl_device dev = x->be->device;
  if (!tp) return tl_memcpy(dev, out, dev, in, count * es);
  switch (n->attr[0]) {
    case TL_TP_COPY:
      return tl_memcpy(dev, out, dev, in, count * es);
    case TL_TP_REDUCE:
      if (tl_fault_on(TL_FAULT_TP_ALLREDUCE_SKIPPED)) /* a deliberate bug (core/env.h) */
        return tl_memcpy(dev, out, dev, in, count * es);
      return tl_group_all_reduce(tp, in, out, count, dt, TL_REDUCE_SUM, NULL);
    case TL_TP_GATHER:
    case TL_TP_GATHER_WHOLE:
      return tl_group_all_gather(tp, in, out, count * (size_t)n->attr[1], dt, NULL);
    case TL_TP_SLICE: { /* this rank's rows, as reduce-scatter would place them */
      size_t off, len;
      tl_group_chunk(count, tl_group_size(tp), tl_group_rank(tp), &off, &len);
      return tl_memcpy(dev, out, dev, in + off * es, len * es);
    }
    default:                                            /* TL_TP_SCATTER */
      if (tl_fault_on(TL_FAULT_TP_ALLREDUCE_SKIPPED)) { /* a deliberate bug (core/env.h) */
        size_t off, len;
        tl_group_chunk(count, tl_group_size(tp), tl_group_rank(tp), &off, &len);
        return tl_memcpy(dev, out, dev, in + off * es, len * es);
      }
      return tl_group_reduce_scatter(tp, in, out, count, dt, TL_REDUCE_SUM, NULL);
  }
}

/* backward node: in {dy}, out {dx} */
static tl_status backward(tl_graph* g, int i) {
  const tl_node* n = &g->nodes[i];
  int in[1] = {tl__grad(g, n->out[0])};
  int out[1] = {tl__grad(g, n->in[0])};
  return tl__op_backward_node(g, tl__tp_ops()->comm_backward, i, 1, in, 1, out);
}

/* the backward's temporary: the larger of the gradients it reads and
 * writes, as floats, and in a bf16 graph the message in and out in bf16 */
static size_t scratch(const tl_graph* g, const tl_node* n) {
  size_t a = (size_t)tl_value_numel(&g->values[n->in[0]]);
  size_t b = n->out[0] >= 0 ? (size_t)tl_value_numel(&g->values[n->out[0]]) : 0;
  const size_t most = a > b ? a : b;
  return g->values[n->in[0]].dtype == TL_BF16 ? most * (sizeof(float) + 2 * sizeof(uint16_t))
                                              : most * sizeof(float);
}

/* The backward adds into dx, so it runs on the executor's fp32 copies; in
 * a bf16 graph the collective still moves bf16 (dy is a bf16 value widened:
 * narrowing it again is exact), then widens the result to add it. */
static tl_status run_backward(const struct tl_run_ctx* x, const tl_node* n) {
  const tl_node* f = &x->g->nodes[n->forward_of];
  tl_group* tp;
  TL_CHECK(group_of(x, f, &tp));
  const float* dy = TL_DATA(x, n->in[0]);
  float* dx = TL_DATA(x, n->out[0]);
  if (!dx) return TL_OK;
  size_t ny = (size_t)tl_value_numel(&x->g->values[n->in[0]]);
  size_t nx = (size_t)tl_value_numel(&x->g->values[n->out[0]]);
  const struct tl_kernel_ops* ops = x->be->ops;
  int kind = f->attr[0];
  if (!tp || kind == TL_TP_REDUCE)
    return ops->scale_backward(x->be->ctx, dx, dy, 1.0f, (int64_t)nx);
  if (kind == TL_TP_GATHER_WHOLE) { /* every rank holds the same dy: its rows */
    size_t off, len;
    tl_group_chunk(ny, tl_group_size(tp), tl_group_rank(tp), &off, &len);
    return ops->scale_backward(x->be->ctx, dx, dy + off, 1.0f, (int64_t)len);
  }
  const bool bf16 = x->g->values[n->in[0]].dtype == TL_BF16;
  const size_t most = nx > ny ? nx : ny, need = scratch(x->g, n);
  if (x->scratch_bytes < need)
    return TL_ERRF(TL_ERR_INTERNAL, "tp_comm '%s': the executor's scratch holds %zu bytes of %zu",
                   f->name, x->scratch_bytes, need);
  float* tmp = x->scratch;
  if (bf16) {
    /* [tmp: most floats | a: most bf16 | b: most bf16] */
    uint16_t* a = (uint16_t*)(tmp + most);
    uint16_t* b = a + most;
    TL_CHECK(ops->to_bf16(x->be->ctx, a, dy, (int64_t)ny));
    if (kind == TL_TP_COPY)
      TL_CHECK(tl_group_all_reduce(tp, a, b, ny, TL_BF16, TL_REDUCE_SUM, NULL));
    else if (kind == TL_TP_GATHER)
      TL_CHECK(tl_group_reduce_scatter(tp, a, b, ny, TL_BF16, TL_REDUCE_SUM, NULL));
    else /* SCATTER, SLICE */
      TL_CHECK(tl_group_all_gather(tp, a, b, nx, TL_BF16, NULL));
    TL_CHECK(ops->from_bf16(x->be->ctx, tmp, b, (int64_t)nx));
  } else if (kind == TL_TP_COPY) {
    TL_CHECK(tl_group_all_reduce(tp, dy, tmp, ny, TL_F32, TL_REDUCE_SUM, NULL));
  } else if (kind == TL_TP_GATHER) {
    TL_CHECK(tl_group_reduce_scatter(tp, dy, tmp, ny, TL_F32, TL_REDUCE_SUM, NULL));
  } else { /* SCATTER, SLICE */
    TL_CHECK(tl_group_all_gather(tp, dy, tmp, nx, TL_F32, NULL));
  }
  return ops->scale_backward(x->be->ctx, dx, tmp, 1.0f, (int64_t)nx);
}

const struct tl_op_def tl__tp_op_comm = {.name = "tp_comm",
                                         .n_diff_out = 1,
                                         .infer = infer,
                                         .run = run,
                                         .backward = backward,
                                         .flags = TL_OP_COLLECTIVE | TL_OP_STORED};
const struct tl_op_def tl__tp_op_comm_backward = {.name = "tp_comm_backward",
                                                  .run = run_backward,
                                                  .flags = TL_OP_COLLECTIVE,
                                                  .scratch_bytes = scratch};

static struct tl__tp_ops g_ops;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void register_ops(void) {
  /* the table has room for many more ops than the graph's own: these fit */
  tl_status st = tl_op_register(&tl__tp_op_comm, &g_ops.comm);
  if (st == TL_OK) st = tl_op_register(&tl__tp_op_comm_backward, &g_ops.comm_backward);
  if (st == TL_OK) st = tl_op_register(&tl__tp_op_xent, &g_ops.xent);
  if (st == TL_OK) st = tl_op_register(&tl__tp_op_xent_backward, &g_ops.xent_backward);
  if (st == TL_OK) st = tl_op_register(&tl__tp_op_cp_attention, &g_ops.cp_attention);
  if (st == TL_OK)
    st = tl_op_register(&tl__tp_op_cp_attention_backward, &g_ops.cp_attention_backward);
  TL_ASSERT(st == TL_OK);
}

const struct tl__tp_ops* tl__tp_ops(void) {
  pthread_once(&g_once, register_ops);
  return &g_ops;
}
