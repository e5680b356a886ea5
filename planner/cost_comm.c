/* cost_comm.c — what collectives cost on a cluster's links: the ring's
 * bandwidth term and the backend's messages, the link a group runs on, and
 * the data-parallel communication a step leaves exposed (planner/cost.h). */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "dp/buckets.h"
#include "planner/cost_impl.h"
#include "planner/recommend.h"

/* All-reduce of `bytes` over n ranks on `link`: the bandwidth term of a
 * ring (2(n-1)/n of the buffer through each rank's link); the latency term of
 * the algorithm the group's backend runs — NCCL's ring on GPUs, 2(n-1)
 * messages; on CPUs MPICH's recursive halving and doubling, 2 log2(n). */
double tl_cost_all_reduce(const tl_cluster* c, double bytes, int n, const struct tl_link* link) {
  if (n <= 1) return 0;
  double messages = c->device == TL_DEVICE_CPU ? 2.0 * ceil(log2((double)n)) : 2.0 * (n - 1);
  return 2.0 * (n - 1) / n * bytes / tl_link_bandwidth_at(link, bytes) + messages * link->latency;
}

/* The inter-node link at the rate of k members of a group on a node
 * together (the node's own when k >= n: all of them on one). */
static struct tl_link link_of_members(const tl_cluster* c, int n, int k) {
  if (k >= n) return c->intra;
  struct tl_link l = c->inter;
  l.bandwidth = fmin(c->intra.bandwidth, k * c->inter.bandwidth);
  /* by size too: the node's k cards share the inter-node rate, at most
   * the intra-node one's, at each size either link was measured at */
  if (c->intra.n_sizes || c->inter.n_sizes) {
    const struct tl_link* from = c->inter.n_sizes ? &c->inter : &c->intra;
    l.n_sizes = from->n_sizes;
    for (int i = 0; i < l.n_sizes; i++) {
      const double b = from->size_bytes[i];
      l.size_bytes[i] = b;
      l.size_bandwidth[i] =
          fmin(tl_link_bandwidth_at(&c->intra, b), k * tl_link_bandwidth_at(&c->inter, b));
    }
  }
  return l;
}

struct tl_link tl_cost_group_link(const tl_cluster* c, int n, int stride) {
  const int dpn = c->devices_per_node;
  const int k = stride >= dpn ? 1 : (n < dpn / stride ? n : dpn / stride);
  return link_of_members(c, n, k);
}

struct tl_link tl_cost_data_link(const tl_cluster* c, const tl_plan* p) {
  const int cp = tl_plan_cp(p);
  const int s_dp = tl_cost_axis_stride(p, TL_AXIS_DP);
  if (cp == 1) return tl_cost_group_link(c, p->dp, s_dp);
  const int s_cp = tl_cost_axis_stride(p, TL_AXIS_CP), dpn = c->devices_per_node;
  /* the members on the first member's node: ranks i s_dp + j s_cp below
   * the node's size (the strides are products of the inner axes' sizes,
   * so every node holds as many) */
  int64_t k = 0;
  for (int i = 0; i < p->dp && (int64_t)i * s_dp < dpn; i++)
    for (int j = 0; j < cp && (int64_t)i * s_dp + (int64_t)j * s_cp < dpn; j++) k++;
  const int n = tl_plan_data(p);
  return link_of_members(c, n, k < 1 ? 1 : k > n ? n : (int)k);
}

