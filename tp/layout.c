/* layout.c — tensor-parallel shard layouts (see tp.h). */
#include <stdio.h>
#include <string.h>

#include "tp/tp.h"

/* Offsets of the shards, packed in the model's tensor order. */
static void relayout(tl_model* m) {
  m->n_params = 0;
  for (int k = 0; k < m->n_tensors; k++) {
    m->tensors[k].offset = m->n_params;
    m->n_params += m->tensors[k].numel;
  }
}

/* Tensor `name` becomes this rank's shard of kind `kind`. */
static void shard(tl_model* m, const char* name, tl_shard_kind kind, int dim, int parts) {
  struct tl_param_tensor* t = &m->tensors[tl_model_tensor(m, name)];
  t->shard = kind;
  if (kind == TL_SHARD_SPLIT) {
    t->split_dim = dim;
    t->split_parts = parts;
    t->shape[dim] /= m->tp;
  } else if (kind == TL_SHARD_FIRST && m->tp_rank != 0) {
    t->shape[0] = 0;
  }
  t->numel = 1;
  for (int i = 0; i < t->n_dims; i++) t->numel *= t->shape[i];
}

/* The mlp: layers in column-/row-parallel pairs (Megatron's MLP block), so
 * that only a pair's output is summed; with an odd count the last layer is
 * column-parallel over the vocabulary and the loss vocabulary-parallel. The
 * token embedding is whole on every rank. */
static tl_status mlp_layout(tl_model* m) {
  const struct tl_model_config* c = &m->cfg;
  int n = c->n_mlp_layers, tp = m->tp;
  for (int i = 1; i <= n; i++) {
    if (i == n && n % 2 == 0) break; /* a row-parallel last layer keeps its outputs whole */
    if (c->mlp_sizes[i] % tp != 0)
      return TL_ERRF(TL_ERR_CONFIG,
                     "mesh.tp=%d must divide model.mlp_sizes[%d]=%d (that layer's outputs are "
                     "split)",
                     tp, i, c->mlp_sizes[i]);
  }
  for (int i = 0; i < n; i++) {
    char w[16], b[16];
    snprintf(w, sizeof w, "w%d", i);
    snprintf(b, sizeof b, "b%d", i);
    if (i % 2 == 0) { /* column-parallel: output rows */
      shard(m, w, TL_SHARD_SPLIT, 0, 1);
      shard(m, b, TL_SHARD_SPLIT, 0, 1);
    } else { /* row-parallel: input columns; the bias is added once */
      shard(m, w, TL_SHARD_SPLIT, 1, 1);
      shard(m, b, TL_SHARD_FIRST, 0, 0);
    }
  }
  relayout(m);
  return TL_OK;
}

tl_status tl_tp_model_init(const struct tl_model_config* cfg, int tp, int tp_rank, bool sp,
                           tl_model* m) {
  TL_CHECK(tl_model_init(cfg, m));
  if (tp < 1 || tp_rank < 0 || tp_rank >= tp)
    return TL_ERRF(TL_ERR_INVALID, "tensor-parallel rank %d of %d", tp_rank, tp);
  m->tp = tp;
  m->tp_rank = tp_rank;
  m->sp = sp && tp > 1 && cfg->kind == TL_MODEL_GPT;
  if (tp == 1) return TL_OK;
  if (cfg->kind == TL_MODEL_MLP) return mlp_layout(m);
  if (cfg->n_heads % tp != 0)
    return TL_ERRF(TL_ERR_CONFIG, "mesh.tp=%d must divide model.n_heads=%d (heads are split)", tp,
                   cfg->n_heads);
  if (m->padded_vocab % tp != 0)
    return TL_ERRF(TL_ERR_CONFIG,
                   "mesh.tp=%d must divide the padded vocabulary %d (vocabulary rows are split; "
                   "set model.padded_vocab_size to a multiple of %d)",
                   tp, m->padded_vocab, tp);
  shard(m, "wte", TL_SHARD_SPLIT, 0, 1);
  shard(m, "wpe", TL_SHARD_FIRST, 0, 0);
  shard(m, "qkvw", TL_SHARD_SPLIT, 1, 3);
  shard(m, "qkvb", TL_SHARD_SPLIT, 1, 3);
  shard(m, "attprojw", TL_SHARD_SPLIT, 2, 1);
  shard(m, "attprojb", TL_SHARD_FIRST, 0, 0);
  shard(m, "fcw", TL_SHARD_SPLIT, 1, 1);
  shard(m, "fcb", TL_SHARD_SPLIT, 1, 1);
  shard(m, "fcprojw", TL_SHARD_SPLIT, 2, 1);
  shard(m, "fcprojb", TL_SHARD_FIRST, 0, 0);
  relayout(m);
  return TL_OK;
}

/* Copies this rank's elements run by run, into the full vector or out of it. */
static void shard_copy(const tl_model* m, const float* local, float* full, int to_full,
                       const float* src_full, float* dst_local) {
  for (int k = 0; k < m->n_tensors; k++) {
    const struct tl_param_tensor* t = &m->tensors[k];
    for (int64_t i = 0, run; i < t->numel; i += run) {
      int64_t f = t->full_offset + tl_model_shard_index(m, k, i, &run);
      if (to_full)
        memcpy(full + f, local + t->offset + i, sizeof(float) * (size_t)run);
      else
        memcpy(dst_local + t->offset + i, src_full + f, sizeof(float) * (size_t)run);
    }
  }
}

void tl_tp_to_full(const tl_model* m, const float* local, float* full) {
  shard_copy(m, local, full, 1, NULL, NULL);
}

void tl_tp_from_full(const tl_model* m, const float* full, float* local) {
  shard_copy(m, NULL, NULL, 0, full, local);
}
