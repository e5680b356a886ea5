/* cp_attention.c — causal attention over a sequence split across the
 * context-parallel group: ring attention with the load-balanced split.
 *
 * Each of the cp ranks holds 2h = t rows of every sequence: chunks r and
 * 2 cp - 1 - r of its 2 cp chunks of h tokens (kernels/ops.h's
 * tl_cp_position), so that under the causal mask every rank has as much
 * work. Its queries stay; the key/value blocks (each rank's two chunks of
 * k and v, only the key/value heads) go around the ring: at step s rank r
 * holds rank (r - s) mod cp's block, computes attention of its query
 * chunks against the block's chunks that are not wholly in their future
 * (struct tl_attention_shape's block fields), merging each into out and
 * lse by their log-sum-exps, while the next block is in flight. After cp
 * steps every query has met every key before it, and no rank ever held
 * more than two blocks.
 *
 * The backward sends the blocks around again, each with the gradient of
 * its k and v accumulated so far: at step s rank r adds its queries'
 * share into the block's dk and dv (and into its own dq), then passes the
 * block on; one more hop takes every block's dk and dv home.
 *
 * Ring order on NCCL: a send waits for its receive to be posted, so ranks
 * alternate (even ranks send first, odd ranks receive first) and no cycle
 * of sends forms; MPI's are non-blocking either way. */
#include <math.h>

#include "core/alloc.h"
#include "core/timer.h"
#include "tp/cp.h"
#include "tp/tp_impl.h"

/* attr {n_heads, n_kv_heads, cp, cp_rank}; the inputs and outputs are the
 * attention op's (graph/ops/attention.c): fused {qkv} or {q, k, v}. */
struct ring {
  struct tl_attention_shape s; /* the local rows against themselves */
  int cp, rank, h;             /* group size, this rank, rows a chunk */
  int64_t kvc;                 /* a row of k (or v): the key/value heads' channels */
  int64_t block;               /* floats of one k (or v) block: b * t * kvc */
  /* what k and v travel as: their stored dtype (a bf16 graph's are bf16
   * numbers, so bf16 on the wire is exact and half fp32's bytes); dk and
   * dv, sums in progress, always travel in fp32 */
  tl_dtype wire;
};

static struct ring ring_of(const tl_graph* g, const tl_node* n) {
  const tl_value* q = (&g->values[n->in[0]]);
  struct ring r = {.cp = n->attr[2], .rank = n->attr[3]};
  struct tl_attention_shape* s = &r.s;
  s->b = (int)q->shape[0], s->t = (int)q->shape[1], s->nh = n->attr[0];
  if (n->n_in == 1) {
    s->nkv = s->nh;
    s->hs = (int)(q->shape[2] / 3 / s->nh);
    s->ldq = s->ldkv = q->shape[2];
  } else {
    s->nkv = n->attr[1];
    s->hs = (int)(q->shape[2] / s->nh);
    s->ldq = q->shape[2];
    s->ldkv = (&g->values[n->in[1]])->shape[2];
  }
  r.h = s->t / 2;
  r.kvc = (int64_t)s->nkv * s->hs;
  r.block = (int64_t)s->b * s->t * r.kvc;
  r.wire = g->values[n->in[n->n_in == 1 ? 0 : 1]].dtype == TL_BF16 ? TL_BF16 : TL_F32;
  return r;
}

static tl_status infer(tl_graph* g, tl_node* n) {
  TL_CHECK(tl_op_get(TL_OP_ATTENTION)->infer(g, n));
  const int cp = n->attr[2];
  if (cp < 2 || n->attr[3] < 0 || n->attr[3] >= cp || (&g->values[n->in[0]])->shape[1] % 2 != 0)
    return TL_ERRF(TL_ERR_INVALID,
                   "cp_attention '%s': rank %d of a ring of %d over %lld rows; expected a ring of "
                   "at least 2 and an even number of rows (two chunks)",
                   n->name, n->attr[3], cp, (long long)(&g->values[n->in[0]])->shape[1]);
  /* the whole sequence's causal work, cp t tokens long, shared by cp ranks */
  n->flops *= cp;
  return TL_OK;
}

