/* cost_share.c — the pipeline's part of a step: its micro-batches and its
 * bubble, on devices of their own or on a node's shared CPU cores.
 *
 * A GPU, or a CPU rank with cores of its own, computes at the spec's rates
 * whatever its neighbours do: the step is m micro-batches on the slowest
 * stage plus the schedule's bubble, idle time. Ranks that outnumber a
 * node's cores ("cores_per_node") share them instead: the spec's rates are
 * what each gets while all compute (--calibrate measures them so), a rank
 * waiting out the bubble sleeps (core/group_mpi.c) and the scheduler gives
 * its share to the ranks with work. The time is then the schedule's
 * timeline (pp's simulation, every pass at the spec's rates) with each
 * stretch run faster by the share its computing ranks get: all the ranks
 * that compute at a moment get equal shares, so every pass in flight
 * speeds up alike and the timeline keeps its order, only its stretches
 * shrink. How much a stretch shrinks is the spec's measured speed-up for
 * its count of computing ranks where --calibrate wrote one
 * ("shared_core_speed": ranks waiting on receives still wake to poll and
 * take slices of the busy ones' cores), else the cores' ideal share. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "planner/cost_impl.h"
#include "pp/schedule.h"

/* Cores one of `active` computing ranks gets when n ranks share a node's
 * `cores`, each running the trainer's automatic threads (cores / n, at
 * least 1: core/group_mpi.c, launcher/job/worker.c). */
static double rank_cores(int cores, int n, double active) {
  double threads = n > 0 && cores / n > 1 ? cores / n : 1;
  double share = active > 0 ? cores / active : threads;
  return share < threads ? share : threads;
}

/* Ranks of the plan on one node. */
static int node_ranks(const tl_cluster* c, const tl_plan* p) {
  const double all = (double)tl_plan_devices(p);
  return all < c->devices_per_node ? (int)all : c->devices_per_node;
}

static bool shares_cores(const tl_cluster* c) {
  return c->device == TL_DEVICE_CPU && c->cores_per_node > 0 && c->rated_ranks_per_node > 0;
}

/* How much faster than the spec's rates a rank computes while `active` of
 * the plan's n ranks on a node compute: what the spec measured
 * ("shared_core_speed", read linearly between its counts) when the plan
 * runs the ranks it was measured on, else the ideal share of the cores. */
static double speed(const tl_cluster* c, int n, double active) {
  if (c->n_shared_speed > 0 && n == c->n_shared_speed) {
    const double a = fmin(fmax(active, 1), n);
    const int lo = (int)floor(a), hi = lo < n ? lo + 1 : n;
    const double f = a - lo;
    return (1 - f) * c->shared_speed[lo - 1] + f * c->shared_speed[hi - 1];
  }
  const double rated =
      rank_cores(c->cores_per_node, c->rated_ranks_per_node, c->rated_ranks_per_node);
  return rank_cores(c->cores_per_node, n, active) / rated;
}

double tl__cost_core_speed(const tl_cluster* c, const tl_plan* p) {
  if (!shares_cores(c)) return 1;
  const int n = node_ranks(c, p);
  return speed(c, n, n);
}

bool tl__cost_overlap_stalls(const tl_cluster* c, const tl_plan* p) {
  return shares_cores(c) && node_ranks(c, p) > c->cores_per_node;
}

/* The occupancy of a schedule's timeline: hist[a] the ticks during which
 * exactly a of its p stages compute, *ticks the whole. Kept per thread for
 * the last few schedules (a search prices one schedule under many meshes). */
#define OCC_CACHED 16
#define OCC_MAX_CELLS 8192 /* stages x micro-batches x chunks simulated at most */
struct occupancy {
  tl_schedule_kind kind;
  int p, m, v;
  struct tl_pp_costs costs;
  double* hist; /* p + 1 */
  double ticks;
};
static _Thread_local struct occupancy g_occ[OCC_CACHED];
static _Thread_local int g_occ_next;

static int by_time(const void* a, const void* b) {
  const int *x = a, *y = b;
  return (x[0] > y[0]) - (x[0] < y[0]);
}

/* One simulation's occupancy into hist[0..p]. */
static tl_status simulate(tl_schedule_kind kind, int p, int m, int v, const struct tl_pp_costs* c,
                          double* hist, double* ticks) {
  const size_t cap = (size_t)3 * p * m * v;
  tl_pp_span* spans = malloc(sizeof *spans * cap);
  int* ev = malloc(sizeof(int) * 4 * cap); /* (time, +1 | -1) pairs */
  if (!spans || !ev) {
    free(spans), free(ev);
    return TL_ERRF(TL_ERR_NOMEM, "out of memory pricing a pipeline's timeline");
  }
  int n = 0, t = 0;
  tl_status st = tl_pp_schedule_timeline(kind, p, m, v, c, spans, &n, &t);
  if (st == TL_OK) {
    for (int i = 0; i < n; i++) {
      ev[4 * i] = spans[i].start, ev[4 * i + 1] = 1;
      ev[4 * i + 2] = spans[i].end, ev[4 * i + 3] = -1;
    }
    qsort(ev, (size_t)2 * n, 2 * sizeof(int), by_time);
    for (int a = 0; a <= p; a++) hist[a] = 0;
    int active = 0, at = 0;
    for (int i = 0; i < 2 * n; i++) {
      if (ev[2 * i] > at) hist[active < p ? active : p] += ev[2 * i] - at, at = ev[2 * i];
      active += ev[2 * i + 1];
    }
    if (t > at) hist[0] += t - at;
    *ticks = t;
  }
  free(spans), free(ev);
  return st;
}