void tl_cost_plan_order(const tl_plan* p, tl_axis order[TL_N_AXES]) {
  const tl_axis* o = p->order;
  bool seen[TL_N_AXES] = {false}, perm = true;
  for (int i = 0; i < TL_N_AXES && perm; i++) {
    perm = (int)o[i] >= 0 && (int)o[i] < TL_N_AXES && !seen[o[i]];
    if (perm) seen[o[i]] = true;
  }
  if (perm) {
    memcpy(order, o, TL_N_AXES * sizeof *order);
    return;
  }
  /* three: dp, tp and pp in some order, cp just outside tp (the config's
   * reading of a three-name mesh.order) */
  bool three = true;
  memset(seen, 0, sizeof seen);
  for (int i = 0; i < 3 && three; i++) {
    three = (int)o[i] >= 0 && (int)o[i] < TL_N_AXES && o[i] != TL_AXIS_CP && !seen[o[i]];
    if (three) seen[o[i]] = true;
  }
  const tl_axis dflt[3] = {TL_AXIS_TP, TL_AXIS_DP, TL_AXIS_PP};
  for (int i = 0, k = 0; i < 3; i++) {
    order[k++] = three ? o[i] : dflt[i];
    if (order[k - 1] == TL_AXIS_TP) order[k++] = TL_AXIS_CP;
  }
}

int tl_cost_axis_stride(const tl_plan* p, tl_axis axis) {
  tl_axis o[TL_N_AXES];
  tl_cost_plan_order(p, o);
  const int size[TL_N_AXES] = {[TL_AXIS_DP] = p->dp,
                               [TL_AXIS_TP] = p->tp,
                               [TL_AXIS_PP] = p->pp,
                               [TL_AXIS_CP] = tl_plan_cp(p)};
  int inner = 1;
  for (int i = 0; i < TL_N_AXES; i++) {
    if (o[i] == axis) return inner;
    inner *= size[o[i]];
  }
  return inner;
}

void tl_cost_axis_strides(const tl_plan* p, int* tp, int* dp, int* pp) {
  *tp = tl_cost_axis_stride(p, TL_AXIS_TP);
  *dp = tl_cost_axis_stride(p, TL_AXIS_DP);
  *pp = tl_cost_axis_stride(p, TL_AXIS_PP);
}

double tl_cost_ring(const tl_cluster* c, const tl_cost_model* cm, const tl_plan* p, int layers,
                    double attn_fwd, double attn_bwd, tl_dtype dtype, double* all) {
  const int cp = tl_plan_cp(p);
  *all = 0;
  if (cp <= 1 || cm->n_heads <= 0) return 0;
  /* a rank's key/value block of a micro-batch: its t = seq / cp rows of the
   * tensor-parallel rank's key/value heads; k and v travel in the
   * training's dtype (bf16 under bf16), their gradients in fp32 */
  const double hd = (double)cm->n_embd / cm->n_heads;
  const double elems = p->micro_batch * ((double)cm->seq / cp) * hd * cm->n_kv_heads / p->tp;
  const double kv_bytes = dtype == TL_BF16 ? 2.0 : 4.0;
  /* the ring's neighbours: in a node, or (some pair crosses) each rank
   * sending through its own card */
  const int s_cp = tl_cost_axis_stride(p, TL_AXIS_CP);
  const bool inside = (int64_t)s_cp * cp <= c->devices_per_node;
  const struct tl_link* link = inside ? &c->intra : &c->inter;
  const double kv = tl_cost_send(c, 2 * elems * kv_bytes, link); /* k and v, one hop */
  const double dkv = tl_cost_send(c, 2 * elems * 4.0, link);      /* dk and dv */
  const double b = p->micro_batch;
  const double step_f = attn_fwd * b / cp, step_b = attn_bwd * b / cp;
  /* recomputation runs each block's attention forward again (selective
   * recomputes just it; full, the whole block) */
  const int forwards = p->recompute == TL_RECOMPUTE_NONE ? 1 : 2;
  const double fwd = (cp - 1) * fmax(0, kv - step_f);
  const double bwd = (cp - 1) * fmax(0, kv - step_b) + cp * dkv; /* dk, dv after each block */
  *all = layers * (forwards * (cp - 1) * kv + (cp - 1) * kv + cp * dkv);
  return layers * (forwards * fwd + bwd);
}

/* The residues modulo the node's size of a stage's ranks relative to its
 * first: the other axes' coordinates times their strides. */
