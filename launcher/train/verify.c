/* verify.c — the equality oracle (verify.h). */
#include "launcher/train/verify.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "launcher/train/optimizer.h"

struct tl_verify {
  tl_trainer* par;
  tl_trainer* ref; /* world rank 0 only */
  int root;
  int64_t n;
  /* rank 0: the mesh's state before and after the step (parameters and
   * both moments, n apart), its gradients, and the reference's */
  float *before, *after, *grads, *ref_after, *ref_grads;
  struct tl_verify_report rep;
  double replay_at_worst; /* AdamW's replayed parameter where rep.update_bound is */
  int64_t first_bits;     /* the first element whose bits differed */
};

static void fail_once(tl_verify* v, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail_once(tl_verify* v, const char* fmt, ...) {
  if (!v->rep.equal) return; /* the first failure is the one to read */
  v->rep.equal = 0;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(v->rep.failure, sizeof v->rep.failure, fmt, ap);
  va_end(ap);
}

static int worst(struct tl_verify_worst* w, double value, int step, int tensor, int64_t element) {
  if (!(value > w->value)) return 0;
  *w = (struct tl_verify_worst){value, step, tensor, element};
  return 1;
}

/* -1: nothing measured yet (every measure is >= 0) */
static void worst_reset(struct tl_verify_worst* w) {
  *w = (struct tl_verify_worst){-1, 0, -1, -1};
}

void tl_verify_destroy(tl_verify* v) {
  if (!v) return;
  tl_trainer_destroy(v->ref);
  free(v->before);
  free(v->after);
  free(v->grads);
  free(v->ref_after);
  free(v->ref_grads);
  free(v);
}

tl_status tl_verify_create(tl_trainer* par, tl_verify** out) {
  *out = NULL;
  tl_verify* v = calloc(1, sizeof *v);
  if (!v) return TL_ERRF(TL_ERR_NOMEM, "out of memory for --verify");
  v->par = par;
  v->root = tl_trainer_world_rank(par) == 0;
  v->n = tl_trainer_model(par)->n_params;
  v->rep.equal = 1;
  v->rep.deterministic = tl_trainer_config(par)->parallel.deterministic;
  v->rep.copies_agree = 1;
  /* bf16 arithmetic, or gradients rounded to bf16 for their reduction */
  const struct tl_config* cfg = tl_trainer_config(par);
  const bool bf16 =
      cfg->train.precision == TL_PRECISION_BF16 ||
      (cfg->parallel.grad_reduce == TL_PRECISION_BF16 && cfg->mesh.dp * cfg->mesh.cp > 1);
  v->rep.loss_tol = bf16 ? TL_VERIFY_BF16_LOSS_TOL : TL_VERIFY_LOSS_TOL;
  v->rep.norm_tol = bf16 ? TL_VERIFY_BF16_NORM_TOL : TL_VERIFY_NORM_TOL;
  v->rep.grad_tol = bf16 ? TL_VERIFY_BF16_GRAD_TOL : TL_VERIFY_GRAD_TOL;
  struct tl_verify_worst* all[] = {&v->rep.start, &v->rep.loss,   &v->rep.norm,
                                   &v->rep.grad,  &v->rep.update, &v->rep.update_bound,
                                   &v->rep.moment};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) worst_reset(all[i]);
  size_t n = (size_t)v->n;
  tl_status st = TL_OK;
  if (v->root) {
    v->before = malloc(sizeof(float) * n * 3);
    v->after = malloc(sizeof(float) * n * 3);
    v->grads = malloc(sizeof(float) * n);
    v->ref_after = malloc(sizeof(float) * n * 3);
    v->ref_grads = malloc(sizeof(float) * n);
    if (!v->before || !v->after || !v->grads || !v->ref_after || !v->ref_grads)
      st = TL_ERRF(TL_ERR_NOMEM, "out of memory for --verify: %lld parameters x 11 floats",
                   (long long)v->n);
  }
  /* every rank takes part in the gather, even after rank 0 failed above:
   * the job must not wait on it */
  tl_status g = tl_trainer_gather(par, v->root && st == TL_OK ? v->before : NULL, 1);
  if (st == TL_OK) st = g;
  if (st == TL_OK && v->root) {
    struct tl_config one = *tl_trainer_config(par);
    /* the deterministic mode's canonical order is per micro-batch size */
    if (one.parallel.deterministic) one.schedule.micro_batches *= one.mesh.dp;
    one.mesh.dp = one.mesh.tp = one.mesh.pp = one.mesh.cp = 1;
    one.schedule.n_stage_layers = 0;                  /* one stage holds every layer */
    if (one.schedule.kind == TL_SCHEDULE_INTERLEAVED) /* in one chunk */
      one.schedule.kind = TL_SCHEDULE_1F1B, one.schedule.virtual_stages = 1;
    /* the reference holds the whole state and keeps every activation
     * (ZeRO's and recomputation's code paths are the mesh's, not the
     * reference's) */
    one.parallel.zero = 0;
    one.parallel.recompute = TL_RECOMPUTE_NONE;
    one.checkpoint.format = TL_CHECKPOINT_AUTO;
    one.checkpoint.dir[0] = '\0';
    st = tl_trainer_create(&one, NULL, &v->ref);
    /* both drew (or read) the same weights: bit for bit */
    if (st == TL_OK) st = tl_trainer_gather(v->ref, v->ref_after, 1);
    if (st == TL_OK) {
      const tl_model* m = tl_trainer_model(par);
      for (int k = 0; k < m->n_tensors; k++)
        for (int64_t i = m->tensors[k].offset; i < m->tensors[k].offset + m->tensors[k].numel; i++)
          worst(&v->rep.start, fabs((double)v->before[i] - v->ref_after[i]), 0, k, i);
      if (v->rep.start.value != 0)
        fail_once(v,
                  "the starting parameters differ (%s, element %lld: %.9g on the mesh, %.9g "
                  "on one device)",
                  m->tensors[v->rep.start.tensor].name, (long long)v->rep.start.element,
                  v->before[v->rep.start.element], v->ref_after[v->rep.start.element]);
    }
  }
  if (st != TL_OK) {
    tl_verify_destroy(v);
    return st;
  }
  *out = v;
  return TL_OK;
}