/* hist of (kind, p, m, v, c); NULL when it cannot be had (the run too long
 * to simulate, a schedule pp cannot build). Beyond a few rounds a schedule
 * only repeats its steady state, every stage computing: the occupancy of
 * m micro-batches is that of m1 (2 p to 3 p of them) plus (m - m1) / p
 * times what p more add. */
static const double* occupancy(tl_schedule_kind kind, int p, int m, int v,
                               const struct tl_pp_costs* c, double* ticks) {
  for (int i = 0; i < OCC_CACHED; i++) {
    const struct occupancy* o = &g_occ[i];
    if (o->hist && o->kind == kind && o->p == p && o->m == m && o->v == v &&
        o->costs.forward == c->forward && o->costs.backward == c->backward &&
        o->costs.weight == c->weight) {
      *ticks = o->ticks;
      return o->hist;
    }
  }
  int m1 = m, rounds = 0;
  if (m > 3 * p) rounds = (m - 2 * p) / p, m1 = m - rounds * p;
  if ((size_t)p * (size_t)(rounds ? m1 + p : m1) * (size_t)v > OCC_MAX_CELLS) return NULL;
  struct occupancy* o = &g_occ[g_occ_next];
  g_occ_next = (g_occ_next + 1) % OCC_CACHED;
  free(o->hist);
  memset(o, 0, sizeof *o);
  double* h = calloc((size_t)2 * (p + 1), sizeof(double));
  if (!h) return NULL;
  double t1 = 0, t2 = 0;
  if (simulate(kind, p, m1, v, c, h, &t1) != TL_OK ||
      (rounds && simulate(kind, p, m1 + p, v, c, h + p + 1, &t2) != TL_OK)) {
    tl_clear_error();
    free(h);
    return NULL;
  }
  if (rounds) {
    /* zero-bubble's greedy lists may not repeat exactly: no bin below 0 */
    for (int a = 0; a <= p; a++) h[a] = fmax(0, h[a] + rounds * (h[p + 1 + a] - h[a]));
    t1 += rounds * (t2 - t1);
  }
  *o = (struct occupancy){kind, p, m, v, *c, h, t1};
  *ticks = t1;
  return h;
}

void tl__cost_pipeline(const tl_cluster* c, tl_plan* p, const struct tl_pp_costs* costs,
                       double comp, double tp_comm, double cp_comm, double pp_comm, double bubble) {
  const int m = p->n_micro;
  const double micro = comp + tp_comm + cp_comm + pp_comm;
  const double s = tl__cost_core_speed(c, p);
  p->t_compute = m * comp / s;
  p->t_tp = m * tp_comm / s;
  p->t_cp = m * cp_comm / s;
  p->t_pp = m * pp_comm / s;
  p->t_tied = 0;
  p->t_bubble = bubble * micro / s;
  if (!shares_cores(c) || p->pp <= 1) return;
  const int n = node_ranks(c, p);
  if (n <= c->cores_per_node) return; /* no rank gains a core when others idle */
  /* ranks lie pp outermost: a plan over several nodes gives each node one
   * stage, or a run of consecutive ones, whose ranks go idle together and
   * which no global count of computing stages describes; priced as idle
   * time */
  if ((double)tl_plan_devices(p) > c->devices_per_node) return;
  const int v = tl_plan_chunks(p);
  const struct tl_pp_costs unit = {1, 1, 1}, *k = costs ? costs : &unit;
  double ticks = 0;
  const double* hist = occupancy(p->schedule, p->pp, m, v, k, &ticks);
  if (!hist || ticks <= 0) return; /* priced as idle time */
  /* seconds of one tick at the spec's rates: a micro-batch is v chunks'
   * forward, backward and weight passes */
  const double tick = micro / (v * (double)(k->forward + k->backward + k->weight));
  double wall = 0;
  for (int a = 0; a <= p->pp; a++)
    if (hist[a] > 0) wall += hist[a] * tick / (a ? speed(c, n, (double)a * n / p->pp) : 1);
  const double busy = m * micro / s;
  p->t_bubble = wall > busy ? wall - busy : 0;
}

/* kernels/cpu/adamw.c: the moments' updates, the bias corrections, a
 * square root and a division, the decay and the step: 16 FLOPs a
 * parameter; the gradient norm's square and sum and clipping's scale: 3
 * more; under ZeRO 2 and 3 zeroing the gradients' shard: 1 (cost.h) */
double tl__cost_optimizer_seconds(const tl_cluster* c, const tl_plan* p, double params) {
  const int d = tl_plan_data(p); /* ZeRO shards over dp x cp */
  const double shard = p->zero >= 1 && d > 1 ? params / d : params;
  const double rate = tl_cluster_kernel_peak(c) * c->efficiency * tl__cost_core_speed(c, p);
  const bool zeroes = p->zero >= 2;
  const double flops =
      rate > 0 ? (TL_COST_OPTIMIZER_FLOPS + (zeroes ? TL_COST_ZEROING_FLOPS : 0)) * shard / rate
               : 0;
  const double bytes = c->memory_bandwidth > 0
                           ? (TL_COST_OPTIMIZER_BYTES + (zeroes ? TL_COST_ZEROING_BYTES : 0)) *
                                 shard / c->memory_bandwidth
                           : 0;
  return flops > bytes ? flops : bytes;
}
