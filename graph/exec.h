/* exec.h — running a graph on a backend.
 *
 * An executor owns the activation arena (sized by the memory plan) and the
 * input buffers; parameters and gradients are the caller's flat buffers, so
 * several executors (a training graph, an inference graph, one per
 * micro-batch in flight) can share one set of weights.
 *
 * Forward and backward run over a RANGE of forward nodes, which is how a
 * pipeline stage runs only its own layers: tl_exec_backward(b, e) runs the
 * backward nodes of forward nodes [b, e) in reverse order. Gradients are
 * accumulated: parameter gradients add up across calls until the caller
 * zeroes the flat gradient buffer (gradient accumulation over
 * micro-batches); activation gradients are zeroed right before their first
 * writer in each backward pass. */
#ifndef TL_GRAPH_EXEC_H
#define TL_GRAPH_EXEC_H

#include "core/alloc.h"
#include "core/group.h"
#include "graph/graph.h"
#include "graph/memplan.h"
#include "kernels/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tl_exec tl_exec;

/* params/grads: flat f32 buffers on be->device of at least g->n_params
 * elements (grads may be NULL for a forward-only graph). Not owned. */
tl_status tl_exec_create(const tl_graph* g, const tl_backend* be, tl_buffer* params,
                         tl_buffer* grads, tl_exec** out);

/* Parameters whose gradients never exist whole: ZeRO's sharded tied
 * embedding (dp/buckets.h), read by an embedding and by a linear layer
 * y = x W^T (tl_exec_can_piece). The backward nodes that write such a
 * gradient run once per piece of rows[v] rows of the parameter (in
 * either order; each piece once a node): `begin` gives the memory the piece's gradient rows go to
 * (rows x cols floats, zeroed), `end` says they are written. Its gradient has no offset in the
 * gradient buffer.
 *
 * With `param` (ZeRO-3) the parameter is never whole either: every node
 * that reads it, forward and backward, runs once per piece and asks
 * `param` where the piece's rows lie, ready to read (in the params
 * buffer's dtype, tl_exec_options.params_dtype); without it the parameter
 * is read whole, at its offset. */
struct tl_exec_pieces {
  const int64_t* rows; /* per value id: rows a piece, 0 for whole; NULL: none */
  tl_status (*begin)(void* user, int value, int64_t row0, int64_t rows, float** grad);
  tl_status (*end)(void* user, int value, int64_t row0, int64_t rows);
  tl_status (*param)(void* user, int value, int64_t row0, int64_t rows, const void** at);
  void* user;
};

/* Whether parameter v's gradient can be written in pieces by the nodes of
 * forward nodes [begin, end) of g: every one that reads it is an embedding
 * (v its table) or a linear layer (v its weight, y = x W^T + bias),
 * and the backward runs in one pass (no tl_graph_split_weight). */
bool tl_exec_can_piece(const tl_graph* g, int begin, int end, int v);
/* The temporary memory pieces p need (p NULL or without rows: none), at
 * the end of the transient arena (tl_exec_size_pieces): the largest a
 * node of the range asks for one piece (a linear layer's output-gradient
 * columns, or with p->param its output's: rows of its input x rows; an
 * embedding's output, with p->param), and with p->param for a bf16 graph
 * the fp32 copy of a piece of the parameter. */
size_t tl_exec_piece_bytes(const tl_graph* g, int begin, int end, const struct tl_exec_pieces* p);
/* Its two parts: the most a node of the range asks for one piece (*ops),
 * and a bf16 graph's fp32 copy of a piece read from the buffer (*copy,
 * which replaces the whole parameter's copy). */
void tl_exec_piece_sizes(const tl_graph* g, int begin, int end, const struct tl_exec_pieces* p,
                         size_t* ops, size_t* copy);

/* A pipeline stage's executor: it runs only forward nodes [begin, end) and
 * their backward nodes, plans memory for those alone, and finds parameter
 * value v at element param_offset[v] of `params` / `grads` (a stage's compact
 * buffers) instead of at g->values[v].offset; param_offset may be NULL. A
 * graph with collective ops needs the group they communicate over. */
