/* loader.h — the mesh-independent batch loader.
 *
 * The global batch of a step is B sequences of T+1 tokens starting at the
 * loader's position, sequence b at position + b*T; the position then
 * advances by B*T and wraps to 0 when the next batch would run past the end
 * (llm.c's rule). Every mesh sees the same global batch; a data-parallel
 * replica or a micro-batch takes a contiguous range of its sequences. */
#ifndef TL_LAUNCHER_DATA_LOADER_H
#define TL_LAUNCHER_DATA_LOADER_H

#include <stdint.h>

#include "launcher/data/tokens.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tl_loader {
  const tl_token_file* file;
  int b, t;         /* global batch: b sequences of t tokens */
  int64_t position; /* first token of the current batch */
} tl_loader;

/* Fails when the file holds fewer than b*t+1 tokens. */
tl_status tl_loader_init(tl_loader* l, const tl_token_file* f, int b, int t, int64_t position);
/* Sequences [seq0, seq0+n_seq) of the current batch: inputs and targets,
 * n_seq*t each, as int32. */
void tl_loader_get(const tl_loader* l, int seq0, int n_seq, int32_t* inputs, int32_t* targets);
void tl_loader_advance(tl_loader* l);

#ifdef __cplusplus
}
#endif

#endif
