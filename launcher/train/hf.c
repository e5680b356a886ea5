/* hf.c — Hugging Face model directories: the tensors' names and shapes,
 * and reading them strictly (hf.h). config.json is hf_config.c's, the
 * export hf_export.c's. */
#include "launcher/train/hf.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "launcher/train/safetensors.h"

/* ---- the tensors --------------------------------------------------------- */

static void add(struct tl_hf_tensor* out, int* n, const tl_model* m, const char* name, int k,
                int layer, bool transposed) {
  const struct tl_param_tensor* t = &m->tensors[k];
  struct tl_hf_tensor h = {.tensor = k, .layer = layer, .transposed = transposed};
  snprintf(h.name, sizeof h.name, "%s", name);
  const int64_t* shape = layer >= 0 ? t->shape + 1 : t->shape;
  h.n_dims = layer >= 0 ? t->n_dims - 1 : t->n_dims;
  int64_t rows = shape[0], cols = h.n_dims > 1 ? shape[1] : 1;
  const int64_t per = t->numel / (layer >= 0 ? t->shape[0] : 1);
  h.full = t->offset + (layer >= 0 ? layer * per : 0);
  if (t->init_rows < t->shape[0] && layer < 0) rows = t->init_rows; /* the real vocabulary */
  h.numel = rows * cols;
  h.rows = transposed ? cols : rows;
  h.cols = transposed ? rows : cols;
  if (out) out[*n] = h;
  (*n)++;
}

int tl_hf_tensors(const tl_model* m, struct tl_hf_tensor* out) {
  int n = 0;
  char name[96];
  const int L = m->cfg.n_layers;
  if (m->cfg.kind == TL_MODEL_LLAMA) {
    static const struct {
      const char *mine, *theirs;
    } per_layer[] = {
        {"rms1w", "input_layernorm.weight"}, {"wq", "self_attn.q_proj.weight"},
        {"wk", "self_attn.k_proj.weight"},   {"wv", "self_attn.v_proj.weight"},
        {"wo", "self_attn.o_proj.weight"},   {"rms2w", "post_attention_layernorm.weight"},
        {"wgate", "mlp.gate_proj.weight"},   {"wup", "mlp.up_proj.weight"},
        {"wdown", "mlp.down_proj.weight"}};
    add(out, &n, m, "model.embed_tokens.weight", tl_model_tensor(m, "wte"), -1, false);
    for (size_t i = 0; i < sizeof per_layer / sizeof per_layer[0]; i++)
      for (int l = 0; l < L; l++) {
        snprintf(name, sizeof name, "model.layers.%d.%s", l, per_layer[i].theirs);
        add(out, &n, m, name, tl_model_tensor(m, per_layer[i].mine), l, false);
      }
    add(out, &n, m, "model.norm.weight", tl_model_tensor(m, "rmsfw"), -1, false);
    if (tl_model_tensor(m, "headw") >= 0)
      add(out, &n, m, "lm_head.weight", tl_model_tensor(m, "headw"), -1, false);
    return n;
  }
  if (m->cfg.kind != TL_MODEL_GPT) return -1;
  /* GPT-2: Conv1D weights are stored (in, out), trellis's (out, in) */
  static const struct {
    const char *mine, *theirs;
    bool transposed;
  } per_layer[] = {
      {"ln1w", "ln_1.weight", false},           {"ln1b", "ln_1.bias", false},
      {"qkvw", "attn.c_attn.weight", true},     {"qkvb", "attn.c_attn.bias", false},
      {"attprojw", "attn.c_proj.weight", true}, {"attprojb", "attn.c_proj.bias", false},
      {"ln2w", "ln_2.weight", false},           {"ln2b", "ln_2.bias", false},
      {"fcw", "mlp.c_fc.weight", true},         {"fcb", "mlp.c_fc.bias", false},
      {"fcprojw", "mlp.c_proj.weight", true},   {"fcprojb", "mlp.c_proj.bias", false}};
  add(out, &n, m, "transformer.wte.weight", tl_model_tensor(m, "wte"), -1, false);
  add(out, &n, m, "transformer.wpe.weight", tl_model_tensor(m, "wpe"), -1, false);
  for (size_t i = 0; i < sizeof per_layer / sizeof per_layer[0]; i++)
    for (int l = 0; l < L; l++) {
      snprintf(name, sizeof name, "transformer.h.%d.%s", l, per_layer[i].theirs);
      add(out, &n, m, name, tl_model_tensor(m, per_layer[i].mine), l, per_layer[i].transposed);
    }
  add(out, &n, m, "transformer.ln_f.weight", tl_model_tensor(m, "lnfw"), -1, false);
  add(out, &n, m, "transformer.ln_f.bias", tl_model_tensor(m, "lnfb"), -1, false);
  return n;
}

