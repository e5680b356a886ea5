/* optimizer.h — what updates a stage's parameters: the learning-rate
 * schedule, the global gradient norm and its clipping, and AdamW, over the
 * stage's flat buffers cut into segments (one per parameter value).
 *
 * The norm is global: each rank sums the squares of the gradients it is
 * the one to count (a parameter held by several ranks — a tied embedding on
 * two stages, a layer norm on every tensor-parallel rank — is counted on
 * one of them, as the caller marks it), the caller sums those over the job,
 * and every rank clips by the same factor. Weight decay applies to weight
 * matrices only (the caller marks them). */
#ifndef TL_LAUNCHER_TRAIN_OPTIMIZER_H
#define TL_LAUNCHER_TRAIN_OPTIMIZER_H

#include <stdbool.h>
#include <stdint.h>

#include "core/alloc.h"
#include "core/config.h"
#include "kernels/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

struct tl_optim_segment {
  int64_t offset;   /* elements into the parameter buffer */
  int64_t grad_at;  /* elements into the gradient buffer */
  int64_t state_at; /* elements into the moments */
  int64_t n;
  bool decay;   /* a weight matrix: weight decay applies */
  bool counted; /* this rank counts it in the global norm */
};

typedef struct tl_optim tl_optim;

/* params: the stage's flat parameters; grads: grad_n floats of gradients;
 * both on be's device, not owned. The segments (copied) are the parts of
 * them this rank updates — the whole stage, or its ZeRO shard
 * (dp/buckets.h) — and their moments lie at state_at in two buffers of
 * state_n floats each, which this allocates, zeroed. */
tl_status tl_optim_create(const tl_backend* be, const struct tl_train_config* c, tl_buffer* params,
                          float* grads, int64_t grad_n, const struct tl_optim_segment* segs,
                          int n_segs, int64_t state_n, tl_optim** out);
void tl_optim_destroy(tl_optim* o); /* NULL is fine */

/* The AdamW moments (checkpoints read and write them). */
tl_buffer* tl_optim_moment(const tl_optim* o, int which); /* 0: first, 1: second */

/* This rank's share of the squared global gradient norm: the squares of
 * the counted segments' gradients. */
tl_status tl_optim_sumsq(tl_optim* o, double* out);
/* The same, exact: a 128-bit fixed-point integer (units of
 * 2^-TL_FIXED_SQ_SHIFT), so that summing the shares of any split over
 * ranks gives the same bits (the deterministic mode). */
tl_status tl_optim_sumsq_fixed(tl_optim* o, __int128* out);

/* AdamW step `step` (0-based) at the schedule's learning rate, which *lr
 * receives, reading the gradients clipped to train.grad_clip when `norm`
 * (the global norm) exceeds it — scaled as they are read, in the update's
 * pass: the gradient buffers keep their unclipped values. */
tl_status tl_optim_step(tl_optim* o, float norm, int64_t step, float* lr);
/* The factor clipping scales the gradients by at global norm `norm`:
 * grad_clip / (norm + 1e-6), or 1 when there is no clipping to do. */
float tl_optim_clip_scale(const struct tl_train_config* c, float norm);

/* The learning rate at 0-based step `step`: linear warmup over
 * warmup_steps, then cosine decay to min_lr at `steps` (or constant). */
float tl_lr_at(const struct tl_train_config* c, int64_t step);

#ifdef __cplusplus
}
#endif

#endif
