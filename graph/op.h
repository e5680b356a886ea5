/* op.h — the op table: each op is one file defining a struct tl_op_def
 * (shape inference, kernel dispatch, backward, flags). The graph's own ops
 * (graph/ops/) are listed once in op_table.c; a module above the graph adds
 * its ops with tl_op_register (collectives, say). The executor and
 * autodiff know ops only through this table: what an op needs of them (a
 * device synchronisation before a collective, scratch memory) is a flag or
 * a callback here, never a test of which op it is. */
#ifndef TL_GRAPH_OP_H
#define TL_GRAPH_OP_H

#include <string.h>

#include "core/group.h"
#include "graph/exec.h"
#include "graph/graph.h"
#include "kernels/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What a kernel dispatch sees: device pointers for values. */
struct tl_run_ctx {
  const tl_backend* be;
  const tl_graph* g;
  void* (*data)(const struct tl_run_ctx* x, int value); /* NULL for value -1 */
  void* exec;
  tl_group* group; /* the group collective ops communicate over (the executor's), or NULL */
  tl_group* ring;  /* the group sequence-split ops pass blocks around (context parallelism) */
  void* scratch;   /* device memory for collectives' temporaries: scratch_bytes */
  size_t scratch_bytes;
  /* where an op reports a span of its own inside its run (the ring's
   * transfers: what `what` names, from start to end, tl_time_ns), or NULL:
   * the executor's span hook (exec.h's tl_exec_set_span_hook) */
  void (*span)(const struct tl_run_ctx* x, const tl_node* n, const char* what, int64_t start_ns,
               int64_t end_ns);
  /* parameters whose gradients are written in pieces (exec.h), and device
   * memory for a piece's temporaries (tl_op_def.piece_bytes) */
  const struct tl_exec_pieces* pieces;
  void* piece_tmp;
  /* rows [row0, row0 + rows) of parameter v as the kernels read it (fp32;
   * a bf16 graph's rounded), valid until the next call: gathered when the
   * parameter is read in pieces (pieces->param), else within it whole */
  tl_status (*piece_param)(const struct tl_run_ctx* x, int v, int64_t row0, int64_t rows,
                           const float** out);
  /* per parameter's value id: its gradient holds nothing of this step yet
   * (exec.h's tl_exec_options.grads_fresh), or NULL */
  const bool* grads_fresh;
};

/* Whether a node writing gradient value v whole (tl_op_def.overwrites)
 * writes it rather than adding into it: nothing of this step is there yet. */
static inline bool tl_grad_fresh(const struct tl_run_ctx* x, int v) {
  return x->grads_fresh && v >= 0 && x->g->values[v].role == TL_ROLE_PARAM_GRAD &&
         x->grads_fresh[x->g->values[v].grad_of];
}

/* Whether parameter v is read a piece at a time too (not only written). */
static inline bool tl_piece_params(const struct tl_run_ctx* x) {
  return x->pieces && x->pieces->param;
}

/* Rows a piece of parameter v's gradient (0: v is written whole). */
static inline int64_t tl_piece_rows(const struct tl_run_ctx* x, int v) {
  return x->pieces && x->pieces->rows && v >= 0 ? x->pieces->rows[v] : 0;
}

#define TL_DATA(x, v) ((float*)(x)->data((x), (v)))
#define TL_IDATA(x, v) ((const int32_t*)(x)->data((x), (v)))

struct tl_op_def {
  const char* name;
  /* Outputs [0, n_diff_out) carry gradients; later ones (saved statistics
   * such as layernorm's mean) do not. Inputs of dtype f32 may get gradients. */
  int n_diff_out;
  /* Creates the node's outputs (n->out, n->n_out) from its inputs and
   * attributes, checks shapes, and fills n->flops and n->bytes. */
  tl_status (*infer)(tl_graph* g, tl_node* n);
  /* Runs the node on the backend. */
  tl_status (*run)(const struct tl_run_ctx* x, const tl_node* n);
  /* Appends the backward node(s) of forward node `n` (already in the graph at
   * index `index`); NULL for backward ops. Gradients of values come from
   * g->values[v].grad (-1 when a value needs none). */
  tl_status (*backward)(tl_graph* g, int index);
  unsigned flags; /* TL_OP_* flags below */
  /* Device bytes of temporary memory one run of node n needs (the executor
   * allocates the largest over its nodes); NULL: none. */
  size_t (*scratch_bytes)(const tl_graph* g, const tl_node* n);
  /* Whether forward node n lets parameter v's gradient be written a piece
   * of rows at a time (exec.h's tl_exec_pieces): its backward then runs
   * once per piece; NULL: never. piece_bytes: the temporary device bytes
   * one piece of `rows` rows needs (NULL: none), params: whether the
   * parameter is read in pieces too (its forward runs by pieces). */
  bool (*pieces)(const tl_graph* g, const tl_node* n, int v);
  size_t (*piece_bytes)(const tl_graph* g, const tl_node* n, int64_t rows, bool params);
  /* Whether backward node n writes its output v, a parameter's gradient,
   * whole rather than adding into it where tl_grad_fresh says so; NULL:
   * never (the executor zeroes a fresh gradient before such a node adds
   * into it). */
  bool (*overwrites)(const tl_graph* g, const tl_node* n, int v);
};