/* ---- reading ---------------------------------------------------------------- */

/* The directory's weight files: model.safetensors, or the shards its
 * index lists. */
struct weights {
  const char* dir;
  int n_files;
  tl_st_file* files;
  json_t* map; /* the index's weight_map, or NULL */
  char index[TL_PATH_MAX + 48];
};

static void weights_close(struct weights* w) {
  for (int i = 0; i < w->n_files; i++) tl_st_close(&w->files[i]);
  free(w->files);
  json_decref(w->map);
  memset(w, 0, sizeof *w);
}

static tl_status weights_open(const char* dir, struct weights* w) {
  memset(w, 0, sizeof *w);
  w->dir = dir;
  char path[TL_PATH_MAX + 64];
  snprintf(w->index, sizeof w->index, "%s/model.safetensors.index.json", dir);
  struct stat sb;
  if (stat(w->index, &sb) != 0) {
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if (stat(path, &sb) != 0)
      return TL_ERRF(TL_ERR_FORMAT,
                     "'%s' holds neither model.safetensors nor model.safetensors.index.json", dir);
    w->files = calloc(1, sizeof *w->files);
    if (!w->files) return TL_ERRF(TL_ERR_NOMEM, "out of memory reading '%s'", dir);
    w->n_files = 1;
    return tl_st_open(path, &w->files[0]);
  }
  json_error_t err;
  json_t* root = json_load_file(w->index, JSON_REJECT_DUPLICATES, &err);
  if (!root)
    return TL_ERRF(TL_ERR_FORMAT, "'%s' is not JSON: %s (line %d)", w->index, err.text, err.line);
  json_t* map = json_object_get(root, "weight_map");
  if (!json_is_object(map)) {
    json_decref(root);
    return TL_ERRF(TL_ERR_FORMAT, "'%s' has no \"weight_map\" object", w->index);
  }
  w->map = json_incref(map);
  json_decref(root);
  /* the distinct files, in the order the map first names them */
  const char* key;
  json_t* v;
  w->files = calloc(json_object_size(map) + 1, sizeof *w->files);
  if (!w->files) return TL_ERRF(TL_ERR_NOMEM, "out of memory reading '%s'", dir);
  json_object_foreach(map, key, v) {
    const char* f = json_string_value(v);
    if (!f || strchr(f, '/') || f[0] == '.')
      return TL_ERRF(TL_ERR_FORMAT, "'%s': tensor '%s' maps to %s, not a file name in '%s'",
                     w->index, key, f ? f : "a non-string", dir);
    bool seen = false;
    for (int i = 0; i < w->n_files && !seen; i++)
      seen = strcmp(strrchr(w->files[i].path, '/') + 1, f) == 0;
    if (seen) continue;
    snprintf(path, sizeof path, "%s/%s", dir, f);
    if (stat(path, &sb) != 0)
      return TL_ERRF(TL_ERR_FORMAT, "'%s' maps tensor '%s' to '%s', which is not in '%s'", w->index,
                     key, f, dir);
    TL_CHECK(tl_st_open(path, &w->files[w->n_files]));
    w->n_files++;
  }
  return TL_OK;
}

/* Where tensor `name` is: its file and its header entry (NULL when the
 * model has no such tensor there). */