struct tl_exec_options {
  int begin, end;
  const int64_t* param_offset; /* indexed by value id; NULL: the graph's offsets */
  tl_group* group; /* the group the graph's collective ops (TL_OP_COLLECTIVE) run over */
  /* exact gradient sums (the deterministic mode): after each backward node,
   * the parameter gradients it wrote move into this 64-bit fixed-point
   * buffer (laid out as the gradients; kernels/ops.h fixed_add), leaving
   * zeros, so that how a sum over nodes, micro-batches or ranks is split
   * cannot change it. NULL: gradients accumulate in the float buffer. */
  int64_t* grad_acc;
  /* where parameter value v's gradient lies in `grads`, when not at
   * param_offset[v] (ZeRO-2 keeps gradients in a small staging area, see
   * dp/buckets.h); NULL: at param_offset */
  const int64_t* grad_offset;
  /* the arena of the values that live within one pass (graph/memplan.h),
   * shared with executors that never run at the same time as this one
   * (a pipeline stage's, one per micro-batch in flight): at least
   * tl_exec_size's `transient` bytes (which include, for a bf16 graph, the
   * fp32 copies of one node's values), on be->device; not owned. NULL: the
   * executor allocates its own */
  tl_buffer* transient;
  /* how `params` stores the parameters: TL_F32 (0), or TL_BF16 — 2 bytes
   * each at the same element offsets, for a bf16 graph only (it reads every
   * parameter rounded to bf16 anyway, so they are the same values in half
   * the bytes: ZeRO-3's gathered units, dp/buckets.h) */
  tl_dtype params_dtype;
  /* the group the ring attention of a sequence-split graph runs over (a
   * module above the graph splits sequences); NULL when they are whole */
  tl_group* ring;
  /* parameters whose gradients are written a piece of rows at a time
   * (struct tl_exec_pieces); zeroed: none */
  struct tl_exec_pieces pieces;
  /* per parameter's value id, shared by the executors over one gradient
   * buffer: true where its gradient in the buffer holds nothing of this
   * step yet (the caller marks them so instead of zeroing the buffer).
   * The first backward node that writes such a gradient writes it rather
   * than adding into it — a linear layer's weight by its product
   * (tl_op_def.overwrites), any other after zeroing it just then — and
   * clears the mark; so the buffer is never zeroed in a pass of its own.
   * NULL: gradients add into what the buffer holds. */
  bool* grads_fresh;
};
tl_status tl_exec_create_ex(const tl_graph* g, const tl_backend* be, tl_buffer* params,
                            tl_buffer* grads, const struct tl_exec_options* opt, tl_exec** out);
void tl_exec_destroy(tl_exec* x); /* NULL is fine */

/* What an executor of forward nodes [begin, end) of `g` allocates on its
 * device besides the caller's parameters and gradients — its own activation
 * arena (what lives across passes), the inputs the range reads and the
 * collectives' scratch — and the transient arena it needs (its own, or
 * shared: tl_exec_options.transient), in bytes, as tl_exec_create_ex would
 * count them; nothing is allocated on the device. The planner prices memory
 * with it from graphs it never runs. */
struct tl_exec_bytes {
  size_t arena, inputs, scratch;
  size_t transient;
  /* of transient, a bf16 graph's fp32 copies of one node's parameters:
   * the part that does not grow with the batch (0 for an fp32 graph) */
  size_t staging_params;
};
tl_status tl_exec_size(const tl_graph* g, int begin, int end, struct tl_exec_bytes* out);
/* The same for an executor whose options' pieces are p: the transient
 * arena holds the pieces' temporaries too (tl_exec_piece_bytes), and no
 * fp32 copy of a parameter read in pieces (p->param). */
tl_status tl_exec_size_pieces(const tl_graph* g, int begin, int end, const struct tl_exec_pieces* p,
                              struct tl_exec_bytes* out);

