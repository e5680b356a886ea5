/* cluster.h — what the planner knows of a cluster: how many nodes and
 * devices, each device's memory and peak arithmetic, and the links between
 * devices inside a node and between nodes, as bandwidth + latency (the
 * alpha-beta model the cost model prices collectives with).
 *
 * A cluster is one JSON document (examples/clusters/ holds several):
 *
 *   {"name": "dgx_a100", "comment": "...", "device": "cuda",
 *    "nodes": 4, "devices_per_node": 8, "device_memory_bytes": 80e9,
 *    "peak_flops": {"fp32": 19.5e12, "bf16": 312e12},
 *    "intra_node": {"bandwidth": 300e9, "latency": 5e-6},
 *    "inter_node": {"bandwidth": 25e9, "latency": 1e-5},
 *    "compute_efficiency": 0.6, "efficiency_half_flops": 4e10,
 *    "attention_efficiency": 0.12, "reserve_bytes": 2e9, "allocator_overhead": 0.1,
 *    "gemm_efficiency": {"m": [...], "n": [...], "k": [...], "efficiency": [...]},
 *    "attention_efficiency_table": {"head_dim": [...], "seq": [...], "efficiency": [...]},
 *    "collective_bandwidth": {"all_gather": 1.1, "reduce_scatter": 1.05, "send_recv": 0.9},
 *    "cores_per_node": 2, "shared_core_speed": [3.5, 3.3, 2.1, ..., 1]}
 *
 * Bandwidths are bytes/s per device and direction (what one device's ring
 * neighbour link carries: a collective whose group spans nodes crosses them
 * through each member's own card, planner/cost.h), latencies seconds per
 * message. The keys from compute_efficiency on are optional: the fraction of
 * peak the model's arithmetic reaches (TL_CLUSTER_DEFAULT_EFFICIENCY), how it
 * falls for small layers (the efficiency is compute_efficiency * x / (x +
 * efficiency_half_flops), x the FLOPs of one block's forward on one rank;
 * default 0, flat), the fraction the attention kernels reach
 * ("attention_efficiency", default the former), the bytes a device keeps
 * back for its runtime (CUDA context, library workspaces, communication
 * buffers), the fraction of the tensors' bytes its allocator holds on top
 * (a caching allocator's cache and fragmentation), and the matrix
 * products' efficiency by shape ("gemm_efficiency", below: with it every
 * product is priced by its shape and compute_efficiency is the rest's, the
 * element-wise nodes'), and the attention kernels' by head dimension and
 * sequence length ("attention_efficiency_table": with it a model's attention
 * runs at its own shape's, in place of attention_efficiency), and the
 * all-gather's, reduce-scatter's and a point-to-point send's bus bandwidth
 * as shares of the links' ("collective_bandwidth", each default 1: the links'
 * bandwidth is the all-reduce's), and on a CPU cluster the cores a node's
 * ranks share ("cores_per_node", below) and the rate a computing rank gets
 * while others wait ("shared_core_speed", below). */
#ifndef TL_PLANNER_CLUSTER_H
#define TL_PLANNER_CLUSTER_H

#include <stdbool.h>

#include "core/device.h"
#include "core/dtype.h"
#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Fraction of peak FLOP/s the executed arithmetic reaches when a cluster
 * does not say: a round guess. The DGX specs carry figures fitted on the
 * published runs of tests/planner/published_test.cc other than Narayanan et
 * al. 2021 Table 1 (tests/planner/table1_test.cc): the best point of a grid
 * that published_test re-runs. */
#define TL_CLUSTER_DEFAULT_EFFICIENCY 0.5
#define TL_CLUSTER_DEFAULT_RESERVE 2e9

/* Fraction of peak a matrix product of (m x k) times (k x n) reaches, on a
 * grid of sizes per axis ("gemm_efficiency" in a spec: {"m": [...], "n":
 * [...], "k": [...], "efficiency": [...]}, the efficiencies m-major, then
 * n, then k: index (i * n_n + j) * n_k + l), read between the grid's points
 * by trilinear interpolation in log2 of each size and held at its edges.
 * `trellis plan --calibrate` measures one: the CPU backend's fp32 matmul,
 * or with --device cuda the bf16 matmul as bf16 training runs it (with the
 * GPU's memory and the reserve the process holds beyond its tensors). */
