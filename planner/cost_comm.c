/* cost_comm.c — what collectives cost on a cluster's links: the ring's
 * bandwidth term and the backend's messages, the link a group runs on, and
 * the data-parallel communication a step leaves exposed (planner/cost.h). */
#include <math.h>

#include "planner/cost_impl.h"

/* All-reduce of `bytes` over n ranks on `link`: the bandwidth term of a
 * ring (2(n-1)/n of the buffer through each rank's link); the latency term of
 * the algorithm the group's backend runs — NCCL's ring on GPUs, 2(n-1)
 * messages; on CPUs MPICH's recursive halving and doubling, 2 log2(n). */
double tl_cost_all_reduce(const tl_cluster* c, double bytes, int n, const struct tl_link* link) {
  if (n <= 1) return 0;
  double messages = c->device == TL_DEVICE_CPU ? 2.0 * ceil(log2((double)n)) : 2.0 * (n - 1);
  return 2.0 * (n - 1) / n * bytes / link->bandwidth + messages * link->latency;
}

struct tl_link tl_cost_group_link(const tl_cluster* c, int n, int stride) {
  const int dpn = c->devices_per_node;
  const int k = stride >= dpn ? 1 : (n < dpn / stride ? n : dpn / stride);
  if (k >= n) return c->intra;
  struct tl_link l = c->inter;
  l.bandwidth = fmin(c->intra.bandwidth, k * c->inter.bandwidth);
  return l;
}

double tl_cost_all_gather(const tl_cluster* c, double bytes, int n, const struct tl_link* link) {
  if (n <= 1) return 0;
  double messages = c->device == TL_DEVICE_CPU ? ceil(log2((double)n)) : (double)(n - 1);
  return (double)(n - 1) / n * bytes / link->bandwidth + messages * link->latency;
}

/* The data-parallel communication a step leaves exposed, for `grads`
 * elements of the fullest stage and one micro-batch's compute `comp`:
 * - ZeRO 0: the all-reduce, in buckets during the last micro-batch's
 *   backward (about 2/3 of its compute) when dp_bucket_mb > 0;
 * - ZeRO 1: its two halves, the reduce-scatter overlapped the same way and
 *   the all-gather of the updated parameters after the step, exposed;
 * - ZeRO 2: a reduce-scatter after EVERY micro-batch's backward (m of them,
 *   each overlapping its backward), then the all-gather;
 * - ZeRO 3: the gradients as ZeRO-2's, and no all-gather after the step:
 *   the parameters are gathered unit by unit as the passes run
 *   (tl_cost_zero3_gathers, which the caller adds). */
double tl__cost_dp_seconds(const tl_cluster* c, const tl_plan* p, double grads,
                           const struct tl_link* link, double comp) {
  const int d = p->dp;
  if (d <= 1) return 0;
  const double wire = p->grad_reduce == TL_BF16 ? 2.0 : 4.0; /* bytes an element moves */
  double ar = tl_cost_all_reduce(c, grads * wire, d, link);
  double reduce = p->zero == 0 ? ar : ar / 2, gather = p->zero == 1 || p->zero == 2 ? ar / 2 : 0;
  int passes = p->zero >= 2 ? p->n_micro : 1;
  if (p->dp_bucket_mb <= 0 || p->no_overlap) return passes * reduce + gather;
  double buckets = ceil(grads * 4.0 / (p->dp_bucket_mb * 1024.0 * 1024.0)); /* of fp32 */
  double last = reduce / (buckets > 1 ? buckets : 1), hidden = comp * 2.0 / 3.0;
  double exposed = reduce - hidden > last ? reduce - hidden : last;
  return passes * exposed + gather;
}

/* Transitions of stage s's passes from one micro-batch's forward straight
 * to the next one's (a warm-up: GPipe's every one, 1F1B's first
 * min(pp - s - 1, m - 1)); as many backwards follow backwards. */
static int forward_runs(const tl_plan* p, int s) {
  if (p->n_micro <= 1) return 0;
  if (p->schedule == TL_SCHEDULE_GPIPE) return p->n_micro - 1;
  int w = p->pp - s - 1;
  return w < p->n_micro - 1 ? w : p->n_micro - 1;
}

double tl_cost_zero3_gathers(const tl_cluster* c, const tl_plan* p, int s,
                             const struct tl_cost_unit* u, int n, double late,
                             const struct tl_link* link) {
  const int d = p->dp, m = p->n_micro;
  if (d <= 1 || n <= 0) return 0;
  /* the shards are fp32 and so is the wire (dp/units.c) */
  double first = tl_cost_all_gather(c, 4.0 * u[0].params, d, link), last = first;
  double t = tl_cost_all_gather(c, 4.0 * late, d, link) + first;
  double ahead = 0;
  const double hide = p->no_overlap ? 0 : 1; /* overlapping nothing: every gather shows */
  for (int i = 0; i < n; i++) {
    const double g = tl_cost_all_gather(c, 4.0 * u[i].params, d, link);
    /* forward: each unit arrives while the one before computes, backward
     * while the one after; a run's own units follow one another */
    ahead += (u[i].count - 1) * (fmax(0, g - hide * u[i].fwd) + fmax(0, g - hide * u[i].bwd));
    if (i > 0) ahead += fmax(0, g - hide * u[i - 1].fwd);
    if (i < n - 1) ahead += fmax(0, g - hide * u[i + 1].bwd);
    last = g;
  }
  const int runs = forward_runs(p, s);
  return t + m * ahead + runs * (first + last);
}
