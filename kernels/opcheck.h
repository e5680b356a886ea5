/* opcheck.h — the op suite: every kernel of a backend checked against a
 * plain-loop double-precision reference (forward) and against central finite
 * differences of that reference (backward), and one backend against another
 * (CUDA against CPU).
 *
 * The gradient check works on L = sum over outputs of R * out with R random:
 * the backend's backward receives dout = R, and its input gradients must
 * match dL/dx estimated by central differences in double precision. Gradients
 * start from random values, not zero, so a backward that overwrites instead
 * of accumulating fails too. The test suite and `trellis check` both run it. */
#ifndef TL_KERNELS_OPCHECK_H
#define TL_KERNELS_OPCHECK_H

#include "kernels/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tl_opcheck_result {
  const char* name; /* the case, e.g. "matmul_tn_bias" */
  double fwd_err;   /* worst output error, relative to that output's largest magnitude */
  double grad_err;  /* worst gradient error, relative to that gradient's largest magnitude */
  double fwd_tol, grad_tol;
  int n_grad_checked; /* gradient elements compared */
  int passed;
  char worst[160]; /* which output or gradient, and which element, was worst */
} tl_opcheck_result;

int tl_opcheck_count(void);
const char* tl_opcheck_name(int i);

/* Runs case i on `be`: forward against the reference, backward against
 * finite differences. Returns an error only when a kernel or an allocation
 * fails; a numerical mismatch is reported through out->passed. */
tl_status tl_opcheck_run(const tl_backend* be, int i, tl_opcheck_result* out);

/* Runs case i on both backends with the same inputs and compares every
 * output and gradient of `be` against `ref_be` (fwd_err and grad_err). */
tl_status tl_opcheck_compare(const tl_backend* be, const tl_backend* ref_be, int i,
                             tl_opcheck_result* out);

#ifdef __cplusplus
}
#endif

#endif
