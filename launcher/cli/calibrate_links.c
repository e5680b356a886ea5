/* calibrate_links.c — `trellis plan --calibrate`'s links: the
 * collectives' bandwidth and latency over the job's groups, what a message
 * adds between computations, and how fast a rank computes while others of
 * its node wait (calibrate_impl.h; calibrate.c says why). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/timer.h"
#include "launcher/cli/calibrate_impl.h"
#include "planner/cluster.h"

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
 * messages in busy_allreduce_time and tl__calibrate_shared_speeds: a rank's arithmetic
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
tl_status tl__calibrate_shared_speeds(tl_group* g, double* speed) {
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
_Static_assert(TL_SHARED_SPEED_MAX <= CAL_N_GEMM + CAL_N_ATT + 8,
               "tl__calibrate_job_reduce holds a node's speeds");
tl_status tl__calibrate_job_reduce(tl_group* world, int size, double* v, int n, tl_reduce_op op) {
  if (size < 2) return TL_OK;
  float f[CAL_N_GEMM + CAL_N_ATT + 8] = {0};
  for (int i = 0; i < n; i++) f[i] = (float)v[i];
  TL_CHECK(tl_group_all_reduce(world, f, f, (size_t)n, TL_F32, op, NULL));
  for (int i = 0; i < n; i++) v[i] = op == TL_REDUCE_SUM ? f[i] / size : f[i];
  return TL_OK;
}

/* Collective over the job (`world`, `size` ranks): g is this rank's group
 * of the kind measured. Every figure is the slowest rank's. */
tl_status tl__calibrate_link(tl_group* g, tl_group* world, int size, tl_device device,
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
  TL_CHECK(tl__calibrate_job_reduce(world, size, t, 6, TL_REDUCE_MAX));
  l->small = t[4], l->busy = t[5];
  const double bytes = (double)even * sizeof(float);
  l->bus = 2.0 * (n - 1) / n * bytes / t[0]; /* ring all-reduce steps */
  l->share_gather = (double)(n - 1) / n * bytes / t[1] / l->bus;
  l->share_scatter = (double)(n - 1) / n * bytes / t[2] / l->bus;
  l->share_send = bytes / t[3] / l->bus;
  /* the bus bandwidth by buffer size: past the caches a CPU's copies slow
   * down, a GPU's small messages never reach the link's rate, and a
   * tensor-parallel layer's all-reduces of a few hundred KiB run at their
   * own size's rate, not a bucket's; the larger buffers take fewer rounds
   * (64 MiB on 4 ranks of 2 cores: about 0.2 s each) */
  static const size_t kib[] = {64, 256, 1024, 4096, 16384, 65536};
  static const int rounds[] = {15, 11, 7, 11, 5, 3};
  l->n_sizes = 0;
  for (int i = 0; i < (int)(sizeof kib / sizeof kib[0]); i++) {
    const size_t count = (kib[i] << 10) / sizeof(float), ev = count - count % (size_t)n;
    double s[6] = {0};
    if (kib[i] == 4096)
      s[0] = t[0], s[1] = t[1], s[2] = t[2]; /* measured above */
    else
      TL_CHECK(collective_times(g, device, 3, ev, rounds[i], s));
    TL_CHECK(tl__calibrate_job_reduce(world, size, s, 3, TL_REDUCE_MAX));
    const double b = (double)ev * sizeof(float), bus = 2.0 * (n - 1) / n * b / s[0];
    l->size_bytes[l->n_sizes] = b;
    l->size_bus[l->n_sizes] = bus;
    l->size_gather[l->n_sizes] = (double)(n - 1) / n * b / s[1] / bus;
    l->size_scatter[l->n_sizes++] = (double)(n - 1) / n * b / s[2] / bus;
  }
  /* per message of the planner's all-reduce (planner/cost.h): NCCL's ring,
   * 2 (n - 1); MPICH's halving and doubling, 2 log2 n */
  const double messages = gpu ? 2.0 * (n - 1) : 2.0 * ceil(log2((double)n));
  l->latency = (gpu ? l->small : l->busy) / messages;
  return TL_OK;
}