/* AdamW as the kernels compute it (kernels/cpu/adamw.c), in double; the
 * gradients read scaled by the clipping factor, a float product as the
 * kernel forms it. */
struct adamw {
  double lr, beta1, beta2, eps, c1, c2;
  float grad_scale;
};

static void compare_tensor(tl_verify* v, const struct adamw* a, int k, int step) {
  const tl_model* m = tl_trainer_model(v->par);
  const struct tl_param_tensor* t = &m->tensors[k];
  const struct tl_train_config* tc = &tl_trainer_config(v->par)->train;
  const int64_t n = v->n, lo = t->offset, hi = t->offset + t->numel;
  const float *p0 = v->before, *m0 = v->before + n, *v0 = v->before + 2 * n;
  const float *p1 = v->after, *m1 = v->after + n, *v1 = v->after + 2 * n;
  const float* g = v->grads;
  const float *rp1 = v->ref_after, *rg = v->ref_grads;
  double wd = t->decay ? tc->weight_decay : 0.0;
  /* scales: the tensor's largest reference gradient (key biases apart),
   * its largest moments */
  double gscale = 0, mscale = 0, vscale = 0;
  for (int64_t i = lo; i < hi; i++) {
    if (!tl_model_param_is_key_bias(m, i) && fabs(rg[i]) > gscale) gscale = fabs(rg[i]);
    if (fabs(m1[i]) > mscale) mscale = fabs(m1[i]);
    if (fabs(v1[i]) > vscale) vscale = fabs(v1[i]);
  }
  for (int64_t i = lo; i < hi; i++) {
    /* 2. gradients at the same parameters */
    if (tl_model_param_is_key_bias(m, i)) {
      if (v->rep.steps == 1) v->rep.n_key_bias++; /* counted on the first step checked */
    } else {
      double d = fabs((double)g[i] - rg[i]);
      worst(&v->rep.grad, gscale > 0 ? d / gscale : d, step, k, i);
    }
    /* 3. the optimizer, replayed from the mesh's state and gradients */
    const double gi = g[i] * a->grad_scale;
    double mi = a->beta1 * m0[i] + (1 - a->beta1) * gi;
    double vi = a->beta2 * v0[i] + (1 - a->beta2) * gi * gi;
    double pi = p0[i] - a->lr * ((mi / a->c1) / (sqrt(vi / a->c2) + a->eps) + wd * p0[i]);
    double dp = fabs(p1[i] - pi);
    double bound = TL_VERIFY_STEP_TOL * a->lr + 2 * ldexp(fabs(pi) + fabs(p0[i]), -24);
    worst(&v->rep.update, a->lr > 0 ? dp / a->lr : dp, step, k, i);
    if (worst(&v->rep.update_bound, dp / bound, step, k, i)) v->replay_at_worst = pi;
    double dm = fabs(m1[i] - mi) / (mscale > 0 ? mscale : 1);
    double dv = fabs(v1[i] - vi) / (vscale > 0 ? vscale : 1);
    worst(&v->rep.moment, dm > dv ? dm : dv, step, k, i);
    /* the deterministic mode: the same bits */
    if (v->rep.deterministic) {
      const float* rm1 = v->ref_after + n;
      const float* rv1 = v->ref_after + 2 * n;
      if (memcmp(&p1[i], &rp1[i], 4) || memcmp(&m1[i], &rm1[i], 4) || memcmp(&v1[i], &rv1[i], 4) ||
          memcmp(&g[i], &rg[i], 4)) {
        if (v->rep.bits_differ++ == 0) v->first_bits = i;
      }
    }
    /* information: a visibly different step than the reference's */
    if (fabs((double)p1[i] - rp1[i]) > 0.5 * a->lr) {
      v->rep.flips++;
      double r = gscale > 0 ? fabs(rg[i]) / gscale : 0;
      if (r > v->rep.flip_grad) v->rep.flip_grad = r;
    }
  }
}

