/* shard.c — where a rank's parameters lie in the whole model, and what
 * follows from it: moving shards to and from the full vector, drawing a
 * shard's initial values at their places in the whole, the sequence-parallel
 * gradient sum (see tp.h). */
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/env.h"
#include "tp/tp.h"
#include "tp/tp_impl.h"

void tl_tp_shard_free(tl_tp_shard* s) {
  if (!s) return;
  free(s->params);
  free(s->value_map);
  free(s->node_map);
  free(s->whole);
  free(s->param_of);
  memset(s, 0, sizeof *s);
}

const struct tl_tp_param* tl_tp_param_of(const tl_tp_shard* s, int v) {
  if (!s->param_of || v < 0 || v >= s->n_values || s->param_of[v] < 0) return NULL;
  return &s->params[s->param_of[v]];
}

bool tl_tp_value_whole(const tl_tp_shard* s, int v) {
  return s->whole && v >= 0 && v < s->n_values && s->whole[v];
}

bool tl_tp_counts(const tl_tp_shard* s, int v) {
  const struct tl_tp_param* p = tl_tp_param_of(s, v);
  return !p || p->kind == TL_TP_SPLIT || s->rank == 0;
}

bool tl_tp_is_comm(const tl_node* n) {
  return n->op == tl__tp_ops()->comm;
}

int64_t tl_tp_full_index(const tl_tp_shard* s, const struct tl_tp_param* p, int64_t i,
                         int64_t* run) {
  if (p->kind != TL_TP_SPLIT) {
    *run = p->numel - i;
    return p->full_offset + i;
  }
  /* i = (outer * rows + row) * inner + r over the local shape; the row's
   * block `part` of `parts` is divided over the ranks like the whole */
  const int d = p->dim;
  int64_t inner = 1;
  for (int j = d + 1; j < p->n_dims; j++) inner *= p->shape[j];
  const int64_t rows = p->shape[d], full_rows = p->full_shape[d], chunk = rows / p->parts;
  const int64_t outer = i / (rows * inner), rem = i % (rows * inner);
  const int64_t row = rem / inner, r = rem % inner, part = row / chunk, j = row % chunk;
  const int64_t at = part * (full_rows / p->parts) + s->rank * chunk + j;
  *run = (chunk - j) * inner - r;
  return p->full_offset + (outer * full_rows + at) * inner + r;
}

/* Walks this rank's elements run by run: local index, full index, length. */
static void each_run(const tl_tp_shard* s, void (*f)(void*, int64_t, int64_t, int64_t),
                     void* user) {
  for (int k = 0; k < s->n_params; k++) {
    const struct tl_tp_param* p = &s->params[k];
    for (int64_t i = 0, run; i < p->numel; i += run) {
      int64_t full = tl_tp_full_index(s, p, i, &run);
      f(user, p->offset + i, full, run);
    }
  }
}

struct copy {
  float* dst;
  const float* src;
  int to_full;
};

static void copy_run(void* user, int64_t local, int64_t full, int64_t n) {
  struct copy* c = user;
  if (c->to_full)
    memcpy(c->dst + full, c->src + local, sizeof(float) * (size_t)n);
  else
    memcpy(c->dst + local, c->src + full, sizeof(float) * (size_t)n);
}

void tl_tp_to_full(const tl_tp_shard* s, const float* local, float* full) {
  struct copy c = {full, local, 1};
  each_run(s, copy_run, &c);
}

void tl_tp_from_full(const tl_tp_shard* s, const float* full, float* local) {
  struct copy c = {local, full, 0};
  each_run(s, copy_run, &c);
}

struct init {
  const tl_model* m;
  int64_t begin, end;
  float* out;
};

static void init_run(void* user, int64_t local, int64_t full, int64_t n) {
  struct init* c = user;
  int64_t lo = local > c->begin ? local : c->begin;
  int64_t hi = local + n < c->end ? local + n : c->end;
  if (lo >= hi) return;
  tl_model_init_params(c->m, full + (lo - local), full + (hi - local), c->out + (lo - c->begin));
}

void tl_tp_init_params(const tl_tp_shard* s, const tl_model* m, int64_t begin, int64_t end,
                       float* out) {
  struct init c = {m, begin, end, out};
  each_run(s, init_run, &c);
}

int64_t tl_tp_partial_elems(const tl_tp_shard* s, const int64_t* offset) {
  int64_t n = 0;
  for (int k = 0; k < s->n_params; k++) {
    const struct tl_tp_param* p = &s->params[k];
    if (p->partial && p->value >= 0 && offset[p->value] >= 0) n += p->numel;
  }
  return n;
}

tl_status tl_tp_sync_partial(const tl_tp_shard* s, tl_group* tp, const tl_backend* be, float* grads,
                             const int64_t* offset, float* pack) {
  if (!s->sp || !tp || tl_group_size(tp) == 1) return TL_OK;
  if (tl_fault_on(TL_FAULT_SP_SYNC_SKIPPED)) return TL_OK; /* a deliberate bug (core/env.h) */
  const tl_device dev = be->device;
  /* 1. pack, 2. one all-reduce, 3. unpack */
  for (int pass = 0; pass < 2; pass++) {
    int64_t at = 0;
    for (int k = 0; k < s->n_params; k++) {
      const struct tl_tp_param* p = &s->params[k];
      if (!p->partial || p->value < 0 || offset[p->value] < 0) continue;
      float* g = grads + offset[p->value];
      size_t bytes = sizeof(float) * (size_t)p->numel;
      if (pass == 0)
        TL_CHECK(tl_memcpy(dev, pack + at, dev, g, bytes));
      else
        TL_CHECK(tl_memcpy(dev, g, dev, pack + at, bytes));
      at += p->numel;
    }
    if (pass == 0 && at > 0) {
      TL_CHECK(tl_group_all_reduce(tp, pack, pack, (size_t)at, TL_F32, TL_REDUCE_SUM, NULL));
    }
    if (at == 0) break;
  }
  return TL_OK;
}
