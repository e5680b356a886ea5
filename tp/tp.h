/* tp.h — tensor parallelism: one rank's part of a graph that knows no mesh.
 *
 * A model builder (graph/model.h) makes the full logical graph, the same for
 * every mesh. tl_tp_shard_graph rewrites it into the graph rank `rank` of a
 * tensor-parallel group of `tp` runs, Megatron-LM's way, by rules on op
 * patterns rather than a table per model family, so a model built from the
 * graph's ops is split without its builder knowing about it:
 *
 *  - a linear layer (matmul(x, W^T, b), W a parameter (out, in)) whose input
 *    every rank holds whole is COLUMN-parallel: W and b split by output rows,
 *    the input entering through an identity whose backward all-reduces
 *    (Megatron's f); its output is split by columns;
 *  - a linear layer whose input is split that way is ROW-parallel: W split
 *    by input columns, the bias added by tp rank 0 alone (so it counts once),
 *    the partial output all-reduced (Megatron's g);
 *  - elementwise ops (gelu) keep their input's split; attention over a split
 *    [Q | K | V] runs n_heads / tp heads (the column split of the layer
 *    before it then divides Q, K and V alike);
 *  - an embedding table whose rows tp divides is split by vocabulary rows:
 *    each rank embeds the tokens of its rows, the position table is rank
 *    0's, and the group's sum is the embedding; a linear layer reading the
 *    same table (the tied LM head) is then column-parallel over the
 *    vocabulary, and the cross-entropy after it vocabulary-parallel (the
 *    rows' maximum and sum of exponentials combined over the group, the
 *    logits never whole on a rank);
 *  - everything else (layer norms, residual adds, other ops) runs whole on
 *    every rank.
 * When a choice leads somewhere no rule covers (a split value reaching a
 * layer norm, a table the two uses want split differently), that choice is
 * undone and the pass starts again, so the result is always the same
 * computation: at worst, more of it whole.
 *
 * With sequence parallelism (`sp`), the values every rank would hold whole
 * between the tensor-parallel regions (layer norms, residual adds: the
 * "rows" of B*T tokens) hold only 1/tp of the token rows: each all-reduce
 * becomes a reduce-scatter, each f an all-gather, and a parameter read only
 * on row shards (the layer norms) gets partial gradients that
 * tl_tp_sync_partial sums over the group. After autodiff, tl_tp_build gathers
 * each all-gathered matmul input again for its backward instead of keeping
 * it (Megatron-LM's way: b·s·h/tp held, not b·s·h).
 *
 * The collectives are graph ops of this module (tp/comm.c: identity,
 * all-reduce, all-gather, reduce-scatter and row-slice pairs; tp/xent.c: the
 * vocabulary-parallel cross-entropy), registered in the graph's op table
 * and run over the executor's group.
 *
 * Parameters: every rank's graph reads its own flat vector, the shards of
 * the full vector's parameter values in their full order; tl_tp_shard says
 * where each element of it lies in the full vector (so initialisation draws
 * each element at its place in the whole, and checkpoints gather shards). */
#ifndef TL_TP_TP_H
#define TL_TP_TP_H

#include <stdbool.h>
#include <stdint.h>

#include "core/group.h"
#include "graph/graph.h"
#include "graph/model.h"
#include "kernels/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  TL_TP_WHOLE = 0, /* every rank holds all of it (layer norms) */
  TL_TP_SPLIT,     /* dimension `dim` divided over the ranks */
  TL_TP_FIRST,     /* rank 0 alone holds it: a term added once before a sum over the group */
} tl_tp_kind;

/* One parameter value of the full graph as one rank holds it. */
struct tl_tp_param {
  int full_value; /* in the full graph */
  int value;      /* in the rank's graph; -1 when the rank holds none of it */
  tl_tp_kind kind;
  int dim, parts; /* SPLIT: the dimension divided, made of `parts` equal blocks each divided */
  int n_dims;
  int64_t full_shape[4], shape[4];
  int64_t full_offset, offset; /* elements: into the full flat vector, the rank's */
  int64_t full_numel, numel;
  /* sequence parallelism: every rank holds it whole but its nodes saw this
   * rank's token rows only, so its gradient is a part of a sum over the group */
  bool partial;
};

