/* calibrate.c — `trellis plan --calibrate OUT.json`: measure this machine
 * and write it as a cluster spec for the planner.
 *
 * It runs as a job of --ranks ranks, as training would: every rank measures
 * at the same time (so ranks share the machine as they will when training;
 * the job meets before each kernel is timed, so that every rank times the
 * same one at once) its backend's matmul over a grid of shapes (the spec's
 * GEMM table, its best rate the peak), the attention kernels and the
 * element-wise ops (their fractions of the peak) and AdamW over a shard
 * beyond the caches (the spec's memory_bandwidth), then the job measures
 * all-reduce bus bandwidth on 4 MiB (the median of its rounds) and the
 * latency per message of the planner's all-reduce (2 log2 n messages,
 * planner/cost.h). Rank 0 writes
 * the spec (atomically) with a comment saying what was measured.
 *
 * Attention is also measured by head dimension and sequence length (the
 * spec's attention_efficiency_table: a model's attention is priced at its
 * own shape's; a head dimension of 8 runs several times slower than 64).
 *
 * --device cpu (default; ranks default the online cores): the CPU backend's
 * fp32 matmul at m, n, k in 32..2048; attention at (b 2, t 256, c 256, 4
 * heads), and by head dimension 8..64 and t 64..1024; the latency is what
 * a 4-byte all-reduce adds to ranks that compute between messages (on a
 * core per rank the bare latency; with more ranks than cores it holds the
 * scheduling delays). With more ranks a node than cores, also how fast a
 * rank computes while only 1, 2, ... of them do, the others waiting on a
 * receive (shared_core_speed: a pipeline's bubble). Memory per device is
 * an assumption: half the machine's RAM divided among the ranks.
 *
 * --device cuda (ranks default the node's GPUs, one each): the CUDA
 * backend's bf16 matmul as bf16 training runs it (operands narrowed, cuBLAS
 * in bf16 with fp32 sums) at m, n, k in 128..8192, its best the bf16 peak,
 * and the fp32 matmul's best for the fp32 peak; attention at GPT-2's (b 4,
 * t 1024, c 768, 12 heads), and by head dimension 32..256 and t
 * 256..4096; all-reduce over the ranks' NCCL group, the
 * latency a 4-byte one's (median) per message. The device's memory is the
 * driver's figure, and the reserve what the process holds beyond its
 * tensors once the CUDA context, cuBLAS and NCCL are up and have run
 * (measured, the largest over the ranks). The attention and element-wise
 * fractions are of the bf16 peak, which the planner prices those kernels
 * against in fp32 plans too (they compute in fp32 either way:
 * tl_cluster_kernel_peak); an fp32 plan reads the GEMM table's shape
 * fractions, the bf16 matmul's, against the fp32 peak.
 *
 * A job across nodes (the same number of ranks on each) measures each link
 * on its own: intra_node over every node's ranks at once, inter_node over
 * every rail at once (rank i of each node: data-parallel groups across
 * nodes run so, each rank through its own share of the node's network);
 * the spec says the job's nodes and ranks a node. */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/atomic_file.h"
#include "core/rng.h"
#include "core/timer.h"
#include "kernels/backend.h"
#include "launcher/cli/cli.h"
#include "launcher/job/spawn.h"
#include "launcher/job/worker.h"
#include "planner/cluster.h"

/* The GEMM table's sizes on each axis (m, n, k), as trellis plan writes
 * them: a block of a small GPT on a CPU multiplies (B*T, C..4C, C..4C); on
 * a GPU, GPT-2's (8192, 768..3072, 768..3072) and beyond. */
#define GRID 4
#define N_GEMM (GRID * GRID * GRID)
static const int kCpuGrid[GRID] = {32, 128, 512, 2048};
static const int kGpuGrid[GRID] = {128, 512, 2048, 8192};

/* The attention table's head dimensions and sequence lengths: attention
 * of bench_shapes.attn_heads heads over attn_tokens / t sequences of t
 * tokens. */
#define ATT_HD 4
#define ATT_T 3
#define N_ATT (ATT_HD * ATT_T)
static const int kCpuHeadDims[ATT_HD] = {8, 16, 32, 64}, kCpuSeqs[ATT_T] = {64, 256, 1024};
static const int kGpuHeadDims[ATT_HD] = {32, 64, 128, 256}, kGpuSeqs[ATT_T] = {256, 1024, 4096};

/* What one device kind is measured at. */
struct bench_shapes {
  const int* grid;
  int attention[4]; /* b, t, c, heads */
  int rows, c;      /* the element-wise ops' */
  const int *head_dims, *seqs;
  int attn_heads, attn_tokens;
};
static const struct bench_shapes kCpuShapes = {kCpuGrid,     {2, 256, 256, 4}, 512, 256,
                                               kCpuHeadDims, kCpuSeqs,         4,   1024};
static const struct bench_shapes kGpuShapes = {kGpuGrid,     {4, 1024, 768, 12}, 8192, 768,
                                               kGpuHeadDims, kGpuSeqs,           8,    4096};

/* GFLOP/s of fn run over and over (at least 3 calls and 50 ms; `flops` a
 * call), on the backend's stream as training issues them: the clock stops
 * when the device has finished. */
typedef tl_status (*bench_fn)(tl_backend* be, float* const* buf, const int* shape);
static tl_status rate(tl_backend* be, tl_group* sync, bench_fn fn, float* const* buf,
                      const int* shape, double flops, double* gflops) {
  TL_CHECK(fn(be, buf, shape)); /* warm up */
  TL_CHECK(be->ops->synchronize(be->ctx));
  /* the job meets: every rank times the same kernel at once */
  if (sync) TL_CHECK(tl_group_barrier(sync, NULL));
  tl_timer t;
  tl_timer_start(&t);
  int iters = 0;
  tl_status st = TL_OK;
  while (st == TL_OK && (iters < 3 || tl_timer_elapsed_s(&t) < 0.05)) {
    st = fn(be, buf, shape);
    iters++;
  }
  if (st == TL_OK) st = be->ops->synchronize(be->ctx);
  *gflops = flops * iters / tl_timer_elapsed_s(&t) * 1e-9;
  return st;
}

