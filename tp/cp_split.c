/* cp_split.c — a forward graph's context-parallel rank: the ops that see
 * positions or the whole sequence learn which chunks the rows are (cp.h). */
#include "graph/op.h"
#include "kernels/ops.h"
#include "tp/cp.h"
#include "tp/tp_impl.h"

tl_status tl_cp_split_graph(tl_graph* g, int cp, int rank) {
  if (cp <= 1) return TL_OK;
  if (rank < 0 || rank >= cp)
    return TL_ERRF(TL_ERR_INVALID, "context-parallel rank %d of %d", rank, cp);
  const int ring = tl__tp_ops()->cp_attention;
  for (int i = 0; i < g->n_nodes; i++) {
    tl_node* n = &g->nodes[i];
    if (n->forward_of >= 0)
      return TL_ERRF(TL_ERR_INVALID,
                     "context parallelism splits a forward graph, before autodiff; node '%s' is "
                     "a backward node",
                     n->name);
    switch (n->op) {
      case TL_OP_ATTENTION: /* attr {n_heads, n_kv_heads} + {cp, rank} */
        n->op = ring;
        n->attr[2] = cp, n->attr[3] = rank;
        n->flops *= cp; /* cp_attention's infer: the whole sequence's work, shared */
        break;
      case TL_OP_EMBEDDING: /* attr {row_begin} + {cp, rank} */
        n->attr[1] = cp, n->attr[2] = rank;
        break;
      case TL_OP_ROPE: /* attr {hs, theta, scaling x 4} + {cp, rank} */
        n->attr[6] = cp, n->attr[7] = rank;
        break;
      default:
        break;
    }
  }
  return TL_OK;
}

bool tl_cp_attention_op(int op) {
  return op == tl__tp_ops()->cp_attention || op == tl__tp_ops()->cp_attention_backward;
}

void tl_cp_local_tokens(int32_t* x, int b, int t, int cp, int rank) {
  /* dst index s t + i <= src index s cp t + position(i), and both grow:
   * in place, front to back */
  for (int s = 0; s < b; s++)
    for (int i = 0; i < t; i++)
      x[(int64_t)s * t + i] = x[(int64_t)s * cp * t + tl_cp_position(i, t, cp, rank)];
}