/* Copies host data into an INPUT value (bytes must match its size). */
tl_status tl_exec_set_input(tl_exec* x, int value, const void* host, size_t bytes);
/* Device pointer of any value (NULL for -1): its storage, in its dtype
 * (bf16 values of a mixed-precision graph are 2 bytes each; kernels see
 * fp32 copies of them, made by the executor around each node) — a
 * parameter's in the params buffer's (tl_exec_options.params_dtype). */
void* tl_exec_data(const tl_exec* x, int value);
/* Copies a value to host memory. */
tl_status tl_exec_get(const tl_exec* x, int value, void* host, size_t bytes);

/* Copies a float value to host memory as n fp32 numbers, widening a bf16
 * one (graph/graph.h's tl_graph_set_precision); n must be its element
 * count. */
tl_status tl_exec_get_f32(const tl_exec* x, int value, float* host, int64_t n);

/* Forward nodes [begin, end). */
tl_status tl_exec_forward(tl_exec* x, int begin, int end);
/* Backward of forward nodes [begin, end). When the loss's node is in the
 * range, the loss gradient is first filled with loss_scale (the factor that
 * turns per-position losses into this micro-batch's share of the global mean). */
tl_status tl_exec_backward(tl_exec* x, int begin, int end, float loss_scale);
/* A split backward (tl_graph_split_weight) in its two passes: the input
 * gradients (what the stage before needs: seeded as tl_exec_backward is),
 * then the weight gradients. tl_exec_backward runs both. */
tl_status tl_exec_backward_input(tl_exec* x, int begin, int end, float loss_scale);
tl_status tl_exec_backward_weight(tl_exec* x, int begin, int end);

const tl_memplan* tl_exec_plan(const tl_exec* x);

/* Called after the backward node of forward node `forward_node` has run (in
 * issue order: on a GPU the work may still be in flight) — how a trainer
 * learns which gradients are final while the pass goes on: every gradient
 * of the parameters first read at or after `forward_node` is. A split
 * backward calls it in its weight pass only, and once more at its end with
 * the range's first node. NULL removes it. */
typedef tl_status (*tl_exec_hook)(void* user, int forward_node);
void tl_exec_set_backward_hook(tl_exec* x, tl_exec_hook hook, void* user);

/* Called before every node runs, forward or backward, with the forward
 * node it belongs to (a backward node: the forward node it differentiates)
 * — how ZeRO-3 gathers a unit's parameters before its nodes read them
 * (dp/buckets.h). An error stops the pass. NULL removes it. */
typedef tl_status (*tl_exec_pre_hook)(void* user, int forward_node, bool backward);
void tl_exec_set_pre_hook(tl_exec* x, tl_exec_pre_hook hook, void* user);

/* Called after every node has run with the times (tl_time_ns) it started and
 * ended — issue times on a GPU, except for collective ops
 * (TL_OP_COLLECTIVE), which are timed from a synchronised device to their
 * end — how a trainer traces what happens inside a pass. Replaces per-op
 * profiling while set. NULL removes it. */
typedef void (*tl_exec_node_hook)(void* user, const tl_node* node, int64_t start_ns,
                                  int64_t end_ns);
void tl_exec_set_node_hook(tl_exec* x, tl_exec_node_hook hook, void* user);

/* Called with the spans an op reports inside its run (struct tl_run_ctx's
 * span: context parallelism's ring transfers), each named by the op: what
 * a trainer traces beside the node's own span. NULL removes it. */
typedef void (*tl_exec_span_hook)(void* user, const tl_node* node, const char* what,
                                  int64_t start_ns, int64_t end_ns);
void tl_exec_set_span_hook(tl_exec* x, tl_exec_span_hook hook, void* user);

/* Per-op timing: when on, every node is timed (synchronising the device). */
void tl_exec_profile(tl_exec* x, int on);
double tl_exec_op_seconds(const tl_exec* x, int op);

#ifdef __cplusplus
}
#endif

#endif
