/* tp.h — tensor parallelism (Megatron-LM): which part of the model each rank
 * of a tensor-parallel group holds, and moving parameters between a rank's
 * shard and the whole model.
 *
 * Rank tp_rank of a group of tp holds
 *  - wte split by vocabulary rows (the embedding and the tied LM head are
 *    vocabulary-parallel), Vp / tp rows each;
 *  - qkvw/qkvb split by output rows, Q, K and V alike (n_heads / tp heads
 *    per rank), fcw/fcb by output rows: column-parallel;
 *  - attprojw, fcprojw split by input columns: row-parallel;
 *  - LayerNorms whole on every rank; wpe, attprojb and fcprojb whole on
 *    rank 0 only (terms added once, before the group's sum).
 * The mlp's linear layers go in pairs, column-parallel then row-parallel
 * (Megatron's MLP block: one all-reduce per pair); an odd last layer is
 * column-parallel over the vocabulary, with a vocabulary-parallel loss; its
 * token embedding is whole on every rank.
 * The layout is a tl_model whose tensors are the shards (shape, offset)
 * with their place in the whole (full_shape, full_offset, shard kind); the
 * GPT builder (graph/model.c) turns it into this rank's graph, with the
 * collectives as nodes (graph/ops/tp_comm.c, xent_shard.c), and
 * tl_model_init_params draws each element at its place in the whole
 * tensor, so a shard equals a slice of the single-device model. */
#ifndef TL_TP_TP_H
#define TL_TP_TP_H

#include <stdbool.h>

#include "graph/model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The layout of rank tp_rank's shard. tp must divide n_heads and the padded
 * vocabulary (gpt), or the sizes of the mlp layers' split outputs
 * (TL_ERR_CONFIG naming the field otherwise). With `sp` (gpt only)
 * (sequence parallelism) graphs built from it keep LayerNorm and residual
 * regions split by token rows across the group. tp = 1 is tl_model_init. */
tl_status tl_tp_model_init(const struct tl_model_config* cfg, int tp, int tp_rank, bool sp,
                           tl_model* out);

/* Copies this rank's elements between its flat vector and the whole
 * model's flat vector (the layout of tl_model_init: llm.c's). */
void tl_tp_to_full(const tl_model* m, const float* local, float* full);
void tl_tp_from_full(const tl_model* m, const float* full, float* local);

#ifdef __cplusplus
}
#endif

#endif