static tl_status locate(const struct weights* w, const char* name, const tl_st_file** file,
                        const struct tl_st_tensor** t) {
  *file = NULL, *t = NULL;
  if (!w->map) {
    *file = &w->files[0];
    *t = tl_st_find(*file, name);
    return TL_OK;
  }
  const char* f = json_string_value(json_object_get(w->map, name));
  if (!f) return TL_OK;
  for (int i = 0; i < w->n_files; i++)
    if (strcmp(strrchr(w->files[i].path, '/') + 1, f) == 0) *file = &w->files[i];
  *t = tl_st_find(*file, name);
  if (!*t)
    return TL_ERRF(TL_ERR_FORMAT, "'%s' maps tensor '%s' to '%s', which does not hold it", w->index,
                   name, (*file)->path);
  return TL_OK;
}

/* GPT-2 checkpoints may carry the causal-mask buffers of older
 * transformers, and name tensors without "transformer.": both allowed. */
static bool ignorable(const tl_model* m, const char* name) {
  if (m->cfg.kind != TL_MODEL_GPT) return false;
  size_t n = strlen(name);
  return (n > 10 && strcmp(name + n - 10, ".attn.bias") == 0) ||
         (n > 17 && strcmp(name + n - 17, ".attn.masked_bias") == 0);
}

static const char* short_name(const tl_model* m, const char* name) {
  return m->cfg.kind == TL_MODEL_GPT && strncmp(name, "transformer.", 12) == 0 ? name + 12 : NULL;
}

/* Finds every tensor of the model, checks shapes and that nothing is left
 * over; with params, reads them. */
