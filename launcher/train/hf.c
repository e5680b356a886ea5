/* hf.c — Hugging Face model directories: config.json <-> the model config,
 * the tensors' names and shapes, reading them strictly, and the plan and
 * writes of an export that every rank makes its part of. */
#include "launcher/train/hf.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/atomic_file.h"
#include "launcher/train/safetensors.h"

bool tl_hf_is_dir(const char* path) {
  struct stat sb;
  return path && path[0] && stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

/* ---- config.json -> the model config ----------------------------------- */

struct problems {
  char text[4096];
  size_t len;
  int n;
};

static void problem(struct problems* p, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
static void problem(struct problems* p, const char* fmt, ...) {
  p->n++;
  if (p->len + 2 >= sizeof p->text) return;
  if (p->len) p->text[p->len++] = '\n';
  va_list ap;
  va_start(ap, fmt);
  int k = vsnprintf(p->text + p->len, sizeof p->text - p->len, fmt, ap);
  va_end(ap);
  if (k > 0)
    p->len += (size_t)k < sizeof p->text - p->len ? (size_t)k : sizeof p->text - p->len - 1;
}

/* What one config.json field becomes: read (with a default when absent,
 * or required), then set where the trellis config leaves it, compared
 * where it sets it. */
struct resolve {
  const char* file; /* dir/config.json, for messages */
  json_t* hf;       /* its root */
  json_t* user;     /* the trellis config's "model" section, or NULL */
  struct tl_model_config* m;
  struct problems* p;
};

static bool user_sets(const struct resolve* r, const char* key) {
  return r->user && json_object_get(r->user, key);
}

/* hf[key] as an integer; *have false when absent (or null). */
static bool hf_int(struct resolve* r, json_t* obj, const char* key, long long* out, bool* have) {
  json_t* v = json_object_get(obj, key);
  *have = v && !json_is_null(v);
  if (!*have) return true;
  if (!json_is_integer(v)) {
    problem(r->p, "'%s': \"%s\" is not an integer", r->file, key);
    return false;
  }
  *out = json_integer_value(v);
  return true;
}

static bool hf_num(struct resolve* r, json_t* obj, const char* key, double* out, bool* have) {
  json_t* v = json_object_get(obj, key);
  *have = v && !json_is_null(v);
  if (!*have) return true;
  if (!json_is_number(v)) {
    problem(r->p, "'%s': \"%s\" is not a number", r->file, key);
    return false;
  }
  *out = json_number_value(v);
  return true;
}

/* An integer field of the architecture: config.json's `key` (or `def`
 * when it has none; def < 0: required) into model.`field`. */
static void arch_int(struct resolve* r, const char* field, int* dst, const char* key, long long def,
                     long long lo) {
  long long x = def;
  bool have;
  if (!hf_int(r, r->hf, key, &x, &have)) return;
  if (!have && def < 0) {
    problem(r->p, "'%s': no \"%s\" (model.%s)", r->file, key, field);
    return;
  }
  if (!have) x = def;
  if (x < lo || x > 1 << 30) {
    problem(r->p, "'%s': \"%s\" = %lld: expected an integer >= %lld", r->file, key, x, lo);
    return;
  }
  /* a config's 0 for n_kv_heads or ffn_hidden means its default: that
   * default is what must agree */
  int mine = *dst;
  if (mine == 0 && strcmp(field, "n_kv_heads") == 0) mine = tl_config_kv_heads(r->m);
  if (mine == 0 && strcmp(field, "ffn_hidden") == 0) mine = tl_config_ffn_hidden(r->m);
  if (user_sets(r, field) && mine != x)
    problem(r->p, "model.%s = %d but '%s' has \"%s\" = %lld", field, *dst, r->file, key, x);
  else
    *dst = (int)x;
}

static void arch_float(struct resolve* r, const char* field, float* dst, double x) {
  if (user_sets(r, field) && *dst != (float)x)
    problem(r->p, "model.%s = %g but '%s' has %g", field, *dst, r->file, x);
  else
    *dst = (float)x;
}

static void arch_bool(struct resolve* r, const char* field, bool* dst, const char* key, bool def) {
  json_t* v = json_object_get(r->hf, key);
  bool x = def;
  if (v && !json_is_null(v)) {
    if (!json_is_boolean(v)) {
      problem(r->p, "'%s': \"%s\" is not true or false", r->file, key);
      return;
    }
    x = json_is_true(v);
  }
  if (!field) { /* a setting trellis has no field for: it must be `def` */
    if (x != def)
      problem(r->p, "'%s': \"%s\" = %s; trellis computes this model with %s", r->file, key,
              x ? "true" : "false", def ? "true" : "false");
    return;
  }
  if (user_sets(r, field) && *dst != x)
    problem(r->p, "model.%s = %s but '%s' has \"%s\" = %s", field, *dst ? "true" : "false", r->file,
            key, x ? "true" : "false");
  else
    *dst = x;
}

/* A string setting that must be one of `allowed` (NULL-terminated) when
 * present. */
static void must_be(struct resolve* r, const char* key, const char* const* allowed) {
  json_t* v = json_object_get(r->hf, key);
  if (!v || json_is_null(v)) return;
  const char* s = json_string_value(v);
  for (int i = 0; s && allowed[i]; i++)
    if (strcmp(s, allowed[i]) == 0) return;
  problem(r->p, "'%s': \"%s\" = %s; trellis computes \"%s\" here", r->file, key,
          s ? s : "(not a string)", allowed[0]);
}

/* The rotary settings: transformers 5's rope_parameters {rope_theta,
 * rope_type, ...}, or 4's rope_theta with rope_scaling {rope_type (or
 * type), ...} or null. */
static void llama_rope(struct resolve* r) {
  json_t* params = json_object_get(r->hf, "rope_parameters");
  json_t* scaling = NULL;
  double theta = 10000.0;
  bool have = false;
  if (params && json_is_object(params)) {
    hf_num(r, params, "rope_theta", &theta, &have);
    scaling = params;
  } else {
    hf_num(r, r->hf, "rope_theta", &theta, &have);
    scaling = json_object_get(r->hf, "rope_scaling");
  }
  arch_float(r, "rope_theta", &r->m->rope_theta, theta);
  struct tl_rope_scaling s = {0};
  if (scaling && json_is_object(scaling)) {
    json_t* type = json_object_get(scaling, "rope_type");
    if (!type) type = json_object_get(scaling, "type");
    const char* t = json_string_value(type);
    if (t && strcmp(t, "llama3") == 0) {
      double f = 0, lo = 0, hi = 0;
      long long ctx = 0;
      bool h1, h2, h3, h4;
      hf_num(r, scaling, "factor", &f, &h1);
      hf_num(r, scaling, "low_freq_factor", &lo, &h2);
      hf_num(r, scaling, "high_freq_factor", &hi, &h3);
      hf_int(r, scaling, "original_max_position_embeddings", &ctx, &h4);
      if (!h1 || !h2 || !h3 || !h4)
        problem(r->p,
                "'%s': rope type \"llama3\" needs factor, low_freq_factor, high_freq_factor and "
                "original_max_position_embeddings",
                r->file);
      s = (struct tl_rope_scaling){(float)f, (float)lo, (float)hi, (int)ctx};
    } else if (t && strcmp(t, "default") != 0) {
      problem(r->p,
              "'%s': rope type \"%s\"; trellis computes rotary positions unscaled (\"default\") "
              "or with Llama 3.1's scaling (\"llama3\")",
              r->file, t);
    } else if (!t && scaling != params) {
      problem(r->p, "'%s': \"rope_scaling\" has no \"rope_type\"", r->file);
    }
  } else if (scaling && !json_is_null(scaling)) {
    problem(r->p, "'%s': \"rope_scaling\" is neither an object nor null", r->file);
  }
  const struct tl_rope_scaling* u = &r->m->rope_scaling;
  if (user_sets(r, "rope_scaling") && memcmp(u, &s, sizeof s) != 0)
    problem(r->p,
            "model.rope_scaling = {factor %g, low %g, high %g, context %d} but '%s' has {factor "
            "%g, low %g, high %g, context %d}",
            u->factor, u->low_freq_factor, u->high_freq_factor, u->original_max_position_embeddings,
            r->file, s.factor, s.low_freq_factor, s.high_freq_factor,
            s.original_max_position_embeddings);
  else
    r->m->rope_scaling = s;
}

static void resolve_llama(struct resolve* r) {
  struct tl_model_config* m = r->m;
  static const char* const silu[] = {"silu", NULL};
  arch_int(r, "n_layers", &m->n_layers, "num_hidden_layers", -1, 1);
  arch_int(r, "n_embd", &m->n_embd, "hidden_size", -1, 1);
  arch_int(r, "n_heads", &m->n_heads, "num_attention_heads", -1, 1);
  bool have;
  arch_int(r, "n_kv_heads", &m->n_kv_heads, "num_key_value_heads", m->n_heads, 1);
  arch_int(r, "ffn_hidden", &m->ffn_hidden, "intermediate_size", -1, 1);
  arch_int(r, "vocab_size", &m->vocab_size, "vocab_size", -1, 1);
  arch_int(r, "max_seq_len", &m->max_seq_len, "max_position_embeddings", 2048, 1);
  double eps = 1e-6;
  if (hf_num(r, r->hf, "rms_norm_eps", &eps, &have)) arch_float(r, "norm_eps", &m->norm_eps, eps);
  arch_bool(r, "tie_embeddings", &m->tie_embeddings, "tie_word_embeddings", false);
  llama_rope(r);
  must_be(r, "hidden_act", silu);
  arch_bool(r, NULL, NULL, "attention_bias", false);
  arch_bool(r, NULL, NULL, "mlp_bias", false);
  long long hd;
  if (hf_int(r, r->hf, "head_dim", &hd, &have) && have && m->n_heads > 0 &&
      hd * m->n_heads != m->n_embd)
    problem(r->p,
            "'%s': \"head_dim\" = %lld, not hidden_size / num_attention_heads = %d; trellis's "
            "heads are n_embd / n_heads",
            r->file, hd, m->n_embd / m->n_heads);
}

static void resolve_gpt2(struct resolve* r) {
  struct tl_model_config* m = r->m;
  static const char* const gelu[] = {"gelu_new", "gelu_pytorch_tanh", NULL};
  arch_int(r, "n_layers", &m->n_layers, "n_layer", 12, 1);
  arch_int(r, "n_embd", &m->n_embd, "n_embd", 768, 1);
  arch_int(r, "n_heads", &m->n_heads, "n_head", 12, 1);
  arch_int(r, "vocab_size", &m->vocab_size, "vocab_size", 50257, 1);
  arch_int(r, "max_seq_len", &m->max_seq_len, "n_positions", 1024, 1);
  must_be(r, "activation_function", gelu);
  double eps = 1e-5;
  bool have;
  if (hf_num(r, r->hf, "layer_norm_epsilon", &eps, &have) && fabs(eps - 1e-5) > 1e-12)
    problem(r->p, "'%s': \"layer_norm_epsilon\" = %g; trellis's GPT normalises with 1e-5", r->file,
            eps);
  long long inner;
  if (hf_int(r, r->hf, "n_inner", &inner, &have) && have && inner != 4LL * m->n_embd)
    problem(r->p, "'%s': \"n_inner\" = %lld; trellis's GPT MLP is 4 n_embd = %d wide", r->file,
            inner, 4 * m->n_embd);
  arch_bool(r, NULL, NULL, "tie_word_embeddings", true);
  arch_bool(r, NULL, NULL, "scale_attn_weights", true);
  arch_bool(r, NULL, NULL, "scale_attn_by_inverse_layer_idx", false);
}

/* The config's JSON, with model.kind taken from the Hugging Face
 * directory's model_type when the config names a directory and no kind:
 * then the fields of that kind it sets are read as that kind's (a Llama's
 * rope_theta, say), not refused as another kind's. NULL: read the file as
 * it is. */
static char* with_kind_of_dir(const char* path) {
  json_error_t err;
  json_t* root = json_load_file(path, 0, &err);
  json_t* model = root ? json_object_get(root, "model") : NULL;
  const char* dir = json_string_value(json_object_get(model, "init_from"));
  char* text = NULL;
  if (json_is_object(model) && !json_object_get(model, "kind") && tl_hf_is_dir(dir)) {
    char file[TL_PATH_MAX + 32];
    snprintf(file, sizeof file, "%s/config.json", dir);
    json_t* hf = json_load_file(file, 0, &err);
    const char* type = json_string_value(json_object_get(hf, "model_type"));
    const char* kind = !type                        ? NULL
                       : strcmp(type, "llama") == 0 ? "llama"
                       : strcmp(type, "gpt2") == 0  ? "gpt"
                                                    : NULL;
    if (kind) {
      json_object_set_new(model, "kind", json_string(kind));
      text = json_dumps(root, JSON_PRESERVE_ORDER);
    }
    json_decref(hf);
  }
  json_decref(root);
  return text;
}

tl_status tl_hf_config_load(const char* path, struct tl_config* cfg) {
  char* text = with_kind_of_dir(path);
  tl_status loaded = text ? tl_config_parse(text, path, cfg) : tl_config_load(path, cfg);
  free(text);
  TL_CHECK(loaded);
  const char* dir = cfg->model.init_from;
  if (!tl_hf_is_dir(dir)) return TL_OK;
  char file[TL_PATH_MAX + 32];
  snprintf(file, sizeof file, "%s/config.json", dir);
  json_error_t err;
  json_t* hf = json_load_file(file, JSON_REJECT_DUPLICATES, &err);
  if (!hf) {
    /* no config.json: nothing to read here; the directory is refused
     * with the other input files (tl_hf_model_check) */
    struct stat sb;
    if (stat(file, &sb) != 0) return TL_OK;
    return TL_ERRF(TL_ERR_CONFIG, "model.init_from: '%s' is not JSON: %s (line %d)", file, err.text,
                   err.line);
  }
  json_t* root = json_load_file(path, 0, &err); /* which model fields the config sets */
  struct problems p = {.len = 0, .n = 0};
  struct resolve r = {file, hf, root ? json_object_get(root, "model") : NULL, &cfg->model, &p};
  const char* type = json_string_value(json_object_get(hf, "model_type"));
  tl_model_kind kind = TL_MODEL_GPT;
  if (!json_is_object(hf)) {
    problem(&p, "'%s' is not a JSON object", file);
  } else if (!type) {
    problem(&p, "'%s' has no \"model_type\"", file);
  } else if (strcmp(type, "llama") == 0 || strcmp(type, "gpt2") == 0) {
    kind = strcmp(type, "llama") == 0 ? TL_MODEL_LLAMA : TL_MODEL_GPT;
    if (user_sets(&r, "kind") && cfg->model.kind != kind)
      problem(&p, "model.kind = \"%s\" but '%s' has \"model_type\" = \"%s\"",
              cfg->model.kind == TL_MODEL_GPT   ? "gpt"
              : cfg->model.kind == TL_MODEL_MLP ? "mlp"
                                                : "llama",
              file, type);
    else
      cfg->model.kind = kind;
    if (kind == TL_MODEL_LLAMA)
      resolve_llama(&r);
    else
      resolve_gpt2(&r);
  } else {
    problem(&p, "'%s' has \"model_type\" = \"%s\"; trellis reads \"llama\" and \"gpt2\" models",
            file, type);
  }
  json_decref(root);
  json_decref(hf);
  if (p.n)
    return TL_ERRF(TL_ERR_CONFIG, "model.init_from '%s': %d problem%s with its config.json:\n%s",
                   dir, p.n, p.n == 1 ? "" : "s", p.text);
  char source[TL_PATH_MAX + 64];
  snprintf(source, sizeof source, "%s (with %s)", path, file);
  return tl_config_validate(cfg, source);
}

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

/* ---- export ------------------------------------------------------------------ */

void tl_hf_export_free(tl_hf_export* x) {
  if (!x) return;
  for (int i = 0; x->files && i < x->n_files; i++) free(x->files[i].header);
  free(x->files);
  free(x->tensors);
  free(x->file_of);
  free(x->at);
  memset(x, 0, sizeof *x);
}

tl_status tl_hf_export_plan(const tl_model* m, int64_t max_file_bytes, tl_hf_export* x) {
  memset(x, 0, sizeof *x);
  int n = tl_hf_tensors(m, NULL);
  if (n < 0) return TL_ERRF(TL_ERR_CONFIG, "model.kind \"mlp\" has no Hugging Face form");
  x->n_tensors = n;
  x->tensors = calloc((size_t)n + 1, sizeof *x->tensors);
  x->file_of = calloc((size_t)n + 1, sizeof *x->file_of);
  x->at = calloc((size_t)n + 1, sizeof *x->at);
  x->files = calloc((size_t)n + 1, sizeof *x->files);
  struct tl_st_entry* e = calloc((size_t)n + 1, sizeof *e);
  tl_status st = x->tensors && x->file_of && x->at && x->files && e
                     ? TL_OK
                     : TL_ERRF(TL_ERR_NOMEM, "out of memory planning an export");
  if (st == TL_OK) tl_hf_tensors(m, x->tensors);
  /* 1. tensors into files in order, a file closed before it passes the limit */
  int64_t in_file = 0;
  for (int i = 0; st == TL_OK && i < n; i++) {
    const int64_t bytes = 4 * x->tensors[i].numel;
    if (x->n_files == 0 || (in_file > 0 && in_file + bytes > max_file_bytes))
      x->n_files++, in_file = 0;
    x->file_of[i] = x->n_files - 1;
    x->at[i] = in_file; /* data bytes; the header is added below */
    in_file += bytes;
  }
  /* 2. each file's header, then the tensors' places after it */
  for (int f = 0; st == TL_OK && f < x->n_files; f++) {
    struct tl_hf_file* file = &x->files[f];
    if (x->n_files == 1)
      snprintf(file->name, sizeof file->name, "model.safetensors");
    else
      snprintf(file->name, sizeof file->name, "model-%05d-of-%05d.safetensors", f + 1, x->n_files);
    int k = 0;
    for (int i = 0; i < n; i++) {
      if (x->file_of[i] != f) continue;
      const struct tl_hf_tensor* h = &x->tensors[i];
      e[k] = (struct tl_st_entry){
          .name = h->name, .n_dims = h->n_dims, .begin = x->at[i], .end = x->at[i] + 4 * h->numel};
      e[k].shape[0] = h->rows, e[k].shape[1] = h->cols;
      k++;
    }
    st = tl_st_header(e, k, &file->header, &file->header_len);
    file->size = file->header_len + (k ? e[k - 1].end : 0);
    for (int i = 0; st == TL_OK && i < n; i++)
      if (x->file_of[i] == f) x->at[i] += file->header_len;
  }
  free(e);
  if (st != TL_OK) tl_hf_export_free(x);
  return st;
}

static tl_status write_at(int fd, const void* src, size_t bytes, int64_t at) {
  const char* p = src;
  while (bytes > 0) {
    ssize_t w = pwrite(fd, p, bytes, (off_t)at);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return TL_ERRF(TL_ERR_IO, "cannot write a model file: %s", strerror(errno));
    p += w, at += w, bytes -= (size_t)w;
  }
  return TL_OK;
}

tl_status tl_hf_export_write(const tl_hf_export* x, const int* fds, int64_t full, int64_t n,
                             const float* src) {
  /* the tensors overlapping [full, full + n), by binary search on `full` */
  int lo = 0, hi = x->n_tensors;
  while (lo < hi) {
    int mid = (lo + hi) / 2;
    if (x->tensors[mid].full + x->tensors[mid].numel <= full)
      lo = mid + 1;
    else
      hi = mid;
  }
  float* col = NULL;
  tl_status st = TL_OK;
  for (int i = lo; i < x->n_tensors && x->tensors[i].full < full + n && st == TL_OK; i++) {
    const struct tl_hf_tensor* h = &x->tensors[i];
    const int64_t a = full > h->full ? full : h->full;
    const int64_t b = full + n < h->full + h->numel ? full + n : h->full + h->numel;
    if (a >= b) continue;
    const int fd = fds[x->file_of[i]];
    if (!h->transposed) {
      st = write_at(fd, src + (a - full), sizeof(float) * (size_t)(b - a),
                    x->at[i] + 4 * (a - h->full));
      continue;
    }
    /* trellis holds (R, K) = (cols, rows) of the stored (K, R): source
     * element j = r K + c goes to c R + r. Whole source rows [r0, r1)
     * become, for each c, one contiguous run of the stored row c. */
    const int64_t R = h->cols, K = h->rows;
    int64_t j = a - h->full;
    const int64_t end = b - h->full;
    while (j < end && st == TL_OK) {
      const int64_t r0 = j / K, c0 = j % K;
      if (c0 != 0 || end - j < K) { /* a partial row: element by element */
        const int64_t stop = end < (r0 + 1) * K ? end : (r0 + 1) * K;
        for (; j < stop && st == TL_OK; j++)
          st = write_at(fd, src + (h->full + j - full), sizeof(float),
                        x->at[i] + 4 * ((j % K) * R + r0));
        continue;
      }
      const int64_t r1 = r0 + (end - j) / K; /* whole rows [r0, r1) */
      float* grown = realloc(col, sizeof(float) * (size_t)(r1 - r0));
      if (!grown) {
        st = TL_ERRF(TL_ERR_NOMEM, "out of memory writing a model file");
        break;
      }
      col = grown;
      const float* base = src + (h->full + r0 * K - full);
      for (int64_t c = 0; c < K && st == TL_OK; c++) {
        for (int64_t r = r0; r < r1; r++) col[r - r0] = base[(r - r0) * K + c];
        st = write_at(fd, col, sizeof(float) * (size_t)(r1 - r0), x->at[i] + 4 * (c * R + r0));
      }
      j = r1 * K;
    }
  }
  free(col);
  return st;
}

/* A float as the shortest decimal that reads back to it (1e-05, not
 * 9.99999975e-06): what transformers reads and rounds to fp32 is the
 * float trellis computed with. */
static json_t* json_float(float f) {
  char buf[32];
  for (int prec = 1; prec <= 9; prec++) {
    snprintf(buf, sizeof buf, "%.*g", prec, (double)f);
    if ((float)strtod(buf, NULL) == f) break;
  }
  return json_real(strtod(buf, NULL));
}

static tl_status write_json(const char* path, json_t* root) {
  char* text = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(9));
  if (!text) return TL_ERRF(TL_ERR_NOMEM, "out of memory writing '%s'", path);
  size_t len = strlen(text);
  char* withnl = malloc(len + 2);
  if (!withnl) {
    free(text);
    return TL_ERRF(TL_ERR_NOMEM, "out of memory writing '%s'", path);
  }
  memcpy(withnl, text, len);
  withnl[len] = '\n';
  free(text);
  const void* data[1] = {withnl};
  size_t sizes[1] = {len + 1};
  tl_status st = tl_atomic_file_write_all(path, 1, data, sizes);
  free(withnl);
  return st;
}

tl_status tl_hf_write_config(const char* dir, const tl_model* m) {
  const struct tl_model_config* c = &m->cfg;
  json_t* o = json_object();
  if (c->kind == TL_MODEL_LLAMA) {
    json_object_set_new(o, "architectures", json_pack("[s]", "LlamaForCausalLM"));
    json_object_set_new(o, "model_type", json_string("llama"));
    json_object_set_new(o, "vocab_size", json_integer(m->vocab));
    json_object_set_new(o, "hidden_size", json_integer(c->n_embd));
    json_object_set_new(o, "intermediate_size", json_integer(tl_config_ffn_hidden(c)));
    json_object_set_new(o, "num_hidden_layers", json_integer(c->n_layers));
    json_object_set_new(o, "num_attention_heads", json_integer(c->n_heads));
    json_object_set_new(o, "num_key_value_heads", json_integer(tl_config_kv_heads(c)));
    json_object_set_new(o, "head_dim", json_integer(c->n_embd / c->n_heads));
    json_object_set_new(o, "max_position_embeddings", json_integer(c->max_seq_len));
    json_object_set_new(o, "rms_norm_eps", json_float(c->norm_eps));
    json_object_set_new(o, "rope_theta", json_float(c->rope_theta));
    if (c->rope_scaling.factor > 0)
      json_object_set_new(o, "rope_scaling",
                          json_pack("{s:s, s:o, s:o, s:o, s:i}", "rope_type", "llama3", "factor",
                                    json_float(c->rope_scaling.factor), "low_freq_factor",
                                    json_float(c->rope_scaling.low_freq_factor), "high_freq_factor",
                                    json_float(c->rope_scaling.high_freq_factor),
                                    "original_max_position_embeddings",
                                    c->rope_scaling.original_max_position_embeddings));
    else
      json_object_set_new(o, "rope_scaling", json_null());
    json_object_set_new(o, "tie_word_embeddings", json_boolean(c->tie_embeddings));
    json_object_set_new(o, "hidden_act", json_string("silu"));
    json_object_set_new(o, "attention_bias", json_false());
    json_object_set_new(o, "mlp_bias", json_false());
    json_object_set_new(o, "initializer_range", json_real(0.02));
  } else {
    json_object_set_new(o, "architectures", json_pack("[s]", "GPT2LMHeadModel"));
    json_object_set_new(o, "model_type", json_string("gpt2"));
    json_object_set_new(o, "vocab_size", json_integer(m->vocab));
    json_object_set_new(o, "n_positions", json_integer(c->max_seq_len));
    json_object_set_new(o, "n_embd", json_integer(c->n_embd));
    json_object_set_new(o, "n_layer", json_integer(c->n_layers));
    json_object_set_new(o, "n_head", json_integer(c->n_heads));
    json_object_set_new(o, "n_inner", json_null());
    json_object_set_new(o, "activation_function", json_string("gelu_new"));
    json_object_set_new(o, "layer_norm_epsilon", json_real(1e-5));
    json_object_set_new(o, "tie_word_embeddings", json_true());
    json_object_set_new(o, "scale_attn_weights", json_true());
    for (const char* const* k =
             (const char* const[]){"attn_pdrop", "embd_pdrop", "resid_pdrop", NULL};
         *k; k++)
      json_object_set_new(o, *k, json_real(0.0));
  }
  json_object_set_new(o, "torch_dtype", json_string("float32"));
  char path[TL_PATH_MAX + 32];
  snprintf(path, sizeof path, "%s/config.json", dir);
  tl_status st = write_json(path, o);
  json_decref(o);
  return st;
}

tl_status tl_hf_write_index(const char* dir, const tl_hf_export* x) {
  json_t* o = json_object();
  json_t* map = json_object();
  int64_t total = 0;
  for (int i = 0; i < x->n_tensors; i++) {
    total += 4 * x->tensors[i].numel;
    json_object_set_new(map, x->tensors[i].name, json_string(x->files[x->file_of[i]].name));
  }
  json_object_set_new(o, "metadata", json_pack("{s:I}", "total_size", (json_int_t)total));
  json_object_set_new(o, "weight_map", map);
  char path[TL_PATH_MAX + 48];
  snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
  tl_status st = write_json(path, o);
  json_decref(o);
  return st;
}
