/* graph.h — the computation graph: values, nodes, a builder, autodiff.
 *
 * A graph is built once per model and shape (B, T) and then executed many
 * times (graph/exec.h). Values are tensors with a role: parameters and their
 * gradients are views into two flat buffers at fixed element offsets (llm.c's
 * layout, so data parallelism moves one block); inputs are set per
 * micro-batch; activations and activation gradients get offsets in an arena
 * from the memory plan.
 *
 * Nodes are appended in topological order by construction (a node can only
 * use values that already exist), so the node list IS the execution order.
 * tl_graph_backward appends the backward nodes after the forward ones, in
 * reverse order of their forward nodes. Every backward node ADDS into its
 * gradient outputs, which is how a value that fans out accumulates the
 * gradients of all its consumers.
 *
 * Ops are table-driven: each op is one file in graph/ops/ that registers its
 * shape inference, its kernel dispatch and its backward (graph/op.h). */
#ifndef TL_GRAPH_GRAPH_H
#define TL_GRAPH_GRAPH_H

#include <stdbool.h>
#include <stdint.h>

#include "core/dtype.h"
#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TL_NAME_MAX 48
#define TL_NODE_MAX_IO 6
#define TL_NODE_MAX_ATTRS 8

typedef enum {
  TL_ROLE_PARAM = 0,  /* view into the flat parameter buffer */
  TL_ROLE_PARAM_GRAD, /* the same view into the flat gradient buffer */
  TL_ROLE_INPUT,      /* set by the caller before running (tokens, targets, ...) */
  TL_ROLE_ACTIVATION, /* written by a forward node; planned */
  TL_ROLE_GRAD,       /* gradient of an activation; planned, zeroed at first write */
} tl_value_role;

typedef struct tl_value {
  char name[TL_NAME_MAX];
  tl_dtype dtype;
  int n_dims;
  int64_t shape[4];
  tl_value_role role;
  int64_t offset;     /* PARAM / PARAM_GRAD: element offset into the flat buffer */
  int grad;           /* id of this value's gradient, or -1 */
  int grad_of;        /* for gradients: the value differentiated, else -1 */
  bool requires_grad; /* on a path from a parameter to the loss */
  bool output;        /* read by the caller after running: live to the end */
} tl_value;

typedef struct tl_node {
  int op; /* index into the op table (graph/op.h) */
  char name[TL_NAME_MAX];
  int n_in, n_out;
  int in[TL_NODE_MAX_IO];  /* value ids; -1 for an absent optional input */
  int out[TL_NODE_MAX_IO]; /* value ids; -1 for an absent optional output */
  int attr[TL_NODE_MAX_ATTRS];
  int forward_of; /* backward nodes: their forward node; forward nodes: -1 */
  bool again;     /* a forward node's copy re-run in the backward (tl_graph_rematerialize) */
  double flops;   /* arithmetic of one execution */
  double bytes;   /* bytes read and written by one execution */
} tl_node;

typedef struct tl_graph {
  tl_value* values;
  int n_values, cap_values;
  tl_node* nodes;
  int n_nodes, cap_nodes;
  int n_forward;    /* nodes [0, n_forward) are forward nodes */
  int64_t n_params; /* elements of the flat parameter buffer */
  int loss;         /* per-position losses value, or -1 */
  /* tl_graph_split_weight: backward nodes [n_forward, weight_begin) are
   * the input-gradient pass, [weight_begin, n_nodes) the weight-gradient
   * pass; 0 when the backward is one pass */
  int weight_begin;
  /* tl_graph_set_precision: TL_F32 (everything fp32) or TL_BF16 (mixed
   * precision: activations and their gradients stored in bf16, parameters
   * read at bf16 precision, all arithmetic in fp32) */
  tl_dtype precision;
} tl_graph;

tl_status tl_graph_create(tl_graph** out);
void tl_graph_destroy(tl_graph* g); /* NULL is fine */

static inline int64_t tl_value_numel(const tl_value* v) {
  int64_t n = 1;
  for (int i = 0; i < v->n_dims; i++) n *= v->shape[i];
  return n;
}

/* A parameter: a view of `n_dims`/`shape` at element `offset` of the flat
 * parameter buffer; the graph's n_params grows to cover it. */
tl_status tl_graph_param(tl_graph* g, const char* name, int64_t offset, int n_dims,
                         const int64_t* shape, int* out);
/* An input set before each run. */
tl_status tl_graph_input(tl_graph* g, const char* name, tl_dtype dtype, int n_dims,
                         const int64_t* shape, int* out);
/* A new value (used by ops while inferring their outputs). */
tl_status tl_graph_value(tl_graph* g, const char* name, tl_value_role role, tl_dtype dtype,
                         int n_dims, const int64_t* shape, int* out);

/* Appends a node of op `op` (an index from graph/op.h) with the given inputs
 * and integer attributes; the op's shape inference creates and checks its
 * outputs. out (may be NULL) receives the output value ids. */
tl_status tl_graph_node(tl_graph* g, int op, const char* name, int n_in, const int* in,
                        const int* attr, int n_attr, int* out);