/* The group the ring runs over: the run context's ring group, of cp ranks,
 * this rank at the place the graph was built for. */
static tl_status group_of(const struct tl_run_ctx* x, const tl_node* n, const struct ring* r,
                          tl_group** out) {
  *out = x->ring;
  if (!x->ring || tl_group_size(x->ring) != r->cp || tl_group_rank(x->ring) != r->rank)
    return TL_ERRF(TL_ERR_INVALID,
                   "cp_attention '%s' was built for rank %d of %d context-parallel ranks; the "
                   "executor's ring group is %s",
                   n->name, r->rank, r->cp, x->ring ? tl_group_name(x->ring) : "missing");
  return TL_OK;
}

static size_t scratch(const tl_graph* g, const tl_node* n) {
  /* a backward node reads its forward's shape (a recomputed forward copy
   * has a forward_of too, but is its own shape) */
  const bool bwd = n->op == tl__tp_ops()->cp_attention_backward;
  const struct ring r = ring_of(g, bwd ? &g->nodes[n->forward_of] : n);
  /* two blocks (the one in use, the one arriving) of k and v, and in the
   * backward of dk and dv too; in bf16, the fp32 block the kernels read and
   * two bf16 ones on the wire, as many bytes (struct kv_blocks) */
  return sizeof(float) * (size_t)r.block * (bwd ? 8 : 4);
}

/* Where the key/value blocks live in the scratch: wire[i] the two blocks in
 * flight (sent from wire[s % 2] into wire[(s + 1) % 2] at step s), `work`
 * in bf16 the fp32 copy of the block in hand the kernels read (fp32: the
 * block that arrived is read in place), dkv[i] (backward) two fp32 dk, dv
 * pairs likewise. fp32: [k v | k v], the backward [k v dk dv | k v dk dv];
 * bf16: [k v | k' v' k'' v''] with bf16 k', v', the backward then [dk dv
 * | dk dv] after it. */
struct kv_blocks {
  void* wire[2];
  float* work;
  float* dkv[2];
};

static struct kv_blocks kv_blocks(const struct ring* r, void* scratch, bool backward) {
  float* f = scratch;
  const int64_t b = r->block;
  struct kv_blocks x = {{NULL, NULL}, NULL, {NULL, NULL}};
  if (r->wire == TL_BF16) {
    x.work = f;
    x.wire[0] = f + 2 * b;
    x.wire[1] = (uint16_t*)x.wire[0] + 2 * b;
    x.dkv[0] = f + 4 * b, x.dkv[1] = f + 6 * b;
  } else {
    const int64_t stride = backward ? 4 * b : 2 * b;
    x.wire[0] = f, x.wire[1] = f + stride;
    x.dkv[0] = f + 2 * b, x.dkv[1] = f + stride + 2 * b;
  }
  return x;
}

/* The fp32 k and v of step s (the block the kernels read). */
static float* kv_at(const struct kv_blocks* x, int s) {
  return x->work ? x->work : (float*)x->wire[s % 2];
}

/* Posts the exchange of `count` elements of `dtype`: send to the next rank,
 * receive from the previous, in the order that keeps NCCL from a cycle. */
static tl_status exchange(tl_group* g, const struct ring* r, const void* send, void* recv,
                          size_t count, tl_dtype dtype, int tag, tl_group_request** req) {
  const int next = (r->rank + 1) % r->cp, prev = (r->rank + r->cp - 1) % r->cp;
  if (r->rank % 2 == 0) {
    TL_CHECK(tl_group_send(g, send, count, dtype, next, tag, &req[0]));
    return tl_group_recv(g, recv, count, dtype, prev, tag, &req[1]);
  }
  TL_CHECK(tl_group_recv(g, recv, count, dtype, prev, tag, &req[1]));
  return tl_group_send(g, send, count, dtype, next, tag, &req[0]);
}