/* x (m, k) times W^T, W (n, k): a linear layer's forward */
static tl_status bench_gemm(tl_backend* be, float* const* buf, const int* s) {
  return be->ops->matmul(be->ctx, buf[2], buf[0], buf[1], NULL, s[0], s[1], s[2], false, true,
                         false);
}

/* the same in bf16, as a bf16 graph multiplies on this backend */
static tl_status bench_gemm_bf16(tl_backend* be, float* const* buf, const int* s) {
  return be->ops->matmul_bf16(be->ctx, buf[2], buf[0], buf[1], NULL, s[0], s[1], s[2], false, true,
                              false);
}

/* causal attention, forward and backward, on qkv (b, t, 3c) of nh heads */
static tl_status bench_attention(tl_backend* be, float* const* buf, const int* s) {
  float *qkv = buf[0], *out = buf[1], *lse = buf[2], *dqkv = buf[3], *dout = buf[1];
  TL_CHECK(be->ops->attention_forward(be->ctx, out, lse, qkv, s[0], s[1], s[2], s[3]));
  return be->ops->attention_backward(be->ctx, dqkv, dout, qkv, out, lse, s[0], s[1], s[2], s[3]);
}

/* the element-wise rest of a block: a LayerNorm (forward and backward) on
 * (rows, c) and GELU on (rows, 4c) */
static tl_status bench_elementwise(tl_backend* be, float* const* buf, const int* s) {
  const int rows = s[0], c = s[1];
  float *x = buf[0], *y = buf[1], *w = buf[2], *stats = buf[3], *dx = buf[4];
  TL_CHECK(be->ops->layernorm_forward(be->ctx, y, stats, stats + rows, x, w, w + c, rows, c));
  TL_CHECK(be->ops->layernorm_backward(be->ctx, dx, w + 2 * c, w + 3 * c, y, x, w, stats,
                                       stats + rows, rows, c));
  TL_CHECK(be->ops->gelu_forward(be->ctx, y, x, (int64_t)rows * 4 * c));
  return be->ops->gelu_backward(be->ctx, dx, x, y, (int64_t)rows * 4 * c);
}

/* Floats in each of measure()'s buffers: the largest operand it runs. */
static size_t buffer_elems(const struct bench_shapes* sh) {
  const int top = sh->grid[GRID - 1];
  const int* a = sh->attention;
  size_t big = (size_t)top * top;
  size_t qkv = (size_t)a[0] * a[1] * 3 * a[2], rows = (size_t)sh->rows * 4 * sh->c;
  size_t qkv_table = (size_t)sh->attn_tokens * 3 * sh->attn_heads * sh->head_dims[ATT_HD - 1];
  if (qkv > big) big = qkv;
  if (qkv_table > big) big = qkv_table;
  if (rows > big) big = rows;
  return big;
}

/* the optimizer's update: one AdamW step over s[0] parameters (buf[0]
 * the weights, buf[1] their gradients, buf[2] and buf[3] the moments) */
static tl_status bench_adamw(tl_backend* be, float* const* buf, const int* s) {
  return be->ops->adamw(be->ctx, buf[0], buf[1], buf[2], buf[3], s[0], 1e-3f, 0.9f, 0.95f, 1e-8f,
                        0.1f, 1);
}

/* AdamW's bytes a second (GB/s of the 28 bytes a parameter it reads and
 * writes: the spec's memory_bandwidth, with which planner/cost.h prices the
 * update's 36) on this rank over n parameters (beyond the caches, as a
 * model's shard is), every rank of the job at once: the job meets first,
 * as ranks reach the optimizer together after a step's last collective
 * (measure()'s later kernels find the ranks at different points). */
static tl_status optimizer_rate(tl_backend* be, tl_group* world, size_t n, double* gbps) {
  tl_buffer* mem[4] = {NULL, NULL, NULL, NULL};
  float* buf[4];
  /* buffers start zeroed (core/alloc.h): weights and moments at 0; the
   * gradients are copied in */
  float* host = malloc(n * sizeof(float));
  tl_status st = host && n <= INT_MAX ? TL_OK : TL_ERRF(TL_ERR_NOMEM, "out of memory calibrating");
  for (int i = 0; i < 4 && st == TL_OK; i++) {
    st = tl_buffer_create(be->device, n * sizeof(float), &mem[i]);
    if (st == TL_OK) buf[i] = (float*)mem[i]->data;
  }
  for (size_t j = 0; host && j < n; j++) host[j] = (j & 1) ? 0.5f : -0.25f;
  if (st == TL_OK) st = tl_memcpy(be->device, buf[1], tl_cpu(), host, n * sizeof(float));
  int shape[1] = {(int)n};
  if (st == TL_OK) st = rate(be, world, bench_adamw, buf, shape, 28.0 * (double)n, gbps);
  free(host);
  for (int i = 0; i < 4; i++) tl_buffer_destroy(mem[i]);
  return st;
}

/* What this rank's backend reaches: GFLOP/s of the matmul (bf16 where the
 * backend multiplies bf16 itself) at every point of the grid (gemm[(i *
 * GRID + j) * GRID + l] at m = grid[i], n = grid[j], k = grid[l]), of the
 * fp32 matmul at the grid's largest shape, of attention's forward and
 * backward and of the element-wise ops, each counted as the graph counts
 * its FLOPs (graph/ops/). */