/* Marks a value the caller reads after running (logits, losses): the memory
 * plan keeps it to the end of the pass instead of reusing its bytes. */
tl_status tl_graph_mark_output(tl_graph* g, int v);

/* Marks `loss` (per-position losses) as what training differentiates; it is
 * an output too. */
tl_status tl_graph_set_loss(tl_graph* g, int loss);

/* Autodiff: appends backward nodes for every forward node on a path from a
 * parameter to the loss. The loss's gradient value (an input of the backward
 * pass, filled by the executor with the loss scale) is g->values[loss].grad. */
tl_status tl_graph_backward(tl_graph* g);

/* After tl_graph_backward: forward node `fwd`'s outputs are computed again
 * for the backward pass instead of kept from the forward. A copy of the
 * node ("<name>.again": same op, inputs and attributes; outputs
 * "<output>.again"; flag `again`) is placed just before the first backward
 * node that reads one of its outputs, and the backward nodes of that
 * reader's forward node, and of every forward node between `fwd` and it,
 * read the copy's — so the forward outputs die with their last forward
 * reader and the inputs live on instead (a gathered input read by a
 * block's q, k and v projections is gathered again once instead of kept,
 * say). The copy's forward_of is that reader's forward node, so a pipeline
 * stage runs it with its readers; backward readers of later forward nodes
 * keep reading the original. Nothing to do when no backward node reads the
 * outputs. */
tl_status tl_graph_rematerialize(tl_graph* g, int fwd);

/* After tl_graph_backward: forward nodes [begin, end) (a block, say) are
 * computed again for their own backward instead of kept from the forward —
 * activation recomputation. Copies of the nodes whose outputs that backward
 * needs ("<name>.rc", flag `again`, forward_of the range's first backward
 * node's) are placed, in forward order, just before the range's first
 * backward node, reading each other's outputs and the range's inputs; the
 * backward nodes of the range read the copies. The originals then die with
 * their last forward reader; what a backward node outside the range reads
 * (the block's output, read by the next block's backward) is kept. A copy
 * the backward already had (an earlier tl_graph_rematerialize of a node of
 * the range: same op, attributes and inputs) is replaced by the new one, so
 * nothing is computed three times. The recomputed values are the same
 * arithmetic on the same inputs: gradients are bit-identical. */
tl_status tl_graph_recompute(tl_graph* g, int begin, int end);

/* After autodiff and every other rewrite (the last one): the backward in
 * two passes, as a zero-bubble pipeline runs it (Qi et al. 2023). Each
 * matmul's backward node becomes an input-gradient node (da, from dout and
 * b) where it was and a weight-gradient node (db and dbias, from dout and
 * a) appended after every other backward node, in the same order; a copy
 * run again for the backward (tl_graph_rematerialize, tl_graph_recompute)
 * that only weight-gradient nodes read moves into their pass, before its
 * first reader. Other ops' parameter gradients (LayerNorm, embedding), and
 * a matmul's whose weight another node reads too (the tied LM head: its
 * gradient's terms keep their order), stay in the input pass. Sets g->weight_begin; the same arithmetic, so the
 * gradients are bit-identical. */
tl_status tl_graph_split_weight(tl_graph* g);

/* After every rewrite (the very last pass): the graph's arithmetic in
 * `precision`. TL_BF16 is mixed precision as trellis runs it on every
 * backend: each activation a differentiable op output writes, and each
 * activation gradient, is stored in bf16 (2 bytes: what the memory plan,
 * pipeline transfers and the planner count); a kernel still computes in
 * fp32 on fp32 copies the executor makes of the node's values (graph/exec.h),
 * reading parameters rounded to bf16 from the fp32 master weights. Kept in
 * fp32: the loss and its gradient, the saved statistics (outputs an op does
 * not differentiate: LayerNorm's mean and rstd, attention's log-sum-exp,
 * the cross-entropy's row statistics), parameter gradients (they accumulate
 * over micro-batches), inputs. TL_F32 is a no-op on an fp32 graph. */
tl_status tl_graph_set_precision(tl_graph* g, tl_dtype precision);

/* The flops of nodes [begin, end), summed. */
double tl_graph_flops(const tl_graph* g, int begin, int end);

/* Find a value by name; -1 when absent. */
int tl_graph_find(const tl_graph* g, const char* name);

/* Whether node n reads value v (an input), writes it (an output), or either. */
bool tl_node_reads(const tl_node* n, int v);
bool tl_node_writes(const tl_node* n, int v);
static inline bool tl_node_uses(const tl_node* n, int v) {
  return tl_node_reads(n, v) || tl_node_writes(n, v);
}

/* The forward node that writes value v, or -1 (parameters, inputs,
 * gradients). */
int tl_graph_producer(const tl_graph* g, int v);

/* The first forward node in [begin, end) that reads v, or -1. */
int tl_graph_first_reader(const tl_graph* g, int v, int begin, int end);

/* The activations crossing a cut before forward node `at`: written by a
 * forward node before it and read by one at or after it, in value order.
 * Writes up to `max` ids and returns how many there are (which may be more). */
int tl_graph_crossing(const tl_graph* g, int at, int* ids, int max);

#ifdef __cplusplus
}
#endif

#endif