/* bf16 on the wire: the block that arrived for step s + 1 widened into the
 * one the kernels read (after the block in hand's kernels, which read it). */
static tl_status arrived(const struct tl_run_ctx* x, const struct ring* r,
                         const struct kv_blocks* b, int s) {
  if (!b->work) return TL_OK;
  return x->be->ops->from_bf16(x->be->ctx, b->work, b->wire[(s + 1) % 2], 2 * r->block);
}

/* The block shape of query chunk qi (0, 1: local rows [qi h, qi h + h))
 * against key chunk ki of the block from rank src, whose k and v are dense
 * (rows kvc apart); false when the key chunk is wholly in the query
 * chunk's future. */
static bool pair(const struct ring* r, int qi, int src, int ki, struct tl_attention_shape* a) {
  const int qc = qi ? 2 * r->cp - 1 - r->rank : r->rank;
  const int kc = ki ? 2 * r->cp - 1 - src : src;
  if (kc > qc) return false;
  *a = r->s;
  a->t = a->tk = r->h;
  a->q_pos = qc * r->h, a->k_pos = kc * r->h;
  a->bq = (int64_t)r->s.t * r->s.ldq;
  a->bo = (int64_t)r->s.t * r->s.nh * r->s.hs;
  a->ldkv = r->kvc;
  a->bkv = (int64_t)r->s.t * r->kvc;
  a->ldlse = r->s.t;
  return true;
}

/* This rank's own key/value block into `block`: its k, then its v, dense
 * (rows kvc apart), from k and v as the attention reads them (rows ldkv
 * apart: strided in a fused [Q | K | V] row). */
static tl_status pack_own(const struct tl_run_ctx* x, const struct ring* r, const float* k,
                          const float* v, const struct kv_blocks* b) {
  const int64_t rows = (int64_t)r->s.b * r->s.t;
  const struct tl_kernel_ops* ops = x->be->ops;
  float* block = kv_at(b, 0);
  TL_CHECK(ops->copy_2d(x->be->ctx, block, r->kvc, k, r->s.ldkv, rows, r->kvc, false));
  TL_CHECK(ops->copy_2d(x->be->ctx, block + r->block, r->kvc, v, r->s.ldkv, rows, r->kvc, false));
  /* bf16 on the wire: its image, exact (the values are bf16 numbers) */
  return b->work ? ops->to_bf16(x->be->ctx, b->wire[0], block, 2 * r->block) : TL_OK;
}

/* Reports span `what` of node n from t0 to now (the executor's span hook:
 * the trainer's --trace). On a GPU the kernels between are issued, not
 * done; the wait's end is the transfer's. */
static void span(const struct tl_run_ctx* x, const tl_node* n, const char* what, int64_t t0) {
  if (x->span) x->span(x, n, what, t0, tl_time_ns());
}