tl_status tl_verify_step(tl_verify* v, const struct tl_step_stats* ps) {
  const int step = (int)ps->step;
  tl_status st = tl_trainer_gather(v->par, v->root ? v->after : NULL, 1);
  if (st == TL_OK) st = tl_trainer_gather_grads(v->par, v->root ? v->grads : NULL);
  int agree = 1;
  char what[256] = "";
  if (st == TL_OK) st = tl_trainer_copies_agree(v->par, &agree, what, sizeof what);
  TL_CHECK(st);
  if (!v->root) return TL_OK;
  const tl_model* m = tl_trainer_model(v->par);
  struct tl_verify_report* r = &v->rep;
  r->steps++;
  /* the reference, from the mesh's state before this step */
  struct tl_step_stats rs;
  TL_CHECK(tl_trainer_set_state(v->ref, v->before));
  TL_CHECK(tl_trainer_step(v->ref, &rs));
  TL_CHECK(tl_trainer_gather(v->ref, v->ref_after, 1));
  TL_CHECK(tl_trainer_gather_grads(v->ref, v->ref_grads));
  /* 1. loss and norm */
  double dl = fabs(ps->loss - rs.loss) / (fabs(rs.loss) > 0 ? fabs(rs.loss) : 1);
  double dn =
      fabs((double)ps->grad_norm - rs.grad_norm) / (rs.grad_norm > 0 ? (double)rs.grad_norm : 1);
  worst(&r->loss, dl, step, -1, -1);
  worst(&r->norm, dn, step, -1, -1);
  if (dl > r->loss_tol)
    fail_once(v, "step %d: loss %.9g on the mesh, %.9g on one device (%.3g apart, relative)", step,
              ps->loss, rs.loss, dl);
  /* 2.-3. per tensor */
  const struct tl_train_config* tc = &tl_trainer_config(v->par)->train;
  struct adamw a = {ps->lr,
                    tc->beta1,
                    tc->beta2,
                    tc->eps,
                    1.0 - powf(tc->beta1, (float)step),
                    1.0 - powf(tc->beta2, (float)step),
                    tl_optim_clip_scale(tc, ps->grad_norm)};
  struct tl_verify_worst g0 = r->grad, u0 = r->update_bound, m0 = r->moment;
  int64_t bits0 = r->bits_differ;
  for (int k = 0; k < m->n_tensors; k++) compare_tensor(v, &a, k, step);
  if (r->grad.value > r->grad_tol && r->grad.step == step && g0.value <= r->grad_tol)
    fail_once(v,
              "step %d: gradient of %s, element %lld: %.9g on the mesh, %.9g on one device "
              "(%.3g of the tensor's largest gradient apart; allowed %g)",
              step, m->tensors[r->grad.tensor].name,
              (long long)(r->grad.element - m->tensors[r->grad.tensor].offset),
              v->grads[r->grad.element], v->ref_grads[r->grad.element], r->grad.value, r->grad_tol);
  /* the norm after the gradients: a gradient names the tensor */
  if (dn > r->norm_tol)
    fail_once(v, "step %d: gradient norm %.9g on the mesh, %.9g on one device (%.3g apart)", step,
              ps->grad_norm, rs.grad_norm, dn);
  if (ps->lr != rs.lr)
    fail_once(v, "step %d: learning rate %g on the mesh, %g on one device", step, ps->lr, rs.lr);
  if (r->update_bound.value > 1 && r->update_bound.step == step && u0.value <= 1) {
    int64_t e = r->update_bound.element;
    fail_once(v,
              "step %d: the optimizer's update of %s, element %lld: %.9g on the mesh, but AdamW "
              "from its state and gradient gives %.9g (%.3g lr apart)",
              step, m->tensors[r->update_bound.tensor].name,
              (long long)(e - m->tensors[r->update_bound.tensor].offset), v->after[e],
              v->replay_at_worst, fabs(v->after[e] - v->replay_at_worst) / a.lr);
  }
  if (r->moment.value > TL_VERIFY_MOMENT_TOL && r->moment.step == step &&
      m0.value <= TL_VERIFY_MOMENT_TOL)
    fail_once(v,
              "step %d: the AdamW moments of %s, element %lld, differ from AdamW replayed from "
              "the mesh's state and gradient (%.3g of the tensor's largest apart)",
              step, m->tensors[r->moment.tensor].name,
              (long long)(r->moment.element - m->tensors[r->moment.tensor].offset),
              r->moment.value);
  if (r->deterministic && r->bits_differ > 0 && bits0 == 0) {
    int k = tl_model_tensor_at(m, v->first_bits);
    fail_once(v,
              "step %d: parallel.deterministic: %lld elements' parameters, moments or gradients "
              "differ in their bits from the single-device run's (first: %s, element %lld)",
              step, (long long)r->bits_differ, k >= 0 ? m->tensors[k].name : "?",
              (long long)(v->first_bits - (k >= 0 ? m->tensors[k].offset : 0)));
  }
  /* 4. the copies no gather reads (checked last: a wrong value that was
   * gathered is reported above, where it is named) */
  if (!agree && r->copies_agree) {
    r->copies_agree = 0;
    r->copies_step = step;
    snprintf(r->copies_what, sizeof r->copies_what, "%s", what);
    fail_once(v, "step %d: %s", step, what);
  }
  /* the next step starts from the mesh's state */
  float* t = v->before;
  v->before = v->after;
  v->after = t;
  return TL_OK;
}

const struct tl_verify_report* tl_verify_result(const tl_verify* v) {
  return &v->rep;
}
