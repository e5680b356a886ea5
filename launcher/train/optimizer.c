/* optimizer.c — the LR schedule, the global norm, clipping and AdamW (see
 * optimizer.h). */
#include "launcher/train/optimizer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct tl_optim {
  const tl_backend* be;
  struct tl_train_config cfg;
  tl_buffer *params, *m, *v, *scalar;
  float* grads;
  struct tl_optim_segment* segs;
  int n_segs;
  int64_t grad_n;
  bool tiled; /* the segments' gradients tile grads[0, grad_n) */
};

float tl_lr_at(const struct tl_train_config* c, int64_t step) {
  if (c->warmup_steps > 0 && step < c->warmup_steps)
    return c->lr * (float)(step + 1) / (float)c->warmup_steps;
  if (c->lr_schedule == TL_LR_CONSTANT || c->steps <= c->warmup_steps) return c->lr;
  double ratio = (double)(step - c->warmup_steps) / (double)(c->steps - c->warmup_steps);
  if (ratio > 1.0) ratio = 1.0;
  double coeff = 0.5 * (1.0 + cos(M_PI * ratio));
  return (float)(c->min_lr + coeff * (c->lr - c->min_lr));
}

tl_status tl_optim_create(const tl_backend* be, const struct tl_train_config* c, tl_buffer* params,
                          float* grads, int64_t grad_n, const struct tl_optim_segment* segs,
                          int n_segs, int64_t state_n, tl_optim** out) {
  *out = NULL;
  tl_optim* o = calloc(1, sizeof *o);
  if (!o) return TL_ERRF(TL_ERR_NOMEM, "out of memory for an optimizer");
  o->be = be;
  o->cfg = *c;
  o->params = params;
  o->grads = grads;
  o->grad_n = grad_n;
  o->segs = malloc(sizeof *segs * (size_t)(n_segs > 0 ? n_segs : 1));
  tl_status st = o->segs ? TL_OK : TL_ERRF(TL_ERR_NOMEM, "out of memory for an optimizer");
  if (st == TL_OK) {
    if (n_segs > 0) memcpy(o->segs, segs, sizeof *segs * (size_t)n_segs);
    o->n_segs = n_segs;
    /* tiled: in gradient order, each segment starting where the last ended */
    int64_t at = 0;
    o->tiled = true;
    for (int i = 0; i < n_segs && o->tiled; i++) {
      o->tiled = segs[i].grad_at == at;
      at += segs[i].n;
    }
    o->tiled = o->tiled && at == grad_n;
  }
  size_t state_bytes = sizeof(float) * (size_t)(state_n > 0 ? state_n : 1);
  if (st == TL_OK) st = tl_buffer_create(be->device, state_bytes, &o->m);
  if (st == TL_OK) st = tl_buffer_create(be->device, state_bytes, &o->v);
  /* a float, or the two words of a 128-bit integer */
  if (st == TL_OK) st = tl_buffer_create(be->device, 2 * sizeof(int64_t), &o->scalar);
  if (st == TL_OK) st = tl_memzero(be->device, o->m->data, o->m->bytes);
  if (st == TL_OK) st = tl_memzero(be->device, o->v->data, o->v->bytes);
  if (st != TL_OK) {
    tl_optim_destroy(o);
    return st;
  }
  *out = o;
  return TL_OK;
}

void tl_optim_destroy(tl_optim* o) {
  if (!o) return;
  tl_buffer_destroy(o->m);
  tl_buffer_destroy(o->v);
  tl_buffer_destroy(o->scalar);
  free(o->segs);
  free(o);
}

tl_buffer* tl_optim_moment(const tl_optim* o, int which) {
  return which == 0 ? o->m : o->v;
}

static tl_status sumsq(tl_optim* o, const float* x, int64_t n, double* out) {
  float v = 0.0f;
  TL_CHECK(o->be->ops->sumsq(o->be->ctx, o->scalar->data, x, n));
  TL_CHECK(o->be->ops->synchronize(o->be->ctx));
  TL_CHECK(tl_memcpy(tl_cpu(), &v, o->be->device, o->scalar->data, sizeof(float)));
  *out = v;
  return TL_OK;
}

