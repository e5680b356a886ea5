/* opcheck_impl.h — how one op case is described to the opcheck harness. */
#ifndef TL_KERNELS_OPCHECK_IMPL_H
#define TL_KERNELS_OPCHECK_IMPL_H

#include "kernels/opcheck.h"

#define OPCHECK_MAX_ARGS 6

enum opcheck_arg_type { OPCHECK_F32, OPCHECK_I32 };

struct opcheck_arg {
  const char* name;
  int64_t n;
  enum opcheck_arg_type type;
  float lo, hi; /* uniform in [lo, hi); integers are floor()ed */
  int grad;     /* the backward produces a gradient for it */
};

struct opcheck_out {
  const char* name;
  int64_t n;
  int loss; /* part of L = sum R * out; other outputs are compared only */
};

struct opcheck_case;

/* Device pointers: in[i] is float* or int32_t* by type; din[i] is NULL for
 * arguments without a gradient. */
typedef tl_status (*opcheck_forward_fn)(const struct opcheck_case* c, const tl_backend* be,
                                        void* const* in, float* const* out);
typedef tl_status (*opcheck_backward_fn)(const struct opcheck_case* c, const tl_backend* be,
                                         void* const* in, float* const* out, float* const* dout,
                                         float* const* din);
/* Host doubles; integer arguments arrive as doubles holding whole numbers. */
typedef void (*opcheck_reference_fn)(const struct opcheck_case* c, const double* const* in,
                                     double* const* out);

struct opcheck_case {
  const char* name;
  int n_in, n_out;
  struct opcheck_arg in[OPCHECK_MAX_ARGS];
  struct opcheck_out out[OPCHECK_MAX_ARGS];
  int d[6];    /* op-specific sizes and flags */
  float alpha; /* op-specific scalar */
  opcheck_forward_fn forward;
  opcheck_backward_fn backward; /* NULL: forward-only op (AdamW) */
  opcheck_reference_fn reference;
  double fwd_tol, grad_tol;
  int writes_grad; /* backward writes rather than adds (fused cross-entropy) */
};

extern const struct opcheck_case tl__opcheck_cases[];
extern const int tl__opcheck_n_cases;

#endif
