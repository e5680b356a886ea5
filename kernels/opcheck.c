/* opcheck.c — the harness that runs an op case on a backend and judges it.
 *
 * 1. inputs, output weights R and starting gradients G0 are drawn on the host
 *    (Philox, keyed by case and argument, so every backend sees the same);
 * 2. they are copied to the backend's device; forward, then backward with
 *    dout = R; outputs and gradients (minus G0) come back to the host;
 * 3. outputs are compared with the double reference, gradients with central
 *    differences of the reference's L = sum R * out. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/rng.h"
#include "kernels/opcheck_impl.h"

#define FD_EPS 1e-6
#define FD_MAX_ELEMS 512 /* larger gradients are checked on an even sample */

int tl_opcheck_count(void) {
  return tl__opcheck_n_cases;
}

const char* tl_opcheck_name(int i) {
  return i >= 0 && i < tl__opcheck_n_cases ? tl__opcheck_cases[i].name : NULL;
}

/* Host-side data of one case, and what one backend made of it. */
struct run {
  const struct opcheck_case* c;
  float* in[OPCHECK_MAX_ARGS];   /* inputs (int arguments hold int32 bits) */
  float* r[OPCHECK_MAX_ARGS];    /* output weights R */
  float* g0[OPCHECK_MAX_ARGS];   /* starting gradients */
  float* out[OPCHECK_MAX_ARGS];  /* outputs from the backend */
  float* grad[OPCHECK_MAX_ARGS]; /* gradients from the backend, minus g0 */
};

static void run_free(struct run* r) {
  for (int i = 0; i < OPCHECK_MAX_ARGS; i++) {
    free(r->in[i]), free(r->r[i]), free(r->g0[i]), free(r->out[i]), free(r->grad[i]);
  }
  memset(r, 0, sizeof *r);
}

