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
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/atomic_file.h"
#include "core/device.h"
#include "kernels/backend.h"
#include "launcher/cli/calibrate_impl.h"
#include "launcher/cli/cli.h"
#include "launcher/job/spawn.h"
#include "launcher/job/worker.h"
#include "planner/cluster.h"

static double min_fraction(const double* rates, double peak) {
  double lo = 1;
  for (int i = 0; i < CAL_N_GEMM; i++) lo = fmin(lo, rates[i] / peak);
  return lo;
}

/* The figures rank 0 writes. */
struct calibration {
  int ranks, threads, nodes, per_node;
  int cores; /* CPU: the online cores of rank 0's node, which its ranks share */
  /* CPU, more ranks a node than cores: what one of a computing ranks gets
   * over what it gets while all compute (tl__calibrate_shared_speeds), a = 1 .. per_node,
   * the mean over the nodes; 0 entries when not measured */
  int n_speed;
  double speed[TL_SHARED_SPEED_MAX];
  tl_device_type device;
  char gpu[128];
  const int* grid;
  double gemm[CAL_N_GEMM];      /* GFLOP/s, the ranks' mean */
  double attn_table[CAL_N_ATT]; /* GFLOP/s by head dimension and sequence length */
  double peak, slowest, fp32, attention, elementwise;
  double optimizer; /* AdamW's bytes moved a second, GB/s (the ranks' mean) */
  /* inside a node and between nodes (one node: the same figures); the
   * spec's collective shares are those of the link the job's data-parallel
   * and pipeline traffic crosses: inter's on several nodes */
  struct link_figures intra, inter;
  double memory, reserve;
};