#define TL_GEMM_AXIS_MAX 8
struct tl_gemm_table {
  int n_m, n_n, n_k; /* 0: no table */
  double m[TL_GEMM_AXIS_MAX], n[TL_GEMM_AXIS_MAX], k[TL_GEMM_AXIS_MAX];
  double eff[TL_GEMM_AXIS_MAX * TL_GEMM_AXIS_MAX * TL_GEMM_AXIS_MAX];
};

/* the most ranks a node's "shared_core_speed" describes */
#define TL_SHARED_SPEED_MAX 64

/* A link's all-reduce bus bandwidth by message size ("bandwidth_by_size":
 * [[bytes, bytes/s], ...], sizes rising, up to TL_LINK_SIZES): on CPUs a
 * buffer that outgrows the caches moves at a fraction of what a 4 MiB one
 * does (4 ranks on this project's 2-core machines: 1.2e9 bytes/s at 4 MiB,
 * 1.0e9 at 12.8 MB, 6e8 at 32 MiB, tools of trellis plan --calibrate), on
 * GPUs small messages fall short of the link's rate. Read log-linearly in
 * the size between its points, held at its ends; a link without it moves
 * every message at `bandwidth`. */
#define TL_LINK_SIZES 8

struct tl_link {
  double bandwidth; /* bytes/s per device, each direction */
  double latency;   /* seconds per message */
  int n_sizes;      /* 0: no bandwidth_by_size */
  double size_bytes[TL_LINK_SIZES], size_bandwidth[TL_LINK_SIZES];
  /* > 0: every collective on this link moves buffers of this size (a
   * gradient in buckets: tl_link_at), priced at its rates; 0: one buffer */
  double message_bytes;
};

/* The all-gather's (gather true) or reduce-scatter's share of the links'
 * bandwidth for buffers of `bytes`: collective_bandwidth's by_size, else
 * its single figure. */
struct tl_cluster;
double tl_cluster_share_at(const struct tl_cluster* c, bool gather, double bytes);

/* The link's bandwidth for messages of `bytes` (its curve, else bandwidth). */
double tl_link_bandwidth_at(const struct tl_link* l, double bytes);
/* The link as collectives that move their data in buffers of `bytes` see
 * it (a gradient in buckets, a unit's parameters): message_bytes set. */
struct tl_link tl_link_at(const struct tl_link* l, double bytes);

typedef struct tl_cluster {
  char name[64];
  tl_device_type device; /* "cpu" | "cuda" */
  int nodes;
  int devices_per_node;
  double device_memory_bytes;
  double peak_fp32, peak_bf16; /* FLOP/s per device; bf16 0 = none */
  struct tl_link intra, inter;
  double efficiency; /* fraction of peak reached by large kernels; (0, 1] */
  /* FLOPs per rank of one block's forward at which a device reaches half of
   * `efficiency` (small matrix products run further from peak); 0 = flat */
  double efficiency_half_flops;
  /* fraction of peak the attention kernels' FLOPs reach (forward and
   * backward; the graph's TL_OP_ATTENTION nodes): they run far below the
   * matrix products (short head dimensions, a softmax per tile); default
   * `efficiency` */
  double attention_efficiency;
  double reserve_bytes; /* kept back per device */
  /* what the runtime's allocator holds beyond the live tensors, as a
   * fraction of their peak ("allocator_overhead", default 0): a caching
   * allocator's cached blocks and fragmentation. trellis allocates each
   * buffer from the device and caches none (0); the shipped GPU specs
   * carry what PyTorch-based runs held (planner/README.md) */
  double allocator_overhead;
  /* bytes/s a device's memory moves, read and written together
   * ("memory_bandwidth"; 0, the default: unknown). Prices what streams
   * through memory once a step with little arithmetic a byte — the
   * optimizer's update (TL_COST_OPTIMIZER_BYTES) — where the bytes take
   * longer than the FLOPs at the element-wise rate, as on a GPU */
  double memory_bandwidth;
  /* the matrix products' efficiency by shape; with it they are priced
   * product by product (planner/cost.h), without it at `efficiency` */
  struct tl_gemm_table gemm;
  /* the attention kernels' efficiency by head dimension (m) and sequence
   * length (n; k is {1}): "attention_efficiency_table" {"head_dim": [...],
   * "seq": [...], "efficiency": [...]}, head_dim-major, read like the GEMM
   * table; without it every model's attention runs at attention_efficiency */
  struct tl_gemm_table attention;
  /* each collective's bus bandwidth as a share of the links' (which is the
   * all-reduce's): "collective_bandwidth" {"all_gather": x, "reduce_scatter":
   * x, "send_recv": x}, each default 1; --calibrate measures them; and by
   * buffer size ("by_size": [[bytes, all_gather, reduce_scatter], ...],
   * sizes rising, read like a link's bandwidth_by_size: the shares move
   * with the size, 2.1 and 1.2 at 4 MiB, 1.2 and 0.85 at 12.8 MB on 4
   * ranks of this project's machines), which then stand for the first two */
  double bw_all_gather, bw_reduce_scatter, bw_send_recv;
  int n_share_sizes;
  double share_bytes[TL_LINK_SIZES], share_gather[TL_LINK_SIZES], share_scatter[TL_LINK_SIZES];
  /* CPU clusters: the cores a node's ranks share ("cores_per_node"; 0, the
   * default: each rank computes on cores of its own). With more ranks than
   * cores the spec's rates are what each rank gets while all compute at
   * once (--calibrate measures them so and writes the count); a rank left
   * idle by the pipeline's bubble gives its share to the busy ones, and a
   * plan on fewer ranks gives each a larger share (planner/cost.h) */
  int cores_per_node;
  /* the ranks a node ran when the spec's rates were measured: its
   * devices_per_node as parsed (a search over part of a node lowers
   * devices_per_node and keeps this) */
  int rated_ranks_per_node;
  /* with cores_per_node: shared_speed[a - 1] is what one of `a` computing
   * ranks gets while the node's other rated ranks wait on receives, over
   * what it gets while all compute ("shared_core_speed", a = 1 ..
   * devices_per_node, the last 1; --calibrate measures it). The waiting
   * ranks wake to poll and the scheduler places them beside the busy ones,
   * so a rank computing alone gets less than the cores' ideal share. 0
   * entries: the ideal share (cores / a each, up to its threads) */
  int n_shared_speed;
  double shared_speed[TL_SHARED_SPEED_MAX];
} tl_cluster;

