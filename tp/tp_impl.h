/* tp_impl.h — what the files of tp/ share: the collective ops and their
 * kinds, and their indices in the graph's op table. */
#ifndef TL_TP_TP_IMPL_H
#define TL_TP_TP_IMPL_H

#include "graph/op.h"

/* tp_comm's collectives over the group (attr[0]); each backward runs the
 * conjugate one. Megatron-LM's f and g are COPY and REDUCE; sequence
 * parallelism replaces them by GATHER and SCATTER; SLICE takes this rank's
 * token rows of a value every rank holds whole, GATHER_WHOLE makes token
 * rows whole for a computation every rank repeats. */
enum {
  TL_TP_COPY = 0, /* forward identity, backward all-reduce */
  TL_TP_REDUCE,   /* forward all-reduce (sum), backward identity */
  TL_TP_GATHER,   /* forward all-gather of token-row shards, backward reduce-scatter */
  TL_TP_SCATTER,  /* forward reduce-scatter into token-row shards, backward all-gather */
  TL_TP_SLICE,    /* forward this rank's token rows, backward all-gather */
  /* forward all-gather of token-row shards for a computation every rank
   * repeats whole (its gradient is then the same on every rank): backward
   * this rank's rows of dy, nothing summed */
  TL_TP_GATHER_WHOLE,
};

/* The op-table indices of this module's ops, registered on first use. */
struct tl__tp_ops {
  int comm, comm_backward, xent, xent_backward;
  int cp_attention, cp_attention_backward; /* context parallelism's ring (cp_attention.c) */
};
const struct tl__tp_ops* tl__tp_ops(void);

extern const struct tl_op_def tl__tp_op_comm, tl__tp_op_comm_backward;
extern const struct tl_op_def tl__tp_op_xent, tl__tp_op_xent_backward;
extern const struct tl_op_def tl__tp_op_cp_attention, tl__tp_op_cp_attention_backward;

#endif
