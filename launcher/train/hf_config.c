/* hf_config.c — a Hugging Face model directory's config.json read into
 * trellis's model config (hf.h): the architecture's fields resolved, what
 * the user's config sets checked against them, the rest refused by name. */
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "launcher/train/hf.h"

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
