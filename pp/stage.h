/* stage.h — cutting a model's graph into pipeline stages.
 *
 * Stages are contiguous runs of layers: stage 0 also embeds the tokens, the
 * last stage also holds the head and the loss. Layer counts come from the
 * config, or are chosen to balance each stage's FLOPs (forward + backward),
 * embedding and head included; when the layers do not divide evenly the
 * stages get different counts, never a dropped layer.
 *
 * A stage owns the parameters its nodes use, in a compact flat buffer of its
 * own; `segments` map that buffer to the model's flat parameter vector. They
 * are ordered so that the parameters whose gradients are final first in the
 * backward pass come first (a gradient is final after the backward of the
 * parameter's first forward use), which lets gradient buckets fill from the
 * front. A parameter used by two stages (the GPT's token
 * embedding: input on the first, LM head on the last) has a segment on
 * each, marked shared. */
#ifndef TL_PP_STAGE_H
#define TL_PP_STAGE_H

#include <stdint.h>

#include "graph/graph.h"
#include "graph/model.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TL_PP_MAX_BOUNDARY 4

typedef struct tl_pp_segment {
  int64_t global_offset; /* in the model's flat parameter vector */
  int64_t local_offset;  /* in the stage's buffer */
  int64_t n;             /* elements */
  int tensor;            /* index in tl_model's tensors */
  int shared;            /* also held by another stage */
} tl_pp_segment;

typedef struct tl_pp_stage {
  int stage, n_stages;
  int layer_begin, layer_end;           /* layers [begin, end) */
  int node_begin, node_end;             /* forward nodes [begin, end) */
  double flops;                         /* forward + backward per micro-batch */
  int n_recv, recv[TL_PP_MAX_BOUNDARY]; /* activations from stage - 1 */
  int n_send, send[TL_PP_MAX_BOUNDARY]; /* activations to stage + 1 */
  /* parameters */
  int64_t* param_offset; /* per graph value: element offset in the stage buffer, or -1 */
  tl_pp_segment* segments;
  int* first_use; /* per segment: the first forward node using it */
  int n_segments;
  int64_t n_params; /* elements of the stage buffer */
} tl_pp_stage;

/* Cuts `g` (built by tl_model_build, with `io` its layer boundaries) into
 * n_stages stages and fills out[0 .. n_stages). layers_per_stage (n_stages
 * counts summing to the layers) fixes the cut; NULL balances FLOPs. */
tl_status tl_pp_partition(const tl_graph* g, const struct tl_model_io* io, const tl_model* m,
                          int n_stages, const int* layers_per_stage, tl_pp_stage* out);
void tl_pp_stage_free(tl_pp_stage* s);

/* How much of the stage buffer's front has final gradients once the
 * backward of forward node `forward_node` has run (in a pass that runs
 * backward from the stage's last node down). */
int64_t tl_pp_stage_final_upto(const tl_pp_stage* s, int forward_node);

#ifdef __cplusplus
}
#endif

#endif