static void describe_link_rates(const struct link_figures* l, bool gpu, const char* over, char* buf,
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

/* One link's figures in words, for the spec's comment. */
static void describe_link(const struct link_figures* l, bool gpu, const char* over, char* buf,
                          size_t size) {
  char sizes[256] = "";
  for (int i = 0, at = 0; i < l->n_sizes && at < (int)sizeof sizes; i++)
    at += l->size_bytes[i] < (1 << 20)
              ? snprintf(sizes + at, sizeof sizes - (size_t)at, "%s%.3g at %.0f KiB", i ? ", " : "",
                         l->size_bus[i], l->size_bytes[i] / (1 << 10))
              : snprintf(sizes + at, sizeof sizes - (size_t)at, "%s%.3g at %.0f MiB", i ? ", " : "",
                         l->size_bus[i], l->size_bytes[i] / (1 << 20));
  describe_link_rates(l, gpu, over, buf, size);
  if (l->n_sizes > 0 && strlen(buf) + strlen(sizes) + 64 < size)
    snprintf(buf + strlen(buf), size - strlen(buf),
             "; bandwidth_by_size: the bus bandwidth by buffer, %s (the slowest rank's medians)",
             sizes);
}

/* ", \"bandwidth_by_size\": [[bytes, bytes/s], ...]" of a measured link, or "". */
static void by_size(const struct link_figures* l, char* buf, size_t size) {
  buf[0] = 0;
  if (l->n_sizes < 2 || l->bus <= 0) return;
  size_t at = (size_t)snprintf(buf, size, ", \"bandwidth_by_size\": [");
  for (int i = 0; i < l->n_sizes && at < size; i++)
    at += (size_t)snprintf(buf + at, size - at, "%s[%.0f, %.4g]", i ? ", " : "", l->size_bytes[i],
                           l->size_bus[i]);
  if (at < size) snprintf(buf + at, size - at, "]");
}

static tl_status write_spec(const struct calibration* k, const char* out) {
  const bool gpu = k->device == TL_DEVICE_CUDA;
  const int n = k->ranks;
  char axis[64] = "", table[2048] = "", what[1024], net[1600], mem[1024];
  for (int i = 0; i < CAL_GRID; i++)
    snprintf(axis + strlen(axis), sizeof axis - strlen(axis), "%s%d", i ? ", " : "", k->grid[i]);
  for (int i = 0; i < CAL_N_GEMM; i++)
    snprintf(table + strlen(table), sizeof table - strlen(table), "%s%s%.4g", i ? "," : "",
             i % CAL_GRID == 0 ? "\n      " : " ", fmax(1e-6, k->gemm[i] / k->peak));
  const struct bench_shapes* shapes = tl__calibrate_shapes(gpu);
  char hd[64] = "", seqs[64] = "", attn[512] = "";
  for (int i = 0; i < CAL_ATT_HD; i++)
    snprintf(hd + strlen(hd), sizeof hd - strlen(hd), "%s%d", i ? ", " : "", shapes->head_dims[i]);
  for (int j = 0; j < CAL_ATT_T; j++)
    snprintf(seqs + strlen(seqs), sizeof seqs - strlen(seqs), "%s%d", j ? ", " : "",
             shapes->seqs[j]);
  for (int i = 0; i < CAL_N_ATT; i++)
    snprintf(attn + strlen(attn), sizeof attn - strlen(attn), "%s%.4g", i ? ", " : "",
             fmax(1e-6, fmin(1, k->attn_table[i] / k->peak)));
  const int* a = shapes->attention;
  const int rows = shapes->rows, c = shapes->c;
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
             n, n == 1 ? "" : "s", k->gpu, CAL_N_GEMM, axis, k->peak, k->slowest,
             k->grid[CAL_GRID - 1], k->fp32);
  else
    snprintf(what, sizeof what,
             "Measured by trellis plan --calibrate on %d rank%s with %d CPU thread%s each, all "
             "at once: the CPU backend's matmul at %d shapes (m, n, k in %s), %.1f GFLOP/s per "
             "rank at best (the peak; slowest rank %.1f), each shape's rate a fraction of it in "
             "gemm_efficiency",
             n, n == 1 ? "" : "s", k->threads, k->threads == 1 ? "" : "s", CAL_N_GEMM, axis,
             k->peak, k->slowest);
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
  char sizes_in[512], sizes_out[512], shares_by[512] = "";
  by_size(li, sizes_in, sizeof sizes_in);
  by_size(le, sizes_out, sizeof sizes_out);
  if (shared->n_sizes >= 2 && shared->bus > 0) { /* the shares by size too */
    size_t at = (size_t)snprintf(shares_by, sizeof shares_by, ", \"by_size\": [");
    for (int i = 0; i < shared->n_sizes && at < sizeof shares_by; i++)
      at += (size_t)snprintf(shares_by + at, sizeof shares_by - at, "%s[%.0f, %.4g, %.4g]",
                             i ? ", " : "", shared->size_bytes[i], shared->size_gather[i],
                             shared->size_scatter[i]);
    if (at < sizeof shares_by) snprintf(shares_by + at, sizeof shares_by - at, "]");
  }
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
           "  \"intra_node\": {\"bandwidth\": %.4g, \"latency\": %.4g%s},\n"
           "  \"inter_node\": {\"bandwidth\": %.4g, \"latency\": %.4g%s},\n"
           "  \"collective_bandwidth\": {\"all_gather\": %.4g, \"reduce_scatter\": %.4g, "
           "\"send_recv\": %.4g%s},\n"
           "  \"compute_efficiency\": %.4g,\n  \"attention_efficiency\": %.4g,\n"
           "  \"attention_efficiency_table\": {\"head_dim\": [%s], \"seq\": [%s],\n"
           "    \"efficiency\": [%s]},\n"
           "  \"gemm_efficiency\": {\n    \"m\": [%s], \"n\": [%s], \"k\": [%s],\n"
           "    \"efficiency\": [%s]\n  },\n"
           "  \"reserve_bytes\": %.4g,\n  \"allocator_overhead\": 0,\n"
           "  \"memory_bandwidth\": %.4g%s\n}\n",
           what, a[0], a[1], a[2], a[3], k->attention, rows, c, k->elementwise, shapes->attn_heads,
           shapes->attn_tokens, (int)tl__calibrate_buffer_elems(shapes), k->optimizer * 1e9, net,
           shares, mem, gpu ? "cuda" : "cpu", k->nodes, k->per_node, k->memory, peaks, bw_in,
           lat_in, sizes_in, bw_out, lat_out, sizes_out, shared->share_gather,
           shared->share_scatter, shared->share_send, shares_by,
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
    snprintf(msg, sizeof msg, "trellis plan --calibrate: %s", tl_cli_error());
    tl_worker_fail(msg);
  }
  const bool gpu = device == TL_DEVICE_CUDA;
  struct calibration k;
  memset(&k, 0, sizeof k);
  k.ranks = w.world_size, k.threads = w.threads, k.device = device;
  k.grid = tl__calibrate_shapes(gpu)->grid;
  /* every rank measures at once (sharing the machine as training will);
   * the job keeps each figure's mean over the ranks, and the slowest rank's
   * best GEMM rate */
  tl_backend* be = NULL;
  tl_status st = tl_backend_create(w.device, &be);
  double v[CAL_N_GEMM + 4 + CAL_N_ATT] = {0};
  if (st == TL_OK)
    st = tl__calibrate_kernels(be, w.world_size > 1 ? w.world : NULL, tl__calibrate_shapes(gpu), v,
                               &v[CAL_N_GEMM], &v[CAL_N_GEMM + 1], &v[CAL_N_GEMM + 4],
                               &v[CAL_N_GEMM + 2]);
  if (st == TL_OK)
    st = tl__calibrate_optimizer(be, w.world_size > 1 ? w.world : NULL,
                                 tl__calibrate_buffer_elems(tl__calibrate_shapes(gpu)),
                                 &v[CAL_N_GEMM + 3]);
  double best = 0;
  for (int i = 0; i < CAL_N_GEMM && st == TL_OK; i++) best = fmax(best, v[i]);
  if (st == TL_OK)
    st = tl__calibrate_job_reduce(w.world, w.world_size, v, CAL_N_GEMM + 4 + CAL_N_ATT,
                                  TL_REDUCE_SUM);
  double neg = -best;
  if (st == TL_OK) st = tl__calibrate_job_reduce(w.world, w.world_size, &neg, 1, TL_REDUCE_MAX);
  k.slowest = -neg;
  memcpy(k.gemm, v, sizeof k.gemm);
  k.fp32 = v[CAL_N_GEMM], k.attention = v[CAL_N_GEMM + 1], k.elementwise = v[CAL_N_GEMM + 2];
  k.optimizer = v[CAL_N_GEMM + 3];
  memcpy(k.attn_table, &v[CAL_N_GEMM + 4], sizeof k.attn_table);
  for (int i = 0; i < CAL_N_GEMM; i++) k.peak = fmax(k.peak, k.gemm[i]);
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
  if (st == TL_OK) st = tl__calibrate_link(ng.node, w.world, n, w.device, &k.intra);
  if (st == TL_OK && k.nodes > 1) st = tl__calibrate_link(ng.rail, w.world, n, w.device, &k.inter);
  if (k.nodes == 1) k.inter = k.intra;
  if (k.per_node == 1) k.intra = k.inter; /* a placeholder: no group lies within a node */
  /* ranks sharing their node's cores, each on the trainer's automatic
   * threads: how fast a rank computes while only some do (a pipeline's
   * bubble), every node at once */
  const long online = tl_cpu_cores();
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
    st = tl__calibrate_shared_speeds(ng.host_node, sp);
    if (st == TL_OK)
      st = tl__calibrate_job_reduce(w.world, w.world_size, sp, k.per_node, TL_REDUCE_SUM);
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
    if (st == TL_OK)
      st = tl__calibrate_job_reduce(w.world, w.world_size, &k.reserve, 1, TL_REDUCE_MAX);
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
    snprintf(msg, sizeof msg, "trellis plan --calibrate: %s", tl_cli_error());
    tl_worker_fail(msg);
  }
  int rc = 0;
  double attn_lo = HUGE_VAL, attn_hi = 0;
  for (int i = 0; i < CAL_N_ATT; i++)
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
               ", %d ranks on %d core%s: one computing alone runs x%.2f the rate all get (the "
               "cores' share: x%.2f)",
               k.per_node, k.cores, k.cores == 1 ? "" : "s", k.speed[0],
               (double)k.per_node / k.cores);
    if (st == TL_OK)
      printf(
          "calibrated %d rank%s%s%s: matmul %.1f GFLOP/s per rank at best (%.0f%% to 100%% "
          "of it over %d shapes), attention %.0f%% (%.0f%% to %.0f%% over %d shapes), "
          "element-wise %.0f%%, AdamW %.3g bytes/s, %s (all-gather x%.2f, reduce-scatter x%.2f, "
          "send x%.2f)%s%s; wrote %s\n",
          n, n == 1 ? "" : "s", gpu ? " on " : "", gpu ? k.gpu : "", k.peak,
          100 * min_fraction(k.gemm, k.peak), CAL_N_GEMM, 100 * k.attention / k.peak,
          100 * attn_lo / k.peak, 100 * attn_hi / k.peak, CAL_N_ATT, 100 * k.elementwise / k.peak,
          k.optimizer * 1e9, links, sh->share_gather, sh->share_scatter, sh->share_send,
          gpu ? ", reserve measured" : "", sharing, out);
    else
      fprintf(stderr, "trellis plan --calibrate: %s\n", tl_cli_error()), rc = 1;
  }
  if (n > 1) {
    int32_t code = rc;
    tl_group_broadcast(w.world, &code, 1, TL_I32, 0, NULL);
    rc = code;
  }
  return tl_worker_end(&w, rc);
}