/* How rank `rank` of a tensor-parallel group holds a full graph. */
typedef struct tl_tp_shard {
  int tp, rank;
  bool sp;
  int n_params;
  struct tl_tp_param* params;   /* in full-offset order */
  int64_t n_local;              /* elements of the rank's flat vector */
  int64_t n_full;               /* and of the full one */
  bool loss_split;              /* the loss is vocabulary-parallel */
  int n_linear, n_linear_split; /* linear layers, and those split (column or row) */
  /* maps, when the rank's graph was built (tl_tp_shard_graph) */
  int n_full_values, n_full_nodes, n_values;
  int* value_map; /* full value -> the rank's value holding it, or -1 */
  int* node_map;  /* full forward node -> the first rank node emitted for it */
  bool* whole;    /* rank value -> every rank of the group holds it alike */
  int* param_of;  /* rank value -> index into params, or -1 */
} tl_tp_shard;

/* Rewrites forward graph `full` (a loss set, not yet differentiated) into
 * rank `rank`'s graph of a group of tp (1 <= rank < tp; tp = 1 copies it),
 * forward only, and fills *shard. */
tl_status tl_tp_shard_graph(const tl_graph* full, int tp, int rank, bool sp, tl_graph** out,
                            tl_tp_shard* shard);

/* The same decisions without building the graph: only shard->params and
 * the sizes (how another rank of the group holds the model). */
tl_status tl_tp_shard_layout(const tl_graph* full, int tp, int rank, bool sp, tl_tp_shard* shard);

void tl_tp_shard_free(tl_tp_shard* s); /* zeroes it */

/* Differentiates a rank's graph (tl_tp_shard_graph's) and, with sequence
 * parallelism, has each all-gathered matmul input gathered again for its
 * backward instead of kept. */
tl_status tl_tp_backward(tl_graph* g, const tl_tp_shard* shard);

/* Builds model m's training graph for a batch of b sequences of t tokens as
 * tensor-parallel rank `rank` of tp runs it — and, with cp > 1, as
 * context-parallel rank cp_rank of cp, whose t rows are its two chunks of
 * sequences of cp t tokens (cp.h): the full forward graph
 * (tl_model_build_forward), sharded, split (tl_cp_split_graph), differentiated, with sequence
 * parallelism each all-gathered matmul input gathered again in the
 * backward, then activations recomputed as `recompute` says
 * (tl_model_recompute) and, with split_weight (the zero-bubble schedule),
 * the backward split into its input and weight passes
 * (tl_graph_split_weight). io receives the rank graph's inputs, outputs and
 * layer boundaries; *full (may be NULL) keeps the full forward graph. */
tl_status tl_tp_build(const tl_model* m, int b, int t, int tp, int rank, bool sp, int cp,
                      int cp_rank, tl_recompute recompute, bool split_weight, tl_graph** out,
                      struct tl_model_io* io, tl_tp_shard* shard, tl_graph** full);

/* The shard parameter holding rank value v, or NULL. */
const struct tl_tp_param* tl_tp_param_of(const tl_tp_shard* s, int v);

/* Whether rank value v is identical on every rank of the group (false for
 * values made after the shard, such as gradients). */
bool tl_tp_value_whole(const tl_tp_shard* s, int v);

/* Whether this rank counts rank parameter value v in a sum over the group
 * that must see each element once (the gradient norm): split parameters on
 * every rank, the others on rank 0. */
bool tl_tp_counts(const tl_tp_shard* s, int v);

/* Whether node n is one of this module's collectives (tp/comm.c). */
bool tl_tp_is_comm(const tl_node* n);

/* Where local element i of parameter p lies in the full flat vector; *run
 * receives how many local elements from i on follow it contiguously. */
int64_t tl_tp_full_index(const tl_tp_shard* s, const struct tl_tp_param* p, int64_t i,
                         int64_t* run);

/* Copies this rank's elements between its flat vector and the full one. */
void tl_tp_to_full(const tl_tp_shard* s, const float* local, float* full);
void tl_tp_from_full(const tl_tp_shard* s, const float* full, float* local);

/* Elements [begin, end) of this rank's flat vector drawn from m's RNG at
 * their places in the full model (host memory, end - begin floats). */
void tl_tp_init_params(const tl_tp_shard* s, const tl_model* m, int64_t begin, int64_t end,
                       float* out);

/* Sequence parallelism: sums the gradients of the partial parameters that a
 * stage holds (offset[v] >= 0: where rank value v lies in `grads`) over the
 * group `tp` (collective), through `pack` (device memory of
 * tl_tp_partial_elems floats). Nothing to do without sequence parallelism. */
int64_t tl_tp_partial_elems(const tl_tp_shard* s, const int64_t* offset);
tl_status tl_tp_sync_partial(const tl_tp_shard* s, tl_group* tp, const tl_backend* be, float* grads,
                             const int64_t* offset, float* pack);

#ifdef __cplusplus
}
#endif

#endif
