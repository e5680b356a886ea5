/* calibrate_kernels.c — `trellis plan --calibrate`'s kernel rates on a
 * rank's backend: the GEMM grid, attention, the element-wise ops and
 * AdamW's memory traffic (calibrate_impl.h; calibrate.c says why). */
#include <limits.h>
#include <stdlib.h>

#include "core/alloc.h"
#include "core/rng.h"
#include "core/timer.h"
#include "launcher/cli/calibrate_impl.h"

static const int kCpuGrid[CAL_GRID] = {32, 128, 512, 2048};
static const int kGpuGrid[CAL_GRID] = {128, 512, 2048, 8192};
static const int kCpuHeadDims[CAL_ATT_HD] = {8, 16, 32, 64}, kCpuSeqs[CAL_ATT_T] = {64, 256, 1024};
static const int kGpuHeadDims[CAL_ATT_HD] = {32, 64, 128, 256},
                 kGpuSeqs[CAL_ATT_T] = {256, 1024, 4096};
static const struct bench_shapes kCpuShapes = {kCpuGrid,     {2, 256, 256, 4}, 512, 256,
                                               kCpuHeadDims, kCpuSeqs,         4,   1024};
static const struct bench_shapes kGpuShapes = {kGpuGrid,     {4, 1024, 768, 12}, 8192, 768,
                                               kGpuHeadDims, kGpuSeqs,           8,    4096};

const struct bench_shapes* tl__calibrate_shapes(bool gpu) {
  return gpu ? &kGpuShapes : &kCpuShapes;
}

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
  const int c = s[2];
  const struct tl_attention_shape a = {.b = s[0],
                                       .t = s[1],
                                       .nh = s[3],
                                       .nkv = s[3],
                                       .hs = c / s[3],
                                       .ldq = 3LL * c,
                                       .ldkv = 3LL * c};
  TL_CHECK(be->ops->attention_forward(be->ctx, out, lse, qkv, qkv + c, qkv + 2 * c, &a));
  return be->ops->attention_backward(be->ctx, dqkv, dqkv + c, dqkv + 2 * c, dout, qkv, qkv + c,
                                     qkv + 2 * c, out, lse, &a);
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

/* Floats in each of tl__calibrate_kernels()'s buffers: the largest operand it runs. */
size_t tl__calibrate_buffer_elems(const struct bench_shapes* sh) {
  const int top = sh->grid[CAL_GRID - 1];
  const int* a = sh->attention;
  size_t big = (size_t)top * top;
  size_t qkv = (size_t)a[0] * a[1] * 3 * a[2], rows = (size_t)sh->rows * 4 * sh->c;
  size_t qkv_table = (size_t)sh->attn_tokens * 3 * sh->attn_heads * sh->head_dims[CAL_ATT_HD - 1];
  if (qkv > big) big = qkv;
  if (qkv_table > big) big = qkv_table;
  if (rows > big) big = rows;
  return big;
}

/* the optimizer's update: one AdamW step over s[0] parameters (buf[0]
 * the weights, buf[1] their gradients, buf[2] and buf[3] the moments) */
static tl_status bench_adamw(tl_backend* be, float* const* buf, const int* s) {
  return be->ops->adamw(be->ctx, buf[0], buf[1], 1.0f, buf[2], buf[3], s[0], 1e-3f, 0.9f, 0.95f,
                        1e-8f, 0.1f, 1);
}

/* AdamW's bytes a second (GB/s of the 28 bytes a parameter it reads and
 * writes: the spec's memory_bandwidth, with which planner/cost.h prices the
 * update's 36) on this rank over n parameters (beyond the caches, as a
 * model's shard is), every rank of the job at once: the job meets first,
 * as ranks reach the optimizer together after a step's last collective
 * (tl__calibrate_kernels()'s later kernels find the ranks at different points). */
tl_status tl__calibrate_optimizer(tl_backend* be, tl_group* world, size_t n, double* gbps) {
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
 * CAL_GRID + j) * CAL_GRID + l] at m = grid[i], n = grid[j], k = grid[l]), of the
 * fp32 matmul at the grid's largest shape, of attention's forward and
 * backward and of the element-wise ops, each counted as the graph counts
 * its FLOPs (graph/ops/). */
tl_status tl__calibrate_kernels(tl_backend* be, tl_group* sync, const struct bench_shapes* sh,
                                double* gemm, double* fp32, double* attention, double* attn_table,
                                double* elementwise) {
  const int* a = sh->attention;
  const int top = sh->grid[CAL_GRID - 1];
  const size_t big = tl__calibrate_buffer_elems(sh);
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
  for (int i = 0; i < CAL_GRID && st == TL_OK; i++)
    for (int j = 0; j < CAL_GRID && st == TL_OK; j++)
      for (int l = 0; l < CAL_GRID && st == TL_OK; l++) {
        int shape[3] = {sh->grid[i], sh->grid[j], sh->grid[l]};
        st = rate(be, sync, gemm_fn, buf, shape, 2.0 * shape[0] * shape[1] * shape[2],
                  &gemm[(i * CAL_GRID + j) * CAL_GRID + l]);
      }
  *fp32 = st == TL_OK ? gemm[CAL_N_GEMM - 1] : 0;
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
  for (int i = 0; i < CAL_ATT_HD && st == TL_OK; i++)
    for (int j = 0; j < CAL_ATT_T && st == TL_OK; j++) {
      const int t = sh->seqs[j], b = sh->attn_tokens / t > 1 ? sh->attn_tokens / t : 1;
      const int c = sh->attn_heads * sh->head_dims[i];
      int shape[4] = {b, t, c, sh->attn_heads};
      st = rate(be, sync, bench_attention, buf, shape, 3.5 * 2.0 * b * t * (double)t * c,
                &attn_table[i * CAL_ATT_T + j]);
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
