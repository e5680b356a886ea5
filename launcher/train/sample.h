/* sample.h — generating text from a model's weights: top-k sampling over
 * the logits of the last position, one token at a time, on the CPU. */
#ifndef TL_LAUNCHER_SAMPLE_H
#define TL_LAUNCHER_SAMPLE_H

#include <stdint.h>

#include "graph/model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Generates n tokens after `prompt` (n_prompt >= 1) with top-k sampling
 * (k = 1: greedy; at most 64), the draws keyed by `seed`, from the full
 * parameter vector `params` (host, the model's order), looking at the last
 * seq_len tokens. */
tl_status tl_sample(const tl_model* m, int seq_len, const float* params, const int32_t* prompt,
                    int n_prompt, int n, int top_k, uint64_t seed, int32_t* out);

#ifdef __cplusplus
}
#endif

#endif