static tl_status measure(tl_backend* be, tl_group* sync, const struct bench_shapes* sh,
                         double* gemm, double* fp32, double* attention, double* attn_table,
                         double* elementwise) {
  const int* a = sh->attention;
  const int top = sh->grid[GRID - 1];
  const size_t big = buffer_elems(sh);
  tl_buffer* mem[5] = {NULL, NULL, NULL, NULL, NULL};
  float* buf[5];
  tl_status st = TL_OK;
  for (int i = 0; i < 5 && st == TL_OK; i++) {
    st = tl_buffer_create(be->device, big * sizeof(float), &mem[i]);
    if (st == TL_OK) buf[i] = (float*)mem[i]->data;
  }
  float* host = st == TL_OK ? malloc(big * sizeof(float)) : NULL;
  if (st == TL_OK && !host) st = TL_ERRF(TL_ERR_NOMEM, "out of memory calibrating");
  for (int i = 0; i < 2 && st == TL_OK; i++) {
    tl_rng_normal(1, (uint32_t)i, 0, big, 0, 1, host);
    st = tl_memcpy(be->device, buf[i], tl_cpu(), host, big * sizeof(float));
  }
  bench_fn gemm_fn = be->ops->matmul_bf16 ? bench_gemm_bf16 : bench_gemm;
  for (int i = 0; i < GRID && st == TL_OK; i++)
    for (int j = 0; j < GRID && st == TL_OK; j++)
      for (int l = 0; l < GRID && st == TL_OK; l++) {
        int shape[3] = {sh->grid[i], sh->grid[j], sh->grid[l]};
        st = rate(be, sync, gemm_fn, buf, shape, 2.0 * shape[0] * shape[1] * shape[2],
                  &gemm[(i * GRID + j) * GRID + l]);
      }
  *fp32 = st == TL_OK ? gemm[N_GEMM - 1] : 0;
  if (st == TL_OK && gemm_fn != bench_gemm) {
    int shape[3] = {top, top, top};
    st = rate(be, sync, bench_gemm, buf, shape, 2.0 * top * top * (double)top, fp32);
  }
  if (st == TL_OK) {
    int shape[4] = {a[0], a[1], a[2], a[3]};
    /* graph/ops/attention.c: 2 b t^2 c forward (the causal half), 2.5x backward */
    st = rate(be, sync, bench_attention, buf, shape, 3.5 * 2.0 * a[0] * a[1] * (double)a[1] * a[2],
              attention);
  }
  /* the table: by head dimension (major) and sequence length */
  for (int i = 0; i < ATT_HD && st == TL_OK; i++)
    for (int j = 0; j < ATT_T && st == TL_OK; j++) {
      const int t = sh->seqs[j], b = sh->attn_tokens / t > 1 ? sh->attn_tokens / t : 1;
      const int c = sh->attn_heads * sh->head_dims[i];
      int shape[4] = {b, t, c, sh->attn_heads};
      st = rate(be, sync, bench_attention, buf, shape, 3.5 * 2.0 * b * t * (double)t * c,
                &attn_table[i * ATT_T + j]);
    }
  if (st == TL_OK) {
    const int r = sh->rows, c = sh->c;
    int shape[2] = {r, c};
    for (int i = 0; i < 4 * c; i++) host[i] = 1; /* LayerNorm's weight and bias */
    st = tl_memcpy(be->device, buf[2], tl_cpu(), host, 4 * (size_t)c * sizeof(float));
    /* LayerNorm 8 a element forward, GELU 10, each backward twice its forward */
    if (st == TL_OK)
      st = rate(be, sync, bench_elementwise, buf, shape,
                3.0 * (8.0 * r * c + 10.0 * (double)r * 4 * c), elementwise);
  }
  free(host);
  for (int i = 0; i < 5; i++) tl_buffer_destroy(mem[i]);
  return st;
}

static double min_fraction(const double* rates, double peak) {
  double lo = 1;
  for (int i = 0; i < N_GEMM; i++) lo = fmin(lo, rates[i] / peak);
  return lo;
}

