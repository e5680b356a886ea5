/* calibrate_impl.h — the measurements `trellis plan --calibrate` makes
 * (calibrate.c says what and why): the kernels on a rank's backend
 * (calibrate_kernels.c) and the links over the job's groups
 * (calibrate_links.c); calibrate.c runs them and writes the spec. */
#ifndef TL_LAUNCHER_CALIBRATE_IMPL_H
#define TL_LAUNCHER_CALIBRATE_IMPL_H

#include <stdbool.h>
#include <stddef.h>

#include "core/group.h"
#include "kernels/backend.h"

/* The GEMM table's sizes on each axis (m, n, k), as trellis plan writes
 * them: a block of a small GPT on a CPU multiplies (B*T, C..4C, C..4C); on
 * a GPU, GPT-2's (8192, 768..3072, 768..3072) and beyond. */
#define CAL_GRID 4
#define CAL_N_GEMM (CAL_GRID * CAL_GRID * CAL_GRID)

/* The attention table's head dimensions and sequence lengths: attention
 * of bench_shapes.attn_heads heads over attn_tokens / t sequences of t
 * tokens. */
#define CAL_ATT_HD 4
#define CAL_ATT_T 3
#define CAL_N_ATT (CAL_ATT_HD * CAL_ATT_T)

/* What one device kind is measured at. */
struct bench_shapes {
  const int* grid;
  int attention[4]; /* b, t, c, heads */
  int rows, c;      /* the element-wise ops' */
  const int *head_dims, *seqs;
  int attn_heads, attn_tokens;
};

/* The shapes a GPU (gpu) or a CPU is measured at. */
const struct bench_shapes* tl__calibrate_shapes(bool gpu);

/* What this rank's backend reaches: GFLOP/s of the matmul (bf16 where the
 * backend multiplies bf16 itself) at every point of the grid (gemm[(i *
 * CAL_GRID + j) * CAL_GRID + l] at m = grid[i], n = grid[j], k = grid[l]),
 * of the fp32 matmul at the grid's largest shape, of attention's forward
 * and backward (and by head dimension and sequence length, attn_table) and
 * of the element-wise ops, each counted as the graph counts its FLOPs
 * (graph/ops/). With `sync`, the job meets before each kernel is timed. */
tl_status tl__calibrate_kernels(tl_backend* be, tl_group* sync, const struct bench_shapes* sh,
                                double* gemm, double* fp32, double* attention, double* attn_table,
                                double* elementwise);

/* Floats in each of tl__calibrate_kernels()'s buffers: the largest operand
 * it runs. */
size_t tl__calibrate_buffer_elems(const struct bench_shapes* sh);

/* AdamW's bytes a second (GB/s of the 28 bytes a parameter it reads and
 * writes) on this rank over n parameters, every rank of `world` at once. */
tl_status tl__calibrate_optimizer(tl_backend* be, tl_group* world, size_t n, double* gbps);

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
  /* the all-reduce's bus bandwidth by buffer size (planner/cluster.h's
   * bandwidth_by_size): CAL_N_SIZES sizes, the slowest rank's medians */
  int n_sizes;
  double size_bytes[8], size_bus[8];
  double size_gather[8], size_scatter[8]; /* the shares at each size */
};

/* Collective over the job (`world`, `size` ranks): g is this rank's group
 * of the kind measured. Every figure is the slowest rank's. */
tl_status tl__calibrate_link(tl_group* g, tl_group* world, int size, tl_device device,
                             struct link_figures* l);

/* How fast a rank computes while only `a` of its node's n ranks do, the
 * others waiting on a receive: speed[a - 1] for a = 1 .. n (speed[n - 1]
 * = 1), on the node's group `g` (CPU, ranks sharing cores). */
tl_status tl__calibrate_shared_speeds(tl_group* g, double* speed);

/* The job's mean of v[0..n) (in place; op TL_REDUCE_SUM), or its maximum
 * (TL_REDUCE_MAX); n at most CAL_N_GEMM + CAL_N_ATT + 8. */
tl_status tl__calibrate_job_reduce(tl_group* world, int size, double* v, int n, tl_reduce_op op);

#endif