static tl_status check_or_read(const char* dir, const tl_model* m, float* params) {
  char file[TL_PATH_MAX + 32];
  snprintf(file, sizeof file, "%s/config.json", dir);
  struct stat sb;
  if (stat(file, &sb) != 0)
    return TL_ERRF(TL_ERR_FORMAT,
                   "'%s' is a directory without config.json; expected a Hugging Face model "
                   "directory (config.json and model.safetensors) or an llm.c model file",
                   dir);
  int n = tl_hf_tensors(m, NULL);
  if (n < 0)
    return TL_ERRF(TL_ERR_CONFIG,
                   "model.kind \"mlp\" has no Hugging Face form; model.init_from "
                   "'%s' is a directory",
                   dir);
  struct tl_hf_tensor* want = calloc((size_t)n + 1, sizeof *want);
  bool** used = NULL;
  struct weights w;
  tl_status st = want ? weights_open(dir, &w) : TL_ERRF(TL_ERR_NOMEM, "out of memory");
  if (!want) memset(&w, 0, sizeof w);
  if (st == TL_OK) {
    tl_hf_tensors(m, want);
    used = calloc((size_t)w.n_files + 1, sizeof *used);
    for (int i = 0; used && i < w.n_files; i++)
      used[i] = calloc((size_t)w.files[i].n_tensors + 1, 1);
    if (!used) st = TL_ERRF(TL_ERR_NOMEM, "out of memory");
  }
  float* tmp = NULL;
  if (params) memset(params, 0, sizeof(float) * (size_t)m->n_params); /* padded rows */
  for (int i = 0; i < n && st == TL_OK; i++) {
    const struct tl_hf_tensor* h = &want[i];
    const tl_st_file* f = NULL;
    const struct tl_st_tensor* t = NULL;
    st = locate(&w, h->name, &f, &t);
    if (st == TL_OK && !t && short_name(m, h->name))
      st = locate(&w, short_name(m, h->name), &f, &t);
    if (st != TL_OK) break;
    if (!t) {
      st = TL_ERRF(TL_ERR_FORMAT, "'%s': tensor '%s' is missing (the model needs it)",
                   w.map ? w.index : w.files[0].path, h->name);
      break;
    }
    const bool shape_ok = t->n_dims == h->n_dims && t->shape[0] == h->rows &&
                          (h->n_dims == 1 || t->shape[1] == h->cols);
    if (!shape_ok) {
      char have[128] = "";
      size_t len = 0;
      for (int d = 0; d < t->n_dims && len < sizeof have; d++)
        len += (size_t)snprintf(have + len, sizeof have - len, d ? ", %lld" : "%lld",
                                (long long)t->shape[d]);
      if (h->n_dims == 1)
        st = TL_ERRF(TL_ERR_FORMAT, "'%s': tensor '%s' is [%s]; the model needs [%lld]", f->path,
                     h->name, have, (long long)h->rows);
      else
        st = TL_ERRF(TL_ERR_FORMAT, "'%s': tensor '%s' is [%s]; the model needs [%lld, %lld]",
                     f->path, h->name, have, (long long)h->rows, (long long)h->cols);
      break;
    }
    used[f - w.files][t - f->tensors] = true;
    if (!params) continue;
    if (!h->transposed) {
      st = tl_st_read(f, t, 0, h->numel, params + h->full);
      continue;
    }
    float* grown = realloc(tmp, sizeof(float) * (size_t)h->numel);
    if (!grown) {
      st = TL_ERRF(TL_ERR_NOMEM, "out of memory reading '%s'", f->path);
      break;
    }
    tmp = grown;
    st = tl_st_read(f, t, 0, h->numel, tmp);
    /* stored (rows, cols) = trellis's (cols, rows) transposed */
    for (int64_t a = 0; st == TL_OK && a < h->rows; a++)
      for (int64_t b = 0; b < h->cols; b++)
        params[h->full + b * h->rows + a] = tmp[a * h->cols + b];
  }
  free(tmp);
  /* nothing left over: every tensor of every file was used (or is a buffer
   * transformers ignores), and the index names no other */
  for (int i = 0; st == TL_OK && i < w.n_files; i++)
    for (int k = 0; st == TL_OK && k < w.files[i].n_tensors; k++) {
      const char* name = w.files[i].tensors[k].name;
      if (used[i][k] || ignorable(m, name)) continue;
      const bool tied = m->cfg.kind == TL_MODEL_LLAMA && m->cfg.tie_embeddings &&
                        strcmp(name, "lm_head.weight") == 0;
      st = TL_ERRF(TL_ERR_FORMAT, "'%s': tensor '%s' is left over: the model has no such tensor%s",
                   w.files[i].path, name,
                   tied ? " (its head is tied to the embedding: model.tie_embeddings)" : "");
    }
  if (st == TL_OK && w.map) {
    const char* key;
    json_t* v;
    json_object_foreach(w.map, key, v) {
      const tl_st_file* f;
      const struct tl_st_tensor* t;
      st = locate(&w, key, &f, &t);
      if (st != TL_OK) break;
      if (!used[f - w.files][t - f->tensors] && !ignorable(m, key)) {
        st = TL_ERRF(TL_ERR_FORMAT, "'%s': tensor '%s' is left over: the model has no such tensor",
                     w.index, key);
        break;
      }
    }
    /* and every file's tensors are in the map, mapped to that file */
    for (int i = 0; st == TL_OK && i < w.n_files; i++)
      for (int k = 0; st == TL_OK && k < w.files[i].n_tensors; k++) {
        const char* name = w.files[i].tensors[k].name;
        const char* f = json_string_value(json_object_get(w.map, name));
        if (!f || strcmp(f, strrchr(w.files[i].path, '/') + 1) != 0)
          st = TL_ERRF(TL_ERR_FORMAT, "'%s' holds tensor '%s', which '%s' %s", w.files[i].path,
                       name, w.index, f ? "maps to another file" : "does not list");
      }
  }
  for (int i = 0; used && i < w.n_files; i++) free(used[i]);
  free(used);
  weights_close(&w);
  free(want);
  return st;
}

tl_status tl_hf_model_check(const char* dir, const tl_model* m) {
  return check_or_read(dir, m, NULL);
}

tl_status tl_hf_model_read(const char* dir, const tl_model* m, float* params) {
  return check_or_read(dir, m, params);
}