static tl_status run(const struct tl_run_ctx* x, const tl_node* n) {
  const struct ring r = ring_of(x->g, n);
  const struct tl_kernel_ops* ops = x->be->ops;
  void* ctx = x->be->ctx;
  tl_group* g;
  TL_CHECK(group_of(x, n, &r, &g));
  if (x->scratch_bytes < scratch(x->g, n))
    return TL_ERRF(TL_ERR_INVALID, "cp_attention '%s': %zu bytes of scratch; it needs %zu", n->name,
                   x->scratch_bytes, scratch(x->g, n));
  const int64_t c = (int64_t)r.s.nh * r.s.hs;
  float *q = TL_DATA(x, n->in[0]), *out = TL_DATA(x, n->out[0]), *lse = TL_DATA(x, n->out[1]);
  const struct kv_blocks b = kv_blocks(&r, x->scratch, false);
  TL_CHECK(pack_own(x, &r, n->n_in == 1 ? q + c : TL_DATA(x, n->in[1]),
                    n->n_in == 1 ? q + 2 * c : TL_DATA(x, n->in[2]), &b));
  bool started[2] = {false, false}; /* a query chunk's first block writes, later ones merge */
  for (int s = 0; s < r.cp; s++) {
    float* cur = kv_at(&b, s);
    tl_group_request* req[2] = {NULL, NULL};
    int64_t posted = 0;
    if (s + 1 < r.cp) {
      /* the transfer waits on the device for the block to be complete */
      posted = tl_time_ns();
      TL_CHECK(
          exchange(g, &r, b.wire[s % 2], b.wire[(s + 1) % 2], 2 * (size_t)r.block, r.wire, 0, req));
    }
    const int src = (r.rank - s + r.cp) % r.cp;
    for (int qi = 0; qi < 2; qi++)
      for (int ki = 0; ki < 2; ki++) {
        struct tl_attention_shape a;
        if (!pair(&r, qi, src, ki, &a)) continue;
        a.merge = started[qi];
        started[qi] = true;
        const int64_t kv = (int64_t)ki * r.h * r.kvc;
        TL_CHECK(ops->attention_forward(ctx, out + (int64_t)qi * r.h * c, lse + (int64_t)qi * r.h,
                                        q + (int64_t)qi * r.h * r.s.ldq, cur + kv,
                                        cur + r.block + kv, &a));
      }
    if (s + 1 < r.cp) {
      const int64_t computed = tl_time_ns();
      TL_CHECK(tl_group_wait_all(2, req));
      span(x, n, "ring kv", posted); /* in flight beside the attention */
      span(x, n, "ring wait", computed);
      TL_CHECK(arrived(x, &r, &b, s));
    }
  }
  return TL_OK;
}

/* backward node: fused in {dy, qkv, y, lse}, out {dqkv}; separate in {dy,
 * q, k, v, y, lse}, out {dq, dk, dv} (as attention's) */
static tl_status backward(tl_graph* g, int i) {
  const tl_node* n = &g->nodes[i];
  int in[6] = {tl__grad(g, n->out[0])}, out[3], n_in = 1;
  for (int k = 0; k < n->n_in; k++) {
    in[n_in++] = n->in[k];
    out[k] = tl__grad(g, n->in[k]);
  }
  in[n_in++] = n->out[0];
  in[n_in++] = n->out[1];
  TL_CHECK(tl__op_backward_node(g, tl__tp_ops()->cp_attention_backward, i, n_in, in, n->n_in, out));
  g->nodes[g->n_nodes - 1].flops = 2.5 * g->nodes[i].flops;
  return TL_OK;
}

