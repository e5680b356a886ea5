/* calibrate.c — `trellis plan --calibrate OUT.json`: measure this machine
 * and write it as a cluster spec for the planner.
 *
 * It runs as a job of --ranks ranks (default: the online cores), as training
 * would: every rank measures at the same time (so ranks share the machine as
 * they will when training) the CPU backend's matmul over a grid of shapes
 * (the spec's GEMM table, its best rate the peak), the attention kernels
 * and the element-wise ops (their fractions of the peak), then the job
 * measures all-reduce bus bandwidth on 4 MiB (the median of its rounds)
 * and the latency: what a 4-byte all-reduce adds to ranks that compute
 * between messages, as training does (on a core per rank that is the bare
 * latency; with more ranks than cores it holds the scheduling delays), per
 * message of MPICH's all-reduce (2 log2 n, planner/cost.h). Rank 0 writes
 * the spec (atomically) with a comment saying what was measured. Memory per
 * device is an assumption: half the machine's RAM divided among the ranks. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/rng.h"
#include "core/timer.h"
#include "kernels/backend.h"
#include "core/atomic_file.h"
#include "launcher/cli/cli.h"
#include "launcher/job/spawn.h"
#include "launcher/job/worker.h"

/* The GEMM table's sizes on each axis (m, n, k), as trellis plan writes
 * them; a block of a small GPT multiplies (B*T, C..4C, C..4C). */
static const int kGrid[] = {32, 128, 512, 2048};
#define GRID 4
#define N_GEMM (GRID * GRID * GRID)

/* GFLOP/s of fn run over and over (at least 3 calls and 50 ms; `flops` a call). */
typedef tl_status (*bench_fn)(tl_backend* be, float* const* buf, const int* shape);
static tl_status rate(tl_backend* be, bench_fn fn, float* const* buf, const int* shape,
                      double flops, double* gflops) {
  TL_CHECK(fn(be, buf, shape)); /* warm up */
  tl_timer t;
  tl_timer_start(&t);
  int iters = 0;
  tl_status st = TL_OK;
  while (st == TL_OK && (iters < 3 || tl_timer_elapsed_s(&t) < 0.05)) {
    st = fn(be, buf, shape);
    iters++;
  }
  *gflops = flops * iters / tl_timer_elapsed_s(&t) * 1e-9;
  return st;
}

