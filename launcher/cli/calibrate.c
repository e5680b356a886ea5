/* calibrate.c — `trellis plan --calibrate OUT.json`: measure this machine
 * and write it as a cluster spec for the planner.
 *
 * It runs as a job of --ranks ranks (default: the online cores), as training
 * would: every rank measures the CPU matmul rate at a GPT-2 shape at the same
 * time (so ranks share the machine as they will when training), then the
 * job measures all-reduce bus bandwidth on 4 MiB (the median of its rounds)
 * and the latency: what a 4-byte all-reduce adds to ranks that compute
 * between messages, as training does (on a core per rank that is the bare
 * latency; with more ranks than cores it holds the scheduling delays), per
 * message of MPICH's all-reduce (2 log2 n, planner/cost.h). Rank 0 writes the spec (atomically)
 * with a comment saying what was measured. Memory per device is an assumption: half the machine's
 * RAM divided among the ranks. */
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

/* GFLOP/s of the CPU backend's matmul, x (256, 768) times W^T, W (2304, 768). */
static tl_status matmul_rate(double* gflops) {
  const int m = 256, k = 768, n = 2304;
  tl_backend* be = NULL;
  TL_CHECK(tl_backend_create(tl_cpu(), &be));
  float* a = malloc(sizeof(float) * (size_t)m * k);
  float* b = malloc(sizeof(float) * (size_t)n * k);
  float* c = malloc(sizeof(float) * (size_t)m * n);
  tl_status st = a && b && c ? TL_OK : TL_ERRF(TL_ERR_NOMEM, "out of memory calibrating");
  if (st == TL_OK) {
    tl_rng_normal(1, 0, 0, (size_t)m * k, 0, 1, a);
    tl_rng_normal(1, 1, 0, (size_t)n * k, 0, 1, b);
    st = be->ops->matmul(be->ctx, c, a, b, NULL, m, n, k, false, true, false); /* warm up */
  }
  tl_timer t;
  tl_timer_start(&t);
  int iters = 0;
  while (st == TL_OK && (iters < 3 || tl_timer_elapsed_s(&t) < 1.0)) {
    st = be->ops->matmul(be->ctx, c, a, b, NULL, m, n, k, false, true, false);
    iters++;
  }
  *gflops = 2.0 * m * n * k * iters / tl_timer_elapsed_s(&t) * 1e-9;
  free(a), free(b), free(c);
  tl_backend_destroy(be);
  return st;
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
  double gflops = 0, small = 0, large = 0;
  const size_t big = (4u << 20) / sizeof(float);
  tl_status st = matmul_rate(&gflops);
  double sum = gflops, lo = gflops;
  if (st == TL_OK && w.world_size > 1) {
    float v[2] = {(float)gflops, (float)-gflops};
    st = tl_group_all_reduce(w.world, v, v, 1, TL_F32, TL_REDUCE_SUM, NULL);
    if (st == TL_OK) sum = v[0];
    float m = (float)-gflops;
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
    double mean = sum / n;
    double factor = n > 1 ? 2.0 * (n - 1) / n : 1.0; /* ring all-reduce steps */
    double bus = n > 1 ? factor * big * sizeof(float) / large : 0;
    /* per message of MPICH's halving and doubling (planner/cost.h): what an
     * all-reduce costs amid the job's arithmetic */
    double messages = 2.0 * ceil(log2((double)n));
    double latency = n > 1 ? busy / messages : 0;
    double ram = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
    double memory = floor(ram / 2 / n);
    char json[2048];
    snprintf(json, sizeof json,
             "{\n  \"name\": \"this_machine\",\n  \"comment\": \"Measured by trellis plan "
             "--calibrate on %d rank%s with %d CPU thread%s each: matmul 256x768x2304 at "
             "%.1f GFLOP/s per rank (slowest rank %.1f), all-reduce bus bandwidth %.3g bytes/s on "
             "4 MiB (median); latency %.3g s per message: a 4-byte all-reduce takes %.3g s between "
             "small matmuls on every rank, against %.3g s (median) on idle ranks. "
             "device_memory_bytes is an assumption: half the "
             "machine's RAM divided among the ranks. compute_efficiency 0.8: training reaches "
             "about 80%% of the matmul rate.\",\n  \"device\": \"cpu\",\n  \"nodes\": 1,\n"
             "  \"devices_per_node\": %d,\n  \"device_memory_bytes\": %.0f,\n"
             "  \"peak_flops\": {\"fp32\": %.4g},\n"
             "  \"intra_node\": {\"bandwidth\": %.4g, \"latency\": %.4g},\n"
             "  \"inter_node\": {\"bandwidth\": %.4g, \"latency\": %.4g},\n"
             "  \"compute_efficiency\": 0.8,\n  \"reserve_bytes\": 2e8\n}\n",
             n, n == 1 ? "" : "s", w.threads, w.threads == 1 ? "" : "s", mean, lo, bus, latency,
             busy, small, n, memory, mean * 1e9, bus > 0 ? bus : 1e9, latency > 0 ? latency : 1e-6,
             bus > 0 ? bus : 1e9, latency > 0 ? latency : 1e-6);
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
          "calibrated %d rank%s: %.1f GFLOP/s per rank, all-reduce %.3g bytes/s, %.3g s "
          "latency; wrote %s\n",
          n, n == 1 ? "" : "s", mean, bus, latency, out);
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