tl_status tl_optim_sumsq(tl_optim* o, double* out) {
  double total = 0;
  if (!o->tiled) { /* segment by segment, what this rank counts */
    for (int i = 0; i < o->n_segs; i++) {
      if (!o->segs[i].counted) continue;
      double part;
      TL_CHECK(sumsq(o, o->grads + o->segs[i].grad_at, o->segs[i].n, &part));
      total += part;
    }
    *out = total;
    return TL_OK;
  }
  /* the whole buffer at once, less what another rank counts */
  TL_CHECK(sumsq(o, o->grads, o->grad_n, &total));
  for (int i = 0; i < o->n_segs; i++) {
    if (o->segs[i].counted) continue;
    double part;
    TL_CHECK(sumsq(o, o->grads + o->segs[i].grad_at, o->segs[i].n, &part));
    total -= part;
  }
  *out = total;
  return TL_OK;
}

static tl_status sumsq_fixed(tl_optim* o, const float* x, int64_t n, __int128* out) {
  if (!o->be->ops->sumsq_fixed)
    return TL_ERRF(TL_ERR_UNSUPPORTED, "the %s backend has no fixed-point sum of squares",
                   o->be->ops->name);
  int64_t w[2];
  TL_CHECK(o->be->ops->sumsq_fixed(o->be->ctx, o->scalar->data, x, n));
  TL_CHECK(o->be->ops->synchronize(o->be->ctx));
  TL_CHECK(tl_memcpy(tl_cpu(), w, o->be->device, o->scalar->data, sizeof w));
  *out = (__int128)(((unsigned __int128)(uint64_t)w[0] << 64) | (uint64_t)w[1]);
  return TL_OK;
}

tl_status tl_optim_sumsq_fixed(tl_optim* o, __int128* out) {
  __int128 total = 0;
  for (int i = 0; !o->tiled && i < o->n_segs; i++) {
    if (!o->segs[i].counted) continue;
    __int128 part;
    TL_CHECK(sumsq_fixed(o, o->grads + o->segs[i].grad_at, o->segs[i].n, &part));
    total += part;
  }
  if (!o->tiled) {
    *out = total;
    return TL_OK;
  }
  TL_CHECK(sumsq_fixed(o, o->grads, o->grad_n, &total));
  for (int i = 0; i < o->n_segs; i++) {
    if (o->segs[i].counted) continue;
    __int128 part;
    TL_CHECK(sumsq_fixed(o, o->grads + o->segs[i].grad_at, o->segs[i].n, &part));
    total -= part; /* exact */
  }
  *out = total;
  return TL_OK;
}

float tl_optim_clip_scale(const struct tl_train_config* c, float norm) {
  return c->grad_clip > 0.0f && norm > c->grad_clip ? c->grad_clip / (norm + 1e-6f) : 1.0f;
}

tl_status tl_optim_step(tl_optim* o, float norm, int64_t step, float* lr_out) {
  const struct tl_train_config* c = &o->cfg;
  const struct tl_kernel_ops* ops = o->be->ops;
  void* ctx = o->be->ctx;
  /* clipping: AdamW reads each gradient scaled, in its own pass (the
   * gradients themselves are left as they are) */
  const float k = tl_optim_clip_scale(c, norm);
  float lr = tl_lr_at(c, step);
  for (int i = 0; i < o->n_segs; i++) {
    const struct tl_optim_segment* s = &o->segs[i];
    TL_CHECK(ops->adamw(ctx, (float*)o->params->data + s->offset, o->grads + s->grad_at, k,
                        (float*)o->m->data + s->state_at, (float*)o->v->data + s->state_at, s->n,
                        lr, c->beta1, c->beta2, c->eps, s->decay ? c->weight_decay : 0.0f,
                        (int)(step + 1)));
  }
  *lr_out = lr;
  return TL_OK;
}
