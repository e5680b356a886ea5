/* verify.h — the equality oracle: a run on a mesh checked, step by step,
 * against the same config on one device.
 *
 * "A parallel run is the same run" cannot be checked by training both runs
 * apart and comparing their weights at the end: AdamW moves an element by
 * about lr whatever the size of its gradient, so an element whose gradient
 * is within rounding noise of zero (a model of 124M parameters has many)
 * steps one way on one mesh and the other way on another, and two correct
 * runs drift apart by a few lr per step in those elements. What a mesh may
 * change is only the order of the sums. So the oracle holds the
 * single-device run (the reference, on world rank 0) to the mesh's state at
 * every step and checks each piece of the step on its own:
 *
 *  0. start: the mesh's gathered starting parameters equal the reference's
 *     bit for bit (both draw or read them element by element);
 *  1. loss and gradient norm of each step, relative, within 1e-5 (with
 *     train.precision "bf16", looser: TL_VERIFY_BF16_* below says why);
 *  2. the gradients AdamW took (after clipping), gathered from the mesh,
 *     against the reference's gradients at the same parameters, element by
 *     element in units of the tensor's largest gradient, within 1e-4
 *     (reassociating a float32 sum of n terms moves it by at most about
 *     n * 2^-24 of the sum of the terms' sizes; the gradients here are sums
 *     over at most a few thousand token rows or one reduction dimension,
 *     and cancellation leaves the largest gradient of a tensor well above
 *     what it sums, so real differences are orders of magnitude below 1e-4
 *     and a dropped micro-batch, a missing collective or a wrong scale
 *     orders of magnitude above). The attention key biases, whose exact
 *     gradient is zero, are left out of this check only;
 *  3. the optimizer: the mesh's parameters and moments after the step equal
 *     AdamW replayed here, in double precision, from its state before the
 *     step and the gradients it took: parameters within 1e-3 lr plus two
 *     float32 roundings of the parameter, moments within 1e-5 of their
 *     tensor's largest (an update skipped, repeated or given the wrong
 *     gradient or learning rate is a whole step off);
 *  4. every copy of a parameter holds the same bits: data-parallel
 *     replicas, the tied embedding's two ends, what tensor-parallel ranks
 *     hold whole (tl_trainer_copies_agree).
 * Each step then starts the reference from the mesh's state again, so
 * differences never compound and the tolerances hold at any size and any
 * number of steps. How many elements took a visibly different AdamW step
 * than the reference (more than lr/2 apart) is reported, with the largest
 * gradient among them: it shows they sit at the noise floor.
 *
 * With parallel.deterministic the reference takes the mesh's micro-batch
 * size (schedule.micro_batches x mesh.dp micro-batches) and every
 * parameter, moment and gradient after each step must equal it bit for bit.
 *
 * Rank 0 holds the reference's state and four whole-model vectors besides
 * its own: about 11 floats per parameter. */
#ifndef TL_LAUNCHER_VERIFY_H
#define TL_LAUNCHER_VERIFY_H

#include <stdint.h>

#include "launcher/train/trainer.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TL_VERIFY_LOSS_TOL 1e-5
#define TL_VERIFY_NORM_TOL 1e-5
#define TL_VERIFY_GRAD_TOL 1e-4
/* train.precision "bf16": a value a kernel computed in fp32 is stored
 * rounded to bf16 (8 significant bits, unit roundoff u = 2^-9), so where a
 * mesh reassociates a sum the two runs' fp32 results, a few 2^-24 apart,
 * can round to neighbouring bf16 values: 2^-8 apart, relative. That
 * difference flows on through the later layers and back through the
 * backward, and only then reaches the fp32 reductions. The loss (a mean
 * over every token) and the norm (a sum over every gradient) average such
 * flips out: allowed u and one bf16 step 2^-8, measured up to 4e-5 and
 * 5.1e-4 (tensor parallelism, whose partial sums round apart). An element of a
 * gradient does not: allowed 2^-4 of its tensor's largest, 16 bf16 steps
 * (measured up to 0.013), still far below what a dropped micro-batch, a
 * missing collective or a wrong scale does (tens of percent and more). The
 * optimizer and copy checks compare the mesh with itself: unchanged. The
 * same tolerances hold a mesh whose data-parallel reduction moves bf16
 * (parallel.grad_reduce "bf16": each replica's gradients rounded once, 2^-9,
 * and each pairwise sum). */
#define TL_VERIFY_BF16_LOSS_TOL 0x1p-9
#define TL_VERIFY_BF16_NORM_TOL 0x1p-8
#define TL_VERIFY_BF16_GRAD_TOL 0x1p-4
#define TL_VERIFY_STEP_TOL 1e-3 /* of lr, besides two roundings of the parameter */
#define TL_VERIFY_MOMENT_TOL 1e-5

typedef struct tl_verify tl_verify;

/* A worst case over the steps checked so far: the value, and where. */
struct tl_verify_worst {
  double value;
  int step;        /* 1-based; 0 before any step */
  int tensor;      /* into the model's tensors; -1 when not a tensor's */
  int64_t element; /* in the flat parameter vector; -1 when none */
};

struct tl_verify_report {
  int steps;                           /* checked */
  struct tl_verify_worst start;        /* |parameter difference| at the start (must be 0) */
  struct tl_verify_worst loss;         /* relative */
  struct tl_verify_worst norm;         /* relative */
  struct tl_verify_worst grad;         /* |difference| / the tensor's largest |gradient| */
  struct tl_verify_worst update;       /* |parameter - replay| / lr */
  struct tl_verify_worst update_bound; /* the same over its bound (must be <= 1) */
  struct tl_verify_worst moment;       /* |moment - replay| / the tensor's largest moment */
  int copies_agree;
  int copies_step; /* the first step they did not */
  char copies_what[256];
  /* information: elements whose step differed from the reference's by more
   * than lr/2, and the largest |gradient| among them over its tensor's largest */
  int64_t flips;
  double flip_grad;
  int64_t n_key_bias; /* left out of the gradient check */
  /* parallel.deterministic: the reference runs the same micro-batch size,
   * and parameters, moments and gradients must equal it bit for bit; how
   * many elements did not, over the steps */
  int deterministic;
  int64_t bits_differ;
  /* the tolerances of checks 1 and 2 (the TL_VERIFY_* above, or their
   * bf16 values under train.precision or parallel.grad_reduce "bf16") */
  double loss_tol, norm_tol, grad_tol;
  /* the verdict, and the first check that failed, in words */
  int equal;
  char failure[320];
};

/* Starts checking `par` (collective, before its first step): world rank 0
 * builds the reference from par's config on one device and compares the
 * starting parameters. */
tl_status tl_verify_create(tl_trainer* par, tl_verify** out);
/* Checks the step `par` just took (collective, after each tl_trainer_step). */
tl_status tl_verify_step(tl_verify* v, const struct tl_step_stats* par_step);
/* What was checked so far (meaningful on world rank 0). */
const struct tl_verify_report* tl_verify_result(const tl_verify* v);
void tl_verify_destroy(tl_verify* v);

#ifdef __cplusplus
}
#endif

#endif