static tl_status run_backward(const struct tl_run_ctx* x, const tl_node* n) {
  const tl_node* f = &x->g->nodes[n->forward_of];
  const struct ring r = ring_of(x->g, f);
  const struct tl_kernel_ops* ops = x->be->ops;
  void* ctx = x->be->ctx;
  tl_group* g;
  TL_CHECK(group_of(x, f, &r, &g));
  if (x->scratch_bytes < scratch(x->g, n))
    return TL_ERRF(TL_ERR_INVALID, "cp_attention '%s': %zu bytes of scratch; it needs %zu", f->name,
                   x->scratch_bytes, scratch(x->g, n));
  const int kk = f->n_in; /* y and lse follow the forward's inputs */
  const bool fused = kk == 1;
  const int64_t c = (int64_t)r.s.nh * r.s.hs, rows = (int64_t)r.s.b * r.s.t;
  float *dy = TL_DATA(x, n->in[0]), *q = TL_DATA(x, n->in[1]), *y = TL_DATA(x, n->in[1 + kk]),
        *lse = TL_DATA(x, n->in[2 + kk]);
  float* k = fused ? q + c : TL_DATA(x, n->in[2]);
  float* v = fused ? q + 2 * c : TL_DATA(x, n->in[3]);
  float* dq = TL_DATA(x, n->out[0]);
  float* dk = fused ? (dq ? dq + c : NULL) : TL_DATA(x, n->out[1]);
  float* dv = fused ? (dq ? dq + 2 * c : NULL) : TL_DATA(x, n->out[2]);
  if (!dq || !dk || !dv)
    return TL_ERRF(TL_ERR_INVALID, "cp_attention '%s': the ring's backward needs dq, dk and dv",
                   f->name);
  const struct kv_blocks b = kv_blocks(&r, x->scratch, true);
  TL_CHECK(pack_own(x, &r, k, v, &b));
  TL_CHECK(tl_memzero(x->be->device, b.dkv[0], sizeof(float) * 2 * (size_t)r.block));
  for (int s = 0; s < r.cp; s++) {
    float *cur = kv_at(&b, s), *dcur = b.dkv[s % 2], *dnxt = b.dkv[(s + 1) % 2];
    tl_group_request* req[2] = {NULL, NULL};
    int64_t posted = 0;
    /* k and v travel on while this rank works; dk and dv after it */
    if (s + 1 < r.cp) {
      posted = tl_time_ns();
      TL_CHECK(
          exchange(g, &r, b.wire[s % 2], b.wire[(s + 1) % 2], 2 * (size_t)r.block, r.wire, 0, req));
    }
    const int src = (r.rank - s + r.cp) % r.cp;
    for (int qi = 0; qi < 2; qi++)
      for (int ki = 0; ki < 2; ki++) {
        struct tl_attention_shape a;
        if (!pair(&r, qi, src, ki, &a)) continue;
        const int64_t kv = (int64_t)ki * r.h * r.kvc, qo = (int64_t)qi * r.h;
        TL_CHECK(ops->attention_backward(ctx, dq + qo * r.s.ldq, dcur + kv, dcur + r.block + kv,
                                         dy + qo * c, q + qo * r.s.ldq, cur + kv,
                                         cur + r.block + kv, y + qo * c, lse + qo, &a));
      }
    if (s + 1 < r.cp) {
      const int64_t computed = tl_time_ns();
      TL_CHECK(tl_group_wait_all(2, req));
      span(x, n, "ring kv", posted);
      span(x, n, "ring wait", computed);
    }
    /* this block's dk and dv go on: to the next holder, or (last) home,
     * once the device has computed them (the transfer waits there) */
    const int64_t sent = tl_time_ns();
    TL_CHECK(exchange(g, &r, dcur, dnxt, 2 * (size_t)r.block, TL_F32, 1, req));
    TL_CHECK(tl_group_wait_all(2, req));
    span(x, n, "ring dkv", sent); /* after the block's work: all of it shows */
    if (s + 1 < r.cp) TL_CHECK(arrived(x, &r, &b, s));
  }
  /* home: this rank's own block's dk and dv, from every rank's queries */
  float* home = b.dkv[r.cp % 2];
  TL_CHECK(ops->copy_2d(ctx, dk, r.s.ldkv, home, r.kvc, rows, r.kvc, true));
  return ops->copy_2d(ctx, dv, r.s.ldkv, home + r.block, r.kvc, rows, r.kvc, true);
}

const struct tl_op_def tl__tp_op_cp_attention = {.name = "cp_attention",
                                                 .n_diff_out = 1,
                                                 .infer = infer,
                                                 .run = run,
                                                 .backward = backward,
                                                 .flags = TL_OP_COLLECTIVE | TL_OP_ATTENTION_LIKE,
                                                 .scratch_bytes = scratch};
const struct tl_op_def tl__tp_op_cp_attention_backward = {.name = "cp_attention_backward",
                                                          .run = run_backward,
                                                          .flags = TL_OP_COLLECTIVE,
                                                          .scratch_bytes = scratch};