static void stage_residues(const tl_plan* p, int s_tp, int s_dp, int dpn, bool* seen) {
  memset(seen, 0, (size_t)dpn * sizeof *seen);
  seen[0] = true;
  const int n[3] = {p->tp, p->dp, tl_plan_cp(p)};
  const int stride[3] = {s_tp, s_dp, tl_cost_axis_stride(p, TL_AXIS_CP)};
  bool next[TL_COST_PP_MAX_NODE];
  for (int a = 0; a < 3; a++) {
    memset(next, 0, (size_t)dpn * sizeof *next);
    const int steps = n[a] < dpn ? n[a] : dpn; /* past dpn steps the residues repeat */
    for (int r = 0; r < dpn; r++)
      if (seen[r])
        for (int k = 0; k < steps; k++) next[(r + (int64_t)k * stride[a]) % dpn] = true;
    memcpy(seen, next, (size_t)dpn * sizeof *seen);
  }
}

/* The pipeline's layout as its boundaries read it: the stages' stride, the
 * node's size and the residues of a stage's ranks (filled only when some
 * boundary may stay in a node and the node fits the table). */
struct pp_layout {
  int s_pp, dpn;
  bool all_inter; /* every pair of neighbours a node or more apart */
  bool seen[TL_COST_PP_MAX_NODE];
};

static void pp_layout(const tl_cluster* c, const tl_plan* p, struct pp_layout* x) {
  int s_tp, s_dp;
  tl_cost_axis_strides(p, &s_tp, &s_dp, &x->s_pp);
  x->dpn = c->devices_per_node;
  x->all_inter = x->s_pp >= x->dpn ||
                 /* no residue table: any boundary past a node */
                 (x->dpn > TL_COST_PP_MAX_NODE && (int64_t)x->s_pp * p->pp > x->dpn);
  if (!x->all_inter && x->dpn <= TL_COST_PP_MAX_NODE)
    stage_residues(p, s_tp, s_dp, x->dpn, x->seen);
}

static const struct tl_link* boundary_link(const tl_cluster* c, const tl_plan* p,
                                           const struct pp_layout* x, int s) {
  if (x->all_inter) return &c->inter;
  if (x->dpn > TL_COST_PP_MAX_NODE) return &c->intra;
  /* stage s's first rank, and its neighbour's (the first stage after the
   * last: the interleaved schedule's next chunk) */
  const int64_t a = (int64_t)s * x->s_pp, b = s < p->pp - 1 ? a + x->s_pp : 0;
  for (int r = 0; r < x->dpn; r++)
    if (x->seen[r] && (r + a) / x->dpn != (r + b) / x->dpn) return &c->inter;
  return &c->intra;
}

const struct tl_link* tl_cost_pp_boundary_link(const tl_cluster* c, const tl_plan* p, int s) {
  if (p->pp < 2) return &c->intra;
  struct pp_layout x;
  pp_layout(c, p, &x);
  return boundary_link(c, p, &x, s);
}

double tl_cost_pp_sends(const tl_cluster* c, const tl_plan* p, double bytes) {
  const int pp = p->pp;
  if (pp < 2) return 0;
  struct pp_layout x;
  pp_layout(c, p, &x);
  const int v = tl_plan_chunks(p);
  /* boundary s's send (s = pp - 1: the wrap from the last stage's chunk to
   * the first stage's next, which a micro-batch crosses v - 1 times) */
  const double inter = tl_cost_send(c, bytes, &c->inter);
  const double wrap =
      v > 1 ? (x.all_inter ? inter : tl_cost_send(c, bytes, boundary_link(c, p, &x, pp - 1))) : 0;
  double behind = 0, worst = 0;
  for (int s = 0; s < pp; s++) {
    const double own =
        s < pp - 1 ? (x.all_inter ? inter : tl_cost_send(c, bytes, boundary_link(c, p, &x, s))) : 0;
    /* v sends on each of the stage's own boundaries; an end stage's other
     * side is the wrap's v - 1, or without interleaving its one boundary
     * again */
    const double ahead = s < pp - 1 ? v * own : v > 1 ? (v - 1) * wrap : behind;
    if (s == 0) behind = v > 1 ? (v - 1) * wrap : ahead;
    if (behind + ahead > worst) worst = behind + ahead;
    behind = ahead;
    if (x.all_inter && s == 1 && pp > 2) break; /* every middle stage alike */
  }
  return worst;
}