static uint64_t case_seed(const struct opcheck_case* c) {
  uint64_t h = 1469598103934665603ull; /* FNV-1a of the name */
  for (const char* p = c->name; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ull;
  return h;
}

static tl_status run_init(const struct opcheck_case* c, struct run* r) {
  memset(r, 0, sizeof *r);
  r->c = c;
  uint64_t seed = case_seed(c);
  for (int i = 0; i < c->n_in; i++) {
    const struct opcheck_arg* a = &c->in[i];
    r->in[i] = malloc(sizeof(float) * (size_t)a->n);
    r->g0[i] = malloc(sizeof(float) * (size_t)a->n);
    r->grad[i] = calloc((size_t)a->n, sizeof(float));
    if (!r->in[i] || !r->g0[i] || !r->grad[i]) goto nomem;
    tl_rng_uniform(seed, (uint32_t)i, 0, (size_t)a->n, a->lo, a->hi, r->in[i]);
    if (a->type == OPCHECK_I32) {
      for (int64_t j = 0; j < a->n; j++) {
        int32_t v = (int32_t)floorf(r->in[i][j]);
        memcpy(&r->in[i][j], &v, 4);
      }
    }
    if (c->writes_grad)
      memset(r->g0[i], 0, sizeof(float) * (size_t)a->n);
    else
      tl_rng_uniform(seed, 100u + (uint32_t)i, 0, (size_t)a->n, -1.0f, 1.0f, r->g0[i]);
  }
  for (int o = 0; o < c->n_out; o++) {
    r->r[o] = malloc(sizeof(float) * (size_t)c->out[o].n);
    r->out[o] = malloc(sizeof(float) * (size_t)c->out[o].n);
    if (!r->r[o] || !r->out[o]) goto nomem;
    tl_rng_uniform(seed, 200u + (uint32_t)o, 0, (size_t)c->out[o].n, -1.0f, 1.0f, r->r[o]);
  }
  return TL_OK;
nomem:
  run_free(r);
  return TL_ERRF(TL_ERR_NOMEM, "opcheck %s: out of host memory", c->name);
}

/* Step 2: forward and backward on the backend's device. */
static tl_status run_on(const tl_backend* be, struct run* r) {
  const struct opcheck_case* c = r->c;
  tl_device dev = be->device, host = tl_cpu();
  tl_buffer* in[OPCHECK_MAX_ARGS] = {0};
  tl_buffer* din[OPCHECK_MAX_ARGS] = {0};
  tl_buffer* out[OPCHECK_MAX_ARGS] = {0};
  tl_buffer* dout[OPCHECK_MAX_ARGS] = {0};
  void* in_p[OPCHECK_MAX_ARGS] = {0};
  float *din_p[OPCHECK_MAX_ARGS] = {0}, *out_p[OPCHECK_MAX_ARGS] = {0},
        *dout_p[OPCHECK_MAX_ARGS] = {0};
  tl_status st = TL_OK;
  for (int i = 0; i < c->n_in; i++) {
    size_t bytes = sizeof(float) * (size_t)c->in[i].n;
    TL_CHECK_GOTO(tl_buffer_create(dev, bytes, &in[i]), st, done);
    TL_CHECK_GOTO(tl_memcpy(dev, in[i]->data, host, r->in[i], bytes), st, done);
    in_p[i] = in[i]->data;
    if (c->in[i].grad && c->backward) {
      TL_CHECK_GOTO(tl_buffer_create(dev, bytes, &din[i]), st, done);
      TL_CHECK_GOTO(tl_memcpy(dev, din[i]->data, host, r->g0[i], bytes), st, done);
      din_p[i] = din[i]->data;
    }
  }
  for (int o = 0; o < c->n_out; o++) {
    size_t bytes = sizeof(float) * (size_t)c->out[o].n;
    TL_CHECK_GOTO(tl_buffer_create(dev, bytes, &out[o]), st, done);
    TL_CHECK_GOTO(tl_buffer_create(dev, bytes, &dout[o]), st, done);
    TL_CHECK_GOTO(tl_memcpy(dev, dout[o]->data, host, r->r[o], bytes), st, done);
    out_p[o] = out[o]->data;
    dout_p[o] = dout[o]->data;
  }
  TL_CHECK_GOTO(c->forward(c, be, in_p, out_p), st, done);
  TL_CHECK_GOTO(be->ops->synchronize(be->ctx), st, done);
  for (int o = 0; o < c->n_out; o++)
    TL_CHECK_GOTO(tl_memcpy(host, r->out[o], dev, out_p[o], sizeof(float) * (size_t)c->out[o].n),
                  st, done);
  if (c->backward) {
    TL_CHECK_GOTO(c->backward(c, be, in_p, out_p, dout_p, din_p), st, done);
    TL_CHECK_GOTO(be->ops->synchronize(be->ctx), st, done);
    for (int i = 0; i < c->n_in; i++) {
      if (!din_p[i]) continue;
      TL_CHECK_GOTO(tl_memcpy(host, r->grad[i], dev, din_p[i], sizeof(float) * (size_t)c->in[i].n),
                    st, done);
      for (int64_t j = 0; j < c->in[i].n; j++) r->grad[i][j] -= r->g0[i][j];
    }
  }
done:
  for (int i = 0; i < OPCHECK_MAX_ARGS; i++) {
    tl_buffer_destroy(in[i]), tl_buffer_destroy(din[i]);
    tl_buffer_destroy(out[i]), tl_buffer_destroy(dout[i]);
  }
  return st;
}

/* Reference evaluation in double. */
struct ref {
  double* in[OPCHECK_MAX_ARGS];
  double* out[OPCHECK_MAX_ARGS];
};

static void ref_free(struct ref* f) {
  for (int i = 0; i < OPCHECK_MAX_ARGS; i++) free(f->in[i]), free(f->out[i]);
}

static tl_status ref_init(const struct run* r, struct ref* f) {
  const struct opcheck_case* c = r->c;
  memset(f, 0, sizeof *f);
  for (int i = 0; i < c->n_in; i++) {
    f->in[i] = malloc(sizeof(double) * (size_t)c->in[i].n);
    if (!f->in[i]) goto nomem;
    for (int64_t j = 0; j < c->in[i].n; j++) {
      if (c->in[i].type == OPCHECK_I32) {
        int32_t v;
        memcpy(&v, &r->in[i][j], 4);
        f->in[i][j] = v;
      } else {
        f->in[i][j] = r->in[i][j];
      }
    }
  }
  for (int o = 0; o < c->n_out; o++)
    if (!(f->out[o] = calloc((size_t)c->out[o].n, sizeof(double)))) goto nomem;
  return TL_OK;
nomem:
  ref_free(f);
  return TL_ERRF(TL_ERR_NOMEM, "opcheck %s: out of host memory", c->name);
}

static double ref_loss(const struct run* r, struct ref* f) {
  const struct opcheck_case* c = r->c;
  c->reference(c, (const double* const*)f->in, f->out);
  double l = 0.0;
  for (int o = 0; o < c->n_out; o++)
    if (c->out[o].loss)
      for (int64_t j = 0; j < c->out[o].n; j++) l += (double)r->r[o][j] * f->out[o][j];
  return l;
}

/* Records err = max|got - want| / max|want| if it is the worst so far. */
static void judge(double* worst_err, char* worst, size_t worst_size, const char* what,
                  const char* name, const float* got, const double* want, const int64_t* idx,
                  int64_t n) {
  double max_diff = 0.0, max_ref = 0.0;
  int64_t at = 0;
  for (int64_t j = 0; j < n; j++) {
    int64_t e = idx ? idx[j] : j;
    double d = fabs((double)got[e] - want[j]);
    if (!(d <= max_diff)) max_diff = d, at = e; /* NaN counts as worst */
    if (fabs(want[j]) > max_ref) max_ref = fabs(want[j]);
  }
  double err = max_diff / (max_ref > 1e-6 ? max_ref : 1e-6);
  if (isnan(max_diff)) err = INFINITY;
  if (!(err <= *worst_err)) {
    *worst_err = err;
    snprintf(worst, worst_size, "%s %s[%lld]", what, name, (long long)at);
  }
}

static tl_status result_begin(int i, tl_opcheck_result* res, const struct opcheck_case** c) {
  memset(res, 0, sizeof *res);
  if (i < 0 || i >= tl__opcheck_n_cases)
    return TL_ERRF(TL_ERR_INVALID, "op case %d does not exist (there are %d)", i,
                   tl__opcheck_n_cases);
  *c = &tl__opcheck_cases[i];
  res->name = (*c)->name;
  res->fwd_tol = (*c)->fwd_tol;
  res->grad_tol = (*c)->grad_tol;
  return TL_OK;
}

/* Pass or fail; `worst` names whichever of forward and gradient is further
 * from its tolerance. */
static void result_finish(tl_opcheck_result* res, double grad_err, const char* grad_where) {
  res->grad_err = grad_err;
  res->passed = res->fwd_err <= res->fwd_tol && res->grad_err <= res->grad_tol;
  double fwd_ratio = res->fwd_err / res->fwd_tol;
  double grad_ratio = res->grad_tol > 0 ? res->grad_err / res->grad_tol : 0.0;
  if (grad_ratio > fwd_ratio) snprintf(res->worst, sizeof res->worst, "%s", grad_where);
}

/* judge() against another backend's floats. */
static tl_status judge_floats(double* worst_err, char* worst, size_t worst_size, const char* what,
                              const char* name, const float* got, const float* want, int64_t n) {
  double* w = malloc(sizeof(double) * (size_t)n);
  if (!w) return TL_ERRF(TL_ERR_NOMEM, "opcheck: out of host memory");
  for (int64_t j = 0; j < n; j++) w[j] = want[j];
  judge(worst_err, worst, worst_size, what, name, got, w, NULL, n);
  free(w);
  return TL_OK;
}

tl_status tl_opcheck_run(const tl_backend* be, int i, tl_opcheck_result* res) {
  const struct opcheck_case* c = NULL;
  TL_CHECK(result_begin(i, res, &c));
  struct run r;
  struct ref f;
  TL_CHECK(run_init(c, &r));
  tl_status st = ref_init(&r, &f);
  if (st != TL_OK) {
    run_free(&r);
    return st;
  }
  TL_CHECK_GOTO(run_on(be, &r), st, done);

  /* 3a. forward against the reference */
  ref_loss(&r, &f);
  for (int o = 0; o < c->n_out; o++)
    judge(&res->fwd_err, res->worst, sizeof res->worst, "output", c->out[o].name, r.out[o],
          f.out[o], NULL, c->out[o].n);

  /* 3b. backward against central differences */
  double grad_worst = 0.0;
  char grad_where[sizeof res->worst] = "";
  for (int a = 0; c->backward && a < c->n_in; a++) {
    if (!c->in[a].grad) continue;
    int64_t n = c->in[a].n, m = n < FD_MAX_ELEMS ? n : FD_MAX_ELEMS;
    int64_t* idx = malloc(sizeof(int64_t) * (size_t)m);
    double* fd = malloc(sizeof(double) * (size_t)m);
    if (!idx || !fd) {
      free(idx), free(fd);
      st = TL_ERRF(TL_ERR_NOMEM, "opcheck %s: out of host memory", c->name);
      goto done;
    }
    for (int64_t j = 0; j < m; j++) {
      idx[j] = j * n / m;
      double* x = &f.in[a][idx[j]];
      double x0 = *x;
      *x = x0 + FD_EPS;
      double lp = ref_loss(&r, &f);
      *x = x0 - FD_EPS;
      double lm = ref_loss(&r, &f);
      *x = x0;
      fd[j] = (lp - lm) / (2.0 * FD_EPS);
    }
    judge(&grad_worst, grad_where, sizeof grad_where, "gradient", c->in[a].name, r.grad[a], fd, idx,
          m);
    res->n_grad_checked += (int)m;
    free(idx), free(fd);
  }
  result_finish(res, grad_worst, grad_where);
done:
  ref_free(&f);
  run_free(&r);
  return st;
}

tl_status tl_opcheck_compare(const tl_backend* be, const tl_backend* ref_be, int i,
                             tl_opcheck_result* res) {
  const struct opcheck_case* c = NULL;
  TL_CHECK(result_begin(i, res, &c));
  struct run a, b;
  TL_CHECK(run_init(c, &a));
  tl_status st = run_init(c, &b);
  if (st != TL_OK) {
    run_free(&a);
    return st;
  }
  TL_CHECK_GOTO(run_on(be, &a), st, done);
  TL_CHECK_GOTO(run_on(ref_be, &b), st, done);
  double grad_worst = 0.0;
  char grad_where[sizeof res->worst] = "";
  for (int o = 0; o < c->n_out; o++)
    TL_CHECK_GOTO(judge_floats(&res->fwd_err, res->worst, sizeof res->worst, "output",
                               c->out[o].name, a.out[o], b.out[o], c->out[o].n),
                  st, done);
  for (int k = 0; c->backward && k < c->n_in; k++) {
    if (!c->in[k].grad) continue;
    TL_CHECK_GOTO(judge_floats(&grad_worst, grad_where, sizeof grad_where, "gradient",
                               c->in[k].name, a.grad[k], b.grad[k], c->in[k].n),
                  st, done);
    res->n_grad_checked += (int)c->in[k].n;
  }
  result_finish(res, grad_worst, grad_where);
done:
  run_free(&a);
  run_free(&b);
  return st;
}
