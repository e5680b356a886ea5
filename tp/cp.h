/* cp.h — context parallelism: each sequence split across the cp ranks of
 * the context-parallel group, attention computed around a ring.
 *
 * The split is load-balanced for the causal mask: a sequence of T tokens
 * is cut in 2 cp chunks and rank r holds chunks r and 2 cp - 1 - r, t =
 * T / cp rows (kernels/ops.h's tl_cp_position), so every rank has as much
 * attention work. Every op but attention runs on the local rows unchanged;
 * the position embedding and RoPE read the chunks' positions; attention
 * becomes cp_attention (cp_attention.c), which passes the key/value blocks
 * around the group. The loss is each rank's tokens' share of the mean, and
 * the parameters' gradients are summed over dp x cp (the trainer's data
 * group), as a replica's are over dp. */
#ifndef TL_TP_CP_H
#define TL_TP_CP_H

#include <stdbool.h>
#include <stdint.h>

#include "core/status.h"
#include "graph/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Rewrites forward graph g, built for sequences of t = T / cp tokens, into
 * rank `rank`'s part of the split: attention nodes into ring attention,
 * position embeddings and rotary embeddings onto the chunks' positions.
 * Before autodiff (tp.h's tl_tp_build calls it). cp <= 1: nothing. */
tl_status tl_cp_split_graph(tl_graph* g, int cp, int rank);

/* Whether op is the ring's attention, forward or backward (what the
 * planner prices at the attention kernels' rate). */
bool tl_cp_attention_op(int op);

/* Rank `rank`'s rows of b sequences of cp t tokens, in place: x (b, cp t)
 * becomes (b, t), the two chunks the rank holds of each, in order. */
void tl_cp_local_tokens(int32_t* x, int b, int t, int cp, int rank);

#ifdef __cplusplus
}
#endif

#endif