/* Half an all-reduce's ring and messages, at the collective's own share of
 * the link's bandwidth (the spec's collective_bandwidth; 1 unless measured). */
static double half_ring(const tl_cluster* c, double bytes, int n, const struct tl_link* link,
                        double share) {
  if (n <= 1) return 0;
  double messages = c->device == TL_DEVICE_CPU ? ceil(log2((double)n)) : (double)(n - 1);
  return (double)(n - 1) / n * bytes / (tl_link_bandwidth_at(link, bytes) * share) +
         messages * link->latency;
}

/* The buffer size a collective of `bytes` moves on `link` at a time. */
static double buffer(const struct tl_link* link, double bytes) {
  return link->message_bytes > 0 ? link->message_bytes : bytes;
}

double tl_cost_all_gather(const tl_cluster* c, double bytes, int n, const struct tl_link* link) {
  return half_ring(c, bytes, n, link, tl_cluster_share_at(c, true, buffer(link, bytes)));
}

double tl_cost_reduce_scatter(const tl_cluster* c, double bytes, int n,
                              const struct tl_link* link) {
  return half_ring(c, bytes, n, link, tl_cluster_share_at(c, false, buffer(link, bytes)));
}

double tl_cost_send(const tl_cluster* c, double bytes, const struct tl_link* link) {
  return bytes / (tl_link_bandwidth_at(link, bytes) * (c->bw_send_recv > 0 ? c->bw_send_recv : 1)) +
         link->latency;
}

/* The gradient's buckets: dp_bucket_mb of fp32 elements each, under ZeRO
 * 2 and 3 at least TL_DP_SHARDED_BUCKETS of them (none: one buffer), under
 * ZeRO-3 one at least for each of the stage's `units` (dp/buckets.c cuts
 * them at the units' edges). */
double tl__cost_dp_buckets(const tl_plan* p, double elems, int units) {
  double b =
      p->dp_bucket_mb > 0
          ? ceil(elems / (double)tl_dp_bucket_elems(p->zero, (int64_t)elems, p->dp_bucket_mb))
          : 1;
  /* a plan's one bucket (0; TL_PLAN_ONE_BUCKET_MB as a config, which
   * prices the same): the gradients reduced after the backward */
  if (p->zero == 3 && units > b && p->dp_bucket_mb > 0 && p->dp_bucket_mb < TL_PLAN_ONE_BUCKET_MB)
    b = units;
  return b > 1 ? b : 1;
}

/* The bytes a parameter moves in ZeRO 1 and 2's all-gather of the updated
 * parameters: bf16 under bf16 training (the working copy: trellis's, and
 * Megatron-LM's distributed optimizer's and DeepSpeed's bf16 optimizer's),
 * else fp32. */