/* The table's efficiency at (m, n, k); `efficiency` when c has none. */
double tl_cluster_gemm_efficiency(const tl_cluster* c, double m, double n, double k);

/* The attention kernels' efficiency at a head dimension and sequence length:
 * the table's where c has one, else attention_efficiency (itself defaulting
 * to efficiency). */
double tl_cluster_attention_efficiency(const tl_cluster* c, double head_dim, double seq);

/* A fused (flash) attention kernel's rate as a share of the matrix
 * products' (`efficiency`): FlashAttention's algorithm reached 25-40% of
 * an A100's peak in its first versions (Dao 2023, the FlashAttention-2
 * paper) where the products reach about 0.65. A published figure, not a
 * fit. The GPU specs' attention_efficiency is the unfused kernels' of the
 * Megatron-LM runs they were fitted on (trellis's CUDA attention is a
 * fallback kernel of flash attention's algorithm, not a tuned one). */
#define TL_CLUSTER_FUSED_ATTENTION 0.5

/* Prices attention as a runtime with a fused kernel runs it (`trellis plan
 * --fix attention=fused`, a published run's): at TL_CLUSTER_FUSED_ATTENTION
 * of the products' efficiency, in place of the spec's attention efficiency
 * and table. */
void tl_cluster_use_fused_attention(tl_cluster* c);

static inline int tl_cluster_devices(const tl_cluster* c) {
  return c->nodes * c->devices_per_node;
}

/* Peak FLOP/s per device for dtype (TL_BF16 or TL_F32); 0 when unknown. */
double tl_cluster_peak(const tl_cluster* c, tl_dtype dtype);

/* The peak the spec's attention and element-wise fractions are of, in
 * bf16 and fp32 plans alike: the bf16 peak where the device has one, else
 * fp32's. trellis's kernels other than the matrix products compute in fp32
 * whatever the training precision (graph/graph.h: bf16 only stores their
 * values), so they run at one rate in both; the matrix products run at
 * their dtype's peak (tl_cluster_peak). */
double tl_cluster_kernel_peak(const tl_cluster* c);

/* Parses a cluster file / text. Errors name the JSON path, the value and
 * what was expected; *out is zeroed on failure. */
tl_status tl_cluster_load(const char* path, tl_cluster* out);
tl_status tl_cluster_parse(const char* json_text, const char* source_name, tl_cluster* out);

#ifdef __cplusplus
}
#endif

#endif
