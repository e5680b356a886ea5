/* stage.h — cutting a model's graph into pipeline stages.
 *
 * Stages are contiguous runs of layers: stage 0 also embeds the tokens, the
 * last stage also holds the head and the loss. Layer counts come from the
 * config, or are chosen to balance each stage's FLOPs (forward + backward,
 * pp/cut.h), embedding and head included; when the layers do not divide
 * evenly the stages get different counts, never a dropped layer.
 *
 * A stage knows the activations crossing its cuts (received from the stage
 * before, sent to the one after) and the parameters it shares with another
 * stage: the GPT's token embedding is read by the first stage (the
 * embedding) and the last (the tied LM head), so each holds a copy whose
 * gradients are summed between them (pp/runtime.h). Where a stage's
 * parameters live in its flat buffers is data-parallel state
 * (dp/layout.h). */
#ifndef TL_PP_STAGE_H
#define TL_PP_STAGE_H

#include <stdint.h>

#include "graph/graph.h"
#include "graph/model.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TL_PP_MAX_BOUNDARY 4
#define TL_PP_MAX_SHARED 8

typedef struct tl_pp_stage {
  int stage, n_stages;
  int layer_begin, layer_end;           /* layers [begin, end) */
  int node_begin, node_end;             /* forward nodes [begin, end) */
  double flops;                         /* forward + backward per micro-batch */
  int n_recv, recv[TL_PP_MAX_BOUNDARY]; /* activations from stage - 1 */
  int n_send, send[TL_PP_MAX_BOUNDARY]; /* activations to stage + 1 */
  /* parameter values this stage's nodes read that another stage reads too */
  int n_shared, shared[TL_PP_MAX_SHARED];
} tl_pp_stage;

/* Cuts `g` (built by tl_model_build, with `io` its layer boundaries) into
 * n_stages stages and fills out[0 .. n_stages). layers_per_stage (n_stages
 * counts summing to the layers) fixes the cut; NULL balances FLOPs. */
tl_status tl_pp_partition(const tl_graph* g, const struct tl_model_io* io, int n_stages,
                          const int* layers_per_stage, tl_pp_stage* out);

/* Whether parameter value v is shared by stage s with another stage. */
bool tl_pp_stage_shares(const tl_pp_stage* s, int v);

#ifdef __cplusplus
}
#endif

#endif