static double gathered_bytes(tl_dtype dtype) {
  return dtype == TL_BF16 ? 2.0 : 4.0;
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
double tl__cost_dp_seconds(const tl_cluster* c, const tl_plan* p, double grads, int units,
                           const struct tl_link* whole, double comp, tl_dtype dtype) {
  const int d = tl_plan_data(p);
  if (d <= 1) return 0;
  const double wire = p->grad_reduce == TL_BF16 ? 2.0 : 4.0; /* bytes an element moves */
  const double param = gathered_bytes(dtype);
  const double buckets = tl__cost_dp_buckets(p, grads, units);
  /* each bucket moves at its own size's rate */
  const struct tl_link at_wire = tl_link_at(whole, grads * wire / buckets),
                       at_param = tl_link_at(whole, grads * param / buckets);
  const struct tl_link* link = &at_wire;
  double reduce = p->zero == 0 ? tl_cost_all_reduce(c, grads * wire, d, link)
                               : tl_cost_reduce_scatter(c, grads * wire, d, link);
  /* the updated parameters, whatever the gradients moved in
   * (tl_dp_buckets_gather_params) */
  double gather =
      p->zero == 1 || p->zero == 2 ? tl_cost_all_gather(c, grads * param, d, &at_param) : 0;
  int passes = p->zero >= 2 ? p->n_micro : 1;
  if (p->dp_bucket_mb <= 0 || p->no_overlap) return passes * reduce + gather;
  double last = reduce / buckets, hidden = comp * 2.0 / 3.0;
  double exposed = reduce - hidden > last ? reduce - hidden : last;
  return passes * exposed + gather;
}

/* The floor under tl__cost_dp_seconds plus ZeRO-3's gathers: the
 * data-parallel collectives share one link, so together they hide behind
 * no more compute than runs beside them. A micro-batch's forward hides
 * what it gathers; its backward (2/3 of its compute) hides its gathers and
 * its reduce-scatter — under ZeRO 0 and 1 the buckets run in the last
 * micro-batch's backward alone; the all-gather after the step (ZeRO 1 and
 * 2) hides behind nothing. Each unit's gather and each bucket priced alone
 * can hide behind the same compute as the next; this is what they cannot
 * all do at once. */
double tl__cost_dp_floor(const tl_cluster* c, const tl_plan* p, double grads,
                         const struct tl_link* whole, double comp, double zero3_all,
                         tl_dtype dtype) {
  const int d = tl_plan_data(p), m = p->n_micro;
  if (d <= 1 || p->no_overlap) return 0;
  const double wire = p->grad_reduce == TL_BF16 ? 2.0 : 4.0;
  const double param = gathered_bytes(dtype);
  const double buckets = tl__cost_dp_buckets(p, grads, 1);
  const struct tl_link at_wire = tl_link_at(whole, grads * wire / buckets),
                       at_param = tl_link_at(whole, grads * param / buckets);
  const struct tl_link* link = &at_wire;
  const double reduce = p->zero == 0 ? tl_cost_all_reduce(c, grads * wire, d, link)
                                     : tl_cost_reduce_scatter(c, grads * wire, d, link);
  const double after =
      p->zero == 1 || p->zero == 2 ? tl_cost_all_gather(c, grads * param, d, &at_param) : 0;
  const double fwd = comp / 3.0, bwd = comp * 2.0 / 3.0;
  double front = 0, hide_front = 0, back, hide_back;
  if (p->zero <= 1) {
    back = reduce, hide_back = p->dp_bucket_mb > 0 ? bwd : 0;
  } else {
    back = m * reduce, hide_back = p->dp_bucket_mb > 0 || p->zero == 3 ? m * bwd : 0;
    /* ZeRO-3's gathers, half in the forwards and half in the backwards */
    front = zero3_all / 2, back += zero3_all / 2, hide_front = m * fwd;
  }
  return fmax(0, front - hide_front) + fmax(0, back - hide_back) + after;
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

/* The run holding unit i of the units u[0..n) spells out. */
static const struct tl_cost_unit* unit_at(const struct tl_cost_unit* u, int n, int i) {
  for (int r = 0; r < n; r++) {
    if (i < u[r].count) return &u[r];
    i -= u[r].count;
  }
  return &u[n - 1];
}

struct zero3_pass {
  const tl_cluster* c;
  const struct tl_link* link;
  const struct tl_cost_unit* u;
  int n, units, d;
  double hide;   /* 1: compute hides gathers; 0: overlapping nothing */
  double bytes;  /* a parameter's on the wire */
  double bucket; /* the most bytes one gather moves (a unit goes in buckets) */
};

static double gather_of(const struct zero3_pass* z, const struct tl_cost_unit* x) {
  const double all = z->bytes * x->params;
  const struct tl_link at = tl_link_at(z->link, all < z->bucket ? all : z->bucket);
  return tl_cost_all_gather(z->c, all, z->d, &at);
}

/* What gathering unit i shows in a forward (the first whole, the others
 * behind the forward of the unit before) or a backward (the last whole,
 * the others behind the backward of the unit after). */
static double shows(const struct zero3_pass* z, int i, bool backward) {
  const struct tl_cost_unit* x = unit_at(z->u, z->n, i);
  const double g = gather_of(z, x);
  if (!backward) return i == 0 ? g : fmax(0, g - z->hide * unit_at(z->u, z->n, i - 1)->fwd);
  return i == z->units - 1 ? g : fmax(0, g - z->hide * unit_at(z->u, z->n, i + 1)->bwd);
}

/* A pass's exposed gathers when units h0 and h1 are already in the slots
 * (-1: none), summed run by run. */
static double pass(const struct zero3_pass* z, bool backward, int h0, int h1) {
  double t = shows(z, backward ? z->units - 1 : 0, backward);
  for (int r = 0; r < z->n; r++) {
    const struct tl_cost_unit* x = &z->u[r];
    const double g = gather_of(z, x);
    t += (x->count - 1) * fmax(0, g - z->hide * (backward ? x->bwd : x->fwd));
    if (!backward && r > 0) t += fmax(0, g - z->hide * z->u[r - 1].fwd);
    if (backward && r < z->n - 1) t += fmax(0, g - z->hide * z->u[r + 1].bwd);
  }
  if (h0 >= 0 && h0 < z->units) t -= shows(z, h0, backward);
  if (h1 >= 0 && h1 < z->units && h1 != h0) t -= shows(z, h1, backward);
  return t;
}

double tl_cost_zero3_gathers(const tl_cluster* c, const tl_plan* p, int s,
                             const struct tl_cost_unit* u, int n, double late,
                             const struct tl_link* link, tl_dtype precision) {
  const int d = tl_plan_data(p), m = p->n_micro;
  if (d <= 1 || n <= 0) return 0;
  const double bytes = precision == TL_BF16 ? 2.0 : 4.0;
  /* the units' own parameters: what buckets are cut from and the slots
   * sized by; and a late parameter gathered with some of them, once */
  double early = 0, unit_max = 0, with = 0;
  for (int r = 0; r < n; r++) {
    early += (u[r].params - u[r].late) * u[r].count;
    unit_max = fmax(unit_max, u[r].params - u[r].late), with = fmax(with, u[r].late);
  }
  /* one slot (dp/units.c): nothing gathered ahead, and a pass finds only
   * the unit the last one ended on */
  const bool one = tl_dp_zero3_slots((int64_t)(early + late + with), (int64_t)(late + with),
                                     (int64_t)unit_max, d) < 2;
  const double bucket =
      p->dp_bucket_mb > 0
          ? (double)tl_dp_bucket_elems(p->zero, (int64_t)early, p->dp_bucket_mb) * bytes
          : HUGE_VAL;
  struct zero3_pass z = {c, link, u, n, 0, d, p->no_overlap || one ? 0 : 1, bytes, bucket};
  for (int r = 0; r < n; r++) z.units += u[r].count;
  const int N = z.units, runs = forward_runs(p, s);
  /* the slots hold the last two units a pass ran: N-2 and N-1 after a
   * forward, 1 and 0 after a backward (one slot: N-1, 0), none at the
   * step's start (the late parameters are gathered then, whole) */
  const struct tl_link late_at = tl_link_at(link, fmin(bytes * late, bucket));
  const int fwd_held = one ? -1 : N - 2, bwd_held = one ? -1 : 1;
  return tl_cost_all_gather(c, bytes * late, d, &late_at) + pass(&z, false, -1, -1) +
         runs * pass(&z, false, fwd_held, N - 1) + (m - runs - 1) * pass(&z, false, 0, bwd_held) +
         (m - runs) * pass(&z, true, fwd_held, N - 1) + runs * pass(&z, true, 0, bwd_held);
}
