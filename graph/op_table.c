/* op_table.c — every op, once. Adding an op: one file in graph/ops/ and one
 * line here (and its enum entry in op.h). */
#include "graph/op.h"

#define TL__OPS(X)                                      \
  X(TL_OP_EMBEDDING, embedding)                         \
  X(TL_OP_EMBEDDING_BACKWARD, embedding_backward)       \
  X(TL_OP_LAYERNORM, layernorm)                         \
  X(TL_OP_LAYERNORM_BACKWARD, layernorm_backward)       \
  X(TL_OP_MATMUL, matmul)                               \
  X(TL_OP_MATMUL_BACKWARD, matmul_backward)             \
  X(TL_OP_ATTENTION, attention)                         \
  X(TL_OP_ATTENTION_BACKWARD, attention_backward)       \
  X(TL_OP_GELU, gelu)                                   \
  X(TL_OP_GELU_BACKWARD, gelu_backward)                 \
  X(TL_OP_ADD, add)                                     \
  X(TL_OP_ADD_BACKWARD, add_backward)                   \
  X(TL_OP_CROSSENTROPY, crossentropy)                   \
  X(TL_OP_CROSSENTROPY_BACKWARD, crossentropy_backward) \
  X(TL_OP_TP_COMM, tp_comm)                             \
  X(TL_OP_TP_COMM_BACKWARD, tp_comm_backward)           \
  X(TL_OP_XENT_SHARD, xent_shard)                       \
  X(TL_OP_XENT_SHARD_BACKWARD, xent_shard_backward)

#define TL__DECLARE(id, name) extern const struct tl_op_def tl_op_##name;
TL__OPS(TL__DECLARE)
#undef TL__DECLARE

static const struct tl_op_def* const k_ops[TL_OP_COUNT] = {
#define TL__ENTRY(id, name) [id] = &tl_op_##name,
    TL__OPS(TL__ENTRY)
#undef TL__ENTRY
};

const struct tl_op_def* tl_op_get(int op) {
  return op >= 0 && op < TL_OP_COUNT ? k_ops[op] : 0;
}