/* x (m, k) times W^T, W (n, k): a linear layer's forward */
static tl_status bench_gemm(tl_backend* be, float* const* buf, const int* s) {
  return be->ops->matmul(be->ctx, buf[2], buf[0], buf[1], NULL, s[0], s[1], s[2], false, true,
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

/* What this rank's CPU backend reaches: GFLOP/s of the matmul at every
 * point of the grid (gemm[(i * GRID + j) * GRID + l] at m = kGrid[i],
 * n = kGrid[j], k = kGrid[l]), of attention's forward and backward at
 * (b 2, t 256, c 256, 4 heads) and of the element-wise ops at 512 rows of
 * 256, each counted as the graph counts its FLOPs (graph/ops/). */
static tl_status measure(double* gemm, double* attention, double* elementwise) {
  const size_t big = (size_t)2048 * 2048;
  tl_backend* be = NULL;
  TL_CHECK(tl_backend_create(tl_cpu(), &be));
  float* mem[5] = {NULL, NULL, NULL, NULL, NULL};
  tl_status st = TL_OK;
  for (int i = 0; i < 5 && st == TL_OK; i++)
    if (!(mem[i] = calloc(big, sizeof(float))))
      st = TL_ERRF(TL_ERR_NOMEM, "out of memory calibrating");
  if (st == TL_OK) {
    tl_rng_normal(1, 0, 0, big, 0, 1, mem[0]);
    tl_rng_normal(1, 1, 0, big, 0, 1, mem[1]);
  }
  for (int i = 0; i < GRID && st == TL_OK; i++)
    for (int j = 0; j < GRID && st == TL_OK; j++)
      for (int l = 0; l < GRID && st == TL_OK; l++) {
        int shape[3] = {kGrid[i], kGrid[j], kGrid[l]};
        st = rate(be, bench_gemm, mem, shape, 2.0 * shape[0] * shape[1] * shape[2],
                  &gemm[(i * GRID + j) * GRID + l]);
      }
  if (st == TL_OK) {
    const int b = 2, t = 256, c = 256, nh = 4;
    int shape[4] = {b, t, c, nh};
    /* graph/ops/attention.c: 2 b t^2 c forward (the causal half), 2.5x backward */
    st = rate(be, bench_attention, mem, shape, 3.5 * 2.0 * b * t * t * c, attention);
  }
  if (st == TL_OK) {
    const int rows = 512, c = 256;
    int shape[2] = {rows, c};
    for (int i = 0; i < 4 * c; i++) mem[2][i] = 1; /* LayerNorm's weight and bias */
    /* LayerNorm 8 a element forward, GELU 10, each backward twice its forward */
    st = rate(be, bench_elementwise, mem, shape, 3.0 * (8.0 * rows * c + 10.0 * rows * 4 * c),
              elementwise);
  }
  for (int i = 0; i < 5; i++) free(mem[i]);
  tl_backend_destroy(be);
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

/* Seconds per all-reduce of `count` floats over the job: the median of
 * `rounds` (at most 64), each started together after a barrier — what a
 * message costs in a step, not the best case. */
static tl_status allreduce_time(tl_group* g, size_t count, int rounds, double* median) {
  float* buf = calloc(count, sizeof(float));
  if (!buf) return TL_ERRF(TL_ERR_NOMEM, "out of memory calibrating");
  tl_status st = TL_OK;
  double s[64];
  if (rounds > 64) rounds = 64;
  int done = 0;
  for (; done < rounds && st == TL_OK; done++) {
    st = tl_group_barrier(g, NULL);
    tl_timer t;
    tl_timer_start(&t);
    if (st == TL_OK) st = tl_group_all_reduce(g, buf, buf, count, TL_F32, TL_REDUCE_SUM, NULL);
    s[done] = tl_timer_elapsed_s(&t);
  }
  if (st == TL_OK) {
    qsort(s, (size_t)done, sizeof(double), by_double);
    *median = s[done / 2];
  }
  free(buf);
  return st;
}

/* What an all-reduce of 4 bytes adds to a job that computes between its
 * messages, as training does: `rounds` small matmuls on every rank with an
 * all-reduce after each, against the same matmuls without them; seconds per
 * all-reduce (the slowest rank's difference). With a core per rank this is
 * about the bare latency; with more ranks than cores it also holds the wait
 * for members that the scheduler has put behind another rank's arithmetic,
 * which a bare ping-pong of idle ranks never sees. */
static tl_status busy_allreduce_time(tl_group* g, double* per_call) {
  const int m = 64, k = 256, n = 256, rounds = 40;
  tl_backend* be = NULL;
  TL_CHECK(tl_backend_create(tl_cpu(), &be));
  float* a = calloc((size_t)m * k, sizeof(float));
  float* b = calloc((size_t)n * k, sizeof(float));
  float* c = calloc((size_t)m * n, sizeof(float));
  tl_status st = a && b && c ? TL_OK : TL_ERRF(TL_ERR_NOMEM, "out of memory calibrating");
  double t[2] = {0, 0};
  for (int pass = 0; pass < 2 && st == TL_OK; pass++) {
    float x = 1;
    st = tl_group_barrier(g, NULL);
    tl_timer tm;
    tl_timer_start(&tm);
    for (int r = 0; r < rounds && st == TL_OK; r++) {
      st = be->ops->matmul(be->ctx, c, a, b, NULL, m, n, k, false, true, false);
      if (st == TL_OK && pass) st = tl_group_all_reduce(g, &x, &x, 1, TL_F32, TL_REDUCE_SUM, NULL);
    }
    t[pass] = tl_timer_elapsed_s(&tm);
  }
  if (st == TL_OK) {
    float d = (float)((t[1] - t[0]) / rounds);
    st = tl_group_all_reduce(g, &d, &d, 1, TL_F32, TL_REDUCE_MAX, NULL);
    *per_call = d > 0 ? d : 0;
  }
  free(a), free(b), free(c);
  tl_backend_destroy(be);
  return st;
}

int tl_cli_plan_calibrate(int argc, char** argv, const char* out, int ranks) {
  struct tl_config cfg;
  tl_config_defaults(&cfg);
  cfg.mesh.dp = ranks;
  int status = 0;
  if (tl_launch_maybe_spawn(argc, argv, ranks, &status)) return status;
  struct tl_worker w;
  if (tl_worker_init(&cfg, &w) != TL_OK) {
    char msg[8400];
    snprintf(msg, sizeof msg, "trellis plan --calibrate: %s", tl_last_error());
    tl_worker_fail(msg);
  }
  double small = 0, large = 0;
  const size_t big = (4u << 20) / sizeof(float);
  /* every rank measures at once (sharing the machine as training will);
   * the job keeps each figure's mean over the ranks, and the slowest rank's
   * largest GEMM rate */
  double rates[N_GEMM + 2];
  tl_status st = measure(rates, &rates[N_GEMM], &rates[N_GEMM + 1]);
  double best = 0;
  for (int i = 0; i < N_GEMM; i++) best = fmax(best, rates[i]);
  double lo = best;
  if (st == TL_OK && w.world_size > 1) {
    float v[N_GEMM + 2];
    for (int i = 0; i < N_GEMM + 2; i++) v[i] = (float)rates[i];
    st = tl_group_all_reduce(w.world, v, v, N_GEMM + 2, TL_F32, TL_REDUCE_SUM, NULL);
    for (int i = 0; i < N_GEMM + 2 && st == TL_OK; i++) rates[i] = v[i] / w.world_size;
    float m = (float)-best;
    if (st == TL_OK) st = tl_group_all_reduce(w.world, &m, &m, 1, TL_F32, TL_REDUCE_MAX, NULL);
    lo = -m;
  }
  double busy = 0;
  if (st == TL_OK) st = allreduce_time(w.world, 1, 51, &small);
  if (st == TL_OK && w.world_size > 1) st = busy_allreduce_time(w.world, &busy);
  if (st == TL_OK) st = allreduce_time(w.world, big, 11, &large);
  if (st != TL_OK) {
    char msg[8400];
    snprintf(msg, sizeof msg, "trellis plan --calibrate: %s", tl_last_error());
    tl_worker_fail(msg);
  }
  int n = w.world_size, rc = 0;
  if (w.rank == 0) {
    /* the peak: the best GEMM rate of the grid (ranks' mean); the table,
     * attention and the element-wise rest as fractions of it */
    double peak = 0;
    for (int i = 0; i < N_GEMM; i++) peak = fmax(peak, rates[i]);
    double attention = fmin(1, rates[N_GEMM] / peak), rest = fmin(1, rates[N_GEMM + 1] / peak);
    double factor = n > 1 ? 2.0 * (n - 1) / n : 1.0; /* ring all-reduce steps */
    double bus = n > 1 ? factor * big * sizeof(float) / large : 0;
    /* per message of MPICH's halving and doubling (planner/cost.h): what an
     * all-reduce costs amid the job's arithmetic */
    double messages = 2.0 * ceil(log2((double)n));
    double latency = n > 1 ? busy / messages : 0;
    double ram = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
    double memory = floor(ram / 2 / n);
    char axis[64] = "", table[2048] = "";
    for (int i = 0; i < GRID; i++)
      snprintf(axis + strlen(axis), sizeof axis - strlen(axis), "%s%d", i ? ", " : "", kGrid[i]);
    for (int i = 0; i < N_GEMM; i++)
      snprintf(table + strlen(table), sizeof table - strlen(table), "%s%s%.4f", i ? "," : "",
               i % GRID == 0 ? (i ? "\n      " : "\n      ") : " ", fmax(1e-4, rates[i] / peak));
    char json[8192];
    snprintf(json, sizeof json,
             "{\n  \"name\": \"this_machine\",\n  \"comment\": \"Measured by trellis plan "
             "--calibrate on %d rank%s with %d CPU thread%s each, all at once: the CPU backend's "
             "matmul at %d shapes (m, n, k in %s), %.1f GFLOP/s per rank at best (the peak; "
             "slowest rank %.1f), each shape's rate a fraction of it in gemm_efficiency; "
             "attention forward and backward (b 2, t 256, c 256, 4 heads) at %.2f GFLOP/s, "
             "LayerNorm and GELU forward and backward at %.2f GFLOP/s, as the graph counts "
             "their FLOPs (attention_efficiency and compute_efficiency, the latter for every "
             "node but the matrix products and attention); all-reduce bus bandwidth %.3g "
             "bytes/s on 4 MiB (median); latency %.3g s per message: a 4-byte all-reduce takes "
             "%.3g s between small matmuls on every rank, against %.3g s (median) on idle "
             "ranks. device_memory_bytes is an assumption: half the machine's RAM divided among "
             "the ranks.\",\n  \"device\": \"cpu\",\n  \"nodes\": 1,\n"
             "  \"devices_per_node\": %d,\n  \"device_memory_bytes\": %.0f,\n"
             "  \"peak_flops\": {\"fp32\": %.4g},\n"
             "  \"intra_node\": {\"bandwidth\": %.4g, \"latency\": %.4g},\n"
             "  \"inter_node\": {\"bandwidth\": %.4g, \"latency\": %.4g},\n"
             "  \"compute_efficiency\": %.4f,\n  \"attention_efficiency\": %.4f,\n"
             "  \"gemm_efficiency\": {\n    \"m\": [%s], \"n\": [%s], \"k\": [%s],\n"
             "    \"efficiency\": [%s]\n  },\n"
             "  \"reserve_bytes\": 2e8\n}\n",
             n, n == 1 ? "" : "s", w.threads, w.threads == 1 ? "" : "s", N_GEMM, axis, peak, lo,
             rates[N_GEMM], rates[N_GEMM + 1], bus, latency, busy, small, n, memory, peak * 1e9,
             bus > 0 ? bus : 1e9, latency > 0 ? latency : 1e-6, bus > 0 ? bus : 1e9,
             latency > 0 ? latency : 1e-6, fmax(1e-4, rest), fmax(1e-4, attention), axis, axis,
             axis, table);
    tl_atomic_file af;
    st = tl_atomic_file_open(&af, out);
    if (st == TL_OK) {
      st = tl_atomic_file_write(&af, json, strlen(json));
      if (st == TL_OK)
        st = tl_atomic_file_commit(&af);
      else
        tl_atomic_file_abort(&af);
    }
    if (st == TL_OK)
      printf(
          "calibrated %d rank%s: matmul %.1f GFLOP/s per rank at best (%.0f%% to %.0f%% of it "
          "over %d shapes), attention %.0f%%, element-wise %.0f%%, all-reduce %.3g bytes/s, "
          "%.3g s latency; wrote %s\n",
          n, n == 1 ? "" : "s", peak, 100 * min_fraction(rates, peak), 100.0, N_GEMM,
          100 * attention, 100 * rest, bus, latency, out);
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
