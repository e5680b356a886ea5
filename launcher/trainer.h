/* trainer.h — single-device training: the model, its graph and executor,
 * the flat parameter, gradient and AdamW buffers, the data loaders, and one
 * optimizer step at a time.
 *
 * One step: zero the gradients; for each micro-batch of the global batch,
 * forward and backward with the loss scaled by 1/(B*T) so that the summed
 * gradients are those of the mean loss over the global batch; clip the
 * global gradient norm; AdamW on every tensor (weight decay on weight
 * matrices only) at the scheduled learning rate. */
#ifndef TL_LAUNCHER_TRAINER_H
#define TL_LAUNCHER_TRAINER_H

#include <stdint.h>

#include "core/config.h"
#include "graph/exec.h"
#include "graph/model.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tl_trainer tl_trainer;

struct tl_step_stats {
  int64_t step; /* 1-based: the step just taken */
  double loss;  /* mean over the global batch */
  float lr;
  float grad_norm; /* before clipping */
  double seconds;
};

/* Builds everything from the config: model, device, buffers, data (the
 * training file is required; validation is optional), and the starting
 * weights (checkpoint.resume, else model.init_from, else the RNG). */
tl_status tl_trainer_create(const struct tl_config* cfg, tl_trainer** out);
void tl_trainer_destroy(tl_trainer* t);

tl_status tl_trainer_step(tl_trainer* t, struct tl_step_stats* out);
/* Mean loss over train.val_batches batches of the validation file, from its
 * start (the same batches every time). TL_ERR_CONFIG without data.val. */
tl_status tl_trainer_eval(tl_trainer* t, double* loss);
/* Generates n tokens after `prompt` (n_prompt >= 1) with top-k sampling
 * (k = 1: greedy), the draws keyed by `seed`; writes n tokens to out. */
tl_status tl_trainer_sample(tl_trainer* t, const int32_t* prompt, int n_prompt, int n, int top_k,
                            uint64_t seed, int32_t* out);
/* Writes a trellis checkpoint (atomic). */
tl_status tl_trainer_save(tl_trainer* t, const char* path);
/* Writes the weights as an llm.c model file (gpt only; atomic). */
tl_status tl_trainer_export(tl_trainer* t, const char* path);

/* Parameters (host copy, n_params floats). */
tl_status tl_trainer_params(tl_trainer* t, float* out);
int64_t tl_trainer_steps_done(const tl_trainer* t);
const tl_model* tl_trainer_model(const tl_trainer* t);
/* The first token of the validation (else training) data: a natural prompt. */
int32_t tl_trainer_first_token(const tl_trainer* t);
/* FLOPs of one optimizer step (forward + backward of every micro-batch). */
double tl_trainer_step_flops(const tl_trainer* t);
/* Device peak bytes since start (core's allocator). */
int64_t tl_trainer_peak_bytes(const tl_trainer* t);
/* Per-op timing of the training graph (synchronises after every node). */
void tl_trainer_profile(tl_trainer* t, int on);
double tl_trainer_op_seconds(const tl_trainer* t, int op);

/* The learning rate at 0-based step `step`: linear warmup over
 * warmup_steps, then cosine decay to min_lr at `steps` (or constant). */
float tl_lr_at(const struct tl_train_config* c, int64_t step);

#ifdef __cplusplus
}
#endif

#endif