static int by_double(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

/* The collectives calibrate times: the all-reduce (the links' bandwidth
 * and latency), and the all-gather, reduce-scatter and point-to-point
 * send, whose bus bandwidth the spec keeps as shares of the all-reduce's. */
enum coll { COLL_ALL_REDUCE, COLL_ALL_GATHER, COLL_REDUCE_SCATTER, COLL_SEND_RECV };

/* One `kind` of `count` floats over the group: all of them for the
 * collectives (the all-gather assembles count, the reduce-scatter reduces
 * count); a send of count from each even member to the next, which
 * receives it (pairs: both backends match a blocking send so). */
static tl_status collective(tl_group* g, enum coll kind, float* buf, size_t count) {
  const int n = tl_group_size(g), r = tl_group_rank(g);
  size_t off = 0, mine = count;
  if (kind == COLL_ALL_GATHER || kind == COLL_REDUCE_SCATTER)
    tl_group_chunk(count, n, r, &off, &mine);
  switch (kind) {
    case COLL_ALL_REDUCE:
      return tl_group_all_reduce(g, buf, buf, count, TL_F32, TL_REDUCE_SUM, NULL);
    case COLL_ALL_GATHER:
      return tl_group_all_gather(g, buf + off, buf, count, TL_F32, NULL);
    case COLL_REDUCE_SCATTER:
      return tl_group_reduce_scatter(g, buf, buf + off, count, TL_F32, TL_REDUCE_SUM, NULL);
    case COLL_SEND_RECV:
      if (r % 2 == 0 && r + 1 < n) return tl_group_send(g, buf, count, TL_F32, r + 1, 0, NULL);
      if (r % 2 == 1) return tl_group_recv(g, buf, count, TL_F32, r - 1, 0, NULL);
      return TL_OK;
  }
  return TL_OK;
}

/* Seconds per collective of `count` floats over the group, on `device`'s
 * memory, for the first `kinds` of enum coll: the median of `rounds` (at
 * most 64), each collective started together after a barrier — what a
 * message costs in a step, not the best case. A round runs every kind in
 * turn, so a busy spell on a shared machine weighs on them alike. */
static tl_status collective_times(tl_group* g, tl_device device, int kinds, size_t count,
                                  int rounds, double* median) {
  tl_buffer* b = NULL;
  TL_CHECK(tl_buffer_create(device, count * sizeof(float), &b));
  float* buf = (float*)b->data;
  tl_status st = TL_OK;
  double s[4][64];
  if (rounds > 64) rounds = 64;
  int done = 0;
  for (; done < rounds && st == TL_OK; done++)
    for (int k = 0; k < kinds && st == TL_OK; k++) {
      st = tl_group_barrier(g, NULL);
      tl_timer t;
      tl_timer_start(&t);
      if (st == TL_OK) st = collective(g, (enum coll)k, buf, count);
      s[k][done] = tl_timer_elapsed_s(&t);
    }
  for (int k = 0; k < kinds && st == TL_OK; k++) {
    qsort(s[k], (size_t)done, sizeof(double), by_double);
    median[k] = s[k][done / 2];
  }
  tl_buffer_destroy(b);
  return st;
}

/* The small matmul (64 x 256 times 256 x 256) the job runs between its
 * messages in busy_allreduce_time and shared_speeds: a rank's arithmetic
 * as training interleaves it with communication. */
struct small_matmul {
  tl_backend* be;
  float *a, *b, *c;
};
#define SM_M 64
#define SM_K 256
#define SM_N 256

static tl_status small_matmul_open(struct small_matmul* s) {
  memset(s, 0, sizeof *s);
  TL_CHECK(tl_backend_create(tl_cpu(), &s->be));
  s->a = calloc((size_t)SM_M * SM_K, sizeof(float));
  s->b = calloc((size_t)SM_N * SM_K, sizeof(float));
  s->c = calloc((size_t)SM_M * SM_N, sizeof(float));
  return s->a && s->b && s->c ? TL_OK : TL_ERRF(TL_ERR_NOMEM, "out of memory calibrating");
}

static tl_status small_matmul_run(struct small_matmul* s) {
  return s->be->ops->matmul(s->be->ctx, s->c, s->a, s->b, NULL, SM_M, SM_N, SM_K, false, true,
                            false);
}

static void small_matmul_close(struct small_matmul* s) {
  free(s->a), free(s->b), free(s->c);
  tl_backend_destroy(s->be);
}

/* What an all-reduce of 4 bytes adds to a job that computes between its
 * messages, as training does: `rounds` small matmuls on every rank with an
 * all-reduce after each, against the same matmuls without them; seconds per
 * all-reduce (the difference of the job's times, each its slowest rank's). With a core per rank
 * this is about the bare latency; with more ranks than cores it also holds the wait for members
 * that the scheduler has put behind another rank's arithmetic, which a bare ping-pong of idle ranks
 * never sees. */
static tl_status busy_allreduce_time(tl_group* g, double* per_call) {
  const int rounds = 100;
  struct small_matmul mm;
  tl_status st = small_matmul_open(&mm);
  double t[2] = {0, 0};
  for (int pass = 0; pass < 2 && st == TL_OK; pass++) {
    float x = 1;
    st = tl_group_barrier(g, NULL);
    tl_timer tm;
    tl_timer_start(&tm);
    for (int r = 0; r < rounds && st == TL_OK; r++) {
      st = small_matmul_run(&mm);
      if (st == TL_OK && pass) st = tl_group_all_reduce(g, &x, &x, 1, TL_F32, TL_REDUCE_SUM, NULL);
    }
    t[pass] = tl_timer_elapsed_s(&tm);
  }
  if (st == TL_OK) {
    /* the job's time each way (its slowest rank's): a rank's own pass
     * without messages may have had a core to itself while others waited
     * for theirs, which says nothing of what the messages cost */
    float job[2] = {(float)t[0], (float)t[1]};
    st = tl_group_all_reduce(g, job, job, 2, TL_F32, TL_REDUCE_MAX, NULL);
    const double d = ((double)job[1] - job[0]) / rounds;
    *per_call = d > 0 ? d : 0;
  }
  small_matmul_close(&mm);
  return st;
}

/* How fast a rank computes while only `a` of its node's n ranks do, the
 * others waiting on a receive as a pipeline stage waits out its bubble,
 * against all n computing: speed[a - 1] for a = 1 .. n (speed[n - 1] = 1),
 * on the node's group `g` (CPU, ranks sharing cores). Ranks 0 .. a-1 each
 * run the same matmuls and report their time to rank 0; rank 0 then sends
 * the slowest time to every rank, which frees the waiting ones for the
 * next count. The best of 3 rounds per count, the counts taken in turn. */
#define SHARED_ROUNDS 3
static tl_status shared_speeds(tl_group* g, double* speed) {
  const int calls = 192;
  const int size = tl_group_size(g), me = tl_group_rank(g);
  struct small_matmul mm;
  tl_status st = small_matmul_open(&mm);
  double best[TL_SHARED_SPEED_MAX];
  if (st == TL_OK) st = tl_group_barrier(g, NULL);
  for (int active = 1; active <= size; active++) best[active - 1] = HUGE_VAL;
  /* round by round, every count in turn (all computing first: the rate the
   * others are measured against), so a busy spell weighs on them alike */
  for (int round = 0; round < SHARED_ROUNDS && st == TL_OK; round++)
    for (int active = size; active >= 1 && st == TL_OK; active--) {
      float mine = 0, slowest = 0;
      if (me < active) {
        tl_timer tm;
        tl_timer_start(&tm);
        for (int i = 0; i < calls && st == TL_OK; i++) st = small_matmul_run(&mm);
        mine = (float)tl_timer_elapsed_s(&tm);
      }
      if (st != TL_OK) break;
      if (me == 0) {
        slowest = mine;
        for (int r = 1; r < active && st == TL_OK; r++) {
          float t = 0;
          st = tl_group_recv(g, &t, 1, TL_F32, r, 1, NULL);
          slowest = fmaxf(slowest, t);
        }
        for (int r = 1; r < size && st == TL_OK; r++)
          st = tl_group_send(g, &slowest, 1, TL_F32, r, 2, NULL);
      } else {
        if (me < active) st = tl_group_send(g, &mine, 1, TL_F32, 0, 1, NULL);
        if (st == TL_OK) st = tl_group_recv(g, &slowest, 1, TL_F32, 0, 2, NULL);
      }
      best[active - 1] = fmin(best[active - 1], slowest);
    }
  for (int i = 0; i < size && st == TL_OK; i++)
    speed[i] = best[i] > 0 ? best[size - 1] / best[i] : 1;
  small_matmul_close(&mm);
  return st;
}

/* The job's mean of v[0..n) (in place), or its maximum. */
_Static_assert(TL_SHARED_SPEED_MAX <= N_GEMM + N_ATT + 8, "job_reduce holds a node's speeds");
static tl_status job_reduce(tl_group* world, int size, double* v, int n, tl_reduce_op op) {
  if (size < 2) return TL_OK;
  float f[N_GEMM + N_ATT + 8] = {0};
  for (int i = 0; i < n; i++) f[i] = (float)v[i];
  TL_CHECK(tl_group_all_reduce(world, f, f, (size_t)n, TL_F32, op, NULL));
  for (int i = 0; i < n; i++) v[i] = op == TL_REDUCE_SUM ? f[i] / size : f[i];
  return TL_OK;
}

/* A link as the planner reads it (intra_node or inter_node), measured over
 * one kind of group, every group of the kind at once as training runs them
 * (the nodes' own groups; the rails, one rank a node): the all-reduce's bus
 * bandwidth on 4 MiB and its latency per message, and the all-gather's,
 * reduce-scatter's and a send's bus bandwidth as shares of it. */
struct link_figures {
  int n;               /* each group's members; below 2 nothing is measured */
  double bus, latency; /* bytes/s; seconds per message */
  double small, busy;  /* a 4-byte all-reduce idle (median) and between matmuls (CPU) */
  double share_gather, share_scatter, share_send;
};

/* Collective over the job (`world`, `size` ranks): g is this rank's group
 * of the kind measured. Every figure is the slowest rank's. */
static tl_status measure_link(tl_group* g, tl_group* world, int size, tl_device device,
                              struct link_figures* l) {
  const bool gpu = device.type == TL_DEVICE_CUDA;
  const int n = tl_group_size(g);
  memset(l, 0, sizeof *l);
  l->n = n;
  l->share_gather = l->share_scatter = l->share_send = 1;
  if (n < 2) return TL_OK;
  TL_CHECK(collective_times(g, device, 1, 1, 51, &l->small));
  if (!gpu) {
    /* the median of 3: a busy spell on a shared machine moves one of them */
    double b[3];
    for (int i = 0; i < 3; i++) TL_CHECK(busy_allreduce_time(g, &b[i]));
    qsort(b, 3, sizeof b[0], by_double);
    l->busy = b[1];
  }
  /* a count the ranks divide: NCCL's all-gather and reduce-scatter of
   * uneven chunks fall back to broadcasts and reduces (core/group_nccl.c) */
  const size_t big = (4u << 20) / sizeof(float), even = big - big % (size_t)n;
  double t[6] = {0, 0, 0, 0, 0, 0};
  TL_CHECK(collective_times(g, device, 4, even, 11, t));
  t[4] = l->small, t[5] = l->busy;
  /* the pairs' sends and the rest differ by rank */
  TL_CHECK(job_reduce(world, size, t, 6, TL_REDUCE_MAX));
  l->small = t[4], l->busy = t[5];
  const double bytes = (double)even * sizeof(float);
  l->bus = 2.0 * (n - 1) / n * bytes / t[0]; /* ring all-reduce steps */
  l->share_gather = (double)(n - 1) / n * bytes / t[1] / l->bus;
  l->share_scatter = (double)(n - 1) / n * bytes / t[2] / l->bus;
  l->share_send = bytes / t[3] / l->bus;
  /* per message of the planner's all-reduce (planner/cost.h): NCCL's ring,
   * 2 (n - 1); MPICH's halving and doubling, 2 log2 n */
  const double messages = gpu ? 2.0 * (n - 1) : 2.0 * ceil(log2((double)n));
  l->latency = (gpu ? l->small : l->busy) / messages;
  return TL_OK;
}

/* The figures rank 0 writes. */
struct calibration {
  int ranks, threads, nodes, per_node;
  int cores; /* CPU: the online cores of rank 0's node, which its ranks share */
  /* CPU, more ranks a node than cores: what one of a computing ranks gets
   * over what it gets while all compute (shared_speeds), a = 1 .. per_node,
   * the mean over the nodes; 0 entries when not measured */
  int n_speed;
  double speed[TL_SHARED_SPEED_MAX];
  tl_device_type device;
  char gpu[128];
  const int* grid;
  double gemm[N_GEMM];      /* GFLOP/s, the ranks' mean */
  double attn_table[N_ATT]; /* GFLOP/s by head dimension and sequence length */
  double peak, slowest, fp32, attention, elementwise;
  double optimizer; /* AdamW's bytes moved a second, GB/s (the ranks' mean) */
  /* inside a node and between nodes (one node: the same figures); the
   * spec's collective shares are those of the link the job's data-parallel
   * and pipeline traffic crosses: inter's on several nodes */
  struct link_figures intra, inter;
  double memory, reserve;
};

/* One link's figures in words, for the spec's comment. */
static void describe_link(const struct link_figures* l, bool gpu, const char* over, char* buf,
                          size_t size) {
  if (gpu)
    snprintf(buf, size,
             "all-reduce over %s (NCCL): bus bandwidth %.3g bytes/s on 4 MiB (the slowest "
             "rank's median); latency %.3g s per message, a 4-byte all-reduce's %.3g s (median) "
             "over the ring's 2 (n - 1) = %d messages",
             over, l->bus, l->latency, l->small, 2 * (l->n - 1));
  else
    snprintf(buf, size,
             "all-reduce over %s: bus bandwidth %.3g bytes/s on 4 MiB (the slowest rank's "
             "median); latency %.3g s per message: a 4-byte all-reduce takes %.3g s between "
             "small matmuls on every rank (the median of 3), against %.3g s (median) on idle ranks",
             over, l->bus, l->latency, l->busy, l->small);
}

static tl_status write_spec(const struct calibration* k, const char* out) {
  const bool gpu = k->device == TL_DEVICE_CUDA;
  const int n = k->ranks;
  char axis[64] = "", table[2048] = "", what[1024], net[1600], mem[1024];
  for (int i = 0; i < GRID; i++)
    snprintf(axis + strlen(axis), sizeof axis - strlen(axis), "%s%d", i ? ", " : "", k->grid[i]);
  for (int i = 0; i < N_GEMM; i++)
    snprintf(table + strlen(table), sizeof table - strlen(table), "%s%s%.4g", i ? "," : "",
             i % GRID == 0 ? "\n      " : " ", fmax(1e-6, k->gemm[i] / k->peak));
  const struct bench_shapes* shapes = gpu ? &kGpuShapes : &kCpuShapes;
  char hd[64] = "", seqs[64] = "", attn[512] = "";
  for (int i = 0; i < ATT_HD; i++)
    snprintf(hd + strlen(hd), sizeof hd - strlen(hd), "%s%d", i ? ", " : "", shapes->head_dims[i]);
  for (int j = 0; j < ATT_T; j++)
    snprintf(seqs + strlen(seqs), sizeof seqs - strlen(seqs), "%s%d", j ? ", " : "",
             shapes->seqs[j]);
  for (int i = 0; i < N_ATT; i++)
    snprintf(attn + strlen(attn), sizeof attn - strlen(attn), "%s%.4g", i ? ", " : "",
             fmax(1e-6, fmin(1, k->attn_table[i] / k->peak)));
  const int* a = shapes->attention;
  const int rows = gpu ? kGpuShapes.rows : kCpuShapes.rows, c = gpu ? kGpuShapes.c : kCpuShapes.c;
  if (gpu)
    snprintf(what, sizeof what,
             "Measured by trellis plan --calibrate --device cuda on %d rank%s, one %s each, all "
             "at once: the CUDA backend's bf16 matmul (operands narrowed to bf16, cuBLAS with "
             "fp32 sums, as bf16 training multiplies) at %d shapes (m, n, k in %s), %.1f "
             "GFLOP/s per GPU at best (the bf16 peak; slowest rank %.1f), each shape's rate a "
             "fraction of it in gemm_efficiency; the fp32 matmul at %d^3, %.1f GFLOP/s (the fp32 "
             "peak). The table and the attention and element-wise fractions are of the bf16 peak "
             "(attention and the element-wise kernels compute in fp32 in either precision, and "
             "are priced against it in fp32 plans too; an fp32 plan reads the table's fractions "
             "against the fp32 peak)",
             n, n == 1 ? "" : "s", k->gpu, N_GEMM, axis, k->peak, k->slowest, k->grid[GRID - 1],
             k->fp32);
  else
    snprintf(what, sizeof what,
             "Measured by trellis plan --calibrate on %d rank%s with %d CPU thread%s each, all "
             "at once: the CPU backend's matmul at %d shapes (m, n, k in %s), %.1f GFLOP/s per "
             "rank at best (the peak; slowest rank %.1f), each shape's rate a fraction of it in "
             "gemm_efficiency",
             n, n == 1 ? "" : "s", k->threads, k->threads == 1 ? "" : "s", N_GEMM, axis, k->peak,
             k->slowest);
  if (n < 2) {
    snprintf(net, sizeof net,
             "one rank, so no link was measured: intra_node and inter_node are placeholders "
             "(1e9 bytes/s, 1e-6 s) that plans on this one device never use");
  } else if (k->nodes == 1) {
    char l[640];
    describe_link(&k->intra, gpu, "the job's ranks", l, sizeof l);
    snprintf(net, sizeof net, "intra_node: %s; inter_node is the same figure (one node measured)",
             l);
  } else {
    char in[640] = "", across[640];
    if (k->per_node > 1)
      describe_link(&k->intra, gpu, "each node's ranks, every node at once", in, sizeof in);
    describe_link(&k->inter, gpu,
                  "each rail (one rank of every node), every rail at once, as data-parallel "
                  "groups across nodes run",
                  across, sizeof across);
    snprintf(net, sizeof net, "%d nodes of %d rank%s: intra_node: %s; inter_node: %s", k->nodes,
             k->per_node, k->per_node == 1 ? "" : "s",
             k->per_node > 1 ? in
                             : "the inter-node figure (one rank a node: no group lies within "
                               "a node)",
             across);
  }
  if (gpu)
    snprintf(mem, sizeof mem,
             "device_memory_bytes is the driver's figure; reserve_bytes is what the process held "
             "on its GPU beyond its tensors once the CUDA context, cuBLAS and NCCL were up and "
             "had run (the most over the ranks); allocator_overhead is 0, trellis's "
             "allocator caching no blocks");
  /* the planner takes a rated rank to have run the trainer's automatic
   * threads (cores / ranks, at least 1); rates measured with another count
   * say nothing of how the cores are shared */
  const int auto_threads = k->cores / k->per_node > 1 ? k->cores / k->per_node : 1;
  const bool write_cores = !gpu && k->threads == auto_threads;
  if (!gpu && write_cores)
    snprintf(mem, sizeof mem,
             "device_memory_bytes is an assumption: half the machine's RAM divided among the "
             "ranks on it. cores_per_node: the node's online cores, which its %d rank%s %s",
             k->per_node, k->per_node == 1 ? "" : "s",
             k->per_node <= k->cores ? "use without sharing"
             : k->n_speed > 0
                 ? "share: the rates above are each rank's while all compute, and a rank idle in "
                   "a pipeline's bubble lends its share to the busy ones. shared_core_speed: how "
                   "much faster one of 1, 2, ... of them computes (the backend's 64 x 256 x 256 "
                   "matmul) while the others wait on a receive, against all computing (the best "
                   "of 3 rounds, the slowest computing rank's time)"
                 : "share: the rates above are each rank's while all compute, and a rank idle in "
                   "a pipeline's bubble lends its share to the busy ones (no shared_core_speed "
                   "measured: more than 64 ranks a node, or nodes unlike in cores or threads)");
  else if (!gpu)
    snprintf(mem, sizeof mem,
             "device_memory_bytes is an assumption: half the machine's RAM divided among the "
             "ranks on it. No cores_per_node: the ranks ran %d thread%s each, not the automatic "
             "%d the planner prices a share of the node's %d cores with",
             k->threads, k->threads == 1 ? "" : "s", auto_threads, k->cores);
  char shares[256] = "";
  if (n > 1)
    snprintf(shares, sizeof shares,
             "; collective_bandwidth: the all-gather's, reduce-scatter's and a send's bus "
             "bandwidth on 4 MiB (median, the slowest rank's; sends from each even rank to the "
             "next) as shares of the all-reduce's, %s",
             k->nodes > 1 ? "across nodes (over the rails)" : "over the job's ranks");
  char cores[1024] = "";
  if (write_cores) snprintf(cores, sizeof cores, ",\n  \"cores_per_node\": %d", k->cores);
  if (write_cores && k->n_speed > 0) {
    snprintf(cores + strlen(cores), sizeof cores - strlen(cores), ",\n  \"shared_core_speed\": [");
    for (int i = 0; i < k->n_speed; i++)
      snprintf(cores + strlen(cores), sizeof cores - strlen(cores), "%s%.3g", i ? ", " : "",
               k->speed[i]);
    snprintf(cores + strlen(cores), sizeof cores - strlen(cores), "]");
  }
  char peaks[128];
  if (gpu)
    snprintf(peaks, sizeof peaks, "{\"fp32\": %.4g, \"bf16\": %.4g}", k->fp32 * 1e9, k->peak * 1e9);
  else
    snprintf(peaks, sizeof peaks, "{\"fp32\": %.4g}", k->peak * 1e9);
  /* a link not measured (one rank): placeholders no plan uses */
  const struct link_figures *li = &k->intra, *le = &k->inter;
  const struct link_figures* shared = k->nodes > 1 ? le : li;
  const double bw_in = li->bus > 0 ? li->bus : 1e9, lat_in = li->latency > 0 ? li->latency : 1e-6;
  const double bw_out = le->bus > 0 ? le->bus : 1e9, lat_out = le->latency > 0 ? le->latency : 1e-6;
  char json[16384];
  snprintf(json, sizeof json,
           "{\n  \"name\": \"this_machine\",\n  \"comment\": \"%s; attention forward and "
           "backward (b %d, t %d, c %d, %d heads) at %.2f GFLOP/s, LayerNorm and GELU forward and "
           "backward (%d rows of %d) at %.2f GFLOP/s, as the graph counts their FLOPs "
           "(attention_efficiency and compute_efficiency, the latter for every node but the "
           "matrix products and attention); attention_efficiency_table: attention of %d heads "
           "by head dimension and sequence length, %d tokens a call, each a fraction of the "
           "peak (a model's attention is priced at its own shape's); memory_bandwidth: AdamW "
           "over %d parameters, every rank at once, at %.3g bytes/s of the 28 bytes a "
           "parameter it reads and writes; %s%s. %s.\",\n"
           "  \"device\": \"%s\",\n"
           "  \"nodes\": %d,\n  \"devices_per_node\": %d,\n  \"device_memory_bytes\": %.0f,\n"
           "  \"peak_flops\": %s,\n"
           "  \"intra_node\": {\"bandwidth\": %.4g, \"latency\": %.4g},\n"
           "  \"inter_node\": {\"bandwidth\": %.4g, \"latency\": %.4g},\n"
           "  \"collective_bandwidth\": {\"all_gather\": %.4g, \"reduce_scatter\": %.4g, "
           "\"send_recv\": %.4g},\n"
           "  \"compute_efficiency\": %.4g,\n  \"attention_efficiency\": %.4g,\n"
           "  \"attention_efficiency_table\": {\"head_dim\": [%s], \"seq\": [%s],\n"
           "    \"efficiency\": [%s]},\n"
           "  \"gemm_efficiency\": {\n    \"m\": [%s], \"n\": [%s], \"k\": [%s],\n"
           "    \"efficiency\": [%s]\n  },\n"
           "  \"reserve_bytes\": %.4g,\n  \"allocator_overhead\": 0,\n"
           "  \"memory_bandwidth\": %.4g%s\n}\n",
           what, a[0], a[1], a[2], a[3], k->attention, rows, c, k->elementwise, shapes->attn_heads,
           shapes->attn_tokens, (int)buffer_elems(shapes), k->optimizer * 1e9, net, shares, mem,
           gpu ? "cuda" : "cpu", k->nodes, k->per_node, k->memory, peaks, bw_in, lat_in, bw_out,
           lat_out, shared->share_gather, shared->share_scatter, shared->share_send,
           fmax(1e-6, fmin(1, k->elementwise / k->peak)),
           fmax(1e-6, fmin(1, k->attention / k->peak)), hd, seqs, attn, axis, axis, axis, table,
           k->reserve, k->optimizer * 1e9, cores);
  tl_atomic_file af;
  TL_CHECK(tl_atomic_file_open(&af, out));
  tl_status st = tl_atomic_file_write(&af, json, strlen(json));
  if (st != TL_OK) {
    tl_atomic_file_abort(&af);
    return st;
  }
  return tl_atomic_file_commit(&af);
}

int tl_cli_plan_calibrate(int argc, char** argv, const char* out, int ranks,
                          tl_device_type device) {
  struct tl_config cfg;
  tl_config_defaults(&cfg);
  cfg.mesh.dp = ranks;
  cfg.device.type = device;
  int status = 0;
  if (tl_launch_maybe_spawn(argc, argv, ranks, &status)) return status;
  struct tl_worker w;
  if (tl_worker_init(&cfg, &w) != TL_OK) {
    char msg[8400];
    snprintf(msg, sizeof msg, "trellis plan --calibrate: %s", tl_last_error());
    tl_worker_fail(msg);
  }
  const bool gpu = device == TL_DEVICE_CUDA;
  struct calibration k;
  memset(&k, 0, sizeof k);
  k.ranks = w.world_size, k.threads = w.threads, k.device = device;
  k.grid = gpu ? kGpuGrid : kCpuGrid;
  /* every rank measures at once (sharing the machine as training will);
   * the job keeps each figure's mean over the ranks, and the slowest rank's
   * best GEMM rate */
  tl_backend* be = NULL;
  tl_status st = tl_backend_create(w.device, &be);
  double v[N_GEMM + 4 + N_ATT] = {0};
  if (st == TL_OK)
    st = measure(be, w.world_size > 1 ? w.world : NULL, gpu ? &kGpuShapes : &kCpuShapes, v,
                 &v[N_GEMM], &v[N_GEMM + 1], &v[N_GEMM + 4], &v[N_GEMM + 2]);
  if (st == TL_OK)
    st = optimizer_rate(be, w.world_size > 1 ? w.world : NULL,
                        buffer_elems(gpu ? &kGpuShapes : &kCpuShapes), &v[N_GEMM + 3]);
  double best = 0;
  for (int i = 0; i < N_GEMM && st == TL_OK; i++) best = fmax(best, v[i]);
  if (st == TL_OK) st = job_reduce(w.world, w.world_size, v, N_GEMM + 4 + N_ATT, TL_REDUCE_SUM);
  double neg = -best;
  if (st == TL_OK) st = job_reduce(w.world, w.world_size, &neg, 1, TL_REDUCE_MAX);
  k.slowest = -neg;
  memcpy(k.gemm, v, sizeof k.gemm);
  k.fp32 = v[N_GEMM], k.attention = v[N_GEMM + 1], k.elementwise = v[N_GEMM + 2];
  k.optimizer = v[N_GEMM + 3];
  memcpy(k.attn_table, &v[N_GEMM + 4], sizeof k.attn_table);
  for (int i = 0; i < N_GEMM; i++) k.peak = fmax(k.peak, k.gemm[i]);
  /* the links: inside each node over its own group, between nodes over
   * the rails (each node's rank i with every other node's), on device
   * memory (NCCL on GPUs) */
  const int n = w.world_size;
  struct tl_node_groups ng;
  memset(&ng, 0, sizeof ng);
  if (st == TL_OK) {
    st = tl_worker_node_groups(&w, &ng);
    /* uneven nodes: every rank knows; rank 0 says it, once */
    if (ng.uneven && w.rank != 0) tl_worker_fail_quietly();
  }
  k.nodes = ng.nodes > 0 ? ng.nodes : 1, k.per_node = ng.per_node > 0 ? ng.per_node : n;
  if (st == TL_OK) st = measure_link(ng.node, w.world, n, w.device, &k.intra);
  if (st == TL_OK && k.nodes > 1) st = measure_link(ng.rail, w.world, n, w.device, &k.inter);
  if (k.nodes == 1) k.inter = k.intra;
  if (k.per_node == 1) k.intra = k.inter; /* a placeholder: no group lies within a node */
  /* ranks sharing their node's cores, each on the trainer's automatic
   * threads: how fast a rank computes while only some do (a pipeline's
   * bubble), every node at once */
  const long online = sysconf(_SC_NPROCESSORS_ONLN);
  k.cores = online > 0 ? (int)online : 1;
  const int auto_threads = k.cores / k.per_node > 1 ? k.cores / k.per_node : 1;
  /* nodes may differ in cores or threads: the job measures together, every
   * node sharing its cores, or not at all (`apart`: some node does not) */
  float apart = !(!gpu && k.per_node > k.cores && k.per_node <= TL_SHARED_SPEED_MAX &&
                  k.threads == auto_threads);
  if (st == TL_OK && !gpu && n > 1)
    st = tl_group_all_reduce(w.world, &apart, &apart, 1, TL_F32, TL_REDUCE_MAX, NULL);
  if (st == TL_OK && apart == 0) {
    double sp[TL_SHARED_SPEED_MAX];
    st = shared_speeds(ng.host_node, sp);
    if (st == TL_OK) st = job_reduce(w.world, w.world_size, sp, k.per_node, TL_REDUCE_SUM);
    if (st == TL_OK) {
      for (int i = 0; i < k.per_node; i++) k.speed[i] = sp[i];
      k.n_speed = k.per_node;
      k.speed[k.per_node - 1] = 1; /* all computing: the rates measured */
    }
  }
  /* memory: the driver's figure, and what the process holds beyond its
   * counted tensors now that everything has run */
  if (st == TL_OK && gpu) {
    double total = 0, free_now = 0;
    st = tl_cuda_device_info(w.device.index, k.gpu, sizeof k.gpu, &total, &free_now);
    k.memory = total;
    k.reserve = total - free_now - (double)tl_alloc_stats_get(w.device).live_bytes;
    if (st == TL_OK) st = job_reduce(w.world, w.world_size, &k.reserve, 1, TL_REDUCE_MAX);
  } else {
    double ram = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
    k.memory = floor(ram / 2 / k.per_node);
    k.reserve = 2e8;
  }
  /* the groups that ran the collectives held their buffers until now */
  tl_worker_node_groups_destroy(&ng);
  tl_backend_destroy(be);
  if (st != TL_OK) {
    char msg[8400];
    snprintf(msg, sizeof msg, "trellis plan --calibrate: %s", tl_last_error());
    tl_worker_fail(msg);
  }
  int rc = 0;
  double attn_lo = HUGE_VAL, attn_hi = 0;
  for (int i = 0; i < N_ATT; i++)
    attn_lo = fmin(attn_lo, k.attn_table[i]), attn_hi = fmax(attn_hi, k.attn_table[i]);
  if (w.rank == 0) {
    st = write_spec(&k, out);
    const struct link_figures* sh = k.nodes > 1 ? &k.inter : &k.intra;
    char links[256];
    if (k.nodes > 1 && k.per_node > 1)
      snprintf(links, sizeof links,
               "%d nodes of %d: all-reduce %.3g bytes/s inside a node, %.3g across nodes "
               "(%.3g s and %.3g s latency)",
               k.nodes, k.per_node, k.intra.bus, k.inter.bus, k.intra.latency, k.inter.latency);
    else if (k.nodes > 1)
      snprintf(links, sizeof links,
               "%d nodes of 1: all-reduce %.3g bytes/s across nodes, %.3g s latency (none "
               "inside a node)",
               k.nodes, k.inter.bus, k.inter.latency);
    else
      snprintf(links, sizeof links, "all-reduce %.3g bytes/s, %.3g s latency", k.intra.bus,
               k.intra.latency);
    char sharing[160] = "";
    if (k.n_speed > 0)
      snprintf(sharing, sizeof sharing,
               ", %d ranks on %d cores: one computing alone runs x%.2f the rate all get (the "
               "cores' share: x%.2f)",
               k.per_node, k.cores, k.speed[0], (double)k.per_node / k.cores);
    if (st == TL_OK)
      printf(
          "calibrated %d rank%s%s%s: matmul %.1f GFLOP/s per rank at best (%.0f%% to 100%% "
          "of it over %d shapes), attention %.0f%% (%.0f%% to %.0f%% over %d shapes), "
          "element-wise %.0f%%, AdamW %.3g bytes/s, %s (all-gather x%.2f, reduce-scatter x%.2f, "
          "send x%.2f)%s%s; wrote %s\n",
          n, n == 1 ? "" : "s", gpu ? " on " : "", gpu ? k.gpu : "", k.peak,
          100 * min_fraction(k.gemm, k.peak), N_GEMM, 100 * k.attention / k.peak,
          100 * attn_lo / k.peak, 100 * attn_hi / k.peak, N_ATT, 100 * k.elementwise / k.peak,
          k.optimizer * 1e9, links, sh->share_gather, sh->share_scatter, sh->share_send,
          gpu ? ", reserve measured" : "", sharing, out);
    else
      fprintf(stderr, "trellis plan --calibrate: %s\n", tl_last_error()), rc = 1;
  }
  if (n > 1) {
    int32_t code = rc;
    tl_group_broadcast(w.world, &code, 1, TL_I32, 0, NULL);
    rc = code;
  }
  tl_worker_finalize(&w);
  return rc;
}
