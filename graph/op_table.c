/* op_table.c — every op, once. Adding a graph op: one file in graph/ops/
 * and one line here (and its enum entry in op.h); a module above the graph
 * registers its ops at run time (tl_op_register). */
#include <pthread.h>

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
  X(TL_OP_RMSNORM, rmsnorm)                             \
  X(TL_OP_RMSNORM_BACKWARD, rmsnorm_backward)           \
  X(TL_OP_ROPE, rope)                                   \
  X(TL_OP_ROPE_BACKWARD, rope_backward)                 \
  X(TL_OP_SWIGLU, swiglu)                               \
  X(TL_OP_SWIGLU_BACKWARD, swiglu_backward)

#define TL__DECLARE(id, name) extern const struct tl_op_def tl_op_##name;
TL__OPS(TL__DECLARE)
#undef TL__DECLARE

static const struct tl_op_def* k_ops[TL_OP_MAX] = {
#define TL__ENTRY(id, name) [id] = &tl_op_##name,
    TL__OPS(TL__ENTRY)
#undef TL__ENTRY
};
static int g_n_ops = TL_OP_COUNT;
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;

const struct tl_op_def* tl_op_get(int op) {
  return op >= 0 && op < TL_OP_MAX ? __atomic_load_n(&k_ops[op], __ATOMIC_ACQUIRE) : 0;
}

tl_status tl_op_register(const struct tl_op_def* def, int* index) {
  pthread_mutex_lock(&g_lock);
  int at = -1;
  for (int i = 0; i < g_n_ops && at < 0; i++)
    if (k_ops[i] == def) at = i;
  if (at < 0 && g_n_ops < TL_OP_MAX) {
    at = g_n_ops++;
    __atomic_store_n(&k_ops[at], def, __ATOMIC_RELEASE);
  }
  pthread_mutex_unlock(&g_lock);
  *index = at;
  if (at < 0)
    return TL_ERRF(TL_ERR_INVALID, "op '%s': the op table is full (%d ops)", def->name, TL_OP_MAX);
  return TL_OK;
}