/* The op communicates over the run context's group when it runs (forward
 * or backward): every member runs it, in the same order. The executor
 * synchronises the device before timing one, so that its time is its own. */
#define TL_OP_COLLECTIVE 1u
/* The op reads and writes its values as stored, in their dtypes (a
 * collective of a bf16 graph then moves 2-byte elements): the executor
 * hands its kernel no fp32 copies (graph/exec.h). An op that accumulates
 * into a bf16 gradient cannot be one. */
#define TL_OP_STORED 2u
/* Element by element: each output element is a function of the inputs'
 * elements at the same index (inputs of one shape), so any split of the
 * inputs, alike, is a split of the output. */
#define TL_OP_ELEMENTWISE 4u
/* Row by row: each row of the last dimension is a function of the same
 * row of the input, with whole parameters (a norm): a split of the rows is
 * a split of the output, a split of the columns is not. */
#define TL_OP_ROWWISE 8u
/* Attention: mixes tokens across the sequence (what selective recomputation
 * recomputes): the graph's op, and the ring form a module above the graph
 * registers for split sequences. */
#define TL_OP_ATTENTION_LIKE 16u

enum {
  TL_OP_EMBEDDING = 0,
  TL_OP_EMBEDDING_BACKWARD,
  TL_OP_LAYERNORM,
  TL_OP_LAYERNORM_BACKWARD,
  TL_OP_MATMUL,
  TL_OP_MATMUL_BACKWARD,
  TL_OP_ATTENTION,
  TL_OP_ATTENTION_BACKWARD,
  TL_OP_GELU,
  TL_OP_GELU_BACKWARD,
  TL_OP_ADD,
  TL_OP_ADD_BACKWARD,
  TL_OP_CROSSENTROPY,
  TL_OP_CROSSENTROPY_BACKWARD,
  TL_OP_RMSNORM,
  TL_OP_RMSNORM_BACKWARD,
  TL_OP_ROPE,
  TL_OP_ROPE_BACKWARD,
  TL_OP_SWIGLU,
  TL_OP_SWIGLU_BACKWARD,
  TL_OP_COUNT, /* ops of the graph itself; registered ones follow */
  TL_OP_MAX = 64
};

/* The op of index `op`, or NULL. */
const struct tl_op_def* tl_op_get(int op);

/* Adds `def` (static storage) to the table and returns its index; the same
 * def again returns the same index. Thread-safe. TL_ERR_INVALID when the
 * table is full. */
tl_status tl_op_register(const struct tl_op_def* def, int* index);

/* A float attribute, stored as its bits in an int. */
static inline int tl_attr_from_float(float f) {
  int i;
  memcpy(&i, &f, sizeof i);
  return i;
}
static inline float tl_attr_float(int i) {
  float f;
  memcpy(&f, &i, sizeof f);
  return f;
}

/* The rotation of a rope node (graph/ops/rope.c's attributes). */
struct tl_rope tl_rope_of(const tl_node* n);

/* Helpers for op files. */
tl_status tl__op_output(tl_graph* g, tl_node* n, int slot, const char* suffix, tl_value_role role,
                        tl_dtype dtype, int n_dims, const int64_t* shape);
/* The gradient of value v, or -1. */
static inline int tl__grad(const tl_graph* g, int v) {
  return v < 0 ? -1 : g->values[v].grad;
}
/* Appends a backward node for forward node `fwd` (no shape inference: its
 * outputs are existing gradient values). */
tl_status tl__op_backward_node(tl_graph* g, int op, int fwd, int n_in, const int* in, int n_out,
                               const int* out);
/* 4 bytes per element of each listed value (skipping -1). */
double tl__op_bytes(const tl_graph* g, const int* ids, int n);

#ifdef __cplusplus
}
#endif

#endif
